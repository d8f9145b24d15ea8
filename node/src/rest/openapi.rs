//! The OpenAPI 3 document of the REST API, served at `GET /openapi.json` and generated with
//! `utoipa` from the handlers' `#[utoipa::path]` attributes and the JSON types' `ToSchema`
//! derives, so it describes what the server does.
//!
//! Owns the document's list of paths and its security schemes; a test checks the list against
//! the router's one route table ([`crate::rest::routes`]) both ways. Never handles a request
//! other than its own.

use std::sync::LazyLock;

use axum::Json;
use axum::http::Method;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, PathItem};
use utoipa::{Modify, OpenApi};

use crate::rest::{
    archive, audit, bookings, controls, holds, payments, queue, sessions, shows, waitlist,
    waitlist_policy,
};

/// The document's paths and metadata.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Booking cluster REST API",
        description = "Exact, numbered seats under contention: every node serves every call; \
            ids are `<show_id>-<n>`; mutations need an `Idempotency-Key`; errors are \
            `{code, message, details}` with a stable code."
    ),
    paths(
        crate::rest::healthz,
        openapi_json,
        sessions::create_session,
        shows::list_shows,
        shows::create_show,
        shows::get_show,
        shows::get_seats,
        crate::rest::availability::get_availability,
        controls::open_sales,
        controls::close_sales,
        controls::cancel_show,
        archive::archive_show,
        archive::get_archive,
        controls::set_prices,
        controls::configure_admission,
        controls::configure_waitlist,
        waitlist_policy::get_policy,
        waitlist_policy::set_policy,
        waitlist_policy::draw,
        waitlist_policy::issue_claim,
        holds::create_hold,
        holds::get_hold,
        holds::cancel_hold,
        holds::checkout,
        bookings::get_booking,
        bookings::cancel_booking,
        payments::get_payment,
        queue::join_queue,
        queue::get_ticket,
        queue::leave_queue,
        waitlist::join_waitlist,
        waitlist::get_entry,
        waitlist::leave_waitlist,
        waitlist::accept_offer,
        waitlist::decline_offer,
        waitlist::capacity_released,
        audit::get_trail,
        // ---- Other files' routes: the integrator lists their `#[utoipa::path]` handlers here
        // (and adds the routes in `rest/mod.rs`), e.g.
        // crate::rest::metrics::metrics,          GET  /metrics
        // crate::rest::events::hold_events,       GET  /v1/holds/{hold_id}/events
        // crate::rest::events::ticket_events,     GET  /v1/queue/{ticket_id}/events
        // crate::rest::webhook::payment_webhook,  POST /v1/payments/webhook
        crate::rest::metrics::metrics,
        crate::rest::events::hold_events,
        crate::rest::events::ticket_events,
        crate::rest::events::booking_events,
        crate::rest::events::payment_events,
        crate::rest::events::entry_events,
        crate::rest::webhook::payment_webhook,
        crate::rest::outbox::list_sinks,
        crate::rest::outbox::list_dead_letters,
        crate::rest::outbox::replay,
        crate::rest::search::search,
        crate::rest::catalog::list_venues,
        crate::rest::catalog::create_venue,
        crate::rest::catalog::get_venue,
        crate::rest::catalog::update_venue,
        crate::rest::catalog::retire_venue,
        crate::rest::catalog::create_hall,
        crate::rest::catalog::get_hall,
        crate::rest::catalog::update_hall,
        crate::rest::catalog::retire_hall,
        crate::rest::catalog::get_geometry,
        crate::rest::catalog::hall_shows,
        crate::rest::catalog::list_events,
        crate::rest::catalog::create_event,
        crate::rest::catalog::get_event,
        crate::rest::catalog::update_event,
        crate::rest::catalog::retire_event,
        crate::rest::catalog::event_shows,
        crate::rest::catalog::delist_show,
        crate::rest::ops::node_view,
        crate::rest::ops::overview,
        crate::rest::outbox::remove_sink,
        // ---- end of other files' routes
    ),
    components(schemas(crate::rest::ErrorBody)),
    modifiers(&SecuritySchemes),
    tags(
        (name = "sessions", description = "Guest session tokens"),
        (name = "shows", description = "Shows and seat maps, and the operator's controls of them"),
        (name = "catalog", description = "Venues, halls and their seat geometry, events, and the shows listed of them: browsing for buyers, create/update/retire for the operator"),
        (name = "holds", description = "Holds and checkout"),
        (name = "bookings", description = "Confirmed bookings"),
        (name = "queue", description = "The admission lane"),
        (name = "waitlist", description = "Waitlist, offers and released capacity"),
        (name = "audit", description = "Audit trails (operator)"),
        (name = "payments", description = "Payment attempts, and the payment provider's webhooks"),
        (name = "node", description = "The node itself"),
    )
)]
pub struct ApiDoc;

/// Adds the two bearer credentials: `session` (a token from `POST /v1/sessions`) and
/// `operator` (the cluster's operator token).
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, document: &mut Document) {
        let components = document.components.get_or_insert_with(Default::default);
        for (name, description) in [
            ("session", "A guest session token from POST /v1/sessions"),
            ("operator", "The cluster's operator credential"),
        ] {
            let scheme = HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(description))
                .build();
            components.add_security_scheme(name, SecurityScheme::Http(scheme));
        }
    }
}

/// The document, built once.
static DOCUMENT: LazyLock<Document> = LazyLock::new(ApiDoc::openapi);

/// The OpenAPI document of this API.
pub fn document() -> &'static Document {
    &DOCUMENT
}

/// The `(method, path)` of every operation in a document.
pub fn operations(document: &Document) -> Vec<(Method, String)> {
    let mut found = Vec::new();
    for (path, item) in &document.paths.paths {
        let PathItem { get, put, post, delete, options, head, patch, trace, .. } = item;
        for (method, operation) in [
            (Method::GET, get),
            (Method::PUT, put),
            (Method::POST, post),
            (Method::DELETE, delete),
            (Method::OPTIONS, options),
            (Method::HEAD, head),
            (Method::PATCH, patch),
            (Method::TRACE, trace),
        ] {
            if operation.is_some() {
                found.push((method, path.clone()));
            }
        }
    }
    found
}

/// This OpenAPI 3 document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "node",
    responses((status = 200, description = "The OpenAPI 3 document", content_type = "application/json"))
)]
pub async fn openapi_json() -> Json<&'static Document> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_route_is_documented_and_every_documented_path_is_routed() {
        let routes = crate::rest::routes();
        let routed: BTreeSet<(String, String)> = routes
            .documented()
            .iter()
            .map(|(method, path)| (method.to_string(), (*path).to_owned()))
            .collect();
        assert_eq!(routed.len(), routes.documented().len(), "a route is listed twice");
        let documented: BTreeSet<(String, String)> = operations(document())
            .into_iter()
            .map(|(method, path)| (method.to_string(), path))
            .collect();
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(undocumented.is_empty(), "routed but not in /openapi.json: {undocumented:?}");
        assert!(unrouted.is_empty(), "in /openapi.json but not routed: {unrouted:?}");
    }

    /// Swagger UI at `/docs` is served from the binary and reads the node's own document.
    #[tokio::test]
    async fn the_docs_page_serves_swagger_ui_over_this_document() {
        use axum::body::Body;
        use axum::http::{Request, StatusCode};
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        let app = crate::rest::docs();
        let get = |path: &'static str| {
            let app = app.clone();
            async move {
                let request = Request::get(path).body(Body::empty()).unwrap();
                let response = app.oneshot(request).await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        let (status, page) = get("/docs/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("swagger-ui"), "{page}");
        let (status, initializer) = get("/docs/swagger-initializer.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(initializer.contains("\"/openapi.json\""), "{initializer}");
        let (status, bundle) = get("/docs/swagger-ui-bundle.js").await;
        assert!(status == StatusCode::OK && bundle.len() > 100_000, "{status}: {}", bundle.len());
    }

    #[test]
    fn the_issue_paths_are_all_there() {
        let documented: BTreeSet<String> = operations(document())
            .into_iter()
            .map(|(method, path)| format!("{method} {path}"))
            .collect();
        for expected in [
            "POST /v1/sessions",
            "GET /v1/shows",
            "POST /v1/shows",
            "GET /v1/shows/{show_id}",
            "GET /v1/shows/{show_id}/seats",
            "POST /v1/shows/{show_id}/holds",
            "GET /v1/holds/{hold_id}",
            "DELETE /v1/holds/{hold_id}",
            "POST /v1/holds/{hold_id}/checkout",
            "GET /v1/bookings/{booking_id}",
            "DELETE /v1/bookings/{booking_id}",
            "GET /v1/payments/{payment_id}",
            "POST /v1/shows/{show_id}/open",
            "POST /v1/shows/{show_id}/close",
            "POST /v1/shows/{show_id}/cancel",
            "POST /v1/shows/{show_id}/archive",
            "GET /v1/shows/{show_id}/archive",
            "PUT /v1/shows/{show_id}/prices",
            "PUT /v1/shows/{show_id}/admission",
            "PUT /v1/shows/{show_id}/waitlist",
            "POST /v1/shows/{show_id}/queue",
            "GET /v1/queue/{ticket_id}",
            "DELETE /v1/queue/{ticket_id}",
            "POST /v1/resources/{resource_id}/waitlist:join",
            "GET /v1/waitlist/{entry_id}",
            "DELETE /v1/waitlist/{entry_id}",
            "POST /v1/offers/{offer_id}:accept",
            "POST /v1/offers/{offer_id}:decline",
            "POST /v1/internal/capacity-released",
            "GET /v1/audit/{kind}/{id}",
            "GET /openapi.json",
            "GET /healthz",
        ] {
            assert!(documented.contains(expected), "{expected} missing");
        }
    }

    #[test]
    fn the_document_names_its_schemas_and_credentials() {
        let value = serde_json::to_value(document()).unwrap();
        assert!(value["openapi"].as_str().unwrap().starts_with("3."));
        let schemas = &value["components"]["schemas"];
        for name in [
            "ErrorBody",
            "Hold",
            "HoldRequest",
            "ShowSummary",
            "SeatMap",
            "Consistency",
            "AuditTrail",
        ] {
            assert!(schemas.get(name).is_some(), "schema {name} missing");
        }
        assert!(value["components"]["securitySchemes"]["session"].is_object());
        let hold = &value["paths"]["/v1/shows/{show_id}/holds"]["post"];
        assert!(hold["responses"]["201"].is_object());
        assert!(hold["responses"]["409"].is_object());
        let seats = &value["paths"]["/v1/shows/{show_id}/seats"]["get"];
        let parameters = seats["parameters"].as_array().unwrap();
        let consistency = parameters.iter().find(|p| p["name"] == "consistency").unwrap();
        assert_eq!(consistency["in"], "query");
        assert_eq!(consistency["schema"]["enum"], serde_json::json!(["replica", "linearizable"]));
    }
}
