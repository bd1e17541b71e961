//! The NVMe/RDMA codecs of `rctb_nvmeof::protocol` against a real
//! Linux session (testdata/captures/nvme-rdma.pcap: nvme-cli discovery and
//! connect over rxe, then I/O). Every command capsule, completion, connect
//! data and CM private data in it is decoded with our parsers and compared,
//! field by field, with what tshark's NVMe dissectors show. Without tshark
//! the comparison is skipped, except with `RCTB_REQUIRE_TOOLS` set
//! (`.ci/run` sets it), where it fails; the facts pinned in `known_frames`
//! hold either way.

use std::collections::BTreeMap;
use std::fs::File;
use std::process::Command as Process;

use pcap_file::pcap::PcapReader;
use rctb_nvmeof::protocol::*;
use rctb_wire::roce::{Opcode, RoceFrame};

const NVME: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap");

/// MAD attribute ids of CM REQ and REP, and where their private data sits
/// in the MAD (REQ: 92 bytes at 164, the first 36 the RDMA CM IP header).
const CM_REQ: u16 = 0x0010;
const CM_REP: u16 = 0x0013;
const REQ_PRIVATE: usize = 164 + 36;
const REP_PRIVATE: usize = 60;

#[derive(Debug, Default, PartialEq, Eq, Clone)]
struct Fields(BTreeMap<&'static str, String>);

impl Fields {
    fn set(&mut self, k: &'static str, v: impl ToString) {
        self.0.insert(k, v.to_string());
    }
}

fn frames() -> Vec<Vec<u8>> {
    let mut reader = PcapReader::new(File::open(NVME).expect("capture")).expect("pcap header");
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet() {
        out.push(p.expect("record").data.into_owned());
    }
    out
}

/// What our parsers say of every NVMe-bearing frame, keyed by frame number.
fn ours() -> BTreeMap<usize, Fields> {
    let mut out = BTreeMap::new();
    // Multi-packet SENDs (I/O queue Connects carry their data in-capsule).
    let mut partial: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for (i, bytes) in frames().iter().enumerate() {
        let Ok(f) = RoceFrame::decode(bytes) else { continue };
        let mut x = Fields::default();
        let p = f.payload;
        if matches!(f.bth.opcode, Opcode::SEND_FIRST | Opcode::SEND_MIDDLE) {
            partial.entry(f.bth.dest_qp).or_default().extend_from_slice(p);
            continue;
        }
        if f.bth.opcode == Opcode::SEND_LAST {
            let mut capsule = partial.remove(&f.bth.dest_qp).expect("SEND LAST after FIRST");
            capsule.extend_from_slice(p);
            let c = Command::decode(&capsule).expect("in-capsule command");
            let NvmeCommand::Connect { qid, sqsize, sgl: Sgl::InCapsule { offset, len }, .. } =
                NvmeCommand::from_command(&c, QueueKind::Admin).expect("connect")
            else {
                panic!("frame {}: a multi-packet capsule that is not an in-capsule Connect", i + 1)
            };
            let start = COMMAND_LEN + offset as usize;
            let d = ConnectData::decode(&capsule[start..start + len as usize]).expect("in-capsule connect data");
            x.set(
                "incapsule.connect",
                format!("qid={qid} sqsize={sqsize} cntlid={:#06x} subnqn={}", d.cntlid, d.subnqn),
            );
            out.insert(i + 1, x);
            continue;
        }
        if f.bth.dest_qp == 1 && p.len() >= 256 {
            let attr = u16::from_be_bytes([p[16], p[17]]);
            if attr == CM_REQ {
                let r = CmRequest::decode(&p[REQ_PRIVATE..]).expect("CM REQ private data");
                x.set("cm.private", hex(&p[REQ_PRIVATE..REQ_PRIVATE + 56]));
                x.set(
                    "cm.req",
                    format!("qid={} hrqsize={} hsqsize={} cntlid={}", r.qid, r.hrqsize, r.hsqsize, r.cntlid),
                );
            } else if attr == CM_REP {
                let a = CmAccept::decode(&p[REP_PRIVATE..]).expect("CM REP private data");
                x.set("cm.private", hex(&p[REP_PRIVATE..256]));
                x.set("cm.rep", format!("crqsize={}", a.crqsize));
            } else {
                continue;
            }
        } else if matches!(f.bth.opcode, Opcode::SEND_ONLY | Opcode::SEND_ONLY_INV) && p.len() >= COMMAND_LEN {
            let c = Command::decode(p).expect("command capsule");
            x.set("cid", format!("{:#06x}", c.cid));
            if c.opcode == OPC_FABRICS {
                x.set("opc", "7f");
                x.set("fctype", format!("{:#04x}", c.fctype()));
                match NvmeCommand::from_command(&c, QueueKind::Admin).expect("fabrics command") {
                    NvmeCommand::Connect { qid, sqsize, kato_ms, .. } => {
                        x.set("connect", format!("qid={qid} sqsize={sqsize} kato={kato_ms}"));
                    }
                    NvmeCommand::PropertyGet { offset, .. } | NvmeCommand::PropertySet { offset, .. } => {
                        x.set("prop.offset", format!("{offset:#010x}"));
                    }
                    other => panic!("frame {}: unexpected {other:?}", i + 1),
                }
            } else {
                x.set("opc", format!("{:#04x}", c.opcode));
                x.set("nsid", format!("{:#010x}", c.nsid));
            }
            if let Sgl::Keyed { addr, len, key, .. } = c.sgl
                && len > 0
            {
                x.set("sgl", format!("addr={addr:#018x} len={len} key={key:#010x}"));
            }
        } else if matches!(f.bth.opcode, Opcode::SEND_ONLY | Opcode::SEND_ONLY_INV) && p.len() == COMPLETION_LEN {
            let c = Completion::decode(p).expect("completion");
            x.set(
                "cqe",
                format!(
                    "cid={:#06x} sqhd={:#06x} sqid={:#06x} status={:#06x}",
                    c.cid, c.sq_head, c.sq_id, c.status_field
                ),
            );
        } else if f.bth.opcode == Opcode::READ_RESPONSE_ONLY && p.len() == CONNECT_DATA_LEN {
            let d = ConnectData::decode(p).expect("connect data");
            x.set("connect.data", format!("cntlid={:#06x} subnqn={} hostnqn={}", d.cntlid, d.subnqn, d.hostnqn));
        } else {
            continue;
        }
        out.insert(i + 1, x);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The same fields, as tshark's dissectors show them.
fn tshark() -> Option<BTreeMap<usize, Fields>> {
    let which = Process::new("which").arg("tshark").output().map(|o| o.status.success()).unwrap_or(false);
    if !which {
        assert!(
            std::env::var_os("RCTB_REQUIRE_TOOLS").is_none(),
            "RCTB_REQUIRE_TOOLS is set but tshark is not installed"
        );
        eprintln!("SKIP: tshark is not installed");
        return None;
    }
    let cols = [
        "frame.number",
        "infiniband.cm.req.ip_cm.private",
        "infiniband.cm.rep.private",
        "nvme.fabrics.cmd.opc",
        "nvme.fabrics.cmd.cid",
        "nvme.fabrics.cmd.fctype",
        "nvme.fabrics.cmd.connect.qid",
        "nvme.fabrics.cmd.connect.sqsize",
        "nvme.fabrics.cmd.connect.kato",
        "nvme.fabrics.cmd.prop_get_set.offset",
        "nvme.cmd.opc",
        "nvme.cmd.cid",
        "nvme.cmd.nsid",
        "nvme.cmd.sgl1.addr",
        "nvme.cmd.sgl1.len",
        "nvme.cmd.sgl1.key",
        "nvme.cqe.cid",
        "nvme.cqe.sqhd",
        "nvme.cqe.sqid",
        "nvme.cqe.status",
        "nvme.fabrics.cmd.connect.data.cntrlid",
        "nvme.fabrics.cmd.connect.data.subnqn",
        "nvme.fabrics.cmd.connect.data.hostnqn",
    ];
    let mut args = vec!["-r", NVME, "-T", "fields", "-E", "occurrence=f"];
    for c in &cols {
        args.extend(["-e", c]);
    }
    let out = Process::new("tshark").args(&args).output().expect("run tshark");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Vec<&str> = line.split('\t').collect();
        let get = |name: &str| v[cols.iter().position(|c| *c == name).expect("column")].to_string();
        let mut x = Fields::default();
        let num: usize = get("frame.number").parse().expect("frame number");
        let (req, rep) = (get("infiniband.cm.req.ip_cm.private"), get("infiniband.cm.rep.private"));
        if !req.is_empty() {
            x.set("cm.private", &req);
        } else if !rep.is_empty() {
            x.set("cm.private", &rep);
        }
        if !get("nvme.fabrics.cmd.opc").is_empty() {
            x.set("opc", get("nvme.fabrics.cmd.opc"));
            x.set("cid", get("nvme.fabrics.cmd.cid"));
            x.set("fctype", get("nvme.fabrics.cmd.fctype"));
            if !get("nvme.fabrics.cmd.connect.qid").is_empty() {
                let kato = get("nvme.fabrics.cmd.connect.kato");
                x.set(
                    "connect",
                    format!(
                        "qid={} sqsize={} kato={kato}",
                        get("nvme.fabrics.cmd.connect.qid"),
                        get("nvme.fabrics.cmd.connect.sqsize")
                    ),
                );
            }
            if !get("nvme.fabrics.cmd.prop_get_set.offset").is_empty() {
                x.set("prop.offset", get("nvme.fabrics.cmd.prop_get_set.offset"));
            }
        } else if !get("nvme.cmd.opc").is_empty() {
            x.set("opc", get("nvme.cmd.opc"));
            x.set("cid", get("nvme.cmd.cid"));
            x.set("nsid", get("nvme.cmd.nsid"));
        }
        if !get("nvme.cmd.sgl1.len").is_empty() && get("nvme.cmd.sgl1.len") != "0" {
            x.set(
                "sgl",
                format!(
                    "addr={} len={} key={}",
                    get("nvme.cmd.sgl1.addr"),
                    get("nvme.cmd.sgl1.len"),
                    get("nvme.cmd.sgl1.key")
                ),
            );
        }
        if !get("nvme.cqe.status").is_empty() {
            x.set(
                "cqe",
                format!(
                    "cid={} sqhd={} sqid={} status={}",
                    get("nvme.cqe.cid"),
                    get("nvme.cqe.sqhd"),
                    get("nvme.cqe.sqid"),
                    get("nvme.cqe.status")
                ),
            );
        }
        if !get("nvme.fabrics.cmd.connect.data.subnqn").is_empty() {
            x.set(
                "connect.data",
                format!(
                    "cntlid={} subnqn={} hostnqn={}",
                    get("nvme.fabrics.cmd.connect.data.cntrlid"),
                    get("nvme.fabrics.cmd.connect.data.subnqn"),
                    get("nvme.fabrics.cmd.connect.data.hostnqn")
                ),
            );
        }
        if !x.0.is_empty() {
            map.insert(num, x);
        }
    }
    Some(map)
}

/// Drops the fields tshark has no column for (our decoded CM values), so the
/// two maps compare on what both show.
fn comparable(mut m: BTreeMap<usize, Fields>) -> BTreeMap<usize, Fields> {
    for f in m.values_mut() {
        f.0.remove("cm.req");
        f.0.remove("cm.rep");
    }
    m
}

#[test]
fn every_capsule_completion_and_cm_record_matches_tshark() {
    let Some(theirs) = tshark() else { return };
    let ours = comparable(ours());
    assert!(ours.len() > 100, "only {} NVMe frames decoded", ours.len());
    let mut mismatches = Vec::new();
    for (n, t) in &theirs {
        match ours.get(n) {
            Some(o) if o == t => {}
            o => mismatches.push(format!("frame {n}: tshark {t:?}\n          ours   {o:?}")),
        }
    }
    // tshark does not reassemble multi-packet SENDs, so it misses the I/O
    // queues' in-capsule Connects and cannot place their completions.
    let unmatched_io_connect = |n: &usize| ours[n].0.contains_key("incapsule.connect") || [174, 179].contains(n);
    for n in ours.keys().filter(|n| !theirs.contains_key(n) && !unmatched_io_connect(n)) {
        mismatches.push(format!("frame {n}: ours only {:?}", ours[n]));
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}

/// Facts read off tshark once, so the decoding is pinned without it.
#[test]
fn known_frames() {
    let o = ours();
    let f = |n: usize, k: &str| o[&n].0.get(k).cloned().unwrap_or_default();
    assert_eq!(f(1, "cm.req"), "qid=0 hrqsize=32 hsqsize=31 cntlid=0");
    assert_eq!(f(2, "cm.rep"), "crqsize=32");
    assert_eq!(f(165, "cm.req"), "qid=1 hrqsize=128 hsqsize=127 cntlid=0");
    assert_eq!(f(166, "cm.rep"), "crqsize=128");
    assert_eq!(f(4, "connect"), "qid=0 sqsize=31 kato=0");
    assert_eq!(f(4, "sgl"), "addr=0xff2c11454223b000 len=1024 key=0x00000bbe");
    assert_eq!(
        f(7, "connect.data"),
        format!(
            "cntlid=0xffff subnqn={DISCOVERY_NQN} hostnqn=nqn.2014-08.org.nvmexpress:uuid:6c1d4b4e-2d9c-4c55-9f4e-000000000001"
        )
    );
    assert_eq!(f(10, "prop.offset"), "0x00000000");
    assert_eq!(f(14, "prop.offset"), "0x00000014");
    assert_eq!(f(38, "opc"), "0x06");
    assert_eq!(f(62, "opc"), "0x02");
    assert_eq!(f(172, "incapsule.connect"), "qid=1 sqsize=127 cntlid=0x0001 subnqn=nqn.2024-01.io.example:rxe-spike");
    assert_eq!(f(174, "cqe"), "cid=0x0000 sqhd=0x0001 sqid=0x0001 status=0x0000");
    assert!(f(8, "cqe").starts_with("cid=0x0000 "), "{}", f(8, "cqe"));
}

/// The Identify data the Linux target sent (RDMA WRITEs into the buffer of
/// each Identify command), decoded with our parsers: one snapshot per command.
#[test]
fn identify_data_from_the_linux_target() {
    let mut identify_by_key: BTreeMap<u32, (usize, u8, u32)> = BTreeMap::new();
    let mut writes: BTreeMap<u32, (u32, Vec<u8>)> = BTreeMap::new();
    let mut decoded = Vec::new();
    for (i, bytes) in frames().iter().enumerate() {
        let Ok(f) = RoceFrame::decode(bytes) else { continue };
        let op = f.bth.opcode;
        if matches!(op, Opcode::SEND_ONLY) && f.payload.len() == COMMAND_LEN {
            let c = Command::decode(f.payload).expect("command");
            match NvmeCommand::from_command(&c, QueueKind::Admin) {
                Ok(NvmeCommand::Identify { cns, nsid, sgl: Sgl::Keyed { key, .. }, .. }) => {
                    identify_by_key.insert(key, (i + 1, cns, nsid));
                }
                // Log page 0x70 (discovery): marked with CNS 0xFF.
                Ok(NvmeCommand::GetLogPage { lid: LID_DISCOVERY, sgl: Sgl::Keyed { key, .. }, .. }) => {
                    identify_by_key.insert(key, (i + 1, 0xFF, 0));
                }
                _ => {}
            }
            continue;
        }
        if matches!(op, Opcode::WRITE_FIRST | Opcode::WRITE_ONLY) {
            let reth = f.ext.reth.expect("RETH on the first WRITE packet");
            writes.insert(f.bth.dest_qp, (reth.rkey, Vec::new()));
        }
        if matches!(op, Opcode::WRITE_FIRST | Opcode::WRITE_MIDDLE | Opcode::WRITE_LAST | Opcode::WRITE_ONLY) {
            let Some((_, data)) = writes.get_mut(&f.bth.dest_qp) else { continue };
            data.extend_from_slice(f.payload);
        }
        if matches!(op, Opcode::WRITE_LAST | Opcode::WRITE_ONLY) {
            let (rkey, data) = writes.remove(&f.bth.dest_qp).expect("write in progress");
            let Some((cmd_frame, cns, nsid)) = identify_by_key.remove(&rkey) else { continue };
            let text = match cns {
                CNS_CONTROLLER => format!("{:#?}", ControllerInfo::decode(&data).expect("identify controller")),
                CNS_NAMESPACE => {
                    let ns = NamespaceInfo::decode(nsid, &data).expect("identify namespace");
                    format!("{ns:#?}\nlba_size: {}\nseparate_metadata: {}", ns.lba_size(), ns.separate_metadata())
                }
                0xFF if data.len() >= 1024 => match DiscoveryLog::decode(&data) {
                    Ok(log) => format!("{log:#?}"),
                    // The host reads the header first, then the whole page.
                    Err(_) => format!("{:#?}", DiscoveryLogHeader::decode(&data).expect("discovery log header")),
                },
                _ => continue,
            };
            let what =
                if cns == 0xFF { "discovery log page".to_string() } else { format!("identify cns={cns} nsid={nsid}") };
            decoded.push(format!("{what} (command in frame {cmd_frame}, data ending in frame {})\n{text}", i + 1));
        }
    }
    assert!(decoded.len() >= 3, "identify data found: {}", decoded.len());
    insta::assert_snapshot!(decoded.join("\n\n"));
}
