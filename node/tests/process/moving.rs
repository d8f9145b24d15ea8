//! Moving shows between the data groups of a real 3-node cluster during an on-sale (holds,
//! checkouts charged through paysim into bookings, an admission lane filling, a waitlist
//! growing): every move is fenced and finishes; every buyer call of the on-sale succeeds (the
//! SDK retries `show_moving` with the same key, and nodes that routed by stale placement are
//! redirected); afterwards every acknowledged hold, payment, ticket and waitlist entry is
//! found where its show went, each seat in at most one live hold, the lane and the waitlist in
//! the order buyers joined, every checkout paid for through a move became a booking, the
//! groups a show left keep nothing of it, and the replicas converge. A rebalance then spreads
//! the shows by load until its plan is empty.
//!
//! Reference: issue 18 section 2 (moving a show between groups, fenced) and seed 002 sections 09
//! change 3 (stale routing must be fenced) and 15 (rehearse moving a shard).

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use client::{Client, NewShow};
use statemachine::{Group, ShowId, ShowMove};
use tokio::time::Instant;

use crate::paysim::Paysim;
use crate::rest::Api;
use crate::{WAIT, options};

/// The show whose seats are held and paid for, moved three times.
const SALE: u64 = 970;
/// The show whose admission lane fills.
const LANE: u64 = 971;
/// The sold-out show whose waitlist grows.
const WAITLIST: u64 = 972;
/// A show nobody buys, for the rebalance to move.
const QUIET: u64 = 973;
/// The seats of the sale: more than the on-sale's budget lets it hold (see `OPERATIONS_DURING`).
const SALE_SEATS: u32 = 60;
/// How many buyer sessions take turns.
const BUYERS: usize = 8;
/// How many operations the on-sale runs between two moves (and before the first).
const OPERATIONS_BETWEEN: usize = 6;
/// How many more it may run while a move is under way before it waits for the next one. The
/// on-sale is faster than a move: unpaced, it once sold all its seats during the fifth move
/// and ended before the sixth. Paced, it makes at most 6 x 22 + 6 operations (and the round
/// under way), 3 or 4 a round with one hold each: at most 47 holds.
const OPERATIONS_DURING: usize = 16;

/// What the on-sale had acknowledged.
#[derive(Clone, Debug)]
enum Acked {
    Hold { token: String, hold: u64, seat: u32 },
    Payment { token: String, hold: u64 },
    Ticket { token: String, ticket: u64 },
    Entry { token: String, entry: u64 },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_moved_back_and_forth_during_an_on_sale_lose_and_duplicate_nothing() -> io::Result<()>
{
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut cluster_options = options(3);
    cluster_options.groups = 3;
    cluster_options.extra_args.extend(["--provider-url".to_owned(), format!("http://{listen}")]);
    let api = Api::start(cluster_options).await?;
    let ledger = tempfile::tempdir()?;
    let _paysim = Paysim::start_on(&api, ledger.path(), &listen, &[]).await?;
    let operator = api.cluster.client();

    let show = |id, seats, group| NewShow {
        open_sales: true,
        group_id: group,
        ..NewShow::uniform(id, seats, 1_000, "EUR")
    };
    // Every second hold of the on-sale stays live, one buyer's in eight rounds: room for all
    // of them (the default of 4 per session ran out when the moves let the on-sale run long).
    let mut sale = show(SALE, SALE_SEATS, 1);
    sale.policy.holds_per_session_max = SALE_SEATS;
    let lane = NewShow { admission_window: Some(1), ..show(LANE, 10, 1) };
    let waitlist = NewShow { waitlist: true, ..show(WAITLIST, 1, 1) };
    let quiet = show(QUIET, 20, 1);
    for new in [&sale, &lane, &waitlist, &quiet] {
        operator.create_show(new, None).await.map_err(other)?;
    }
    let seller = operator.create_session().await.map_err(other)?;
    operator.hold(&seller, WAITLIST, &[0], 1, None).await.map_err(other)?;
    let mut tokens = Vec::new();
    for _ in 0..BUYERS {
        tokens.push(operator.create_session().await.map_err(other)?);
    }

    // The on-sale runs through every move, on a client whose routes go stale with each.
    let acked: Arc<std::sync::Mutex<Vec<Acked>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let (budget, budget_seen) = tokio::sync::watch::channel(0_usize);
    let mut driver = tokio::spawn(on_sale(
        api.cluster.new_client().map_err(other)?,
        tokens,
        Arc::clone(&acked),
        Pace { stop: Arc::clone(&stop), budget: budget_seen },
        Arc::clone(&done),
    ));
    let moves = [(SALE, 2), (LANE, 3), (WAITLIST, 2), (SALE, 3), (LANE, 1), (SALE, 1)];
    let mut from = std::collections::BTreeMap::from([(SALE, 1), (LANE, 1), (WAITLIST, 1)]);
    for (show, to) in moves {
        let before = done.load(Ordering::SeqCst);
        budget.send_replace(before + OPERATIONS_BETWEEN + OPERATIONS_DURING);
        wait_until(|| done.load(Ordering::SeqCst) >= before + OPERATIONS_BETWEEN, &mut driver)
            .await?;
        let started = Instant::now();
        let moved = operator.move_show(show, to).await.map_err(other)?;
        println!(
            "moved show {show} from group {} to group {to} in {:?}: {} bytes, unserved for {} ms \
             of log time",
            moved.from_group,
            started.elapsed(),
            moved.state_bytes,
            moved.unserved_ms
        );
        ensure(
            moved.from_group == from[&show] && moved.to_group == to && !moved.duplicate,
            &format!("show {show} moved as asked: {moved:?}"),
        )?;
        ensure(moved.state_bytes > 0 && moved.digest.len() == 64, "the move reports its state")?;
        from.insert(show, to);
    }
    let before = done.load(Ordering::SeqCst);
    budget.send_replace(before + OPERATIONS_BETWEEN);
    wait_until(|| done.load(Ordering::SeqCst) >= before + OPERATIONS_BETWEEN, &mut driver).await?;
    stop.store(true, Ordering::SeqCst);
    budget.send_replace(usize::MAX);
    driver.await.map_err(other)??;
    let acked = acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    println!("the on-sale had {} operations acknowledged, none failed", acked.len());

    // A move made before answers `duplicate`; a move to no data group is refused.
    let again = operator.move_show(SALE, 1).await.map_err(other)?;
    ensure(again.duplicate && again.from_group == 3, &format!("a second move: {again:?}"))?;
    let refused = operator.move_show(SALE, 9).await;
    ensure(
        matches!(
            refused,
            Err(client::Error::Rejected { code: client::ErrorCode::InvalidArgument, .. })
        ),
        &format!("a move to no data group is refused: {refused:?}"),
    )?;

    // Every group's placement is where the shows went, on every node.
    api.cluster.wait_all_converged(WAIT).await.map_err(other)?;
    let shows = operator.list_shows().await.map_err(other)?;
    for (show, group) in &from {
        let listed = shows.iter().find(|listed| listed.show_id == *show);
        ensure(
            listed.is_some_and(|listed| listed.group_id == *group),
            &format!("show {show} is listed in group {group}: {listed:?}"),
        )?;
    }

    // Nothing acknowledged is lost, nothing is duplicated.
    let client = api.cluster.new_client().map_err(other)?;
    let mut seats = BTreeSet::new();
    let mut tickets = Vec::new();
    let mut entries = Vec::new();
    for what in &acked {
        match what {
            Acked::Hold { token, hold, seat } => {
                let reply = client.get_hold(token, SALE, *hold).await.map_err(other)?;
                ensure(reply.seats == [*seat], &format!("hold {hold} keeps its seat: {reply:?}"))?;
                ensure(seats.insert(*seat), &format!("seat {seat} is in one hold only"))?;
            }
            Acked::Payment { token, hold } => {
                // Paid through paysim, whose webhook may land in any group the show was in.
                let deadline = Instant::now() + WAIT;
                loop {
                    let reply = client.get_hold(token, SALE, *hold).await.map_err(other)?;
                    if reply.booking_id != 0 {
                        break;
                    }
                    ensure(
                        Instant::now() < deadline,
                        &format!("checked-out hold {hold} is booked"),
                    )?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Acked::Ticket { token, ticket } => {
                let reply = client.get_ticket(token, LANE, *ticket).await.map_err(other)?;
                tickets.push((*ticket, reply.state.clone(), reply.ahead));
            }
            Acked::Entry { token, entry } => {
                let reply =
                    client.get_waitlist_entry(token, WAITLIST, *entry).await.map_err(other)?;
                entries.push((*entry, reply.state.clone(), reply.ahead));
            }
        }
    }
    // FIFO: ids in the order joined, each waiting one with more ahead of it than the last.
    for (kind, joined) in [("ticket", &tickets), ("entry", &entries)] {
        ensure(joined.len() >= 3, &format!("several {kind}s joined"))?;
        ensure(
            joined.windows(2).all(|pair| pair[0].0 < pair[1].0),
            &format!("{kind} ids follow the order buyers joined in: {joined:?}"),
        )?;
        let ahead: Vec<u32> =
            joined.iter().filter(|(_, state, _)| state == "waiting").map(|j| j.2).collect();
        ensure(
            ahead.len() >= 2 && ahead.windows(2).all(|pair| pair[0] < pair[1]),
            &format!("{kind}s wait in the order they joined: {joined:?}"),
        )?;
    }
    let map = client.get_seat_map_linearizable(SALE).await.map_err(other)?;
    let taken = map.seats.iter().filter(|seat| **seat != 1).count();
    ensure(
        taken == seats.len(),
        &format!("the map holds {taken} seats, the on-sale {}", seats.len()),
    )?;

    // The groups a show left keep nothing of it, only where it went.
    for group in 1..=3 {
        let backup = operator.backup_group(group).await.map_err(other)?;
        let state = Group::decode_snapshot(&backup.state).map_err(other)?;
        for (show, placed) in &from {
            let here = state.show(ShowId(*show)).is_some();
            let record = state.moves().get(&ShowId(*show));
            if *placed == group {
                ensure(here, &format!("show {show} is in group {group}"))?;
            } else {
                ensure(!here, &format!("group {group} keeps nothing of show {show}"))?;
                // A group it left sends calls on (along the chain of its moves).
                let left = matches!(record, None | Some(ShowMove::Left { .. }));
                ensure(left, &format!("group {group} sends show {show} on: {record:?}"))?;
            }
        }
    }

    // A rebalance spreads the shows by load: QUIET (20 seats in play) leaves group 1.
    let plan = operator.rebalance_plan().await.map_err(other)?;
    ensure(!plan.is_empty(), &format!("group 1 holds most of the load: {plan:?}"))?;
    let moved = operator.rebalance().await.map_err(other)?;
    ensure(
        moved.iter().all(|reply| !reply.duplicate) && !moved.is_empty(),
        &format!("the rebalance moved shows: {moved:?}"),
    )?;
    let after = operator.rebalance_plan().await.map_err(other)?;
    ensure(after.is_empty(), &format!("balanced afterwards: {after:?}"))?;
    api.cluster.wait_all_converged(WAIT).await.map_err(other)?;
    api.cluster.shutdown().await.map_err(other)?;
    Ok(())
}

/// When the on-sale stops, and how many operations it may have made so far (it waits at a
/// round's start while `done` has reached that).
struct Pace {
    stop: Arc<AtomicBool>,
    budget: tokio::sync::watch::Receiver<usize>,
}

/// The on-sale: round after round, a buyer holds the next seat of the sale and checks out every
/// other hold (paysim pays, the hold becomes a booking), and a new session joins the lane and
/// the waitlist. Any failed call fails the test.
async fn on_sale(
    client: Client,
    tokens: Vec<String>,
    acked: Arc<std::sync::Mutex<Vec<Acked>>>,
    pace: Pace,
    done: Arc<AtomicUsize>,
) -> io::Result<()> {
    let Pace { stop, mut budget } = pace;
    let record = |what: Acked| {
        acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(what);
        done.fetch_add(1, Ordering::SeqCst);
    };
    let mut seat = 0;
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) && seat < SALE_SEATS {
        if done.load(Ordering::SeqCst) >= *budget.borrow_and_update() {
            // Until the test raises the budget (or stops the on-sale, raising it to the end).
            budget.changed().await.map_err(other)?;
            continue;
        }
        let token = tokens[round % tokens.len()].clone();
        let hold = client.hold(&token, SALE, &[seat], 1, None).await.map_err(other)?;
        record(Acked::Hold { token: token.clone(), hold: hold.hold_id, seat });
        seat += 1;
        if round % 2 == 0 {
            client.checkout(&token, SALE, hold.hold_id, None).await.map_err(other)?;
            record(Acked::Payment { token: token.clone(), hold: hold.hold_id });
        }
        let joiner = client.create_session().await.map_err(other)?;
        let ticket = client.join_queue(&joiner, LANE, None).await.map_err(other)?;
        record(Acked::Ticket { token: joiner.clone(), ticket: ticket.ticket_id });
        let entry = client.join_waitlist(&joiner, WAITLIST, 1, None).await.map_err(other)?;
        record(Acked::Entry { token: joiner, entry: entry.entry_id });
        round += 1;
    }
    Ok(())
}

/// Waits until `done` or the driver ended (its error, if any, is then the test's).
async fn wait_until(
    done: impl Fn() -> bool,
    driver: &mut tokio::task::JoinHandle<io::Result<()>>,
) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    while !done() {
        if driver.is_finished() {
            driver.await.map_err(other)??;
            return Err(other("the on-sale ended before the moves did"));
        }
        ensure(Instant::now() < deadline, "the on-sale makes progress")?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn ensure(holds: bool, what: &str) -> io::Result<()> {
    if holds { Ok(()) } else { Err(other(format!("not so: {what}"))) }
}

fn other(error: impl std::fmt::Display) -> io::Error {
    io::Error::other(error.to_string())
}

/// A cluster left at feature level 0 (the previous release's formats, as a rolling upgrade
/// starts) refuses a move before anything freezes; raised, it moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_waits_for_the_feature_level_and_freezes_nothing_before() -> io::Result<()> {
    let cluster = testkit::Cluster::start(testkit::ClusterOptions {
        raise_feature_level: false,
        ..options(3)
    })
    .await
    .map_err(other)?;
    let operator = cluster.client();
    let levels = |status: &client::StatusReply| -> Vec<u32> {
        status.groups.iter().map(|group| group.feature_level).collect()
    };
    let status = operator.status(&operator.addresses()[0], false).await.map_err(other)?;
    ensure(status.feature_level_max == statemachine::FEATURE_LEVEL, "the build's level")?;
    ensure(levels(&status).iter().all(|level| *level == 0), "founded at level 0")?;
    operator
        .create_show(
            &NewShow { open_sales: true, group_id: 1, ..NewShow::uniform(SALE, 4, 1_000, "EUR") },
            None,
        )
        .await
        .map_err(other)?;

    let refused = operator.move_show(SALE, 2).await;
    ensure(
        matches!(
            refused,
            Err(client::Error::Rejected { code: client::ErrorCode::FeatureNotEnabled, .. })
        ),
        &format!("a move at level 0 is refused: {refused:?}"),
    )?;
    let buyer = operator.create_session().await.map_err(other)?;
    operator.hold(&buyer, SALE, &[0], 1, None).await.map_err(other)?;

    let raised = operator.raise_feature_level(statemachine::FEATURE_LEVEL).await.map_err(other)?;
    ensure(
        raised.len() == 3 && raised.last().is_some_and(|reply| reply.group_id == 0),
        "every group, group 0 last",
    )?;
    let again = operator.raise_feature_level(statemachine::FEATURE_LEVEL).await.map_err(other)?;
    ensure(again.iter().all(|reply| reply.duplicate), "a second raise changes nothing")?;
    let moved = operator.move_show(SALE, 2).await.map_err(other)?;
    ensure(moved.to_group == 2 && !moved.duplicate, "raised, the show moves")?;
    operator.hold(&buyer, SALE, &[1], 1, None).await.map_err(other)?;
    cluster.wait_all_converged(WAIT).await.map_err(other)?;
    cluster.shutdown().await.map_err(other)?;
    Ok(())
}
