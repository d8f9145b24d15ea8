//! The waitlist's policies (seed 000, "Fairness"): strict FIFO, priority bands, a lottery drawn
//! with a logged seed, and offer waves. The harness checks every invariant after every entry,
//! among them that no offer went to an entry while one served before it was waiting.

mod common;

use common::*;
use statemachine::*;

const MINUTE: u64 = 60_000;

/// A show of `seat_count` seats, all held by session 100, waitlist on (policy version 1).
fn sold_out(h: &mut Harness, seat_count: u32) -> (ShowId, HoldId) {
    let show = h.on_sale_show(1, seat_count);
    let every: Vec<SeatNo> = (0..seat_count).collect();
    let hold = h.held(show, 100, 1, &every).hold;
    let on = OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 };
    h.operator(on).unwrap();
    (show, hold)
}

fn set_policy(h: &mut Harness, show: ShowId, policy_version: u32, rules: WaitlistRules) -> Outcome {
    h.operator(OperatorCommand::ConfigureWaitlistPolicy { show, policy_version, rules })
}

fn rules(ordering: WaitlistOrdering, wave_offers_max: u32) -> WaitlistRules {
    WaitlistRules { ordering, wave_offers_max }
}

fn join(h: &mut Harness, show: ShowId, who: u64, band: u8) -> EntryId {
    match h.client(show, who, 600, ClientRequest::JoinWaitlist { quantity: 1, band }) {
        Ok(Reply::WaitlistJoined { entry, .. }) => entry,
        other => panic!("{other:?}"),
    }
}

/// The sessions offered seats, in the order the offers were made.
fn offered(h: &Harness) -> Vec<SessionId> {
    h.events()
        .into_iter()
        .filter_map(|event| match event {
            Event::OfferMade { session, .. } => Some(session),
            _ => None,
        })
        .collect()
}

fn release_all(h: &mut Harness, show: ShowId, hold: HoldId) {
    h.client(show, 100, 2, ClientRequest::CancelHold { hold }).unwrap();
}

#[test]
fn strict_fifo_is_the_default_and_ignores_a_claimed_band() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 1);
    assert_eq!(h.show(show).waitlist.policy_now().rules, WaitlistRules::default());
    join(&mut h, show, 1, BAND_GUEST);
    h.advance(MINUTE);
    let later = join(&mut h, show, 2, 0);
    assert_eq!(h.show(show).waitlist.entries[&later].order.band, 0, "FIFO puts all in band 0");
    release_all(&mut h, show, hold);
    assert_eq!(offered(&h), vec![session(1)], "the first to join is served first");
}

#[test]
fn priority_bands_serve_a_claimed_band_before_an_earlier_guest_and_say_why() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 1);
    let set = set_policy(&mut h, show, 2, rules(WaitlistOrdering::Bands, 0)).unwrap();
    assert!(matches!(set, Reply::WaitlistPolicySet { duplicate: false, policy_version: 2, .. }));
    let guest = join(&mut h, show, 1, BAND_GUEST);
    h.advance(MINUTE);
    let member = join(&mut h, show, 2, 1);
    let view = h.group.waitlist_entry(show, guest, None).unwrap();
    assert_eq!(view.ahead, 1, "the later member is ahead of the guest");
    release_all(&mut h, show, hold);
    assert_eq!(offered(&h), vec![session(2)]);
    let skips = h.group.waitlist_skips(show, guest, Some(session(1))).unwrap();
    assert_eq!(skips.len(), 1);
    let skip = &skips[0];
    assert_eq!((skip.entry, skip.was_ahead, skip.order.band), (member, true, 1));
    assert_eq!((skip.policy_version, skip.rules.ordering), (2, WaitlistOrdering::Bands));
    assert_eq!((skip.draw_seed, skip.draw_key), (None, None));
}

#[test]
fn a_policy_change_needs_a_new_version_and_an_empty_line_to_change_the_ordering() {
    let mut h = Harness::new();
    let (show, _hold) = sold_out(&mut h, 1);
    let bands = rules(WaitlistOrdering::Bands, 0);
    set_policy(&mut h, show, 2, bands).unwrap();
    let again = set_policy(&mut h, show, 2, bands).unwrap();
    assert!(matches!(again, Reply::WaitlistPolicySet { duplicate: true, .. }), "{again:?}");
    // The same version with other rules, or an older version, is refused.
    let other = rules(WaitlistOrdering::Fifo, 0);
    assert_eq!(code(&set_policy(&mut h, show, 2, other)), "invalid_argument");
    assert_eq!(code(&set_policy(&mut h, show, 1, other)), "invalid_argument");
    let too_wide = rules(WaitlistOrdering::Bands, limits::WAITLIST_WAVE_OFFERS_MAX + 1);
    assert_eq!(code(&set_policy(&mut h, show, 3, too_wide)), "invalid_argument");
    // With someone waiting the ordering stays; the wave may change.
    join(&mut h, show, 1, 3);
    assert_eq!(set_policy(&mut h, show, 3, other), Err(Rejection::WaitlistInUse { waiting: 1 }));
    set_policy(&mut h, show, 3, rules(WaitlistOrdering::Bands, 2)).unwrap();
    assert_eq!(h.show(show).waitlist.policy_now().rules, rules(WaitlistOrdering::Bands, 2));
    // Each change is kept by version, and audited on the show.
    let changes: Vec<u32> = h.show(show).waitlist.policy.changes.keys().copied().collect();
    assert_eq!(changes, vec![2, 3]);
    assert_eq!(h.show(show).waitlist.policy_at(1).rules, WaitlistRules::default());
    let trail = h.group.audit_trail(show, EntityKind::Show, show.0);
    let set = trail.iter().filter(|record| record.reason == Reason::WaitlistPolicySet).count();
    assert_eq!(set, 2);
    // Nothing changed by the refusals: a rejected command leaves the state as it was.
    let before = h.group.clone();
    assert_eq!(code(&set_policy(&mut h, show, 4, other)), "waitlist_in_use");
    let mut after = h.group.clone();
    after.applied_index = before.applied_index;
    assert_eq!(after.shows().collect::<Vec<_>>(), before.shows().collect::<Vec<_>>());
}

#[test]
fn a_lottery_serves_nobody_before_its_draw_and_then_serves_in_draw_order() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 6);
    let draw_at_ms = h.now + 10 * MINUTE;
    set_policy(&mut h, show, 2, rules(WaitlistOrdering::Lottery { draw_at_ms }, 0)).unwrap();
    let entries: Vec<EntryId> = (1..=8).map(|who| join(&mut h, show, who, 0)).collect();
    release_all(&mut h, show, hold);
    assert!(offered(&h).is_empty(), "nobody is served before the draw");
    assert_eq!(h.show(show).waitlist.pool.len(), 6, "the released seats wait for the draw");
    let draw = OperatorCommand::DrawLottery { show, seed: 7 };
    assert_eq!(h.operator(draw.clone()), Err(Rejection::LotteryNotDue { draw_at_ms }));
    h.advance(10 * MINUTE);
    let drawn = h.operator(draw.clone()).unwrap();
    assert_eq!(drawn, Reply::LotteryDrawn { show, seed: 7, entries: 8, duplicate: false });
    // Six seats, six offers, to the six lowest draw keys, lowest first.
    let mut by_key: Vec<(u64, EntryId)> =
        entries.iter().map(|entry| (draw_key(7, *entry), *entry)).collect();
    by_key.sort_unstable();
    let owner = |entry: EntryId| h.show(show).waitlist.entries[&entry].session;
    let expected: Vec<SessionId> = by_key.iter().take(6).map(|(_, entry)| owner(*entry)).collect();
    assert_eq!(offered(&h), expected);
    let fifo: Vec<SessionId> = entries.iter().take(6).map(|entry| owner(*entry)).collect();
    assert_ne!(offered(&h), fifo, "seed 7 draws another order than joining did");
    // Again with the same seed is a duplicate; another seed is refused.
    let again = h.operator(draw).unwrap();
    assert!(matches!(again, Reply::LotteryDrawn { duplicate: true, entries: 8, .. }));
    let other = OperatorCommand::DrawLottery { show, seed: 8 };
    assert_eq!(h.operator(other), Err(Rejection::LotteryAlreadyDrawn { seed: 7 }));
    // A waiter not served sees the draw in the answer to "why was I skipped".
    let (last_key, last) = by_key[7];
    let skips = h.group.waitlist_skips(show, last, None).unwrap();
    assert_eq!(skips.len(), 6);
    for skip in &skips {
        assert!(skip.was_ahead);
        assert_eq!(skip.draw_seed, Some(7));
        assert_eq!(skip.your_draw_key, Some(last_key));
        assert!(skip.draw_key.unwrap() < last_key);
        assert_eq!(skip.rules.ordering, WaitlistOrdering::Lottery { draw_at_ms });
    }
    assert_eq!(h.group.waitlist_entry(show, last, None).unwrap().ahead, 1);
}

#[test]
fn a_late_joiner_waits_behind_every_drawn_entry() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 2);
    let lottery = rules(WaitlistOrdering::Lottery { draw_at_ms: h.now }, 0);
    set_policy(&mut h, show, 2, lottery).unwrap();
    let drawn = join(&mut h, show, 1, 0);
    h.operator(OperatorCommand::DrawLottery { show, seed: 1 }).unwrap();
    let late = join(&mut h, show, 2, 0);
    let view = h.group.waitlist_entry(show, late, None).unwrap();
    assert_eq!(view.ahead, 1);
    assert_eq!(h.show(show).waitlist.drawn_key(&h.show(show).waitlist.entries[&late]), None);
    release_all(&mut h, show, hold);
    assert_eq!(offered(&h), vec![session(1), session(2)]);
    assert!(h.show(show).waitlist.entries[&drawn].state.offer().is_some());
}

#[test]
fn waves_bound_the_open_offers_and_each_closed_offer_lets_the_next_waiter_in() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 5);
    set_policy(&mut h, show, 2, rules(WaitlistOrdering::Fifo, 2)).unwrap();
    for who in 1..=5 {
        join(&mut h, show, who, 0);
        h.advance(1);
    }
    release_all(&mut h, show, hold);
    assert_eq!(offered(&h), vec![session(1), session(2)], "a wave of two");
    assert_eq!(h.show(show).waitlist.pool.len(), 3);
    // The seats behind the full wave wait since their release: the promotion lag.
    let released_ms = h.now;
    h.advance(1_000);
    assert_eq!(h.show(show).waitlist.oldest_pooled_ms(), Some(released_ms));
    // Accepting and declining each let the next in line in.
    let offer_of = |h: &Harness, who: u64| {
        let show = h.show(show);
        show.waitlist.offers.values().find(|offer| offer.session == session(who)).unwrap().id
    };
    let first = offer_of(&h, 1);
    h.client(show, 1, 3, ClientRequest::AcceptOffer { offer: first }).unwrap();
    assert_eq!(offered(&h).len(), 3);
    let second = offer_of(&h, 2);
    h.client(show, 2, 3, ClientRequest::DeclineOffer { offer: second }).unwrap();
    assert_eq!(offered(&h), (1..=4).map(session).collect::<Vec<_>>());
    // An expired offer too.
    h.advance(h.show(show).policy.offer_ttl_ms);
    h.tick().unwrap();
    assert_eq!(offered(&h).len(), 5, "the expiries served session 5 (and 2's seat again)");
    // Lifting the limit offers everything that serves a waiter at once.
    set_policy(&mut h, show, 3, rules(WaitlistOrdering::Fifo, 0)).unwrap();
    assert!(h.show(show).waitlist.waiting.is_empty() || h.show(show).waitlist.pool.is_empty());
}

#[test]
fn drawing_needs_a_lottery_and_a_show_not_cancelled() {
    let mut h = Harness::new();
    let (show, _hold) = sold_out(&mut h, 1);
    let draw = OperatorCommand::DrawLottery { show, seed: 1 };
    assert_eq!(h.operator(draw.clone()), Err(Rejection::NotALottery));
    let lottery = rules(WaitlistOrdering::Lottery { draw_at_ms: 0 }, 0);
    set_policy(&mut h, show, 2, lottery).unwrap();
    h.operator(OperatorCommand::CancelShow { show }).unwrap();
    assert_eq!(h.operator(draw), Err(Rejection::ShowCancelled));
    assert_eq!(code(&set_policy(&mut h, show, 3, WaitlistRules::default())), "show_cancelled");
}

/// Every replica draws the same: applying the same log to a fresh group gives the same state.
#[test]
fn a_replayed_log_draws_the_same() {
    let mut h = Harness::new();
    let (show, hold) = sold_out(&mut h, 3);
    let lottery = rules(WaitlistOrdering::Lottery { draw_at_ms: h.now }, 0);
    set_policy(&mut h, show, 2, lottery).unwrap();
    for who in 1..=9 {
        join(&mut h, show, who, 0);
    }
    h.operator(OperatorCommand::DrawLottery { show, seed: 99 }).unwrap();
    release_all(&mut h, show, hold);
    let mut replica = Group::new();
    for entry in &h.log {
        replica.apply(entry);
    }
    assert_eq!(replica.digest(), h.group.digest());
    assert_eq!(replica, h.group);
}
