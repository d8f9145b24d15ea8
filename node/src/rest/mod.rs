//! The REST/JSON API (axum), served on the node's one port next to gRPC: requests whose
//! content type is `application/grpc` go to the gRPC services, everything else to these routes.
//!
//! Owns the HTTP skin over [`crate::service::Service`]: paths, JSON bodies (unknown fields and
//! oversized bodies refused), headers (`Authorization`, `Idempotency-Key`), the error body
//! `{code, message, details}` with the status of the one table in `error.rs`, and `Retry-After`.
//! Never decides a booking rule and never routes by itself: the service does.
//!
//! One file per concern: `extract.rs` (session, operator, idempotency key, JSON body),
//! `error.rs` (errors as responses), and the route files.

mod error;
mod extract;

use axum::Router;
use axum::routing::get;

use crate::service::Service;

pub use extract::{BODY_BYTES_MAX, Idempotency, JsonBody, Operator, Session};

/// What every REST handler gets.
#[derive(Clone)]
pub struct RestState {
    /// The booking operations.
    pub service: Service,
}

/// The REST routes of a node.
pub fn router(service: Service) -> Router {
    let state = RestState { service };
    Router::new().route("/healthz", get(healthz)).with_state(state)
}

/// Liveness: the process serves HTTP.
async fn healthz() -> &'static str {
    "ok\n"
}
