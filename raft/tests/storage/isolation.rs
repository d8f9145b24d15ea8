//! Many groups share one database: each group sees only its own log, vote, committed log id,
//! purges, truncations and snapshot (shared/DESIGN.md, "Storage"), on RocksDB and on the
//! simulated disk alike.

use std::io;

use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use raft::GroupId;

use crate::common::{append, blank, booking_log, indexes, log_id, on_each_backend, vote};

/// The lowest and highest group ids bound the key ranges of the shared column families.
const GROUPS: [GroupId; 3] = [0, 1, GroupId::MAX];

#[tokio::test]
async fn groups_do_not_see_each_others_logs_votes_or_committed() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let mut stores: Vec<_> = GROUPS.iter().map(|&group| storage.log_store(group)).collect();

        // Group n gets 5 * (n + 1) entries in term n + 1, its own vote and its own committed id.
        for (n, store) in (0_u64..).zip(stores.iter_mut()) {
            let term = n + 1;
            let entries: Vec<_> = (1..=5 * term).map(|index| blank(term, index)).collect();
            append(store, entries).await?;
            store.save_vote(&vote(term)).await?;
            store.save_committed(Some(log_id(term, term))).await?;
        }

        for (n, store) in (0_u64..).zip(stores.iter_mut()) {
            let term = n + 1;
            let entries = store.try_get_log_entries(0..).await?;
            assert_eq!(entries.len() as u64, 5 * term, "group {}", store.group());
            assert!(entries.iter().all(|entry| entry.log_id() == log_id(term, entry.index())));
            let state = store.get_log_state().await?;
            assert_eq!(state.last_log_id, Some(log_id(term, 5 * term)));
            assert_eq!(state.last_purged_log_id, None);
            assert_eq!(store.read_vote().await?, Some(vote(term)));
            assert_eq!(store.read_committed().await?, Some(log_id(term, term)));
        }

        // A group that never wrote sees nothing, even between two groups that did.
        let mut empty = storage.log_store(2);
        assert_eq!(indexes(&mut empty).await?, Vec::<u64>::new());
        assert_eq!(empty.read_vote().await?, None);
        assert_eq!(empty.read_committed().await?, None);
        assert_eq!(empty.get_log_state().await?.last_log_id, None);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_purge_or_truncation_touches_only_its_group() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let mut stores: Vec<_> = GROUPS.iter().map(|&group| storage.log_store(group)).collect();
        for store in &mut stores {
            append(store, (1..=10).map(|index| blank(1, index)).collect()).await?;
        }
        let all: Vec<u64> = (1..=10).collect();

        // Purging the middle group leaves its neighbours whole.
        stores[1].purge(log_id(1, 6)).await?;
        assert_eq!(indexes(&mut stores[1]).await?, (7..=10).collect::<Vec<_>>());
        assert_eq!(stores[1].get_log_state().await?.last_purged_log_id, Some(log_id(1, 6)));
        assert_eq!(indexes(&mut stores[0]).await?, all);
        assert_eq!(indexes(&mut stores[2]).await?, all);
        assert_eq!(stores[0].get_log_state().await?.last_purged_log_id, None);
        assert_eq!(stores[2].get_log_state().await?.last_purged_log_id, None);

        // Truncating the first group, partly then wholly, leaves the second one whole.
        stores[0].truncate_after(Some(log_id(1, 3))).await?;
        assert_eq!(indexes(&mut stores[0]).await?, vec![1, 2, 3]);
        stores[0].truncate_after(None).await?;
        assert_eq!(indexes(&mut stores[0]).await?, Vec::<u64>::new());
        assert_eq!(indexes(&mut stores[1]).await?, (7..=10).collect::<Vec<_>>());
        assert_eq!(indexes(&mut stores[2]).await?, all);

        // Purging everything of the last group leaves it empty and the middle group as it was.
        stores[2].purge(log_id(1, 10)).await?;
        let state = stores[2].get_log_state().await?;
        assert_eq!(state.last_log_id, Some(log_id(1, 10)), "falls back to the last purged");
        assert_eq!(indexes(&mut stores[2]).await?, Vec::<u64>::new());
        assert_eq!(indexes(&mut stores[1]).await?, (7..=10).collect::<Vec<_>>());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn snapshots_of_two_groups_are_separate() -> io::Result<()> {
    on_each_backend(|storage| async move {
        let mut first = storage.state_machine(1)?;
        let mut second = storage.state_machine(2)?;

        let log = booking_log(1, 12);
        first
            .apply(futures_util::stream::iter(log.into_iter().map(|entry| Ok((entry, None)))))
            .await?;
        let built = first.get_snapshot_builder().await.build_snapshot().await?;
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 12)));
        assert!(second.get_current_snapshot().await?.is_none(), "no snapshot leaks across groups");

        // Installing the first group's snapshot into the second replaces only the second.
        second.install_snapshot(&built.meta, built.snapshot.clone()).await?;
        let first_digest = first.reader().read(|group| group.digest())?;
        assert_eq!(second.reader().read(|group| group.digest())?, first_digest);

        // A later, smaller snapshot of the second group does not change the first group's.
        let mut third = storage.state_machine(3)?;
        third.apply(futures_util::stream::iter([Ok((blank(1, 1), None))])).await?;
        let small = third.get_snapshot_builder().await.build_snapshot().await?;
        second.install_snapshot(&small.meta, small.snapshot).await?;
        let current = first.get_current_snapshot().await?.expect("first group keeps its snapshot");
        assert_eq!(current.meta, built.meta);
        assert_eq!(current.snapshot, built.snapshot);
        let current = second.get_current_snapshot().await?.expect("second group has one");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 1)));
        Ok(())
    })
    .await
}
