//! The admission lane over REST: join a show's queue, read one's ticket and place in line,
//! leave the queue.
//!
//! Owns the ticket JSON shape. A granted ticket's id is the `grant_id` a hold presents. Never
//! decides who is granted: the state machine's lane does.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use statemachine::{ShowId, TicketId, TicketStatus, TicketView};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::TicketStateName;
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, Session};
use crate::rest::ids::{format_id, parse_id, parse_show_id};
use crate::rest::types::AsOf;

/// An admission ticket (a granted ticket is the grant a hold presents as `grant_id`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Ticket {
    /// The ticket (`<show_id>-<n>`).
    pub ticket_id: String,
    /// Its show.
    pub show_id: u64,
    /// Its state by log time.
    pub state: TicketStateName,
    /// While waiting: the place in line, 1 being next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// While granted: log time (ms) by which the grant must be used by a hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_deadline_ms: Option<u64>,
    /// When this view was read.
    pub as_of: AsOf,
}

impl Ticket {
    /// The JSON shape of a ticket of `show`.
    pub fn from_view(show: ShowId, view: &TicketView) -> Ticket {
        Ticket {
            ticket_id: format_id(show, view.ticket.0),
            show_id: show.0,
            state: view.state.into(),
            position: (view.state == TicketStatus::Waiting).then_some(view.ahead + 1),
            grant_deadline_ms: view
                .grant_deadline_ms
                .filter(|_| view.state == TicketStatus::Granted),
            as_of: view.as_of.into(),
        }
    }
}

/// Joins a show's admission lane (granted at once when the window has room).
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/queue", tag = "queue",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 201, description = "The ticket", body = Ticket),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`admission_disabled`, `already_queued`, `show_not_on_sale`, `idempotency_key_reused`", body = ErrorBody),
        (status = 429, description = "`queue_full`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn join_queue(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<(StatusCode, Json<Ticket>), ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let view = operations::join_queue(&state.service, show, session, key).await?;
    Ok((StatusCode::CREATED, Json(Ticket::from_view(show, &view))))
}

/// One of this session's tickets and its place in line, read linearizably.
#[utoipa::path(
    get, path = "/v1/queue/{ticket_id}", tag = "queue",
    params(("ticket_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, description = "The ticket", body = Ticket),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`ticket_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_ticket(
    State(state): State<RestState>,
    Path(ticket_id): Path<String>,
    Session(session): Session,
) -> Result<Json<Ticket>, ApiError> {
    let (show, number) = parse_id("ticket_id", &ticket_id)?;
    let view = operations::get_ticket(&state.service, show, TicketId(number), session).await?;
    Ok(Json(Ticket::from_view(show, &view)))
}

/// Leaves the admission lane (an unused grant is given back to the next in line).
#[utoipa::path(
    delete, path = "/v1/queue/{ticket_id}", tag = "queue",
    params(
        ("ticket_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The ticket, left", body = Ticket),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`ticket_not_found`", body = ErrorBody),
        (status = 409, description = "`ticket_not_active`, `idempotency_key_reused`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn leave_queue(
    State(state): State<RestState>,
    Path(ticket_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<Json<Ticket>, ApiError> {
    let (show, number) = parse_id("ticket_id", &ticket_id)?;
    let ticket = TicketId(number);
    let view = operations::leave_queue(&state.service, show, session, key, ticket).await?;
    Ok(Json(Ticket::from_view(show, &view)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use statemachine::SessionId;

    fn view(state: TicketStatus, ahead: u32, grant_deadline_ms: Option<u64>) -> TicketView {
        TicketView {
            ticket: TicketId(3),
            session: SessionId(1),
            state,
            ahead,
            grant_deadline_ms,
            as_of: statemachine::AsOf { log_index: 4, log_time_ms: 5 },
        }
    }

    #[test]
    fn a_waiting_ticket_has_a_position_and_a_granted_one_a_deadline() {
        let waiting = Ticket::from_view(ShowId(41), &view(TicketStatus::Waiting, 2, None));
        assert_eq!(
            serde_json::to_value(waiting).unwrap(),
            json!({"ticket_id": "41-3", "show_id": 41, "state": "waiting", "position": 3,
                "as_of": {"log_index": 4, "log_time_ms": 5}})
        );
        let granted = Ticket::from_view(ShowId(41), &view(TicketStatus::Granted, 0, Some(9)));
        assert_eq!(granted.position, None);
        assert_eq!(granted.grant_deadline_ms, Some(9));
        let consumed = Ticket::from_view(ShowId(41), &view(TicketStatus::Consumed, 0, Some(9)));
        assert_eq!(consumed.grant_deadline_ms, None);
    }
}
