//! Leader-only workers: tasks that run on a group's leader while it leads, and only propose.
//!
//! Owns five. The tick worker proposes `Tick` when the leader's clock (the one its proposer
//! stamps entries with) says something is due (a hold, grant or offer past its deadline, a
//! retention window past its end), so that overdue objects are released and the next waiter
//! served on time. With a `--provider-url`, the payment worker charges every attempt the
//! provider has not answered for and records what it says as payment commands, reconciling an
//! unknown outcome by reading the charge back; and the refund worker gives back all money owed
//! (a late payment, a cancelled booking) under a key the attempt names, then records
//! `RefundCompleted`. With `--archive-after-s`, the archive worker archives every show that
//! ended that long ago and whose money is settled (`statemachine::Group::archives_due`); with
//! `--retention-s`, the retention worker compacts the terminal records of live shows older than
//! that (`statemachine::Group::compactions_due`).
//! Started by [`crate::group::HostedGroup`] when this node becomes the
//! committed leader and aborted when it stops leading. Never changes state itself: a stale
//! leader's proposals are fenced by term, the state machine re-checks every deadline in log
//! time, and every provider call is keyed so that a repeat, from this leader or the next,
//! charges or refunds nothing more. A new leader's workers resume from the replicated state
//! alone. The outbox dispatcher (`dispatch.rs`) starts here too.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::ReadPolicy;
use raft::{GroupId, GroupReader, ProposeError, Proposer, Raft};
use statemachine::{
    Command, Group, OperatorCommand, PaymentAttempt, PaymentId, PaymentOutcome, PaymentResult,
    PaymentState, ProviderEventId, Reply, ShowId,
};
use tokio::task::JoinSet;

use crate::dispatch::{self, DispatchSettings};
use crate::environment::Entropy;
use crate::metrics::Metrics;
use crate::provider::{Charged, Provider, ProviderError, charge_key};
use crate::sessions::hash128;

/// What the leader-only workers of a group need besides the group.
#[derive(Clone)]
pub struct WorkerSettings {
    /// The tick worker's period, and how often the payment worker and the outbox dispatcher
    /// look for new work.
    pub tick: Duration,
    /// The payment provider; no payment worker without one.
    pub provider: Option<Provider>,
    /// The outbox sinks and how to treat them; no dispatcher without (the metadata group has
    /// no outbox).
    pub dispatch: Option<Arc<DispatchSettings>>,
    /// What the workers count.
    pub metrics: Metrics,
    /// Where a lottery's seed comes from when the draw worker draws it.
    pub entropy: Entropy,
    /// How long after a show ended the archive worker archives it, once settled; `None`: never.
    pub archive_after: Option<Duration>,
    /// How long the terminal records of a live show stay before the retention worker compacts
    /// them; `None`: for ever.
    pub retention: Option<Duration>,
}

/// The archive worker looks for ended shows at most this often (judging a show settled reads
/// all of it).
const ARCHIVE_SCAN_MIN: Duration = Duration::from_secs(1);
/// The retention worker looks for records past the window at least this often.
const RETENTION_SCAN_MAX: Duration = Duration::from_secs(3_600);
/// How long one confirmation of leadership may take before it is asked again.
const LEADERSHIP_CONFIRM_TIMEOUT: Duration = Duration::from_secs(3);
/// Charges the payment worker makes at once, per group.
pub const PAYMENT_CALLS_MAX: usize = 64;
/// The first wait before asking the provider again about one attempt; it doubles per try.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries for one attempt.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long an attempt the provider refused waits before it is tried again.
const REFUSED_PAUSE: Duration = Duration::from_secs(30);

/// Runs the leader-only workers of `group` until aborted, once a quorum has confirmed that
/// this node leads.
pub async fn run(
    group: GroupId,
    raft: Raft,
    proposer: Arc<Proposer>,
    reader: GroupReader,
    settings: WorkerSettings,
) {
    let period = settings.tick;
    // A node restarted after leading an older term can believe for a moment that it still
    // leads, with the state it had: its proposals are fenced by term, but what its workers do
    // outside (a sink delivery, a provider call) is not. So nothing starts before a quorum has
    // confirmed this node's leadership (ReadIndex); a node that is not the leader keeps
    // asking until it is aborted.
    loop {
        let confirmed = raft.ensure_linearizable(ReadPolicy::ReadIndex);
        match tokio::time::timeout(LEADERSHIP_CONFIRM_TIMEOUT, confirmed).await {
            Ok(Ok(_)) => break,
            Ok(Err(error)) => tracing::debug!(group, %error, "leadership not confirmed yet"),
            Err(_elapsed) => tracing::debug!(group, "leadership not confirmed in time"),
        }
        tokio::time::sleep(period).await;
    }
    let dispatcher = async {
        if let Some(dispatch) = settings.dispatch.clone() {
            let metrics = settings.metrics.clone();
            dispatch::run(group, proposer.clone(), reader.clone(), dispatch, metrics, period).await;
        }
    };
    let entropy = settings.entropy.clone();
    let ticking = tick_worker(group, &proposer, &reader, period, &entropy);
    let archiving = async {
        if let Some(after) = settings.archive_after {
            archive_worker(group, &proposer, &reader, period.max(ARCHIVE_SCAN_MIN), after).await;
        }
    };
    let compacting = async {
        if let Some(retention) = settings.retention {
            let period = (retention / 4).clamp(ARCHIVE_SCAN_MIN, RETENTION_SCAN_MAX);
            retention_worker(group, &proposer, &reader, period, retention).await;
        }
    };
    let ticking = async { tokio::join!(ticking, archiving, compacting) };
    let Some(provider) = settings.provider else {
        tokio::join!(ticking, dispatcher);
        return;
    };
    let charging = |show, attempt| {
        let (proposer, provider) = (Arc::clone(&proposer), provider.clone());
        async move { settle(group, &proposer, &provider, show, attempt).await }
    };
    let refunding = |show, attempt| {
        let (proposer, provider) = (Arc::clone(&proposer), provider.clone());
        async move { refund(group, &proposer, &provider, show, attempt).await }
    };
    tokio::join!(
        ticking,
        dispatcher,
        attempts_worker(group, "payments", &reader, period, Group::unsettled_payments, charging),
        attempts_worker(group, "refunds", &reader, period, Group::refunds_owed, refunding),
    );
}

/// Every `period`, proposes `Tick` entries for as long as something is due, and draws every
/// lottery whose draw time has come (with a seed from `entropy`, recorded in the log; a repeat
/// by a later leader with another seed is refused `lottery_already_drawn`, so a lottery is
/// drawn once).
async fn tick_worker(
    group: GroupId,
    proposer: &Proposer,
    reader: &GroupReader,
    period: Duration,
    entropy: &Entropy,
) {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        draw_lotteries(group, proposer, reader, entropy).await;
        loop {
            let now_ms = proposer.clock().now_ms();
            let due = match reader.read(|state| state.has_due(now_ms)) {
                Ok(due) => due,
                Err(error) => {
                    tracing::error!(group, %error, "tick worker cannot read the state; stopping");
                    return;
                }
            };
            if !due {
                break;
            }
            match proposer.propose(Command::Tick).await.map(|answer| answer.outcome) {
                Ok(Ok(Reply::Ticked { expired, more })) => {
                    tracing::debug!(group, expired, more, "ticked");
                    if !more {
                        break;
                    }
                }
                Ok(outcome) => {
                    tracing::warn!(group, ?outcome, "unexpected tick outcome");
                    break;
                }
                Err(ProposeError::NotLeader { .. }) => break,
                Err(error) => {
                    tracing::debug!(group, %error, "tick not committed; trying again next period");
                    break;
                }
            }
        }
    }
}

/// Every `period`, archives each show that ended at least `after` ago by this leader's clock
/// and is settled. The digest comes from this replica's applied state without ReadIndex: if
/// the show changed since, the state machine refuses the command (`archive_changed`) and the
/// next period tries again.
async fn archive_worker(
    group: GroupId,
    proposer: &Proposer,
    reader: &GroupReader,
    period: Duration,
    after: Duration,
) {
    let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let now_ms = proposer.clock().now_ms();
        let Ok(due) = reader.read(|state| state.archives_due(now_ms, after_ms)) else { return };
        for (show, digest) in due {
            let command = Command::Operator(OperatorCommand::ArchiveShow { show, digest });
            match proposer.propose(command).await.map(|answer| answer.outcome) {
                Ok(Ok(Reply::ShowArchived { bytes, duplicate, .. })) => {
                    tracing::info!(group, show = show.0, bytes, duplicate, "show archived");
                }
                Ok(Err(rejection)) => {
                    tracing::debug!(group, show = show.0, %rejection, "show not archived");
                }
                Ok(outcome) => tracing::warn!(group, ?outcome, "unexpected archive outcome"),
                Err(error) => {
                    tracing::debug!(group, %error, "archive not committed; trying again later");
                    break;
                }
            }
        }
    }
}

/// Every `period`, compacts out of each live show the terminal records that ended more than
/// `retention` ago by this leader's clock (as the archive worker, a show changed since this
/// replica's read is refused `archive_changed` and tried again next period).
async fn retention_worker(
    group: GroupId,
    proposer: &Proposer,
    reader: &GroupReader,
    period: Duration,
    retention: Duration,
) {
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        // The entry carrying the command is stamped with this clock, so the bound is never
        // after the log time it is applied at (the command refuses one that is).
        let before_ms = proposer.clock().now_ms().saturating_sub(retention_ms);
        let Ok(due) = reader.read(|state| state.compactions_due(before_ms, 1)) else { return };
        for (show, digest) in due {
            let command =
                Command::Operator(OperatorCommand::CompactShow { show, before_ms, digest });
            match proposer.propose(command).await.map(|answer| answer.outcome) {
                Ok(Ok(Reply::ShowCompacted { records, bytes, .. })) => {
                    tracing::info!(group, show = show.0, records, bytes, "records compacted");
                }
                Ok(Err(rejection)) => {
                    tracing::debug!(group, show = show.0, %rejection, "records not compacted");
                }
                Ok(outcome) => tracing::warn!(group, ?outcome, "unexpected compaction outcome"),
                Err(error) => {
                    tracing::debug!(group, %error, "compaction not committed; trying again later");
                    break;
                }
            }
        }
    }
}

/// Proposes `DrawLottery` for every show whose lottery is due by this leader's clock.
async fn draw_lotteries(
    group: GroupId,
    proposer: &Proposer,
    reader: &GroupReader,
    entropy: &Entropy,
) {
    let now_ms = proposer.clock().now_ms();
    let Ok(due) = reader.read(|state| state.lotteries_due(now_ms)) else { return };
    for show in due {
        let mut seed = [0u8; 8];
        if let Err(error) = entropy.fill(&mut seed) {
            tracing::error!(group, show = show.0, %error, "no randomness for a lottery's seed");
            return;
        }
        // Below 2^53, so that every JSON reader of the draw carries the seed exactly.
        let seed = u64::from_le_bytes(seed) & crate::sessions::JSON_SAFE_MAX;
        let command = Command::Operator(OperatorCommand::DrawLottery { show, seed });
        match proposer.propose(command).await.map(|answer| answer.outcome) {
            Ok(Ok(Reply::LotteryDrawn { entries, duplicate, .. })) => {
                tracing::info!(group, show = show.0, seed, entries, duplicate, "lottery drawn");
            }
            Ok(Err(rejection)) => {
                tracing::debug!(group, show = show.0, %rejection, "lottery not drawn");
            }
            Ok(outcome) => tracing::warn!(group, ?outcome, "unexpected draw outcome"),
            Err(error) => {
                tracing::debug!(group, %error, "draw not committed; trying again next period");
                return;
            }
        }
    }
}

/// Every `period`, starts `work` on each attempt `scan` lists that it is not already working
/// on, up to [`PAYMENT_CALLS_MAX`] at once: the payment worker (attempts the provider has not
/// answered for) and the refund worker (money owed back). Ends (with its tasks) when aborted or
/// when the state cannot be read.
async fn attempts_worker<Work, Done>(
    group: GroupId,
    what: &'static str,
    reader: &GroupReader,
    period: Duration,
    scan: fn(&statemachine::Group) -> Vec<(ShowId, PaymentAttempt)>,
    work: Work,
) where
    Work: Fn(ShowId, PaymentAttempt) -> Done,
    Done: Future<Output = ()> + Send + 'static,
{
    let mut working: BTreeSet<(ShowId, PaymentId)> = BTreeSet::new();
    let mut tasks: JoinSet<(ShowId, PaymentId)> = JoinSet::new();
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(group, what, "worker started");
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            Some(done) = tasks.join_next() => {
                match done {
                    Ok(attempt) => { working.remove(&attempt); }
                    Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                    Err(_) => {}
                }
                continue;
            }
        }
        let listed = match reader.read(scan) {
            Ok(listed) => listed,
            Err(error) => {
                tracing::error!(group, what, %error, "worker cannot read the state; stopping");
                return;
            }
        };
        for (show, attempt) in listed {
            if working.len() >= PAYMENT_CALLS_MAX {
                break;
            }
            let id = attempt.id;
            if working.insert((show, id)) {
                let done = work(show, attempt);
                tasks.spawn(async move {
                    done.await;
                    (show, id)
                });
            }
        }
    }
}

/// How the worker learns an attempt's outcome next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// Charge under the attempt's key (safe to repeat: the key charges once).
    Charge,
    /// Read the charge made under the key (after an unknown outcome).
    Read,
}

/// Asks the provider about one attempt until it answers, and records the answer: a charge for
/// a pending attempt; for an unknown one (or a charge whose outcome was lost), the charge read
/// back by its key, charged anew when the provider has none. An unknown outcome is recorded
/// once, as `unknown`. Returns when the outcome is recorded, when this node stops leading, or
/// after a pause when the provider refuses the attempt (logged: a refusal does not change by
/// asking again at once).
async fn settle(
    group: GroupId,
    proposer: &Proposer,
    provider: &Provider,
    show: ShowId,
    attempt: PaymentAttempt,
) {
    let payment = attempt.id;
    let key = charge_key(show, payment);
    let mut unknown_recorded = attempt.state == PaymentState::Unknown;
    let mut ask = if unknown_recorded { Ask::Read } else { Ask::Charge };
    let mut wait = RETRY_FIRST;
    loop {
        let answer = match ask {
            Ask::Charge => provider.charge(show, payment, attempt.price).await.map(Some),
            Ask::Read => provider.charge_by_key(show, payment).await,
        };
        match answer {
            Ok(Some(charged)) => {
                let result = match &charged {
                    Charged::Succeeded { amount, .. } => PaymentResult::Succeeded {
                        amount_minor: amount.amount_minor,
                        currency: amount.currency,
                    },
                    Charged::Declined { .. } => PaymentResult::Declined,
                };
                let event = format!("charge:{}", charged.charge_id());
                tracing::debug!(group, payment = key, charge = charged.charge_id(), "charged");
                let _ = record(group, proposer, show, payment, &event, result).await;
                return;
            }
            Ok(None) => {
                tracing::info!(group, payment = key, "the provider has no charge: charging");
                ask = Ask::Charge;
                continue;
            }
            Err(ProviderError::NotSent(error)) => {
                tracing::debug!(group, payment = key, %error, "provider unreachable");
            }
            Err(ProviderError::Unknown(error)) => {
                tracing::info!(group, payment = key, %error, "charge outcome unknown: reconciling");
                if !unknown_recorded {
                    let event = format!("unknown:{key}");
                    match record(group, proposer, show, payment, &event, PaymentResult::Unknown)
                        .await
                    {
                        Recorded::Yes => unknown_recorded = true,
                        Recorded::NotLeader => return,
                        Recorded::Retry => {}
                    }
                }
                ask = Ask::Read;
            }
            Err(error @ ProviderError::Refused { .. }) => {
                tracing::error!(group, payment = key, %error, "the provider refused the attempt");
                // Asking again at once would be refused again: the attempt waits out the pause
                // (its slot stays taken), then the next scan tries it anew.
                tokio::time::sleep(REFUSED_PAUSE).await;
                return;
            }
        }
        tokio::time::sleep(jittered(wait, &key)).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Whether an outcome was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recorded {
    /// Committed (or refused by the state machine, which asking again would not change).
    Yes,
    /// This node no longer leads: the next leader's worker takes over.
    NotLeader,
    /// Not known to be committed; propose again later.
    Retry,
}

/// Gives back the money owed on `attempt`: finds its charge by the attempt's key, refunds the
/// whole of it under the attempt's refund key until the provider confirms, then records
/// `RefundCompleted`. Returns when that is recorded, when this node stops leading, or after a
/// pause when the provider refuses or has no charge to refund (logged: asking again at once
/// would not change it).
async fn refund(
    group: GroupId,
    proposer: &Proposer,
    provider: &Provider,
    show: ShowId,
    attempt: PaymentAttempt,
) {
    let payment = attempt.id;
    let key = charge_key(show, payment);
    let mut wait = RETRY_FIRST;
    let refunded = loop {
        let refunded = match provider.charge_by_key(show, payment).await {
            Ok(Some(Charged::Succeeded { charge, amount })) => {
                provider.refund(show, payment, &charge, amount.amount_minor).await
            }
            Ok(found) => {
                tracing::error!(
                    group,
                    payment = key,
                    ?found,
                    "refund owed but no charge to refund"
                );
                tokio::time::sleep(REFUSED_PAUSE).await;
                return;
            }
            Err(error) => Err(error),
        };
        match refunded {
            Ok(refund) => break refund,
            Err(error @ ProviderError::Refused { .. }) => {
                tracing::error!(group, payment = key, %error, "the provider refused the refund");
                tokio::time::sleep(REFUSED_PAUSE).await;
                return;
            }
            Err(error) => tracing::info!(group, payment = key, %error, "refund not confirmed"),
        }
        tokio::time::sleep(jittered(wait, &key)).await;
        wait = (wait * 2).min(RETRY_MAX);
    };
    tracing::info!(group, payment = key, refund = refunded, "refunded");
    let command = Command::RefundCompleted { show, payment };
    let mut wait = RETRY_FIRST;
    loop {
        match proposer.propose(command.clone()).await.map(|answer| answer.outcome) {
            Ok(Ok(Reply::RefundRecorded { .. })) => return,
            Ok(outcome) => {
                tracing::error!(group, payment = key, ?outcome, "the refund was refused");
                return;
            }
            Err(ProposeError::NotLeader { .. }) => return,
            Err(error) => tracing::debug!(group, %error, "refund not committed; proposing again"),
        }
        tokio::time::sleep(jittered(wait, &key)).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Proposes the provider's `result` for `payment` under provider event `event` until it is
/// committed or this node stops leading. The event id makes a repeat a no-op.
async fn record(
    group: GroupId,
    proposer: &Proposer,
    show: ShowId,
    payment: PaymentId,
    event: &str,
    result: PaymentResult,
) -> Recorded {
    let event = ProviderEventId(hash128(b"provider-event", event.as_bytes()));
    let command = Command::Payment(PaymentOutcome { show, payment, event, result });
    let mut wait = RETRY_FIRST;
    for _ in 0..8 {
        match proposer.propose(command.clone()).await.map(|answer| answer.outcome) {
            Ok(Ok(Reply::PaymentRecorded { effect, .. })) => {
                tracing::debug!(group, show = show.0, payment = payment.0, ?effect, "recorded");
                return Recorded::Yes;
            }
            Ok(outcome) => {
                tracing::error!(
                    group,
                    show = show.0,
                    payment = payment.0,
                    ?outcome,
                    "the provider's outcome was refused"
                );
                return Recorded::Yes;
            }
            Err(ProposeError::NotLeader { .. }) => return Recorded::NotLeader,
            Err(error) => {
                tracing::debug!(group, %error, "payment outcome not committed; proposing again");
            }
        }
        tokio::time::sleep(jittered(wait, &charge_key(show, payment))).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
    Recorded::Retry
}

/// `wait` less up to a quarter, by what waits (`what`: an attempt's key, a sink's name), so that
/// retries after one outage do not arrive together. Derived rather than drawn: the same `what`
/// and `wait` always give the same jitter, which keeps a simulated run replayable from its seed.
pub(crate) fn jittered(wait: Duration, what: &str) -> Duration {
    let mut bytes = what.as_bytes().to_vec();
    bytes.extend_from_slice(&wait.as_nanos().to_le_bytes());
    let byte = hash128(b"retry-jitter", &bytes).to_le_bytes()[0];
    wait.mul_f64(1.0 - f64::from(byte) / 1_024.0)
}
