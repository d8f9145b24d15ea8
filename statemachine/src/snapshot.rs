//! Snapshots: the whole group as bytes in a format versioned by us, and a digest of the state.
//!
//! Owns the encoding: a 4-byte magic, a little-endian `u16` format version, then the group in
//! postcard. The version is ours: any change to a persisted type that changes the bytes must bump
//! `SNAPSHOT_FORMAT_VERSION` (the golden test, `tests/golden.rs`, pins the bytes of a fixed
//! state so such a change cannot go unnoticed) and keep decoding the version before it, by a
//! migration to the current types (`snapshot/v2.rs` to `snapshot/v9.rs`). Invariants are checked before encoding
//! and again after decoding. Never trusts decoded bytes: garbage is an error, not a panic.

mod v2;
mod v3;
mod v4;
mod v5;
mod v6;
mod v7;
mod v8;
mod v9;

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use sha2::{Digest as _, Sha256};

use crate::ids::ShowId;
use crate::state::{Group, Show};

/// The current snapshot format version.
///
/// Version 2 added the metadata group's show placement. Version 3 moved the data of a state
/// into it (a processing hold's payment and deadline, a confirmed hold's booking, a payment's
/// refund work, a ticket's grant, an entry's offer, an accepted offer's hold), and keeps every
/// payment attempt of a hold; seat sets are checked on decode. Version 4 added the delivery of
/// the outbox to its sinks (each sink's position and dead letters) at the end of the group,
/// version 5 the leaders' state digests after it, version 6 each waitlist's policy (its rules,
/// their history, a lottery's draw) at the end of the waitlist, version 7 each offer's
/// promotion lag at the end of the offer, version 8 the metadata group's catalog at the end of
/// the group, version 9 the archived shows after it, version 10 the moves of shows in and out of
/// the group and its feature level after them. A group at feature level 0 is still written in
/// version 9 (`features.rs`).
pub const SNAPSHOT_FORMAT_VERSION: u16 = 10;

/// The oldest version this build decodes (migrating it to the current types).
pub const SNAPSHOT_FORMAT_VERSION_MIN: u16 = 2;

const MAGIC: [u8; 4] = *b"BKSM";
const HEADER_LEN: usize = MAGIC.len() + 2;

/// A SHA-256 digest of a group's encoded state: equal on replicas that applied the same log.
pub type Digest = [u8; 32];

/// Why bytes could not be restored as a group.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not start with the snapshot magic.
    #[error("not a booking snapshot (bad magic)")]
    BadMagic,
    /// The format version is not one this build reads.
    #[error(
        "snapshot format version {0} is not supported (this build reads \
         {SNAPSHOT_FORMAT_VERSION_MIN}..={SNAPSHOT_FORMAT_VERSION})"
    )]
    UnsupportedVersion(u16),
    /// The payload does not decode.
    #[error("snapshot payload does not decode: {0}")]
    Decode(#[from] postcard::Error),
    /// The payload decodes to a state that breaks an invariant.
    #[error("snapshot state is inconsistent: {0}")]
    Inconsistent(String),
}

impl Group {
    /// Encodes the whole group.
    ///
    /// # Panics
    ///
    /// If the group breaks an invariant (a bug: a broken state must not spread to peers).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        if let Err(violation) = self.check_invariants() {
            panic!("refusing to snapshot an inconsistent group: {violation}");
        }
        self.encode_unchecked()
    }

    /// The encoding of the group's feature level: at level 0, format 9, which the previous
    /// release reads (a group at level 0 has no move record: its commands are refused there);
    /// from level 1, the current format.
    fn encode_unchecked(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_LEN + 1024);
        bytes.extend_from_slice(&MAGIC);
        if self.feature_level < crate::FEATURE_LEVEL_MOVES {
            assert!(self.moves.is_empty(), "a group below the moves' feature level has moves");
            bytes.extend_from_slice(&9u16.to_le_bytes());
            return postcard::to_extend(&v9::GroupV9Ref::of(self), bytes)
                .expect("encoding to a vector cannot fail");
        }
        bytes.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        postcard::to_extend(self, bytes).expect("encoding to a vector cannot fail")
    }

    /// Restores a group from `encode_snapshot` bytes of this version or of an earlier one
    /// this build still reads (`SNAPSHOT_FORMAT_VERSION_MIN` and up), migrated to the current
    /// types.
    ///
    /// # Errors
    ///
    /// `SnapshotError` for a bad header, an undecodable payload (an invalid seat set among
    /// them), or an inconsistent state.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Group, SnapshotError> {
        if bytes.len() < HEADER_LEN || bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        let payload = &bytes[HEADER_LEN..];
        let mut group = match version {
            SNAPSHOT_FORMAT_VERSION => decode_all::<Group>(payload)?,
            9 => decode_all::<v9::GroupV9>(payload)?.migrate(),
            8 => decode_all::<v8::GroupV8>(payload)?.migrate(),
            7 => decode_all::<v7::GroupV7>(payload)?.migrate(),
            6 => decode_all::<v6::GroupV6>(payload)?.migrate(),
            5 => decode_all::<v5::GroupV5>(payload)?.migrate(),
            4 => decode_all::<v4::GroupV4>(payload)?.migrate(),
            3 => decode_all::<v3::GroupV3>(payload)?.migrate(),
            2 => decode_all::<v2::GroupV2>(payload)?
                .migrate()
                .map_err(SnapshotError::Inconsistent)?,
            _ => return Err(SnapshotError::UnsupportedVersion(version)),
        };
        if version < 6 {
            date_pools(&mut group);
        }
        group.check_invariants().map_err(SnapshotError::Inconsistent)?;
        Ok(group)
    }

    /// A digest of the whole state (the SHA-256 of its snapshot encoding).
    pub fn digest(&self) -> Digest {
        Sha256::digest(self.encode_unchecked()).into()
    }
}

/// What the last snapshot built from a group found of each show, for the next build to reuse.
///
/// Each show is kept as a weak reference to the `Arc` the build encoded: it keeps that
/// allocation (so its address names that version of the show and no other) but not the show,
/// so the first write after the build moves the show to a new allocation (`Arc::make_mut`
/// copies the struct, not its seats' or maps' chunks) and nothing else is copied for it. A show still
/// at the same address has not changed since: its invariant check stands and, once it was
/// found unchanged across two builds (not on sale any more, or quiet), its bytes are kept and
/// reused. So a build encodes and checks only the shows written to since the last one; on a
/// group with many shows most are over or not on sale. Keeping it costs the quiet shows' bytes.
#[derive(Default)]
pub struct ShowEncodings {
    /// Each show as the last build found it, and its bytes if it was unchanged then too.
    shows: BTreeMap<ShowId, (Weak<Show>, Option<Vec<u8>>)>,
    /// The length of the last encoding: the next one's first allocation.
    last_len: usize,
    /// Shows whose bytes the last build reused.
    pub reused: usize,
    /// Shows the last build encoded.
    pub encoded: usize,
}

impl Group {
    /// Exactly [`Group::encode_snapshot`]'s bytes, reusing what `encodings` kept of the shows
    /// that have not changed since the build that filled it (their invariants were checked
    /// then), and keeping what this build found in it for the next.
    ///
    /// # Panics
    ///
    /// If the group breaks an invariant, as [`Group::encode_snapshot`].
    pub fn encode_snapshot_reusing(&self, encodings: &mut ShowEncodings) -> Vec<u8> {
        if self.feature_level < crate::FEATURE_LEVEL_MOVES {
            // Format 9, written for the previous release: encoded whole, as it always was.
            *encodings = ShowEncodings::default();
            return self.encode_snapshot();
        }
        if let Err(violation) = self.check_invariants_reusing(encodings) {
            panic!("refusing to snapshot an inconsistent group: {violation}");
        }
        self.encode_reusing(encodings)
    }

    /// What an auditor concludes of the group: [`Group::check_invariants`] and
    /// [`Group::digest`], reusing what `encodings` kept of the shows unchanged since it was
    /// filled, as [`Group::encode_snapshot_reusing`] does. After a violation nothing is kept,
    /// so the next audit checks every show again.
    pub fn audit_reusing(&self, encodings: &mut ShowEncodings) -> (Result<(), String>, Digest) {
        if self.feature_level < crate::FEATURE_LEVEL_MOVES {
            *encodings = ShowEncodings::default();
            return (self.check_invariants(), self.digest());
        }
        let invariants = self.check_invariants_reusing(encodings);
        let digest = Sha256::digest(self.encode_reusing(encodings)).into();
        if invariants.is_err() {
            *encodings = ShowEncodings::default();
        }
        (invariants, digest)
    }

    /// [`Group::check_invariants`] but for the shows unchanged since `encodings` was filled:
    /// they were checked then.
    fn check_invariants_reusing(&self, encodings: &ShowEncodings) -> Result<(), String> {
        self.check_invariants_besides(&|id, show| encodings.unchanged(id, show))
    }

    /// The current format's bytes, each show's reused from `encodings` when it is still the
    /// `Arc` encoded there; keeps this encoding's shows in `encodings`.
    fn encode_reusing(&self, encodings: &mut ShowEncodings) -> Vec<u8> {
        // The fields in the order the derived encoding writes them (postcard: one after the
        // other, nothing between): a field added to `Group` does not compile here until it is
        // written in its place. The golden and fuzz tests compare the bytes with the derived.
        let Group {
            applied_index,
            log_time_ms,
            shows,
            outbox,
            audit,
            placement,
            delivery,
            digests,
            catalog,
            archived,
            moves,
            feature_level,
        } = self;
        let mut bytes =
            Vec::with_capacity(HEADER_LEN + encodings.last_len + encodings.last_len / 8);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        bytes = extend(&(applied_index, log_time_ms), bytes);
        // A map: its length, then each key and value.
        bytes = extend(&shows.len(), bytes);
        let (mut reused, mut encoded) = (0, 0);
        let mut kept = BTreeMap::new();
        for (id, show) in shows {
            bytes = extend(id, bytes);
            let unchanged = encodings.unchanged(id, show);
            let show_bytes = match encodings.shows.remove(id) {
                Some((_, Some(show_bytes))) if unchanged => {
                    reused += 1;
                    bytes.extend_from_slice(&show_bytes);
                    Some(show_bytes)
                }
                _ => {
                    encoded += 1;
                    let start = bytes.len();
                    bytes = extend(&**show, bytes);
                    // Unchanged across two builds: quiet, worth keeping.
                    unchanged.then(|| bytes[start..].to_vec())
                }
            };
            kept.insert(*id, (Arc::downgrade(show), show_bytes));
        }
        bytes = extend(
            &(outbox, audit, placement, delivery, digests, catalog, archived, moves, feature_level),
            bytes,
        );
        *encodings = ShowEncodings { shows: kept, last_len: bytes.len(), reused, encoded };
        bytes
    }
}

impl ShowEncodings {
    /// Whether `show` is still the version of show `id` the last build found.
    fn unchanged(&self, id: &ShowId, show: &Arc<Show>) -> bool {
        self.shows.get(id).is_some_and(|(seen, _)| std::ptr::eq(seen.as_ptr(), Arc::as_ptr(show)))
    }
}

impl std::fmt::Debug for ShowEncodings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShowEncodings")
            .field("shows", &self.shows.len())
            .field("last_len", &self.last_len)
            .field("reused", &self.reused)
            .field("encoded", &self.encoded)
            .finish()
    }
}

/// Appends `value`'s encoding to `bytes`.
fn extend<T: serde::Serialize + ?Sized>(value: &T, bytes: Vec<u8>) -> Vec<u8> {
    postcard::to_extend(value, bytes).expect("encoding to a vector cannot fail")
}

/// Dates the pooled seats of a group decoded from a version before 6, which kept no times: at
/// the group's log time, so that none looks older than it is.
fn date_pools(group: &mut Group) {
    let now_ms = group.log_time_ms;
    for show in group.shows.values_mut() {
        let waitlist = &mut Arc::make_mut(show).waitlist;
        waitlist.pooled_since = waitlist.pool.iter().map(|seat| (*seat, now_ms)).collect();
    }
}

/// Decodes a payload that must be exactly one `T`.
fn decode_all<'de, T: serde::Deserialize<'de>>(payload: &'de [u8]) -> Result<T, SnapshotError> {
    let (value, rest): (T, &[u8]) = postcard::take_from_bytes(payload)?;
    if !rest.is_empty() {
        return Err(SnapshotError::Inconsistent(format!("{} trailing bytes", rest.len())));
    }
    Ok(value)
}
