//! Deadline checks: the rules about time that the model (it has no clock) cannot judge, over a
//! show whose holds and payments have short deadlines, so that expiry races checkout and
//! payment all the time.
//!
//! Owns four checks of one show, judged from the log times the answers carry (their `as_of`
//! labels, [`Clock`]) and from each hold's audit trail read at the end of the run (every
//! transition with the log index and log time of the entry that made it):
//!
//! - `deadlines_kept`: no hold checked out, confirmed, given back by a declined payment or
//!   cancelled at a log time at or past its deadline, and none expired before it. The
//!   deadlines are the policy's: the hold deadline counts from the entry that made the hold,
//!   the payment deadline from the checkout's.
//! - `log_time_monotonic`: log time never moves backwards along the log, whichever leader
//!   stamped it and however its clock was skewed (every `as_of` and audit record, ordered by
//!   log index), and an answer never reflects an earlier log position than an answer its
//!   caller saw complete before it asked (real-time order).
//! - `reads_follow_deadlines`: a hold answered or read at log time past its deadline reads
//!   expired, never held or processing, and every hold answer or read says what the audit
//!   trail says the hold was at that log position and log time, with its deadline.
//! - `seat_maps_follow_holds`: every seat of every linearizable seat map is what the holds'
//!   audit trails make it at the map's position and log time: held by a live hold whose
//!   deadline is ahead, booked by a confirmed one, free otherwise (so an expired hold's seats
//!   are free, overdue or not yet swept), and never held by two holds at once.
//!
//! Sound under these assumptions: the show has no admission lane and no waitlist (nothing but
//! holds and payments decides its seats), no booking of it is cancelled, and every hold made
//! of it is known, its seats from an answer and its trail from the audit (a process that
//! could not settle an unknown outcome fails the run's liveness anyway). Trusts the audit's
//! log times no more than any answer's: the trail and the answers are checked against each
//! other and against the policy.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::audit::StateName;
use crate::command::{ClientRequest, Command, ShowPolicy};
use crate::ids::{HoldId, SeatNo, ShowId};
use crate::read::SeatStatus;

use super::booking::CheckReport;
use super::history::{Call, Clock, History, HistoryError, Observed, Operation, Read};

/// One transition of a hold, as its audit trail reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The state before; `None` when the hold was made.
    pub from: Option<StateName>,
    /// The state after.
    pub to: StateName,
    /// Why, as the API names it (`deadline_passed`, `payment_declined`, ...).
    pub reason: String,
    /// The entry that made the transition.
    pub log_index: u64,
    /// That entry's log time.
    pub log_time_ms: u64,
}

/// A hold's state after a step of its trail, with the deadline that state runs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stage {
    log_index: u64,
    state: StateName,
    /// For a live state (held, processing): its deadline.
    deadline_ms: Option<u64>,
}

/// A hold's life by its trail: its stages, oldest first.
struct Life {
    stages: Vec<Stage>,
}

impl Life {
    /// The hold's state as a reader at `log_index` and `log_time_ms` must see it, with its
    /// deadline while live: `None` before it was made.
    fn at(&self, log_index: u64, log_time_ms: u64) -> Option<(StateName, Option<u64>)> {
        let stage = self.stages.iter().take_while(|stage| stage.log_index <= log_index).last()?;
        match stage.deadline_ms {
            Some(deadline_ms) if deadline_ms <= log_time_ms => Some((StateName::Expired, None)),
            deadline_ms => Some((stage.state, deadline_ms)),
        }
    }
}

/// Runs the deadline checks on the operations of `show` in `history`, with the show's `policy`
/// and the audit trail of each hold (`trails`, read after the run).
///
/// # Errors
///
/// If the history is malformed.
pub fn check_deadlines(
    history: &History,
    show: ShowId,
    policy: &ShowPolicy,
    trails: &BTreeMap<HoldId, Vec<Step>>,
) -> Result<Vec<CheckReport>, HistoryError> {
    let operations: Vec<Operation> = history
        .operations()?
        .into_iter()
        .filter(|operation| operation.call.show() == Some(show))
        .collect();
    let mut kept = Vec::new();
    let lives: BTreeMap<HoldId, Life> = trails
        .iter()
        .map(|(&hold, steps)| (hold, replay(hold, steps, policy, &mut kept)))
        .collect();
    let examined_steps = trails.values().map(Vec::len).sum::<usize>() as u64;
    Ok(vec![
        CheckReport::new("deadlines_kept", examined_steps, kept),
        log_time_monotonic(&operations, trails),
        reads_follow_deadlines(&operations, &lives),
        seat_maps_follow_holds(&operations, &lives),
    ])
}

/// Replays one hold's trail by the policy: its stages, and in `problems` every transition made
/// at the wrong log time or not allowed at all.
fn replay(hold: HoldId, steps: &[Step], policy: &ShowPolicy, problems: &mut Vec<String>) -> Life {
    let mut stages: Vec<Stage> = Vec::new();
    let mut hold_deadline_ms = 0;
    let mut problem = |step: &Step, what: String| {
        problems.push(format!(
            "hold {}: {:?} -> {:?} ({}) at log index {} and log time {}: {what}",
            hold.0, step.from, step.to, step.reason, step.log_index, step.log_time_ms
        ));
    };
    for step in steps {
        let current = stages.last().copied();
        if let Some(current) = current {
            if step.log_index <= current.log_index {
                problem(step, format!("not after the previous step's index {}", current.log_index));
            }
            if step.from != Some(current.state) {
                problem(step, format!("the hold was {:?}", current.state));
            }
        }
        let t = step.log_time_ms;
        let due = current.and_then(|current| current.deadline_ms);
        let late = |what: &str| {
            due.filter(|&deadline_ms| deadline_ms <= t)
                .map(|deadline_ms| format!("{what} at or past its deadline {deadline_ms}"))
        };
        let (deadline_ms, wrong) = match (current.map(|stage| stage.state), step.to) {
            (None, StateName::Held) => {
                hold_deadline_ms = t + policy.hold_ttl_ms;
                (Some(hold_deadline_ms), None)
            }
            (Some(StateName::Held), StateName::Processing) => {
                (Some(t + policy.payment_grace_ms), late("checked out"))
            }
            (Some(StateName::Processing), StateName::Confirmed) => (None, late("confirmed")),
            // A declined payment gives the hold back only while both deadlines are ahead.
            (Some(StateName::Processing), StateName::Held) => (
                Some(hold_deadline_ms),
                late("held again").or_else(|| {
                    (hold_deadline_ms <= t).then(|| {
                        format!("held again at or past its hold deadline {hold_deadline_ms}")
                    })
                }),
            ),
            (Some(StateName::Held), StateName::Cancelled) => (None, late("cancelled")),
            // A payment declined after the hold deadline (the payment deadline still ahead)
            // ends the hold as expired: it may not be held again.
            (Some(StateName::Processing), StateName::Expired)
                if step.reason == "payment_declined" =>
            {
                let early = (t < hold_deadline_ms).then(|| {
                    format!("expired by a decline before its hold deadline {hold_deadline_ms}")
                });
                (None, early)
            }
            (Some(StateName::Held | StateName::Processing), StateName::Expired) => (
                None,
                due.filter(|&deadline_ms| t < deadline_ms)
                    .map(|deadline_ms| format!("expired before its deadline {deadline_ms}")),
            ),
            (from, to) => (None, Some(format!("no such transition ({from:?} -> {to:?})"))),
        };
        if let Some(wrong) = wrong {
            problem(step, wrong);
        }
        stages.push(Stage { log_index: step.log_index, state: step.to, deadline_ms });
    }
    Life { stages }
}

/// Log time never moves backwards along the log, and answers follow real-time order.
fn log_time_monotonic(
    operations: &[Operation],
    trails: &BTreeMap<HoldId, Vec<Step>>,
) -> CheckReport {
    let mut problems = Vec::new();
    // Every (index, time) pair anyone reported, with who reported it.
    let mut positions: Vec<(u64, u64, String)> = Vec::new();
    for operation in operations {
        if let Some(clock) = operation.clock() {
            positions.push((clock.log_index, clock.log_time_ms, format!("op {}", operation.op)));
        }
    }
    for (hold, steps) in trails {
        for step in steps {
            let who = format!("hold {}'s audit", hold.0);
            positions.push((step.log_index, step.log_time_ms, who));
        }
    }
    positions.sort();
    for pair in positions.windows(2) {
        let ((index_a, time_a, who_a), (index_b, time_b, who_b)) = (&pair[0], &pair[1]);
        let backwards = time_b < time_a;
        let split = index_a == index_b && time_a != time_b;
        if backwards || split {
            problems.push(format!(
                "log time {time_a} at index {index_a} ({who_a}) but {time_b} at index \
                 {index_b} ({who_b})"
            ));
        }
    }
    // Real-time order: an answer reflects at least every position answered before it was asked.
    let mut clocked: Vec<(&Operation, &Clock)> = operations
        .iter()
        .filter_map(|operation| operation.clock().map(|clock| (operation, clock)))
        .collect();
    let mut by_completion: Vec<(u64, u64, u64)> = clocked
        .iter()
        .filter_map(|(operation, clock)| {
            operation.complete_ns().map(|done| (done, clock.log_index, operation.op))
        })
        .collect();
    by_completion.sort_unstable();
    clocked.sort_by_key(|(operation, _)| operation.invoke_ns);
    let (mut next, mut seen): (usize, Option<(u64, u64)>) = (0, None);
    for (operation, clock) in &clocked {
        while next < by_completion.len() && by_completion[next].0 < operation.invoke_ns {
            let (_, index, op) = by_completion[next];
            if seen.is_none_or(|(highest, _)| index > highest) {
                seen = Some((index, op));
            }
            next += 1;
        }
        if let Some((highest, op)) = seen
            && clock.log_index < highest
        {
            problems.push(format!(
                "op {} reflects log index {} though op {op}, answered before it was asked, \
                 reflected {highest}",
                operation.op, clock.log_index
            ));
        }
    }
    CheckReport::new("log_time_monotonic", positions.len() as u64, problems)
}

/// The hold an operation's answer is about, if it is a hold answer or read.
fn hold_of(operation: &Operation) -> Option<HoldId> {
    match (&operation.call, operation.value()?) {
        (_, Observed::Held { hold, .. }) => Some(*hold),
        (Call::Write(Command::Client(client)), Observed::Done) => match client.request {
            ClientRequest::CancelHold { hold } => Some(hold),
            _ => None,
        },
        (Call::Read(Read::Hold { hold, .. }), Observed::Entity { .. }) => Some(*hold),
        _ => None,
    }
}

/// Hold answers and reads say what the trails make the hold at their position and log time.
fn reads_follow_deadlines(operations: &[Operation], lives: &BTreeMap<HoldId, Life>) -> CheckReport {
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let (Some(hold), Some(clock)) = (hold_of(operation), operation.clock()) else { continue };
        examined += 1;
        let said = match operation.value() {
            Some(Observed::Entity { state, .. }) => Some(*state),
            _ => clock.state,
        };
        let Some(said) = said else {
            problems.push(format!("op {}: hold {} answered without a state", operation.op, hold.0));
            continue;
        };
        let (index, time) = (clock.log_index, clock.log_time_ms);
        if matches!(said, StateName::Held | StateName::Processing)
            && clock.deadline_ms.is_none_or(|deadline_ms| deadline_ms <= time)
        {
            problems.push(format!(
                "op {}: hold {} reads {said:?} at log time {time} though its deadline {:?} passed",
                operation.op, hold.0, clock.deadline_ms
            ));
        }
        let Some(life) = lives.get(&hold) else {
            problems.push(format!("op {}: hold {} has no audit trail", operation.op, hold.0));
            continue;
        };
        let expected = life.at(index, time);
        if expected != Some((said, clock.deadline_ms)) {
            problems.push(format!(
                "op {}: hold {} reads {said:?} (deadline {:?}) at log index {index} and log time \
                 {time}; its trail makes it {expected:?}",
                operation.op, hold.0, clock.deadline_ms
            ));
        }
    }
    CheckReport::new("reads_follow_deadlines", examined, problems)
}

/// Every seat of every linearizable seat map is what the holds' trails make it.
fn seat_maps_follow_holds(operations: &[Operation], lives: &BTreeMap<HoldId, Life>) -> CheckReport {
    // Each hold's seats, from the answers that made it or read it.
    let mut seats_of: BTreeMap<HoldId, BTreeSet<SeatNo>> = BTreeMap::new();
    for operation in operations {
        if let (Some(hold), Some(Observed::Held { seats, .. } | Observed::Entity { seats, .. })) =
            (hold_of(operation), operation.value())
        {
            seats_of.entry(hold).or_default().extend(seats);
        }
    }
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let (Call::Read(Read::SeatMap { .. }), Some(Observed::Seats { seats }), Some(clock)) =
            (&operation.call, operation.value(), operation.clock())
        else {
            continue;
        };
        examined += 1;
        let (index, time) = (clock.log_index, clock.log_time_ms);
        // What each seat must be, and which hold makes it so.
        let mut expected: BTreeMap<SeatNo, (SeatStatus, HoldId)> = BTreeMap::new();
        for (&hold, life) in lives {
            let status = match life.at(index, time) {
                Some((StateName::Held | StateName::Processing, _)) => SeatStatus::Held,
                Some((StateName::Confirmed, _)) => SeatStatus::Booked,
                _ => continue,
            };
            for &seat in seats_of.get(&hold).into_iter().flatten() {
                if let Some((_, other)) = expected.insert(seat, (status, hold)) {
                    problems.push(format!(
                        "seat {seat} taken by holds {} and {} at log index {index}",
                        other.0, hold.0
                    ));
                }
            }
        }
        for (seat, &status) in seats.iter().enumerate() {
            let seat = seat as SeatNo;
            let (want, by) = expected
                .get(&seat)
                .map_or((SeatStatus::Free, None), |&(status, hold)| (status, Some(hold)));
            if status != want {
                problems.push(format!(
                    "op {}: seat {seat} reads {status:?} at log index {index} and log time \
                     {time}; the trails make it {want:?} (hold {by:?})",
                    operation.op
                ));
            }
        }
    }
    CheckReport::new("seat_maps_follow_holds", examined, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Verdict;
    use crate::check::history::{Event, EventKind};
    use crate::check::workload::{Mutation, short_deadline_policy};
    use crate::ids::SessionId;

    const SHOW: ShowId = ShowId(5);
    const HOLD: HoldId = HoldId(1);
    const TTL: u64 = crate::check::workload::SHORT_HOLD_TTL_MS;
    const GRACE: u64 = crate::check::workload::SHORT_PAYMENT_GRACE_MS;

    /// A history built one operation at a time, each answered as given.
    #[derive(Default)]
    struct Story {
        events: Vec<Event>,
    }

    impl Story {
        fn op(&mut self, call: Call, span: (u64, u64), value: Observed, clock: Clock) -> &mut Self {
            let op = self.events.len() as u64;
            let f = call.function().to_owned();
            let event = |kind, time_ns, value, clock| Event {
                op,
                process: op,
                kind,
                f: f.clone(),
                call: call.clone(),
                value,
                error: None,
                time_ns,
                clock,
            };
            self.events.push(event(EventKind::Invoke, span.0, None, None));
            self.events.push(event(EventKind::Ok, span.1, Some(value), Some(clock)));
            self
        }

        /// Hold 1 of seats 0 and 1, made by the entry at index 10, log time 1,000.
        fn hold(&mut self) -> &mut Self {
            let mutation = Mutation::Hold { show: SHOW.0, seats: vec![0, 1], grant: None };
            let call = Call::Write(mutation.command(SessionId(1), 1, 1));
            let value = Observed::Held { hold: HOLD, seats: vec![0, 1] };
            self.op(call, (0, 1), value, clock(10, 1_000, Some(1_000 + TTL), StateName::Held))
        }

        /// Hold 1 read at `index` and log time `time`, as `state` with `deadline`.
        fn read(
            &mut self,
            span: (u64, u64),
            (index, time): (u64, u64),
            state: StateName,
            deadline: Option<u64>,
        ) -> &mut Self {
            let read = Read::Hold { show: SHOW, session: SessionId(1), hold: HOLD };
            let value = Observed::Entity { state, seats: vec![0, 1], offer: None };
            self.op(Call::Read(read), span, value, clock(index, time, deadline, state))
        }

        /// The three-seat map read at `index` and log time `time`.
        fn map(
            &mut self,
            span: (u64, u64),
            (index, time): (u64, u64),
            seats: [SeatStatus; 3],
        ) -> &mut Self {
            let value = Observed::Seats { seats: seats.to_vec() };
            let clock =
                Clock { log_index: index, log_time_ms: time, deadline_ms: None, state: None };
            self.op(Call::Read(Read::SeatMap { show: SHOW }), span, value, clock)
        }

        fn history(&self) -> History {
            let mut events = self.events.clone();
            events.sort_by_key(|event| event.time_ns);
            History { events }
        }
    }

    fn clock(index: u64, time: u64, deadline: Option<u64>, state: StateName) -> Clock {
        Clock { log_index: index, log_time_ms: time, deadline_ms: deadline, state: Some(state) }
    }

    fn step(from: Option<StateName>, to: StateName, index: u64, time: u64) -> Step {
        let reason = if to == Expired { "deadline_passed" } else { "requested" }.to_owned();
        Step { from, to, reason, log_index: index, log_time_ms: time }
    }

    /// Hold 1's trail: made at index 10 (log time 1,000), then `rest`.
    fn trail(rest: &[(StateName, StateName, u64, u64)]) -> BTreeMap<HoldId, Vec<Step>> {
        let mut steps = vec![step(None, StateName::Held, 10, 1_000)];
        steps.extend(rest.iter().map(|&(from, to, index, time)| step(Some(from), to, index, time)));
        BTreeMap::from([(HOLD, steps)])
    }

    /// The names of the checks that find `history` invalid with `trails`.
    fn invalid(history: &History, trails: &BTreeMap<HoldId, Vec<Step>>) -> Vec<String> {
        check_deadlines(history, SHOW, &short_deadline_policy(), trails)
            .unwrap()
            .into_iter()
            .filter(|report| report.verdict == Verdict::Invalid)
            .map(|report| report.check)
            .collect()
    }

    use SeatStatus::{Booked, Free, Held};
    use StateName::{Confirmed, Expired, Processing};

    #[test]
    fn a_hold_that_expires_on_time_and_reads_so_is_valid() {
        let mut story = Story::default();
        story
            .hold()
            .read((2, 3), (12, 1_500), StateName::Held, Some(1_000 + TTL))
            .map((4, 5), (12, 1_500), [Held, Held, Free])
            // Overdue before the sweep: reads expired, its seats free.
            .read((6, 7), (14, 1_000 + TTL), Expired, None)
            .map((8, 9), (14, 1_000 + TTL), [Free, Free, Free]);
        let trails = trail(&[(StateName::Held, Expired, 20, 1_000 + TTL + 50)]);
        assert_eq!(invalid(&story.history(), &trails), Vec::<String>::new());
        let reports =
            check_deadlines(&story.history(), SHOW, &short_deadline_policy(), &trails).unwrap();
        assert!(reports.iter().all(|report| report.examined > 0), "{reports:?}");
    }

    #[test]
    fn a_hold_paid_in_time_is_booked() {
        let mut story = Story::default();
        story.hold().map((2, 3), (13, 1_100 + GRACE), [Booked, Booked, Free]);
        let trails = trail(&[
            (StateName::Held, Processing, 11, 1_100),
            (Processing, Confirmed, 12, 1_100 + GRACE - 1),
        ]);
        assert_eq!(invalid(&story.history(), &trails), Vec::<String>::new());
    }

    #[test]
    fn a_hold_confirmed_after_its_payment_deadline_is_caught() {
        let mut story = Story::default();
        story.hold().map((2, 3), (13, 1_100 + GRACE), [Booked, Booked, Free]);
        let trails = trail(&[
            (StateName::Held, Processing, 11, 1_100),
            (Processing, Confirmed, 12, 1_100 + GRACE),
        ]);
        assert_eq!(invalid(&story.history(), &trails), ["deadlines_kept"]);
    }

    #[test]
    fn a_hold_checked_out_or_cancelled_late_or_expired_early_is_caught() {
        let history = Story::default().hold().history();
        for rest in [
            (StateName::Held, Processing, 11, 1_000 + TTL),
            (StateName::Held, StateName::Cancelled, 11, 1_000 + TTL + 1),
            (StateName::Held, Expired, 11, 1_000 + TTL - 1),
        ] {
            assert_eq!(invalid(&history, &trail(&[rest])), ["deadlines_kept"], "{rest:?}");
        }
    }

    #[test]
    fn a_decline_ends_a_hold_only_once_its_hold_deadline_passed() {
        let history = Story::default().hold().history();
        let declined = |time| {
            let mut trails = trail(&[(StateName::Held, Processing, 11, 1_000 + TTL - 100)]);
            let mut step = step(Some(Processing), Expired, 12, time);
            step.reason = "payment_declined".into();
            trails.get_mut(&HOLD).unwrap().push(step);
            trails
        };
        // Past the hold deadline, though the payment deadline is still ahead: expired.
        assert_eq!(invalid(&history, &declined(1_000 + TTL)), Vec::<String>::new());
        assert_eq!(invalid(&history, &declined(1_000 + TTL - 1)), ["deadlines_kept"]);
    }

    #[test]
    fn an_overdue_hold_read_as_held_is_caught() {
        let mut story = Story::default();
        story.hold().read((2, 3), (14, 1_000 + TTL), StateName::Held, Some(1_000 + TTL));
        let trails = trail(&[(StateName::Held, Expired, 20, 1_000 + TTL + 50)]);
        assert_eq!(invalid(&story.history(), &trails), ["reads_follow_deadlines"]);
    }

    #[test]
    fn an_overdue_holds_seats_read_held_are_caught() {
        let mut story = Story::default();
        story.hold().map((2, 3), (14, 1_000 + TTL), [Held, Held, Free]);
        let trails = trail(&[(StateName::Held, Expired, 20, 1_000 + TTL + 50)]);
        assert_eq!(invalid(&story.history(), &trails), ["seat_maps_follow_holds"]);
    }

    #[test]
    fn log_time_moving_backwards_or_an_answer_older_than_one_before_it_is_caught() {
        // A later index with an earlier log time.
        let mut story = Story::default();
        story.hold().read((2, 3), (12, 999), StateName::Held, Some(1_000 + TTL));
        let trails = trail(&[]);
        assert_eq!(invalid(&story.history(), &trails), ["log_time_monotonic"]);
        // A read asked after the hold was answered, reflecting an earlier position (a stale
        // read: the hold is not there yet).
        let mut story = Story::default();
        story.hold().map((2, 3), (9, 1_000), [Free, Free, Free]);
        assert_eq!(invalid(&story.history(), &trails), ["log_time_monotonic"]);
    }
}
