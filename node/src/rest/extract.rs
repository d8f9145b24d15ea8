//! What REST handlers take from a request before any work: the caller's session, the operator
//! credential, the idempotency key, and the JSON body. Each refuses bad input with a clear
//! error before anything is proposed.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use statemachine::{IdempotencyKey, SessionId};

use crate::error::ApiError;
use crate::rest::RestState;
use crate::sessions;

/// The largest request body accepted (a show layout with thousands of ranges fits).
pub const BODY_BYTES_MAX: usize = 256 * 1024;

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|value| value.to_str().ok())
}

/// The caller's session, from `Authorization: Bearer <token>` (a token this cluster issued).
#[derive(Clone, Copy, Debug)]
pub struct Session(pub SessionId);

impl FromRequestParts<RestState> for Session {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &RestState) -> Result<Self, ApiError> {
        let sessions = &state.service.shared().sessions;
        Ok(Session(sessions.session(header(parts, "authorization"))?))
    }
}

/// Proof that the caller holds the operator credential.
#[derive(Clone, Copy, Debug)]
pub struct Operator;

impl FromRequestParts<RestState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &RestState) -> Result<Self, ApiError> {
        state.service.shared().sessions.operator(header(parts, "authorization"))?;
        Ok(Operator)
    }
}

/// The `Idempotency-Key` of a mutation (required: 400 without it).
#[derive(Clone, Copy, Debug)]
pub struct Idempotency(pub IdempotencyKey);

impl<S: Send + Sync> FromRequestParts<S> for Idempotency {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Ok(Idempotency(sessions::idempotency_key(header(parts, "idempotency-key"))?))
    }
}

/// A JSON body: `Content-Type: application/json`, at most [`BODY_BYTES_MAX`] bytes, no
/// unknown fields (the body types say `deny_unknown_fields`), every error a clear 400.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let is_json = request
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/json"));
        if !is_json {
            return Err(ApiError::InvalidArgument(
                "body: Content-Type must be application/json".into(),
            ));
        }
        let bytes = axum::body::Bytes::from_request(request, state).await.map_err(|error| {
            ApiError::InvalidArgument(format!("body: {error} (at most {BODY_BYTES_MAX} bytes)"))
        })?;
        if bytes.len() > BODY_BYTES_MAX {
            return Err(ApiError::InvalidArgument(format!("body: at most {BODY_BYTES_MAX} bytes")));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|error| ApiError::InvalidArgument(format!("body: {error}")))
    }
}
