//! Wire formats, each from the crate that owns it: RoCEv2 and RDMA CM
//! from rctb-wire, surf from rctb-roce-rx, hipobj from rctb-rcsession.

pub use rctb_rcsession::hipobj;
pub use rctb_roce_rx::surf;
pub use rctb_wire::{cm, roce};
