//! One Raft group hosted by this node: its `Raft`, its proposer, its reader, and the
//! leader-only workers that run while this node leads it.
//!
//! Owns the node-side contract of a group: writes go through the proposer with a deadline (a
//! write past it has an unknown outcome, never a guessed one), authoritative reads go through
//! ReadIndex with a deadline, and leader hints name the leader's advertised address from the
//! group's membership. Never judges a command (the state machine does).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::raft::linearizable_read::Linearizer;
use openraft::{ReadPolicy, ServerState, WatchChangeHandle};
use raft::{Clock, GroupId, GroupReader, GrpcTransport, NodeId, ProposeError, Proposer, Raft};
use statemachine::{Answer, ClientCommand, Command, Group, Rejection};
use tokio::task::JoinHandle;

use crate::disk::DiskGuard;
use crate::error::{ApiError, LeaderHint};
use crate::workers::{self, WorkerSettings};

/// How long a write may wait for commit and apply before its outcome is reported unknown.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a linearizable read may wait for the leader to confirm its leadership.
pub const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// A group on this node.
pub struct HostedGroup {
    /// The group's id.
    pub id: GroupId,
    /// Its Raft.
    pub raft: Raft,
    /// Its write path on this node.
    pub proposer: Arc<Proposer>,
    /// Its applied state on this node.
    pub reader: GroupReader,
    /// Keeps the leadership watch (and so the leader-only workers) alive.
    _leadership: WatchChangeHandle<raft::TypeConfig>,
    /// The workers running while this node leads, aborted when it stops leading.
    workers: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// The peer network, for asking the leader its read index.
    transport: GrpcTransport,
    /// Refuses client writes while the node's disk is nearly full (shared by every group).
    disk: Arc<DiskGuard>,
}

impl HostedGroup {
    /// Wraps a running group and starts watching its leadership: when this node becomes the
    /// committed leader, the leader-only workers start; when it stops being the leader, they
    /// are aborted (all they do is propose, and a stale leader's proposals are fenced anyway).
    /// The proposer stamps entries with `clock`, and the workers read it to find what is due.
    pub fn new(
        id: GroupId,
        raft: Raft,
        reader: GroupReader,
        workers: WorkerSettings,
        clock: Clock,
        transport: GrpcTransport,
        disk: Arc<DiskGuard>,
    ) -> HostedGroup {
        let settings = workers;
        let proposer =
            Arc::new(Proposer::with_clock(raft.clone(), raft::ProposerConfig::default(), clock));
        let workers: Arc<Mutex<Option<JoinHandle<()>>>> = Arc::new(Mutex::new(None));
        let on_start = {
            let (workers, proposer, reader) = (workers.clone(), proposer.clone(), reader.clone());
            let raft = raft.clone();
            move |leader_id| {
                tracing::info!(group = id, ?leader_id, "leading: starting leader-only workers");
                let run = workers::run(
                    id,
                    raft.clone(),
                    proposer.clone(),
                    reader.clone(),
                    settings.clone(),
                );
                let task = tokio::spawn(run);
                if let Some(previous) = lock(&workers).replace(task) {
                    previous.abort();
                }
                std::future::ready(())
            }
        };
        let on_stop = {
            let workers = workers.clone();
            move |leader_id| {
                tracing::info!(group = id, ?leader_id, "not leading: stopping leader-only workers");
                if let Some(task) = lock(&workers).take() {
                    task.abort();
                }
                std::future::ready(())
            }
        };
        let leadership = raft.on_leader_change(on_start, on_stop);
        HostedGroup {
            id,
            raft,
            proposer,
            reader,
            _leadership: leadership,
            workers,
            transport,
            disk,
        }
    }

    /// Whether the leader-only workers run on this node now.
    pub fn workers_running(&self) -> bool {
        lock(&self.workers).as_ref().is_some_and(|task| !task.is_finished())
    }

    /// The leader this node knows of, with its advertised address.
    pub fn leader_hint(&self) -> Option<LeaderHint> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let id = metrics.current_leader?;
        let address = metrics
            .membership_config
            .membership()
            .get_node(&id)
            .map(|node| raft::tls::client_address(&node.addr).to_owned());
        Some(LeaderHint { id, address })
    }

    /// The error for a call this node cannot serve because it does not lead the group.
    pub fn not_leader(&self) -> ApiError {
        let leader = self.leader_hint().filter(|hint| hint.id != *self.raft.node_id());
        ApiError::NotLeader { group: self.id, leader }
    }

    /// Whether this node is the group's leader now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// Proposes `command` and returns its answer (its outcome, and the view of what it wrote)
    /// once committed and applied here.
    ///
    /// # Errors
    ///
    /// `NotLeader` when the command was not appended (retry on the leader); `Unavailable` when
    /// its outcome is unknown (retry with the same idempotency key); `DiskFull` while the node's
    /// disk is under its reserve (nothing proposed).
    pub async fn propose(&self, command: Command) -> Result<Answer, ApiError> {
        // Only a leader refuses: a follower's answer is where the leader is.
        if self.is_leader() {
            self.disk.check_write()?;
        }
        match tokio::time::timeout(WRITE_TIMEOUT, self.proposer.propose(command)).await {
            Err(_elapsed) => Err(ApiError::Unavailable(format!(
                "group {}: no commit within {WRITE_TIMEOUT:?}",
                self.id
            ))),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ProposeError::NotLeader { .. })) => Err(self.not_leader()),
            Ok(Err(error @ (ProposeError::Unavailable(_) | ProposeError::Closed))) => {
                Err(ApiError::Unavailable(format!("group {}: {error}", self.id)))
            }
            Ok(Err(error @ ProposeError::Unencodable(_))) => {
                Err(ApiError::Internal(error.to_string()))
            }
        }
    }

    /// The `seat_unavailable` rejection a hold would get, answered without a log entry, on the
    /// group's leader (the caller checked; on a node that lost the lead since, the lease read
    /// is refused as `NotLeader`), as a linearizable read
    /// (`statemachine::Group::reject_without_log`; shared/DESIGN.md, "Throughput"). `None`:
    /// propose it. See [`HostedGroup::reject_many_without_log`] for how each hold is judged once.
    ///
    /// # Errors
    ///
    /// As [`HostedGroup::read_linearizable`].
    pub async fn reject_without_log(
        &self,
        command: &ClientCommand,
    ) -> Result<Option<Rejection>, ApiError> {
        Ok(self.reject_many_without_log(std::slice::from_ref(command)).await?.pop().flatten())
    }

    /// [`HostedGroup::reject_without_log`] for many commands, with one linearizable read for all
    /// of them.
    ///
    /// Each hold is judged once, on this replica's applied state: most holds that will succeed
    /// stop there and are proposed at no extra cost. If some look rejected, this node takes its
    /// read index on its lease (ReadIndex when the lease has lapsed); when the state judged had
    /// already applied up to that index, it held every write acknowledged before the call, so
    /// the judgements stand as a linearizable read. Only when the read index is ahead of it
    /// (entries committed but not applied yet) are the suspects judged again, once this replica
    /// has applied up to the index.
    ///
    /// # Errors
    ///
    /// As [`HostedGroup::read_linearizable`].
    pub async fn reject_many_without_log(
        &self,
        commands: &[ClientCommand],
    ) -> Result<Vec<Option<Rejection>>, ApiError> {
        let clock = self.proposer.clock();
        let now = clock.now_ms();
        let (judged, judged_at) = self.read_local(|state| {
            let judged = commands
                .iter()
                .map(|command| state.reject_without_log(command, now))
                .collect::<Vec<_>>();
            (judged, state.applied_index())
        })?;
        if judged.iter().all(Option::is_none) {
            return Ok(judged);
        }
        let linearizer = self.leased_linearizer().await?;
        if judged_at >= linearizer.read_log_id().index() {
            return Ok(judged);
        }
        self.await_read_index(linearizer).await?;
        Ok(self.reader.read(|state| {
            // The clock is read again once the read was confirmed: an entry proposed now would
            // be stamped no earlier.
            let now = clock.now_ms();
            commands
                .iter()
                .zip(&judged)
                .map(|(command, suspect)| {
                    suspect.as_ref().and_then(|_| state.reject_without_log(command, now))
                })
                .collect()
        })?)
    }

    /// This node's read index, on its lease when it holds one: a quorum acknowledged this leader
    /// within the lease, so no other leader can have been elected since (openraft's
    /// `LeaseRead`, which assumes the nodes' clocks run at about the same rate; it reads the
    /// monotonic clock, which clock skew does not move). Without a valid lease, a ReadIndex
    /// round within `READ_TIMEOUT`. For the cheap rejection of conflicting holds, which must not
    /// cost a quorum round each under load.
    async fn leased_linearizer(&self) -> Result<Linearizer<raft::TypeConfig>, ApiError> {
        match self.raft.get_read_linearizer(ReadPolicy::LeaseRead).await {
            Ok(linearizer) => Ok(linearizer),
            Err(_lapsed) => self.confirmed_linearizer().await,
        }
    }

    /// This node's read index, confirmed by a quorum (ReadIndex) within `READ_TIMEOUT`.
    async fn confirmed_linearizer(&self) -> Result<Linearizer<raft::TypeConfig>, ApiError> {
        let confirmed = tokio::time::timeout(
            READ_TIMEOUT,
            self.raft.get_read_linearizer(ReadPolicy::ReadIndex),
        )
        .await;
        match confirmed {
            Err(_elapsed) => Err(ApiError::Unavailable(format!(
                "group {}: leadership not confirmed within {READ_TIMEOUT:?}",
                self.id
            ))),
            Ok(Ok(linearizer)) => Ok(linearizer),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_)))) => {
                Err(self.not_leader())
            }
            Ok(Err(error)) => Err(ApiError::Unavailable(format!("group {}: {error}", self.id))),
        }
    }

    /// Waits until this replica has applied up to `linearizer`'s read index, within
    /// `READ_TIMEOUT`.
    async fn await_read_index(
        &self,
        linearizer: Linearizer<raft::TypeConfig>,
    ) -> Result<(), ApiError> {
        match linearizer.try_await_ready(&self.raft, Some(READ_TIMEOUT)).await {
            Ok(Ok(_state)) => Ok(()),
            Ok(Err(_timeout)) => Err(ApiError::Unavailable(format!(
                "group {}: not applied up to the read index within {READ_TIMEOUT:?}",
                self.id
            ))),
            Err(fatal) => Err(ApiError::Unavailable(format!("group {}: {fatal}", self.id))),
        }
    }

    /// Reads the group's state linearizably: this node confirms it still leads with a quorum
    /// (ReadIndex) and waits until it applied up to the read index (each within `READ_TIMEOUT`),
    /// then runs `read`.
    ///
    /// # Errors
    ///
    /// `NotLeader` on a node that does not lead; `Unavailable` when leadership cannot be
    /// confirmed, or the read index is not applied, in time.
    pub async fn read_linearizable<T>(
        &self,
        read: impl FnOnce(&Group) -> T,
    ) -> Result<T, ApiError> {
        let linearizer = self.confirmed_linearizer().await?;
        self.await_read_index(linearizer).await?;
        Ok(self.reader.read(read)?)
    }

    /// Waits until this replica has applied every write of the group acknowledged before the
    /// call: the leader's read index (from its lease, or a quorum when that lapsed), asked of
    /// the leader over the peer network when this node follows, then this replica's apply up
    /// to it. All within `deadline`: a replica that cannot confirm in time is behind (cut off
    /// from its leader, or slow to apply) and must not serve reads as fresh.
    ///
    /// # Errors
    ///
    /// `Unavailable` (retry shortly, on this node or another) when no leader is known, the
    /// leader cannot be asked, or this replica does not apply up to its index within
    /// `deadline`.
    pub async fn confirm_fresh(&self, deadline: Duration) -> Result<(), ApiError> {
        let started = tokio::time::Instant::now();
        let unavailable = |why: String| {
            ApiError::Unavailable(format!("group {}: replica not confirmed fresh: {why}", self.id))
        };
        let leader = self.raft.metrics().borrow_watched().current_leader;
        let index = match leader {
            None => return Err(unavailable("no leader known".into())),
            Some(leader) if leader == *self.raft.node_id() => {
                let read = match self.raft.get_read_linearizer(ReadPolicy::LeaseRead).await {
                    Ok(linearizer) => Ok(linearizer),
                    Err(_lapsed) => {
                        let confirm = self.raft.get_read_linearizer(ReadPolicy::ReadIndex);
                        tokio::time::timeout(deadline, confirm)
                            .await
                            .map_err(|_elapsed| unavailable("leadership not confirmed".into()))?
                    }
                };
                read.map_err(|error| unavailable(error.to_string()))?.read_log_id().index()
            }
            Some(leader) => self
                .transport
                .read_index(leader, self.id, deadline)
                .await
                .map_err(|error| unavailable(error.to_string()))?,
        };
        let left = deadline.saturating_sub(started.elapsed());
        self.raft
            .wait(Some(left))
            .applied_index_at_least(Some(index), "a fresh read")
            .await
            .map_err(|error| unavailable(format!("not applied up to {index}: {error}")))?;
        Ok(())
    }

    /// Reads this replica's applied state, however stale.
    ///
    /// # Errors
    ///
    /// `Internal` if the state machine failed.
    pub fn read_local<T>(&self, read: impl FnOnce(&Group) -> T) -> Result<T, ApiError> {
        Ok(self.reader.read(read)?)
    }

    /// Maps a failed membership change or leader-only Raft call.
    pub fn raft_error(
        &self,
        error: RaftError<raft::TypeConfig, ClientWriteError<raft::TypeConfig>>,
    ) -> ApiError {
        match error {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => self.not_leader(),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => {
                ApiError::MembershipRefused(error.to_string())
            }
            RaftError::APIError(error) => ApiError::Unavailable(error.to_string()),
            RaftError::Fatal(fatal) => ApiError::Internal(format!("group {}: {fatal}", self.id)),
        }
    }

    /// Stops the group's workers and its Raft.
    pub async fn shutdown(&self) {
        if let Some(task) = lock(&self.workers).take() {
            task.abort();
        }
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(group = self.id, %error, "group did not shut down cleanly");
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        *self.raft.node_id()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded value is a task handle, replaced whole; a panic cannot leave it half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
