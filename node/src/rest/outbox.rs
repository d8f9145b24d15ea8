//! The outbox's delivery over REST (operator): every sink's position and backlog, the dead
//! letters, replaying them, and removing a sink.
//!
//! Owns the delivery JSON shapes. Lists are read from this node's replicas of the data groups
//! (each labelled `as_of`); a replay or a removal is proposed on the group's leader (a
//! follower forwards it). Never delivers anything: each group leader's dispatcher does.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use statemachine::SinkName;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::operations::{self, GroupDeadLetter, SinkStatus};
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator};
use crate::rest::types::AsOf;
use crate::sink::WireEvent;

/// The most dead letters one listing returns.
pub const DEAD_LETTERS_LISTED_MAX: usize = 1_000;

/// One sink of one data group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Sink {
    /// The data group.
    pub group_id: u64,
    /// The sink's name.
    pub sink: String,
    /// Every event of the group up to this number is delivered to it or given up on.
    pub done_up_to: u64,
    /// Events it has not had yet.
    pub backlog: u64,
    /// Log time (ms) of the oldest event it has not had yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_undelivered_ms: Option<u64>,
    /// Events given up on and kept.
    pub dead_letters: u64,
    /// Dead letters asked to be delivered again.
    pub replays: u64,
    /// Events delivered over the sink's life.
    pub delivered_total: u64,
    /// Events given up on over the sink's life.
    pub dead_lettered_total: u64,
    /// Dead letters dropped because the sink kept as many as it may.
    pub dead_letters_dropped: u64,
    /// Whether the answering node is configured to deliver to it (`--sink`).
    pub configured_here: bool,
    /// The replica position read.
    pub as_of: AsOf,
}

impl Sink {
    fn of(status: &SinkStatus) -> Sink {
        Sink {
            group_id: status.group,
            sink: status.sink.to_string(),
            done_up_to: status.done_up_to,
            backlog: status.backlog,
            oldest_undelivered_ms: status.oldest_undelivered_ms,
            dead_letters: status.dead_letters,
            replays: status.replays,
            delivered_total: status.delivered_total,
            dead_lettered_total: status.dead_lettered_total,
            dead_letters_dropped: status.dead_letters_dropped,
            configured_here: status.configured_here,
            as_of: status.as_of.into(),
        }
    }
}

/// Every tracked sink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SinkList {
    /// One per sink and data group, by group then name.
    pub sinks: Vec<Sink>,
}

/// Every sink every data group tracks, from this node's replicas (operator).
#[utoipa::path(
    get, path = "/v1/outbox/sinks", tag = "outbox",
    security(("operator" = [])),
    responses(
        (status = 200, description = "Every tracked sink of every data group", body = SinkList),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
    )
)]
pub async fn list_sinks(
    State(state): State<RestState>,
    _operator: Operator,
) -> Result<Json<SinkList>, ApiError> {
    let sinks = operations::outbox_sinks(&state.service)?;
    Ok(Json(SinkList { sinks: sinks.iter().map(Sink::of).collect() }))
}

/// Which dead letters to list.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterQuery {
    /// The sink.
    pub sink: String,
    /// One data group only (default: every one).
    pub group_id: Option<u64>,
    /// At most this many (default and most: 1,000).
    pub limit: Option<usize>,
}

/// An event given up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetter {
    /// The data group keeping it.
    pub group_id: u64,
    /// The sink.
    pub sink: String,
    /// The event, as the sink would have received it.
    pub event: WireEvent,
    /// Delivery attempts made.
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// Log time (ms) it was given up on.
    pub dead_at_ms: u64,
    /// Whether it is asked to be delivered again.
    pub replay: bool,
}

impl DeadLetter {
    fn of(found: &GroupDeadLetter) -> DeadLetter {
        let letter = &found.letter;
        DeadLetter {
            group_id: found.group,
            sink: found.sink.to_string(),
            event: WireEvent::of(found.group, &letter.event),
            attempts: letter.attempts,
            error: letter.error.clone(),
            dead_at_ms: letter.dead_at_ms,
            replay: letter.replay,
        }
    }
}

/// Dead letters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterList {
    /// Oldest first within each group, groups in order.
    pub dead_letters: Vec<DeadLetter>,
}

fn sink_name(text: &str) -> Result<SinkName, ApiError> {
    SinkName::new(text).map_err(|rejection| ApiError::InvalidArgument(rejection.to_string()))
}

/// A sink's dead letters, from this node's replicas (operator).
#[utoipa::path(
    get, path = "/v1/outbox/dead-letters", tag = "outbox",
    params(DeadLetterQuery),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The sink's dead letters", body = DeadLetterList),
        (status = 400, description = "Malformed sink name, group or limit", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
    )
)]
pub async fn list_dead_letters(
    State(state): State<RestState>,
    _operator: Operator,
    query: Result<Query<DeadLetterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeadLetterList>, ApiError> {
    let Query(query) = query
        .map_err(|error| ApiError::InvalidArgument(format!("query: {}", error.body_text())))?;
    let sink = sink_name(&query.sink)?;
    let limit = query.limit.unwrap_or(DEAD_LETTERS_LISTED_MAX);
    if limit == 0 || limit > DEAD_LETTERS_LISTED_MAX {
        return Err(ApiError::InvalidArgument(format!("limit: 1..={DEAD_LETTERS_LISTED_MAX}")));
    }
    let letters = operations::dead_letters(&state.service, &sink, query.group_id, limit)?;
    Ok(Json(DeadLetterList { dead_letters: letters.iter().map(DeadLetter::of).collect() }))
}

/// Which dead letters to deliver again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Event numbers (`seq`) of the group's dead letters; empty or absent: all of them.
    #[serde(default)]
    pub events: Vec<u64>,
}

/// What a replay request marked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Replayed {
    /// The data group.
    pub group_id: u64,
    /// The sink.
    pub sink: String,
    /// Dead letters marked to be delivered again.
    pub events: u32,
}

/// Asks a data group to deliver a sink's dead letters again (operator): its leader's
/// dispatcher sends them (out of order); one delivered leaves the dead letters, one that fails
/// again stays, no longer marked.
#[utoipa::path(
    post, path = "/v1/outbox/groups/{group_id}/sinks/{sink}/replay", tag = "outbox",
    params(
        ("group_id" = u64, Path, description = "The data group"),
        ("sink" = String, Path, description = "The sink"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body(content = ReplayRequest, content_type = "application/json"),
    security(("operator" = [])),
    responses(
        (status = 200, description = "Marked", body = Replayed),
        (status = 400, description = "Malformed request, or the metadata group", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`sink_not_found`, `dead_letter_not_found` (nothing marked), no such group", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn replay(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path((group_id, sink)): Path<(u64, String)>,
    JsonBody(request): JsonBody<ReplayRequest>,
) -> Result<Json<Replayed>, ApiError> {
    let name = sink_name(&sink)?;
    let events =
        operations::replay_dead_letters(&state.service, group_id, name, request.events).await?;
    Ok(Json(Replayed { group_id, sink, events }))
}

/// What removing a sink did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    /// The data group.
    pub group_id: u64,
    /// The sink.
    pub sink: String,
    /// Its dead letters, dropped.
    pub dead_letters_dropped: u32,
    /// Outbox events no remaining sink needed, trimmed.
    pub trimmed: u32,
}

/// Stops a data group tracking a sink (operator): what it has not had is no longer kept for
/// it, and its dead letters are dropped. Take the sink out of every node's `--sink` first: a
/// leader configured with it tracks it again at once.
#[utoipa::path(
    delete, path = "/v1/outbox/groups/{group_id}/sinks/{sink}", tag = "outbox",
    params(
        ("group_id" = u64, Path, description = "The data group"),
        ("sink" = String, Path, description = "The sink"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "No longer tracked", body = Removed),
        (status = 400, description = "Malformed sink name, or the metadata group", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`sink_not_found`, no such group", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn remove_sink(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path((group_id, sink)): Path<(u64, String)>,
) -> Result<Json<Removed>, ApiError> {
    let name = sink_name(&sink)?;
    let (dead_letters_dropped, trimmed) =
        operations::remove_sink(&state.service, group_id, name).await?;
    Ok(Json(Removed { group_id, sink, dead_letters_dropped, trimmed }))
}
