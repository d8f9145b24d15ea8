//! Checkers of histories, shared by the Jepsen suite (real processes) and the simulator (one
//! process), so that both judge a run by the same code.
//!
//! Owns the history format (`history.rs`), the model (`model.rs`: this crate's state machine),
//! the linearizability checker (`linearizable.rs`), the model-free booking checks
//! (`booking.rs`), the checks of time the model cannot make (`deadlines.rs`), the money checker that judges the payment provider's ledger against the
//! cluster's final state (`ledger.rs`), the recorder clients write a history with
//! (`recorder.rs`) and what the workloads of both share (`workload.rs`). Pure like the
//! rest of the crate: no clock, no I/O; a caller that wants a time limit passes a `keep_going`
//! callback, and a recorder is given its clock.

pub mod booking;
pub mod deadlines;
pub mod history;
pub mod ledger;
pub mod linearizable;
pub mod model;
pub mod recorder;
pub mod workload;

use serde::{Deserialize, Serialize};

/// A checker's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The history has the property.
    Valid,
    /// The history lacks it: a bug.
    Invalid,
    /// The checker could not decide (out of budget).
    Unknown,
}

impl Verdict {
    /// The combined verdict of several checks: invalid if any is, else unknown if any is.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut combined = Verdict::Valid;
        for verdict in verdicts {
            combined = match (combined, verdict) {
                (Verdict::Invalid, _) | (_, Verdict::Invalid) => Verdict::Invalid,
                (Verdict::Unknown, _) | (_, Verdict::Unknown) => Verdict::Unknown,
                _ => Verdict::Valid,
            };
        }
        combined
    }
}
