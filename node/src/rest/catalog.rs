//! The catalog over REST: the operator's create, update and retire of venues, halls and events,
//! and the buyer's browse path events → venues → halls → shows, with each hall's geometry
//! (labels, classes, drawing coordinates) served once, cacheable for ever.
//!
//! Owns the catalog's JSON shapes and their translation to the state machine's records
//! (coordinates in degrees on the wire, integer micro-degrees in the log). Reads come from this
//! node's replica of group 0, labelled `as_of`; writes go to group 0's leader (forwarded there
//! like every write). Never judges a catalog rule: the state machine does (`catalog.rs` there).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use statemachine::{
    CatalogCommand, CatalogKind, Change, EventId, EventSpec, Group, HallId, HallSpec, Record, Row,
    Section, ShowId, VenueId, VenueSpec,
};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator};
use crate::rest::ids::parse_record_id;
use crate::rest::types::AsOf;
use crate::{input, operations};

/// How long a browser and a cache may keep a hall's geometry: it never changes (a hall's seats
/// are fixed when it is created), so a year, `immutable`.
pub const GEOMETRY_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

// ---- Writes -------------------------------------------------------------------------------

/// A venue's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VenueBody {
    /// The venue's id: required when creating (non-zero, chosen by the operator), absent or
    /// the path's when updating.
    #[serde(default)]
    pub venue_id: Option<u64>,
    /// Its name (1..=200 bytes).
    pub name: String,
    /// Its street address.
    pub address: String,
    /// Its city.
    pub city: String,
    /// Its postal code (letters, digits, spaces, `-`).
    pub postal_code: String,
    /// Latitude in degrees (−90..=90; kept to the micro-degree).
    pub latitude: f64,
    /// Longitude in degrees (−180..=180; kept to the micro-degree).
    pub longitude: f64,
}

/// A hall's content: its venue, its name and its seats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HallBody {
    /// The hall's id: required when creating, absent or the path's when updating.
    #[serde(default)]
    pub hall_id: Option<u64>,
    /// The venue it is in.
    pub venue_id: u64,
    /// Its name.
    pub name: String,
    /// Its sections, in seat-numbering order (seats are numbered from 0 section by section,
    /// row by row). Never changes after creation: an update may only rename the hall.
    pub sections: Vec<SectionBody>,
}

/// A section of a hall: rows of one seat class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionBody {
    /// Its name, e.g. `Stalls`.
    pub name: String,
    /// The class of its seats: an index into a show's `prices_minor`.
    pub class: u8,
    /// Its rows.
    pub rows: Vec<RowBody>,
}

/// A straight row of seats: seat `i` is labelled `{label}{first_number + i}` and drawn at
/// `(x + i·dx, y + i·dy)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RowBody {
    /// 1..=4 upper-case letters, unique in the hall.
    pub label: String,
    /// The number of its first seat (default 1).
    #[serde(default = "one")]
    pub first_number: u32,
    /// Its seats (1..=1000).
    pub count: u32,
    /// Where its first seat is drawn.
    pub x: i32,
    /// Where its first seat is drawn.
    pub y: i32,
    /// The step to the next seat (default 1).
    #[serde(default = "one_i32")]
    pub dx: i32,
    /// The step to the next seat (default 0).
    #[serde(default)]
    pub dy: i32,
}

fn one() -> u32 {
    1
}

fn one_i32() -> i32 {
    1
}

/// An event's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventBody {
    /// The event's id: required when creating, absent or the path's when updating.
    #[serde(default)]
    pub event_id: Option<u64>,
    /// Its title.
    pub title: String,
    /// Its description (default empty).
    #[serde(default)]
    pub description: String,
    /// Its genre, e.g. `drama`.
    pub genre: String,
    /// Its language, a BCP 47 tag such as `en` or `pt-BR`.
    pub language: String,
    /// Its running time in minutes.
    pub duration_min: u32,
    /// Its images, by URL (at most 8).
    #[serde(default)]
    pub images: Vec<String>,
}

/// What a catalog write did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CatalogWritten {
    /// `venue`, `hall`, `event` or `listing`.
    pub kind: String,
    /// The record's id.
    pub id: u64,
    /// The catalog's revision afterwards (the log index of its last change).
    pub revision: u64,
    /// Whether anything changed (false: the record already was as asked, e.g. a retry).
    pub changed: bool,
}

/// The id of a write: the body's for a create (required), the path's for an update (the body
/// may repeat it).
fn write_id(field: &str, path: Option<&str>, body: Option<u64>) -> Result<u64, ApiError> {
    match (path, body) {
        (None, Some(id)) if id != 0 => Ok(id),
        (None, _) => Err(ApiError::InvalidArgument(format!("{field}: required, non-zero"))),
        (Some(path), body) => {
            let id = parse_record_id(field, path)?;
            if body.is_some_and(|body| body != id) {
                return Err(ApiError::InvalidArgument(format!("{field}: differs from the path")));
            }
            Ok(id)
        }
    }
}

impl VenueBody {
    fn spec(&self) -> Result<VenueSpec, ApiError> {
        Ok(VenueSpec {
            name: self.name.clone(),
            address: self.address.clone(),
            city: self.city.clone(),
            postal_code: self.postal_code.clone(),
            lat_e6: input::micro_degrees("latitude", self.latitude, 90.0)?,
            lon_e6: input::micro_degrees("longitude", self.longitude, 180.0)?,
        })
    }
}

impl HallBody {
    fn spec(&self) -> Result<HallSpec, ApiError> {
        let venue = crate::rest::ids::show_id("venue_id", self.venue_id)?.0;
        Ok(HallSpec {
            venue: VenueId(venue),
            name: self.name.clone(),
            sections: self
                .sections
                .iter()
                .map(|section| Section {
                    name: section.name.clone(),
                    class: section.class,
                    rows: section
                        .rows
                        .iter()
                        .map(|row| Row {
                            label: row.label.clone(),
                            first_number: row.first_number,
                            count: row.count,
                            x: row.x,
                            y: row.y,
                            dx: row.dx,
                            dy: row.dy,
                        })
                        .collect(),
                })
                .collect(),
        })
    }
}

impl EventBody {
    fn spec(&self) -> EventSpec {
        EventSpec {
            title: self.title.clone(),
            description: self.description.clone(),
            genre: self.genre.clone(),
            language: self.language.clone(),
            duration_min: self.duration_min,
            images: self.images.clone(),
        }
    }
}

/// Proposes `command` and answers what it did: `201 Created` when a create changed the
/// catalog, else `200`.
async fn write(
    state: &RestState,
    command: CatalogCommand,
    created: bool,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let written = operations::change_catalog(&state.service, command).await?;
    let status = if created && written.changed { StatusCode::CREATED } else { StatusCode::OK };
    let operations::CatalogWritten { kind, id, revision, changed } = written;
    Ok((status, Json(CatalogWritten { kind: kind.name().into(), id, revision, changed })))
}

/// Creates a venue (operator). The same venue again is `200` with `changed: false`.
#[utoipa::path(
    post, path = "/v1/venues", tag = "catalog",
    params(("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = VenueBody, security(("operator" = [])),
    responses(
        (status = 201, description = "Created", body = CatalogWritten),
        (status = 200, description = "Already so", body = CatalogWritten),
        (status = 400, description = "A bad field, named", body = ErrorBody),
        (status = 409, description = "`catalog_exists`: another venue has the id", body = ErrorBody),
    )
)]
pub async fn create_venue(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    JsonBody(body): JsonBody<VenueBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let venue = VenueId(write_id("venue_id", None, body.venue_id)?);
    let change = Change::Create(body.spec()?);
    write(&state, CatalogCommand::Venue { venue, change }, true).await
}

/// Replaces a venue's content (operator).
#[utoipa::path(
    put, path = "/v1/venues/{venue_id}", tag = "catalog",
    params(("venue_id" = u64, Path, description = "The venue"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = VenueBody, security(("operator" = [])),
    responses(
        (status = 200, description = "Updated", body = CatalogWritten),
        (status = 400, description = "A bad field, named", body = ErrorBody),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
        (status = 409, description = "`catalog_retired`", body = ErrorBody),
    )
)]
pub async fn update_venue(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(venue_id): Path<String>,
    JsonBody(body): JsonBody<VenueBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let venue = VenueId(write_id("venue_id", Some(&venue_id), body.venue_id)?);
    let change = Change::Update(body.spec()?);
    write(&state, CatalogCommand::Venue { venue, change }, false).await
}

/// Retires a venue (operator): kept for the bookings that name it, hidden from browsing, and
/// no hall or show can be added to it.
#[utoipa::path(
    delete, path = "/v1/venues/{venue_id}", tag = "catalog",
    params(("venue_id" = u64, Path, description = "The venue"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "Retired", body = CatalogWritten),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn retire_venue(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(venue_id): Path<String>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let venue = VenueId(parse_record_id("venue_id", &venue_id)?);
    write(&state, CatalogCommand::Venue { venue, change: Change::Retire }, false).await
}

/// Creates a hall with its seats (operator). Its geometry never changes afterwards.
#[utoipa::path(
    post, path = "/v1/halls", tag = "catalog",
    params(("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = HallBody, security(("operator" = [])),
    responses(
        (status = 201, description = "Created", body = CatalogWritten),
        (status = 200, description = "Already so", body = CatalogWritten),
        (status = 400, description = "A bad field, named", body = ErrorBody),
        (status = 404, description = "`catalog_not_found`: no such venue", body = ErrorBody),
        (status = 409, description = "`catalog_exists`, `catalog_retired` (the venue)", body = ErrorBody),
    )
)]
pub async fn create_hall(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    JsonBody(body): JsonBody<HallBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let hall = HallId(write_id("hall_id", None, body.hall_id)?);
    let change = Change::Create(body.spec()?);
    write(&state, CatalogCommand::Hall { hall, change }, true).await
}

/// Renames a hall (operator): the venue and sections must be the hall's own (`400` otherwise).
#[utoipa::path(
    put, path = "/v1/halls/{hall_id}", tag = "catalog",
    params(("hall_id" = u64, Path, description = "The hall"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = HallBody, security(("operator" = [])),
    responses(
        (status = 200, description = "Updated", body = CatalogWritten),
        (status = 400, description = "A bad field, or a changed geometry", body = ErrorBody),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
        (status = 409, description = "`catalog_retired`", body = ErrorBody),
    )
)]
pub async fn update_hall(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(hall_id): Path<String>,
    JsonBody(body): JsonBody<HallBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let hall = HallId(write_id("hall_id", Some(&hall_id), body.hall_id)?);
    let change = Change::Update(body.spec()?);
    write(&state, CatalogCommand::Hall { hall, change }, false).await
}

/// Retires a hall (operator): no new show can be made in it.
#[utoipa::path(
    delete, path = "/v1/halls/{hall_id}", tag = "catalog",
    params(("hall_id" = u64, Path, description = "The hall"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "Retired", body = CatalogWritten),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn retire_hall(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(hall_id): Path<String>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let hall = HallId(parse_record_id("hall_id", &hall_id)?);
    write(&state, CatalogCommand::Hall { hall, change: Change::Retire }, false).await
}

/// Creates an event (operator).
#[utoipa::path(
    post, path = "/v1/events", tag = "catalog",
    params(("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = EventBody, security(("operator" = [])),
    responses(
        (status = 201, description = "Created", body = CatalogWritten),
        (status = 200, description = "Already so", body = CatalogWritten),
        (status = 400, description = "A bad field, named", body = ErrorBody),
        (status = 409, description = "`catalog_exists`", body = ErrorBody),
    )
)]
pub async fn create_event(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    JsonBody(body): JsonBody<EventBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let event = EventId(write_id("event_id", None, body.event_id)?);
    write(&state, CatalogCommand::Event { event, change: Change::Create(body.spec()) }, true).await
}

/// Replaces an event's content (operator).
#[utoipa::path(
    put, path = "/v1/events/{event_id}", tag = "catalog",
    params(("event_id" = u64, Path, description = "The event"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = EventBody, security(("operator" = [])),
    responses(
        (status = 200, description = "Updated", body = CatalogWritten),
        (status = 400, description = "A bad field, named", body = ErrorBody),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
        (status = 409, description = "`catalog_retired`", body = ErrorBody),
    )
)]
pub async fn update_event(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(event_id): Path<String>,
    JsonBody(body): JsonBody<EventBody>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let event = EventId(write_id("event_id", Some(&event_id), body.event_id)?);
    write(&state, CatalogCommand::Event { event, change: Change::Update(body.spec()) }, false).await
}

/// Retires an event (operator): hidden from browsing; no new show of it can be listed.
#[utoipa::path(
    delete, path = "/v1/events/{event_id}", tag = "catalog",
    params(("event_id" = u64, Path, description = "The event"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "Retired", body = CatalogWritten),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn retire_event(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(event_id): Path<String>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let event = EventId(parse_record_id("event_id", &event_id)?);
    write(&state, CatalogCommand::Event { event, change: Change::Retire }, false).await
}

/// Delists a show (operator): it leaves browsing; its sales are the show's own controls.
#[utoipa::path(
    delete, path = "/v1/shows/{show_id}/listing", tag = "catalog",
    params(("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "Delisted", body = CatalogWritten),
        (status = 404, description = "`catalog_not_found`: the show is not listed", body = ErrorBody),
    )
)]
pub async fn delist_show(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(show_id): Path<String>,
) -> Result<(StatusCode, Json<CatalogWritten>), ApiError> {
    let show = crate::rest::ids::parse_show_id("show_id", &show_id)?;
    write(&state, CatalogCommand::Listing { show, change: Change::Retire }, false).await
}

// ---- Reads --------------------------------------------------------------------------------

/// A venue as buyers browse it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Venue {
    /// The venue.
    pub venue_id: u64,
    /// Its name.
    pub name: String,
    /// Its street address.
    pub address: String,
    /// Its city.
    pub city: String,
    /// Its postal code.
    pub postal_code: String,
    /// Latitude in degrees.
    pub latitude: f64,
    /// Longitude in degrees.
    pub longitude: f64,
    /// Whether it is retired.
    pub retired: bool,
}

impl Venue {
    fn of(id: VenueId, record: &Record<VenueSpec>) -> Venue {
        let spec = &record.spec;
        Venue {
            venue_id: id.0,
            name: spec.name.clone(),
            address: spec.address.clone(),
            city: spec.city.clone(),
            postal_code: spec.postal_code.clone(),
            latitude: f64::from(spec.lat_e6) / 1e6,
            longitude: f64::from(spec.lon_e6) / 1e6,
            retired: record.retired,
        }
    }
}

/// A hall as buyers browse it (its seats are in its geometry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Hall {
    /// The hall.
    pub hall_id: u64,
    /// Its venue.
    pub venue_id: u64,
    /// Its name.
    pub name: String,
    /// Its seats.
    pub seat_count: u32,
    /// Its sections, in seat order.
    pub sections: Vec<SectionSummary>,
    /// Whether it is retired.
    pub retired: bool,
    /// Where its geometry is (cacheable for ever).
    pub geometry_url: String,
}

/// A section of a hall, summarized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SectionSummary {
    /// Its name.
    pub name: String,
    /// Its seat class.
    pub class: u8,
    /// Its first seat's number.
    pub first_seat: u32,
    /// Its seats.
    pub seat_count: u32,
}

impl Hall {
    fn of(id: HallId, record: &Record<HallSpec>) -> Hall {
        let spec = &record.spec;
        let mut first_seat = 0;
        let sections = spec
            .sections
            .iter()
            .map(|section| {
                let seat_count = section.rows.iter().map(|row| row.count).sum();
                let summary = SectionSummary {
                    name: section.name.clone(),
                    class: section.class,
                    first_seat,
                    seat_count,
                };
                first_seat += seat_count;
                summary
            })
            .collect();
        Hall {
            hall_id: id.0,
            venue_id: spec.venue.0,
            name: spec.name.clone(),
            seat_count: spec.seat_count(),
            sections,
            retired: record.retired,
            geometry_url: format!("/v1/halls/{}/geometry", id.0),
        }
    }
}

/// An event as buyers browse it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// The event.
    pub event_id: u64,
    /// Its title.
    pub title: String,
    /// Its description.
    pub description: String,
    /// Its genre.
    pub genre: String,
    /// Its language.
    pub language: String,
    /// Its running time in minutes.
    pub duration_min: u32,
    /// Its images, by URL.
    pub images: Vec<String>,
    /// Whether it is retired.
    pub retired: bool,
}

impl Event {
    fn of(id: EventId, record: &Record<EventSpec>) -> Event {
        let spec = &record.spec;
        Event {
            event_id: id.0,
            title: spec.title.clone(),
            description: spec.description.clone(),
            genre: spec.genre.clone(),
            language: spec.language.clone(),
            duration_min: spec.duration_min,
            images: spec.images.clone(),
            retired: record.retired,
        }
    }
}

/// A listed show: which event, where, when (its prices and seats are the show's:
/// `GET /v1/shows/{show_id}` and `/seats`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Listing {
    /// The show.
    pub show_id: u64,
    /// When it starts (Unix ms).
    pub starts_at_ms: u64,
    /// The event.
    pub event_id: u64,
    /// The event's title.
    pub title: String,
    /// The hall.
    pub hall_id: u64,
    /// The hall's name.
    pub hall_name: String,
    /// The venue.
    pub venue_id: u64,
    /// The venue's name.
    pub venue_name: String,
    /// The venue's city.
    pub city: String,
    /// Whether the show was delisted.
    pub delisted: bool,
}

impl Listing {
    /// The listing of `show` joined with its event, hall and venue, if it is listed.
    fn of(state: &Group, show: ShowId) -> Option<Listing> {
        let catalog = state.catalog();
        let listing = catalog.listing(show)?;
        let event = catalog.event(listing.spec.event)?;
        let hall = catalog.hall(listing.spec.hall)?;
        let venue = catalog.venue(hall.spec.venue)?;
        Some(Listing {
            show_id: show.0,
            starts_at_ms: listing.spec.starts_at_ms,
            event_id: listing.spec.event.0,
            title: event.spec.title.clone(),
            hall_id: listing.spec.hall.0,
            hall_name: hall.spec.name.clone(),
            venue_id: hall.spec.venue.0,
            venue_name: venue.spec.name.clone(),
            city: venue.spec.city.clone(),
            delisted: listing.retired,
        })
    }

    /// Whether a buyer browsing sees it (`Catalog::browsable`).
    fn browsable(state: &Group, show: ShowId) -> bool {
        state.catalog().browsable(show)
    }
}

/// A list of venues.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VenueList {
    /// The venues, in id order.
    pub venues: Vec<Venue>,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// A list of events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    /// The events, in id order.
    pub events: Vec<Event>,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// A list of listed shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListingList {
    /// The shows, by start time then show id.
    pub shows: Vec<Listing>,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// A venue with its halls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VenueDetail {
    /// The venue.
    pub venue: Venue,
    /// Its live halls, in id order.
    pub halls: Vec<Hall>,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// An event with the venues it plays at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventDetail {
    /// The event.
    pub event: Event,
    /// The live venues where a browsable show of it is listed, in id order.
    pub venues: Vec<Venue>,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// A hall with its venue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HallDetail {
    /// The hall.
    pub hall: Hall,
    /// Its venue.
    pub venue: Venue,
    /// The replica state of group 0 this was read from.
    pub as_of: AsOf,
}

/// A hall's seats: labels, classes and where to draw them. Never changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Geometry {
    /// The hall.
    pub hall_id: u64,
    /// Its sections, in seat order.
    pub sections: Vec<SectionSummary>,
    /// Its seats, by seat number (index = the seat's number in every show of the hall).
    pub seats: Vec<GeometrySeat>,
    /// The drawing's bounds: the least x and y of any seat.
    pub min: [i32; 2],
    /// The drawing's bounds: the greatest x and y of any seat.
    pub max: [i32; 2],
}

/// One seat of a hall's geometry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GeometrySeat {
    /// Its label, e.g. `B12`.
    pub label: String,
    /// Its class.
    pub class: u8,
    /// Where it is drawn.
    pub x: i32,
    /// Where it is drawn.
    pub y: i32,
}

/// The filters of `GET /v1/venues`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct VenueQuery {
    /// Only venues in this city (case-insensitive).
    pub city: Option<String>,
    /// Only venues with this postal code (case- and space-insensitive).
    pub postal_code: Option<String>,
}

/// The filters of `GET /v1/events`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Only events of this genre (case-insensitive).
    pub genre: Option<String>,
}

/// The filters of a list of shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ShowQuery {
    /// Only shows at this venue.
    pub venue_id: Option<u64>,
    /// Only shows starting at or after this time (Unix ms).
    pub from_ms: Option<u64>,
    /// Only shows starting before this time (Unix ms).
    pub until_ms: Option<u64>,
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(query)| query)
        .map_err(|rejection| ApiError::InvalidArgument(format!("query: {}", rejection.body_text())))
}

fn normalized(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).flat_map(char::to_lowercase).collect()
}

/// Live venues, optionally in one city or postal code.
#[utoipa::path(
    get, path = "/v1/venues", tag = "catalog", params(VenueQuery),
    responses(
        (status = 200, description = "Live venues", body = VenueList),
        (status = 400, description = "Unknown filter", body = ErrorBody),
    )
)]
pub async fn list_venues(
    State(state): State<RestState>,
    filters: Result<Query<VenueQuery>, QueryRejection>,
) -> Result<Json<VenueList>, ApiError> {
    let filters = query(filters)?;
    let city = filters.city.as_deref().map(normalized);
    let postal = filters.postal_code.as_deref().map(normalized);
    state.service.read_catalog(|group| {
        let venues = group
            .catalog()
            .venues()
            .filter(|(_, record)| !record.retired)
            .filter(|(_, record)| city.as_ref().is_none_or(|c| normalized(&record.spec.city) == *c))
            .filter(|(_, record)| {
                postal.as_ref().is_none_or(|p| normalized(&record.spec.postal_code) == *p)
            })
            .map(|(id, record)| Venue::of(id, record))
            .collect();
        Json(VenueList { venues, as_of: group.as_of().into() })
    })
}

/// A venue and its live halls.
#[utoipa::path(
    get, path = "/v1/venues/{venue_id}", tag = "catalog",
    params(("venue_id" = u64, Path, description = "The venue")),
    responses(
        (status = 200, description = "The venue", body = VenueDetail),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn get_venue(
    State(state): State<RestState>,
    Path(venue_id): Path<String>,
) -> Result<Json<VenueDetail>, ApiError> {
    let venue = VenueId(parse_record_id("venue_id", &venue_id)?);
    state.service.read_catalog(|group| {
        let catalog = group.catalog();
        let record = catalog.venue(venue).ok_or(not_found(CatalogKind::Venue))?;
        let halls = catalog
            .halls()
            .filter(|(_, hall)| hall.spec.venue == venue && !hall.retired)
            .map(|(id, hall)| Hall::of(id, hall))
            .collect();
        Ok(Json(VenueDetail {
            venue: Venue::of(venue, record),
            halls,
            as_of: group.as_of().into(),
        }))
    })?
}

fn not_found(kind: CatalogKind) -> ApiError {
    ApiError::Rejected(statemachine::Rejection::CatalogNotFound { kind })
}

/// Live events, optionally of one genre.
#[utoipa::path(
    get, path = "/v1/events", tag = "catalog", params(EventQuery),
    responses(
        (status = 200, description = "Live events", body = EventList),
        (status = 400, description = "Unknown filter", body = ErrorBody),
    )
)]
pub async fn list_events(
    State(state): State<RestState>,
    filters: Result<Query<EventQuery>, QueryRejection>,
) -> Result<Json<EventList>, ApiError> {
    let genre = query(filters)?.genre.as_deref().map(normalized);
    state.service.read_catalog(|group| {
        let events = group
            .catalog()
            .events()
            .filter(|(_, record)| !record.retired)
            .filter(|(_, record)| {
                genre.as_ref().is_none_or(|g| normalized(&record.spec.genre) == *g)
            })
            .map(|(id, record)| Event::of(id, record))
            .collect();
        Json(EventList { events, as_of: group.as_of().into() })
    })
}

/// An event and the venues where it plays.
#[utoipa::path(
    get, path = "/v1/events/{event_id}", tag = "catalog",
    params(("event_id" = u64, Path, description = "The event")),
    responses(
        (status = 200, description = "The event", body = EventDetail),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn get_event(
    State(state): State<RestState>,
    Path(event_id): Path<String>,
) -> Result<Json<EventDetail>, ApiError> {
    let event = EventId(parse_record_id("event_id", &event_id)?);
    state.service.read_catalog(|group| {
        let catalog = group.catalog();
        let record = catalog.event(event).ok_or(not_found(CatalogKind::Event))?;
        let mut venues = BTreeMap::new();
        for (show, listing) in catalog.listings() {
            if listing.spec.event != event || !Listing::browsable(group, show) {
                continue;
            }
            let Some(hall) = catalog.hall(listing.spec.hall) else { continue };
            if let Some(venue) = catalog.venue(hall.spec.venue) {
                venues.insert(hall.spec.venue, Venue::of(hall.spec.venue, venue));
            }
        }
        Ok(Json(EventDetail {
            event: Event::of(event, record),
            venues: venues.into_values().collect(),
            as_of: group.as_of().into(),
        }))
    })?
}

/// Sorted browsable listings that pass `keep`.
fn listings(
    group: &Group,
    filters: &ShowQuery,
    keep: impl Fn(&Record<statemachine::ListingSpec>, VenueId) -> bool,
) -> ListingList {
    let catalog = group.catalog();
    let mut shows: Vec<Listing> = catalog
        .listings()
        .filter(|&(show, _)| Listing::browsable(group, show))
        .filter(|(_, listing)| {
            let venue = catalog.hall(listing.spec.hall).map(|hall| hall.spec.venue);
            let starts = listing.spec.starts_at_ms;
            venue.is_some_and(|venue| keep(listing, venue))
                && filters.venue_id.is_none_or(|v| venue == Some(VenueId(v)))
                && filters.from_ms.is_none_or(|from| starts >= from)
                && filters.until_ms.is_none_or(|until| starts < until)
        })
        .filter_map(|(show, _)| Listing::of(group, show))
        .collect();
    shows.sort_by_key(|listing| (listing.starts_at_ms, listing.show_id));
    ListingList { shows, as_of: group.as_of().into() }
}

/// An event's browsable shows, by start time (optionally at one venue, in a time range).
#[utoipa::path(
    get, path = "/v1/events/{event_id}/shows", tag = "catalog",
    params(("event_id" = u64, Path, description = "The event"), ShowQuery),
    responses(
        (status = 200, description = "Its shows", body = ListingList),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn event_shows(
    State(state): State<RestState>,
    Path(event_id): Path<String>,
    filters: Result<Query<ShowQuery>, QueryRejection>,
) -> Result<Json<ListingList>, ApiError> {
    let event = EventId(parse_record_id("event_id", &event_id)?);
    let filters = query(filters)?;
    state.service.read_catalog(|group| {
        group.catalog().event(event).ok_or(not_found(CatalogKind::Event))?;
        Ok(Json(listings(group, &filters, |listing, _| listing.spec.event == event)))
    })?
}

/// A hall and its venue.
#[utoipa::path(
    get, path = "/v1/halls/{hall_id}", tag = "catalog",
    params(("hall_id" = u64, Path, description = "The hall")),
    responses(
        (status = 200, description = "The hall", body = HallDetail),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn get_hall(
    State(state): State<RestState>,
    Path(hall_id): Path<String>,
) -> Result<Json<HallDetail>, ApiError> {
    let hall = HallId(parse_record_id("hall_id", &hall_id)?);
    state.service.read_catalog(|group| {
        let catalog = group.catalog();
        let record = catalog.hall(hall).ok_or(not_found(CatalogKind::Hall))?;
        let venue = catalog.venue(record.spec.venue).ok_or(not_found(CatalogKind::Venue))?;
        Ok(Json(HallDetail {
            hall: Hall::of(hall, record),
            venue: Venue::of(record.spec.venue, venue),
            as_of: group.as_of().into(),
        }))
    })?
}

/// A hall's browsable shows, by start time.
#[utoipa::path(
    get, path = "/v1/halls/{hall_id}/shows", tag = "catalog",
    params(("hall_id" = u64, Path, description = "The hall"), ShowQuery),
    responses(
        (status = 200, description = "Its shows", body = ListingList),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn hall_shows(
    State(state): State<RestState>,
    Path(hall_id): Path<String>,
    filters: Result<Query<ShowQuery>, QueryRejection>,
) -> Result<Json<ListingList>, ApiError> {
    let hall = HallId(parse_record_id("hall_id", &hall_id)?);
    let filters = query(filters)?;
    state.service.read_catalog(|group| {
        group.catalog().hall(hall).ok_or(not_found(CatalogKind::Hall))?;
        Ok(Json(listings(group, &filters, |listing, _| listing.spec.hall == hall)))
    })?
}

/// A hall's seats (labels, classes, drawing coordinates), cacheable for ever: a hall's
/// geometry never changes, so the URL names one version (`Cache-Control: immutable`, `ETag`).
#[utoipa::path(
    get, path = "/v1/halls/{hall_id}/geometry", tag = "catalog",
    params(("hall_id" = u64, Path, description = "The hall")),
    responses(
        (status = 200, description = "The geometry", body = Geometry),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "`catalog_not_found`", body = ErrorBody),
    )
)]
pub async fn get_geometry(
    State(state): State<RestState>,
    Path(hall_id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let hall = HallId(parse_record_id("hall_id", &hall_id)?);
    let etag = format!("\"hall-{}\"", hall.0);
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let geometry = state.service.read_catalog(|group| {
        let record = group.catalog().hall(hall).ok_or(not_found(CatalogKind::Hall))?;
        if cached {
            return Ok(None);
        }
        Ok::<_, ApiError>(Some(geometry(hall, record)))
    })??;
    let mut response = match geometry {
        None => StatusCode::NOT_MODIFIED.into_response(),
        Some(geometry) => Json(geometry).into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(GEOMETRY_CACHE_CONTROL));
    headers.insert(header::ETAG, HeaderValue::from_str(&etag).expect("an ASCII tag"));
    Ok(response)
}

fn geometry(hall: HallId, record: &Record<HallSpec>) -> Geometry {
    let seats: Vec<GeometrySeat> = record
        .spec
        .seats()
        .map(|seat| GeometrySeat { label: seat.label, class: seat.class, x: seat.x, y: seat.y })
        .collect();
    let bound = |pick: fn(&GeometrySeat) -> i32, most: bool| {
        let values = seats.iter().map(pick);
        if most { values.max() } else { values.min() }.unwrap_or(0)
    };
    Geometry {
        hall_id: hall.0,
        sections: Hall::of(hall, record).sections,
        min: [bound(|s| s.x, false), bound(|s| s.y, false)],
        max: [bound(|s| s.x, true), bound(|s| s.y, true)],
        seats,
    }
}

/// The listing of `show` as a buyer sees it on the show's summary, if listed.
///
/// # Errors
///
/// `Internal` if the metadata group's state failed.
pub fn listing_of(state: &RestState, show: ShowId) -> Result<Option<Listing>, ApiError> {
    state.service.read_catalog(|group| Listing::of(group, show))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_create_needs_its_id_and_an_update_takes_the_paths() {
        assert_eq!(write_id("venue_id", None, Some(4)).unwrap(), 4);
        assert!(write_id("venue_id", None, None).is_err());
        assert!(write_id("venue_id", None, Some(0)).is_err());
        assert_eq!(write_id("venue_id", Some("4"), None).unwrap(), 4);
        assert_eq!(write_id("venue_id", Some("4"), Some(4)).unwrap(), 4);
        assert!(write_id("venue_id", Some("4"), Some(5)).is_err());
        assert!(write_id("venue_id", Some("04"), None).is_err());
    }

    #[test]
    fn rows_default_to_seats_numbered_from_one_a_step_apart() {
        let hall: HallBody = serde_json::from_value(json!({
            "hall_id": 1, "venue_id": 2, "name": "Sala 1",
            "sections": [{"name": "Plateia", "class": 0,
                "rows": [{"label": "A", "count": 3, "x": 0, "y": 0}]}]
        }))
        .unwrap();
        let spec = hall.spec().unwrap();
        let labels: Vec<String> = spec.seats().map(|seat| seat.label).collect();
        assert_eq!(labels, ["A1", "A2", "A3"]);
        assert_eq!(spec.seats().map(|seat| seat.x).collect::<Vec<_>>(), [0, 1, 2]);
        let unknown = json!({"hall_id": 1, "venue_id": 2, "name": "x", "sections": [],
            "seats": 5});
        assert!(serde_json::from_value::<HallBody>(unknown).is_err());
    }
}
