//! The end of a run whose payments a real (or simulated) provider made: wait for the payments
//! to settle, read the provider's ledger and the cluster's final state through the SDK, and run
//! `statemachine::check::ledger` on them. Shared by the Jepsen `payments` workload (paysim as a
//! process, its ledger over HTTP) and the simulator (paysim as a host, its ledger read in
//! process), so that both judge money the same way.
//!
//! Owns what "the cluster's state" is for the ledger checker: every payment attempt of the
//! shows under test, as the operator reads it (each id up to the largest any buyer or the
//! ledger has seen, plus [`ID_SLACK`]); every booking the buyers can find (their own bookings,
//! and the booking each of their checked-out holds became); each show's booked seats in its
//! final linearizable seat map. Never judges by itself: the checker does.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use client::{Client, Error, SeatStatus as WireSeatStatus};
use serde_json::{Value, json};
use statemachine::check::Verdict;
use statemachine::check::ledger::{
    ClusterBooking, ClusterPayment, ClusterState, LedgerRecord, check_ledger,
    payment_status_from_wire,
};
use statemachine::{BookingState, PaymentStatus};
use tokio::time::Instant;

use crate::workload::Buyer;

/// Ids past the largest one seen that are still asked for (a checkout applied after its
/// client gave up would have one).
pub const ID_SLACK: u64 = 32;
/// Attempts at one read of the final state before it is given up.
const READ_ATTEMPTS: u32 = 40;
/// Reads of payment attempts in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// What [`judge`] found, for the results and the report folder.
pub struct Judged {
    /// The verdict: the ledger checker's, invalid if the payments never settled, unknown if the
    /// final state could not be read.
    pub verdict: Verdict,
    /// The `ledger` part of `results.json`.
    pub results: Value,
    /// The ledger as read (for `ledger.json`), if it was.
    pub ledger: Option<Vec<LedgerRecord>>,
    /// The cluster's state as read (for `cluster-state.json`), if it was.
    pub state: Option<ClusterState>,
}

impl Judged {
    /// A run whose final state could not be read: unknown, never valid.
    pub fn unreadable(error: String) -> Judged {
        Judged {
            verdict: Verdict::Unknown,
            results: json!({ "verdict": Verdict::Unknown, "error": error }),
            ledger: None,
            state: None,
        }
    }
}

/// Waits for the payments to settle, reads the ledger (with `read_ledger`) and the cluster's
/// final state, and runs the ledger checker. `client` sends the operator token; `buyers` are
/// the run's client processes (each reads back its own holds and bookings); `shows` the shows
/// under test. Payments not settled within `quiesce_max` make the run invalid.
///
/// The same steps one by one, for a caller whose buyers live elsewhere (the simulator's, each
/// on a host of its own): [`known_ids`], [`settle`], [`buyer_bookings`], [`booked_seats`],
/// [`verdict`].
pub async fn judge<Read, Answer>(
    mut read_ledger: Read,
    client: &Client,
    buyers: &[Buyer],
    shows: &[u64],
    quiesce_max: Duration,
) -> Judged
where
    Read: FnMut() -> Answer,
    Answer: Future<Output = Result<Vec<LedgerRecord>, String>>,
{
    let mut largest = BTreeMap::new();
    for buyer in buyers {
        merge_ids(&mut largest, known_ids(buyer));
    }
    let settled = match settle(&mut read_ledger, client, shows, largest, quiesce_max).await {
        Ok(settled) => settled,
        Err(error) => return Judged::unreadable(error),
    };
    let mut bookings = Vec::new();
    for buyer in buyers {
        match buyer_bookings(buyer, shows).await {
            Ok(found) => bookings.extend(found),
            Err(error) => return Judged::unreadable(error),
        }
    }
    let seats = match booked_seats(client, shows).await {
        Ok(seats) => seats,
        Err(error) => return Judged::unreadable(error),
    };
    match read_ledger().await {
        Ok(ledger) => verdict(settled, bookings, seats, ledger),
        Err(error) => Judged::unreadable(error),
    }
}

/// The payment attempts once they settled, or when the wait for it ended.
#[derive(Clone, Debug)]
pub struct Settled {
    /// Every payment attempt of the shows, as the operator read it last.
    pub payments: Vec<ClusterPayment>,
    /// Those still `pending` or `unknown`, or owing a refund: none if the run quiesced.
    pub unsettled: Vec<String>,
    /// How long the wait took, in seconds.
    pub waited_s: f64,
    /// How long it could take.
    pub limit: Duration,
}

/// Reads every payment attempt of `shows` (each id up to the largest in `largest` or in the
/// ledger, plus [`ID_SLACK`]) until none is `pending` or `unknown` and none owes a refund, or
/// `quiesce_max` has passed.
///
/// # Errors
///
/// A message when the ledger or an attempt cannot be read.
pub async fn settle<Read, Answer>(
    read_ledger: &mut Read,
    client: &Client,
    shows: &[u64],
    mut largest: BTreeMap<u64, u64>,
    quiesce_max: Duration,
) -> Result<Settled, String>
where
    Read: FnMut() -> Answer,
    Answer: Future<Output = Result<Vec<LedgerRecord>, String>>,
{
    let began = Instant::now();
    // Reads them all each round: a checkout whose client gave up may still be applied, with an
    // id past the largest seen.
    loop {
        let ledger = read_ledger().await?;
        merge_ids(&mut largest, ledger.iter().filter_map(payment_of));
        let payments = read_payments(client, shows, &largest).await?;
        let unsettled: Vec<String> = payments
            .iter()
            .filter(|payment| {
                payment.refund_owed
                    || matches!(payment.state, PaymentStatus::Pending | PaymentStatus::Unknown)
            })
            .map(|payment| payment.payment_id.clone())
            .collect();
        if unsettled.is_empty() || began.elapsed() >= quiesce_max {
            if !unsettled.is_empty() {
                tracing::warn!(?unsettled, "payments did not settle within {quiesce_max:?}");
            }
            let waited_s = began.elapsed().as_secs_f64();
            return Ok(Settled { payments, unsettled, waited_s, limit: quiesce_max });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The ledger checker's verdict on `ledger` against the settled payments, the buyers'
/// bookings and the final booked seats; invalid as well if the payments never settled.
pub fn verdict(
    settled: Settled,
    bookings: Vec<ClusterBooking>,
    booked_seats: BTreeMap<u64, Vec<u32>>,
    ledger: Vec<LedgerRecord>,
) -> Judged {
    let quiesced = settled.unsettled.is_empty();
    let quiesce = json!({
        "verdict": if quiesced { Verdict::Valid } else { Verdict::Invalid },
        "waited_s": settled.waited_s,
        "limit_s": settled.limit.as_secs(),
        "unsettled": settled.unsettled,
    });
    let state = ClusterState { payments: settled.payments, bookings, booked_seats };
    let (verdict, results) = match check_ledger(&ledger, &state) {
        Ok(report) => {
            let quiet = if quiesced { Verdict::Valid } else { Verdict::Invalid };
            let verdict = Verdict::combine([report.verdict, quiet]);
            (verdict, json!({ "verdict": verdict, "quiesce": quiesce, "report": report }))
        }
        Err(error) => (
            Verdict::Unknown,
            json!({ "verdict": Verdict::Unknown, "quiesce": quiesce, "error": error.to_string() }),
        ),
    };
    Judged { verdict, results, ledger: Some(ledger), state: Some(state) }
}

/// `<show>-<n>` as its two numbers.
fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (show, number) = id.split_once('-')?;
    Some((show.parse().ok()?, number.parse().ok()?))
}

/// The attempt a ledger charge names.
fn payment_of(record: &LedgerRecord) -> Option<(u64, u64)> {
    match record {
        LedgerRecord::Charge(charge) => parse_id(&charge.payment_id),
        LedgerRecord::Refund(_) => None,
    }
}

/// The largest id of each show that `buyer` knows of (holds, payments, bookings; they share
/// one sequence per show).
pub fn known_ids(buyer: &Buyer) -> BTreeMap<u64, u64> {
    let known = buyer.known();
    let ids = known
        .holds
        .keys()
        .chain(known.payments.keys())
        .chain(known.bookings.iter())
        .copied()
        .chain(known.checkouts.iter().map(|(&(show, _), &payment)| (show, payment)));
    let mut largest = BTreeMap::new();
    merge_ids(&mut largest, ids);
    largest
}

/// Raises `largest` to every `(show, id)` of `ids`.
pub fn merge_ids(largest: &mut BTreeMap<u64, u64>, ids: impl IntoIterator<Item = (u64, u64)>) {
    for (show, id) in ids {
        let entry = largest.entry(show).or_insert(0);
        *entry = (*entry).max(id);
    }
}

/// Whether an SDK error is worth another try (no leader yet, a node down, a timeout).
fn transient(error: &Error) -> bool {
    matches!(error, Error::Unavailable { .. } | Error::Transport { .. })
}

/// `read` until it answers or fails for good, up to [`READ_ATTEMPTS`] times; the last error.
async fn retrying<T, Read, Answer>(what: &str, mut read: Read) -> Result<T, Error>
where
    Read: FnMut() -> Answer,
    Answer: Future<Output = Result<T, Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match read().await {
            Err(error) if transient(&error) && attempt < READ_ATTEMPTS => {
                tracing::debug!(what, %error, "final read: trying again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            answer => return answer,
        }
    }
}

/// Whether `error` is the rejection `code`.
fn rejected_with(error: &Error, code: &str) -> bool {
    matches!(error, Error::Rejected { code_name, .. } if code_name == code)
}

/// Every payment attempt of `shows`, as the operator reads it: each id up to the largest seen
/// (plus [`ID_SLACK`]) that names an attempt.
async fn read_payments(
    client: &Client,
    shows: &[u64],
    largest: &BTreeMap<u64, u64>,
) -> Result<Vec<ClusterPayment>, String> {
    let mut payments = Vec::new();
    for &show in shows {
        let last = largest.get(&show).copied().unwrap_or(0) + ID_SLACK;
        let mut reads = tokio::task::JoinSet::new();
        let mut next = 1;
        let mut found = BTreeMap::new();
        loop {
            while reads.len() < READS_IN_FLIGHT && next <= last {
                let (client, id) = (client.clone(), next);
                next += 1;
                reads.spawn(async move {
                    let what = format!("payment {show}-{id}");
                    let read = retrying(&what, || client.get_payment(None, show, id)).await;
                    (id, read)
                });
            }
            let Some(done) = reads.join_next().await else { break };
            let (id, read) = done.map_err(|error| format!("a payment read: {error}"))?;
            match read {
                Ok(reply) => {
                    found.insert(id, reply);
                }
                Err(error) if rejected_with(&error, "payment_not_found") => {}
                Err(error) => return Err(format!("payment {show}-{id}: {error}")),
            }
        }
        for (id, reply) in found {
            let state = payment_status_from_wire(&reply.state)
                .ok_or_else(|| format!("payment {show}-{id}: unknown state {:?}", reply.state))?;
            payments.push(ClusterPayment {
                payment_id: format!("{show}-{id}"),
                hold_id: format!("{show}-{}", reply.hold_id),
                amount_minor: reply.amount_minor,
                state,
                refund_owed: reply.refund_owed,
            });
        }
    }
    Ok(payments)
}

/// Every booking of `shows` that `buyer` has: it reads its own holds, to find the bookings
/// they became, and then each booking.
///
/// # Errors
///
/// A message when a hold or a booking cannot be read.
pub async fn buyer_bookings(buyer: &Buyer, shows: &[u64]) -> Result<Vec<ClusterBooking>, String> {
    let (sdk, token) = (buyer.client(), buyer.token());
    let known = buyer.known();
    let ours = |(show, _): &(u64, u64)| shows.contains(show);
    let mut found: BTreeSet<(u64, u64)> = known.bookings.iter().copied().filter(ours).collect();
    let holds: BTreeSet<(u64, u64)> =
        known.holds.keys().chain(known.checkouts.keys()).copied().filter(ours).collect();
    for (show, hold) in holds {
        let what = format!("hold {show}-{hold}");
        let reply = retrying(&what, || sdk.get_hold(token, show, hold)).await;
        match reply {
            Ok(reply) if reply.booking_id != 0 => {
                found.insert((show, reply.booking_id));
            }
            Ok(_) => {}
            // A hold whose creation the buyer saw as unknown may never have been made.
            Err(error) if rejected_with(&error, "hold_not_found") => {}
            Err(error) => return Err(format!("{what}: {error}")),
        }
    }
    let mut bookings = Vec::new();
    for (show, booking) in found {
        let what = format!("booking {show}-{booking}");
        let reply = retrying(&what, || sdk.get_booking(token, show, booking))
            .await
            .map_err(|error| format!("{what}: {error}"))?;
        let state = match reply.state.as_str() {
            "confirmed" => BookingState::Confirmed,
            "cancelled" => BookingState::Cancelled,
            other => return Err(format!("{what}: unknown state {other:?}")),
        };
        bookings.push(ClusterBooking {
            booking_id: format!("{show}-{booking}"),
            show,
            payment_id: format!("{show}-{}", reply.payment_id),
            amount_minor: reply.price_minor,
            seats: reply.seats,
            state,
        });
    }
    Ok(bookings)
}

/// Each of `shows`' booked seats, in its final linearizable seat map.
///
/// # Errors
///
/// A message when a seat map cannot be read.
pub async fn booked_seats(
    client: &Client,
    shows: &[u64],
) -> Result<BTreeMap<u64, Vec<u32>>, String> {
    let mut booked_seats = BTreeMap::new();
    for &show in shows {
        let what = format!("seat map of show {show}");
        let map = retrying(&what, || client.get_seat_map_linearizable(show))
            .await
            .map_err(|error| format!("{what}: {error}"))?;
        let booked = (0..)
            .zip(map.seats())
            .filter(|(_, status)| *status == WireSeatStatus::Booked)
            .map(|(seat, _)| seat)
            .collect();
        booked_seats.insert(show, booked);
    }
    Ok(booked_seats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_their_show() {
        assert_eq!(parse_id("1010-42"), Some((1010, 42)));
        assert_eq!(parse_id("refund-1010-42"), None);
        assert_eq!(parse_id("1010"), None);
    }
}
