//! What rctb-hw reports about devices without touching one: the hints of its
//! `NoDevice` errors and [`DeviceSummary`], the plain-data answer of
//! `list_devices`. No verbs calls, so it builds without the `verbs` feature.

use std::net::Ipv4Addr;

use rctb_core::transport::{DeviceInfo, GidType, PortInfo};

/// What every entry point says when this machine has no RDMA device.
pub const NO_DEVICE_HINT: &str =
    "no RDMA device: load rdma_rxe (rdma link add rxe0 type rxe netdev eth0) or run the VM harness ci/hw-validate";

/// What `open` says when devices exist but none has the requested name.
pub const UNKNOWN_DEVICE_HINT: &str = "no RDMA device of that name: `rctb devices` or `rdma link show` lists them";

/// Where the kernel publishes GID types.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) const SYSFS_ROOT: &str = "/sys";

/// One device as `list_devices` (feature `verbs`) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSummary {
    /// The device's name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// What `ibv_query_device` says.
    pub device: DeviceInfo,
    /// Every physical port (1-based), each with its GID table.
    pub ports: Vec<PortInfo>,
}

impl DeviceSummary {
    /// The IPv4 address of the first RoCE v2, IPv4-mapped GID of any port.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.ports.iter().find_map(ipv4_of_port)
    }

    /// Port `port`'s facts, if the device has it.
    pub fn port(&self, port: u8) -> Option<&PortInfo> {
        self.ports.iter().find(|p| p.port == port)
    }

    /// The IPv4 address of port `port` (its first RoCE v2 IPv4-mapped GID).
    pub fn port_ipv4(&self, port: u8) -> Option<Ipv4Addr> {
        self.port(port).and_then(ipv4_of_port)
    }
}

/// The IPv4 address of a port's first RoCE v2, IPv4-mapped GID.
pub(crate) fn ipv4_of_port(port: &PortInfo) -> Option<Ipv4Addr> {
    port.gids.iter().filter(|g| g.gid_type == GidType::RoceV2).find_map(|g| g.gid.to_ipv4())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctb_core::transport::{Gid, GidEntry, Mtu, PortState};

    fn port(port: u8, gids: Vec<GidEntry>) -> PortInfo {
        PortInfo { port, state: PortState::Active, active_mtu: Mtu::Mtu1024, max_mtu: Mtu::Mtu4096, gids }
    }

    #[test]
    fn ipv4_comes_from_the_first_roce_v2_ipv4_mapped_gid() {
        let v4 = |a: [u8; 4]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&a);
            Gid(g)
        };
        let link_local = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1]);
        let d = DeviceSummary {
            name: "rxe0".into(),
            device: DeviceInfo {
                name: "rxe0".into(),
                max_qp_wr: 0,
                max_sge: 0,
                max_cqe: 0,
                max_mr_size: 0,
                max_qp_rd_atom: 0,
                max_qp_init_rd_atom: 0,
            },
            ports: vec![port(
                1,
                vec![
                    GidEntry { index: 0, gid: link_local, gid_type: GidType::RoceV2 },
                    GidEntry { index: 1, gid: v4([10, 0, 0, 9]), gid_type: GidType::RoceV1 },
                    GidEntry { index: 2, gid: v4([10, 0, 0, 1]), gid_type: GidType::RoceV2 },
                ],
            )],
        };
        assert_eq!(d.ipv4(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(d.port_ipv4(1), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(d.port_ipv4(2), None);
        assert!(d.port(2).is_none());
    }
}
