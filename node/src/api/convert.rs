//! Proto ↔ domain conversion for the gRPC `BookingService`.
//!
//! Owns reading request messages into domain values (their fields checked by `crate::input`,
//! so bad input is refused with `InvalidArgument` before anything is proposed) and turning the
//! operations' views into reply messages, with the wire names of `crate::names`. Never decides
//! a booking rule (the state machine does) and never routes (the service does).

use proto::booking as pb;
use statemachine::{
    Actor, AuditRecord, BookingView, CatalogCommand, Change, ClientRequest, EventId, EventSpec,
    HallId, HallSpec, HoldView, ListingSpec, OfferView, OrderKey, PaymentView, Row, SeatMap,
    SeatRange, SeatStatus, Section, ShowId, ShowPolicy, ShowSpec, TicketId, TicketStatus,
    TicketView, VenueId, VenueSpec, WaitlistOrdering, WaitlistRules, WaitlistSkip,
};

use crate::error::ApiError;
use crate::input;
use crate::names::{
    AuditStateName, BookingStateName, EntityKindName, EntryStateName, HoldStateName,
    OfferStateName, PaymentStateName, ReasonName, ShowStatusName, TicketStateName,
};
use crate::operations::{
    AuditTrail, CatalogWritten, EntryWithOffer, SalesChanged, SearchResults, ShowSummary,
    WaitlistPolicyView,
};
use crate::search::{SEARCH_LIMIT_DEFAULT, SearchQuery, Sort};
use crate::seat_maps::{Form, Source};
use crate::service::{ShowSetup, checked_spec};

/// The show and the hold request of a `Hold` message (or of a `HoldMany` item): its seats
/// checked into a seat set, its grant if it names one.
///
/// # Errors
///
/// `InvalidArgument` for a zero show, or no, too many or repeated seats.
pub fn hold_request(request: &pb::HoldRequest) -> Result<(ShowId, ClientRequest), ApiError> {
    let show = input::show_id("show_id", request.show_id)?;
    let seats = input::seats("seats", &request.seats)?;
    let grant = (request.grant_ticket_id != 0).then_some(TicketId(request.grant_ticket_id));
    Ok((show, ClientRequest::Hold { seats, price_version: request.price_version, grant }))
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
    /// Its place in the catalog (its seats then the hall's: `spec.layout` is left empty).
    pub listing: Option<ListingSpec>,
}

/// Checks a create-show request completely (the spec the state machine would check, and the
/// set-up), so that a bad one is refused before the placement is proposed.
///
/// # Errors
///
/// `InvalidArgument` naming the first problem.
pub fn new_show(request: &pb::CreateShowRequest) -> Result<NewShow, ApiError> {
    let show = input::show_id("show_id", request.show_id)?;
    let currency = input::currency("currency", &request.currency)?;
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
    let listing = match &request.listing {
        None => None,
        Some(_) if !layout.is_empty() => {
            return Err(ApiError::InvalidArgument(
                "layout: a listed show's seats are its hall's (leave layout empty)".into(),
            ));
        }
        Some(listing) => Some(ListingSpec {
            event: EventId(input::nonzero("listing.event_id", listing.event_id)?),
            hall: HallId(input::nonzero("listing.hall_id", listing.hall_id)?),
            starts_at_ms: listing.starts_at_ms,
        }),
    };
    let spec =
        ShowSpec { show, currency, prices_minor: request.prices_minor.clone(), layout, policy };
    // A listed show's layout is its hall's, filled in (and the spec checked) by the service.
    let spec = if listing.is_some() { spec } else { checked_spec(spec)? };
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
    Ok(NewShow { spec, group: request.group_id, setup, listing })
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

/// A show's summary.
pub fn show_reply(summary: &ShowSummary) -> pb::ShowReply {
    let policy = summary.policy;
    pb::ShowReply {
        show_id: summary.show.0,
        group_id: summary.group,
        status: ShowStatusName::from(summary.status).as_str().to_owned(),
        currency: summary.currency.to_string(),
        prices_minor: summary.prices_minor.clone(),
        price_version: summary.price_version,
        seat_count: summary.seat_count,
        seats_free: summary.free,
        seats_held: summary.held,
        seats_booked: summary.booked,
        seats_reserved: summary.reserved,
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
            enabled: summary.admission.0,
            window: summary.admission.1,
        }),
        waitlist: Some(pb::WaitlistConfig {
            enabled: summary.waitlist.0,
            policy_version: summary.waitlist.1,
        }),
        as_of_log_index: summary.as_of.log_index,
        as_of_log_time_ms: summary.as_of.log_time_ms,
    }
}

/// A show's sales status after the operator opened or closed its sales.
pub fn sales_reply(changed: &SalesChanged) -> pb::SalesReply {
    pb::SalesReply {
        show_id: changed.show.0,
        group_id: changed.group,
        status: ShowStatusName::from(changed.status).as_str().to_owned(),
        duplicate: changed.duplicate,
    }
}

/// A payment attempt, with whether its money is owed back.
pub fn payment_reply(show: ShowId, view: &PaymentView) -> pb::PaymentReply {
    let payment = &view.payment;
    pb::PaymentReply {
        show_id: show.0,
        payment_id: payment.id.0,
        hold_id: payment.hold.0,
        amount_minor: payment.price.amount_minor,
        currency: payment.price.currency.to_string(),
        state: PaymentStateName::from(payment.state.status()).as_str().to_owned(),
        refund_owed: payment.refund_required(),
        created_ms: payment.created_ms,
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
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

/// A seat map in a packed form (`SeatMapRequest.packed`), as `source.form` asks: whole, a byte
/// per seat for its status and one for its class; compact, 2 bits per seat and no classes; or
/// only the changed seats. `seats` and `classes` stay empty.
pub fn packed_seat_map_reply(source: &Source<'_>) -> pb::SeatMapReply {
    let map = source.map;
    let header = pb::SeatMapReply {
        group_id: source.group,
        seat_count: u32::try_from(map.seats.len()).expect("a show has at most 100,000 seats"),
        ..seat_map_header(map, false)
    };
    match source.form {
        Form::Full => {
            let states: Vec<u8> = map.seats.iter().map(|seat| seat_status(*seat) as u8).collect();
            pb::SeatMapReply {
                seat_states: states.into(),
                seat_classes: map.classes.clone().into(),
                ..header
            }
        }
        Form::Compact => {
            let mut bits = vec![0u8; map.seats.len().div_ceil(4)];
            for (seat, status) in map.seats.iter().enumerate() {
                // SeatStatus numbers 1..=4 in 2 bits: 0..=3.
                let value = (seat_status(*status) as u8 - 1) & 0b11;
                bits[seat / 4] |= value << ((seat % 4) * 2);
            }
            pb::SeatMapReply { seat_bits: bits.into(), ..header }
        }
        Form::Changes { since } => {
            let mut previous = 0;
            let mut gaps = Vec::with_capacity(source.changed.len());
            let mut states = Vec::with_capacity(source.changed.len());
            for &seat in source.changed {
                gaps.push(seat - previous);
                previous = seat;
                states.push(seat_status(map.seats[seat as usize]) as u8);
            }
            pb::SeatMapReply {
                changes_since_log_index: since,
                changed_seats: gaps,
                changed_states: states.into(),
                ..header
            }
        }
    }
}

/// Everything of a seat map but its seats.
fn seat_map_header(map: &SeatMap, linearizable: bool) -> pb::SeatMapReply {
    pb::SeatMapReply {
        show_id: map.show.0,
        status: ShowStatusName::from(map.status).as_str().to_owned(),
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
        state: HoldStateName::from(view.state).as_str().to_owned(),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
        price_version: hold.price_version,
        grant_ticket_id: hold.grant.map_or(0, |ticket| ticket.0),
        offer_id: hold.offer.map_or(0, |offer| offer.0),
        payment_id: hold.payment().map_or(0, |payment| payment.0),
        booking_id: hold.booking().map_or(0, |booking| booking.0),
        seat_labels: Vec::new(),
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
        state: BookingStateName::from(booking.state).as_str().to_owned(),
        created_ms: booking.created_ms,
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
        seat_labels: Vec::new(),
    }
}

/// An admission ticket.
pub fn ticket_reply(show: ShowId, view: &TicketView) -> pb::TicketReply {
    pb::TicketReply {
        show_id: show.0,
        ticket_id: view.ticket.0,
        state: TicketStateName::from(view.state).as_str().to_owned(),
        ahead: view.ahead,
        grant_deadline_ms: match view.state {
            TicketStatus::Granted => view.grant_deadline_ms.unwrap_or(0),
            _ => 0,
        },
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// A waitlist entry, with its offer when it has one (read in the same step).
pub fn entry_reply(show: ShowId, found: &EntryWithOffer) -> pb::WaitlistEntryReply {
    let view = &found.entry;
    let entry = &view.entry;
    pb::WaitlistEntryReply {
        show_id: show.0,
        entry_id: entry.id.0,
        quantity: u32::from(entry.quantity),
        state: EntryStateName::from(view.state).as_str().to_owned(),
        ahead: view.ahead,
        band: u32::from(entry.order.band),
        joined_ms: entry.order.joined_ms,
        policy_version: entry.policy_version,
        offer: found.offer.as_ref().map(|offer| offer_reply(show, offer)),
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
        state: OfferStateName::from(view.state).as_str().to_owned(),
        deadline_ms: offer.deadline_ms,
        hold_id: offer.hold().map_or(0, |hold| hold.0),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

/// An entity's audit trail.
pub fn audit_reply(trail: &AuditTrail) -> pb::AuditReply {
    pb::AuditReply {
        show_id: trail.show.0,
        kind: EntityKindName::from(trail.kind).as_str().to_owned(),
        id: trail.id,
        records: trail.records.iter().map(audit_record).collect(),
        skips: trail.skips.iter().flatten().map(waitlist_skip).collect(),
        as_of_log_index: trail.as_of.log_index,
        as_of_log_time_ms: trail.as_of.log_time_ms,
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
        from: record.from.map_or("", |from| AuditStateName::from(from).as_str()).to_owned(),
        to: AuditStateName::from(record.to).as_str().to_owned(),
        reason: ReasonName::from(record.reason).as_str().to_owned(),
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
        rules: Some(waitlist_rules(skip.rules)),
        draw_seed: skip.draw_seed,
        draw_key: skip.draw_key,
        your_draw_key: skip.your_draw_key,
    }
}

/// The wire shape of a waitlist's rules.
pub fn waitlist_rules(rules: WaitlistRules) -> pb::WaitlistRules {
    let (ordering, draw_at_ms) = match rules.ordering {
        WaitlistOrdering::Fifo => ("fifo", None),
        WaitlistOrdering::Bands => ("bands", None),
        WaitlistOrdering::Lottery { draw_at_ms } => ("lottery", Some(draw_at_ms)),
    };
    pb::WaitlistRules {
        ordering: ordering.into(),
        draw_at_ms,
        wave_offers_max: rules.wave_offers_max,
    }
}

/// A waitlist's rules from the wire, checked.
///
/// # Errors
///
/// `InvalidArgument` for missing rules, an unknown ordering, a lottery without its draw time or
/// a draw time on another ordering.
pub fn rules_of(rules: Option<pb::WaitlistRules>) -> Result<WaitlistRules, ApiError> {
    let rules = rules.ok_or_else(|| ApiError::InvalidArgument("rules: required".into()))?;
    input::waitlist_rules("rules", &rules.ordering, rules.draw_at_ms, rules.wave_offers_max)
}

/// The wire shape of a show's waitlist policy.
pub fn waitlist_policy_reply(view: &WaitlistPolicyView) -> pb::WaitlistPolicyReply {
    pb::WaitlistPolicyReply {
        show_id: view.show.0,
        group_id: view.group,
        policy_version: view.policy_version,
        rules: Some(waitlist_rules(view.rules)),
        draw: view.draw.map(|draw| pb::LotteryDraw {
            seed: draw.seed,
            log_index: draw.index,
            drawn_ms: draw.drawn_ms,
            entries: draw.entries,
        }),
        duplicate: view.duplicate,
    }
}

fn order_key(order: OrderKey) -> pb::OrderKey {
    pb::OrderKey { band: u32::from(order.band), joined_ms: order.joined_ms, seq: order.seq }
}

/// A catalog change from its message.
///
/// # Errors
///
/// `InvalidArgument` for no action or record, a listing changed otherwise than retired, or a
/// coordinate or class out of range (the state machine checks the rest).
pub fn catalog_command(request: &pb::CatalogChangeRequest) -> Result<CatalogCommand, ApiError> {
    use pb::catalog_change_request::Record;
    let action = pb::CatalogAction::try_from(request.action)
        .ok()
        .filter(|action| *action != pb::CatalogAction::Unspecified)
        .ok_or_else(|| ApiError::InvalidArgument("action: create, update or retire".into()))?;
    fn change<T>(
        action: pb::CatalogAction,
        spec: impl FnOnce() -> Result<T, ApiError>,
    ) -> Result<Change<T>, ApiError> {
        Ok(match action {
            pb::CatalogAction::Create => Change::Create(spec()?),
            pb::CatalogAction::Update => Change::Update(spec()?),
            pb::CatalogAction::Retire | pb::CatalogAction::Unspecified => Change::Retire,
        })
    }
    match &request.record {
        None => Err(ApiError::InvalidArgument("record: a venue, hall, event or listing".into())),
        Some(Record::Venue(venue)) => Ok(CatalogCommand::Venue {
            venue: VenueId(venue.venue_id),
            change: change(action, || {
                Ok(VenueSpec {
                    name: venue.name.clone(),
                    address: venue.address.clone(),
                    city: venue.city.clone(),
                    postal_code: venue.postal_code.clone(),
                    lat_e6: input::micro_degrees("latitude", venue.latitude, 90.0)?,
                    lon_e6: input::micro_degrees("longitude", venue.longitude, 180.0)?,
                })
            })?,
        }),
        Some(Record::Hall(hall)) => Ok(CatalogCommand::Hall {
            hall: HallId(hall.hall_id),
            change: change(action, || hall_spec(hall))?,
        }),
        Some(Record::Event(event)) => Ok(CatalogCommand::Event {
            event: EventId(event.event_id),
            change: change(action, || {
                Ok(EventSpec {
                    title: event.title.clone(),
                    description: event.description.clone(),
                    genre: event.genre.clone(),
                    language: event.language.clone(),
                    duration_min: event.duration_min,
                    images: event.images.clone(),
                })
            })?,
        }),
        Some(Record::ListingShowId(show)) if action == pb::CatalogAction::Retire => {
            Ok(CatalogCommand::Listing { show: ShowId(*show), change: Change::Retire })
        }
        Some(Record::ListingShowId(_)) => Err(ApiError::InvalidArgument(
            "action: a listing is made by CreateShow and only retired here".into(),
        )),
    }
}

/// A hall's seats from its message (absent `first_number` and `dx` are 1).
fn hall_spec(hall: &pb::CatalogHall) -> Result<HallSpec, ApiError> {
    let sections = hall
        .sections
        .iter()
        .map(|section| {
            let class = u8::try_from(section.class)
                .map_err(|_| ApiError::InvalidArgument("sections.class: out of range".into()))?;
            let rows = section
                .rows
                .iter()
                .map(|row| Row {
                    label: row.label.clone(),
                    first_number: row.first_number.unwrap_or(1),
                    count: row.count,
                    x: row.x,
                    y: row.y,
                    dx: row.dx.unwrap_or(1),
                    dy: row.dy,
                })
                .collect();
            Ok(Section { name: section.name.clone(), class, rows })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(HallSpec { venue: VenueId(hall.venue_id), name: hall.name.clone(), sections })
}

/// What a catalog change did.
pub fn catalog_reply(written: &CatalogWritten) -> pb::CatalogChangeReply {
    pb::CatalogChangeReply {
        kind: written.kind.name().to_owned(),
        id: written.id,
        revision: written.revision,
        changed: written.changed,
    }
}

/// A search from its message (empty strings and zeros are absent).
///
/// # Errors
///
/// `InvalidArgument` for an unknown sort or a point given by half.
pub fn search_query(request: &pb::SearchRequest) -> Result<SearchQuery, ApiError> {
    let text = |value: &str| (!value.is_empty()).then(|| value.to_owned());
    let sort = match request.sort.as_str() {
        "" | "start" => Sort::Start,
        "distance" => Sort::Distance,
        "relevance" => Sort::Relevance,
        other => {
            return Err(ApiError::InvalidArgument(format!(
                "sort: `{other}` is not start, distance or relevance"
            )));
        }
    };
    Ok(SearchQuery {
        q: text(&request.q),
        city: text(&request.city),
        postal_code: text(&request.postal_code),
        near: input::near(request.lat, request.lon, request.radius_km)?,
        from_ms: (request.from_ms != 0).then_some(request.from_ms),
        until_ms: (request.until_ms != 0).then_some(request.until_ms),
        genre: text(&request.genre),
        sort,
        limit: if request.limit == 0 { SEARCH_LIMIT_DEFAULT } else { request.limit },
        cursor: text(&request.cursor),
    })
}

/// A page of search results.
pub fn search_reply(results: SearchResults) -> pb::SearchReply {
    pb::SearchReply {
        results: results
            .found
            .into_iter()
            .map(|found| pb::SearchResult {
                show_id: found.show.0,
                starts_at_ms: found.starts_at_ms,
                event_id: found.event,
                title: found.title,
                genre: found.genre,
                description: found.description,
                images: found.images,
                hall_id: found.hall,
                hall_name: found.hall_name,
                venue_id: found.venue,
                venue_name: found.venue_name,
                city: found.city,
                postal_code: found.postal_code,
                distance_km: found.distance_km,
                score: found.score,
            })
            .collect(),
        next_cursor: results.next_cursor.unwrap_or_default(),
        as_of_log_index: results.as_of.log_index,
        as_of_log_time_ms: results.as_of.log_time_ms,
    }
}

#[cfg(test)]
mod tests {
    use statemachine::{
        AsOf, Booking, BookingId, BookingState, Currency, Hold, HoldId, HoldState, HoldStatus,
        Money, OperatorCommand, PaymentId, Reason, SeatSet, SessionId, ShowStatus, StateName,
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
    fn a_hold_message_becomes_a_sorted_seat_set_with_its_grant() {
        let message = pb::HoldRequest {
            show_id: 4,
            seats: vec![56, 54, 55],
            price_version: 2,
            grant_ticket_id: 3,
            seat_labels: Vec::new(),
        };
        let (show, request) = hold_request(&message).unwrap();
        assert_eq!(show, ShowId(4));
        assert_eq!(
            request,
            ClientRequest::Hold {
                seats: input::seats("seats", &[54, 55, 56]).unwrap(),
                price_version: 2,
                grant: Some(TicketId(3)),
            }
        );
        let without_grant = pb::HoldRequest { grant_ticket_id: 0, ..message.clone() };
        let (_, request) = hold_request(&without_grant).unwrap();
        assert!(matches!(request, ClientRequest::Hold { grant: None, .. }));
        invalid(hold_request(&pb::HoldRequest { seats: vec![1, 1], ..message.clone() }));
        invalid(hold_request(&pb::HoldRequest { seats: vec![], ..message.clone() }));
        invalid(hold_request(&pb::HoldRequest { show_id: 0, ..message }));
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

    fn hold(state: HoldState) -> Hold {
        let processing = matches!(state, HoldState::Processing { .. });
        Hold {
            id: HoldId(4),
            session: SessionId(9),
            seats: SeatSet::try_from(&[54, 55][..]).unwrap(),
            state,
            created_ms: 100,
            hold_deadline_ms: 300_100,
            price_version: 1,
            price: Money { amount_minor: 2_000, currency: Currency(*b"EUR") },
            grant: Some(TicketId(2)),
            offer: None,
            payments: processing.then_some(PaymentId(5)).into_iter().collect(),
        }
    }

    #[test]
    fn holds_convert_with_their_effective_state_and_deadline() {
        let view =
            HoldView { hold: hold(HoldState::Held), state: HoldStatus::Expired, as_of: AS_OF };
        let reply = hold_reply(ShowId(1), &view);
        assert_eq!(reply.state, "expired");
        assert_eq!((reply.show_id, reply.hold_id, reply.seats.as_slice()), (1, 4, &[54, 55][..]));
        assert_eq!((reply.price_minor, reply.currency.as_str()), (2_000, "EUR"));
        assert_eq!((reply.deadline_ms, reply.grant_ticket_id, reply.payment_id), (300_100, 2, 0));
        assert_eq!((reply.as_of_log_index, reply.as_of_log_time_ms), (7, 1_000));
        let processing = HoldView {
            hold: hold(HoldState::Processing { payment: PaymentId(5), deadline_ms: 400_000 }),
            state: HoldStatus::Processing,
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
            state: TicketStatus::Waiting,
            ahead: 2,
            grant_deadline_ms: None,
            as_of: AS_OF,
        };
        let reply = ticket_reply(ShowId(2), &waiting);
        assert_eq!((reply.state.as_str(), reply.ahead, reply.grant_deadline_ms), ("waiting", 2, 0));
        // An expired grant's deadline is not shown as if it still held.
        let expired = TicketView {
            state: TicketStatus::Expired,
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
    fn payments_say_their_state_and_whether_money_is_owed_back() {
        use statemachine::{PaymentAttempt, PaymentState};
        let attempt = PaymentAttempt {
            id: PaymentId(8),
            hold: HoldId(7),
            session: SessionId(9),
            price: Money { amount_minor: 4_500, currency: Currency(*b"EUR") },
            state: PaymentState::Succeeded { refund_required: true },
            created_ms: 50,
        };
        let view = PaymentView { payment: attempt.clone(), as_of: AS_OF };
        let reply = payment_reply(ShowId(41), &view);
        assert_eq!((reply.show_id, reply.payment_id, reply.hold_id), (41, 8, 7));
        assert_eq!((reply.amount_minor, reply.currency.as_str()), (4_500, "EUR"));
        assert_eq!((reply.state.as_str(), reply.refund_owed), ("succeeded", true));
        assert_eq!((reply.created_ms, reply.as_of_log_index), (50, 7));
        let refunded = PaymentView {
            payment: PaymentAttempt { state: PaymentState::Refunded, ..attempt },
            as_of: AS_OF,
        };
        let reply = payment_reply(ShowId(41), &refunded);
        assert_eq!((reply.state.as_str(), reply.refund_owed), ("refunded", false));
        let closed =
            SalesChanged { show: ShowId(4), group: 2, status: ShowStatus::Closed, duplicate: true };
        let reply = sales_reply(&closed);
        assert_eq!((reply.show_id, reply.group_id, reply.status.as_str()), (4, 2, "closed"));
        assert!(reply.duplicate);
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
        let source = |form, changed| Source { map: &map, group: 3, form, changed };
        let packed = packed_seat_map_reply(&source(Form::Full, &[]));
        assert_eq!(packed.seat_states.as_ref(), [1, 2, 3, 4]);
        assert_eq!(packed.seat_classes.as_ref(), [0, 0, 0, 0]);
        assert!(packed.seats.is_empty() && packed.classes.is_empty() && !packed.linearizable);
        assert_eq!((packed.group_id, packed.seat_count, packed.changes_since_log_index), (3, 4, 0));
        // Compact: 2 bits per seat, seat 0 lowest; free 0, held 1, booked 2, reserved 3.
        let compact = packed_seat_map_reply(&source(Form::Compact, &[]));
        assert_eq!(compact.seat_bits.as_ref(), [0b11_10_01_00]);
        assert!(compact.seat_states.is_empty() && compact.seat_classes.is_empty());
        assert_eq!(compact.seat_count, 4);
        // Changes: distances from the previous changed seat, and each one's status now.
        let changes = packed_seat_map_reply(&source(Form::Changes { since: 5 }, &[1, 3]));
        assert_eq!(changes.changes_since_log_index, 5);
        assert_eq!(changes.changed_seats, [1, 2]);
        assert_eq!(changes.changed_states.as_ref(), [2, 4]);
        assert!(changes.seat_states.is_empty() && changes.seat_bits.is_empty());
        let reply = seat_map_reply(&map, true);
        assert_eq!(reply.status, "on_sale");
        assert!(reply.linearizable);
        assert_eq!(reply.seats, [1, 2, 3, 4]);
        assert_eq!(reply.classes, [0, 0, 0, 0]);
        assert_eq!(reply.as_of_log_index, 7);
    }
}
