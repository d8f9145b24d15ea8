//! API errors as HTTP responses: the status from the one table in `crate::error`, a JSON body
//! `{code, message, details}` with the stable machine code, `Retry-After` on 429 and 503, and
//! the leader hint headers a follower knows.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::error::{ApiError, CODE_KEY, LEADER_ADDR_KEY, LEADER_ID_KEY};

/// The body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The stable machine code (`seat_unavailable`, `hold_expired`, ...).
    pub code: String,
    /// What happened, for people.
    pub message: String,
    /// Machine-readable details (the taken seats of a conflict, the leader of a group, ...).
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
            details: self.details(),
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(CODE_KEY, HeaderValue::from_static(self.code()));
        if let Some(seconds) = self.retry_after_s() {
            headers.insert("retry-after", HeaderValue::from(seconds));
        }
        if let ApiError::NotLeader { leader: Some(leader), .. } = &self {
            headers.insert(LEADER_ID_KEY, HeaderValue::from(leader.id));
            if let Some(value) =
                leader.address.as_deref().and_then(|address| HeaderValue::from_str(address).ok())
            {
                headers.insert(LEADER_ADDR_KEY, value);
            }
        }
        response
    }
}
