//! Background work at a lower CPU priority than serving: snapshot encoding and the auditor's
//! checks.
//!
//! Owns a small pool of OS threads, started on first use, each of which lowers its own
//! scheduling priority (its `nice` value [`BACKGROUND_NICE`] above the process's, for that thread
//! only) before it takes jobs.
//! Such a job is long, CPU-bound and not waited on by any buyer: a snapshot of a large group
//! encodes and checks tens of megabytes. On tokio's blocking pool it competed as an equal with
//! the threads that apply entries and answer requests, and on a machine with few cores the
//! requests that arrived meanwhile waited for it (the benchmark's p99.9). At a lower priority
//! the scheduler runs it in the time serving leaves, and preempts it when a serving thread wakes.
//!
//! The threads are separate from tokio's pool so that no other blocking work (file I/O) ever
//! runs on a thread whose priority was lowered: an unprivileged process cannot raise it again.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// How much higher the background threads' `nice` value is than the process's: 10, which gives
/// such a thread about a tenth of the weight of a serving one when both want a core.
pub const BACKGROUND_NICE: i32 = 10;

/// The highest `nice` value (the lowest priority) Linux has.
const NICE_MAX: i32 = 19;

/// The background threads: two, so that one long snapshot does not queue every other group's
/// build or audit behind it.
const BACKGROUND_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on a background thread; the future resolves with its result.
///
/// # Errors
///
/// An error if the job panicked (the thread survives it) or no background thread could be
/// started.
pub(crate) async fn run<F, T>(job: F) -> Result<T, io::Error>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        // A dropped `answer` (the caller stopped waiting) is fine.
        let _ = answer.send(job());
    });
    jobs()?.send(job).map_err(|_| io::Error::other("the background threads are gone"))?;
    answered.await.map_err(|_| io::Error::other("a background job panicked"))
}

/// The queue of the background threads, started on first use.
fn jobs() -> Result<&'static Sender<Job>, io::Error> {
    static JOBS: OnceLock<Sender<Job>> = OnceLock::new();
    if let Some(jobs) = JOBS.get() {
        return Ok(jobs);
    }
    let (sender, receiver) = mpsc::channel::<Job>();
    let receiver = Arc::new(Mutex::new(receiver));
    for n in 0..BACKGROUND_THREADS {
        let receiver = Arc::clone(&receiver);
        std::thread::Builder::new()
            .name(format!("background-{n}"))
            .spawn(move || work(&receiver))?;
    }
    // Two first uses at once each start threads; the loser's threads end when its sender drops.
    Ok(JOBS.get_or_init(|| sender))
}

/// A background thread: lowers its priority, then runs jobs until the queue is gone.
fn work(receiver: &Mutex<Receiver<Job>>) {
    if let Err(error) = lower_priority() {
        tracing::warn!(%error, "background work runs at the default priority");
    }
    loop {
        let job = receiver.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // The job's caller learns of a panic from its dropped answer; the thread goes on.
        let _ = panic::catch_unwind(AssertUnwindSafe(job));
    }
}

/// Raises this thread's `nice` value by [`BACKGROUND_NICE`], to at most the highest (on Linux a
/// thread's priority is its own: the process's other threads keep theirs).
fn lower_priority() -> Result<(), io::Error> {
    let this_thread = Some(rustix::thread::gettid());
    let nice = rustix::process::getpriority_process(this_thread)?;
    let lower = (nice + BACKGROUND_NICE).min(NICE_MAX);
    if lower > nice {
        rustix::process::setpriority_process(this_thread, lower)?;
    }
    Ok(())
}

/// This thread's `nice` value.
#[cfg(test)]
fn nice() -> i32 {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("own priority")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_at_the_background_priority_and_survive_a_panic() {
        let serving = nice();
        let (name, background) =
            run(|| (std::thread::current().name().map(str::to_owned), nice())).await.expect("runs");
        assert!(name.is_some_and(|name| name.starts_with("background-")));
        assert_eq!(background, (serving + BACKGROUND_NICE).min(NICE_MAX));
        assert_eq!(nice(), serving, "the caller's thread keeps its priority");
        let panicked = run(|| -> u8 { panic!("a job that breaks") }).await;
        assert!(panicked.is_err());
        // Both threads are still there to run jobs.
        for _ in 0..4 {
            assert_eq!(run(|| 7).await.expect("runs after a panic"), 7);
        }
    }
}
