//! The surf `RoCEv2Engine` metadata bus (a frozen register format): the
//! MetaDataTx word the host writes (303 bits at 0xF04) and the MetaDataRx
//! word the engine answers with (276 bits at 0xF2C), as docs/protocols.md §1.10
//! describes them.
//!
//! Fields are packed most-significant first and right-aligned at bit 0; the
//! bus type (PD 0, MR 1, QP 2) sits in the word's top two bits. A word is
//! carried in consecutive 32-bit registers, register `i` holding bits
//! `32i+31 .. 32i`. Encoders check every field's width and say which field
//! broke which rule; decoders read only the fields the format defines.

use thiserror::Error;

/// Bits of the MetaDataTx word (bits 302..0; bus type in 302:301).
pub const TX_BITS: u32 = 303;
/// Bits of the MetaDataRx word (bits 275..0; bus type in 275:274).
pub const RX_BITS: u32 = 276;
/// 32-bit registers the MetaDataTx word spans: 10, the last one using its
/// low 15 bits.
pub const TX_REGS: usize = TX_BITS.div_ceil(32) as usize;
/// 32-bit registers the MetaDataRx word spans: 9, the last one using its
/// low 20 bits.
pub const RX_REGS: usize = RX_BITS.div_ceil(32) as usize;
/// Control register: [`CONTROL_SEND`] and [`CONTROL_RECV`].
pub const REG_CONTROL: u32 = 0xF00;
/// First of the [`TX_REGS`] MetaDataTx registers (0xF04..=0xF28, 4 bytes
/// apart, register `i` holding bits `32i+31 .. 32i`).
pub const REG_TX: u32 = 0xF04;
/// First of the [`RX_REGS`] MetaDataRx registers (0xF2C..=0xF4C), laid out
/// as at [`REG_TX`].
pub const REG_RX: u32 = 0xF2C;
/// Soft reset register: writing bit 0 resets the engine and drops every PD,
/// MR and QP it holds.
pub const REG_SOFT_RESET: u32 = 0xF50;
/// SendMetaData, bit 0 of [`REG_CONTROL`]: writing it makes the engine
/// execute the word in the [`REG_TX`] registers.
pub const CONTROL_SEND: u32 = 1 << 0;
/// RecvMetaData, bit 1 of [`REG_CONTROL`]: set while an answer waits in the
/// [`REG_RX`] registers; the host writes it to acknowledge the answer.
pub const CONTROL_RECV: u32 = 1 << 1;

/// A value too wide for its field, returned by [`Tx::encode`] before anything
/// is packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{field} = {value:#x}: must fit {bits} bits")]
pub struct FieldTooWide {
    /// The field's name as in [`PdTx`], [`MrTx`] or [`QpTx`] (e.g. `"qpn"`).
    pub field: &'static str,
    /// The value given.
    pub value: u64,
    /// The field's width on the bus.
    pub bits: u32,
}

/// A word that is not a valid answer, from [`Rx::decode`] (and, for the bus
/// type, from [`Tx::decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RxError {
    /// The 2-bit bus type is 3, which names no request kind.
    #[error("bus type {0} is not PD (0), MR (1) or QP (2)")]
    BusType(u8),
    /// The last register has bits set above the word's top bit (only
    /// [`Rx::decode`] checks this).
    #[error("register {index} has bits above the {RX_BITS}-bit word: {value:#x}")]
    StrayBits {
        /// Index of the register, counted from [`REG_RX`] (always
        /// `RX_REGS - 1`).
        index: usize,
        /// The register's whole value.
        value: u32,
    },
}

/// A wide little-endian bit field builder over 32-bit registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Word<const N: usize>([u32; N]);

impl<const N: usize> Word<N> {
    fn get(&self, lo: u32, bits: u32) -> u64 {
        (0..bits).fold(0u64, |acc, i| {
            let b = lo + i;
            acc | ((((self.0[(b / 32) as usize] >> (b % 32)) & 1) as u64) << i)
        })
    }

    fn set(&mut self, lo: u32, bits: u32, value: u64) {
        for i in 0..bits {
            let b = lo + i;
            if (value >> i) & 1 == 1 {
                self.0[(b / 32) as usize] |= 1 << (b % 32);
            }
        }
    }
}

/// Packs fields most-significant first, right-aligned at bit 0.
struct Packer<const N: usize> {
    fields: Vec<(&'static str, u32, u64)>,
    word: Word<N>,
}

impl<const N: usize> Packer<N> {
    fn new() -> Self {
        Packer { fields: Vec::new(), word: Word([0; N]) }
    }

    fn field(&mut self, name: &'static str, bits: u32, value: u64) -> Result<&mut Self, FieldTooWide> {
        if bits < 64 && value >> bits != 0 {
            return Err(FieldTooWide { field: name, value, bits });
        }
        self.fields.push((name, bits, value));
        Ok(self)
    }

    fn finish(&mut self, bus_type: u64, total_bits: u32) -> [u32; N] {
        let mut lo = 0;
        for &(_, bits, value) in self.fields.iter().rev() {
            self.word.set(lo, bits, value);
            lo += bits;
        }
        self.word.set(total_bits - 2, 2, bus_type);
        self.word.0
    }
}

/// Bus type of a protection domain request or answer (the word's top two
/// bits).
pub const BUS_PD: u8 = 0;
/// Bus type of a memory region request or answer.
pub const BUS_MR: u8 = 1;
/// Bus type of a queue pair request or answer.
pub const BUS_QP: u8 = 2;

/// QP requests: the 2-bit request field, TX bits 300:299.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum QpRequest {
    /// CREATE (0): make a QP in `pd_handler`; the answer carries its QPN.
    Create = 0,
    /// DESTROY (1): remove the QP `qpn`.
    Destroy = 1,
    /// MODIFY (2): move QP `qpn` to `state`, applying the attributes that
    /// `attr_mask` selects. [`Tx::decode`] also reads the unused code 3 as
    /// MODIFY.
    Modify = 2,
}

/// A PD request: allocate (`alloc`) or free the PD with `key` / `handler`.
///
/// A 65-bit message: TX bits 64..0 under bus type [`BUS_PD`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdTx {
    /// Bit 64: 1 allocates a PD, 0 frees the one named by `handler`.
    pub alloc: bool,
    /// Bits 63:32: the PD key; the setup sequence draws a random 32-bit key.
    pub key: u32,
    /// Bits 31:0: the handler of the PD to free (0 on allocation; the answer
    /// carries the new one).
    pub handler: u32,
}

/// An MR request. `access` is 0x0F and the key parts 31 bits in the setup
/// sequence.
///
/// A 264-bit message: TX bits 263..0 under bus type [`BUS_MR`]. Only the key
/// parts can be too wide ([`FieldTooWide`] `"lkey_part"` / `"rkey_part"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrTx {
    /// Bit 263: 1 registers a region, 0 frees the one named by `lkey` and
    /// `rkey`.
    pub alloc: bool,
    /// Bits 262:199: the region's local address in the engine's memory.
    pub laddr: u64,
    /// Bits 198:167: the region's length in bytes.
    pub len: u32,
    /// Bits 166:159: access flags (0x0F in the setup sequence).
    pub access: u8,
    /// Bits 158:127: the handler of the PD the region belongs to.
    pub pd_handler: u32,
    /// Bits 126:96: 31-bit part of the lkey, drawn at random by the host.
    pub lkey_part: u32,
    /// Bits 95:65: 31-bit part of the rkey, drawn at random by the host.
    pub rkey_part: u32,
    /// Bit 64: `lkey` and `rkey` name an existing region; the host sets it
    /// on a free request and clears it on allocation.
    pub lkey_or_not: bool,
    /// Bits 63:32: the lkey of the region to free.
    pub lkey: u32,
    /// Bits 31:0: the rkey of the region to free.
    pub rkey: u32,
}

/// A QP request with its attributes (verbs-style mask in `attr_mask`).
///
/// A 301-bit message: TX bits 300..0 under bus type [`BUS_QP`], fields in
/// the order below. A value too wide for its bits makes [`Tx::encode`] return
/// [`FieldTooWide`] named after the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTx {
    /// Bits 300:299: CREATE, DESTROY or MODIFY.
    pub request: QpRequest,
    /// Bits 298:267: the handler of the QP's PD.
    pub pd_handler: u32,
    /// Bits 266:243, 24 bits: the QP to destroy or modify (0 on CREATE).
    pub qpn: u32,
    /// Bits 242:217, 26 bits: which attributes a MODIFY applies (INIT 25,
    /// RTR 0x129300, RTS 0x1E601 in the setup sequence).
    pub attr_mask: u32,
    /// Bits 216:213, 4 bits: the target state (0 RESET, 1 INIT, 2 RTR,
    /// 3 RTS, 6 ERR); the answer reports the QP's state at the same bits.
    pub state: u8,
    /// Bits 212:209, 4 bits: the current state.
    pub current_state: u8,
    /// Bits 208:206, 3 bits: path MTU code (1 = 256 … 5 = 4096).
    pub pmtu: u8,
    /// Bits 205:174: the Q_Key (unused by RC).
    pub qkey: u32,
    /// Bits 173:150, 24 bits: the first PSN the engine expects to receive
    /// (the host's RQ PSN at RTR).
    pub rq_psn: u32,
    /// Bits 149:126, 24 bits: the first PSN the engine sends (the host's SQ
    /// PSN at RTS).
    pub sq_psn: u32,
    /// Bits 125:102, 24 bits: the remote QPN, i.e. the host's QP.
    pub dest_qpn: u32,
    /// Bits 101:94: access flags (0x0E from [`QpTx::rc`]).
    pub access: u8,
    /// Bits 93:54, 40 bits: queue capabilities (0x20_2001_0100 from
    /// [`QpTx::rc`]).
    pub cap: u64,
    /// Bits 53:38: the P_Key (0xFFFF from [`QpTx::rc`]).
    pub pkey: u16,
    /// Bit 37: SQ draining.
    pub sq_draining: bool,
    /// Bits 36:29: RDMA Read and atomic requests the engine may have
    /// outstanding as initiator (16 from [`QpTx::rc`]).
    pub max_rd_atomic: u8,
    /// Bits 28:21: RDMA Read and atomic requests it accepts as responder
    /// (16 from [`QpTx::rc`]).
    pub max_dest_rd_atomic: u8,
    /// Bits 20:16, 5 bits: min RNR NAK timer code (0..31, IBA table 45).
    pub min_rnr_timer: u8,
    /// Bits 15:11, 5 bits: local ACK timeout code, 4.096 µs × 2^value (14
    /// from [`QpTx::rc`]).
    pub timeout: u8,
    /// Bits 10:8, 3 bits: transport retry count.
    pub retry_cnt: u8,
    /// Bits 7:5, 3 bits: RNR retry count; 7 means without limit.
    pub rnr_retry: u8,
    /// Bits 4:1, 4 bits: QP type (2 = RC).
    pub qp_type: u8,
    /// Bit 0: signal a completion for every send.
    pub sq_sig_all: bool,
}

impl QpTx {
    /// The fixed values the engine's setup sequence uses: access 0x0E, cap
    /// 0x2020010100, pkey 0xFFFF, max read atomics 16, timeout 14, RC.
    pub fn rc(request: QpRequest, pd_handler: u32, qpn: u32) -> Self {
        QpTx {
            request,
            pd_handler,
            qpn,
            attr_mask: 0,
            state: 0,
            current_state: 0,
            pmtu: 0,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qpn: 0,
            access: 0x0E,
            cap: 0x20_2001_0100,
            pkey: 0xFFFF,
            sq_draining: false,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 0,
            timeout: 14,
            retry_cnt: 0,
            rnr_retry: 0,
            qp_type: 2,
            sq_sig_all: false,
        }
    }
}

/// A MetaDataTx word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tx {
    /// Bus type [`BUS_PD`]: allocate or free a protection domain.
    Pd(PdTx),
    /// Bus type [`BUS_MR`]: register or free a memory region.
    Mr(MrTx),
    /// Bus type [`BUS_QP`]: create, destroy or modify a queue pair.
    Qp(QpTx),
}

impl Tx {
    /// The word as the registers at [`REG_TX`] take it.
    pub fn encode(&self) -> Result<[u32; TX_REGS], FieldTooWide> {
        let mut p = Packer::<TX_REGS>::new();
        let bus = match *self {
            Tx::Pd(pd) => {
                p.field("alloc", 1, pd.alloc as u64)?.field("key", 32, pd.key as u64)?.field(
                    "handler",
                    32,
                    pd.handler as u64,
                )?;
                BUS_PD
            }
            Tx::Mr(m) => {
                p.field("alloc", 1, m.alloc as u64)?
                    .field("laddr", 64, m.laddr)?
                    .field("len", 32, m.len as u64)?
                    .field("access", 8, m.access as u64)?
                    .field("pd_handler", 32, m.pd_handler as u64)?
                    .field("lkey_part", 31, m.lkey_part as u64)?
                    .field("rkey_part", 31, m.rkey_part as u64)?
                    .field("lkey_or_not", 1, m.lkey_or_not as u64)?
                    .field("lkey", 32, m.lkey as u64)?
                    .field("rkey", 32, m.rkey as u64)?;
                BUS_MR
            }
            Tx::Qp(q) => {
                p.field("request", 2, q.request as u64)?
                    .field("pd_handler", 32, q.pd_handler as u64)?
                    .field("qpn", 24, q.qpn as u64)?
                    .field("attr_mask", 26, q.attr_mask as u64)?
                    .field("state", 4, q.state as u64)?
                    .field("current_state", 4, q.current_state as u64)?
                    .field("pmtu", 3, q.pmtu as u64)?
                    .field("qkey", 32, q.qkey as u64)?
                    .field("rq_psn", 24, q.rq_psn as u64)?
                    .field("sq_psn", 24, q.sq_psn as u64)?
                    .field("dest_qpn", 24, q.dest_qpn as u64)?
                    .field("access", 8, q.access as u64)?
                    .field("cap", 40, q.cap)?
                    .field("pkey", 16, q.pkey as u64)?
                    .field("sq_draining", 1, q.sq_draining as u64)?
                    .field("max_rd_atomic", 8, q.max_rd_atomic as u64)?
                    .field("max_dest_rd_atomic", 8, q.max_dest_rd_atomic as u64)?
                    .field("min_rnr_timer", 5, q.min_rnr_timer as u64)?
                    .field("timeout", 5, q.timeout as u64)?
                    .field("retry_cnt", 3, q.retry_cnt as u64)?
                    .field("rnr_retry", 3, q.rnr_retry as u64)?
                    .field("qp_type", 4, q.qp_type as u64)?
                    .field("sq_sig_all", 1, q.sq_sig_all as u64)?;
                BUS_QP
            }
        };
        Ok(p.finish(bus as u64, TX_BITS))
    }

    /// Reads a TX word back (the engine model's side of the bus).
    pub fn decode(regs: &[u32; TX_REGS]) -> Result<Tx, RxError> {
        let w = Word(*regs);
        match w.get(TX_BITS - 2, 2) as u8 {
            BUS_PD => {
                let mut r = Unpacker { w, hi: 65 };
                Ok(Tx::Pd(PdTx { alloc: r.flag(), key: r.u32(32), handler: r.u32(32) }))
            }
            BUS_MR => {
                let mut r = Unpacker { w, hi: 264 };
                Ok(Tx::Mr(MrTx {
                    alloc: r.flag(),
                    laddr: r.take(64),
                    len: r.u32(32),
                    access: r.u32(8) as u8,
                    pd_handler: r.u32(32),
                    lkey_part: r.u32(31),
                    rkey_part: r.u32(31),
                    lkey_or_not: r.flag(),
                    lkey: r.u32(32),
                    rkey: r.u32(32),
                }))
            }
            BUS_QP => {
                let mut r = Unpacker { w, hi: 301 };
                let request = match r.take(2) {
                    0 => QpRequest::Create,
                    1 => QpRequest::Destroy,
                    _ => QpRequest::Modify,
                };
                Ok(Tx::Qp(QpTx {
                    request,
                    pd_handler: r.u32(32),
                    qpn: r.u32(24),
                    attr_mask: r.u32(26),
                    state: r.u32(4) as u8,
                    current_state: r.u32(4) as u8,
                    pmtu: r.u32(3) as u8,
                    qkey: r.u32(32),
                    rq_psn: r.u32(24),
                    sq_psn: r.u32(24),
                    dest_qpn: r.u32(24),
                    access: r.u32(8) as u8,
                    cap: r.take(40),
                    pkey: r.u32(16) as u16,
                    sq_draining: r.flag(),
                    max_rd_atomic: r.u32(8) as u8,
                    max_dest_rd_atomic: r.u32(8) as u8,
                    min_rnr_timer: r.u32(5) as u8,
                    timeout: r.u32(5) as u8,
                    retry_cnt: r.u32(3) as u8,
                    rnr_retry: r.u32(3) as u8,
                    qp_type: r.u32(4) as u8,
                    sq_sig_all: r.flag(),
                }))
            }
            other => Err(RxError::BusType(other)),
        }
    }
}

/// Reads a right-aligned message from its top field down: a message of
/// `hi` bits occupies bits `hi-1 .. 0`.
struct Unpacker<const N: usize> {
    w: Word<N>,
    hi: u32,
}

impl<const N: usize> Unpacker<N> {
    fn take(&mut self, bits: u32) -> u64 {
        self.hi -= bits;
        self.w.get(self.hi, bits)
    }

    fn u32(&mut self, bits: u32) -> u32 {
        self.take(bits) as u32
    }

    fn flag(&mut self) -> bool {
        self.take(1) == 1
    }
}

/// The fields of a MetaDataRx word that the format defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// Answer to a [`PdTx`] (bus type [`BUS_PD`]).
    Pd {
        /// Bit 64: the request succeeded.
        success: bool,
        /// Bits 63:32: the PD's handler, which later requests name it by.
        handler: u32,
    },
    /// Answer to an [`MrTx`] (bus type [`BUS_MR`]).
    Mr {
        /// Bit 262: the request succeeded.
        success: bool,
        /// Bits 63:32: the region's lkey.
        lkey: u32,
        /// Bits 31:0: the region's rkey.
        rkey: u32,
    },
    /// Answer to a [`QpTx`] (bus type [`BUS_QP`]).
    Qp {
        /// Bit 273: the request succeeded.
        success: bool,
        /// Bits 272:249, 24 bits: the QP's number (the new one after CREATE).
        /// [`Rx::encode`] keeps only the low 24 bits.
        qpn: u32,
        /// Bits 216:213, 4 bits: the QP's state, coded as in
        /// [`QpTx::state`]. [`Rx::encode`] keeps only the low 4 bits.
        state: u8,
    },
}

impl Rx {
    /// Reads a MetaDataRx word from the [`RX_REGS`] registers at [`REG_RX`].
    /// Bits the format does not define are ignored, except that bits above
    /// bit 275 are [`RxError::StrayBits`]; bus type 3 is
    /// [`RxError::BusType`].
    pub fn decode(regs: &[u32; RX_REGS]) -> Result<Rx, RxError> {
        let top = RX_BITS % 32;
        if regs[RX_REGS - 1] >> top != 0 {
            return Err(RxError::StrayBits { index: RX_REGS - 1, value: regs[RX_REGS - 1] });
        }
        let w = Word(*regs);
        match w.get(RX_BITS - 2, 2) as u8 {
            BUS_PD => Ok(Rx::Pd { success: w.get(64, 1) == 1, handler: w.get(32, 32) as u32 }),
            BUS_MR => Ok(Rx::Mr { success: w.get(262, 1) == 1, lkey: w.get(32, 32) as u32, rkey: w.get(0, 32) as u32 }),
            BUS_QP => {
                Ok(Rx::Qp { success: w.get(273, 1) == 1, qpn: w.get(249, 24) as u32, state: w.get(213, 4) as u8 })
            }
            other => Err(RxError::BusType(other)),
        }
    }

    /// The engine model's answer word.
    pub fn encode(&self) -> [u32; RX_REGS] {
        let mut w = Word([0; RX_REGS]);
        let bus = match *self {
            Rx::Pd { success, handler } => {
                w.set(64, 1, success as u64);
                w.set(32, 32, handler as u64);
                BUS_PD
            }
            Rx::Mr { success, lkey, rkey } => {
                w.set(262, 1, success as u64);
                w.set(32, 32, lkey as u64);
                w.set(0, 32, rkey as u64);
                BUS_MR
            }
            Rx::Qp { success, qpn, state } => {
                w.set(273, 1, success as u64);
                w.set(249, 24, (qpn & 0xFF_FFFF) as u64);
                w.set(213, 4, (state & 0xF) as u64);
                BUS_QP
            }
        };
        w.set(RX_BITS - 2, 2, bus as u64);
        w.0
    }
}
