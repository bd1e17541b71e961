//! Identify Controller and Identify Namespace data (4096 bytes each): the
//! fields the initiator uses, parsed, and built back for the target model.

use super::{IDENTIFY_LEN, ProtocolError, need, put_text, put_u16, put_u32, put_u64, text_at, u16_at, u32_at, u64_at};

/// SGLS bit 2: keyed SGL data blocks supported (required for NVMe/RDMA).
pub const SGLS_KEYED: u32 = 1 << 2;
/// SGLS bits 1:0 = 01: SGLs supported, no alignment requirement.
pub const SGLS_SUPPORTED: u32 = 1;
/// SGLS bit 20: offset (in-capsule) data blocks supported.
pub const SGLS_OFFSET: u32 = 1 << 20;

/// Controller Type (CNTRLTYPE, byte 111 of Identify Controller) 1: an I/O
/// controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// Controller Type 2: a discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;

/// Identify Controller fields. Text fields are ASCII, space-padded on the
/// wire and trimmed here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// PCI Vendor ID (VID, bytes 0..2).
    pub vid: u16,
    /// Serial Number (SN, bytes 4..24).
    pub serial: String,
    /// Model Number (MN, bytes 24..64).
    pub model: String,
    /// Firmware Revision (FR, bytes 64..72).
    pub firmware: String,
    /// Max data transfer size as a power of two of the page size (0 = none):
    /// MDTS, byte 77, counted in CAP.MPSMIN pages; see
    /// [`max_transfer`](super::max_transfer).
    pub mdts: u8,
    /// Controller ID (CNTLID, bytes 78..80).
    pub cntlid: u16,
    /// Version (VER, bytes 80..84; major 31:16, minor 15:8, tertiary 7:0).
    pub version: u32,
    /// Controller Type (CNTRLTYPE, byte 111), e.g. [`CNTRLTYPE_IO`]; 0 when
    /// not reported.
    pub cntrltype: u8,
    /// Keep-alive granularity in 100 ms units (KAS, bytes 320..322).
    pub kas: u16,
    /// Maximum Outstanding Commands (MAXCMD, bytes 514..516) per queue.
    pub maxcmd: u16,
    /// Number of namespaces (largest valid NSID) (NN, bytes 516..520).
    pub nn: u32,
    /// SGL Support (SGLS, bytes 536..540); see the `SGLS_*` constants.
    pub sgls: u32,
    /// NVM Subsystem NVMe Qualified Name (SUBNQN, bytes 768..1024,
    /// NUL-padded).
    pub subnqn: String,
    /// I/O queue command capsule size in 16-byte units, 64-byte command
    /// included (IOCCSZ, bytes 1792..1796).
    pub ioccsz: u32,
    /// I/O queue response capsule size in 16-byte units (IORCSZ, bytes
    /// 1796..1800).
    pub iorcsz: u32,
    /// In-capsule data offset in 16-byte units (ICDOFF, bytes 1800..1802).
    pub icdoff: u16,
    /// Fabrics Controller Attributes (FCATT, byte 1802); bit 0 set means
    /// the static controller model.
    pub fcatt: u8,
    /// Max SGL data block descriptors per command (MSDBD, byte 1803).
    pub msdbd: u8,
}

impl ControllerInfo {
    /// Decodes the fields above from a 4096-byte Identify Controller data
    /// structure; fewer bytes is [`ProtocolError::Short`]. No value is
    /// checked here: bring-up checks CNTLID, SGLS and ICDOFF itself.
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("IdentifyController", b, IDENTIFY_LEN)?;
        Ok(ControllerInfo {
            vid: u16_at(b, 0),
            serial: text_at(b, 4..24),
            model: text_at(b, 24..64),
            firmware: text_at(b, 64..72),
            mdts: b[77],
            cntlid: u16_at(b, 78),
            version: u32_at(b, 80),
            cntrltype: b[111],
            kas: u16_at(b, 320),
            maxcmd: u16_at(b, 514),
            nn: u32_at(b, 516),
            sgls: u32_at(b, 536),
            subnqn: text_at(b, 768..1024),
            ioccsz: u32_at(b, 1792),
            iorcsz: u32_at(b, 1796),
            icdoff: u16_at(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
        })
    }

    /// The 4096-byte data structure, for the target model: the fields
    /// above at their offsets, text truncated to its field, everything else
    /// zero.
    pub fn encode(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        put_u16(&mut b[..], 0, self.vid);
        put_text(&mut b[..], 4..24, &self.serial, b' ');
        put_text(&mut b[..], 24..64, &self.model, b' ');
        put_text(&mut b[..], 64..72, &self.firmware, b' ');
        b[77] = self.mdts;
        put_u16(&mut b[..], 78, self.cntlid);
        put_u32(&mut b[..], 80, self.version);
        b[111] = self.cntrltype;
        put_u16(&mut b[..], 320, self.kas);
        put_u16(&mut b[..], 514, self.maxcmd);
        put_u32(&mut b[..], 516, self.nn);
        put_u32(&mut b[..], 536, self.sgls);
        put_text(&mut b[..], 768..1024, &self.subnqn, 0);
        put_u32(&mut b[..], 1792, self.ioccsz);
        put_u32(&mut b[..], 1796, self.iorcsz);
        put_u16(&mut b[..], 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
        b
    }

    /// Whether SGLS bit 2 ([`SGLS_KEYED`]) is set: the controller takes
    /// keyed SGL data blocks, which NVMe/RDMA needs.
    pub fn keyed_sgl(&self) -> bool {
        self.sgls & SGLS_KEYED != 0
    }

    /// Bytes of in-capsule data an I/O command may carry (0 when none):
    /// IOCCSZ x 16 - 64.
    pub fn in_capsule_bytes(&self) -> u64 {
        (self.ioccsz as u64 * 16).saturating_sub(super::COMMAND_LEN as u64)
    }

    /// `1.3.0` from VER.
    pub fn version_text(&self) -> String {
        format!("{}.{}.{}", self.version >> 16, (self.version >> 8) & 0xFF, self.version & 0xFF)
    }
}

/// One LBA format (LBAF): a 4-byte entry of Identify Namespace at byte
/// 128 + 4 x index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbaFormat {
    /// Metadata bytes per block (MS, bits 15:0 of the LBAF dword).
    pub ms: u16,
    /// log2 of the block size (LBADS, bits 23:16).
    pub lbads: u8,
    /// Relative Performance (RP, bits 25:24): 0 best through 3 degraded.
    pub rp: u8,
}

/// Identify Namespace fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The namespace the data describes (the Identify command's NSID; not
    /// part of the data structure).
    pub nsid: u32,
    /// Namespace Size (NSZE, bytes 0..8), in logical blocks.
    pub nsze: u64,
    /// Namespace Capacity (NCAP, bytes 8..16), in logical blocks.
    pub ncap: u64,
    /// Namespace Utilization (NUSE, bytes 16..24), in logical blocks.
    pub nuse: u64,
    /// Namespace Features (NSFEAT, byte 24).
    pub nsfeat: u8,
    /// Formatted LBA Size (FLBAS, byte 26), kept whole: bits 3:0 are the
    /// index of the format in use, bit 4 set means metadata travels at the
    /// end of each block (extended LBA).
    pub flbas: u8,
    /// The formats (NLBAF + 1 of them; NLBAF, byte 25, is 0's based), at
    /// most 64.
    pub formats: Vec<LbaFormat>,
}

impl NamespaceInfo {
    /// Parses the data of `nsid`. The format in use must exist and have a
    /// block size of 512 bytes to 64 KiB. Errors: fewer than 4096 bytes is
    /// [`ProtocolError::Short`]; [`ProtocolError::Field`] for NLBAF above 63
    /// (`IdentifyNamespace.nlbaf`), FLBAS bits 3:0 past NLBAF
    /// (`IdentifyNamespace.flbas`), or LBADS outside 9..=16
    /// (`IdentifyNamespace.lbaf.lbads`).
    pub fn decode(nsid: u32, b: &[u8]) -> Result<Self, ProtocolError> {
        need("IdentifyNamespace", b, IDENTIFY_LEN)?;
        let nlbaf = b[25];
        if nlbaf > 63 {
            return Err(ProtocolError::field("IdentifyNamespace", "nlbaf", nlbaf.into(), "at most 64 formats"));
        }
        let formats: Vec<LbaFormat> = (0..=nlbaf as usize)
            .map(|i| {
                let at = 128 + 4 * i;
                LbaFormat { ms: u16_at(b, at), lbads: b[at + 2], rp: b[at + 3] & 3 }
            })
            .collect();
        let info = NamespaceInfo {
            nsid,
            nsze: u64_at(b, 0),
            ncap: u64_at(b, 8),
            nuse: u64_at(b, 16),
            nsfeat: b[24],
            flbas: b[26],
            formats,
        };
        let idx = info.flbas & 0xF;
        let Some(f) = info.formats.get(idx as usize) else {
            return Err(ProtocolError::field("IdentifyNamespace", "flbas", idx.into(), "selects a format past NLBAF"));
        };
        if !(9..=16).contains(&f.lbads) {
            return Err(ProtocolError::field(
                "IdentifyNamespace",
                "lbaf.lbads",
                f.lbads.into(),
                "block size must be 512 B..=64 KiB",
            ));
        }
        Ok(info)
    }

    /// The 4096-byte data structure, for the target model: NLBAF =
    /// formats - 1 and at most 64 formats written, everything not held here
    /// zero.
    pub fn encode(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        put_u64(&mut b[..], 0, self.nsze);
        put_u64(&mut b[..], 8, self.ncap);
        put_u64(&mut b[..], 16, self.nuse);
        b[24] = self.nsfeat;
        b[25] = self.formats.len().saturating_sub(1).min(63) as u8;
        b[26] = self.flbas;
        for (i, f) in self.formats.iter().take(64).enumerate() {
            let at = 128 + 4 * i;
            put_u16(&mut b[..], at, f.ms);
            b[at + 2] = f.lbads;
            b[at + 3] = f.rp;
        }
        b
    }

    /// The format in use (validated by `decode`); a 512-byte format without
    /// metadata if FLBAS names none.
    pub fn format(&self) -> LbaFormat {
        self.formats.get((self.flbas & 0xF) as usize).copied().unwrap_or(LbaFormat { ms: 0, lbads: 9, rp: 0 })
    }

    /// Bytes per logical block of the format in use: 2^LBADS.
    pub fn lba_size(&self) -> u64 {
        1u64 << self.format().lbads
    }

    /// Metadata bytes per block of the format in use (MS).
    pub fn metadata_size(&self) -> u16 {
        self.format().ms
    }

    /// Metadata kept in a separate buffer (not extended LBAs): this
    /// initiator transfers data blocks only.
    pub fn separate_metadata(&self) -> bool {
        self.metadata_size() > 0 && self.flbas & 0x10 == 0
    }
}
