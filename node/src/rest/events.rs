//! Server-sent events of what a buyer waits on: a hold, an admission ticket, a booking, a
//! payment attempt and a waitlist entry with its offers (`GET /v1/holds/{hold_id}/events`,
//! `/v1/queue/{ticket_id}/events`, `/v1/bookings/{booking_id}/events`,
//! `/v1/payments/{payment_id}/events`, `/v1/waitlist/{entry_id}/events`).
//!
//! Owns the SSE framing over `crate::watch`: the owner check and routing errors are answered
//! as ordinary JSON errors before the stream starts; then one `hold` (or `ticket`) event at
//! once with the current view, one per change, and the stream ends after a terminal state.
//! Each event's `data` is the JSON of `GET /v1/holds/{hold_id}` (or `GET /v1/queue/{ticket_id}`)
//! and its `id` is the `as_of.log_index` it reflects; an error after the start is one `error`
//! event carrying `{code, message, details}`, then the end. A comment line every
//! [`KEEP_ALIVE`] keeps proxies from closing a quiet stream. Views come from the serving
//! node's replica (any node serves a watch), so they may lag the leader; `as_of` says by how
//! much. Never reads linearizably and never writes.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Serialize;
use statemachine::{BookingId, EntryId, HoldId, PaymentId, TicketId};

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::bookings::Booking;
use crate::rest::error::ErrorBody;
use crate::rest::extract::Session;
use crate::rest::ids::parse_id;
use crate::rest::payments::{Payment, Viewer};
use crate::rest::queue::Ticket;
use crate::rest::types::Hold;
use crate::rest::waitlist::WaitlistEntry;
use crate::watch::{self, WatchStream};

/// How often a quiet stream carries a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Streams a hold's state: its current view at once, then every change, until it is
/// confirmed, cancelled or expired.
#[utoipa::path(
    get, path = "/v1/holds/{hold_id}/events", tag = "holds",
    params(("hold_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, content_type = "text/event-stream", body = Hold,
         description = "Server-sent events named `hold`, each `data` a hold as `GET /v1/holds/{hold_id}` \
                        returns it and each `id` its `as_of.log_index`; the first at once, then one per \
                        change of state or deadline; the stream ends after `confirmed`, `cancelled` or \
                        `expired`. An `error` event (`{code, message, details}`) ends it early."),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `hold_not_found`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "This node does not know the show yet and has no leader to ask", body = ErrorBody),
    )
)]
pub async fn hold_events(
    State(state): State<RestState>,
    Path(hold_id): Path<String>,
    Session(session): Session,
) -> Result<Response, ApiError> {
    let (show, number) = parse_id("hold_id", &hold_id)?;
    let views = watch::watch_hold(&state.service, show, HoldId(number), Some(session)).await?;
    Ok(events(views, "hold", move |view| Hold::from_view(show, view), |hold| hold.as_of.log_index))
}

/// Streams an admission ticket: its current view at once, then every change of state, place
/// in line or grant deadline, until it is consumed, left or expired.
#[utoipa::path(
    get, path = "/v1/queue/{ticket_id}/events", tag = "queue",
    params(("ticket_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, content_type = "text/event-stream", body = Ticket,
         description = "Server-sent events named `ticket`, each `data` a ticket as `GET /v1/queue/{ticket_id}` \
                        returns it and each `id` its `as_of.log_index`; the first at once, then one per \
                        change of state, position or grant deadline; the stream ends after `consumed`, \
                        `left` or `expired`. An `error` event (`{code, message, details}`) ends it early."),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `ticket_not_found`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "This node does not know the show yet and has no leader to ask", body = ErrorBody),
    )
)]
pub async fn ticket_events(
    State(state): State<RestState>,
    Path(ticket_id): Path<String>,
    Session(session): Session,
) -> Result<Response, ApiError> {
    let (show, number) = parse_id("ticket_id", &ticket_id)?;
    let views = watch::watch_ticket(&state.service, show, TicketId(number), Some(session)).await?;
    Ok(events(
        views,
        "ticket",
        move |view| Ticket::from_view(show, view),
        |ticket| ticket.as_of.log_index,
    ))
}

/// Streams a booking's state: its current view at once, then its cancellation, if it comes.
#[utoipa::path(
    get, path = "/v1/bookings/{booking_id}/events", tag = "bookings",
    params(("booking_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, content_type = "text/event-stream", body = Booking,
         description = "Server-sent events named `booking`, each `data` as `GET /v1/bookings/{booking_id}` returns it and each `id` its \
                        `as_of.log_index`; the first at once, then one per change; the stream ends after \
                        `cancelled`. An `error` event (`{code, message, details}`) ends it early."),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `booking_not_found`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "This node does not know the show yet and has no leader to ask", body = ErrorBody),
    )
)]
pub async fn booking_events(
    State(state): State<RestState>,
    Path(booking_id): Path<String>,
    Session(session): Session,
) -> Result<Response, ApiError> {
    let (show, number) = parse_id("booking_id", &booking_id)?;
    let views =
        watch::watch_booking(&state.service, show, BookingId(number), Some(session)).await?;
    Ok(events(
        views,
        "booking",
        move |view| Booking::from_view(show, view),
        |booking| booking.as_of.log_index,
    ))
}

/// Streams a payment attempt (its owner, or the operator): its current state at once, then
/// every change of state or of money owed back, until it is declined or refunded.
#[utoipa::path(
    get, path = "/v1/payments/{payment_id}/events", tag = "payments",
    params(("payment_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = []), ("operator" = [])),
    responses(
        (status = 200, content_type = "text/event-stream", body = Payment,
         description = "Server-sent events named `payment`, each `data` as `GET /v1/payments/{payment_id}` returns it and each `id` its \
                        `as_of.log_index`; the first at once, then one per change; the stream ends after \
                        `declined` or `refunded`. An `error` event (`{code, message, details}`) ends it early."),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Neither a session token nor the operator credential", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `payment_not_found`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "This node does not know the show yet and has no leader to ask", body = ErrorBody),
    )
)]
pub async fn payment_events(
    State(state): State<RestState>,
    Path(payment_id): Path<String>,
    Viewer(viewer): Viewer,
) -> Result<Response, ApiError> {
    let (show, number) = parse_id("payment_id", &payment_id)?;
    let views = watch::watch_payment(&state.service, show, PaymentId(number), viewer).await?;
    Ok(events(
        views,
        "payment",
        move |view| Payment::from_view(show, view),
        |payment| payment.as_of.log_index,
    ))
}

/// Streams a waitlist entry and its offers: its current view at once, then every change of
/// state, place in line or offer, until it is accepted, declined, expired or left.
#[utoipa::path(
    get, path = "/v1/waitlist/{entry_id}/events", tag = "waitlist",
    params(("entry_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, content_type = "text/event-stream", body = WaitlistEntry,
         description = "Server-sent events named `entry`, each `data` as `GET /v1/waitlist/{entry_id}` returns it and each `id` its \
                        `as_of.log_index`; the first at once, then one per change; the stream ends after \
                        `accepted`, `declined`, `expired` or `left`. An `error` event (`{code, message, details}`) ends it early."),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `entry_not_found`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "This node does not know the show yet and has no leader to ask", body = ErrorBody),
    )
)]
pub async fn entry_events(
    State(state): State<RestState>,
    Path(entry_id): Path<String>,
    Session(session): Session,
) -> Result<Response, ApiError> {
    let (show, number) = parse_id("entry_id", &entry_id)?;
    let views = watch::watch_entry(&state.service, show, EntryId(number), Some(session)).await?;
    Ok(events(
        views,
        "entry",
        move |view| WaitlistEntry::from_view(show, view),
        |entry| entry.as_of.log_index,
    ))
}

/// Frames a watch as server-sent events named `name`, each view shaped by `shape`.
fn events<V, J>(
    views: WatchStream<V>,
    name: &'static str,
    shape: impl Fn(&V) -> J + Send + 'static,
    log_index: fn(&J) -> u64,
) -> Response
where
    V: 'static,
    J: Serialize + 'static,
{
    let frames = views.map(move |view| {
        let event = match view {
            Ok(view) => {
                let json = shape(&view);
                Event::default().event(name).id(log_index(&json).to_string()).json_data(&json)
            }
            Err(error) => Event::default().event("error").json_data(ErrorBody::of(&error)),
        };
        // Serializing these shapes cannot fail; if it ever did, a bare error event says so.
        let event =
            event.unwrap_or_else(|_| Event::default().event("error").data("unserializable"));
        Ok::<_, Infallible>(event)
    });
    Sse::new(frames).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response()
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use http_body_util::BodyExt;
    use statemachine::{ClientRequest, SessionId};
    use tower::ServiceExt;

    use super::*;
    use crate::test_node;

    fn router(state: RestState) -> Router {
        Router::new()
            .route("/v1/holds/{hold_id}/events", get(hold_events))
            .route("/v1/queue/{ticket_id}/events", get(ticket_events))
            .with_state(state)
    }

    fn get_as(path: &str, token: &str) -> Request<Body> {
        Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap()
    }

    /// Reads body frames until `count` events (blocks separated by a blank line) arrived.
    async fn next_events(body: &mut Body, count: usize) -> Vec<String> {
        let mut text = String::new();
        while text.matches("\n\n").count() < count {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .expect("an event in time")
                .expect("the stream goes on")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
        text.split("\n\n").filter(|block| !block.is_empty()).map(str::to_owned).collect()
    }

    fn data(event: &str) -> serde_json::Value {
        let line = event.lines().find_map(|line| line.strip_prefix("data: ")).unwrap();
        serde_json::from_str(line).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hold_events_stream_each_change_and_end_when_the_hold_is_cancelled() {
        let cluster = test_node::start().await;
        let sessions = &cluster.node.shared().sessions;
        let (token, other) = (sessions.issue().unwrap(), sessions.issue().unwrap());
        let session = sessions.session(Some(&format!("Bearer {token}"))).unwrap();
        let show = cluster.open_show(7, 10).await;
        let hold = cluster.hold(show, session, &[1]).await;
        let app = router(RestState::new(cluster.service.clone(), None));
        let path = format!("/v1/holds/7-{}/events", hold.0);

        let stranger = app.clone().oneshot(get_as(&path, &other)).await.unwrap();
        assert_eq!(stranger.status(), StatusCode::FORBIDDEN);
        let missing = app.clone().oneshot(get_as("/v1/holds/7-999/events", &token)).await.unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let malformed = app.clone().oneshot(get_as("/v1/holds/7x/events", &token)).await.unwrap();
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        let anonymous = Request::get(&path).body(Body::empty()).unwrap();
        assert_eq!(
            app.clone().oneshot(anonymous).await.unwrap().status(),
            StatusCode::UNAUTHORIZED
        );

        let response = app.clone().oneshot(get_as(&path, &token)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut body = response.into_body();
        let first = next_events(&mut body, 1).await;
        assert!(first[0].starts_with("event: hold\n"), "{first:?}");
        let held = data(&first[0]);
        assert_eq!(held["hold_id"], format!("7-{}", hold.0));
        assert_eq!(held["state"], "held");
        assert!(first[0].contains(&format!("id: {}", held["as_of"]["log_index"])));

        cluster.client(show, session, ClientRequest::CancelHold { hold }).await;
        let next = next_events(&mut body, 1).await;
        assert_eq!(data(&next[0])["state"], "cancelled");
        let end = tokio::time::timeout(Duration::from_secs(10), body.frame()).await.unwrap();
        assert!(end.is_none(), "the stream ends after a terminal state");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ticket_events_stream_the_place_in_line() {
        let cluster = test_node::start().await;
        let sessions = &cluster.node.shared().sessions;
        let token = sessions.issue().unwrap();
        let session = sessions.session(Some(&format!("Bearer {token}"))).unwrap();
        let show = cluster.open_show(8, 10).await;
        let command =
            statemachine::OperatorCommand::ConfigureAdmission { show, enabled: true, window: 1 };
        cluster.service.operator(command).await.unwrap();
        let ticket_of = |reply| match reply {
            statemachine::Reply::Queued { ticket, .. } => ticket,
            other => panic!("not queued: {other:?}"),
        };
        let ahead = ticket_of(cluster.client(show, SessionId(1), ClientRequest::JoinQueue).await);
        let mine = ticket_of(cluster.client(show, session, ClientRequest::JoinQueue).await);
        let app = router(RestState::new(cluster.service.clone(), None));

        let path = format!("/v1/queue/8-{}/events", mine.0);
        let response = app.oneshot(get_as(&path, &token)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let first = next_events(&mut body, 1).await;
        assert!(first[0].starts_with("event: ticket\n"), "{first:?}");
        assert_eq!(data(&first[0])["state"], "waiting");
        assert_eq!(data(&first[0])["position"], 1);

        cluster.client(show, SessionId(1), ClientRequest::LeaveQueue { ticket: ahead }).await;
        let granted = data(&next_events(&mut body, 1).await[0]);
        assert_eq!(granted["state"], "granted");
        assert!(granted["grant_deadline_ms"].as_u64().is_some());
    }
}
