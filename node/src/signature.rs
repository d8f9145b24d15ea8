//! Placeholder until the signatures branch lands: Stripe-style `t=<unix s>,v1=<hex HMAC-SHA256
//! of "<t>." + body>` signing, used by outbox sink deliveries.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature.
pub const HEADER: &str = "x-booking-signature";

/// The signature header value of `body` under `secret` at `timestamp_s`.
pub fn sign(secret: &str, timestamp_s: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("t={timestamp_s},v1={hex}")
}
