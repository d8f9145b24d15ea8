//! Every bound the booking core enforces, named with its unit last.
//!
//! Owns the numbers; never reads configuration or the environment. Relations between limits are
//! checked at compile time so that a change to one cannot silently break another.

/// Seats in one hold (all-or-nothing), and in one waitlist entry's request.
pub const SEATS_PER_HOLD_MAX: usize = 10;
/// Seats in one show.
pub const SEATS_PER_SHOW_MAX: u32 = 100_000;
/// Seat classes (price tiers) in one show.
pub const SEAT_CLASSES_PER_SHOW_MAX: usize = 32;
/// Ranges in one show's seat layout.
pub const LAYOUT_RANGES_PER_SHOW_MAX: usize = 4_096;
/// Price of one seat, in minor units of the show's currency.
pub const SEAT_PRICE_MINOR_MAX: u64 = 100_000_000_000;
/// Commands in one log entry.
pub const BATCH_COMMANDS_MAX: usize = 8_192;
/// Shows placed in the whole cluster (the metadata group's placement map).
pub const PLACED_SHOWS_MAX: usize = 10_000_000;
/// Shows in one group.
pub const SHOWS_PER_GROUP_MAX: usize = 100_000;
/// The largest state of a show a move carries in one log entry (`ImportShow`), well under a
/// peer message (16 MiB): a larger show is archived or compacted before it can move.
pub const SHOW_TRANSFER_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Live holds (held or processing) of one session in one show.
pub const HOLDS_PER_SESSION_MAX: u32 = 64;
/// Payment attempts on one hold (a declined attempt may be followed by another checkout).
pub const PAYMENT_ATTEMPTS_PER_HOLD_MAX: u8 = 3;
/// Admission tickets per show that are waiting or granted at once.
pub const ADMISSION_TICKETS_LIVE_MAX: usize = 1_000_000;
/// Outstanding admission grants per show lane (the admission window).
pub const ADMISSION_WINDOW_MAX: u32 = 10_000;
/// Waitlist entries per show that are waiting or offered at once.
pub const WAITLIST_ENTRIES_LIVE_MAX: usize = 1_000_000;
/// Priority bands a waitlist may order by (band 0 is served first).
pub const WAITLIST_BANDS_MAX: u8 = 8;
/// Open offers a waitlist's wave may allow at once (0, no limit, is also allowed).
pub const WAITLIST_WAVE_OFFERS_MAX: u32 = 100_000;
/// Seats named by one capacity-released event.
pub const CAPACITY_EVENT_SEATS_MAX: usize = 1_024;
/// Objects one `Tick` expires or prunes before it reports that more are due.
pub const TICK_EXPIRATIONS_MAX: u32 = 16_384;
/// Outbox sinks one group tracks.
pub const SINKS_PER_GROUP_MAX: usize = 16;
/// Bytes of a sink's name.
pub const SINK_NAME_BYTES_MAX: usize = 32;
/// Events one delivery report (delivered plus dead-lettered) names.
pub const DELIVERY_REPORT_EVENTS_MAX: usize = 4_096;
/// Dead letters one sink keeps; beyond it the oldest is dropped (and counted).
pub const DEAD_LETTERS_PER_SINK_MAX: usize = 10_000;
/// Bytes of the error a dead letter keeps (longer ones are cut at a character boundary).
pub const DEAD_LETTER_ERROR_BYTES_MAX: usize = 256;
/// Leader digests of the state a group keeps for its replicas to compare with theirs.
pub const AUDIT_DIGESTS_KEPT: usize = 16;

/// Default time a hold keeps its seats (five minutes).
pub const HOLD_TTL_MS_DEFAULT: u64 = 5 * 60 * 1_000;
/// Default grace a processing hold keeps its seats while its payment is resolved.
pub const PAYMENT_GRACE_MS_DEFAULT: u64 = 2 * 60 * 1_000;
/// Default lifetime of an admission grant.
pub const GRANT_TTL_MS_DEFAULT: u64 = 60 * 1_000;
/// Default longest time an admission ticket may wait before it expires (one hour).
pub const TICKET_WAIT_MS_DEFAULT: u64 = 60 * 60 * 1_000;
/// Default lifetime of a waitlist offer (ten minutes).
pub const OFFER_TTL_MS_DEFAULT: u64 = 10 * 60 * 1_000;
/// Default retention of idempotency records and capacity event ids (24 hours).
pub const IDEMPOTENCY_RETENTION_MS_DEFAULT: u64 = 24 * 60 * 60 * 1_000;

/// Shortest configurable deadline of any kind: one second.
pub const DEADLINE_MS_MIN: u64 = 1_000;
/// Longest configurable deadline of any kind: seven days.
pub const DEADLINE_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1_000;

const _: () = assert!(SEATS_PER_HOLD_MAX >= 1 && SEATS_PER_HOLD_MAX <= u8::MAX as usize);
const _: () = assert!(SEATS_PER_HOLD_MAX as u32 <= SEATS_PER_SHOW_MAX);
const _: () = assert!(SEAT_CLASSES_PER_SHOW_MAX <= u8::MAX as usize + 1);
const _: () = assert!(CAPACITY_EVENT_SEATS_MAX as u32 <= SEATS_PER_SHOW_MAX);
// One report never names more events than a sink may keep as dead letters, so one report can
// never push out dead letters it adds itself.
const _: () = assert!(DELIVERY_REPORT_EVENTS_MAX <= DEAD_LETTERS_PER_SINK_MAX);
const _: () = assert!(SINKS_PER_GROUP_MAX >= 1 && SINK_NAME_BYTES_MAX >= 1);
// A price times the seats of one hold must not overflow the amount type.
const _: () = assert!(SEAT_PRICE_MINOR_MAX.checked_mul(SEATS_PER_HOLD_MAX as u64).is_some());
const _: () =
    assert!(DEADLINE_MS_MIN <= HOLD_TTL_MS_DEFAULT && HOLD_TTL_MS_DEFAULT <= DEADLINE_MS_MAX);
const _: () = assert!(
    DEADLINE_MS_MIN <= PAYMENT_GRACE_MS_DEFAULT && PAYMENT_GRACE_MS_DEFAULT <= DEADLINE_MS_MAX
);
const _: () =
    assert!(DEADLINE_MS_MIN <= GRANT_TTL_MS_DEFAULT && GRANT_TTL_MS_DEFAULT <= DEADLINE_MS_MAX);
const _: () =
    assert!(DEADLINE_MS_MIN <= TICKET_WAIT_MS_DEFAULT && TICKET_WAIT_MS_DEFAULT <= DEADLINE_MS_MAX);
const _: () =
    assert!(DEADLINE_MS_MIN <= OFFER_TTL_MS_DEFAULT && OFFER_TTL_MS_DEFAULT <= DEADLINE_MS_MAX);
const _: () = assert!(
    DEADLINE_MS_MIN <= IDEMPOTENCY_RETENTION_MS_DEFAULT
        && IDEMPOTENCY_RETENTION_MS_DEFAULT <= DEADLINE_MS_MAX
);
// A retry of a hold must find its record for at least as long as the hold can live.
const _: () =
    assert!(IDEMPOTENCY_RETENTION_MS_DEFAULT >= HOLD_TTL_MS_DEFAULT + PAYMENT_GRACE_MS_DEFAULT);
/// The latest log time (ms) apply accepts: the end of the year 9999. A leader stamp beyond it
/// (a broken clock) is clamped, so that log time plus any deadline can never overflow.
pub const LOG_TIME_MS_MAX: u64 = 253_402_300_799_999;

// Log time plus the longest deadline (and a payment grace on top) never overflows.
const _: () = assert!(LOG_TIME_MS_MAX.checked_add(3 * DEADLINE_MS_MAX).is_some());

/// Venues in the catalog (retired ones count: they are kept).
pub const VENUES_MAX: usize = 100_000;
/// Halls in the catalog (retired ones count).
pub const HALLS_MAX: usize = 100_000;
/// Events in the catalog (retired ones count).
pub const EVENTS_MAX: usize = 1_000_000;
/// A catalog name, title, address or city, in bytes of UTF-8.
pub const CATALOG_NAME_BYTES_MAX: usize = 200;
/// A venue's postal code, in bytes.
pub const POSTAL_CODE_BYTES_MAX: usize = 16;
/// An event's description, in bytes of UTF-8.
pub const DESCRIPTION_BYTES_MAX: usize = 4_000;
/// An event's genre, in bytes of UTF-8.
pub const GENRE_BYTES_MAX: usize = 40;
/// An event's running time, in minutes (a day).
pub const EVENT_DURATION_MIN_MAX: u32 = 24 * 60;
/// Images of one event.
pub const EVENT_IMAGES_MAX: usize = 8;
/// One image URL, in bytes.
pub const IMAGE_URL_BYTES_MAX: usize = 500;
/// Sections in one hall.
pub const HALL_SECTIONS_MAX: usize = 64;
/// Rows in one section.
pub const SECTION_ROWS_MAX: usize = 1_000;
/// A row label, in upper-case letters.
pub const ROW_LABEL_BYTES_MAX: usize = 4;
/// Seats in one row.
pub const ROW_SEATS_MAX: u32 = 1_000;
/// The number on a row's first seat.
pub const SEAT_NUMBER_MAX: u32 = 100_000;
/// A hall coordinate or step (drawing units), either sign.
pub const HALL_COORDINATE_MAX: u32 = 1_000_000;

// A seat drawn at the far end of the longest row still fits an i32.
const _: () = assert!((HALL_COORDINATE_MAX as u64) * (ROW_SEATS_MAX as u64 + 1) < i32::MAX as u64);
// A show made from a hall has one layout range per section at most.
const _: () = assert!(HALL_SECTIONS_MAX <= LAYOUT_RANGES_PER_SHOW_MAX);
