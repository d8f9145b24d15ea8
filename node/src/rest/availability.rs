//! A show's seat availability for browsers at on-sale rates: one character per seat, the body
//! encoded once per rebuild (`crate::seat_maps`: one rebuild per show at a time, at most every
//! 50 ms) and served to every caller until the next, with an `ETag` that names the replica
//! position it reflects (`as_of`), `Cache-Control: max-age` inside the 2 s staleness budget, and
//! `304 Not Modified` for a caller that already has it. The hall's geometry is served apart,
//! once per hall and immutable (`/v1/halls/{hall_id}/geometry`).
//!
//! Owns the compact shape and the HTTP caching headers. A replica that cannot confirm that it
//! has every acknowledged write answers `503` with `Retry-After` instead of a map a cache would
//! take as fresh.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use statemachine::{SeatMap, SeatStatus};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::ids::parse_show_id;
use crate::rest::types::AsOf;
use crate::seat_maps::AVAILABILITY_MAX_AGE_S;

/// A show's seats by status, compactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Availability {
    /// The show.
    pub show_id: u64,
    /// Its seats.
    pub seat_count: u32,
    /// One character per seat, seat 0 first: `F` free, `H` held, `B` booked, `R` kept for or
    /// offered to the waitlist.
    pub seats: String,
    /// The replica position this reflects (also the `ETag`).
    pub as_of: AsOf,
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

/// The entity tag of a map as of `log_index`: equal positions of a group are equal states on
/// every replica, so the tag holds across nodes.
fn etag_of(show: u64, log_index: u64) -> String {
    format!("\"{show}-{log_index}\"")
}

/// Encodes a map once for every caller of its rebuild.
pub fn encode(map: &SeatMap) -> Encoded {
    let availability = Availability {
        show_id: map.show.0,
        seat_count: u32::try_from(map.seats.len()).expect("a show has at most 100,000 seats"),
        seats: map.seats.iter().copied().map(letter).collect(),
        as_of: map.as_of.into(),
    };
    let body = serde_json::to_vec(&availability).expect("plain data serializes");
    let etag = etag_of(map.show.0, map.as_of.log_index);
    Encoded { body: body.into(), etag: HeaderValue::from_str(&etag).expect("digits in quotes") }
}

/// A show's seats by status, compactly (one character per seat), cacheable for a second.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}/availability", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("If-None-Match" = Option<String>, Header, description = "The ETag of the map you have"),
    ),
    responses(
        (status = 200, description = "The availability; `ETag` names its `as_of`", body = Availability),
        (status = 304, description = "Not modified since the `ETag` given"),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "This replica cannot confirm it is fresh; retry (`Retry-After`)", body = ErrorBody),
    )
)]
pub async fn get_availability(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let built = state.availability.shared(&state.service, show, true).await?;
    let has_it =
        request.get(header::IF_NONE_MATCH).and_then(|value| value.to_str().ok()).is_some_and(
            |tags| tags.split(',').any(|tag| tag.trim().as_bytes() == built.map.etag.as_bytes()),
        );
    let mut response = if has_it {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], built.map.body.clone()).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, built.map.etag.clone());
    let cache = format!("public, max-age={AVAILABILITY_MAX_AGE_S}");
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_str(&cache).expect("ASCII"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use statemachine::{Currency, ShowId, ShowStatus};

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
        let encoded = encode(&map);
        let body: Availability = serde_json::from_slice(&encoded.body).unwrap();
        assert_eq!(body.seats, "FHBR");
        assert_eq!(body.seat_count, 4);
        assert_eq!(body.as_of, AsOf { log_index: 42, log_time_ms: 1_000 });
        assert_eq!(encoded.etag, "\"7-42\"");
    }
}
