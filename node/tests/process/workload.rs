//! What the tests write and read: shows created and opened, holds made and remembered with the
//! session that owns them, and checks that a remembered hold is still there. Owns no cluster
//! behaviour: the test kit and the client do.

use std::io;

use proto::booking::HoldReply;
use tokio::task::JoinSet;
use tonic::Status;

use crate::client::{Client, describe};

/// An acknowledged hold, with what is needed to read it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The session token that owns it.
    pub token: String,
    /// Its show.
    pub show_id: u64,
    /// Its id in the show.
    pub hold_id: u64,
    /// Its seats, sorted.
    pub seats: Vec<u32>,
}

/// `status` as an error of the test, saying what was attempted.
pub fn failed(what: &str, status: &Status) -> io::Error {
    io::Error::other(format!("{what}: {}", describe(status)))
}

/// `seats`, sorted.
pub fn sorted(seats: &[u32]) -> Vec<u32> {
    let mut seats = seats.to_vec();
    seats.sort_unstable();
    seats
}

/// Creates show `show_id` with `seats` seats in `group_id` (0: the cluster chooses), opens its
/// sales, and returns the group it was placed in.
///
/// # Errors
///
/// When either call fails.
pub async fn create_open(
    client: &Client,
    show_id: u64,
    seats: u32,
    group_id: u64,
) -> io::Result<u64> {
    let placement = client
        .create_show(show_id, seats, group_id)
        .await
        .map_err(|status| failed(&format!("create show {show_id}"), &status))?;
    if group_id != 0 && placement.group_id != group_id {
        return Err(io::Error::other(format!(
            "show {show_id} placed in group {} instead of {group_id}",
            placement.group_id
        )));
    }
    client
        .open_sales(show_id)
        .await
        .map_err(|status| failed(&format!("open sales of show {show_id}"), &status))?;
    Ok(placement.group_id)
}

/// Checks that `reply` is a live hold of exactly `seats`, and remembers it for `token`.
fn held(token: &str, show_id: u64, seats: &[u32], reply: &HoldReply) -> io::Result<Held> {
    let held = Held {
        token: token.to_owned(),
        show_id,
        hold_id: reply.hold_id,
        seats: sorted(&reply.seats),
    };
    if held.seats != sorted(seats) || reply.state != "held" || reply.show_id != show_id {
        return Err(io::Error::other(format!(
            "show {show_id}: asked to hold {seats:?}, got {reply:?}"
        )));
    }
    Ok(held)
}

/// Holds `seats` of `show_id` for the session `name` (following leader hints and retrying with
/// the same key), and returns the acknowledged hold.
///
/// # Errors
///
/// When the hold is not acknowledged, or is acknowledged with other seats.
pub async fn hold(client: &Client, name: &str, show_id: u64, seats: &[u32]) -> io::Result<Held> {
    let token =
        client.session().await.map_err(|status| failed(&format!("{name}: session"), &status))?;
    let reply = client
        .hold(&token, show_id, seats)
        .await
        .map_err(|status| failed(&format!("{name}: hold {seats:?} of show {show_id}"), &status))?;
    held(&token, show_id, seats, &reply)
}

/// Holds each of `seats` of `show_id` alone, each for its own session `{prefix}-{seat}`, with
/// up to `concurrency` holds in flight, and returns the acknowledged holds in seat order.
///
/// # Errors
///
/// When a hold is not acknowledged.
pub async fn hold_each(
    client: &Client,
    show_id: u64,
    seats: impl IntoIterator<Item = u32>,
    prefix: &str,
    concurrency: usize,
) -> io::Result<Vec<Held>> {
    let mut holds = Vec::new();
    let mut in_flight = JoinSet::new();
    for seat in seats {
        if in_flight.len() >= concurrency.max(1)
            && let Some(done) = in_flight.join_next().await
        {
            holds.push(done.map_err(io::Error::other)??);
        }
        let client = client.clone();
        let name = format!("{prefix}-{seat}");
        in_flight.spawn(async move { hold(&client, &name, show_id, &[seat]).await });
    }
    while let Some(done) = in_flight.join_next().await {
        holds.push(done.map_err(io::Error::other)??);
    }
    holds.sort_by_key(|held| (held.show_id, held.seats.clone()));
    Ok(holds)
}

/// Reads every one of `holds` (linearizably, on its group's leader) and checks that it is still
/// held, with the same seats.
///
/// # Errors
///
/// When a hold cannot be read or has changed.
pub async fn assert_readable(client: &Client, holds: &[Held]) -> io::Result<()> {
    for expected in holds {
        let reply = client
            .get_hold(&expected.token, expected.show_id, expected.hold_id)
            .await
            .map_err(|status| failed(&format!("read {expected:?}"), &status))?;
        let read = held(&expected.token, expected.show_id, &reply.seats, &reply)?;
        if read != *expected {
            return Err(io::Error::other(format!("read {reply:?}, acknowledged {expected:?}")));
        }
    }
    Ok(())
}
