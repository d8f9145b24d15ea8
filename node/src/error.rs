//! The node's API errors and the one table that maps them to gRPC statuses (shared/DESIGN.md,
//! "Errors"). The HTTP mapping of the client API (issue 4) goes in this file too.
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
#[derive(Debug, thiserror::Error)]
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
            ApiError::Internal(_) => "internal",
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
