//! Who is calling and under which idempotency key, from request metadata.
//!
//! Owns deriving the 128-bit session id from the bearer token and the 128-bit idempotency key
//! from the client's key (SHA-256, first 16 bytes): the state machine never sees a token, and a
//! session cannot be named in a request body. Issuing tokens is the client API's (issue 4).

use sha2::{Digest, Sha256};
use statemachine::{IdempotencyKey, SessionId};
use tonic::metadata::MetadataMap;

use crate::error::ApiError;

/// The shortest bearer token accepted.
pub const TOKEN_BYTES_MIN: usize = 16;
/// The longest bearer token accepted.
pub const TOKEN_BYTES_MAX: usize = 256;
/// The longest idempotency key accepted.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;

/// The session of the caller's bearer token.
///
/// # Errors
///
/// `Unauthenticated` without a `Bearer` token of acceptable length.
pub fn session(metadata: &MetadataMap) -> Result<SessionId, ApiError> {
    let header =
        metadata.get("authorization").and_then(|value| value.to_str().ok()).ok_or_else(|| {
            ApiError::Unauthenticated("authorization: a Bearer token is required".into())
        })?;
    let token = header
        .strip_prefix("Bearer ")
        .ok_or_else(|| {
            ApiError::Unauthenticated("authorization: expected `Bearer <token>`".into())
        })?
        .trim();
    if !(TOKEN_BYTES_MIN..=TOKEN_BYTES_MAX).contains(&token.len()) {
        return Err(ApiError::Unauthenticated(format!(
            "authorization: tokens have {TOKEN_BYTES_MIN}..={TOKEN_BYTES_MAX} characters"
        )));
    }
    Ok(SessionId(hash128(b"session", token.as_bytes())))
}

/// The idempotency key of a mutation.
///
/// # Errors
///
/// `InvalidArgument` when the key is missing, empty, too long or not printable ASCII.
pub fn idempotency_key(metadata: &MetadataMap) -> Result<IdempotencyKey, ApiError> {
    let key =
        metadata.get("idempotency-key").and_then(|value| value.to_str().ok()).ok_or_else(|| {
            ApiError::InvalidArgument("idempotency-key: required on mutations".into())
        })?;
    let printable = key.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ');
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX || !printable {
        return Err(ApiError::InvalidArgument(format!(
            "idempotency-key: 1..={IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters"
        )));
    }
    Ok(IdempotencyKey(hash128(b"idempotency-key", key.as_bytes())))
}

/// The first 128 bits of SHA-256 over a domain tag and `bytes`.
fn hash128(domain: &[u8], bytes: &[u8]) -> u128 {
    let digest =
        Sha256::new().chain_update(domain).chain_update([0]).chain_update(bytes).finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&'static str, &'static str)]) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (key, value) in pairs {
            map.insert(*key, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_session_comes_from_the_token_only() {
        let a = session(&metadata(&[("authorization", "Bearer 0123456789abcdef")])).unwrap();
        let b = session(&metadata(&[("authorization", "Bearer 0123456789abcdeg")])).unwrap();
        assert_ne!(a, b);
        assert!(session(&metadata(&[])).is_err());
        assert!(session(&metadata(&[("authorization", "Bearer short")])).is_err());
        assert!(session(&metadata(&[("authorization", "Basic 0123456789abcdef")])).is_err());
    }

    #[test]
    fn keys_are_required_and_bounded() {
        assert!(idempotency_key(&metadata(&[("idempotency-key", "k-1")])).is_ok());
        assert!(idempotency_key(&metadata(&[])).is_err());
        let long: &'static str = Box::leak("k".repeat(129).into_boxed_str());
        assert!(idempotency_key(&metadata(&[("idempotency-key", long)])).is_err());
    }
}
