//! The discovery log page (log identifier 0x70): a 1024-byte header, then
//! one 1024-byte entry per subsystem port.

use super::{ProtocolError, need, put_text, put_u16, put_u64, text_at, u16_at, u64_at};

/// Bytes of the log page header; the first entry starts at this offset.
pub const DISCOVERY_HEADER_LEN: usize = 1024;
/// Bytes of one discovery log page entry.
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// Transport Type (TRTYPE) 1: RDMA.
pub const TRTYPE_RDMA: u8 = 1;
/// Transport Type (TRTYPE) 3: TCP.
pub const TRTYPE_TCP: u8 = 3;
/// Address Family (ADRFAM) 1: IPv4; TRADDR is dotted-decimal text.
pub const ADRFAM_IPV4: u8 = 1;
/// Address Family (ADRFAM) 2: IPv6; TRADDR is IPv6 address text.
pub const ADRFAM_IPV6: u8 = 2;

/// Subsystem Type (SUBTYPE) 1: a referral to another discovery subsystem.
pub const SUBTYPE_REFERRAL: u8 = 1;
/// Subsystem Type (SUBTYPE) 2: an NVM subsystem with I/O controllers.
pub const SUBTYPE_NVME: u8 = 2;
/// Subsystem Type (SUBTYPE) 3: the discovery subsystem that returned the
/// log page.
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;

/// The header of the log page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryLogHeader {
    /// Generation Counter (GENCTR, bytes 0..8): changes whenever the log
    /// page does, so a host reading it in pieces can tell it changed.
    pub genctr: u64,
    /// Number of Records (NUMREC, bytes 8..16): entries after the header.
    pub numrec: u64,
    /// Record Format (RECFMT, bytes 16..18); 0 for this layout, not checked.
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    /// Decodes GENCTR, NUMREC and RECFMT from the first 18 bytes (the rest
    /// of the 1024-byte header is reserved); fewer is
    /// [`ProtocolError::Short`].
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("DiscoveryLogHeader", b, 18)?;
        Ok(DiscoveryLogHeader { genctr: u64_at(b, 0), numrec: u64_at(b, 8), recfmt: u16_at(b, 16) })
    }
}

/// One discovery log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport Type (TRTYPE, byte 0), e.g. [`TRTYPE_RDMA`].
    pub trtype: u8,
    /// Address Family (ADRFAM, byte 1), e.g. [`ADRFAM_IPV4`].
    pub adrfam: u8,
    /// Subsystem Type (SUBTYPE, byte 2), one of the `SUBTYPE_*` constants.
    pub subtype: u8,
    /// Transport Requirements (TREQ, byte 3), e.g. whether a secure channel
    /// is required.
    pub treq: u8,
    /// Port ID (PORTID, bytes 4..6) of the subsystem port.
    pub portid: u16,
    /// Controller ID (CNTLID, bytes 6..8); 0xFFFF for the dynamic
    /// controller model.
    pub cntlid: u16,
    /// Admin Max SQ Size (ASQSZ, bytes 8..10): admin submission queue
    /// entries the port's controllers support.
    pub asqsz: u16,
    /// Entry Flags (EFLAGS, bytes 10..12).
    pub eflags: u16,
    /// Transport Service Identifier (TRSVCID, bytes 32..64, space-padded
    /// text); for RDMA and TCP the port number, e.g. `"4420"`.
    pub trsvcid: String,
    /// NVM Subsystem Qualified Name (SUBNQN, bytes 256..512, NUL-padded).
    pub subnqn: String,
    /// Transport Address (TRADDR, bytes 512..768, space-padded text), e.g.
    /// an IPv4 address.
    pub traddr: String,
    /// RDMA QP Service Type (RDMA_QPTYPE, byte 768, byte 0 of the RDMA
    /// transport specific address subtype; 1 = reliable connected).
    pub rdma_qptype: u8,
    /// RDMA Provider Type (RDMA_PRTYPE, byte 769, TSAS byte 1), e.g.
    /// RoCE v2.
    pub rdma_prtype: u8,
    /// RDMA Connection Management Service (RDMA_CMS, byte 770, TSAS byte
    /// 2; 1 = RDMA CM).
    pub rdma_cms: u8,
    /// RDMA partition key (RDMA_PKEY, bytes 776..778, TSAS bytes 8..10).
    pub rdma_pkey: u16,
}

impl DiscoveryEntry {
    /// Decodes one 1024-byte entry; fewer bytes is
    /// [`ProtocolError::Short`]. Text fields are cut at the first NUL and
    /// trailing whitespace; values are not checked.
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

    /// Appends the 1024 bytes of the entry to `out`; text longer than its
    /// field is truncated.
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

    /// The transport type as `nvme discover` prints it (`"rdma"`, `"tcp"`),
    /// or `"unrecognized"`.
    pub fn trtype_name(&self) -> &'static str {
        match self.trtype {
            TRTYPE_RDMA => "rdma",
            TRTYPE_TCP => "tcp",
            _ => "unrecognized",
        }
    }

    /// The subsystem type in words, or `"unrecognized"`.
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
    /// The header (bytes 0..1024).
    pub header: DiscoveryLogHeader,
    /// The entries, entry i at byte 1024 + 1024 x i.
    pub entries: Vec<DiscoveryEntry>,
}

impl DiscoveryLog {
    /// Decodes the header and all NUMREC entries (all must be present).
    /// A buffer shorter than 1024 + 1024 x NUMREC bytes is
    /// [`ProtocolError::Short`]; a NUMREC whose page size overflows `u64`
    /// is [`ProtocolError::Field`] (`DiscoveryLog.numrec`).
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

    /// The page bytes (header with NUMREC = entries, then the entries);
    /// `header.numrec` is ignored.
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

    /// Bytes a page of `numrec` entries takes: 1024 + 1024 x `numrec`,
    /// saturating at `u64::MAX` for a count no page could hold.
    pub fn len_for(numrec: u64) -> u64 {
        (DISCOVERY_HEADER_LEN as u64).saturating_add(numrec.saturating_mul(DISCOVERY_ENTRY_LEN as u64))
    }
}
