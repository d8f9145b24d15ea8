//! The pages in a real browser: headless Chromium (Debian's `chromium`) driven through
//! WebDriver (`chromedriver`) against a real 3-node cluster that charges through the real
//! `paysim`. A buyer searches with a typo, opens the show, selects two seats on the drawn hall,
//! holds them, pays, and sees them booked on the map; a second browser sees them taken; the
//! waiting room admits a buyer when the one ahead leaves; the operator's page draws the groups.
//! Screenshots of each page are saved under the test's target directory (printed).
//!
//! Without `chromedriver` the test is skipped on a developer's machine and fails when `CI` is
//! `true`; `scripts/setup.sh` installs both.
//!
//! Reference: issue 16 sections 4 (the buyer's page, the operator's page) and 5 (the browser
//! test: search, open a show, select two seats, hold, pay, see them booked; a second browser
//! sees them taken; the waiting room admits a buyer; screenshots as artifacts).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use axum::http::Method;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::WAIT;
use crate::paysim::Paysim;
use crate::rest::{Api, OPERATOR_TOKEN, Report, ensure, string_field};

/// The show a buyer buys (its lane off) and the one with a waiting room (strict FIFO).
const SHOW: u64 = 1_900;
const QUEUED_SHOW: u64 = 1_901;
/// Where the browser's window is, as a buyer's laptop.
const WINDOW: &str = "--window-size=1280,900";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_in_a_browser() -> io::Result<()> {
    let Some(driver) = Driver::start().await? else { return Ok(()) };
    let (api, paysim, _ledger) = Paysim::with_cluster(3).await?;
    let mut report = Report::default();
    let built = build(&api).await;
    let built_ok = built.is_ok();
    report.check("a_small_catalog_is_built", built);
    if built_ok {
        let buyer = driver.browser().await?;
        let other = driver.browser().await?;
        let bought = a_buyer_searches_holds_pays_and_sees_the_seats_booked(&api, &buyer).await;
        let bought_ok = bought.is_ok();
        report.check("a_buyer_searches_holds_pays_and_sees_the_seats_booked", bought);
        if bought_ok {
            report.check(
                "a_second_browser_sees_them_taken",
                a_second_browser_sees_them_taken(&api, &other).await,
            );
        }
        report.check(
            "the_waiting_room_admits_a_buyer",
            the_waiting_room_admits_a_buyer(&api, &other).await,
        );
        report.check("the_operators_page_draws_the_cluster", operators_page(&api, &buyer).await);
        report.check("the_api_reference_opens", api_reference(&api, &buyer).await);
        buyer.close().await.map_err(io::Error::other)?;
        other.close().await.map_err(io::Error::other)?;
    }
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        paysim.kill().await?;
        api.shutdown().await?;
    }
    result
}

/// A running chromedriver.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    /// Starts chromedriver on a free port, or `None` (the test skipped) when it is missing
    /// outside CI.
    async fn start() -> io::Result<Option<Driver>> {
        let installed = ["chromedriver", "chromium"].iter().all(|name| {
            std::env::var_os("PATH").is_some_and(|path| {
                std::env::split_paths(&path).any(|dir| dir.join(name).is_file())
            })
        });
        if !installed {
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                return Err(io::Error::other(
                    "chromium and chromedriver are missing: run scripts/setup.sh",
                ));
            }
            println!("SKIPPED: chromium or chromedriver is not installed (scripts/setup.sh)");
            return Ok(None);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let url = format!("http://127.0.0.1:{port}");
        testkit::wait_for("chromedriver listens", WAIT, async || {
            Ok(match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(_) => Ok(()),
                Err(error) => Err(error.to_string()),
            })
        })
        .await?;
        Ok(Some(Driver { child, url }))
    }

    /// A new browser session (its own profile: its own cookies and storage).
    async fn browser(&self) -> io::Result<Client> {
        let mut capabilities = serde_json::Map::new();
        // The pages are served over TLS with the cluster's own CA, which this fresh browser
        // profile does not know: the test is about the pages (`client_tls.rs` checks the
        // certificates), so the browser takes them as they are.
        capabilities.insert("acceptInsecureCerts".to_owned(), json!(true));
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", WINDOW]}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .map_err(io::Error::other)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// An operator write on node 1 (following leader hints).
async fn write(api: &Api, path: &str, body: Value) -> io::Result<()> {
    let call = api.on(1, Method::POST, path).token(OPERATOR_TOKEN).key(&api.key("browser"));
    call.json(&body).send().await?.expect(201)?;
    Ok(())
}

/// A venue with a hall of two classes, an event, and its two shows (the second with a strict
/// waiting room).
async fn build(api: &Api) -> io::Result<()> {
    write(
        api,
        "/v1/venues",
        json!({"venue_id": 1, "name": "Teatro Nacional",
        "address": "Praça Dom Pedro IV", "city": "Lisboa", "postal_code": "1100-201",
        "latitude": 38.7148, "longitude": -9.1405}),
    )
    .await?;
    let row = |label: &str, y: i32| json!({"label": label, "count": 12, "x": 0, "y": y, "dx": 10});
    write(
        api,
        "/v1/halls",
        json!({"hall_id": 1, "venue_id": 1, "name": "Sala Garrett",
        "sections": [
            {"name": "Plateia", "class": 0, "rows": [row("A", 0), row("B", 12), row("C", 24)]},
            {"name": "Balcão", "class": 1, "rows": [row("D", 44), row("E", 56)]}]}),
    )
    .await?;
    write(
        api,
        "/v1/events",
        json!({"event_id": 1, "title": "Hamlet", "genre": "drama",
        "language": "pt-PT", "duration_min": 170, "description": "The prince of Denmark."}),
    )
    .await?;
    for (show, hours, admission) in [(SHOW, 24, false), (QUEUED_SHOW, 48, true)] {
        let mut body = json!({"show_id": show, "currency": "EUR", "prices_minor": [2_500, 1_800],
            "listing": {"event_id": 1, "hall_id": 1,
                "starts_at_ms": 1_900_000_000_000u64 + hours * 3_600_000}});
        if admission {
            body["admission"] = json!({"enabled": true, "window": 1});
        }
        write(api, "/v1/shows", body).await?;
    }
    Ok(())
}

/// The URL of `path` on node `node`'s pages.
fn page(api: &Api, node: u64, path: &str) -> io::Result<String> {
    Ok(api.cluster.url(node, path)?)
}

/// Waits for the element `css` to be there.
async fn element(browser: &Client, css: &str) -> io::Result<fantoccini::elements::Element> {
    browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .map_err(|error| io::Error::other(format!("waiting for {css}: {error}")))
}

/// What the status line says now.
async fn status(browser: &Client) -> String {
    let Ok(status) = browser.find(Locator::Css("#status")).await else { return String::new() };
    let state = status.attr("data-state").await.ok().flatten().unwrap_or_default();
    format!("{state}: {}", status.text().await.unwrap_or_default())
}

/// Waits until the status line's state is `state`, saying what it was otherwise.
async fn status_becomes(browser: &Client, state: &str) -> io::Result<()> {
    let css = format!("#status[data-state='{state}']");
    match browser.wait().at_most(WAIT).for_element(Locator::Css(&css)).await {
        Ok(_) => Ok(()),
        Err(_) => {
            Err(io::Error::other(format!("status is {:?}, not {state}", status(browser).await)))
        }
    }
}

/// Saves a screenshot as `name.png` in the artifacts directory and says where.
async fn screenshot(browser: &Client, name: &str) -> io::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.png"));
    let png = browser.screenshot().await.map_err(io::Error::other)?;
    std::fs::write(&path, png)?;
    println!("screenshot: {}", path.display());
    Ok(path)
}

async fn click(browser: &Client, css: &str) -> io::Result<()> {
    element(browser, css).await?.click().await.map_err(io::Error::other)
}

/// Search with a typo, open the show, pick A5 and A6 on the map, hold, pay; the status says
/// booked and the map shows both seats booked.
async fn a_buyer_searches_holds_pays_and_sees_the_seats_booked(
    api: &Api,
    browser: &Client,
) -> io::Result<()> {
    browser.goto(&page(api, 2, "/")?).await.map_err(io::Error::other)?;
    let query = element(browser, "#q").await?;
    query.send_keys("hamlte").await.map_err(io::Error::other)?;
    click(browser, "#search").await?;
    let result = format!("[data-testid='result'][data-show-id='{SHOW}']");
    element(browser, &result).await?;
    screenshot(browser, "search").await?;
    click(browser, &result).await?;
    for seat in ["A5", "A6"] {
        click(browser, &format!("#seatmap [data-seat='{seat}'][data-status='free']")).await?;
        element(browser, &format!("#seatmap [data-seat='{seat}'][data-status='selected']")).await?;
    }
    click(browser, "#hold").await?;
    status_becomes(browser, "held").await?;
    let countdown = element(browser, "#countdown").await?;
    let remaining = countdown.attr("data-remaining-ms").await.map_err(io::Error::other)?;
    let remaining: u64 = remaining.and_then(|ms| ms.parse().ok()).unwrap_or(0);
    ensure!(remaining > 60_000, "a fresh hold has minutes left, the countdown says {remaining} ms");
    screenshot(browser, "held").await?;
    click(browser, "#pay").await?;
    status_becomes(browser, "booked").await?;
    for seat in ["A5", "A6"] {
        element(browser, &format!("#seatmap [data-seat='{seat}'][data-status='booked']")).await?;
    }
    screenshot(browser, "buyer").await?;
    // The cluster agrees: both seats are booked on the leader's map.
    let path = format!("/v1/shows/{SHOW}/seats?consistency=linearizable");
    let group = api.on(1, Method::GET, &format!("/v1/shows/{SHOW}")).send().await?;
    let group = group.expect(200)?["group_id"].as_u64().unwrap_or(1);
    let map = api.to_leader(group, Method::GET, &path).await?.send().await?;
    let seats = map.expect(200)?["seats"].clone();
    ensure!(seats[4] == "booked" && seats[5] == "booked", "the leader's map: {seats}");
    Ok(())
}

/// Another browser (another buyer) opening the show on another node sees A5 and A6 taken and
/// cannot select them, and sees A7 taken once a third buyer holds it.
async fn a_second_browser_sees_them_taken(api: &Api, browser: &Client) -> io::Result<()> {
    browser.goto(&page(api, 3, &format!("/#/shows/{SHOW}"))?).await.map_err(io::Error::other)?;
    for seat in ["A5", "A6"] {
        element(browser, &format!("#seatmap [data-seat='{seat}'][data-status='booked']")).await?;
    }
    click(browser, "#seatmap [data-seat='A5']").await?;
    let selected = browser.find_all(Locator::Css("#seatmap [data-status='selected']")).await;
    ensure!(selected.map_err(io::Error::other)?.is_empty(), "a booked seat was selectable");
    screenshot(browser, "second-buyer").await?;
    // A third buyer holds A7 (seat 6) over REST while the page is open: the page's next poll
    // asks only for what changed since its map and paints the seat held.
    let third = api.session().await?;
    let group = api.on(1, Method::GET, &format!("/v1/shows/{SHOW}")).send().await?;
    let group = group.expect(200)?["group_id"].as_u64().unwrap_or(1);
    let hold = api.to_leader(group, Method::POST, &format!("/v1/shows/{SHOW}/holds")).await?;
    let body = json!({"seats": [6], "price_version": 1});
    hold.token(&third).key(&api.key("third")).json(&body).send().await?.expect(201)?;
    element(browser, "#seatmap [data-seat='A7'][data-status='held']").await?;
    Ok(())
}

/// Someone else (over REST) is first in the show's strict line; the browser joins and waits
/// with its position; when the first leaves, the browser is granted and holds a seat.
async fn the_waiting_room_admits_a_buyer(api: &Api, browser: &Client) -> io::Result<()> {
    let first = api.session().await?;
    let path = format!("/v1/shows/{QUEUED_SHOW}/queue");
    let answer = api.on(1, Method::POST, &path).token(&first).key(&api.key("q")).send().await?;
    let ticket = string_field(answer.expect(201)?, "ticket_id")?;
    browser
        .goto(&page(api, 1, &format!("/#/shows/{QUEUED_SHOW}"))?)
        .await
        .map_err(io::Error::other)?;
    element(browser, "#queue[data-state='waiting']").await?;
    status_becomes(browser, "queued").await?;
    screenshot(browser, "waiting-room").await?;
    let leave = api.on(1, Method::DELETE, &format!("/v1/queue/{ticket}")).token(&first);
    leave.key(&api.key("leave")).send().await?.expect(200)?;
    status_becomes(browser, "granted").await?;
    click(browser, "#seatmap [data-seat='D1'][data-status='free']").await?;
    click(browser, "#hold").await?;
    status_becomes(browser, "held").await?;
    Ok(())
}

/// The operator's page asks for the credential, then draws every group with its replicas.
async fn operators_page(api: &Api, browser: &Client) -> io::Result<()> {
    browser.goto(&page(api, 1, "/ops")?).await.map_err(io::Error::other)?;
    let token = element(browser, "#token").await?;
    token.send_keys(OPERATOR_TOKEN).await.map_err(io::Error::other)?;
    click(browser, "#token-save").await?;
    for group in 0..=2 {
        element(browser, &format!("tr[data-testid='group'][data-group-id='{group}']")).await?;
    }
    element(browser, &format!("[data-testid='show'][data-show-id='{SHOW}'] svg")).await?;
    let replicas = browser.find_all(Locator::Css("tr[data-testid='replica']")).await;
    let replicas = replicas.map_err(io::Error::other)?.len();
    ensure!(replicas == 9, "3 groups of 3 replicas, the page shows {replicas}");
    screenshot(browser, "ops").await?;
    Ok(())
}

/// Swagger UI over the node's own document.
async fn api_reference(api: &Api, browser: &Client) -> io::Result<()> {
    browser.goto(&page(api, 1, "/docs/")?).await.map_err(io::Error::other)?;
    element(browser, ".swagger-ui .opblock").await?;
    screenshot(browser, "docs").await?;
    Ok(())
}
