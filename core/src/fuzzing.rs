//! Checks the fuzz targets run, kept here so a plain `cargo test` replays
//! every committed corpus file through exactly the same code
//! (`core/tests/fuzz_corpus.rs`), as rustls does. Not a stable API.

use std::path::{Path, PathBuf};

use crate::wire::roce::RoceFrame;

/// Every input a replay test feeds `target`'s check: the committed corpus
/// (`fuzz/corpus/<target>/`) and crash reproductions
/// (`fuzz/regressions/<target>/`), sorted. `repo` is the repository root.
pub fn corpus_files(repo: &Path, target: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        if let Ok(entries) = std::fs::read_dir(repo.join("fuzz").join(dir).join(target)) {
            let mut files: Vec<PathBuf> =
                entries.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_file()).collect();
            files.sort();
            out.extend(files);
        }
    }
    out
}

/// Runs `check` on every input of `target` (see [`corpus_files`]); the
/// error lists each failing file. Fails when the corpus is missing.
pub fn replay(repo: &Path, target: &str, check: impl Fn(&[u8]) -> Result<(), String>) -> Result<usize, String> {
    let files = corpus_files(repo, target);
    if files.is_empty() {
        return Err(format!("fuzz/corpus/{target} is empty or missing"));
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| match std::fs::read(path) {
            Ok(bytes) => check(&bytes).err().map(|why| format!("{}: {why}", path.display())),
            Err(e) => Some(format!("{}: {e}", path.display())),
        })
        .collect();
    if failures.is_empty() { Ok(files.len()) } else { Err(failures.join("\n")) }
}

/// Any bytes: decoding never panics; a frame that decodes re-encodes to the
/// same bytes, agrees with itself on its ICRC, and decodes the same from its
/// IP header on.
pub fn roce_frame(bytes: &[u8]) -> Result<(), String> {
    let Ok(frame) = RoceFrame::decode(bytes) else { return Ok(()) };
    let mut out = Vec::with_capacity(bytes.len());
    frame.encode(&mut out);
    if out != bytes {
        return Err("decode then encode changed the bytes".into());
    }
    if frame.encoded_len() != bytes.len() {
        return Err(format!("encoded_len {} for {} bytes", frame.encoded_len(), bytes.len()));
    }
    if frame.icrc_ok() != (frame.compute_icrc() == frame.icrc) {
        return Err("icrc_ok disagrees with compute_icrc".into());
    }
    let ip_start = frame.eth.map_or(0, |e| e.header_len());
    let Some(ip_bytes) = bytes.get(ip_start..) else { return Err("IP header offset past the frame".into()) };
    match RoceFrame::decode_ip_packet(ip_bytes) {
        Ok(ip) if ip.bth == frame.bth && ip.ext == frame.ext && ip.payload == frame.payload => Ok(()),
        Ok(_) => Err("decoding from the IP header gives other headers".into()),
        Err(e) => Err(format!("the frame decodes but its IP packet does not: {e}")),
    }
}

/// Any bytes as metadata-bus registers: decoding never panics, and what
/// decodes encodes back to a word that decodes the same.
pub fn surf_metadata(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::surf::{RX_REGS, Rx, TX_REGS, Tx};
    let word = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|i| bytes.get(i * 4..i * 4 + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect()
    };
    let rx: [u32; RX_REGS] = word(RX_REGS).try_into().map_err(|_| "register count")?;
    if let Ok(decoded) = Rx::decode(&rx)
        && Rx::decode(&decoded.encode()) != Ok(decoded)
    {
        return Err(format!("RX {decoded:?} does not survive encode/decode"));
    }
    let tx: [u32; TX_REGS] = word(TX_REGS).try_into().map_err(|_| "register count")?;
    if let Ok(decoded) = Tx::decode(&tx) {
        let again = decoded.encode().map_err(|e| format!("a decoded TX word does not encode: {e}"))?;
        if Tx::decode(&again) != Ok(decoded) {
            return Err(format!("TX {decoded:?} does not survive encode/decode"));
        }
    }
    Ok(())
}

/// Any bytes as a CM MAD: decoding never panics; what decodes encodes to
/// 256 bytes that decode the same, and equal the input wherever the input's
/// reserved bits were zero (checked through a second round trip).
pub fn cm_mad(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::cm::{CmMad, CmMessage, IpCmHeader, IpServiceId};
    let Ok(mad) = CmMad::decode(bytes) else { return Ok(()) };
    let out = mad.encode().map_err(|e| format!("{mad:?} decodes but does not encode: {e}"))?;
    let back = CmMad::decode(&out).map_err(|e| format!("encoded MAD does not decode: {e}"))?;
    if back != mad {
        return Err(format!("round trip changed the MAD:\n{mad:?}\n{back:?}"));
    }
    if back.encode().map_err(|e| e.to_string())? != out {
        return Err("the second encoding differs from the first".into());
    }
    if let CmMessage::Req(req) = &mad.message
        && let Some(id) = IpServiceId::from_service_id(req.service_id)
    {
        if id.service_id() != req.service_id {
            return Err(format!("service id {:#x} does not survive its IP form", req.service_id));
        }
        if let Ok((h, _)) = IpCmHeader::split(&req.private_data)
            && IpCmHeader::split(&h.encode()).map(|(h2, _)| h2) != Ok(h)
        {
            return Err(format!("CMA header {h:?} does not survive encode/decode"));
        }
    }
    Ok(())
}

/// `decode`, and when it succeeds: `encode`, `decode` again, equal.
fn round_trip<T: PartialEq + std::fmt::Debug, E: std::fmt::Display, B: AsRef<[u8]>>(
    what: &str,
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, E>,
    encode: impl Fn(&T) -> B,
) -> Result<Option<T>, String> {
    let Ok(value) = decode(bytes) else { return Ok(None) };
    let encoded = encode(&value);
    match decode(encoded.as_ref()) {
        Ok(again) if again == value => Ok(Some(value)),
        Ok(again) => Err(format!("{what}: round trip changed {value:?} into {again:?}")),
        Err(e) => Err(format!("{what}: {value:?} encodes to bytes that do not decode: {e}")),
    }
}

/// `bytes` zero padded (or cut) to `len`: structure parsers need their full
/// length, and a fuzzer's short inputs should still reach their logic.
fn padded(bytes: &[u8], len: usize) -> Vec<u8> {
    let mut v = bytes[..bytes.len().min(len)].to_vec();
    v.resize(len, 0);
    v
}

/// NVMe/RDMA CM private data: the first byte picks request, accept or
/// reject; each round-trips, and a target's check of a request never panics.
pub fn nvme_cm_private(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::{CmAccept, CmReject, CmRequest, RejectStatus};
    let Some((&which, rest)) = bytes.split_first() else { return Ok(()) };
    match which % 3 {
        0 => {
            if let Some(req) = round_trip("CmRequest", rest, CmRequest::decode, CmRequest::encode)? {
                let _ = req.check(256);
            }
        }
        1 => {
            round_trip("CmAccept", rest, CmAccept::decode, CmAccept::encode)?;
        }
        _ => {
            if let Some(rej) = round_trip("CmReject", rest, CmReject::decode, CmReject::encode)? {
                let code = rej.status.code();
                if RejectStatus::from_code(code) != rej.status {
                    return Err(format!("reject status {:?} does not survive its code {code}", rej.status));
                }
            }
        }
    }
    Ok(())
}

/// A 64-byte submission queue entry: the raw form round-trips byte for byte
/// where the SGL is keyed or absent; the typed form (admin or I/O queue,
/// picked by the first byte) rebuilds the same typed command.
pub fn nvme_command(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::{Command, NvmeCommand, QueueKind, Sgl};
    let Some((&which, rest)) = bytes.split_first() else { return Ok(()) };
    let Some(raw) = round_trip("Command", rest, Command::decode, Command::encode)? else { return Ok(()) };
    if matches!(raw.sgl, Sgl::Keyed { .. }) && raw.encode()[..] != rest[..64] {
        return Err(format!("{raw:?} does not re-encode byte for byte"));
    }
    let queue = if which & 1 == 0 { QueueKind::Admin } else { QueueKind::Io };
    if let Ok((cid, typed)) = NvmeCommand::decode(rest, queue) {
        let again = NvmeCommand::from_command(&typed.to_command(cid), queue)
            .map_err(|e| format!("{typed:?} ({queue:?}) rebuilds into a command that does not parse: {e}"))?;
        if again != typed {
            return Err(format!("{typed:?} ({queue:?}) came back as {again:?}"));
        }
        let _ = (typed.name(), typed.sgl());
    }
    Ok(())
}

/// A 16-byte completion: byte for byte, and the status field's SC, SCT,
/// More and DNR survive `to_field` with the phase bit kept.
pub fn nvme_completion(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::{Completion, Status};
    let Some(c) = round_trip("Completion", bytes, Completion::decode, Completion::encode)? else { return Ok(()) };
    if c.encode()[..] != bytes[..16] {
        return Err(format!("{c:?} does not re-encode byte for byte"));
    }
    let status = c.status();
    let phase = c.status_field & 1 != 0;
    if Status::from_field(status.to_field(phase)) != status {
        return Err(format!("status {status:?} does not survive to_field"));
    }
    let _ = (c.check(), status.describe(), status.to_string());
    Ok(())
}

/// Identify data (4096 bytes; the first byte picks controller or namespace,
/// the rest is zero padded): what parses re-encodes to data that parses the same.
pub fn nvme_identify(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::{ControllerInfo, IDENTIFY_LEN, NamespaceInfo};
    let Some((&which, rest)) = bytes.split_first() else { return Ok(()) };
    let data = padded(rest, IDENTIFY_LEN);
    if which & 1 == 0 {
        round_trip("ControllerInfo", &data, ControllerInfo::decode, |c| c.encode().to_vec())?;
    } else {
        round_trip("NamespaceInfo", &data, |b| NamespaceInfo::decode(1, b), |n| n.encode().to_vec())?;
    }
    Ok(())
}

/// Fabrics Connect data (1024 bytes, zero padded): NQN rules hold and what
/// parses round-trips.
pub fn nvme_connect_data(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::{CONNECT_DATA_LEN, ConnectData};
    round_trip("ConnectData", &padded(bytes, CONNECT_DATA_LEN), ConnectData::decode, ConnectData::encode)?;
    Ok(())
}

/// A discovery log page (header and entries) as any bytes.
pub fn nvme_discovery_log(bytes: &[u8]) -> Result<(), String> {
    use crate::nvmeof::protocol::DiscoveryLog;
    if let Some(log) = round_trip("DiscoveryLog", bytes, DiscoveryLog::decode, DiscoveryLog::encode)? {
        for e in &log.entries {
            let _ = (e.trtype_name(), e.subtype_name());
        }
    }
    Ok(())
}

/// A PREPARE token as any text: what parses re-formats to the same token.
pub fn hipobj_token(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::hipobj::{ClientToken, RdmaToken};
    let text = String::from_utf8_lossy(bytes);
    if let Ok(ClientToken::Rc { token, .. }) = ClientToken::parse(&text) {
        let again = RdmaToken::from_hex(&token.to_hex()).map_err(|e| format!("{token:?}: own hex fails: {e}"))?;
        if again != token {
            return Err(format!("{token:?} came back from hex as {again:?}"));
        }
        if RdmaToken::from_bytes(&token.to_bytes()) != token {
            return Err(format!("{token:?} does not survive to_bytes"));
        }
        let _ = token.ipv4();
    }
    Ok(())
}

/// The `CRC64NVME` checksum header as any text: what parses formats back to
/// the same text (one spelling per checksum).
pub fn hipobj_checksum(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::hipobj::Crc64Nvme;
    let text = String::from_utf8_lossy(bytes);
    if let Ok(sum) = Crc64Nvme::parse(&text)
        && sum.to_header() != text
    {
        return Err(format!("{text:?} parses to {sum:?}, which formats as {:?}", sum.to_header()));
    }
    Ok(())
}

/// Each `x-amz-rdma-*` value parser on any text (lines `name:value`): no
/// panic, and numbers format back (PSN, cookie) to values that parse equal.
pub fn hipobj_params(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::hipobj::{
        SessionId, format_hex_u32, format_psn, parse_cookie, parse_mr_addr, parse_mr_rkey, parse_offset, parse_op,
        parse_protocol, parse_psn, parse_qpn, parse_size, parse_target,
    };
    let text = String::from_utf8_lossy(bytes);
    for line in text.lines() {
        let (name, value) = line.split_once(':').unwrap_or(("", line));
        match name.trim().to_ascii_lowercase().as_str() {
            "protocol" => drop(parse_protocol(value)),
            "op" => drop(parse_op(value)),
            "size" => drop(parse_size(value)),
            "offset" => drop(parse_offset(value)),
            "qpn" => drop(parse_qpn(value)),
            "mr-addr" => drop(parse_mr_addr(value)),
            "mr-rkey" => drop(parse_mr_rkey(value)),
            "session" => {
                if let Ok(id) = SessionId::parse(value)
                    && id.to_string() != value
                {
                    return Err(format!("session {value:?} formats as {id}"));
                }
            }
            "psn" => {
                if let Ok(psn) = parse_psn(value)
                    && parse_psn(&format_psn(psn)) != Ok(psn)
                {
                    return Err(format!("psn {psn:#x} does not survive format_psn"));
                }
            }
            "cookie" => {
                if let Ok(cookie) = parse_cookie(value)
                    && parse_cookie(&format_hex_u32(cookie)) != Ok(cookie)
                {
                    return Err(format!("cookie {cookie:#x} does not survive format_hex_u32"));
                }
            }
            _ => drop(parse_target(value)),
        }
    }
    Ok(())
}

/// Header sets of PREPARE, READY and CANCEL (`name: value` lines; the
/// first byte picks the request): what parses renders to canonical headers
/// that parse equal, and no rule violation panics.
pub fn hipobj_headers(bytes: &[u8]) -> Result<(), String> {
    use crate::wire::hipobj::{CancelHeaders, PrepareHeaders, ReadyHeaders};
    let Some((&which, rest)) = bytes.split_first() else { return Ok(()) };
    let text = String::from_utf8_lossy(rest);
    let pairs: Vec<(&str, &str)> =
        text.lines().map(|l| l.split_once(':').map_or((l, ""), |(k, v)| (k.trim(), v.trim()))).collect();
    fn again<T: PartialEq + std::fmt::Debug, E: std::fmt::Display>(
        value: &T,
        headers: Vec<(String, String)>,
        parse: impl Fn(Vec<(&str, &str)>) -> Result<T, E>,
    ) -> Result<(), String> {
        match parse(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()) {
            Ok(v) if v == *value => Ok(()),
            Ok(v) => Err(format!("{value:?} rendered and re-parsed as {v:?}")),
            Err(e) => Err(format!("{value:?} renders to {headers:?}, which does not parse: {e}")),
        }
    }
    match which % 3 {
        0 => {
            if let Ok(p) = PrepareHeaders::parse(pairs) {
                again(&p, p.to_headers(), |h| PrepareHeaders::parse(h))?;
            }
        }
        1 => {
            if let Ok(r) = ReadyHeaders::parse(pairs) {
                again(&r, r.to_headers(), |h| ReadyHeaders::parse(h))?;
            }
        }
        _ => {
            if let Ok(c) = CancelHeaders::parse(pairs) {
                again(&c, c.to_headers(), |h| CancelHeaders::parse(h))?;
            }
        }
    }
    Ok(())
}
