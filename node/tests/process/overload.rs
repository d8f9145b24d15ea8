//! A node driven far past what it serves sheds the excess instead of losing its leader: a real
//! 3-node cluster whose nodes run at most [`IN_FLIGHT`] client requests at once
//! (`--max-in-flight`), and [`CLIENTS`] buyers (many times that) holding, releasing and reading
//! seats on one group's leader as fast as it answers, for [`seconds`] (5 s here;
//! `scripts/overload.sh` runs it for 30 s and prints the same numbers).
//!
//! What must hold: every request is either answered by the node's rules (2xx, or 4xx such as
//! `seat_unavailable`) or shed with 503 `overloaded` and `Retry-After`; nothing else (no other
//! 5xx, no dropped connection, no request left unanswered); no group's term changes on the
//! leader (no election) and the leader stays; and the node counts what it shed
//! (`booking_shed{reason="in_flight"}`). How fast shed answers come back (the issue asks for
//! under 100 ms) and how many requests were served are printed, not asserted: these machines are
//! shared.
//!
//! Reference: issue 17 "Overload: a concurrency limit with load shedding on the client port
//! (answers 503 or 429 with Retry-After at once, never queues without bound)", and its test
//! "the group's term does not change, every shed request is answered within 100 ms, every
//! admitted request completes".

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use serde_json::json;
use testkit::ClusterOptions;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::options;
use crate::rest::{Api, PRICE_VERSION, ensure, string_field};

/// Client requests each node runs at once.
const IN_FLIGHT: usize = 4;
/// Buyers sending at once: sixteen times what a node runs.
const CLIENTS: usize = 64;
/// The show's id and seats.
const SHOW: u64 = 1_700;
const SEATS: u32 = 4_000;

/// How long the flood lasts: `BOOKING_OVERLOAD_SECS`, else 5 s.
fn seconds() -> u64 {
    std::env::var("BOOKING_OVERLOAD_SECS").ok().and_then(|value| value.parse().ok()).unwrap_or(5)
}

/// What the buyers saw.
#[derive(Default)]
struct Tally {
    /// Answers by the node's rules, by status.
    answered: BTreeMap<u16, u64>,
    /// How long each shed answer took.
    shed: Vec<Duration>,
    /// Everything else: the failures.
    failures: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_node_sheds_and_keeps_its_leader() -> io::Result<()> {
    let limits = ["--max-in-flight", &IN_FLIGHT.to_string()].map(str::to_owned);
    let layout = ClusterOptions {
        rate_per_session: Some(1_000_000),
        rate_per_address: Some(1_000_000),
        rate_new_sessions_per_address: Some(1_000_000),
        extra_args: limits.to_vec(),
        ..options(3)
    };
    let api = Arc::new(Api::start(layout).await?);
    let show = api.create_show(SHOW, SEATS, 1, json!({})).await?;
    let leader = api.leader(show.group).await?;
    let terms = |reply: proto::booking::StatusReply| {
        reply.groups.iter().map(|group| (group.group_id, group.term)).collect::<BTreeMap<_, _>>()
    };
    let before = terms(api.cluster.status(leader, false).await?);
    let mut sessions = Vec::new();
    for _ in 0..CLIENTS {
        sessions.push(api.session().await?);
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds());
    let mut buyers = tokio::task::JoinSet::new();
    for (buyer, token) in sessions.into_iter().enumerate() {
        let (api, tally, show) = (api.clone(), tally.clone(), show.clone());
        buyers.spawn(async move {
            let mut round = 0_u32;
            while Instant::now() < until {
                round += 1;
                let seat = u32::try_from(buyer).unwrap_or(0) * 50 + round % 50 + 1;
                let path = format!("/v1/shows/{}/holds", show.id);
                let call = if round.is_multiple_of(2) {
                    api.on(leader, Method::GET, &format!("/v1/shows/{}/seats", show.id))
                } else {
                    api.on(leader, Method::POST, &path)
                        .token(&token)
                        .key(&api.key("flood"))
                        .json(&json!({ "seats": [seat], "price_version": PRICE_VERSION }))
                };
                let sent = Instant::now();
                let answer = call.send_once_within(Duration::from_secs(20)).await;
                let took = sent.elapsed();
                let mut tally = tally.lock().await;
                match answer {
                    Ok(answer) if answer.status == 503 => {
                        let code = answer.header("booking-code").unwrap_or_default().to_owned();
                        if code == "overloaded" && answer.header("retry-after") == Some("1") {
                            tally.shed.push(took);
                        } else {
                            tally.failures.push(answer.describe());
                        }
                    }
                    Ok(answer) if answer.status < 500 => {
                        *tally.answered.entry(answer.status).or_default() += 1;
                        if answer.status == 201 {
                            // Release it, so that the buyer's holds do not pile up.
                            let Ok(hold_id) = string_field(&answer.body, "hold_id") else {
                                continue;
                            };
                            drop(tally);
                            let release = format!("/v1/holds/{hold_id}");
                            let _ = api
                                .on(leader, Method::DELETE, &release)
                                .token(&token)
                                .send_once_within(Duration::from_secs(20))
                                .await;
                        }
                    }
                    Ok(answer) => tally.failures.push(answer.describe()),
                    Err(error) => tally.failures.push(error.to_string()),
                }
            }
        });
    }
    while let Some(joined) = buyers.join_next().await {
        joined.map_err(io::Error::other)?;
    }
    let elapsed = started.elapsed();
    let after = terms(api.cluster.status(leader, false).await?);
    let metrics = api.on(leader, Method::GET, "/metrics").send_once().await?;
    let tally = tally.lock().await;
    let mut shed = tally.shed.clone();
    shed.sort_unstable();
    let percentile = |p: usize| shed.get((shed.len() * p / 100).min(shed.len().saturating_sub(1)));
    let served: u64 = tally.answered.values().sum();
    println!(
        "overload: {CLIENTS} buyers for {elapsed:?} against --max-in-flight {IN_FLIGHT}: {served} \
         answered ({:.0}/s; by status {:?}), {} shed (p50 {:?}, p99 {:?}, max {:?}), {} failures",
        served as f64 / elapsed.as_secs_f64(),
        tally.answered,
        shed.len(),
        percentile(50),
        percentile(99),
        shed.last(),
        tally.failures.len(),
    );
    ensure!(tally.failures.is_empty(), "not answered by the rules nor shed: {:?}", tally.failures);
    ensure!(!shed.is_empty(), "nothing was shed: the flood did not exceed --max-in-flight");
    ensure!(served > 0, "nothing was served");
    ensure!(before == after, "a term changed under load (an election): {before:?} -> {after:?}");
    ensure!(api.leader(show.group).await? == leader, "the leader changed under load");
    let counted = metrics
        .text
        .lines()
        .find(|line| line.starts_with("booking_shed_total{reason=\"in_flight\"}"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    ensure!(counted >= 1, "the node counted no shed request: {}", metrics.text);
    if let Ok(api) = Arc::try_unwrap(api) {
        api.shutdown().await?;
    }
    Ok(())
}
