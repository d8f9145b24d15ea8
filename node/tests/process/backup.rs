//! Backing up a real 3-node cluster during an on-sale (holds, checkouts charged through paysim
//! into bookings, an admission lane filling, a waitlist growing) and restoring the backup into
//! a fresh 3-node cluster: the backup file reads back with its checksums; each restored group's
//! installed state is the backed-up state; everything acknowledged before the backup began is
//! in it; the restored cluster answers seats, holds, payments, bookings, admission tickets and
//! waitlist entries exactly as the backed-up state says (the source at the backup's indexes),
//! knows nothing acknowledged only after it, keeps the lane's and the waitlist's FIFO order,
//! takes new writes (refusing a seat the backup holds), and its replicas converge. A fresh
//! cluster refuses a second restore, and a damaged file is refused before anything is sent.
//!
//! Reference: issue 18 section 3 (backup and restore) and seed 002 section 14 ("restore tests
//! must check seats and waiting order").

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use client::{Backup, Client, Error, ErrorCode, NewShow};
use statemachine::{EntryId, Group, HoldId, PaymentId, ShowId, TicketId};
use tokio::time::Instant;

use crate::paysim::Paysim;
use crate::rest::Api;
use crate::{WAIT, options};

/// The show whose seats are held and paid for.
const SALE: u64 = 960;
/// The show whose admission lane fills.
const LANE: u64 = 961;
/// The sold-out show whose waitlist grows.
const WAITLIST: u64 = 962;
/// The seats of the sale.
const SALE_SEATS: u32 = 40;
/// How many buyer sessions share the work.
const BUYERS: usize = 10;
/// How many operations the on-sale runs before the backup, and at least after it.
const OPERATIONS_AROUND: usize = 15;

/// What the on-sale had acknowledged, and when.
#[derive(Clone, Debug)]
enum Acked {
    Hold { token: String, show: u64, hold: u64 },
    Payment { token: String, show: u64, payment: u64 },
    Ticket { token: String, show: u64, ticket: u64 },
    Entry { token: String, show: u64, entry: u64 },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_during_an_on_sale_restores_into_a_fresh_cluster() -> io::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut source_options = options(3);
    source_options.extra_args.extend(["--provider-url".to_owned(), format!("http://{listen}")]);
    let api = Api::start(source_options).await?;
    let ledger = tempfile::tempdir()?;
    let _paysim = Paysim::start_on(&api, ledger.path(), &listen, &[]).await?;
    let operator = api.cluster.client();

    let sale = NewShow {
        open_sales: true,
        group_id: 1,
        ..NewShow::uniform(SALE, SALE_SEATS, 1_000, "EUR")
    };
    let lane = NewShow {
        open_sales: true,
        group_id: 2,
        admission_window: Some(1),
        ..NewShow::uniform(LANE, 10, 1_000, "EUR")
    };
    let waitlist = NewShow {
        open_sales: true,
        group_id: 1,
        waitlist: true,
        ..NewShow::uniform(WAITLIST, 1, 1_000, "EUR")
    };
    for show in [&sale, &lane, &waitlist] {
        operator.create_show(show, None).await.map_err(other)?;
    }
    let mut tokens = Vec::new();
    for _ in 0..BUYERS {
        tokens.push(operator.create_session().await.map_err(other)?);
    }
    // The waitlist's show sells out before the on-sale starts.
    let seller = operator.create_session().await.map_err(other)?;
    operator.hold(&seller, WAITLIST, &[0], 1, None).await.map_err(other)?;

    // The on-sale runs in the background while the backup is taken.
    let acked: Arc<std::sync::Mutex<Vec<(Instant, Acked)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let driver = tokio::spawn(on_sale(
        api.cluster.new_client().map_err(other)?,
        tokens.clone(),
        Arc::clone(&acked),
        Flags { stop: Arc::clone(&stop), released: Arc::clone(&released) },
        Arc::clone(&done),
    ));
    wait_until(|| done.load(Ordering::SeqCst) >= OPERATIONS_AROUND || driver.is_finished()).await?;
    if driver.is_finished() {
        driver.await.map_err(other)??;
        return Err(other("the on-sale ended before the backup"));
    }
    // The first hold was checked out: the backup comes once paysim's webhook has booked it.
    let first = acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).first().cloned();
    let Some((_, Acked::Hold { token, hold, .. })) = first else {
        return Err(other("the on-sale began with no hold"));
    };
    let deadline = Instant::now() + WAIT;
    while operator.get_hold(&token, SALE, hold).await.map_err(other)?.booking_id == 0 {
        ensure(Instant::now() < deadline, "paysim books the first hold")?;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let began = Instant::now();
    released.store(true, Ordering::SeqCst);
    let backup = operator.backup().await.map_err(other)?;
    let at_end = done.load(Ordering::SeqCst);
    wait_until(|| {
        done.load(Ordering::SeqCst) >= at_end + OPERATIONS_AROUND || driver.is_finished()
    })
    .await?;
    stop.store(true, Ordering::SeqCst);
    driver.await.map_err(other)??;
    ensure(
        done.load(Ordering::SeqCst) >= at_end + OPERATIONS_AROUND,
        "the on-sale went on after the backup",
    )?;
    let acked = acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();

    // The file reads back as written, checksums checked.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.backup");
    backup.write(&file).map_err(other)?;
    let read = Backup::read(&file).map_err(other)?;
    ensure(read == backup, "the backup file reads back as written")?;
    let order: Vec<u64> = backup.groups.iter().map(|group| group.header.group_id).collect();
    ensure(order == [1, 2, 0], &format!("data groups first, group 0 last: {order:?}"))?;

    // The source at the backup's indexes: each group's state as backed up.
    let mut states = BTreeMap::new();
    for group in &backup.groups {
        let state = Group::decode_snapshot(&group.state).map_err(other)?;
        ensure(
            state.applied_index() == group.header.log_index,
            "a backed-up state is at its header's log index",
        )?;
        states.insert(group.header.group_id, state);
    }
    let state_of = |show: u64| {
        states
            .values()
            .find(|state| state.show(ShowId(show)).is_some())
            .ok_or_else(|| io::Error::other(format!("show {show} is in no backed-up group")))
    };
    // Everything acknowledged before the backup began is in it.
    let mut before = 0;
    for (at, what) in &acked {
        if *at < began {
            before += 1;
            ensure(in_backup(state_of(show_of(what))?, what), &format!("{what:?} is backed up"))?;
        }
    }
    ensure(before >= OPERATIONS_AROUND, "the backup came during the on-sale")?;

    // A fresh cluster of three nodes, built from the file.
    let restored = testkit::Cluster::start(testkit::ClusterOptions {
        bootstrap: false,
        exclusive: false,
        ..options(3)
    })
    .await
    .map_err(other)?;
    let client = restored.client();
    let started = Instant::now();
    let replies = client.restore(&read, None).await.map_err(other)?;
    println!("restored {} groups in {:?}", replies.len(), started.elapsed());
    for (reply, group) in replies.iter().zip(&read.groups) {
        ensure(
            reply.group_id == group.header.group_id
                && reply.log_index == group.header.log_index
                && reply.state_sha256 == group.header.state_sha256,
            &format!("group {} is installed as backed up: {reply:?}", group.header.group_id),
        )?;
    }
    let again = client.restore(&read, None).await;
    ensure(
        matches!(again, Err(Error::InvalidArgument(ref message)) if message.contains("already has")),
        &format!("a restored cluster refuses a second restore: {again:?}"),
    )?;

    // The restored cluster answers as the backed-up state does.
    for show in [SALE, WAITLIST, LANE] {
        let map = client.get_seat_map_linearizable(show).await.map_err(other)?;
        let expected: Vec<i32> = state_of(show)?
            .seat_map(ShowId(show))
            .map_err(|rejection| other(format!("{rejection:?}")))?
            .seats
            .iter()
            .map(|seat| seat_status(*seat))
            .collect();
        ensure(map.seats == expected, &format!("show {show}'s seats are restored"))?;
    }
    let mut compared = 0;
    let mut missing_after = 0;
    let mut bookings = 0;
    for (_, what) in &acked {
        let state = state_of(show_of(what))?;
        if !in_backup(state, what) {
            ensure(unknown_to(&client, what).await, &format!("{what:?} came after the backup"))?;
            missing_after += 1;
            continue;
        }
        compared += 1;
        bookings += usize::from(same_as_backup(&client, state, what).await?);
    }
    println!(
        "compared {compared} entities with the backup ({bookings} booked holds), \
         {missing_after} acknowledged after it are unknown to the restored cluster"
    );
    ensure(bookings > 0, "some holds were paid for and booked before the backup")?;

    // FIFO: the lane's tickets and the waitlist's entries keep their order.
    for kind in ["ticket", "entry"] {
        let mut ahead = Vec::new();
        for (_, what) in &acked {
            let state = state_of(show_of(what))?;
            match what {
                Acked::Ticket { token, show, ticket }
                    if kind == "ticket" && in_backup(state, what) =>
                {
                    let reply = client.get_ticket(token, *show, *ticket).await.map_err(other)?;
                    if reply.state == "waiting" {
                        ahead.push(reply.ahead);
                    }
                }
                Acked::Entry { token, show, entry }
                    if kind == "entry" && in_backup(state, what) =>
                {
                    let reply =
                        client.get_waitlist_entry(token, *show, *entry).await.map_err(other)?;
                    if reply.state == "waiting" {
                        ahead.push(reply.ahead);
                    }
                }
                _ => {}
            }
        }
        ensure(ahead.len() >= 2, &format!("several {kind}s wait in the restored cluster"))?;
        ensure(
            ahead.windows(2).all(|pair| pair[0] < pair[1]),
            &format!("{kind}s wait in the order they joined: {ahead:?}"),
        )?;
    }

    // It takes writes: a seat free in the backup can be held, one it holds cannot.
    let sale_map = state_of(SALE)?.seat_map(ShowId(SALE)).map_err(|r| other(format!("{r:?}")))?;
    let free = sale_map.seats.iter().position(|seat| seat_status(*seat) == 1);
    let taken = sale_map.seats.iter().position(|seat| seat_status(*seat) != 1);
    let buyer = client.create_session().await.map_err(other)?;
    if let Some(seat) = free {
        let seat = u32::try_from(seat).map_err(other)?;
        client.hold(&buyer, SALE, &[seat], 1, None).await.map_err(other)?;
    }
    let Some(seat) = taken else { return Err(other("the backup holds no seat of the sale")) };
    let refused = client.hold(&buyer, SALE, &[u32::try_from(seat).map_err(other)?], 1, None).await;
    ensure(
        matches!(refused, Err(Error::Rejected { code: ErrorCode::SeatUnavailable, .. })),
        &format!("a seat the backup holds stays taken: {refused:?}"),
    )?;
    restored.wait_all_converged(WAIT).await.map_err(other)?;
    restored.shutdown().await.map_err(other)?;

    // A damaged file is refused before anything is sent.
    let mut bytes = std::fs::read(&file)?;
    let last = bytes.len() - 1024 - 1;
    let at = (0..last).rev().find(|&at| bytes[at] != 0).unwrap_or(0);
    bytes[at] ^= 0x01;
    std::fs::write(&file, &bytes)?;
    let damaged = Backup::read(&file);
    ensure(
        matches!(&damaged, Err(error) if error.to_string().contains("damaged")),
        &format!("a damaged backup is refused: {:?}", damaged.err()),
    )?;
    api.cluster.shutdown().await.map_err(other)?;
    Ok(())
}

/// What the test tells the on-sale: to stop, and that the backup begins.
struct Flags {
    stop: Arc<AtomicBool>,
    released: Arc<AtomicBool>,
}

/// The on-sale: round after round, a buyer holds the next seat of the sale, checks out every
/// other hold (paysim pays, the hold becomes a booking), joins the admission lane and the
/// waitlist; each acknowledged answer is recorded with when it came. After
/// [`OPERATIONS_AROUND`] operations it waits for the backup to begin, so that most of the sale
/// comes during and after it however slowly paysim books the first hold.
async fn on_sale(
    client: Client,
    tokens: Vec<String>,
    acked: Arc<std::sync::Mutex<Vec<(Instant, Acked)>>>,
    flags: Flags,
    done: Arc<AtomicUsize>,
) -> io::Result<()> {
    let Flags { stop, released } = flags;
    let record = |what: Acked| {
        acked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((Instant::now(), what));
        done.fetch_add(1, Ordering::SeqCst);
    };
    let mut seat = 0;
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) && seat < SALE_SEATS {
        if done.load(Ordering::SeqCst) >= OPERATIONS_AROUND && !released.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        }
        let token = tokens[round % tokens.len()].clone();
        let hold = client.hold(&token, SALE, &[seat], 1, None).await.map_err(other)?;
        seat += 1;
        record(Acked::Hold { token: token.clone(), show: SALE, hold: hold.hold_id });
        if round % 2 == 0 {
            let checkout =
                client.checkout(&token, SALE, hold.hold_id, None).await.map_err(other)?;
            record(Acked::Payment {
                token: token.clone(),
                show: SALE,
                payment: checkout.payment_id,
            });
        }
        if round < tokens.len() {
            let ticket = client.join_queue(&token, LANE, None).await.map_err(other)?;
            record(Acked::Ticket { token: token.clone(), show: LANE, ticket: ticket.ticket_id });
            let entry = client.join_waitlist(&token, WAITLIST, 1, None).await.map_err(other)?;
            record(Acked::Entry { token, show: WAITLIST, entry: entry.entry_id });
        }
        round += 1;
    }
    Ok(())
}

fn show_of(what: &Acked) -> u64 {
    match what {
        Acked::Hold { show, .. }
        | Acked::Payment { show, .. }
        | Acked::Ticket { show, .. }
        | Acked::Entry { show, .. } => *show,
    }
}

/// Whether the backed-up `state` has the acknowledged entity.
fn in_backup(state: &Group, what: &Acked) -> bool {
    match *what {
        Acked::Hold { show, hold, .. } => state.hold(ShowId(show), HoldId(hold), None).is_ok(),
        Acked::Payment { show, payment, .. } => {
            state.payment(ShowId(show), PaymentId(payment), None).is_ok()
        }
        Acked::Ticket { show, ticket, .. } => {
            state.ticket(ShowId(show), TicketId(ticket), None).is_ok()
        }
        Acked::Entry { show, entry, .. } => {
            state.waitlist_entry(ShowId(show), EntryId(entry), None).is_ok()
        }
    }
}

/// Whether the restored cluster answers `what` as not found.
async fn unknown_to(client: &Client, what: &Acked) -> bool {
    let answer = match what {
        Acked::Hold { token, show, hold } => client.get_hold(token, *show, *hold).await.err(),
        Acked::Payment { token, show, payment } => {
            client.get_payment(Some(token), *show, *payment).await.err()
        }
        Acked::Ticket { token, show, ticket } => {
            client.get_ticket(token, *show, *ticket).await.err()
        }
        Acked::Entry { token, show, entry } => {
            client.get_waitlist_entry(token, *show, *entry).await.err()
        }
    };
    matches!(answer, Some(Error::Rejected { status: tonic::Code::NotFound, .. }))
}

/// Checks that the restored cluster answers `what` as the backed-up `state` says; true for a
/// hold that became a booking (whose booking is checked too).
async fn same_as_backup(client: &Client, state: &Group, what: &Acked) -> io::Result<bool> {
    let rejected = |rejection| other(format!("{rejection:?}"));
    match what {
        Acked::Hold { token, show, hold } => {
            let expected = state.hold(ShowId(*show), HoldId(*hold), None).map_err(rejected)?;
            let reply = client.get_hold(token, *show, *hold).await.map_err(other)?;
            ensure(
                same_name(&reply.state, &expected.state),
                &format!("hold {hold}: restored {reply:?}, backed up {expected:?}"),
            )?;
            if reply.booking_id == 0 {
                return Ok(false);
            }
            let booking =
                client.get_booking(token, *show, reply.booking_id).await.map_err(other)?;
            ensure(booking.hold_id == *hold, &format!("booking of hold {hold}: {booking:?}"))?;
            Ok(true)
        }
        Acked::Payment { token, show, payment } => {
            let expected =
                state.payment(ShowId(*show), PaymentId(*payment), None).map_err(rejected)?;
            let reply = client.get_payment(Some(token), *show, *payment).await.map_err(other)?;
            ensure(
                same_name(&reply.state, &expected.payment.state)
                    && reply.amount_minor == expected.payment.price.amount_minor,
                &format!("payment {payment}: restored {reply:?}, backed up {expected:?}"),
            )?;
            Ok(false)
        }
        Acked::Ticket { token, show, ticket } => {
            let expected =
                state.ticket(ShowId(*show), TicketId(*ticket), None).map_err(rejected)?;
            let reply = client.get_ticket(token, *show, *ticket).await.map_err(other)?;
            ensure(
                same_name(&reply.state, &expected.state) && reply.ahead == expected.ahead,
                &format!("ticket {ticket}: restored {reply:?}, backed up {expected:?}"),
            )?;
            Ok(false)
        }
        Acked::Entry { token, show, entry } => {
            let expected =
                state.waitlist_entry(ShowId(*show), EntryId(*entry), None).map_err(rejected)?;
            let reply = client.get_waitlist_entry(token, *show, *entry).await.map_err(other)?;
            ensure(
                same_name(&reply.state, &expected.state) && reply.ahead == expected.ahead,
                &format!("entry {entry}: restored {reply:?}, backed up {expected:?}"),
            )?;
            Ok(false)
        }
    }
}

/// Whether a wire state name (`held`, `waiting`, ...) names the model's state (its variant:
/// `Succeeded { .. }` is `succeeded`).
fn same_name(wire: &str, model: &impl std::fmt::Debug) -> bool {
    let debug = format!("{model:?}");
    let variant = debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default();
    wire.replace('_', "") == variant.to_lowercase()
}

/// The wire number of a model seat status.
fn seat_status(seat: statemachine::SeatStatus) -> i32 {
    match seat {
        statemachine::SeatStatus::Free => 1,
        statemachine::SeatStatus::Held => 2,
        statemachine::SeatStatus::Booked => 3,
        statemachine::SeatStatus::Reserved => 4,
    }
}

async fn wait_until(done: impl Fn() -> bool) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    while !done() {
        if Instant::now() > deadline {
            return Err(other("the on-sale made no progress"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

fn ensure(holds: bool, what: &str) -> io::Result<()> {
    if holds { Ok(()) } else { Err(other(format!("not so: {what}"))) }
}

fn other(error: impl std::fmt::Display) -> io::Error {
    io::Error::other(error.to_string())
}

/// The show of the erasure scenario.
const ERASED_SHOW: u64 = 963;

/// Deletion on demand on a real cluster: a buyer holds and checks out; its session id is read
/// from the hold's audit trail; a backup taken then holds the session's id; `erase_session`
/// renames it in every show; a backup taken afterwards holds it nowhere, the hold and payment
/// are still there under a pseudonym (their audit names another session), and the buyer's own
/// token no longer reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_session_is_in_no_backup_taken_afterwards() -> io::Result<()> {
    let cluster = testkit::Cluster::start(options(3)).await.map_err(other)?;
    let operator = cluster.client();
    let show = NewShow { open_sales: true, ..NewShow::uniform(ERASED_SHOW, 20, 1_000, "EUR") };
    operator.create_show(&show, None).await.map_err(other)?;
    let other_show =
        NewShow { open_sales: true, ..NewShow::uniform(ERASED_SHOW + 1, 5, 900, "EUR") };
    operator.create_show(&other_show, None).await.map_err(other)?;
    let buyer = operator.create_session().await.map_err(other)?;
    let hold = operator.hold(&buyer, ERASED_SHOW, &[3, 4], 1, Some("erased-hold")).await;
    let hold = hold.map_err(other)?.hold_id;
    let payment = operator.checkout(&buyer, ERASED_SHOW, hold, None).await.map_err(other)?;
    let bystander = operator.create_session().await.map_err(other)?;
    let kept = operator.hold(&bystander, ERASED_SHOW, &[9], 1, None).await.map_err(other)?;

    let trail = operator.get_audit(ERASED_SHOW, "hold", hold).await.map_err(other)?;
    let session_hex =
        trail.records.first().map(|record| record.session.clone()).unwrap_or_default();
    ensure(session_hex.len() == 32, &format!("the audit names the buyer's session: {trail:?}"))?;
    let session = statemachine::SessionId(u128::from_str_radix(&session_hex, 16).map_err(other)?);
    let encoded = postcard_bytes(session);
    let group_holding =
        |backup: &Backup| backup.groups.iter().any(|group| contains(&group.state, &encoded));
    let before = operator.backup().await.map_err(other)?;
    ensure(group_holding(&before), "a backup taken before the erasure holds the session")?;

    let erased = operator.erase_session(&session_hex).await.map_err(other)?;
    let shows: Vec<(u64, u32)> =
        erased.iter().map(|reply| (reply.show_id, reply.records)).collect();
    ensure(
        shows.iter().any(|&(show, records)| show == ERASED_SHOW && records >= 3)
            && shows.iter().any(|&(show, records)| show == ERASED_SHOW + 1 && records == 0),
        &format!("every show was asked, the buyer's records renamed: {shows:?}"),
    )?;
    let malformed = operator.erase_session("not-a-session").await;
    ensure(
        matches!(malformed, Err(Error::Rejected { code: ErrorCode::InvalidArgument, .. })),
        &format!("a malformed session id is refused: {malformed:?}"),
    )?;

    let after = operator.backup().await.map_err(other)?;
    ensure(!group_holding(&after), "a backup taken after the erasure holds the session")?;
    let trail = operator.get_audit(ERASED_SHOW, "hold", hold).await.map_err(other)?;
    ensure(
        !trail.records.is_empty()
            && trail
                .records
                .iter()
                .all(|record| record.session != session_hex && !record.session.is_empty()),
        &format!("the hold's audit names a pseudonym: {trail:?}"),
    )?;
    let payment = operator.get_payment(None, ERASED_SHOW, payment.payment_id).await;
    ensure(payment.is_ok(), &format!("the payment stays: {payment:?}"))?;
    let own = operator.get_hold(&buyer, ERASED_SHOW, hold).await;
    ensure(
        matches!(own, Err(Error::Rejected { .. })),
        &format!("the erased session's token no longer reads its hold: {own:?}"),
    )?;
    let untouched = operator.get_hold(&bystander, ERASED_SHOW, kept.hold_id).await;
    ensure(untouched.is_ok(), &format!("another session keeps its hold: {untouched:?}"))?;
    cluster.shutdown().await.map_err(other)?;
    Ok(())
}

/// A session id as a group's encoded state holds it.
fn postcard_bytes(session: statemachine::SessionId) -> Vec<u8> {
    // postcard encodes a u128 as a LEB128 varint.
    let mut value = session.0;
    let mut bytes = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}

fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|window| window == needle)
}
