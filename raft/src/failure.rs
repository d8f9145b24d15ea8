//! Fail-stop storage: the first failed write or sync of a node's storage ends its use.
//!
//! Owns the record of that failure and the rule that follows it. After a failed sync the
//! operating system may already have dropped the writes it could not make durable, and a later
//! sync that succeeds says nothing about them (PostgreSQL's "fsyncgate": Linux marks the dirty
//! pages clean and reports the error once). A node that carried on would acknowledge writes
//! that the next restart may not find. So the engines refuse every write and every durability
//! wait after the first failure, the groups on them go fatal, and the process stops
//! (`bookingd` exits; the simulator stops the node) until an operator, or a supervisor, restarts
//! it on a disk that works again. Never retries and never decides how to stop: the node does.

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::StoreError;

/// The first failure of one opened storage, shared by its engine, its flush thread or task, and
/// the node that waits for it. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    first: Arc<watch::Sender<Option<String>>>,
}

impl Failure {
    /// No failure yet.
    pub(crate) fn new() -> Failure {
        Failure { first: Arc::new(watch::Sender::new(None)) }
    }

    /// Records `what` failed, unless something failed before (the first cause is kept), and
    /// logs it once.
    pub(crate) fn record(&self, what: impl std::fmt::Display) {
        self.first.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            let reason = what.to_string();
            tracing::error!(%reason, "storage failed: refusing every write and sync from now on");
            *first = Some(reason);
            true
        });
    }

    /// The first failure, if any.
    pub(crate) fn get(&self) -> Option<String> {
        self.first.borrow().clone()
    }

    /// `Err(Failed)` once something failed: what every write and durability wait checks first.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        match &*self.first.borrow() {
            None => Ok(()),
            Some(reason) => Err(StoreError::Failed(reason.clone())),
        }
    }

    /// Waits for the first failure and returns it.
    pub(crate) async fn wait(&self) -> String {
        let mut receiver = self.first.subscribe();
        match receiver.wait_for(Option::is_some).await {
            Ok(first) => first.clone().unwrap_or_default(),
            // The sender lives in `self`: it cannot have closed.
            Err(_) => std::future::pending().await,
        }
    }
}
