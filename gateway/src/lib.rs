//! rctb-gateway: the hipobj-rc-v2 gateway around the RC session server
//! (`rctb_core::rcsession`): the object backend ([`store`]), and the HTTP
//! control plane with SigV4 (PROTOCOLS.md §3).

pub mod auth;
pub mod client;
pub mod engine;
pub mod http;
pub mod load;
pub mod serve;
pub mod store;
