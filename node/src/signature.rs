//! Signed webhooks, Stripe's scheme: the header value is `t=<unix seconds>,v1=<hex>`, where
//! `v1` is the lower-case hex HMAC-SHA256, under the webhook secret, of the bytes
//! `"<t>." + raw body`. Several `v1=` entries may be present (a sender rotating its secret signs
//! with both): any one that matches is enough. Entries of other schemes (`v0=`, ...) are
//! ignored. A timestamp further than the tolerance from the verifier's clock is refused, so a
//! captured delivery cannot be replayed later.
//!
//! Owns signing and verifying, and nothing else: it knows no transport (no HTTP types; the
//! REST handler maps a [`SignatureError`] to its 401, and the header name is only a constant
//! here), reads no clock (the caller passes the time: the node its environment's clock, so that
//! a simulated node verifies in simulated time) and never logs, so the secret and the expected
//! signature can never reach a log. Its users: the node's payment webhook endpoint
//! (`rest/webhook.rs`), `paysim` (which signs its deliveries with it), and the outbox dispatcher,
//! which signs its deliveries to HTTP sinks the same way.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature: `t=<unix seconds>,v1=<64 lower-case hex>`.
pub const SIGNATURE_HEADER: &str = "x-booking-signature";

/// How far, in seconds, a signature's timestamp may be from the verifier's clock, either way,
/// by default (`bookingd --webhook-tolerance-s`). Stripe's default. It absorbs honest clock
/// differences between sender and verifier, and the Jepsen suite's clock-skew nemesis, which
/// moves a node's clock by up to ±30 s; a delivery retried later is signed again with a fresh
/// timestamp, so only a replay of old bytes falls outside it.
pub const TOLERANCE_S_DEFAULT: u64 = 300;

/// The largest tolerance a node accepts, in seconds: a day. A larger one would keep captured
/// deliveries replayable for longer than any sender needs to retry a delivery.
pub const TOLERANCE_S_MAX: u64 = 86_400;

/// The most `v1=` entries one header may carry (a rotation needs two; more is not a sender
/// that means well, and each costs a comparison).
pub const SIGNATURES_PER_HEADER_MAX: usize = 8;

/// The skew the Jepsen suite's clock-skew nemesis puts on a node's clock at most, in seconds:
/// the default tolerance must absorb it, or a skewed node would refuse honest deliveries.
const JEPSEN_CLOCK_SKEW_S_MAX: u64 = 30;

const _: () = assert!(TOLERANCE_S_DEFAULT <= TOLERANCE_S_MAX);
const _: () = assert!(TOLERANCE_S_DEFAULT > JEPSEN_CLOCK_SKEW_S_MAX);

/// The length of a `v1` signature in hex digits (HMAC-SHA256 is 32 bytes).
const SIGNATURE_HEX_DIGITS: usize = 64;

/// Why a signature header was refused. The messages say what is wrong with the header and
/// never contain the secret or the expected signature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No header at all.
    #[error("required (t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.\" + body>)")]
    Missing,
    /// The old `sha256=<hex>` form, over the body alone, which had no replay protection.
    #[error(
        "the bare sha256=<hex> form is no longer accepted: sign as t=<unix seconds>,v1=<hex \
         HMAC-SHA256 of \"<t>.\" + body>"
    )]
    LegacyScheme,
    /// The header is not a list of `key=value` entries with one `t` and at least one well-formed
    /// `v1`.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// No `v1` entry matches the body under the secret.
    #[error("no v1 signature matches the body")]
    Mismatch,
    /// The signature matches, but its timestamp is too far from the verifier's clock: a replay
    /// of an old delivery, or a sender whose clock is far off.
    #[error(
        "timestamp {timestamp_s} is {distance_s} s {direction} this node's clock, outside the \
         tolerance of {tolerance_s} s (a replayed or stale delivery: sign it again)"
    )]
    OutsideTolerance {
        /// The header's `t`.
        timestamp_s: u64,
        /// How far it is from the verifier's clock, in seconds.
        distance_s: u64,
        /// `"behind"` (too old) or `"ahead of"` (too far in the future).
        direction: &'static str,
        /// The tolerance it exceeds.
        tolerance_s: u64,
    },
}

/// The signature header value of `body` under `secret`, timestamped `timestamp_s` (Unix
/// seconds, the signer's clock): `t=<timestamp_s>,v1=<64 lower-case hex>`.
pub fn sign(secret: &str, timestamp_s: u64, body: &[u8]) -> String {
    let timestamp = timestamp_s.to_string();
    let digest = signed_payload_mac(secret, &timestamp, body).finalize().into_bytes();
    let mut value = String::with_capacity(timestamp.len() + 6 + SIGNATURE_HEX_DIGITS);
    value.push_str("t=");
    value.push_str(&timestamp);
    value.push_str(",v1=");
    for byte in digest {
        value.push(hex_digit(byte >> 4));
        value.push(hex_digit(byte & 0x0f));
    }
    value
}

/// Checks `header` (the signature header's value, if the request had one) against `body` under
/// `secret`, at `now_s` (Unix seconds, the verifier's clock) with `tolerance_s` either way.
///
/// The signatures are checked before the timestamp, as Stripe does: a refusal that speaks of
/// the timestamp is then only ever given to a delivery that was genuinely signed, and so says
/// the truth (a replay, or a clock far off), never helps a forger. Each comparison is in
/// constant time.
///
/// # Errors
///
/// [`SignatureError`]: the header is missing, in the old `sha256=` form or malformed, no `v1`
/// entry matches, or the timestamp is outside the tolerance.
pub fn verify(
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    now_s: u64,
    tolerance_s: u64,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    if header.starts_with("sha256=") {
        return Err(SignatureError::LegacyScheme);
    }
    let parsed = Parsed::from_header(header)?;
    let expected = signed_payload_mac(secret, parsed.timestamp, body);
    // `verify_slice` compares in constant time; every candidate is compared, matched or not.
    let matched = parsed.signatures.iter().fold(false, |matched, candidate| {
        expected.clone().verify_slice(candidate).is_ok() | matched
    });
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    let distance_s = now_s.abs_diff(parsed.timestamp_s);
    if distance_s > tolerance_s {
        let direction = if parsed.timestamp_s < now_s { "behind" } else { "ahead of" };
        return Err(SignatureError::OutsideTolerance {
            timestamp_s: parsed.timestamp_s,
            distance_s,
            direction,
            tolerance_s,
        });
    }
    Ok(())
}

/// A header taken apart: the timestamp as it was written (it is signed as written) and as a
/// number, and every well-formed `v1` signature.
struct Parsed<'a> {
    timestamp: &'a str,
    timestamp_s: u64,
    signatures: Vec<[u8; 32]>,
}

impl<'a> Parsed<'a> {
    fn from_header(header: &'a str) -> Result<Parsed<'a>, SignatureError> {
        let mut timestamp = None;
        let mut signatures = Vec::new();
        let mut garbled_v1 = false;
        for entry in header.split(',') {
            let (key, value) = entry
                .trim()
                .split_once('=')
                .ok_or(SignatureError::Malformed("expected comma-separated key=value entries"))?;
            match key {
                "t" if timestamp.is_some() => {
                    return Err(SignatureError::Malformed("more than one t"));
                }
                "t" => timestamp = Some(value),
                "v1" => match decode_signature(value) {
                    Some(signature) => signatures.push(signature),
                    None => garbled_v1 = true,
                },
                // Other schemes (`v0` is Stripe's test-mode one) are not ours to judge.
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or(SignatureError::Malformed("no t=<unix seconds>"))?;
        // Digits only: `u64::from_str` would also take a leading `+`.
        let digits = timestamp.bytes().all(|byte| byte.is_ascii_digit());
        let timestamp_s = timestamp
            .parse::<u64>()
            .ok()
            .filter(|_| digits)
            .ok_or(SignatureError::Malformed("t: expected unix seconds"))?;
        if signatures.is_empty() {
            return Err(SignatureError::Malformed(if garbled_v1 {
                "v1: expected 64 hex digits"
            } else {
                "no v1=<hex> signature"
            }));
        }
        if signatures.len() > SIGNATURES_PER_HEADER_MAX {
            return Err(SignatureError::Malformed("too many v1 signatures"));
        }
        Ok(Parsed { timestamp, timestamp_s, signatures })
    }
}

/// The HMAC-SHA256 under `secret` of `parts` one after the other, ready to finalize or compare.
fn keyed(secret: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    for part in parts {
        mac.update(part);
    }
    mac
}

/// The HMAC of a signature: under `secret`, of `"<timestamp>." + body`, the timestamp as it is
/// written in the header.
fn signed_payload_mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    keyed(secret, &[timestamp.as_bytes(), b".", body])
}

/// 64 hex digits as 32 bytes (either case: the bytes are compared, not the text).
fn decode_signature(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != SIGNATURE_HEX_DIGITS {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high << 4 | low).ok()?;
    }
    Some(bytes)
}

fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).expect("a nibble is a hex digit")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test";
    const BODY: &[u8] = br#"{"event_id":"evt_1","payment_id":"41-8","result":"declined"}"#;
    const NOW_S: u64 = 1_800_000_000;

    fn check(header: &str, now_s: u64) -> Result<(), SignatureError> {
        verify(SECRET, Some(header), BODY, now_s, TOLERANCE_S_DEFAULT)
    }

    #[test]
    fn a_signature_verifies_its_body_under_its_secret_at_its_time() {
        let header = sign(SECRET, NOW_S, BODY);
        let (timestamp, signature) = header.split_once(",v1=").unwrap();
        assert_eq!(timestamp, format!("t={NOW_S}"));
        assert_eq!(signature.len(), 64);
        assert!(signature.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(check(&header, NOW_S), Ok(()));
        // Within the tolerance either way, edges included; whitespace around entries is fine.
        assert_eq!(check(&header, NOW_S + TOLERANCE_S_DEFAULT), Ok(()));
        assert_eq!(check(&header, NOW_S - TOLERANCE_S_DEFAULT), Ok(()));
        assert_eq!(check(&format!(" t={NOW_S} , v1={signature} "), NOW_S), Ok(()));
        assert_eq!(check(&format!("t={NOW_S},v1={}", signature.to_uppercase()), NOW_S), Ok(()));
    }

    fn hex(mac: Hmac<Sha256>) -> String {
        mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn v1_is_rfc_4231_hmac_sha256_over_the_timestamp_a_dot_and_the_body() {
        // RFC 4231, test case 2, through the same keyed hash `sign` uses.
        assert_eq!(
            hex(keyed("Jefe", &[b"what do ya want for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // The signed bytes are exactly "<t>." followed by the raw body.
        let joined = [format!("{NOW_S}.").as_bytes(), BODY].concat();
        let v1 = hex(keyed(SECRET, &[&joined]));
        assert_eq!(sign(SECRET, NOW_S, BODY), format!("t={NOW_S},v1={v1}"));
    }

    #[test]
    fn a_tampered_body_a_wrong_secret_or_another_timestamp_do_not_match() {
        let header = sign(SECRET, NOW_S, BODY);
        let tampered = br#"{"event_id":"evt_1","payment_id":"41-8","result":"succeeded"}"#;
        let refused = verify(SECRET, Some(&header), tampered, NOW_S, TOLERANCE_S_DEFAULT);
        assert_eq!(refused, Err(SignatureError::Mismatch));
        let refused = verify("whsec_other", Some(&header), BODY, NOW_S, TOLERANCE_S_DEFAULT);
        assert_eq!(refused, Err(SignatureError::Mismatch));
        // The timestamp is signed: moving it forward to dodge the tolerance breaks the match.
        let signature = header.split_once(",v1=").unwrap().1;
        assert_eq!(
            check(&format!("t={},v1={signature}", NOW_S + 1), NOW_S),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_is_refused_as_a_replay() {
        let old = sign(SECRET, NOW_S - TOLERANCE_S_DEFAULT - 1, BODY);
        let refused = check(&old, NOW_S).unwrap_err();
        assert_eq!(
            refused,
            SignatureError::OutsideTolerance {
                timestamp_s: NOW_S - TOLERANCE_S_DEFAULT - 1,
                distance_s: TOLERANCE_S_DEFAULT + 1,
                direction: "behind",
                tolerance_s: TOLERANCE_S_DEFAULT,
            }
        );
        assert!(refused.to_string().contains("outside the tolerance of 300 s"), "{refused}");
        let future = sign(SECRET, NOW_S + TOLERANCE_S_DEFAULT + 1, BODY);
        let refused = check(&future, NOW_S).unwrap_err();
        assert!(matches!(refused, SignatureError::OutsideTolerance { direction: "ahead of", .. }));
        // The tolerance is the caller's: a tighter one refuses what the default accepts.
        let a_minute_ago = sign(SECRET, NOW_S - 60, BODY);
        assert_eq!(check(&a_minute_ago, NOW_S), Ok(()));
        assert!(verify(SECRET, Some(&a_minute_ago), BODY, NOW_S, 30).is_err());
        // A clock near the epoch's start cannot underflow.
        assert!(check(&sign(SECRET, u64::MAX, BODY), 0).is_err());
        assert!(check(&sign(SECRET, 0, BODY), u64::MAX).is_err());
    }

    #[test]
    fn a_missing_or_garbled_header_is_refused() {
        let signature = sign(SECRET, NOW_S, BODY).split_once(",v1=").unwrap().1.to_owned();
        assert_eq!(verify(SECRET, None, BODY, NOW_S, 300), Err(SignatureError::Missing));
        for garbled in [
            "",
            "garbage",
            &format!("v1={signature}"),
            &format!("t=,v1={signature}"),
            &format!("t=-5,v1={signature}"),
            &format!("t=12x,v1={signature}"),
            &format!("t=+{NOW_S},v1={signature}"),
            &format!("t=99999999999999999999999,v1={signature}"),
            &format!("t={NOW_S},t={NOW_S},v1={signature}"),
            &format!("t={NOW_S}"),
            &format!("t={NOW_S},v0={signature}"),
            &format!("t={NOW_S},v1=zz"),
            &format!("t={NOW_S},v1={}", &signature[..63]),
            &format!("t={NOW_S},v1={signature}0"),
            &format!("t={NOW_S};v1={signature}"),
            &format!("t={NOW_S},v1={signature},"),
        ] {
            let refused = check(garbled, NOW_S).unwrap_err();
            assert!(matches!(refused, SignatureError::Malformed(_)), "{garbled:?}: {refused:?}");
        }
        let too_many = format!("t={NOW_S}{}", format!(",v1={signature}").repeat(9));
        assert_eq!(
            check(&too_many, NOW_S),
            Err(SignatureError::Malformed("too many v1 signatures"))
        );
    }

    #[test]
    fn one_matching_v1_among_several_is_enough_and_other_schemes_are_ignored() {
        let signature = sign(SECRET, NOW_S, BODY).split_once(",v1=").unwrap().1.to_owned();
        let rotated = sign("whsec_old", NOW_S, BODY).split_once(",v1=").unwrap().1.to_owned();
        for header in [
            format!("t={NOW_S},v1={rotated},v1={signature}"),
            format!("t={NOW_S},v1={signature},v1={rotated}"),
            format!("v1={rotated},t={NOW_S},v0=abc,v1={signature},scheme=whatever"),
            // A garbled entry beside a good one does not spoil it.
            format!("t={NOW_S},v1=zz,v1={signature}"),
        ] {
            assert_eq!(check(&header, NOW_S), Ok(()), "{header}");
        }
        assert_eq!(
            check(&format!("t={NOW_S},v1={rotated},v1={rotated}"), NOW_S),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn the_old_bare_sha256_form_is_refused_with_a_message_saying_so() {
        // Exactly what the old scheme sent: the HMAC of the body alone, under the right secret.
        let old = hex(keyed(SECRET, &[BODY]));
        let refused = check(&format!("sha256={old}"), NOW_S).unwrap_err();
        assert_eq!(refused, SignatureError::LegacyScheme);
        assert!(refused.to_string().contains("no longer accepted"), "{refused}");
        assert!(refused.to_string().contains("t=<unix seconds>,v1="), "{refused}");
    }

    #[test]
    fn no_message_carries_the_secret_or_the_expected_signature() {
        let header = sign(SECRET, NOW_S - 1_000, BODY);
        let expected_hex = header.split_once(",v1=").unwrap().1;
        for refused in [
            check(&header, NOW_S).unwrap_err(),
            check(&format!("t={NOW_S},v1={}", "0".repeat(64)), NOW_S).unwrap_err(),
            check("t=1", NOW_S).unwrap_err(),
        ] {
            let message = refused.to_string();
            assert!(!message.contains(SECRET) && !message.contains(expected_hex), "{message}");
        }
    }

    #[test]
    fn the_suites_sign_exactly_as_the_node_verifies() {
        // The test kit cannot import the node (it sees the cluster as a user does), so it has
        // its own signer: this keeps the two equal.
        assert_eq!(testkit::webhook::SIGNATURE_HEADER, SIGNATURE_HEADER);
        for (secret, timestamp_s, body) in [(SECRET, NOW_S, BODY), ("s", 0, &b""[..])] {
            assert_eq!(
                testkit::webhook::sign(secret, timestamp_s, body),
                sign(secret, timestamp_s, body)
            );
        }
    }
}
