//! The REST API's answers when a caller must come back later, against a real 3-node cluster:
//! 429 with `Retry-After` for a session over its rate (a cluster started with a tiny
//! `--rate-per-session`; gRPC booking calls pay the same buckets), then 503 with `Retry-After` from a follower whose group lost its
//! quorum (two of three nodes killed; last, since the cluster does not serve afterwards).
//!
//! Reference: shared/DESIGN.md "Errors" (429 / RESOURCE_EXHAUSTED with Retry-After; 503 /
//! UNAVAILABLE no leader or timeout, retryable with the same idempotency key) and issue 4
//! "Rate limits per session and per client address (token bucket, 429)".

use std::io;
use std::time::Duration;

use axum::http::Method;
use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::{GetHoldRequest, SearchRequest};
use serde_json::json;
use testkit::ClusterOptions;

use crate::options;
use crate::rest::{Api, Report, ensure, string_field};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 700;

/// Requests per second one session may make on this file's cluster (bursts of twice as many).
const RATE_PER_SESSION: u32 = 1;

/// How long the node may take to give up on a group without a quorum (its commit wait is 5 s).
/// `--route-rate search=N`: searches a second per caller (here, per address: no session).
const SEARCH_RATE: u32 = 1;

const NO_QUORUM_WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_rate_limit_then_no_quorum() -> io::Result<()> {
    let mut layout = ClusterOptions { rate_per_session: Some(RATE_PER_SESSION), ..options(3) };
    layout.extra_args.extend(["--route-rate".to_owned(), format!("search={SEARCH_RATE}")]);
    let api = Api::start(layout).await?;
    let mut report = Report::default();
    report.check("a_session_over_its_rate_gets_429", a_session_over_its_rate_gets_429(&api).await);
    report.check(
        "grpc_calls_pay_the_same_session_bucket",
        grpc_calls_pay_the_same_session_bucket(&api).await,
    );
    report.check(
        "a_route_over_its_own_rate_gets_429_on_both_apis",
        a_route_over_its_own_rate_gets_429_on_both_apis(&api).await,
    );
    report.check(
        "a_group_without_quorum_answers_503",
        a_group_without_quorum_answers_503(&api).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// A session reading its hold ten times at once gets 429 `rate_limited` with `Retry-After` for
/// most of them; another session is not limited by it.
async fn a_session_over_its_rate_gets_429(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 20, 1, json!({})).await?;
    let greedy = api.session().await?;
    let hold = api.hold_ok(&show, &greedy, &[1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let leader = api.leader(show.group).await?;
    let read = api.on(leader, Method::GET, &format!("/v1/holds/{hold_id}")).token(&greedy);
    let mut limited = 0;
    for _ in 0..10 {
        let answer = read.send_once().await?;
        match answer.status {
            200 => {}
            _ => {
                answer.expect_error(429, "rate_limited")?;
                limited += 1;
            }
        }
    }
    ensure!(limited >= 5, "a burst of 2 at 1/s: only {limited} of 10 limited");
    let patient = api.session().await?;
    api.hold_ok(&show, &patient, &[2]).await?;
    Ok(())
}

/// The gRPC booking calls of a session draw on the same bucket as its REST calls: a burst of
/// `GetHold` calls is refused with RESOURCE_EXHAUSTED and `retry-after` metadata.
async fn grpc_calls_pay_the_same_session_bucket(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 20, 1, json!({})).await?;
    let greedy = api.session().await?;
    let hold = api.hold_ok(&show, &greedy, &[1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let number = hold_id.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let leader = api.leader(show.group).await?;
    let mut grpc = BookingServiceClient::new(crate::grpc_channel(&api.cluster, leader).await?);
    let mut limited = 0;
    for _ in 0..10 {
        let mut request = tonic::Request::new(GetHoldRequest { show_id: show.id, hold_id: number });
        let authorization = format!("Bearer {greedy}").parse().map_err(io::Error::other)?;
        request.metadata_mut().insert("authorization", authorization);
        match grpc.get_hold(request).await {
            Ok(_) => {}
            Err(status) => {
                ensure!(status.code() == tonic::Code::ResourceExhausted, "{status:?}");
                ensure!(status.metadata().get("retry-after").is_some(), "{status:?}");
                limited += 1;
            }
        }
    }
    ensure!(limited >= 5, "a burst of 2 at 1/s: only {limited} of 10 gRPC calls limited");
    Ok(())
}

/// `--route-rate search=1`: a caller without a session searching ten times at once on one
/// node is refused (429 `rate_limited`, naming the route's class) past the burst of two, while
/// another route still answers; gRPC `Search` calls from the same address pay the class's
/// bucket too (RESOURCE_EXHAUSTED).
async fn a_route_over_its_own_rate_gets_429_on_both_apis(api: &Api) -> io::Result<()> {
    let search = api.on(2, Method::GET, "/v1/search?q=hamlet");
    let mut limited = 0;
    for _ in 0..10 {
        let answer = search.send_once().await?;
        if answer.status != 200 {
            answer.expect_error(429, "rate_limited")?;
            ensure!(
                answer.text.contains("search"),
                "the refusal names the route: {}",
                answer.describe()
            );
            limited += 1;
        }
    }
    ensure!(limited >= 5, "a burst of 2 at 1/s: only {limited} of 10 searches limited");
    api.on(2, Method::GET, "/v1/shows").send_once().await?.expect(200)?;
    let mut grpc = BookingServiceClient::new(crate::grpc_channel(&api.cluster, 2).await?);
    let mut limited = 0;
    for _ in 0..10 {
        let request = SearchRequest { q: "hamlet".to_owned(), ..SearchRequest::default() };
        match grpc.search(request).await {
            Ok(_) => {}
            Err(status) => {
                ensure!(status.code() == tonic::Code::ResourceExhausted, "{status:?}");
                limited += 1;
            }
        }
    }
    ensure!(limited >= 5, "a burst of 2 at 1/s: only {limited} of 10 gRPC searches limited");
    Ok(())
}

/// With the leader of a show's group and one more node killed, the last node (a follower)
/// answers a hold with 503 and `Retry-After` (`no_leader`, `not_leader` or `unavailable`), never
/// with a success.
async fn a_group_without_quorum_answers_503(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 1, 20, 2, json!({})).await?;
    let buyer = api.session().await?;
    let leader = api.leader(show.group).await?;
    let survivor = api.follower(show.group).await?;
    let other = (1..=3).find(|&id| id != leader && id != survivor).unwrap_or(leader);
    api.cluster.kill(leader).await?;
    api.cluster.kill(other).await?;
    let answer = api
        .on(survivor, Method::POST, &format!("/v1/shows/{}/holds", show.id))
        .token(&buyer)
        .key(&api.key("no-quorum"))
        .json(&json!({ "seats": [3], "price_version": 1 }))
        .send_once_within(NO_QUORUM_WAIT)
        .await?;
    ensure!(answer.status == 503, "{}", answer.describe());
    let code = answer.body["code"].as_str().unwrap_or("").to_owned();
    ensure!(
        ["no_leader", "not_leader", "unavailable"].contains(&code.as_str()),
        "{}",
        answer.describe()
    );
    answer.expect_error(503, &code)?;
    Ok(())
}
