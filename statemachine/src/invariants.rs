//! `check_invariants`: the booking invariants, checked over the whole state.
//!
//! Owns the full consistency check run by tests after every step, before a snapshot is encoded
//! and after one is decoded. It recomputes from scratch what the rules maintain incrementally, so
//! a rule that forgets an index or double-allocates a seat is caught. Never panics, even on a
//! decoded state full of dangling references: every violation is returned as a message.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::audit::OrderKey;
use crate::ids::{EntryId, SessionId, ShowId};
use crate::limits::{SEAT_CLASSES_PER_SHOW_MAX, SEATS_PER_HOLD_MAX, SEATS_PER_SHOW_MAX};
use crate::state::{
    BookingState, Group, HoldState, OfferState, PaymentState, Seat, SeatCounts, Show, ShowStatus,
    TicketState, WaitlistEntryState, WaitlistOrdering,
};

macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

impl Group {
    /// Checks every invariant of every show:
    ///
    /// - no seat in two live holds or bookings, every live hold owns exactly its seats, bookings
    ///   and booked seats agree, pooled and offered seats agree with the waitlist;
    /// - never more outstanding grants than the window; at most one open offer per released seat;
    /// - no grant or offer to a later waiter while an earlier one waits;
    /// - every deadline and session index matches the objects it indexes.
    ///
    /// # Errors
    ///
    /// A message naming the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_invariants_besides(&|_, _| false)
    }

    /// [`Group::check_invariants`], but for the shows `checked` says were checked before as
    /// they are (the same `Arc`: a show's invariants are its own, see [`ShowEncodings`]).
    ///
    /// [`ShowEncodings`]: crate::snapshot::ShowEncodings
    pub(crate) fn check_invariants_besides(
        &self,
        checked: &dyn Fn(&ShowId, &Arc<Show>) -> bool,
    ) -> Result<(), String> {
        self.outbox.check()?;
        self.delivery.check(&self.outbox)?;
        self.digests.check(self.applied_index)?;
        for (id, show) in &self.shows {
            ensure!(show.id == *id, "show {id} is stored under another id");
            if checked(id, show) {
                continue;
            }
            show.check().map_err(|violation| format!("show {id}: {violation}"))?;
        }
        self.catalog.check(&self.placement, self.applied_index)?;
        for (id, archived) in &self.archived {
            ensure!(archived.show == *id, "archived show {id} is stored under another id");
            ensure!(!self.shows.contains_key(id), "show {id} is both live and archived");
            ensure!(
                archived.index <= self.applied_index,
                "show {id} was archived after the applied index"
            );
            ensure!(
                self.audit.of_show(*id).next().is_none(),
                "archived show {id} still has audit records"
            );
        }
        self.check_moves()?;
        Ok(())
    }
}

impl Show {
    /// Checks every invariant of one show (see [`Group::check_invariants`]).
    pub(crate) fn check(&self) -> Result<(), String> {
        self.check_seats()?;
        self.check_holds()?;
        self.check_bookings_and_payments()?;
        self.check_idempotency()?;
        self.check_lane()?;
        self.check_waitlist()?;
        if self.status == ShowStatus::Cancelled {
            ensure!(self.counts.free == self.seat_count(), "a cancelled show has taken seats");
            ensure!(self.lane.live_by_session.is_empty(), "a cancelled show has live tickets");
            ensure!(self.waitlist.active_by_session.is_empty(), "a cancelled show has waiters");
        }
        Ok(())
    }

    fn check_seats(&self) -> Result<(), String> {
        let seat_count = self.seats.len();
        ensure!(seat_count as u64 <= u64::from(SEATS_PER_SHOW_MAX), "too many seats");
        ensure!(self.seat_classes.len() == seat_count, "seat classes do not match seats");
        ensure!(
            !self.prices_minor.is_empty() && self.prices_minor.len() <= SEAT_CLASSES_PER_SHOW_MAX,
            "bad price list"
        );
        ensure!(
            self.seat_classes.iter().all(|class| usize::from(*class) < self.prices_minor.len()),
            "a seat has a class without a price"
        );
        let mut counts = SeatCounts::default();
        for (seat, state) in self.seats.iter().enumerate() {
            let seat = seat as u32;
            match *state {
                Seat::Free => counts.free += 1,
                Seat::Held(hold) => {
                    counts.held += 1;
                    let found =
                        self.holds.get(&hold).ok_or(format!("seat {seat}: no hold {hold}"))?;
                    ensure!(found.state.is_live(), "seat {seat}: hold {hold} is not live");
                    ensure!(found.seats.contains(&seat), "seat {seat}: not in hold {hold}");
                }
                Seat::Booked(booking) => {
                    counts.booked += 1;
                    let found = self
                        .bookings
                        .get(&booking)
                        .ok_or(format!("seat {seat}: no booking {booking}"))?;
                    ensure!(
                        found.state == BookingState::Confirmed,
                        "seat {seat}: booking {booking} is not confirmed"
                    );
                    ensure!(found.seats.contains(&seat), "seat {seat}: not in booking {booking}");
                }
                Seat::Pooled => {
                    counts.pooled += 1;
                    ensure!(self.waitlist.pool.contains(&seat), "seat {seat}: pooled, not in pool");
                }
                Seat::Offered(offer) => {
                    counts.offered += 1;
                    let found = self
                        .waitlist
                        .offers
                        .get(&offer)
                        .ok_or(format!("seat {seat}: no offer {offer}"))?;
                    ensure!(found.state == OfferState::Open, "seat {seat}: offer {offer} closed");
                    ensure!(found.seats.contains(&seat), "seat {seat}: not in offer {offer}");
                }
            }
        }
        ensure!(counts == self.counts, "seat counts {:?} != recount {counts:?}", self.counts);
        ensure!(
            self.waitlist.pool.len() as u32 == counts.pooled,
            "pool has {} seats, {} are pooled",
            self.waitlist.pool.len(),
            counts.pooled
        );
        Ok(())
    }

    fn check_holds(&self) -> Result<(), String> {
        let mut live_by_session: BTreeMap<SessionId, u32> = BTreeMap::new();
        let mut live = 0;
        for (id, hold) in &self.holds {
            ensure!(hold.id == *id, "hold {id} stored under another id");
            ensure!(id.0 < self.next_id, "hold {id}: id not yet allocated");
            ensure!(
                hold.payments.windows(2).all(|pair| pair[0] < pair[1]),
                "hold {id}: payment attempts out of order"
            );
            for payment in &hold.payments {
                let attempt = self
                    .payments
                    .get(payment)
                    .ok_or(format!("hold {id}: no payment attempt {payment}"))?;
                ensure!(attempt.hold == *id, "hold {id}: payment {payment} is another hold's");
            }
            if hold.state.is_live() {
                live += 1;
                *live_by_session.entry(hold.session).or_default() += 1;
                for seat in &hold.seats {
                    ensure!(
                        self.seats.get(*seat as usize) == Some(&Seat::Held(*id)),
                        "hold {id}: live but seat {seat} is not its"
                    );
                }
                if let HoldState::Processing { payment, .. } = hold.state {
                    ensure!(
                        hold.payment() == Some(payment),
                        "hold {id}: processing {payment}, which is not its latest attempt"
                    );
                }
                let deadline_ms = hold.deadline_ms();
                ensure!(
                    self.hold_deadlines.contains(&(deadline_ms, *id)),
                    "hold {id}: missing from the deadline index"
                );
            }
            if let HoldState::Confirmed { booking } = hold.state {
                let found = self
                    .bookings
                    .get(&booking)
                    .ok_or(format!("hold {id}: no booking {booking}"))?;
                ensure!(found.hold == *id, "hold {id}: booking {booking} is another hold's");
            }
        }
        ensure!(self.hold_deadlines.len() == live, "the hold deadline index has stale entries");
        ensure!(
            crate::cow::CowMap::from(live_by_session) == self.live_holds_by_session,
            "live holds per session do not match"
        );
        Ok(())
    }

    fn check_bookings_and_payments(&self) -> Result<(), String> {
        for (id, booking) in &self.bookings {
            ensure!(booking.id == *id, "booking {id} stored under another id");
            let hold = self.holds.get(&booking.hold).ok_or(format!("booking {id}: no hold"))?;
            ensure!(hold.booking() == Some(*id), "booking {id}: its hold is not confirmed as it");
            ensure!(hold.seats == booking.seats, "booking {id}: seats differ from its hold");
            let payment =
                self.payments.get(&booking.payment).ok_or(format!("booking {id}: no payment"))?;
            ensure!(
                matches!(payment.state, PaymentState::Succeeded { .. } | PaymentState::Refunded),
                "booking {id}: its payment did not succeed"
            );
            match booking.state {
                BookingState::Confirmed => {
                    ensure!(
                        payment.state == PaymentState::Succeeded { refund_required: false },
                        "booking {id}: confirmed but its money is owed back or refunded"
                    );
                    for seat in &booking.seats {
                        ensure!(
                            self.seats.get(*seat as usize) == Some(&Seat::Booked(*id)),
                            "booking {id}: seat {seat} is not its"
                        );
                    }
                }
                BookingState::Cancelled => {
                    ensure!(
                        payment.refund_required() || payment.state == PaymentState::Refunded,
                        "booking {id}: cancelled but neither refunded nor owed a refund"
                    );
                }
            }
        }
        for (id, payment) in &self.payments {
            ensure!(payment.id == *id, "payment {id} stored under another id");
            let hold = self.holds.get(&payment.hold).ok_or(format!("payment {id}: no hold"))?;
            ensure!(hold.session == payment.session, "payment {id}: session differs from hold");
            ensure!(payment.price == hold.price, "payment {id}: price differs from the quote");
            ensure!(hold.payments.contains(id), "payment {id}: not among its hold's attempts");
        }
        for (event, payment) in &self.provider_events {
            ensure!(self.payments.contains_key(payment), "provider event {event}: no payment");
        }
        Ok(())
    }

    fn check_idempotency(&self) -> Result<(), String> {
        ensure!(
            self.idempotency.len() == self.idempotency_deadlines.len(),
            "idempotency index size differs"
        );
        for (expires_ms, session, key) in &self.idempotency_deadlines {
            let record = self
                .idempotency
                .get(&(*session, *key))
                .ok_or(format!("idempotency index names a missing record {key}"))?;
            ensure!(record.expires_ms == *expires_ms, "idempotency record {key}: deadline differs");
        }
        Ok(())
    }

    fn check_lane(&self) -> Result<(), String> {
        let lane = &self.lane;
        let mut granted = 0usize;
        let mut live = 0usize;
        let mut granted_max: Option<u64> = None;
        for (id, ticket) in &lane.tickets {
            ensure!(ticket.id == *id, "ticket {id} stored under another id");
            if ticket.state.grant().is_some() {
                granted_max = granted_max.max(Some(id.0));
            }
            match ticket.state {
                TicketState::Waiting => {
                    live += 1;
                    ensure!(lane.waiting.contains(id), "ticket {id}: waiting, not in line");
                    let limit_ms = ticket.joined_ms + self.policy.ticket_wait_ms;
                    ensure!(
                        lane.waiting_deadlines.contains(&(limit_ms, *id)),
                        "ticket {id}: missing from the waiting deadline index"
                    );
                }
                TicketState::Granted { grant } => {
                    live += 1;
                    granted += 1;
                    ensure!(
                        lane.granted.contains(&(grant.deadline_ms, *id)),
                        "ticket {id}: missing from the grant index"
                    );
                }
                TicketState::Consumed { .. }
                | TicketState::Left { .. }
                | TicketState::Expired { .. } => {}
            }
            if ticket.state.is_live() {
                ensure!(
                    lane.live_by_session.get(&ticket.session) == Some(id),
                    "ticket {id}: live but not its session's live ticket"
                );
            }
        }
        ensure!(granted == lane.granted.len(), "the grant index has stale entries");
        ensure!(live == lane.live_by_session.len(), "live tickets per session do not match");
        ensure!(lane.waiting.len() == lane.waiting_deadlines.len(), "waiting index sizes differ");
        ensure!(
            granted as u64 <= u64::from(lane.window),
            "{granted} grants outstanding, window {}",
            lane.window
        );
        if let (Some(granted_max), Some(first_waiting)) = (granted_max, lane.waiting.first()) {
            ensure!(
                granted_max < first_waiting.0,
                "ticket {granted_max} was granted while earlier ticket {first_waiting} waits"
            );
        }
        Ok(())
    }

    fn check_waitlist(&self) -> Result<(), String> {
        let waitlist = &self.waitlist;
        let mut waiting = 0usize;
        let mut active = 0usize;
        for (id, entry) in &waitlist.entries {
            ensure!(entry.id == *id && entry.order.seq == id.0, "entry {id}: bad id or order");
            ensure!(
                entry.quantity >= 1 && usize::from(entry.quantity) <= SEATS_PER_HOLD_MAX,
                "entry {id}: bad quantity"
            );
            match entry.state {
                WaitlistEntryState::Waiting => {
                    waiting += 1;
                    active += 1;
                    ensure!(waitlist.waiting.contains(&entry.order), "entry {id}: not in line");
                }
                WaitlistEntryState::Offered { offer } => {
                    active += 1;
                    let found = waitlist
                        .offers
                        .get(&offer)
                        .ok_or(format!("entry {id}: no offer {offer}"))?;
                    ensure!(
                        found.state == OfferState::Open && found.entry == *id,
                        "entry {id}: its offer {offer} is not open for it"
                    );
                }
                _ => {}
            }
            if entry.state.is_active() {
                ensure!(
                    waitlist.active_by_session.get(&entry.session) == Some(id),
                    "entry {id}: active but not its session's entry"
                );
            }
        }
        ensure!(waiting == waitlist.waiting.len(), "the waiting line has stale entries");
        ensure!(active == waitlist.active_by_session.len(), "active entries per session differ");

        let mut open = 0usize;
        for (id, offer) in &waitlist.offers {
            ensure!(offer.id == *id, "offer {id} stored under another id");
            let entry =
                waitlist.entries.get(&offer.entry).ok_or(format!("offer {id}: no entry"))?;
            ensure!(entry.offer() == Some(*id), "offer {id}: its entry points elsewhere");
            let agrees = match (offer.state, entry.state) {
                (OfferState::Open, WaitlistEntryState::Offered { .. })
                | (OfferState::Accepted { .. }, WaitlistEntryState::Accepted { .. })
                | (OfferState::Expired, WaitlistEntryState::Expired { .. })
                | (OfferState::Withdrawn, WaitlistEntryState::Left { .. }) => true,
                (OfferState::Declined, state) => matches!(
                    state,
                    WaitlistEntryState::Declined { .. } | WaitlistEntryState::Left { .. }
                ),
                _ => false,
            };
            ensure!(agrees, "offer {id} is {:?} but its entry is {:?}", offer.state, entry.state);
            if offer.state == OfferState::Open {
                open += 1;
                ensure!(
                    waitlist.offer_deadlines.contains(&(offer.deadline_ms, *id)),
                    "offer {id}: missing from the deadline index"
                );
                for seat in &offer.seats {
                    ensure!(
                        self.seats.get(*seat as usize) == Some(&Seat::Offered(*id)),
                        "offer {id}: seat {seat} is not under this offer"
                    );
                }
            }
            if let OfferState::Accepted { hold } = offer.state {
                let found = self.holds.get(&hold).ok_or(format!("offer {id}: no hold {hold}"))?;
                ensure!(found.offer == Some(*id), "offer {id}: hold {hold} is not from it");
            }
        }
        ensure!(
            open == waitlist.offer_deadlines.len(),
            "the offer deadline index has stale entries"
        );

        ensure!(
            waitlist.pooled_since.keys().eq(waitlist.pool.iter()),
            "the pool's times are not those of its seats"
        );
        if waitlist.waiting.is_empty() {
            ensure!(waitlist.pool.is_empty(), "seats are pooled with nobody waiting");
        } else if let Some(head) = waitlist.next_in_line() {
            let head_quantity = waitlist
                .entries
                .get(&EntryId(head.seq))
                .ok_or("the head of the line has no entry")?
                .quantity;
            ensure!(
                waitlist.pool.len() < usize::from(head_quantity),
                "the pool ({}) could serve the head of the line ({head_quantity})",
                waitlist.pool.len()
            );
        }
        self.check_waitlist_policy()?;
        self.check_waitlist_order()
    }

    /// The policy's draw order holds exactly the waiting entries of the draw, under their keys,
    /// and nobody was served from a lottery not drawn.
    fn check_waitlist_policy(&self) -> Result<(), String> {
        let waitlist = &self.waitlist;
        for (key, id) in &waitlist.policy.drawn {
            let entry = waitlist.entries.get(id).ok_or(format!("drawn entry {id}: no entry"))?;
            ensure!(entry.state == WaitlistEntryState::Waiting, "drawn entry {id} is not waiting");
            ensure!(waitlist.drawn_key(entry) == Some(*key), "drawn entry {id}: wrong draw key");
        }
        let drawn_waiting = waitlist
            .waiting
            .iter()
            .filter(|order| waitlist.drawn_key(&waitlist.entries[&EntryId(order.seq)]).is_some())
            .count();
        ensure!(
            drawn_waiting == waitlist.policy.drawn.len(),
            "{drawn_waiting} drawn entries wait but the draw order holds {}",
            waitlist.policy.drawn.len()
        );
        // Nobody is served from a lottery before its draw.
        for offer in waitlist.offers.values() {
            let entry = waitlist.entries.get(&offer.entry).ok_or("an offer without entry")?;
            let change = waitlist.policy_at(entry.policy_version);
            ensure!(
                !matches!(change.rules.ordering, WaitlistOrdering::Lottery { .. })
                    || change.draw.is_some(),
                "offer {} went to entry {} of a lottery not drawn",
                offer.id,
                entry.id
            );
        }
        Ok(())
    }

    /// No offer went to an entry while an entry ordered before it was already waiting (ids come
    /// from one counter per show, so a smaller id was created earlier).
    fn check_waitlist_order(&self) -> Result<(), String> {
        let waitlist = &self.waitlist;
        let key = |order: &OrderKey| waitlist.serving_key(&waitlist.entries[&EntryId(order.seq)]);
        let mut waiting: Vec<_> =
            waitlist.waiting.iter().map(|order| (order.seq, key(order))).collect();
        waiting.sort_unstable();
        let mut prefix_min = Vec::with_capacity(waiting.len());
        for (_, order) in &waiting {
            let min = prefix_min.last().map_or(*order, |previous| std::cmp::min(*previous, *order));
            prefix_min.push(min);
        }
        for offer in waitlist.offers.values() {
            let served = waitlist
                .serving_key(waitlist.entries.get(&offer.entry).ok_or("an offer without entry")?);
            let earlier = waiting.partition_point(|(seq, _)| *seq < offer.id.0);
            if earlier > 0 {
                let best_waiting = prefix_min[earlier - 1];
                ensure!(
                    best_waiting > served,
                    "offer {} went to {:?} while {:?} (ahead) was waiting",
                    offer.id,
                    served,
                    best_waiting
                );
            }
        }
        Ok(())
    }
}
