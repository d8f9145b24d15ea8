//! Group commit: one WAL sync completes the appends of many groups (shared/DESIGN.md,
//! "Storage": one flusher can complete many groups' appends with one sync).

use std::io;

use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use raft::{Storage, TypeConfig};

use crate::common::{append, blank, indexes};

const GROUPS: u64 = 8;
const APPENDS_PER_GROUP: u64 = 100;

/// Every group pipelines its appends, as an openraft follower does: it does not wait for one
/// flush before the next append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_appends_of_many_groups_share_wal_syncs() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = Storage::open(dir.path())?;
    let syncs_before = storage.wal_sync_count();

    let mut tasks = Vec::new();
    for group in 0..GROUPS {
        let mut store = storage.log_store(group);
        tasks.push(tokio::spawn(async move {
            let mut flushed = Vec::new();
            for index in 1..=APPENDS_PER_GROUP {
                let (sender, receiver) = TypeConfig::oneshot();
                store.append([blank(1, index)], IOFlushed::signal(sender)).await?;
                flushed.push(receiver);
            }
            for receiver in flushed {
                receiver.await.map_err(io::Error::other)??;
            }
            io::Result::Ok(store)
        }));
    }
    for task in tasks {
        let mut store = task.await.map_err(io::Error::other)??;
        assert_eq!(indexes(&mut store).await?, (1..=APPENDS_PER_GROUP).collect::<Vec<_>>());
    }

    let appends = GROUPS * APPENDS_PER_GROUP;
    let syncs = storage.wal_sync_count() - syncs_before;
    println!("{appends} pipelined appends from {GROUPS} groups completed by {syncs} WAL syncs");
    assert!(syncs >= 1);
    assert!(syncs < appends, "{syncs} syncs for {appends} appends");
    Ok(())
}

/// Every group waits for each flush before its next append (the worst case for batching): the
/// groups still share syncs with each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_appends_of_many_groups_share_wal_syncs() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = Storage::open(dir.path())?;
    let syncs_before = storage.wal_sync_count();
    const WAITING_APPENDS_PER_GROUP: u64 = 25;

    let mut tasks = Vec::new();
    for group in 0..GROUPS {
        let mut store = storage.log_store(group);
        tasks.push(tokio::spawn(async move {
            for index in 1..=WAITING_APPENDS_PER_GROUP {
                append(&mut store, vec![blank(1, index)]).await?;
            }
            io::Result::Ok(())
        }));
    }
    for task in tasks {
        task.await.map_err(io::Error::other)??;
    }

    let appends = GROUPS * WAITING_APPENDS_PER_GROUP;
    let syncs = storage.wal_sync_count() - syncs_before;
    println!("{appends} waiting appends from {GROUPS} groups completed by {syncs} WAL syncs");
    assert!(syncs < appends, "{syncs} syncs for {appends} appends");
    assert_eq!(storage.flush_completed_count(), appends);
    Ok(())
}
