//! The admission lane over the REST API against a real 3-node cluster: tickets granted in order
//! within the window, a hold that needs (and consumes) a grant, leaving the lane, and a ticket's
//! server-sent events when its turn comes.
//!
//! Reference: the `statemachine` admission rules (strict FIFO with a window of 1; a hold
//! consumes its grant atomically) and issue 4 "REST" (`/v1/shows/{id}/queue`,
//! `/v1/queue/{ticket_id}`, `/v1/queue/{ticket_id}/events`).

use std::io;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{Api, Report, Show, ensure, string_field};
use crate::{WAIT, options};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 400;

/// How long a server-sent event may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_admission_queue() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check("holds_need_a_grant_in_line_order", holds_need_a_grant_in_line_order(&api).await);
    report.check(
        "leaving_passes_the_grant_on_with_an_event",
        leaving_passes_the_grant_on_with_an_event(&api).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// A show with its admission lane on, one grant at a time.
async fn lane_show(api: &Api, show_id: u64, group: u64) -> io::Result<Show> {
    api.create_show(show_id, 20, group, json!({ "admission": { "enabled": true, "window": 1 } }))
        .await
}

/// Joins the lane of `show` as `token` (`POST /v1/shows/{id}/queue`), checking the 201 ticket.
async fn join(api: &Api, show: &Show, token: &str) -> io::Result<Value> {
    let answer = api
        .to_leader(show.group, Method::POST, &format!("/v1/shows/{}/queue", show.id))
        .await?
        .token(token)
        .key(&api.key("join"))
        .send()
        .await?;
    let ticket = answer.expect(201)?.clone();
    let id = string_field(&ticket, "ticket_id")?;
    ensure!(id.starts_with(&format!("{}-", show.id)), "{}", answer.describe());
    Ok(ticket)
}

/// Reads ticket `ticket_id` as `token`.
async fn ticket(api: &Api, show: &Show, token: &str, ticket_id: &str) -> io::Result<Value> {
    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/queue/{ticket_id}"))
        .await?
        .token(token)
        .send()
        .await?;
    Ok(answer.expect(200)?.clone())
}

/// Holds `seats` of `show` as `token` with `grant` (if any), and returns the answer.
async fn hold_with_grant(
    api: &Api,
    show: &Show,
    token: &str,
    seats: &[u32],
    grant: Option<&str>,
) -> io::Result<crate::rest::Answer> {
    let mut body = json!({ "seats": seats, "price_version": 1 });
    if let Some(grant) = grant {
        body["grant_id"] = json!(grant);
    }
    api.to_leader(show.group, Method::POST, &format!("/v1/shows/{}/holds", show.id))
        .await?
        .token(token)
        .key(&api.key("hold"))
        .json(&body)
        .send()
        .await
}

/// With a window of 1 the first ticket is granted and the second waits (position 1); a hold
/// without a grant is 409 `grant_required`, with another session's grant 403, with its own 201;
/// the hold consumes the grant and the next ticket is granted.
async fn holds_need_a_grant_in_line_order(api: &Api) -> io::Result<()> {
    let show = lane_show(api, SHOWS, 1).await?;
    let (first, second) = (api.session().await?, api.session().await?);
    let first_ticket = join(api, &show, &first).await?;
    let second_ticket = join(api, &show, &second).await?;
    ensure!(first_ticket["state"] == "granted", "{first_ticket}");
    ensure!(
        second_ticket["state"] == "waiting" && second_ticket["position"] == 1,
        "{second_ticket}"
    );
    let first_id = string_field(&first_ticket, "ticket_id")?;
    let second_id = string_field(&second_ticket, "ticket_id")?;

    hold_with_grant(api, &show, &first, &[1], None).await?.expect_error(409, "grant_required")?;
    let stolen = hold_with_grant(api, &show, &second, &[1], Some(&first_id)).await?;
    stolen.expect_error(403, "not_owner")?;
    let early = hold_with_grant(api, &show, &second, &[1], Some(&second_id)).await?;
    ensure!(early.status == 409, "a waiting ticket is no grant: {}", early.describe());
    let held = hold_with_grant(api, &show, &first, &[1, 2], Some(&first_id)).await?;
    ensure!(held.expect(201)?["state"] == "held", "{}", held.describe());

    let read = ticket(api, &show, &first, &first_id).await?;
    ensure!(read["state"] == "consumed", "{read}");
    wait_for("the second ticket to be granted", WAIT, async || {
        let read = ticket(api, &show, &second, &second_id).await?;
        Ok(if read["state"] == "granted" { Ok(()) } else { Err(read.to_string()) })
    })
    .await?;
    let held = hold_with_grant(api, &show, &second, &[3], Some(&second_id)).await?;
    held.expect(201)?;
    Ok(())
}

/// A waiter subscribed to its ticket's events sees it granted when the granted ticket ahead of
/// it leaves the line (`DELETE /v1/queue/{id}`, which reads `left`).
async fn leaving_passes_the_grant_on_with_an_event(api: &Api) -> io::Result<()> {
    let show = lane_show(api, SHOWS + 1, 2).await?;
    let (first, second) = (api.session().await?, api.session().await?);
    let first_ticket = join(api, &show, &first).await?;
    let second_ticket = join(api, &show, &second).await?;
    let first_id = string_field(&first_ticket, "ticket_id")?;
    let second_id = string_field(&second_ticket, "ticket_id")?;
    ensure!(second_ticket["state"] == "waiting", "{second_ticket}");

    let follower = api.follower(show.group).await?;
    let mut events = api
        .on(follower, Method::GET, &format!("/v1/queue/{second_id}/events"))
        .token(&second)
        .events()
        .await?;
    let left = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/queue/{first_id}"))
        .await?
        .token(&first)
        .key(&api.key("leave"))
        .send()
        .await?;
    ensure!(left.expect(200)?["state"] == "left", "{}", left.describe());
    let seen = events.until(EVENT_WAIT, |event| event.json()["state"] == "granted").await?;
    ensure!(
        seen.last().is_some_and(|event| event.data.contains(&second_id)),
        "the event does not name the ticket: {seen:?}"
    );
    let read = ticket(api, &show, &second, &second_id).await?;
    ensure!(read["state"] == "granted" && read["grant_deadline_ms"].is_u64(), "{read}");
    let stranger = api.session().await?;
    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/queue/{second_id}"))
        .await?
        .token(&stranger)
        .send()
        .await?;
    answer.expect_error(403, "not_owner")?;
    Ok(())
}
