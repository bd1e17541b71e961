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
