//! The money checker: the payment provider's ledger against the cluster's final state, once a
//! run has quiesced (no payment processing or unknown, no refund owed).
//!
//! Owns four rules, each a [`CheckReport`] naming the charges, refunds, attempts and bookings
//! at fault, and a fifth that says the run had in fact quiesced:
//!
//! - `no_attempt_charged_twice` (a): one charge per idempotency key, each under its attempt's
//!   own id; one succeeded charge per payment attempt; and at most one kept (not refunded)
//!   succeeded charge per hold, whatever its attempts.
//! - `charges_end_once` (b): every succeeded charge ends as exactly one confirmed booking (its
//!   attempt `succeeded`) or exactly one completed refund (one refund in the ledger and the
//!   attempt `refunded` in the cluster), not both and not neither.
//! - `refunds_have_charges` (c): every refund is of a succeeded charge, and a charge is never
//!   refunded more than it took.
//! - `bookings_have_charges` (d): every confirmed booking, and every attempt the cluster records
//!   as paid, has a succeeded charge of the same amount; every booked seat of a final seat map
//!   belongs to a confirmed booking and the other way round.
//! - `payments_settled`: no attempt is still `pending` or `unknown`, none owes a refund.
//!
//! Pure like the rest of the crate: the caller reads the ledger (`GET /ledger` of the simulated
//! provider, whose records [`LedgerRecord`] parses as they are) and the cluster's state through
//! the API, and passes both in. Input that cannot describe a ledger or a cluster (an empty id,
//! an id given twice, an amount of zero) is a [`LedgerInputError`], never a verdict.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::state::{BookingState, PaymentStatus};

use super::Verdict;
use super::booking::CheckReport;

/// What became of a charge at the provider. (The provider's own copy lives in `node`'s
/// `paysim`, which this crate may not import; the two meet only on the wire, as JSON.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeStatus {
    /// The money was taken.
    Succeeded,
    /// The card was refused: nothing was taken.
    Declined,
}

/// One charge of the provider's ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCharge {
    /// The provider's charge id.
    pub id: String,
    /// The idempotency key it was made under (the cluster uses the payment attempt's id).
    pub key: String,
    /// The payment attempt it is for (`<show>-<n>`).
    pub payment_id: String,
    /// Minor units asked for.
    pub amount_minor: u64,
    /// What came of it.
    pub status: ChargeStatus,
}

/// One refund of the provider's ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRefund {
    /// The provider's refund id.
    pub id: String,
    /// The idempotency key it was made under (the cluster's refund id).
    pub key: String,
    /// The refunded charge's id.
    pub charge_id: String,
    /// Minor units given back.
    pub amount_minor: u64,
}

/// One record of the ledger, as the simulated provider's `GET /ledger` lists it (other fields,
/// such as the currency and the time, are ignored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerRecord {
    /// A charge.
    Charge(LedgerCharge),
    /// A refund.
    Refund(LedgerRefund),
}

/// A payment attempt's state from its wire name (`pending`, `unknown`, `succeeded`,
/// `declined`, `refunded`), as the API spells [`PaymentStatus`].
pub fn payment_status_from_wire(name: &str) -> Option<PaymentStatus> {
    Some(match name {
        "pending" => PaymentStatus::Pending,
        "unknown" => PaymentStatus::Unknown,
        "succeeded" => PaymentStatus::Succeeded,
        "declined" => PaymentStatus::Declined,
        "refunded" => PaymentStatus::Refunded,
        _ => return None,
    })
}

/// The wire name of a [`PaymentStatus`], for messages.
fn status_name(status: PaymentStatus) -> &'static str {
    match status {
        PaymentStatus::Pending => "pending",
        PaymentStatus::Unknown => "unknown",
        PaymentStatus::Succeeded => "succeeded",
        PaymentStatus::Declined => "declined",
        PaymentStatus::Refunded => "refunded",
    }
}

/// A payment attempt as the cluster reports it at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPayment {
    /// The attempt (`<show>-<n>`), the provider's idempotency key for its charge.
    pub payment_id: String,
    /// The hold it pays for (`<show>-<n>`).
    pub hold_id: String,
    /// What it charges, in minor units.
    pub amount_minor: u64,
    /// Its state.
    pub state: PaymentStatus,
    /// Whether money is owed back and not yet refunded.
    pub refund_owed: bool,
}

/// A booking as the cluster reports it at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterBooking {
    /// The booking (`<show>-<n>`).
    pub booking_id: String,
    /// Its show.
    pub show: u64,
    /// The payment attempt that paid it (`<show>-<n>`).
    pub payment_id: String,
    /// What was paid, in minor units.
    pub amount_minor: u64,
    /// Its seats.
    pub seats: Vec<u32>,
    /// Its state.
    pub state: BookingState,
}

/// The cluster's final state as the checker needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// Every payment attempt of the shows under test.
    pub payments: Vec<ClusterPayment>,
    /// Every booking of the shows under test.
    pub bookings: Vec<ClusterBooking>,
    /// The booked seats of each show whose final seat map was read (a show missing here is
    /// not compared with its bookings).
    pub booked_seats: BTreeMap<u64, Vec<u32>>,
}

/// Why the input cannot be judged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LedgerInputError {
    /// An id or key is empty.
    #[error("{what}: empty {field}")]
    Empty {
        /// The record (`charge 3`, `payment 1001-4`, ...).
        what: String,
        /// The field.
        field: &'static str,
    },
    /// Two records share an id that must be unique.
    #[error("{what} {id} is listed twice")]
    Duplicate {
        /// `charge`, `refund`, `payment` or `booking`.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// A charge or refund of nothing.
    #[error("{what} {id}: an amount of zero")]
    ZeroAmount {
        /// `charge` or `refund`.
        what: &'static str,
        /// Its id.
        id: String,
    },
}

/// How much money moved, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerSummary {
    /// Succeeded charges.
    pub charges_succeeded: u64,
    /// Declined charges.
    pub charges_declined: u64,
    /// Refunds.
    pub refunds: u64,
    /// Minor units charged (succeeded charges).
    pub charged_minor: u64,
    /// Minor units refunded.
    pub refunded_minor: u64,
    /// Payment attempts of the cluster, by state.
    pub payments_by_state: BTreeMap<String, u64>,
    /// Confirmed bookings.
    pub bookings_confirmed: u64,
    /// Cancelled bookings.
    pub bookings_cancelled: u64,
}

/// The ledger checker's findings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerReport {
    /// Invalid if any check is.
    pub verdict: Verdict,
    /// How much money moved.
    pub summary: LedgerSummary,
    /// Each rule's report.
    pub checks: Vec<CheckReport>,
}

fn report(check: &str, examined: u64, problems: Vec<String>) -> CheckReport {
    let verdict = if problems.is_empty() { Verdict::Valid } else { Verdict::Invalid };
    CheckReport { check: check.to_owned(), verdict, examined, problems }
}

/// The input, indexed and checked for shape.
struct Indexed<'a> {
    charges: Vec<&'a LedgerCharge>,
    charges_by_id: BTreeMap<&'a str, &'a LedgerCharge>,
    refunds: Vec<&'a LedgerRefund>,
    refunds_by_charge: BTreeMap<&'a str, Vec<&'a LedgerRefund>>,
    payments: BTreeMap<&'a str, &'a ClusterPayment>,
    bookings: Vec<&'a ClusterBooking>,
    /// Confirmed bookings by the attempt that paid them.
    confirmed_by_payment: BTreeMap<&'a str, Vec<&'a ClusterBooking>>,
    /// Succeeded charges by the attempt they name.
    succeeded_by_payment: BTreeMap<&'a str, Vec<&'a LedgerCharge>>,
}

fn non_empty(
    what: impl Fn() -> String,
    field: &'static str,
    value: &str,
) -> Result<(), LedgerInputError> {
    if value.is_empty() {
        return Err(LedgerInputError::Empty { what: what(), field });
    }
    Ok(())
}

fn index<'a>(
    ledger: &'a [LedgerRecord],
    cluster: &'a ClusterState,
) -> Result<Indexed<'a>, LedgerInputError> {
    let mut indexed = Indexed {
        charges: Vec::new(),
        charges_by_id: BTreeMap::new(),
        refunds: Vec::new(),
        refunds_by_charge: BTreeMap::new(),
        payments: BTreeMap::new(),
        bookings: Vec::new(),
        confirmed_by_payment: BTreeMap::new(),
        succeeded_by_payment: BTreeMap::new(),
    };
    let mut refund_ids = BTreeSet::new();
    for (position, record) in (1..).zip(ledger) {
        match record {
            LedgerRecord::Charge(charge) => {
                let what = || format!("ledger record {position} (a charge)");
                non_empty(what, "id", &charge.id)?;
                non_empty(what, "key", &charge.key)?;
                non_empty(what, "payment_id", &charge.payment_id)?;
                if charge.amount_minor == 0 {
                    return Err(LedgerInputError::ZeroAmount {
                        what: "charge",
                        id: charge.id.clone(),
                    });
                }
                if indexed.charges_by_id.insert(&charge.id, charge).is_some() {
                    return Err(LedgerInputError::Duplicate {
                        what: "charge",
                        id: charge.id.clone(),
                    });
                }
                indexed.charges.push(charge);
                if charge.status == ChargeStatus::Succeeded {
                    indexed
                        .succeeded_by_payment
                        .entry(&charge.payment_id)
                        .or_default()
                        .push(charge);
                }
            }
            LedgerRecord::Refund(refund) => {
                let what = || format!("ledger record {position} (a refund)");
                non_empty(what, "id", &refund.id)?;
                non_empty(what, "key", &refund.key)?;
                non_empty(what, "charge_id", &refund.charge_id)?;
                if refund.amount_minor == 0 {
                    return Err(LedgerInputError::ZeroAmount {
                        what: "refund",
                        id: refund.id.clone(),
                    });
                }
                if !refund_ids.insert(refund.id.as_str()) {
                    return Err(LedgerInputError::Duplicate {
                        what: "refund",
                        id: refund.id.clone(),
                    });
                }
                indexed.refunds.push(refund);
                indexed.refunds_by_charge.entry(&refund.charge_id).or_default().push(refund);
            }
        }
    }
    for payment in &cluster.payments {
        let what = || format!("cluster payment {:?}", payment.payment_id);
        non_empty(what, "payment_id", &payment.payment_id)?;
        non_empty(what, "hold_id", &payment.hold_id)?;
        if indexed.payments.insert(&payment.payment_id, payment).is_some() {
            return Err(LedgerInputError::Duplicate {
                what: "payment",
                id: payment.payment_id.clone(),
            });
        }
    }
    let mut booking_ids = BTreeSet::new();
    for booking in &cluster.bookings {
        let what = || format!("cluster booking {:?}", booking.booking_id);
        non_empty(what, "booking_id", &booking.booking_id)?;
        non_empty(what, "payment_id", &booking.payment_id)?;
        if !booking_ids.insert(booking.booking_id.as_str()) {
            return Err(LedgerInputError::Duplicate {
                what: "booking",
                id: booking.booking_id.clone(),
            });
        }
        indexed.bookings.push(booking);
        if booking.state == BookingState::Confirmed {
            indexed.confirmed_by_payment.entry(&booking.payment_id).or_default().push(booking);
        }
    }
    Ok(indexed)
}

fn ids<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items.into_iter().collect::<Vec<_>>().join(", ")
}

fn describe(payment: Option<&ClusterPayment>) -> String {
    match payment {
        None => "unknown to the cluster".to_owned(),
        Some(payment) if payment.refund_owed => {
            format!("{} with a refund owed", status_name(payment.state))
        }
        Some(payment) => status_name(payment.state).to_owned(),
    }
}

/// Judges `ledger` (every record of the provider, oldest first) against `cluster` (its state
/// after the run quiesced).
///
/// # Errors
///
/// A [`LedgerInputError`] when the input cannot be a ledger or a cluster's state: an empty id,
/// an id listed twice, an amount of zero.
pub fn check_ledger(
    ledger: &[LedgerRecord],
    cluster: &ClusterState,
) -> Result<LedgerReport, LedgerInputError> {
    let indexed = index(ledger, cluster)?;
    let checks = vec![
        no_attempt_charged_twice(&indexed),
        charges_end_once(&indexed),
        refunds_have_charges(&indexed),
        bookings_have_charges(&indexed, cluster),
        payments_settled(&indexed),
    ];
    let verdict = Verdict::combine(checks.iter().map(|check| check.verdict));
    Ok(LedgerReport { verdict, summary: summary(&indexed), checks })
}

fn summary(indexed: &Indexed<'_>) -> LedgerSummary {
    let mut summary = LedgerSummary::default();
    for charge in &indexed.charges {
        match charge.status {
            ChargeStatus::Succeeded => {
                summary.charges_succeeded += 1;
                summary.charged_minor += charge.amount_minor;
            }
            ChargeStatus::Declined => summary.charges_declined += 1,
        }
    }
    for refund in &indexed.refunds {
        summary.refunds += 1;
        summary.refunded_minor += refund.amount_minor;
    }
    for payment in indexed.payments.values() {
        *summary.payments_by_state.entry(status_name(payment.state).to_owned()).or_insert(0) += 1;
    }
    for booking in &indexed.bookings {
        match booking.state {
            BookingState::Confirmed => summary.bookings_confirmed += 1,
            BookingState::Cancelled => summary.bookings_cancelled += 1,
        }
    }
    summary
}

/// Rule (a): one charge per key, under the attempt's own id; one succeeded charge per attempt;
/// at most one kept succeeded charge per hold.
fn no_attempt_charged_twice(indexed: &Indexed<'_>) -> CheckReport {
    let mut problems = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for charge in &indexed.charges {
        by_key.entry(&charge.key).or_default().push(&charge.id);
        if charge.key != charge.payment_id {
            problems.push(format!(
                "charge {} for attempt {} was made under key {:?}, not the attempt's id",
                charge.id, charge.payment_id, charge.key
            ));
        }
    }
    for (key, charges) in &by_key {
        if charges.len() > 1 {
            problems.push(format!(
                "idempotency key {key:?} charged {} times: {}",
                charges.len(),
                ids(charges.iter().copied())
            ));
        }
    }
    for (payment, charges) in &indexed.succeeded_by_payment {
        if charges.len() > 1 {
            problems.push(format!(
                "attempt {payment} was charged {} times: {}",
                charges.len(),
                ids(charges.iter().map(|charge| charge.id.as_str()))
            ));
        }
    }
    // Kept: succeeded and never refunded. A hold may have several attempts (a decline, then a
    // second checkout), but only one may keep its money.
    let mut kept_by_hold: BTreeMap<&str, Vec<&LedgerCharge>> = BTreeMap::new();
    for (payment, charges) in &indexed.succeeded_by_payment {
        let Some(attempt) = indexed.payments.get(payment) else { continue };
        for charge in charges {
            if !indexed.refunds_by_charge.contains_key(charge.id.as_str()) {
                kept_by_hold.entry(&attempt.hold_id).or_default().push(charge);
            }
        }
    }
    for (hold, charges) in &kept_by_hold {
        if charges.len() > 1 {
            problems.push(format!(
                "hold {hold} kept {} charges: {}",
                charges.len(),
                ids(charges.iter().map(|charge| charge.id.as_str()))
            ));
        }
    }
    report("no_attempt_charged_twice", indexed.charges.len() as u64, problems)
}

/// Rule (b): every succeeded charge ends as exactly one confirmed booking or exactly one
/// completed refund.
fn charges_end_once(indexed: &Indexed<'_>) -> CheckReport {
    let mut problems = Vec::new();
    let mut examined = 0;
    // The charges each booking is the end of: one at most.
    let mut ends: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for charge in &indexed.charges {
        if charge.status != ChargeStatus::Succeeded {
            continue;
        }
        examined += 1;
        let payment = indexed.payments.get(charge.payment_id.as_str()).copied();
        let refunds =
            indexed.refunds_by_charge.get(charge.id.as_str()).map_or(&[][..], Vec::as_slice);
        let bookings = indexed
            .confirmed_by_payment
            .get(charge.payment_id.as_str())
            .map_or(&[][..], Vec::as_slice);
        let booking_ids = || ids(bookings.iter().map(|booking| booking.booking_id.as_str()));
        let refund_ids = || ids(refunds.iter().map(|refund| refund.id.as_str()));
        let (charge_id, attempt) = (&charge.id, &charge.payment_id);
        match (bookings.len(), refunds.len()) {
            (0, 0) => problems.push(format!(
                "charge {charge_id} (attempt {attempt}, {} minor units) ended as neither a \
                 confirmed booking nor a refund; the attempt is {}",
                charge.amount_minor,
                describe(payment)
            )),
            (1, 0) => {
                ends.entry(&bookings[0].booking_id).or_default().push(charge_id);
                let paid = payment.is_some_and(|payment| {
                    payment.state == PaymentStatus::Succeeded && !payment.refund_owed
                });
                if !paid {
                    problems.push(format!(
                        "charge {charge_id} booked {} but attempt {attempt} is {}",
                        booking_ids(),
                        describe(payment)
                    ));
                }
            }
            (0, 1) => {
                let refunded = payment.is_some_and(|payment| {
                    payment.state == PaymentStatus::Refunded && !payment.refund_owed
                });
                if !refunded {
                    problems.push(format!(
                        "charge {charge_id} was refunded ({}) but attempt {attempt} is {}: the \
                         refund is not recorded as completed",
                        refund_ids(),
                        describe(payment)
                    ));
                }
            }
            (booked, refunded) => {
                if booked > 0 && refunded > 0 {
                    problems.push(format!(
                        "charge {charge_id} ended as both a confirmed booking ({}) and a refund ({})",
                        booking_ids(),
                        refund_ids()
                    ));
                }
                if booked > 1 {
                    problems.push(format!(
                        "charge {charge_id} (attempt {attempt}) confirmed {booked} bookings: {}",
                        booking_ids()
                    ));
                }
                if refunded > 1 {
                    problems.push(format!(
                        "charge {charge_id} was refunded {refunded} times: {}",
                        refund_ids()
                    ));
                }
            }
        }
    }
    for (booking, charges) in &ends {
        if charges.len() > 1 {
            problems.push(format!(
                "booking {booking} is the end of {} charges ({}): all but one ended as nothing",
                charges.len(),
                ids(charges.iter().copied())
            ));
        }
    }
    report("charges_end_once", examined, problems)
}

/// Rule (c): every refund is of a succeeded charge, and never more than it took.
fn refunds_have_charges(indexed: &Indexed<'_>) -> CheckReport {
    let mut problems = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for refund in &indexed.refunds {
        by_key.entry(&refund.key).or_default().push(&refund.id);
        match indexed.charges_by_id.get(refund.charge_id.as_str()) {
            None => problems.push(format!(
                "refund {} is of charge {}, which the ledger does not have",
                refund.id, refund.charge_id
            )),
            Some(charge) if charge.status != ChargeStatus::Succeeded => problems.push(format!(
                "refund {} is of charge {}, which was declined",
                refund.id, refund.charge_id
            )),
            Some(charge) if refund.amount_minor > charge.amount_minor => problems.push(format!(
                "refund {} gave back {} minor units of charge {}, which took {}",
                refund.id, refund.amount_minor, charge.id, charge.amount_minor
            )),
            Some(_) => {}
        }
    }
    for (charge_id, refunds) in &indexed.refunds_by_charge {
        let Some(charge) = indexed.charges_by_id.get(charge_id) else { continue };
        let total: u64 = refunds.iter().map(|refund| refund.amount_minor).sum();
        if refunds.len() > 1 && total > charge.amount_minor {
            problems.push(format!(
                "charge {charge_id} took {} minor units and was refunded {total} in all ({})",
                charge.amount_minor,
                ids(refunds.iter().map(|refund| refund.id.as_str()))
            ));
        }
    }
    for (key, refunds) in &by_key {
        if refunds.len() > 1 {
            problems.push(format!(
                "refund key {key:?} refunded {} times: {}",
                refunds.len(),
                ids(refunds.iter().copied())
            ));
        }
    }
    report("refunds_have_charges", indexed.refunds.len() as u64, problems)
}

/// Rule (d): every confirmed booking, and every attempt recorded as paid, has a succeeded
/// charge of its amount; booked seats and confirmed bookings agree.
fn bookings_have_charges(indexed: &Indexed<'_>, cluster: &ClusterState) -> CheckReport {
    let mut problems = Vec::new();
    let mut examined = 0;
    let declined = |payment: &str| {
        indexed
            .charges
            .iter()
            .filter(|charge| {
                charge.payment_id == payment && charge.status == ChargeStatus::Declined
            })
            .map(|charge| charge.id.as_str())
            .collect::<Vec<_>>()
    };
    let no_charge = |payment: &str| match declined(payment).as_slice() {
        [] => "the provider has no charge for it".to_owned(),
        charges => format!("the provider declined it ({})", ids(charges.iter().copied())),
    };
    for (payment, bookings) in &indexed.confirmed_by_payment {
        for booking in bookings {
            examined += 1;
            match indexed.succeeded_by_payment.get(payment).and_then(|charges| charges.first()) {
                None => problems.push(format!(
                    "booking {} is confirmed, paid by attempt {payment}, but {}",
                    booking.booking_id,
                    no_charge(payment)
                )),
                Some(charge) if charge.amount_minor != booking.amount_minor => {
                    problems.push(format!(
                        "booking {} costs {} minor units but charge {} took {}",
                        booking.booking_id, booking.amount_minor, charge.id, charge.amount_minor
                    ));
                }
                Some(_) => {}
            }
        }
    }
    for payment in indexed.payments.values() {
        if !matches!(payment.state, PaymentStatus::Succeeded | PaymentStatus::Refunded) {
            continue;
        }
        examined += 1;
        if !indexed.succeeded_by_payment.contains_key(payment.payment_id.as_str()) {
            problems.push(format!(
                "attempt {} is {} in the cluster but {}",
                payment.payment_id,
                status_name(payment.state),
                no_charge(&payment.payment_id)
            ));
        }
    }
    for (show, booked) in &cluster.booked_seats {
        let mut held: BTreeMap<u32, &str> = BTreeMap::new();
        for booking in &indexed.bookings {
            if booking.show == *show && booking.state == BookingState::Confirmed {
                for &seat in &booking.seats {
                    held.insert(seat, &booking.booking_id);
                }
            }
        }
        let booked: BTreeSet<u32> = booked.iter().copied().collect();
        examined += booked.len() as u64;
        for seat in &booked {
            if !held.contains_key(seat) {
                problems.push(format!(
                    "show {show} seat {seat} is booked in the final seat map but no confirmed \
                     booking has it"
                ));
            }
        }
        for (seat, booking) in &held {
            if !booked.contains(seat) {
                problems.push(format!(
                    "booking {booking} is confirmed but its seat {seat} of show {show} is not \
                     booked in the final seat map"
                ));
            }
        }
    }
    report("bookings_have_charges", examined, problems)
}

/// Every attempt has settled: none `pending` or `unknown`, none owing a refund.
fn payments_settled(indexed: &Indexed<'_>) -> CheckReport {
    let problems = indexed
        .payments
        .values()
        .filter(|payment| {
            payment.refund_owed
                || matches!(payment.state, PaymentStatus::Pending | PaymentStatus::Unknown)
        })
        .map(|payment| {
            format!(
                "attempt {} is still {} after the run quiesced",
                payment.payment_id,
                describe(Some(payment))
            )
        })
        .collect();
    report("payments_settled", indexed.payments.len() as u64, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(id: &str, payment: &str, status: ChargeStatus) -> LedgerRecord {
        LedgerRecord::Charge(LedgerCharge {
            id: id.to_owned(),
            key: payment.to_owned(),
            payment_id: payment.to_owned(),
            amount_minor: 2_000,
            status,
        })
    }

    fn refund(id: &str, charge: &str, payment: &str) -> LedgerRecord {
        LedgerRecord::Refund(LedgerRefund {
            id: id.to_owned(),
            key: format!("refund-{payment}"),
            charge_id: charge.to_owned(),
            amount_minor: 2_000,
        })
    }

    fn payment(id: &str, hold: &str, state: PaymentStatus) -> ClusterPayment {
        ClusterPayment {
            payment_id: id.to_owned(),
            hold_id: hold.to_owned(),
            amount_minor: 2_000,
            state,
            refund_owed: false,
        }
    }

    fn booking(id: &str, payment: &str, seats: &[u32], state: BookingState) -> ClusterBooking {
        ClusterBooking {
            booking_id: id.to_owned(),
            show: 7,
            payment_id: payment.to_owned(),
            amount_minor: 2_000,
            seats: seats.to_vec(),
            state,
        }
    }

    /// A run where everything went right: attempt 7-2 (hold 7-1) booked; attempt 7-4 (hold
    /// 7-3) declined, then 7-5 of the same hold booked and its booking cancelled and refunded.
    fn good() -> (Vec<LedgerRecord>, ClusterState) {
        let ledger = vec![
            charge("ch_1", "7-2", ChargeStatus::Succeeded),
            charge("ch_2", "7-4", ChargeStatus::Declined),
            charge("ch_3", "7-5", ChargeStatus::Succeeded),
            refund("re_1", "ch_3", "7-5"),
        ];
        let cluster = ClusterState {
            payments: vec![
                payment("7-2", "7-1", PaymentStatus::Succeeded),
                payment("7-4", "7-3", PaymentStatus::Declined),
                payment("7-5", "7-3", PaymentStatus::Refunded),
            ],
            bookings: vec![
                booking("7-6", "7-2", &[1, 2], BookingState::Confirmed),
                booking("7-7", "7-5", &[3], BookingState::Cancelled),
            ],
            booked_seats: BTreeMap::from([(7, vec![1, 2])]),
        };
        (ledger, cluster)
    }

    /// The problems of check `name`, after checking the input.
    fn problems(ledger: &[LedgerRecord], cluster: &ClusterState, name: &str) -> Vec<String> {
        let report = check_ledger(ledger, cluster).expect("the input is well formed");
        let check = report.checks.iter().find(|check| check.check == name).expect("a check");
        assert_eq!(check.verdict == Verdict::Valid, check.problems.is_empty(), "{check:?}");
        assert_eq!(
            report.verdict == Verdict::Invalid,
            !check.problems.is_empty() || {
                report.checks.iter().any(|other| other.verdict == Verdict::Invalid)
            }
        );
        check.problems.clone()
    }

    #[test]
    fn a_clean_run_is_valid_and_counted() {
        let (ledger, cluster) = good();
        let report = check_ledger(&ledger, &cluster).unwrap();
        assert_eq!(report.verdict, Verdict::Valid, "{report:?}");
        assert_eq!(report.checks.len(), 5);
        assert!(report.checks.iter().all(|check| check.examined > 0), "{report:?}");
        let summary = &report.summary;
        assert_eq!(
            (summary.charges_succeeded, summary.charges_declined, summary.refunds),
            (2, 1, 1)
        );
        assert_eq!((summary.charged_minor, summary.refunded_minor), (4_000, 2_000));
        assert_eq!((summary.bookings_confirmed, summary.bookings_cancelled), (1, 1));
        assert_eq!(summary.payments_by_state["refunded"], 1);
    }

    #[test]
    fn an_attempt_charged_twice_under_a_fresh_key_is_caught() {
        let (mut ledger, cluster) = good();
        ledger.push(LedgerRecord::Charge(LedgerCharge {
            id: "ch_9".to_owned(),
            key: "7-2-retry".to_owned(),
            payment_id: "7-2".to_owned(),
            amount_minor: 2_000,
            status: ChargeStatus::Succeeded,
        }));
        let found = problems(&ledger, &cluster, "no_attempt_charged_twice");
        assert!(found.iter().any(|p| p.contains("ch_9") && p.contains("not the attempt's id")));
        assert!(found.iter().any(|p| p == "attempt 7-2 was charged 2 times: ch_1, ch_9"));
        assert!(found.iter().any(|p| p == "hold 7-1 kept 2 charges: ch_1, ch_9"), "{found:?}");
        // One booking cannot be the end of both charges: rule (b) says so too.
        let ended = problems(&ledger, &cluster, "charges_end_once");
        assert_eq!(
            ended,
            ["booking 7-6 is the end of 2 charges (ch_1, ch_9): all but one ended as nothing"]
        );
    }

    #[test]
    fn one_key_charged_twice_is_caught() {
        let (mut ledger, cluster) = good();
        ledger.push(charge("ch_8", "7-4", ChargeStatus::Declined));
        let found = problems(&ledger, &cluster, "no_attempt_charged_twice");
        assert_eq!(found, ["idempotency key \"7-4\" charged 2 times: ch_2, ch_8"]);
    }

    #[test]
    fn a_hold_keeping_two_paid_attempts_is_caught() {
        let (ledger, mut cluster) = good();
        // Hold 7-1's first attempt 7-2 kept its money, and so does a second attempt of it.
        let mut ledger = ledger;
        ledger.push(charge("ch_5", "7-8", ChargeStatus::Succeeded));
        cluster.payments.push(payment("7-8", "7-1", PaymentStatus::Succeeded));
        cluster.bookings.push(booking("7-9", "7-8", &[4], BookingState::Confirmed));
        cluster.booked_seats.insert(7, vec![1, 2, 4]);
        let found = problems(&ledger, &cluster, "no_attempt_charged_twice");
        assert_eq!(found, ["hold 7-1 kept 2 charges: ch_1, ch_5"]);
    }

    #[test]
    fn a_charge_that_ended_as_nothing_is_caught() {
        let (mut ledger, mut cluster) = good();
        ledger.push(charge("ch_4", "7-10", ChargeStatus::Succeeded));
        cluster.payments.push(payment("7-10", "7-11", PaymentStatus::Declined));
        let found = problems(&ledger, &cluster, "charges_end_once");
        assert_eq!(
            found,
            ["charge ch_4 (attempt 7-10, 2000 minor units) ended as neither a confirmed booking \
              nor a refund; the attempt is declined"]
        );
    }

    #[test]
    fn a_charge_both_booked_and_refunded_is_caught() {
        let (mut ledger, cluster) = good();
        ledger.push(refund("re_2", "ch_1", "7-2"));
        let found = problems(&ledger, &cluster, "charges_end_once");
        assert_eq!(
            found,
            ["charge ch_1 ended as both a confirmed booking (7-6) and a refund (re_2)"]
        );
    }

    #[test]
    fn a_charge_refunded_twice_is_caught_by_two_rules() {
        let (mut ledger, cluster) = good();
        ledger.push(LedgerRecord::Refund(LedgerRefund {
            id: "re_2".to_owned(),
            key: "another-key".to_owned(),
            charge_id: "ch_3".to_owned(),
            amount_minor: 2_000,
        }));
        let ended = problems(&ledger, &cluster, "charges_end_once");
        assert_eq!(ended, ["charge ch_3 was refunded 2 times: re_1, re_2"]);
        let refunds = problems(&ledger, &cluster, "refunds_have_charges");
        assert_eq!(
            refunds,
            ["charge ch_3 took 2000 minor units and was refunded 4000 in all (re_1, re_2)"]
        );
    }

    #[test]
    fn a_refund_the_cluster_did_not_record_as_completed_is_caught() {
        let (ledger, mut cluster) = good();
        cluster.payments[2].state = PaymentStatus::Succeeded;
        cluster.payments[2].refund_owed = true;
        let found = problems(&ledger, &cluster, "charges_end_once");
        assert_eq!(
            found,
            ["charge ch_3 was refunded (re_1) but attempt 7-5 is succeeded with a refund owed: \
              the refund is not recorded as completed"]
        );
        let settled = problems(&ledger, &cluster, "payments_settled");
        assert_eq!(
            settled,
            ["attempt 7-5 is still succeeded with a refund owed after the run quiesced"]
        );
    }

    #[test]
    fn refunds_without_a_succeeded_charge_or_too_large_are_caught() {
        let (mut ledger, cluster) = good();
        ledger.push(refund("re_2", "ch_404", "7-404"));
        ledger.push(refund("re_3", "ch_2", "7-4"));
        ledger.push(LedgerRecord::Refund(LedgerRefund {
            id: "re_4".to_owned(),
            key: "refund-7-2".to_owned(),
            charge_id: "ch_1".to_owned(),
            amount_minor: 2_001,
        }));
        let found = problems(&ledger, &cluster, "refunds_have_charges");
        assert_eq!(
            found,
            [
                "refund re_2 is of charge ch_404, which the ledger does not have",
                "refund re_3 is of charge ch_2, which was declined",
                "refund re_4 gave back 2001 minor units of charge ch_1, which took 2000",
            ]
        );
    }

    #[test]
    fn a_confirmed_booking_without_a_charge_is_caught() {
        let (mut ledger, cluster) = good();
        // Tampered: the ledger lost the charge that paid booking 7-6.
        ledger.remove(0);
        let found = problems(&ledger, &cluster, "bookings_have_charges");
        assert_eq!(
            found,
            [
                "booking 7-6 is confirmed, paid by attempt 7-2, but the provider has no charge \
                 for it",
                "attempt 7-2 is succeeded in the cluster but the provider has no charge for it",
            ]
        );
        // A booking paid by a declined attempt says which charge declined it.
        let (ledger, mut cluster) = good();
        cluster.bookings.push(booking("7-12", "7-4", &[5], BookingState::Confirmed));
        cluster.booked_seats.insert(7, vec![1, 2, 5]);
        let found = problems(&ledger, &cluster, "bookings_have_charges");
        assert_eq!(
            found,
            ["booking 7-12 is confirmed, paid by attempt 7-4, but the provider declined it (ch_2)"]
        );
    }

    #[test]
    fn booked_seats_and_confirmed_bookings_must_agree() {
        let (ledger, mut cluster) = good();
        cluster.booked_seats.insert(7, vec![1, 9]);
        let found = problems(&ledger, &cluster, "bookings_have_charges");
        assert_eq!(
            found,
            [
                "show 7 seat 9 is booked in the final seat map but no confirmed booking has it",
                "booking 7-6 is confirmed but its seat 2 of show 7 is not booked in the final seat \
                 map",
            ]
        );
    }

    #[test]
    fn a_booking_charged_another_amount_is_caught() {
        let (ledger, mut cluster) = good();
        cluster.bookings[0].amount_minor = 3_000;
        let found = problems(&ledger, &cluster, "bookings_have_charges");
        assert_eq!(found, ["booking 7-6 costs 3000 minor units but charge ch_1 took 2000"]);
    }

    #[test]
    fn an_unsettled_payment_is_caught() {
        let (ledger, mut cluster) = good();
        cluster.payments.push(payment("7-13", "7-14", PaymentStatus::Unknown));
        let found = problems(&ledger, &cluster, "payments_settled");
        assert_eq!(found, ["attempt 7-13 is still unknown after the run quiesced"]);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_verdict() {
        let (mut ledger, cluster) = good();
        ledger.push(charge("ch_1", "7-20", ChargeStatus::Succeeded));
        assert_eq!(
            check_ledger(&ledger, &cluster).unwrap_err().to_string(),
            "charge ch_1 is listed twice"
        );
        let (mut ledger, cluster) = good();
        ledger.push(charge("", "7-20", ChargeStatus::Succeeded));
        assert_eq!(
            check_ledger(&ledger, &cluster).unwrap_err().to_string(),
            "ledger record 5 (a charge): empty id"
        );
        let (ledger, mut cluster) = good();
        cluster.payments.push(payment("7-2", "7-1", PaymentStatus::Succeeded));
        assert_eq!(
            check_ledger(&ledger, &cluster).unwrap_err().to_string(),
            "payment 7-2 is listed twice"
        );
        let (mut ledger, cluster) = good();
        if let LedgerRecord::Refund(refund) = &mut ledger[3] {
            refund.amount_minor = 0;
        }
        assert_eq!(
            check_ledger(&ledger, &cluster).unwrap_err().to_string(),
            "refund re_1: an amount of zero"
        );
    }

    #[test]
    fn the_providers_ledger_parses_as_it_is_served() {
        let served = r#"[
            {"kind":"charge","id":"ch_1","key":"7-2","payment_id":"7-2","amount_minor":2000,
             "currency":"EUR","status":"succeeded","at_ms":1},
            {"kind":"refund","id":"re_1","key":"refund-7-2","charge_id":"ch_1",
             "amount_minor":2000,"at_ms":2}
        ]"#;
        let records: Vec<LedgerRecord> = serde_json::from_str(served).unwrap();
        assert_eq!(records[0], charge("ch_1", "7-2", ChargeStatus::Succeeded));
        assert_eq!(records[1], refund("re_1", "ch_1", "7-2"));
        assert_eq!(payment_status_from_wire("refunded"), Some(PaymentStatus::Refunded));
        assert_eq!(payment_status_from_wire("paid"), None);
    }
}
