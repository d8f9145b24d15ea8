//! A panic ends the run as invalid, at once. The simulation runs every host on one thread, so a
//! node's panic (an invariant broken at apply under the `verify` feature, an assertion of the
//! state machine) unwinds through the simulator itself, whose runtimes then panic again while
//! they are dropped, and the process aborts. Before that, this hook prints the run's outcome
//! (what the parent reads) with the first panic as its problem, and exits.

use std::time::Duration;

use statemachine::check::Verdict;

use crate::run::Outcome;

/// From now on, the first panic of this process prints an invalid outcome and exits (after the
/// default hook has printed it on stderr).
pub fn end_run_on_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let outcome = Outcome {
            verdict: Verdict::Invalid,
            problems: vec![format!("panic: {}", info.to_string().replace('\n', " "))],
            trace: Vec::new(),
            operations: (0, 0, 0),
            simulated: Duration::ZERO,
        };
        println!("{}", serde_json::to_string(&outcome).expect("outcomes encode"));
        std::process::exit(0);
    }));
}
