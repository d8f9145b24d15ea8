//! The SDK's errors, and the one place a `tonic::Status` from a node is read: its gRPC code,
//! its `booking-code`, its leader hint, and whether a retry may help.
//!
//! Owns the mapping back from the node's error table (shared/DESIGN.md "Errors"). Never decides
//! when or where to retry (the call loop in `client.rs` does) and never retries by itself.

use std::time::Duration;

use tonic::{Code, Status};

pub use proto::booking::ErrorCode;
/// Response metadata: the stable machine code of every non-OK status a node sends
/// (`booking-code`), and the leader hint (`booking-leader-id`, `booking-leader-addr`): the wire
/// contract's keys (`proto`).
pub use proto::booking::metadata::{CODE as BOOKING_CODE, LEADER_ADDR, LEADER_ID};

/// What the SDK returns.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call failed.
///
/// Every variant that comes from a node keeps its gRPC code and, when the node sent one, its
/// `booking-code`: see [`Error::grpc_code`] and [`Error::booking_code`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A node answered with a status that a retry cannot change (seat taken, hold expired, not
    /// found, bad input, ...). The call had no effect, or (for a replayed idempotency key) the
    /// stored answer is this rejection.
    ///
    /// ```
    /// # use client::{Error, ErrorCode};
    /// # fn taken(error: &Error) -> bool {
    /// matches!(error, Error::Rejected { code: ErrorCode::SeatUnavailable, .. })
    /// # }
    /// ```
    #[error("rejected: {code_name}: {message}")]
    Rejected {
        /// The gRPC status code.
        status: Code,
        /// The node's `booking-code`, typed; [`ErrorCode::Unspecified`] for a code this SDK
        /// does not know (a newer node's, kept in `code_name`) or a status without one.
        code: ErrorCode,
        /// The code as sent (`seat_unavailable`, `hold_expired`, ...); when a status carries
        /// none (a proxy or an older node), the snake_case name of the gRPC code.
        code_name: String,
        /// The node's human-readable message.
        message: String,
    },
    /// No node answered the call within the retry budget (no leader, nodes down, deadlines).
    ///
    /// For a mutation, [`Error::is_outcome_unknown`] says whether an attempt may have been
    /// applied; retrying with `idempotency_key` is safe either way and returns the stored
    /// outcome if it was.
    #[error(
        "unavailable after {attempts} attempt(s) in {elapsed:?}{}: last error: {}{message}",
        if *outcome_unknown { " (outcome unknown)" } else { "" },
        booking_code.as_deref().map(|c| format!("{c}: ")).unwrap_or_default()
    )]
    Unavailable {
        /// How many calls were made.
        attempts: u32,
        /// The time spent, sleeps included.
        elapsed: Duration,
        /// The gRPC code of the last failed attempt.
        status: Code,
        /// The `booking-code` of the last failed attempt, if the node sent one.
        booking_code: Option<String>,
        /// The message of the last failed attempt.
        message: String,
        /// Whether a mutation may have been applied: some attempt reached a node and ended
        /// without a definite answer (a deadline, a dropped connection, an unknown outcome).
        /// Always false for reads.
        outcome_unknown: bool,
        /// The idempotency key every attempt carried (mutations only): retry with it.
        idempotency_key: Option<String>,
    },
    /// One node could not be reached or did not answer (calls addressed to a single node, such
    /// as [`crate::Client::status`], are not retried elsewhere).
    #[error("{address}: {message}")]
    Transport {
        /// The node's address.
        address: String,
        /// The gRPC code tonic reported (`UNAVAILABLE` for a refused connection,
        /// `DEADLINE_EXCEEDED` when the call timed out, ...).
        status: Code,
        /// What went wrong.
        message: String,
    },
    /// The caller's input cannot be sent (a malformed address, key or token); nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The gRPC code of the status behind this error; `None` for errors raised before sending.
    pub fn grpc_code(&self) -> Option<Code> {
        match self {
            Error::Rejected { status, .. }
            | Error::Unavailable { status, .. }
            | Error::Transport { status, .. } => Some(*status),
            Error::InvalidArgument(_) => None,
        }
    }

    /// The node's `booking-code` as sent, when the error came with one (for a rejection
    /// without one, the gRPC code's name).
    pub fn booking_code(&self) -> Option<&str> {
        match self {
            Error::Rejected { code_name, .. } => Some(code_name),
            Error::Unavailable { booking_code, .. } => booking_code.as_deref(),
            Error::Transport { .. } | Error::InvalidArgument(_) => None,
        }
    }

    /// The node's `booking-code`, typed, when the error came with one this SDK knows.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(ErrorCode::from_name(self.booking_code()?))
            .filter(|code| *code != ErrorCode::Unspecified)
    }

    /// Whether a mutation may have been applied although the call failed (see
    /// [`Error::Unavailable`]).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::Unavailable { outcome_unknown: true, .. })
    }

    /// Builds the error of a non-retryable status.
    pub(crate) fn rejected(status: &Status) -> Error {
        let sent = booking_code(status);
        Error::Rejected {
            status: status.code(),
            code: sent.map_or(ErrorCode::Unspecified, ErrorCode::from_name),
            code_name: sent.map_or_else(|| code_name(status.code()).into(), Into::into),
            message: describe(status),
        }
    }
}

/// The leader a node pointed to in an error's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaderHint {
    /// The leader's node id, when sent.
    pub(crate) node_id: Option<u64>,
    /// The leader's address, normalized to host:port.
    pub(crate) address: String,
}

/// What an attempt's failure means for the call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A retry cannot help: the call fails with this status.
    Final,
    /// Another attempt may succeed: at the hinted leader if there is a hint, else at the next
    /// known node after a backoff.
    Retry {
        /// Where the node said the leader is.
        hint: Option<LeaderHint>,
        /// Whether the failed attempt may have been applied.
        delivery: Delivery,
    },
}

/// Whether a failed attempt of a mutation may have been applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The request never left this process (the connection could not be made).
    NotSent,
    /// A node answered that it did not propose it (`not_leader`, `no_leader`, `overloaded`).
    NotApplied,
    /// It may have been applied (a deadline, a dropped connection, an unknown outcome).
    Unknown,
}

/// Whether a final status is a node's refusal made before its rules judged the call: a full
/// disk, a rate limit, credentials, a route or a body the node would not take, an internal
/// error, or a status no node's error table made. Such an answer says nothing about an earlier
/// attempt of the same call.
pub(crate) fn refused_before_rules(status: &Status) -> bool {
    match booking_code(status) {
        None => true,
        Some(code) => matches!(
            ErrorCode::from_name(code),
            ErrorCode::DiskFull
                | ErrorCode::RateLimited
                | ErrorCode::Unauthenticated
                | ErrorCode::Forbidden
                | ErrorCode::NotFound
                | ErrorCode::MethodNotAllowed
                | ErrorCode::PayloadTooLarge
                | ErrorCode::UnsupportedMediaType
                | ErrorCode::Internal
                | ErrorCode::Unspecified
        ),
    }
}

/// Decides whether a failed attempt is retried.
///
/// A status carrying a `booking-code` is the node's answer: only `UNAVAILABLE` is retried. A
/// status without one did not come from a node's error table: `UNAVAILABLE`, `CANCELLED`,
/// `DEADLINE_EXCEEDED` and `UNKNOWN` are what tonic reports for refused or dropped connections
/// and deadlines, and are retried, and so is `INTERNAL` caused by the connection's HTTP/2
/// (tonic's name for a stream cut by a node's GOAWAY as it shuts down for a restart: "h2
/// protocol error: ... not a result of an error"); anything else (`UNIMPLEMENTED` from a
/// mismatched server, ...) is final.
pub(crate) fn classify(status: &Status) -> Verdict {
    match booking_code(status) {
        Some(code) if status.code() == Code::Unavailable => Verdict::Retry {
            hint: leader_hint(status),
            delivery: match ErrorCode::from_name(code) {
                // A show moving or moved is refused by the state machine, changing nothing.
                ErrorCode::NotLeader
                | ErrorCode::NoLeader
                | ErrorCode::Overloaded
                | ErrorCode::ShowMoving
                | ErrorCode::ShowMoved => Delivery::NotApplied,
                _ => Delivery::Unknown,
            },
        },
        Some(_) => Verdict::Final,
        None => match status.code() {
            Code::Internal if is_http2_error(status) => {
                Verdict::Retry { hint: None, delivery: Delivery::Unknown }
            }
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::Unknown => {
                Verdict::Retry {
                    hint: None,
                    delivery: if is_connect_error(status) {
                        Delivery::NotSent
                    } else {
                        Delivery::Unknown
                    },
                }
            }
            _ => Verdict::Final,
        },
    }
}

/// The `booking-code` of a status, if present and readable.
pub(crate) fn booking_code(status: &Status) -> Option<&str> {
    let code = status.metadata().get(BOOKING_CODE)?.to_str().ok()?.trim();
    (!code.is_empty()).then_some(code)
}

/// The leader hint of a status: `booking-leader-addr` (required) and `booking-leader-id`.
pub(crate) fn leader_hint(status: &Status) -> Option<LeaderHint> {
    let metadata = status.metadata();
    let address = metadata.get(LEADER_ADDR)?.to_str().ok()?;
    let address = crate::address::normalize(address).ok()?;
    let node_id = metadata
        .get(LEADER_ID)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .filter(|id| *id != 0);
    Some(LeaderHint { node_id, address })
}

/// Whether tonic failed to open the connection (the request was never sent).
fn is_connect_error(status: &Status) -> bool {
    caused_by::<tonic::ConnectError>(status)
}

/// Whether the connection's HTTP/2 layer caused the status (a GOAWAY, a reset), not the node.
fn is_http2_error(status: &Status) -> bool {
    caused_by::<h2::Error>(status)
}

/// Whether `status` or one of the causes tonic keeps behind it is an `E`.
fn caused_by<E: std::error::Error + 'static>(status: &Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(error) = source {
        if error.is::<E>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// A status's message followed by the causes tonic keeps behind it ("tcp connect error:
/// Connection refused (os error 111)"), each cause only once.
pub(crate) fn describe(status: &Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        let cause = error.to_string();
        if !cause.is_empty() && !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = error.source();
    }
    text
}

/// The snake_case name of a gRPC code, used when a status carries no `booking-code`.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status as a node sends it: a code, a message and `(key, value)` metadata.
    fn status(code: Code, metadata: &[(&'static str, &str)]) -> Status {
        let mut status = Status::new(code, "message");
        for (key, value) in metadata {
            status.metadata_mut().insert(*key, value.parse().unwrap());
        }
        status
    }

    #[test]
    fn not_leader_with_hint_is_retried_at_the_hint() {
        let status = status(
            Code::Unavailable,
            &[(BOOKING_CODE, "not_leader"), (LEADER_ID, "2"), (LEADER_ADDR, "127.0.0.1:7102")],
        );
        assert_eq!(
            classify(&status),
            Verdict::Retry {
                hint: Some(LeaderHint { node_id: Some(2), address: "127.0.0.1:7102".into() }),
                delivery: Delivery::NotApplied,
            }
        );
    }

    #[test]
    fn hint_address_with_scheme_is_normalized() {
        let status = status(
            Code::Unavailable,
            &[(BOOKING_CODE, "not_leader"), (LEADER_ADDR, "http://10.0.0.3:7103/")],
        );
        let hint = leader_hint(&status).unwrap();
        assert_eq!(hint, LeaderHint { node_id: None, address: "10.0.0.3:7103".into() });
    }

    #[test]
    fn no_leader_without_hint_is_retried_elsewhere() {
        let status = status(Code::Unavailable, &[(BOOKING_CODE, "no_leader"), (LEADER_ID, "0")]);
        assert_eq!(
            classify(&status),
            Verdict::Retry { hint: None, delivery: Delivery::NotApplied }
        );
    }

    #[test]
    fn malformed_hints_are_ignored() {
        for address in ["", "  ", "not an address", "ftp://secure:1", "host:notaport"] {
            let status =
                status(Code::Unavailable, &[(BOOKING_CODE, "not_leader"), (LEADER_ADDR, address)]);
            assert_eq!(leader_hint(&status), None, "{address:?}");
        }
        let status = status(
            Code::Unavailable,
            &[(BOOKING_CODE, "not_leader"), (LEADER_ID, "x"), (LEADER_ADDR, "n1:7101")],
        );
        assert_eq!(leader_hint(&status).unwrap().node_id, None);
    }

    #[test]
    fn unavailable_with_another_code_may_have_been_applied() {
        let status = status(Code::Unavailable, &[(BOOKING_CODE, "timeout")]);
        assert_eq!(classify(&status), Verdict::Retry { hint: None, delivery: Delivery::Unknown });
    }

    #[test]
    fn business_rejections_are_final_and_keep_their_codes() {
        let status = status(Code::Aborted, &[(BOOKING_CODE, "seat_unavailable")]);
        assert_eq!(classify(&status), Verdict::Final);
        let error = Error::rejected(&status);
        assert_eq!(error.grpc_code(), Some(Code::Aborted));
        assert_eq!(error.booking_code(), Some("seat_unavailable"));
        assert_eq!(error.code(), Some(ErrorCode::SeatUnavailable));
        assert!(matches!(error, Error::Rejected { code: ErrorCode::SeatUnavailable, .. }));
        assert!(!error.is_outcome_unknown());
        // An expired hold is FAILED_PRECONDITION with its code: the node's answer, final.
        let expired = Error::rejected(&status_with(Code::FailedPrecondition, "hold_expired"));
        assert!(matches!(expired, Error::Rejected { code: ErrorCode::HoldExpired, .. }));
        // A node that still says DEADLINE_EXCEEDED with a code means the same: it answered.
        let older = status_with(Code::DeadlineExceeded, "hold_expired");
        assert_eq!(classify(&older), Verdict::Final);
    }

    #[test]
    fn a_code_of_a_newer_node_is_unspecified_and_kept_by_name() {
        let error = Error::rejected(&status_with(Code::FailedPrecondition, "show_teleported"));
        let Error::Rejected { code, code_name, .. } = &error else { panic!("{error:?}") };
        assert_eq!((*code, code_name.as_str()), (ErrorCode::Unspecified, "show_teleported"));
        assert_eq!(error.code(), None);
        assert_eq!(error.booking_code(), Some("show_teleported"));
    }

    /// A status with only a booking code.
    fn status_with(code: Code, booking_code: &str) -> Status {
        status(code, &[(BOOKING_CODE, booking_code)])
    }

    #[test]
    fn transport_failures_without_code_are_retried() {
        for code in [Code::Unavailable, Code::Cancelled, Code::DeadlineExceeded, Code::Unknown] {
            assert_eq!(
                classify(&Status::new(code, "transport")),
                Verdict::Retry { hint: None, delivery: Delivery::Unknown },
                "{code:?}"
            );
        }
    }

    /// A node restarting sends GOAWAY; a call cut by it fails with tonic's `INTERNAL` "h2
    /// protocol error" and may or may not have been applied: retried with its key, never
    /// reported as the node's answer. A node's own `internal` (with its code) stays final.
    #[test]
    fn a_call_cut_by_a_goaway_is_retried_as_unknown() {
        let goaway = h2::Error::from(h2::Reason::NO_ERROR);
        let status = Status::from_error(Box::new(goaway));
        assert_eq!(classify(&status), Verdict::Retry { hint: None, delivery: Delivery::Unknown });
        assert_eq!(classify(&Status::internal("no source")), Verdict::Final);
        assert_eq!(classify(&status_with(Code::Internal, "internal")), Verdict::Final);
    }

    #[test]
    fn refused_connection_was_not_sent() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let status = Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(classify(&status), Verdict::Retry { hint: None, delivery: Delivery::NotSent });
        assert_eq!(describe(&status).matches("refused").count(), 1, "{}", describe(&status));
    }

    #[test]
    fn other_statuses_without_code_are_final_and_named() {
        let status = Status::unimplemented("no such method");
        assert_eq!(classify(&status), Verdict::Final);
        let error = Error::rejected(&status);
        assert_eq!(error.booking_code(), Some("unimplemented"));
        assert!(matches!(error, Error::Rejected { code: ErrorCode::Unspecified, .. }));
    }

    #[test]
    fn unavailable_error_reports_unknown_outcome_and_key() {
        let error = Error::Unavailable {
            attempts: 3,
            elapsed: Duration::from_millis(150),
            status: Code::Unavailable,
            booking_code: Some("no_leader".into()),
            message: "election running".into(),
            outcome_unknown: true,
            idempotency_key: Some("k".into()),
        };
        assert!(error.is_outcome_unknown());
        assert_eq!(error.booking_code(), Some("no_leader"));
        assert_eq!(error.code(), Some(ErrorCode::NoLeader));
        let text = error.to_string();
        assert!(text.contains("outcome unknown") && text.contains("no_leader: election"), "{text}");
    }
}
