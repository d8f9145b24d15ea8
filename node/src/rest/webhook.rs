//! The payment provider's callback: `POST /v1/payments/webhook`.
//!
//! Owns the webhook contract: the raw body is authenticated, before it is even parsed, by the
//! `X-Booking-Signature: t=<unix seconds>,v1=<hex>` header of `crate::signature` (Stripe's
//! scheme: HMAC-SHA256 of `"<t>." + body` under the cluster's webhook secret, compared in
//! constant time, the timestamp within `--webhook-tolerance-s` of this node's clock); the body
//! is a JSON event (unknown fields refused); the provider's event id is hashed into a
//! `ProviderEventId` (the state machine drops a second event with the same id and answers
//! `duplicate`). A refused signature (missing, malformed, not matching, too old or too far in
//! the future, or the retired bare `sha256=` form) is 401 and a malformed event 400, and
//! neither proposes anything. Never decides what a payment outcome does to a hold: the state
//! machine does.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use statemachine::{
    PaymentEffect, PaymentId, PaymentOutcome, PaymentResult, ProviderEventId, ShowId,
};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::input;
use crate::names::{HoldStateName, PaymentStateName};
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::BODY_BYTES_MAX;
use crate::rest::ids::{format_id, parse_id};
use crate::sessions::hash128;
use crate::signature::{self, SIGNATURE_HEADER};

/// The webhook secret of a node run with `--dev` (and of `paysim` without
/// `PAYSIM_WEBHOOK_SECRET`): public, for a laptop only. Part of the webhook contract, so that the
/// provider and the node agree on it without paysim importing more of the node.
pub const DEVELOPMENT_WEBHOOK_SECRET: &str = "booking-cluster-development-webhook-secret";
/// The longest provider event id accepted.
pub const EVENT_ID_BYTES_MAX: usize = 128;

/// Checks the signature header `header` of `body` under `secret` at `now_ms` (this node's
/// clock) with `tolerance_s`, as the endpoint does.
///
/// # Errors
///
/// `Unauthenticated` (401) naming the header and what is wrong with it: missing, malformed,
/// the retired `sha256=` form, no matching `v1`, or a timestamp outside the tolerance.
pub fn verify(
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    now_ms: u64,
    tolerance_s: u64,
) -> Result<(), ApiError> {
    signature::verify(secret, header, body, now_ms / 1_000, tolerance_s)
        .map_err(|refused| ApiError::Unauthenticated(format!("{SIGNATURE_HEADER}: {refused}")))
}

/// What the provider says about a payment attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookResult {
    /// The money was taken (`amount_minor` and `currency` are required).
    Succeeded,
    /// The charge was refused.
    Declined,
    /// The provider could not say (the attempt stays processing).
    Unknown,
}

/// A provider callback.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEvent {
    /// The provider's event id, 1..=128 bytes; the same id again is a no-op.
    pub event_id: String,
    /// The payment attempt (`<show_id>-<n>`), as checkout returned it.
    pub payment_id: String,
    /// What happened.
    pub result: WebhookResult,
    /// Minor units charged: required with `succeeded`, ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<u64>,
    /// The ISO 4217 code charged: required with `succeeded`, ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl WebhookEvent {
    /// The command this event stands for.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty or oversized event id, a malformed payment id, or a
    /// success without a valid amount and currency.
    pub fn into_outcome(self) -> Result<PaymentOutcome, ApiError> {
        if self.event_id.is_empty() || self.event_id.len() > EVENT_ID_BYTES_MAX {
            return Err(ApiError::InvalidArgument(format!(
                "event_id: 1..={EVENT_ID_BYTES_MAX} bytes"
            )));
        }
        let (show, payment) = parse_id("payment_id", &self.payment_id)?;
        let result = match self.result {
            WebhookResult::Declined => PaymentResult::Declined,
            WebhookResult::Unknown => PaymentResult::Unknown,
            WebhookResult::Succeeded => {
                let amount_minor = self.amount_minor.ok_or_else(|| {
                    ApiError::InvalidArgument("amount_minor: required with succeeded".into())
                })?;
                let code = self.currency.as_deref().ok_or_else(|| {
                    ApiError::InvalidArgument("currency: required with succeeded".into())
                })?;
                let currency = input::currency("currency", code)?;
                PaymentResult::Succeeded { amount_minor, currency }
            }
        };
        let event = ProviderEventId(hash128(b"provider-event", self.event_id.as_bytes()));
        Ok(PaymentOutcome { show, payment: PaymentId(payment), event, result })
    }
}

/// What a provider outcome did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EffectName {
    /// The hold became a booking (`booking_id`).
    Confirmed,
    /// Money arrived too late for the seats: refund work was queued.
    RefundRequired,
    /// The charge was refused; the hold is held again or expired (`hold_state`).
    Declined,
    /// The provider could not say; the attempt stays processing.
    Unknown,
    /// This event id, or a final answer for the attempt, was already recorded: nothing changed
    /// (`payment_state`).
    Duplicate,
}

/// The answer to a verified callback.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct WebhookReply {
    /// The payment attempt.
    pub payment_id: String,
    /// What the outcome did.
    pub effect: EffectName,
    /// With `confirmed`: the booking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking_id: Option<String>,
    /// With `declined`: the hold's state afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_state: Option<HoldStateName>,
    /// With `duplicate`: the attempt's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_state: Option<PaymentStateName>,
}

impl WebhookReply {
    fn new(show: ShowId, payment: PaymentId, effect: PaymentEffect) -> WebhookReply {
        let mut reply = WebhookReply {
            payment_id: format_id(show, payment.0),
            effect: EffectName::Unknown,
            booking_id: None,
            hold_state: None,
            payment_state: None,
        };
        match effect {
            PaymentEffect::Confirmed { booking } => {
                reply.effect = EffectName::Confirmed;
                reply.booking_id = Some(format_id(show, booking.0));
            }
            PaymentEffect::RefundRequired => reply.effect = EffectName::RefundRequired,
            PaymentEffect::Declined { hold_state } => {
                reply.effect = EffectName::Declined;
                reply.hold_state = Some(hold_state.into());
            }
            PaymentEffect::Unknown => reply.effect = EffectName::Unknown,
            PaymentEffect::Duplicate { state } => {
                reply.effect = EffectName::Duplicate;
                reply.payment_state = Some(state.into());
            }
        }
        reply
    }
}

/// Records a payment provider's verified outcome.
#[utoipa::path(
    post, path = "/v1/payments/webhook", tag = "payments",
    params((
        "X-Booking-Signature" = String, Header,
        description = "`t=<unix seconds>,v1=<hex>`: HMAC-SHA256 of `\"<t>.\"` + the raw body \
                       under the webhook secret (several `v1` allowed, one must match); `t` \
                       within the node's webhook tolerance (300 s by default) of its clock"
    )),
    request_body(content = WebhookEvent, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded (or a duplicate, recorded before)", body = WebhookReply),
        (status = 400, description = "Malformed event: nothing was recorded", body = ErrorBody),
        (status = 401, description = "Missing, wrong or stale signature: nothing was recorded", body = ErrorBody),
        (status = 404, description = "`show_not_found`, `payment_not_found`", body = ErrorBody),
        (status = 409, description = "`payment_mismatch` (amount or currency differ from the quote)", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown: deliver again", body = ErrorBody),
    )
)]
pub async fn payment_webhook(
    State(state): State<RestState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<WebhookReply>, ApiError> {
    if body.len() > BODY_BYTES_MAX {
        return Err(ApiError::InvalidArgument(format!("body: at most {BODY_BYTES_MAX} bytes")));
    }
    let shared = state.service.shared();
    let secret = secret(&state);
    let header = headers.get(SIGNATURE_HEADER).and_then(|value| value.to_str().ok());
    // The node's environment clock, not the machine's: a simulated node verifies in simulated
    // time, and a node under the clock-skew nemesis (±30 s) in its skewed time, which the
    // tolerance (300 s by default) absorbs.
    let now_ms = shared.clock.now_ms();
    verify(secret, header, &body, now_ms, shared.config.webhook_tolerance_s)?;
    let event: WebhookEvent = serde_json::from_slice(&body)
        .map_err(|error| ApiError::InvalidArgument(format!("body: {error}")))?;
    let outcome = event.into_outcome()?;
    let (show, payment) = (outcome.show, outcome.payment);
    let effect = operations::payment(&state.service, outcome).await?;
    Ok(Json(WebhookReply::new(show, payment, effect)))
}

/// The node's webhook secret.
fn secret(state: &RestState) -> &str {
    state.service.shared().config.secrets.webhook.expose_secret()
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use statemachine::{HoldStatus, SessionId};
    use tower::ServiceExt;

    use statemachine::Currency;

    use super::*;
    use crate::secrets::SecretKind;
    use crate::signature::sign;
    use crate::test_node;

    #[test]
    fn every_refused_signature_is_401_naming_the_header_and_why() {
        let body = br#"{"event_id":"e1"}"#;
        let now_ms = 1_800_000_000_123;
        let now_s = now_ms / 1_000;
        let signature = sign("s3cret", now_s, body);
        assert!(verify("s3cret", Some(&signature), body, now_ms, 300).is_ok());
        let stale = sign("s3cret", now_s - 301, body);
        let legacy = format!("sha256={}", "a".repeat(64));
        for (secret, header, why) in [
            ("other", Some(signature.as_str()), "no v1 signature matches"),
            ("s3cret", None, "required"),
            ("s3cret", Some("t=1"), "malformed"),
            ("s3cret", Some(stale.as_str()), "outside the tolerance of 300 s"),
            ("s3cret", Some(legacy.as_str()), "no longer accepted"),
        ] {
            let error = verify(secret, header, body, now_ms, 300).unwrap_err();
            assert_eq!(error.http_status(), 401, "{header:?}");
            let message = error.to_string();
            assert!(message.contains(SIGNATURE_HEADER) && message.contains(why), "{message}");
        }
    }

    #[test]
    fn events_become_outcomes_with_hashed_event_ids() {
        let event = |value: Value| serde_json::from_value::<WebhookEvent>(value);
        let paid = event(json!({
            "event_id": "evt_1", "payment_id": "41-8", "result": "succeeded",
            "amount_minor": 5000, "currency": "EUR",
        }))
        .unwrap()
        .into_outcome()
        .unwrap();
        assert_eq!(paid.show, ShowId(41));
        assert_eq!(paid.payment, PaymentId(8));
        assert_eq!(paid.event, ProviderEventId(hash128(b"provider-event", b"evt_1")));
        assert_eq!(
            paid.result,
            PaymentResult::Succeeded { amount_minor: 5000, currency: Currency(*b"EUR") }
        );
        let declined = event(json!({"event_id": "e", "payment_id": "1-2", "result": "declined"}));
        assert_eq!(declined.unwrap().into_outcome().unwrap().result, PaymentResult::Declined);

        assert!(event(json!({"event_id": "e", "payment_id": "1-2", "result": "ok"})).is_err());
        assert!(
            event(json!({"event_id": "e", "payment_id": "1-2", "result": "unknown", "x": 1}))
                .is_err()
        );
        for bad in [
            json!({"event_id": "", "payment_id": "1-2", "result": "unknown"}),
            json!({"event_id": "e".repeat(129), "payment_id": "1-2", "result": "unknown"}),
            json!({"event_id": "e", "payment_id": "12", "result": "unknown"}),
            json!({"event_id": "e", "payment_id": "1-2", "result": "succeeded", "currency": "EUR"}),
            json!({"event_id": "e", "payment_id": "1-2", "result": "succeeded", "amount_minor": 1}),
            json!({"event_id": "e", "payment_id": "1-2", "result": "succeeded", "amount_minor": 1, "currency": "eur"}),
            json!({"event_id": "e", "payment_id": "1-2", "result": "succeeded", "amount_minor": 1, "currency": "EURO"}),
        ] {
            let error = event(bad.clone()).unwrap().into_outcome().unwrap_err();
            assert_eq!(error.http_status(), 400, "{bad}");
        }
    }

    /// The tolerance of the test node: the default.
    const TOLERANCE_S: u64 = crate::signature::TOLERANCE_S_DEFAULT;

    fn post_webhook(body: &[u8], signature: Option<String>) -> Request<Body> {
        let mut request =
            Request::post("/v1/payments/webhook").header("content-type", "application/json");
        if let Some(signature) = signature {
            request = request.header(SIGNATURE_HEADER, signature);
        }
        request.body(Body::from(body.to_vec())).unwrap()
    }

    async fn json_of(response: axum::response::Response) -> Value {
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_signed_success_confirms_once_and_bad_callbacks_change_nothing() {
        let secrets = crate::secrets::Secrets::for_tests();
        let hook_secret = secrets.webhook.expose_secret();
        let cluster = test_node::start().await;
        let show = cluster.open_show(9, 10).await;
        let session = SessionId(31);
        let hold = cluster.hold(show, session, &[2, 3]).await;
        let payment = cluster.checkout(show, session, hold).await;
        let app = Router::new()
            .route("/v1/payments/webhook", post(payment_webhook))
            .with_state(RestState::new(cluster.service.clone(), None));
        let body = serde_json::to_vec(&json!({
            "event_id": "evt_ok", "payment_id": format!("9-{}", payment.0),
            "result": "succeeded", "amount_minor": 5000, "currency": "EUR",
        }))
        .unwrap();

        // Signed at the node's own clock, as a provider whose clock agrees would sign.
        let now_s = cluster.node.shared().clock.now_ms() / 1_000;
        let before = cluster.applied_index();
        let unsigned = app.clone().oneshot(post_webhook(&body, None)).await.unwrap();
        assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(json_of(unsigned).await["code"], "unauthenticated");
        let forged = sign(SecretKind::Webhook.development(), now_s, &body);
        let wrong_secret = app.clone().oneshot(post_webhook(&body, Some(forged))).await.unwrap();
        assert_eq!(wrong_secret.status(), StatusCode::UNAUTHORIZED);
        // A genuine signature of this very body, made longer ago than the tolerance: a replay.
        let replayed = sign(hook_secret, now_s - TOLERANCE_S - 1, &body);
        let replay = app.clone().oneshot(post_webhook(&body, Some(replayed))).await.unwrap();
        assert_eq!(replay.status(), StatusCode::UNAUTHORIZED);
        let refusal = json_of(replay).await;
        assert_eq!(refusal["code"], "unauthenticated");
        assert!(
            refusal["message"].as_str().unwrap().contains("outside the tolerance"),
            "{refusal}"
        );
        let ahead = sign(hook_secret, now_s + TOLERANCE_S + 60, &body);
        let future = app.clone().oneshot(post_webhook(&body, Some(ahead))).await.unwrap();
        assert_eq!(future.status(), StatusCode::UNAUTHORIZED);
        let garbage = b"{not json";
        let signed_garbage = post_webhook(garbage, Some(sign(hook_secret, now_s, garbage)));
        let malformed = app.clone().oneshot(signed_garbage).await.unwrap();
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        assert_eq!(cluster.applied_index(), before, "nothing was proposed");

        let signature = sign(hook_secret, now_s, &body);
        let paid = app.clone().oneshot(post_webhook(&body, Some(signature.clone()))).await.unwrap();
        assert_eq!(paid.status(), StatusCode::OK);
        let reply = json_of(paid).await;
        assert_eq!(reply["effect"], "confirmed");
        assert_eq!(reply["payment_id"], format!("9-{}", payment.0));
        assert!(reply["booking_id"].as_str().unwrap().starts_with("9-"));
        let view = cluster.service.read_local(show, |group| group.hold(show, hold, None)).await;
        assert_eq!(view.unwrap().state, HoldStatus::Confirmed);

        let again = app.clone().oneshot(post_webhook(&body, Some(signature))).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        let reply = json_of(again).await;
        assert_eq!(reply["effect"], "duplicate");
        assert_eq!(reply["payment_state"], "succeeded");
    }
}
