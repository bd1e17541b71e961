//! `rctb decode` against tshark, the outside judge, on both shared captures
//! (runs when tshark is installed; with RCTB_REQUIRE_TOOLS set its absence is a failure), a
//! committed snapshot that always runs, and the frames it must flag.

use std::process::Command;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use rctb_scenario::decode::{self, Frame};

const CAPTURES: [&str; 2] = ["rxe-send-write.pcap", "nvme-rdma.pcap"];

fn capture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/../testdata/captures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("capture present")
}

fn number(field: &str) -> Option<u64> {
    let f = field.trim();
    if f.is_empty() {
        None
    } else if let Some(hex) = f.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else {
        f.parse().ok()
    }
}

fn flag(field: &str) -> Option<bool> {
    match field.trim() {
        "" => None,
        "1" | "True" | "true" => Some(true),
        _ => Some(false),
    }
}

#[test]
fn every_rocev2_frame_agrees_with_tshark() {
    let have = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("RCTB_REQUIRE_TOOLS").is_none(),
            "RCTB_REQUIRE_TOOLS is set but tshark is not installed"
        );
        eprintln!("SKIP every_rocev2_frame_agrees_with_tshark: tshark is not installed");
        return;
    }
    for name in CAPTURES {
        let path = format!("{}/../testdata/captures/{name}", env!("CARGO_MANIFEST_DIR"));
        let fields = [
            "frame.number",
            "infiniband.bth.opcode",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
            "infiniband.bth.a",
            "infiniband.bth.se",
            "infiniband.bth.padcnt",
            "infiniband.reth.va",
            "infiniband.reth.r_key",
            "infiniband.reth.dmalen",
            "infiniband.aeth.syndrome",
            "infiniband.aeth.msn",
            "infiniband.immdt",
        ];
        let mut cmd = Command::new("tshark");
        cmd.args(["-r", &path, "-Y", "udp.dstport == 4791", "-T", "fields", "-E", "occurrence=f"]);
        for f in fields {
            cmd.args(["-e", f]);
        }
        let out = cmd.output().expect("tshark runs");
        assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
        let ours = decode::pcap(&capture(name)).expect("decodes");
        let mut compared = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let t: Vec<&str> = line.split('\t').collect();
            let n = number(t[0]).expect("frame number") as usize;
            let f: &Frame = &ours[n - 1];
            let at = format!("{name} frame {n}");
            assert_eq!(f.kind, "rocev2", "{at}: {:?}", f.note);
            assert_eq!(f.opcode.map(u64::from), number(t[1]), "{at}: opcode");
            assert_eq!(f.dest_qp.map(u64::from), number(t[2]), "{at}: dest_qp");
            assert_eq!(f.psn.map(u64::from), number(t[3]), "{at}: psn");
            assert_eq!(f.ack_req, flag(t[4]), "{at}: ack_req");
            assert_eq!(f.se, flag(t[5]), "{at}: se");
            assert_eq!(f.pad.map(u64::from), number(t[6]), "{at}: pad");
            assert_eq!(f.reth_va, number(t[7]), "{at}: reth_va");
            assert_eq!(f.reth_rkey.map(u64::from), number(t[8]), "{at}: reth_rkey");
            assert_eq!(f.reth_len.map(u64::from), number(t[9]), "{at}: reth_len");
            assert_eq!(f.aeth_syndrome.map(u64::from), number(t[10]), "{at}: aeth_syndrome");
            assert_eq!(f.aeth_msn.map(u64::from), number(t[11]), "{at}: aeth_msn");
            // tshark prints ImmDt as its bytes in wire order.
            let imm = t[12].trim().replace(':', "");
            assert_eq!(f.imm.map(|i| format!("{i:08x}")), (!imm.is_empty()).then_some(imm), "{at}: imm");
            assert_eq!(f.icrc_ok, Some(true), "{at}: the captures carry good ICRCs");
            compared += 1;
        }
        let rocev2 = ours.iter().filter(|f| f.kind == "rocev2").count();
        assert_eq!(compared, rocev2, "{name}: tshark and rctb agree on which frames are RoCEv2");
    }
}

/// Every CM MAD of the NVMe/RDMA capture: tshark's CM fields, per message
/// type (tshark names each message's fields apart), against ours.
#[test]
fn every_cm_mad_agrees_with_tshark() {
    let have = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("RCTB_REQUIRE_TOOLS").is_none(),
            "RCTB_REQUIRE_TOOLS is set but tshark is not installed"
        );
        eprintln!("SKIP every_cm_mad_agrees_with_tshark: tshark is not installed");
        return;
    }
    let path = format!("{}/../testdata/captures/nvme-rdma.pcap", env!("CARGO_MANIFEST_DIR"));
    // (message, local comm id, remote comm id, qpn, psn, port) per frame.
    let fields = [
        "frame.number",
        "infiniband.cm.req",
        "infiniband.cm.rep",
        "infiniband.cm.rtu.localcommid",
        "infiniband.cm.dreq.localcommid",
        "infiniband.cm.drsp.localcommid",
        "infiniband.cm.rep.remotecommid",
        "infiniband.cm.rtu.remotecommid",
        "infiniband.cm.dreq.remotecommid",
        "infiniband.cm.drsp.remotecommid",
        "infiniband.cm.req.localqpn",
        "infiniband.cm.rep.localqpn",
        "infiniband.cm.req.startpsn",
        "infiniband.cm.rep.startpsn",
        "infiniband.cm.req.serviceid.dport",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args(["-r", &path, "-Y", "infiniband.mad", "-T", "fields", "-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let ours = decode::pcap(&capture("nvme-rdma.pcap")).expect("decodes");
    let first = |t: &[&str], range: std::ops::Range<usize>| range.filter_map(|i| number(t[i])).next();
    let mut compared = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t: Vec<&str> = line.split('\t').collect();
        let n = number(t[0]).expect("frame number") as usize;
        let cm = ours[n - 1].cm.as_ref().unwrap_or_else(|| panic!("frame {n}: tshark sees a CM MAD, we do not"));
        let message = ["REQ", "REP", "RTU", "DREQ", "DREP"][(1..6).find(|&i| !t[i].is_empty()).expect("a message") - 1];
        assert_eq!(cm.cm_message, message, "frame {n}");
        assert_eq!(Some(u64::from(cm.cm_local_comm_id)), first(&t, 1..6), "frame {n}: local comm id");
        assert_eq!(cm.cm_remote_comm_id.map(u64::from), first(&t, 6..10), "frame {n}: remote comm id");
        if message != "DREQ" {
            assert_eq!(cm.cm_qpn.map(u64::from), first(&t, 10..12), "frame {n}: qpn");
        }
        assert_eq!(cm.cm_psn.map(u64::from), first(&t, 12..14), "frame {n}: starting psn");
        assert_eq!(cm.cm_port.map(u64::from), number(t[14]), "frame {n}: service id port");
        compared += 1;
    }
    let mads = ours.iter().filter(|f| f.cm.is_some()).count();
    assert_eq!((compared, mads), (14, 14), "tshark and rctb agree on which frames are CM MADs");
}

/// Every NVMe/RDMA command capsule and completion of the NVMe capture (and
/// the accept private data): tshark's NVMe fields against ours.
#[test]
fn every_nvme_capsule_and_completion_agrees_with_tshark() {
    let have = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("RCTB_REQUIRE_TOOLS").is_none(),
            "RCTB_REQUIRE_TOOLS is set but tshark is not installed"
        );
        eprintln!("SKIP every_nvme_capsule_and_completion_agrees_with_tshark: tshark is not installed");
        return;
    }
    let path = format!("{}/../testdata/captures/nvme-rdma.pcap", env!("CARGO_MANIFEST_DIR"));
    let fields = [
        "frame.number",
        "nvme.cmd.opc",
        "nvme.fabrics.cmd.opc",
        "nvme.cmd.cid",
        "nvme.fabrics.cmd.cid",
        "nvme.fabrics.cmd.fctype",
        "nvme.cmd.nsid",
        "nvme.cmd.slba",
        "nvme.cmd.nlb",
        "nvme.cmd.sgl.type",
        "nvme.cmd.sgl.subtype",
        "nvme.cmd.sgl1.addr",
        "nvme.cmd.sgl1.len",
        "nvme.cmd.sgl1.key",
        "nvme.cqe.cid",
        "nvme.cqe.sqhd",
        "nvme.cqe.sqid",
        "nvme.cqe.status.sc",
        "nvme.cqe.status.sct",
        "nvme-rdma.cm.rsp.crqsize",
    ];
    let mut cmd = Command::new("tshark");
    let filter = "nvme.cmd.opc || nvme.fabrics.cmd.opc || nvme.cqe.cid || nvme-rdma.cm.rsp.crqsize";
    cmd.args(["-r", &path, "-Y", filter, "-T", "fields", "-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let ours = decode::pcap(&capture("nvme-rdma.pcap")).expect("decodes");
    let (mut capsules, mut completions, mut accepts, mut sgls) = (0, 0, 0, 0);
    let mut seen = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t: Vec<&str> = line.split('\t').collect();
        let n = number(t[0]).expect("frame number") as usize;
        let at = format!("frame {n}");
        if t[1..].iter().all(|f| f.trim().is_empty()) {
            continue; // data a command moved (RDMA READ/WRITE), not a capsule
        }
        let Some(nvme) = ours[n - 1].nvme.as_ref() else { panic!("{at}: tshark decodes NVMe, we do not") };
        seen.insert(n);
        assert_eq!(nvme.nvme_error, None, "{at}");
        if let Some(crqsize) = number(t[19]) {
            assert_eq!(nvme.nvme_pd_crqsize.map(u64::from), Some(crqsize), "{at}: crqsize");
            accepts += 1;
            continue;
        }
        if let Some(cid) = number(t[14]) {
            assert_eq!(nvme.cqe_cid.map(u64::from), Some(cid), "{at}: cqe cid");
            assert_eq!(nvme.cqe_sqhd.map(u64::from), number(t[15]), "{at}: sqhd");
            assert_eq!(nvme.cqe_sqid.map(u64::from), number(t[16]), "{at}: sqid");
            assert_eq!(nvme.cqe_sc.map(u64::from), number(t[17]), "{at}: sc");
            assert_eq!(nvme.cqe_sct.map(u64::from), number(t[18]), "{at}: sct");
            completions += 1;
            continue;
        }
        // tshark prints the Fabrics opcode as bare hex ("7f").
        let fabrics_opc = u64::from_str_radix(t[2].trim(), 16).ok();
        assert_eq!(nvme.nvme_opcode.map(u64::from), number(t[1]).or(fabrics_opc), "{at}: opcode");
        assert_eq!(nvme.nvme_cid.map(u64::from), number(t[3]).or(number(t[4])), "{at}: cid");
        assert_eq!(nvme.nvme_fctype.map(u64::from), number(t[5]), "{at}: fctype");
        assert_eq!(nvme.nvme_nsid.map(u64::from), number(t[6]), "{at}: nsid");
        assert_eq!(nvme.nvme_slba, number(t[7]), "{at}: slba");
        // tshark shows the block count; the wire (and we) carry it 0's based.
        assert_eq!(nvme.nvme_nlb.map(|n| u64::from(n) + 1), number(t[8]), "{at}: nlb");
        // tshark leaves out the (zero) SGL of Property Get/Set.
        if number(t[9]).is_some() {
            assert_eq!(nvme.sgl_type.map(u64::from), number(t[9]), "{at}: sgl type");
            assert_eq!(nvme.sgl_subtype.map(u64::from), number(t[10]), "{at}: sgl subtype");
            assert_eq!(nvme.sgl_addr, number(t[11]), "{at}: sgl addr");
            assert_eq!(nvme.sgl_len.map(u64::from), number(t[12]), "{at}: sgl len");
            assert_eq!(nvme.sgl_key.map(u64::from), number(t[13]), "{at}: sgl key");
            sgls += 1;
        }
        capsules += 1;
    }
    // tshark does not reassemble a capsule that spans two SENDs (the I/O
    // queues' Connect with in-capsule data: SEND First + SEND Last), so it
    // also misses those commands' completions. Those are the only frames we
    // decode and it does not.
    let only_ours: Vec<&Frame> = ours
        .iter()
        .filter(|f| f.nvme.as_ref().is_some_and(|n| n.nvme_opcode.is_some() || n.cqe_cid.is_some()))
        .filter(|f| !seen.contains(&(f.frame as usize)))
        .collect();
    let split: Vec<(Option<u16>, Option<u16>)> = only_ours
        .iter()
        .filter(|f| f.opcode_name == Some("RC Send First"))
        .filter_map(|f| f.nvme.as_ref().map(|n| (n.nvme_qid, n.nvme_cid)))
        .collect();
    for f in &only_ours {
        let n = f.nvme.as_ref().expect("filtered on nvme");
        let answers_split = n.cqe_cid.is_some() && split.contains(&(n.nvme_qid, n.cqe_cid));
        assert!(f.opcode_name == Some("RC Send First") || answers_split, "frame {}: {}", f.frame, f.line());
    }
    assert_eq!(only_ours.len(), 2 * split.len(), "each split capsule and its completion");
    assert!(
        capsules >= 50 && completions >= 50 && sgls >= 30 && accepts == 4,
        "{capsules} {completions} {sgls} {accepts}"
    );
}

/// The NVMe capture's connection set-up and first commands, decoded.
#[test]
fn decoded_nvme_capture_snapshot() {
    let frames = decode::pcap(&capture("nvme-rdma.pcap")).unwrap();
    let text: Vec<String> = frames.iter().take(60).map(Frame::line).collect();
    insta::assert_snapshot!(text.join("\n"));
    let json: Vec<String> = frames
        .iter()
        .filter(|f| f.cm.is_some() || f.nvme.is_some())
        .take(40)
        .map(|f| serde_json::to_string(f).unwrap())
        .collect();
    insta::assert_snapshot!(json.join("\n"));
}

#[test]
fn decoded_rxe_capture_snapshot() {
    let frames = decode::pcap(&capture("rxe-send-write.pcap")).unwrap();
    let text: Vec<String> = frames.iter().map(Frame::line).collect();
    insta::assert_snapshot!(text.join("\n"));
    let json: Vec<String> = frames.iter().map(|f| serde_json::to_string(f).unwrap()).collect();
    insta::assert_snapshot!(json.join("\n"));
}

/// A pcap of the rxe capture's fifth frame: as is, with its last ICRC byte
/// flipped, and cut to 40 bytes by a short snap length.
fn doctored() -> Vec<u8> {
    let src = capture("rxe-send-write.pcap");
    let mut reader = PcapReader::new(&src[..]).unwrap();
    let header = reader.header();
    let mut fifth = None;
    for _ in 0..5 {
        fifth = Some(reader.next_packet().unwrap().unwrap().into_owned());
    }
    let fifth = fifth.unwrap();
    let mut bad = fifth.data.to_vec();
    *bad.last_mut().unwrap() ^= 0x01;
    let mut writer = PcapWriter::with_header(Vec::new(), header).unwrap();
    writer.write_packet(&fifth).unwrap();
    writer.write_packet(&PcapPacket::new(fifth.timestamp, bad.len() as u32, &bad)).unwrap();
    writer.write_packet(&PcapPacket::new(fifth.timestamp, fifth.data.len() as u32, &fifth.data[..40])).unwrap();
    writer.into_writer()
}

#[test]
fn a_corrupted_icrc_is_flagged_and_a_truncated_frame_is_reported() {
    let frames = decode::pcap(&doctored()).unwrap();
    assert_eq!(frames[0].icrc_ok, Some(true));
    assert_eq!(frames[1].icrc_ok, Some(false), "flipped ICRC byte");
    assert!(frames[1].line().ends_with("ICRC BAD"), "{}", frames[1].line());
    assert_eq!(frames[2].kind, "truncated");
    let note = frames[2].note.as_deref().unwrap();
    let full = frames[0].payload_len.unwrap() + 58; // 64 bytes of SEND payload in a 122-byte frame
    assert!(note.starts_with(&format!("captured 40 of {full} bytes")), "{note}");
}
