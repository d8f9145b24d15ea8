//! Archiving shows on a real 3-node cluster whose leaders charge through paysim: a sold show,
//! closed and settled, is archived by the operator; every replica writes the same archive (its
//! SHA-256 is the digest the answer names); every later call about the show answers 410
//! `show_archived`; its audit trails read the same from the archive as they did from the live
//! state, also after a restart; a show not yet settled is refused with what remains; and a
//! leader archives an ended, settled show by itself after `--archive-after-s`, and compacts the
//! terminal records of a live show older than `--retention-s` into archive segments whose
//! trails stay readable.
//!
//! Reference: issue 18 section 1 (retention and archiving) and seed 002 section 15 ("archive
//! completed shows").

use std::io;

use axum::http::Method;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use testkit::wait_for;

use crate::paysim::{Paysim, settled_hold};
use crate::rest::{Api, OPERATOR_TOKEN, Report, Show, ensure, string_field};
use crate::{WAIT, options};

/// The first show id of this file.
const SHOWS: u64 = 900;

/// How long after a show ended the test cluster's leaders archive it by themselves: long
/// enough that the operator's own archive of the first scenario comes first.
const ARCHIVE_AFTER_S: u64 = 8;

/// How long the test cluster keeps the terminal records of a live show.
const RETENTION_S: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_are_archived_on_every_replica() -> io::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut options = options(3);
    options.extra_args.extend([
        "--provider-url".to_owned(),
        format!("http://{listen}"),
        "--archive-after-s".to_owned(),
        ARCHIVE_AFTER_S.to_string(),
        "--retention-s".to_owned(),
        RETENTION_S.to_string(),
    ]);
    let api = Api::start(options).await?;
    let ledger = tempfile::tempdir()?;
    let paysim = Paysim::start_on(&api, ledger.path(), &listen, &[]).await?;
    let mut report = Report::default();
    report.check(
        "the_operator_archives_a_settled_show",
        the_operator_archives_a_settled_show(&api).await,
    );
    report.check("a_leader_archives_an_ended_show", a_leader_archives_an_ended_show(&api).await);
    report.check(
        "old_terminal_records_leave_a_live_show",
        old_terminal_records_leave_a_live_show(&api).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        paysim.kill().await?;
        api.shutdown().await?;
    }
    result
}

/// Sells `seats` of a new show in one paid hold, and returns the show, the hold's id and its
/// booking's.
async fn sold_show(api: &Api, show_id: u64, seats: &[u32]) -> io::Result<(Show, String, String)> {
    let show = api.create_show(show_id, 10, 1, json!({})).await?;
    let (buyer, hold_id, _) = api.checked_out(&show, seats).await?;
    let hold = settled_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed", "the hold is paid: {hold}");
    let booking_id = string_field(&hold, "booking_id")?;
    Ok((show, hold_id, booking_id))
}

async fn operator(api: &Api, method: Method, path: &str) -> io::Result<crate::rest::Answer> {
    api.on(1, method, path).token(OPERATOR_TOKEN).key(&api.key("archive")).send().await
}

async fn trail(api: &Api, node: u64, kind: &str, id: &str) -> io::Result<Value> {
    let answer = api
        .on(node, Method::GET, &format!("/v1/audit/{kind}/{id}"))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    Ok(answer.expect(200)?["records"].clone())
}

/// An entity's trail read through `node`, once the node answers (after a restart, or once a
/// compaction is applied).
async fn trail_once_readable(api: &Api, node: u64, kind: &str, id: &str) -> io::Result<Value> {
    wait_for("the trail", WAIT, async || {
        let answer = api
            .on(node, Method::GET, &format!("/v1/audit/{kind}/{id}"))
            .token(OPERATOR_TOKEN)
            .send_once()
            .await?;
        Ok(match answer.status {
            200 => Ok(answer.body["records"].clone()),
            _ => Err(answer.describe()),
        })
    })
    .await
}

/// Archives `show` as soon as it is settled (its outbox events delivered), and returns the
/// answer.
async fn archive_when_settled(api: &Api, show: &Show) -> io::Result<Value> {
    let path = format!("/v1/shows/{}/archive", show.id);
    wait_for("the show to be settled and archived", WAIT, async || {
        let answer = operator(api, Method::POST, &path).await?;
        Ok(match answer.status {
            200 => Ok(answer.body.clone()),
            409 if answer.body["code"] == "show_not_settled" => Err(answer.describe()),
            _ => return Err(io::Error::other(answer.describe())),
        })
    })
    .await
}

/// Every node's copy of `show`'s archive, once each has applied the archiving entry.
async fn archives(api: &Api, show: &Show) -> io::Result<Vec<String>> {
    let mut copies = Vec::new();
    for node in api.cluster.node_ids() {
        let path = format!("/v1/shows/{}/archive", show.id);
        let copy = wait_for("the node's archive", WAIT, async || {
            let answer = api.on(node, Method::GET, &path).token(OPERATOR_TOKEN).send().await?;
            Ok(match answer.status {
                200 => Ok(answer.text.clone()),
                _ => Err(answer.describe()),
            })
        })
        .await?;
        copies.push(copy);
    }
    Ok(copies)
}

/// The operator archives a sold, closed and settled show (not before: an open show is refused
/// with what remains); every node holds the same archive; the show answers 410; its trails read
/// the same from the archive, on every node and after a restart.
async fn the_operator_archives_a_settled_show(api: &Api) -> io::Result<()> {
    let (show, hold_id, booking_id) = sold_show(api, SHOWS, &[1, 2]).await?;
    let path = format!("/v1/shows/{}/archive", show.id);
    let early = operator(api, Method::POST, &path).await?;
    let body = early.expect_error(409, "show_not_settled")?;
    ensure!(early.text.contains("close or cancel"), "says what remains: {body}");
    let hold_trail = trail(api, 1, "hold", &hold_id).await?;
    let booking_trail = trail(api, 1, "booking", &booking_id).await?;
    ensure!(hold_trail.as_array().is_some_and(|records| records.len() >= 3), "{hold_trail}");

    operator(api, Method::POST, &format!("/v1/shows/{}/close", show.id)).await?.expect(200)?;
    let archived = archive_when_settled(api, &show).await?;
    ensure!(archived["duplicate"] == false, "the operator archived it first: {archived}");
    let digest = string_field(&archived, "digest")?;
    let copies = archives(api, &show).await?;
    for copy in &copies {
        let sha = Sha256::digest(copy.as_bytes());
        let hex: String = sha.iter().map(|byte| format!("{byte:02x}")).collect();
        ensure!(hex == digest, "every node's archive has the digest {digest}");
        ensure!(copy.len() as u64 == archived["bytes"], "and its length");
    }
    let header: Value = serde_json::from_str(copies[0].lines().next().unwrap_or(""))?;
    ensure!(header["header"]["version"] == 1, "a versioned header: {header}");
    ensure!(copies[0].contains("\"booking\":{\"id\":"), "bookings are archived");

    let again = operator(api, Method::POST, &path).await?;
    ensure!(again.expect(200)?["duplicate"] == true, "{}", again.describe());
    let read = api.on(2, Method::GET, &format!("/v1/shows/{}", show.id)).send().await?;
    read.expect_error(410, "show_archived")?;
    let buyer = api.session().await?;
    let hold = api.hold(&show, &buyer, &api.key("late"), &[5]).await?;
    hold.expect_error(410, "show_archived")?;

    for node in api.cluster.node_ids() {
        ensure!(trail(api, node, "hold", &hold_id).await? == hold_trail, "node {node}: hold");
        ensure!(trail(api, node, "booking", &booking_id).await? == booking_trail, "booking");
    }
    let missing = api
        .on(1, Method::GET, &format!("/v1/audit/hold/{}-77", show.id))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    missing.expect_error(404, "hold_not_found")?;

    // A restart keeps the archive and the show archived (from the log or a snapshot).
    let node = api.leader(show.group).await?;
    api.cluster.kill(node).await.map_err(io::Error::other)?;
    api.cluster.restart(node).await.map_err(io::Error::other)?;
    let restarted = trail_once_readable(api, node, "hold", &hold_id).await?;
    ensure!(restarted == hold_trail, "the restarted node's trail");
    let read = api.on(node, Method::GET, &format!("/v1/shows/{}", show.id)).send().await?;
    read.expect_error(410, "show_archived")?;
    Ok(())
}

/// A leader archives by itself a show that ended `--archive-after-s` ago and is settled.
async fn a_leader_archives_an_ended_show(api: &Api) -> io::Result<()> {
    let (show, _, booking_id) = sold_show(api, SHOWS + 1, &[3]).await?;
    let booking_trail = trail(api, 1, "booking", &booking_id).await?;
    operator(api, Method::POST, &format!("/v1/shows/{}/close", show.id)).await?.expect(200)?;
    wait_for("the leader to archive the show", WAIT, async || {
        let read = api.on(1, Method::GET, &format!("/v1/shows/{}", show.id)).send_once().await?;
        Ok(match read.status {
            410 => Ok(()),
            _ => Err(read.describe()),
        })
    })
    .await?;
    let copies = archives(api, &show).await?;
    ensure!(copies.windows(2).all(|pair| pair[0] == pair[1]), "the same archive everywhere");
    ensure!(trail(api, 2, "booking", &booking_id).await? == booking_trail, "the trail stays");
    let again = operator(api, Method::POST, &format!("/v1/shows/{}/archive", show.id)).await?;
    ensure!(again.expect(200)?["duplicate"] == true, "{}", again.describe());
    Ok(())
}

/// A cancelled hold of a show still on sale leaves its state after `--retention-s` (reading it
/// answers 404), and its trail reads the same from the archive segment on every node; the show
/// sells on.
async fn old_terminal_records_leave_a_live_show(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 10, 1, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[0, 1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let cancel = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(&buyer)
        .key(&api.key("cancel"))
        .send()
        .await?;
    ensure!(matches!(cancel.status, 200 | 204), "{}", cancel.describe());
    let hold_trail = trail(api, 1, "hold", &hold_id).await?;
    wait_for("the cancelled hold to be compacted", WAIT, async || {
        let read = api
            .to_leader(show.group, Method::GET, &format!("/v1/holds/{hold_id}"))
            .await?
            .token(&buyer)
            .send_once()
            .await?;
        Ok(match read.status {
            404 if read.body["code"] == "hold_not_found" => Ok(()),
            _ => Err(read.describe()),
        })
    })
    .await?;
    for node in api.cluster.node_ids() {
        let trail = trail_once_readable(api, node, "hold", &hold_id).await?;
        ensure!(trail == hold_trail, "node {node}: the trail from the segment");
    }
    api.hold_ok(&show, &buyer, &[0, 1]).await?;
    Ok(())
}
