//! Archiving a show over REST (operator): `POST /v1/shows/{show_id}/archive` archives an ended,
//! settled show; `GET /v1/shows/{show_id}/archive` answers its archive as this node wrote it
//! (JSON Lines, `application/x-ndjson`, the format in `statemachine`'s `archive.rs`).
//!
//! Owns the JSON shape of the answer and the order of checks: the operator credential first,
//! then the show id (and the idempotency key of the POST), then one operation. Never judges
//! whether a show may be archived (the state machine does) and never reads an archive's
//! records (the audit endpoint does, through `operations::audit_trail`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::hex;
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, Operator};
use crate::rest::ids::parse_show_id;

/// What archiving a show did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowArchived {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// The SHA-256 of the archive's bytes, lowercase hex.
    pub digest: String,
    /// The archive's length in bytes.
    pub bytes: u64,
    /// The show was archived before: nothing changed.
    pub duplicate: bool,
}

/// Archives a show (operator): a show whose sales are closed or cancelled and whose money is
/// settled (no live hold, no payment awaiting the provider, no refund owed, no live ticket or
/// waitlist entry, no undelivered outbox event) leaves its group's state for an archive file on
/// every replica. From then on any call about it answers 410 `show_archived`, and its audit
/// trails are read from the archive. Idempotent: again, it answers `duplicate`.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/archive", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The show is archived", body = ShowArchived),
        (status = 400, description = "Malformed show id or key", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`show_not_settled` (what remains, in the message), or \
            `archive_changed` (the show changed meanwhile: call again)", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn archive_show(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; archiving is idempotent by the show's state.
    _key: Idempotency,
    Path(show_id): Path<String>,
) -> Result<Json<ShowArchived>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let archived = operations::archive_show(&state.service, show).await?;
    Ok(Json(ShowArchived {
        show_id: archived.show.0,
        group_id: archived.group,
        digest: hex(&archived.digest),
        bytes: archived.bytes,
        duplicate: archived.duplicate,
    }))
}

/// An archived show's archive (operator), as this node's replica wrote it: JSON Lines, one
/// record per line, the first a header naming the format and its version.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}/archive", tag = "shows",
    params(("show_id" = u64, Path, description = "The show")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The archive (application/x-ndjson)", body = String),
        (status = 400, description = "Malformed show id", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "Not archived, or no copy on this node (a replica that \
            caught up through a snapshot): ask another node", body = ErrorBody),
    )
)]
pub async fn get_archive(
    State(state): State<RestState>,
    _operator: Operator,
    Path(show_id): Path<String>,
) -> Result<Response, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let bytes = operations::read_archive_file(&state.service, show)?;
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], bytes).into_response())
}
