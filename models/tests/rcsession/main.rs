//! The session workload models (`rctb_models::rcsession`) on the simulator:
//! `SessionPair`, one session at a time, and `SessionWorkload`, many clients
//! with cancels, slow and crashing clients under link faults.

mod pair;
mod workload;
