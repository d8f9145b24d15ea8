//! The linearizability checker: Wing & Gong's search with Lowe's memoisation (as in Knossos and
//! Porcupine), run against the booking state machine as the model, one show at a time.
//!
//! Owns the search. A history of one show is linearizable if its operations can be put in one
//! order that respects real time (an operation that completed before another was invoked comes
//! first) and in which the model, applying them one by one, answers every completed operation
//! exactly as the cluster did. `fail` operations are left out (they did not happen); `info`
//! operations (outcome unknown) may take effect at any point after their invocation, or never,
//! and their answer is not checked. Never gives up silently: past its step budget, or when the
//! caller says time is up, the answer is `Unknown`, not `Valid`.
//!
//! Shows are independent (every command and read names one show, and ids are per show), so
//! checking them one by one is exact (P-compositionality) and keeps each search small.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::ids::ShowId;

use super::Verdict;
use super::history::{Call, Completion, History, Observed, Operation};
use super::model::{Model, ModelError};

/// How much search one show may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Model steps at most; past it the show is `Unknown`.
    pub steps_max: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget { steps_max: 2_000_000 }
    }
}

/// The verdict on one show's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowLinearizability {
    /// The show.
    pub show: ShowId,
    /// Valid, invalid or unknown.
    pub verdict: Verdict,
    /// Operations checked (fail operations excluded).
    pub operations: u64,
    /// Model steps taken.
    pub steps: u64,
    /// For an invalid history: the operation that could not be linearized, what the cluster
    /// answered, and what the model would have answered at the deepest point of the search.
    pub explanation: Option<String>,
}

/// Checks every show of `history` whose set-up is in `setups` (operations on other shows are
/// reported invalid: the checker cannot judge what it has no model for).
///
/// `keep_going` is asked every few thousand steps; when it answers false, the shows not done
/// yet are `Unknown`.
///
/// # Errors
///
/// If the history is malformed or a set-up is rejected by the model.
pub fn check_history(
    history: &History,
    setups: &BTreeMap<ShowId, Vec<Command>>,
    time_ms: u64,
    budget: Budget,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Vec<ShowLinearizability>, CheckError> {
    let operations = history.operations()?;
    let mut by_show: BTreeMap<ShowId, Vec<Operation>> = BTreeMap::new();
    let mut unscoped = 0_u64;
    for operation in operations {
        match operation.call.show() {
            Some(show) => by_show.entry(show).or_default().push(operation),
            None => unscoped += 1,
        }
    }
    let mut results = Vec::new();
    if unscoped > 0 {
        return Err(CheckError::Unscoped(unscoped));
    }
    for (show, operations) in by_show {
        let Some(setup) = setups.get(&show) else {
            return Err(CheckError::NoSetup(show));
        };
        let model = Model::new(setup, time_ms)?;
        results.push(check_show(show, &model, &operations, budget, keep_going));
    }
    Ok(results)
}

/// Why a history cannot be checked at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The history does not pair up.
    #[error(transparent)]
    History(#[from] super::history::HistoryError),
    /// A model's set-up was rejected.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Operations that name no show.
    #[error("{0} operations name no show")]
    Unscoped(u64),
    /// Operations on a show without a set-up.
    #[error("no set-up for show {0}")]
    NoSetup(ShowId),
}

/// One end of an operation in the search list.
#[derive(Clone, Copy, Debug)]
struct ListEntry {
    /// The operation's position in `ops`.
    op: usize,
    is_call: bool,
    /// The other end of the same operation.
    partner: usize,
    prev: usize,
    next: usize,
}

/// The operations of the search: what to run, and what must be seen (`None`: unknown).
struct SearchOp<'a> {
    call: &'a Call,
    expected: Option<&'a Observed>,
    id: u64,
}

/// Checks one show's operations against `model`.
pub fn check_show(
    show: ShowId,
    model: &Model,
    operations: &[Operation],
    budget: Budget,
    keep_going: &mut dyn FnMut() -> bool,
) -> ShowLinearizability {
    let operations = merge_retries(operations);
    // Ends sorted by time; a call sorts before a return at the same instant (they overlap), and
    // the returns of unknown operations come after every definite one.
    let mut ops: Vec<SearchOp<'_>> = Vec::new();
    let mut ends: Vec<(u64, u8, usize)> = Vec::new();
    for operation in &operations {
        let (expected, return_at) = match &operation.completion {
            Completion::Fail { .. } => continue,
            Completion::Ok { time_ns, value, .. } => (Some(value), (*time_ns, 1)),
            Completion::Unknown => (None, (u64::MAX, 2)),
        };
        let index = ops.len();
        ops.push(SearchOp { call: &operation.call, expected, id: operation.op });
        ends.push((operation.invoke_ns, 0, index));
        ends.push((return_at.0, return_at.1, index));
    }
    ends.sort_by_key(|&(time, rank, op)| (time, rank, op));

    // A doubly-linked list with a head sentinel at position 0.
    let head = 0;
    let mut list: Vec<ListEntry> =
        vec![ListEntry { op: usize::MAX, is_call: false, partner: 0, prev: 0, next: 1 }];
    let mut call_position = vec![0; ops.len()];
    let mut return_position = vec![0; ops.len()];
    for (position, &(_, rank, op)) in ends.iter().enumerate() {
        let position = position + 1;
        let is_call = rank == 0;
        if is_call {
            call_position[op] = position;
        } else {
            return_position[op] = position;
        }
        list.push(ListEntry { op, is_call, partner: 0, prev: position - 1, next: position + 1 });
    }
    let end = list.len();
    for op in 0..ops.len() {
        list[call_position[op]].partner = return_position[op];
        list[return_position[op]].partner = call_position[op];
    }

    let mut result = ShowLinearizability {
        show,
        verdict: Verdict::Valid,
        operations: ops.len() as u64,
        steps: 0,
        explanation: None,
    };
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0_u64; words];
    let mut cache: BTreeSet<(Vec<u64>, [u8; 32])> = BTreeSet::new();
    let mut calls: Vec<(usize, Model)> = Vec::new();
    let mut state = model.clone();
    let mut deepest = (0_usize, String::new());
    let mut entry = list[head].next;

    while list[head].next != end {
        let current = list[entry];
        if current.is_call {
            result.steps += 1;
            if result.steps > budget.steps_max
                || (result.steps.is_multiple_of(4096) && !keep_going())
            {
                result.verdict = Verdict::Unknown;
                result.explanation = Some(format!(
                    "search stopped after {} steps with {} of {} operations linearized",
                    result.steps - 1,
                    calls.len(),
                    ops.len()
                ));
                return result;
            }
            let op = &ops[current.op];
            let (next_state, observed) = state.step(op.call);
            let matches = op.expected.is_none_or(|expected| *expected == observed);
            if matches {
                let mut bits = linearized.clone();
                bits[current.op / 64] |= 1 << (current.op % 64);
                let next_state = next_state.unwrap_or_else(|| state.clone());
                if cache.insert((bits.clone(), next_state.fingerprint())) {
                    calls.push((entry, std::mem::replace(&mut state, next_state)));
                    linearized = bits;
                    lift(&mut list, entry);
                    entry = list[head].next;
                    continue;
                }
            } else if calls.len() >= deepest.0 {
                deepest = (
                    calls.len(),
                    format!(
                        "op {} {} answered {:?} but the model, after {} operations, answers {:?}",
                        op.id,
                        op.call.function(),
                        op.expected,
                        calls.len(),
                        observed
                    ),
                );
            }
            entry = current.next;
        } else {
            if ops[current.op].expected.is_none() {
                // Every definite operation is linearized (their returns all sort before this
                // one); the unknown ones left may simply never have taken effect.
                break;
            }
            let Some((call_entry, previous)) = calls.pop() else {
                result.verdict = Verdict::Invalid;
                let stuck = &ops[current.op];
                result.explanation = Some(format!(
                    "op {} {} (answered {:?}) cannot be linearized; deepest attempt: {}",
                    stuck.id,
                    stuck.call.function(),
                    stuck.expected,
                    if deepest.1.is_empty() { "none" } else { &deepest.1 }
                ));
                return result;
            };
            state = previous;
            let op = list[call_entry].op;
            linearized[op / 64] &= !(1 << (op % 64));
            unlift(&mut list, call_entry);
            entry = list[call_entry].next;
        }
    }
    result
}

/// Folds unknown attempts of a mutation into the answered retry that settled them.
///
/// A client that does not know whether a mutation happened retries it with the same idempotency
/// key, and the cluster answers a retry with the outcome it stored for the key. So when an
/// attempt is unknown and a later attempt with the same session, key and request is answered
/// with a stored outcome, the two are one operation: it took effect at most once, no earlier
/// than the first attempt's invocation and no later than the answer, and the answer is its
/// outcome. The answered attempt is kept with the first attempt's invocation time, and the
/// unknown ones invoked before its answer are dropped. Only successes are stored: a rejection
/// changed nothing and a retry of it is judged afresh, so a rejected retry settles nothing.
/// Without this, every unknown attempt could take effect anywhere or never, and the search
/// grows exponentially with them.
fn merge_retries(operations: &[Operation]) -> Vec<Operation> {
    let mut settled_by: BTreeMap<usize, usize> = BTreeMap::new();
    for (index, operation) in operations.iter().enumerate() {
        let Completion::Unknown = operation.completion else { continue };
        let Some(key) = operation.call.idempotency() else { continue };
        let settling = operations.iter().enumerate().find(|(_, later)| {
            later.call == operation.call
                && later.call.idempotency() == Some(key)
                && later.invoke_ns >= operation.invoke_ns
                && matches!(&later.completion, Completion::Ok { value, .. }
                    if value.rejection().is_none())
        });
        if let Some((answer, _)) = settling {
            settled_by.insert(index, answer);
        }
    }
    let mut merged: Vec<Operation> = Vec::with_capacity(operations.len());
    let mut first_invoke: BTreeMap<usize, u64> = BTreeMap::new();
    for (&unknown, &answer) in &settled_by {
        let earliest = first_invoke.entry(answer).or_insert(operations[answer].invoke_ns);
        *earliest = (*earliest).min(operations[unknown].invoke_ns);
    }
    for (index, operation) in operations.iter().enumerate() {
        if settled_by.contains_key(&index) {
            continue;
        }
        let mut operation = operation.clone();
        if let Some(&earliest) = first_invoke.get(&index) {
            operation.invoke_ns = earliest;
        }
        merged.push(operation);
    }
    merged
}

/// Takes an operation's call and return out of the list.
fn lift(list: &mut [ListEntry], call: usize) {
    let partner = list[call].partner;
    for position in [call, partner] {
        let ListEntry { prev, next, .. } = list[position];
        list[prev].next = next;
        if next < list.len() {
            list[next].prev = prev;
        }
    }
}

/// Puts a lifted operation back, in the reverse order of `lift`.
fn unlift(list: &mut [ListEntry], call: usize) {
    let partner = list[call].partner;
    for position in [partner, call] {
        let ListEntry { prev, next, .. } = list[position];
        list[prev].next = position;
        if next < list.len() {
            list[next].prev = position;
        }
    }
}
