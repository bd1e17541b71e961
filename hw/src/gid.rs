//! GID table facts from sysfs, and GID index detection (docs/protocols.md §1.8).
//!
//! Pure file reading and parsing, no verbs calls and no `unsafe`, so every
//! rule is tested against fixture trees. The verbs side (`ibv_query_gid`)
//! lives in `device.rs`; this module only supplies the GID *type*, which
//! verbs reports through sysfs (`ports/<p>/gid_attrs/types/<i>`).

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use rctb_core::transport::{Gid, GidType};
use thiserror::Error;

/// Why [`detect_gid_index`] found no usable GID.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GidDetectError {
    /// The port's `gid_attrs/types` directory could not be listed.
    #[error("cannot list {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why listing it failed.
        #[source]
        source: io::Error,
    },
    /// No entry is a RoCE v2, IPv4-mapped GID on the FPGA's /24.
    #[error("{device} port {port}: no RoCE v2 IPv4-mapped GID on the /24 of {fpga_ip} (seen: {})", SeenList(seen))]
    NoMatch {
        /// The RDMA device searched.
        device: String,
        /// Its port.
        port: u8,
        /// The FPGA's address, whose /24 a GID had to be on.
        fpga_ip: Ipv4Addr,
        /// Every entry looked at, with what it was.
        seen: Vec<SeenGid>,
    },
}

/// One GID table entry as sysfs showed it during detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenGid {
    /// The entry's index in the port's GID table.
    pub index: u32,
    /// The `types/<i>` text (trimmed), or why it could not be read.
    pub gid_type: String,
    /// The `gids/<i>` text (trimmed), or why it could not be read.
    pub gid: String,
}

impl fmt::Display for SeenGid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {} {}", self.index, self.gid_type, self.gid)?;
        if let Some(ip) = parse_gid(&self.gid).and_then(|g| g.to_ipv4()) {
            write!(f, " ({ip})")?;
        }
        Ok(())
    }
}

struct SeenList<'a>(&'a [SeenGid]);

impl fmt::Display for SeenList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no GID entries");
        }
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

/// Parses the sysfs / rogue text form of a GID: eight groups of four hex
/// digits separated by colons (`0000:0000:0000:0000:0000:ffff:0a0a:0001`).
pub fn parse_gid(text: &str) -> Option<Gid> {
    let mut gid = [0u8; 16];
    let mut groups = text.trim().split(':');
    for pair in gid.chunks_mut(2) {
        let group = groups.next()?;
        if group.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(group, 16).ok()?;
        pair.copy_from_slice(&v.to_be_bytes());
    }
    groups.next().is_none().then_some(Gid(gid))
}

/// Parses a `gid_attrs/types/<i>` value: exactly "RoCE v2" or "IB/RoCE v1".
pub fn parse_gid_type(text: &str) -> Option<GidType> {
    match text.trim() {
        "RoCE v2" => Some(GidType::RoceV2),
        "IB/RoCE v1" => Some(GidType::RoceV1),
        _ => None,
    }
}

/// `<root>/class/infiniband/<device>/ports/<port>`.
pub fn port_dir(sysfs_root: &Path, device: &str, port: u8) -> PathBuf {
    sysfs_root.join("class/infiniband").join(device).join("ports").join(port.to_string())
}

/// The type of GID `index` from sysfs, `None` when unreadable or unknown
/// (the kernel answers EINVAL for unused table slots).
pub fn read_gid_type(sysfs_root: &Path, device: &str, port: u8, index: u32) -> Option<GidType> {
    let path = port_dir(sysfs_root, device, port).join("gid_attrs/types").join(index.to_string());
    std::fs::read_to_string(path).ok().as_deref().and_then(parse_gid_type)
}

/// The GID indexes listed under `gid_attrs/types`, in numeric order.
fn type_indexes(types_dir: &Path) -> Result<Vec<u32>, GidDetectError> {
    let io_err = |source| GidDetectError::Io { path: types_dir.to_path_buf(), source };
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(types_dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        // Anything that is not a decimal index is not a table entry.
        if let Some(i) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) {
            indexes.push(i);
        }
    }
    // Numeric, not lexical: "10" must come after "2".
    indexes.sort_unstable();
    Ok(indexes)
}

fn read_trimmed(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).map_err(|e| format!("<unreadable: {e}>"))
}

/// Finds the GID index to use towards an FPGA at `fpga_ip` (docs/protocols.md §1.8):
/// scans `<sysfs_root>/class/infiniband/<device>/ports/<port>/gid_attrs/types/<i>`
/// in numeric order and returns the first index whose type is exactly
/// "RoCE v2" and whose GID (`gids/<i>`) is IPv4-mapped on the same /24 as
/// `fpga_ip`. mlx5 GID indexes move across driver reloads, which is why this
/// exists. Indexes are `u32`: tables longer than 256 entries are not truncated.
///
/// `sysfs_root` is `/sys` on a live system and a fixture tree in tests.
pub fn detect_gid_index(sysfs_root: &Path, device: &str, port: u8, fpga_ip: Ipv4Addr) -> Result<u32, GidDetectError> {
    let dir = port_dir(sysfs_root, device, port);
    let types_dir = dir.join("gid_attrs/types");
    let mut seen = Vec::new();
    for index in type_indexes(&types_dir)? {
        let gid_type = read_trimmed(&types_dir.join(index.to_string()));
        let gid_text = read_trimmed(&dir.join("gids").join(index.to_string()));
        let matches = gid_type.as_deref() == Ok("RoCE v2")
            && gid_text
                .as_deref()
                .ok()
                .and_then(parse_gid)
                .and_then(|g| g.to_ipv4())
                .is_some_and(|ip| same_slash24(ip, fpga_ip));
        if matches {
            return Ok(index);
        }
        let gid = gid_text.unwrap_or_else(|e| e);
        // Zero GIDs are unused slots: not worth listing.
        if parse_gid(&gid).is_some_and(|g| g.is_zero()) {
            continue;
        }
        seen.push(SeenGid { index, gid_type: gid_type.unwrap_or_else(|e| e), gid });
    }
    Err(GidDetectError::NoMatch { device: device.to_owned(), port, fpga_ip, seen })
}

fn same_slash24(a: Ipv4Addr, b: Ipv4Addr) -> bool {
    a.octets()[..3] == b.octets()[..3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    const V2: &str = "RoCE v2";
    const V1: &str = "IB/RoCE v1";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    const LINK_LOCAL: &str = "fe80:0000:0000:0000:5054:00ff:fe12:3456";

    fn mapped(ip: [u8; 4]) -> String {
        Gid::from_ipv4(Ipv4Addr::from(ip)).to_string()
    }

    /// A sysfs fixture for device `mlx5_0` port 1 with `(index, type, gid)`
    /// entries; `None` type = an unreadable (absent) types file.
    fn fixture(entries: &[(u32, Option<&str>, &str)]) -> TempDir {
        let root = TempDir::new("gid");
        let port = port_dir(root.path(), "mlx5_0", 1);
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::create_dir_all(port.join("gids")).unwrap();
        for (i, ty, gid) in entries {
            if let Some(ty) = ty {
                std::fs::write(port.join("gid_attrs/types").join(i.to_string()), format!("{ty}\n")).unwrap();
            }
            std::fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
        }
        root
    }

    fn detect(root: &TempDir, ip: [u8; 4]) -> Result<u32, GidDetectError> {
        detect_gid_index(root.path(), "mlx5_0", 1, Ipv4Addr::from(ip))
    }

    #[test]
    fn parses_gids_and_types() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a0a:0001\n").unwrap();
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(10, 10, 0, 1)));
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:0a0a:0001");
        assert!(parse_gid(ZERO).unwrap().is_zero());
        assert!(parse_gid(LINK_LOCAL).unwrap().to_ipv4().is_none());
        for bad in ["", "fe80::1", "0000:0000:0000:0000:0000:ffff:0a0a", "0:0:0:0:0:0:0:0", &format!("{ZERO}:0000")] {
            assert_eq!(parse_gid(bad), None, "{bad:?}");
        }
        assert_eq!(parse_gid_type("RoCE v2\n"), Some(GidType::RoceV2));
        assert_eq!(parse_gid_type("IB/RoCE v1\n"), Some(GidType::RoceV1));
        assert_eq!(parse_gid_type("roce v2"), None);
    }

    #[test]
    fn rxe_layout_picks_index_1() {
        // rxe: index 0 the link-local GID, index 1 the IPv4-mapped one, both v2.
        let root = fixture(&[(0, Some(V2), LINK_LOCAL), (1, Some(V2), &mapped([10, 10, 0, 2]))]);
        assert_eq!(detect(&root, [10, 10, 0, 1]).unwrap(), 1);
    }

    #[test]
    fn skips_roce_v1_and_other_subnets() {
        let root = fixture(&[
            (0, Some(V1), LINK_LOCAL),
            (1, Some(V2), LINK_LOCAL),
            (2, Some(V1), &mapped([192, 168, 1, 10])),
            (3, Some(V2), &mapped([172, 16, 0, 5])),
            (4, Some(V2), &mapped([192, 168, 2, 10])),
            (5, Some(V2), &mapped([192, 168, 1, 10])),
        ]);
        assert_eq!(detect(&root, [192, 168, 1, 99]).unwrap(), 5);
        assert_eq!(detect(&root, [172, 16, 0, 1]).unwrap(), 3);
        assert_eq!(detect(&root, [192, 168, 2, 1]).unwrap(), 4);
    }

    #[test]
    fn numeric_not_lexical_order() {
        // Lexically "10" < "2"; numerically 2 comes first.
        let root = fixture(&[(10, Some(V2), &mapped([10, 0, 0, 10])), (2, Some(V2), &mapped([10, 0, 0, 2]))]);
        assert_eq!(detect(&root, [10, 0, 0, 1]).unwrap(), 2);
    }

    #[test]
    fn index_above_255_is_not_truncated() {
        let root = fixture(&[(0, Some(V2), LINK_LOCAL), (300, Some(V2), &mapped([10, 1, 2, 3]))]);
        assert_eq!(detect(&root, [10, 1, 2, 200]).unwrap(), 300);
    }

    #[test]
    fn zero_gids_and_unreadable_types_are_skipped() {
        let root = fixture(&[
            (0, Some(V2), ZERO),
            (1, None, &mapped([10, 10, 0, 2])),
            (2, Some("garbage"), &mapped([10, 10, 0, 2])),
            (3, Some(V2), &mapped([10, 10, 0, 2])),
        ]);
        // Index 1 has no types file, so it is not even listed.
        assert_eq!(detect(&root, [10, 10, 0, 1]).unwrap(), 3);
    }

    #[test]
    fn no_match_lists_what_was_seen() {
        let root = fixture(&[
            (0, Some(V2), LINK_LOCAL),
            (1, Some(V1), &mapped([10, 10, 0, 2])),
            (2, Some(V2), ZERO),
            (3, Some(V2), &mapped([10, 10, 1, 2])),
        ]);
        let err = detect(&root, [10, 10, 0, 1]).unwrap_err();
        let GidDetectError::NoMatch { seen, .. } = &err else { panic!("{err:?}") };
        assert_eq!(seen.iter().map(|s| s.index).collect::<Vec<_>>(), vec![0, 1, 3]);
        assert_eq!(seen[1].gid_type, V1);
        let msg = err.to_string();
        assert!(msg.starts_with("mlx5_0 port 1: no RoCE v2 IPv4-mapped GID on the /24 of 10.10.0.1"), "{msg}");
        assert!(msg.contains("[1] IB/RoCE v1 0000:0000:0000:0000:0000:ffff:0a0a:0002 (10.10.0.2)"), "{msg}");
        assert!(msg.contains("[3] RoCE v2 0000:0000:0000:0000:0000:ffff:0a0a:0102 (10.10.1.2)"), "{msg}");
    }

    #[test]
    fn empty_table_and_missing_device() {
        let root = fixture(&[]);
        let err = detect(&root, [10, 0, 0, 1]).unwrap_err();
        assert!(err.to_string().ends_with("(seen: no GID entries)"), "{err}");
        let err = detect_gid_index(root.path(), "nosuch", 1, Ipv4Addr::new(10, 0, 0, 1)).unwrap_err();
        let GidDetectError::Io { path, .. } = &err else { panic!("{err:?}") };
        assert!(path.ends_with("class/infiniband/nosuch/ports/1/gid_attrs/types"), "{}", path.display());
    }

    #[test]
    fn reads_gid_type_per_index() {
        let root = fixture(&[(0, Some(V1), LINK_LOCAL), (1, Some(V2), &mapped([10, 0, 0, 1]))]);
        assert_eq!(read_gid_type(root.path(), "mlx5_0", 1, 0), Some(GidType::RoceV1));
        assert_eq!(read_gid_type(root.path(), "mlx5_0", 1, 1), Some(GidType::RoceV2));
        assert_eq!(read_gid_type(root.path(), "mlx5_0", 1, 7), None);
    }
}
