//! The benchmark's workloads, the same for every system: which shows and seats exist, what one
//! attempt asks for (k contiguous seats, k uniform in `1..=4`, from a start skewed 80/20 toward
//! the front or uniform), and when a run counts as sold out.
//!
//! Owns the arithmetic of attempts and the sold-out rule, as pure functions of a random source
//! and counters. Never talks to a backend and never reads a clock (the driver does both).

use rand::Rng;

/// The most seats one attempt asks for.
pub const SEATS_PER_ATTEMPT_MAX: u8 = 4;

/// The most seats one show of the cluster may have (`statemachine`'s `SEATS_PER_SHOW_MAX`):
/// larger workloads are split into shows of this size.
pub const SEATS_PER_SHOW_MAX: u32 = statemachine::limits::SEATS_PER_SHOW_MAX;

/// The shows of the "many shows" workload.
pub const MANY_SHOWS: u32 = 64;

/// The seats of the "uncontended" workload (unless `--quick` scales it down).
pub const UNCONTENDED_SEATS: u32 = 1_000_000;

/// The share of starts that fall in the hot front of a show under the skewed distribution, in
/// percent, and the size of that front, in percent of the show's possible starts.
pub const HOT_STARTS_PERCENT: u32 = 80;
/// See [`HOT_STARTS_PERCENT`].
pub const HOT_FRONT_PERCENT: u32 = 20;

/// Sold out: at least this share of the seats is sold, in percent.
pub const SOLD_OUT_PERCENT: u64 = 98;
/// Sold out also: at least this share is sold, in percent, and the last window (about one
/// second) decided at least [`STALL_WINDOW_ATTEMPTS_MIN`] attempts of which fewer than
/// [`STALL_SUCCESS_PERCENT`] percent succeeded: the seats left are scattered gaps the requests
/// rarely fit, and going on would only measure rejections of a sold-out show.
pub const STALL_SOLD_PERCENT: u64 = 90;
/// See [`STALL_SOLD_PERCENT`].
pub const STALL_SUCCESS_PERCENT: u64 = 1;
/// See [`STALL_SOLD_PERCENT`].
pub const STALL_WINDOW_ATTEMPTS_MIN: u64 = 200;

const _: () = assert!(HOT_STARTS_PERCENT <= 100 && HOT_FRONT_PERCENT <= 100);
const _: () = assert!(STALL_SOLD_PERCENT <= SOLD_OUT_PERCENT && SOLD_OUT_PERCENT <= 100);
const _: () = assert!(SEATS_PER_ATTEMPT_MAX as u32 <= SEATS_PER_SHOW_MAX);

/// Which workload a run performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    /// One show of S seats, starts skewed 80/20 toward the front.
    OnSale,
    /// S seats split evenly over [`MANY_SHOWS`] shows spread over the data groups, each show
    /// skewed 80/20.
    ManyShows,
    /// [`UNCONTENDED_SEATS`] seats in shows of [`SEATS_PER_SHOW_MAX`] (seat i in show
    /// i / 100,000), uniform starts.
    Uncontended,
    /// The on-sale, with readers of the hot show's seat map beside it.
    MapReads,
    /// The seed's first minute: one offered rate of requests, open loop, [`HOLD_PERCENT`]
    /// hold attempts on the on-sale's show and the rest reads of its page and seat map through
    /// a CDN (nginx); a backend without a read tier makes the hold part alone.
    FirstMinute,
}

/// The share of the first minute's requests that are hold attempts, percent (the seed: about
/// 100,000 requests/s, about 20,000 of them hold attempts).
pub const HOLD_PERCENT: u32 = 20;

/// The first minute's offered rate, requests/s (the seed's).
pub const FIRST_MINUTE_RATE: u32 = 100_000;

/// The first minute's lanes: hold workers, and as many read lanes, each an open loop of its
/// share of the rate. 1,024 of each (room for 100,000 requests/s at 10 ms each) gave p99s of
/// 0.7 s (holds) and 1.5 s (reads, every one a cache hit) at 5,000 requests/s, 256 gave 68 ms
/// and 0.7 s: on 2 cores the generator's own scheduling is in the latency, and fewer tasks
/// cost it less (curl against the same CDN during such a run saw at most 75 ms).
pub const FIRST_MINUTE_CLIENTS: u32 = 256;

/// One request of the first minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Request {
    /// A hold attempt.
    Hold,
    /// A read of the show's page (`/v1/shows/{id}`).
    ShowPage,
    /// A read of the show's seat map (`/v1/shows/{id}/availability`).
    SeatMap,
}

impl Request {
    /// Every read, in report order.
    pub const READS: [Request; 2] = [Request::ShowPage, Request::SeatMap];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Request::Hold => "hold",
            Request::ShowPage => "show page",
            Request::SeatMap => "seat map",
        }
    }
}

impl WorkloadKind {
    /// Every workload, in report order.
    pub const ALL: [WorkloadKind; 5] = [
        WorkloadKind::OnSale,
        WorkloadKind::ManyShows,
        WorkloadKind::Uncontended,
        WorkloadKind::MapReads,
        WorkloadKind::FirstMinute,
    ];

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::OnSale => "on-sale",
            WorkloadKind::ManyShows => "many-shows",
            WorkloadKind::Uncontended => "uncontended",
            WorkloadKind::MapReads => "map-reads",
            WorkloadKind::FirstMinute => "first-minute",
        }
    }

    /// The workload called `name`.
    pub fn parse(name: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The shows and seats of this workload for `seats` (the `--seats` option; the
    /// uncontended workload uses `uncontended_seats` instead).
    pub fn layout(self, seats: u32, uncontended_seats: u32) -> Layout {
        match self {
            WorkloadKind::OnSale | WorkloadKind::MapReads | WorkloadKind::FirstMinute => {
                Layout::split(seats, 1, Skew::Front)
            }
            WorkloadKind::ManyShows => Layout::split(seats, MANY_SHOWS, Skew::Front),
            WorkloadKind::Uncontended => {
                let shows = uncontended_seats.div_ceil(SEATS_PER_SHOW_MAX).max(1);
                Layout::split(uncontended_seats, shows, Skew::Uniform)
            }
        }
    }
}

/// What a sweep varies, one run per point, the rest held at the on-sale's shape (one show of
/// `--seats` seats, 256 clients, starts skewed 80/20): how a system's cost grows with its load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sweep {
    /// Concurrent clients, [`Sweep::CLIENTS`], on the one hot show.
    Clients,
    /// The number of shows, [`Sweep::SHOWS`], the same seats split over them (over the
    /// cluster's data groups).
    Shows,
    /// The seats of the one show, [`Sweep::SEATS`].
    Seats,
}

impl Sweep {
    /// Every sweep, in report order.
    pub const ALL: [Sweep; 3] = [Sweep::Clients, Sweep::Shows, Sweep::Seats];
    /// The client counts of the clients sweep.
    pub const CLIENTS: [u32; 9] = [64, 128, 256, 512, 1_024, 2_048, 4_096, 8_192, 16_384];
    /// The show counts of the shows sweep.
    pub const SHOWS: [u32; 5] = [1, 10, 100, 1_000, 10_000];
    /// The seats per show of the seats sweep.
    pub const SEATS: [u32; 5] = [1_000, 3_000, 10_000, 30_000, 100_000];
    /// The clients of the shows and seats sweeps.
    pub const CLIENTS_FIXED: u32 = 256;

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Clients => "clients",
            Sweep::Shows => "shows",
            Sweep::Seats => "seats",
        }
    }

    /// The sweep called `name`.
    pub fn parse(name: &str) -> Option<Sweep> {
        Sweep::ALL.into_iter().find(|sweep| sweep.name() == name)
    }

    /// What the x axis shows.
    pub fn axis(self) -> &'static str {
        match self {
            Sweep::Clients => "concurrent clients (C)",
            Sweep::Shows => "shows (the same seats split over them)",
            Sweep::Seats => "seats of the one show",
        }
    }

    /// The points of this sweep.
    pub fn points(self) -> &'static [u32] {
        match self {
            Sweep::Clients => &Sweep::CLIENTS,
            Sweep::Shows => &Sweep::SHOWS,
            Sweep::Seats => &Sweep::SEATS,
        }
    }

    /// The clients and the shows of point `x` of this sweep, for `seats` (the `--seats`
    /// option).
    pub fn run_at(self, x: u32, seats: u32) -> (u32, Layout) {
        match self {
            Sweep::Clients => (x, Layout::split(seats, 1, Skew::Front)),
            // Each show keeps room for the largest attempt.
            Sweep::Shows => {
                let shows = x.min(seats / u32::from(SEATS_PER_ATTEMPT_MAX)).max(1);
                (Sweep::CLIENTS_FIXED, Layout::split(seats, shows, Skew::Front))
            }
            Sweep::Seats => (Sweep::CLIENTS_FIXED, Layout::split(x, 1, Skew::Front)),
        }
    }
}

/// Where attempts start within a show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skew {
    /// [`HOT_STARTS_PERCENT`] of starts in the first [`HOT_FRONT_PERCENT`] of the show.
    Front,
    /// Every start equally likely.
    Uniform,
}

/// The shows of a run: `shows` shows of `seats_per_show` seats each (seat numbers
/// `0..seats_per_show` in every show), and how attempts pick their start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// How many shows.
    pub shows: u32,
    /// Seats in each show.
    pub seats_per_show: u32,
    /// Where attempts start.
    pub skew: Skew,
}

impl Layout {
    /// `seats` seats split over `shows` shows (rounded up, so that no seat is lost), each of at
    /// least [`SEATS_PER_ATTEMPT_MAX`] seats and at most [`SEATS_PER_SHOW_MAX`] (more shows are
    /// used if needed).
    pub fn split(seats: u32, shows: u32, skew: Skew) -> Layout {
        let shows = shows.max(seats.div_ceil(SEATS_PER_SHOW_MAX)).max(1);
        let seats_per_show =
            seats.div_ceil(shows).clamp(u32::from(SEATS_PER_ATTEMPT_MAX), SEATS_PER_SHOW_MAX);
        Layout { shows, seats_per_show, skew }
    }

    /// Every seat of every show.
    pub fn total_seats(&self) -> u64 {
        u64::from(self.shows) * u64::from(self.seats_per_show)
    }

    /// A fresh attempt with id `id`: a show, then `count` in `1..=4`, then a start such that
    /// the run of `count` seats fits in the show.
    pub fn attempt(&self, rng: &mut impl Rng, id: u64) -> Attempt {
        let show = if self.shows == 1 { 0 } else { rng.gen_range(0..self.shows) };
        let count = rng.gen_range(1..=SEATS_PER_ATTEMPT_MAX);
        let starts = self.seats_per_show - u32::from(count) + 1;
        let first = match self.skew {
            Skew::Uniform => rng.gen_range(0..starts),
            Skew::Front => skewed_start(rng, starts),
        };
        Attempt { id, show, first, count }
    }
}

/// A start in `0..starts`: [`HOT_STARTS_PERCENT`] of the time in the hot front (the first
/// [`HOT_FRONT_PERCENT`] of the starts, at least one), otherwise in the rest.
pub fn skewed_start(rng: &mut impl Rng, starts: u32) -> u32 {
    let hot = (u64::from(starts) * u64::from(HOT_FRONT_PERCENT)).div_ceil(100);
    // `hot` is at most `starts` (a u32), so the conversion cannot fail; `max(1)` keeps the
    // range non-empty for tiny shows.
    let hot = u32::try_from(hot).unwrap_or(starts).clamp(1, starts);
    if hot == starts || rng.gen_range(0..100) < HOT_STARTS_PERCENT {
        rng.gen_range(0..hot)
    } else {
        rng.gen_range(hot..starts)
    }
}

/// One all-or-nothing request: `count` contiguous seats from `first` in show `show` (an index
/// into the run's shows, not a backend's show id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Unique within the run: the worker's index in the high 32 bits, its sequence number in
    /// the low ones. PostgreSQL and etcd store it as the owner of the seats.
    pub id: u64,
    /// The show's index, `0..shows`.
    pub show: u32,
    /// The first seat.
    pub first: u32,
    /// How many seats, `1..=SEATS_PER_ATTEMPT_MAX`.
    pub count: u8,
}

impl Attempt {
    /// The seats asked for.
    pub fn seats(&self) -> std::ops::Range<u32> {
        self.first..self.first + u32::from(self.count)
    }

    /// The seats asked for, in a fixed-size buffer and how many of it are used (no
    /// allocation).
    pub fn seat_array(&self) -> ([u32; SEATS_PER_ATTEMPT_MAX as usize], usize) {
        let mut seats = [0; SEATS_PER_ATTEMPT_MAX as usize];
        for (slot, seat) in seats.iter_mut().zip(self.seats()) {
            *slot = seat;
        }
        (seats, usize::from(self.count))
    }
}

/// Why a run stopped early, if it is sold out: see [`SOLD_OUT_PERCENT`] and
/// [`STALL_SOLD_PERCENT`]. `window_decided` and `window_held` count the attempts decided and
/// held in the last window.
pub fn sold_out(
    total_seats: u64,
    sold_seats: u64,
    window_decided: u64,
    window_held: u64,
) -> Option<&'static str> {
    if sold_seats * 100 >= total_seats * SOLD_OUT_PERCENT {
        return Some("sold out (98% of seats sold)");
    }
    let stalled = window_decided >= STALL_WINDOW_ATTEMPTS_MIN
        && window_held * 100 < window_decided * STALL_SUCCESS_PERCENT;
    if stalled && sold_seats * 100 >= total_seats * STALL_SOLD_PERCENT {
        return Some("sold out (90% sold and under 1% of attempts succeed)");
    }
    None
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn attempts_ask_for_one_to_four_contiguous_seats_inside_the_show() {
        let layout = Layout::split(50_000, 1, Skew::Front);
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = [0u32; SEATS_PER_ATTEMPT_MAX as usize + 1];
        for id in 0..100_000 {
            let attempt = layout.attempt(&mut rng, id);
            assert_eq!(attempt.show, 0);
            assert!((1..=SEATS_PER_ATTEMPT_MAX).contains(&attempt.count), "{attempt:?}");
            assert!(attempt.seats().end <= layout.seats_per_show, "{attempt:?}");
            let (seats, used) = attempt.seat_array();
            assert_eq!(seats[..used].to_vec(), attempt.seats().collect::<Vec<_>>());
            counts[usize::from(attempt.count)] += 1;
        }
        // Every k occurs, about a quarter of the time each.
        for count in &counts[1..] {
            assert!((23_000..27_000).contains(count), "{counts:?}");
        }
    }

    #[test]
    fn eighty_percent_of_skewed_starts_fall_in_the_first_fifth() {
        let mut rng = StdRng::seed_from_u64(7);
        let starts = 50_000;
        let samples = 200_000;
        let hot = (0..samples).filter(|_| skewed_start(&mut rng, starts) < starts / 5).count();
        let percent = hot as f64 * 100.0 / samples as f64;
        assert!((79.0..81.0).contains(&percent), "{percent}% of starts in the front");
    }

    #[test]
    fn uniform_starts_cover_the_show_evenly() {
        let layout = Layout::split(1_000, 1, Skew::Uniform);
        let mut rng = StdRng::seed_from_u64(3);
        let front =
            (0..100_000).filter(|&id| layout.attempt(&mut rng, id).first < 200).count() as f64;
        assert!((19_000.0..21_000.0).contains(&front), "{front}");
    }

    #[test]
    fn tiny_shows_still_get_valid_starts() {
        let mut rng = StdRng::seed_from_u64(5);
        for starts in 1..10 {
            for _ in 0..1_000 {
                assert!(skewed_start(&mut rng, starts) < starts);
            }
        }
    }

    #[test]
    fn the_uncontended_million_seats_are_ten_shows_of_a_hundred_thousand() {
        let layout = WorkloadKind::Uncontended.layout(50_000, UNCONTENDED_SEATS);
        assert_eq!((layout.shows, layout.seats_per_show), (10, 100_000));
        assert_eq!(layout.skew, Skew::Uniform);
        let many = WorkloadKind::ManyShows.layout(50_000, UNCONTENDED_SEATS);
        assert_eq!((many.shows, many.seats_per_show), (64, 782));
        assert!(many.total_seats() >= 50_000);
        let mut rng = StdRng::seed_from_u64(9);
        let shows: std::collections::BTreeSet<u32> =
            (0..10_000).map(|id| many.attempt(&mut rng, id).show).collect();
        assert_eq!(shows.len(), 64, "every show gets attempts");
    }

    #[test]
    fn sweeps_vary_one_thing_each() {
        for &x in Sweep::CLIENTS.iter() {
            let (clients, layout) = Sweep::Clients.run_at(x, 50_000);
            assert_eq!((clients, layout.shows, layout.seats_per_show), (x, 1, 50_000));
        }
        let (clients, layout) = Sweep::Shows.run_at(10_000, 50_000);
        assert_eq!((clients, layout.shows, layout.seats_per_show), (256, 10_000, 5));
        // Never a show too small for the largest attempt.
        let (_, layout) = Sweep::Shows.run_at(10_000, 1_000);
        assert_eq!((layout.shows, layout.seats_per_show), (250, 4));
        let (_, layout) = Sweep::Seats.run_at(100_000, 50_000);
        assert_eq!((layout.shows, layout.seats_per_show), (1, 100_000));
        assert_eq!(Sweep::parse("shows"), Some(Sweep::Shows));
        assert_eq!(Sweep::parse("C"), None);
    }

    #[test]
    fn the_first_minute_is_a_workload_of_its_own() {
        assert_eq!(WorkloadKind::parse("first-minute"), Some(WorkloadKind::FirstMinute));
        let layout = WorkloadKind::FirstMinute.layout(50_000, UNCONTENDED_SEATS);
        assert_eq!((layout.shows, layout.seats_per_show), (1, 50_000));
    }

    #[test]
    fn a_run_is_sold_out_at_98_percent_or_when_attempts_stop_fitting() {
        assert_eq!(sold_out(1_000, 979, 1_000, 500), None);
        assert!(sold_out(1_000, 980, 1_000, 500).is_some());
        // Stalled (under 1% succeed) but not sold enough yet: the front is full, the back
        // is not.
        assert_eq!(sold_out(1_000, 899, 1_000, 5), None);
        assert!(sold_out(1_000, 900, 1_000, 5).is_some());
        // Too few attempts in the window to call it a stall.
        assert_eq!(sold_out(1_000, 950, 100, 0), None);
    }
}
