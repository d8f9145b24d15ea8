//! The SDK's errors, and the one place a `tonic::Status` from a node is read: its gRPC code,
//! its `booking-code`, its leader hint, and whether a retry may help.
//!
//! Owns the mapping back from the node's error table (shared/DESIGN.md "Errors"). Never decides
//! when or where to retry (the call loop in `client.rs` does) and never retries by itself.

use std::time::Duration;

use tonic::{Code, Status};

/// Response metadata: the stable machine code of every non-OK status a node sends.
pub const BOOKING_CODE: &str = "booking-code";
/// Response metadata: the node id of the relevant group's leader, when the node knows it.
pub const LEADER_ID: &str = "booking-leader-id";
/// Response metadata: the address (host:port) of the relevant group's leader, when known.
pub const LEADER_ADDR: &str = "booking-leader-addr";

/// The booking code of a node that is not the leader of the group a call needs.
pub const NOT_LEADER: &str = "not_leader";
/// The booking code of a node whose group has no leader at the moment (an election is running).
pub const NO_LEADER: &str = "no_leader";

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
    #[error("rejected: {code}: {message}")]
    Rejected {
        /// The gRPC status code.
        status: Code,
        /// The node's `booking-code` (`seat_unavailable`, `hold_expired`, ...); when a status
        /// carries none (a proxy or an older node), the snake_case name of the gRPC code.
        code: String,
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

    /// The node's `booking-code`, when the error came with one.
    pub fn booking_code(&self) -> Option<&str> {
        match self {
            Error::Rejected { code, .. } => Some(code),
            Error::Unavailable { booking_code, .. } => booking_code.as_deref(),
            Error::Transport { .. } | Error::InvalidArgument(_) => None,
        }
    }

    /// Whether a mutation may have been applied although the call failed (see
    /// [`Error::Unavailable`]).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::Unavailable { outcome_unknown: true, .. })
    }

    /// Builds the error of a non-retryable status.
    pub(crate) fn rejected(status: &Status) -> Error {
        Error::Rejected {
            status: status.code(),
            code: booking_code(status).map_or_else(|| code_name(status.code()).into(), Into::into),
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
    /// A node answered that it did not propose it (`not_leader`, `no_leader`).
    NotApplied,
    /// It may have been applied (a deadline, a dropped connection, an unknown outcome).
    Unknown,
}

/// Decides whether a failed attempt is retried.
///
/// A status carrying a `booking-code` is the node's answer: only `UNAVAILABLE` is retried. A
/// status without one did not come from a node's error table: `UNAVAILABLE`, `CANCELLED`,
/// `DEADLINE_EXCEEDED` and `UNKNOWN` are what tonic reports for refused or dropped connections
/// and deadlines, and are retried; anything else (`UNIMPLEMENTED` from a mismatched server, ...)
/// is final.
pub(crate) fn classify(status: &Status) -> Verdict {
    match booking_code(status) {
        Some(code) if status.code() == Code::Unavailable => Verdict::Retry {
            hint: leader_hint(status),
            delivery: if code == NOT_LEADER || code == NO_LEADER {
                Delivery::NotApplied
            } else {
                Delivery::Unknown
            },
        },
        Some(_) => Verdict::Final,
        None => match status.code() {
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
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
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
            &[(BOOKING_CODE, NOT_LEADER), (LEADER_ID, "2"), (LEADER_ADDR, "127.0.0.1:7102")],
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
            &[(BOOKING_CODE, NOT_LEADER), (LEADER_ADDR, "http://10.0.0.3:7103/")],
        );
        let hint = leader_hint(&status).unwrap();
        assert_eq!(hint, LeaderHint { node_id: None, address: "10.0.0.3:7103".into() });
    }

    #[test]
    fn no_leader_without_hint_is_retried_elsewhere() {
        let status = status(Code::Unavailable, &[(BOOKING_CODE, NO_LEADER), (LEADER_ID, "0")]);
        assert_eq!(
            classify(&status),
            Verdict::Retry { hint: None, delivery: Delivery::NotApplied }
        );
    }

    #[test]
    fn malformed_hints_are_ignored() {
        for address in ["", "  ", "not an address", "https://secure:1", "host:notaport"] {
            let status =
                status(Code::Unavailable, &[(BOOKING_CODE, NOT_LEADER), (LEADER_ADDR, address)]);
            assert_eq!(leader_hint(&status), None, "{address:?}");
        }
        let status = status(
            Code::Unavailable,
            &[(BOOKING_CODE, NOT_LEADER), (LEADER_ID, "x"), (LEADER_ADDR, "n1:7101")],
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
        assert!(!error.is_outcome_unknown());
        // An expired hold is DEADLINE_EXCEEDED with a code: the node's answer, not a timeout.
        let expired = status_with(Code::DeadlineExceeded, "hold_expired");
        assert_eq!(classify(&expired), Verdict::Final);
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
        assert_eq!(Error::rejected(&status).booking_code(), Some("unimplemented"));
    }

    #[test]
    fn unavailable_error_reports_unknown_outcome_and_key() {
        let error = Error::Unavailable {
            attempts: 3,
            elapsed: Duration::from_millis(150),
            status: Code::Unavailable,
            booking_code: Some(NO_LEADER.into()),
            message: "election running".into(),
            outcome_unknown: true,
            idempotency_key: Some("k".into()),
        };
        assert!(error.is_outcome_unknown());
        assert_eq!(error.booking_code(), Some(NO_LEADER));
        let text = error.to_string();
        assert!(text.contains("outcome unknown") && text.contains("no_leader: election"), "{text}");
    }
}
