//! Rejections decided without a log entry: the cheap answer to a conflicting hold.
//!
//! Owns the one question a leader may answer from its applied state instead of the log: "would
//! this hold be rejected `seat_unavailable`, and stored nowhere?" Most on-sale attempts lose
//! their race, so that answer must cost no more than a read (shared/DESIGN.md, "Throughput").
//! It is a read: the caller asks it of state it has read linearizably (lease or ReadIndex), so
//! the rejection is a state that existed during the request. Never changes anything and never
//! answers anything else: every other outcome, success included, goes through the log, and
//! apply judges the command again there.

use crate::command::{ClientCommand, ClientRequest};
use crate::outcome::Rejection;
use crate::state::Group;

impl Group {
    /// The `seat_unavailable` rejection that applying `command` would answer now, if it would:
    /// a hold whose idempotency key has no live record, whose show is on sale, whose every
    /// check before the seats passes, and some of whose seats cannot be claimed. `None` means
    /// "propose it": the command may succeed, be rejected otherwise, or replay a stored
    /// outcome.
    ///
    /// `now_ms` is the caller's clock (a leader's); the judgement uses the later of it and the
    /// log time, as an entry stamped now would be applied. A seat whose hold is overdue by then
    /// counts as claimable, exactly as in apply.
    ///
    /// Never stored under the key: a retry is judged afresh, on either path.
    pub fn reject_without_log(&self, command: &ClientCommand, now_ms: u64) -> Option<Rejection> {
        let ClientCommand { show, session, key, ref request } = *command;
        let ClientRequest::Hold { seats, price_version, grant } = request else {
            return None;
        };
        request.validate().ok()?;
        let show = self.show_or_archived(show).ok()?;
        let now = self.log_time_ms().max(now_ms);
        if show.idempotency.get(&(session, key)).is_some_and(|record| record.expires_ms > now) {
            return None;
        }
        match show.judge_hold(session, seats, *price_version, *grant, now) {
            Err(rejection @ Rejection::SeatUnavailable { .. }) => Some(rejection),
            Err(_) | Ok(_) => None,
        }
    }
}
