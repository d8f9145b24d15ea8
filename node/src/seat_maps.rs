//! Seat maps at on-sale rates, for both API skins: each show's map encoded once per rebuild and
//! shared by every read until the next, at most one rebuild per show at a time (a thousand
//! browsers asking at once wait for one rebuild, never start a thousand), and a map offered as
//! fresh only by a replica that confirmed it has applied every acknowledged write.
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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

// Confirming, serving and a browser's keeping of one map stay inside the staleness budget.
const _: () = assert!(
    FRESH_CONFIRM_MS + SEAT_MAP_REFRESH_MS + AVAILABILITY_MAX_AGE_S * 1_000
        <= SEAT_MAP_STALENESS_MS_MAX
);

/// One encoded map and what it reflects.
#[derive(Debug)]
pub struct Built<T> {
    /// The map as the skin encoded it.
    pub map: Arc<T>,
    /// The replica position it reflects.
    pub as_of: AsOf,
    /// Whether the replica had confirmed it applied every acknowledged write before building
    /// it (see the module's documentation).
    pub fresh: bool,
    /// When it was built.
    built: Instant,
}

impl<T> Clone for Built<T> {
    fn clone(&self) -> Self {
        Built {
            map: Arc::clone(&self.map),
            as_of: self.as_of,
            fresh: self.fresh,
            built: self.built,
        }
    }
}

/// One show's slot: its last map, behind the lock that one rebuild at a time holds.
type Slot<T> = Arc<tokio::sync::Mutex<Option<Built<T>>>>;

/// The encoded seat maps of one skin on one node.
pub struct SeatMaps<T> {
    /// Each show's slot. Never held across an await (the slot's own lock is).
    slots: Mutex<BTreeMap<ShowId, Slot<T>>>,
    /// How the skin encodes a map.
    encode: fn(&SeatMap) -> T,
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
    pub fn new(encode: fn(&SeatMap) -> T, api: &'static str, metrics: Metrics) -> SeatMaps<T> {
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
        if let Some(Some(built)) = kept.as_deref()
            && built.as_of.log_index == state.applied_index()
        {
            return Ok(Arc::clone(&built.map));
        }
        let built = self.build(state, show, false, false)?;
        let map = Arc::clone(&built.map);
        if let Some(kept) = kept.as_deref_mut() {
            *kept = Some(built);
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
        let slot = self.slot(show);
        let mut kept = slot.lock().await;
        let refresh = Duration::from_millis(SEAT_MAP_REFRESH_MS);
        if let Some(built) = kept.as_ref()
            && built.built.elapsed() < refresh
            && (built.fresh || !need_fresh)
        {
            return Ok(built.clone());
        }
        let built =
            service.on_show_group(show, |hosted| async move { self.rebuild(&hosted, show).await });
        let built = built.await?;
        *kept = Some(built.clone());
        if need_fresh && !built.fresh {
            return Err(ApiError::Unavailable(format!(
                "show {show}: this replica could not confirm within {FRESH_CONFIRM_MS} ms that \
                 it has every acknowledged write; retry shortly"
            )));
        }
        Ok(built)
    }

    /// Confirms freshness, then builds the map from the replica's state.
    async fn rebuild(&self, hosted: &HostedGroup, show: ShowId) -> Result<Built<T>, ApiError> {
        let confirmed = hosted.confirm_fresh(Duration::from_millis(FRESH_CONFIRM_MS)).await;
        if let Err(error) = &confirmed {
            tracing::debug!(%show, %error, "seat map built from a replica not confirmed fresh");
        }
        let fresh = confirmed.is_ok();
        Ok(hosted.read_local(|state| self.build(state, show, fresh, true))??)
    }

    /// Builds `show`'s map of `state`, counting it when it is built for sharing.
    fn build(
        &self,
        state: &Group,
        show: ShowId,
        fresh: bool,
        shared: bool,
    ) -> Result<Built<T>, Rejection> {
        let map = state.seat_map(show)?;
        if shared {
            self.metrics.record_seat_map_build(self.api, fresh);
        }
        Ok(Built {
            map: Arc::new((self.encode)(&map)),
            as_of: map.as_of,
            fresh,
            built: Instant::now(),
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
