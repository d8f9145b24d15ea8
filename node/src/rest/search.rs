//! Search over REST: `GET /v1/search` with keywords (typos tolerated), city or postal code, a
//! point and a radius, a start-time range and a genre, sorted by start time, distance or
//! relevance, paged by opaque cursors. Answered from this node's replica of the catalog
//! (`crate::search`, kept up to it), each hit joined with its event, hall and venue.
//!
//! Owns the query's parsing (unknown parameters refused) and the result's JSON shape. Never
//! judges what matches: the index does.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::types::AsOf;
use crate::search::{SEARCH_LIMIT_DEFAULT, SearchQuery, Sort};
use crate::{input, operations};

/// The parameters of `GET /v1/search` (all optional).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// Keywords: every word must appear, allowing a typo or two, in the title, the venue (name,
    /// hall or city) or the description.
    pub q: Option<String>,
    /// The venue's city (case and accents ignored).
    pub city: Option<String>,
    /// The venue's postal code (case and spaces ignored).
    pub postal_code: Option<String>,
    /// Latitude of a point, in degrees (with `lon`).
    pub lat: Option<f64>,
    /// Longitude of a point, in degrees (with `lat`).
    pub lon: Option<f64>,
    /// Only venues within this many km of the point (default: any distance, still measured).
    pub radius_km: Option<f64>,
    /// Only shows starting at or after this time (Unix ms).
    pub from_ms: Option<u64>,
    /// Only shows starting before this time (Unix ms).
    pub until_ms: Option<u64>,
    /// The event's genre (case ignored).
    pub genre: Option<String>,
    /// `start` (default), `distance` (needs `lat` and `lon`) or `relevance` (needs `q`).
    pub sort: Option<Sort>,
    /// Results per page, 1..=100 (default 20).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page (the other parameters must be the same).
    pub cursor: Option<String>,
}

impl SearchParams {
    /// The index's query.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a point given by half, or a radius without a point.
    pub fn query(self) -> Result<SearchQuery, ApiError> {
        let near = input::near(self.lat, self.lon, self.radius_km)?;
        Ok(SearchQuery {
            q: self.q,
            city: self.city,
            postal_code: self.postal_code,
            near,
            from_ms: self.from_ms,
            until_ms: self.until_ms,
            genre: self.genre,
            sort: self.sort.unwrap_or_default(),
            limit: self.limit.unwrap_or(SEARCH_LIMIT_DEFAULT),
            cursor: self.cursor,
        })
    }
}

/// One show found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResult {
    /// The show (`/v1/shows/{show_id}`, its seats and prices).
    pub show_id: u64,
    /// When it starts (Unix ms).
    pub starts_at_ms: u64,
    /// The event.
    pub event_id: u64,
    /// Its title.
    pub title: String,
    /// Its genre.
    pub genre: String,
    /// Its description.
    pub description: String,
    /// Its images, by URL.
    pub images: Vec<String>,
    /// The hall (`/v1/halls/{hall_id}/geometry`, its seats).
    pub hall_id: u64,
    /// The hall's name.
    pub hall_name: String,
    /// The venue.
    pub venue_id: u64,
    /// The venue's name.
    pub venue_name: String,
    /// The venue's city.
    pub city: String,
    /// The venue's postal code.
    pub postal_code: String,
    /// How far the venue is from the query's point, in km (null without a point).
    pub distance_km: Option<f64>,
    /// How well the keywords matched (null without keywords): a sum of fixed weights per word
    /// and field (title 8, venue 4, description 2; half for a near miss).
    pub score: Option<f32>,
}

/// A page of results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResults {
    /// The shows found, in the order asked for.
    pub results: Vec<SearchResult>,
    /// Pass as `cursor` (with the same other parameters) for the next page; null at the end.
    pub next_cursor: Option<String>,
    /// The replica state of the catalog this was read from.
    pub as_of: AsOf,
}

/// Searches the shows on sale in the catalog.
#[utoipa::path(
    get, path = "/v1/search", tag = "catalog", params(SearchParams),
    responses(
        (status = 200, description = "A page of results", body = SearchResults),
        (status = 400, description = "A bad parameter or cursor, named", body = ErrorBody),
    )
)]
pub async fn search(
    State(state): State<RestState>,
    params: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<SearchResults>, ApiError> {
    let Query(params) = params.map_err(|rejection| {
        ApiError::InvalidArgument(format!("query: {}", rejection.body_text()))
    })?;
    let page = operations::search(&state.service, &params.query()?)?;
    let results = page
        .found
        .into_iter()
        .map(|found| SearchResult {
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
        .collect();
    Ok(Json(SearchResults { results, next_cursor: page.next_cursor, as_of: page.as_of.into() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Result<SearchParams, String> {
        let uri: axum::http::Uri = format!("/v1/search?{query}").parse().unwrap();
        Query::<SearchParams>::try_from_uri(&uri)
            .map(|Query(params)| params)
            .map_err(|error| error.body_text())
    }

    #[test]
    fn parameters_parse_and_a_point_needs_both_coordinates() {
        let query = params("q=hamlet&lat=38.7&lon=-9.1&sort=distance&limit=5").unwrap().query();
        let query = query.unwrap();
        assert_eq!(query.q.as_deref(), Some("hamlet"));
        assert_eq!(query.sort, Sort::Distance);
        assert_eq!(
            query.near.map(|near| near.radius_km),
            Some(crate::search::SEARCH_RADIUS_KM_MAX)
        );
        assert_eq!(query.limit, 5);
        assert!(params("lat=38.7").unwrap().query().is_err());
        assert!(params("radius_km=5").unwrap().query().is_err());
        assert!(params("sort=cheapest").is_err());
        assert!(params("qq=hamlet").is_err());
    }
}
