//! Delivery of the outbox to its sinks: what each sink has been given, and what was given up on.
//!
//! Owns the group's memory of delivery, so that a new leader's dispatcher resumes where the old
//! one stopped with at most the unreported deliveries repeated: per sink, the events delivered
//! or given up on (a contiguous prefix, plus the finished events above it: one show's events are
//! delivered in order, but another show's may finish first), the dead letters (each event given
//! up on, with its attempts and last error, kept until an operator replays it or removes the
//! sink), and counters. Trims the outbox of every event that every sink is done with, so the
//! outbox stays bounded by the slowest sink's backlog. Never sends anything: the leader-only
//! dispatcher in `node` delivers and reports here, as commands.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::OutboxId;
use crate::limits::{
    DEAD_LETTER_ERROR_BYTES_MAX, DEAD_LETTERS_PER_SINK_MAX, DELIVERY_REPORT_EVENTS_MAX,
    SINK_NAME_BYTES_MAX, SINKS_PER_GROUP_MAX,
};
use crate::outbox::{Outbox, OutboxEvent};
use crate::outcome::{Outcome, Rejection, Reply};

/// A sink's name: 1..=32 bytes of `a-z`, `0-9`, `-` and `_` (it appears in URLs, metric labels
/// and the dispatcher's configuration).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SinkName(String);

impl SinkName {
    /// Checks and wraps a name.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty or long name, or one with other characters.
    pub fn new(name: &str) -> Result<SinkName, Rejection> {
        let allowed =
            |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-_".contains(&byte);
        if name.is_empty() || name.len() > SINK_NAME_BYTES_MAX || !name.bytes().all(allowed) {
            return Err(Rejection::invalid(format!(
                "sink: 1..={SINK_NAME_BYTES_MAX} bytes of a-z, 0-9, '-' and '_'"
            )));
        }
        Ok(SinkName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SinkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SinkName {
    type Error = Rejection;

    fn try_from(name: String) -> Result<SinkName, Rejection> {
        SinkName::new(&name)
    }
}

impl From<SinkName> for String {
    fn from(name: SinkName) -> String {
        name.0
    }
}

/// A command about delivering the outbox, proposed by the leader's dispatcher (`AddSink`,
/// `Report`) or by an operator (`RemoveSink`, `Replay`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryCommand {
    /// Starts tracking a sink: it is owed every event still in the outbox and every later one.
    /// Adding a tracked sink again changes nothing.
    AddSink {
        /// The sink.
        sink: SinkName,
    },
    /// Stops tracking a sink: nothing more is owed to it, and its dead letters are dropped.
    RemoveSink {
        /// The sink.
        sink: SinkName,
    },
    /// What the dispatcher did since its last report: events the sink accepted, and events
    /// given up on. An event reported again (by a new leader that delivered it once more)
    /// changes nothing.
    Report {
        /// The sink.
        sink: SinkName,
        /// Events the sink accepted (a replayed dead letter among them leaves the dead letters).
        delivered: Vec<OutboxId>,
        /// Events given up on (a replayed dead letter that failed again stays a dead letter).
        dead: Vec<Failure>,
    },
    /// Asks for dead letters to be delivered again (all of the sink's when `events` is empty).
    Replay {
        /// The sink.
        sink: SinkName,
        /// The dead letters, by event id.
        events: Vec<OutboxId>,
    },
}

/// An event the dispatcher gave up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The event.
    pub event: OutboxId,
    /// Delivery attempts made.
    pub attempts: u32,
    /// The last error (cut to `DEAD_LETTER_ERROR_BYTES_MAX` bytes when applied).
    pub error: String,
}

/// An event given up on, kept for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The event, as it was in the outbox.
    pub event: OutboxEvent,
    /// Delivery attempts made (over every replay).
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// Log time it was given up on (last).
    pub dead_at_ms: u64,
    /// Whether an operator asked for it to be delivered again.
    pub replay: bool,
}

/// One sink's delivery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sink {
    /// Every event with an id up to this one is delivered or given up on.
    pub done_up_to: u64,
    /// Events above `done_up_to` that are delivered or given up on; never `done_up_to + 1`.
    pub done_above: BTreeSet<u64>,
    /// Events given up on, by id.
    pub dead_letters: BTreeMap<u64, DeadLetter>,
    /// Events delivered (first deliveries and replays), over the sink's life.
    pub delivered_total: u64,
    /// Events given up on, over the sink's life.
    pub dead_lettered_total: u64,
    /// Dead letters dropped because the sink had `DEAD_LETTERS_PER_SINK_MAX` of them.
    pub dead_letters_dropped: u64,
}

impl Sink {
    /// Whether the sink is done with event `id` (delivered or given up on).
    pub fn is_done(&self, id: u64) -> bool {
        id <= self.done_up_to || self.done_above.contains(&id)
    }

    /// Marks `id` done and moves the contiguous prefix forward.
    fn mark_done(&mut self, id: u64) {
        assert!(!self.is_done(id), "an event is finished once");
        self.done_above.insert(id);
        while self.done_above.remove(&(self.done_up_to + 1)) {
            self.done_up_to += 1;
        }
    }

    /// Dead letters asked to be delivered again, oldest first.
    pub fn replays(&self) -> impl Iterator<Item = &DeadLetter> {
        self.dead_letters.values().filter(|letter| letter.replay)
    }
}

/// Every sink of the group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    sinks: BTreeMap<SinkName, Sink>,
}

impl Delivery {
    /// Every dead letter of every sink, to be rewritten (a session's erasure).
    pub(crate) fn dead_letters_mut(&mut self) -> impl Iterator<Item = &mut DeadLetter> {
        self.sinks.values_mut().flat_map(|sink| sink.dead_letters.values_mut())
    }

    /// The tracked sinks, by name.
    pub fn sinks(&self) -> impl Iterator<Item = (&SinkName, &Sink)> {
        self.sinks.iter()
    }

    /// One sink.
    pub fn sink(&self, name: &SinkName) -> Option<&Sink> {
        self.sinks.get(name)
    }

    /// The last event id every sink is done with, or `None` without sinks.
    pub fn done_by_all(&self) -> Option<u64> {
        self.sinks.values().map(|sink| sink.done_up_to).min()
    }

    /// Applies a delivery command at log time `now`; trims the outbox of what every sink is
    /// done with.
    pub(crate) fn apply(
        &mut self,
        outbox: &mut Outbox,
        now: u64,
        command: &DeliveryCommand,
    ) -> Outcome {
        match command {
            DeliveryCommand::AddSink { sink } => self.add(outbox, sink),
            DeliveryCommand::RemoveSink { sink } => {
                let removed = self.sinks.remove(sink).ok_or(Rejection::SinkNotFound)?;
                let trimmed = self.trim(outbox);
                Ok(Reply::SinkRemoved {
                    sink: sink.clone(),
                    dead_letters_dropped: removed.dead_letters.len() as u32,
                    trimmed,
                })
            }
            DeliveryCommand::Report { sink, delivered, dead } => {
                self.report(outbox, now, sink, delivered, dead)
            }
            DeliveryCommand::Replay { sink, events } => {
                let found = self.sinks.get_mut(sink).ok_or(Rejection::SinkNotFound)?;
                if events.len() > DELIVERY_REPORT_EVENTS_MAX {
                    return Err(Rejection::invalid(format!(
                        "events: at most {DELIVERY_REPORT_EVENTS_MAX}"
                    )));
                }
                if let Some(missing) =
                    events.iter().find(|id| !found.dead_letters.contains_key(&id.0))
                {
                    return Err(Rejection::DeadLetterNotFound { event: *missing });
                }
                // From here on every step succeeds.
                let mut marked = 0;
                for letter in found.dead_letters.values_mut() {
                    if events.is_empty() || events.contains(&letter.event.id) {
                        letter.replay = true;
                        marked += 1;
                    }
                }
                Ok(Reply::ReplayRequested { sink: sink.clone(), events: marked })
            }
        }
    }

    fn add(&mut self, outbox: &mut Outbox, sink: &SinkName) -> Outcome {
        if let Some(found) = self.sinks.get(sink) {
            return Ok(Reply::SinkAdded {
                sink: sink.clone(),
                owed_from: found.done_up_to + 1,
                duplicate: true,
            });
        }
        if self.sinks.len() >= SINKS_PER_GROUP_MAX {
            return Err(Rejection::invalid(format!("sink: at most {SINKS_PER_GROUP_MAX} sinks")));
        }
        // Owed every event still in the outbox: one no other sink has finished with yet, or
        // one produced since the last trim.
        let done_up_to = outbox.pending().next().map_or(outbox.last_id(), |first| first.id.0 - 1);
        self.sinks.insert(sink.clone(), Sink { done_up_to, ..Sink::default() });
        Ok(Reply::SinkAdded { sink: sink.clone(), owed_from: done_up_to + 1, duplicate: false })
    }

    fn report(
        &mut self,
        outbox: &mut Outbox,
        now: u64,
        name: &SinkName,
        delivered: &[OutboxId],
        dead: &[Failure],
    ) -> Outcome {
        let sink = self.sinks.get_mut(name).ok_or(Rejection::SinkNotFound)?;
        if delivered.len() + dead.len() > DELIVERY_REPORT_EVENTS_MAX {
            return Err(Rejection::invalid(format!(
                "a report names at most {DELIVERY_REPORT_EVENTS_MAX} events"
            )));
        }
        let last_id = outbox.last_id();
        let named = delivered.iter().chain(dead.iter().map(|failure| &failure.event));
        if let Some(beyond) = named.clone().find(|id| id.0 == 0 || id.0 > last_id) {
            return Err(Rejection::invalid(format!("event {beyond}: not an outbox event")));
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = named.clone().find(|id| !seen.insert(id.0)) {
            return Err(Rejection::invalid(format!("event {twice}: named twice")));
        }
        // From here on every step succeeds.
        let (mut newly_delivered, mut newly_dead) = (0u32, 0u32);
        for id in delivered {
            if let Some(letter) = sink.dead_letters.get(&id.0) {
                // A replay the sink took: the letter is delivered after all.
                if letter.replay {
                    sink.dead_letters.remove(&id.0);
                    sink.delivered_total += 1;
                    newly_delivered += 1;
                }
            } else if !sink.is_done(id.0) {
                sink.mark_done(id.0);
                sink.delivered_total += 1;
                newly_delivered += 1;
            }
        }
        for failure in dead {
            let error = truncated(&failure.error);
            if let Some(letter) = sink.dead_letters.get_mut(&failure.event.0) {
                if letter.replay {
                    letter.replay = false;
                    letter.attempts = letter.attempts.saturating_add(failure.attempts);
                    letter.error = error;
                    letter.dead_at_ms = now;
                }
            } else if !sink.is_done(failure.event.0) {
                // Not done by this sink, so not trimmed: the outbox still has it.
                let event = outbox
                    .get(failure.event)
                    .expect("an event a sink has not finished is in the outbox")
                    .clone();
                sink.mark_done(failure.event.0);
                sink.dead_letters.insert(
                    failure.event.0,
                    DeadLetter {
                        event,
                        attempts: failure.attempts,
                        error,
                        dead_at_ms: now,
                        replay: false,
                    },
                );
                sink.dead_lettered_total += 1;
                newly_dead += 1;
                if sink.dead_letters.len() > DEAD_LETTERS_PER_SINK_MAX {
                    sink.dead_letters.pop_first();
                    sink.dead_letters_dropped += 1;
                }
            }
        }
        let done_up_to = sink.done_up_to;
        let trimmed = self.trim(outbox);
        Ok(Reply::DeliveryRecorded {
            sink: name.clone(),
            done_up_to,
            delivered: newly_delivered,
            dead_lettered: newly_dead,
            trimmed,
        })
    }

    /// Trims the outbox of every event every sink is done with (nothing without sinks: then
    /// `AckOutbox` trims).
    pub(crate) fn trim(&self, outbox: &mut Outbox) -> u32 {
        self.done_by_all().map_or(0, |up_to| outbox.ack(up_to))
    }

    /// Checks every sink against the outbox: what a sink is not done with is still in the
    /// outbox; finished events and dead letters are consistent.
    pub(crate) fn check(&self, outbox: &Outbox) -> Result<(), String> {
        if self.sinks.len() > SINKS_PER_GROUP_MAX {
            return Err(format!("{} sinks", self.sinks.len()));
        }
        let first_kept = outbox.pending().next().map_or(outbox.last_id() + 1, |event| event.id.0);
        for (name, sink) in &self.sinks {
            let fail = |what: String| Err(format!("sink {name}: {what}"));
            if sink.done_up_to > outbox.last_id() {
                return fail(format!("done up to {} beyond the outbox", sink.done_up_to));
            }
            if sink.done_up_to + 1 < first_kept {
                return fail(format!("event {} trimmed before it was done", sink.done_up_to + 1));
            }
            if sink.done_above.contains(&(sink.done_up_to + 1)) {
                return fail("the done prefix was not moved forward".into());
            }
            if let Some(above) =
                sink.done_above.iter().find(|id| **id <= sink.done_up_to || **id > outbox.last_id())
            {
                return fail(format!("finished event {above} out of range"));
            }
            if sink.dead_letters.len() > DEAD_LETTERS_PER_SINK_MAX {
                return fail(format!("{} dead letters", sink.dead_letters.len()));
            }
            for (id, letter) in &sink.dead_letters {
                if letter.event.id.0 != *id || !sink.is_done(*id) {
                    return fail(format!("dead letter {id} is not a finished event of its own"));
                }
                if letter.error.len() > DEAD_LETTER_ERROR_BYTES_MAX {
                    return fail(format!("dead letter {id} keeps a long error"));
                }
            }
        }
        Ok(())
    }
}

/// `error` cut to `DEAD_LETTER_ERROR_BYTES_MAX` bytes at a character boundary.
fn truncated(error: &str) -> String {
    let mut end = error.len().min(DEAD_LETTER_ERROR_BYTES_MAX);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error[..end].to_owned()
}

impl DeliveryCommand {
    /// The sink a command is about.
    pub fn sink(&self) -> &SinkName {
        match self {
            DeliveryCommand::AddSink { sink }
            | DeliveryCommand::RemoveSink { sink }
            | DeliveryCommand::Report { sink, .. }
            | DeliveryCommand::Replay { sink, .. } => sink,
        }
    }
}
