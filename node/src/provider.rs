//! The payment provider as the node sees it: a client of its Stripe-like HTTP API (charge under
//! an idempotency key, read a charge by that key), the one place its wire contract lives on
//! this side.
//!
//! Owns the mapping of every answer to what the caller may conclude: a charge that succeeded or
//! was declined ([`Charged`]); a call that never left ([`ProviderError::NotSent`]: nothing can
//! have been charged, try again); a call whose outcome cannot be known
//! ([`ProviderError::Unknown`]: a timeout or a 5xx after the request was sent, so the charge
//! may or may not exist and must be read back); a refusal ([`ProviderError::Refused`]: a 4xx,
//! which retrying will not change). The idempotency key of a charge is the payment attempt's
//! external id, `<show>-<n>`, so the same attempt never charges twice however often, and from
//! however many leaders, it is asked. Never proposes anything: the payment worker
//! (`workers.rs`) turns what this learns into commands.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Method, Request, StatusCode};
use raft::DialerRef;
use serde::Deserialize;
use statemachine::{Currency, Money, PaymentId, ShowId};

use crate::http_client::{Answer, HttpClient, SendError};

/// How long one call to the provider may take before its outcome counts as unknown.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to the provider may take (then nothing was sent).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a charge came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Charged {
    /// The money was taken.
    Succeeded {
        /// The provider's charge id.
        charge: String,
        /// What was taken.
        amount: Money,
    },
    /// The charge was refused; nothing was taken.
    Declined {
        /// The provider's charge id.
        charge: String,
    },
}

impl Charged {
    /// The provider's charge id.
    pub fn charge_id(&self) -> &str {
        match self {
            Charged::Succeeded { charge, .. } | Charged::Declined { charge } => charge,
        }
    }
}

/// Why a call did not give an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request never reached the provider (it could not be connected to): nothing happened.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request was sent but its outcome is unknown (a timeout, a 5xx, an unreadable answer).
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The provider refused the request (a 4xx other than 429); the same request will be
    /// refused again.
    #[error("refused with {status}: {code}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The provider's error code.
        code: String,
        /// Its message.
        message: String,
    },
}

/// The idempotency key of payment attempt `payment` of `show`: its external id, `<show>-<n>`
/// (the REST API's spelling, which the webhook parses back).
pub fn charge_key(show: ShowId, payment: PaymentId) -> String {
    format!("{}-{}", show.0, payment.0)
}

/// The idempotency key of the refund owed on payment attempt `payment` of `show`: at most one
/// refund, of the whole amount, is ever owed on an attempt, so the attempt names it.
pub fn refund_key(show: ShowId, payment: PaymentId) -> String {
    format!("refund-{}-{}", show.0, payment.0)
}

/// A client of one provider.
#[derive(Clone, Debug)]
pub struct Provider {
    base: String,
    http: HttpClient,
}

/// A charge as the provider answers it.
#[derive(Debug, Deserialize)]
struct ChargeBody {
    id: String,
    amount_minor: u64,
    currency: String,
    status: ChargeStatus,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChargeStatus {
    Succeeded,
    Declined,
}

#[derive(Debug, Deserialize)]
struct RefundBody {
    id: String,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl Provider {
    /// A client of the provider at `base` (`http://HOST:PORT`, no trailing path), connecting
    /// over TCP, or through `dialer` (the simulator's network) when one is given.
    ///
    /// # Errors
    ///
    /// A message when `base` is not an `http://` URL with a host. (`https://` needs TLS, which
    /// the node's client does not speak yet: a provider across a network needs a TLS proxy.)
    pub fn new(base: &str, dialer: Option<DialerRef>) -> Result<Provider, String> {
        let base = base.trim_end_matches('/');
        let host = base.strip_prefix("http://").unwrap_or_default();
        if host.is_empty() || host.contains(['/', ' ', '?', '#']) {
            return Err(format!("--provider-url: expected http://HOST:PORT, got {base:?}"));
        }
        Ok(Provider { base: base.to_owned(), http: HttpClient::new(dialer, CONNECT_TIMEOUT) })
    }

    /// Sends one call: `method` on `path`, with an idempotency key and a JSON body if given.
    async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> Result<Answer, ProviderError> {
        let mut request = Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let body = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(&body).expect("JSON encodes"))
            }
            None => Bytes::new(),
        };
        let request =
            request.body(body).map_err(|error| ProviderError::NotSent(error.to_string()))?;
        self.http.send(request, CALL_TIMEOUT).await.map_err(|error| match error {
            SendError::NotSent(why) => ProviderError::NotSent(why),
            SendError::Unknown(why) => ProviderError::Unknown(why),
        })
    }

    /// The provider's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Charges `amount` for payment attempt `payment` of `show`, once however often it is
    /// called (the attempt's id is the idempotency key).
    ///
    /// # Errors
    ///
    /// [`ProviderError`]: `Unknown` means the charge may exist, so read it back with
    /// [`Provider::charge_by_key`] before concluding anything.
    pub async fn charge(
        &self,
        show: ShowId,
        payment: PaymentId,
        amount: Money,
    ) -> Result<Charged, ProviderError> {
        let key = charge_key(show, payment);
        let body = serde_json::json!({
            "payment_id": key,
            "amount_minor": amount.amount_minor,
            "currency": currency_code(amount.currency),
        });
        let answer = self.call(Method::POST, "/v1/charges", Some(&key), Some(body)).await?;
        charged(success(&answer)?)
    }

    /// The charge made under payment attempt `payment`'s key, or `None` when the provider has
    /// none (it never received the charge call, so charging again is safe).
    ///
    /// # Errors
    ///
    /// [`ProviderError`] when the provider cannot be asked or does not answer clearly.
    pub async fn charge_by_key(
        &self,
        show: ShowId,
        payment: PaymentId,
    ) -> Result<Option<Charged>, ProviderError> {
        let key = charge_key(show, payment);
        let answer =
            self.call(Method::GET, &format!("/v1/charges/by-key/{key}"), None, None).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        charged(success(&answer)?).map(Some)
    }
}

impl Provider {
    /// Refunds the whole of charge `charge` (made for payment attempt `payment` of `show`, of
    /// `amount_minor`), once however often it is called (the refund key is the attempt's), and
    /// returns the provider's refund id.
    ///
    /// # Errors
    ///
    /// [`ProviderError`]: after `Unknown`, call again (the key refunds once).
    pub async fn refund(
        &self,
        show: ShowId,
        payment: PaymentId,
        charge: &str,
        amount_minor: u64,
    ) -> Result<String, ProviderError> {
        let body = serde_json::json!({ "charge_id": charge, "amount_minor": amount_minor });
        let key = refund_key(show, payment);
        let answer = self.call(Method::POST, "/v1/refunds", Some(&key), Some(body)).await?;
        let refund: RefundBody = success(&answer)?;
        Ok(refund.id)
    }
}

fn currency_code(currency: Currency) -> String {
    String::from_utf8_lossy(&currency.0).into_owned()
}

/// A 2xx answer's body, or the error its status means.
fn success<T: for<'de> Deserialize<'de>>(answer: &Answer) -> Result<T, ProviderError> {
    if answer.status.is_success() {
        return serde_json::from_slice(&answer.body)
            .map_err(|error| ProviderError::Unknown(format!("unreadable answer: {error}")));
    }
    let body: ErrorBody = serde_json::from_slice(&answer.body).unwrap_or_default();
    if answer.status.is_client_error() && answer.status != StatusCode::TOO_MANY_REQUESTS {
        return Err(ProviderError::Refused {
            status: answer.status.as_u16(),
            code: body.code,
            message: body.message,
        });
    }
    Err(ProviderError::Unknown(format!("{}: {} {}", answer.status, body.code, body.message)))
}

fn charged(charge: ChargeBody) -> Result<Charged, ProviderError> {
    match charge.status {
        ChargeStatus::Declined => Ok(Charged::Declined { charge: charge.id }),
        ChargeStatus::Succeeded => {
            let code: [u8; 3] = charge
                .currency
                .as_bytes()
                .try_into()
                .ok()
                .filter(|code: &[u8; 3]| code.iter().all(u8::is_ascii_uppercase))
                .ok_or_else(|| {
                    ProviderError::Unknown(format!("charge currency {:?}", charge.currency))
                })?;
            let amount = Money { amount_minor: charge.amount_minor, currency: Currency(code) };
            Ok(Charged::Succeeded { charge: charge.id, amount })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::ids::format_id;

    #[test]
    fn the_charge_key_is_the_attempts_external_id() {
        assert_eq!(charge_key(ShowId(41), PaymentId(8)), format_id(ShowId(41), 8));
        assert_eq!(charge_key(ShowId(41), PaymentId(8)), "41-8");
    }

    #[test]
    fn only_http_urls_make_a_provider() {
        assert_eq!(
            Provider::new("http://127.0.0.1:7100/", None).unwrap().base(),
            "http://127.0.0.1:7100"
        );
        assert!(Provider::new("http://paysim:7100", None).is_ok());
        for bad in ["", "127.0.0.1:7100", "ftp://x", "http://a b", "http://", "http://h/v1"] {
            assert!(Provider::new(bad, None).is_err(), "{bad}");
        }
        // No TLS in the node's client yet: refused at start, not at the first charge.
        assert!(Provider::new("https://pay.example", None).is_err());
    }

    #[test]
    fn a_charge_answer_becomes_its_outcome() {
        let succeeded = |currency: &str| ChargeBody {
            id: "ch_1".into(),
            amount_minor: 500,
            currency: currency.into(),
            status: ChargeStatus::Succeeded,
        };
        assert_eq!(
            charged(succeeded("EUR")).unwrap(),
            Charged::Succeeded {
                charge: "ch_1".into(),
                amount: Money { amount_minor: 500, currency: Currency(*b"EUR") }
            }
        );
        assert!(matches!(charged(succeeded("eur")), Err(ProviderError::Unknown(_))));
        assert!(matches!(charged(succeeded("EURO")), Err(ProviderError::Unknown(_))));
        let declined = ChargeBody { status: ChargeStatus::Declined, ..succeeded("EUR") };
        assert_eq!(charged(declined).unwrap(), Charged::Declined { charge: "ch_1".into() });
    }
}
