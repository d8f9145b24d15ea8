//! The booking operations as both APIs serve them: one function per operation, taking checked
//! domain values and answering with the state machine's views, so that REST (`rest/`) and gRPC
//! (`api/`) only parse their requests and render these answers.
//!
//! Owns what an operation means beyond routing: which command a request is, the view a write
//! answers with, the reads of views (linearizable where the view is authoritative: holds,
//! bookings, tickets, waitlist entries, offers, audit trails; this replica's, labelled `as_of`,
//! for shows and seat maps unless asked otherwise), and the counting of decided holds in the
//! node's metrics. Never parses a wire format (the skins do), never routes by itself (the
//! service does) and never judges a rule (the state machine does).

use statemachine::{
    AsOf, AuditRecord, BAND_GUEST, BookingId, BookingView, CapacityEventId, CatalogCommand,
    CatalogKind, ClientCommand, ClientRequest, Command, DeadLetter, DeliveryCommand, EntityKind,
    EntryId, Group, HoldId, HoldView, IdempotencyKey, LotteryDraw, METADATA_GROUP, Money, OfferId,
    OfferView, OperatorCommand, OutboxId, PaymentEffect, PaymentId, PaymentOutcome, Rejection,
    Reply, SeatMap, SeatNo, SeatStatus, SessionId, ShowId, ShowMove, ShowPolicy, ShowStatus,
    SinkName, TicketId, TicketView, WaitlistRules, WaitlistSkip, Written,
};

pub use statemachine::EntryWithOffer;

use crate::error::ApiError;
use crate::search::SearchQuery;
use crate::service::{Decided, Service};

/// A show as listed: its settings and its seats by status, as the seat map counts them (an
/// overdue hold's seats count as free), from one replica's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShowSummary {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Its sales status.
    pub status: ShowStatus,
    /// Its currency.
    pub currency: statemachine::Currency,
    /// One price per class.
    pub prices_minor: Vec<u64>,
    /// The price version a hold must quote.
    pub price_version: u32,
    /// Its seats.
    pub seat_count: u32,
    /// Free seats.
    pub free: u32,
    /// Seats in live holds.
    pub held: u32,
    /// Sold seats.
    pub booked: u32,
    /// Seats kept for or offered to the waitlist.
    pub reserved: u32,
    /// Deadlines and limits.
    pub policy: ShowPolicy,
    /// Whether holds need an admission grant, and the lane's window.
    pub admission: (bool, u32),
    /// Whether the waitlist is on, and its policy version.
    pub waitlist: (bool, u32),
    /// The replica position this summary reflects.
    pub as_of: statemachine::AsOf,
}

impl ShowSummary {
    /// The summary of `show` in `state`, or `None` while it is not created there.
    fn read(state: &Group, show: ShowId, group: u64) -> Option<ShowSummary> {
        let found = state.show(show)?;
        let map = state.seat_map(show).ok()?;
        let count = |status: SeatStatus| {
            u32::try_from(map.seats.iter().filter(|seat| **seat == status).count())
                .unwrap_or(u32::MAX)
        };
        Some(ShowSummary {
            show,
            group,
            status: found.status,
            currency: found.currency,
            prices_minor: found.prices_minor.clone(),
            price_version: found.price_version,
            seat_count: found.seat_count(),
            free: count(SeatStatus::Free),
            held: count(SeatStatus::Held),
            booked: count(SeatStatus::Booked),
            reserved: count(SeatStatus::Reserved),
            policy: found.policy,
            admission: (found.lane.enabled, found.lane.window),
            waitlist: (found.waitlist.enabled, found.waitlist.policy_version),
            as_of: map.as_of,
        })
    }
}

/// A started checkout: the payment attempt to charge and by when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkout {
    /// The show.
    pub show: ShowId,
    /// The hold, now processing.
    pub hold: HoldId,
    /// The payment attempt, stable across checkout retries.
    pub payment: PaymentId,
    /// What to charge.
    pub price: Money,
    /// Log time by which the payment must succeed.
    pub deadline_ms: u64,
}

/// What a capacity-released event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityReleased {
    /// The show.
    pub show: ShowId,
    /// Seats that went to the waitlist (0 for a duplicate).
    pub seats_released: u32,
    /// Whether the event id had been processed before.
    pub duplicate: bool,
}

/// An entity's audit trail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditTrail {
    /// The show.
    pub show: ShowId,
    /// The entity's kind.
    pub kind: EntityKind,
    /// Its id within the show.
    pub id: u64,
    /// Every transition, oldest first.
    pub records: Vec<AuditRecord>,
    /// For a waitlist entry: the offers made to others while it waited.
    pub skips: Option<Vec<WaitlistSkip>>,
    /// The position read.
    pub as_of: statemachine::AsOf,
}

/// How fresh a seat map must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// The show's group leader after ReadIndex: every acknowledged write is in it.
    Linearizable,
    /// This replica's current position.
    Replica,
}

/// Every show placed in the cluster that this node's replicas have created, in id order.
///
/// # Errors
///
/// `Internal` if a group's state cannot be read.
pub fn list_shows(service: &Service) -> Result<Vec<ShowSummary>, ApiError> {
    let mut shows = Vec::new();
    for placed in service.placements()? {
        let hosted = service.shared().group(placed.group)?;
        // A show placed but not yet created (or not yet applied here) is not listed.
        shows.extend(
            hosted.read_local(|state| ShowSummary::read(state, placed.show, placed.group))?,
        );
    }
    shows.sort_by_key(|summary| summary.show);
    Ok(shows)
}

/// One show's summary, from this node's replica of its group.
///
/// # Errors
///
/// `show_not_found`, or a routing error.
pub async fn get_show(service: &Service, show: ShowId) -> Result<ShowSummary, ApiError> {
    service
        .on_show_group(show, |hosted| async move {
            let group = hosted.id;
            let summary = hosted.read_local(|state| match state.inactive(show) {
                // Moved away: `on_show_group` asks where it went.
                Some(moved @ Rejection::ShowMoved { .. }) => Err(moved),
                _ => ShowSummary::read(state, show, group).ok_or_else(|| {
                    state.show_or_archived(show).err().unwrap_or(Rejection::ShowNotFound)
                }),
            })?;
            Ok(summary?)
        })
        .await
}

/// A show's seat map, as fresh as asked.
///
/// # Errors
///
/// `show_not_found`, or a routing error (`NotLeader` for a linearizable read elsewhere).
pub async fn seat_map(
    service: &Service,
    show: ShowId,
    freshness: Freshness,
) -> Result<SeatMap, ApiError> {
    let read = |state: &Group| state.seat_map(show);
    match freshness {
        Freshness::Linearizable => service.read_linearizable(show, read).await,
        Freshness::Replica => service.read_local(show, read).await,
    }
}

/// A show's sales status after the operator opened or closed its sales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SalesChanged {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Its sales status now.
    pub status: ShowStatus,
    /// Whether the show already had this status (a repeat): nothing changed.
    pub duplicate: bool,
}

/// Changes a show's sales status (open or close), and says where the show lives and its status
/// now. Opening an open show (or closing a closed one) changes nothing and says `duplicate`, so
/// an operator's retry is safe.
///
/// # Errors
///
/// The command's rejection (`show_cancelled`, ...), or a routing error.
pub async fn change_status(
    service: &Service,
    command: OperatorCommand,
) -> Result<SalesChanged, ApiError> {
    let show = command.show();
    let (status, duplicate) = match service.operator(command).await? {
        Reply::ShowStatusChanged { status, duplicate, .. } => (status, duplicate),
        other => return Err(ApiError::unexpected(other)),
    };
    let group = service.group_of(show).await?.id;
    Ok(SalesChanged { show, group, status, duplicate })
}

/// New prices in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PricesSet {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// The price version a hold must quote from now on.
    pub version: u32,
    /// One price per seat class, in minor units.
    pub prices_minor: Vec<u64>,
    /// Whether these prices were already in force under this version (a repeat): nothing
    /// changed.
    pub duplicate: bool,
}

/// Sets a show's prices under `version`, which must be the show's current version plus one: a
/// hold quoting an older version is refused `price_version_mismatch` from then on. The version
/// and prices in force asked for again (a retry whose answer was lost) answer `duplicate`.
///
/// # Errors
///
/// `price_version_mismatch` (with the current version) for a version that is neither the next
/// one nor, with the same prices, the one in force,
/// `invalid_argument` for prices that are not one per seat class of the show, `show_cancelled`,
/// or a routing error.
pub async fn set_prices(
    service: &Service,
    show: ShowId,
    version: u32,
    prices_minor: Vec<u64>,
) -> Result<PricesSet, ApiError> {
    let command = OperatorCommand::SetPrices { show, version, prices_minor: prices_minor.clone() };
    let (version, duplicate) = match service.operator(command).await? {
        Reply::PricesSet { version, duplicate, .. } => (version, duplicate),
        other => return Err(ApiError::unexpected(other)),
    };
    let group = service.group_of(show).await?.id;
    Ok(PricesSet { show, group, version, prices_minor, duplicate })
}

/// A show's admission lane as the operator configured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfigured {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Whether holds need a grant.
    pub enabled: bool,
    /// Grants outstanding at once.
    pub window: u32,
}

/// Turns a show's admission lane on or off and sets its window (checked by the caller with
/// `input::admission_window`). Turning it off ends every ticket in line; setting what already
/// holds changes nothing.
///
/// # Errors
///
/// `invalid_argument` for a window below the grants outstanding, `show_cancelled`, or a
/// routing error.
pub async fn configure_admission(
    service: &Service,
    show: ShowId,
    enabled: bool,
    window: u32,
) -> Result<AdmissionConfigured, ApiError> {
    let command = OperatorCommand::ConfigureAdmission { show, enabled, window };
    let (enabled, window) = match service.operator(command).await? {
        Reply::AdmissionConfigured { enabled, window, .. } => (enabled, window),
        other => return Err(ApiError::unexpected(other)),
    };
    let group = service.group_of(show).await?.id;
    Ok(AdmissionConfigured { show, group, enabled, window })
}

/// A show's waitlist as the operator configured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitlistConfigured {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Whether buyers may join.
    pub enabled: bool,
    /// The ordering policy version in force (unchanged by this call).
    pub policy_version: u32,
}

/// Turns a show's waitlist on or off, keeping its ordering policy version: the version is read
/// linearizably on the group's leader first, so the command names the version in force (a
/// command with an older one would be refused, since a version never goes back). Turning it
/// off ends every waiting entry; setting what already holds changes nothing.
///
/// # Errors
///
/// `show_not_found`, `show_cancelled`, or a routing error.
pub async fn configure_waitlist(
    service: &Service,
    show: ShowId,
    enabled: bool,
) -> Result<WaitlistConfigured, ApiError> {
    let policy_version = service
        .read_linearizable(show, |state| {
            state
                .show(show)
                .map(|found| found.waitlist.policy_version)
                .ok_or(Rejection::ShowNotFound)
        })
        .await?;
    let command = OperatorCommand::ConfigureWaitlist { show, enabled, policy_version };
    let (enabled, policy_version) = match service.operator(command).await? {
        Reply::WaitlistConfigured { enabled, policy_version, .. } => (enabled, policy_version),
        other => return Err(ApiError::unexpected(other)),
    };
    let group = service.group_of(show).await?.id;
    Ok(WaitlistConfigured { show, group, enabled, policy_version })
}

/// A show's waitlist rules, as in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitlistPolicyView {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// The policy version in force.
    pub policy_version: u32,
    /// Its rules.
    pub rules: WaitlistRules,
    /// The lottery's draw, once drawn.
    pub draw: Option<LotteryDraw>,
    /// Whether these rules were in force already (a retry changed nothing).
    pub duplicate: bool,
}

/// Reads a show's waitlist rules linearizably on its group's leader.
///
/// # Errors
///
/// `show_not_found`, or a routing error.
pub async fn waitlist_policy(
    service: &Service,
    show: ShowId,
) -> Result<WaitlistPolicyView, ApiError> {
    let (policy_version, policy) = service
        .read_linearizable(show, |state| {
            let found = state.show(show).ok_or(Rejection::ShowNotFound)?;
            Ok((found.waitlist.policy_version, found.waitlist.policy_now()))
        })
        .await?;
    let group = service.group_of(show).await?.id;
    Ok(WaitlistPolicyView {
        show,
        group,
        policy_version,
        rules: policy.rules,
        draw: policy.draw,
        duplicate: false,
    })
}

/// Sets a show's waitlist rules: the version in force is read linearizably first, and the
/// command names the next one (or the same one, when these rules are in force: a retry, which
/// changes nothing). Two operators changing the rules at once: one of them is refused
/// `invalid_argument` (its version is no longer above the current one) and may retry.
///
/// # Errors
///
/// `show_not_found`, `show_cancelled`, `waitlist_in_use` (the ordering cannot change while
/// anyone waits), `invalid_argument`, or a routing error.
pub async fn set_waitlist_policy(
    service: &Service,
    show: ShowId,
    rules: WaitlistRules,
) -> Result<WaitlistPolicyView, ApiError> {
    let current = waitlist_policy(service, show).await?;
    let policy_version =
        if current.rules == rules { current.policy_version } else { current.policy_version + 1 };
    let command = OperatorCommand::ConfigureWaitlistPolicy { show, policy_version, rules };
    let (policy_version, rules, duplicate) = match service.operator(command).await? {
        Reply::WaitlistPolicySet { policy_version, rules, duplicate, .. } => {
            (policy_version, rules, duplicate)
        }
        other => return Err(ApiError::unexpected(other)),
    };
    let draw = if rules.ordering == current.rules.ordering { current.draw } else { None };
    Ok(WaitlistPolicyView { show, group: current.group, policy_version, rules, draw, duplicate })
}

/// What a lottery's draw did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LotteryDrawn {
    /// The show.
    pub show: ShowId,
    /// The seed, recorded in the log.
    pub seed: u64,
    /// Entries in the draw.
    pub entries: u32,
    /// Whether it was drawn before with this seed (a retry).
    pub duplicate: bool,
}

/// Draws a show's lottery with `seed`, or with a random one when none is given.
///
/// # Errors
///
/// `show_not_found`, `show_cancelled`, `not_a_lottery`, `lottery_not_due`,
/// `lottery_already_drawn`, or a routing error.
pub async fn draw_lottery(
    service: &Service,
    show: ShowId,
    seed: Option<u64>,
) -> Result<LotteryDrawn, ApiError> {
    let seed = match seed {
        Some(seed) => seed,
        None => service.shared().sessions.random_seed()?,
    };
    match service.operator(OperatorCommand::DrawLottery { show, seed }).await? {
        Reply::LotteryDrawn { seed, entries, duplicate, .. } => {
            Ok(LotteryDrawn { show, seed, entries, duplicate })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// A priority-band claim, issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BandClaim {
    /// The claim, for the buyer to attach when joining.
    pub claim: String,
    /// Its band.
    pub band: u8,
    /// When it stops being accepted (Unix seconds).
    pub expires_at_s: u64,
}

/// Issues a claim of `band` (0..=6; guests are band 7) on `show`'s waitlist for the session of
/// `session_token`, valid for `valid_for_s` (default a day, at most a week).
///
/// # Errors
///
/// `invalid_argument` for a band, validity or token out of bounds, `show_not_found`, or a
/// routing error.
pub async fn issue_band_claim(
    service: &Service,
    show: ShowId,
    session_token: &str,
    band: u32,
    valid_for_s: Option<u64>,
) -> Result<BandClaim, ApiError> {
    if band >= u32::from(BAND_GUEST) {
        return Err(ApiError::InvalidArgument(format!(
            "band: must be 0..={} (guests are band {BAND_GUEST})",
            BAND_GUEST - 1
        )));
    }
    let valid_for_s = valid_for_s.unwrap_or(crate::sessions::CLAIM_VALID_S_DEFAULT);
    if valid_for_s == 0 || valid_for_s > crate::sessions::CLAIM_VALID_S_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "valid_for_s: must be 1..={}",
            crate::sessions::CLAIM_VALID_S_MAX
        )));
    }
    let shared = service.shared();
    let session = shared.sessions.session_of_token(session_token).map_err(|_| {
        ApiError::InvalidArgument("session_token: not a session token of this cluster".into())
    })?;
    service.group_of(show).await?;
    let expires_at_s = shared.clock.now_ms() / 1_000 + valid_for_s;
    let band = band as u8;
    let claim = shared.sessions.issue_claim(show, session, band, expires_at_s);
    Ok(BandClaim { claim, band, expires_at_s })
}

/// What cancelling a show did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Live holds released.
    pub holds_released: u32,
    /// Confirmed bookings cancelled, each given refund work (the refund worker gives the money
    /// back).
    pub bookings_refunded: u32,
    /// Waiters (admission tickets and waitlist entries) told.
    pub waiters_told: u32,
    /// Whether the show was cancelled before (a retry): nothing changed, and the counts are 0.
    pub duplicate: bool,
}

/// Cancels a show: every hold is released, every confirmed booking is cancelled with refund
/// work, every holder, booker and waiter is told. Idempotent: a show cancelled before answers
/// `duplicate`.
///
/// # Errors
///
/// `show_not_found`, or a routing error.
pub async fn cancel_show(service: &Service, show: ShowId) -> Result<Cancelled, ApiError> {
    let (holds_released, bookings_refunded, waiters_told, duplicate) = match service
        .operator(OperatorCommand::CancelShow { show })
        .await?
    {
        Reply::ShowCancelled {
            holds_released, bookings_refunded, waiters_told, duplicate, ..
        } => (holds_released, bookings_refunded, waiters_told, duplicate),
        other => return Err(ApiError::unexpected(other)),
    };
    let group = service.group_of(show).await?.id;
    Ok(Cancelled { show, group, holds_released, bookings_refunded, waiters_told, duplicate })
}

/// Releases free seats of a show to its waitlist, once per event id.
///
/// # Errors
///
/// The command's rejection (seats not free, show cancelled), or a routing error.
pub async fn capacity_released(
    service: &Service,
    show: ShowId,
    event: CapacityEventId,
    seats: Vec<SeatNo>,
) -> Result<CapacityReleased, ApiError> {
    let command = OperatorCommand::CapacityReleased { show, event, seats };
    match service.operator(command).await? {
        Reply::CapacityReleased { seats_released, duplicate, .. } => {
            Ok(CapacityReleased { show, seats_released, duplicate })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// Records a payment provider's verified outcome, and says what it did.
///
/// # Errors
///
/// The outcome's rejection, or a routing error.
pub async fn payment(
    service: &Service,
    outcome: PaymentOutcome,
) -> Result<PaymentEffect, ApiError> {
    match service.payment(outcome).await? {
        Reply::PaymentRecorded { effect, .. } => Ok(effect),
        other => Err(ApiError::unexpected(other)),
    }
}

/// What a decided write answers: the view of what it wrote, which its apply read as the entry
/// left it (never read again), of the kind `take` picks. A retry whose entity has since been
/// removed answers that entity's rejection (`hold_not_found`, ...).
fn answer<T>(decided: Decided, take: fn(Written) -> Option<T>) -> Result<T, ApiError> {
    let Decided { reply, written } = decided;
    match written {
        Some(Ok(written)) => take(written).ok_or_else(|| ApiError::unexpected(reply)),
        Some(Err(rejection)) => Err(ApiError::Rejected(rejection)),
        None => Err(ApiError::unexpected(reply)),
    }
}

fn hold_view(written: Written) -> Option<HoldView> {
    if let Written::Hold(view) = written { Some(view) } else { None }
}

fn booking_view(written: Written) -> Option<BookingView> {
    if let Written::Booking(view) = written { Some(view) } else { None }
}

fn ticket_view(written: Written) -> Option<TicketView> {
    if let Written::Ticket(view) = written { Some(view) } else { None }
}

fn entry_view(written: Written) -> Option<EntryWithOffer> {
    if let Written::Entry(view) = written { Some(view) } else { None }
}

fn offer_view(written: Written) -> Option<OfferView> {
    if let Written::Offer(view) = written { Some(view) } else { None }
}

/// Holds seats for `session`, all or nothing, and answers with the hold as made.
///
/// # Errors
///
/// The hold's rejection (`seat_unavailable` with the taken seats, ...), or a routing error.
pub async fn hold(service: &Service, command: ClientCommand) -> Result<HoldView, ApiError> {
    answer(service.client(command).await?, hold_view)
}

/// Decides many holds, each exactly as [`hold`] would, one result per command in order.
pub async fn hold_many(
    service: &Service,
    commands: Vec<ClientCommand>,
) -> Vec<Result<HoldView, ApiError>> {
    let decided = service.clients(commands).await;
    decided.into_iter().map(|decision| answer(decision?, hold_view)).collect()
}

/// Cancels a held hold of `session`; its seats are released.
///
/// # Errors
///
/// The rejection (`hold_not_active`, `payment_in_progress`, `hold_expired`, ...), or a routing
/// error.
pub async fn cancel_hold(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    hold: HoldId,
) -> Result<HoldView, ApiError> {
    let command = ClientCommand { show, session, key, request: ClientRequest::CancelHold { hold } };
    answer(service.client(command).await?, hold_view)
}

/// Starts paying for a held hold of `session` (a retry gets the same payment attempt).
///
/// # Errors
///
/// The rejection, or a routing error.
pub async fn checkout(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    hold: HoldId,
) -> Result<Checkout, ApiError> {
    let command = ClientCommand { show, session, key, request: ClientRequest::Checkout { hold } };
    match service.client(command).await?.reply {
        Reply::CheckoutStarted { hold, payment, price, deadline_ms } => {
            Ok(Checkout { show, hold, payment, price, deadline_ms })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// Cancels a confirmed booking of `session`; its seats return and refund work is queued.
///
/// # Errors
///
/// The rejection (`booking_not_cancellable`, ...), or a routing error.
pub async fn cancel_booking(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    booking: BookingId,
) -> Result<BookingView, ApiError> {
    let request = ClientRequest::CancelBooking { booking };
    answer(service.client(ClientCommand { show, session, key, request }).await?, booking_view)
}

/// Joins a show's admission lane.
///
/// # Errors
///
/// The rejection (`admission_disabled`, `already_queued`, `queue_full`, ...), or a routing
/// error.
pub async fn join_queue(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
) -> Result<TicketView, ApiError> {
    let command = ClientCommand { show, session, key, request: ClientRequest::JoinQueue };
    answer(service.client(command).await?, ticket_view)
}

/// Leaves a show's admission lane.
///
/// # Errors
///
/// The rejection (`ticket_not_active`, ...), or a routing error.
pub async fn leave_queue(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    ticket: TicketId,
) -> Result<TicketView, ApiError> {
    let request = ClientRequest::LeaveQueue { ticket };
    answer(service.client(ClientCommand { show, session, key, request }).await?, ticket_view)
}

/// The priority band a session joins a show's waitlist in: the band of its claim, checked
/// (see `sessions.rs`), or without one the guest band, served after every claimed band. Bands
/// come from operator-signed claims, never from a buyer's own say; only priority-band ordering
/// uses them.
///
/// # Errors
///
/// The claim's error (`invalid_argument`, `forbidden`).
pub fn waitlist_band(
    service: &Service,
    show: ShowId,
    session: SessionId,
    claim: Option<&str>,
) -> Result<u8, ApiError> {
    let Some(claim) = claim else { return Ok(BAND_GUEST) };
    let shared = service.shared();
    shared.sessions.claimed_band(claim, show, session, shared.clock.now_ms() / 1_000)
}

/// Joins a sold-out show's waitlist with a party of `quantity` in `band` (from
/// [`waitlist_band`]).
///
/// # Errors
///
/// The rejection (`waitlist_disabled`, `not_sold_out`, `already_on_waitlist`, ...), or a
/// routing error.
pub async fn join_waitlist(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    quantity: u8,
    band: u8,
) -> Result<EntryWithOffer, ApiError> {
    let request = ClientRequest::JoinWaitlist { quantity, band };
    answer(service.client(ClientCommand { show, session, key, request }).await?, entry_view)
}

/// Leaves the waitlist; an open offer is declined and passed on.
///
/// # Errors
///
/// The rejection (`entry_not_active`, ...), or a routing error.
pub async fn leave_waitlist(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    entry: EntryId,
) -> Result<EntryWithOffer, ApiError> {
    let request = ClientRequest::LeaveWaitlist { entry };
    answer(service.client(ClientCommand { show, session, key, request }).await?, entry_view)
}

/// Accepts an offer: its seats become a hold of `session`.
///
/// # Errors
///
/// The rejection (`offer_not_active`, `offer_expired`, ...), or a routing error.
pub async fn accept_offer(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    offer: OfferId,
) -> Result<HoldView, ApiError> {
    let request = ClientRequest::AcceptOffer { offer };
    answer(service.client(ClientCommand { show, session, key, request }).await?, hold_view)
}

/// Declines an offer: its seats go to the next waiter.
///
/// # Errors
///
/// The rejection, or a routing error.
pub async fn decline_offer(
    service: &Service,
    show: ShowId,
    session: SessionId,
    key: IdempotencyKey,
    offer: OfferId,
) -> Result<OfferView, ApiError> {
    let request = ClientRequest::DeclineOffer { offer };
    answer(service.client(ClientCommand { show, session, key, request }).await?, offer_view)
}

/// A hold of `session`, read linearizably.
///
/// # Errors
///
/// `hold_not_found`, `not_owner`, or a routing error.
pub async fn get_hold(
    service: &Service,
    show: ShowId,
    hold: HoldId,
    session: SessionId,
) -> Result<HoldView, ApiError> {
    service.read_linearizable(show, |state| state.hold(show, hold, Some(session))).await
}

/// A booking of `session`, read linearizably.
///
/// # Errors
///
/// `booking_not_found`, `not_owner`, or a routing error.
pub async fn get_booking(
    service: &Service,
    show: ShowId,
    booking: BookingId,
    session: SessionId,
) -> Result<BookingView, ApiError> {
    service.read_linearizable(show, |state| state.booking(show, booking, Some(session))).await
}

/// A payment attempt, read linearizably: of `viewer` (`None`: the operator, who reads any).
///
/// # Errors
///
/// `payment_not_found`, `not_owner`, or a routing error.
pub async fn get_payment(
    service: &Service,
    show: ShowId,
    payment: PaymentId,
    viewer: Option<SessionId>,
) -> Result<statemachine::PaymentView, ApiError> {
    service.read_linearizable(show, |state| state.payment(show, payment, viewer)).await
}

/// An admission ticket of `session` and its place in line, read linearizably.
///
/// # Errors
///
/// `ticket_not_found`, `not_owner`, or a routing error.
pub async fn get_ticket(
    service: &Service,
    show: ShowId,
    ticket: TicketId,
    session: SessionId,
) -> Result<TicketView, ApiError> {
    service.read_linearizable(show, |state| state.ticket(show, ticket, Some(session))).await
}

/// A waitlist entry of `session`, its place in line and its offer, read linearizably.
///
/// # Errors
///
/// `entry_not_found`, `not_owner`, or a routing error.
pub async fn get_entry(
    service: &Service,
    show: ShowId,
    entry: EntryId,
    session: SessionId,
) -> Result<EntryWithOffer, ApiError> {
    service
        .read_linearizable(show, |state| {
            state.waitlist_entry_with_offer(show, entry, Some(session))
        })
        .await
}

/// An offer of `session`, read linearizably.
///
/// # Errors
///
/// `offer_not_found`, `not_owner`, or a routing error.
pub async fn get_offer(
    service: &Service,
    show: ShowId,
    offer: OfferId,
    session: SessionId,
) -> Result<OfferView, ApiError> {
    service.read_linearizable(show, |state| state.offer(show, offer, Some(session))).await
}

/// The audit trail of an entity that exists, read linearizably (operator).
///
/// # Errors
///
/// The entity's not-found rejection (`hold_not_found`, ...), `show_not_found`, or a routing
/// error.
pub async fn audit_trail(
    service: &Service,
    show: ShowId,
    kind: EntityKind,
    id: u64,
) -> Result<AuditTrail, ApiError> {
    let read = service
        .read_linearizable(show, |state| {
            let as_of = state.as_of();
            if state.archived().contains_key(&show) {
                return Ok(TrailRead::Archived(as_of));
            }
            match read_trail(state, show, kind, id) {
                Ok(trail) => Ok(TrailRead::Live(trail)),
                // Not in the live show: perhaps compacted out of it.
                Err(missing) if missing == entity_not_found(kind) => {
                    Ok(TrailRead::Compacted(as_of))
                }
                Err(rejection) => Err(rejection),
            }
        })
        .await?;
    let (as_of, archives) = match read {
        TrailRead::Live(trail) => return Ok(trail),
        TrailRead::Archived(as_of) => (as_of, vec![read_archive_file(service, show)?]),
        TrailRead::Compacted(as_of) => (as_of, read_segments(service, show)?),
    };
    for bytes in archives {
        let lines = statemachine::read_archive(&bytes)
            .map_err(|error| ApiError::Internal(format!("an archive of show {show}: {error}")))?;
        if let Some(records) = statemachine::archived_trail(&lines, kind, id) {
            // The offers made to others while an entry waited are not kept in an archive.
            let skips = (kind == EntityKind::WaitlistEntry).then(Vec::new);
            return Ok(AuditTrail { show, kind, id, records: records.to_vec(), skips, as_of });
        }
    }
    Err(ApiError::Rejected(entity_not_found(kind)))
}

/// Where an audit trail is: in the live state, or in the archive of an archived show, or
/// perhaps in an archive segment of records compacted out of a live show.
enum TrailRead {
    Live(AuditTrail),
    Archived(AsOf),
    Compacted(AsOf),
}

/// Every archive segment of records compacted out of `show` on this node, oldest first (none
/// in a simulator).
fn read_segments(service: &Service, show: ShowId) -> Result<Vec<Vec<u8>>, ApiError> {
    let Some(archives) = service.shared().archives.as_ref() else { return Ok(Vec::new()) };
    archives.segments(show).map_err(|error| {
        ApiError::Internal(format!("reading the segments of show {show}: {error}"))
    })
}

/// The bytes of an archived show's archive, as this node's replica wrote them.
///
/// # Errors
///
/// `NotFound` if this node has no archive of the show (the show is not archived, or this
/// replica caught up past its archiving through a snapshot: another replica has it);
/// `Internal` if the file cannot be read.
pub fn read_archive_file(service: &Service, show: ShowId) -> Result<Vec<u8>, ApiError> {
    let archives = service.shared().archives.as_ref().ok_or_else(|| {
        ApiError::NotFound("this node keeps no archives (it runs in a simulator)".to_owned())
    })?;
    match archives.read(show) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(ApiError::NotFound(format!(
            "no archive of show {show} on this node: the show is not archived, or this replica \
             caught up past its archiving through a snapshot (another replica has it)"
        ))),
        Err(error) => {
            Err(ApiError::Internal(format!("reading the archive of show {show}: {error}")))
        }
    }
}

/// What archiving a show did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Archived {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// The SHA-256 of its archive.
    pub digest: statemachine::Digest,
    /// The archive's length in bytes.
    pub bytes: u64,
    /// Whether it was archived before: nothing changed.
    pub duplicate: bool,
}

/// Archives a show: exports its archive from the leader's state (after ReadIndex, so every
/// acknowledged write is in it) and proposes `ArchiveShow` with the archive's digest; every
/// replica writes the archive before applying the entry that removes the show. Idempotent.
///
/// # Errors
///
/// `show_not_settled` (what remains), `archive_changed` (the show changed between the export
/// and the entry: call again), `show_not_found`, or a routing error.
pub async fn archive_show(service: &Service, show: ShowId) -> Result<Archived, ApiError> {
    let digest = service
        .read_linearizable(show, |state| match state.archived().get(&show) {
            Some(archived) => Ok(archived.digest),
            None => state.archive_export(show).map(|bytes| statemachine::archive_digest(&bytes)),
        })
        .await?;
    let group = service.group_of(show).await?.id;
    match service.operator(OperatorCommand::ArchiveShow { show, digest }).await? {
        Reply::ShowArchived { show, digest, bytes, duplicate } => {
            Ok(Archived { show, group, digest, bytes, duplicate })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// What erasing a session from one show did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Erased {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
    /// Records that named the session and now name a pseudonym.
    pub records: u32,
    /// Idempotency records of the session removed.
    pub idempotency_records: u32,
}

/// Erases a session from one show (deletion on demand): proposes `EraseSession` with a fresh
/// random pseudonym, drawn here once so every replica renames to the same one.
///
/// # Errors
///
/// As [`archive_show`]'s proposal: `show_not_found`, `show_archived`, leadership errors.
pub async fn erase_session(
    service: &Service,
    show: ShowId,
    session: SessionId,
) -> Result<Erased, ApiError> {
    let pseudonym = service.shared().sessions.pseudonym()?;
    let group = service.group_of(show).await?.id;
    match service.operator(OperatorCommand::EraseSession { show, session, pseudonym }).await? {
        Reply::SessionErased { show, records, idempotency_records } => {
            Ok(Erased { show, group, records, idempotency_records })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// The rejection for an entity of `kind` that does not exist.
fn entity_not_found(kind: EntityKind) -> Rejection {
    match kind {
        EntityKind::Hold => Rejection::HoldNotFound,
        EntityKind::Booking => Rejection::BookingNotFound,
        EntityKind::Payment => Rejection::PaymentNotFound,
        EntityKind::Ticket => Rejection::TicketNotFound,
        EntityKind::WaitlistEntry => Rejection::EntryNotFound,
        EntityKind::Offer => Rejection::OfferNotFound,
        EntityKind::Show => Rejection::ShowNotFound,
    }
}

fn read_trail(
    state: &Group,
    show: ShowId,
    kind: EntityKind,
    id: u64,
) -> Result<AuditTrail, Rejection> {
    let found = state.show(show).ok_or(Rejection::ShowNotFound)?;
    let exists = match kind {
        EntityKind::Hold => found.holds.contains_key(&HoldId(id)),
        EntityKind::Booking => found.bookings.contains_key(&BookingId(id)),
        EntityKind::Payment => found.payments.contains_key(&PaymentId(id)),
        EntityKind::Ticket => found.lane.tickets.contains_key(&TicketId(id)),
        EntityKind::WaitlistEntry => found.waitlist.entries.contains_key(&EntryId(id)),
        EntityKind::Offer => found.waitlist.offers.contains_key(&OfferId(id)),
        // A show's own trail: its id is the show's.
        EntityKind::Show => id == show.0,
    };
    if !exists {
        return Err(entity_not_found(kind));
    }
    let skips = match kind {
        EntityKind::WaitlistEntry => Some(state.waitlist_skips(show, EntryId(id), None)?),
        _ => None,
    };
    Ok(AuditTrail {
        show,
        kind,
        id,
        records: state.audit_trail(show, kind, id).to_vec(),
        skips,
        as_of: state.as_of(),
    })
}

/// One outbox sink of one data group, as this node's replica knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkStatus {
    /// The data group.
    pub group: u64,
    /// The sink.
    pub sink: SinkName,
    /// Every event up to this id is delivered to it or given up on.
    pub done_up_to: u64,
    /// Events it has not had yet.
    pub backlog: u64,
    /// Log time of the oldest event it has not had yet.
    pub oldest_undelivered_ms: Option<u64>,
    /// Its dead letters, and how many of them are asked to be replayed.
    pub dead_letters: u64,
    /// Dead letters asked to be replayed.
    pub replays: u64,
    /// Events delivered over its life.
    pub delivered_total: u64,
    /// Events given up on over its life.
    pub dead_lettered_total: u64,
    /// Dead letters dropped because it had too many.
    pub dead_letters_dropped: u64,
    /// Whether this node is configured to deliver to it (`--sink`).
    pub configured_here: bool,
    /// The replica position read.
    pub as_of: statemachine::AsOf,
}

/// A dead letter and where it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDeadLetter {
    /// The data group.
    pub group: u64,
    /// The sink.
    pub sink: SinkName,
    /// The letter.
    pub letter: DeadLetter,
}

/// The data groups this node hosts, in id order.
fn data_groups(
    service: &Service,
) -> impl Iterator<Item = &std::sync::Arc<crate::group::HostedGroup>> {
    service
        .shared()
        .groups
        .iter()
        .filter(|(id, _)| **id != METADATA_GROUP)
        .map(|(_, hosted)| hosted)
}

/// Every sink every data group tracks, from this node's replicas (each labelled `as_of`).
///
/// # Errors
///
/// `Internal` if a group's state cannot be read.
pub fn outbox_sinks(service: &Service) -> Result<Vec<SinkStatus>, ApiError> {
    let configured = &service.shared().config.sinks;
    let mut statuses = Vec::new();
    for hosted in data_groups(service) {
        let group = hosted.id;
        statuses.extend(hosted.read_local(|state| {
            state
                .delivery()
                .sinks()
                .map(|(name, sink)| {
                    let mut owed =
                        state.outbox().pending().filter(|event| !sink.is_done(event.id.0));
                    let oldest = owed.next().map(|event| event.log_time_ms);
                    SinkStatus {
                        group,
                        sink: name.clone(),
                        done_up_to: sink.done_up_to,
                        backlog: u64::from(oldest.is_some()) + owed.count() as u64,
                        oldest_undelivered_ms: oldest,
                        dead_letters: sink.dead_letters.len() as u64,
                        replays: sink.replays().count() as u64,
                        delivered_total: sink.delivered_total,
                        dead_lettered_total: sink.dead_lettered_total,
                        dead_letters_dropped: sink.dead_letters_dropped,
                        configured_here: configured.iter().any(|(known, _)| known == name),
                        as_of: state.as_of(),
                    }
                })
                .collect::<Vec<_>>()
        })?);
    }
    Ok(statuses)
}

/// The dead letters of `sink` (in every data group, or in `group` only), oldest first per
/// group, at most `limit`, from this node's replicas.
///
/// # Errors
///
/// `NotFound` for a group the cluster does not have; `Internal` if a state cannot be read.
pub fn dead_letters(
    service: &Service,
    sink: &SinkName,
    group: Option<u64>,
    limit: usize,
) -> Result<Vec<GroupDeadLetter>, ApiError> {
    if let Some(group) = group {
        service.shared().group(group)?;
    }
    let mut letters = Vec::new();
    for hosted in data_groups(service).filter(|hosted| group.is_none_or(|group| hosted.id == group))
    {
        let room = limit.saturating_sub(letters.len());
        letters.extend(hosted.read_local(|state| {
            state
                .delivery()
                .sink(sink)
                .into_iter()
                .flat_map(|found| found.dead_letters.values())
                .take(room)
                .map(|letter| GroupDeadLetter {
                    group: hosted.id,
                    sink: sink.clone(),
                    letter: letter.clone(),
                })
                .collect::<Vec<_>>()
        })?);
    }
    Ok(letters)
}

/// Asks data group `group` to deliver `sink`'s dead letters `events` again (all of them when
/// empty); returns how many were marked (operator).
///
/// # Errors
///
/// `sink_not_found`, `dead_letter_not_found`, or a routing error.
pub async fn replay_dead_letters(
    service: &Service,
    group: u64,
    sink: SinkName,
    events: Vec<u64>,
) -> Result<u32, ApiError> {
    let events = events.into_iter().map(OutboxId).collect();
    match service.delivery(group, DeliveryCommand::Replay { sink, events }).await? {
        Reply::ReplayRequested { events, .. } => Ok(events),
        other => Err(ApiError::unexpected(other)),
    }
}

/// Stops data group `group` tracking `sink` (operator): its dead letters are dropped and the
/// outbox no longer keeps events for it. Returns the dead letters dropped and the events
/// trimmed. A sink still configured on the group's leader is tracked again at once.
///
/// # Errors
///
/// `sink_not_found`, or a routing error.
pub async fn remove_sink(
    service: &Service,
    group: u64,
    sink: SinkName,
) -> Result<(u32, u32), ApiError> {
    match service.delivery(group, DeliveryCommand::RemoveSink { sink }).await? {
        Reply::SinkRemoved { dead_letters_dropped, trimmed, .. } => {
            Ok((dead_letters_dropped, trimmed))
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// What a catalog change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatalogWritten {
    /// The kind of record.
    pub kind: CatalogKind,
    /// Its id (a listing's is its show's).
    pub id: u64,
    /// The catalog's revision afterwards.
    pub revision: u64,
    /// Whether anything changed (false: the record already was as asked).
    pub changed: bool,
}

/// Proposes a catalog change (on group 0's leader).
///
/// # Errors
///
/// The change's rejection (`catalog_exists`, `catalog_not_found`, `catalog_retired`,
/// `invalid_argument`), or a routing error.
pub async fn change_catalog(
    service: &Service,
    command: CatalogCommand,
) -> Result<CatalogWritten, ApiError> {
    match service.catalog(command).await? {
        Reply::CatalogChanged { kind, id, revision, changed } => {
            Ok(CatalogWritten { kind, id, revision, changed })
        }
        other => Err(ApiError::unexpected(other)),
    }
}

/// A show a search found, with its event, hall and venue.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The show.
    pub show: ShowId,
    /// When it starts (Unix ms).
    pub starts_at_ms: u64,
    /// Its event.
    pub event: u64,
    /// The event's title.
    pub title: String,
    /// The event's genre.
    pub genre: String,
    /// The event's description.
    pub description: String,
    /// The event's images, by URL.
    pub images: Vec<String>,
    /// Its hall.
    pub hall: u64,
    /// The hall's name.
    pub hall_name: String,
    /// Its venue.
    pub venue: u64,
    /// The venue's name.
    pub venue_name: String,
    /// The venue's city.
    pub city: String,
    /// The venue's postal code.
    pub postal_code: String,
    /// The venue's distance from the query's point, in km.
    pub distance_km: Option<f64>,
    /// The keywords' score.
    pub score: Option<f32>,
}

/// A page of what a search found.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchResults {
    /// The shows, in the order asked for.
    pub found: Vec<Found>,
    /// The next page's cursor, if more remain.
    pub next_cursor: Option<String>,
    /// The replica state of the catalog the shows were joined from.
    pub as_of: AsOf,
}

/// Searches this node's replica of the catalog, and joins each show found with its event, hall
/// and venue. A show whose listing changed between the index's read and the join (delisted, its
/// event retired) is left out of the page rather than shown with content it no longer has.
///
/// # Errors
///
/// `InvalidArgument` for a bad query or cursor; `Internal` if the index or the replica failed.
pub fn search(service: &Service, query: &SearchQuery) -> Result<SearchResults, ApiError> {
    let page = service.search(query)?;
    service.read_catalog(|group| {
        let catalog = group.catalog();
        let found = page
            .hits
            .iter()
            .filter(|hit| catalog.browsable(hit.show))
            .filter_map(|hit| {
                let listing = catalog.listing(hit.show)?;
                let event = &catalog.event(listing.spec.event)?.spec;
                let hall = &catalog.hall(listing.spec.hall)?.spec;
                let venue = &catalog.venue(hall.venue)?.spec;
                Some(Found {
                    show: hit.show,
                    starts_at_ms: listing.spec.starts_at_ms,
                    event: listing.spec.event.0,
                    title: event.title.clone(),
                    genre: event.genre.clone(),
                    description: event.description.clone(),
                    images: event.images.clone(),
                    hall: listing.spec.hall.0,
                    hall_name: hall.name.clone(),
                    venue: hall.venue.0,
                    venue_name: venue.name.clone(),
                    city: venue.city.clone(),
                    postal_code: venue.postal_code.clone(),
                    distance_km: hit.distance_km,
                    score: hit.score,
                })
            })
            .collect();
        SearchResults { found, next_cursor: page.next_cursor.clone(), as_of: group.as_of() }
    })
}

/// What moving a show did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    /// The show.
    pub show: ShowId,
    /// The group it came from.
    pub from: u64,
    /// The group it is in now.
    pub to: u64,
    /// The size of its state as it moved.
    pub bytes: u64,
    /// The SHA-256 of that state.
    pub digest: statemachine::Digest,
    /// How long (log time) no group served it: from its freeze to its activation.
    pub unserved_ms: u64,
    /// Whether it had moved there before: nothing changed.
    pub duplicate: bool,
}

/// How long a node waits for its replica of a group to catch up with the group's leader
/// before it reads a step's outcome from it (the frozen state of a show among them).
const MOVE_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Moves `show` to data group `to`, fenced (statemachine's `moving.rs`): freezes it in its
/// group, imports the frozen state (read from this node's replica of the source, checked by the
/// digest the freeze recorded) into `to`, relocates it in group 0, activates it in `to` and
/// drops it from the source. Each step is read first from a fresh replica (every node has a
/// replica of every group) and skipped if done; a step this node cannot do answers `NotLeader`
/// for that step's group, and the same request sent to that group's leader goes on from there.
/// So a call interrupted anywhere is finished by calling again, and a finished move answers
/// `duplicate`.
///
/// # Errors
///
/// `invalid_argument` (a group the cluster does not have, a show too large to carry),
/// `show_not_found`, `show_moving` (it is moving elsewhere), `NotLeader` for the next step's
/// group, `Unavailable` when a replica here cannot catch up.
pub async fn move_show(service: &Service, show: ShowId, to: u64) -> Result<Moved, ApiError> {
    let data_groups = service.shared().config.data_groups;
    if to == METADATA_GROUP || to > data_groups {
        return Err(ApiError::InvalidArgument(format!(
            "to_group: the cluster has data groups 1..={data_groups}"
        )));
    }
    let shared = service.shared();
    let metadata = shared.group(METADATA_GROUP)?;
    let target = shared.group(to)?;
    let fresh = async |hosted: &crate::group::HostedGroup| -> Result<(), ApiError> {
        hosted.confirm_fresh(MOVE_CATCH_UP_WAIT).await
    };
    let record = |state: &Group| state.moves().get(&show).copied();
    let mut changed = false;

    fresh(metadata).await?;
    // Every group a move writes to must be at the moves' feature level, checked before the
    // freeze: a move refused half-way would leave the show frozen.
    let level = |state: &Group| state.feature_level();
    let placed_now = metadata.read_local(|state| state.placement().group_of(show))?;
    for hosted in [Some(metadata), Some(target), placed_now.and_then(|g| shared.group(g).ok())]
        .into_iter()
        .flatten()
    {
        let current = hosted.read_local(level)?;
        if current < statemachine::FEATURE_LEVEL_MOVES {
            return Err(ApiError::Rejected(Rejection::FeatureNotEnabled {
                level: statemachine::FEATURE_LEVEL_MOVES,
                current,
            }));
        }
    }
    let placed = metadata
        .read_local(|state| state.placement().group_of(show))?
        .ok_or(ApiError::Rejected(Rejection::ShowNotFound))?;
    if placed != to {
        let (from, source) = (placed, shared.group(placed)?);
        // 1. Freeze in the source.
        fresh(source).await?;
        let digest = match source.read_local(record)? {
            Some(ShowMove::Leaving { to: leaving, digest, .. }) if leaving == to => digest,
            _ => match propose_on(
                source,
                Command::Operator(OperatorCommand::FreezeShow { show, to }),
            )
            .await?
            {
                Reply::ShowFrozen { digest, .. } => {
                    changed = true;
                    digest
                }
                other => return Err(ApiError::unexpected(other)),
            },
        };
        // 2. Import into the target, from this node's replica of the source.
        fresh(target).await?;
        let imported = matches!(
            target.read_local(record)?,
            Some(ShowMove::Arriving { digest: arrived, .. }) if arrived == digest
        );
        if !imported {
            if !target.is_leader() {
                return Err(target.not_leader());
            }
            fresh(source).await?;
            let (state, exported) = source.read_local(|state| state.show_transfer(show))??;
            if exported != digest {
                return Err(ApiError::Internal(format!(
                    "show {show}: this node's replica of group {from} exports other bytes than \
                     the freeze recorded"
                )));
            }
            let import = OperatorCommand::ImportShow { show, from, state, digest };
            propose_on(target, Command::Operator(import)).await?;
            changed = true;
        }
        // 3. Place it in the target.
        match propose_on(metadata, Command::Relocate { show, from, to }).await? {
            Reply::Relocated { duplicate, .. } => changed |= !duplicate,
            other => return Err(ApiError::unexpected(other)),
        }
    }
    // 4. Activate it in the target, which group 0 places it in now.
    fresh(target).await?;
    let from = match target.read_local(record)? {
        Some(ShowMove::Arrived { from, .. }) => from,
        Some(ShowMove::Arriving { from, .. }) => {
            propose_on(target, Command::Operator(OperatorCommand::ActivateShow { show })).await?;
            changed = true;
            from
        }
        _ => {
            return Err(ApiError::InvalidArgument(format!(
                "to_group: show {show} is in group {to} and did not move there"
            )));
        }
    };
    // 5. Drop it from the source.
    let source = shared.group(from)?;
    fresh(source).await?;
    if !matches!(source.read_local(record)?, Some(ShowMove::Left { to: left, .. }) if left == to) {
        propose_on(source, Command::Operator(OperatorCommand::DropShow { show, to })).await?;
        changed = true;
    }
    match target.read_local(record)? {
        Some(ShowMove::Arrived { from, digest, bytes, frozen_ms, activated_ms, .. }) => Ok(Moved {
            show,
            from,
            to,
            bytes,
            digest,
            unserved_ms: activated_ms.saturating_sub(frozen_ms),
            duplicate: !changed,
        }),
        // Moved on since (or archived): what this call did is done.
        _ => Err(ApiError::Unavailable(format!("show {show} moved on while it was moved"))),
    }
}

/// Proposes `command` on `group`'s leader (`NotLeader` elsewhere) and returns its reply.
async fn propose_on(
    group: &crate::group::HostedGroup,
    command: Command,
) -> Result<Reply, ApiError> {
    if !group.is_leader() {
        return Err(group.not_leader());
    }
    let answer = group.propose(command).await?;
    Ok(answer.outcome?)
}
