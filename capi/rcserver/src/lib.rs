//! rctb's `librcserver.a`: the RC session server of `rctb-rcsession`
//! behind versitygw's `rc_server_abi.h`, so versitygw's cgo binding
//! (`rdma/rcserver`) links it in place of its C++ library with no Go
//! change.
//!
//! - [`abi`]: the C types and constants, laid out as the header lays them out.
//! - `server`: the `rc_*` entry points. Every one checks its arguments
//!   before it touches the server, catches any panic (`RC_E_INTERNAL`), and
//!   calls the log sink and the terminal notification with no lock held.
//! - `verbs` and `transport`: the libibverbs found with `dlopen` at
//!   `rc_server_init`, and rctb's `Transport` over it; nothing is linked at
//!   build time, and the crate builds with no RDMA headers (the verbs
//!   structures are `capi/ibverbs`'s generated ones).
//!
//! `unsafe` is allowed in this crate, as in the other C-ABI crates; every
//! block says why it is sound in a `// SAFETY:` line.

/// The value of an `Ok`, or returns the status code an `Err` holds: the
/// entry points' argument checks, one line each.
macro_rules! or_return {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

pub mod abi;
mod calls;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod server;
mod transport;
mod verbs;

#[path = "../../ibverbs/src/sys.rs"]
#[allow(clippy::undocumented_unsafe_blocks, unreachable_pub, missing_docs)]
mod sys;

pub use calls::*;
pub use server::*;
