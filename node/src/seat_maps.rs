//! Seat maps at on-sale rates, for both API skins: each show's map encoded once per rebuild and
//! shared by every read until the next, at most one rebuild per show at a time (a thousand
//! browsers asking at once wait for one rebuild, never start a thousand), and a map offered as
//! fresh only by a replica that confirmed it has applied every acknowledged write; and what
//! changed since a map a caller kept, so that a reader who polls pays for the change, not for
//! the whole map again.
//!
//! During an on-sale the hot show's map is read thousands of times a second while entries are
//! applied hundreds of times a second, and building a map walks every seat under the replica's
//! read lock, which holds up apply. Owns, per show, the last encoded map and the single-flight
//! lock around its rebuild; the encoding is the skin's (gRPC packs bytes, REST writes a compact
//! JSON body), given as a function, so this file never imports either skin.
//!
//! Freshness: a rebuild first asks [`HostedGroup::confirm_fresh`] whether this replica has
//! applied up to its leader's read index (within [`FRESH_CONFIRM_MS`]). A map built after that
//! reflects every write acknowledged before the rebuild began; it is served for
//! [`SEAT_MAP_REFRESH_MS`] and a browser may keep it for [`AVAILABILITY_MAX_AGE_S`], which
//! together stay inside the 2 s that a replica's map may lag (shared/DESIGN.md). A replica
//! that cannot confirm (cut off from its leader, or slow to apply) builds a map labelled not
//! fresh, which a caller that needs freshness refuses to serve (`503` with `Retry-After`).
//!
//! Changes: each rebuild compares its statuses with the previous build's and keeps the seats
//! that differ, one step per rebuild, for [`CHANGE_STEPS_MAX`] rebuilds or until the steps
//! together name a quarter of the seats. A caller that names the position of a map it has
//! (group and log index) gets the union of the steps since that position with each seat's
//! status now, when that position is a rebuild this node kept and the union is at most an
//! eighth of the seats (beyond that a whole compact map is as small) or [`CHANGES_SENT_MIN`];
//! otherwise the whole map.
//! Only exact positions of this node's rebuilds qualify: between two rebuilds a seat may have
//! changed and changed back, which no step records.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use raft::GroupId;
use statemachine::{AsOf, Group, Rejection, SeatMap, ShowId};
use tokio::time::Instant;

use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::metrics::Metrics;
use crate::service::Service;

/// The most shows whose encoded map is kept (a map of the largest show is about 200 KB).
pub const SEAT_MAPS_CACHED_MAX: usize = 256;

/// How long an encoded map is served after it was built while its show keeps changing.
pub const SEAT_MAP_REFRESH_MS: u64 = 50;

/// How long a rebuild may take to confirm that this replica is fresh.
pub const FRESH_CONFIRM_MS: u64 = 700;

/// How long a browser or an HTTP cache may keep a fresh map (`Cache-Control: max-age`).
pub const AVAILABILITY_MAX_AGE_S: u64 = 1;

/// How far behind the leader a map served as fresh may be (shared/DESIGN.md: 2 s).
pub const SEAT_MAP_STALENESS_MS_MAX: u64 = 2_000;

/// The most rebuilds whose changes are kept per show (a minute of rebuilds at one per 50 ms).
pub const CHANGE_STEPS_MAX: usize = 1_200;

/// Changes of up to this many seats are sent as changes whatever the show's size (for a small
/// show either form is a few bytes; the fractions below would round to nothing).
pub const CHANGES_SENT_MIN: usize = 64;

/// The most encodings of one build kept for reuse (its whole compact form and changes since
/// recent positions: the readers of one show hold maps of a few recent rebuilds).
const FORMS_KEPT_MAX: usize = 16;

// Confirming, serving and a browser's keeping of one map stay inside the staleness budget.
const _: () = assert!(
    FRESH_CONFIRM_MS + SEAT_MAP_REFRESH_MS + AVAILABILITY_MAX_AGE_S * 1_000
        <= SEAT_MAP_STALENESS_MS_MAX
);

/// A form a map can be encoded in; the skin decides what each looks like on its wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The whole map with its classes.
    Full,
    /// The whole map in its smallest form (the gRPC skin: 2 bits per seat, no classes).
    Compact,
    /// Only the seats changed since the caller's map at this log index.
    Changes {
        /// The caller's position.
        since: u64,
    },
}

/// What a skin encodes: the map, the group whose log it is of (0 when unknown), the form, and
/// for [`Form::Changes`] the changed seats, ascending.
#[derive(Debug)]
pub struct Source<'a> {
    /// The map as built.
    pub map: &'a SeatMap,
    /// Its group.
    pub group: GroupId,
    /// The form asked for.
    pub form: Form,
    /// With [`Form::Changes`]: the seats whose status may differ from the caller's map.
    pub changed: &'a [u32],
}

/// The other forms of one build encoded so far, the oldest first.
type Forms<T> = Arc<Mutex<VecDeque<(Form, Arc<T>)>>>;

/// One encoded map and what it reflects.
#[derive(Debug)]
pub struct Built<T> {
    /// The map as the skin encoded it ([`Form::Full`]).
    pub map: Arc<T>,
    /// The replica position it reflects.
    pub as_of: AsOf,
    /// The group whose log `as_of` counts in (0 when unknown).
    pub group: GroupId,
    /// Whether the replica had confirmed it applied every acknowledged write before building
    /// it (see the module's documentation).
    pub fresh: bool,
    /// When it was built.
    built: Instant,
    /// The map it was encoded from.
    source: Arc<SeatMap>,
    /// Other forms of it encoded so far.
    forms: Forms<T>,
}

impl<T> Clone for Built<T> {
    fn clone(&self) -> Self {
        Built {
            map: Arc::clone(&self.map),
            as_of: self.as_of,
            group: self.group,
            fresh: self.fresh,
            built: self.built,
            source: Arc::clone(&self.source),
            forms: Arc::clone(&self.forms),
        }
    }
}

/// The seats that changed between two consecutive rebuilds.
#[derive(Debug)]
struct Step {
    /// The earlier rebuild's log index.
    from: u64,
    /// The seats whose status differs, ascending.
    changed: Vec<u32>,
}

/// One show's kept maps.
#[derive(Debug)]
struct Kept<T> {
    /// The last map rebuilt for sharing, which the steps lead to.
    shared: Option<Built<T>>,
    /// The last map built for an exact position (linearizable and current-position reads),
    /// outside the chain of steps.
    exact: Option<Built<T>>,
    /// The changes between consecutive shared rebuilds, the oldest first.
    steps: VecDeque<Step>,
    /// The changed seats over every step (with repeats).
    changed_total: usize,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept { shared: None, exact: None, steps: VecDeque::new(), changed_total: 0 }
    }
}

impl<T> Kept<T> {
    /// Makes `built` the last shared map, keeping the step from the previous one when both are
    /// of the same group's log in order and of the same seats; otherwise the chain starts over.
    fn advance(&mut self, built: Built<T>) {
        let new = &built.source;
        match self.shared.as_ref() {
            Some(old)
                if old.group == built.group
                    && old.source.seats.len() == new.seats.len()
                    && old.as_of.log_index <= built.as_of.log_index =>
            {
                if old.as_of.log_index < built.as_of.log_index {
                    let changed: Vec<u32> = (0u32..)
                        .zip(old.source.seats.iter().zip(&new.seats))
                        .filter(|(_, (was, is))| was != is)
                        .map(|(seat, _)| seat)
                        .collect();
                    self.changed_total += changed.len();
                    self.steps.push_back(Step { from: old.as_of.log_index, changed });
                }
            }
            _ => {
                self.steps.clear();
                self.changed_total = 0;
            }
        }
        let budget = (new.seats.len() / 4).max(CHANGES_SENT_MIN * 2);
        while self.steps.len() > CHANGE_STEPS_MAX || self.changed_total > budget {
            let Some(oldest) = self.steps.pop_front() else { break };
            self.changed_total -= oldest.changed.len();
        }
        self.shared = Some(built);
    }

    /// The seats changed since the shared map at `since` of `group`, ascending, when the steps
    /// reach back to exactly that position and name at most an eighth of the seats (or
    /// [`CHANGES_SENT_MIN`]).
    fn changed_since(&self, group: GroupId, since: u64) -> Option<Vec<u32>> {
        let last = self.shared.as_ref()?;
        if last.group != group {
            return None;
        }
        if last.as_of.log_index == since {
            return Some(Vec::new());
        }
        let first = self.steps.iter().position(|step| step.from == since)?;
        let limit = (last.source.seats.len() / 8).max(CHANGES_SENT_MIN);
        let mut changed: Vec<u32> = Vec::new();
        for step in self.steps.range(first..) {
            changed.extend_from_slice(&step.changed);
            if changed.len() > limit * 2 {
                changed.sort_unstable();
                changed.dedup();
                if changed.len() > limit {
                    return None;
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        (changed.len() <= limit).then_some(changed)
    }
}

/// One show's slot: its kept maps, behind the lock that one rebuild at a time holds.
type Slot<T> = Arc<tokio::sync::Mutex<Kept<T>>>;

/// The encoded seat maps of one skin on one node.
pub struct SeatMaps<T> {
    /// Each show's slot. Never held across an await (the slot's own lock is).
    slots: Mutex<BTreeMap<ShowId, Slot<T>>>,
    /// How the skin encodes a map.
    encode: fn(&Source<'_>) -> T,
    /// The skin's name in the metrics (`grpc`, `rest`).
    api: &'static str,
    /// Where builds are counted.
    metrics: Metrics,
}

impl<T> std::fmt::Debug for SeatMaps<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeatMaps").field("api", &self.api).finish_non_exhaustive()
    }
}

impl<T> SeatMaps<T> {
    /// No maps yet; the skin `api` encodes maps with `encode`; builds are counted in `metrics`.
    pub fn new(encode: fn(&Source<'_>) -> T, api: &'static str, metrics: Metrics) -> SeatMaps<T> {
        SeatMaps { slots: Mutex::new(BTreeMap::new()), encode, api, metrics }
    }

    /// `show`'s map in `state` (a replica's applied state, read under its lock) as of exactly
    /// `state`'s position: the last one built if it is of that position, else one built now
    /// (and kept, unless a rebuild holds the slot).
    ///
    /// # Errors
    ///
    /// The read's rejection (`show_not_found`, ...).
    pub fn of_position(&self, state: &Group, show: ShowId) -> Result<Arc<T>, Rejection> {
        let slot = self.slot(show);
        let mut kept = slot.try_lock().ok();
        if let Some(kept) = kept.as_deref() {
            let exact = [kept.exact.as_ref(), kept.shared.as_ref()]
                .into_iter()
                .flatten()
                .find(|built| built.as_of == state.as_of());
            if let Some(built) = exact {
                return Ok(Arc::clone(&built.map));
            }
        }
        let built = self.build(state, show, 0, false, false)?;
        let map = Arc::clone(&built.map);
        if let Some(kept) = kept.as_deref_mut() {
            kept.exact = Some(built);
        }
        Ok(map)
    }

    /// `show`'s map from this node's replica of its group, rebuilt at most once per
    /// [`SEAT_MAP_REFRESH_MS`] and by one caller at a time (the others wait for its map). A
    /// rebuild confirms freshness first ([`HostedGroup::confirm_fresh`]); `fresh` says whether
    /// it could. With `need_fresh`, a map that is not fresh is refused.
    ///
    /// # Errors
    ///
    /// The read's rejection or a routing error; with `need_fresh`, `Unavailable` when this
    /// replica cannot confirm that it is fresh.
    pub async fn shared(
        &self,
        service: &Service,
        show: ShowId,
        need_fresh: bool,
    ) -> Result<Built<T>, ApiError> {
        Ok(self.shared_as(service, show, need_fresh, None, false).await?.0)
    }

    /// As [`SeatMaps::shared`], encoded as the caller asks: only the changes since its map at
    /// `since` (group, log index) when this node can tell them (see the module's
    /// documentation), else the whole map, compact when `compact`. Returns the build and that
    /// encoding of it.
    ///
    /// # Errors
    ///
    /// As [`SeatMaps::shared`].
    pub async fn shared_as(
        &self,
        service: &Service,
        show: ShowId,
        need_fresh: bool,
        since: Option<(GroupId, u64)>,
        compact: bool,
    ) -> Result<(Built<T>, Arc<T>), ApiError> {
        let slot = self.slot(show);
        let mut kept = slot.lock().await;
        let refresh = Duration::from_millis(SEAT_MAP_REFRESH_MS);
        let reuse = kept
            .shared
            .as_ref()
            .filter(|built| built.built.elapsed() < refresh && (built.fresh || !need_fresh));
        let built = match reuse {
            Some(built) => built.clone(),
            None => {
                let built = service
                    .on_show_group(show, |hosted| async move { self.rebuild(&hosted, show).await });
                let built = built.await?;
                kept.advance(built.clone());
                if need_fresh && !built.fresh {
                    return Err(ApiError::Unavailable(format!(
                        "show {show}: this replica could not confirm within {FRESH_CONFIRM_MS} \
                         ms that it has every acknowledged write; retry shortly"
                    )));
                }
                built
            }
        };
        let changed =
            since.and_then(|(group, index)| Some((index, kept.changed_since(group, index)?)));
        drop(kept);
        let (encoded, form) = match changed {
            Some((since, changed)) => {
                (self.form_of(&built, Form::Changes { since }, &changed), "changes")
            }
            None if compact => (self.form_of(&built, Form::Compact, &[]), "compact"),
            None => (Arc::clone(&built.map), "whole"),
        };
        self.metrics.record_seat_map_answer(self.api, form);
        Ok((built, encoded))
    }

    /// `built` encoded as `form` (with the `changed` seats), reused if encoded before.
    fn form_of(&self, built: &Built<T>, form: Form, changed: &[u32]) -> Arc<T> {
        // Every change is one push or pop; a panic cannot leave one half written.
        let mut forms = built.forms.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, encoded)) = forms.iter().find(|(kept, _)| *kept == form) {
            return Arc::clone(encoded);
        }
        let source = Source { map: &built.source, group: built.group, form, changed };
        let encoded = Arc::new((self.encode)(&source));
        if forms.len() >= FORMS_KEPT_MAX {
            forms.pop_front();
        }
        forms.push_back((form, Arc::clone(&encoded)));
        encoded
    }

    /// Confirms freshness, then builds the map from the replica's state.
    async fn rebuild(&self, hosted: &HostedGroup, show: ShowId) -> Result<Built<T>, ApiError> {
        let confirmed = hosted.confirm_fresh(Duration::from_millis(FRESH_CONFIRM_MS)).await;
        if let Err(error) = &confirmed {
            tracing::debug!(%show, %error, "seat map built from a replica not confirmed fresh");
        }
        let fresh = confirmed.is_ok();
        Ok(hosted.read_local(|state| self.build(state, show, hosted.id, fresh, true))??)
    }

    /// Builds `show`'s map of `state` (of `group`, 0 when unknown), counting it when it is
    /// built for sharing.
    fn build(
        &self,
        state: &Group,
        show: ShowId,
        group: GroupId,
        fresh: bool,
        shared: bool,
    ) -> Result<Built<T>, Rejection> {
        let map = state.seat_map(show)?;
        if shared {
            self.metrics.record_seat_map_build(self.api, fresh);
        }
        let source = Source { map: &map, group, form: Form::Full, changed: &[] };
        Ok(Built {
            map: Arc::new((self.encode)(&source)),
            as_of: map.as_of,
            group,
            fresh,
            built: Instant::now(),
            source: Arc::new(map),
            forms: Arc::default(),
        })
    }

    /// The slot of `show` (made if absent; beyond the limit, the lowest-numbered show's is dropped).
    fn slot(&self, show: ShowId) -> Slot<T> {
        // Every change is one insert or removal; a panic cannot leave one half written.
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if !slots.contains_key(&show) && slots.len() >= SEAT_MAPS_CACHED_MAX {
            slots.pop_first();
        }
        Arc::clone(slots.entry(show).or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statemachine::{Currency, SeatStatus, ShowStatus};

    const FREE: SeatStatus = SeatStatus::Free;
    const HELD: SeatStatus = SeatStatus::Held;

    /// A build of `seats` at `log_index` of `group`.
    fn built(group: GroupId, log_index: u64, seats: Vec<SeatStatus>) -> Built<()> {
        let as_of = AsOf { log_index, log_time_ms: log_index * 10 };
        let map = SeatMap {
            show: ShowId(1),
            status: ShowStatus::OnSale,
            price_version: 1,
            currency: Currency(*b"EUR"),
            prices_minor: vec![100],
            classes: vec![0; seats.len()],
            seats,
            as_of,
        };
        Built {
            map: Arc::new(()),
            as_of,
            group,
            fresh: true,
            built: Instant::now(),
            source: Arc::new(map),
            forms: Arc::default(),
        }
    }

    /// 1,024 free seats but those in `held`.
    fn seats(held: &[usize]) -> Vec<SeatStatus> {
        (0..1_024).map(|seat| if held.contains(&seat) { HELD } else { FREE }).collect()
    }

    #[tokio::test]
    async fn a_small_show_always_gets_changes() {
        let mut kept = Kept::default();
        let few = |held: &[usize]| -> Vec<SeatStatus> {
            (0..20).map(|seat| if held.contains(&seat) { HELD } else { FREE }).collect()
        };
        kept.advance(built(2, 10, few(&[])));
        kept.advance(built(2, 11, few(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])));
        assert_eq!(kept.changed_since(2, 10).map(|changed| changed.len()), Some(10));
    }

    #[tokio::test]
    async fn changes_are_the_union_of_the_steps_since_an_exact_rebuild() {
        let mut kept = Kept::default();
        kept.advance(built(2, 10, seats(&[])));
        kept.advance(built(2, 12, seats(&[3, 5])));
        // Seat 3 released, seat 7 held.
        kept.advance(built(2, 15, seats(&[5, 7])));
        assert_eq!(kept.changed_since(2, 10), Some(vec![3, 5, 7]));
        assert_eq!(kept.changed_since(2, 12), Some(vec![3, 7]));
        assert_eq!(kept.changed_since(2, 15), Some(vec![]));
        // Not a rebuild of this node: a seat may have changed and changed back in between.
        assert_eq!(kept.changed_since(2, 11), None);
        assert_eq!(kept.changed_since(2, 9), None);
        // The same index of another group's log says nothing about this one.
        assert_eq!(kept.changed_since(3, 12), None);
    }

    #[tokio::test]
    async fn too_many_changes_or_another_group_start_over() {
        let mut kept = Kept::default();
        kept.advance(built(2, 10, seats(&[])));
        let held: Vec<usize> = (0..128).collect();
        kept.advance(built(2, 11, seats(&held)));
        // 128 of 1,024 seats is an eighth: still worth sending as changes.
        assert_eq!(kept.changed_since(2, 10).map(|changed| changed.len()), Some(128));
        let held: Vec<usize> = (0..129).collect();
        kept.advance(built(2, 12, seats(&held)));
        // 129 are more than an eighth: the whole map is as small.
        assert_eq!(kept.changed_since(2, 10), None);
        assert_eq!(kept.changed_since(2, 11), Some(vec![128]));
        // Steps past a quarter of the seats (256) are dropped, the oldest first.
        let held: Vec<usize> = (0..257).collect();
        kept.advance(built(2, 13, seats(&held)));
        assert_eq!(kept.steps.front().map(|step| step.from), Some(11));
        assert!(kept.changed_total <= 256);
        // The show moved: its positions now count in group 3's log.
        kept.advance(built(3, 5, seats(&[])));
        assert!(kept.steps.is_empty());
        assert_eq!(kept.changed_since(2, 12), None);
        assert_eq!(kept.changed_since(3, 5), Some(vec![]));
    }
}
