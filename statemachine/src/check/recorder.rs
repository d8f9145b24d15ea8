//! Recording a history while clients run: each operation's invocation and completion, stamped
//! by the caller's clock, in the format of [`super::history`]. Shared by the Jepsen suite (a
//! monotonic clock of the machine) and the simulator (simulated time).
//!
//! Owns the event list and the operation counter; also the mapping of the cluster's opaque
//! strings (session tokens, idempotency keys, provider event ids) to the numbers the model uses.
//! Never reads a clock itself (this crate has none) and never judges anything: the checkers do.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::history::{Call, Clock, Event, EventKind, History, Observed};

/// Nanoseconds since the start of a test, as the recorder's owner measures them.
pub type TestClock = Box<dyn Fn() -> u64 + Send + Sync>;

/// The recorder shared by every client task of one test.
pub struct Recorder {
    clock: TestClock,
    events: Mutex<Vec<Event>>,
    next_op: AtomicU64,
    names: Mutex<BTreeMap<String, u128>>,
}

/// An invoked operation, to be completed exactly once.
#[must_use = "an invoked operation must be completed"]
pub struct Pending {
    op: u64,
    process: u64,
    call: Call,
}

impl Pending {
    /// The call invoked.
    pub fn call(&self) -> &Call {
        &self.call
    }
}

impl Recorder {
    /// A recorder whose times `clock` gives: nanoseconds since the test began, never
    /// decreasing.
    pub fn new(clock: TestClock) -> Recorder {
        Recorder {
            clock,
            events: Mutex::new(Vec::new()),
            next_op: AtomicU64::new(0),
            names: Mutex::new(BTreeMap::new()),
        }
    }

    /// Nanoseconds since the test began.
    pub fn now_ns(&self) -> u64 {
        (self.clock)()
    }

    /// The number standing for `name` (a session token, key or event id) in the model: the same
    /// name always gets the same number, distinct names distinct numbers.
    pub fn number(&self, name: &str) -> u128 {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let next = names.len() as u128 + 1;
        *names.entry(name.to_owned()).or_insert(next)
    }

    /// Records the invocation of `call` by `process`.
    pub fn invoke(&self, process: u64, call: Call) -> Pending {
        let op = self.next_op.fetch_add(1, Ordering::Relaxed);
        self.push(Event {
            op,
            process,
            kind: EventKind::Invoke,
            f: call.function().to_owned(),
            call: call.clone(),
            value: None,
            error: None,
            time_ns: self.now_ns(),
            clock: None,
        });
        Pending { op, process, call }
    }

    /// Records that the cluster answered `value`.
    pub fn ok(&self, pending: Pending, value: Observed) {
        self.complete(pending, EventKind::Ok, Some(value), None, None);
    }

    /// Records that the cluster answered `value`, true by the log as `clock` says.
    pub fn ok_at(&self, pending: Pending, value: Observed, clock: Option<Clock>) {
        self.complete(pending, EventKind::Ok, Some(value), None, clock);
    }

    /// Records that the operation certainly did not happen.
    pub fn fail(&self, pending: Pending, error: String) {
        self.complete(pending, EventKind::Fail, None, Some(error), None);
    }

    /// Records that the outcome is unknown.
    pub fn info(&self, pending: Pending, error: String) {
        self.complete(pending, EventKind::Info, None, Some(error), None);
    }

    fn complete(
        &self,
        pending: Pending,
        kind: EventKind,
        value: Option<Observed>,
        error: Option<String>,
        clock: Option<Clock>,
    ) {
        let Pending { op, process, call } = pending;
        self.push(Event {
            op,
            process,
            kind,
            f: call.function().to_owned(),
            call,
            value,
            error,
            time_ns: self.now_ns(),
            clock,
        });
    }

    fn push(&self, event: Event) {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).push(event);
    }

    /// The history so far.
    pub fn history(&self) -> History {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // Events are pushed after their time is read, so two tasks may push out of time order.
        events.sort_by_key(|event| event.time_ns);
        History { events }
    }
}
