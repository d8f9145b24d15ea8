//! Proto ↔ domain conversion for the gRPC `BookingService`.
//!
//! Owns checking request messages (everything that can be judged without state: ids, seat
//! counts, duplicates, currencies, layouts, policies) so that bad input is refused with
//! `InvalidArgument` before anything is proposed, and turning the state machine's read views
//! and replies into reply messages. Never decides a booking rule (the state machine does) and
//! never routes (the service does).

use proto::booking as pb;
use statemachine::limits::{CAPACITY_EVENT_SEATS_MAX, SEATS_PER_HOLD_MAX};
use statemachine::{
    Actor, AuditRecord, BookingState, BookingView, CapacityEventId, Currency, EntityKind,
    HoldState, HoldView, OfferState, OfferView, OrderKey, Reason, SeatMap, SeatNo, SeatRange,
    SeatSet, SeatStatus, Show, ShowId, ShowPolicy, ShowSpec, ShowStatus, StateName, TicketState,
    TicketView, WaitlistEntryState, WaitlistEntryView, WaitlistSkip,
};

use crate::api::session;
use crate::error::ApiError;
use crate::service::{ShowSetup, checked_spec};

/// The longest capacity event id accepted, in bytes.
pub const CAPACITY_EVENT_ID_BYTES_MAX: usize = 128;

/// A show id from a request: non-zero.
///
/// # Errors
///
/// `InvalidArgument` for 0.
pub fn show_id(id: u64) -> Result<ShowId, ApiError> {
    Ok(ShowId(nonzero("show_id", id)?))
}

/// An entity id from a request (hold, booking, ticket, entry, offer): non-zero, since every
/// show numbers its entities from 1.
///
/// # Errors
///
/// `InvalidArgument` for 0, naming `field`.
pub fn nonzero(field: &str, id: u64) -> Result<u64, ApiError> {
    if id == 0 {
        return Err(ApiError::InvalidArgument(format!("{field}: must be non-zero")));
    }
    Ok(id)
}

/// The seats of a hold: 1..=10 distinct seat numbers, in the order given (the state machine
/// sorts them).
///
/// # Errors
///
/// `InvalidArgument` for none, too many, or a seat named twice.
pub fn seat_set(seats: &[u32]) -> Result<SeatSet, ApiError> {
    if seats.is_empty() || seats.len() > SEATS_PER_HOLD_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "seats: 1..={SEATS_PER_HOLD_MAX} seats per hold, got {}",
            seats.len()
        )));
    }
    distinct("seats", seats)?;
    SeatSet::try_from(seats)
        .map_err(|_capacity| ApiError::InvalidArgument("seats: too many".into()))
}

/// The seats of a capacity-released event: 1..=1024 distinct seat numbers.
///
/// # Errors
///
/// `InvalidArgument` for none, too many, or a seat named twice.
pub fn released_seats(seats: &[u32]) -> Result<Vec<SeatNo>, ApiError> {
    if seats.is_empty() || seats.len() > CAPACITY_EVENT_SEATS_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "seats: 1..={CAPACITY_EVENT_SEATS_MAX} seats per event, got {}",
            seats.len()
        )));
    }
    distinct("seats", seats)?;
    Ok(seats.to_vec())
}

fn distinct(field: &str, seats: &[u32]) -> Result<(), ApiError> {
    let mut sorted = seats.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|pair| pair[0] == pair[1]) {
        Some(pair) => {
            Err(ApiError::InvalidArgument(format!("{field}: seat {} is named twice", pair[0])))
        }
        None => Ok(()),
    }
}

/// The party size of a waitlist entry: 1..=10.
///
/// # Errors
///
/// `InvalidArgument` otherwise.
pub fn quantity(quantity: u32) -> Result<u8, ApiError> {
    match u8::try_from(quantity) {
        Ok(quantity) if quantity >= 1 && usize::from(quantity) <= SEATS_PER_HOLD_MAX => {
            Ok(quantity)
        }
        _ => Err(ApiError::InvalidArgument(format!(
            "quantity: must be 1..={SEATS_PER_HOLD_MAX}, got {quantity}"
        ))),
    }
}

/// A capacity event id: the sender's text (1..=128 printable ASCII characters), hashed to the
/// 128 bits the state machine deduplicates by. REST and gRPC hash the same way, so one event
/// sent through both is processed once.
///
/// # Errors
///
/// `InvalidArgument` for an empty, too long or unprintable id.
pub fn capacity_event_id(text: &str) -> Result<CapacityEventId, ApiError> {
    let printable = text.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ');
    if text.is_empty() || text.len() > CAPACITY_EVENT_ID_BYTES_MAX || !printable {
        return Err(ApiError::InvalidArgument(format!(
            "event_id: 1..={CAPACITY_EVENT_ID_BYTES_MAX} printable ASCII characters"
        )));
    }
    Ok(CapacityEventId(session::hash128(b"capacity-event", text.as_bytes())))
}

/// An audited entity kind by its wire name.
///
/// # Errors
///
/// `InvalidArgument` for an unknown name.
pub fn entity_kind(name: &str) -> Result<EntityKind, ApiError> {
    Ok(match name {
        "hold" => EntityKind::Hold,
        "booking" => EntityKind::Booking,
        "payment" => EntityKind::Payment,
        "ticket" => EntityKind::Ticket,
        "waitlist_entry" => EntityKind::WaitlistEntry,
        "offer" => EntityKind::Offer,
        other => {
            return Err(ApiError::InvalidArgument(format!(
                "kind: one of hold, booking, payment, ticket, waitlist_entry, offer; got {other:?}"
            )));
        }
    })
}

/// The wire name of an audited entity kind.
pub fn entity_kind_name(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Hold => "hold",
        EntityKind::Booking => "booking",
        EntityKind::Payment => "payment",
        EntityKind::Ticket => "ticket",
        EntityKind::WaitlistEntry => "waitlist_entry",
        EntityKind::Offer => "offer",
    }
}

/// What creating a show amounts to: the show and the operator commands that set it up, in the
/// order they are applied (admission, waitlist, open sales).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewShow {
    /// The show.
    pub spec: ShowSpec,
    /// The data group asked for (0: the cluster chooses).
    pub group: u64,
    /// Set-up commands.
    pub setup: Vec<statemachine::OperatorCommand>,
}

/// Checks a create-show request completely (the spec the state machine would check, and the
/// set-up), so that a bad one is refused before the placement is proposed.
///
/// # Errors
///
/// `InvalidArgument` naming the first problem.
pub fn new_show(request: &pb::CreateShowRequest) -> Result<NewShow, ApiError> {
    let show = show_id(request.show_id)?;
    let currency: [u8; 3] = request
        .currency
        .as_bytes()
        .try_into()
        .map_err(|_| ApiError::InvalidArgument("currency: three upper-case letters".into()))?;
    let layout = request
        .layout
        .iter()
        .map(|range| {
            let class = u8::try_from(range.class)
                .map_err(|_| ApiError::InvalidArgument("layout: class out of range".into()))?;
            Ok(SeatRange { count: range.count, class })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let policy = show_policy(request.policy.as_ref(), request.hold_ttl_ms)?;
    let spec = ShowSpec {
        show,
        currency: Currency(currency),
        prices_minor: request.prices_minor.clone(),
        layout,
        policy,
    };
    let spec = checked_spec(spec)?;
    // An absent message, or one with everything at zero, leaves the setting alone.
    let setup = ShowSetup {
        admission: request
            .admission
            .filter(|admission| admission.enabled || admission.window != 0)
            .map(|admission| (admission.enabled, admission.window)),
        waitlist: request
            .waitlist
            .filter(|waitlist| waitlist.enabled || waitlist.policy_version != 0)
            .map(|waitlist| (waitlist.enabled, waitlist.policy_version)),
        open_sales: request.open_sales,
    }
    .commands(show)?;
    Ok(NewShow { spec, group: request.group_id, setup })
}

/// A show policy from its message: each 0 (or absent optional) keeps the default.
fn show_policy(policy: Option<&pb::ShowPolicy>, hold_ttl_ms: u64) -> Result<ShowPolicy, ApiError> {
    let mut result = ShowPolicy::default();
    let asked = policy.copied().unwrap_or_default();
    if hold_ttl_ms != 0 && asked.hold_ttl_ms != 0 && hold_ttl_ms != asked.hold_ttl_ms {
        return Err(ApiError::InvalidArgument(
            "hold_ttl_ms: differs from policy.hold_ttl_ms (set one of them)".into(),
        ));
    }
    let set = |target: &mut u64, value: u64| {
        if value != 0 {
            *target = value;
        }
    };
    set(&mut result.hold_ttl_ms, hold_ttl_ms.max(asked.hold_ttl_ms));
    set(&mut result.payment_grace_ms, asked.payment_grace_ms);
    set(&mut result.grant_ttl_ms, asked.grant_ttl_ms);
    set(&mut result.ticket_wait_ms, asked.ticket_wait_ms);
    set(&mut result.offer_ttl_ms, asked.offer_ttl_ms);
    set(&mut result.idempotency_retention_ms, asked.idempotency_retention_ms);
    if asked.holds_per_session_max != 0 {
        result.holds_per_session_max = asked.holds_per_session_max;
    }
    if let Some(allowed) = asked.booking_cancel_allowed {
        result.booking_cancel_allowed = allowed;
    }
    Ok(result)
}

/// A show's summary: its state and the seat counts of its seat map (read in the same step).
pub fn show_reply(group: u64, show: &Show, map: &SeatMap) -> pb::ShowReply {
    let count =
        |status: SeatStatus| map.seats.iter().filter(|seat| **seat == status).count() as u32;
    let policy = show.policy;
    pb::ShowReply {
        show_id: show.id.0,
        group_id: group,
        status: show_status_name(show.status).to_owned(),
        currency: show.currency.to_string(),
        prices_minor: show.prices_minor.clone(),
        price_version: show.price_version,
        seat_count: show.seat_count(),
        seats_free: count(SeatStatus::Free),
        seats_held: count(SeatStatus::Held),
        seats_booked: count(SeatStatus::Booked),
        seats_reserved: count(SeatStatus::Reserved),
        policy: Some(pb::ShowPolicy {
            hold_ttl_ms: policy.hold_ttl_ms,
            payment_grace_ms: policy.payment_grace_ms,
            grant_ttl_ms: policy.grant_ttl_ms,
            ticket_wait_ms: policy.ticket_wait_ms,
            offer_ttl_ms: policy.offer_ttl_ms,
            idempotency_retention_ms: policy.idempotency_retention_ms,
            holds_per_session_max: policy.holds_per_session_max,
            booking_cancel_allowed: Some(policy.booking_cancel_allowed),
        }),
        admission: Some(pb::AdmissionConfig {
            enabled: show.lane.enabled,
            window: show.lane.window,
        }),
        waitlist: Some(pb::WaitlistConfig {
            enabled: show.waitlist.enabled,
            policy_version: show.waitlist.policy_version,
        }),
        as_of_log_index: map.as_of.log_index,
        as_of_log_time_ms: map.as_of.log_time_ms,
    }
}

/// A seat map, read linearizably or from a replica as `linearizable` says.
pub fn seat_map_reply(map: &SeatMap, linearizable: bool) -> pb::SeatMapReply {
    pb::SeatMapReply {
        classes: map.classes.iter().map(|class| u32::from(*class)).collect(),
        seats: map.seats.iter().map(|seat| seat_status(*seat) as i32).collect(),
        ..seat_map_header(map, linearizable)
    }
}

/// A seat map in the packed form (`SeatMapRequest.packed`): a byte per seat for its status and
/// one for its class; `seats` and `classes` stay empty.
pub fn packed_seat_map_reply(map: &SeatMap, linearizable: bool) -> pb::SeatMapReply {
    let states: Vec<u8> = map.seats.iter().map(|seat| seat_status(*seat) as u8).collect();
    pb::SeatMapReply {
        seat_states: states.into(),
        seat_classes: map.classes.clone().into(),
        ..seat_map_header(map, linearizable)
    }
}

/// Everything of a seat map but its seats.
fn seat_map_header(map: &SeatMap, linearizable: bool) -> pb::SeatMapReply {
    pb::SeatMapReply {
        show_id: map.show.0,
        status: show_status_name(map.status).to_owned(),
        price_version: map.price_version,
        currency: map.currency.to_string(),
        prices_minor: map.prices_minor.clone(),
        as_of_log_index: map.as_of.log_index,
        as_of_log_time_ms: map.as_of.log_time_ms,
        linearizable,
        ..pb::SeatMapReply::default()
    }
}

/// A seat's status on the wire.
pub fn seat_status(status: SeatStatus) -> pb::SeatStatus {
    match status {
        SeatStatus::Free => pb::SeatStatus::Free,
        SeatStatus::Held => pb::SeatStatus::Held,
        SeatStatus::Booked => pb::SeatStatus::Booked,
        SeatStatus::Reserved => pb::SeatStatus::Reserved,
    }
}

/// A hold.
pub fn hold_reply(show: ShowId, view: &HoldView) -> pb::HoldReply {
    let hold = &view.hold;
    pb::HoldReply {
        show_id: show.0,
        hold_id: hold.id.0,
        seats: hold.seats.iter().copied().collect(),
        price_minor: hold.price.amount_minor,
        currency: hold.price.currency.to_string(),
        deadline_ms: hold.deadline_ms(),
        state: hold_state_name(view.state).to_owned(),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
        price_version: hold.price_version,
        grant_ticket_id: hold.grant.map_or(0, |ticket| ticket.0),
        offer_id: hold.offer.map_or(0, |offer| offer.0),
        payment_id: hold.payment.map_or(0, |payment| payment.0),
        booking_id: hold.booking.map_or(0, |booking| booking.0),
    }
}

/// A booking.
pub fn booking_reply(show: ShowId, view: &BookingView) -> pb::BookingReply {
    let booking = &view.booking;
    pb::BookingReply {
        show_id: show.0,
        booking_id: booking.id.0,
        hold_id: booking.hold.0,
        seats: booking.seats.iter().copied().collect(),
        payment_id: booking.payment.0,
        price_minor: booking.price.amount_minor,
        currency: booking.price.currency.to_string(),
        state: booking_state_name(booking.state).to_owned(),
        created_ms: booking.created_ms,
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// An admission ticket.
pub fn ticket_reply(show: ShowId, view: &TicketView) -> pb::TicketReply {
    pb::TicketReply {
        show_id: show.0,
        ticket_id: view.ticket.0,
        state: ticket_state_name(view.state).to_owned(),
        ahead: view.ahead,
        grant_deadline_ms: match view.state {
            TicketState::Granted => view.grant_deadline_ms.unwrap_or(0),
            _ => 0,
        },
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// A waitlist entry, with its offer when it has one (read in the same step).
pub fn entry_reply(
    show: ShowId,
    view: &WaitlistEntryView,
    offer: Option<&OfferView>,
) -> pb::WaitlistEntryReply {
    let entry = &view.entry;
    pb::WaitlistEntryReply {
        show_id: show.0,
        entry_id: entry.id.0,
        quantity: u32::from(entry.quantity),
        state: entry_state_name(view.state).to_owned(),
        ahead: view.ahead,
        band: u32::from(entry.order.band),
        joined_ms: entry.order.joined_ms,
        policy_version: entry.policy_version,
        offer: offer.map(|offer| offer_reply(show, offer)),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// An offer.
pub fn offer_reply(show: ShowId, view: &OfferView) -> pb::OfferReply {
    let offer = &view.offer;
    pb::OfferReply {
        show_id: show.0,
        offer_id: offer.id.0,
        entry_id: offer.entry.0,
        seats: offer.seats.iter().copied().collect(),
        state: offer_state_name(view.state).to_owned(),
        deadline_ms: offer.deadline_ms,
        hold_id: offer.hold.map_or(0, |hold| hold.0),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// One audit record.
pub fn audit_record(record: &AuditRecord) -> pb::AuditRecord {
    let (actor, session) = match record.actor {
        Actor::Session(session) => ("session", format!("{:032x}", session.0)),
        Actor::Operator => ("operator", String::new()),
        Actor::Provider => ("provider", String::new()),
        Actor::System => ("system", String::new()),
    };
    pb::AuditRecord {
        from: record.from.map_or("", state_name).to_owned(),
        to: state_name(record.to).to_owned(),
        reason: reason_name(record.reason).to_owned(),
        actor: actor.to_owned(),
        session,
        log_time_ms: record.log_time_ms,
        log_index: record.log_index,
        policy_version: record.policy_version,
        order: record.order.map(order_key),
    }
}

/// One offer made to another waiter while an entry waited.
pub fn waitlist_skip(skip: &WaitlistSkip) -> pb::WaitlistSkip {
    pb::WaitlistSkip {
        offer_id: skip.offer.0,
        entry_id: skip.entry.0,
        order: Some(order_key(skip.order)),
        was_ahead: skip.was_ahead,
        made_index: skip.made_index,
        policy_version: skip.policy_version,
    }
}

fn order_key(order: OrderKey) -> pb::OrderKey {
    pb::OrderKey { band: u32::from(order.band), joined_ms: order.joined_ms, seq: order.seq }
}

/// The wire name of a show status.
pub fn show_status_name(status: ShowStatus) -> &'static str {
    match status {
        ShowStatus::Draft => "draft",
        ShowStatus::OnSale => "on_sale",
        ShowStatus::Closed => "closed",
        ShowStatus::Cancelled => "cancelled",
    }
}

/// The wire name of a hold state.
pub fn hold_state_name(state: HoldState) -> &'static str {
    state_name(state.into())
}

/// The wire name of a booking state.
pub fn booking_state_name(state: BookingState) -> &'static str {
    state_name(state.into())
}

/// The wire name of a ticket state.
pub fn ticket_state_name(state: TicketState) -> &'static str {
    state_name(state.into())
}

/// The wire name of a waitlist entry state.
pub fn entry_state_name(state: WaitlistEntryState) -> &'static str {
    state_name(state.into())
}

/// The wire name of an offer state.
pub fn offer_state_name(state: OfferState) -> &'static str {
    state_name(state.into())
}

/// The wire name of any audited state (the names every state reply uses).
pub fn state_name(state: StateName) -> &'static str {
    state.as_str()
}

/// The wire name of an audit reason.
pub fn reason_name(reason: Reason) -> &'static str {
    match reason {
        Reason::Requested => "requested",
        Reason::DeadlinePassed => "deadline_passed",
        Reason::WaitingLimit => "waiting_limit",
        Reason::CheckoutStarted => "checkout_started",
        Reason::PaymentSucceeded => "payment_succeeded",
        Reason::LatePayment => "late_payment",
        Reason::PaymentDeclined => "payment_declined",
        Reason::PaymentUnknown => "payment_unknown",
        Reason::ShowCancelled => "show_cancelled",
        Reason::GrantConsumed => "grant_consumed",
        Reason::NextInLine => "next_in_line",
        Reason::OfferAccepted => "offer_accepted",
        Reason::LaneDisabled => "lane_disabled",
        Reason::WaitlistDisabled => "waitlist_disabled",
    }
}

#[cfg(test)]
mod tests {
    use statemachine::{
        AsOf, Booking, BookingId, Hold, HoldId, Money, OperatorCommand, PaymentId, SessionId,
        TicketId,
    };

    use super::*;

    const AS_OF: AsOf = AsOf { log_index: 7, log_time_ms: 1_000 };

    fn create(show_id: u64) -> pb::CreateShowRequest {
        pb::CreateShowRequest {
            show_id,
            currency: "EUR".into(),
            prices_minor: vec![1_000, 2_500],
            layout: vec![
                pb::SeatRange { count: 10, class: 0 },
                pb::SeatRange { count: 5, class: 1 },
            ],
            ..Default::default()
        }
    }

    fn invalid(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        match result {
            Err(error @ ApiError::InvalidArgument(_)) => error.to_string(),
            other => panic!("expected invalid_argument, got {other:?}"),
        }
    }

    #[test]
    fn bad_holds_are_refused_before_anything_is_proposed() {
        invalid(seat_set(&[]));
        invalid(seat_set(&[1; 11]));
        assert!(invalid(seat_set(&[4, 2, 4])).contains("seat 4 is named twice"));
        assert_eq!(seat_set(&[3, 1]).unwrap().as_slice(), &[3, 1]);
        invalid(show_id(0));
        invalid(nonzero("hold_id", 0));
        invalid(quantity(0));
        invalid(quantity(11));
        invalid(quantity(256 + 2));
        assert_eq!(quantity(10).unwrap(), 10);
        invalid(released_seats(&[]));
        invalid(released_seats(&[1, 1]));
        invalid(released_seats(&(0..1_025).collect::<Vec<_>>()));
        assert_eq!(released_seats(&[5, 3]).unwrap(), [5, 3]);
    }

    #[test]
    fn create_show_is_checked_whole_before_placement() {
        let mut request = create(1);
        request.currency = "EURO".into();
        invalid(new_show(&request));
        request.currency = "eur".into();
        invalid(new_show(&request));
        let mut request = create(1);
        request.layout = vec![pb::SeatRange { count: 5, class: 300 }];
        invalid(new_show(&request));
        let mut request = create(1);
        request.layout = vec![pb::SeatRange { count: 5, class: 2 }];
        assert!(invalid(new_show(&request)).contains("class without a price"));
        let mut request = create(1);
        request.policy = Some(pb::ShowPolicy { hold_ttl_ms: 10, ..Default::default() });
        assert!(invalid(new_show(&request)).contains("hold_ttl_ms"));
        let mut request = create(1);
        request.hold_ttl_ms = 60_000;
        request.policy = Some(pb::ShowPolicy { hold_ttl_ms: 30_000, ..Default::default() });
        invalid(new_show(&request));
        let mut request = create(1);
        request.admission = Some(pb::AdmissionConfig { enabled: true, window: 0 });
        assert!(invalid(new_show(&request)).contains("admission.window"));
        invalid(new_show(&create(0)));
    }

    #[test]
    fn create_show_defaults_and_setup_order() {
        let plain = new_show(&create(3)).unwrap();
        assert_eq!(plain.spec.policy, ShowPolicy::default());
        assert!(plain.setup.is_empty());
        let show = ShowId(3);
        let mut request = create(3);
        request.hold_ttl_ms = 60_000;
        request.policy = Some(pb::ShowPolicy {
            offer_ttl_ms: 30_000,
            holds_per_session_max: 2,
            booking_cancel_allowed: Some(false),
            ..Default::default()
        });
        request.admission = Some(pb::AdmissionConfig { enabled: true, window: 50 });
        request.waitlist = Some(pb::WaitlistConfig { enabled: true, policy_version: 0 });
        request.open_sales = true;
        request.group_id = 2;
        let full = new_show(&request).unwrap();
        assert_eq!(full.group, 2);
        assert_eq!(full.spec.policy.hold_ttl_ms, 60_000);
        assert_eq!(full.spec.policy.offer_ttl_ms, 30_000);
        assert_eq!(full.spec.policy.holds_per_session_max, 2);
        assert!(!full.spec.policy.booking_cancel_allowed);
        assert_eq!(full.spec.policy.grant_ttl_ms, ShowPolicy::default().grant_ttl_ms);
        assert_eq!(
            full.setup,
            [
                OperatorCommand::ConfigureAdmission { show, enabled: true, window: 50 },
                OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 },
                OperatorCommand::OpenSales { show },
            ]
        );
        // A message that says "off" with nothing else configures nothing.
        let mut request = create(3);
        request.admission = Some(pb::AdmissionConfig::default());
        request.waitlist = Some(pb::WaitlistConfig::default());
        assert!(new_show(&request).unwrap().setup.is_empty());
    }

    #[test]
    fn event_ids_and_kinds_are_checked() {
        assert_eq!(capacity_event_id("e-1").unwrap(), capacity_event_id("e-1").unwrap());
        assert_ne!(capacity_event_id("e-1").unwrap(), capacity_event_id("e-2").unwrap());
        invalid(capacity_event_id(""));
        invalid(capacity_event_id(&"e".repeat(129)));
        invalid(capacity_event_id("tab\there"));
        for name in ["hold", "booking", "payment", "ticket", "waitlist_entry", "offer"] {
            assert_eq!(entity_kind_name(entity_kind(name).unwrap()), name);
        }
        invalid(entity_kind("holds"));
    }

    fn hold(state: HoldState) -> Hold {
        Hold {
            id: HoldId(4),
            session: SessionId(9),
            seats: SeatSet::try_from(&[54, 55][..]).unwrap(),
            state,
            created_ms: 100,
            hold_deadline_ms: 300_100,
            processing_deadline_ms: (state == HoldState::Processing).then_some(400_000),
            price_version: 1,
            price: Money { amount_minor: 2_000, currency: Currency(*b"EUR") },
            grant: Some(TicketId(2)),
            offer: None,
            payment: (state == HoldState::Processing).then_some(PaymentId(5)),
            payment_attempts: 0,
            booking: None,
        }
    }

    #[test]
    fn holds_convert_with_their_effective_state_and_deadline() {
        let view =
            HoldView { hold: hold(HoldState::Held), state: HoldState::Expired, as_of: AS_OF };
        let reply = hold_reply(ShowId(1), &view);
        assert_eq!(reply.state, "expired");
        assert_eq!((reply.show_id, reply.hold_id, reply.seats.as_slice()), (1, 4, &[54, 55][..]));
        assert_eq!((reply.price_minor, reply.currency.as_str()), (2_000, "EUR"));
        assert_eq!((reply.deadline_ms, reply.grant_ticket_id, reply.payment_id), (300_100, 2, 0));
        assert_eq!((reply.as_of_log_index, reply.as_of_log_time_ms), (7, 1_000));
        let processing = HoldView {
            hold: hold(HoldState::Processing),
            state: HoldState::Processing,
            as_of: AS_OF,
        };
        let reply = hold_reply(ShowId(1), &processing);
        assert_eq!(
            (reply.state.as_str(), reply.deadline_ms, reply.payment_id),
            ("processing", 400_000, 5)
        );
    }

    #[test]
    fn bookings_tickets_and_audit_records_convert() {
        let booking = BookingView {
            booking: Booking {
                id: BookingId(8),
                hold: HoldId(4),
                session: SessionId(9),
                seats: SeatSet::try_from(&[1][..]).unwrap(),
                payment: PaymentId(5),
                price: Money { amount_minor: 1_000, currency: Currency(*b"USD") },
                state: BookingState::Cancelled,
                created_ms: 50,
            },
            as_of: AS_OF,
        };
        let reply = booking_reply(ShowId(2), &booking);
        assert_eq!((reply.booking_id, reply.hold_id, reply.payment_id), (8, 4, 5));
        assert_eq!((reply.state.as_str(), reply.currency.as_str()), ("cancelled", "USD"));

        let waiting = TicketView {
            ticket: TicketId(3),
            session: SessionId(9),
            state: TicketState::Waiting,
            ahead: 2,
            grant_deadline_ms: None,
            as_of: AS_OF,
        };
        let reply = ticket_reply(ShowId(2), &waiting);
        assert_eq!((reply.state.as_str(), reply.ahead, reply.grant_deadline_ms), ("waiting", 2, 0));
        // An expired grant's deadline is not shown as if it still held.
        let expired = TicketView {
            state: TicketState::Expired,
            ahead: 0,
            grant_deadline_ms: Some(60_000),
            ..waiting
        };
        assert_eq!(ticket_reply(ShowId(2), &expired).grant_deadline_ms, 0);

        let record = AuditRecord {
            from: None,
            to: StateName::Held,
            reason: Reason::Requested,
            actor: Actor::Session(SessionId(0xab)),
            log_time_ms: 10,
            log_index: 3,
            policy_version: 0,
            order: Some(OrderKey { band: 1, joined_ms: 5, seq: 6 }),
        };
        let reply = audit_record(&record);
        assert_eq!((reply.from.as_str(), reply.to.as_str()), ("", "held"));
        assert_eq!((reply.reason.as_str(), reply.actor.as_str()), ("requested", "session"));
        assert_eq!(reply.session, format!("{:032x}", 0xab));
        assert_eq!(reply.order.unwrap().seq, 6);
        let system = AuditRecord { actor: Actor::System, from: Some(StateName::Held), ..record };
        let reply = audit_record(&system);
        assert_eq!(
            (reply.from.as_str(), reply.actor.as_str(), reply.session.as_str()),
            ("held", "system", "")
        );
    }

    #[test]
    fn seat_maps_keep_every_seat_in_order() {
        let map = SeatMap {
            show: ShowId(5),
            status: ShowStatus::OnSale,
            price_version: 2,
            currency: Currency(*b"EUR"),
            prices_minor: vec![100],
            classes: vec![0, 0, 0, 0],
            seats: vec![
                SeatStatus::Free,
                SeatStatus::Held,
                SeatStatus::Booked,
                SeatStatus::Reserved,
            ],
            as_of: AS_OF,
        };
        let packed = packed_seat_map_reply(&map, false);
        assert_eq!(packed.seat_states.as_ref(), [1, 2, 3, 4]);
        assert_eq!(packed.seat_classes.as_ref(), [0, 0, 0, 0]);
        assert!(packed.seats.is_empty() && packed.classes.is_empty() && !packed.linearizable);
        let reply = seat_map_reply(&map, true);
        assert_eq!(reply.status, "on_sale");
        assert!(reply.linearizable);
        assert_eq!(reply.seats, [1, 2, 3, 4]);
        assert_eq!(reply.classes, [0, 0, 0, 0]);
        assert_eq!(reply.as_of_log_index, 7);
    }
}
