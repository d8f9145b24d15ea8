//! The on-disk layout: column family names, key encodings and the versioned value encoding.
//!
//! Owns every byte layout this crate writes to a storage engine (RocksDB, or the simulator's
//! `SimDisk`, which holds the same bytes), so a format change is made (and its version bumped) in
//! one place. Never touches an engine itself.
//!
//! Keys start with the group id in big-endian so that each group's records are one contiguous,
//! ordered range of a shared column family (no column family per group: creating one costs a
//! MANIFEST sync, which adds up to minutes of start-up with hundreds of groups).
//!
//! - `logs`: `(group BE u64, index BE u64)` → an openraft log entry.
//! - `meta`: `(group BE u64, name)` → the vote, the last purged log id or the committed log id.
//! - `snapshots`: `(group BE u64)` → the group's last persisted snapshot (metadata and bytes).
//!
//! Values are one format-version byte followed by postcard, except snapshots: the version byte,
//! the metadata's length (`u64` BE) and postcard, then the group's bytes as they are (they carry
//! their own magic and version, see `statemachine::SNAPSHOT_FORMAT_VERSION`). The serde derives of openraft's types
//! and of `statemachine::Command` define the postcard bytes, and serde derives are no stable disk
//! format: any change to them that changes the bytes must bump [`FORMAT_VERSION`] (a golden test
//! in this module pins the bytes of a fixed entry).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::StoreError;
use crate::types::{GroupId, SnapshotMeta};

/// A column family this crate creates, named by what it holds. Every backend of the storage seam
/// keeps the same three, each ordered by key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ColumnFamily {
    /// Every group's log entries.
    Logs,
    /// Every group's vote, last purged and committed log ids.
    Meta,
    /// Every group's last persisted snapshot.
    Snapshots,
}

impl ColumnFamily {
    /// Every column family, in the order they are opened; [`ColumnFamily::position`] indexes it.
    pub(crate) const ALL: [ColumnFamily; 3] =
        [ColumnFamily::Logs, ColumnFamily::Meta, ColumnFamily::Snapshots];

    /// The name RocksDB stores it under. It is part of the on-disk format: never change it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ColumnFamily::Logs => "logs",
            ColumnFamily::Meta => "meta",
            ColumnFamily::Snapshots => "snapshots",
        }
    }

    /// Its position in [`ColumnFamily::ALL`], for per-family arrays.
    pub(crate) fn position(self) -> usize {
        match self {
            ColumnFamily::Logs => 0,
            ColumnFamily::Meta => 1,
            ColumnFamily::Snapshots => 2,
        }
    }
}

/// The version of every value this build writes, and the only one it reads.
pub(crate) const FORMAT_VERSION: u8 = 1;

/// The length of a log key.
const LOG_KEY_LEN: usize = 16;

/// A record of a group in the `meta` column family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetaKey {
    /// The last saved vote.
    Vote,
    /// The last purged log id: entries at or below it are gone.
    LastPurged,
    /// The last committed log id openraft saved, re-applied on start-up.
    Committed,
}

impl MetaKey {
    fn name(self) -> &'static [u8] {
        match self {
            MetaKey::Vote => b"vote",
            MetaKey::LastPurged => b"last_purged",
            MetaKey::Committed => b"committed",
        }
    }

    /// What the record holds, for error messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            MetaKey::Vote => "vote",
            MetaKey::LastPurged => "last purged log id",
            MetaKey::Committed => "committed log id",
        }
    }
}

/// The key of the entry at `index` in `group`'s log.
pub(crate) fn log_key(group: GroupId, index: u64) -> [u8; LOG_KEY_LEN] {
    let mut key = [0; LOG_KEY_LEN];
    key[..8].copy_from_slice(&group.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The smallest key greater than the key of `index` and smaller than that of `index + 1`: an
/// exclusive bound that includes `index` without overflowing at `u64::MAX`.
pub(crate) fn log_key_after(group: GroupId, index: u64) -> [u8; LOG_KEY_LEN + 1] {
    let mut key = [0; LOG_KEY_LEN + 1];
    key[..LOG_KEY_LEN].copy_from_slice(&log_key(group, index));
    key
}

/// An exclusive bound above every key of `group`'s log.
pub(crate) fn log_keys_end(group: GroupId) -> [u8; LOG_KEY_LEN + 1] {
    log_key_after(group, u64::MAX)
}

/// The log index a log key of `group` names.
///
/// # Errors
///
/// `Corrupt` if the key is not a log key of `group`.
pub(crate) fn index_of_log_key(group: GroupId, key: &[u8]) -> Result<u64, StoreError> {
    if key.len() != LOG_KEY_LEN {
        return Err(StoreError::Corrupt(format!("log key of {} bytes", key.len())));
    }
    let mut group_bytes = [0; 8];
    let mut index_bytes = [0; 8];
    group_bytes.copy_from_slice(&key[..8]);
    index_bytes.copy_from_slice(&key[8..]);
    if u64::from_be_bytes(group_bytes) != group {
        return Err(StoreError::Corrupt(format!("log key of another group in group {group}")));
    }
    Ok(u64::from_be_bytes(index_bytes))
}

/// The key of a `meta` record of `group`.
pub(crate) fn meta_key(group: GroupId, record: MetaKey) -> Vec<u8> {
    let name = record.name();
    let mut key = Vec::with_capacity(8 + name.len());
    key.extend_from_slice(&group.to_be_bytes());
    key.extend_from_slice(name);
    key
}

/// The key of `group`'s snapshot.
pub(crate) fn snapshot_key(group: GroupId) -> [u8; 8] {
    group.to_be_bytes()
}

/// Encodes a value: the format version byte, then postcard.
///
/// # Errors
///
/// `Encode` if serde refuses the value.
pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_extend(value, vec![FORMAT_VERSION])
        .map_err(|source| StoreError::Encode { what, source })
}

/// Decodes a value written by [`encode`].
///
/// # Errors
///
/// `UnsupportedFormat` for another version byte (or none), `Decode` for bytes that do not decode
/// or are followed by trailing bytes.
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let Some((&version, payload)) = bytes.split_first() else {
        return Err(StoreError::Corrupt(format!("{what}: empty value")));
    };
    if version != FORMAT_VERSION {
        return Err(StoreError::UnsupportedFormat {
            what,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let (value, rest) =
        postcard::take_from_bytes(payload).map_err(|source| StoreError::Decode { what, source })?;
    if !rest.is_empty() {
        return Err(StoreError::Corrupt(format!("{what}: {} trailing bytes", rest.len())));
    }
    Ok(value)
}

/// Encodes a snapshot record: the version byte, the metadata's length and postcard, the data.
///
/// # Errors
///
/// `Encode` if serde refuses the metadata.
pub(crate) fn encode_snapshot_record(
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let meta_bytes = postcard::to_stdvec(meta)
        .map_err(|source| StoreError::Encode { what: SNAPSHOT_META, source })?;
    let mut bytes = Vec::with_capacity(1 + 8 + meta_bytes.len() + data.len());
    bytes.push(FORMAT_VERSION);
    bytes.extend_from_slice(&(meta_bytes.len() as u64).to_be_bytes());
    bytes.extend_from_slice(&meta_bytes);
    bytes.extend_from_slice(data);
    Ok(bytes)
}

/// Decodes a snapshot record written by [`encode_snapshot_record`] into its metadata and data.
///
/// # Errors
///
/// `UnsupportedFormat` for another version, `Corrupt` for a truncated record, `Decode` for
/// metadata that does not decode.
pub(crate) fn decode_snapshot_record(bytes: &[u8]) -> Result<(SnapshotMeta, Vec<u8>), StoreError> {
    let Some((&version, rest)) = bytes.split_first() else {
        return Err(StoreError::Corrupt("snapshot record: empty value".to_owned()));
    };
    if version != FORMAT_VERSION {
        return Err(StoreError::UnsupportedFormat {
            what: "snapshot record",
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let truncated = || StoreError::Corrupt(format!("snapshot record of {} bytes", bytes.len()));
    let (length, rest) = rest.split_first_chunk::<8>().ok_or_else(truncated)?;
    let meta_len = usize::try_from(u64::from_be_bytes(*length)).map_err(|_| truncated())?;
    if rest.len() < meta_len {
        return Err(truncated());
    }
    let (meta_bytes, data) = rest.split_at(meta_len);
    let meta = postcard::from_bytes(meta_bytes)
        .map_err(|source| StoreError::Decode { what: SNAPSHOT_META, source })?;
    Ok((meta, data.to_vec()))
}

const SNAPSHOT_META: &str = "snapshot metadata";

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;
    use openraft::vote::RaftLeaderIdExt;
    use statemachine::{Command, OperatorCommand, ShowId};

    use super::*;
    use crate::types::{Entry, LogId, Proposal, TypeConfig};

    #[test]
    fn log_keys_order_by_group_then_index() {
        let keys = [
            log_key(1, 0).to_vec(),
            log_key(1, 1).to_vec(),
            log_key(1, 255).to_vec(),
            log_key(1, 256).to_vec(),
            log_key(1, u64::MAX).to_vec(),
            log_keys_end(1).to_vec(),
            log_key(2, 0).to_vec(),
        ];
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "{keys:?}");
        assert!(log_key(1, 7).as_slice() < log_key_after(1, 7).as_slice());
        assert!(log_key_after(1, 7).as_slice() < log_key(1, 8).as_slice());
        assert_eq!(index_of_log_key(1, &log_key(1, 300)).ok(), Some(300));
        assert!(index_of_log_key(2, &log_key(1, 300)).is_err());
        assert!(index_of_log_key(1, b"short").is_err());
    }

    #[test]
    fn column_family_positions_index_all() {
        for (position, family) in ColumnFamily::ALL.into_iter().enumerate() {
            assert_eq!(family.position(), position, "{family:?}");
        }
    }

    #[test]
    fn meta_keys_of_two_groups_differ() {
        assert_ne!(meta_key(1, MetaKey::Vote), meta_key(2, MetaKey::Vote));
        assert_ne!(meta_key(1, MetaKey::Vote), meta_key(1, MetaKey::Committed));
    }

    #[test]
    fn a_value_of_another_version_is_refused() {
        let bytes = encode("log id", &5_u64).expect("encodes");
        assert_eq!(decode::<u64>("log id", &bytes).ok(), Some(5));
        let mut future = bytes.clone();
        future[0] = FORMAT_VERSION + 1;
        assert!(matches!(
            decode::<u64>("log id", &future),
            Err(StoreError::UnsupportedFormat { found, .. }) if found == FORMAT_VERSION + 1
        ));
        assert!(decode::<u64>("log id", &[]).is_err());
        let mut trailing = bytes;
        trailing.push(0);
        assert!(decode::<u64>("log id", &trailing).is_err());
    }

    #[test]
    fn a_snapshot_record_round_trips_and_a_truncated_one_is_refused() {
        let meta = SnapshotMeta::default();
        let bytes = encode_snapshot_record(&meta, b"group bytes").expect("encodes");
        let (decoded_meta, data) = decode_snapshot_record(&bytes).expect("decodes");
        assert_eq!(decoded_meta, meta);
        assert_eq!(data, b"group bytes");
        for length in 0..10 {
            assert!(decode_snapshot_record(&bytes[..length]).is_err(), "{length} bytes");
        }
    }

    /// Pins the stored bytes of one log entry. If this fails, a serde derive changed the log
    /// format: bump `FORMAT_VERSION` (and read the old version, or say why not), then update.
    #[test]
    fn log_entry_bytes_are_pinned() {
        let leader = openraft::alias::LeaderIdOf::<TypeConfig>::new_committed(3, 2);
        let entry: Entry = Entry::new_normal(
            LogId::new(leader, 9),
            Proposal {
                time_ms: 1_700_000_000_000,
                commands: vec![
                    Command::Tick,
                    Command::AckOutbox { up_to: 4 },
                    Command::Operator(OperatorCommand::OpenSales { show: ShowId(12) }),
                ],
            },
        );
        let bytes = encode("log entry", &entry).expect("encodes");
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        // Version 1, term 3, node 2, index 9, `Normal`, the time as a varint, 3 commands:
        // `Tick`, `AckOutbox { up_to: 4 }`, `Operator(OpenSales { show: 12 })`.
        assert_eq!(hex, "010302090180d095ffbc310303040401010c");
        assert_eq!(decode::<Entry>("log entry", &bytes).ok(), Some(entry));
    }
}
