//! How a name is exported: bound to its rdma-core version node, and run
//! under a guard that keeps panics on this side of the boundary.
//!
//! The same technique as `capi/ibverbs/src/abi.rs` (a copy of its forty
//! lines, not a shared crate: the two libraries are separate cdylibs, and
//! the macro has to expand in the crate whose object carries the
//! `.symver`). Each entry is defined as `__rctb_<name>` and given its
//! public name with `.symver __rctb_<name>, <name>@@<node>`: the `@@` makes
//! it the default version, which the loader binds a versioned reference to
//! and `dlvsym` finds. `librdmacm.map` declares the nodes.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e }
}

/// Runs an entry's body; a panic (a bug of this library, never the
/// caller's input) becomes `on_panic` with errno EIO, and a line on stderr.
pub(crate) fn guard<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("rctb librdmacm: internal error in {name} (a bug: please report it)");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Defines an exported entry: `export!("RDMACM_1.0", on_panic, fn name(args) -> ret { body })`.
macro_rules! export {
    ($ver:literal, $on_panic:expr, fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        #[unsafe(export_name = concat!("__rctb_", stringify!($name)))]
        #[allow(clippy::missing_safety_doc, unused_variables)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::abi::guard(stringify!($name), $on_panic, || $body)
        }
        core::arch::global_asm!(concat!(".symver __rctb_", stringify!($name), ", ", stringify!($name), "@@", $ver));
    };
}
