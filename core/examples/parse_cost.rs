//! Runs one wire parser N times on a fixed input, for instruction counts:
//! `ci/parser-cost` runs this under callgrind at two N and reports the
//! difference per parse (exact and stable, unlike wall-clock figures on
//! these shared machines).
//!
//!     cargo run --release -p rctb-core --example parse_cost -- PARSER N
//!
//! PARSER: `roce-write-imm` (Ethernet/IPv4/UDP, BTH + RETH + ImmDt, no ICRC
//! check), `roce-write-imm-icrc` (the same and the ICRC verified),
//! `nvme-completion`, `nvme-cm-request` (the NVMe/RDMA private data of a CM
//! REQ), `cm-mad` (a whole 256-byte REQ MAD).

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::process::ExitCode;

use rctb_core::nvmeof::protocol::{CmRequest, Completion, Status};
use rctb_core::transport::Psn;
use rctb_core::wire::cm::CmMad;
use rctb_core::wire::roce::{Bth, ExtHeaders, FrameBuilder, MacAddr, Opcode, Reth, RoceFrame};

/// A WRITE_ONLY_IMM frame with 64 bytes of payload, as bytes.
fn write_imm_frame() -> Vec<u8> {
    let builder = FrameBuilder::new(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 10, 0, 1),
        Ipv4Addr::new(10, 10, 0, 2),
    );
    let mut ext = ExtHeaders::NONE;
    ext.reth = Some(Reth { va: 0x7f00_0000_1000, rkey: 0x1234, dma_len: 64 });
    ext.imm = Some(0xdead_beef);
    let bth = Bth::new(Opcode::WRITE_ONLY_IMM, 0x11, Psn::new(7).expect("psn"));
    let mut out = Vec::new();
    builder.build(bth, ext, &[0xa5; 64], &mut out).expect("frame builds");
    out
}

/// A CM REQ MAD carrying NVMe/RDMA private data (admin queue, depth 32).
fn cm_req_mad() -> Vec<u8> {
    use rctb_core::wire::cm::{CmMessage, CmPath, IpCmHeader, MadHeader, Req};
    let ip = IpCmHeader {
        cma_version: 0,
        ip_version: 4,
        src_port: 0xcfc2,
        src_addr: Ipv4Addr::new(10, 10, 0, 2).into(),
        dst_addr: Ipv4Addr::new(10, 10, 0, 1).into(),
    };
    let mut private_data = ip.encode().to_vec();
    private_data.extend_from_slice(&CmRequest::new(0, 32, 0).expect("request").encode());
    let req = Req {
        local_comm_id: 0x92fc_7ae7,
        service_id: 0x0106_1144,
        local_ca_guid: 1,
        local_qkey: 0,
        local_qpn: 0x16,
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 16,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: true,
        starting_psn: 0xeade26,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: CmPath::default(),
        alternate_path: CmPath::default(),
        private_data,
    };
    let mad = CmMad { header: MadHeader::cm(CmMessage::REQ, 4), message: CmMessage::Req(req) };
    mad.encode().expect("MAD encodes").to_vec()
}

#[inline(never)]
fn run(parser: &str, n: u64) -> Result<u64, String> {
    let mut acc = 0u64;
    match parser {
        "roce-write-imm" | "roce-write-imm-icrc" => {
            let frame = write_imm_frame();
            let icrc = parser.ends_with("icrc");
            for _ in 0..n {
                let f = RoceFrame::decode(black_box(&frame)).map_err(|e| e.to_string())?;
                acc += u64::from(f.ext.imm.unwrap_or(0)) + f.ext.reth.map_or(0, |r| u64::from(r.rkey));
                if icrc {
                    acc += u64::from(f.icrc_ok());
                }
            }
        }
        "nvme-completion" => {
            let cqe = Completion::new(0x1b, Status::new(0, 0x80, true), 0).encode();
            for _ in 0..n {
                let c = Completion::decode(black_box(&cqe)).map_err(|e| e.to_string())?;
                acc += u64::from(c.cid) + u64::from(c.status().sc);
            }
        }
        "nvme-cm-request" => {
            let pd = CmRequest::new(1, 128, 7).expect("request").encode();
            for _ in 0..n {
                let r = CmRequest::decode(black_box(&pd)).map_err(|e| e.to_string())?;
                acc += u64::from(r.hrqsize);
            }
        }
        "cm-mad" => {
            let mad = cm_req_mad();
            for _ in 0..n {
                let m = CmMad::decode(black_box(&mad)).map_err(|e| e.to_string())?;
                acc += u64::from(m.message.local_comm_id());
            }
        }
        other => return Err(format!("unknown parser {other:?}")),
    }
    Ok(acc)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(parser), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: parse_cost PARSER N");
        return ExitCode::from(2);
    };
    match run(parser, n) {
        Ok(acc) => {
            println!("{parser} x{n}: {acc}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("parse_cost: {e}");
            ExitCode::FAILURE
        }
    }
}
