//! openraft's storage conformance suite against our stores: a fresh database per case.

use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use raft::{GroupId, LogStore, StateMachineStore, Storage, TypeConfig};
use tempfile::TempDir;

/// A group id that is neither the first nor the last, so both neighbours' key ranges exist.
const GROUP: GroupId = 42;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let failed = |error: &dyn std::fmt::Display| {
            StorageError::from_io_error(
                openraft::ErrorSubject::Store,
                openraft::ErrorVerb::Read,
                std::io::Error::other(error.to_string()),
            )
        };
        let dir = tempfile::tempdir().map_err(|error| failed(&error))?;
        let storage = Storage::open(dir.path()).map_err(|error| failed(&error))?;
        let state_machine = storage.state_machine(GROUP).map_err(|error| failed(&error))?;
        Ok((dir, storage.log_store(GROUP), state_machine))
    }
}

/// Reference: openraft `testing::log::Suite` (every `RaftLogStorage` and `RaftStateMachine`
/// contract it checks, including re-applying committed entries on start-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder).await
}
