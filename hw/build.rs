//! Hardware tests run only where RDMA devices exist: they are compiled as
//! `#[ignore]`d unless both RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE are
//! set when building (cfg `rctb_rdma_hw`). No C code is built here.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rctb_rdma_hw)");
    println!("cargo::rerun-if-env-changed=RCTB_RDMA_DEVICE");
    println!("cargo::rerun-if-env-changed=RCTB_RDMA_PEER_DEVICE");
    println!("cargo::rerun-if-changed=build.rs");
    let set = |k| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if set("RCTB_RDMA_DEVICE") && set("RCTB_RDMA_PEER_DEVICE") {
        println!("cargo::rustc-cfg=rctb_rdma_hw");
    }
}
