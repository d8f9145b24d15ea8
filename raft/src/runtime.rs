//! The async runtime every group runs on: tokio, with openraft's randomness (election timeouts)
//! drawn from a seed when the caller gives one, so that the simulator can replay a run exactly.
//!
//! Owns [`BookingRuntime`], an openraft `AsyncRuntime` that delegates everything to
//! `openraft::TokioRuntime` except its random numbers. Inside [`BookingRuntime::scope`] they come
//! from a seed carried in a task-local and split at every spawn (the same derivation as
//! openraft's `DeterministicRng`, so a task tree gets independent, reproducible streams);
//! outside any scope (production, every ordinary test) they are seeded from the operating
//! system, as `TokioRuntime`'s are. Inside a scope, blocking work (openraft encodes snapshots
//! with it) runs inline rather than on a pool thread. Never changes scheduling or time: under
//! the simulator those are turmoil's and tokio's (with `--cfg tokio_unstable`, its seeded
//! scheduler).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::time::Duration;

use openraft::OptionalSend;
use openraft::TokioRuntime;
use openraft::async_runtime::AsyncRuntime;
use openraft::rt::{Select2, Select3, Select4};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::task::futures::TaskLocalFuture;

tokio::task_local! {
    /// The seed of the current task's random numbers, when inside a scope.
    static SEED: Cell<u64>;
}

/// SplitMix64 with additive constant `gamma`: a bijective mixer with good avalanche.
fn splitmix64(seed: u64, gamma: u64) -> u64 {
    let mixed = seed.wrapping_add(gamma);
    let mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^ (mixed >> 31)
}

/// The seed of a spawned child (the golden ratio's fractional bits as gamma).
fn child_seed(seed: u64) -> u64 {
    splitmix64(seed, 0x9e37_79b9_7f4a_7c15)
}

/// The parent's next seed after a spawn or a draw (the square root of 2's fractional bits).
fn next_seed(seed: u64) -> u64 {
    splitmix64(seed, 0x6a09_e667_f3bc_c908)
}

/// The current task's seed, advanced; `None` outside a scope.
fn take_seed() -> Option<u64> {
    SEED.try_with(|cell| {
        let seed = cell.get();
        cell.set(next_seed(seed));
        seed
    })
    .ok()
}

/// tokio, with seedable randomness. See the module docs.
#[derive(Debug)]
pub struct BookingRuntime {
    inner: TokioRuntime,
}

impl BookingRuntime {
    /// Runs `future` with its random numbers (and those of every task it spawns through the
    /// runtime) drawn from `seed`.
    pub fn scope<F: Future>(seed: u64, future: F) -> TaskLocalFuture<Cell<u64>, F> {
        SEED.scope(Cell::new(seed), future)
    }

    /// Runs `f` on a background thread at a lower CPU priority than serving (`background.rs`):
    /// for long work no buyer waits on, encoding a snapshot or auditing a checkpoint. Inside a
    /// seed scope, runs it inline instead, as [`AsyncRuntime::spawn_blocking`] does.
    ///
    /// # Errors
    ///
    /// An error if `f` panicked or no background thread could be started.
    pub fn spawn_background<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let inline = SEED.try_with(|_| ()).is_ok();
        async move { if inline { Ok(f()) } else { crate::background::run(f).await } }
    }
}

impl AsyncRuntime for BookingRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        match take_seed() {
            Some(seed) => TokioRuntime::spawn(SEED.scope(Cell::new(child_seed(seed)), future)),
            None => TokioRuntime::spawn(future),
        }
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F>(duration: Duration, future: F) -> Self::Timeout<R, F>
    where
        F: Future<Output = R> + OptionalSend,
    {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F>
    where
        F: Future<Output = R> + OptionalSend,
    {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn select2<A, B>(
        a: A,
        b: B,
    ) -> impl Future<Output = Select2<A::Output, B::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
    {
        TokioRuntime::select2(a, b)
    }

    fn select3<A, B, C>(
        a: A,
        b: B,
        c: C,
    ) -> impl Future<Output = Select3<A::Output, B::Output, C::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
    {
        TokioRuntime::select3(a, b, c)
    }

    fn select4<A, B, C, D>(
        a: A,
        b: B,
        c: C,
        d: D,
    ) -> impl Future<Output = Select4<A::Output, B::Output, C::Output, D::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
        D: Future + OptionalSend,
    {
        TokioRuntime::select4(a, b, c, d)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        match take_seed() {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_rng(&mut rand::rng()),
        }
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        BookingRuntime { inner: TokioRuntime::new(threads) }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.inner.block_on(future)
    }

    /// Runs `f` on tokio's blocking pool; inside a seed scope, runs it inline instead (on a
    /// simulator's single thread a pool thread would run at a time the seed does not decide).
    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let inline = SEED.try_with(|_| ()).is_ok();
        async move { if inline { Ok(f()) } else { TokioRuntime::spawn_blocking(f).await } }
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    /// Draws from the runtime's rng in the task and in two spawned children.
    async fn draws() -> Vec<u64> {
        let mut out = vec![BookingRuntime::thread_rng().next_u64()];
        for _ in 0..2 {
            let child = BookingRuntime::spawn(async { BookingRuntime::thread_rng().next_u64() });
            out.push(child.await.expect("the child finishes"));
        }
        out.push(BookingRuntime::thread_rng().next_u64());
        out
    }

    #[tokio::test]
    async fn a_seed_replays_every_draw_of_a_task_tree() {
        let first = BookingRuntime::scope(7, draws()).await;
        let again = BookingRuntime::scope(7, draws()).await;
        let other = BookingRuntime::scope(8, draws()).await;
        assert_eq!(first, again);
        assert_ne!(first, other);
        // Parent and children draw distinct numbers.
        let mut distinct = first.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), first.len(), "{first:?}");
    }

    #[tokio::test]
    async fn blocking_work_runs_inline_inside_a_scope_and_on_the_pool_outside() {
        let here = std::thread::current().id();
        let inside = BookingRuntime::scope(1, async {
            BookingRuntime::spawn_blocking(|| std::thread::current().id()).await
        })
        .await
        .expect("runs");
        let outside =
            BookingRuntime::spawn_blocking(|| std::thread::current().id()).await.expect("runs");
        assert_eq!(inside, here);
        assert_ne!(outside, here);
    }

    #[tokio::test]
    async fn outside_a_scope_draws_come_from_the_system() {
        let first = draws().await;
        let second = draws().await;
        assert_ne!(first, second, "system-seeded draws should differ");
    }
}
