//! rctb-gateway: the hipobj-rc-v2 gateway around the RC session server
//! (`rctb_core::rcsession`): the object backend ([`store`]), and the HTTP
//! control plane with SigV4 (docs/protocols.md §3).
//!
//! ```
//! // Object names are checked before anything touches the store.
//! use rctb_gateway::store::{ObjectPath, StoreError};
//!
//! assert!(ObjectPath::new("photos", "2026/cat.jpg").is_ok());
//! let e = ObjectPath::new("photos", "../escape").unwrap_err();
//! println!("{e}"); // names the rule the key broke
//! assert!(matches!(ObjectPath::new("Bad_Bucket", "k"), Err(StoreError::BadBucket(_))));
//! ```
//!
//! # Contract
//!
//! - **Server**: [`serve`] binds the HTTP listener and runs the session
//!   server's engine ([`engine`]) on a thread of its own that owns the
//!   RDMA transport (sim, udp or verbs); the HTTP side ([`http`], on
//!   tokio) hands it PREPARE / READY / CANCEL and S3 requests and awaits the
//!   answers, so no HTTP task ever blocks on RDMA. Routes and their answers
//!   are docs/protocols.md §3 and, for versitygw's current RC routes, §3a
//!   (`GatewayOptions::control_plane_only` for a gateway with no data QP).
//!   Beside them the plain S3 routes ordinary clients use on the same
//!   objects (GetObject with ranges, PUTs streamed to the store, the
//!   multipart uploads; docs/gateway.md).
//! - **Client**: [`client::ObjectClient`] runs whole transfers (PREPARE,
//!   connect, READY with BUSY retried, data, CANCEL on every failure after
//!   PREPARE) over a signed [`client::ControlPlane`]; its RDMA side runs
//!   where its transport lives ([`client::RdmaRunner`]).
//! - **Errors**: every refusal is an S3-style status and code (the table in
//!   docs/protocols.md §3.2; SigV4 failures from [`auth`]); the client surfaces
//!   them as [`client::ObjectError`] with the gateway's status. Bad input
//!   never panics the server.

#![warn(missing_docs)]

pub mod auth;
pub mod client;
pub mod engine;
pub mod http;
pub mod load;
pub mod serve;
pub mod store;
