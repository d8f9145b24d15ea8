//! The wire contract: `.proto` files and the tonic/prost code generated from them, no logic.
//!
//! Owns the message and service definitions, the stable error codes ([`booking::ErrorCode`])
//! and the metadata keys every call and error carries ([`booking::metadata`]). Never encodes,
//! decodes or interprets a payload (the crates that speak a protocol do), never decides which
//! status an error gets (the node's one table does), and never imports a crate of this
//! workspace.
//!
//! - [`raft`]: the peer-to-peer Raft service, every message tagged with its group.
//! - [`booking`]: the client and operator API (`BookingService`, `AdminService`) every node
//!   serves on the same address; its errors carry a stable code and a leader hint in metadata.

/// `booking.raft.v1`: the Raft service nodes serve to their peers. Requests carry a group id
/// and openraft's message as opaque bytes, encoded by the `raft` crate.
pub mod raft {
    #![allow(missing_docs, clippy::doc_lazy_continuation)]
    tonic::include_proto!("booking.raft.v1");
}

/// `booking.v1`: the client and operator API every node serves. See `proto/booking.proto` for
/// the metadata (session token, idempotency key, error code, leader hint) every call carries.
pub mod booking {
    #![allow(missing_docs, clippy::doc_lazy_continuation)]
    tonic::include_proto!("booking.v1");

    /// The metadata keys (gRPC) and headers (REST) of the API, lower-case as HTTP/2 sends them.
    pub mod metadata {
        /// Request: `Bearer <token>`, a session token or the operator credential.
        pub const AUTHORIZATION: &str = "authorization";
        /// Request: the idempotency key of a mutation.
        pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
        /// Response: the stable machine code of every error, an [`super::ErrorCode`]'s name.
        pub const CODE: &str = "booking-code";
        /// Response: the node id of the relevant group's leader, when the node knows it.
        pub const LEADER_ID: &str = "booking-leader-id";
        /// Response: the address (host:port) of the relevant group's leader, when known.
        pub const LEADER_ADDR: &str = "booking-leader-addr";
    }

    impl ErrorCode {
        /// The code's wire name: `seat_unavailable` for [`ErrorCode::SeatUnavailable`].
        pub fn name(self) -> &'static str {
            self.into()
        }

        /// The code of a wire name; [`ErrorCode::Unspecified`] for a name this build does not
        /// know (a newer node's).
        pub fn from_name(name: &str) -> ErrorCode {
            name.parse().unwrap_or(ErrorCode::Unspecified)
        }

        /// Every code, in the order of `booking.proto`.
        pub fn all() -> impl Iterator<Item = ErrorCode> {
            <ErrorCode as strum::IntoEnumIterator>::iter()
        }
    }
}

/// The shared byte buffers of `bytes` fields mapped to them (`booking.v1.SeatMapReply`).
pub use prost::bytes::Bytes;

#[cfg(test)]
mod tests {
    use super::booking::ErrorCode;

    #[test]
    fn error_codes_are_named_as_the_proto_values_in_snake_case() {
        for code in ErrorCode::all() {
            let proto = code.as_str_name();
            let expected = proto.strip_prefix("ERROR_CODE_").unwrap().to_ascii_lowercase();
            assert_eq!(code.name(), expected);
            assert_eq!(ErrorCode::from_name(code.name()), code);
        }
        assert_eq!(ErrorCode::SeatUnavailable.name(), "seat_unavailable");
        assert_eq!(ErrorCode::from_name("a_code_of_the_future"), ErrorCode::Unspecified);
    }
}
