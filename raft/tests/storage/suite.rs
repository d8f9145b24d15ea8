//! openraft's storage conformance suite against our stores: a fresh database per case, on
//! RocksDB and on the simulated disk.

use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use raft::{GroupId, LogStore, SimDisk, StateMachineStore, Storage, TypeConfig};
use tempfile::TempDir;

/// A group id that is neither the first nor the last, so both neighbours' key ranges exist.
const GROUP: GroupId = 42;

/// A storage error for the suite, from any error of ours.
fn failed(error: &dyn std::fmt::Display) -> StorageError<TypeConfig> {
    StorageError::from_io_error(
        openraft::ErrorSubject::Store,
        openraft::ErrorVerb::Read,
        std::io::Error::other(error.to_string()),
    )
}

/// Builds stores on a fresh RocksDB database in a temporary directory.
struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RocksBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(|error| failed(&error))?;
        let storage = Storage::open(dir.path()).map_err(|error| failed(&error))?;
        let state_machine = storage.state_machine(GROUP).map_err(|error| failed(&error))?;
        Ok((dir, storage.log_store(GROUP), state_machine))
    }
}

/// Builds stores on a fresh simulated disk.
struct SimBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, SimDisk> for SimBuilder {
    async fn build(
        &self,
    ) -> Result<(SimDisk, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let disk = SimDisk::new();
        let storage = Storage::simulated(disk.clone());
        let state_machine = storage.state_machine(GROUP).map_err(|error| failed(&error))?;
        Ok((disk, storage.log_store(GROUP), state_machine))
    }
}

/// Reference: openraft `testing::log::Suite` (every `RaftLogStorage` and `RaftStateMachine`
/// contract it checks, including re-applying committed entries on start-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(RocksBuilder).await
}

/// The same suite on the simulated disk, on a single-threaded runtime as the simulator runs it:
/// the flush task must make progress whenever the suite awaits a flush.
#[tokio::test]
async fn openraft_storage_suite_passes_on_a_simulated_disk() -> Result<(), StorageError<TypeConfig>>
{
    Suite::test_all(SimBuilder).await
}
