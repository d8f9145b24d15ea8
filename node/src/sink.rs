//! An outbox sink as the node sees it: an HTTP endpoint that takes batches of outbox events,
//! signed as the payment provider's webhooks are, and the events' wire form (also the form the
//! operator's dead-letter listing shows).
//!
//! Owns the sink's contract: `POST <url>` with a JSON body `{"sink": NAME, "events": [...]}`,
//! `content-type: application/json`, and the signature header over the raw body (see
//! `crate::signature`) under the cluster's sink secret; any 2xx means every event of the batch
//! was taken, anything else (another status, a timeout, a connection that failed) that none
//! was. Every event carries its cluster-wide id (`<group>-<n>`), so a consumer deduplicates
//! the repeats that at-least-once delivery brings, and its show, log index and log time, so it
//! can order a show's events and fetch the authoritative status when it sees a gap. Never
//! decides what to send, when, or what a failure means: the dispatcher (`dispatch.rs`) does.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Request, Uri};
use raft::DialerRef;
use serde::{Deserialize, Serialize};
use statemachine::{Event, OutboxEvent, RefundReason, SessionId, ShowId, SinkName};
use utoipa::ToSchema;

use crate::http_client::{HttpClient, SendError};

/// How long one delivery may take before it counts as failed.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to a sink may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One outbox event as sinks (and the dead-letter listing) see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WireEvent {
    /// The event's id in the whole cluster, `<group>-<n>`: what consumers deduplicate by.
    pub id: String,
    /// The data group whose log produced it.
    pub group_id: u64,
    /// Its number in the group's outbox (increasing).
    pub seq: u64,
    /// The show it is about.
    pub show_id: u64,
    /// The log index that produced it.
    pub log_index: u64,
    /// The log time (ms since the epoch, leader-stamped) that produced it.
    pub log_time_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub what: WireWhat,
}

/// What an event says, tagged by `type`. Sessions are named by the hash the cluster keeps
/// (`session:<32 hex>`), never by their token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireWhat {
    /// A waiter was offered seats until `deadline_ms`.
    OfferMade {
        /// The offer (`<show>-<n>`).
        offer_id: String,
        /// The waitlist entry.
        entry_id: String,
        /// The waiter.
        session: String,
        /// The seats offered.
        seats: Vec<u32>,
        /// Log time the offer expires.
        deadline_ms: u64,
    },
    /// A ticket was granted admission until `deadline_ms`.
    GrantIssued {
        /// The ticket (and grant).
        ticket_id: String,
        /// Its owner.
        session: String,
        /// Log time the grant expires.
        deadline_ms: u64,
    },
    /// A hold became a booking.
    BookingConfirmed {
        /// The booking.
        booking_id: String,
        /// The hold it came from.
        hold_id: String,
        /// The buyer.
        session: String,
        /// The seats.
        seats: Vec<u32>,
    },
    /// Money must be returned; the group leader's refund worker returns it.
    RefundRequired {
        /// The payment attempt.
        payment_id: String,
        /// The buyer.
        session: String,
        /// The amount, in minor units.
        amount_minor: u64,
        /// Its currency.
        currency: String,
        /// `late_payment`, `booking_cancelled` or `show_cancelled`.
        reason: String,
    },
    /// A hold ran out of time and released its seats.
    HoldExpired {
        /// The hold.
        hold_id: String,
        /// Its owner.
        session: String,
    },
    /// The show was cancelled (one event per session involved).
    ShowCancelled {
        /// The session told.
        session: String,
    },
    /// The provider gave the money of a payment attempt back.
    RefundCompleted {
        /// The payment attempt.
        payment_id: String,
        /// The buyer.
        session: String,
        /// The amount, in minor units.
        amount_minor: u64,
        /// Its currency.
        currency: String,
    },
}

/// A batch as a sink receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Batch {
    /// The sink's name, as the node is configured with it.
    pub sink: String,
    /// Events of one show, in order (a replay of dead letters may mix shows).
    pub events: Vec<WireEvent>,
}

fn id(show: ShowId, n: u64) -> String {
    format!("{}-{n}", show.0)
}

fn session(session: SessionId) -> String {
    format!("session:{:032x}", session.0)
}

fn reason(reason: RefundReason) -> &'static str {
    match reason {
        RefundReason::LatePayment => "late_payment",
        RefundReason::BookingCancelled => "booking_cancelled",
        RefundReason::ShowCancelled => "show_cancelled",
    }
}

impl WireEvent {
    /// The wire form of `event`, an event of `group`'s outbox.
    pub fn of(group: u64, event: &OutboxEvent) -> WireEvent {
        let show = event.show;
        let what = match &event.event {
            Event::OfferMade { offer, entry, session: to, seats, deadline_ms } => {
                WireWhat::OfferMade {
                    offer_id: id(show, offer.0),
                    entry_id: id(show, entry.0),
                    session: session(*to),
                    seats: seats.to_vec(),
                    deadline_ms: *deadline_ms,
                }
            }
            Event::GrantIssued { ticket, session: to, deadline_ms } => WireWhat::GrantIssued {
                ticket_id: id(show, ticket.0),
                session: session(*to),
                deadline_ms: *deadline_ms,
            },
            Event::BookingConfirmed { booking, hold, session: to, seats } => {
                WireWhat::BookingConfirmed {
                    booking_id: id(show, booking.0),
                    hold_id: id(show, hold.0),
                    session: session(*to),
                    seats: seats.to_vec(),
                }
            }
            Event::RefundRequired { payment, session: to, price, reason: why } => {
                WireWhat::RefundRequired {
                    payment_id: id(show, payment.0),
                    session: session(*to),
                    amount_minor: price.amount_minor,
                    currency: price.currency.to_string(),
                    reason: reason(*why).to_owned(),
                }
            }
            Event::HoldExpired { hold, session: to } => {
                WireWhat::HoldExpired { hold_id: id(show, hold.0), session: session(*to) }
            }
            Event::ShowCancelled { session: to } => {
                WireWhat::ShowCancelled { session: session(*to) }
            }
            Event::RefundCompleted { payment, session: to, price } => WireWhat::RefundCompleted {
                payment_id: id(show, payment.0),
                session: session(*to),
                amount_minor: price.amount_minor,
                currency: price.currency.to_string(),
            },
        };
        WireEvent {
            id: format!("{group}-{}", event.id.0),
            group_id: group,
            seq: event.id.0,
            show_id: show.0,
            log_index: event.log_index,
            log_time_ms: event.log_time_ms,
            what,
        }
    }
}

/// An HTTP sink, ready to take batches.
#[derive(Clone, Debug)]
pub struct Sink {
    name: SinkName,
    url: String,
    secret: String,
    client: HttpClient,
}

impl Sink {
    /// A sink named `name` at `url` (checked: `http://HOST[:PORT]/PATH`), whose deliveries are
    /// signed with `secret`, reached over TCP or through `dialer` (the simulator's network).
    ///
    /// # Errors
    ///
    /// A message for a URL that is not plain HTTP. (`https://` needs TLS, which the node's
    /// client does not speak yet: a sink across a network needs a TLS proxy.)
    pub fn new(
        name: SinkName,
        url: &str,
        secret: &str,
        dialer: Option<DialerRef>,
    ) -> Result<Sink, String> {
        let parsed: Uri = url.parse().map_err(|error| format!("sink {name}: {url}: {error}"))?;
        if parsed.scheme_str() != Some("http") || parsed.host().is_none() {
            return Err(format!("sink {name}: {url} is not an http:// URL"));
        }
        let client = HttpClient::new(dialer, CONNECT_TIMEOUT);
        Ok(Sink { name, url: url.to_owned(), secret: secret.to_owned(), client })
    }

    /// The sink's name.
    pub fn name(&self) -> &SinkName {
        &self.name
    }

    /// Posts `events` (already in wire form) as one batch, signed at `now_s` (unix seconds of
    /// the node's clock).
    ///
    /// # Errors
    ///
    /// What went wrong, for the dead letter: the status of an answer other than 2xx, or the
    /// transport's error (a timeout, a refused connection).
    pub async fn deliver(&self, events: Vec<WireEvent>, now_s: u64) -> Result<(), String> {
        let batch = Batch { sink: self.name.to_string(), events };
        let body = serde_json::to_vec(&batch).map_err(|error| format!("encoding: {error}"))?;
        let signature = crate::signature::sign(&self.secret, now_s, &body);
        let request = Request::post(&self.url)
            .header("content-type", "application/json")
            .header(crate::signature::SIGNATURE_HEADER, signature)
            .body(Bytes::from(body))
            .map_err(|error| format!("request: {error}"))?;
        match self.client.send(request, CALL_TIMEOUT).await {
            Ok(answer) if answer.status.is_success() => Ok(()),
            Ok(answer) => Err(format!("HTTP {}", answer.status.as_u16())),
            Err(SendError::NotSent(_)) => Err("could not connect".to_owned()),
            Err(SendError::Unknown(why)) => Err(format!("request failed: {why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use statemachine::{BookingId, HoldId, OutboxId, SeatSet};

    use super::*;

    #[test]
    fn an_event_carries_its_cluster_wide_id_and_its_fields_by_type() {
        let event = OutboxEvent {
            id: OutboxId(17),
            log_index: 40,
            log_time_ms: 1_700_000_000_000,
            show: ShowId(41),
            event: Event::BookingConfirmed {
                booking: BookingId(9),
                hold: HoldId(7),
                session: SessionId(255),
                seats: SeatSet::new([3, 4]).unwrap(),
            },
        };
        assert_eq!(
            serde_json::to_value(WireEvent::of(2, &event)).unwrap(),
            json!({"id": "2-17", "group_id": 2, "seq": 17, "show_id": 41, "log_index": 40,
                "log_time_ms": 1_700_000_000_000u64, "type": "booking_confirmed",
                "booking_id": "41-9", "hold_id": "41-7",
                "session": "session:000000000000000000000000000000ff", "seats": [3, 4]})
        );
    }

    #[test]
    fn only_http_urls_make_sinks() {
        let name = SinkName::new("crm").unwrap();
        assert!(Sink::new(name.clone(), "http://127.0.0.1:9/events", "s", None).is_ok());
        for bad in ["ftp://host/x", "127.0.0.1:9", "http://", "", "https://crm.example/in"] {
            assert!(Sink::new(name.clone(), bad, "s", None).is_err(), "{bad}");
        }
    }
}
