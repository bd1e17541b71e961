//! The front ends of the `rctb` binary, one module per subcommand group.
//! Public so the binary (its own crate target) can reach them; not an API.

pub mod backend;
pub mod command;
pub mod conformance;
pub mod decode;
pub mod devices;
pub mod jobs;
pub mod nvme;
pub mod nvme_target;
pub mod object;
pub mod rc_session;
pub mod roce;
pub mod scenario;
pub mod udp;
