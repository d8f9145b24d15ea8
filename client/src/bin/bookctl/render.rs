//! How `bookctl` prints the booking replies: one line of text per entity (or a small table),
//! or one JSON document with every field of the reply.
//!
//! Owns the text and JSON forms of shows and the operator's controls of them, holds,
//! checkouts, bookings, payments, tickets, waitlist entries, offers, capacity events and audit
//! trails, and the two helpers they share: log times as UTC timestamps and amounts in major
//! units. Never calls a node.

use std::fmt::Write as _;

use client::{
    AdmissionReply, AuditRecord, AuditReply, BandClaimReply, BookingReply, CapacityReleasedReply,
    CheckoutReply, FeatureLevelReply, HoldReply, LotteryReply, OfferReply, OrderKey, PaymentReply,
    PlannedMove, PricesReply, SalesReply, ShowArchivedReply, ShowCancelledReply, ShowMovedReply,
    ShowReply, TicketReply, WaitlistEntryReply, WaitlistPolicyReply, WaitlistReply, WaitlistRules,
    WaitlistSkip,
};
use serde_json::{Value, json};

/// Milliseconds in a day.
const DAY_MS: u64 = 86_400_000;

/// A log time (ms since the Unix epoch) as an RFC 3339 UTC timestamp with milliseconds.
pub fn time(ms: u64) -> String {
    let days = ms / DAY_MS;
    let in_day = ms % DAY_MS;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// An amount in minor units as major units with two decimals and the currency.
pub fn money(minor: u64, currency: &str) -> String {
    format!("{}.{:02} {currency}", minor / 100, minor % 100)
}

/// A deadline, or `-` for none.
fn deadline(ms: u64) -> String {
    if ms == 0 { "-".into() } else { time(ms) }
}

/// An id, or `null` for 0 ("none").
fn id_or_null(id: u64) -> Value {
    if id == 0 { Value::Null } else { json!(id) }
}

/// A show as JSON.
pub fn show_json(show: &ShowReply) -> Value {
    let policy = show.policy.unwrap_or_default();
    let admission = show.admission.unwrap_or_default();
    let waitlist = show.waitlist.unwrap_or_default();
    json!({
        "show_id": show.show_id,
        "group_id": show.group_id,
        "status": show.status,
        "currency": show.currency,
        "prices_minor": show.prices_minor,
        "price_version": show.price_version,
        "seat_count": show.seat_count,
        "seats_free": show.seats_free,
        "seats_held": show.seats_held,
        "seats_booked": show.seats_booked,
        "seats_reserved": show.seats_reserved,
        "policy": {
            "hold_ttl_ms": policy.hold_ttl_ms,
            "payment_grace_ms": policy.payment_grace_ms,
            "grant_ttl_ms": policy.grant_ttl_ms,
            "ticket_wait_ms": policy.ticket_wait_ms,
            "offer_ttl_ms": policy.offer_ttl_ms,
            "idempotency_retention_ms": policy.idempotency_retention_ms,
            "holds_per_session_max": policy.holds_per_session_max,
            "booking_cancel_allowed": policy.booking_cancel_allowed,
        },
        "admission": { "enabled": admission.enabled, "window": admission.window },
        "waitlist": { "enabled": waitlist.enabled, "policy_version": waitlist.policy_version },
        "as_of_log_index": show.as_of_log_index,
        "as_of_log_time_ms": show.as_of_log_time_ms,
    })
}

/// A show as text: a few lines.
pub fn show_text(show: &ShowReply) -> String {
    let mut out = String::new();
    let prices: Vec<String> =
        show.prices_minor.iter().map(|price| money(*price, &show.currency)).collect();
    let _ = writeln!(
        out,
        "show {} (group {}): {}, price version {}, prices {}",
        show.show_id,
        show.group_id,
        show.status,
        show.price_version,
        prices.join(" / ")
    );
    let _ = writeln!(
        out,
        "seats: {} total, {} free, {} held, {} booked, {} reserved for the waitlist",
        show.seat_count, show.seats_free, show.seats_held, show.seats_booked, show.seats_reserved
    );
    let admission = show.admission.unwrap_or_default();
    let waitlist = show.waitlist.unwrap_or_default();
    let lane = if admission.enabled {
        format!("on (window {})", admission.window)
    } else {
        "off".to_owned()
    };
    let _ = writeln!(
        out,
        "admission lane: {lane}; waitlist: {}",
        if waitlist.enabled { "on" } else { "off" }
    );
    if let Some(policy) = &show.policy {
        let _ = writeln!(
            out,
            "holds last {} ms (payment grace {} ms), at most {} per session; grants last {} ms, offers {} ms",
            policy.hold_ttl_ms,
            policy.payment_grace_ms,
            policy.holds_per_session_max,
            policy.grant_ttl_ms,
            policy.offer_ttl_ms
        );
    }
    let _ = writeln!(
        out,
        "as of log index {}, log time {}",
        show.as_of_log_index,
        time(show.as_of_log_time_ms)
    );
    out
}

/// The show list as a table.
pub fn shows_table(shows: &[ShowReply]) -> String {
    if shows.is_empty() {
        return "no shows\n".to_owned();
    }
    let mut rows = vec![
        [
            "SHOW",
            "GROUP",
            "STATUS",
            "SEATS",
            "FREE",
            "HELD",
            "BOOKED",
            "RESERVED",
            "ADMISSION",
            "WAITLIST",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for show in shows {
        let admission = show.admission.unwrap_or_default();
        rows.push(vec![
            show.show_id.to_string(),
            show.group_id.to_string(),
            show.status.clone(),
            show.seat_count.to_string(),
            show.seats_free.to_string(),
            show.seats_held.to_string(),
            show.seats_booked.to_string(),
            show.seats_reserved.to_string(),
            if admission.enabled { format!("window {}", admission.window) } else { "off".into() },
            if show.waitlist.unwrap_or_default().enabled { "on" } else { "off" }.to_owned(),
        ]);
    }
    table(&rows)
}

/// Rows as left-aligned columns two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let mut widths = vec![0; rows.first().map_or(0, Vec::len)];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// A show's sales status after `show open` or `show close`, as JSON.
pub fn sales_json(reply: &SalesReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "status": reply.status,
        "duplicate": reply.duplicate,
    })
}

/// A show's sales status after `show open` or `show close`, as one line of text.
pub fn sales_text(reply: &SalesReply) -> String {
    let already = if reply.duplicate { " already: nothing changed" } else { "" };
    format!("show {} (group {}): {}{already}", reply.show_id, reply.group_id, reply.status)
}

/// What `show cancel` did, as JSON.
pub fn cancelled_json(reply: &ShowCancelledReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "holds_released": reply.holds_released,
        "bookings_refunded": reply.bookings_refunded,
        "waiters_told": reply.waiters_told,
        "duplicate": reply.duplicate,
    })
}

/// What `show cancel` did, as one line of text.
pub fn cancelled_text(reply: &ShowCancelledReply) -> String {
    if reply.duplicate {
        return format!(
            "show {} (group {}) was cancelled before: nothing changed",
            reply.show_id, reply.group_id
        );
    }
    format!(
        "show {} (group {}) cancelled: {} hold(s) released, {} booking(s) to be refunded, {} waiter(s) told",
        reply.show_id,
        reply.group_id,
        reply.holds_released,
        reply.bookings_refunded,
        reply.waiters_told
    )
}

/// What `show archive` did, as JSON.
pub fn archived_json(reply: &ShowArchivedReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "digest": reply.digest,
        "bytes": reply.bytes,
        "duplicate": reply.duplicate,
    })
}

/// What `show archive` did, as one line of text.
pub fn archived_text(reply: &ShowArchivedReply) -> String {
    let already = if reply.duplicate { " (before: nothing changed)" } else { "" };
    format!(
        "show {} (group {}) archived{already}: {} bytes, sha256 {}",
        reply.show_id, reply.group_id, reply.bytes, reply.digest
    )
}

/// What `feature-level --raise` did, as JSON.
pub fn feature_levels_json(raised: &[FeatureLevelReply]) -> Value {
    let groups: Vec<Value> = raised
        .iter()
        .map(|reply| {
            json!({ "group_id": reply.group_id, "level": reply.level, "duplicate": reply.duplicate })
        })
        .collect();
    json!({ "groups": groups })
}

/// What `feature-level --raise` did, one line per group.
pub fn feature_levels_text(raised: &[FeatureLevelReply]) -> String {
    raised
        .iter()
        .map(|reply| {
            let already = if reply.duplicate { " (already)" } else { "" };
            format!("group {}: feature level {}{already}", reply.group_id, reply.level)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `show move` did, as JSON.
pub fn moved_json(reply: &ShowMovedReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "from_group": reply.from_group,
        "to_group": reply.to_group,
        "state_bytes": reply.state_bytes,
        "digest": reply.digest,
        "unserved_ms": reply.unserved_ms,
        "duplicate": reply.duplicate,
    })
}

/// What `show move` did, as one line of text.
pub fn moved_text(reply: &ShowMovedReply) -> String {
    let already = if reply.duplicate { " (before: nothing changed)" } else { "" };
    format!(
        "show {} moved from group {} to group {}{already}: {} bytes, sha256 {}, unserved for {} ms",
        reply.show_id,
        reply.from_group,
        reply.to_group,
        reply.state_bytes,
        reply.digest,
        reply.unserved_ms
    )
}

/// A rebalancing plan (`show rebalance --dry-run`), as JSON.
pub fn plan_json(plan: &[PlannedMove]) -> Value {
    let moves: Vec<Value> = plan
        .iter()
        .map(|planned| {
            json!({
                "show_id": planned.show_id,
                "from_group": planned.from_group,
                "to_group": planned.to_group,
                "load": planned.load,
            })
        })
        .collect();
    json!({ "moves": moves })
}

/// A rebalancing plan, one line per move.
pub fn plan_text(plan: &[PlannedMove]) -> String {
    if plan.is_empty() {
        return "balanced: no move narrows the gap between groups".into();
    }
    plan.iter()
        .map(|planned| {
            format!(
                "move show {} from group {} to group {} (load {})",
                planned.show_id, planned.from_group, planned.to_group, planned.load
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `show rebalance` did, as JSON.
pub fn rebalanced_json(moved: &[ShowMovedReply]) -> Value {
    json!({ "moves": moved.iter().map(moved_json).collect::<Vec<_>>() })
}

/// What `show rebalance` did, one line per move.
pub fn rebalanced_text(moved: &[ShowMovedReply]) -> String {
    if moved.is_empty() {
        return "balanced: nothing moved".into();
    }
    moved.iter().map(moved_text).collect::<Vec<_>>().join("\n")
}

/// The prices `show prices` put in force, as JSON.
pub fn prices_json(reply: &PricesReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "price_version": reply.price_version,
        "prices_minor": reply.prices_minor,
        "duplicate": reply.duplicate,
    })
}

/// The prices `show prices` put in force, as one line of text (in minor units: the reply does
/// not name the currency, `show get` does).
pub fn prices_text(reply: &PricesReply) -> String {
    let prices: Vec<String> = reply.prices_minor.iter().map(u64::to_string).collect();
    let already = if reply.duplicate { " (already in force: nothing changed)" } else { "" };
    format!(
        "show {} (group {}): price version {}, prices {} (minor units){already}; holds must quote version {}",
        reply.show_id,
        reply.group_id,
        reply.price_version,
        prices.join(" / "),
        reply.price_version
    )
}

/// A show's admission lane after `show admission`, as JSON.
pub fn admission_json(reply: &AdmissionReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "enabled": reply.enabled,
        "window": reply.window,
    })
}

/// A show's admission lane after `show admission`, as one line of text.
pub fn admission_text(reply: &AdmissionReply) -> String {
    let lane = if reply.enabled {
        format!("on (window {}): holds need a grant", reply.window)
    } else {
        "off".to_owned()
    };
    format!("show {} (group {}): admission lane {lane}", reply.show_id, reply.group_id)
}

/// A show's waitlist after `show waitlist`, as JSON.
pub fn waitlist_json(reply: &WaitlistReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "enabled": reply.enabled,
        "policy_version": reply.policy_version,
    })
}

/// A show's waitlist after `show waitlist`, as one line of text.
pub fn waitlist_text(reply: &WaitlistReply) -> String {
    format!(
        "show {} (group {}): waitlist {} (policy version {})",
        reply.show_id,
        reply.group_id,
        if reply.enabled { "on" } else { "off" },
        reply.policy_version
    )
}

fn rules_json(rules: Option<&WaitlistRules>) -> Value {
    rules.map_or(Value::Null, |rules| {
        json!({
            "ordering": rules.ordering,
            "draw_at_ms": rules.draw_at_ms,
            "wave_offers_max": rules.wave_offers_max,
        })
    })
}

fn rules_text(rules: Option<&WaitlistRules>) -> String {
    let Some(rules) = rules else { return "no rules".into() };
    let mut text = rules.ordering.clone();
    if let Some(draw_at_ms) = rules.draw_at_ms {
        text.push_str(&format!(" drawn from {draw_at_ms} ms"));
    }
    match rules.wave_offers_max {
        0 => text.push_str(", every offer at once"),
        wave => text.push_str(&format!(", waves of {wave} offers")),
    }
    text
}

/// A show's waitlist policy after `show waitlist-policy`, as JSON.
pub fn policy_json(reply: &WaitlistPolicyReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "group_id": reply.group_id,
        "policy_version": reply.policy_version,
        "rules": rules_json(reply.rules.as_ref()),
        "draw": reply.draw.as_ref().map(|draw| json!({
            "seed": draw.seed,
            "log_index": draw.log_index,
            "drawn_ms": draw.drawn_ms,
            "entries": draw.entries,
        })),
        "duplicate": reply.duplicate,
    })
}

/// A show's waitlist policy, as one line of text.
pub fn policy_text(reply: &WaitlistPolicyReply) -> String {
    let mut text = format!(
        "show {} (group {}): waitlist policy version {}: {}",
        reply.show_id,
        reply.group_id,
        reply.policy_version,
        rules_text(reply.rules.as_ref())
    );
    if let Some(draw) = &reply.draw {
        text.push_str(&format!(
            "; drawn with seed {} at log index {} ({} entries)",
            draw.seed, draw.log_index, draw.entries
        ));
    }
    if reply.duplicate {
        text.push_str(" (already so)");
    }
    text
}

/// A lottery's draw, as JSON.
pub fn drawn_json(reply: &LotteryReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "seed": reply.seed,
        "entries": reply.entries,
        "duplicate": reply.duplicate,
    })
}

/// A lottery's draw, as one line of text.
pub fn drawn_text(reply: &LotteryReply) -> String {
    format!(
        "show {}: lottery drawn with seed {} among {} entries{}",
        reply.show_id,
        reply.seed,
        reply.entries,
        if reply.duplicate { " (drawn before)" } else { "" }
    )
}

/// A band claim, as JSON.
pub fn claim_json(reply: &BandClaimReply) -> Value {
    json!({ "claim": reply.claim, "band": reply.band, "expires_at_s": reply.expires_at_s })
}

/// A band claim, as text: the claim alone on its line, for scripts.
pub fn claim_text(reply: &BandClaimReply) -> String {
    format!("{}\n(band {}, valid until {} s)", reply.claim, reply.band, reply.expires_at_s)
}

/// A payment attempt as JSON.
pub fn payment_json(payment: &PaymentReply) -> Value {
    json!({
        "show_id": payment.show_id,
        "payment_id": payment.payment_id,
        "hold_id": payment.hold_id,
        "state": payment.state,
        "amount_minor": payment.amount_minor,
        "currency": payment.currency,
        "refund_owed": payment.refund_owed,
        "created_ms": payment.created_ms,
        "as_of_log_index": payment.as_of_log_index,
        "as_of_log_time_ms": payment.as_of_log_time_ms,
    })
}

/// A payment attempt as one line of text, named `<show>-<n>` as the REST API and the provider
/// name it.
pub fn payment_text(payment: &PaymentReply) -> String {
    let owed = if payment.refund_owed { ", refund owed" } else { "" };
    format!(
        "payment {}-{} (hold {}): {}, {}{owed}, created {} (as of log index {})",
        payment.show_id,
        payment.payment_id,
        payment.hold_id,
        payment.state,
        money(payment.amount_minor, &payment.currency),
        time(payment.created_ms),
        payment.as_of_log_index
    )
}

/// A hold as JSON.
pub fn hold_json(hold: &HoldReply) -> Value {
    json!({
        "show_id": hold.show_id,
        "hold_id": hold.hold_id,
        "state": hold.state,
        "seats": hold.seats,
        "price_minor": hold.price_minor,
        "currency": hold.currency,
        "price_version": hold.price_version,
        "deadline_ms": hold.deadline_ms,
        "grant_ticket_id": id_or_null(hold.grant_ticket_id),
        "offer_id": id_or_null(hold.offer_id),
        "payment_id": id_or_null(hold.payment_id),
        "booking_id": id_or_null(hold.booking_id),
        "as_of_log_index": hold.as_of_log_index,
        "as_of_log_time_ms": hold.as_of_log_time_ms,
    })
}

/// A hold as one line of text.
pub fn hold_text(hold: &HoldReply) -> String {
    let mut line = format!(
        "hold {} on show {}: {}, seats {:?}, {}, deadline {}",
        hold.hold_id,
        hold.show_id,
        hold.state,
        hold.seats,
        money(hold.price_minor, &hold.currency),
        deadline(hold.deadline_ms)
    );
    for (name, id) in [
        ("grant", hold.grant_ticket_id),
        ("offer", hold.offer_id),
        ("payment", hold.payment_id),
        ("booking", hold.booking_id),
    ] {
        if id != 0 {
            let _ = write!(line, ", {name} {id}");
        }
    }
    let _ = write!(line, " (as of log index {})", hold.as_of_log_index);
    line
}

/// A checkout as JSON.
pub fn checkout_json(checkout: &CheckoutReply) -> Value {
    json!({
        "show_id": checkout.show_id,
        "hold_id": checkout.hold_id,
        "payment_id": checkout.payment_id,
        "amount_minor": checkout.amount_minor,
        "currency": checkout.currency,
        "deadline_ms": checkout.deadline_ms,
    })
}

/// A checkout as one line of text.
pub fn checkout_text(checkout: &CheckoutReply) -> String {
    format!(
        "hold {} on show {} is processing: payment {} of {}, to succeed by {}",
        checkout.hold_id,
        checkout.show_id,
        checkout.payment_id,
        money(checkout.amount_minor, &checkout.currency),
        time(checkout.deadline_ms)
    )
}

/// A booking as JSON.
pub fn booking_json(booking: &BookingReply) -> Value {
    json!({
        "show_id": booking.show_id,
        "booking_id": booking.booking_id,
        "state": booking.state,
        "hold_id": booking.hold_id,
        "seats": booking.seats,
        "payment_id": booking.payment_id,
        "price_minor": booking.price_minor,
        "currency": booking.currency,
        "created_ms": booking.created_ms,
        "as_of_log_index": booking.as_of_log_index,
        "as_of_log_time_ms": booking.as_of_log_time_ms,
    })
}

/// A booking as one line of text.
pub fn booking_text(booking: &BookingReply) -> String {
    format!(
        "booking {} on show {}: {}, seats {:?}, {} paid by payment {} (from hold {}, confirmed {}; as of log index {})",
        booking.booking_id,
        booking.show_id,
        booking.state,
        booking.seats,
        money(booking.price_minor, &booking.currency),
        booking.payment_id,
        booking.hold_id,
        time(booking.created_ms),
        booking.as_of_log_index
    )
}

/// A ticket as JSON.
pub fn ticket_json(ticket: &TicketReply) -> Value {
    json!({
        "show_id": ticket.show_id,
        "ticket_id": ticket.ticket_id,
        "state": ticket.state,
        "ahead": ticket.ahead,
        "grant_deadline_ms": if ticket.grant_deadline_ms == 0 { Value::Null } else { json!(ticket.grant_deadline_ms) },
        "as_of_log_index": ticket.as_of_log_index,
        "as_of_log_time_ms": ticket.as_of_log_time_ms,
    })
}

/// A ticket as one line of text, with what to do next when it is granted.
pub fn ticket_text(ticket: &TicketReply) -> String {
    let detail = match ticket.state.as_str() {
        "waiting" => format!(", {} ahead", ticket.ahead),
        "granted" => format!(
            " until {}: hold with --grant {}",
            deadline(ticket.grant_deadline_ms),
            ticket.ticket_id
        ),
        _ => String::new(),
    };
    format!(
        "ticket {} on show {}: {}{detail} (as of log index {})",
        ticket.ticket_id, ticket.show_id, ticket.state, ticket.as_of_log_index
    )
}

/// A waitlist entry as JSON.
pub fn entry_json(entry: &WaitlistEntryReply) -> Value {
    json!({
        "show_id": entry.show_id,
        "entry_id": entry.entry_id,
        "state": entry.state,
        "quantity": entry.quantity,
        "ahead": entry.ahead,
        "band": entry.band,
        "joined_ms": entry.joined_ms,
        "policy_version": entry.policy_version,
        "offer": entry.offer.as_ref().map(offer_json),
        "as_of_log_index": entry.as_of_log_index,
        "as_of_log_time_ms": entry.as_of_log_time_ms,
    })
}

/// A waitlist entry as text: a line, and one for its offer.
pub fn entry_text(entry: &WaitlistEntryReply) -> String {
    let ahead =
        if entry.state == "waiting" { format!(", {} ahead", entry.ahead) } else { String::new() };
    let mut out = format!(
        "waitlist entry {} on show {}: {}{ahead}, {} seat(s), joined {} (as of log index {})",
        entry.entry_id,
        entry.show_id,
        entry.state,
        entry.quantity,
        time(entry.joined_ms),
        entry.as_of_log_index
    );
    if let Some(offer) = &entry.offer {
        out.push('\n');
        out.push_str(&offer_text(offer));
    }
    out
}

/// An offer as JSON.
pub fn offer_json(offer: &OfferReply) -> Value {
    json!({
        "show_id": offer.show_id,
        "offer_id": offer.offer_id,
        "entry_id": offer.entry_id,
        "state": offer.state,
        "seats": offer.seats,
        "deadline_ms": offer.deadline_ms,
        "hold_id": id_or_null(offer.hold_id),
        "as_of_log_index": offer.as_of_log_index,
        "as_of_log_time_ms": offer.as_of_log_time_ms,
    })
}

/// An offer as one line of text, with what to do next when it is open.
pub fn offer_text(offer: &OfferReply) -> String {
    let next = match offer.state.as_str() {
        "open" => format!(
            " until {}: `bookctl offer accept --show {} --offer {}`",
            time(offer.deadline_ms),
            offer.show_id,
            offer.offer_id
        ),
        "accepted" => format!(", now hold {}", offer.hold_id),
        _ => String::new(),
    };
    format!(
        "offer {} on show {} (entry {}): {}, seats {:?}{next}",
        offer.offer_id, offer.show_id, offer.entry_id, offer.state, offer.seats
    )
}

/// A capacity event's outcome as JSON.
pub fn capacity_json(event: &str, reply: &CapacityReleasedReply) -> Value {
    json!({
        "show_id": reply.show_id,
        "event_id": event,
        "seats_released": reply.seats_released,
        "duplicate": reply.duplicate,
    })
}

/// A capacity event's outcome as one line of text.
pub fn capacity_text(event: &str, reply: &CapacityReleasedReply) -> String {
    if reply.duplicate {
        format!(
            "capacity event {event:?} on show {} was processed before: nothing changed",
            reply.show_id
        )
    } else {
        format!(
            "capacity event {event:?} on show {}: {} seat(s) released to the waitlist",
            reply.show_id, reply.seats_released
        )
    }
}

fn order_json(order: Option<&OrderKey>) -> Value {
    order.map_or(
        Value::Null,
        |order| json!({ "band": order.band, "joined_ms": order.joined_ms, "seq": order.seq }),
    )
}

fn record_json(record: &AuditRecord) -> Value {
    json!({
        "from": if record.from.is_empty() { Value::Null } else { json!(record.from) },
        "to": record.to,
        "reason": record.reason,
        "actor": record.actor,
        "session": if record.session.is_empty() { Value::Null } else { json!(record.session) },
        "log_time_ms": record.log_time_ms,
        "log_index": record.log_index,
        "policy_version": record.policy_version,
        "order": order_json(record.order.as_ref()),
    })
}

fn skip_json(skip: &WaitlistSkip) -> Value {
    json!({
        "offer_id": skip.offer_id,
        "entry_id": skip.entry_id,
        "order": order_json(skip.order.as_ref()),
        "was_ahead": skip.was_ahead,
        "made_index": skip.made_index,
        "policy_version": skip.policy_version,
        "rules": rules_json(skip.rules.as_ref()),
        "draw_seed": skip.draw_seed,
        "draw_key": skip.draw_key,
        "your_draw_key": skip.your_draw_key,
    })
}

/// An audit trail as JSON.
pub fn audit_json(audit: &AuditReply) -> Value {
    json!({
        "show_id": audit.show_id,
        "kind": audit.kind,
        "id": audit.id,
        "records": audit.records.iter().map(record_json).collect::<Vec<_>>(),
        "skips": audit.skips.iter().map(skip_json).collect::<Vec<_>>(),
        "as_of_log_index": audit.as_of_log_index,
        "as_of_log_time_ms": audit.as_of_log_time_ms,
    })
}

/// An audit trail as a table, then the offers made to others while a waitlist entry waited.
pub fn audit_text(audit: &AuditReply) -> String {
    let mut out = format!(
        "{} {} of show {} (as of log index {}):\n",
        audit.kind, audit.id, audit.show_id, audit.as_of_log_index
    );
    let mut rows =
        vec![["LOG_INDEX", "LOG_TIME", "FROM", "TO", "REASON", "ACTOR"].map(String::from).to_vec()];
    for record in &audit.records {
        let actor = if record.session.is_empty() {
            record.actor.clone()
        } else {
            // The first 12 hex digits tell sessions apart; --json has all of them.
            format!("session {}", &record.session[..record.session.len().min(12)])
        };
        rows.push(vec![
            record.log_index.to_string(),
            time(record.log_time_ms),
            if record.from.is_empty() { "-".into() } else { record.from.clone() },
            record.to.clone(),
            record.reason.clone(),
            actor,
        ]);
    }
    out.push_str(&table(&rows));
    if !audit.skips.is_empty() {
        out.push_str("offers made to other entries while this one waited:\n");
        for skip in &audit.skips {
            let order = skip.order.unwrap_or_default();
            let draw = match (skip.draw_seed, skip.draw_key, skip.your_draw_key) {
                (Some(seed), Some(theirs), Some(yours)) => {
                    format!(", draw seed {seed}: key {theirs:#018x} vs yours {yours:#018x}")
                }
                (Some(seed), Some(theirs), None) => {
                    format!(", draw seed {seed}: key {theirs:#018x}, you joined after the draw")
                }
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  offer {} to entry {} (band {}, joined {}, seq {}) at log index {} under \
                 policy {} ({}{draw}): {}",
                skip.offer_id,
                skip.entry_id,
                order.band,
                time(order.joined_ms),
                order.seq,
                skip.made_index,
                skip.policy_version,
                rules_text(skip.rules.as_ref()),
                if skip.was_ahead { "it was ahead in line" } else { "NOT ahead (a bug)" }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_timestamps() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(time(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
        assert_eq!(time(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn money_has_two_decimals() {
        assert_eq!(money(4_500, "EUR"), "45.00 EUR");
        assert_eq!(money(7, "USD"), "0.07 USD");
    }

    #[test]
    fn absent_ids_are_null_in_json_and_omitted_in_text() {
        let hold = HoldReply {
            show_id: 1,
            hold_id: 2,
            seats: vec![3, 4],
            state: "held".into(),
            currency: "EUR".into(),
            price_minor: 1_000,
            payment_id: 5,
            ..HoldReply::default()
        };
        let document = hold_json(&hold);
        assert_eq!(document["payment_id"], 5);
        assert!(document["booking_id"].is_null());
        let text = hold_text(&hold);
        assert!(text.starts_with("hold 2 on show 1: held, seats [3, 4], 10.00 EUR"), "{text}");
        assert!(text.contains("payment 5") && !text.contains("booking"), "{text}");
    }

    #[test]
    fn granted_tickets_and_open_offers_say_what_to_do_next() {
        let ticket = TicketReply {
            show_id: 1,
            ticket_id: 9,
            state: "granted".into(),
            grant_deadline_ms: 60_000,
            ..TicketReply::default()
        };
        assert!(ticket_text(&ticket).contains("hold with --grant 9"));
        let offer = OfferReply {
            show_id: 1,
            offer_id: 4,
            entry_id: 3,
            state: "open".into(),
            seats: vec![7],
            deadline_ms: 1,
            ..OfferReply::default()
        };
        assert!(offer_text(&offer).contains("bookctl offer accept --show 1 --offer 4"));
        let entry = WaitlistEntryReply {
            show_id: 1,
            entry_id: 3,
            state: "offered".into(),
            quantity: 1,
            offer: Some(offer),
            ..WaitlistEntryReply::default()
        };
        assert_eq!(entry_text(&entry).lines().count(), 2);
        assert_eq!(entry_json(&entry)["offer"]["offer_id"], 4);
    }

    #[test]
    fn controls_and_payments_say_what_they_did() {
        let payment = PaymentReply {
            show_id: 41,
            payment_id: 8,
            hold_id: 7,
            state: "succeeded".into(),
            amount_minor: 4_500,
            currency: "EUR".into(),
            refund_owed: true,
            ..PaymentReply::default()
        };
        let text = payment_text(&payment);
        assert!(
            text.starts_with("payment 41-8 (hold 7): succeeded, 45.00 EUR, refund owed"),
            "{text}"
        );
        assert_eq!(payment_json(&payment)["refund_owed"], true);
        let again =
            ShowCancelledReply { show_id: 7, group_id: 1, duplicate: true, ..Default::default() };
        assert!(cancelled_text(&again).contains("cancelled before"));
        let prices = PricesReply {
            show_id: 7,
            group_id: 1,
            price_version: 2,
            prices_minor: vec![4_500, 3_000],
            duplicate: false,
        };
        assert!(prices_text(&prices).contains("price version 2, prices 4500 / 3000 (minor"));
        let retried = PricesReply { duplicate: true, ..prices };
        assert!(prices_text(&retried).contains("already in force"));
        assert_eq!(prices_json(&retried)["duplicate"], true);
        let lane = AdmissionReply { show_id: 7, group_id: 1, enabled: true, window: 5 };
        assert!(admission_text(&lane).contains("on (window 5)"));
        let sales =
            SalesReply { show_id: 7, group_id: 1, status: "closed".into(), duplicate: false };
        assert_eq!(sales_text(&sales), "show 7 (group 1): closed");
        let again = SalesReply { duplicate: true, ..sales };
        assert_eq!(sales_text(&again), "show 7 (group 1): closed already: nothing changed");
        assert_eq!(sales_json(&again)["duplicate"], true);
        let waitlist = WaitlistReply { show_id: 7, group_id: 1, enabled: false, policy_version: 1 };
        assert_eq!(waitlist_json(&waitlist)["enabled"], false);
    }

    #[test]
    fn audit_trails_render_as_a_table() {
        let audit = AuditReply {
            show_id: 1,
            kind: "hold".into(),
            id: 2,
            records: vec![AuditRecord {
                to: "held".into(),
                reason: "requested".into(),
                actor: "session".into(),
                session: "0123456789abcdef0123456789abcdef".into(),
                log_index: 5,
                ..AuditRecord::default()
            }],
            ..AuditReply::default()
        };
        let text = audit_text(&audit);
        assert!(text.contains("LOG_INDEX"), "{text}");
        assert!(text.contains("session 0123456789ab") && text.contains("requested"), "{text}");
        let document = audit_json(&audit);
        assert!(document["records"][0]["from"].is_null());
        assert_eq!(document["records"][0]["session"].as_str().unwrap().len(), 32);
    }
}
