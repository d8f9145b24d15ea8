//! The bytes of openraft's messages between nodes: one format byte, then postcard of openraft's
//! serde types.
//!
//! Owns the peer wire encoding, so a change to it (and its version bump) is made in one place.
//! Never touches a socket or a group: `network.rs` sends these bytes and `service.rs` receives
//! them. It is separate from the on-disk encoding (`codec.rs`): the two evolve independently,
//! and a node must refuse a peer's message in a format it does not read rather than guess.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The format of every peer message this build sends, and the only one it reads.
pub(crate) const WIRE_FORMAT_VERSION: u8 = 1;

/// Why a peer message could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// The message is empty: not even a format byte.
    #[error("{what}: empty message")]
    Empty {
        /// What was being read.
        what: &'static str,
    },
    /// The message is in a format this build does not read.
    #[error("{what}: wire format {found} is not supported (this build reads {supported})")]
    UnsupportedFormat {
        /// What was being read.
        what: &'static str,
        /// The format byte found.
        found: u8,
        /// The format this build reads.
        supported: u8,
    },
    /// The value could not be encoded.
    #[error("{what} does not encode: {source}")]
    Encode {
        /// What was being written.
        what: &'static str,
        /// The encoder's error.
        source: postcard::Error,
    },
    /// The bytes do not decode.
    #[error("{what} does not decode: {source}")]
    Decode {
        /// What was being read.
        what: &'static str,
        /// The decoder's error.
        source: postcard::Error,
    },
}

/// Encodes `value` as the format byte followed by postcard.
pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, WireError> {
    let bytes = vec![WIRE_FORMAT_VERSION];
    postcard::to_extend(value, bytes).map_err(|source| WireError::Encode { what, source })
}

/// Decodes bytes written by [`encode`], refusing another format and trailing bytes.
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, WireError> {
    let Some((&format, body)) = bytes.split_first() else {
        return Err(WireError::Empty { what });
    };
    if format != WIRE_FORMAT_VERSION {
        return Err(WireError::UnsupportedFormat {
            what,
            found: format,
            supported: WIRE_FORMAT_VERSION,
        });
    }
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|source| WireError::Decode { what, source })?;
    if !rest.is_empty() {
        return Err(WireError::Decode { what, source: postcard::Error::DeserializeBadEncoding });
    }
    Ok(value)
}
