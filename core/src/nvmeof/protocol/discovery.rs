//! The discovery log page (log identifier 0x70): a 1024-byte header, then
//! one 1024-byte entry per subsystem port.

use super::{ProtocolError, need, put_text, put_u16, put_u64, text_at, u16_at, u64_at};

pub const DISCOVERY_HEADER_LEN: usize = 1024;
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// Transport types and address families.
pub const TRTYPE_RDMA: u8 = 1;
pub const TRTYPE_TCP: u8 = 3;
pub const ADRFAM_IPV4: u8 = 1;
pub const ADRFAM_IPV6: u8 = 2;

/// Subsystem types.
pub const SUBTYPE_REFERRAL: u8 = 1;
pub const SUBTYPE_NVME: u8 = 2;
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;

/// The header of the log page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryLogHeader {
    pub genctr: u64,
    pub numrec: u64,
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("DiscoveryLogHeader", b, 18)?;
        Ok(DiscoveryLogHeader { genctr: u64_at(b, 0), numrec: u64_at(b, 8), recfmt: u16_at(b, 16) })
    }
}

/// One discovery log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    pub eflags: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
    /// RDMA transport specific address subtype: QP type, provider type, CM service.
    pub rdma_qptype: u8,
    pub rdma_prtype: u8,
    pub rdma_cms: u8,
    pub rdma_pkey: u16,
}

impl DiscoveryEntry {
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("DiscoveryEntry", b, DISCOVERY_ENTRY_LEN)?;
        Ok(DiscoveryEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            eflags: u16_at(b, 10),
            trsvcid: text_at(b, 32..64),
            subnqn: text_at(b, 256..512),
            traddr: text_at(b, 512..768),
            rdma_qptype: b[768],
            rdma_prtype: b[769],
            rdma_cms: b[770],
            rdma_pkey: u16_at(b, 776),
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; DISCOVERY_ENTRY_LEN];
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(&mut b, 4, self.portid);
        put_u16(&mut b, 6, self.cntlid);
        put_u16(&mut b, 8, self.asqsz);
        put_u16(&mut b, 10, self.eflags);
        put_text(&mut b, 32..64, &self.trsvcid, b' ');
        put_text(&mut b, 256..512, &self.subnqn, 0);
        put_text(&mut b, 512..768, &self.traddr, b' ');
        b[768] = self.rdma_qptype;
        b[769] = self.rdma_prtype;
        b[770] = self.rdma_cms;
        put_u16(&mut b, 776, self.rdma_pkey);
        out.extend_from_slice(&b);
    }

    pub fn trtype_name(&self) -> &'static str {
        match self.trtype {
            TRTYPE_RDMA => "rdma",
            TRTYPE_TCP => "tcp",
            _ => "unrecognized",
        }
    }

    pub fn subtype_name(&self) -> &'static str {
        match self.subtype {
            SUBTYPE_REFERRAL => "discovery subsystem referral",
            SUBTYPE_NVME => "nvme subsystem",
            SUBTYPE_CURRENT_DISCOVERY => "current discovery subsystem",
            _ => "unrecognized",
        }
    }
}

/// A whole discovery log page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryLog {
    pub header: DiscoveryLogHeader,
    pub entries: Vec<DiscoveryEntry>,
}

impl DiscoveryLog {
    /// Decodes the header and all NUMREC entries (all must be present).
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        let header = DiscoveryLogHeader::decode(b)?;
        let Some(len) = header
            .numrec
            .checked_mul(DISCOVERY_ENTRY_LEN as u64)
            .and_then(|n| n.checked_add(DISCOVERY_HEADER_LEN as u64))
        else {
            return Err(ProtocolError::field("DiscoveryLog", "numrec", header.numrec, "too many records"));
        };
        if (b.len() as u64) < len {
            return Err(ProtocolError::Short {
                what: "DiscoveryLog",
                len: b.len(),
                need: usize::try_from(len).unwrap_or(usize::MAX),
            });
        }
        let entries = b[DISCOVERY_HEADER_LEN..len as usize]
            .chunks_exact(DISCOVERY_ENTRY_LEN)
            .map(DiscoveryEntry::decode)
            .collect::<Result<_, _>>()?;
        Ok(DiscoveryLog { header, entries })
    }

    /// The page bytes (header with NUMREC = entries, then the entries).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; DISCOVERY_HEADER_LEN];
        put_u64(&mut out, 0, self.header.genctr);
        put_u64(&mut out, 8, self.entries.len() as u64);
        put_u16(&mut out, 16, self.header.recfmt);
        for e in &self.entries {
            e.encode(&mut out);
        }
        out
    }

    /// Bytes the page takes.
    pub fn len_for(numrec: u64) -> u64 {
        DISCOVERY_HEADER_LEN as u64 + numrec.saturating_mul(DISCOVERY_ENTRY_LEN as u64)
    }
}
