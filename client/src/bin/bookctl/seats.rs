//! `bookctl show seats`: a seat map drawn as a grid in the terminal.
//!
//! Owns the drawing: rows of `width` seats labelled with their first and last seat number, a
//! gap every ten seats, one character per seat (`.` free, `h` held, `#` booked, `r` reserved),
//! then a legend with the counts and the log position the map reflects. Never calls a node.

use std::fmt::Write as _;

use client::{SeatMapReply, SeatStatus};

use crate::render::{money, time};

/// Seats between two gaps within a row.
const GROUP_SEATS: usize = 10;

/// The character of a seat status.
fn glyph(status: Option<SeatStatus>) -> char {
    match status {
        Some(SeatStatus::Free) => '.',
        Some(SeatStatus::Held) => 'h',
        Some(SeatStatus::Booked) => '#',
        Some(SeatStatus::Reserved) => 'r',
        Some(SeatStatus::Unspecified) | None => '?',
    }
}

/// One character per seat, seat 0 first (the `seats` field of `--json`).
pub fn glyphs(map: &SeatMapReply) -> String {
    map.seats.iter().map(|raw| glyph(SeatStatus::try_from(*raw).ok())).collect()
}

/// The grid, its legend and the `as of` line.
pub fn draw(map: &SeatMapReply, width: usize) -> String {
    let width = width.max(1);
    let statuses: Vec<Option<SeatStatus>> =
        map.seats.iter().map(|raw| SeatStatus::try_from(*raw).ok()).collect();
    let mut out = String::new();
    let prices: Vec<String> =
        map.prices_minor.iter().map(|price| money(*price, &map.currency)).collect();
    let _ = writeln!(
        out,
        "show {}: {}, {} seats, price version {}, prices {}",
        map.show_id,
        map.status,
        statuses.len(),
        map.price_version,
        prices.join(" / ")
    );
    let last = statuses.len().saturating_sub(1);
    let label_width = last.to_string().len();
    for (row, seats) in statuses.chunks(width).enumerate() {
        let first = row * width;
        let end = first + seats.len() - 1;
        let mut line = format!("{first:>label_width$}-{end:<label_width$}  ");
        for (index, status) in seats.iter().enumerate() {
            if index > 0 && index % GROUP_SEATS == 0 {
                line.push(' ');
            }
            line.push(glyph(*status));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let count = |wanted: SeatStatus| statuses.iter().filter(|s| **s == Some(wanted)).count();
    let _ = writeln!(
        out,
        "legend: . free ({})  h held ({})  # booked ({})  r reserved for the waitlist ({})",
        count(SeatStatus::Free),
        count(SeatStatus::Held),
        count(SeatStatus::Booked),
        count(SeatStatus::Reserved),
    );
    let _ = writeln!(
        out,
        "as of log index {}, log time {}{}",
        map.as_of_log_index,
        time(map.as_of_log_time_ms),
        if map.linearizable { " (linearizable: read on the group's leader)" } else { "" }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(seats: &[SeatStatus]) -> SeatMapReply {
        SeatMapReply {
            show_id: 7,
            status: "on_sale".into(),
            price_version: 1,
            currency: "EUR".into(),
            prices_minor: vec![4_500],
            classes: vec![0; seats.len()],
            seats: seats.iter().map(|status| *status as i32).collect(),
            as_of_log_index: 42,
            as_of_log_time_ms: 0,
            linearizable: false,
            ..SeatMapReply::default()
        }
    }

    #[test]
    fn rows_of_twenty_with_a_gap_every_ten() {
        let mut seats = vec![SeatStatus::Free; 45];
        seats[0] = SeatStatus::Booked;
        seats[21] = SeatStatus::Held;
        seats[44] = SeatStatus::Reserved;
        let drawn = draw(&map(&seats), 20);
        let lines: Vec<&str> = drawn.lines().collect();
        assert_eq!(lines[0], "show 7: on_sale, 45 seats, price version 1, prices 45.00 EUR");
        assert_eq!(lines[1], " 0-19  #......... ..........");
        assert_eq!(lines[2], "20-39  .h........ ..........");
        assert_eq!(lines[3], "40-44  ....r");
        assert_eq!(
            lines[4],
            "legend: . free (42)  h held (1)  # booked (1)  r reserved for the waitlist (1)"
        );
        assert_eq!(lines[5], "as of log index 42, log time 1970-01-01T00:00:00.000Z");
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn other_widths_and_unknown_statuses() {
        let mut reply = map(&[SeatStatus::Free; 3]);
        reply.seats.push(99);
        let drawn = draw(&reply, 2);
        assert!(drawn.contains("\n0-1  ..\n2-3  .?\n"), "{drawn}");
        assert_eq!(glyphs(&reply), "...?");
        let empty = draw(&map(&[]), 20);
        assert!(empty.contains("0 seats") && empty.contains("free (0)"), "{empty}");
        let linearizable = draw(&SeatMapReply { linearizable: true, ..map(&[]) }, 20);
        assert!(linearizable.ends_with("(linearizable: read on the group's leader)\n"));
    }
}
