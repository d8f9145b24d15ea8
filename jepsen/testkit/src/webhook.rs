//! The payment provider's webhook signature, as every node checks it: `sha256=` and the
//! lowercase hex HMAC-SHA256 of the raw body under the webhook secret (shared/DESIGN.md,
//! "Outside the state machine").
//!
//! Owns only the signing; never sends anything (the Jepsen suite posts with reqwest, the
//! simulator over simulated TCP, the process tests with their REST client).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `X-Booking-Signature` value of `body` under `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    let hex: String =
        mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::sign;

    #[test]
    fn signatures_are_rfc_4231_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
