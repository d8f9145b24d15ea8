//! The REST/JSON API (axum), served on the node's one port next to gRPC: requests whose
//! content type is `application/grpc` go to the gRPC services, everything else to these routes.
//!
//! Owns the HTTP skin over the node's shared concerns (`crate::operations`, `crate::input`,
//! `crate::names`, `crate::sessions`, `crate::limits`, `crate::metrics`, `crate::watch`): paths,
//! JSON bodies (unknown fields and oversized bodies refused), headers (`Authorization`,
//! `Idempotency-Key`), the error body `{code, message, details}` with the status of the one
//! table in `crate::error` (on every error, the framework's own included), and `Retry-After`.
//! Never imports the gRPC skin, never decides a booking rule and never routes by itself: the
//! service does (a request for a group this node does not lead comes back as `not_leader`,
//! which the forwarding layer handles).
//!
//! One file per concern: `extract.rs` (session, operator, idempotency key, JSON body),
//! `error.rs` (errors as responses, the uniform error body), `ids.rs` (external ids
//! `<show_id>-<n>`), `types.rs` (shared JSON shapes), the route files (`sessions.rs`,
//! `shows.rs`, `availability.rs`, `catalog.rs`, `search.rs`, `controls.rs`, `holds.rs`,
//! `bookings.rs`, `payments.rs`, `queue.rs`, `waitlist.rs`, `audit.rs`, `events.rs`,
//! `webhook.rs`, `outbox.rs`, `ops.rs`), the layers (`limits.rs`, `metrics.rs`, `forward.rs`),
//! `openapi.rs` (the document at `/openapi.json`, which Swagger UI at `/docs` reads) and
//! `pages.rs` (the buyer's page at `/`, the operator's at `/ops`). This file holds the one route
//! table ([`routes`]): the router is built from it and a test checks the OpenAPI document
//! against it.

pub mod archive;
pub mod audit;
pub mod availability;
pub mod bookings;
pub mod catalog;
pub mod controls;
mod error;
pub mod events;
mod extract;
pub mod forward;
pub mod holds;
pub mod ids;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod outbox;
pub mod pages;
pub mod payments;
pub mod queue;
pub mod search;
pub mod sessions;
pub mod shows;
pub mod types;
pub mod waitlist;
pub mod waitlist_policy;
pub mod webhook;

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, on};

use std::sync::Arc;

use crate::http_client::HttpClient;
use crate::ops::Progress;
use crate::seat_maps::SeatMaps;
use crate::service::Service;

pub use error::ErrorBody;
pub use extract::{BODY_BYTES_MAX, Idempotency, JsonBody, Operator, Session};

/// What every REST handler gets: shared, so that handing it to a request (axum clones the
/// state for every one) is one reference count, not a clone of the service and an HTTP client.
#[derive(Clone)]
pub struct RestState(Arc<RestShared>);

impl std::ops::Deref for RestState {
    type Target = RestShared;

    fn deref(&self) -> &RestShared {
        &self.0
    }
}

/// What [`RestState`] shares.
pub struct RestShared {
    /// The booking operations.
    pub service: Service,
    /// Each show's availability, encoded once per rebuild.
    pub availability: Arc<SeatMaps<availability::Encoded>>,
    /// Each show's progress, sampled for the operator's page.
    pub progress: Arc<Progress>,
    /// Calls to other nodes (the operator's overview asks each for its view).
    pub http: HttpClient,
    /// The scheme of the other nodes' client ports: `https` under `--client-tls`.
    pub node_scheme: &'static str,
}

impl RestState {
    /// The state of the routes over `service`, calling other nodes through `dialer` (TCP when
    /// `None`).
    pub fn new(service: Service, dialer: Option<raft::DialerRef>) -> RestState {
        let metrics = service.shared().metrics.clone();
        let availability = SeatMaps::new(availability::encode, "rest", metrics);
        let roots = service.shared().config.node_roots.clone();
        RestState(Arc::new(RestShared {
            node_scheme: if roots.is_some() { "https" } else { "http" },
            http: HttpClient::with_roots(dialer, ops::PEER_VIEW_TIMEOUT, roots),
            service,
            availability: Arc::new(availability),
            progress: Arc::default(),
        }))
    }
}

/// The REST routes of a node.
///
/// Every route pays the node's token buckets (shared with the gRPC booking calls, so that
/// mixing the two APIs does not double a caller's rate) and is timed in the node's metrics;
/// requests for a leader are forwarded over TCP, or through `dialer` when one is given; every
/// error carries the one error body.
pub fn router(service: Service, dialer: Option<raft::DialerRef>) -> Router {
    let shared = service.shared().clone();
    let router = routes().router.with_state(RestState::new(service, dialer.clone()));
    let router = metrics::layer(router, shared.metrics.clone());
    let router = limits::layer(router, shared.limits.clone());
    let router = forward::layer(router, dialer, shared.config.node_roots.clone());
    error::layer(router).merge(docs()).merge(pages::router())
}

/// The API reference for browsers at `/docs`: Swagger UI (its assets embedded in the binary)
/// over the node's own `/openapi.json`, so every call can be tried from a browser. Outside the
/// API's layers: reading the reference costs no token and is never forwarded.
pub(crate) fn docs() -> Router {
    let config = utoipa_swagger_ui::Config::from("/openapi.json").try_it_out_enabled(true);
    Router::from(utoipa_swagger_ui::SwaggerUi::new("/docs").config(config))
}

/// Routes being registered, with the `(method, path)` of each as the OpenAPI document names
/// it: one list for the router and for the test that compares it with the document.
pub struct Routes {
    router: Router<RestState>,
    documented: Vec<(Method, &'static str)>,
}

impl Routes {
    fn new() -> Routes {
        Routes { router: Router::new(), documented: Vec::new() }
    }

    /// Serves `method path` with `handler`; documented under the same path.
    ///
    /// # Panics
    ///
    /// For a method axum cannot filter on (a bug in the table), or a path registered twice
    /// for one method.
    pub fn add<H, T>(self, method: Method, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, RestState>,
        T: 'static,
    {
        self.add_documented_as(method, path, &[path], handler)
    }

    /// Serves `method path` with `handler`, documented under each of `documented` (one route
    /// serving several documented paths, like `/v1/offers/{offer_id}:accept` and `:decline`,
    /// which axum's router cannot tell apart by a static suffix).
    ///
    /// # Panics
    ///
    /// As [`Routes::add`].
    pub fn add_documented_as<H, T>(
        mut self,
        method: Method,
        path: &'static str,
        documented: &[&'static str],
        handler: H,
    ) -> Routes
    where
        H: Handler<T, RestState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a method axum can route");
        self.router = self.router.route(path, on(filter, handler));
        self.documented.extend(documented.iter().map(|path| (method.clone(), *path)));
        self
    }

    /// The `(method, path)` of every route, as documented.
    pub fn documented(&self) -> &[(Method, &'static str)] {
        &self.documented
    }
}

/// Every REST route of a node: the one table.
pub fn routes() -> Routes {
    use Method as M;
    Routes::new()
        .add(M::GET, "/healthz", healthz)
        .add(M::GET, "/openapi.json", openapi::openapi_json)
        .add(M::POST, "/v1/sessions", sessions::create_session)
        .add(M::GET, "/v1/shows", shows::list_shows)
        .add(M::POST, "/v1/shows", shows::create_show)
        .add(M::GET, "/v1/shows/{show_id}", shows::get_show)
        .add(M::GET, "/v1/shows/{show_id}/seats", shows::get_seats)
        .add(M::GET, "/v1/shows/{show_id}/availability", availability::get_availability)
        .add(M::POST, "/v1/shows/{show_id}/open", controls::open_sales)
        .add(M::POST, "/v1/shows/{show_id}/close", controls::close_sales)
        .add(M::POST, "/v1/shows/{show_id}/cancel", controls::cancel_show)
        .add(M::POST, "/v1/shows/{show_id}/archive", archive::archive_show)
        .add(M::GET, "/v1/shows/{show_id}/archive", archive::get_archive)
        .add(M::PUT, "/v1/shows/{show_id}/prices", controls::set_prices)
        .add(M::PUT, "/v1/shows/{show_id}/admission", controls::configure_admission)
        .add(M::PUT, "/v1/shows/{show_id}/waitlist", controls::configure_waitlist)
        .add(M::GET, "/v1/shows/{show_id}/waitlist/policy", waitlist_policy::get_policy)
        .add(M::PUT, "/v1/shows/{show_id}/waitlist/policy", waitlist_policy::set_policy)
        .add(M::POST, "/v1/shows/{show_id}/waitlist/draw", waitlist_policy::draw)
        .add(M::POST, "/v1/shows/{show_id}/waitlist/claims", waitlist_policy::issue_claim)
        .add(M::POST, "/v1/shows/{show_id}/holds", holds::create_hold)
        .add(M::GET, "/v1/holds/{hold_id}", holds::get_hold)
        .add(M::DELETE, "/v1/holds/{hold_id}", holds::cancel_hold)
        .add(M::POST, "/v1/holds/{hold_id}/checkout", holds::checkout)
        .add(M::GET, "/v1/bookings/{booking_id}", bookings::get_booking)
        .add(M::GET, "/v1/payments/{payment_id}", payments::get_payment)
        .add(M::DELETE, "/v1/bookings/{booking_id}", bookings::cancel_booking)
        .add(M::POST, "/v1/shows/{show_id}/queue", queue::join_queue)
        .add(M::GET, "/v1/queue/{ticket_id}", queue::get_ticket)
        .add(M::DELETE, "/v1/queue/{ticket_id}", queue::leave_queue)
        .add(M::POST, "/v1/resources/{resource_id}/waitlist:join", waitlist::join_waitlist)
        .add(M::GET, "/v1/waitlist/{entry_id}", waitlist::get_entry)
        .add(M::DELETE, "/v1/waitlist/{entry_id}", waitlist::leave_waitlist)
        .add_documented_as(
            M::POST,
            "/v1/offers/{action}",
            &["/v1/offers/{offer_id}:accept", "/v1/offers/{offer_id}:decline"],
            waitlist::offer_action,
        )
        .add(M::POST, "/v1/internal/capacity-released", waitlist::capacity_released)
        .add(M::GET, "/v1/audit/{kind}/{id}", audit::get_trail)
        .add(M::GET, "/metrics", metrics::metrics)
        .add(M::GET, "/v1/holds/{hold_id}/events", events::hold_events)
        .add(M::GET, "/v1/queue/{ticket_id}/events", events::ticket_events)
        .add(M::GET, "/v1/bookings/{booking_id}/events", events::booking_events)
        .add(M::GET, "/v1/payments/{payment_id}/events", events::payment_events)
        .add(M::GET, "/v1/waitlist/{entry_id}/events", events::entry_events)
        .add(M::POST, "/v1/payments/webhook", webhook::payment_webhook)
        .add(M::GET, "/v1/outbox/sinks", outbox::list_sinks)
        .add(M::GET, "/v1/outbox/dead-letters", outbox::list_dead_letters)
        .add(M::POST, "/v1/outbox/groups/{group_id}/sinks/{sink}/replay", outbox::replay)
        .add(M::DELETE, "/v1/outbox/groups/{group_id}/sinks/{sink}", outbox::remove_sink)
        .add(M::GET, "/v1/search", search::search)
        .add(M::GET, "/v1/venues", catalog::list_venues)
        .add(M::POST, "/v1/venues", catalog::create_venue)
        .add(M::GET, "/v1/venues/{venue_id}", catalog::get_venue)
        .add(M::PUT, "/v1/venues/{venue_id}", catalog::update_venue)
        .add(M::DELETE, "/v1/venues/{venue_id}", catalog::retire_venue)
        .add(M::POST, "/v1/halls", catalog::create_hall)
        .add(M::GET, "/v1/halls/{hall_id}", catalog::get_hall)
        .add(M::PUT, "/v1/halls/{hall_id}", catalog::update_hall)
        .add(M::DELETE, "/v1/halls/{hall_id}", catalog::retire_hall)
        .add(M::GET, "/v1/halls/{hall_id}/geometry", catalog::get_geometry)
        .add(M::GET, "/v1/halls/{hall_id}/shows", catalog::hall_shows)
        .add(M::GET, "/v1/events", catalog::list_events)
        .add(M::POST, "/v1/events", catalog::create_event)
        .add(M::GET, "/v1/events/{event_id}", catalog::get_event)
        .add(M::PUT, "/v1/events/{event_id}", catalog::update_event)
        .add(M::DELETE, "/v1/events/{event_id}", catalog::retire_event)
        .add(M::GET, "/v1/events/{event_id}/shows", catalog::event_shows)
        .add(M::DELETE, "/v1/shows/{show_id}/listing", catalog::delist_show)
        .add(M::GET, "/v1/ops/node", ops::node_view)
        .add(M::GET, "/v1/ops/overview", ops::overview)
    // Routes of other files (`/metrics`, `/v1/holds/{hold_id}/events`,
    // `/v1/queue/{ticket_id}/events`, `/v1/payments/webhook`) are added HERE with `.add(...)`,
    // and their `#[utoipa::path]` handlers listed in `openapi.rs` (see "Other files' routes"
    // there): the route table test fails until both are done.
}

/// Liveness: the process serves HTTP.
#[utoipa::path(
    get, path = "/healthz", tag = "node",
    responses((status = 200, description = "The node serves HTTP", body = String, content_type = "text/plain"))
)]
pub async fn healthz() -> &'static str {
    "ok\n"
}
