//! The write path of one group on this node: every client command of the group is proposed
//! through its [`Proposer`].
//!
//! Owns coalescing concurrent commands into one log entry (bounded by count and encoded bytes),
//! the leader's stamp of log time on that entry, fencing each entry by the committed leader id
//! it was proposed under (openraft's conditional write), keeping a bounded number of writes in
//! flight, and handing each caller the outcome of its own command. Never judges a command (apply
//! in `statemachine` does), never proposes on a node that is not the leader, and never retries a
//! write: a failed write's outcome may be unknown, and only the caller, holding the idempotency
//! key, may propose it again (shared/DESIGN.md, "Ordering, acknowledgement and fencing",
//! "Throughput").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use statemachine::limits::BATCH_COMMANDS_MAX;
use statemachine::{Answer, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::Raft;
use crate::clock::Clock;
use crate::types::{NodeId, Proposal};

/// How a [`Proposer`] batches and pipelines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProposerConfig {
    /// The most commands in one entry; clamped to `1..=statemachine::limits::BATCH_COMMANDS_MAX`.
    pub batch_commands_max: usize,
    /// The most postcard-encoded command bytes in one entry. A single command larger than this
    /// still gets an entry of its own.
    pub batch_bytes_max: usize,
    /// The most entries proposed and not yet applied at once (at least 1). While they are in
    /// flight, commands queue up and are coalesced into the next entries.
    pub writes_in_flight_max: usize,
    /// The most commands queued and not yet taken into an entry (at least 1); `propose` waits
    /// for room beyond it.
    pub queue_commands_max: usize,
}

impl Default for ProposerConfig {
    fn default() -> ProposerConfig {
        ProposerConfig {
            batch_commands_max: 1_024,
            // Half of one replication message, so that an entry always fits one.
            batch_bytes_max: crate::REPLICATION_BATCH_BYTES_MAX / 2,
            writes_in_flight_max: 8,
            queue_commands_max: BATCH_COMMANDS_MAX,
        }
    }
}

impl ProposerConfig {
    /// The config with every bound within its documented range.
    fn clamped(self) -> ProposerConfig {
        ProposerConfig {
            batch_commands_max: self.batch_commands_max.clamp(1, BATCH_COMMANDS_MAX),
            batch_bytes_max: self.batch_bytes_max.max(1),
            writes_in_flight_max: self.writes_in_flight_max.max(1),
            queue_commands_max: self.queue_commands_max.max(1),
        }
    }
}

/// Why a proposed command has no outcome.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node is not the group's leader, or leadership changed before the entry was appended
    /// (the write was fenced). The command was not appended; propose it on `leader`, if known.
    #[error("not the leader of the group (leader: {leader:?})")]
    NotLeader {
        /// The leader this node knows of, if any.
        leader: Option<NodeId>,
    },
    /// The write failed and its outcome is unknown: the entry may have been committed, or may
    /// still be. The caller may propose the command again with the same idempotency key.
    #[error("the write's outcome is unknown: {0}")]
    Unavailable(String),
    /// The command cannot be encoded into a log entry (a bug: commands always encode).
    #[error("the command does not encode: {0}")]
    Unencodable(String),
    /// The proposer has stopped. If it stopped after taking the command, the outcome is unknown,
    /// as for [`ProposeError::Unavailable`].
    #[error("the proposer has stopped")]
    Closed,
}

/// One queued command and where its outcome goes.
struct Request {
    command: Command,
    encoded_bytes: usize,
    reply: oneshot::Sender<Result<Answer, ProposeError>>,
}

/// Proposes the client commands of one group on this node, coalescing concurrent ones into one
/// entry. Share it (for instance in an `Arc`) between the request handlers; dropping it stops
/// its task once the queued commands have been proposed and the writes in flight answered.
pub struct Proposer {
    queue: mpsc::Sender<Request>,
    task: JoinHandle<()>,
    clock: Clock,
    batches: Arc<BatchCounts>,
}

/// How many entries a proposer proposed and how many commands they carried, since it started:
/// their ratio is the mean batch size.
#[derive(Debug, Default)]
pub struct BatchCounts {
    entries: AtomicU64,
    commands: AtomicU64,
}

impl BatchCounts {
    /// Entries proposed (each one batch).
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Commands those entries carried.
    pub fn commands(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    fn count(&self, commands: usize) {
        self.entries.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands as u64, Ordering::Relaxed);
    }
}

impl Proposer {
    /// Starts the proposer of `raft`'s group: one tokio task, so it must be called inside a
    /// tokio runtime.
    pub fn new(raft: Raft, config: ProposerConfig) -> Proposer {
        Proposer::with_clock(raft, config, Clock::system())
    }

    /// As [`Proposer::new`], stamping entries with `clock` instead of the machine's clock (the
    /// simulator's seam).
    pub fn with_clock(raft: Raft, config: ProposerConfig, clock: Clock) -> Proposer {
        let config = config.clamped();
        let (queue, queued) = mpsc::channel(config.queue_commands_max);
        let batches = Arc::new(BatchCounts::default());
        let task = tokio::spawn(run(raft, config, clock.clone(), queued, batches.clone()));
        Proposer { queue, task, clock, batches }
    }

    /// The entries proposed and the commands they carried so far (the node's metrics).
    pub fn batches(&self) -> &BatchCounts {
        &self.batches
    }

    /// The clock the proposer stamps entries with (the leader-only workers read it too).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Proposes `command` on this node, if it leads the group, and returns its answer (its
    /// outcome, and the view of what it wrote) once the entry carrying it was committed and
    /// applied here. Commands are proposed in the order
    /// they were queued. Dropping the returned future after the command was queued does not
    /// withdraw it: it may still be applied.
    pub async fn propose(&self, command: Command) -> Result<Answer, ProposeError> {
        let encoded_bytes = postcard::experimental::serialized_size(&command)
            .map_err(|error| ProposeError::Unencodable(error.to_string()))?;
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Request { command, encoded_bytes, reply })
            .await
            .map_err(|_closed| ProposeError::Closed)?;
        answer.await.unwrap_or(Err(ProposeError::Closed))
    }

    /// Whether the proposer's task has stopped (it panicked or was aborted); `propose` then
    /// answers [`ProposeError::Closed`].
    pub fn is_closed(&self) -> bool {
        self.task.is_finished()
    }
}

/// The proposer's task: takes batches off `queued` and proposes each as one entry, with at most
/// `config.writes_in_flight_max` entries awaiting their outcomes.
async fn run(
    raft: Raft,
    config: ProposerConfig,
    clock: Clock,
    mut queued: mpsc::Receiver<Request>,
    batches: Arc<BatchCounts>,
) {
    let mut in_flight = JoinSet::new();
    // A request that did not fit the previous batch opens the next one.
    let mut carried: Option<Request> = None;
    loop {
        while in_flight.len() >= config.writes_in_flight_max {
            reap(in_flight.join_next().await);
        }
        while let Some(finished) = in_flight.try_join_next() {
            reap(Some(finished));
        }
        let first = match carried.take() {
            Some(request) => request,
            None => match queued.recv().await {
                Some(request) => request,
                None => break,
            },
        };
        let mut batch_bytes = first.encoded_bytes;
        let mut batch = vec![first];
        while batch.len() < config.batch_commands_max {
            let Ok(request) = queued.try_recv() else { break };
            if batch_bytes.saturating_add(request.encoded_bytes) > config.batch_bytes_max {
                carried = Some(request);
                break;
            }
            batch_bytes = batch_bytes.saturating_add(request.encoded_bytes);
            batch.push(request);
        }
        batches.count(batch.len());
        propose(&raft, &clock, batch, &mut in_flight).await;
    }
    while let Some(finished) = in_flight.join_next().await {
        reap(Some(finished));
    }
}

/// Carries a write task's panic (a bug: see `propose`) to the proposer's task, which then stops;
/// logs a write task that was cancelled. Either way its callers see [`ProposeError::Closed`].
fn reap(finished: Option<Result<(), tokio::task::JoinError>>) {
    match finished {
        Some(Err(error)) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Some(Err(error)) => tracing::error!(%error, "a proposer write task was cancelled"),
        Some(Ok(())) | None => {}
    }
}

/// Proposes `batch` as one entry fenced by this node's committed leader id, and spawns the wait
/// for its outcomes into `in_flight`. Fails the batch at once if this node is not the leader.
async fn propose(raft: &Raft, clock: &Clock, batch: Vec<Request>, in_flight: &mut JoinSet<()>) {
    let leader = match raft.as_leader() {
        Ok(leader) => leader.to_committed_leader_id(),
        Err(forward) => {
            fail(batch, &ProposeError::NotLeader { leader: forward.leader_id });
            return;
        }
    };
    let (commands, replies): (Vec<Command>, Vec<_>) =
        batch.into_iter().map(|request| (request.command, request.reply)).unzip();
    // The leader's wall clock, as it stamps the entry (apply keeps log time monotonic whatever
    // the clock does).
    let proposal = Proposal { time_ms: clock.now_ms(), commands };
    let (responder, answer) = ProgressResponder::complete_only();
    // This only hands the entry to the group's core; the outcome arrives on `answer`.
    if let Err(fatal) = raft.write(proposal).with_leader(leader).responder(responder).await {
        answer_all(replies, &ProposeError::Unavailable(fatal.to_string()));
        return;
    }
    in_flight.spawn(async move {
        let outcomes = match answer.await {
            // `Group::apply_answering` answers once per command of a new entry, and this
            // proposer's entries are always new: any other count is a bug in apply or its
            // adapter, never a client's doing. It panics, and `reap` carries the panic to the
            // proposer's task, which stops (every later `propose` answers `Closed`).
            Ok(Ok(response)) => {
                assert_eq!(
                    response.data.len(),
                    replies.len(),
                    "entry {} answered the wrong number of outcomes",
                    response.log_id
                );
                response.data
            }
            Ok(Err(ClientWriteError::ForwardToLeader(forward))) => {
                return answer_all(replies, &ProposeError::NotLeader { leader: forward.leader_id });
            }
            Ok(Err(other)) => {
                return answer_all(replies, &ProposeError::Unavailable(other.to_string()));
            }
            Err(_dropped) => {
                let error = ProposeError::Unavailable(
                    "the group stopped before the entry was applied".to_owned(),
                );
                return answer_all(replies, &error);
            }
        };
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            // A caller that gave up waiting does not concern the others.
            let _ = reply.send(Ok(outcome));
        }
    });
}

/// Answers every caller of a batch that was never proposed with `error`.
fn fail(batch: Vec<Request>, error: &ProposeError) {
    answer_all(batch.into_iter().map(|request| request.reply).collect(), error);
}

/// Answers every one of `replies` with `error`.
fn answer_all(replies: Vec<oneshot::Sender<Result<Answer, ProposeError>>>, error: &ProposeError) {
    for reply in replies {
        let _ = reply.send(Err(error.clone()));
    }
}
