//! Snapshots: the whole group as bytes in a format versioned by us, and a digest of the state.
//!
//! Owns the encoding: a 4-byte magic, a little-endian `u16` format version, then the group in
//! postcard. The version is ours: any change to a persisted type that changes the bytes must bump
//! `SNAPSHOT_FORMAT_VERSION` (a golden test pins the bytes of a fixed state so such a change
//! cannot go unnoticed). Invariants are checked before encoding and again after decoding.
//! Never trusts decoded bytes: garbage is an error, not a panic.

use sha2::{Digest as _, Sha256};

use crate::state::Group;

/// The current snapshot format version.
///
/// Version 2 added the metadata group's show placement.
pub const SNAPSHOT_FORMAT_VERSION: u16 = 2;

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
        "snapshot format version {0} is not supported (this build reads {SNAPSHOT_FORMAT_VERSION})"
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

    fn encode_unchecked(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_LEN + 1024);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        postcard::to_extend(self, bytes).expect("encoding to a vector cannot fail")
    }

    /// Restores a group from `encode_snapshot` bytes.
    ///
    /// # Errors
    ///
    /// `SnapshotError` for a bad header, an undecodable payload, or an inconsistent state.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Group, SnapshotError> {
        if bytes.len() < HEADER_LEN || bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != SNAPSHOT_FORMAT_VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let (group, rest): (Group, &[u8]) = postcard::take_from_bytes(&bytes[HEADER_LEN..])?;
        if !rest.is_empty() {
            return Err(SnapshotError::Inconsistent(format!("{} trailing bytes", rest.len())));
        }
        group.check_invariants().map_err(SnapshotError::Inconsistent)?;
        Ok(group)
    }

    /// A digest of the whole state (the SHA-256 of its snapshot encoding).
    pub fn digest(&self) -> Digest {
        Sha256::digest(self.encode_unchecked()).into()
    }
}
