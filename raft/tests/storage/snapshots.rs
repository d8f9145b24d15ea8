//! Snapshots: garbage is refused without changing anything, a builder encodes the state it was
//! made from, and an older build never replaces a newer persisted snapshot; on RocksDB and on the
//! simulated disk alike.

use std::io;

use openraft::storage::RaftStateMachine;
use openraft::{RaftSnapshotBuilder, SnapshotMeta};

use crate::common::{booking_log, log_id, on_each_backend, slice, to_apply};

#[tokio::test]
async fn garbage_or_mismatched_snapshots_are_refused_and_change_nothing() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let mut leader = storage.state_machine(1)?;
        let log = booking_log(1, 10);
        leader.apply(to_apply(log.clone())).await?;
        let good = leader.get_snapshot_builder().await.build_snapshot().await?;

        let mut follower = storage.state_machine(2)?;
        follower.apply(to_apply(slice(&log, 0..=4))).await?;
        let before = follower.reader().read(|group| group.digest())?;
        let applied_before = follower.applied_state().await?;

        let garbage = [
            Vec::new(),
            b"not a snapshot".to_vec(),
            good.snapshot[..good.snapshot.len() / 2].to_vec(),
        ];
        for bytes in garbage {
            let refused = follower.install_snapshot(&good.meta, bytes).await;
            assert!(refused.is_err(), "garbage must be an error");
        }
        // Good bytes under metadata for another position.
        let wrong_meta = SnapshotMeta {
            last_log_id: Some(log_id(1, 7)),
            last_membership: good.meta.last_membership.clone(),
        };
        assert!(follower.install_snapshot(&wrong_meta, good.snapshot.clone()).await.is_err());

        assert_eq!(follower.reader().read(|group| group.digest())?, before);
        assert_eq!(follower.applied_state().await?, applied_before);
        assert!(follower.get_current_snapshot().await?.is_none(), "nothing was persisted");

        follower.install_snapshot(&good.meta, good.snapshot.clone()).await?;
        assert_eq!(
            follower.reader().read(|group| group.digest())?,
            leader.reader().read(|group| group.digest())?
        );
        assert_eq!(follower.applied_state().await?.0, Some(log_id(1, 10)));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_builder_encodes_the_state_it_was_made_from() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let mut store = storage.state_machine(1)?;
        let log = booking_log(1, 12);
        store.apply(to_apply(slice(&log, 0..=6))).await?;
        let at_six = store.reader().read(|group| group.digest())?;
        let mut builder = store.get_snapshot_builder().await;
        store.apply(to_apply(slice(&log, 7..=12))).await?;

        let snapshot = builder.build_snapshot().await?;
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 6)));
        let restored = statemachine::Group::decode_snapshot(&snapshot.snapshot)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        assert_eq!(restored.digest(), at_six);
        assert_eq!(store.reader().last_applied()?, Some(log_id(1, 12)), "the store moved on");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_older_build_does_not_replace_a_newer_installed_snapshot() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let log = booking_log(1, 12);
        let mut leader = storage.state_machine(1)?;
        leader.apply(to_apply(log.clone())).await?;
        let newer = leader.get_snapshot_builder().await.build_snapshot().await?;

        // A follower starts building at index 5, then installs the leader's snapshot at 12 before
        // its build finishes.
        let mut follower = storage.state_machine(2)?;
        follower.apply(to_apply(slice(&log, 0..=5))).await?;
        let mut late_builder = follower.get_snapshot_builder().await;
        follower.install_snapshot(&newer.meta, newer.snapshot.clone()).await?;
        let older = late_builder.build_snapshot().await?;
        assert_eq!(older.meta.last_log_id, Some(log_id(1, 5)));

        let current = follower.get_current_snapshot().await?.expect("a snapshot is persisted");
        assert_eq!(current.meta, newer.meta);
        drop((follower, leader));
        let reopened = storage.state_machine(2)?;
        assert_eq!(reopened.reader().last_applied()?, Some(log_id(1, 12)));
        Ok(())
    })
    .await
}
