//! Guest sessions over REST: `POST /v1/sessions` issues a token (128 random bits, tagged by
//! the cluster's secret) that every other call presents as `Authorization: Bearer <token>`.
//!
//! Owns the token response shape. Never stores a session and never takes one from a body:
//! the token itself is the proof, and the session id is derived from it (`api/session.rs`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;

/// What a new session may be asked with: nothing yet. A body is optional; one that is sent
/// must be a JSON object with no fields, so that a misspelt option is refused, as on every
/// other route, rather than ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {}

impl CreateSessionRequest {
    /// The request of a body (none is the empty request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a body that is not JSON, or has any field.
    pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<CreateSessionRequest, ApiError> {
        if body.is_empty() {
            return Ok(CreateSessionRequest {});
        }
        let is_json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/json"));
        if !is_json {
            return Err(ApiError::InvalidArgument(
                "body: Content-Type must be application/json".into(),
            ));
        }
        let invalid =
            |error: serde_json::Error| ApiError::InvalidArgument(format!("body: {error}"));
        // An object only: serde would also read a struct from a JSON array.
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).map_err(invalid)?;
        serde_json::from_value(serde_json::Value::Object(object)).map_err(invalid)
    }
}

/// A new guest session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionToken {
    /// The bearer token: send `Authorization: Bearer <token>` on every other call.
    pub token: String,
}

/// Issues a guest session token (any node verifies a token any node issued).
#[utoipa::path(
    post, path = "/v1/sessions", tag = "sessions",
    request_body(content = Option<CreateSessionRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "A new session token", body = SessionToken),
        (status = 400, description = "A body that is not `{}`", body = ErrorBody),
        (status = 500, description = "No randomness", body = ErrorBody),
    )
)]
pub async fn create_session(
    State(state): State<RestState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<SessionToken>), ApiError> {
    CreateSessionRequest::parse(&headers, &body)?;
    let token = state.service.shared().sessions.issue()?;
    Ok((StatusCode::CREATED, Json(SessionToken { token })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_asked_for_with_no_body_or_an_empty_object_only() {
        let mut json = HeaderMap::new();
        json.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert!(CreateSessionRequest::parse(&HeaderMap::new(), b"").is_ok());
        assert!(CreateSessionRequest::parse(&json, b"{}").is_ok());
        for bad in [&b"{\"vip\": true}"[..], b"[]", b"{"] {
            let error = CreateSessionRequest::parse(&json, bad).unwrap_err();
            assert_eq!(error.http_status(), 400, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            CreateSessionRequest::parse(&HeaderMap::new(), b"{}").unwrap_err().http_status(),
            400
        );
    }
}
