//! The payment provider's callback: `POST /v1/payments/webhook`.
//!
//! Owns the webhook contract: the raw body is authenticated by `X-Booking-Signature:
//! sha256=<hex>`, an HMAC-SHA256 of the exact bytes under the cluster's webhook secret
//! (compared in constant time), before the body is even parsed; the body is a JSON event
//! (unknown fields refused); the provider's event id is hashed into a `ProviderEventId` (the
//! state machine drops a second event with the same id and answers `duplicate`). A bad
//! signature is 401 and a malformed event 400, and neither proposes anything. Never decides
//! what a payment outcome does to a hold: the state machine does.

use std::sync::Once;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
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

/// The header carrying the signature, `sha256=<64 lower-case hex>`.
pub const SIGNATURE_HEADER: &str = "x-booking-signature";
/// The webhook secret used when the node has none configured: fine on a laptop and in tests,
/// never in production (the node warns on the first webhook it verifies with it).
pub const DEVELOPMENT_WEBHOOK_SECRET: &str = "booking-cluster-development-webhook-secret";
/// The longest provider event id accepted.
pub const EVENT_ID_BYTES_MAX: usize = 128;

const SIGNATURE_PREFIX: &str = "sha256=";

/// The signature header value of `body` under `secret`: `sha256=<hex HMAC-SHA256>`. Used by
/// the simulated provider and by tests; a real provider computes the same.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(SIGNATURE_PREFIX.len() + 2 * digest.len());
    hex.push_str(SIGNATURE_PREFIX);
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Checks `signature` (the header value) against `body` under `secret`.
///
/// # Errors
///
/// `Unauthenticated` (401) when the header is missing, malformed or does not match.
pub fn verify(secret: &str, body: &[u8], signature: Option<&str>) -> Result<(), ApiError> {
    let signature = signature.ok_or_else(|| {
        ApiError::Unauthenticated(format!("{SIGNATURE_HEADER}: required (sha256=<hex>)"))
    })?;
    let hex = signature.trim().strip_prefix(SIGNATURE_PREFIX).ok_or_else(|| {
        ApiError::Unauthenticated(format!("{SIGNATURE_HEADER}: expected sha256=<hex>"))
    })?;
    let tag = decode_hex(hex).ok_or_else(|| {
        ApiError::Unauthenticated(format!("{SIGNATURE_HEADER}: expected 64 hex digits"))
    })?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&tag).map_err(|_| {
        ApiError::Unauthenticated(format!("{SIGNATURE_HEADER}: does not match the body"))
    })
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|at| u8::from_str_radix(&hex[at..at + 2], 16).ok()).collect()
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
        description = "`sha256=<hex>`: HMAC-SHA256 of the raw body under the webhook secret"
    )),
    request_body(content = WebhookEvent, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded (or a duplicate, recorded before)", body = WebhookReply),
        (status = 400, description = "Malformed event: nothing was recorded", body = ErrorBody),
        (status = 401, description = "Missing or wrong signature: nothing was recorded", body = ErrorBody),
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
    let secret = secret(&state);
    let signature = headers.get(SIGNATURE_HEADER).and_then(|value| value.to_str().ok());
    verify(secret, &body, signature)?;
    let event: WebhookEvent = serde_json::from_slice(&body)
        .map_err(|error| ApiError::InvalidArgument(format!("body: {error}")))?;
    let outcome = event.into_outcome()?;
    let (show, payment) = (outcome.show, outcome.payment);
    let effect = operations::payment(&state.service, outcome).await?;
    Ok(Json(WebhookReply::new(show, payment, effect)))
}

/// The node's webhook secret, or the development one (with a warning, once per process).
fn secret(state: &RestState) -> &str {
    static WARNED: Once = Once::new();
    match &state.service.shared().config.webhook_secret {
        Some(secret) => secret,
        None => {
            WARNED.call_once(|| {
                tracing::warn!(
                    "no --webhook-secret: payment webhooks are verified with the built-in \
                     development secret"
                );
            });
            DEVELOPMENT_WEBHOOK_SECRET
        }
    }
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
    use crate::test_node;

    #[test]
    fn a_signature_verifies_only_its_body_under_its_secret() {
        let body = br#"{"event_id":"e1"}"#;
        let signature = sign("s3cret", body);
        assert!(signature.starts_with("sha256="));
        assert_eq!(signature.len(), 7 + 64);
        assert!(verify("s3cret", body, Some(&signature)).is_ok());
        assert!(
            verify("s3cret", body, Some(&signature.to_uppercase().replace("SHA256", "sha256")))
                .is_ok()
        );
        for (secret, body, header) in [
            ("other", &body[..], Some(signature.as_str())),
            ("s3cret", &br#"{"event_id":"e2"}"#[..], Some(signature.as_str())),
            ("s3cret", &body[..], None),
            ("s3cret", &body[..], Some(&signature[7..])),
            ("s3cret", &body[..], Some("sha256=zz")),
            ("s3cret", &body[..], Some(&signature[..70])),
        ] {
            let error = verify(secret, body, header).unwrap_err();
            assert_eq!(error.http_status(), 401, "{header:?}");
        }
        // The HMAC-SHA256 test vector of RFC 4231, case 2.
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(sign("Jefe", b"what do ya want for nothing?"), format!("sha256={expected}"));
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
        let cluster = test_node::start(Some("hook-secret")).await;
        let show = cluster.open_show(9, 10).await;
        let session = SessionId(31);
        let hold = cluster.hold(show, session, &[2, 3]).await;
        let payment = cluster.checkout(show, session, hold).await;
        let app = Router::new()
            .route("/v1/payments/webhook", post(payment_webhook))
            .with_state(RestState { service: cluster.service.clone() });
        let body = serde_json::to_vec(&json!({
            "event_id": "evt_ok", "payment_id": format!("9-{}", payment.0),
            "result": "succeeded", "amount_minor": 5000, "currency": "EUR",
        }))
        .unwrap();

        let before = cluster.applied_index();
        let unsigned = app.clone().oneshot(post_webhook(&body, None)).await.unwrap();
        assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(json_of(unsigned).await["code"], "unauthenticated");
        let forged = sign(DEVELOPMENT_WEBHOOK_SECRET, &body);
        let wrong_secret = app.clone().oneshot(post_webhook(&body, Some(forged))).await.unwrap();
        assert_eq!(wrong_secret.status(), StatusCode::UNAUTHORIZED);
        let garbage = b"{not json";
        let signed_garbage = post_webhook(garbage, Some(sign("hook-secret", garbage)));
        let malformed = app.clone().oneshot(signed_garbage).await.unwrap();
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        assert_eq!(cluster.applied_index(), before, "nothing was proposed");

        let signature = sign("hook-secret", &body);
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
