//! The verbs backend of `rctb roce-rx` and `rctb fpga-emu`: each side on its
//! own RDMA device (and process), connected through the hand-off; the
//! front ends themselves are `super::front`.

use rctb_core::roce::GidIndex;

use super::args::*;
use super::front;
use crate::cli::backend::{self, Device, Verbs};

/// The verbs backend, or (a build without it) the usage error saying so.
fn verbs() -> Result<Verbs, CliError> {
    backend::verbs().map_err(|e| CliError::Usage(e.to_string()))
}

fn open(verbs: Verbs, device: Option<&str>, what: &str) -> Result<Device, CliError> {
    let device = device.ok_or_else(|| CliError::Usage(format!("--backend verbs needs --device ({what})")))?;
    Ok(verbs.open(device).map_err(|e| e.error)?)
}

/// `rctb roce-rx` on a device.
pub fn roce_rx(a: &RoceRxArgs) -> Result<bool, CliError> {
    let verbs = verbs()?;
    let fpga_ip = a.fpga_ip.ok_or_else(|| CliError::Usage("--backend verbs needs --fpga-ip".into()))?;
    let t = open(verbs, a.device.as_deref(), "the host's, e.g. rxe0")?;
    let device = t.device_name().to_string();
    let gid = match a.gid_index {
        GidIndex::Auto => {
            GidIndex::Index(t.detect_gid_index(a.port, fpga_ip).map_err(|e| CliError::Gid(e.to_string()))?)
        }
        g => g,
    };
    front::roce_rx(t, &device, gid, fpga_ip, a)
}

/// `rctb fpga-emu` on a device.
pub fn fpga_emu(a: &FpgaEmuArgs) -> Result<bool, CliError> {
    let verbs = verbs()?;
    let host_ip = a.host_ip.ok_or_else(|| CliError::Usage("--backend verbs needs --host-ip".into()))?;
    let t = open(verbs, a.device.as_deref(), "the FPGA's, e.g. rxe1")?;
    let sgid = match a.gid_index {
        GidIndex::Auto => t.detect_gid_index(1, host_ip).map_err(|e| CliError::Gid(e.to_string()))?,
        GidIndex::Index(i) => i,
    };
    let device = t.device_name().to_string();
    front::fpga_emu(t, &device, sgid, host_ip, a)
}
