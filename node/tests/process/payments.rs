//! The payment worker against the real `paysim` process: a 3-node cluster started with
//! `--provider-url`, whose data group leaders charge every checkout themselves, and nobody else
//! calls the provider. A checkout is booked by the worker's charge alone (webhooks, duplicated
//! and delivered before the charge call returns, change nothing more); a decline gives the hold
//! back and a second checkout pays; a charge whose call times out is recorded `unknown` and
//! reconciled by reading it back; an outage charges nothing until it ends; money that arrives
//! after the payment grace is refund work; the group leader killed in the middle of a charge is
//! replaced by one that finishes it; late money and a cancelled booking are refunded, once, and
//! recorded `refunded`. In every case the provider's ledger holds exactly one charge per payment
//! attempt and at most one refund.

use std::io;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};

use crate::paysim::{Paysim, charges, settled_hold};
use crate::rest::{Api, OPERATOR_TOKEN, Report, Show, ensure, string_field};

/// The first show id of this file.
const SHOWS: u64 = 360;

/// Runs every scenario on one cluster whose nodes charge through one paysim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payment_worker_against_paysim() -> io::Result<()> {
    let (api, paysim, _ledger) = Paysim::with_cluster(3).await?;
    let mut report = Report::default();
    let pay = Pay { api: &api, paysim: &paysim };
    report.check("the_worker_charges_once_and_books", pay.charges_once_and_books().await);
    report.check("a_decline_then_a_second_checkout", pay.decline_then_second_checkout().await);
    report.check("a_timeout_is_reconciled", pay.timeout_is_reconciled().await);
    report.check("an_outage_charges_nothing_until_it_ends", pay.outage().await);
    report.check("late_money_is_refund_work", pay.late_money().await);
    report.check("out_of_order_webhooks_change_nothing", pay.out_of_order_webhooks().await);
    report.check("the_leader_killed_mid_charge", pay.leader_killed_mid_charge().await);
    report.check("the_leader_killed_mid_refund", pay.leader_killed_mid_refund().await);
    report.check("a_cancelled_booking_is_refunded", pay.cancelled_booking_is_refunded().await);
    report.check("a_cancelled_show_refunds_every_booking", pay.cancelled_show().await);
    report.check("one_charge_per_attempt", pay.one_charge_per_attempt().await);
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        paysim.kill().await?;
        api.shutdown().await?;
    }
    result
}

struct Pay<'a> {
    api: &'a Api,
    paysim: &'a Paysim,
}

impl Pay<'_> {
    /// Sets paysim's behaviour (`{}`: the defaults).
    async fn behave(&self, behaviour: Value) -> io::Result<()> {
        self.paysim.control(self.api, &behaviour).await
    }

    /// The ledger's charges for payment attempt `payment_id`, under whatever key.
    async fn charges_of(&self, payment_id: &str) -> io::Result<Vec<Value>> {
        let ledger = self.paysim.ledger(self.api).await?;
        let charged =
            charges(&ledger).into_iter().filter(|charge| charge["payment_id"] == payment_id);
        Ok(charged.cloned().collect())
    }

    /// The states payment `payment_id` went through, in order, and the reasons.
    async fn payment_trail(
        &self,
        show: &Show,
        payment_id: &str,
    ) -> io::Result<Vec<(String, String)>> {
        let answer = self
            .api
            .to_leader(show.group, Method::GET, &format!("/v1/audit/payment/{payment_id}"))
            .await?
            .token(OPERATOR_TOKEN)
            .send()
            .await?;
        let trail = answer.expect(200)?;
        Ok(trail["records"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|record| {
                let name = |field: &str| record[field].as_str().unwrap_or("?").to_owned();
                (name("to"), name("reason"))
            })
            .collect())
    }

    /// Checks `hold` settled as `state`, and returns the checkout's payment id.
    async fn checkout_settles(
        &self,
        show: &Show,
        seats: &[u32],
        state: &str,
    ) -> io::Result<(String, String, String)> {
        let (buyer, hold_id, checkout) = self.api.checked_out(show, seats).await?;
        let payment_id = string_field(&checkout, "payment_id")?;
        let hold = settled_hold(self.api, show, &buyer, &hold_id).await?;
        ensure!(hold["state"] == state, "hold {hold_id} settled {state}: {hold}");
        Ok((buyer, hold_id, payment_id))
    }

    /// Duplicate webhooks, each before its charge call returns: the worker's charge books the
    /// hold; one charge, under the attempt's id; the trail never says `unknown`.
    async fn charges_once_and_books(&self) -> io::Result<()> {
        self.behave(json!({ "duplicate_ratio": 1.0, "webhook_before_reply": true })).await?;
        let show = self.api.create_show(SHOWS, 20, 1, json!({})).await?;
        let (_, _, payment_id) = self.checkout_settles(&show, &[1, 2], "confirmed").await?;
        let states = self.api.seat_states(&show).await?;
        ensure!(states.values().filter(|state| *state == "booked").count() == 2, "{states:?}");
        let charged = self.charges_of(&payment_id).await?;
        ensure!(charged.len() == 1, "one charge: {charged:?}");
        ensure!(
            charged[0]["status"] == "succeeded" && charged[0]["amount_minor"] == 2_000,
            "{charged:?}"
        );
        let trail = self.payment_trail(&show, &payment_id).await?;
        let states: Vec<&str> = trail.iter().map(|(state, _)| state.as_str()).collect();
        ensure!(states == ["pending", "succeeded"], "{trail:?}");
        self.behave(json!({})).await
    }

    /// A declined charge gives the hold back; a second checkout of the same hold is a new
    /// attempt, charged under its own id, and books.
    async fn decline_then_second_checkout(&self) -> io::Result<()> {
        self.behave(json!({ "decline_ratio": 1.0 })).await?;
        let show = self.api.create_show(SHOWS + 1, 20, 2, json!({})).await?;
        let (buyer, hold_id, first) = self.checkout_settles(&show, &[5], "held").await?;
        self.behave(json!({})).await?;
        let answer = self
            .api
            .to_leader(show.group, Method::POST, &format!("/v1/holds/{hold_id}/checkout"))
            .await?
            .token(&buyer)
            .key(&self.api.key("checkout-again"))
            .send()
            .await?;
        let second = string_field(answer.expect(201)?, "payment_id")?;
        ensure!(second != first, "a new attempt: {first} {second}");
        let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
        ensure!(hold["state"] == "confirmed", "the second attempt booked: {hold}");
        let declined = self.charges_of(&first).await?;
        ensure!(declined.len() == 1 && declined[0]["status"] == "declined", "{declined:?}");
        let paid = self.charges_of(&second).await?;
        ensure!(paid.len() == 1 && paid[0]["status"] == "succeeded", "{paid:?}");
        Ok(())
    }

    /// The charge is made but its call answers 504: the attempt is recorded `unknown`, read
    /// back by its key and booked; still one charge.
    async fn timeout_is_reconciled(&self) -> io::Result<()> {
        self.behave(json!({ "timeout_ratio": 1.0 })).await?;
        let show = self.api.create_show(SHOWS + 2, 20, 1, json!({})).await?;
        let result = self.checkout_settles(&show, &[3], "confirmed").await;
        self.behave(json!({})).await?;
        let (_, _, payment_id) = result?;
        let trail = self.payment_trail(&show, &payment_id).await?;
        let states: Vec<&str> = trail.iter().map(|(state, _)| state.as_str()).collect();
        ensure!(states == ["pending", "unknown", "succeeded"], "{trail:?}");
        ensure!(self.charges_of(&payment_id).await?.len() == 1, "one charge");
        Ok(())
    }

    /// During an outage every charge call is 503: the attempt is `unknown`, nothing is
    /// charged, the hold keeps processing; when the outage ends, one charge books it.
    async fn outage(&self) -> io::Result<()> {
        self.behave(json!({ "outage": true })).await?;
        let show = self.api.create_show(SHOWS + 3, 20, 2, json!({})).await?;
        let (buyer, hold_id, checkout) = self.api.checked_out(&show, &[9]).await?;
        let payment_id = string_field(&checkout, "payment_id")?;
        let during = async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let trail = self.payment_trail(&show, &payment_id).await?;
                if trail.iter().any(|(state, _)| state == "unknown") {
                    break;
                }
                ensure!(tokio::time::Instant::now() < deadline, "never unknown: {trail:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ensure!(
                self.charges_of(&payment_id).await?.is_empty(),
                "nothing charged in the outage"
            );
            let answer = self
                .api
                .to_leader(show.group, Method::GET, &format!("/v1/holds/{hold_id}"))
                .await?
                .token(&buyer)
                .send()
                .await?;
            let hold = answer.expect(200)?;
            ensure!(hold["state"] == "processing", "the hold waits: {hold}");
            Ok(())
        }
        .await;
        self.behave(json!({})).await?;
        during?;
        let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
        ensure!(hold["state"] == "confirmed", "booked after the outage: {hold}");
        ensure!(self.charges_of(&payment_id).await?.len() == 1, "one charge");
        Ok(())
    }

    /// The provider answers after the payment grace ended: the hold has expired and its seat
    /// is free; the money is refund work (`late_payment`), charged once.
    async fn late_money(&self) -> io::Result<()> {
        self.behave(json!({ "latency_ms": 2_500 })).await?;
        let fields = json!({ "policy": { "payment_grace_ms": 1_000 } });
        let show = self.api.create_show(SHOWS + 4, 20, 1, fields).await?;
        let result = self.checkout_settles(&show, &[4], "expired").await;
        let (_, _, payment_id) = match result {
            Ok(settled) => settled,
            Err(error) => {
                self.behave(json!({})).await?;
                return Err(error);
            }
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let trail = loop {
            let trail = self.payment_trail(&show, &payment_id).await?;
            if trail.iter().any(|(state, _)| state == "succeeded")
                || tokio::time::Instant::now() >= deadline
            {
                break trail;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.behave(json!({})).await?;
        ensure!(trail.iter().any(|(_, reason)| reason == "late_payment"), "refund work: {trail:?}");
        let states = self.api.seat_states(&show).await?;
        ensure!(states.get(&4).is_some_and(|state| state == "free"), "{states:?}");
        let charged = self.charges_of(&payment_id).await?;
        ensure!(charged.len() == 1 && charged[0]["status"] == "succeeded", "{charged:?}");
        self.refunded_once(&show, &payment_id, &charged[0]).await
    }

    /// Waits until payment `payment_id`'s trail ends `refunded` (`refund_completed`), then
    /// checks the ledger gave back the whole of `charge`, once, under the attempt's refund key.
    async fn refunded_once(&self, show: &Show, payment_id: &str, charge: &Value) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let trail = self.payment_trail(show, payment_id).await?;
            if trail
                .last()
                .is_some_and(|(state, reason)| state == "refunded" && reason == "refund_completed")
            {
                break;
            }
            ensure!(tokio::time::Instant::now() < deadline, "never refunded: {trail:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ledger = self.paysim.ledger(self.api).await?;
        let refunds: Vec<&Value> = ledger
            .iter()
            .filter(|record| record["kind"] == "refund" && record["charge_id"] == charge["id"])
            .collect();
        ensure!(refunds.len() == 1, "one refund of {charge}: {refunds:?}");
        ensure!(refunds[0]["amount_minor"] == charge["amount_minor"], "all of it: {refunds:?}");
        ensure!(refunds[0]["key"] == format!("refund-{payment_id}"), "{refunds:?}");
        Ok(())
    }

    /// A booked buyer cancels: the seats return and the money is refunded once.
    async fn cancelled_booking_is_refunded(&self) -> io::Result<()> {
        let show = self.api.create_show(SHOWS + 6, 20, 1, json!({})).await?;
        let (buyer, hold_id, checkout) = self.api.checked_out(&show, &[8, 9]).await?;
        let payment_id = string_field(&checkout, "payment_id")?;
        let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
        ensure!(hold["state"] == "confirmed", "{hold}");
        let booking_id = string_field(&hold, "booking_id")?;
        let answer = self
            .api
            .to_leader(show.group, Method::DELETE, &format!("/v1/bookings/{booking_id}"))
            .await?
            .token(&buyer)
            .key(&self.api.key("cancel-booking"))
            .send()
            .await?;
        ensure!(answer.expect(200)?["state"] == "cancelled", "{}", answer.describe());
        let charged = self.charges_of(&payment_id).await?;
        ensure!(charged.len() == 1, "{charged:?}");
        self.refunded_once(&show, &payment_id, &charged[0]).await?;

        // The buyer (and the operator, and nobody else) sees the payment refunded.
        let read = |token: String| {
            let path = format!("/v1/payments/{payment_id}");
            async move {
                let call = self.api.to_leader(show.group, Method::GET, &path).await?;
                call.token(&token).send().await
            }
        };
        let mine = read(buyer.clone()).await?;
        let payment = mine.expect(200)?;
        ensure!(payment["state"] == "refunded" && payment["refund_owed"] == false, "{payment}");
        ensure!(payment["hold_id"] == hold_id.as_str(), "{payment}");
        let operator = read(OPERATOR_TOKEN.to_owned()).await?;
        ensure!(operator.expect(200)?["state"] == "refunded", "{}", operator.describe());
        let stranger = read(self.api.session().await?).await?;
        stranger.expect_error(403, "not_owner")?;
        Ok(())
    }

    /// Each charge takes 1.5 s; the group's leader is killed while one is on its way. The next
    /// leader's worker charges the attempt again under the same key: one charge, booked.
    async fn leader_killed_mid_charge(&self) -> io::Result<()> {
        self.behave(json!({ "latency_ms": 1_500 })).await?;
        let show = self.api.create_show(SHOWS + 5, 20, 2, json!({})).await?;
        let outcome = async {
            let (buyer, hold_id, checkout) = self.api.checked_out(&show, &[6, 7]).await?;
            let payment_id = string_field(&checkout, "payment_id")?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let leader = self.api.leader(show.group).await?;
            self.api.cluster.kill(leader).await?;
            let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
            ensure!(hold["state"] == "confirmed", "the next leader booked it: {hold}");
            self.api.cluster.restart(leader).await?;
            Ok(payment_id)
        }
        .await;
        self.behave(json!({})).await?;
        let payment_id = outcome?;
        let charged = self.charges_of(&payment_id).await?;
        ensure!(charged.len() == 1 && charged[0]["status"] == "succeeded", "{charged:?}");
        Ok(())
    }

    /// Every charge's webhook is followed by a stale `unknown` one for the same attempt (the
    /// provider's events out of order): once it was delivered, the booking stands and the
    /// payment's trail never went back to `unknown`.
    async fn out_of_order_webhooks(&self) -> io::Result<()> {
        self.behave(json!({ "out_of_order_ratio": 1.0 })).await?;
        let show = self.api.create_show(SHOWS + 8, 20, 1, json!({})).await?;
        let outcome = async {
            let (buyer, hold_id, payment_id) =
                self.checkout_settles(&show, &[11, 12], "confirmed").await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            loop {
                let (status, deliveries) =
                    self.paysim.call(self.api, Method::GET, "/webhooks", None).await?;
                ensure!(status == 200, "webhooks: {status} {deliveries}");
                let stale = deliveries.as_array().into_iter().flatten().any(|delivery| {
                    delivery["event"]["payment_id"] == payment_id.as_str()
                        && delivery["event"]["result"] == "unknown"
                        && delivery["delivered"] == true
                });
                if stale {
                    break;
                }
                ensure!(tokio::time::Instant::now() < deadline, "no stale webhook delivered");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
            ensure!(hold["state"] == "confirmed", "{hold}");
            let trail = self.payment_trail(&show, &payment_id).await?;
            let states: Vec<&str> = trail.iter().map(|(state, _)| state.as_str()).collect();
            ensure!(states == ["pending", "succeeded"], "{trail:?}");
            Ok(payment_id)
        }
        .await;
        self.behave(json!({})).await?;
        let charged = self.charges_of(&outcome?).await?;
        ensure!(charged.len() == 1, "{charged:?}");
        Ok(())
    }

    /// Every provider call takes 1.5 s; a booked buyer cancels and the group's leader is killed
    /// while the refund worker is on it. The next leader refunds under the same key: one refund,
    /// of all of the charge.
    async fn leader_killed_mid_refund(&self) -> io::Result<()> {
        let show = self.api.create_show(SHOWS + 9, 20, 2, json!({})).await?;
        let (buyer, hold_id, checkout) = self.api.checked_out(&show, &[13]).await?;
        let payment_id = string_field(&checkout, "payment_id")?;
        let hold = settled_hold(self.api, &show, &buyer, &hold_id).await?;
        ensure!(hold["state"] == "confirmed", "{hold}");
        let booking_id = string_field(&hold, "booking_id")?;
        self.behave(json!({ "latency_ms": 1_500 })).await?;
        let outcome = async {
            let answer = self
                .api
                .to_leader(show.group, Method::DELETE, &format!("/v1/bookings/{booking_id}"))
                .await?
                .token(&buyer)
                .key(&self.api.key("cancel-booking-mid-refund"))
                .send()
                .await?;
            ensure!(answer.expect(200)?["state"] == "cancelled", "{}", answer.describe());
            // The worker looks the charge up (1.5 s), then asks for the refund (1.5 s more):
            // the kill lands while the refund call is on its way.
            tokio::time::sleep(Duration::from_millis(2_000)).await;
            let leader = self.api.leader(show.group).await?;
            self.api.cluster.kill(leader).await?;
            let charged = self.charges_of(&payment_id).await?;
            ensure!(charged.len() == 1, "{charged:?}");
            self.refunded_once(&show, &payment_id, &charged[0]).await?;
            self.api.cluster.restart(leader).await?;
            Ok(())
        }
        .await;
        self.behave(json!({})).await?;
        outcome
    }

    /// A show with 100 confirmed bookings and one live hold is cancelled (twice: the retry is a
    /// duplicate): the hold is released, and the group leader refunds every booking's charge
    /// in full, once each.
    async fn cancelled_show(&self) -> io::Result<()> {
        const BOOKINGS: u32 = 100;
        let show = self.api.create_show(SHOWS + 7, BOOKINGS + 10, 2, json!({})).await?;
        let mut paid = Vec::new();
        for seat in 0..BOOKINGS {
            let (buyer, hold_id, checkout) = self.api.checked_out(&show, &[seat]).await?;
            paid.push((buyer, hold_id, string_field(&checkout, "payment_id")?));
        }
        for (buyer, hold_id, _) in &paid {
            let hold = settled_hold(self.api, &show, buyer, hold_id).await?;
            ensure!(hold["state"] == "confirmed", "{hold}");
        }
        let holder = self.api.session().await?;
        self.api.hold_ok(&show, &holder, &[BOOKINGS]).await?;

        let cancel = |key: String| async move {
            let path = format!("/v1/shows/{}/cancel", show.id);
            let answer = self
                .api
                .to_leader(show.group, Method::POST, &path)
                .await?
                .token(OPERATOR_TOKEN)
                .key(&key)
                .send()
                .await?;
            Ok::<Value, io::Error>(answer.expect(200)?.clone())
        };
        let first = cancel(self.api.key("cancel-show")).await?;
        ensure!(first["bookings_refunded"] == BOOKINGS, "{first}");
        ensure!(first["holds_released"] == 1 && first["duplicate"] == false, "{first}");
        let again = cancel(self.api.key("cancel-show-again")).await?;
        ensure!(again["duplicate"] == true && again["bookings_refunded"] == 0, "{again}");

        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let (charged, refunds) = loop {
            let ledger = self.paysim.ledger(self.api).await?;
            let ours = |record: &&Value| {
                paid.iter().any(|(_, _, payment)| {
                    record["payment_id"] == payment.as_str()
                        || record["key"] == format!("refund-{payment}")
                })
            };
            let charged: Vec<Value> = charges(&ledger).into_iter().filter(ours).cloned().collect();
            let refunds: Vec<Value> = ledger
                .iter()
                .filter(|record| record["kind"] == "refund")
                .filter(ours)
                .cloned()
                .collect();
            if refunds.len() >= paid.len() || tokio::time::Instant::now() >= deadline {
                break (charged, refunds);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        ensure!(charged.len() == paid.len(), "one charge per booking: {}", charged.len());
        ensure!(refunds.len() == paid.len(), "one refund per booking: {}", refunds.len());
        let mut refunded: Vec<&str> =
            refunds.iter().filter_map(|refund| refund["charge_id"].as_str()).collect();
        refunded.sort_unstable();
        refunded.dedup();
        ensure!(refunded.len() == paid.len(), "a charge refunded twice: {refunds:?}");
        for charge in &charged {
            let refund = refunds.iter().find(|refund| refund["charge_id"] == charge["id"]);
            ensure!(
                refund.is_some_and(|refund| refund["amount_minor"] == charge["amount_minor"]),
                "{charge} refunded in full: {refund:?}"
            );
        }
        let states = self.api.seat_states(&show).await?;
        ensure!(states.values().all(|state| state != "booked" && state != "held"), "{states:?}");
        Ok(())
    }

    /// Across every scenario: no attempt was charged twice, each charge under the attempt's own
    /// id, and every charge is for an attempt of this file's shows.
    async fn one_charge_per_attempt(&self) -> io::Result<()> {
        let ledger = self.paysim.ledger(self.api).await?;
        let charged = charges(&ledger);
        ensure!(
            charged.iter().all(|charge| charge["key"] == charge["payment_id"]),
            "a charge under another key: {charged:?}"
        );
        let mut keys: Vec<&str> =
            charged.iter().filter_map(|charge| charge["payment_id"].as_str()).collect();
        let all = keys.len();
        keys.sort_unstable();
        keys.dedup();
        ensure!(keys.len() == all, "an attempt charged twice: {ledger:?}");
        ensure!(
            keys.iter().all(|key| key.split_once('-').is_some_and(|(show, _)| {
                show.parse::<u64>().is_ok_and(|show| (SHOWS..SHOWS + 10).contains(&show))
            })),
            "{keys:?}"
        );
        Ok(())
    }
}
