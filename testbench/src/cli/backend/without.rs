//! The verbs backend's types in a build without it: empty, so the front
//! ends' verbs paths compile in every build and cannot run in this one.
//! Every method matches on the empty field: there is no value to call it on.

use std::net::Ipv4Addr;

use rctb_core::Transport;
use rctb_core::time::Instant;
use rctb_core::transport::*;

/// What [`super::Verbs`] holds in this build: no value exists.
#[derive(Clone, Copy, Debug)]
pub enum Built {}

/// What a [`Device`] holds: no value exists.
#[derive(Clone, Copy, Debug)]
enum Never {}

pub fn built() -> Result<Built, super::NoVerbs> {
    Err(super::NoVerbs)
}

pub fn open(never: Built, _: &str) -> Result<Device, TransportError> {
    match never {}
}

pub fn list_devices(never: Built) -> Result<Vec<super::DeviceFacts>, TransportError> {
    match never {}
}

pub fn no_device_hint(never: Built) -> &'static str {
    match never {}
}

/// Stands for rctb-hw's `VerbsTransport`: no value exists. (A struct with
/// a private empty field, not an empty enum: the front ends' code after
/// opening one stays reachable to the compiler, so it is checked and
/// draws no unreachable-code warnings.)
#[derive(Debug)]
pub struct Device {
    never: Never,
}

/// Why [`Device::detect_gid_index`] failed (never: no device exists).
#[derive(Debug)]
pub enum GidError {}

impl std::fmt::Display for GidError {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl Device {
    pub fn device_name(&self) -> &str {
        match self.never {}
    }
    pub fn device_ipv4(&self) -> Option<Ipv4Addr> {
        match self.never {}
    }
    pub fn detect_gid_index(&self, _: u8, _: Ipv4Addr) -> Result<u32, GidError> {
        match self.never {}
    }
}

impl Transport for Device {
    fn device(&self) -> Result<DeviceInfo> {
        match self.never {}
    }
    fn port(&self, _: u8) -> Result<PortInfo> {
        match self.never {}
    }
    fn alloc_pd(&mut self) -> Result<PdId> {
        match self.never {}
    }
    fn dealloc_pd(&mut self, _: PdId) -> Result<()> {
        match self.never {}
    }
    fn reg_mr(&mut self, _: PdId, _: u64, _: Access) -> Result<MrInfo> {
        match self.never {}
    }
    fn dereg_mr(&mut self, _: MrId) -> Result<()> {
        match self.never {}
    }
    fn mr_info(&self, _: MrId) -> Result<MrInfo> {
        match self.never {}
    }
    fn mr_write(&mut self, _: MrId, _: u64, _: &[u8]) -> Result<()> {
        match self.never {}
    }
    fn mr_read(&self, _: MrId, _: u64, _: &mut [u8]) -> Result<()> {
        match self.never {}
    }
    fn mr_view(&self, _: MrId, _: u64, _: u64, _: &mut dyn MrVisitor) -> Result<()> {
        match self.never {}
    }
    fn create_cq(&mut self, _: u32) -> Result<CqId> {
        match self.never {}
    }
    fn destroy_cq(&mut self, _: CqId) -> Result<()> {
        match self.never {}
    }
    fn create_qp(&mut self, _: &QpInit) -> Result<QpInfo> {
        match self.never {}
    }
    fn modify_qp(&mut self, _: QpId, _: &QpTransition) -> Result<()> {
        match self.never {}
    }
    fn query_qp(&self, _: QpId) -> Result<QpInfo> {
        match self.never {}
    }
    fn destroy_qp(&mut self, _: QpId) -> Result<()> {
        match self.never {}
    }
    fn post_send(&mut self, _: QpId, _: &SendWr<'_>) -> Result<()> {
        match self.never {}
    }
    fn post_recv(&mut self, _: QpId, _: &RecvWr<'_>) -> Result<()> {
        match self.never {}
    }
    fn poll_cq(&mut self, _: CqId, _: usize, _: &mut Vec<Completion>) -> Result<usize> {
        match self.never {}
    }
    fn create_srq(&mut self, _: &SrqInit) -> Result<SrqId> {
        match self.never {}
    }
    fn modify_srq(&mut self, _: SrqId, _: u32) -> Result<()> {
        match self.never {}
    }
    fn destroy_srq(&mut self, _: SrqId) -> Result<()> {
        match self.never {}
    }
    fn post_srq_recv<'a>(&mut self, _: SrqId, _: &RecvWr<'a>) -> Result<()> {
        match self.never {}
    }
    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        match self.never {}
    }
    fn cm_listen(&mut self, _: u16) -> Result<ListenId> {
        match self.never {}
    }
    fn cm_connect(&mut self, _: &ConnectParams) -> Result<(ConnId, QpId)> {
        match self.never {}
    }
    fn cm_accept(&mut self, _: ConnId, _: &AcceptParams) -> Result<QpId> {
        match self.never {}
    }
    fn cm_reject(&mut self, _: ConnId, _: &[u8]) -> Result<()> {
        match self.never {}
    }
    fn cm_disconnect(&mut self, _: ConnId) -> Result<()> {
        match self.never {}
    }
    fn cm_destroy(&mut self, _: ConnId) -> Result<()> {
        match self.never {}
    }
    fn cm_close_listener(&mut self, _: ListenId) -> Result<()> {
        match self.never {}
    }
    fn cm_poll(&mut self) -> Option<CmEvent> {
        match self.never {}
    }
    fn now(&self) -> Instant {
        match self.never {}
    }
    fn wait(&mut self, _: &[CqId], _: Instant) -> Result<Readiness> {
        match self.never {}
    }
}
