//! A seat map a reader keeps and refreshes: the first read brings the whole map with its
//! classes, every later one only what changed since the position the reader has (or, when the
//! node cannot tell, the whole map in 2 bits per seat), so that polling a hot show's map costs
//! about what changed rather than the whole map each time.
//!
//! Owns applying a node's answer to the kept map and refusing an answer that would take it
//! backwards or that does not fit it. Never decides what changed (the node does).

use proto::booking::{SeatMapReply, SeatMapRequest};

use crate::client::{Client, Kind};
use crate::error::{Error, Result};
use crate::key::CallMetadata;
use crate::route::Route;

/// A show's seat map as a reader keeps it, refreshed with [`Client::refresh_seat_map`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSeatMap {
    /// The show.
    pub show_id: u64,
    /// `draft`, `on_sale`, `closed` or `cancelled`.
    pub status: String,
    /// The price version to quote when holding.
    pub price_version: u32,
    /// The currency.
    pub currency: String,
    /// One price per class.
    pub prices_minor: Vec<u64>,
    /// Each seat's class, seat 0 first (they never change).
    pub classes: Vec<u8>,
    /// Each seat's status (a [`SeatStatus`](crate::SeatStatus) number), seat 0 first.
    pub seats: Vec<u8>,
    /// The group whose log `as_of_log_index` counts in.
    pub group_id: u64,
    /// The replica position the map reflects.
    pub as_of_log_index: u64,
    /// Its log time.
    pub as_of_log_time_ms: u64,
    /// Whether the replica that built the last answer had confirmed it was fresh.
    pub fresh: bool,
}

/// What a refresh did to a [`LiveSeatMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// The node's map is of the position the reader has, or older (kept as it was).
    Unchanged,
    /// The node sent the seats changed since the reader's position: this many.
    Changes(usize),
    /// The node sent the whole map.
    Whole,
}

impl LiveSeatMap {
    /// How many seats have status `status`.
    pub fn count(&self, status: crate::SeatStatus) -> usize {
        let status = status as u8;
        // Byte-wide sums over chunks that cannot overflow a byte, which the compiler turns
        // into wide vector compares (a filtered count is not): a reader of a 50,000-seat map
        // may count on every refresh.
        let chunk = |seats: &[u8]| seats.iter().fold(0u8, |n, &seat| n + u8::from(seat == status));
        self.seats.chunks(usize::from(u8::MAX)).map(|seats| usize::from(chunk(seats))).sum()
    }

    /// Applies `reply` (an answer to a request made from this map); a reply older than the map
    /// leaves it as it is.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the reply does not fit the map (another show, another
    /// number of seats, changes since a position the map is not at, a seat out of range); the
    /// map is then unchanged.
    pub fn apply(&mut self, reply: &SeatMapReply) -> Result<Refreshed> {
        let misfit = |why: String| {
            Err(Error::InvalidArgument(format!("show {}: seat map reply: {why}", self.show_id)))
        };
        let seat_count = seat_count(reply);
        if reply.show_id != self.show_id || seat_count != self.seats.len() {
            return misfit(format!(
                "show {} with {seat_count} seats does not fit a map of {} seats",
                reply.show_id,
                self.seats.len()
            ));
        }
        if reply.group_id == self.group_id && reply.as_of_log_index <= self.as_of_log_index {
            return Ok(Refreshed::Unchanged);
        }
        let refreshed = if reply.changes_since_log_index != 0 {
            if reply.group_id != self.group_id
                || reply.changes_since_log_index != self.as_of_log_index
            {
                return misfit(format!(
                    "changes since {}.{}, but the map is at {}.{}",
                    reply.group_id,
                    reply.changes_since_log_index,
                    self.group_id,
                    self.as_of_log_index
                ));
            }
            if reply.changed_seats.len() != reply.changed_states.len() {
                return misfit("changed seats and states differ in number".to_owned());
            }
            let mut seats = Vec::with_capacity(reply.changed_seats.len());
            let mut seat = 0u32;
            for &gap in &reply.changed_seats {
                seat = seat.saturating_add(gap);
                if seat as usize >= self.seats.len() {
                    return misfit(format!("changed seat {seat} out of range"));
                }
                seats.push(seat as usize);
            }
            for (&seat, &state) in seats.iter().zip(reply.changed_states.iter()) {
                self.seats[seat] = state;
            }
            Refreshed::Changes(seats.len())
        } else if !reply.seat_bits.is_empty() {
            if reply.seat_bits.len() != self.seats.len().div_ceil(4) {
                return misfit(format!("{} bytes of 2-bit statuses", reply.seat_bits.len()));
            }
            for (seat, status) in self.seats.iter_mut().enumerate() {
                *status = ((reply.seat_bits[seat / 4] >> ((seat % 4) * 2)) & 0b11) + 1;
            }
            Refreshed::Whole
        } else if reply.seat_states.len() == self.seats.len() {
            self.seats.copy_from_slice(&reply.seat_states);
            Refreshed::Whole
        } else {
            return misfit("neither changes nor a whole map".to_owned());
        };
        self.header_from(reply);
        Ok(refreshed)
    }

    /// Takes everything but the seats and classes from `reply`.
    fn header_from(&mut self, reply: &SeatMapReply) {
        self.status.clone_from(&reply.status);
        self.price_version = reply.price_version;
        self.currency.clone_from(&reply.currency);
        self.prices_minor.clone_from(&reply.prices_minor);
        self.group_id = reply.group_id;
        self.as_of_log_index = reply.as_of_log_index;
        self.as_of_log_time_ms = reply.as_of_log_time_ms;
        self.fresh = reply.fresh;
    }
}

impl Client {
    /// Show `show_id`'s seat map to keep and refresh with [`Client::refresh_seat_map`]: the
    /// whole map with its classes, from any replica (the node's last build if at most 50 ms
    /// old, as [`Client::get_seat_map_packed`]).
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// use client::SeatStatus;
    ///
    /// let mut map = client.follow_seat_map(42).await?;
    /// loop {
    ///     client.refresh_seat_map(&mut map).await?;
    ///     println!("{} free as of {}", map.count(SeatStatus::Free), map.as_of_log_index);
    /// #   break;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::get_seat_map`]; [`Error::InvalidArgument`] when the node answered with
    /// something other than a whole packed map.
    pub async fn follow_seat_map(&self, show_id: u64) -> Result<LiveSeatMap> {
        let reply = self.live_map_call(SeatMapRequest { show_id, ..request() }).await?;
        let seats = seat_count(&reply);
        if seats == 0 || reply.seat_states.len() != seats || reply.seat_classes.len() != seats {
            return Err(Error::InvalidArgument(format!(
                "show {show_id}: the node did not send a whole packed map (is it older than \
                 seat map changes?)"
            )));
        }
        let mut map = LiveSeatMap {
            show_id,
            status: String::new(),
            price_version: 0,
            currency: String::new(),
            prices_minor: Vec::new(),
            classes: reply.seat_classes.to_vec(),
            seats: reply.seat_states.to_vec(),
            group_id: 0,
            as_of_log_index: 0,
            as_of_log_time_ms: 0,
            fresh: false,
        };
        map.header_from(&reply);
        Ok(map)
    }

    /// Brings `map` up to a replica's current map: only the seats changed since `map`'s
    /// position when the node can tell, else the whole map in 2 bits per seat. An answer from a
    /// replica further behind than `map` leaves it as it is.
    ///
    /// # Errors
    ///
    /// As [`Client::get_seat_map`]; [`Error::InvalidArgument`] when the answer does not fit
    /// `map` (see [`LiveSeatMap::apply`]), which is then unchanged.
    pub async fn refresh_seat_map(&self, map: &mut LiveSeatMap) -> Result<Refreshed> {
        let asked = SeatMapRequest {
            show_id: map.show_id,
            since_group_id: map.group_id,
            since_log_index: map.as_of_log_index,
            compact: true,
            ..request()
        };
        let reply = self.live_map_call(asked).await?;
        map.apply(&reply)
    }

    /// A replica's answer to `request`.
    async fn live_map_call(&self, request: SeatMapRequest) -> Result<SeatMapReply> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Show(request.show_id),
                Kind::LocalRead,
                &metadata,
                request,
                |mut c, r| async move { c.get_seat_map(r).await },
            )
            .await?;
        Ok(reply)
    }
}

/// The seats of the show `reply` is of: its `seat_count`, or for a node older than that field
/// (which also ignores `since` and `compact` and always sends a whole packed map) the length of
/// that map, so that a kept map still refreshes, wholly, during a rolling upgrade.
fn seat_count(reply: &SeatMapReply) -> usize {
    if reply.seat_count == 0 { reply.seat_states.len() } else { reply.seat_count as usize }
}

/// A cached packed read from any replica.
fn request() -> SeatMapRequest {
    SeatMapRequest { packed: true, cached: true, ..SeatMapRequest::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> LiveSeatMap {
        LiveSeatMap {
            show_id: 7,
            status: "on_sale".to_owned(),
            price_version: 1,
            currency: "EUR".to_owned(),
            prices_minor: vec![100],
            classes: vec![0; 6],
            seats: vec![1; 6],
            group_id: 2,
            as_of_log_index: 40,
            as_of_log_time_ms: 1_000,
            fresh: true,
        }
    }

    fn reply(as_of: u64) -> SeatMapReply {
        SeatMapReply {
            show_id: 7,
            status: "on_sale".to_owned(),
            price_version: 1,
            currency: "EUR".to_owned(),
            prices_minor: vec![100],
            group_id: 2,
            seat_count: 6,
            as_of_log_index: as_of,
            as_of_log_time_ms: 2_000,
            fresh: true,
            ..SeatMapReply::default()
        }
    }

    #[test]
    fn changes_patch_the_seats_they_name() {
        let mut kept = map();
        // Seats 1 and 4 (distances 1 and 3): held and booked.
        let changes = SeatMapReply {
            changes_since_log_index: 40,
            changed_seats: vec![1, 3],
            changed_states: vec![2, 3].into(),
            ..reply(45)
        };
        assert_eq!(kept.apply(&changes).unwrap(), Refreshed::Changes(2));
        assert_eq!(kept.seats, [1, 2, 1, 1, 3, 1]);
        assert_eq!((kept.as_of_log_index, kept.as_of_log_time_ms), (45, 2_000));
        // The same answer again is of the position the map is at: nothing to do.
        assert_eq!(kept.apply(&changes).unwrap(), Refreshed::Unchanged);
    }

    #[test]
    fn a_compact_whole_map_replaces_the_seats() {
        let mut kept = map();
        // Seats 0..=5: free, held, booked, reserved | free, held.
        let whole = SeatMapReply { seat_bits: vec![0b11_10_01_00, 0b01_00].into(), ..reply(50) };
        assert_eq!(kept.apply(&whole).unwrap(), Refreshed::Whole);
        assert_eq!(kept.seats, [1, 2, 3, 4, 1, 2]);
        assert_eq!(kept.classes, [0; 6]);
        assert_eq!(kept.count(crate::SeatStatus::Held), 2);
        assert_eq!(kept.count(crate::SeatStatus::Reserved), 1);
    }

    #[test]
    fn a_node_older_than_changes_still_refreshes_the_map_wholly() {
        let mut kept = map();
        // No seat_count, no group: a whole packed map, a byte per seat.
        let old = SeatMapReply {
            seat_count: 0,
            group_id: 0,
            seat_states: vec![2, 1, 1, 1, 1, 3].into(),
            seat_classes: vec![0; 6].into(),
            ..reply(60)
        };
        assert_eq!(kept.apply(&old).unwrap(), Refreshed::Whole);
        assert_eq!(kept.seats, [2, 1, 1, 1, 1, 3]);
        assert_eq!((kept.group_id, kept.as_of_log_index), (0, 60));
    }

    #[test]
    fn counts_hold_past_a_byte() {
        let mut kept = map();
        kept.seats = (0..100_000u32).map(|seat| if seat % 3 == 0 { 2 } else { 1 }).collect();
        assert_eq!(kept.count(crate::SeatStatus::Held), 33_334);
        assert_eq!(kept.count(crate::SeatStatus::Free), 66_666);
    }

    #[test]
    fn answers_that_do_not_fit_change_nothing() {
        let kept = map();
        let misfits = [
            SeatMapReply { seat_count: 5, seat_bits: vec![0, 0].into(), ..reply(50) },
            SeatMapReply { show_id: 8, seat_bits: vec![0, 0].into(), ..reply(50) },
            // Changes since a position the map is not at.
            SeatMapReply {
                changes_since_log_index: 39,
                changed_seats: vec![0],
                changed_states: vec![2].into(),
                ..reply(50)
            },
            // A seat beyond the last.
            SeatMapReply {
                changes_since_log_index: 40,
                changed_seats: vec![2, 4],
                changed_states: vec![2, 2].into(),
                ..reply(50)
            },
            SeatMapReply { seat_bits: vec![0].into(), ..reply(50) },
            reply(50),
        ];
        for misfit in misfits {
            let mut copy = kept.clone();
            assert!(copy.apply(&misfit).is_err(), "{misfit:?}");
            assert_eq!(copy, kept);
        }
        // An older answer is not applied.
        let mut copy = kept.clone();
        let older = SeatMapReply { seat_bits: vec![0xff, 0xff].into(), ..reply(30) };
        assert_eq!(copy.apply(&older).unwrap(), Refreshed::Unchanged);
        assert_eq!(copy, kept);
    }
}
