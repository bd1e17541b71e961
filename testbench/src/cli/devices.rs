//! `rctb devices`: every RDMA device, its ports and GID tables (verbs).
//! Exit status: 0 when there is a device, 2 when there is none (or no
//! verbs backend in this build: the line says how to get it).

use std::process::ExitCode;

use rctb_core::transport::{GidType, TransportError};

use crate::cli::backend;

/// Lists the devices on stdout.
pub fn main() -> ExitCode {
    let verbs = match backend::verbs() {
        Ok(v) => v,
        Err(e) => {
            println!("no RDMA devices: {e}");
            return ExitCode::from(2);
        }
    };
    let devices = match verbs.list_devices() {
        Ok(d) => d,
        Err(TransportError::NoDevice { .. }) => Vec::new(),
        Err(e) => {
            eprintln!("rctb: {e}");
            return ExitCode::from(2);
        }
    };
    if devices.is_empty() {
        println!("no RDMA devices: {}", verbs.no_device_hint());
        return ExitCode::from(2);
    }
    for d in &devices {
        println!(
            "{}  max_qp_wr {}  max_sge {}  max_mr_size {}",
            d.name, d.device.max_qp_wr, d.device.max_sge, d.device.max_mr_size
        );
        for p in &d.ports {
            println!(
                "  port {}  {:?}  active_mtu {}  max_mtu {}",
                p.port,
                p.state,
                p.active_mtu.bytes(),
                p.max_mtu.bytes()
            );
            for g in &p.gids {
                let kind = match g.gid_type {
                    GidType::RoceV1 => "RoCE v1",
                    GidType::RoceV2 => "RoCE v2",
                };
                let ip = g.gid.to_ipv4().map(|ip| format!("  ({ip})")).unwrap_or_default();
                println!("    gid[{}] {}  {kind}{ip}", g.index, g.gid);
            }
        }
    }
    ExitCode::SUCCESS
}
