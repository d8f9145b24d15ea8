//! API errors as HTTP responses: the status from the one table in `crate::error`, a JSON body
//! `{code, message, details}` with the stable machine code, `Retry-After` on 429 and 503, and
//! the leader hint headers a follower knows; and the layer that gives the HTTP framework's own
//! refusals (an unknown route, a method the route lacks, a body too large or of the wrong type)
//! the same body.
//!
//! Every error response carries the [`ApiError`] it renders as a response extension, so that
//! the layers around the handlers (forwarding to the leader) read the error typed, never by
//! parsing the headers meant for clients.

use axum::Json;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use proto::booking::metadata;
use serde::Serialize;

use crate::error::ApiError;

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

impl ErrorBody {
    /// The body of `error`.
    pub fn of(error: &ApiError) -> ErrorBody {
        ErrorBody {
            code: error.code().name().to_owned(),
            message: error.to_string(),
            details: error.details(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(ErrorBody::of(&self))).into_response();
        let headers = response.headers_mut();
        headers.insert(metadata::CODE, HeaderValue::from_static(self.code().name()));
        if let Some(seconds) = self.retry_after_s() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let ApiError::NotLeader { leader: Some(leader), .. } = &self {
            headers.insert(metadata::LEADER_ID, HeaderValue::from(leader.id));
            if let Some(value) =
                leader.address.as_deref().and_then(|address| HeaderValue::from_str(address).ok())
            {
                headers.insert(metadata::LEADER_ADDR, value);
            }
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// The error of a refusal the HTTP framework answered by itself (without an error body).
fn framework_error(status: StatusCode, request: &str) -> ApiError {
    match status {
        StatusCode::NOT_FOUND => ApiError::NotFound(format!("no route {request}")),
        StatusCode::METHOD_NOT_ALLOWED => {
            ApiError::MethodNotAllowed(format!("{request}: the route has no such method"))
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::PayloadTooLarge(format!("{request}: the body is too large"))
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::UnsupportedMediaType(format!("{request}: unsupported content type"))
        }
        status if status.is_client_error() => {
            ApiError::InvalidArgument(format!("{request}: {status}"))
        }
        status => ApiError::Internal(format!("{request}: {status}")),
    }
}

/// The middleware: an error response without the error body (`booking-code` is the mark of
/// one, also on a response a leader sent back to a forwarded request) gets it, keeping the
/// framework's headers (`Allow` of a 405).
pub async fn uniform(request: Request, next: Next) -> Response {
    let described = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.headers().contains_key(metadata::CODE)
    {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let mut uniform = framework_error(status, &described).into_response();
    if let Some(allow) = allow {
        uniform.headers_mut().insert(header::ALLOW, allow);
    }
    uniform
}

/// `router` with every error response carrying the one error body.
pub fn layer(router: Router) -> Router {
    router.layer(middleware::from_fn(uniform))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::{get, post};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn answer(app: &Router, request: axum::http::Request<Body>) -> (Response, ErrorJson) {
        let response = app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let code = json["code"].as_str().unwrap_or_default().to_owned();
        (Response::from_parts(parts, Body::empty()), ErrorJson { code, json })
    }

    struct ErrorJson {
        code: String,
        json: serde_json::Value,
    }

    #[tokio::test]
    async fn the_framework_s_own_refusals_carry_the_error_body() {
        let app = layer(
            Router::new()
                .route("/v1/holds/{hold_id}", get(|| async { "hold" }))
                .route(
                    "/v1/payments/webhook",
                    post(|_body: axum::body::Bytes| async { "ok" })
                        .layer(axum::extract::DefaultBodyLimit::max(16)),
                )
                .route("/json", post(|_body: Json<serde_json::Value>| async { "ok" }))
                .route("/mine", get(|| async { ApiError::Forbidden("no".into()) })),
        );
        let put = axum::http::Request::put("/v1/holds/1-2").body(Body::empty()).unwrap();
        let (response, body) = answer(&app, put).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(body.code, "method_not_allowed");
        assert_eq!(response.headers()[metadata::CODE], "method_not_allowed");
        assert_eq!(response.headers()[header::ALLOW], "GET,HEAD");
        assert!(body.json["message"].as_str().unwrap().contains("PUT /v1/holds/1-2"));
        assert!(body.json["details"].is_object());

        let big =
            axum::http::Request::post("/v1/payments/webhook").body(Body::from("x".repeat(64)));
        let (response, body) = answer(&app, big.unwrap()).await;
        assert_eq!(
            (response.status(), body.code.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        );

        let text = axum::http::Request::post("/json").header("content-type", "text/plain");
        let (response, body) = answer(&app, text.body(Body::from("{}")).unwrap()).await;
        assert_eq!(
            (response.status(), body.code.as_str()),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        );

        let nowhere = axum::http::Request::get("/v2/nowhere").body(Body::empty()).unwrap();
        let (response, body) = answer(&app, nowhere).await;
        assert_eq!((response.status(), body.code.as_str()), (StatusCode::NOT_FOUND, "not_found"));

        // An error of our own passes as it is, typed in the response's extensions.
        let mine = axum::http::Request::get("/mine").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(mine).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert!(matches!(response.extensions().get::<ApiError>(), Some(ApiError::Forbidden(_))));
    }
}
