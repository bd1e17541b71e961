//! The environment a program gives the library (see the crate docs), read
//! once. A bad value is reported once, naming the variable and the rule,
//! and the library then offers no device (`ibv_get_device_list` fails with
//! EINVAL) rather than guess.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::OnceLock;

use rctb_udp::faults::FaultSpec;

/// The device addresses when `RCTB_IBV_ADDR` is not set.
pub(crate) const DEFAULT_ADDR: Ipv4Addr = Ipv4Addr::LOCALHOST;

#[derive(Debug)]
pub(crate) struct Config {
    /// One device per address, `rctb0` first.
    pub addrs: Vec<Ipv4Addr>,
    pub faults: Option<FaultSpec>,
    pub pcap: Option<PathBuf>,
    pub stats: Option<StatsSink>,
}

#[derive(Debug, Clone)]
pub(crate) enum StatsSink {
    Stderr,
    File(PathBuf),
}

/// A variable whose value breaks its rule.
#[derive(Debug)]
pub(crate) struct ConfigError {
    pub var: &'static str,
    pub value: String,
    pub rule: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rctb libibverbs: {}={:?}: {}", self.var, self.value, self.rule)
    }
}

/// The configuration, read at the first call that needs it.
pub(crate) fn get() -> Result<&'static Config, &'static ConfigError> {
    static CONFIG: OnceLock<Result<Config, ConfigError>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let r = read(|var| std::env::var(var).ok());
            if let Err(e) = &r {
                eprintln!("{e}");
            }
            r
        })
        .as_ref()
}

/// `{pid}` in a file name becomes the process id (two processes of one
/// test can share one variable).
fn expand(path: &str) -> PathBuf {
    PathBuf::from(path.replace("{pid}", &std::process::id().to_string()))
}

pub(crate) fn read(env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let err = |var, value: &str, rule: &str| ConfigError { var, value: value.into(), rule: rule.into() };
    let addrs = match env("RCTB_IBV_ADDR") {
        None => vec![DEFAULT_ADDR],
        Some(v) => {
            let mut addrs = Vec::new();
            for item in v.split(',').map(str::trim) {
                let ip: Ipv4Addr = item.parse().map_err(|_| {
                    err("RCTB_IBV_ADDR", &v, "comma-separated IPv4 addresses of this host, e.g. 127.0.0.2")
                })?;
                if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
                    return Err(err("RCTB_IBV_ADDR", &v, "each address is one unicast address of this host"));
                }
                if addrs.contains(&ip) {
                    return Err(err("RCTB_IBV_ADDR", &v, "each address at most once (one device per address)"));
                }
                addrs.push(ip);
            }
            addrs
        }
    };
    let faults = match env("RCTB_IBV_FAULTS") {
        None => None,
        Some(v) => Some(
            v.parse::<FaultSpec>()
                .map_err(|e| err("RCTB_IBV_FAULTS", &v, &format!("{}={:?}: {}", e.field, e.value, e.rule)))?,
        ),
    };
    let pcap = env("RCTB_IBV_PCAP").filter(|v| !v.is_empty()).map(|v| expand(&v));
    let stats = env("RCTB_IBV_STATS").filter(|v| !v.is_empty() && v != "0").map(|v| match v.as_str() {
        "1" | "stderr" => StatsSink::Stderr,
        path => StatsSink::File(expand(path)),
    });
    Ok(Config { addrs, faults, pcap, stats })
}
