//! The provider nemesis's menu, shared by the Jepsen `payments` workload (which sets it through
//! paysim's `PUT /control`) and the simulator (which sets it on its paysim host directly): the
//! baseline between faults, and the faults, each a behaviour in paysim's JSON form (`node`'s
//! `paysim::behaviour::Behaviour`, which this crate may not import; the two meet as JSON).
//!
//! Owns the faults' names and strengths: an outage, slowness up to past the node's 5 s call
//! timeout (so outcomes become unknown), duplicate webhooks, late webhooks, out-of-order
//! (stale) webhooks, charge calls that time out after charging, and webhooks delivered before
//! the charge call returns. Never sets anything itself.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// The behaviour between faults: a tenth of new charges declined.
pub fn baseline() -> Value {
    json!({ "decline_ratio": 0.1 })
}

/// One fault, drawn with `rng`: its name and the behaviour that makes it (the baseline's
/// declines with the fault's fields over them).
pub fn draw_fault(rng: &mut StdRng) -> (&'static str, Value) {
    let mut behaviour = baseline();
    let (name, fields) = match rng.gen_range(0..7) {
        0 => ("outage", json!({ "outage": true })),
        // Past 5 s the node's call times out: the charge is made, its outcome unknown.
        1 => ("slow", json!({ "latency_ms": rng.gen_range(1_000..=6_500) })),
        2 => ("duplicate-webhooks", json!({ "duplicate_ratio": 1.0 })),
        3 => ("late-webhooks", json!({ "webhook_delay_ms": rng.gen_range(2_000..=8_000) })),
        4 => ("out-of-order-webhooks", json!({ "out_of_order_ratio": 1.0 })),
        5 => ("timeouts", json!({ "timeout_ratio": 0.5 })),
        _ => (
            "webhook-before-reply",
            json!({ "webhook_before_reply": true, "duplicate_ratio": 0.5 }),
        ),
    };
    if let (Some(all), Some(fields)) = (behaviour.as_object_mut(), fields.as_object()) {
        all.extend(fields.clone());
    }
    (name, behaviour)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::SeedableRng;

    use super::*;

    #[test]
    fn faults_are_behaviours_paysim_accepts_and_keep_the_baseline() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut names = BTreeSet::new();
        for _ in 0..200 {
            let (name, behaviour) = draw_fault(&mut rng);
            names.insert(name);
            assert_eq!(behaviour["decline_ratio"], 0.1, "{name}: {behaviour}");
            let fields = behaviour.as_object().expect("an object");
            let known = [
                "decline_ratio",
                "timeout_ratio",
                "latency_ms",
                "webhook_delay_ms",
                "duplicate_ratio",
                "out_of_order_ratio",
                "webhook_before_reply",
                "outage",
            ];
            assert!(fields.keys().all(|field| known.contains(&field.as_str())), "{behaviour}");
            assert!(behaviour["latency_ms"].as_u64().is_none_or(|ms| ms <= 60_000));
        }
        assert_eq!(names.len(), 7, "{names:?}");
    }
}
