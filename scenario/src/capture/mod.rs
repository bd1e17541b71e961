//! The capture tools: pcap files read back, frame by frame or per
//! connection. Each module is re-exported at the crate root
//! (`rctb_scenario::decode`, `rctb_scenario::wiretrace`), its public path.

pub mod decode;
pub mod wiretrace;
