//! Leader-only workers: tasks that run on a group's leader while it leads, and only propose.
//!
//! Owns the tick worker, which proposes `Tick` when the leader's clock (the one its proposer
//! stamps entries with) says something is due
//! (a hold, grant or offer past its deadline, a retention window past its end), so that
//! overdue objects are released and the next waiter served on time. Started by
//! [`crate::group::HostedGroup`] when this node becomes the committed leader and aborted when
//! it stops leading. Never changes state itself: a stale leader's proposals are fenced by term
//! and the state machine re-checks every deadline in log time. The payment, outbox and offer
//! dispatchers of later issues start here too.

use std::sync::Arc;
use std::time::Duration;

use raft::{GroupId, GroupReader, ProposeError, Proposer};
use statemachine::{Command, Reply};

/// Runs the leader-only workers of `group` until aborted.
pub async fn run(group: GroupId, proposer: Arc<Proposer>, reader: GroupReader, tick: Duration) {
    tick_worker(group, &proposer, &reader, tick).await;
}

/// Every `period`, proposes `Tick` entries for as long as something is due.
async fn tick_worker(group: GroupId, proposer: &Proposer, reader: &GroupReader, period: Duration) {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
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
