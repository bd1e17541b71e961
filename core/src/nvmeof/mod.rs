//! NVMe over Fabrics on RDMA: the host (initiator) side, generic over
//! [`crate::Transport`].
//!
//! - [`protocol`]: every wire layout of PROTOCOLS.md §2 (pure codecs).

pub mod protocol;
