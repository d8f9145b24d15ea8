//! The node's API errors and the one table that gives each its stable code, gRPC status and
//! HTTP status (shared/DESIGN.md, "Errors").
//!
//! Owns the table: every [`ApiError`] has an [`ErrorCode`] (the `proto` enum every client
//! shares); the gRPC code follows from the error code, and the HTTP status from the gRPC code,
//! except where HTTP has a more precise word (410 for an expired hold, grant or offer; 405, 413
//! and 415 for the HTTP framework's own refusals), so the two APIs cannot disagree. Also owns
//! the gRPC rendering of an error (its status and metadata: `booking-code` and the leader hint).
//! Never decides a rejection: those come from `statemachine` as `Rejection` values and are
//! only translated here.

use proto::booking::metadata;
use raft::NodeId;
use statemachine::Rejection;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

pub use proto::booking::ErrorCode;

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
    /// The node hosts no such group, no show is placed under that id, or no route has the path.
    #[error("{0}")]
    NotFound(String),
    /// The path exists but not with this HTTP method.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The body is larger than the route accepts.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body is not of a content type the route accepts.
    #[error("{0}")]
    UnsupportedMediaType(String),
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
    /// The node shed the request before running it (too many requests in flight); nothing
    /// changed. Retry after `retry_after_s`.
    #[error("{message}")]
    Overloaded {
        /// What was exceeded.
        message: String,
        /// When to retry, in seconds.
        retry_after_s: u64,
    },
    /// The node's disk is nearly full: it refuses writes (nothing changed) until there is
    /// room again.
    #[error("{0}")]
    DiskFull(String),
    /// A bug or a failed store on this node.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The error for a reply of the wrong kind: a bug, since each command has one kind of
    /// reply.
    pub fn unexpected(reply: statemachine::Reply) -> ApiError {
        ApiError::Internal(format!("unexpected reply {reply:?}"))
    }

    /// The stable machine code of the error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Rejected(rejection) => rejection_code(rejection),
            ApiError::NotLeader { leader: Some(_), .. } => ErrorCode::NotLeader,
            ApiError::NotLeader { leader: None, .. } => ErrorCode::NoLeader,
            ApiError::Unavailable(_) => ErrorCode::Unavailable,
            ApiError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            ApiError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ApiError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ApiError::MembershipRefused(_) => ErrorCode::MembershipRefused,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::RateLimited { .. } => ErrorCode::RateLimited,
            ApiError::Overloaded { .. } => ErrorCode::Overloaded,
            ApiError::DiskFull(_) => ErrorCode::DiskFull,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The gRPC status code: [`grpc_code`] of [`ApiError::code`].
    pub fn grpc_code(&self) -> Code {
        grpc_code(self.code())
    }

    /// The HTTP status: [`http_status`] of [`ApiError::code`].
    pub fn http_status(&self) -> u16 {
        http_status(self.code())
    }

    /// Seconds after which a retry makes sense, for 429 and 503 (`Retry-After`).
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after_s, .. }
            | ApiError::Overloaded { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::NotLeader { .. }
            | ApiError::Unavailable(_)
            | ApiError::Rejected(Rejection::ShowMoving | Rejection::ShowMoved { .. }) => Some(1),
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
            ApiError::Rejected(Rejection::WaitlistInUse { waiting }) => {
                json!({ "waiting": waiting })
            }
            ApiError::Rejected(Rejection::LotteryNotDue { draw_at_ms }) => {
                json!({ "draw_at_ms": draw_at_ms })
            }
            ApiError::Rejected(Rejection::LotteryAlreadyDrawn { seed }) => json!({ "seed": seed }),
            ApiError::Rejected(Rejection::ShowMoved { group }) => json!({ "group": group }),
            ApiError::Rejected(Rejection::FeatureNotEnabled { level, current }) => {
                json!({ "level": level, "current": current })
            }
            ApiError::Rejected(
                Rejection::CatalogNotFound { kind }
                | Rejection::CatalogExists { kind }
                | Rejection::CatalogRetired { kind },
            ) => json!({ "kind": kind.name() }),
            ApiError::NotLeader { group, leader } => json!({
                "group": group,
                "leader_id": leader.as_ref().map(|hint| hint.id),
                "leader_address": leader.as_ref().and_then(|hint| hint.address.clone()),
            }),
            _ => json!({}),
        }
    }
}

/// The gRPC status code of an error code: the one table of shared/DESIGN.md "Errors".
pub fn grpc_code(code: ErrorCode) -> Code {
    use ErrorCode::*;
    match code {
        InvalidArgument | SeatOutOfRange | UnsupportedMediaType => Code::InvalidArgument,
        Unauthenticated => Code::Unauthenticated,
        Forbidden | NotOwner => Code::PermissionDenied,
        NotFound | ShowNotFound | TicketNotFound | HoldNotFound | PaymentNotFound
        | BookingNotFound | EntryNotFound | OfferNotFound | SinkNotFound | DeadLetterNotFound
        | CatalogNotFound | ShowArchived => Code::NotFound,
        MethodNotAllowed => Code::Unimplemented,
        PayloadTooLarge | RateLimited | GroupFull | QueueFull | DiskFull => Code::ResourceExhausted,
        NotLeader | NoLeader | Unavailable | Overloaded | ShowMoving | ShowMoved => {
            Code::Unavailable
        }
        SeatUnavailable | OfferNotActive | IdempotencyKeyReused | ShowExists | CatalogExists
        | ArchiveChanged => Code::Aborted,
        // Expired is an answer about the hold, grant or offer, never a timeout of the call:
        // DEADLINE_EXCEEDED would make a client retry it.
        HoldExpired | GrantExpired | OfferExpired => Code::FailedPrecondition,
        MembershipRefused
        | ShowNotOnSale
        | ShowCancelled
        | PriceVersionMismatch
        | TooManyHolds
        | GrantRequired
        | TicketNotActive
        | AdmissionDisabled
        | AlreadyQueued
        | HoldNotActive
        | PaymentInProgress
        | PaymentAttemptsExhausted
        | PaymentMismatch
        | BookingNotCancellable
        | WaitlistDisabled
        | NotSoldOut
        | AlreadyOnWaitlist
        | EntryNotActive
        | WaitlistInUse
        | NotALottery
        | LotteryNotDue
        | LotteryAlreadyDrawn
        | CatalogRetired
        | ShowNotSettled
        | FeatureNotEnabled => Code::FailedPrecondition,
        Internal | Unspecified => Code::Internal,
    }
}

/// The HTTP status of an error code: the gRPC code's, in HTTP's words, except where HTTP has a
/// more precise one (410 Gone for an expired hold, grant or offer and an archived show; the
/// framework's 405, 413, 415; 507 Insufficient Storage for a node whose disk is nearly full).
pub fn http_status(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::HoldExpired
        | ErrorCode::GrantExpired
        | ErrorCode::OfferExpired
        | ErrorCode::ShowArchived => 410,
        ErrorCode::MethodNotAllowed => 405,
        ErrorCode::PayloadTooLarge => 413,
        ErrorCode::UnsupportedMediaType => 415,
        ErrorCode::DiskFull => 507,
        other => match grpc_code(other) {
            Code::InvalidArgument | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::Aborted | Code::AlreadyExists | Code::FailedPrecondition => 409,
            Code::ResourceExhausted => 429,
            Code::Unavailable => 503,
            _ => 500,
        },
    }
}

/// The error code of a business rejection.
fn rejection_code(rejection: &Rejection) -> ErrorCode {
    use Rejection::*;
    match rejection {
        InvalidArgument { .. } => ErrorCode::InvalidArgument,
        ShowNotFound => ErrorCode::ShowNotFound,
        ShowExists => ErrorCode::ShowExists,
        GroupFull => ErrorCode::GroupFull,
        ShowNotOnSale { .. } => ErrorCode::ShowNotOnSale,
        ShowCancelled => ErrorCode::ShowCancelled,
        SeatOutOfRange { .. } => ErrorCode::SeatOutOfRange,
        SeatUnavailable { .. } => ErrorCode::SeatUnavailable,
        PriceVersionMismatch { .. } => ErrorCode::PriceVersionMismatch,
        TooManyHolds { .. } => ErrorCode::TooManyHolds,
        GrantRequired => ErrorCode::GrantRequired,
        TicketNotFound => ErrorCode::TicketNotFound,
        GrantExpired => ErrorCode::GrantExpired,
        TicketNotActive { .. } => ErrorCode::TicketNotActive,
        AdmissionDisabled => ErrorCode::AdmissionDisabled,
        AlreadyQueued { .. } => ErrorCode::AlreadyQueued,
        QueueFull { .. } => ErrorCode::QueueFull,
        NotOwner => ErrorCode::NotOwner,
        HoldNotFound => ErrorCode::HoldNotFound,
        HoldExpired => ErrorCode::HoldExpired,
        HoldNotActive { .. } => ErrorCode::HoldNotActive,
        PaymentInProgress => ErrorCode::PaymentInProgress,
        PaymentAttemptsExhausted => ErrorCode::PaymentAttemptsExhausted,
        PaymentNotFound => ErrorCode::PaymentNotFound,
        PaymentMismatch { .. } => ErrorCode::PaymentMismatch,
        BookingNotFound => ErrorCode::BookingNotFound,
        BookingNotCancellable => ErrorCode::BookingNotCancellable,
        WaitlistDisabled => ErrorCode::WaitlistDisabled,
        NotSoldOut { .. } => ErrorCode::NotSoldOut,
        AlreadyOnWaitlist { .. } => ErrorCode::AlreadyOnWaitlist,
        EntryNotFound => ErrorCode::EntryNotFound,
        EntryNotActive { .. } => ErrorCode::EntryNotActive,
        OfferNotFound => ErrorCode::OfferNotFound,
        OfferExpired => ErrorCode::OfferExpired,
        OfferNotActive => ErrorCode::OfferNotActive,
        IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
        SinkNotFound => ErrorCode::SinkNotFound,
        DeadLetterNotFound { .. } => ErrorCode::DeadLetterNotFound,
        WaitlistInUse { .. } => ErrorCode::WaitlistInUse,
        NotALottery => ErrorCode::NotALottery,
        LotteryNotDue { .. } => ErrorCode::LotteryNotDue,
        LotteryAlreadyDrawn { .. } => ErrorCode::LotteryAlreadyDrawn,
        CatalogNotFound { .. } => ErrorCode::CatalogNotFound,
        CatalogExists { .. } => ErrorCode::CatalogExists,
        CatalogRetired { .. } => ErrorCode::CatalogRetired,
        ShowArchived => ErrorCode::ShowArchived,
        ShowNotSettled { .. } => ErrorCode::ShowNotSettled,
        ArchiveChanged => ErrorCode::ArchiveChanged,
        ShowMoving => ErrorCode::ShowMoving,
        ShowMoved { .. } => ErrorCode::ShowMoved,
        FeatureNotEnabled { .. } => ErrorCode::FeatureNotEnabled,
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

impl ApiError {
    /// The metadata a gRPC status of this error carries, key and value: its code's name, and
    /// for `not_leader` the leader's id and address when known (the address only when it is a
    /// valid metadata value). A `HoldMany` item's failure carries the same.
    pub fn grpc_metadata(&self) -> Vec<(&'static str, String)> {
        let mut entries = vec![(metadata::CODE, self.code().name().to_owned())];
        if let ApiError::NotLeader { leader: Some(leader), .. } = self {
            entries.push((metadata::LEADER_ID, leader.id.to_string()));
            if let Some(address) = leader
                .address
                .as_deref()
                .filter(|address| address.parse::<MetadataValue<tonic::metadata::Ascii>>().is_ok())
            {
                entries.push((metadata::LEADER_ADDR, address.to_owned()));
            }
        }
        entries
    }
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Status {
        let mut status = Status::new(error.grpc_code(), error.to_string());
        let metadata = status.metadata_mut();
        for (key, value) in error.grpc_metadata() {
            if let Ok(value) = value.parse() {
                metadata.insert(key, value);
            }
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use statemachine::{Currency, WaitlistEntryStatus};
    use statemachine::{EntryId, HoldStatus, Money, SeatSet, ShowStatus, TicketId, TicketStatus};

    use super::*;

    #[test]
    fn every_status_carries_its_code_and_a_known_leader() {
        let status = Status::from(ApiError::NotLeader {
            group: 3,
            leader: Some(LeaderHint { id: 2, address: Some("127.0.0.1:7102".into()) }),
        });
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.metadata().get(metadata::CODE).unwrap(), "not_leader");
        assert_eq!(status.metadata().get(metadata::LEADER_ID).unwrap(), "2");
        assert_eq!(status.metadata().get(metadata::LEADER_ADDR).unwrap(), "127.0.0.1:7102");
        let taken = Status::from(ApiError::from(Rejection::SeatUnavailable {
            seats: statemachine::SeatSet::one(1),
        }));
        assert_eq!(taken.code(), Code::Aborted);
        assert_eq!(taken.metadata().get(metadata::CODE).unwrap(), "seat_unavailable");
    }

    #[test]
    fn expired_is_gone_over_http_and_never_a_timeout_over_grpc() {
        for rejection in [Rejection::HoldExpired, Rejection::GrantExpired, Rejection::OfferExpired]
        {
            let error = ApiError::from(rejection);
            assert_eq!(error.grpc_code(), Code::FailedPrecondition, "{error}");
            assert_eq!(error.http_status(), 410, "{error}");
        }
        for code in ErrorCode::all() {
            assert_ne!(grpc_code(code), Code::DeadlineExceeded, "{code:?}");
        }
    }

    /// One of every rejection: the node's codes are the state machine's own names for them.
    fn every_rejection() -> Vec<Rejection> {
        let money = Money { amount_minor: 1, currency: Currency(*b"EUR") };
        vec![
            Rejection::InvalidArgument { message: Cow::Borrowed("x") },
            Rejection::ShowNotFound,
            Rejection::ShowExists,
            Rejection::GroupFull,
            Rejection::ShowNotOnSale { status: ShowStatus::Draft },
            Rejection::ShowCancelled,
            Rejection::SeatOutOfRange { seat: 1, seat_count: 1 },
            Rejection::SeatUnavailable { seats: SeatSet::one(1) },
            Rejection::PriceVersionMismatch { current: 1 },
            Rejection::TooManyHolds { max: 1 },
            Rejection::GrantRequired,
            Rejection::TicketNotFound,
            Rejection::GrantExpired,
            Rejection::TicketNotActive { state: TicketStatus::Left },
            Rejection::AdmissionDisabled,
            Rejection::AlreadyQueued { ticket: TicketId(1) },
            Rejection::QueueFull { what: Cow::Borrowed("lane") },
            Rejection::NotOwner,
            Rejection::HoldNotFound,
            Rejection::HoldExpired,
            Rejection::HoldNotActive { state: HoldStatus::Cancelled },
            Rejection::PaymentInProgress,
            Rejection::PaymentAttemptsExhausted,
            Rejection::PaymentNotFound,
            Rejection::PaymentMismatch { expected: money, got: money },
            Rejection::BookingNotFound,
            Rejection::BookingNotCancellable,
            Rejection::WaitlistDisabled,
            Rejection::NotSoldOut { free: 1 },
            Rejection::AlreadyOnWaitlist { entry: EntryId(1) },
            Rejection::EntryNotFound,
            Rejection::EntryNotActive { state: WaitlistEntryStatus::Left },
            Rejection::OfferNotFound,
            Rejection::OfferExpired,
            Rejection::OfferNotActive,
            Rejection::IdempotencyKeyReused,
            Rejection::SinkNotFound,
            Rejection::DeadLetterNotFound { event: statemachine::OutboxId(1) },
            Rejection::WaitlistInUse { waiting: 1 },
            Rejection::NotALottery,
            Rejection::LotteryNotDue { draw_at_ms: 1 },
            Rejection::LotteryAlreadyDrawn { seed: 1 },
            Rejection::CatalogNotFound { kind: statemachine::CatalogKind::Hall },
            Rejection::CatalogExists { kind: statemachine::CatalogKind::Venue },
            Rejection::CatalogRetired { kind: statemachine::CatalogKind::Event },
            Rejection::ShowArchived,
            Rejection::ShowNotSettled { what: "1 holds are live".into() },
            Rejection::ArchiveChanged,
            Rejection::ShowMoving,
            Rejection::ShowMoved { group: 2 },
            Rejection::FeatureNotEnabled { level: 1, current: 0 },
        ]
    }

    #[test]
    fn every_rejection_has_the_error_code_of_its_own_name() {
        let rejections = every_rejection();
        for rejection in &rejections {
            assert_eq!(rejection_code(rejection).name(), rejection.code(), "{rejection:?}");
        }
        let distinct: std::collections::BTreeSet<&str> =
            rejections.iter().map(Rejection::code).collect();
        assert_eq!(distinct.len(), rejections.len(), "one sample per rejection");
    }

    #[test]
    fn http_follows_grpc_except_where_http_has_a_more_precise_word() {
        let table = [
            (ErrorCode::InvalidArgument, Code::InvalidArgument, 400),
            (ErrorCode::Unauthenticated, Code::Unauthenticated, 401),
            (ErrorCode::NotOwner, Code::PermissionDenied, 403),
            (ErrorCode::HoldNotFound, Code::NotFound, 404),
            (ErrorCode::MethodNotAllowed, Code::Unimplemented, 405),
            (ErrorCode::SeatUnavailable, Code::Aborted, 409),
            (ErrorCode::TooManyHolds, Code::FailedPrecondition, 409),
            (ErrorCode::OfferExpired, Code::FailedPrecondition, 410),
            (ErrorCode::ShowArchived, Code::NotFound, 410),
            (ErrorCode::PayloadTooLarge, Code::ResourceExhausted, 413),
            (ErrorCode::UnsupportedMediaType, Code::InvalidArgument, 415),
            (ErrorCode::RateLimited, Code::ResourceExhausted, 429),
            (ErrorCode::Internal, Code::Internal, 500),
            (ErrorCode::NoLeader, Code::Unavailable, 503),
            (ErrorCode::ShowMoving, Code::Unavailable, 503),
            (ErrorCode::ShowMoved, Code::Unavailable, 503),
            (ErrorCode::DiskFull, Code::ResourceExhausted, 507),
        ];
        for (code, grpc, http) in table {
            assert_eq!((grpc_code(code), http_status(code)), (grpc, http), "{code:?}");
        }
    }
}
