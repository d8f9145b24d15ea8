//! The admission lane: strict FIFO waiting room per show (seed 002, "Strict FIFO admission").
//!
//! Owns tickets and grants. Joining gives a ticket whose id is its place in line; the oldest
//! waiting tickets are granted while fewer than `window` grants are outstanding (1 = strict FIFO);
//! a grant lives `grant_ttl_ms`; a hold consumes it atomically, and a consumed grant's later
//! expiry never touches the hold. Never grants out of order and never exceeds the window.

use crate::audit::{EntityKind, Reason, StateName};
use crate::ids::{Actor, SessionId, TicketId};
use crate::inject::{self, Bug};
use crate::limits::{ADMISSION_TICKETS_LIVE_MAX, ADMISSION_WINDOW_MAX};
use crate::outbox::Event;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{Ctx, Grant, Show, Ticket, TicketState, TicketStatus};

impl Show {
    /// A ticket's state as a reader should see it at `now_ms`: an overdue grant or an overdue
    /// waiting ticket reads as expired.
    pub(crate) fn ticket_effective_state(&self, ticket: &Ticket, now_ms: u64) -> TicketStatus {
        match ticket.state {
            TicketState::Granted { grant } if grant.deadline_ms <= now_ms => TicketStatus::Expired,
            TicketState::Waiting if ticket.joined_ms + self.policy.ticket_wait_ms <= now_ms => {
                TicketStatus::Expired
            }
            state => state.status(),
        }
    }

    /// Checks that `grant` is a live grant of `session`.
    pub(crate) fn check_grant(
        &self,
        session: SessionId,
        grant: TicketId,
        now_ms: u64,
    ) -> Result<(), Rejection> {
        let ticket = self.lane.tickets.get(&grant).ok_or(Rejection::TicketNotFound)?;
        if ticket.session != session {
            return Err(Rejection::NotOwner);
        }
        match self.ticket_effective_state(ticket, now_ms) {
            TicketStatus::Granted => Ok(()),
            TicketStatus::Expired if matches!(ticket.state, TicketState::Granted { .. }) => {
                Err(Rejection::GrantExpired)
            }
            state => Err(Rejection::TicketNotActive { state }),
        }
    }

    /// Consumes a live grant (checked by `check_grant`) and serves the next in line.
    pub(crate) fn consume_grant(&mut self, ctx: &mut Ctx<'_>, grant: TicketId) {
        assert_eq!(
            self.ticket_effective_state(&self.lane.tickets[&grant], ctx.now),
            TicketStatus::Granted
        );
        self.end_ticket(ctx, grant, TicketStatus::Consumed, Reason::GrantConsumed);
        self.settle_lane(ctx, u32::MAX);
        self.advance_lane(ctx);
    }

    /// Puts the session in line; grants at once if the window has room.
    pub(crate) fn join_queue(&mut self, ctx: &mut Ctx<'_>, session: SessionId) -> Outcome {
        self.require_not_cancelled()?;
        if !self.lane.enabled {
            return Err(Rejection::AdmissionDisabled);
        }
        if let Some(ticket) = self.lane.live_by_session.get(&session) {
            let live = &self.lane.tickets[ticket];
            if self.ticket_effective_state(live, ctx.now) != TicketStatus::Expired {
                return Err(Rejection::AlreadyQueued { ticket: *ticket });
            }
        }
        if self.lane.live_by_session.len() >= ADMISSION_TICKETS_LIVE_MAX {
            return Err(Rejection::QueueFull { what: "admission lane".into() });
        }

        self.settle_lane(ctx, u32::MAX);
        let id = TicketId(self.allocate_id());
        self.lane
            .tickets
            .insert(id, Ticket { id, session, state: TicketState::Waiting, joined_ms: ctx.now });
        assert!(self.lane.waiting.insert(id));
        assert!(self.lane.waiting_deadlines.insert((ctx.now + self.policy.ticket_wait_ms, id)));
        assert!(self.lane.live_by_session.insert(session, id).is_none());
        let transition =
            self.transition(EntityKind::Ticket, id.0, None, StateName::Waiting, Reason::Requested);
        ctx.record(transition);
        self.advance_lane(ctx);
        let state = self.lane.tickets[&id].state;
        // The session's live ticket is the new one, in line or granted at once.
        assert!(state.is_live() && self.lane.live_by_session[&session] == id);
        Ok(Reply::Queued {
            ticket: id,
            state: state.status(),
            grant_deadline_ms: state.grant().map(|grant| grant.deadline_ms),
        })
    }

    /// Takes the owner's ticket out of line (giving back an unused grant).
    pub(crate) fn leave_queue(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        ticket: TicketId,
    ) -> Outcome {
        let found = self.lane.tickets.get(&ticket).ok_or(Rejection::TicketNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        match self.ticket_effective_state(found, ctx.now) {
            TicketStatus::Waiting | TicketStatus::Granted => {}
            state => return Err(Rejection::TicketNotActive { state }),
        }
        self.end_ticket(ctx, ticket, TicketStatus::Left, Reason::Requested);
        self.settle_lane(ctx, u32::MAX);
        self.advance_lane(ctx);
        assert_eq!(self.lane.tickets[&ticket].state.status(), TicketStatus::Left);
        Ok(Reply::QueueLeft { ticket })
    }

    /// Turns the lane on or off. Turning it off expires every waiting and granted ticket.
    pub(crate) fn configure_admission(
        &mut self,
        ctx: &mut Ctx<'_>,
        enabled: bool,
        window: u32,
    ) -> Outcome {
        self.require_not_cancelled()?;
        if window == 0 || window > ADMISSION_WINDOW_MAX {
            return Err(Rejection::invalid(format!("window: must be 1..={ADMISSION_WINDOW_MAX}")));
        }
        // Grants already issued are promises; a window below them would break the invariant
        // that no more than `window` grants are outstanding. Overdue ones do not count.
        let outstanding =
            self.lane.granted.iter().filter(|(deadline, _)| *deadline > ctx.now).count();
        if enabled && (window as usize) < outstanding {
            return Err(Rejection::invalid(format!(
                "window: {outstanding} grants are outstanding; shrink after they are used or expire"
            )));
        }
        let changed = (self.lane.enabled, self.lane.window) != (enabled, window);
        self.lane.enabled = enabled;
        self.lane.window = window;
        if changed {
            self.audit_change(ctx, Some(self.status), Reason::AdmissionConfigured);
        }
        if !enabled {
            let live: Vec<TicketId> = self.lane.live_by_session.values().copied().collect();
            for ticket in live {
                self.end_ticket(ctx, ticket, TicketStatus::Expired, Reason::LaneDisabled);
            }
        }
        self.settle_lane(ctx, u32::MAX);
        self.advance_lane(ctx);
        assert!(
            enabled || self.lane.live_by_session.is_empty(),
            "a lane turned off has no tickets"
        );
        Ok(Reply::AdmissionConfigured { show: self.id, enabled, window })
    }

    /// Ends a waiting or granted ticket as `to` (consumed only if granted); a grant it had
    /// stays recorded in its final state.
    pub(crate) fn end_ticket(
        &mut self,
        ctx: &mut Ctx<'_>,
        ticket: TicketId,
        to: TicketStatus,
        reason: Reason,
    ) {
        let found = self.lane.tickets.get_mut(&ticket).expect("ending a known ticket");
        let from = found.state;
        let grant = match from {
            TicketState::Waiting => {
                assert!(self.lane.waiting.remove(&ticket));
                let limit_ms = found.joined_ms + self.policy.ticket_wait_ms;
                assert!(self.lane.waiting_deadlines.remove(&(limit_ms, ticket)));
                None
            }
            TicketState::Granted { grant } => {
                assert!(self.lane.granted.remove(&(grant.deadline_ms, ticket)));
                Some(grant)
            }
            _ => panic!("ending a ticket that is not live"),
        };
        found.state = match (to, grant) {
            (TicketStatus::Consumed, Some(grant)) => TicketState::Consumed { grant },
            (TicketStatus::Left, grant) => TicketState::Left { grant },
            (TicketStatus::Expired, grant) => TicketState::Expired { grant },
            (to, _) => panic!("a {from:?} ticket cannot end {to:?}"),
        };
        let to = found.state;
        assert!(!to.is_live());
        let session = found.session;
        assert_eq!(self.lane.live_by_session.remove(&session), Some(ticket));
        let transition =
            self.transition(EntityKind::Ticket, ticket.0, Some(from.into()), to.into(), reason);
        ctx.record(transition);
    }

    /// Expires overdue grants and tickets past the waiting limit, at most `budget`; returns
    /// how many.
    pub(crate) fn settle_lane(&mut self, ctx: &mut Ctx<'_>, budget: u32) -> u32 {
        let actor = ctx.actor;
        ctx.actor = Actor::System;
        let mut expired = 0;
        while expired < budget {
            let due_grant = self.lane.granted.first().filter(|(deadline, _)| *deadline <= ctx.now);
            let due_wait =
                self.lane.waiting_deadlines.first().filter(|(deadline, _)| *deadline <= ctx.now);
            let (ticket, reason) = match (due_grant, due_wait) {
                (Some((_, ticket)), _) => (*ticket, Reason::DeadlinePassed),
                (None, Some((_, ticket))) => (*ticket, Reason::WaitingLimit),
                (None, None) => break,
            };
            self.end_ticket(ctx, ticket, TicketStatus::Expired, reason);
            expired += 1;
        }
        ctx.actor = actor;
        // Within its budget, nothing due is left.
        let due = |first: Option<&(u64, TicketId)>| first.is_some_and(|(at, _)| *at <= ctx.now);
        assert!(
            expired == budget
                || !(due(self.lane.granted.first()) || due(self.lane.waiting_deadlines.first()))
        );
        expired
    }

    /// Grants the oldest waiting tickets while the window has room; a waiter past its limit met
    /// on the way is expired instead. Callers settle first so that overdue grants free their
    /// window slots; an unsettled one only makes the lane slower, never wider.
    pub(crate) fn advance_lane(&mut self, ctx: &mut Ctx<'_>) {
        if !self.lane.enabled {
            return;
        }
        let actor = ctx.actor;
        ctx.actor = Actor::System;
        while (self.lane.granted.len() as u64) < u64::from(self.lane.window) {
            let Some(ticket) = self.next_to_grant() else { break };
            let found = &self.lane.tickets[&ticket];
            assert_eq!(found.state, TicketState::Waiting);
            let limit_ms = found.joined_ms + self.policy.ticket_wait_ms;
            if limit_ms <= ctx.now {
                // Waited too long: it is expired, not served.
                self.lane.waiting.insert(ticket);
                self.end_ticket(ctx, ticket, TicketStatus::Expired, Reason::WaitingLimit);
                continue;
            }
            assert!(self.lane.waiting_deadlines.remove(&(limit_ms, ticket)));
            let found = self.lane.tickets.get_mut(&ticket).expect("a waiting ticket exists");
            let deadline_ms = ctx.now + self.policy.grant_ttl_ms;
            found.state = TicketState::Granted { grant: Grant { index: ctx.index, deadline_ms } };
            let session = found.session;
            assert!(self.lane.granted.insert((deadline_ms, ticket)));
            ctx.emit(self.id, Event::GrantIssued { ticket, session, deadline_ms });
            let transition = self.transition(
                EntityKind::Ticket,
                ticket.0,
                Some(StateName::Waiting),
                StateName::Granted,
                Reason::NextInLine,
            );
            ctx.record(transition);
        }
        ctx.actor = actor;
        // The window is full, or nobody waits.
        let granted = self.lane.granted.len() as u64;
        assert!(granted >= u64::from(self.lane.window) || self.lane.waiting.is_empty());
    }

    /// Takes the oldest waiting ticket out of the line (with the planted bug
    /// [`Bug::FifoSkip`], the second oldest when two wait).
    fn next_to_grant(&mut self) -> Option<TicketId> {
        if inject::on(Bug::FifoSkip) && self.lane.waiting.len() >= 2 {
            let second = *self.lane.waiting.iter().nth(1).expect("two tickets wait");
            self.lane.waiting.remove(&second);
            return Some(second);
        }
        self.lane.waiting.pop_first()
    }
}
