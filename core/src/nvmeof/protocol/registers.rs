//! Controller properties (registers) read and written with Property Get/Set.

/// Property offsets.
pub const REG_CAP: u32 = 0x00;
pub const REG_VS: u32 = 0x08;
pub const REG_CC: u32 = 0x14;
pub const REG_CSTS: u32 = 0x1C;

/// CC fields.
pub const CC_ENABLE: u32 = 1;
pub const CC_CSS_SHIFT: u32 = 4;
pub const CC_CSS_CSI: u32 = 6 << CC_CSS_SHIFT;
pub const CC_MPS_SHIFT: u32 = 7;
pub const CC_SHN_NORMAL: u32 = 1 << 14;
pub const CC_IOSQES: u32 = 6 << 16;
pub const CC_IOCQES: u32 = 4 << 20;

/// CSTS fields.
pub const CSTS_READY: u32 = 1;
pub const CSTS_FATAL: u32 = 2;
pub const CSTS_SHST_MASK: u32 = 3 << 2;
pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;

/// Controller Capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum queue entries supported, 0's based.
    pub fn mqes(self) -> u16 {
        self.0 as u16
    }
    /// Worst-case time to ready, in 500 ms units.
    pub fn to(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// Command sets supported (bits 44:37).
    pub fn css(self) -> u8 {
        (self.0 >> 37) as u8
    }
    /// Whether CC.CSS may select "I/O command set specific" (CSS bit 6).
    pub fn supports_csi(self) -> bool {
        self.css() & (1 << 6) != 0
    }
    pub fn mpsmin(self) -> u8 {
        ((self.0 >> 48) & 0xF) as u8
    }
    pub fn mpsmax(self) -> u8 {
        ((self.0 >> 52) & 0xF) as u8
    }
    /// The host page size the initiator uses: 4096 << MPSMIN.
    pub fn page_size(self) -> u64 {
        4096u64 << self.mpsmin()
    }

    pub fn build(mqes: u16, to: u8, css: u8, mpsmin: u8, mpsmax: u8) -> Cap {
        Cap(mqes as u64
            | 1 << 16 // CQR: queues must be contiguous, as nvmet reports
            | (to as u64) << 24
            | (css as u64) << 37
            | ((mpsmin & 0xF) as u64) << 48
            | ((mpsmax & 0xF) as u64) << 52)
    }
}

/// The CC value of the bring-up sequence for `cap`.
pub fn cc_enable(cap: Cap) -> u32 {
    let mut cc = CC_ENABLE | CC_IOSQES | CC_IOCQES | ((cap.mpsmin() as u32) << CC_MPS_SHIFT);
    if cap.supports_csi() {
        cc |= CC_CSS_CSI;
    }
    cc
}

/// How long bring-up may poll CSTS.RDY: max(0.5 s, (CAP.TO + 1) x 0.5 s).
pub fn ready_timeout(cap: Cap) -> std::time::Duration {
    std::time::Duration::from_millis(500 * (cap.to() as u64 + 1))
}
