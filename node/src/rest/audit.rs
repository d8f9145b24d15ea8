//! The audit trail over REST (operator): every transition of one hold, booking, payment,
//! admission ticket, waitlist entry or offer, and for an entry the offers made to others while
//! it waited ("why did someone after me get a spot?").
//!
//! Owns the audit JSON shapes and the `{kind}` names. Reads linearizably on the group's
//! leader. Never writes and never interprets a trail: the records are the state machine's.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use statemachine::{EntityKind, OrderKey, ShowId, WaitlistSkip};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::{AuditStateName, ReasonName, actor_name};
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::Operator;
use crate::rest::ids::{format_id, parse_id, parse_show_id};
use crate::rest::types::AsOf;

/// The `{kind}` path segments and the entity kinds they name: the REST paths' own words
/// (`entry`, where gRPC's `kind` field says `waitlist_entry`, `crate::names`).
pub const KINDS: [(&str, EntityKind); 7] = [
    ("hold", EntityKind::Hold),
    ("booking", EntityKind::Booking),
    ("payment", EntityKind::Payment),
    ("ticket", EntityKind::Ticket),
    ("entry", EntityKind::WaitlistEntry),
    ("offer", EntityKind::Offer),
    ("show", EntityKind::Show),
];

/// The entity kind a `{kind}` segment names.
///
/// # Errors
///
/// `InvalidArgument` for any other segment.
pub fn parse_kind(text: &str) -> Result<EntityKind, ApiError> {
    KINDS.iter().find(|(name, _)| *name == text).map(|(_, kind)| *kind).ok_or_else(|| {
        ApiError::InvalidArgument(
            "kind: one of hold, booking, payment, ticket, entry, offer, show".into(),
        )
    })
}

/// The order of a waitlist entry: priority band, then join time, then sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Order {
    /// Priority band (0 first).
    pub band: u8,
    /// Log time (ms) of joining.
    pub joined_ms: u64,
    /// The entry's number: breaks ties.
    pub seq: u64,
}

impl From<OrderKey> for Order {
    fn from(order: OrderKey) -> Order {
        Order { band: order.band, joined_ms: order.joined_ms, seq: order.seq }
    }
}

/// One transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// The state before (absent when created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<AuditStateName>,
    /// The state after.
    pub to: AuditStateName,
    /// Why.
    pub reason: ReasonName,
    /// Who: `session:<32 hex>` (a hash of the session token), `operator`, `provider`, `system`.
    pub actor: String,
    /// Log time (ms).
    pub log_time_ms: u64,
    /// Log index.
    pub log_index: u64,
    /// The waitlist ordering policy version in force.
    pub policy_version: u32,
    /// The order key of the waitlist entry served, for promotions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
}

/// An offer made to another entry while this one waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Skip {
    /// The offer.
    pub offer_id: String,
    /// The entry it went to.
    pub entry_id: String,
    /// That entry's order.
    pub order: Order,
    /// Whether that entry was ahead in order (`false` would be a bug).
    pub was_ahead: bool,
    /// The log index of the offer.
    pub made_index: u64,
    /// The policy version that entry joined under.
    pub policy_version: u32,
    /// The rules of that version: the policy this answer follows.
    pub rules: crate::rest::waitlist_policy::Rules,
    /// For a lottery: its seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw_seed: Option<u64>,
    /// That entry's draw key, if it was in the draw, as 16 hex digits (a 64-bit number, which
    /// JSON numbers do not carry exactly): lower keys are served first; an entry that joined
    /// after the draw has none and is served after every drawn one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw_key: Option<String>,
    /// This entry's draw key, if it was in the draw, the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_draw_key: Option<String>,
}

impl Skip {
    fn of(show: ShowId, skip: &WaitlistSkip) -> Skip {
        Skip {
            offer_id: format_id(show, skip.offer.0),
            entry_id: format_id(show, skip.entry.0),
            order: skip.order.into(),
            was_ahead: skip.was_ahead,
            made_index: skip.made_index,
            policy_version: skip.policy_version,
            rules: crate::rest::waitlist_policy::Rules::of(skip.rules),
            draw_seed: skip.draw_seed,
            draw_key: skip.draw_key.map(|key| format!("{key:016x}")),
            your_draw_key: skip.your_draw_key.map(|key| format!("{key:016x}")),
        }
    }
}

/// The audit trail of one entity, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditTrail {
    /// The kind: hold, booking, payment, ticket, entry, offer or show.
    pub kind: String,
    /// The entity (`<show_id>-<n>`; a show's own id for a show).
    pub id: String,
    /// Its show.
    pub show_id: u64,
    /// Its transitions, oldest first.
    pub records: Vec<AuditRecord>,
    /// For a waitlist entry: offers made to other entries while it waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skips: Option<Vec<Skip>>,
    /// When this trail was read.
    pub as_of: AsOf,
}

impl AuditRecord {
    fn of(record: &statemachine::AuditRecord) -> AuditRecord {
        AuditRecord {
            from: record.from.map(AuditStateName::from),
            to: record.to.into(),
            reason: record.reason.into(),
            actor: actor_name(record.actor),
            log_time_ms: record.log_time_ms,
            log_index: record.log_index,
            policy_version: record.policy_version,
            order: record.order.map(Order::from),
        }
    }
}

/// The audit trail of one entity (operator), read linearizably.
#[utoipa::path(
    get, path = "/v1/audit/{kind}/{id}", tag = "audit",
    params(
        ("kind" = String, Path, description = "hold, booking, payment, ticket, entry, offer or show"),
        ("id" = String, Path, description = "`<show_id>-<n>`; for a show, its `<show_id>`"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The trail, oldest first", body = AuditTrail),
        (status = 400, description = "Unknown kind or malformed id", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "No such entity (`hold_not_found`, ...) or show", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_trail(
    State(state): State<RestState>,
    Path((kind_name, id)): Path<(String, String)>,
    _operator: Operator,
) -> Result<Json<AuditTrail>, ApiError> {
    let kind = parse_kind(&kind_name)?;
    // A show's own trail is named by the show id alone.
    let (show, number) = match kind {
        EntityKind::Show => {
            let show = parse_show_id("id", &id)?;
            (show, show.0)
        }
        _ => parse_id("id", &id)?,
    };
    let trail = operations::audit_trail(&state.service, show, kind, number).await?;
    Ok(Json(AuditTrail {
        kind: kind_name,
        id: match kind {
            EntityKind::Show => show.0.to_string(),
            _ => format_id(show, number),
        },
        show_id: show.0,
        records: trail.records.iter().map(AuditRecord::of).collect(),
        skips: trail.skips.map(|skips| skips.iter().map(|skip| Skip::of(show, skip)).collect()),
        as_of: trail.as_of.into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_parse_by_their_path_names() {
        assert_eq!(parse_kind("entry").unwrap(), EntityKind::WaitlistEntry);
        assert_eq!(parse_kind("hold").unwrap(), EntityKind::Hold);
        for bad in ["", "holds", "Hold", "waitlist_entry"] {
            assert_eq!(parse_kind(bad).unwrap_err().http_status(), 400);
        }
    }

    #[test]
    fn a_record_serializes_without_absent_fields() {
        let record = AuditRecord {
            from: None,
            to: AuditStateName::Held,
            reason: ReasonName::Requested,
            actor: "system".into(),
            log_time_ms: 1,
            log_index: 2,
            policy_version: 0,
            order: None,
        };
        assert_eq!(
            serde_json::to_value(record).unwrap(),
            json!({"to": "held", "reason": "requested", "actor": "system", "log_time_ms": 1,
                "log_index": 2, "policy_version": 0})
        );
    }
}
