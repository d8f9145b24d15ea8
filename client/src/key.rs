//! Idempotency keys and session tokens: the request metadata every mutation and booking call
//! carries.
//!
//! Owns generating keys and checking the wire form of keys and tokens. Never stores keys:
//! a key lives as long as the logical call that made it (and in [`crate::Error::Unavailable`]
//! so that the caller can retry it).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use crate::error::{Error, Result};

/// Request metadata: the idempotency key of a mutation, and `Bearer <token>` (the node derives
/// the session from the token). The keys are the wire contract's (`proto`).
pub use proto::booking::metadata::{AUTHORIZATION, IDEMPOTENCY_KEY};

/// The longest idempotency key a node accepts, in characters.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;

/// Makes a fresh idempotency key: 128 random bits as 32 lower-case hex digits.
///
/// The bits come from the operating system (`getrandom`). Should that ever fail, they come
/// from two `RandomState` hashers (randomly seeded per process) over the clock and a counter,
/// which is still unique per call and unpredictable enough for a key that is not a secret.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fallback_bits().to_be_bytes();
    }
    let mut key = String::with_capacity(32);
    for byte in bytes {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// 128 bits from hashing the clock and a process-wide counter with two random seeds.
fn fallback_bits() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let half = || {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u64(count);
        u128::from(hasher.finish())
    };
    (half() << 64) | half()
}

/// Checks a caller's idempotency key: 1..=128 printable ASCII characters.
///
/// # Errors
///
/// [`Error::InvalidArgument`] otherwise.
pub fn validate_key(key: &str) -> Result<()> {
    let printable = key.bytes().all(|byte| (b' '..=b'~').contains(&byte));
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_LEN_MAX || !printable {
        return Err(Error::InvalidArgument(format!(
            "idempotency key must be 1..={IDEMPOTENCY_KEY_LEN_MAX} printable ASCII characters"
        )));
    }
    Ok(())
}

/// The metadata one logical call sends with every attempt: the same key each time.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallMetadata {
    /// The idempotency key, for mutations.
    key: Option<(String, AsciiMetadataValue)>,
    /// `Bearer <token>`, for booking calls.
    authorization: Option<AsciiMetadataValue>,
    /// An attempt made before this call (a `HoldMany` batch) may already have applied it.
    maybe_applied: bool,
}

impl CallMetadata {
    /// Metadata of a mutation: the caller's key (checked), or a fresh one.
    pub(crate) fn mutation(key: Option<&str>) -> Result<CallMetadata> {
        let key = match key {
            Some(key) => {
                validate_key(key)?;
                key.to_owned()
            }
            None => generate_key(),
        };
        let value = ascii(&key, "idempotency key")?;
        Ok(CallMetadata { key: Some((key, value)), authorization: None, maybe_applied: false })
    }

    /// Adds `authorization: Bearer <token>`.
    pub(crate) fn with_token(mut self, token: Option<&str>) -> Result<CallMetadata> {
        if let Some(token) = token {
            let token = token.trim();
            if token.is_empty() || !token.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err(Error::InvalidArgument(
                    "session token must be non-empty printable ASCII without spaces".into(),
                ));
            }
            self.authorization = Some(ascii(&format!("Bearer {token}"), "session token")?);
        }
        Ok(self)
    }

    /// The same metadata for a call that an earlier attempt outside it may already have
    /// applied: its outcome is unknown unless a node answers it by the rules.
    pub(crate) fn maybe_applied(self) -> CallMetadata {
        CallMetadata { maybe_applied: true, ..self }
    }

    /// Whether an attempt made before this call may already have applied it.
    pub(crate) fn is_maybe_applied(&self) -> bool {
        self.maybe_applied
    }

    /// The idempotency key, if this is a mutation.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_ref().map(|(key, _)| key.as_str())
    }

    /// Wraps a message in a request carrying this metadata.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        self.apply(request.metadata_mut());
        request
    }

    /// Writes this metadata into a request's map.
    fn apply(&self, metadata: &mut MetadataMap) {
        if let Some((_, value)) = &self.key {
            metadata.insert(IDEMPOTENCY_KEY, value.clone());
        }
        if let Some(value) = &self.authorization {
            metadata.insert(AUTHORIZATION, value.clone());
        }
    }
}

/// A metadata value, or the reason it cannot be one.
fn ascii(text: &str, what: &str) -> Result<AsciiMetadataValue> {
    text.parse().map_err(|_| Error::InvalidArgument(format!("{what} is not printable ASCII")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_32_hex_digits_and_distinct() {
        let keys: std::collections::BTreeSet<String> = (0..1000).map(|_| generate_key()).collect();
        assert_eq!(keys.len(), 1000);
        for key in &keys {
            assert_eq!(key.len(), 32);
            assert!(key.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            validate_key(key).unwrap();
        }
    }

    #[test]
    fn fallback_bits_differ_per_call() {
        assert_ne!(fallback_bits(), fallback_bits());
    }

    #[test]
    fn keys_are_checked() {
        validate_key("k").unwrap();
        validate_key(&"x".repeat(IDEMPOTENCY_KEY_LEN_MAX)).unwrap();
        validate_key("order 42/retry-1").unwrap();
        for bad in
            [String::new(), "x".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1), "é".into(), "a\nb".into()]
        {
            assert!(validate_key(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_attempt_carries_the_same_key_and_token() {
        let metadata = CallMetadata::mutation(None).unwrap().with_token(Some("t0k")).unwrap();
        let key = metadata.key().unwrap().to_owned();
        for _ in 0..3 {
            let request = metadata.request(());
            assert_eq!(request.metadata().get(IDEMPOTENCY_KEY).unwrap(), key.as_str());
            assert_eq!(request.metadata().get(AUTHORIZATION).unwrap(), "Bearer t0k");
        }
        let given = CallMetadata::mutation(Some("mine")).unwrap();
        assert_eq!(given.key(), Some("mine"));
    }

    #[test]
    fn reads_carry_no_key_and_bad_tokens_are_refused() {
        let read = CallMetadata::default().with_token(Some("abc")).unwrap();
        assert!(read.request(()).metadata().get(IDEMPOTENCY_KEY).is_none());
        assert!(CallMetadata::default().with_token(Some("a b")).is_err());
        assert!(CallMetadata::default().with_token(Some("  ")).is_err());
        assert!(CallMetadata::default().with_token(Some("ü")).is_err());
    }
}
