//! Deadline checks: the rules about time that the model (it has no clock) cannot judge, over a
//! show whose holds and payments have short deadlines, so that expiry races checkout and
//! payment all the time.
//!
//! Owns four checks of one show, and two more when its admission lane is on, judged from the log
//! times the answers carry (their `as_of` labels, [`Clock`]) and from the audit trail of each
//! hold and admission ticket, read at the end of the run (every transition with the log index
//! and log time of the entry that made it, [`Trails`]):
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
//!   are free, overdue or not yet swept), and never held by two holds at once. Ticket answers
//!   and reads likewise: a grant answered or read at log time past its deadline reads
//!   expired, and every ticket answer says what its trail makes it, with its grant deadline.
//! - `grants_kept` (a show with a lane): no grant used by a hold, and no ticket granted or
//!   left, at or past its deadline (the grant deadline, the waiting limit), none expired before
//!   it; a hold made with a grant used it in the very entry that made the hold.
//! - `grants_advance` (a show with a lane): after every entry that changed the lane, no more
//!   grants are out than the window allows; while fewer are, nobody waits (a grant that ends,
//!   by use, leave or expiry, passes to the next in line in the same entry); grants go in line
//!   order (no ticket granted while an older one still waits); and no grant or waiting ticket
//!   is still live past its deadline (an entry that touches the lane first expires everything
//!   overdue in it: "checked in the claim, not by a sweeper").
//! - `offers_kept` (a show with a waitlist): no offer accepted or declined, and no waitlist
//!   entry's offer ended by its waiter, at or past the offer's deadline, none expired before
//!   it; an accepted offer became its hold in the very entry that accepted it.
//! - `offers_advance` (a show with a waitlist): after every entry that changed the waitlist,
//!   each offer made went to one waiter and each offer ended ended its waiter's turn; offers go
//!   in line order (no entry offered while an older one still waits); and the seats of an offer
//!   that ended go on to the next waiter in the same entry (while anyone still waits after an
//!   entry, it made at least as many offers as it ended).
//!
//! On a show with a waitlist, `seat_maps_follow_holds` is not run: seats wait in the waitlist's
//! pool and on offers no trail names the seats of, and a held seat stays held past its deadline
//! until the sweep while anyone waits. Entry and offer answers and reads are judged by
//! `reads_follow_deadlines` as hold and ticket answers are: an entry whose offer is overdue, and
//! an overdue open offer, read expired.
//!
//! Sound under these assumptions: on a show without a waitlist, nothing but holds, payments and
//! the lane decides its seats; on a show with one, every entry wants one seat, the waitlist is
//! first in, first out (its default policy) and is never reconfigured, and the show is never
//! cancelled; no booking of it is cancelled, its lane is never reconfigured during the run, the
//! expiry sweeps are never cut short by their budget (a test show is small), and every hold made
//! of it is known, its seats from an answer and its trail from the audit (a process that could
//! not settle an unknown outcome fails the run's liveness anyway), and so is every ticket, entry
//! and offer (the caller reads the trail of every id the show may have given one). Trusts the
//! audit's log times no more than any answer's: the trails and the answers are checked against
//! each other and against the policy.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::audit::StateName;
use crate::command::{ClientRequest, Command, ShowPolicy};
use crate::ids::{EntryId, HoldId, OfferId, SeatNo, ShowId, TicketId};
use crate::read::SeatStatus;

use super::booking::CheckReport;
use super::history::{Call, Clock, Completion, History, HistoryError, Observed, Operation, Read};

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

/// A show's audit trails as read after a run: every hold's and every admission ticket's.
///
/// Each trail is read on its own, linearizably, while the leaders' sweeps still expire what
/// comes due, so one trail may end at a later log position than another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trails {
    /// Each hold's transitions, oldest first.
    pub holds: BTreeMap<HoldId, Vec<Step>>,
    /// Each admission ticket's transitions, oldest first (none on a show without a lane).
    #[serde(default)]
    pub tickets: BTreeMap<TicketId, Vec<Step>>,
    /// Each waitlist entry's transitions, oldest first (none on a show without a waitlist).
    #[serde(default)]
    pub entries: BTreeMap<EntryId, Vec<Step>>,
    /// Each waitlist offer's transitions, oldest first.
    #[serde(default)]
    pub offers: BTreeMap<OfferId, Vec<Step>>,
    /// The log index every trail was read at or after (the earliest read's `as_of`): up to it,
    /// the trails hold every transition of the show, so the checks that replay the lane as a
    /// whole stop there. `None`: complete whatever the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_to: Option<u64>,
}

/// A hold's or ticket's state after a step of its trail, with the deadline that state runs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stage {
    log_index: u64,
    state: StateName,
    /// For a live state (held, processing; waiting, granted): its deadline (a waiting
    /// ticket's is its waiting limit).
    deadline_ms: Option<u64>,
}

/// A hold's or ticket's life by its trail: its stages, oldest first.
struct Life {
    stages: Vec<Stage>,
}

impl Life {
    /// The state as a reader at `log_index` and `log_time_ms` must see it, with its deadline
    /// while live: `None` before it was made. Overdue reads expired, swept or not.
    fn at(&self, log_index: u64, log_time_ms: u64) -> Option<(StateName, Option<u64>)> {
        let stage = self.stages.iter().take_while(|stage| stage.log_index <= log_index).last()?;
        match stage.deadline_ms {
            Some(deadline_ms) if deadline_ms <= log_time_ms => Some((StateName::Expired, None)),
            deadline_ms => Some((stage.state, deadline_ms)),
        }
    }
}

/// Every hold's, ticket's, entry's and offer's life by its trail.
struct Lives {
    holds: BTreeMap<HoldId, Life>,
    tickets: BTreeMap<TicketId, Life>,
    entries: BTreeMap<EntryId, Life>,
    offers: BTreeMap<OfferId, Life>,
}

/// Runs the deadline checks on the operations of `show` in `history`, with the show's `policy`,
/// its admission window if its lane is on (the grant checks run only then), and the audit
/// trails of its holds, tickets, waitlist entries and offers (`trails`, read after the run; the
/// offer checks run when there are entries or offers).
///
/// # Errors
///
/// If the history is malformed.
pub fn check_deadlines(
    history: &History,
    show: ShowId,
    policy: &ShowPolicy,
    admission_window: Option<u32>,
    trails: &Trails,
) -> Result<Vec<CheckReport>, HistoryError> {
    let operations: Vec<Operation> = history
        .operations()?
        .into_iter()
        .filter(|operation| operation.call.show() == Some(show))
        .collect();
    let (mut kept, mut grants_kept, mut offers_kept) = (Vec::new(), Vec::new(), Vec::new());
    let lives = Lives {
        holds: replay_all(&trails.holds, "hold", &mut kept, |steps, problems| {
            replay(steps, policy, problems)
        }),
        tickets: replay_all(&trails.tickets, "ticket", &mut grants_kept, |steps, problems| {
            replay_ticket(steps, policy, problems)
        }),
        entries: replay_all(&trails.entries, "entry", &mut offers_kept, |steps, problems| {
            replay_entry(steps, policy, problems)
        }),
        offers: replay_all(&trails.offers, "offer", &mut offers_kept, |steps, problems| {
            replay_offer(steps, policy, problems)
        }),
    };
    let waitlist = !trails.entries.is_empty() || !trails.offers.is_empty();
    let examined_steps = trails.holds.values().map(Vec::len).sum::<usize>() as u64;
    let mut reports = vec![
        CheckReport::new("deadlines_kept", examined_steps, kept),
        log_time_monotonic(&operations, trails),
        reads_follow_deadlines(&operations, &lives),
    ];
    if !waitlist {
        reports.push(seat_maps_follow_holds(&operations, &lives.holds));
    }
    if let Some(window) = admission_window {
        grants_kept.extend(grants_used_by_their_holds(&operations, trails));
        let examined_steps = trails.tickets.values().map(Vec::len).sum::<usize>() as u64;
        reports.push(CheckReport::new("grants_kept", examined_steps, grants_kept));
        reports.push(grants_advance(trails, policy, window));
    }
    if waitlist {
        offers_kept.extend(offers_became_their_holds(&operations, trails));
        let steps: usize =
            trails.entries.values().chain(trails.offers.values()).map(Vec::len).sum();
        reports.push(CheckReport::new("offers_kept", steps as u64, offers_kept));
        reports.push(offers_advance(trails));
    }
    Ok(reports)
}

/// Replays every trail of one kind (`kind`, as problems name it) with `replay_one`, which
/// reports what it finds wrong in a trail: the lives, and the problems named by id.
fn replay_all<Id: Copy + Ord + std::fmt::Display>(
    trails: &BTreeMap<Id, Vec<Step>>,
    kind: &str,
    problems: &mut Vec<String>,
    mut replay_one: impl FnMut(&[Step], &mut Vec<String>) -> Life,
) -> BTreeMap<Id, Life> {
    let mut lives = BTreeMap::new();
    for (&id, steps) in trails {
        let mut found = Vec::new();
        lives.insert(id, replay_one(steps, &mut found));
        problems.extend(found.into_iter().map(|problem| format!("{kind} {id}: {problem}")));
    }
    lives
}

/// A trail's stages, replayed step by step: `transition` judges each step against the stage
/// before it (`None` for the first) and gives the deadline the new stage runs to, if any, and
/// what is wrong with the step, if anything. Steps go forward along the log: strictly, unless
/// `same_entry` (a join and its grant or offer are two steps of one entry).
fn replay_steps(
    steps: &[Step],
    same_entry: bool,
    problems: &mut Vec<String>,
    mut transition: impl FnMut(&Step, Option<Stage>) -> (Option<u64>, Option<String>),
) -> Life {
    let mut stages: Vec<Stage> = Vec::new();
    for step in steps {
        let mut wrong = Vec::new();
        let current = stages.last().copied();
        if let Some(current) = current {
            let (previous, index) = (current.log_index, step.log_index);
            if same_entry && index < previous {
                wrong.push(format!("before the previous step's index {previous}"));
            } else if !same_entry && index <= previous {
                wrong.push(format!("not after the previous step's index {previous}"));
            }
            if step.from != Some(current.state) {
                wrong.push(format!("it was {:?}", current.state));
            }
        }
        let (deadline_ms, problem) = transition(step, current);
        wrong.extend(problem);
        for what in wrong {
            problems.push(format!(
                "{:?} -> {:?} ({}) at log index {} and log time {}: {what}",
                step.from, step.to, step.reason, step.log_index, step.log_time_ms
            ));
        }
        stages.push(Stage { log_index: step.log_index, state: step.to, deadline_ms });
    }
    Life { stages }
}

/// What is wrong with a step made at log time `t` that must come before the deadline `due` of
/// the stage it leaves (`what` it did), if anything.
fn late(due: Option<u64>, t: u64, what: &str) -> Option<String> {
    due.filter(|&deadline_ms| deadline_ms <= t)
        .map(|deadline_ms| format!("{what} at or past its deadline {deadline_ms}"))
}

/// What is wrong with an expiry at log time `t` of a stage whose deadline is `due`, if anything.
fn early(due: Option<u64>, t: u64) -> Option<String> {
    due.filter(|&deadline_ms| t < deadline_ms)
        .map(|deadline_ms| format!("expired before its deadline {deadline_ms}"))
}

/// Replays one hold's trail by the policy: its stages, and in `problems` every transition made
/// at the wrong log time or not allowed at all.
fn replay(steps: &[Step], policy: &ShowPolicy, problems: &mut Vec<String>) -> Life {
    let mut hold_deadline_ms = 0;
    replay_steps(steps, false, problems, |step, current| {
        let t = step.log_time_ms;
        let due = current.and_then(|current| current.deadline_ms);
        match (current.map(|stage| stage.state), step.to) {
            (None, StateName::Held) => {
                hold_deadline_ms = t + policy.hold_ttl_ms;
                (Some(hold_deadline_ms), None)
            }
            (Some(StateName::Held), StateName::Processing) => {
                (Some(t + policy.payment_grace_ms), late(due, t, "checked out"))
            }
            (Some(StateName::Processing), StateName::Confirmed) => {
                (None, late(due, t, "confirmed"))
            }
            // A declined payment gives the hold back only while both deadlines are ahead.
            (Some(StateName::Processing), StateName::Held) => (
                Some(hold_deadline_ms),
                late(due, t, "held again")
                    .or_else(|| late(Some(hold_deadline_ms), t, "held again")),
            ),
            (Some(StateName::Held), StateName::Cancelled) => (None, late(due, t, "cancelled")),
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
            (Some(StateName::Held | StateName::Processing), StateName::Expired) => {
                (None, early(due, t))
            }
            (from, to) => (None, Some(format!("no such transition ({from:?} -> {to:?})"))),
        }
    })
}

/// Replays one admission ticket's trail by the policy: its stages (a waiting ticket's deadline
/// is its waiting limit, a granted one's its grant deadline), and in `problems` every
/// transition made at the wrong log time or not allowed at all.
fn replay_ticket(steps: &[Step], policy: &ShowPolicy, problems: &mut Vec<String>) -> Life {
    replay_steps(steps, true, problems, |step, current| {
        let t = step.log_time_ms;
        let due = current.and_then(|current| current.deadline_ms);
        match (current.map(|stage| stage.state), step.to) {
            (None, StateName::Waiting) => (Some(t + policy.ticket_wait_ms), None),
            (Some(StateName::Waiting), StateName::Granted) => {
                (Some(t + policy.grant_ttl_ms), late(due, t, "granted"))
            }
            (Some(StateName::Granted), StateName::Consumed) => {
                (None, late(due, t, "used by a hold"))
            }
            (Some(StateName::Waiting | StateName::Granted), StateName::Left) => {
                (None, late(due, t, "left"))
            }
            // Turning the lane off ends every ticket, whatever its deadline.
            (Some(StateName::Waiting | StateName::Granted), StateName::Expired) => {
                (None, early(due, t).filter(|_| step.reason != "lane_disabled"))
            }
            (from, to) => (None, Some(format!("no such transition ({from:?} -> {to:?})"))),
        }
    })
}

/// Replays one waitlist entry's trail by the policy: its stages (an offered entry's deadline is
/// its offer's; a waiting one has none), and in `problems` every transition made at the wrong
/// log time or not allowed at all.
fn replay_entry(steps: &[Step], policy: &ShowPolicy, problems: &mut Vec<String>) -> Life {
    replay_steps(steps, true, problems, |step, current| {
        let t = step.log_time_ms;
        let due = current.and_then(|current| current.deadline_ms);
        match (current.map(|stage| stage.state), step.to) {
            (None, StateName::Waiting) | (Some(StateName::Waiting), StateName::Left) => {
                (None, None)
            }
            (Some(StateName::Waiting), StateName::Offered) => (Some(t + policy.offer_ttl_ms), None),
            (Some(StateName::Offered), StateName::Accepted) => {
                (None, late(due, t, "its offer accepted"))
            }
            (Some(StateName::Offered), StateName::Declined) => {
                (None, late(due, t, "its offer declined"))
            }
            (Some(StateName::Offered), StateName::Left) => (None, late(due, t, "left")),
            (Some(StateName::Offered), StateName::Expired) => (None, early(due, t)),
            (from, to) => (None, Some(format!("no such transition ({from:?} -> {to:?})"))),
        }
    })
}

/// Replays one waitlist offer's trail by the policy: its stages (an open offer's deadline is
/// the offer deadline from the entry that made it), and in `problems` every transition made at
/// the wrong log time or not allowed at all. A withdrawal (the show cancelled) has no deadline
/// to keep.
fn replay_offer(steps: &[Step], policy: &ShowPolicy, problems: &mut Vec<String>) -> Life {
    replay_steps(steps, false, problems, |step, current| {
        let t = step.log_time_ms;
        let due = current.and_then(|current| current.deadline_ms);
        match (current.map(|stage| stage.state), step.to) {
            (None, StateName::Open) => (Some(t + policy.offer_ttl_ms), None),
            (Some(StateName::Open), StateName::Accepted) => (None, late(due, t, "accepted")),
            (Some(StateName::Open), StateName::Declined) => (None, late(due, t, "declined")),
            (Some(StateName::Open), StateName::Withdrawn) => (None, None),
            (Some(StateName::Open), StateName::Expired) => (None, early(due, t)),
            (from, to) => (None, Some(format!("no such transition ({from:?} -> {to:?})"))),
        }
    })
}

/// Every hold answered as made with a grant used that grant in the entry that made it: the
/// ticket's trail has it consumed at the log index the hold's trail has it made (an answer's own
/// index is a retry's when the answer was replayed).
fn grants_used_by_their_holds(operations: &[Operation], trails: &Trails) -> Vec<String> {
    let mut problems = Vec::new();
    for operation in operations {
        let Call::Write(Command::Client(client)) = &operation.call else { continue };
        let ClientRequest::Hold { grant: Some(ticket), .. } = client.request else { continue };
        let Some(Observed::Held { hold, .. }) = operation.value() else { continue };
        let index_of = |steps: Option<&Vec<Step>>, to: StateName| {
            steps?.iter().find(|step| step.to == to).map(|step| step.log_index)
        };
        let made_at = index_of(trails.holds.get(hold), StateName::Held);
        let used_at = index_of(trails.tickets.get(&ticket), StateName::Consumed);
        if made_at.is_none() || used_at != made_at {
            problems.push(format!(
                "op {}: hold {} was made with grant {} at log index {made_at:?}; the ticket's \
                 trail has it used at {used_at:?}",
                operation.op, hold.0, ticket.0
            ));
        }
    }
    problems
}

/// Every offer answered as accepted became its hold in the entry that accepted it: the offer's
/// trail has it accepted at the log index the hold's trail has it made.
fn offers_became_their_holds(operations: &[Operation], trails: &Trails) -> Vec<String> {
    let mut problems = Vec::new();
    for operation in operations {
        let Call::Write(Command::Client(client)) = &operation.call else { continue };
        let ClientRequest::AcceptOffer { offer } = client.request else { continue };
        let Some(Observed::Held { hold, .. }) = operation.value() else { continue };
        let index_of = |steps: Option<&Vec<Step>>, to: StateName| {
            steps?.iter().find(|step| step.to == to).map(|step| step.log_index)
        };
        let made_at = index_of(trails.holds.get(hold), StateName::Held);
        let accepted_at = index_of(trails.offers.get(&offer), StateName::Accepted);
        if made_at.is_none() || accepted_at != made_at {
            problems.push(format!(
                "op {}: offer {offer} was accepted as hold {hold}, made at log index {made_at:?}; \
                 the offer's trail has it accepted at {accepted_at:?}",
                operation.op
            ));
        }
    }
    problems
}

/// The waitlist after every entry that changed it, up to the index the trails are complete to,
/// replayed from the entries' and offers' trails: each offer made to one waiter, in line order,
/// and passed on (see the module docs).
fn offers_advance(trails: &Trails) -> CheckReport {
    /// The entry and offer steps of one log index.
    type AtIndex<'a> = (Vec<(EntryId, &'a Step)>, Vec<&'a Step>);
    let mut at: BTreeMap<u64, AtIndex<'_>> = BTreeMap::new();
    let complete = |step: &&Step| trails.complete_to.is_none_or(|to| step.log_index <= to);
    for (&entry, steps) in &trails.entries {
        for step in steps.iter().filter(complete) {
            at.entry(step.log_index).or_default().0.push((entry, step));
        }
    }
    for steps in trails.offers.values() {
        for step in steps.iter().filter(complete) {
            at.entry(step.log_index).or_default().1.push(step);
        }
    }
    let count = |steps: &[&Step], from: Option<StateName>, to: &[StateName]| {
        steps.iter().filter(|step| step.from == from && to.contains(&step.to)).count()
    };
    // The waiting entries, oldest (lowest id: ids are handed out in log order) first.
    let mut waiting: BTreeSet<EntryId> = BTreeSet::new();
    let mut problems = Vec::new();
    for (&index, (entries, offers)) in &at {
        let mut offered_here = Vec::new();
        for &(entry, step) in entries {
            match step.to {
                StateName::Waiting => drop(waiting.insert(entry)),
                StateName::Offered => {
                    waiting.remove(&entry);
                    offered_here.push(entry);
                }
                _ => drop(waiting.remove(&entry)),
            }
        }
        let entry_steps: Vec<&Step> = entries.iter().map(|(_, step)| *step).collect();
        let opened = count(offers, None, &[StateName::Open]);
        let open = Some(StateName::Open);
        let ended = [StateName::Declined, StateName::Expired, StateName::Withdrawn];
        let (accepted, closed) =
            (count(offers, open, &[StateName::Accepted]), count(offers, open, &ended));
        let offered = Some(StateName::Offered);
        let entry_ended = [StateName::Declined, StateName::Expired, StateName::Left];
        let entries_accepted = count(&entry_steps, offered, &[StateName::Accepted]);
        let entries_closed = count(&entry_steps, offered, &entry_ended);
        if (opened, accepted, closed) != (offered_here.len(), entries_accepted, entries_closed) {
            problems.push(format!(
                "log index {index}: {opened} offers made, {accepted} accepted and {closed} \
                 ended, but {} entries offered, {entries_accepted} accepted and \
                 {entries_closed} ended",
                offered_here.len()
            ));
        }
        for entry in &offered_here {
            if let Some(older) = waiting.iter().find(|waiter| *waiter < entry) {
                problems.push(format!(
                    "entry {entry} offered at log index {index} while the older entry {older} \
                     still waited"
                ));
            }
        }
        if let Some(first) = waiting.first()
            && opened < closed
        {
            problems.push(format!(
                "log index {index} ended {closed} offers but made {opened} while entry {first} \
                 waited"
            ));
        }
    }
    CheckReport::new("offers_advance", at.len() as u64, problems)
}

/// The lane after every entry that changed it, up to the index the trails are complete to,
/// replayed from the tickets' trails: within the window, passed on, in line order, and settled
/// (see the module docs).
fn grants_advance(trails: &Trails, policy: &ShowPolicy, window: u32) -> CheckReport {
    // Every ticket step by entry; one ticket's steps of one entry stay in their order.
    let mut entries: BTreeMap<u64, Vec<(TicketId, &Step)>> = BTreeMap::new();
    for (&ticket, steps) in &trails.tickets {
        let complete = |step: &&Step| trails.complete_to.is_none_or(|to| step.log_index <= to);
        for step in steps.iter().filter(complete) {
            entries.entry(step.log_index).or_default().push((ticket, step));
        }
    }
    // The live tickets: waiting or granted, with their deadlines.
    let mut live: BTreeMap<TicketId, (StateName, u64)> = BTreeMap::new();
    let mut problems = Vec::new();
    for (&index, steps) in &entries {
        let time = steps.iter().map(|(_, step)| step.log_time_ms).max().unwrap_or(0);
        let mut granted_here = Vec::new();
        for &(ticket, step) in steps {
            match step.to {
                StateName::Waiting => {
                    live.insert(ticket, (step.to, step.log_time_ms + policy.ticket_wait_ms));
                }
                StateName::Granted => {
                    live.insert(ticket, (step.to, step.log_time_ms + policy.grant_ttl_ms));
                    granted_here.push(ticket);
                }
                _ => {
                    live.remove(&ticket);
                }
            }
        }
        let granted = live.values().filter(|(state, _)| *state == StateName::Granted).count();
        let waiting: Vec<TicketId> = live
            .iter()
            .filter(|(_, (state, _))| *state == StateName::Waiting)
            .map(|(&ticket, _)| ticket)
            .collect();
        if granted > window as usize {
            problems.push(format!(
                "{granted} grants out after log index {index}, the window is {window}"
            ));
        }
        if let Some(first) = waiting.first()
            && granted < window as usize
        {
            problems.push(format!(
                "only {granted} grants out after log index {index} (window {window}) while \
                 ticket {} waited",
                first.0
            ));
        }
        for ticket in granted_here {
            if let Some(older) = waiting.iter().find(|waiter| **waiter < ticket) {
                problems.push(format!(
                    "ticket {} granted at log index {index} while the older ticket {} still \
                     waited",
                    ticket.0, older.0
                ));
            }
        }
        for (ticket, (state, deadline_ms)) in &live {
            if *deadline_ms <= time {
                problems.push(format!(
                    "ticket {} still {state:?} after log index {index} at log time {time}, past \
                     its deadline {deadline_ms}",
                    ticket.0
                ));
            }
        }
    }
    CheckReport::new("grants_advance", entries.len() as u64, problems)
}

/// Log time never moves backwards along the log, and answers follow real-time order.
fn log_time_monotonic(operations: &[Operation], trails: &Trails) -> CheckReport {
    let mut problems = Vec::new();
    // Every (index, time) pair anyone reported, with who reported it.
    let mut positions: Vec<(u64, u64, String)> = Vec::new();
    for operation in operations {
        if let Some(clock) = operation.clock() {
            positions.push((clock.log_index, clock.log_time_ms, format!("op {}", operation.op)));
        }
    }
    let mut audited = |kind: &str, id: u64, steps: &[Step]| {
        for step in steps {
            positions.push((step.log_index, step.log_time_ms, format!("{kind} {id}'s audit")));
        }
    };
    trails.holds.iter().for_each(|(id, steps)| audited("hold", id.0, steps));
    trails.tickets.iter().for_each(|(id, steps)| audited("ticket", id.0, steps));
    trails.entries.iter().for_each(|(id, steps)| audited("entry", id.0, steps));
    trails.offers.iter().for_each(|(id, steps)| audited("offer", id.0, steps));
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

/// The admission ticket an operation's answer is about, if it is a ticket answer or read.
fn ticket_of(operation: &Operation) -> Option<TicketId> {
    match (&operation.call, operation.value()?) {
        (_, Observed::Queued { ticket }) => Some(*ticket),
        (Call::Write(Command::Client(client)), Observed::Done) => match client.request {
            ClientRequest::LeaveQueue { ticket } => Some(ticket),
            _ => None,
        },
        (Call::Read(Read::Ticket { ticket, .. }), Observed::Entity { .. }) => Some(*ticket),
        _ => None,
    }
}

/// The waitlist entry or offer a read is about, with its life if its trail was read, and the
/// states in which it has a deadline (an entry's is its offer's).
fn waitlist_subject<'a>(
    operation: &Operation,
    lives: &'a Lives,
) -> Option<(String, Option<&'a Life>, &'static [StateName])> {
    match (&operation.call, operation.value()?) {
        (Call::Read(Read::Entry { entry, .. }), Observed::Entity { .. }) => {
            Some((format!("entry {entry}"), lives.entries.get(entry), &[StateName::Offered]))
        }
        (Call::Read(Read::Offer { offer, .. }), Observed::Entity { .. }) => {
            Some((format!("offer {offer}"), lives.offers.get(offer), &[StateName::Open]))
        }
        _ => None,
    }
}

/// Hold, ticket, entry and offer answers and reads say what the trails make the hold, ticket,
/// entry or offer at their position and log time.
fn reads_follow_deadlines(operations: &[Operation], lives: &Lives) -> CheckReport {
    let mut problems = Vec::new();
    let mut examined = 0;
    for operation in operations {
        let Some(clock) = operation.clock() else { continue };
        let (what, life, live) = if let Some(hold) = hold_of(operation) {
            let live: &[StateName] = &[StateName::Held, StateName::Processing];
            (format!("hold {}", hold.0), lives.holds.get(&hold), live)
        } else if let Some(ticket) = ticket_of(operation) {
            (format!("ticket {}", ticket.0), lives.tickets.get(&ticket), &[StateName::Granted][..])
        } else if let Some(subject) = waitlist_subject(operation, lives) {
            subject
        } else {
            continue;
        };
        examined += 1;
        let said = match operation.value() {
            Some(Observed::Entity { state, .. }) => Some(*state),
            _ => clock.state,
        };
        let Some(said) = said else {
            problems.push(format!("op {}: {what} answered without a state", operation.op));
            continue;
        };
        let (index, time) = (clock.log_index, clock.log_time_ms);
        if live.contains(&said) && clock.deadline_ms.is_none_or(|deadline_ms| deadline_ms <= time) {
            problems.push(format!(
                "op {}: {what} reads {said:?} at log time {time} though its deadline {:?} passed",
                operation.op, clock.deadline_ms
            ));
        }
        let Some(life) = life else {
            problems.push(format!("op {}: {what} has no audit trail", operation.op));
            continue;
        };
        // A ticket's answer names a grant's deadline only (never a waiting ticket's limit).
        let expected = life
            .at(index, time)
            .map(|(state, deadline_ms)| (state, deadline_ms.filter(|_| live.contains(&state))));
        if expected != Some((said, clock.deadline_ms)) {
            problems.push(format!(
                "op {}: {what} reads {said:?} (deadline {:?}) at log index {index} and log time \
                 {time}; its trail makes it {expected:?}",
                operation.op, clock.deadline_ms
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
    // Holds no answer or read names the seats of (made by a write whose answer was lost), and
    // the seats such writes asked for: a map may show one of those seats taken by such a hold.
    let unnamed: Vec<&Life> = lives
        .iter()
        .filter(|(hold, _)| !seats_of.contains_key(hold))
        .map(|(_, life)| life)
        .collect();
    let asked_unanswered: BTreeSet<SeatNo> = operations
        .iter()
        .filter(|operation| operation.completion == Completion::Unknown)
        .filter_map(|operation| match &operation.call {
            Call::Write(Command::Client(client)) => match &client.request {
                ClientRequest::Hold { seats, .. } => Some(seats.iter().copied()),
                _ => None,
            },
            _ => None,
        })
        .flatten()
        .collect();
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
        // What the unnamed holds alive at this position could make a seat they asked for.
        let unnamed_make: Vec<SeatStatus> = unnamed
            .iter()
            .filter_map(|life| match life.at(index, time) {
                Some((StateName::Held | StateName::Processing, _)) => Some(SeatStatus::Held),
                Some((StateName::Confirmed, _)) => Some(SeatStatus::Booked),
                _ => None,
            })
            .collect();
        for (seat, &status) in seats.iter().enumerate() {
            let seat = seat as SeatNo;
            let (want, by) = expected
                .get(&seat)
                .map_or((SeatStatus::Free, None), |&(status, hold)| (status, Some(hold)));
            let unnamed_hold =
                by.is_none() && asked_unanswered.contains(&seat) && unnamed_make.contains(&status);
            if status != want && !unnamed_hold {
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
    const GRANT: u64 = crate::check::workload::SHORT_GRANT_TTL_MS;
    const WINDOW: u32 = 1;

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

        /// A hold of seats 0 and 1 whose answer was lost: its outcome is unknown.
        fn hold_unanswered(&mut self) -> &mut Self {
            let mutation = Mutation::Hold { show: SHOW.0, seats: vec![0, 1], grant: None };
            let call = Call::Write(mutation.command(SessionId(1), 1, 1));
            let op = self.events.len() as u64;
            self.events.push(Event {
                op,
                process: op,
                kind: EventKind::Invoke,
                f: call.function().to_owned(),
                call,
                value: None,
                error: None,
                time_ns: 0,
                clock: None,
            });
            self
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

        /// The join that made `ticket`, answered at `clock`.
        fn join(&mut self, span: (u64, u64), ticket: u64, clock: Clock) -> &mut Self {
            let call =
                Call::Write(Mutation::JoinQueue { show: SHOW.0 }.command(SessionId(1), 1, 1));
            self.op(call, span, Observed::Queued { ticket: TicketId(ticket) }, clock)
        }

        /// Hold `hold` of seat 0, made with the grant of `ticket` at `index` and log time
        /// `time`.
        fn hold_with(
            &mut self,
            span: (u64, u64),
            ticket: u64,
            hold: u64,
            (index, time): (u64, u64),
        ) -> &mut Self {
            let mutation = Mutation::Hold { show: SHOW.0, seats: vec![0], grant: Some(ticket) };
            let call = Call::Write(mutation.command(SessionId(1), 2, 1));
            let value = Observed::Held { hold: HoldId(hold), seats: vec![0] };
            self.op(call, span, value, clock(index, time, Some(time + TTL), StateName::Held))
        }

        /// `ticket` read at `index` and log time `time`, as `state` with `deadline`.
        fn read_ticket(
            &mut self,
            span: (u64, u64),
            ticket: u64,
            (index, time): (u64, u64),
            state: StateName,
            deadline: Option<u64>,
        ) -> &mut Self {
            let read = Read::Ticket { show: SHOW, session: SessionId(1), ticket: TicketId(ticket) };
            let value = Observed::Entity { state, seats: Vec::new(), offer: None };
            self.op(Call::Read(read), span, value, clock(index, time, deadline, state))
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
    fn trail(rest: &[(StateName, StateName, u64, u64)]) -> Trails {
        let mut steps = vec![step(None, StateName::Held, 10, 1_000)];
        steps.extend(rest.iter().map(|&(from, to, index, time)| step(Some(from), to, index, time)));
        Trails { holds: BTreeMap::from([(HOLD, steps)]), ..Trails::default() }
    }

    /// The names of the checks that find `history` invalid with `trails` (the grant checks too,
    /// with a window of [`WINDOW`], when there are tickets).
    fn invalid(history: &History, trails: &Trails) -> Vec<String> {
        let window = (!trails.tickets.is_empty()).then_some(WINDOW);
        check_deadlines(history, SHOW, &short_deadline_policy(), window, trails)
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
            check_deadlines(&story.history(), SHOW, &short_deadline_policy(), None, &trails)
                .unwrap();
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
            trails.holds.get_mut(&HOLD).unwrap().push(step);
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
    fn seats_of_a_hold_whose_answer_was_lost_are_held_only_while_its_trail_says() {
        // Hold 1's answer was lost: only its trail knows it (made at index 10, expired at 20).
        let trails = trail(&[(StateName::Held, Expired, 20, 1_000 + TTL + 50)]);
        let mut story = Story::default();
        story.hold_unanswered().map((2, 3), (14, 1_100), [Held, Held, Free]);
        assert_eq!(invalid(&story.history(), &trails), Vec::<String>::new());
        // Past its expiry, or on a seat it never asked for, or with no write asking: caught.
        let mut story = Story::default();
        story.hold_unanswered().map((2, 3), (21, 1_000 + TTL + 60), [Held, Held, Free]);
        assert_eq!(invalid(&story.history(), &trails), ["seat_maps_follow_holds"]);
        let mut story = Story::default();
        story.hold_unanswered().map((2, 3), (14, 1_100), [Held, Held, Held]);
        assert_eq!(invalid(&story.history(), &trails), ["seat_maps_follow_holds"]);
        let mut story = Story::default();
        story.map((2, 3), (14, 1_100), [Held, Held, Free]);
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

    fn ticket_step(from: Option<StateName>, to: StateName, reason: &str, at: (u64, u64)) -> Step {
        Step { from, to, reason: reason.to_owned(), log_index: at.0, log_time_ms: at.1 }
    }

    use StateName::{Consumed, Granted, Left, Waiting};

    /// A one-grant lane: ticket 2 joins and is granted at index 20 (log time 2,000), ticket 3
    /// joins at 21 (2,100) and waits; at index 22 (log time `used`), hold 4 uses 2's grant,
    /// which passes to 3.
    fn lane(used: u64) -> Trails {
        let mut trails = Trails::default();
        trails.tickets.insert(
            TicketId(2),
            vec![
                ticket_step(None, Waiting, "requested", (20, 2_000)),
                ticket_step(Some(Waiting), Granted, "next_in_line", (20, 2_000)),
                ticket_step(Some(Granted), Consumed, "grant_consumed", (22, used)),
            ],
        );
        trails.tickets.insert(
            TicketId(3),
            vec![
                ticket_step(None, Waiting, "requested", (21, 2_100)),
                ticket_step(Some(Waiting), Granted, "next_in_line", (22, used)),
            ],
        );
        trails.holds.insert(HoldId(4), vec![step(None, StateName::Held, 22, used)]);
        trails
    }

    /// The answers of [`lane`]: the two joins, and the hold made with 2's grant.
    fn lane_story(used: u64) -> Story {
        let mut story = Story::default();
        story
            .join((0, 1), 2, clock(20, 2_000, Some(2_000 + GRANT), Granted))
            .join((2, 3), 3, clock(21, 2_100, None, Waiting))
            .hold_with((4, 5), 2, 4, (22, used));
        story
    }

    #[test]
    fn grants_used_in_time_and_passed_on_in_line_are_valid() {
        let mut story = lane_story(2_200);
        story
            .read_ticket((6, 7), 3, (25, 3_000), Granted, Some(2_200 + GRANT))
            // Overdue before the sweep: reads expired.
            .read_ticket((8, 9), 3, (26, 2_200 + GRANT), StateName::Expired, None);
        let mut trails = lane(2_200);
        let swept = (30, 2_200 + GRANT + 100);
        let expired = ticket_step(Some(Granted), StateName::Expired, "deadline_passed", swept);
        trails.tickets.get_mut(&TicketId(3)).unwrap().push(expired);
        assert_eq!(invalid(&story.history(), &trails), Vec::<String>::new());
        let policy = short_deadline_policy();
        let reports =
            check_deadlines(&story.history(), SHOW, &policy, Some(WINDOW), &trails).unwrap();
        for check in ["grants_kept", "grants_advance", "reads_follow_deadlines"] {
            let examined = reports.iter().find(|report| report.check == check).unwrap().examined;
            assert!(examined > 0, "{check}: {reports:?}");
        }
    }

    #[test]
    fn a_grant_used_at_its_deadline_is_caught() {
        let used = 2_000 + GRANT;
        assert_eq!(invalid(&lane_story(used).history(), &lane(used)), ["grants_kept"]);
        // A hold answered as made with a grant its trail never used.
        let mut story = Story::default();
        story.hold_with((0, 1), 3, 4, (22, 2_200));
        assert_eq!(invalid(&story.history(), &lane(2_200)), ["grants_kept"]);
    }

    #[test]
    fn an_overdue_grant_read_as_granted_is_caught() {
        let mut story = lane_story(2_200);
        story.read_ticket((6, 7), 3, (26, 2_200 + GRANT), Granted, Some(2_200 + GRANT));
        assert_eq!(invalid(&story.history(), &lane(2_200)), ["reads_follow_deadlines"]);
    }

    #[test]
    fn a_grant_out_of_line_past_the_window_or_never_expired_is_caught() {
        let history = Story::default().history();
        // Ticket 5 joins at index 23; ticket 2 leaves at 24, and its grant goes to `granted`.
        let passed_to = |granted: u64| {
            let mut trails = lane(2_200);
            let tickets = &mut trails.tickets;
            tickets.get_mut(&TicketId(3)).unwrap().pop();
            tickets.get_mut(&TicketId(2)).unwrap()[2] =
                ticket_step(Some(Granted), Left, "requested", (24, 2_400));
            let joined = ticket_step(None, Waiting, "requested", (23, 2_300));
            tickets.insert(TicketId(5), vec![joined]);
            let grant = ticket_step(Some(Waiting), Granted, "next_in_line", (24, 2_400));
            tickets.get_mut(&TicketId(granted)).unwrap().push(grant);
            trails.holds.clear();
            trails
        };
        assert_eq!(invalid(&history, &passed_to(3)), Vec::<String>::new());
        // To 5, while the older 3 still waits.
        assert_eq!(invalid(&history, &passed_to(5)), ["grants_advance"]);
        // Both granted by index 21 with a window of one.
        let mut wide = lane(2_200);
        wide.tickets.get_mut(&TicketId(3)).unwrap()[1] =
            ticket_step(Some(Waiting), Granted, "next_in_line", (21, 2_100));
        wide.tickets.get_mut(&TicketId(2)).unwrap().pop();
        wide.holds.clear();
        assert_eq!(invalid(&history, &wide), ["grants_advance"]);
        // Ticket 2's grant still out when ticket 5 joins past its deadline (3 waiting).
        let mut stuck = lane(2_200);
        stuck.tickets.get_mut(&TicketId(2)).unwrap().pop();
        stuck.tickets.get_mut(&TicketId(3)).unwrap().pop();
        stuck.holds.clear();
        let late = (40, 2_000 + GRANT);
        stuck.tickets.insert(TicketId(5), vec![ticket_step(None, Waiting, "requested", late)]);
        assert_eq!(invalid(&history, &stuck), ["grants_advance"]);
        // The same join, with the grant expired and passed to 3 in its entry, is valid.
        let expired = ticket_step(Some(Granted), StateName::Expired, "deadline_passed", late);
        stuck.tickets.get_mut(&TicketId(2)).unwrap().push(expired);
        let granted = ticket_step(Some(Waiting), Granted, "next_in_line", late);
        stuck.tickets.get_mut(&TicketId(3)).unwrap().push(granted);
        assert_eq!(invalid(&history, &stuck), Vec::<String>::new());
        // Ticket 2's trail read before that entry, 3's and 5's after: judged only up to the
        // earliest read, the lane is whole.
        stuck.tickets.get_mut(&TicketId(2)).unwrap().pop();
        assert_eq!(invalid(&history, &stuck), ["grants_advance"]);
        stuck.complete_to = Some(39);
        assert_eq!(invalid(&history, &stuck), Vec::<String>::new());
    }

    const OFFER: u64 = crate::check::workload::SHORT_OFFER_TTL_MS;

    use StateName::{Accepted, Offered, Open};

    /// A waitlist: entry 2 joins at index 20 (log time 2,000) and is offered seat 0 at 21
    /// (2,100: offer 4); entry 3 joins at 22 (2,200) and waits; offer 4 expires at 30 (log time
    /// `expired`) and passes to entry 3 (offer 5); at index 31 (log time `accepted`) entry 3
    /// accepts it as hold 6.
    fn waitlist(expired: u64, accepted: u64) -> Trails {
        let mut trails = Trails::default();
        trails.entries.insert(
            EntryId(2),
            vec![
                ticket_step(None, Waiting, "requested", (20, 2_000)),
                ticket_step(Some(Waiting), Offered, "next_in_line", (21, 2_100)),
                ticket_step(Some(Offered), StateName::Expired, "deadline_passed", (30, expired)),
            ],
        );
        trails.entries.insert(
            EntryId(3),
            vec![
                ticket_step(None, Waiting, "requested", (22, 2_200)),
                ticket_step(Some(Waiting), Offered, "next_in_line", (30, expired)),
                ticket_step(Some(Offered), Accepted, "offer_accepted", (31, accepted)),
            ],
        );
        trails.offers.insert(
            OfferId(4),
            vec![
                ticket_step(None, Open, "next_in_line", (21, 2_100)),
                ticket_step(Some(Open), StateName::Expired, "deadline_passed", (30, expired)),
            ],
        );
        trails.offers.insert(
            OfferId(5),
            vec![
                ticket_step(None, Open, "next_in_line", (30, expired)),
                ticket_step(Some(Open), Accepted, "offer_accepted", (31, accepted)),
            ],
        );
        trails.holds.insert(HoldId(6), vec![step(None, StateName::Held, 31, accepted)]);
        trails
    }

    impl Story {
        /// Entry 3's acceptance of offer 5, answered as hold 6 of seat 0 made at `index` and
        /// log time `time`.
        fn accept(&mut self, span: (u64, u64), (index, time): (u64, u64)) -> &mut Self {
            let mutation = Mutation::AcceptOffer { show: SHOW.0, offer: 5 };
            let call = Call::Write(mutation.command(SessionId(1), 3, 1));
            let value = Observed::Held { hold: HoldId(6), seats: vec![0] };
            self.op(call, span, value, clock(index, time, Some(time + TTL), StateName::Held))
        }

        /// A read of `entry` (with its `offer`) or, without an entry, of `offer`, at `index`
        /// and log time `time`, as `state` with `deadline`.
        fn read_waitlist(
            &mut self,
            span: (u64, u64),
            (entry, offer): (Option<u64>, u64),
            (index, time): (u64, u64),
            state: StateName,
            deadline: Option<u64>,
        ) -> &mut Self {
            let session = SessionId(1);
            let (read, offer) = match entry {
                Some(entry) => {
                    (Read::Entry { show: SHOW, session, entry: EntryId(entry) }, Some(offer))
                }
                None => (Read::Offer { show: SHOW, session, offer: OfferId(offer) }, None),
            };
            let value = Observed::Entity { state, seats: Vec::new(), offer: offer.map(OfferId) };
            self.op(Call::Read(read), span, value, clock(index, time, deadline, state))
        }
    }

    #[test]
    fn offers_kept_in_time_and_passed_on_in_line_are_valid() {
        let (expired, accepted) = (2_100 + OFFER + 50, 2_100 + OFFER + 100);
        let mut story = Story::default();
        story
            .read_waitlist((0, 1), (Some(2), 4), (25, 2_500), Offered, Some(2_100 + OFFER))
            // Overdue before the sweep: the entry and the offer read expired.
            .read_waitlist((2, 3), (Some(2), 4), (26, 2_100 + OFFER), StateName::Expired, None)
            .read_waitlist((4, 5), (None, 4), (26, 2_100 + OFFER), StateName::Expired, None)
            .read_waitlist((6, 7), (None, 5), (30, expired), Open, Some(expired + OFFER))
            .accept((8, 9), (31, accepted));
        let trails = waitlist(expired, accepted);
        assert_eq!(invalid(&story.history(), &trails), Vec::<String>::new());
        let reports =
            check_deadlines(&story.history(), SHOW, &short_deadline_policy(), None, &trails)
                .unwrap();
        for check in ["offers_kept", "offers_advance", "reads_follow_deadlines"] {
            let examined = reports.iter().find(|report| report.check == check).unwrap().examined;
            assert!(examined > 0, "{check}: {reports:?}");
        }
        // The seat-map rule knows nothing of the waitlist's seats: not run with one.
        assert!(reports.iter().all(|report| report.check != "seat_maps_follow_holds"));
    }

    #[test]
    fn an_offer_accepted_at_its_deadline_or_expired_early_is_caught() {
        let expired = 2_100 + OFFER + 50;
        let history = Story::default().history();
        // Accepted at the deadline: both the offer's and the entry's trails say so.
        let trails = waitlist(expired, expired + OFFER);
        assert_eq!(invalid(&history, &trails), ["offers_kept"]);
        // Offer 4 (and entry 2 with it) expired before the deadline.
        let early = 2_100 + OFFER - 1;
        let trails = waitlist(early, early + 100);
        assert_eq!(invalid(&history, &trails), ["offers_kept"]);
        // An acceptance answered with a hold its trail made in another entry.
        let mut story = Story::default();
        story.accept((0, 1), (32, expired + 200));
        let mut trails = waitlist(expired, expired + 100);
        trails.holds.insert(HoldId(6), vec![step(None, StateName::Held, 32, expired + 200)]);
        assert_eq!(invalid(&story.history(), &trails), ["offers_kept"]);
    }

    #[test]
    fn an_overdue_offer_read_as_open_is_caught() {
        let expired = 2_100 + OFFER + 50;
        let trails = waitlist(expired, expired + 100);
        let deadline = Some(2_100 + OFFER);
        let mut story = Story::default();
        story.read_waitlist((0, 1), (Some(2), 4), (26, 2_100 + OFFER), Offered, deadline);
        assert_eq!(invalid(&story.history(), &trails), ["reads_follow_deadlines"]);
        let mut story = Story::default();
        story.read_waitlist((0, 1), (None, 4), (26, 2_100 + OFFER), Open, deadline);
        assert_eq!(invalid(&story.history(), &trails), ["reads_follow_deadlines"]);
    }

    #[test]
    fn an_offer_out_of_line_or_not_passed_on_is_caught() {
        let (expired, accepted) = (2_100 + OFFER + 50, 2_100 + OFFER + 100);
        let history = Story::default().history();
        // Entry 7 joins at index 23 and waits behind entry 3: offer 5 goes to 7 instead.
        let mut skipped = waitlist(expired, accepted);
        let entries = &mut skipped.entries;
        let three = entries.get_mut(&EntryId(3)).unwrap();
        three.truncate(1);
        entries.insert(
            EntryId(7),
            vec![
                ticket_step(None, Waiting, "requested", (23, 2_300)),
                ticket_step(Some(Waiting), Offered, "next_in_line", (30, expired)),
                ticket_step(Some(Offered), Accepted, "offer_accepted", (31, accepted)),
            ],
        );
        assert_eq!(invalid(&history, &skipped), ["offers_advance"]);
        // Offer 4 expires and nobody is offered its seat while entry 3 waits.
        let mut stuck = waitlist(expired, accepted);
        stuck.entries.get_mut(&EntryId(3)).unwrap().truncate(1);
        stuck.offers.remove(&OfferId(5));
        stuck.holds.clear();
        assert_eq!(invalid(&history, &stuck), ["offers_advance"]);
        // Judged only up to the earliest trail's read, the entry before the expiry is whole.
        stuck.complete_to = Some(29);
        assert_eq!(invalid(&history, &stuck), Vec::<String>::new());
    }
}
