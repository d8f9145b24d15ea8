//! The replicas of the raft tests check every invariant after every applied entry: this crate's
//! dev-dependency turns on `statemachine/verify`, and a state broken behind the rules' back
//! panics at the next entry, naming it.

use statemachine::{Command, Entry, Group, HoldId, Seat, ShowId};

use crate::commands::{create_show, hold, open_sales};

#[test]
fn the_raft_tests_run_with_verify() {
    // Checked when this test compiles: without the feature, the raft tests do not build.
    const { assert!(statemachine::VERIFY, "raft's dev-dependency enables statemachine/verify") }
}

/// A seat naming a hold that does not exist breaks "holds and seats agree"; the next entry, a
/// tick that touches nothing, panics with its index.
#[test]
#[should_panic(expected = "invariant broken after applying log index 4 (verify)")]
fn a_state_broken_behind_the_rules_back_panics_at_the_next_entry() {
    let mut group = Group::new();
    for (index, command) in
        [create_show(1, 12), open_sales(1), hold(1, 1, 1, 0)].into_iter().enumerate()
    {
        let entry = Entry { index: index as u64 + 1, time_ms: 1_000, commands: vec![command] };
        assert!(group.apply(&entry).iter().all(Result::is_ok));
    }
    std::sync::Arc::make_mut(group.shows.get_mut(&ShowId(1)).expect("the show")).seats[5] =
        Seat::Held(HoldId(999));
    group.apply(&Entry { index: 4, time_ms: 2_000, commands: vec![Command::Tick] });
}
