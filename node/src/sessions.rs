//! Who is calling and under which idempotency key.
//!
//! Owns guest session tokens: a node issues `g2_<32 hex random>_<issued_at_s>_<32 hex tag>`, the
//! tag being an HMAC-SHA256 (cut to 128 bits) of the random part and the issue time under the
//! cluster's session secret, so any node verifies a token any node issued without shared state,
//! a client cannot pick a weak token of its own, and a token expires `ttl_s` after it was issued
//! (by the verifying node's clock). While the secret is rotated, tokens signed with the previous
//! one are accepted too (and new ones signed with the current one); tokens of the first format,
//! `g1_`, which never expired, are refused. The session id the state machine sees is a hash of the token: a session can
//! never be named in a request body. Also owns the operator credential and idempotency keys
//! (the state machine sees a 128-bit hash of the client's key), and priority-band claims: an
//! operator issues `c1_<show>_<band>_<expires_at_s>_<32 hex tag>` for one session, the tag an
//! HMAC-SHA256 (cut to 128 bits) of the show, band, expiry and session id under the same
//! secret, so a claim is good only for that buyer and show, until it expires, and a buyer
//! cannot name a band of their own.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use statemachine::{IdempotencyKey, SessionId, ShowId};

use crate::environment::Entropy;
use crate::error::ApiError;
use crate::names::hex;

/// The longest idempotency key accepted.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;
/// Random bytes in a session token (the issue asks for at least 128 bits).
pub const TOKEN_RANDOM_BYTES: usize = 16;

const TOKEN_PREFIX: &str = "g2_";
/// How long a session token is good for by default (a day).
pub const SESSION_TTL_S_DEFAULT: u64 = 24 * 3_600;
const CLAIM_PREFIX: &str = "c1_";
/// The largest integer every JSON reader carries exactly (2^53 - 1).
pub const JSON_SAFE_MAX: u64 = (1 << 53) - 1;
/// The longest a band claim may be valid for.
pub const CLAIM_VALID_S_MAX: u64 = 7 * 24 * 3_600;
/// How long a band claim is valid when the operator does not say.
pub const CLAIM_VALID_S_DEFAULT: u64 = 24 * 3_600;

/// Issues and verifies guest session tokens, and checks the operator credential.
#[derive(Clone)]
pub struct Sessions {
    secret: Secret,
    /// The secret being rotated out, whose tokens and claims are still accepted.
    previous: Option<Secret>,
    operator_token: String,
    /// Where the random part of a token comes from.
    entropy: Entropy,
    /// The clock tokens are issued and expire by.
    clock: raft::Clock,
    /// How long a token is good for.
    ttl_s: u64,
}

impl Sessions {
    /// Tokens under `secret` (the same on every node of a cluster) with the operating system's
    /// randomness; operator calls need `operator_token`.
    pub fn new(secret: &str, operator_token: &str) -> Sessions {
        Sessions::with_entropy(secret, operator_token, Entropy::system())
    }

    /// As [`Sessions::new`], with the random part of each token drawn from `entropy`.
    pub fn with_entropy(secret: &str, operator_token: &str, entropy: Entropy) -> Sessions {
        let operator_token = operator_token.to_owned();
        Sessions {
            secret: Secret::new(secret),
            previous: None,
            operator_token,
            entropy,
            clock: raft::Clock::system(),
            ttl_s: SESSION_TTL_S_DEFAULT,
        }
    }

    /// These sessions with tokens good for `ttl_s` seconds by `clock`.
    pub fn with_expiry(self, ttl_s: u64, clock: raft::Clock) -> Sessions {
        Sessions { ttl_s, clock, ..self }
    }

    /// These sessions also accepting the tokens and claims `previous` signed (a secret being
    /// rotated out).
    pub fn with_previous(self, previous: Option<&str>) -> Sessions {
        Sessions { previous: previous.map(Secret::new), ..self }
    }

    /// The current secret, then the previous one if any: what a tag may be made with.
    fn secrets(&self) -> impl Iterator<Item = &Secret> {
        std::iter::once(&self.secret).chain(self.previous.as_ref())
    }

    fn now_s(&self) -> u64 {
        self.clock.now_ms() / 1_000
    }

    /// A fresh guest session token.
    ///
    /// # Errors
    ///
    /// `Internal` if the entropy source has no randomness to give.
    pub fn issue(&self) -> Result<String, ApiError> {
        let mut random = [0u8; TOKEN_RANDOM_BYTES];
        self.entropy
            .fill(&mut random)
            .map_err(|error| ApiError::Internal(format!("no randomness: {error}")))?;
        let body = format!("{}_{}", hex(&random), self.now_s());
        let tag = self.secret.tag(&body);
        Ok(format!("{TOKEN_PREFIX}{body}_{tag}"))
    }

    /// A fresh random session id that names no session: what an erased session's records name
    /// instead (`EraseSession`).
    ///
    /// # Errors
    ///
    /// `Internal` if the entropy source has no randomness to give.
    pub fn pseudonym(&self) -> Result<SessionId, ApiError> {
        let mut random = [0u8; 16];
        self.entropy
            .fill(&mut random)
            .map_err(|error| ApiError::Internal(format!("no randomness: {error}")))?;
        Ok(SessionId(u128::from_le_bytes(random)))
    }

    /// A claim of priority `band` on `show`'s waitlist for `session`, good until
    /// `expires_at_s` (Unix seconds).
    pub fn issue_claim(
        &self,
        show: ShowId,
        session: SessionId,
        band: u8,
        expires_at_s: u64,
    ) -> String {
        let body = format!("{}_{band}_{expires_at_s}", show.0);
        let tag = self.secret.claim_tag(&body, session);
        format!("{CLAIM_PREFIX}{body}_{tag}")
    }

    /// The band a claim gives `session` on `show` at `now_s` (Unix seconds).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a string that is not a claim; `Forbidden` for a claim this cluster
    /// did not issue for this session and show, or one that expired.
    pub fn claimed_band(
        &self,
        claim: &str,
        show: ShowId,
        session: SessionId,
        now_s: u64,
    ) -> Result<u8, ApiError> {
        let malformed = || ApiError::InvalidArgument("claim: not a band claim".into());
        let rest = claim.strip_prefix(CLAIM_PREFIX).ok_or_else(malformed)?;
        let (body, tag) = rest.rsplit_once('_').ok_or_else(malformed)?;
        let mut fields = body.split('_');
        let (Some(claimed_show), Some(band), Some(expires_at_s), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed());
        };
        let (Ok(claimed_show), Ok(band), Ok(expires_at_s)) =
            (claimed_show.parse::<u64>(), band.parse::<u8>(), expires_at_s.parse::<u64>())
        else {
            return Err(malformed());
        };
        if !self.secrets().any(|secret| constant_time_eq(tag, &secret.claim_tag(body, session))) {
            return Err(ApiError::Forbidden(
                "claim: not issued by this cluster for this session".into(),
            ));
        }
        if claimed_show != show.0 {
            return Err(ApiError::Forbidden(format!("claim: issued for show {claimed_show}")));
        }
        if expires_at_s <= now_s {
            return Err(ApiError::Forbidden("claim: expired".into()));
        }
        Ok(band)
    }

    /// A random seed (for a lottery drawn without the operator's), below 2^53 so that every JSON
    /// reader carries it exactly.
    ///
    /// # Errors
    ///
    /// `Internal` if the entropy source has no randomness to give.
    pub fn random_seed(&self) -> Result<u64, ApiError> {
        let mut random = [0u8; 8];
        self.entropy
            .fill(&mut random)
            .map_err(|error| ApiError::Internal(format!("no randomness: {error}")))?;
        Ok(u64::from_le_bytes(random) & JSON_SAFE_MAX)
    }

    /// The session of an `Authorization` header value.
    ///
    /// # Errors
    ///
    /// `Unauthenticated` without a `Bearer` token this cluster issued.
    pub fn session(&self, authorization: Option<&str>) -> Result<SessionId, ApiError> {
        self.session_of_token(bearer(authorization)?)
    }

    /// The session of a bare token (as a `HoldMany` item carries it).
    ///
    /// # Errors
    ///
    /// `Unauthenticated` for a token this cluster did not issue.
    pub fn session_of_token(&self, token: &str) -> Result<SessionId, ApiError> {
        let token = token.trim();
        let unknown = || {
            ApiError::Unauthenticated(
                "authorization: not a session token of this cluster (POST /v1/sessions issues one)"
                    .into(),
            )
        };
        let (body, tag) = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.rsplit_once('_'))
            .ok_or_else(unknown)?;
        let (random, issued_s) = body.split_once('_').ok_or_else(unknown)?;
        let issued_s = issued_s.parse::<u64>().map_err(|_| unknown())?;
        if random.len() != 2 * TOKEN_RANDOM_BYTES
            || !self.secrets().any(|secret| constant_time_eq(tag, &secret.tag(body)))
        {
            return Err(unknown());
        }
        if issued_s.saturating_add(self.ttl_s) <= self.now_s() {
            return Err(ApiError::Unauthenticated(
                "authorization: the session expired; start a new one (POST /v1/sessions)".into(),
            ));
        }
        Ok(SessionId(hash128(b"session", token.as_bytes())))
    }

    /// Checks the operator credential of an `Authorization` header value.
    ///
    /// # Errors
    ///
    /// `Unauthenticated` without a bearer token, `Forbidden` with another one.
    pub fn operator(&self, authorization: Option<&str>) -> Result<(), ApiError> {
        let token = bearer(authorization)?;
        if constant_time_eq(token, &self.operator_token) {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this call needs the operator credential".into()))
        }
    }

    /// Who reads an entity that its owner and the operator may both read (a payment attempt):
    /// the session of a token this cluster issued, or else, `None`, the operator (which reads
    /// anything), checked the same way for both APIs.
    ///
    /// # Errors
    ///
    /// The session's error (`Unauthenticated`) when the value is neither a session token nor the
    /// operator credential: the buyer's error is the clearer one for a request that is neither.
    pub fn viewer(&self, authorization: Option<&str>) -> Result<Option<SessionId>, ApiError> {
        match self.session(authorization) {
            Ok(session) => Ok(Some(session)),
            Err(session_error) => match self.operator(authorization) {
                Ok(()) => Ok(None),
                Err(_) => Err(session_error),
            },
        }
    }
}

/// A session secret as the tags use it: HMAC-SHA256 keyed with it once, each state holding its
/// domain's prefix, so that verifying a token (once per `HoldMany` item) clones a keyed state
/// rather than hashing the key again.
#[derive(Clone)]
struct Secret {
    session: Hmac<Sha256>,
    claim: Hmac<Sha256>,
}

impl Secret {
    fn new(secret: &str) -> Secret {
        let keyed = |domain: &[u8]| {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
            mac.update(domain);
            mac
        };
        Secret { session: keyed(b"session\0"), claim: keyed(b"band-claim\0") }
    }

    /// The tag of a session token's `body` (random part and issue time).
    fn tag(&self, body: &str) -> String {
        let mut mac = self.session.clone();
        mac.update(body.as_bytes());
        hex(&mac.finalize().into_bytes()[..16])
    }

    /// The tag of a band claim's `body` for `session`.
    fn claim_tag(&self, body: &str, session: SessionId) -> String {
        let mut mac = self.claim.clone();
        mac.update(body.as_bytes());
        mac.update(&session.0.to_be_bytes());
        hex(&mac.finalize().into_bytes()[..16])
    }
}

fn bearer(authorization: Option<&str>) -> Result<&str, ApiError> {
    let header = authorization.ok_or_else(|| {
        ApiError::Unauthenticated("authorization: a Bearer token is required".into())
    })?;
    header
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| ApiError::Unauthenticated("authorization: expected `Bearer <token>`".into()))
}

/// The idempotency key of a mutation, from its header value.
///
/// # Errors
///
/// `InvalidArgument` when the key is missing, empty, too long or not printable ASCII.
pub fn idempotency_key(value: Option<&str>) -> Result<IdempotencyKey, ApiError> {
    let key = value.ok_or_else(|| {
        ApiError::InvalidArgument("Idempotency-Key: required on mutations".into())
    })?;
    let printable = key.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ');
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX || !printable {
        return Err(ApiError::InvalidArgument(format!(
            "Idempotency-Key: 1..={IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters"
        )));
    }
    Ok(IdempotencyKey(hash128(b"idempotency-key", key.as_bytes())))
}

/// The first 128 bits of SHA-256 over a domain tag and `bytes`.
pub fn hash128(domain: &[u8], bytes: &[u8]) -> u128 {
    let digest =
        Sha256::new().chain_update(domain).chain_update([0]).chain_update(bytes).finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_on_any_node_and_forged_ones_do_not() {
        let one = Sessions::new("secret", "op");
        let other = Sessions::new("secret", "op");
        let token = one.issue().unwrap();
        assert!(token.len() >= TOKEN_PREFIX.len() + 64);
        let header = format!("Bearer {token}");
        assert_eq!(one.session(Some(&header)).unwrap(), other.session(Some(&header)).unwrap());
        assert_ne!(one.issue().unwrap(), token);
        let foreign = Sessions::new("another secret", "op");
        assert_eq!(foreign.session(Some(&header)).unwrap_err().code().name(), "unauthenticated");
        let mut forged = token.clone();
        forged.replace_range(5..6, if &token[5..6] == "0" { "1" } else { "0" });
        assert!(one.session(Some(&format!("Bearer {forged}"))).is_err());
        assert!(one.session(Some("Bearer test-session-token-a")).is_err());
        assert!(one.session(None).is_err());
        assert!(one.session(Some(&format!("Basic {token}"))).is_err());
    }

    /// A clock standing at `now_s`, movable.
    fn clock_at(now_s: u64) -> (raft::Clock, std::sync::Arc<std::sync::atomic::AtomicU64>) {
        struct At(std::sync::Arc<std::sync::atomic::AtomicU64>);
        impl raft::WallClock for At {
            fn now_ms(&self) -> u64 {
                self.0.load(std::sync::atomic::Ordering::Relaxed) * 1_000
            }
        }
        let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(now_s));
        (raft::Clock::new(At(now.clone())), now)
    }

    #[test]
    fn a_token_expires_its_ttl_after_it_was_issued() {
        let (clock, now) = clock_at(1_000_000);
        let sessions = Sessions::new("secret", "op").with_expiry(3_600, clock);
        let header = format!("Bearer {}", sessions.issue().unwrap());
        assert!(sessions.session(Some(&header)).is_ok());
        now.store(1_000_000 + 3_599, std::sync::atomic::Ordering::Relaxed);
        assert!(sessions.session(Some(&header)).is_ok());
        now.store(1_000_000 + 3_600, std::sync::atomic::Ordering::Relaxed);
        let expired = sessions.session(Some(&header)).unwrap_err();
        assert_eq!(expired.code().name(), "unauthenticated");
        assert!(expired.to_string().contains("expired"), "{expired}");
        // Moving the issue time forward breaks the tag.
        let token = header.trim_start_matches("Bearer ");
        let (body, tag) = token.rsplit_once('_').unwrap();
        let (random, _) = body.split_once('_').unwrap();
        let younger = format!("Bearer {random}_{}_{tag}", 1_000_000 + 3_000);
        assert_eq!(sessions.session(Some(&younger)).unwrap_err().code().name(), "unauthenticated");
        // The first format, which never expired, is refused.
        let old = format!("Bearer g1_{}_{}", "ab".repeat(16), "00".repeat(16));
        assert!(sessions.session(Some(&old)).is_err());
    }

    #[test]
    fn a_rotated_secret_still_verifies_its_tokens_while_it_is_kept_as_the_previous_one() {
        let old = Sessions::new("old secret", "op");
        let token = format!("Bearer {}", old.issue().unwrap());
        let claim = old.issue_claim(ShowId(7), SessionId(11), 2, 1_000);
        let rotating = Sessions::new("new secret", "op").with_previous(Some("old secret"));
        let session = rotating.session(Some(&token)).unwrap();
        assert_eq!(session, old.session(Some(&token)).unwrap(), "the same session");
        assert_eq!(rotating.claimed_band(&claim, ShowId(7), SessionId(11), 999).unwrap(), 2);
        let fresh = format!("Bearer {}", rotating.issue().unwrap());
        assert!(old.session(Some(&fresh)).is_err(), "new tokens are signed with the new secret");
        let rotated = Sessions::new("new secret", "op");
        assert!(rotated.session(Some(&fresh)).is_ok());
        assert!(rotated.session(Some(&token)).is_err(), "the old secret is gone");
    }

    #[test]
    fn a_band_claim_is_good_for_its_session_and_show_until_it_expires() {
        let sessions = Sessions::new("secret", "op");
        let (show, buyer, other) = (ShowId(7), SessionId(11), SessionId(12));
        let claim = sessions.issue_claim(show, buyer, 2, 1_000);
        let another_node = Sessions::new("secret", "op");
        assert_eq!(another_node.claimed_band(&claim, show, buyer, 999).unwrap(), 2);
        let refused = |result: Result<u8, ApiError>| result.unwrap_err().code().name();
        assert_eq!(refused(sessions.claimed_band(&claim, show, other, 999)), "forbidden");
        assert_eq!(refused(sessions.claimed_band(&claim, ShowId(8), buyer, 999)), "forbidden");
        assert_eq!(refused(sessions.claimed_band(&claim, show, buyer, 1_000)), "forbidden");
        let foreign = Sessions::new("another secret", "op");
        assert_eq!(refused(foreign.claimed_band(&claim, show, buyer, 999)), "forbidden");
        // A buyer who edits the band (or the expiry) breaks the tag.
        let edited = claim.replacen("_2_", "_0_", 1);
        assert_eq!(refused(sessions.claimed_band(&edited, show, buyer, 999)), "forbidden");
        for malformed in ["", "c1_", "c1_7_2_tag", "g1_7_2_1000_tag", "c1_7_x_1000_tag"] {
            let error = refused(sessions.claimed_band(malformed, show, buyer, 999));
            assert_eq!(error, "invalid_argument", "{malformed}");
        }
    }

    #[test]
    fn tokens_draw_their_randomness_from_the_entropy_source() {
        let counter = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
        let entropy = Entropy::new(move |bytes| {
            bytes.fill(counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            Ok(())
        });
        let sessions = Sessions::with_entropy("secret", "op", entropy);
        let first = sessions.issue().unwrap();
        assert!(first.starts_with(&format!("{TOKEN_PREFIX}{}_", "00".repeat(TOKEN_RANDOM_BYTES))));
        let second = sessions.issue().unwrap();
        assert!(second.starts_with(&format!("{TOKEN_PREFIX}{}_", "01".repeat(TOKEN_RANDOM_BYTES))));
        let header = format!("Bearer {second}");
        assert!(Sessions::new("secret", "op").session(Some(&header)).is_ok());
        let dry = Sessions::with_entropy("secret", "op", Entropy::new(|_| Err("dry".into())));
        assert_eq!(dry.issue().unwrap_err().code().name(), "internal");
    }

    #[test]
    fn the_operator_credential_is_always_checked() {
        let closed = Sessions::new("s", "op-token");
        assert_eq!(closed.operator(None).unwrap_err().code().name(), "unauthenticated");
        assert_eq!(closed.operator(Some("Bearer nope")).unwrap_err().code().name(), "forbidden");
        assert!(closed.operator(Some("Bearer op-token")).is_ok());
    }

    #[test]
    fn a_viewer_is_a_session_or_else_the_operator() {
        let closed = Sessions::new("s", "op-token");
        let token = closed.issue().unwrap();
        let header = format!("Bearer {token}");
        assert_eq!(
            closed.viewer(Some(&header)).unwrap(),
            Some(closed.session(Some(&header)).unwrap())
        );
        assert_eq!(closed.viewer(Some("Bearer op-token")).unwrap(), None);
        // Neither: the buyer's error, never the operator's `forbidden`.
        assert_eq!(
            closed.viewer(Some("Bearer nope")).unwrap_err().code().name(),
            "unauthenticated"
        );
        assert_eq!(closed.viewer(None).unwrap_err().code().name(), "unauthenticated");
    }

    #[test]
    fn keys_are_required_and_bounded() {
        assert!(idempotency_key(Some("k-1")).is_ok());
        assert!(idempotency_key(None).is_err());
        assert!(idempotency_key(Some(&"k".repeat(129))).is_err());
        assert!(idempotency_key(Some("tab\tkey")).is_err());
    }
}
