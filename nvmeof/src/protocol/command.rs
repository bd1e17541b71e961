//! The 64-byte submission queue entry, and the typed commands rctb sends
//! and its target model understands.

use super::{COMMAND_LEN, ProtocolError, Sgl, need, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};

// Opcodes (byte 0). Admin and I/O queues share numbers (0x02 is Get Log
// Page on the admin queue and Read on an I/O queue), so decoding needs the
// queue kind.

/// NVM command set Flush opcode (I/O queue).
pub const OPC_FLUSH: u8 = 0x00;
/// NVM command set Write opcode (I/O queue).
pub const OPC_WRITE: u8 = 0x01;
/// NVM command set Read opcode (I/O queue); the same number as
/// [`OPC_GET_LOG_PAGE`] on the admin queue.
pub const OPC_READ: u8 = 0x02;
/// Admin Get Log Page opcode; the same number as [`OPC_READ`] on an I/O
/// queue.
pub const OPC_GET_LOG_PAGE: u8 = 0x02;
/// Admin Identify opcode.
pub const OPC_IDENTIFY: u8 = 0x06;
/// Admin Set Features opcode.
pub const OPC_SET_FEATURES: u8 = 0x09;
/// Admin Get Features opcode.
pub const OPC_GET_FEATURES: u8 = 0x0A;
/// Admin Asynchronous Event Request opcode.
pub const OPC_ASYNC_EVENT: u8 = 0x0C;
/// Admin Keep Alive opcode.
pub const OPC_KEEP_ALIVE: u8 = 0x18;
/// Fabrics command opcode, valid on any queue; byte 4 (FCTYPE) says which
/// Fabrics command it is.
pub const OPC_FABRICS: u8 = 0x7F;

/// Fabrics command type (FCTYPE, byte 4) of Property Set.
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
/// Fabrics command type (FCTYPE, byte 4) of Connect.
pub const FCTYPE_CONNECT: u8 = 0x01;
/// Fabrics command type (FCTYPE, byte 4) of Property Get.
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// Fabrics command type (FCTYPE, byte 4) of Disconnect.
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// Flags byte (byte 1, CDW0 bits 15:8) with PSDT (bits 15:14) = 01b: SGLs
/// describe the data and MPTR, if used, is one contiguous metadata buffer
/// (Linux `NVME_CMD_SGL_METABUF`). Every command this module builds sets it.
pub const PSDT_SGL: u8 = 0x40;

/// Identify CNS 00h (CDW10 bits 7:0): the Identify Namespace data structure
/// of the command's NSID.
pub const CNS_NAMESPACE: u8 = 0x00;
/// Identify CNS 01h: the Identify Controller data structure.
pub const CNS_CONTROLLER: u8 = 0x01;
/// Identify CNS 02h: the active namespace ID list (NSIDs above the
/// command's NSID, ascending).
pub const CNS_ACTIVE_NAMESPACES: u8 = 0x02;
/// The namespace identification descriptor list (NGUID, UUID, ...), which
/// hosts of NVMe 1.3 and later ask for every namespace.
pub const CNS_NS_DESCRIPTORS: u8 = 0x03;

/// Feature Identifier (FID, CDW10 bits 7:0) of Number of Queues; its CDW11
/// value holds NSQR (bits 15:0) and NCQR (bits 31:16), both 0's based.
pub const FEAT_NUMBER_OF_QUEUES: u8 = 0x07;
/// Feature Identifier of Keep Alive Timer; its CDW11 value is KATO in
/// milliseconds.
pub const FEAT_KEEP_ALIVE_TIMER: u8 = 0x0F;

/// Log Page Identifier (LID, CDW10 bits 7:0) of the discovery log page (see
/// [`DiscoveryLog`](super::DiscoveryLog)).
pub const LID_DISCOVERY: u8 = 0x70;

/// Which queue a command travels on (decides how opcodes are read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// The admin queue (queue id 0).
    Admin,
    /// An I/O queue (queue id 1 and up).
    Io,
}

/// A submission queue entry, field by field; the dwords of the
/// command-specific part are kept raw (typed views: [`NvmeCommand`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Command {
    /// Opcode (OPC, byte 0, CDW0 bits 7:0).
    pub opcode: u8,
    /// Byte 1 (CDW0 bits 15:8): FUSE in bits 9:8 and PSDT in bits 15:14;
    /// commands built here carry [`PSDT_SGL`].
    pub flags: u8,
    /// Command Identifier (CID, bytes 2..4, CDW0 bits 31:16), echoed in the
    /// completion.
    pub cid: u16,
    /// Namespace Identifier (NSID, bytes 4..8, CDW1); in a Fabrics command
    /// byte 4 is the fctype.
    pub nsid: u32,
    /// Command dword 2 (bytes 8..12).
    pub cdw2: u32,
    /// Command dword 3 (bytes 12..16).
    pub cdw3: u32,
    /// Metadata Pointer (MPTR, bytes 16..24).
    pub mptr: u64,
    /// SGL Entry 1 of the data pointer (bytes 24..40).
    pub sgl: Sgl,
    /// Command dwords 10..=15 (bytes 40..64).
    pub cdw: [u32; 6],
}

impl Command {
    /// The 64 bytes of the entry, every field little-endian.
    pub fn encode(&self) -> [u8; COMMAND_LEN] {
        let mut b = [0u8; COMMAND_LEN];
        b[0] = self.opcode;
        b[1] = self.flags;
        put_u16(&mut b, 2, self.cid);
        put_u32(&mut b, 4, self.nsid);
        put_u32(&mut b, 8, self.cdw2);
        put_u32(&mut b, 12, self.cdw3);
        put_u64(&mut b, 16, self.mptr);
        b[24..40].copy_from_slice(&self.sgl.encode());
        for (i, d) in self.cdw.iter().enumerate() {
            put_u32(&mut b, 40 + 4 * i, *d);
        }
        b
    }

    /// Decodes the first 64 bytes (in-capsule data after them is ignored).
    /// Fewer bytes is [`ProtocolError::Short`]; an SGL1 of an unsupported
    /// type is the error of [`Sgl::decode`].
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("Command", b, COMMAND_LEN)?;
        let mut cdw = [0u32; 6];
        for (i, d) in cdw.iter_mut().enumerate() {
            *d = u32_at(b, 40 + 4 * i);
        }
        Ok(Command {
            opcode: b[0],
            flags: b[1],
            cid: u16_at(b, 2),
            nsid: u32_at(b, 4),
            cdw2: u32_at(b, 8),
            cdw3: u32_at(b, 12),
            mptr: u64_at(b, 16),
            sgl: Sgl::decode(&b[24..40])?,
            cdw,
        })
    }

    /// The Fabrics command type (byte 4), meaningful when `opcode` is 0x7F.
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }

    /// Every command carries an SGL on RDMA (a null keyed one without
    /// data), with PSDT set, as Linux sends them and nvmet-rdma requires.
    fn with_sgl(opcode: u8, nsid: u32, sgl: Sgl) -> Command {
        Command { opcode, flags: PSDT_SGL, nsid, sgl, ..Command::default() }
    }
}

/// Size of a property: 4 or 8 bytes (ATTRIB bits 2:0, byte 40 of Property
/// Get/Set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropSize {
    /// ATTRIB size 0: a 4-byte property (VS, CC, CSTS).
    Four,
    /// ATTRIB size 1: an 8-byte property (CAP).
    Eight,
}

/// Typed commands (the ones rctb builds and its target executes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeCommand {
    /// Fabrics Connect; `sgl` points to 1024 bytes of [`super::ConnectData`].
    /// The Record Format (RECFMT, bytes 40..42) is always 0.
    Connect {
        /// Queue ID (QID, bytes 42..44, CDW10 bits 31:16): 0 for the admin
        /// queue.
        qid: u16,
        /// Submission Queue Size (SQSIZE, bytes 44..46, CDW11 bits 15:0),
        /// 0's based: depth - 1.
        sqsize: u16,
        /// Connect Attributes (CATTR, byte 46, CDW11 bits 23:16); 0 when
        /// built by [`NvmeCommand::connect`].
        cattr: u8,
        /// Keep Alive Timeout (KATO, bytes 48..52, CDW12) in milliseconds;
        /// 0 disables keep alive.
        kato_ms: u32,
        /// The 1024-byte connect data.
        sgl: Sgl,
    },
    /// Fabrics Property Get; the value comes back in the completion's
    /// DW0 (and DW1 for 8 bytes).
    PropertyGet {
        /// Property size (ATTRIB, byte 40).
        size: PropSize,
        /// Property offset (OFST, bytes 44..48, CDW11), e.g. [`REG_CAP`](super::REG_CAP).
        offset: u32,
    },
    /// Fabrics Property Set.
    PropertySet {
        /// Property size (ATTRIB, byte 40).
        size: PropSize,
        /// Property offset (OFST, bytes 44..48, CDW11), e.g. [`REG_CC`](super::REG_CC).
        offset: u32,
        /// Value (bytes 48..56, CDW12 low and CDW13 high dword); only the
        /// low 32 bits matter for a 4-byte property.
        value: u64,
    },
    /// Fabrics Disconnect (of an I/O queue).
    Disconnect,
    /// Admin Identify; the 4096-byte data goes to `sgl`.
    Identify {
        /// Controller or Namespace Structure (CNS, CDW10 bits 7:0), one of
        /// the `CNS_*` constants.
        cns: u8,
        /// Controller Identifier (CNTID, CDW10 bits 31:16).
        cntid: u16,
        /// Namespace Identifier (CDW1): the namespace of CNS 00h, the
        /// starting point of CNS 02h, 0 for the controller.
        nsid: u32,
        /// The 4096-byte data buffer.
        sgl: Sgl,
    },
    /// Admin Set Features (Save, CDW10 bit 31, is left clear).
    SetFeatures {
        /// Feature Identifier (FID, CDW10 bits 7:0), e.g.
        /// [`FEAT_NUMBER_OF_QUEUES`].
        fid: u8,
        /// Namespace Identifier (CDW1); 0 for controller-wide features.
        nsid: u32,
        /// The feature's value (CDW11).
        value: u32,
    },
    /// Admin Get Features of the current value (Select, CDW10 bits 10:8,
    /// is 0 when built and ignored when decoded); the value comes back in
    /// the completion's DW0.
    GetFeatures {
        /// Feature Identifier (FID, CDW10 bits 7:0).
        fid: u8,
        /// Namespace Identifier (CDW1).
        nsid: u32,
    },
    /// Get Log Page of `len` bytes (a multiple of 4) at byte `offset`.
    GetLogPage {
        /// Log Page Identifier (LID, CDW10 bits 7:0), e.g.
        /// [`LID_DISCOVERY`].
        lid: u8,
        /// Log Specific Field (LSP, CDW10 bits 11:8; 4 bits kept).
        lsp: u8,
        /// Retain Asynchronous Event (RAE, CDW10 bit 15).
        rae: bool,
        /// Namespace Identifier (CDW1).
        nsid: u32,
        /// Bytes to return; on the wire the 0's based dword count NUMD =
        /// len / 4 - 1, split into NUMDL (CDW10 bits 31:16) and NUMDU
        /// (CDW11 bits 15:0).
        len: u32,
        /// Log Page Offset in bytes (LPOL in CDW12, LPOU in CDW13).
        offset: u64,
        /// The buffer the log page data goes to.
        sgl: Sgl,
    },
    /// Admin Keep Alive (no parameters).
    KeepAlive,
    /// Admin Asynchronous Event Request (no parameters); it completes
    /// only when the controller reports an event.
    AsyncEvent,
    /// NVM Read: `blocks` (1..=65536) from `slba`.
    Read {
        /// Namespace Identifier (CDW1).
        nsid: u32,
        /// Starting LBA (SLBA, bytes 40..48, CDW10 low and CDW11 high
        /// dword).
        slba: u64,
        /// Logical blocks to read (1..=[`MAX_BLOCKS_PER_COMMAND`]); sent as
        /// Number of Logical Blocks (NLB, CDW12 bits 15:0, 0's based).
        blocks: u32,
        /// The host buffer the data goes to, `blocks` x LBA size bytes.
        sgl: Sgl,
    },
    /// NVM Write: `blocks` (1..=65536) from `slba`.
    Write {
        /// Namespace Identifier (CDW1).
        nsid: u32,
        /// Starting LBA (SLBA, bytes 40..48, CDW10 low and CDW11 high
        /// dword).
        slba: u64,
        /// Logical blocks to write (1..=[`MAX_BLOCKS_PER_COMMAND`]); sent
        /// as Number of Logical Blocks (NLB, CDW12 bits 15:0, 0's based).
        blocks: u32,
        /// The host buffer the data comes from, `blocks` x LBA size bytes.
        sgl: Sgl,
    },
    /// NVM Flush of namespace `nsid`'s volatile write cache.
    Flush {
        /// Namespace Identifier (CDW1).
        nsid: u32,
    },
}

/// Most logical blocks one Read or Write may move: NLB (CDW12 bits 15:0)
/// is a 0's based 16-bit field.
pub const MAX_BLOCKS_PER_COMMAND: u32 = 65536;

impl NvmeCommand {
    /// The Fabrics Connect command of queue `qid` with `depth` entries
    /// (SQSIZE = depth - 1, CATTR 0) and keep-alive timeout `kato_ms`. A
    /// depth outside 2..=256 is [`ProtocolError::Field`] (`Connect.depth`);
    /// an `sgl` not naming exactly 1024 bytes is `Connect.sgl.length`.
    pub fn connect(qid: u16, depth: u16, kato_ms: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        if !(super::MIN_QUEUE_DEPTH..=super::MAX_QUEUE_DEPTH).contains(&depth) {
            return Err(ProtocolError::field("Connect", "depth", depth.into(), "must be 2..=256"));
        }
        if sgl.len() as usize != super::CONNECT_DATA_LEN {
            return Err(ProtocolError::field("Connect", "sgl.length", sgl.len().into(), "connect data is 1024 bytes"));
        }
        Ok(NvmeCommand::Connect { qid, sqsize: depth - 1, cattr: 0, kato_ms, sgl })
    }

    /// An NVM Read of `blocks` (1..=65536) logical blocks from `slba` into
    /// `sgl`; any other count is [`ProtocolError::Field`] (`Read.blocks`).
    /// The SGL length is not checked against the block count.
    pub fn read(nsid: u32, slba: u64, blocks: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        check_blocks("Read", blocks)?;
        Ok(NvmeCommand::Read { nsid, slba, blocks, sgl })
    }

    /// An NVM Write of `blocks` (1..=65536) logical blocks at `slba` from
    /// `sgl`; any other count is [`ProtocolError::Field`] (`Write.blocks`).
    pub fn write(nsid: u32, slba: u64, blocks: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        check_blocks("Write", blocks)?;
        Ok(NvmeCommand::Write { nsid, slba, blocks, sgl })
    }

    /// Get Log Page `lid` of `len` bytes from byte `offset` into `sgl`, with
    /// LSP 0, RAE clear and NSID 0. `len` must be a non-zero multiple of 4
    /// and `offset` a multiple of 4, else [`ProtocolError::Field`]
    /// (`GetLogPage.length` or `GetLogPage.offset`).
    pub fn get_log_page(lid: u8, len: u32, offset: u64, sgl: Sgl) -> Result<Self, ProtocolError> {
        if len == 0 || !len.is_multiple_of(4) {
            return Err(ProtocolError::field("GetLogPage", "length", len.into(), "a non-zero multiple of 4"));
        }
        if !offset.is_multiple_of(4) {
            return Err(ProtocolError::field("GetLogPage", "offset", offset, "a multiple of 4"));
        }
        Ok(NvmeCommand::GetLogPage { lid, lsp: 0, rae: false, nsid: 0, len, offset, sgl })
    }

    /// The data pointer of the command, if it moves data; [`Sgl::None`]
    /// for commands without data.
    pub fn sgl(&self) -> Sgl {
        match *self {
            NvmeCommand::Connect { sgl, .. }
            | NvmeCommand::Identify { sgl, .. }
            | NvmeCommand::GetLogPage { sgl, .. }
            | NvmeCommand::Read { sgl, .. }
            | NvmeCommand::Write { sgl, .. } => sgl,
            _ => Sgl::None,
        }
    }

    /// The command's name as the NVMe specifications spell it (e.g.
    /// `"Property Get"`), for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            NvmeCommand::Connect { .. } => "Connect",
            NvmeCommand::PropertyGet { .. } => "Property Get",
            NvmeCommand::PropertySet { .. } => "Property Set",
            NvmeCommand::Disconnect => "Disconnect",
            NvmeCommand::Identify { .. } => "Identify",
            NvmeCommand::SetFeatures { .. } => "Set Features",
            NvmeCommand::GetFeatures { .. } => "Get Features",
            NvmeCommand::GetLogPage { .. } => "Get Log Page",
            NvmeCommand::KeepAlive => "Keep Alive",
            NvmeCommand::AsyncEvent => "Asynchronous Event Request",
            NvmeCommand::Read { .. } => "Read",
            NvmeCommand::Write { .. } => "Write",
            NvmeCommand::Flush { .. } => "Flush",
        }
    }

    /// The submission queue entry, with command id `cid`. Every entry gets
    /// [`PSDT_SGL`] and an SGL1 ([`Sgl::None`] when there is no data).
    /// Fields are not validated again: a `blocks` of 0 is sent as one block
    /// and one above 65536 is truncated to NLB's 16 bits; a log page `len`
    /// is sent as whole dwords, at least one.
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = match *self {
            NvmeCommand::Connect { qid, sqsize, cattr, kato_ms, sgl } => {
                let mut c = Command::with_sgl(OPC_FABRICS, FCTYPE_CONNECT as u32, sgl);
                c.cdw[0] = (qid as u32) << 16; // recfmt 0 @40, qid @42
                c.cdw[1] = sqsize as u32 | (cattr as u32) << 16;
                c.cdw[2] = kato_ms;
                c
            }
            NvmeCommand::PropertyGet { size, offset } => {
                let mut c = Command::with_sgl(OPC_FABRICS, FCTYPE_PROPERTY_GET as u32, Sgl::None);
                c.cdw[0] = (size == PropSize::Eight) as u32;
                c.cdw[1] = offset;
                c
            }
            NvmeCommand::PropertySet { size, offset, value } => {
                let mut c = Command::with_sgl(OPC_FABRICS, FCTYPE_PROPERTY_SET as u32, Sgl::None);
                c.cdw[0] = (size == PropSize::Eight) as u32;
                c.cdw[1] = offset;
                c.cdw[2] = value as u32;
                c.cdw[3] = (value >> 32) as u32;
                c
            }
            NvmeCommand::Disconnect => Command::with_sgl(OPC_FABRICS, FCTYPE_DISCONNECT as u32, Sgl::None),
            NvmeCommand::Identify { cns, cntid, nsid, sgl } => {
                let mut c = Command::with_sgl(OPC_IDENTIFY, nsid, sgl);
                c.cdw[0] = cns as u32 | (cntid as u32) << 16;
                c
            }
            NvmeCommand::SetFeatures { fid, nsid, value } => {
                let mut c = Command::with_sgl(OPC_SET_FEATURES, nsid, Sgl::None);
                c.cdw[0] = fid as u32;
                c.cdw[1] = value;
                c
            }
            NvmeCommand::GetFeatures { fid, nsid } => {
                let mut c = Command::with_sgl(OPC_GET_FEATURES, nsid, Sgl::None);
                c.cdw[0] = fid as u32;
                c
            }
            NvmeCommand::GetLogPage { lid, lsp, rae, nsid, len, offset, sgl } => {
                let numd = (len / 4).saturating_sub(1);
                let mut c = Command::with_sgl(OPC_GET_LOG_PAGE, nsid, sgl);
                c.cdw[0] = lid as u32 | ((lsp & 0xF) as u32) << 8 | (rae as u32) << 15 | (numd & 0xFFFF) << 16;
                c.cdw[1] = numd >> 16;
                c.cdw[2] = offset as u32;
                c.cdw[3] = (offset >> 32) as u32;
                c
            }
            NvmeCommand::KeepAlive => Command::with_sgl(OPC_KEEP_ALIVE, 0, Sgl::None),
            NvmeCommand::AsyncEvent => Command::with_sgl(OPC_ASYNC_EVENT, 0, Sgl::None),
            NvmeCommand::Read { nsid, slba, blocks, sgl } | NvmeCommand::Write { nsid, slba, blocks, sgl } => {
                let opcode = if matches!(self, NvmeCommand::Read { .. }) { OPC_READ } else { OPC_WRITE };
                let mut c = Command::with_sgl(opcode, nsid, sgl);
                c.cdw[0] = slba as u32;
                c.cdw[1] = (slba >> 32) as u32;
                c.cdw[2] = blocks.saturating_sub(1) & 0xFFFF;
                c
            }
            NvmeCommand::Flush { nsid } => Command::with_sgl(OPC_FLUSH, nsid, Sgl::None),
        };
        c.cid = cid;
        c
    }

    /// The typed view of `c` as it arrives on a `queue` of that kind.
    /// Fabrics commands are recognized on either queue. Errors, all
    /// [`ProtocolError::Field`]: a Property ATTRIB size other than 0 or 1
    /// (`Property.attrib.size`), a Connect RECFMT other than 0
    /// (`Connect.recfmt`), an unknown FCTYPE (`Command.fctype`), a log page
    /// NUMD whose byte count does not fit `u32` (`GetLogPage.numd`), and an
    /// opcode this module does not know on that queue (`Command.opcode`).
    pub fn from_command(c: &Command, queue: QueueKind) -> Result<Self, ProtocolError> {
        let d = &c.cdw;
        if c.opcode == OPC_FABRICS {
            let size = || {
                if d[0] & 0x7 == 1 {
                    Ok(PropSize::Eight)
                } else if d[0] & 0x7 == 0 {
                    Ok(PropSize::Four)
                } else {
                    Err(ProtocolError::field(
                        "Property",
                        "attrib.size",
                        (d[0] & 7).into(),
                        "0 (4 bytes) or 1 (8 bytes)",
                    ))
                }
            };
            return match c.fctype() {
                FCTYPE_CONNECT => {
                    let recfmt = d[0] as u16;
                    if recfmt != 0 {
                        return Err(ProtocolError::field("Connect", "recfmt", recfmt.into(), "must be 0"));
                    }
                    Ok(NvmeCommand::Connect {
                        qid: (d[0] >> 16) as u16,
                        sqsize: d[1] as u16,
                        cattr: (d[1] >> 16) as u8,
                        kato_ms: d[2],
                        sgl: c.sgl,
                    })
                }
                FCTYPE_PROPERTY_GET => Ok(NvmeCommand::PropertyGet { size: size()?, offset: d[1] }),
                FCTYPE_PROPERTY_SET => Ok(NvmeCommand::PropertySet {
                    size: size()?,
                    offset: d[1],
                    value: d[2] as u64 | (d[3] as u64) << 32,
                }),
                FCTYPE_DISCONNECT => Ok(NvmeCommand::Disconnect),
                t => {
                    Err(ProtocolError::field("Command", "fctype", t.into(), "Connect, Property Get/Set or Disconnect"))
                }
            };
        }
        match (queue, c.opcode) {
            (QueueKind::Admin, OPC_IDENTIFY) => {
                Ok(NvmeCommand::Identify { cns: d[0] as u8, cntid: (d[0] >> 16) as u16, nsid: c.nsid, sgl: c.sgl })
            }
            (QueueKind::Admin, OPC_SET_FEATURES) => {
                Ok(NvmeCommand::SetFeatures { fid: d[0] as u8, nsid: c.nsid, value: d[1] })
            }
            (QueueKind::Admin, OPC_GET_FEATURES) => Ok(NvmeCommand::GetFeatures { fid: d[0] as u8, nsid: c.nsid }),
            (QueueKind::Admin, OPC_GET_LOG_PAGE) => {
                let numd = (d[0] >> 16) | (d[1] & 0xFFFF) << 16;
                // NUMD is a 0's based dword count; lengths past u32 cannot
                // be named by this type (nor moved by one keyed SGL).
                let len = numd.checked_add(1).and_then(|n| n.checked_mul(4)).ok_or_else(|| {
                    ProtocolError::field("GetLogPage", "numd", numd.into(), "at most 2^30-1 (4 GiB - 4 bytes)")
                })?;
                Ok(NvmeCommand::GetLogPage {
                    lid: d[0] as u8,
                    lsp: ((d[0] >> 8) & 0xF) as u8,
                    rae: d[0] & (1 << 15) != 0,
                    nsid: c.nsid,
                    len,
                    offset: d[2] as u64 | (d[3] as u64) << 32,
                    sgl: c.sgl,
                })
            }
            (QueueKind::Admin, OPC_KEEP_ALIVE) => Ok(NvmeCommand::KeepAlive),
            (QueueKind::Admin, OPC_ASYNC_EVENT) => Ok(NvmeCommand::AsyncEvent),
            (QueueKind::Io, OPC_READ | OPC_WRITE) => {
                let slba = d[0] as u64 | (d[1] as u64) << 32;
                let blocks = (d[2] & 0xFFFF) + 1;
                if c.opcode == OPC_READ {
                    Ok(NvmeCommand::Read { nsid: c.nsid, slba, blocks, sgl: c.sgl })
                } else {
                    Ok(NvmeCommand::Write { nsid: c.nsid, slba, blocks, sgl: c.sgl })
                }
            }
            (QueueKind::Io, OPC_FLUSH) => Ok(NvmeCommand::Flush { nsid: c.nsid }),
            (_, op) => {
                Err(ProtocolError::field("Command", "opcode", op.into(), "not a command of this queue rctb knows"))
            }
        }
    }

    /// Decodes 64 bytes into the command id and the typed command: the
    /// errors of [`Command::decode`], then of [`NvmeCommand::from_command`].
    pub fn decode(b: &[u8], queue: QueueKind) -> Result<(u16, Self), ProtocolError> {
        let c = Command::decode(b)?;
        Ok((c.cid, NvmeCommand::from_command(&c, queue)?))
    }
}

fn check_blocks(what: &'static str, blocks: u32) -> Result<(), ProtocolError> {
    if blocks == 0 || blocks > MAX_BLOCKS_PER_COMMAND {
        return Err(ProtocolError::field(what, "blocks", blocks.into(), "must be 1..=65536"));
    }
    Ok(())
}
