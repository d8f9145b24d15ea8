//! The waitlist's policies over REST (operator): read and set a show's rules (strict FIFO,
//! priority bands, a lottery; offer waves), draw its lottery, and issue priority-band claims.
//!
//! Owns the JSON shapes of the rules, the draw and the claim, and their checks (the operator
//! credential first, then the idempotency key and the body; nothing is proposed on a 400).
//! Setting the rules in force again is a duplicate, as drawing again with the seed drawn is.
//! Never decides who is served: the state machine's policy does (`waitlist_policy.rs`).

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use statemachine::{LotteryDraw, WaitlistOrdering, WaitlistRules};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator};
use crate::rest::ids::parse_show_id;
use crate::{input, operations};

/// How a waitlist orders its waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderingName {
    /// Earliest join first (the default); bands are ignored.
    Fifo,
    /// Priority bands (0 first; guests are band 7), FIFO inside each band.
    Bands,
    /// A lottery among the waiters, drawn at or after `draw_at_ms`.
    Lottery,
}

/// A waitlist's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// The ordering.
    pub ordering: OrderingName,
    /// A lottery's earliest draw time, log time in ms since the Unix epoch (lottery only, and
    /// required for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw_at_ms: Option<u64>,
    /// Offers open at once (a wave); 0, the default, for no limit.
    #[serde(default)]
    pub wave_offers_max: u32,
}

impl Rules {
    /// The state machine's rules, checked.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a lottery without its draw time, or a draw time on another
    /// ordering.
    pub fn to_rules(self) -> Result<WaitlistRules, ApiError> {
        let ordering = match self.ordering {
            OrderingName::Fifo => "fifo",
            OrderingName::Bands => "bands",
            OrderingName::Lottery => "lottery",
        };
        input::waitlist_rules("", ordering, self.draw_at_ms, self.wave_offers_max)
    }

    /// The JSON shape of the state machine's rules.
    pub fn of(rules: WaitlistRules) -> Rules {
        let (ordering, draw_at_ms) = match rules.ordering {
            WaitlistOrdering::Fifo => (OrderingName::Fifo, None),
            WaitlistOrdering::Bands => (OrderingName::Bands, None),
            WaitlistOrdering::Lottery { draw_at_ms } => (OrderingName::Lottery, Some(draw_at_ms)),
        };
        Rules { ordering, draw_at_ms, wave_offers_max: rules.wave_offers_max }
    }
}

/// A lottery's draw, as the log recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Draw {
    /// The seed: each entry's draw key is the first 8 bytes, big-endian, of SHA-256(seed as 8
    /// little-endian bytes, entry number as 8 little-endian bytes); lower keys are served first.
    pub seed: u64,
    /// The log index of the draw.
    pub log_index: u64,
    /// Its log time.
    pub drawn_ms: u64,
    /// Entries in the draw.
    pub entries: u32,
}

impl Draw {
    fn of(draw: LotteryDraw) -> Draw {
        Draw {
            seed: draw.seed,
            log_index: draw.index,
            drawn_ms: draw.drawn_ms,
            entries: draw.entries,
        }
    }
}

/// A show's waitlist policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Policy {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// The policy version in force: entries and promotions carry it.
    pub policy_version: u32,
    /// Its rules.
    pub rules: Rules,
    /// The lottery's draw, once drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw: Option<Draw>,
    /// These rules were in force already: nothing changed.
    pub duplicate: bool,
}

impl Policy {
    fn of(view: &operations::WaitlistPolicyView) -> Policy {
        Policy {
            show_id: view.show.0,
            group_id: view.group,
            policy_version: view.policy_version,
            rules: Rules::of(view.rules),
            draw: view.draw.map(Draw::of),
            duplicate: view.duplicate,
        }
    }
}

/// A show's waitlist rules and its lottery's draw (operator), read linearizably.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}/waitlist/policy", tag = "shows",
    params(("show_id" = u64, Path, description = "The show")),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The policy in force", body = Policy),
        (status = 400, description = "Malformed show id", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_policy(
    State(state): State<RestState>,
    _operator: Operator,
    Path(show_id): Path<String>,
) -> Result<Json<Policy>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    Ok(Json(Policy::of(&operations::waitlist_policy(&state.service, show).await?)))
}

/// Sets a show's waitlist rules (operator). A change of rules bumps the policy version; the
/// ordering cannot change while anyone waits (`waitlist_in_use`), the wave may. The rules in
/// force set again answer `duplicate: true`.
#[utoipa::path(
    put, path = "/v1/shows/{show_id}/waitlist/policy", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = Rules,
    security(("operator" = [])),
    responses(
        (status = 200, description = "The policy in force", body = Policy),
        (status = 400, description = "Malformed id, key or JSON; a lottery without `draw_at_ms`; a wave above 100000; a concurrent change took the next version", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`waitlist_in_use`, `show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn set_policy(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; the rules are set, not added to.
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<Rules>,
) -> Result<Json<Policy>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let rules = request.to_rules()?;
    Ok(Json(Policy::of(&operations::set_waitlist_policy(&state.service, show, rules).await?)))
}

/// A request to draw a lottery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrawRequest {
    /// The seed; the node picks a random one when absent. Either way it is recorded in the log.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// A lottery's draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Drawn {
    /// The show.
    pub show_id: u64,
    /// The seed drawn with.
    pub seed: u64,
    /// Entries in the draw.
    pub entries: u32,
    /// It was drawn before with this seed: nothing changed.
    pub duplicate: bool,
}

/// Draws a show's lottery now (operator): every waiting entry gets its draw key and serving
/// begins in draw order.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/waitlist/draw", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = DrawRequest,
    security(("operator" = [])),
    responses(
        (status = 200, description = "Drawn", body = Drawn),
        (status = 400, description = "Malformed id, key or JSON", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`not_a_lottery`, `lottery_not_due`, `lottery_already_drawn`, `show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn draw(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<DrawRequest>,
) -> Result<Json<Drawn>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let drawn = operations::draw_lottery(&state.service, show, request.seed).await?;
    Ok(Json(Drawn {
        show_id: show.0,
        seed: drawn.seed,
        entries: drawn.entries,
        duplicate: drawn.duplicate,
    }))
}

/// A request for a priority-band claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The buyer's session token: the claim is good for this session only.
    pub session_token: String,
    /// The band, 0..=6 (0 is served first; guests are band 7).
    pub band: u32,
    /// How long it may be used, 1..=604800 s (default 86400).
    #[serde(default)]
    pub valid_for_s: Option<u64>,
}

/// A priority-band claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Claim {
    /// The claim: the buyer sends it as `claim` when joining the waitlist.
    pub claim: String,
    /// Its band.
    pub band: u8,
    /// When it stops being accepted (Unix seconds).
    pub expires_at_s: u64,
}

/// Issues a priority-band claim (operator) for one buyer's session on one show, signed by the
/// cluster: under priority bands the buyer who attaches it joins in its band.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/waitlist/claims", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = ClaimRequest,
    security(("operator" = [])),
    responses(
        (status = 201, description = "The claim", body = Claim),
        (status = 400, description = "Malformed id, key or JSON; a band or validity out of bounds; not a session token", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader of the metadata group", body = ErrorBody),
    )
)]
pub async fn issue_claim(
    State(state): State<RestState>,
    _operator: Operator,
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<ClaimRequest>,
) -> Result<(axum::http::StatusCode, Json<Claim>), ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let claim = operations::issue_band_claim(
        &state.service,
        show,
        &request.session_token,
        request.band,
        request.valid_for_s,
    )
    .await?;
    let body = Claim { claim: claim.claim, band: claim.band, expires_at_s: claim.expires_at_s };
    Ok((axum::http::StatusCode::CREATED, Json(body)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rules_need_a_draw_time_for_a_lottery_and_only_for_one() {
        let parse = |body| serde_json::from_value::<Rules>(body).unwrap().to_rules();
        let lottery = parse(json!({"ordering": "lottery", "draw_at_ms": 5})).unwrap();
        assert_eq!(lottery.ordering, WaitlistOrdering::Lottery { draw_at_ms: 5 });
        assert_eq!(lottery.wave_offers_max, 0);
        let bands = parse(json!({"ordering": "bands", "wave_offers_max": 3})).unwrap();
        assert_eq!(bands, WaitlistRules { ordering: WaitlistOrdering::Bands, wave_offers_max: 3 });
        assert!(parse(json!({"ordering": "lottery"})).is_err());
        assert!(parse(json!({"ordering": "fifo", "draw_at_ms": 5})).is_err());
        for body in
            [json!({"ordering": "random"}), json!({"ordering": "fifo", "band": 1}), json!({})]
        {
            assert!(serde_json::from_value::<Rules>(body.clone()).is_err(), "{body}");
        }
        let round = Rules::of(lottery);
        assert_eq!(
            serde_json::to_value(round).unwrap(),
            json!({"ordering": "lottery", "draw_at_ms": 5, "wave_offers_max": 0})
        );
    }
}
