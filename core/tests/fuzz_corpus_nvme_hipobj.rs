//! Replays the committed corpora of the NVMe/RDMA and hipobj fuzz targets
//! through the checks the targets run, and makes sure the seeds taken from
//! the kernel's capture still reach past the parsers (a corpus of inputs
//! that all fail to parse would exercise nothing).

use std::path::{Path, PathBuf};

use rctb_core::fuzzing;
use rctb_core::nvmeof::protocol::{
    CmAccept, CmRequest, Command, Completion, ConnectData, ControllerInfo, DiscoveryLog, NamespaceInfo,
};
use rctb_core::wire::hipobj::{ClientToken, Crc64Nvme};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn replay(target: &str, check: fn(&[u8]) -> Result<(), String>) {
    match fuzzing::replay(&repo(), target, check) {
        Ok(n) => assert!(n >= 3, "{target}: only {n} corpus files"),
        Err(failures) => panic!("{target} corpus failures:\n{failures}"),
    }
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(repo().join("fuzz/corpus").join(target).join(name)).expect("seed present")
}

#[test]
fn nvme_corpora_pass_their_checks() {
    replay("nvme_cm_private", fuzzing::nvme_cm_private);
    replay("nvme_command", fuzzing::nvme_command);
    replay("nvme_completion", fuzzing::nvme_completion);
    replay("nvme_identify", fuzzing::nvme_identify);
    replay("nvme_connect_data", fuzzing::nvme_connect_data);
    replay("nvme_discovery_log", fuzzing::nvme_discovery_log);
}

#[test]
fn hipobj_corpora_pass_their_checks() {
    replay("hipobj_token", fuzzing::hipobj_token);
    replay("hipobj_checksum", fuzzing::hipobj_checksum);
    replay("hipobj_params", fuzzing::hipobj_params);
    replay("hipobj_headers", fuzzing::hipobj_headers);
}

#[test]
fn capture_seeds_parse() {
    let req = CmRequest::decode(&seed("nvme_cm_private", "frame1-req")[1..]).expect("REQ private data");
    assert_eq!((req.qid, req.hrqsize, req.hsqsize), (0, 32, 31));
    assert_eq!(CmAccept::decode(&seed("nvme_cm_private", "frame2-rep")[1..]).expect("accept").crqsize, 32);
    let connect = Command::decode(&seed("nvme_command", "frame4-q0-opc7f")[1..]).expect("Connect capsule");
    assert_eq!((connect.opcode, connect.fctype()), (0x7f, 0x01));
    let data = ConnectData::decode(&seed("nvme_connect_data", "frame7-admin-connect")).expect("connect data");
    assert_eq!(data.cntlid, 0xffff);
    assert!(data.subnqn.as_str().starts_with("nqn."), "{data:?}");
    let cqe = Completion::decode(&seed("nvme_completion", "frame8")).expect("completion");
    assert!(cqe.status().is_success());
    let ctrl = ControllerInfo::decode(&seed("nvme_identify", "frame38-ctrl")[1..]).expect("identify controller");
    assert!(ctrl.subnqn.starts_with("nqn."), "{ctrl:?}");
    NamespaceInfo::decode(1, &seed("nvme_identify", "frame261-ns")[1..]).expect("identify namespace");
    let log = DiscoveryLog::decode(&seed("nvme_discovery_log", "frame68-log")).expect("discovery log");
    assert_eq!((log.header.numrec, log.entries.len()), (2, 2), "{log:?}");
    assert!(matches!(
        ClientToken::parse(&String::from_utf8(seed("hipobj_token", "rc-with-suffix")).unwrap()),
        Ok(ClientToken::Rc { suffix: Some(_), .. })
    ));
    Crc64Nvme::parse(&String::from_utf8(seed("hipobj_checksum", "valid")).unwrap()).expect("checksum header");
    let prepare = String::from_utf8(seed("hipobj_headers", "prepare-get")[1..].to_vec()).unwrap();
    let pairs = prepare.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim(), v.trim()));
    let p = rctb_core::wire::hipobj::PrepareHeaders::parse(pairs).expect("the PREPARE seed parses");
    assert!(p.checksum.is_some() && p.target.contains("partNumber"), "{p:?}");
}
