//! What both APIs check in a request before anything is proposed: ids, seats, party sizes,
//! currencies, event ids, prices, admission windows and waitlist rules, each turned into a value of the state
//! machine's types or refused with `InvalidArgument` naming the field.
//!
//! Owns the shape checks that need no state, once for REST (`rest/`) and gRPC (`api/`): seats
//! become a [`SeatSet`] here, at the edge, so nothing later sees an empty, oversized or repeated
//! seat list. Two seat lists with the same seats in another order are the same request (the set
//! is sorted), so they are one idempotency payload. Never judges a rule that needs state (a seat
//! outside the show is the state machine's `seat_out_of_range`, a taken one its
//! `seat_unavailable`).

use statemachine::limits::{
    ADMISSION_WINDOW_MAX, CAPACITY_EVENT_SEATS_MAX, SEAT_CLASSES_PER_SHOW_MAX,
    SEAT_PRICE_MINOR_MAX, SEATS_PER_HOLD_MAX,
};
use statemachine::{
    CapacityEventId, Currency, SeatNo, SeatSet, SessionId, ShowId, WaitlistOrdering, WaitlistRules,
};

use crate::error::ApiError;
use crate::search::{Near, SEARCH_RADIUS_KM_MAX};
use crate::sessions::hash128;

/// The longest capacity event id accepted, in bytes.
pub const CAPACITY_EVENT_ID_BYTES_MAX: usize = 128;

/// A show id: non-zero.
///
/// # Errors
///
/// `InvalidArgument` for 0, naming `field`.
pub fn show_id(field: &str, id: u64) -> Result<ShowId, ApiError> {
    Ok(ShowId(nonzero(field, id)?))
}

/// A session id as the API names it (in audit records, `session:<id>`): 32 hex digits.
///
/// # Errors
///
/// `InvalidArgument` naming `field` for anything else.
pub fn session_id(field: &str, id: &str) -> Result<SessionId, ApiError> {
    let invalid = || ApiError::InvalidArgument(format!("{field}: must be 32 hex digits"));
    if id.len() != 32 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(invalid());
    }
    u128::from_str_radix(id, 16).map(SessionId).map_err(|_| invalid())
}

/// An entity id (hold, booking, ticket, entry, offer): non-zero, since every show numbers its
/// entities from 1.
///
/// # Errors
///
/// `InvalidArgument` for 0, naming `field`.
pub fn nonzero(field: &str, id: u64) -> Result<u64, ApiError> {
    if id == 0 {
        return Err(ApiError::InvalidArgument(format!("{field}: must be non-zero")));
    }
    Ok(id)
}

/// The seats of a hold: 1..=10 distinct seat numbers, in any order.
///
/// # Errors
///
/// `InvalidArgument` for none, more than 10, or a seat named twice.
pub fn seats(field: &str, seats: &[u32]) -> Result<SeatSet, ApiError> {
    SeatSet::new(seats.iter().copied())
        .map_err(|error| ApiError::InvalidArgument(format!("{field}: {error}")))
}

/// The seats of a capacity-released event: 1..=1024 distinct seat numbers, sorted.
///
/// # Errors
///
/// `InvalidArgument` for none, too many, or a seat named twice.
pub fn released_seats(field: &str, seats: &[u32]) -> Result<Vec<SeatNo>, ApiError> {
    if seats.is_empty() || seats.len() > CAPACITY_EVENT_SEATS_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: 1..={CAPACITY_EVENT_SEATS_MAX} seats per event, got {}",
            seats.len()
        )));
    }
    distinct(field, seats)
}

/// `seats` sorted, or the first seat named twice.
fn distinct(field: &str, seats: &[u32]) -> Result<Vec<SeatNo>, ApiError> {
    let mut sorted = seats.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|pair| pair[0] == pair[1]) {
        Some(pair) => {
            Err(ApiError::InvalidArgument(format!("{field}: seat {} is named twice", pair[0])))
        }
        None => Ok(sorted),
    }
}

/// The party size of a waitlist entry: 1..=10.
///
/// # Errors
///
/// `InvalidArgument` otherwise.
pub fn quantity(field: &str, quantity: u32) -> Result<u8, ApiError> {
    match u8::try_from(quantity) {
        Ok(quantity) if quantity >= 1 && usize::from(quantity) <= SEATS_PER_HOLD_MAX => {
            Ok(quantity)
        }
        _ => Err(ApiError::InvalidArgument(format!(
            "{field}: must be 1..={SEATS_PER_HOLD_MAX}, got {quantity}"
        ))),
    }
}

/// An ISO 4217 currency code: three upper-case letters.
///
/// # Errors
///
/// `InvalidArgument` otherwise.
pub fn currency(field: &str, code: &str) -> Result<Currency, ApiError> {
    <[u8; 3]>::try_from(code.as_bytes()).ok().map(Currency).filter(Currency::is_valid).ok_or_else(
        || ApiError::InvalidArgument(format!("{field}: must be three upper-case letters")),
    )
}

/// An admission lane's window (grants outstanding at once): 1..=10,000, the same at show
/// creation and when the operator changes it later.
///
/// # Errors
///
/// `InvalidArgument` for 0 or more than [`ADMISSION_WINDOW_MAX`], naming `field`.
pub fn admission_window(field: &str, window: u32) -> Result<u32, ApiError> {
    if window == 0 || window > ADMISSION_WINDOW_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: must be 1..={ADMISSION_WINDOW_MAX}, got {window}"
        )));
    }
    Ok(window)
}

/// New prices of a show: one per seat class (1..=32), each at most
/// [`SEAT_PRICE_MINOR_MAX`] minor units. Whether there is one per class of this show is the
/// state machine's check, since it needs the show.
///
/// # Errors
///
/// `InvalidArgument` for no price, too many, or one too large, naming `field`.
pub fn prices(field: &str, prices_minor: &[u64]) -> Result<Vec<u64>, ApiError> {
    if prices_minor.is_empty() || prices_minor.len() > SEAT_CLASSES_PER_SHOW_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: 1..={SEAT_CLASSES_PER_SHOW_MAX} prices (one per seat class), got {}",
            prices_minor.len()
        )));
    }
    if let Some(price) = prices_minor.iter().find(|price| **price > SEAT_PRICE_MINOR_MAX) {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: {price} exceeds {SEAT_PRICE_MINOR_MAX}"
        )));
    }
    Ok(prices_minor.to_vec())
}

/// A price version to set: non-zero, since a show starts at version 1 and a version never goes
/// back. Whether it is the show's next one is the state machine's check.
///
/// # Errors
///
/// `InvalidArgument` for 0, naming `field`.
pub fn price_version(field: &str, version: u32) -> Result<u32, ApiError> {
    if version == 0 {
        return Err(ApiError::InvalidArgument(format!("{field}: must be non-zero")));
    }
    Ok(version)
}

/// A capacity event id: the sender's text (1..=128 printable ASCII characters), hashed to the
/// 128 bits the state machine deduplicates by. Both APIs hash the same way, so one event sent
/// through both is processed once.
///
/// # Errors
///
/// `InvalidArgument` for an empty, too long or unprintable id.
pub fn capacity_event_id(field: &str, text: &str) -> Result<CapacityEventId, ApiError> {
    let printable = text.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ');
    if text.is_empty() || text.len() > CAPACITY_EVENT_ID_BYTES_MAX || !printable {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: 1..={CAPACITY_EVENT_ID_BYTES_MAX} printable ASCII characters"
        )));
    }
    Ok(CapacityEventId(hash128(b"capacity-event", text.as_bytes())))
}

/// A waitlist's rules: `ordering` by its name (`fifo`, `bands`, `lottery`), a lottery's draw
/// time, and the wave limit; `field` names the rules in messages (`rules`, or `` for a body
/// that is the rules).
///
/// # Errors
///
/// `InvalidArgument` for an unknown ordering, a lottery without its draw time, or a draw time
/// on another ordering.
pub fn waitlist_rules(
    field: &str,
    ordering: &str,
    draw_at_ms: Option<u64>,
    wave_offers_max: u32,
) -> Result<WaitlistRules, ApiError> {
    let within = |name: &str| {
        if field.is_empty() { name.to_owned() } else { format!("{field}.{name}") }
    };
    let ordering = match (ordering, draw_at_ms) {
        ("fifo", None) => WaitlistOrdering::Fifo,
        ("bands", None) => WaitlistOrdering::Bands,
        ("lottery", Some(draw_at_ms)) => WaitlistOrdering::Lottery { draw_at_ms },
        ("lottery", None) => {
            let message = format!("{}: a lottery needs its draw time", within("draw_at_ms"));
            return Err(ApiError::InvalidArgument(message));
        }
        ("fifo" | "bands", Some(_)) => {
            let message = format!("{}: only a lottery has a draw time", within("draw_at_ms"));
            return Err(ApiError::InvalidArgument(message));
        }
        (other, _) => {
            return Err(ApiError::InvalidArgument(format!(
                "{}: `{other}` is not fifo, bands or lottery",
                within("ordering")
            )));
        }
    };
    Ok(WaitlistRules { ordering, wave_offers_max })
}

/// Degrees as integer micro-degrees, within `±limit` degrees (90 for a latitude, 180 for a
/// longitude): the catalog keeps coordinates as integers, so that no float reaches the log.
///
/// # Errors
///
/// `InvalidArgument` for a value that is not finite or out of range.
pub fn micro_degrees(field: &str, degrees: f64, limit: f64) -> Result<i32, ApiError> {
    if !degrees.is_finite() || degrees.abs() > limit {
        return Err(ApiError::InvalidArgument(format!("{field}: -{limit}..={limit} degrees")));
    }
    // Within ±180° the product is within ±1.8e8, well inside i32.
    #[allow(clippy::cast_possible_truncation)]
    Ok((degrees * 1e6).round() as i32)
}

/// A search's point from its coordinates and radius (km; absent: any distance).
///
/// # Errors
///
/// `InvalidArgument` for a point given by half, or a radius without a point (the index checks
/// the values themselves).
pub fn near(
    lat: Option<f64>,
    lon: Option<f64>,
    radius_km: Option<f64>,
) -> Result<Option<Near>, ApiError> {
    match (lat, lon, radius_km) {
        (None, None, None) => Ok(None),
        (Some(lat), Some(lon), radius) => {
            Ok(Some(Near { lat, lon, radius_km: radius.unwrap_or(SEARCH_RADIUS_KM_MAX) }))
        }
        _ => Err(ApiError::InvalidArgument(
            "lat, lon: give both for a point (radius_km needs one)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid<T: std::fmt::Debug>(result: Result<T, ApiError>) -> String {
        match result {
            Err(error @ ApiError::InvalidArgument(_)) => error.to_string(),
            other => panic!("expected invalid_argument, got {other:?}"),
        }
    }

    #[test]
    fn coordinates_are_kept_to_the_micro_degree_and_bounded() {
        assert_eq!(micro_degrees("latitude", 38.7223, 90.0).unwrap(), 38_722_300);
        assert_eq!(micro_degrees("longitude", -9.1393335, 180.0).unwrap(), -9_139_334);
        for bad in [90.000_001, f64::NAN, f64::INFINITY] {
            assert!(micro_degrees("latitude", bad, 90.0).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_point_needs_both_coordinates_and_a_radius_needs_a_point() {
        assert_eq!(near(None, None, None).unwrap(), None);
        let point = near(Some(1.0), Some(2.0), None).unwrap().unwrap();
        assert_eq!(point.radius_km, SEARCH_RADIUS_KM_MAX);
        assert!(invalid(near(Some(1.0), None, None)).contains("lat, lon"));
        invalid(near(None, None, Some(5.0)));
    }

    #[test]
    fn seats_become_a_sorted_set_of_one_to_ten_distinct_seats() {
        assert_eq!(seats("seats", &[56, 54, 55]).unwrap().as_slice(), &[54, 55, 56]);
        assert_eq!(seats("seats", &(0..10).collect::<Vec<_>>()).unwrap().len(), 10);
        assert!(invalid(seats("seats", &[])).starts_with("seats: "));
        invalid(seats("seats", &[1; 11]));
        assert!(invalid(seats("seats", &[4, 2, 4])).contains("seat 4 is named twice"));
        // The same seats in another order are the same request.
        assert_eq!(seats("seats", &[3, 1]).unwrap(), seats("seats", &[1, 3]).unwrap());
    }

    #[test]
    fn ids_quantities_events_and_currencies_are_checked() {
        invalid(show_id("show_id", 0));
        invalid(nonzero("hold_id", 0));
        assert_eq!(show_id("show_id", 3).unwrap(), ShowId(3));
        invalid(quantity("quantity", 0));
        invalid(quantity("quantity", 11));
        invalid(quantity("quantity", 256 + 2));
        assert_eq!(quantity("quantity", 10).unwrap(), 10);
        invalid(released_seats("seats", &[]));
        invalid(released_seats("seats", &[1, 1]));
        invalid(released_seats("seats", &(0..1_025).collect::<Vec<_>>()));
        assert_eq!(released_seats("seats", &[5, 3]).unwrap(), [3, 5]);
        assert_eq!(
            capacity_event_id("event_id", "e-1").unwrap(),
            capacity_event_id("event_id", "e-1").unwrap()
        );
        assert_ne!(
            capacity_event_id("event_id", "e-1").unwrap(),
            capacity_event_id("event_id", "e-2").unwrap()
        );
        invalid(capacity_event_id("event_id", ""));
        invalid(capacity_event_id("event_id", &"e".repeat(129)));
        invalid(capacity_event_id("event_id", "tab\there"));
        assert_eq!(currency("currency", "EUR").unwrap(), Currency(*b"EUR"));
        for bad in ["EURO", "eur", "EU", "€UR"] {
            invalid(currency("currency", bad));
        }
    }

    #[test]
    fn windows_prices_and_versions_are_checked() {
        assert_eq!(admission_window("window", 1).unwrap(), 1);
        assert_eq!(admission_window("window", ADMISSION_WINDOW_MAX).unwrap(), ADMISSION_WINDOW_MAX);
        assert!(invalid(admission_window("window", 0)).starts_with("window: "));
        invalid(admission_window("window", ADMISSION_WINDOW_MAX + 1));
        assert_eq!(prices("prices_minor", &[4_500, 0]).unwrap(), [4_500, 0]);
        invalid(prices("prices_minor", &[]));
        invalid(prices("prices_minor", &[1; SEAT_CLASSES_PER_SHOW_MAX + 1]));
        assert!(
            invalid(prices("prices_minor", &[1, SEAT_PRICE_MINOR_MAX + 1])).contains("exceeds")
        );
        assert_eq!(price_version("version", 2).unwrap(), 2);
        invalid(price_version("version", 0));
    }

    #[test]
    fn waitlist_rules_need_a_draw_time_exactly_for_a_lottery() {
        let lottery = waitlist_rules("rules", "lottery", Some(5), 2).unwrap();
        assert_eq!(lottery.ordering, WaitlistOrdering::Lottery { draw_at_ms: 5 });
        assert_eq!(lottery.wave_offers_max, 2);
        assert_eq!(waitlist_rules("", "bands", None, 0).unwrap().ordering, WaitlistOrdering::Bands);
        assert!(invalid(waitlist_rules("rules", "lottery", None, 0)).contains("rules.draw_at_ms"));
        assert!(invalid(waitlist_rules("", "fifo", Some(1), 0)).starts_with("draw_at_ms"));
        assert!(invalid(waitlist_rules("rules", "random", None, 0)).contains("rules.ordering"));
    }
}
