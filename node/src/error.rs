//! The node's API errors and the one table that maps them to gRPC statuses and HTTP responses
//! (shared/DESIGN.md, "Errors").
//!
//! Owns the stable machine codes clients see (`booking-code` metadata) and the leader hint
//! (`booking-leader-id`, `booking-leader-addr`). Never decides a rejection: those come from
//! `statemachine` as `Rejection` values and are only translated here.

use raft::NodeId;
use statemachine::Rejection;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// Metadata key of the stable machine code on every error.
pub const CODE_KEY: &str = "booking-code";
/// Metadata key of the leader's node id, when a node that is not the leader knows it.
pub const LEADER_ID_KEY: &str = "booking-leader-id";
/// Metadata key of the leader's address (host:port of the same API).
pub const LEADER_ADDR_KEY: &str = "booking-leader-addr";

/// A group's leader, as a hint for the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderHint {
    /// Its node id.
    pub id: NodeId,
    /// Where it serves, if known.
    pub address: Option<String>,
}

/// Why an API call failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    /// The group's state machine rejected the command (nothing changed).
    #[error("{0}")]
    Rejected(Rejection),
    /// This node does not lead the group; retry on the leader with the same idempotency key.
    #[error("not the leader of group {group}")]
    NotLeader {
        /// The group.
        group: u64,
        /// The leader, when this node knows it.
        leader: Option<LeaderHint>,
    },
    /// The write's outcome is unknown (it may still be committed); retry with the same key.
    #[error("outcome unknown: {0}")]
    Unavailable(String),
    /// The request is malformed; nothing changed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The request carries no usable session token.
    #[error("{0}")]
    Unauthenticated(String),
    /// The node hosts no such group, or no show is placed under that id.
    #[error("{0}")]
    NotFound(String),
    /// A membership change was refused by Raft (for instance, a node that is not a learner).
    #[error("{0}")]
    MembershipRefused(String),
    /// The caller is authenticated but may not do this (an operator call without the operator
    /// credential).
    #[error("{0}")]
    Forbidden(String),
    /// The caller sends too much; retry after `retry_after_s`.
    #[error("{message}")]
    RateLimited {
        /// What was limited.
        message: String,
        /// When to retry, in seconds.
        retry_after_s: u64,
    },
    /// A bug or a failed store on this node.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The stable machine code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Rejected(rejection) => rejection.code(),
            ApiError::NotLeader { leader: Some(_), .. } => "not_leader",
            ApiError::NotLeader { leader: None, .. } => "no_leader",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::InvalidArgument(_) => "invalid_argument",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::NotFound(_) => "not_found",
            ApiError::MembershipRefused(_) => "membership_refused",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The HTTP status: the same table as [`ApiError::grpc_code`], in HTTP's words (410 for
    /// an expired hold, grant or offer; 409 for conflicts).
    pub fn http_status(&self) -> u16 {
        match self.grpc_code() {
            Code::InvalidArgument | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::Aborted | Code::AlreadyExists | Code::FailedPrecondition => 409,
            Code::DeadlineExceeded => 410,
            Code::ResourceExhausted => 429,
            Code::Unavailable => 503,
            _ => 500,
        }
    }

    /// Seconds after which a retry makes sense, for 429 and 503 (`Retry-After`).
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::NotLeader { .. } | ApiError::Unavailable(_) => Some(1),
            _ => None,
        }
    }

    /// Machine-readable details: the taken seats of a conflict, the current price version,
    /// the leader of a group.
    pub fn details(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            ApiError::Rejected(Rejection::SeatUnavailable { seats }) => json!({ "seats": seats }),
            ApiError::Rejected(Rejection::SeatOutOfRange { seat, seat_count }) => {
                json!({ "seat": seat, "seat_count": seat_count })
            }
            ApiError::Rejected(Rejection::PriceVersionMismatch { current }) => {
                json!({ "current_price_version": current })
            }
            ApiError::NotLeader { group, leader } => json!({
                "group": group,
                "leader_id": leader.as_ref().map(|hint| hint.id),
                "leader_address": leader.as_ref().and_then(|hint| hint.address.clone()),
            }),
            _ => json!({}),
        }
    }

    /// The gRPC status code: the one table of shared/DESIGN.md "Errors".
    pub fn grpc_code(&self) -> Code {
        match self {
            ApiError::Rejected(rejection) => rejection_code(rejection),
            ApiError::NotLeader { .. } | ApiError::Unavailable(_) => Code::Unavailable,
            ApiError::InvalidArgument(_) => Code::InvalidArgument,
            ApiError::Unauthenticated(_) => Code::Unauthenticated,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::MembershipRefused(_) => Code::FailedPrecondition,
            ApiError::Forbidden(_) => Code::PermissionDenied,
            ApiError::RateLimited { .. } => Code::ResourceExhausted,
            ApiError::Internal(_) => Code::Internal,
        }
    }
}

/// The gRPC code of a business rejection.
fn rejection_code(rejection: &Rejection) -> Code {
    use Rejection::*;
    match rejection {
        InvalidArgument { .. } | SeatOutOfRange { .. } => Code::InvalidArgument,
        NotOwner => Code::PermissionDenied,
        ShowNotFound | TicketNotFound | HoldNotFound | PaymentNotFound | BookingNotFound
        | EntryNotFound | OfferNotFound => Code::NotFound,
        SeatUnavailable { .. } | OfferNotActive | IdempotencyKeyReused | ShowExists => {
            Code::Aborted
        }
        HoldExpired | GrantExpired | OfferExpired => Code::DeadlineExceeded,
        GroupFull | QueueFull { .. } => Code::ResourceExhausted,
        ShowNotOnSale { .. }
        | ShowCancelled
        | PriceVersionMismatch { .. }
        | TooManyHolds { .. }
        | GrantRequired
        | TicketNotActive { .. }
        | AdmissionDisabled
        | AlreadyQueued { .. }
        | HoldNotActive { .. }
        | PaymentInProgress
        | PaymentAttemptsExhausted
        | PaymentMismatch { .. }
        | BookingNotCancellable
        | WaitlistDisabled
        | NotSoldOut { .. }
        | AlreadyOnWaitlist { .. }
        | EntryNotActive { .. } => Code::FailedPrecondition,
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        ApiError::Rejected(rejection)
    }
}

impl From<raft::StoreError> for ApiError {
    fn from(error: raft::StoreError) -> ApiError {
        ApiError::Internal(error.to_string())
    }
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Status {
        let mut status = Status::new(error.grpc_code(), error.to_string());
        let metadata = status.metadata_mut();
        metadata.insert(CODE_KEY, MetadataValue::from_static(error.code()));
        if let ApiError::NotLeader { leader: Some(leader), .. } = &error {
            metadata.insert(LEADER_ID_KEY, MetadataValue::from(leader.id));
            if let Some(value) = leader.address.as_deref().and_then(|address| address.parse().ok())
            {
                metadata.insert(LEADER_ADDR_KEY, value);
            }
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_carries_its_code_and_a_known_leader() {
        let status = Status::from(ApiError::NotLeader {
            group: 3,
            leader: Some(LeaderHint { id: 2, address: Some("127.0.0.1:7102".into()) }),
        });
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.metadata().get(CODE_KEY).unwrap(), "not_leader");
        assert_eq!(status.metadata().get(LEADER_ID_KEY).unwrap(), "2");
        assert_eq!(status.metadata().get(LEADER_ADDR_KEY).unwrap(), "127.0.0.1:7102");
        let taken =
            Status::from(ApiError::from(Rejection::SeatUnavailable { seats: Default::default() }));
        assert_eq!(taken.code(), Code::Aborted);
        assert_eq!(taken.metadata().get(CODE_KEY).unwrap(), "seat_unavailable");
        let expired = Status::from(ApiError::from(Rejection::HoldExpired));
        assert_eq!(expired.code(), Code::DeadlineExceeded);
    }
}
