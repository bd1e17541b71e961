//! Controller properties (registers) read and written with Property Get/Set.

/// Property offset of Controller Capabilities (CAP), an 8-byte property;
/// see [`Cap`].
pub const REG_CAP: u32 = 0x00;
/// Property offset of Version (VS), a 4-byte property laid out like
/// Identify Controller VER (major 31:16, minor 15:8, tertiary 7:0).
pub const REG_VS: u32 = 0x08;
/// Property offset of Controller Configuration (CC), a 4-byte property;
/// see the `CC_*` constants.
pub const REG_CC: u32 = 0x14;
/// Property offset of Controller Status (CSTS), a 4-byte property; see the
/// `CSTS_*` constants.
pub const REG_CSTS: u32 = 0x1C;

/// CC.EN (bit 0), Enable: set to start the controller, clear to reset it.
pub const CC_ENABLE: u32 = 1;
/// Bit position of CC.CSS, I/O Command Set Selected (bits 6:4).
pub const CC_CSS_SHIFT: u32 = 4;
/// CC.CSS = 110b: all I/O command sets the controller supports (what a host
/// selects when [`Cap::supports_csi`] is true).
pub const CC_CSS_CSI: u32 = 6 << CC_CSS_SHIFT;
/// Bit position of CC.MPS, Memory Page Size (bits 10:7; page size is
/// 2^(12 + MPS) bytes).
pub const CC_MPS_SHIFT: u32 = 7;
/// CC.SHN = 01b (bits 15:14): Shutdown Notification, normal shutdown.
pub const CC_SHN_NORMAL: u32 = 1 << 14;
/// CC.IOSQES = 6 (bits 19:16): I/O submission queue entries of 2^6 = 64
/// bytes.
pub const CC_IOSQES: u32 = 6 << 16;
/// CC.IOCQES = 4 (bits 23:20): I/O completion queue entries of 2^4 = 16
/// bytes.
pub const CC_IOCQES: u32 = 4 << 20;

/// CSTS.RDY (bit 0), Ready: the controller is ready to process commands
/// after CC.EN was set.
pub const CSTS_READY: u32 = 1;
/// CSTS.CFS (bit 1), Controller Fatal Status; bring-up treats it as fatal.
pub const CSTS_FATAL: u32 = 2;
/// Mask of CSTS.SHST, Shutdown Status (bits 3:2).
pub const CSTS_SHST_MASK: u32 = 3 << 2;
/// CSTS.SHST = 10b: shutdown processing complete.
pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;

/// Controller Capabilities (CAP, property offset 0x00), the raw 64-bit
/// value with accessors for the fields the initiator reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum Queue Entries Supported (MQES, bits 15:0), 0's based: the
    /// largest queue depth is `mqes() + 1`.
    pub fn mqes(self) -> u16 {
        self.0 as u16
    }
    /// Timeout (TO, bits 31:24): worst-case time for CSTS.RDY to change
    /// after CC.EN does, in 500 ms units.
    pub fn to(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// Command Sets Supported (CSS, bits 44:37), as an 8-bit mask (bit 0
    /// NVM command set).
    pub fn css(self) -> u8 {
        (self.0 >> 37) as u8
    }
    /// Whether CC.CSS may select "I/O command set specific" (CSS bit 6).
    pub fn supports_csi(self) -> bool {
        self.css() & (1 << 6) != 0
    }
    /// Memory Page Size Minimum (MPSMIN, bits 51:48): the smallest page is
    /// 2^(12 + MPSMIN) bytes.
    pub fn mpsmin(self) -> u8 {
        ((self.0 >> 48) & 0xF) as u8
    }
    /// Memory Page Size Maximum (MPSMAX, bits 55:52): the largest page is
    /// 2^(12 + MPSMAX) bytes.
    pub fn mpsmax(self) -> u8 {
        ((self.0 >> 52) & 0xF) as u8
    }
    /// The host page size the initiator uses: 4096 << MPSMIN.
    pub fn page_size(self) -> u64 {
        4096u64 << self.mpsmin()
    }

    /// A CAP value with the given MQES (0's based), TO (500 ms units), CSS
    /// mask, MPSMIN and MPSMAX (low 4 bits used), and CQR (bit 16,
    /// Contiguous Queues Required) set; for the target model.
    pub fn build(mqes: u16, to: u8, css: u8, mpsmin: u8, mpsmax: u8) -> Cap {
        Cap(mqes as u64
            | 1 << 16 // CQR: queues must be contiguous, as nvmet reports
            | (to as u64) << 24
            | (css as u64) << 37
            | ((mpsmin & 0xF) as u64) << 48
            | ((mpsmax & 0xF) as u64) << 52)
    }
}

/// The CC value bring-up writes to enable the controller described by
/// `cap`: EN, IOSQES 6, IOCQES 4, MPS = CAP.MPSMIN, and CSS 110b when
/// [`Cap::supports_csi`] is true.
pub fn cc_enable(cap: Cap) -> u32 {
    let mut cc = CC_ENABLE | CC_IOSQES | CC_IOCQES | ((cap.mpsmin() as u32) << CC_MPS_SHIFT);
    if cap.supports_csi() {
        cc |= CC_CSS_CSI;
    }
    cc
}

/// How long bring-up may poll CSTS.RDY: (CAP.TO + 1) x 500 ms, so never
/// less than 0.5 s.
pub fn ready_timeout(cap: Cap) -> std::time::Duration {
    std::time::Duration::from_millis(500 * (cap.to() as u64 + 1))
}
