//! Where a reactor's capture goes: in memory (taken at the end) or into a
//! file as the frames go. The capture itself, the frames and the file
//! format, is the simulator's ([`rctb_engine::pcap::PcapSink`]: Ethernet /
//! IPv4 / UDP 4791 / BTH / ... / ICRC, nanosecond stamps, little-endian);
//! this backend gives it MAC addresses 02:00:00:00:HI:LO by endpoint index
//! and its clock's stamps, so `rctb decode`, Wireshark and the wiretrace
//! tools read both alike.

use rctb_core::time::Instant;
use rctb_engine::Packet;
use rctb_engine::pcap::PcapSink as Sink;

pub(crate) enum PcapSink {
    Memory(Sink<Vec<u8>>),
    /// The file's buffer is kept by the sink as well as by the pcap
    /// writer (which gives no way back to it) so that it can be flushed.
    File(Sink<SharedFile>, SharedFile),
}

/// The capture file's buffer, shared by the writer and the sink.
#[derive(Clone)]
pub(crate) struct SharedFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl PcapSink {
    /// A capture into `path` (created or truncated).
    pub fn file(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let file = SharedFile(std::sync::Arc::new(std::sync::Mutex::new(file)));
        let sink = Sink::new(file.clone()).map_err(std::io::Error::other)?;
        Ok(PcapSink::File(sink, file))
    }

    /// Writes out what a file capture holds in its buffer (a write error
    /// ends nothing: the capture is a witness, not the data path).
    pub fn flush(&mut self) {
        if let PcapSink::File(_, file) = self {
            use std::io::Write;
            let _ = file.flush();
        }
    }

    pub fn new() -> Self {
        PcapSink::Memory(Sink::in_memory())
    }

    /// Records `pkt` as sent at `at` (a frame the encoder refuses is left out).
    pub fn record(&mut self, at: Instant, src_mac: [u8; 6], dst_mac: [u8; 6], pkt: &Packet) {
        match self {
            PcapSink::Memory(s) => s.record(at, src_mac, dst_mac, pkt),
            PcapSink::File(s, _) => s.record(at, src_mac, dst_mac, pkt),
        }
    }

    /// The in-memory capture's bytes (`None` for a file capture).
    pub fn into_bytes(self) -> Option<Vec<u8>> {
        match self {
            PcapSink::Memory(s) => Some(s.into_inner()),
            PcapSink::File(_, mut file) => {
                use std::io::Write;
                let _ = file.flush();
                None
            }
        }
    }
}
