//! Booking checkers that need no model: properties a history must have whatever order the
//! cluster chose, judged from real-time order and the values clients saw.
//!
//! Owns six checks, each sound (it never flags a correct cluster) under the assumptions named
//! on it: no seat held or booked twice at once, acknowledged writes never lost, no entity id
//! handed out twice, admission grants in FIFO order, waitlist offers in FIFO order with at
//! most one live offer per seat, and idempotent retries answered alike. Never guesses at operations whose outcome is unknown:
//! they may have happened, so they can only shorten what a check treats as certain.
//!
//! Assumption shared by all: deadlines (hold, grant, offer) lie beyond the end of the test, so
//! nothing expires by time during it (the workloads configure it so).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::audit::StateName;
use crate::command::{ClientRequest, Command};
use crate::ids::{
    BookingId, EntryId, HoldId, OfferId, PaymentId, SeatNo, SessionId, ShowId, TicketId,
};

use super::Verdict;
use super::history::{Call, Completion, History, HistoryError, Observed, Operation, Read};

/// The verdict of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The check's name.
    pub check: String,
    /// Valid or invalid (these checks never give up).
    pub verdict: Verdict,
    /// How many facts the check examined (so a vacuous pass is visible).
    pub examined: u64,
    /// Each violation found, in words, naming the operations.
    pub problems: Vec<String>,
}

impl CheckReport {
    pub(crate) fn new(check: &str, examined: u64, problems: Vec<String>) -> CheckReport {
        let verdict = if problems.is_empty() { Verdict::Valid } else { Verdict::Invalid };
        CheckReport { check: check.to_owned(), verdict, examined, problems }
    }
}

/// Runs every booking check on `history`.
///
/// # Errors
///
/// If the history is malformed.
pub fn check_bookings(history: &History) -> Result<Vec<CheckReport>, HistoryError> {
    let operations = history.operations()?;
    Ok(vec![
        no_double_allocation(&operations),
        acknowledged_writes_survive(&operations),
        ids_given_once(&operations),
        grants_in_fifo_order(&operations),
        offers_in_fifo_order(&operations),
        retries_answer_alike(&operations),
    ])
}

/// The client request of a write, with its show.
fn request(operation: &Operation) -> Option<(ShowId, &ClientRequest)> {
    match &operation.call {
        Call::Write(Command::Client(client)) => Some((client.show, &client.request)),
        _ => None,
    }
}

/// The completion time of an answered operation, `u64::MAX` otherwise.
fn returned(operation: &Operation) -> u64 {
    match operation.completion {
        Completion::Ok { time_ns, .. } => time_ns,
        _ => u64::MAX,
    }
}

/// A hold a client was told it has: its seats are its own from `from_ns` (the answer) until the
/// earliest moment something could have released them, `until_ns`.
struct Ownership {
    op: u64,
    hold: HoldId,
    seats: Vec<SeatNo>,
    from_ns: u64,
    until_ns: u64,
}

/// No seat is held or booked by two holds at once: a hold acquired entirely within another
/// hold's certain ownership of one of its seats is a double allocation. Ownership is certain
/// from the answer of the hold (or offer acceptance) until the invocation of anything that could
/// release it: a cancel of it, a payment on its checkout, a cancel of its booking (ok or unknown
/// alike), or the completion of a read that saw it no longer live. Confirmed bookings read at
/// any time must not share a seat either, unless one of them was cancelled (a cancel invoked,
/// whatever came of it: its seats may have been booked again).
///
/// A booking the history cannot tie to its hold (it was paid by the cluster's own payment
/// worker, not by a webhook in the history) is taken to be of any hold its owner checked out
/// before the cancel was invoked: the owner could only name the booking after it existed, so
/// its hold is among those, and releasing them all only shortens what counts as certain.
pub fn no_double_allocation(operations: &[Operation]) -> CheckReport {
    let mut owners: BTreeMap<(ShowId, HoldId), Ownership> = BTreeMap::new();
    let mut payment_hold: BTreeMap<(ShowId, PaymentId), HoldId> = BTreeMap::new();
    let mut checked_out: BTreeMap<(ShowId, SessionId), Vec<(HoldId, u64)>> = BTreeMap::new();
    let mut cancelled_bookings: BTreeSet<(ShowId, BookingId)> = BTreeSet::new();
    for operation in operations {
        if matches!(operation.completion, Completion::Fail { .. }) {
            continue;
        }
        if let Call::Write(Command::Client(client)) = &operation.call {
            match client.request {
                ClientRequest::Checkout { hold } => checked_out
                    .entry((client.show, client.session))
                    .or_default()
                    .push((hold, operation.invoke_ns)),
                ClientRequest::CancelBooking { booking } => {
                    cancelled_bookings.insert((client.show, booking));
                }
                _ => {}
            }
        }
    }
    for operation in operations {
        let Some((show, request)) = request(operation) else { continue };
        match (request, operation.value()) {
            (
                ClientRequest::Hold { .. } | ClientRequest::AcceptOffer { .. },
                Some(Observed::Held { hold, seats }),
            ) => {
                owners.insert(
                    (show, *hold),
                    Ownership {
                        op: operation.op,
                        hold: *hold,
                        seats: seats.clone(),
                        from_ns: returned(operation),
                        until_ns: u64::MAX,
                    },
                );
            }
            (ClientRequest::Checkout { hold }, Some(Observed::CheckoutStarted { payment, .. })) => {
                payment_hold.insert((show, *payment), *hold);
            }
            _ => {}
        }
    }
    let mut booking_hold = BTreeMap::new();
    for operation in operations {
        if let Some(Observed::PaymentRecorded { payment, booking: Some(booking), .. }) =
            operation.value()
            && let Some(show) = operation.call.show()
            && let Some(hold) = payment_hold.get(&(show, *payment))
        {
            booking_hold.insert((show, *booking), *hold);
        }
    }
    let mut release = |show: ShowId, hold: HoldId, at: u64| {
        if let Some(owner) = owners.get_mut(&(show, hold)) {
            owner.until_ns = owner.until_ns.min(at);
        }
    };
    for operation in operations {
        if matches!(operation.completion, Completion::Fail { .. }) {
            continue;
        }
        match &operation.call {
            Call::Write(Command::Client(client)) => match client.request {
                ClientRequest::CancelHold { hold } => {
                    release(client.show, hold, operation.invoke_ns);
                }
                ClientRequest::CancelBooking { booking } => {
                    if let Some(&hold) = booking_hold.get(&(client.show, booking)) {
                        release(client.show, hold, operation.invoke_ns);
                    } else {
                        let owned = checked_out.get(&(client.show, client.session));
                        for &(hold, checkout_ns) in owned.into_iter().flatten() {
                            if checkout_ns < operation.invoke_ns {
                                release(client.show, hold, operation.invoke_ns);
                            }
                        }
                    }
                }
                _ => {}
            },
            Call::Write(Command::Payment(payment)) => {
                if let Some(&hold) = payment_hold.get(&(payment.show, payment.payment)) {
                    release(payment.show, hold, operation.invoke_ns);
                }
            }
            Call::Read(Read::Hold { show, hold, .. }) => {
                if let Some(Observed::Entity { state, .. }) = operation.value()
                    && !matches!(
                        state,
                        StateName::Held | StateName::Processing | StateName::Confirmed
                    )
                {
                    release(*show, *hold, returned(operation));
                }
            }
            _ => {}
        }
    }

    let mut problems = Vec::new();
    let mut by_seat: BTreeMap<(ShowId, SeatNo), Vec<&Ownership>> = BTreeMap::new();
    for ((show, _), owner) in &owners {
        for &seat in &owner.seats {
            by_seat.entry((*show, seat)).or_default().push(owner);
        }
    }
    let invoked: BTreeMap<u64, u64> =
        operations.iter().map(|operation| (operation.op, operation.invoke_ns)).collect();
    for ((show, seat), holders) in &by_seat {
        for first in holders {
            for second in holders {
                let second_invoked = invoked[&second.op];
                if first.hold != second.hold
                    && first.from_ns < second_invoked
                    && second.from_ns < first.until_ns
                {
                    problems.push(format!(
                        "show {show} seat {seat}: hold {} (op {}) was acquired while hold {} \
                         (op {}) certainly owned the seat",
                        second.hold, second.op, first.hold, first.op
                    ));
                }
            }
        }
    }

    let mut confirmed: BTreeMap<(ShowId, SeatNo), BTreeMap<u64, u64>> = BTreeMap::new();
    for operation in operations {
        if let Call::Read(Read::Booking { show, booking, .. }) = operation.call
            && let Some(Observed::Entity { state: StateName::Confirmed, seats, .. }) =
                operation.value()
            && !cancelled_bookings.contains(&(show, booking))
        {
            for &seat in seats {
                confirmed.entry((show, seat)).or_default().insert(booking.0, operation.op);
            }
        }
    }
    for ((show, seat), bookings) in &confirmed {
        if bookings.len() > 1 {
            problems.push(format!(
                "show {show} seat {seat} is in {} confirmed bookings: {:?}",
                bookings.len(),
                bookings.keys().collect::<Vec<_>>()
            ));
        }
    }
    let examined = by_seat.len() as u64 + confirmed.len() as u64;
    CheckReport::new("no_double_allocation", examined, problems)
}

/// What an acknowledged write created, and the read that must find it.
fn created(operation: &Operation) -> Option<(ShowId, &'static str, u64)> {
    let show = operation.call.show()?;
    match operation.value()? {
        Observed::Held { hold, .. } => Some((show, "hold", hold.0)),
        Observed::Queued { ticket, .. } => Some((show, "ticket", ticket.0)),
        Observed::WaitlistJoined { entry } => Some((show, "entry", entry.0)),
        Observed::PaymentRecorded { booking: Some(booking), .. } => {
            Some((show, "booking", booking.0))
        }
        _ => None,
    }
}

/// Which request an acknowledged creation answered: a client's (its session and idempotency
/// key; retries share both), an offer's acceptance (accepting an accepted offer again, under
/// any key, answers the same hold) or a payment outcome's (its attempt; redeliveries share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Client { session: SessionId, key: u128 },
    Offer { session: SessionId, offer: OfferId },
    Payment { payment: PaymentId },
}

fn origin(operation: &Operation) -> Option<Origin> {
    match &operation.call {
        Call::Write(Command::Client(client)) => match client.request {
            ClientRequest::AcceptOffer { offer } => {
                Some(Origin::Offer { session: client.session, offer })
            }
            _ => Some(Origin::Client { session: client.session, key: client.key.0 }),
        },
        Call::Write(Command::Payment(outcome)) => {
            Some(Origin::Payment { payment: outcome.payment })
        }
        _ => None,
    }
}

/// An acknowledged creation: when it was answered, by which operation, for which request, and
/// the seats it was answered with (a hold's seats never change).
struct Acknowledged {
    returned_ns: u64,
    op: u64,
    origin: Option<Origin>,
    seats: Option<Vec<SeatNo>>,
}

/// Every acknowledged hold, booking, ticket and waitlist entry is found by every read invoked
/// after the acknowledgement, and is the same one: `*_not_found` means the write was lost, and
/// so do `not_owner` to the session that made it and a hold read with other seats than it was
/// acknowledged with (the id now names another session's or another request's entity, as
/// after a write lost in a show's move and its id handed out again). A hold whose cancel was
/// acknowledged is never read as live afterwards.
pub fn acknowledged_writes_survive(operations: &[Operation]) -> CheckReport {
    let mut acknowledged: BTreeMap<(ShowId, &'static str, u64), Acknowledged> = BTreeMap::new();
    let mut cancelled: BTreeMap<(ShowId, HoldId), (u64, u64)> = BTreeMap::new();
    for operation in operations {
        if let Some(key) = created(operation) {
            let seats = match operation.value() {
                Some(Observed::Held { seats, .. }) => {
                    let mut seats = seats.clone();
                    seats.sort_unstable();
                    Some(seats)
                }
                _ => None,
            };
            acknowledged.entry(key).or_insert(Acknowledged {
                returned_ns: returned(operation),
                op: operation.op,
                origin: origin(operation),
                seats,
            });
        }
        if let Some((show, ClientRequest::CancelHold { hold })) = request(operation)
            && operation.value() == Some(&Observed::Done)
        {
            cancelled.entry((show, *hold)).or_insert((returned(operation), operation.op));
        }
    }
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let (key, reader, not_found) = match operation.call {
            Call::Read(Read::Hold { show, session, hold }) => {
                ((show, "hold", hold.0), session, "hold_not_found")
            }
            Call::Read(Read::Booking { show, session, booking }) => {
                ((show, "booking", booking.0), session, "booking_not_found")
            }
            Call::Read(Read::Ticket { show, session, ticket }) => {
                ((show, "ticket", ticket.0), session, "ticket_not_found")
            }
            Call::Read(Read::Entry { show, session, entry }) => {
                ((show, "entry", entry.0), session, "entry_not_found")
            }
            _ => continue,
        };
        let Some(value) = operation.value() else { continue };
        if let Some(write) = acknowledged.get(&key)
            && write.returned_ns < operation.invoke_ns
        {
            examined += 1;
            let made_by_reader = matches!(
                write.origin,
                Some(Origin::Client { session, .. } | Origin::Offer { session, .. })
                    if session == reader
            );
            let lost = match value {
                Observed::Rejected { code } => {
                    code == not_found || (code == "not_owner" && made_by_reader)
                }
                Observed::Entity { seats, .. } => {
                    write.seats.as_ref().is_some_and(|acknowledged| {
                        let mut read = seats.clone();
                        read.sort_unstable();
                        *acknowledged != read
                    })
                }
                _ => false,
            };
            if lost {
                problems.push(format!(
                    "{} {} of show {} was acknowledged (op {}) but read {:?} (op {})",
                    key.1, key.2, key.0, write.op, value, operation.op
                ));
            }
        }
        if let Call::Read(Read::Hold { show, hold, .. }) = operation.call
            && let Some(&(cancelled_ns, cancel_op)) = cancelled.get(&(show, hold))
            && cancelled_ns < operation.invoke_ns
            && let Observed::Entity { state: StateName::Held | StateName::Processing, .. } = value
        {
            examined += 1;
            problems.push(format!(
                "hold {hold} of show {show} was cancelled (op {cancel_op}) but read live (op {})",
                operation.op
            ));
        }
    }
    CheckReport::new("acknowledged_writes_survive", examined, problems)
}

/// No hold, booking, ticket or waitlist entry id is handed out twice: two acknowledged
/// creations of one id answered the same request (a retry with the same session and key, or
/// the same payment attempt's outcome again). Two requests answered with one id means one of
/// the two entities was lost and its id reused, as when a write accepted by a show's old group
/// after its state was copied out is dropped with it.
pub fn ids_given_once(operations: &[Operation]) -> CheckReport {
    let mut first: BTreeMap<(ShowId, &'static str, u64), (u64, Origin)> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let (Some(key), Some(origin)) = (created(operation), origin(operation)) else {
            continue;
        };
        match first.get(&key) {
            None => {
                first.insert(key, (operation.op, origin));
            }
            Some(&(earlier, earlier_origin)) => {
                examined += 1;
                if earlier_origin != origin {
                    problems.push(format!(
                        "{} {} of show {} was given by op {earlier} ({earlier_origin:?}) and \
                         again by op {} ({origin:?})",
                        key.1, key.2, key.0, operation.op
                    ));
                }
            }
        }
    }
    examined += first.len() as u64;
    CheckReport::new("ids_given_once", examined, problems)
}

/// Admission grants go in ticket order (tickets are numbered in join order): once ticket `b`
/// was seen granted (read granted or consumed), no ticket `a < b` of the same show can be read
/// as waiting afterwards. Also, a join answered before another (not a retry of it) was invoked
/// got the smaller ticket.
pub fn grants_in_fifo_order(operations: &[Operation]) -> CheckReport {
    let mut granted_seen: BTreeMap<ShowId, Vec<(u64, TicketId, u64)>> = BTreeMap::new();
    let mut joins: BTreeMap<ShowId, Vec<(u64, u64, TicketId, u64)>> = BTreeMap::new();
    for operation in operations {
        let Some(show) = operation.call.show() else { continue };
        match (&operation.call, operation.value()) {
            (_, Some(Observed::Queued { ticket })) => {
                joins.entry(show).or_default().push((
                    operation.invoke_ns,
                    returned(operation),
                    *ticket,
                    operation.op,
                ));
            }
            (
                Call::Read(Read::Ticket { ticket, .. }),
                Some(Observed::Entity { state: StateName::Granted | StateName::Consumed, .. }),
            ) => {
                granted_seen.entry(show).or_default().push((
                    returned(operation),
                    *ticket,
                    operation.op,
                ));
            }
            _ => {}
        }
    }
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        if let Call::Read(Read::Ticket { show, ticket, .. }) = operation.call
            && let Some(Observed::Entity { state: StateName::Waiting, .. }) = operation.value()
        {
            for &(seen_ns, later, grant_op) in granted_seen.get(&show).into_iter().flatten() {
                examined += 1;
                if later > ticket && seen_ns < operation.invoke_ns {
                    problems.push(format!(
                        "show {show}: ticket {later} was granted (op {grant_op}) while ticket \
                         {ticket}, ahead of it, was still read waiting (op {})",
                        operation.op
                    ));
                }
            }
        }
    }
    // A retry under the same key answers the ticket its first attempt made: each join counts
    // from the first invocation under its key.
    let mut first_invoked: BTreeMap<(SessionId, u128), u64> = BTreeMap::new();
    for operation in operations {
        if let Some(key) = operation.call.idempotency() {
            let earliest = first_invoked.entry(key).or_insert(operation.invoke_ns);
            *earliest = (*earliest).min(operation.invoke_ns);
        }
    }
    let key_of: BTreeMap<u64, (SessionId, u128)> = operations
        .iter()
        .filter_map(|operation| Some((operation.op, operation.call.idempotency()?)))
        .collect();
    let invoked_of = |op: u64| key_of.get(&op).and_then(|key| first_invoked.get(key)).copied();
    for (show, list) in &joins {
        for &(_, first_returned, first_ticket, first_op) in list {
            for &(second_invoked, _, second_ticket, second_op) in list {
                examined += 1;
                let second_invoked = invoked_of(second_op).unwrap_or(second_invoked);
                if first_returned < second_invoked && first_ticket >= second_ticket {
                    problems.push(format!(
                        "show {show}: join op {first_op} got ticket {first_ticket} before join op \
                         {second_op} was invoked, which got ticket {second_ticket}"
                    ));
                }
            }
        }
    }
    CheckReport::new("grants_in_fifo_order", examined, problems)
}

/// Waitlist offers go in entry order among entries of one band and quantity: once entry `b` was
/// seen offered or accepted, no entry `a < b` of the same band and quantity can be read as
/// waiting afterwards. And no two offers read open at once share a seat.
pub fn offers_in_fifo_order(operations: &[Operation]) -> CheckReport {
    // The band and quantity of each acknowledged entry.
    let mut kind: BTreeMap<(ShowId, EntryId), (u8, u8)> = BTreeMap::new();
    for operation in operations {
        if let Some((show, ClientRequest::JoinWaitlist { quantity, band })) = request(operation)
            && let Some(Observed::WaitlistJoined { entry }) = operation.value()
        {
            kind.insert((show, *entry), (*band, *quantity));
        }
    }
    let mut served_seen: Vec<(ShowId, EntryId, u64, u64)> = Vec::new();
    for operation in operations {
        if let Call::Read(Read::Entry { show, entry, .. }) = operation.call
            && let Some(Observed::Entity {
                state: StateName::Offered | StateName::Accepted, ..
            }) = operation.value()
        {
            served_seen.push((show, entry, returned(operation), operation.op));
        }
    }
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        if let Call::Read(Read::Entry { show, entry, .. }) = operation.call
            && let Some(Observed::Entity { state: StateName::Waiting, .. }) = operation.value()
            && let Some(waiting_kind) = kind.get(&(show, entry))
        {
            for &(served_show, served, seen_ns, served_op) in &served_seen {
                if served_show != show || kind.get(&(show, served)) != Some(waiting_kind) {
                    continue;
                }
                examined += 1;
                if served > entry && seen_ns < operation.invoke_ns {
                    problems.push(format!(
                        "show {show}: entry {served} was offered (op {served_op}) while entry \
                         {entry}, ahead of it with the same band and quantity, was still read \
                         waiting (op {})",
                        operation.op
                    ));
                }
            }
        }
    }
    // An offer read open was certainly open from the earliest answer of such a read to the
    // latest invocation of one (it is open throughout: an offer never reopens). Two offers of
    // one show whose certain spans overlap must not share a seat.
    let mut open_reads: BTreeMap<(ShowId, OfferId), Vec<OpenRead>> = BTreeMap::new();
    for operation in operations {
        if let Call::Read(Read::Offer { show, offer, .. }) = operation.call
            && let Some(Observed::Entity { state: StateName::Open, seats, .. }) = operation.value()
        {
            open_reads.entry((show, offer)).or_default().push((
                operation.invoke_ns,
                returned(operation),
                seats.clone(),
            ));
        }
    }
    let offers: Vec<_> = open_reads.iter().collect();
    for (index, ((show, first), first_reads)) in offers.iter().enumerate() {
        for ((other_show, second), second_reads) in &offers[index + 1..] {
            if show != other_show {
                continue;
            }
            let span = |reads: &Vec<OpenRead>| {
                let from = reads.iter().map(|read| read.1).min().unwrap_or(u64::MAX);
                let until = reads.iter().map(|read| read.0).max().unwrap_or(0);
                (from, until)
            };
            let (first_from, first_until) = span(first_reads);
            let (second_from, second_until) = span(second_reads);
            let seats_first = &first_reads[0].2;
            let shared = second_reads[0].2.iter().any(|seat| seats_first.contains(seat));
            examined += 1;
            if shared && first_from < second_until && second_from < first_until {
                problems.push(format!(
                    "show {show}: offers {first} and {second} were both open at once for a \
                     shared seat"
                ));
            }
        }
    }
    CheckReport::new("offers_in_fifo_order", examined, problems)
}

/// A read that saw an offer open: when it was invoked, when it answered, and the offer's seats.
type OpenRead = (u64, u64, Vec<SeatNo>);

/// Once an operation with a session, idempotency key and request was answered with a success,
/// every later one with the same three got the same answer (the cluster stores successes and
/// replays them; a rejection changed nothing and is not stored, so a retry of it is judged
/// afresh and may differ).
pub fn retries_answer_alike(operations: &[Operation]) -> CheckReport {
    let mut first: BTreeMap<(u128, u128), &Operation> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let (Some((session, key)), Some(value)) = (operation.call.idempotency(), operation.value())
        else {
            continue;
        };
        match first.get(&(session.0, key)) {
            None if value.rejection().is_some() => {}
            None => {
                first.insert((session.0, key), operation);
            }
            Some(earlier) if earlier.call == operation.call => {
                examined += 1;
                if earlier.value() != Some(value) {
                    problems.push(format!(
                        "op {} retried op {} with the same key and got {:?} instead of {:?}",
                        operation.op,
                        earlier.op,
                        value,
                        earlier.value()
                    ));
                }
            }
            Some(_) => {}
        }
    }
    CheckReport::new("retries_answer_alike", examined, problems)
}
