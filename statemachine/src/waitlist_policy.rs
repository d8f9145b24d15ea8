//! The waitlist's policies (seed 000, "fairness is a policy before it is a data structure"):
//! strict FIFO, priority bands, a lottery drawn with a seed recorded in the log, and offer waves.
//!
//! Owns who is served next and how many offers may be open at once; `waitlist.rs` owns what
//! serving does. Every change of rules bumps the policy version and is kept, so an entry's or a
//! promotion's version names the rules (and the draw) it followed. The ordering never changes
//! while anyone waits, so a waiter's place is never rewritten; the wave size may change at any
//! time. A draw key is a hash of the seed and the entry id: every replica, and every later
//! audit, draws the same.

use sha2::{Digest as _, Sha256};

use crate::audit::{OrderKey, Reason};
use crate::ids::{EntryId, SeatNo};
use crate::limits::WAITLIST_WAVE_OFFERS_MAX;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{
    Ctx, LotteryDraw, PolicyChange, PolicyInForce, Show, Waitlist, WaitlistEntry, WaitlistOrdering,
    WaitlistRules,
};

/// The band of a session with no claim under priority bands: served after every claimed band.
pub const BAND_GUEST: u8 = crate::limits::WAITLIST_BANDS_MAX - 1;

/// An entry's draw key in a lottery drawn with `seed`: the first 8 bytes of
/// SHA-256(seed as 8 little-endian bytes, then the entry id as 8 little-endian bytes), read
/// big-endian. Lower keys are served first.
pub fn draw_key(seed: u64, entry: EntryId) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(entry.0.to_le_bytes());
    let digest = hasher.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 digest has 8 bytes"))
}

/// Where an entry stands in serving order: drawn entries by draw key, then everyone else by
/// order key (band, join time, sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServingKey {
    /// 0 for a drawn entry (or any entry outside a lottery), 1 for a lottery's late joiner.
    tier: u8,
    /// The draw key of a drawn entry, else 0.
    draw: u64,
    /// The entry's order key.
    order: OrderKey,
}

impl Waitlist {
    /// The rules and draw in force at a policy version: those of the latest change at or
    /// before it (the defaults before any).
    pub fn policy_at(&self, version: u32) -> PolicyInForce {
        let change = self.change_at(version);
        PolicyInForce {
            rules: change.rules,
            draw: self.policy.draws.get(&change.ordering_since).copied(),
        }
    }

    fn change_at(&self, version: u32) -> PolicyChange {
        let found = self.policy.changes.range(..=version).next_back();
        found.map(|(_, change)| *change).unwrap_or_default()
    }

    /// The rules and draw in force now.
    pub fn policy_now(&self) -> PolicyInForce {
        self.policy_at(self.policy_version)
    }

    /// The band a session joins in: its claimed band under priority bands, else band 0 (FIFO
    /// and lottery ignore bands).
    pub(crate) fn band_for(&self, claimed: u8) -> u8 {
        match self.policy_now().rules.ordering {
            WaitlistOrdering::Bands => claimed,
            WaitlistOrdering::Fifo | WaitlistOrdering::Lottery { .. } => 0,
        }
    }

    /// The draw key of an entry that was in its policy's draw, if it was.
    pub fn drawn_key(&self, entry: &WaitlistEntry) -> Option<u64> {
        let draw = self.policy_at(entry.policy_version).draw?;
        (entry.id.0 < draw.id_bound).then(|| draw_key(draw.seed, entry.id))
    }

    /// Where an entry stands in serving order under the rules it joined under. Two entries that
    /// waited at the same time joined under the same rules (the ordering cannot change while
    /// anyone waits), so their keys compare.
    pub fn serving_key(&self, entry: &WaitlistEntry) -> ServingKey {
        let change = self.policy_at(entry.policy_version);
        match (change.rules.ordering, change.draw) {
            (WaitlistOrdering::Lottery { .. }, Some(_)) => match self.drawn_key(entry) {
                Some(draw) => ServingKey { tier: 0, draw, order: entry.order },
                None => ServingKey { tier: 1, draw: 0, order: entry.order },
            },
            _ => ServingKey { tier: 0, draw: 0, order: entry.order },
        }
    }

    /// The waiting entry to serve next, if one may be served now: none while a lottery is not
    /// drawn, or while a wave's worth of offers is open.
    pub fn next_in_line(&self) -> Option<OrderKey> {
        let change = self.policy_now();
        let wave = change.rules.wave_offers_max;
        if wave > 0 && self.offer_deadlines.len() >= wave as usize {
            return None;
        }
        match change.rules.ordering {
            WaitlistOrdering::Lottery { .. } if change.draw.is_none() => None,
            WaitlistOrdering::Lottery { .. } => match self.policy.drawn.first() {
                Some((_, entry)) => Some(self.entries[entry].order),
                None => self.waiting.first().copied(),
            },
            WaitlistOrdering::Fifo | WaitlistOrdering::Bands => self.waiting.first().copied(),
        }
    }

    /// Waiting entries served before `entry` (itself waiting or about to join).
    pub fn ahead_of(&self, entry: &WaitlistEntry) -> u32 {
        let change = self.policy_now();
        let ahead = match (change.rules.ordering, change.draw) {
            (WaitlistOrdering::Fifo | WaitlistOrdering::Bands, _) => {
                self.waiting.range(..entry.order).count()
            }
            // Before the draw, the draw decides: everyone else waiting may come first.
            (WaitlistOrdering::Lottery { .. }, None) => {
                self.waiting.iter().filter(|order| order.seq != entry.id.0).count()
            }
            (WaitlistOrdering::Lottery { .. }, Some(draw)) => match self.drawn_key(entry) {
                Some(key) => self.policy.drawn.range(..(key, entry.id)).count(),
                None => {
                    let late_ahead = self
                        .waiting
                        .range(..entry.order)
                        .filter(|order| {
                            !self.policy.drawn.contains(&(
                                draw_key(draw.seed, EntryId(order.seq)),
                                EntryId(order.seq),
                            ))
                        })
                        .count();
                    self.policy.drawn.len() + late_ahead
                }
            },
        };
        ahead as u32
    }

    /// Keeps a released seat for the waiters, since log time `now_ms`.
    pub(crate) fn pool_seat(&mut self, seat: SeatNo, now_ms: u64) {
        assert!(self.pool.insert(seat), "seat {seat} pooled twice");
        assert!(self.pooled_since.insert(seat, now_ms).is_none());
    }

    /// Takes the lowest seat out of the pool, with the log time it entered the pool.
    pub(crate) fn unpool_first(&mut self) -> Option<(SeatNo, u64)> {
        let seat = self.pool.pop_first()?;
        let since = self.pooled_since.remove(&seat);
        Some((seat, since.unwrap_or_else(|| panic!("pooled seat {seat} had no time"))))
    }

    /// The log time the longest-pooled seat entered the pool, if any seat is pooled.
    pub fn oldest_pooled_ms(&self) -> Option<u64> {
        self.pooled_since.values().min().copied()
    }

    /// Takes a waiting entry out of the line (and out of the draw's order).
    pub(crate) fn stop_waiting(&mut self, entry: EntryId) {
        let found = &self.entries[&entry];
        let order = found.order;
        if let Some(key) = self.drawn_key(found) {
            self.policy.drawn.remove(&(key, entry));
        }
        assert!(self.waiting.remove(&order), "entry {entry} was waiting");
    }
}

impl Show {
    /// Sets the waitlist's rules under a new policy version. Repeating the current version with
    /// its rules is a duplicate; the ordering may change only while nobody waits.
    pub(crate) fn set_waitlist_policy(
        &mut self,
        ctx: &mut Ctx<'_>,
        policy_version: u32,
        rules: WaitlistRules,
    ) -> Outcome {
        self.require_not_cancelled()?;
        if rules.wave_offers_max > WAITLIST_WAVE_OFFERS_MAX {
            return Err(Rejection::invalid(format!(
                "wave_offers_max: must be 0..={WAITLIST_WAVE_OFFERS_MAX}"
            )));
        }
        let current = self.waitlist.policy_now();
        let version = self.waitlist.policy_version;
        if policy_version == version && rules == current.rules {
            return Ok(Reply::WaitlistPolicySet {
                show: self.id,
                policy_version,
                rules,
                duplicate: true,
            });
        }
        if policy_version <= version {
            return Err(Rejection::invalid(format!(
                "policy_version: a change of rules needs a version above {version}"
            )));
        }
        let waiting = self.waitlist.waiting.len();
        if rules.ordering != current.rules.ordering && waiting > 0 {
            return Err(Rejection::WaitlistInUse { waiting: waiting as u32 });
        }
        // The same ordering keeps its start, and so its draw (a wave change does not undo a
        // lottery); a new ordering starts with nobody waiting, so nobody is in a draw.
        let ordering_since = if rules.ordering == current.rules.ordering {
            self.waitlist.change_at(version).ordering_since
        } else {
            assert!(self.waitlist.policy.drawn.is_empty(), "nobody waits, so nobody is drawn");
            policy_version
        };
        self.waitlist.policy_version = policy_version;
        self.waitlist.policy.changes.insert(policy_version, PolicyChange { rules, ordering_since });
        self.audit_change(ctx, Some(self.status), Reason::WaitlistPolicySet);
        self.promote(ctx);
        assert_eq!(self.waitlist.policy_now().rules, rules);
        Ok(Reply::WaitlistPolicySet { show: self.id, policy_version, rules, duplicate: false })
    }

    /// Draws the lottery with the operator's seed: every waiting entry gets its draw key, and
    /// serving begins. Drawing again with the same seed is a duplicate.
    pub(crate) fn draw_lottery(&mut self, ctx: &mut Ctx<'_>, seed: u64) -> Outcome {
        self.require_not_cancelled()?;
        let change = self.waitlist.policy_now();
        let WaitlistOrdering::Lottery { draw_at_ms } = change.rules.ordering else {
            return Err(Rejection::NotALottery);
        };
        if let Some(draw) = change.draw {
            if draw.seed != seed {
                return Err(Rejection::LotteryAlreadyDrawn { seed: draw.seed });
            }
            return Ok(Reply::LotteryDrawn {
                show: self.id,
                seed,
                entries: draw.entries,
                duplicate: true,
            });
        }
        if ctx.now < draw_at_ms {
            return Err(Rejection::LotteryNotDue { draw_at_ms });
        }
        let waiting: Vec<EntryId> =
            self.waitlist.waiting.iter().map(|order| EntryId(order.seq)).collect();
        assert!(self.waitlist.policy.drawn.is_empty(), "an undrawn lottery has no draw order");
        for entry in &waiting {
            assert!(self.waitlist.policy.drawn.insert((draw_key(seed, *entry), *entry)));
        }
        let draw = LotteryDraw {
            seed,
            index: ctx.index,
            id_bound: self.next_id,
            drawn_ms: ctx.now,
            entries: waiting.len() as u32,
        };
        // The draw belongs to the change that set the lottery.
        let since = self.waitlist.change_at(self.waitlist.policy_version).ordering_since;
        assert!(self.waitlist.policy.draws.insert(since, draw).is_none());
        self.audit_change(ctx, Some(self.status), Reason::LotteryDrawn);
        self.promote(ctx);
        Ok(Reply::LotteryDrawn { show: self.id, seed, entries: draw.entries, duplicate: false })
    }
}

impl crate::state::Group {
    /// The shows whose lottery may be drawn at `now_ms` (log time) and is not yet: what a
    /// leader's draw worker proposes `DrawLottery` for, with a seed of its own.
    pub fn lotteries_due(&self, now_ms: u64) -> Vec<crate::ids::ShowId> {
        self.shows
            .values()
            .filter(|show| show.status != crate::state::ShowStatus::Cancelled)
            .filter(|show| {
                let policy = show.waitlist.policy_now();
                matches!(policy.rules.ordering,
                    WaitlistOrdering::Lottery { draw_at_ms } if draw_at_ms <= now_ms)
                    && policy.draw.is_none()
            })
            .map(|show| show.id)
            .collect()
    }
}
