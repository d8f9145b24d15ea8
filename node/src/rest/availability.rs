//! A show's seat availability for browsers at on-sale rates: one character per seat, the body
//! encoded once per rebuild (`crate::seat_maps`: one rebuild per show at a time, at most every
//! 50 ms) and served to every caller until the next, with an `ETag` that names the replica
//! position it reflects (`version`), `Cache-Control: max-age` inside the 2 s staleness budget, and
//! `304 Not Modified` for a caller that already has it. A caller that kept a map asks with
//! `?since=<its version>` and gets only the seats that changed since, when the node can tell
//! (see `crate::seat_maps`), else the whole map. The hall's geometry is served apart, once per
//! hall and immutable (`/v1/halls/{hall_id}/geometry`).
//!
//! Owns the compact shape, the changes' shape, versions and the HTTP caching headers. A
//! replica that cannot confirm that it has every acknowledged write answers `503` with
//! `Retry-After` instead of a map a cache would take as fresh.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use statemachine::SeatStatus;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::ids::parse_show_id;
use crate::rest::types::AsOf;
use crate::seat_maps::{AVAILABILITY_MAX_AGE_S, Form, Source};

/// A show's seats by status, compactly; or, asked `since` a version the node can tell the
/// changes from, only the seats that changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Availability {
    /// The show.
    pub show_id: u64,
    /// Its seats.
    pub seat_count: u32,
    /// One character per seat, seat 0 first: `F` free, `H` held, `B` booked, `R` kept for or
    /// offered to the waitlist. Absent when the answer carries only changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seats: Option<String>,
    /// Present when the answer carries only what changed since this version (the `since`
    /// asked for): `changed_seats` and `changed`; every other seat is as the caller has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_since: Option<String>,
    /// The seats whose status changed, ascending (with `changes_since`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_seats: Option<Vec<u32>>,
    /// Their statuses now, one character each as in `seats`, in the same order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<String>,
    /// The version this reflects, `<group>.<log index>`: what to send as `since` next time
    /// (the `ETag` names it too).
    pub version: String,
    /// The replica position this reflects.
    pub as_of: AsOf,
}

/// `GET /v1/shows/{show_id}/availability`'s query.
#[derive(Debug, Default, Deserialize)]
pub struct AvailabilityQuery {
    /// The `version` of the map the caller has.
    since: Option<String>,
}

/// An encoded answer: its body and its entity tag.
#[derive(Debug)]
pub struct Encoded {
    body: Bytes,
    etag: HeaderValue,
}

/// The character of a seat status.
fn letter(status: SeatStatus) -> char {
    match status {
        SeatStatus::Free => 'F',
        SeatStatus::Held => 'H',
        SeatStatus::Booked => 'B',
        SeatStatus::Reserved => 'R',
    }
}

/// The version of a map as of `log_index` of `group`: equal positions of a group are equal
/// states on every replica, so it holds across nodes.
fn version_of(group: u64, log_index: u64) -> String {
    format!("{group}.{log_index}")
}

/// A `since` parameter: a version (`<group>.<log index>`).
fn parse_version(since: &str) -> Result<(u64, u64), ApiError> {
    let parsed = since
        .split_once('.')
        .and_then(|(group, index)| Some((group.parse().ok()?, index.parse().ok()?)));
    match parsed {
        Some((group, index)) if index > 0 => Ok((group, index)),
        _ => Err(ApiError::InvalidArgument(format!(
            "since: {since:?} is not a version `<group>.<log index>` from an earlier answer"
        ))),
    }
}

/// Encodes a map once for every caller of its rebuild (the compact form is the whole one).
pub fn encode(source: &Source<'_>) -> Encoded {
    let map = source.map;
    let version = version_of(source.group, map.as_of.log_index);
    let mut availability = Availability {
        show_id: map.show.0,
        seat_count: u32::try_from(map.seats.len()).expect("a show has at most 100,000 seats"),
        seats: None,
        changes_since: None,
        changed_seats: None,
        changed: None,
        version: version.clone(),
        as_of: map.as_of.into(),
    };
    let etag = match source.form {
        Form::Full | Form::Compact => {
            availability.seats = Some(map.seats.iter().copied().map(letter).collect());
            format!("\"{}-{version}\"", map.show.0)
        }
        Form::Changes { since } => {
            let changed = source.changed.iter().map(|&seat| letter(map.seats[seat as usize]));
            availability.changes_since = Some(version_of(source.group, since));
            availability.changed_seats = Some(source.changed.to_vec());
            availability.changed = Some(changed.collect());
            format!("\"{}-{version}-since-{since}\"", map.show.0)
        }
    };
    let body = serde_json::to_vec(&availability).expect("plain data serializes");
    Encoded { body: body.into(), etag: HeaderValue::from_str(&etag).expect("digits in quotes") }
}

/// A show's seats by status, compactly (one character per seat) or only what changed since a
/// version the caller has, cacheable for a second.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}/availability", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("since" = Option<String>, Query, description = "The `version` of the map you have: answer with only the seats changed since, when the node can tell"),
        ("If-None-Match" = Option<String>, Header, description = "The ETag of the map you have"),
    ),
    responses(
        (status = 200, description = "The availability; `ETag` names its `as_of`", body = Availability),
        (status = 304, description = "Not modified since the `ETag` given"),
        (status = 400, description = "`invalid_argument`: `since` is not a version", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "This replica cannot confirm it is fresh; retry (`Retry-After`)", body = ErrorBody),
    )
)]
pub async fn get_availability(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
    query: Result<Query<AvailabilityQuery>, axum::extract::rejection::QueryRejection>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let Query(query) = query
        .map_err(|error| ApiError::InvalidArgument(format!("query: {}", error.body_text())))?;
    let since = query.since.as_deref().map(parse_version).transpose()?;
    let (_, map) = state.availability.shared_as(&state.service, show, true, since, false).await?;
    let has_it =
        request.get(header::IF_NONE_MATCH).and_then(|value| value.to_str().ok()).is_some_and(
            |tags| tags.split(',').any(|tag| tag.trim().as_bytes() == map.etag.as_bytes()),
        );
    let mut response = if has_it {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], map.body.clone()).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, map.etag.clone());
    let cache = format!("public, max-age={AVAILABILITY_MAX_AGE_S}");
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_str(&cache).expect("ASCII"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use statemachine::{Currency, SeatMap, ShowId, ShowStatus};

    #[test]
    fn a_map_is_one_letter_per_seat_tagged_with_its_position() {
        let map = SeatMap {
            show: ShowId(7),
            status: ShowStatus::OnSale,
            price_version: 1,
            currency: Currency(*b"EUR"),
            prices_minor: vec![100],
            classes: vec![0; 4],
            seats: vec![
                SeatStatus::Free,
                SeatStatus::Held,
                SeatStatus::Booked,
                SeatStatus::Reserved,
            ],
            as_of: statemachine::AsOf { log_index: 42, log_time_ms: 1_000 },
        };
        let source = |form, changed| Source { map: &map, group: 2, form, changed };
        let encoded = encode(&source(Form::Full, &[]));
        let body: Availability = serde_json::from_slice(&encoded.body).unwrap();
        assert_eq!(body.seats.as_deref(), Some("FHBR"));
        assert_eq!(body.seat_count, 4);
        assert_eq!(body.as_of, AsOf { log_index: 42, log_time_ms: 1_000 });
        assert_eq!((body.version.as_str(), body.changes_since), ("2.42", None));
        assert_eq!(encoded.etag, "\"7-2.42\"");
        // Only the changes since version 2.40: seat 1 held and seat 3 reserved now.
        let encoded = encode(&source(Form::Changes { since: 40 }, &[1, 3]));
        let body: Availability = serde_json::from_slice(&encoded.body).unwrap();
        assert_eq!(body.seats, None);
        assert_eq!(body.changes_since.as_deref(), Some("2.40"));
        assert_eq!(body.changed_seats, Some(vec![1, 3]));
        assert_eq!(body.changed.as_deref(), Some("HR"));
        assert_eq!(encoded.etag, "\"7-2.42-since-40\"");
    }

    #[test]
    fn since_is_a_version_from_an_answer() {
        assert_eq!(parse_version("2.42").unwrap(), (2, 42));
        for bad in ["", "2", "2.", ".4", "x.4", "2.0", "2.4.5", "-1.4"] {
            assert!(parse_version(bad).is_err(), "{bad:?}");
        }
    }
}
