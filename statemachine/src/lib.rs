//! The booking rules: a pure, deterministic state machine for one Raft group.
//!
//! Every replica of a group applies the same log through [`Group::apply`] and reaches the same
//! state, so this crate has no clock, no randomness, no I/O, no floats in decisions and only
//! ordered maps. Time is the leader-stamped log time carried by each [`Entry`], kept monotonic.
//! Business rejections are [`Rejection`] values inside each command's [`Outcome`]; a broken
//! invariant is a panic, never silently repaired.
//!
//! The rules live one concept per file: shows (`show.rs`), holds (`hold.rs`), checkout and
//! payments (`payment.rs`), bookings (`booking.rs`), the admission lane (`admission.rs`), the
//! waitlist (`waitlist.rs`), expiry (`expiry.rs`), idempotency, audit and outbox, and the
//! metadata group's show placement (`placement.rs`) and catalog (`catalog.rs`), and what leaves the
//! state for archives: ended shows (`archive.rs`) and old terminal records (`retention.rs`), and moving a show between
//! groups (`moving.rs`). What a command answers its proposer (its
//! outcome and the view of what it wrote) is in `answer.rs`. Reads are in
//! `read.rs`, rejections a leader may answer without a log entry in `precheck.rs`, snapshots in `snapshot.rs`, invariants in `invariants.rs`.

mod admission;
mod answer;
mod archive;
mod audit;
mod booking;
mod catalog;
pub mod check;
mod command;
mod cow;
mod delivery;
mod digests;
mod erasure;
mod expiry;
mod features;
mod hold;
mod idempotency;
mod ids;
pub mod inject;
mod invariants;
pub mod limits;
mod moving;
mod outbox;
mod outcome;
mod payment;
mod placement;
mod precheck;
mod read;
mod retention;
mod show;
mod snapshot;
mod state;
mod waitlist;
mod waitlist_policy;

pub use answer::{Answer, Written};
pub use archive::{
    ARCHIVE_FORMAT, ARCHIVE_FORMAT_VERSION, ArchiveError, ArchiveHeader, ArchiveLine, ArchivedShow,
    AuditLine, ShowRecord, archive_digest, archived_trail, read_archive,
};
pub use audit::{Audit, AuditRecord, EntityKind, EntityRef, OrderKey, Reason, StateName};
pub use catalog::{
    Catalog, CatalogCommand, CatalogKind, Change, EventSpec, HallSpec, ListingSpec, Record, Row,
    SeatPlace, Section, VenueSpec,
};
pub use command::{
    ClientCommand, ClientRequest, Command, Entry, OperatorCommand, PaymentOutcome, PaymentResult,
    SeatRange, ShowPolicy, ShowSpec,
};
pub use cow::{CowMap, CowSet, CowVec};
pub use delivery::{DeadLetter, Delivery, DeliveryCommand, Failure, Sink, SinkName};
pub use digests::Digests;
pub use features::{FEATURE_LEVEL, FEATURE_LEVEL_MOVES};
pub use idempotency::IdempotencyRecord;
pub use ids::{
    Actor, BookingId, CapacityEventId, Currency, EntryId, EventId, HallId, HoldId, IdempotencyKey,
    Money, OfferId, OutboxId, PaymentId, ProviderEventId, SeatNo, SeatSet, SeatSetError, SessionId,
    ShowId, TicketId, VenueId,
};
pub use moving::ShowMove;
pub use outbox::{Event, Outbox, OutboxEvent, RefundReason};
pub use outcome::{HoldReceipt, Outcome, PaymentEffect, Rejection, Reply};
pub use retention::COMPACTION_FORMAT;

/// Whether this build has the `verify` feature: every invariant checked after every applied
/// entry (see [`Group::apply`]). Binaries report it (`bookingd --version`) so that a test can
/// tell that the nodes it runs check themselves.
pub const VERIFY: bool = cfg!(feature = "verify");
pub use placement::{METADATA_GROUP, Placement};
pub use read::{
    AsOf, BookingView, EntryWithOffer, HoldView, OfferView, PaymentView, SeatMap, SeatStatus,
    TicketView, WaitlistEntryView, WaitlistSkip,
};
pub use snapshot::{
    Digest, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_FORMAT_VERSION_MIN, ShowEncodings, SnapshotError,
};
pub use state::{
    Booking, BookingState, Grant, Group, Hold, HoldPayments, HoldState, HoldStatus, Lane,
    LotteryDraw, Offer, OfferState, OfferStatus, PaymentAttempt, PaymentState, PaymentStatus,
    PolicyChange, PolicyInForce, Seat, SeatCounts, Show, ShowStatus, Ticket, TicketState,
    TicketStatus, Waitlist, WaitlistEntry, WaitlistEntryState, WaitlistEntryStatus,
    WaitlistOrdering, WaitlistPolicy, WaitlistRules,
};
pub use waitlist_policy::{BAND_GUEST, ServingKey, draw_key};

use std::collections::BTreeMap;
use std::sync::Arc;

use limits::{BATCH_COMMANDS_MAX, TICK_EXPIRATIONS_MAX};
use state::Ctx;

impl Group {
    /// An empty group: no shows, log index 0, log time 0.
    pub fn new() -> Group {
        Group::default()
    }

    /// Applies one committed entry and returns one outcome per command, in order.
    ///
    /// Log time becomes `max(previous log time, entry.time_ms)`, with stamps clamped to
    /// `limits::LOG_TIME_MS_MAX`. An entry at or below the last applied index was applied
    /// before: it changes nothing and gets no outcomes. A rejected command changes nothing, and
    /// never affects the other commands of its batch.
    ///
    /// With the `verify` feature, every invariant (`check_invariants`) is checked after every
    /// applied entry.
    ///
    /// # Panics
    ///
    /// Only on a broken invariant (a bug), never on client input.
    pub fn apply(&mut self, entry: &Entry) -> Vec<Outcome> {
        let again = entry.index <= self.applied_index;
        if again && !inject::on(inject::Bug::ApplyTwice) {
            return Vec::new();
        }
        let (previous_index, previous_time_ms) = (self.applied_index, self.log_time_ms);
        self.applied_index = entry.index;
        self.log_time_ms = self.log_time_ms.max(entry.time_ms.min(limits::LOG_TIME_MS_MAX));
        let outcomes = if entry.commands.len() > BATCH_COMMANDS_MAX {
            let rejection =
                Rejection::invalid(format!("batch: at most {BATCH_COMMANDS_MAX} commands"));
            vec![Err(rejection); entry.commands.len()]
        } else {
            entry.commands.iter().map(|command| self.apply_command(command)).collect()
        };
        // Cheap postconditions of every entry: one outcome per command, the position moved
        // forward, and no command moved it.
        assert_eq!(outcomes.len(), entry.commands.len(), "one outcome per command");
        assert!(self.applied_index == entry.index && (entry.index > previous_index || again));
        assert!(
            previous_time_ms <= self.log_time_ms && self.log_time_ms <= limits::LOG_TIME_MS_MAX
        );
        self.verify_after_apply();
        outcomes
    }

    /// With the `verify` feature, checks every invariant of the whole group (a bug panics
    /// here, at the entry that caused it, not later at a snapshot); without it, nothing.
    fn verify_after_apply(&self) {
        if VERIFY && let Err(violation) = self.check_invariants() {
            panic!(
                "invariant broken after applying log index {} (verify): {violation}",
                self.applied_index
            );
        }
    }

    /// Applies an entry that carries no commands (a leader's blank or a membership entry):
    /// only the applied index and log time advance.
    pub fn apply_empty(&mut self, index: u64, time_ms: u64) {
        if index > self.applied_index || inject::on(inject::Bug::ApplyTwice) {
            self.applied_index = index;
            self.log_time_ms = self.log_time_ms.max(time_ms.min(limits::LOG_TIME_MS_MAX));
        }
    }

    /// Applies one command, asserting that a rejected one changed nothing that is cheap to
    /// compare (`Footprint`).
    fn apply_command(&mut self, command: &Command) -> Outcome {
        let before = self.footprint(command);
        let outcome = self.apply_command_unchecked(command);
        if outcome.is_err() {
            assert!(
                self.footprint(command) == before,
                "a rejected command changed the group: {command:?} -> {outcome:?}"
            );
        }
        outcome
    }

    /// What a command could change, in a form that is cheap to take before and after it.
    fn footprint(&self, command: &Command) -> Footprint {
        Footprint {
            outbox_last_id: self.outbox.last_id(),
            outbox_len: self.outbox.len(),
            // Delivery is small (a few sinks): compared whole, for its commands only.
            delivery: matches!(command, Command::Delivery(_)).then(|| self.delivery.clone()),
            shows: self.shows.len(),
            placed: self.placement.len(),
            catalog: self.catalog.revision(),
            show: command
                .show()
                .and_then(|show| self.shows.get(&show))
                .map(|show| show.footprint()),
        }
    }

    fn apply_command_unchecked(&mut self, command: &Command) -> Outcome {
        let now = self.log_time_ms;
        let index = self.applied_index;
        match command {
            Command::Client(client) => {
                let ClientCommand { show, session, key, ref request } = *client;
                request.validate()?;
                let show = show_entry(&mut self.shows, &self.archived, &self.moves, show)?;
                if let Some(stored) = show.replay(session, key, request, now) {
                    return stored;
                }
                let mut ctx = Ctx {
                    now,
                    index,
                    actor: Actor::Session(session),
                    audit: &mut self.audit,
                    outbox: &mut self.outbox,
                };
                let reply = show.apply_client(&mut ctx, session, request)?;
                show.remember(session, key, request.clone(), reply.clone(), now);
                Ok(reply)
            }
            Command::Operator(OperatorCommand::CreateShow(spec)) => {
                if self.shows.contains_key(&spec.show) || self.archived.contains_key(&spec.show) {
                    return Err(Rejection::ShowExists);
                }
                if self.shows.len() >= limits::SHOWS_PER_GROUP_MAX {
                    return Err(Rejection::GroupFull);
                }
                let show = Show::create(spec)?;
                let reply = Reply::ShowCreated { show: spec.show, seats: show.seat_count() };
                let mut ctx = Ctx {
                    now,
                    index,
                    actor: Actor::Operator,
                    audit: &mut self.audit,
                    outbox: &mut self.outbox,
                };
                show.audit_change(&mut ctx, None, Reason::Requested);
                self.shows.insert(spec.show, Arc::new(show));
                Ok(reply)
            }
            &Command::Operator(OperatorCommand::ArchiveShow { show, digest }) => {
                self.archive_show(show, digest)
            }
            &Command::Operator(OperatorCommand::CompactShow { show, before_ms, digest }) => {
                self.compact_show(show, before_ms, digest)
            }
            &Command::Operator(OperatorCommand::EraseSession { show, session, pseudonym }) => {
                self.erase_session(show, session, pseudonym)
            }
            &Command::Operator(OperatorCommand::FreezeShow { show, to }) => {
                self.require_level(FEATURE_LEVEL_MOVES)?;
                self.freeze_show(show, to)
            }
            Command::Operator(OperatorCommand::ImportShow { show, from, state, digest }) => {
                self.require_level(FEATURE_LEVEL_MOVES)?;
                self.import_show(*show, *from, state, *digest)
            }
            &Command::Operator(OperatorCommand::ActivateShow { show }) => {
                self.require_level(FEATURE_LEVEL_MOVES)?;
                self.activate_show(show)
            }
            &Command::Operator(OperatorCommand::DropShow { show, to }) => {
                self.require_level(FEATURE_LEVEL_MOVES)?;
                self.drop_show(show, to)
            }
            Command::Operator(operator) => {
                let operator = operator.clone();
                let show =
                    show_entry(&mut self.shows, &self.archived, &self.moves, operator.show())?;
                let mut ctx = Ctx {
                    now,
                    index,
                    actor: Actor::Operator,
                    audit: &mut self.audit,
                    outbox: &mut self.outbox,
                };
                show.apply_operator(&mut ctx, operator)
            }
            Command::Payment(outcome) => {
                let show = show_entry(&mut self.shows, &self.archived, &self.moves, outcome.show)?;
                let mut ctx = Ctx {
                    now,
                    index,
                    actor: Actor::Provider,
                    audit: &mut self.audit,
                    outbox: &mut self.outbox,
                };
                show.apply_payment(&mut ctx, outcome)
            }
            Command::Tick => {
                let mut budget = TICK_EXPIRATIONS_MAX;
                let mut more = false;
                // A show frozen for a move or arriving from one never changes until it serves.
                // A show with nothing to do is not touched, so that it stays shared with any
                // snapshot or checkpoint that holds it.
                let moves = &self.moves;
                let serving: Vec<ShowId> = self
                    .shows
                    .values()
                    .filter(|show| {
                        !matches!(
                            moves.get(&show.id),
                            Some(ShowMove::Leaving { .. } | ShowMove::Arriving { .. })
                        ) && show.tick_would_change(now)
                    })
                    .map(|show| show.id)
                    .collect();
                for id in serving {
                    let show = Arc::make_mut(self.shows.get_mut(&id).expect("listed above"));
                    let mut ctx = Ctx {
                        now,
                        index,
                        actor: Actor::System,
                        audit: &mut self.audit,
                        outbox: &mut self.outbox,
                    };
                    let expired = show.tick(&mut ctx, budget);
                    budget -= expired;
                    if budget == 0 {
                        more = true;
                        break;
                    }
                }
                more = more && self.has_due(now);
                Ok(Reply::Ticked { expired: TICK_EXPIRATIONS_MAX - budget, more })
            }
            &Command::AckOutbox { up_to } => {
                if up_to > self.outbox.last_id() {
                    return Err(Rejection::invalid("up_to: beyond the last outbox event"));
                }
                // Never past what a sink still needs: an event is trimmed only once every sink
                // is done with it.
                let up_to = self.delivery.done_by_all().map_or(up_to, |done| done.min(up_to));
                let trimmed = self.outbox.ack(up_to);
                Ok(Reply::OutboxAcked { up_to, trimmed })
            }
            Command::Delivery(command) => {
                self.delivery.apply(&mut self.outbox, self.log_time_ms, command)
            }
            &Command::AuditDigest { index: at, digest } => self.digests.record(index, at, digest),
            &Command::RefundCompleted { show, payment } => {
                let show = show_entry(&mut self.shows, &self.archived, &self.moves, show)?;
                let mut ctx = Ctx {
                    now,
                    index,
                    actor: Actor::Provider,
                    audit: &mut self.audit,
                    outbox: &mut self.outbox,
                };
                show.complete_refund(&mut ctx, payment)
            }
            &Command::Place { show, group } => self.placement.place(show, group),
            &Command::Relocate { show, from, to } => {
                self.require_level(FEATURE_LEVEL_MOVES)?;
                self.placement.relocate(show, from, to)
            }
            &Command::SetFeatureLevel { level } => self.set_feature_level(level),
            Command::Catalog(command) => self.catalog.apply(&self.placement, index, command),
        }
    }

    /// The last applied log index.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// The current log time (ms).
    pub fn log_time_ms(&self) -> u64 {
        self.log_time_ms
    }

    /// One show, if it is in this group.
    pub fn show(&self, show: ShowId) -> Option<&Show> {
        self.shows.get(&show).map(Arc::as_ref)
    }

    /// The group's shows, in id order.
    pub fn shows(&self) -> impl Iterator<Item = &Show> {
        self.shows.values().map(Arc::as_ref)
    }

    /// The outbox.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// What each outbox sink was given, and its dead letters.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The leaders' digests of the state at checkpoint indexes.
    pub fn digests(&self) -> &Digests {
        &self.digests
    }

    /// The audit log.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// Which data group holds each show (recorded by the metadata group).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// What buyers browse (recorded by the metadata group).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Whether a `Tick` at `now_ms` would expire or prune anything. A leader's tick worker asks
    /// this with its own clock before proposing, so an idle group writes no tick entries.
    pub fn has_due(&self, now_ms: u64) -> bool {
        self.shows.values().any(|show| self.serves(show.id) && show.has_due(now_ms))
    }
}

/// One show of a group to change, or why not (`show_moving`, `show_moved`, `show_archived`,
/// `show_not_found`).
fn show_entry<'a>(
    shows: &'a mut BTreeMap<ShowId, Arc<Show>>,
    archived: &BTreeMap<ShowId, ArchivedShow>,
    moves: &BTreeMap<ShowId, ShowMove>,
    show: ShowId,
) -> Result<&'a mut Show, Rejection> {
    match moves.get(&show) {
        Some(ShowMove::Leaving { .. } | ShowMove::Arriving { .. }) => {
            return Err(Rejection::ShowMoving);
        }
        Some(&ShowMove::Left { to, .. }) => return Err(Rejection::ShowMoved { group: to }),
        Some(ShowMove::Arrived { .. }) | None => {}
    }
    match shows.get_mut(&show) {
        // Copied here if a snapshot or checkpoint shares it; other shows stay shared.
        Some(found) => Ok(Arc::make_mut(found)),
        None if archived.contains_key(&show) => Err(Rejection::ShowArchived),
        None => Err(Rejection::ShowNotFound),
    }
}

/// The cheap summary of a group that a rejected command must leave as it found it.
#[derive(PartialEq)]
struct Footprint {
    outbox_last_id: u64,
    outbox_len: usize,
    delivery: Option<Delivery>,
    shows: usize,
    placed: usize,
    catalog: u64,
    show: Option<ShowFootprint>,
}

/// The cheap summary of a show: every counter and index size a rule moves.
#[derive(PartialEq)]
struct ShowFootprint {
    next_id: u64,
    status: ShowStatus,
    price_version: u32,
    counts: SeatCounts,
    sizes: [usize; 12],
    lane: (bool, u32),
    waitlist: (bool, u32),
}

impl Show {
    fn footprint(&self) -> ShowFootprint {
        ShowFootprint {
            next_id: self.next_id,
            status: self.status,
            price_version: self.price_version,
            counts: self.counts,
            sizes: [
                self.holds.len(),
                self.hold_deadlines.len(),
                self.live_holds_by_session.len(),
                self.bookings.len(),
                self.payments.len(),
                self.provider_events.len(),
                self.idempotency.len(),
                self.lane.tickets.len(),
                self.lane.granted.len(),
                self.waitlist.waiting.len(),
                self.waitlist.offer_deadlines.len(),
                self.waitlist.capacity_events.len(),
            ],
            lane: (self.lane.enabled, self.lane.window),
            waitlist: (self.waitlist.enabled, self.waitlist.policy_version),
        }
    }

    fn apply_client(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        request: &ClientRequest,
    ) -> Outcome {
        match *request {
            ClientRequest::Hold { ref seats, price_version, grant } => {
                self.hold(ctx, session, seats, price_version, grant)
            }
            ClientRequest::CancelHold { hold } => self.cancel_hold(ctx, session, hold),
            ClientRequest::Checkout { hold } => self.checkout(ctx, session, hold),
            ClientRequest::CancelBooking { booking } => self.cancel_booking(ctx, session, booking),
            ClientRequest::JoinQueue => self.join_queue(ctx, session),
            ClientRequest::LeaveQueue { ticket } => self.leave_queue(ctx, session, ticket),
            ClientRequest::JoinWaitlist { quantity, band } => {
                self.join_waitlist(ctx, session, quantity, band)
            }
            ClientRequest::LeaveWaitlist { entry } => self.leave_waitlist(ctx, session, entry),
            ClientRequest::AcceptOffer { offer } => self.accept_offer(ctx, session, offer),
            ClientRequest::DeclineOffer { offer } => self.decline_offer(ctx, session, offer),
        }
    }

    fn apply_operator(&mut self, ctx: &mut Ctx<'_>, command: OperatorCommand) -> Outcome {
        match command {
            OperatorCommand::CreateShow(_) => unreachable!("handled by the group"),
            OperatorCommand::OpenSales { .. } => self.open_sales(ctx),
            OperatorCommand::CloseSales { .. } => self.close_sales(ctx),
            OperatorCommand::CancelShow { .. } => Ok(self.cancel(ctx)),
            OperatorCommand::SetPrices { version, prices_minor, .. } => {
                self.set_prices(ctx, version, prices_minor)
            }
            OperatorCommand::ConfigureAdmission { enabled, window, .. } => {
                self.configure_admission(ctx, enabled, window)
            }
            OperatorCommand::ConfigureWaitlist { enabled, policy_version, .. } => {
                self.configure_waitlist(ctx, enabled, policy_version)
            }
            OperatorCommand::CapacityReleased { event, seats, .. } => {
                self.capacity_released(ctx, event, seats)
            }
            OperatorCommand::ConfigureWaitlistPolicy { policy_version, rules, .. } => {
                self.set_waitlist_policy(ctx, policy_version, rules)
            }
            OperatorCommand::DrawLottery { seed, .. } => self.draw_lottery(ctx, seed),
            OperatorCommand::ArchiveShow { .. }
            | OperatorCommand::CompactShow { .. }
            | OperatorCommand::EraseSession { .. }
            | OperatorCommand::FreezeShow { .. }
            | OperatorCommand::ImportShow { .. }
            | OperatorCommand::ActivateShow { .. }
            | OperatorCommand::DropShow { .. } => unreachable!("handled by the group"),
        }
    }
}
