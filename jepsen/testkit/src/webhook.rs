//! The payment provider's webhook signature, as every node checks it (Stripe's scheme, the
//! node's `signature.rs`): `t=<unix seconds>,v1=<lower-case hex HMAC-SHA256 of "<t>." + raw
//! body>` under the webhook secret (shared/DESIGN.md, "Outside the state machine").
//!
//! Owns only the signing, with the timestamp as a parameter: each suite signs by its own clock
//! (the Jepsen suite and the process tests by the machine's wall clock, [`wall_clock_s`]; the
//! simulator by simulated time, so that its simulated nodes accept the signature and a seed
//! replays exactly). Never sends anything (the Jepsen suite posts with reqwest, the simulator
//! over simulated TCP, the process tests with their REST client). The node's own unit tests
//! check that this signer and the node's agree.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header the signature goes in.
pub const SIGNATURE_HEADER: &str = "x-booking-signature";

/// The `X-Booking-Signature` value of `body` under `secret`, timestamped `timestamp_s` (Unix
/// seconds by the signer's clock): `t=<timestamp_s>,v1=<64 lower-case hex>`.
pub fn sign(secret: &str, timestamp_s: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{timestamp_s}.").as_bytes());
    mac.update(body);
    let hex: String =
        mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
    format!("t={timestamp_s},v1={hex}")
}

/// The machine's wall clock in Unix seconds: what a provider outside the simulator signs with.
/// A node under the clock-skew nemesis reads a clock up to 30 s off, which the nodes' webhook
/// tolerance (300 s by default) absorbs.
pub fn wall_clock_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::{sign, wall_clock_s};

    #[test]
    fn signatures_are_hmac_sha256_of_the_timestamp_a_dot_and_the_body_in_hex() {
        // RFC 4231's test case 2 (key "Jefe") cannot apply as it stands, since the signed bytes
        // now start with "<t>."; the expected value was computed independently, with Python's
        // hmac module: hmac.new(b"Jefe", b"1800000000.what do ya want for nothing?",
        // "sha256").hexdigest(). The node's tests check this signer against the node's own.
        assert_eq!(
            sign("Jefe", 1_800_000_000, b"what do ya want for nothing?"),
            "t=1800000000,v1=ab5a2e6f7ddd4f6783bae7a65618acf1b188b4ca973bbebbbdeb60024ee0f3f3"
        );
    }

    #[test]
    fn the_wall_clock_is_in_unix_seconds() {
        let before = wall_clock_s();
        assert!(before > 1_700_000_000, "past November 2023: {before}");
        assert!(wall_clock_s() >= before);
    }
}
