//! Packed seat maps, encoded once per show and applied log position.
//!
//! During an on-sale the same hot show's map is read thousands of times between two applied
//! entries. Owns the last packed map of each show read on this node: a read at the position it
//! was built for gets it again (its byte buffers are shared, not copied); a read at a newer
//! position builds it anew. Never serves a map of another position than the replica's current
//! one, so a cached map is exactly what building it again would give.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use proto::booking as pb;
use statemachine::{Group, Rejection, ShowId};

use crate::api::convert;

/// The most shows whose packed map is kept (a map of the largest show is about 200 KB).
pub const SEAT_MAPS_CACHED_MAX: usize = 256;

/// The packed seat maps of one node.
#[derive(Debug, Default)]
pub struct SeatMaps {
    /// Each show's last packed map. Never held across an await.
    cached: Mutex<BTreeMap<ShowId, Arc<pb::SeatMapReply>>>,
}

impl SeatMaps {
    /// No maps yet.
    pub fn new() -> SeatMaps {
        SeatMaps::default()
    }

    /// `show`'s packed map in `state` (a replica's applied state, read under its lock), built
    /// once per applied position. `linearizable` is left false for the caller to set.
    ///
    /// # Errors
    ///
    /// The read's rejection (`show_not_found`, ...).
    pub fn packed(&self, state: &Group, show: ShowId) -> Result<pb::SeatMapReply, Rejection> {
        let position = state.applied_index();
        if let Some(map) = self.lock().get(&show)
            && map.as_of_log_index == position
        {
            return Ok(pb::SeatMapReply::clone(map));
        }
        let map = Arc::new(convert::packed_seat_map_reply(&state.seat_map(show)?, false));
        let mut cached = self.lock();
        if cached.len() >= SEAT_MAPS_CACHED_MAX && !cached.contains_key(&show) {
            cached.pop_first();
        }
        cached.insert(show, Arc::clone(&map));
        Ok(pb::SeatMapReply::clone(&map))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ShowId, Arc<pb::SeatMapReply>>> {
        // Every change is one insert or removal of a whole map; a panic cannot leave one half
        // written.
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
