//! Guest sessions over REST: `POST /v1/sessions` issues a token (128 random bits, tagged by
//! the cluster's secret) that every other call presents as `Authorization: Bearer <token>`.
//!
//! Owns the token response shape. Never stores a session and never takes one from a body:
//! the token itself is the proof, and the session id is derived from it (`api/session.rs`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;

/// A new guest session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionToken {
    /// The bearer token: send `Authorization: Bearer <token>` on every other call.
    pub token: String,
}

/// Issues a guest session token (any node verifies a token any node issued).
#[utoipa::path(
    post, path = "/v1/sessions", tag = "sessions",
    responses(
        (status = 201, description = "A new session token", body = SessionToken),
        (status = 500, description = "No randomness", body = ErrorBody),
    )
)]
pub async fn create_session(
    State(state): State<RestState>,
) -> Result<(StatusCode, Json<SessionToken>), ApiError> {
    let token = state.service.shared().sessions.issue()?;
    Ok((StatusCode::CREATED, Json(SessionToken { token })))
}
