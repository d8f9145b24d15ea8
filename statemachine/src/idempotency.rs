//! Idempotency: `(show, session, key)` → the canonical request and the reply it got.
//!
//! Owns the record shape, replay and retention. A record is written in the same apply as the
//! effects it describes. Only successful replies are stored: a rejection changed nothing, so its
//! retry is judged afresh (in particular `seat_unavailable`, see shared/DESIGN.md "Throughput").
//! Never compares requests by anything but equality: a `ClientRequest` has one canonical form
//! (its seat set is sorted by construction), so equal payloads are equal values.

use serde::{Deserialize, Serialize};

use crate::command::ClientRequest;
use crate::ids::{IdempotencyKey, SessionId};
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::Show;

/// The stored result of one keyed request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The canonical request: its fingerprint.
    pub request: ClientRequest,
    /// The reply it got.
    pub reply: Reply,
    /// Log time after which the record is forgotten.
    pub expires_ms: u64,
}

impl Show {
    /// The stored outcome for a keyed request, if the key was used and is still retained: the
    /// same reply for the same request, `IdempotencyKeyReused` for another.
    pub(crate) fn replay(
        &self,
        session: SessionId,
        key: IdempotencyKey,
        request: &ClientRequest,
        now_ms: u64,
    ) -> Option<Outcome> {
        let record = self.idempotency.get(&(session, key))?;
        if record.expires_ms <= now_ms {
            return None;
        }
        if record.request == *request {
            Some(Ok(record.reply.clone()))
        } else {
            Some(Err(Rejection::IdempotencyKeyReused))
        }
    }

    /// Stores a successful reply under its key (replacing an expired, unpruned record).
    pub(crate) fn remember(
        &mut self,
        session: SessionId,
        key: IdempotencyKey,
        request: ClientRequest,
        reply: Reply,
        now_ms: u64,
    ) {
        let expires_ms = now_ms + self.policy.idempotency_retention_ms;
        let previous = self
            .idempotency
            .insert((session, key), IdempotencyRecord { request, reply, expires_ms });
        if let Some(previous) = previous {
            assert!(previous.expires_ms <= now_ms, "a live idempotency record was replaced");
            assert!(self.idempotency_deadlines.remove(&(previous.expires_ms, session, key)));
        }
        assert!(self.idempotency_deadlines.insert((expires_ms, session, key)));
    }

    /// Forgets records whose retention ended, at most `budget`; returns how many.
    pub(crate) fn prune_idempotency(&mut self, now_ms: u64, budget: u32) -> u32 {
        let mut pruned = 0;
        while pruned < budget {
            let Some(&first) = self.idempotency_deadlines.first() else { break };
            let (expires_ms, session, key) = first;
            if expires_ms > now_ms {
                break;
            }
            self.idempotency_deadlines.pop_first();
            let removed = self.idempotency.remove(&(session, key));
            assert!(removed.is_some_and(|record| record.expires_ms == expires_ms));
            pruned += 1;
        }
        pruned
    }
}
