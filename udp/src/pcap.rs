//! What a reactor's endpoints send, as a pcap: each frame as the Ethernet
//! / IPv4 / UDP 4791 / BTH / ... / ICRC frame a NIC would send (the
//! simulator's capture format: MAC addresses 02:00:00:00:HI:LO by endpoint
//! index, nanosecond stamps of the reactor's clock, little-endian), so
//! `rctb decode`, Wireshark and the wiretrace tools read both alike.

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rctb_core::time::{Duration, Instant};
use rctb_core::wire::roce::{FrameBuilder, MacAddr};
use rctb_engine::Packet;

pub(crate) struct PcapSink {
    writer: Writer,
    frame: Vec<u8>,
}

/// In memory (taken at the end), or into a file as the frames go.
enum Writer {
    Memory(PcapWriter<Vec<u8>>),
    File(PcapWriter<SharedFile>, SharedFile),
}

/// The capture file's buffer, kept by the sink as well as by the pcap
/// writer (which gives no way back to it) so that the sink can flush it.
#[derive(Clone)]
struct SharedFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

fn header() -> PcapHeader {
    PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        snaplen: 65535,
        endianness: pcap_file::Endianness::Little,
        ..PcapHeader::default()
    }
}

impl PcapSink {
    /// A capture into `path` (created or truncated).
    pub fn file(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let file = SharedFile(std::sync::Arc::new(std::sync::Mutex::new(file)));
        let writer = PcapWriter::with_header(file.clone(), header()).map_err(std::io::Error::other)?;
        Ok(PcapSink { writer: Writer::File(writer, file), frame: Vec::with_capacity(4200) })
    }

    /// Writes out what a file capture holds in its buffer (a write error
    /// ends nothing: the capture is a witness, not the data path).
    pub fn flush(&mut self) {
        if let Writer::File(_, file) = &mut self.writer {
            use std::io::Write;
            let _ = file.flush();
        }
    }

    pub fn new() -> Self {
        let writer = PcapWriter::with_header(Vec::new(), header()).expect("writing to a Vec cannot fail");
        PcapSink { writer: Writer::Memory(writer), frame: Vec::with_capacity(4200) }
    }

    /// Records `pkt` as sent at `at` (a frame the encoder refuses is left out).
    pub fn record(&mut self, at: Instant, src_mac: [u8; 6], dst_mac: [u8; 6], pkt: &Packet) {
        let mut b = FrameBuilder::new(MacAddr(src_mac), MacAddr(dst_mac), pkt.src_ip, pkt.dst_ip);
        b.udp_src_port = pkt.udp_src_port;
        let ext = pkt.ext_headers();
        self.frame.clear();
        if b.build(pkt.bth, ext, &pkt.payload, &mut self.frame).is_err() {
            return;
        }
        let ts = Duration::from_nanos(at.as_nanos());
        let packet = PcapPacket::new(ts, self.frame.len() as u32, &self.frame);
        let _ = match &mut self.writer {
            Writer::Memory(w) => w.write_packet(&packet),
            Writer::File(w, _) => w.write_packet(&packet),
        };
    }

    /// The in-memory capture's bytes (`None` for a file capture).
    pub fn into_bytes(self) -> Option<Vec<u8>> {
        match self.writer {
            Writer::Memory(w) => Some(w.into_writer()),
            Writer::File(_, mut file) => {
                use std::io::Write;
                let _ = file.flush();
                None
            }
        }
    }
}
