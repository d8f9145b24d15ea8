//! Deletion on demand: a session's identity leaves one show's records (`EraseSession`).
//!
//! Owns what names a session in a show and how it is replaced: the holds, bookings, payment
//! attempts, tickets, waitlist entries and offers it owns, the maps that find them by session,
//! the audit records it acted in, and the show's outbox events and dead letters addressed to it
//! name a pseudonym instead (a fresh random id the command carries); its idempotency records,
//! which hold what it sent and was answered under keys it chose, are removed. What the records
//! say otherwise (seats, prices, times, states) stays: bookings and the audit keep their
//! history under the pseudonym, and the group's invariants hold as before. An archive or a
//! backup made afterwards holds only the pseudonym, since both are made from this state.
//! Never touches another show: the node sends one command per show.

use std::sync::Arc;

use crate::cow::CowMap;
use crate::ids::{Actor, SessionId, ShowId};
use crate::outbox::Event;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{Group, Show};

impl Group {
    /// Applies `EraseSession`: see the module docs. Refused when the pseudonym is the session
    /// itself or already names a record of the show (two sessions' records would merge).
    pub(crate) fn erase_session(
        &mut self,
        show: ShowId,
        session: SessionId,
        pseudonym: SessionId,
    ) -> Outcome {
        if session == pseudonym {
            return Err(Rejection::invalid("pseudonym: must differ from the session"));
        }
        if let Some(inactive) = self.inactive(show) {
            return Err(inactive);
        }
        let found = match self.shows.get_mut(&show) {
            Some(found) => Arc::make_mut(found),
            None if self.archived.contains_key(&show) => return Err(Rejection::ShowArchived),
            None => return Err(Rejection::ShowNotFound),
        };
        if found.names(pseudonym) {
            return Err(Rejection::invalid("pseudonym: already names a record of the show"));
        }
        let swap = |id: &mut SessionId| {
            if *id == session {
                *id = pseudonym;
                1
            } else {
                0
            }
        };
        let mut records = found.rename_session(session, pseudonym);
        let idempotency_records = found.forget_idempotency(session);
        for record in self.audit.of_show_mut(show) {
            if let Actor::Session(actor) = &mut record.actor {
                records += swap(actor);
            }
        }
        for event in self.outbox.events_mut().filter(|event| event.show == show) {
            records += swap(event_session(&mut event.event));
        }
        for letter in self.delivery.dead_letters_mut().filter(|letter| letter.event.show == show) {
            records += swap(event_session(&mut letter.event.event));
        }
        Ok(Reply::SessionErased { show, records, idempotency_records })
    }
}

impl Show {
    /// Whether any record of the show names `session`.
    fn names(&self, session: SessionId) -> bool {
        self.holds.values().any(|hold| hold.session == session)
            || self.bookings.values().any(|booking| booking.session == session)
            || self.payments.values().any(|payment| payment.session == session)
            || self.lane.tickets.values().any(|ticket| ticket.session == session)
            || self.waitlist.entries.values().any(|entry| entry.session == session)
            || self.waitlist.offers.values().any(|offer| offer.session == session)
            || self.idempotency.keys().any(|(owner, _)| *owner == session)
    }

    /// Renames `session` to `pseudonym` in every record the show keeps of it; returns how many
    /// records changed.
    fn rename_session(&mut self, session: SessionId, pseudonym: SessionId) -> u32 {
        let mut renamed = 0;
        let mut swap = |id: &mut SessionId| {
            if *id == session {
                *id = pseudonym;
                renamed += 1;
            }
        };
        self.holds.values_mut().for_each(|hold| swap(&mut hold.session));
        self.bookings.values_mut().for_each(|booking| swap(&mut booking.session));
        self.payments.values_mut().for_each(|payment| swap(&mut payment.session));
        self.lane.tickets.values_mut().for_each(|ticket| swap(&mut ticket.session));
        self.waitlist.entries.values_mut().for_each(|entry| swap(&mut entry.session));
        self.waitlist.offers.values_mut().for_each(|offer| swap(&mut offer.session));
        rekey(&mut self.live_holds_by_session, session, pseudonym);
        rekey(&mut self.lane.live_by_session, session, pseudonym);
        rekey(&mut self.waitlist.active_by_session, session, pseudonym);
        renamed
    }

    /// Removes the session's idempotency records; returns how many.
    fn forget_idempotency(&mut self, session: SessionId) -> u32 {
        let keys: Vec<_> = self
            .idempotency
            .iter()
            .filter(|((owner, _), _)| *owner == session)
            .map(|(&(owner, key), record)| (owner, key, record.expires_ms))
            .collect();
        for &(owner, key, expires_ms) in &keys {
            self.idempotency.remove(&(owner, key));
            assert!(
                self.idempotency_deadlines.remove(&(expires_ms, owner, key)),
                "every idempotency record has its deadline"
            );
        }
        u32::try_from(keys.len()).unwrap_or(u32::MAX)
    }
}

/// Moves a session's entry of a by-session map to the pseudonym.
fn rekey<V: Clone>(map: &mut CowMap<SessionId, V>, session: SessionId, pseudonym: SessionId) {
    if let Some(value) = map.remove(&session) {
        map.insert(pseudonym, value);
    }
}

/// The session an event is addressed to.
fn event_session(event: &mut Event) -> &mut SessionId {
    match event {
        Event::OfferMade { session, .. }
        | Event::GrantIssued { session, .. }
        | Event::BookingConfirmed { session, .. }
        | Event::RefundRequired { session, .. }
        | Event::HoldExpired { session, .. }
        | Event::ShowCancelled { session }
        | Event::RefundCompleted { session, .. } => session,
    }
}
