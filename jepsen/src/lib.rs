//! The black-box fault-injection suite: processes, nemeses, workloads, histories and checkers,
//! with `statemachine` as the model.
//!
//! Empty until issue 5 ("Jepsen suite"). Nothing imports this crate.
