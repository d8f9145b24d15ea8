//! Packed seat maps, encoded once per show and applied log position, and at most every
//! [`SEAT_MAP_REFRESH_MS`] while the show changes.
//!
//! During an on-sale the hot show's map is read thousands of times a second while entries are
//! applied hundreds of times a second, and building a map walks every seat under the replica's
//! read lock, which holds up apply. Owns the last packed map of each show read on this node: a
//! read gets it again (its byte buffers are shared, not copied) while it is of the replica's
//! current position, or, for a read that allows it (`SeatMapRequest.cached`), younger than
//! [`SEAT_MAP_REFRESH_MS`]; otherwise the read builds it anew.
//! A map always says the position it reflects (`as_of`), and is at most that much older than
//! the replica's state: well inside the 2 s a replica's map may lag (shared/DESIGN.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use proto::booking as pb;
use statemachine::{Group, Rejection, ShowId};

use crate::api::convert;

/// The most shows whose packed map is kept (a map of the largest show is about 200 KB).
pub const SEAT_MAPS_CACHED_MAX: usize = 256;

/// How long a packed map is served after it was built while its show keeps changing.
pub const SEAT_MAP_REFRESH_MS: u64 = 50;

/// A packed map and when it was built.
#[derive(Debug)]
struct Cached {
    map: Arc<pb::SeatMapReply>,
    built: Instant,
}

/// The packed seat maps of one node.
#[derive(Debug, Default)]
pub struct SeatMaps {
    /// Each show's last packed map. Never held across an await.
    cached: Mutex<BTreeMap<ShowId, Cached>>,
}

impl SeatMaps {
    /// No maps yet.
    pub fn new() -> SeatMaps {
        SeatMaps::default()
    }

    /// `show`'s packed map in `state` (a replica's applied state, read under its lock): the
    /// cached one if it is of `state`'s position or younger than [`SEAT_MAP_REFRESH_MS`], else
    /// one built now. `linearizable` is left false for the caller to set.
    ///
    /// # Errors
    ///
    /// The read's rejection (`show_not_found`, ...).
    pub fn packed(&self, state: &Group, show: ShowId) -> Result<pb::SeatMapReply, Rejection> {
        self.packed_within(state, show, Duration::from_millis(SEAT_MAP_REFRESH_MS))
    }

    /// As [`SeatMaps::packed`], serving a cached map of an older position only while it is
    /// younger than `refresh` (zero: only of `state`'s position, as a linearizable read needs).
    ///
    /// # Errors
    ///
    /// The read's rejection (`show_not_found`, ...).
    pub fn packed_within(
        &self,
        state: &Group,
        show: ShowId,
        refresh: Duration,
    ) -> Result<pb::SeatMapReply, Rejection> {
        let position = state.applied_index();
        if let Some(cached) = self.lock().get(&show)
            && (cached.map.as_of_log_index == position || cached.built.elapsed() < refresh)
        {
            return Ok(pb::SeatMapReply::clone(&cached.map));
        }
        let map = Arc::new(convert::packed_seat_map_reply(&state.seat_map(show)?, false));
        let mut cached = self.lock();
        if cached.len() >= SEAT_MAPS_CACHED_MAX && !cached.contains_key(&show) {
            cached.pop_first();
        }
        cached.insert(show, Cached { map: Arc::clone(&map), built: Instant::now() });
        Ok(pb::SeatMapReply::clone(&map))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ShowId, Cached>> {
        // Every change is one insert or removal of a whole map; a panic cannot leave one half
        // written.
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
