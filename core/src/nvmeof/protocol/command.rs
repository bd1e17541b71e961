//! The 64-byte submission queue entry, and the typed commands rctb sends
//! and its target model understands.

use super::{COMMAND_LEN, ProtocolError, Sgl, need, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};

/// Opcodes. Admin and I/O queues share numbers (0x02 is Get Log Page on the
/// admin queue and Read on an I/O queue), so decoding needs the queue kind.
pub const OPC_FLUSH: u8 = 0x00;
pub const OPC_WRITE: u8 = 0x01;
pub const OPC_READ: u8 = 0x02;
pub const OPC_GET_LOG_PAGE: u8 = 0x02;
pub const OPC_IDENTIFY: u8 = 0x06;
pub const OPC_SET_FEATURES: u8 = 0x09;
pub const OPC_GET_FEATURES: u8 = 0x0A;
pub const OPC_ASYNC_EVENT: u8 = 0x0C;
pub const OPC_KEEP_ALIVE: u8 = 0x18;
pub const OPC_FABRICS: u8 = 0x7F;

/// Fabrics command types (byte 4 of a Fabrics command).
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
pub const FCTYPE_CONNECT: u8 = 0x01;
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// Command flags: PSDT = SGL for data and metadata (`NVME_CMD_SGL_METABUF`).
pub const PSDT_SGL: u8 = 0x40;

/// Identify CNS values.
pub const CNS_NAMESPACE: u8 = 0x00;
pub const CNS_CONTROLLER: u8 = 0x01;
pub const CNS_ACTIVE_NAMESPACES: u8 = 0x02;
/// The namespace identification descriptor list (NGUID, UUID, ...), which
/// hosts of NVMe 1.3 and later ask for every namespace.
pub const CNS_NS_DESCRIPTORS: u8 = 0x03;

/// Feature identifiers.
pub const FEAT_NUMBER_OF_QUEUES: u8 = 0x07;
pub const FEAT_KEEP_ALIVE_TIMER: u8 = 0x0F;

/// Log page identifiers.
pub const LID_DISCOVERY: u8 = 0x70;

/// Which queue a command travels on (decides how opcodes are read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    Admin,
    Io,
}

/// A submission queue entry, field by field; the dwords of the
/// command-specific part are kept raw (typed views: [`NvmeCommand`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Command {
    pub opcode: u8,
    pub flags: u8,
    pub cid: u16,
    /// NSID; in a Fabrics command byte 4 is the fctype.
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub mptr: u64,
    pub sgl: Sgl,
    /// Command dwords 10..=15 (bytes 40..64).
    pub cdw: [u32; 6],
}

impl Command {
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

/// Size of a property: 4 or 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropSize {
    Four,
    Eight,
}

/// Typed commands (the ones rctb builds and its target executes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeCommand {
    /// Fabrics Connect; `sgl` points to 1024 bytes of [`super::ConnectData`].
    Connect {
        qid: u16,
        sqsize: u16,
        cattr: u8,
        kato_ms: u32,
        sgl: Sgl,
    },
    PropertyGet {
        size: PropSize,
        offset: u32,
    },
    PropertySet {
        size: PropSize,
        offset: u32,
        value: u64,
    },
    /// Fabrics Disconnect (of an I/O queue).
    Disconnect,
    Identify {
        cns: u8,
        cntid: u16,
        nsid: u32,
        sgl: Sgl,
    },
    SetFeatures {
        fid: u8,
        nsid: u32,
        value: u32,
    },
    GetFeatures {
        fid: u8,
        nsid: u32,
    },
    /// Get Log Page of `len` bytes (a multiple of 4) at byte `offset`.
    GetLogPage {
        lid: u8,
        lsp: u8,
        rae: bool,
        nsid: u32,
        len: u32,
        offset: u64,
        sgl: Sgl,
    },
    KeepAlive,
    AsyncEvent,
    /// NVM Read: `blocks` (1..=65536) from `slba`.
    Read {
        nsid: u32,
        slba: u64,
        blocks: u32,
        sgl: Sgl,
    },
    Write {
        nsid: u32,
        slba: u64,
        blocks: u32,
        sgl: Sgl,
    },
    Flush {
        nsid: u32,
    },
}

/// Blocks per Read/Write command: NLB is a 0's based 16-bit field.
pub const MAX_BLOCKS_PER_COMMAND: u32 = 65536;

impl NvmeCommand {
    /// The Fabrics Connect command of queue `qid` with `depth` entries.
    pub fn connect(qid: u16, depth: u16, kato_ms: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        if !(super::MIN_QUEUE_DEPTH..=super::MAX_QUEUE_DEPTH).contains(&depth) {
            return Err(ProtocolError::field("Connect", "depth", depth.into(), "must be 2..=256"));
        }
        if sgl.len() as usize != super::CONNECT_DATA_LEN {
            return Err(ProtocolError::field("Connect", "sgl.length", sgl.len().into(), "connect data is 1024 bytes"));
        }
        Ok(NvmeCommand::Connect { qid, sqsize: depth - 1, cattr: 0, kato_ms, sgl })
    }

    /// A Read or Write of `blocks` (1..=65536) logical blocks.
    pub fn read(nsid: u32, slba: u64, blocks: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        check_blocks("Read", blocks)?;
        Ok(NvmeCommand::Read { nsid, slba, blocks, sgl })
    }

    pub fn write(nsid: u32, slba: u64, blocks: u32, sgl: Sgl) -> Result<Self, ProtocolError> {
        check_blocks("Write", blocks)?;
        Ok(NvmeCommand::Write { nsid, slba, blocks, sgl })
    }

    /// Get Log Page of `len` bytes; `len` must be a non-zero multiple of 4.
    pub fn get_log_page(lid: u8, len: u32, offset: u64, sgl: Sgl) -> Result<Self, ProtocolError> {
        if len == 0 || len % 4 != 0 {
            return Err(ProtocolError::field("GetLogPage", "length", len.into(), "a non-zero multiple of 4"));
        }
        if offset % 4 != 0 {
            return Err(ProtocolError::field("GetLogPage", "offset", offset, "a multiple of 4"));
        }
        Ok(NvmeCommand::GetLogPage { lid, lsp: 0, rae: false, nsid: 0, len, offset, sgl })
    }

    /// The data pointer of the command, if it moves data.
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

    /// The submission queue entry, with command id `cid`.
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

    /// Decodes 64 bytes into the typed command.
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
