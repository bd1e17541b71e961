//! Models of peers that are not RDMA NICs driven by software: devices with
//! their own RDMA engine that applications talk to. Each is written against
//! [`rctb_core::Transport`], so it runs on a simulator node (or any backend).

pub mod fpga;
pub mod nvme;
pub mod rcsession;
