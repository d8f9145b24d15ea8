//! nginx as the first minute's CDN (`jepsen::bench::cdn`) in front of a real 3-node cluster
//! over https: a show's page and seat map are served from the cache once fetched, as long as
//! the node's `Cache-Control` allows and no longer (a hold made through the CDN shows in its
//! map soon after), a request with a session is never answered from the cache, holds pass
//! through to the nodes, and nginx's own log counts what reached them.
//!
//! Needs Debian's nginx (`scripts/setup.sh` installs it) and `bookingd` built next to the test's
//! binaries (`cargo test --workspace` builds it); fails, never skips, without them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use client::NewShow;
use jepsen::bench::cdn::{self, Cdn, Origins};
use testkit::{Cluster, ClusterOptions};

/// How long anything awaited here may take.
const WAIT: Duration = Duration::from_secs(30);

/// `target/release`, where `bookingd` is.
fn bin_dir() -> PathBuf {
    let jepsen = PathBuf::from(env!("CARGO_BIN_EXE_jepsen"));
    jepsen.parent().expect("the jepsen binary has a folder").to_path_buf()
}

/// One GET through the CDN: status, `X-Cache-Status`, body.
async fn get(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (u16, String, serde_json::Value) {
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.expect("nginx answers");
    let status = answer.status().as_u16();
    let cache = answer
        .headers()
        .get(cdn::CACHE_STATUS_HEADER)
        .map(|value| value.to_str().unwrap_or("?").to_owned())
        .unwrap_or_default();
    let body = answer.json().await.unwrap_or(serde_json::Value::Null);
    (status, cache, body)
}

/// GETs `url` until `done` says the answer is what was awaited; returns it.
async fn get_until(
    http: &reqwest::Client,
    url: &str,
    what: &str,
    done: impl Fn(u16, &str, &serde_json::Value) -> bool,
) -> (u16, String, serde_json::Value) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, cache, body) = get(http, url, None).await;
        if done(status, &cache, &body) {
            return (status, cache, body);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url}: never {what}; last {status} {cache} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cdn_caches_what_the_node_allows_and_never_a_callers_own_answers() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let cluster =
        Cluster::start(ClusterOptions { bin_dir: Some(bin_dir()), ..ClusterOptions::ephemeral(3) })
            .await
            .expect("the cluster starts");
    let client = cluster.new_client().expect("a client");
    let mut show = NewShow::uniform(1, 100, 5_000, "EUR");
    show.open_sales = true;
    client.create_show(&show, None).await.expect("the show is made");

    let cdn_dir = dir.path().join("cdn");
    std::fs::create_dir_all(&cdn_dir).expect("the CDN's folder");
    let origins = Origins {
        addresses: cluster.addresses(),
        ca_file: Some(cluster.ca_file().expect("the CA file")),
        tls_name: "localhost".to_owned(),
    };
    let cdn =
        Cdn::start(&cdn::default_bin(), Path::new(&cdn_dir), &origins).await.expect("nginx starts");
    let http = reqwest::Client::new();
    let page = format!("{}/v1/shows/1", cdn.url());
    let map = format!("{}/v1/shows/1/availability", cdn.url());

    // The page: fetched from a node once, then served from the cache.
    let (_, _, body) = get_until(&http, &page, "answered", |status, _, _| status == 200).await;
    assert_eq!(body["show_id"], 1, "{body}");
    let price_version = body["price_version"].as_u64().expect("a price version");
    get_until(&http, &page, "a cache hit", |status, cache, _| status == 200 && cache == "HIT")
        .await;
    // The map likewise (a node answers 503 until its replica has confirmed it is fresh).
    let (_, _, body) = get_until(&http, &map, "answered", |status, _, _| status == 200).await;
    assert_eq!(body["seats"].as_str().map(str::len), Some(100), "{body}");
    get_until(&http, &map, "a cache hit", |status, cache, _| status == 200 && cache == "HIT").await;

    // A caller with a session is answered by a node, never from the cache, and its answer is
    // not kept for anyone else.
    let session = http
        .post(format!("{}/v1/sessions", cdn.url()))
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("a session through the CDN");
    assert_eq!(session.status().as_u16(), 201, "a session is made through the CDN");
    let session: serde_json::Value = session.json().await.expect("a session's JSON");
    let token = session["token"].as_str().expect("a token").to_owned();
    for _ in 0..3 {
        let (status, cache, _) = get(&http, &page, Some(&token)).await;
        assert_eq!((status, cache.as_str()), (200, "BYPASS"), "a session's read was cached");
    }

    // A hold passes through to the nodes, and the cached map shows it once its entry expires.
    let held = http
        .post(format!("{}/v1/shows/1/holds", cdn.url()))
        .bearer_auth(&token)
        .header("idempotency-key", "cdn-test-hold-1")
        .json(&serde_json::json!({"seats": [5], "price_version": price_version}))
        .send()
        .await
        .expect("a hold through the CDN");
    assert_eq!(held.status().as_u16(), 201, "the hold is made");
    assert_ne!(
        held.headers().get(cdn::CACHE_STATUS_HEADER).and_then(|value| value.to_str().ok()),
        Some("HIT"),
        "a hold answered from the cache"
    );
    get_until(&http, &map, "showing seat 5 held", |status, _, body| {
        status == 200 && body["seats"].as_str().and_then(|seats| seats.chars().nth(5)) == Some('H')
    })
    .await;

    // nginx's log saw what reached the nodes: the page's first fetch and the session's three
    // reads, the map's first fetch and its refresh after the hold.
    let reads = cdn.origin_reads();
    let session_reads = 3;
    assert!(reads.show_pages > session_reads, "{reads:?}");
    assert!(reads.seat_maps >= 2, "{reads:?}");
    drop(cdn);
    cluster.stop().await;
}
