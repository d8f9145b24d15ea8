//! External ids of the REST API: `"<show_id>-<n>"` (hold `"41-7"` is hold 7 of show 41), one
//! format for holds, bookings, payments, admission tickets, waitlist entries and offers, whose
//! numbers are unique only within their show.
//!
//! Owns formatting and parsing, and only the canonical form parses (decimal, no sign, no
//! leading zeros, a non-zero show), so every entity has exactly one spelling. Never looks
//! anything up: a well-formed id of an unknown show is the service's `show_not_found` (404).

use statemachine::ShowId;

use crate::error::ApiError;

/// The longest external id accepted: two `u64` and the dash.
pub const EXTERNAL_ID_BYTES_MAX: usize = 20 + 1 + 20;

/// The external id of entity `number` of `show`.
pub fn format_id(show: ShowId, number: u64) -> String {
    format!("{}-{number}", show.0)
}

/// The show and entity number of an external id; `field` names it in the error.
///
/// # Errors
///
/// `InvalidArgument` (400) unless `text` is `<show_id>-<n>` in canonical decimal with a
/// non-zero show.
pub fn parse_id(field: &str, text: &str) -> Result<(ShowId, u64), ApiError> {
    let invalid = || {
        ApiError::InvalidArgument(format!(
            "{field}: expected `<show_id>-<number>` (for example `41-7`), got {:?}",
            truncate(text)
        ))
    };
    if text.len() > EXTERNAL_ID_BYTES_MAX {
        return Err(invalid());
    }
    let (show, number) = text.split_once('-').ok_or_else(invalid)?;
    let show = canonical_u64(show).filter(|show| *show != 0).ok_or_else(invalid)?;
    let number = canonical_u64(number).ok_or_else(invalid)?;
    Ok((ShowId(show), number))
}

/// A show id from a path segment or body: canonical decimal, non-zero.
///
/// # Errors
///
/// `InvalidArgument` (400) otherwise.
pub fn parse_show_id(field: &str, text: &str) -> Result<ShowId, ApiError> {
    canonical_u64(text).filter(|show| *show != 0).map(ShowId).ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "{field}: expected a non-zero decimal show id, got {:?}",
            truncate(text)
        ))
    })
}

/// A catalog record's id (venue, hall, event) in a path: non-zero canonical decimal.
///
/// # Errors
///
/// `InvalidArgument` (400) otherwise, naming `field`.
pub fn parse_record_id(field: &str, text: &str) -> Result<u64, ApiError> {
    canonical_u64(text).filter(|id| *id != 0).ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "{field}: expected a non-zero decimal id, got {:?}",
            truncate(text)
        ))
    })
}

/// A non-zero show id given as a number in a body.
///
/// # Errors
///
/// `InvalidArgument` (400) for 0.
pub fn show_id(field: &str, id: u64) -> Result<ShowId, ApiError> {
    if id == 0 {
        return Err(ApiError::InvalidArgument(format!("{field}: must be non-zero")));
    }
    Ok(ShowId(id))
}

/// `text` as a `u64` if it is written the one canonical way.
fn canonical_u64(text: &str) -> Option<u64> {
    let digits = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if !digits || leading_zero {
        return None;
    }
    text.parse().ok()
}

/// At most 64 characters of client input, for an error message.
fn truncate(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_in_their_one_canonical_form() {
        assert_eq!(format_id(ShowId(41), 7), "41-7");
        assert_eq!(parse_id("hold_id", "41-7").unwrap(), (ShowId(41), 7));
        assert_eq!(parse_id("hold_id", "1-0").unwrap(), (ShowId(1), 0));
        let max = format_id(ShowId(u64::MAX), u64::MAX);
        assert_eq!(parse_id("hold_id", &max).unwrap(), (ShowId(u64::MAX), u64::MAX));
    }

    #[test]
    fn malformed_ids_are_invalid_arguments() {
        for bad in [
            "",
            "41",
            "41-",
            "-7",
            "0-7",
            "41-07",
            "041-7",
            "+41-7",
            "41-+7",
            "41-7-1",
            "41_7",
            "4 1-7",
            "41-7 ",
            "a-7",
            "41-x",
            "18446744073709551616-1",
            "1-18446744073709551616",
            "٤-7",
        ] {
            let error = parse_id("hold_id", bad).unwrap_err();
            assert_eq!(error.code().name(), "invalid_argument", "{bad:?}");
            assert_eq!(error.http_status(), 400, "{bad:?}");
            assert!(error.to_string().starts_with("hold_id: "), "{error}");
        }
        let long = "1".repeat(1000);
        assert!(parse_id("hold_id", &long).unwrap_err().to_string().len() < 200);
    }

    #[test]
    fn show_ids_are_canonical_and_non_zero() {
        assert_eq!(parse_show_id("show_id", "41").unwrap(), ShowId(41));
        for bad in ["", "0", "00", "041", "-1", "x", "41-7", "18446744073709551616"] {
            assert_eq!(
                parse_show_id("show_id", bad).unwrap_err().code().name(),
                "invalid_argument"
            );
        }
        assert!(show_id("show_id", 0).is_err());
        assert_eq!(show_id("show_id", 3).unwrap(), ShowId(3));
    }
}
