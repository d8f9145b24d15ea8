//! Expiry by log time: what `Tick` does for one show.
//!
//! Owns the sweep of the deadline indexes: overdue holds, offers, grants and waiting tickets are
//! expired and their capacity passed on; idempotency records and capacity event ids past their
//! retention are forgotten. A command that meets an overdue object already treats it as expired,
//! so a late tick delays only the release, never extends a deadline. Never reads a clock.

use crate::state::{Ctx, Show};

impl Show {
    /// Expires or prunes at most `budget` due objects; returns how many.
    pub(crate) fn tick(&mut self, ctx: &mut Ctx<'_>, budget: u32) -> u32 {
        let now = ctx.now;
        let mut done = 0;
        while done < budget {
            let Some(&(deadline_ms, hold)) = self.hold_deadlines.first() else { break };
            if deadline_ms > now {
                break;
            }
            self.expire_hold(ctx, hold);
            done += 1;
        }
        while done < budget {
            let Some(&(deadline_ms, offer)) = self.waitlist.offer_deadlines.first() else { break };
            if deadline_ms > now {
                break;
            }
            self.expire_offer(ctx, offer);
            done += 1;
        }
        done += self.settle_lane(ctx, budget - done);
        self.advance_lane(ctx);
        done += self.prune_idempotency(now, budget - done);
        while done < budget {
            let Some(&(forget_ms, event)) = self.waitlist.capacity_event_deadlines.first() else {
                break;
            };
            if forget_ms > now {
                break;
            }
            self.waitlist.capacity_event_deadlines.pop_first();
            assert_eq!(self.waitlist.capacity_events.remove(&event), Some(forget_ms));
            done += 1;
        }
        // Within its budget, a tick leaves nothing due: whatever it released was passed on to
        // waiters with deadlines in the future.
        assert!(done <= budget);
        assert!(done == budget || !self.has_due(now), "a tick left something due");
        done
    }

    /// Whether a tick at `now_ms` would change anything: something is due, or the admission
    /// lane has room and waiters to grant.
    pub(crate) fn tick_would_change(&self, now_ms: u64) -> bool {
        self.has_due(now_ms)
            || (self.lane.enabled
                && (self.lane.granted.len() as u64) < u64::from(self.lane.window)
                && !self.lane.waiting.is_empty())
    }

    /// Whether anything is due at `now_ms`.
    pub(crate) fn has_due(&self, now_ms: u64) -> bool {
        let due = |first: Option<u64>| first.is_some_and(|deadline| deadline <= now_ms);
        due(self.hold_deadlines.first().map(|(deadline, _)| *deadline))
            || due(self.waitlist.offer_deadlines.first().map(|(deadline, _)| *deadline))
            || due(self.lane.granted.first().map(|(deadline, _)| *deadline))
            || due(self.lane.waiting_deadlines.first().map(|(deadline, _)| *deadline))
            || due(self.idempotency_deadlines.first().map(|(deadline, _, _)| *deadline))
            || due(self.waitlist.capacity_event_deadlines.first().map(|(deadline, _)| *deadline))
    }
}
