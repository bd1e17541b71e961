//! A server node and client nodes on one simulated fabric.
#![allow(dead_code)]

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::inproc::{complete_get, complete_put, prepare_get, prepare_put};
use rctb_core::rcsession::*;
use rctb_core::transport::*;
use rctb_sim::{NodeConfig, NodeId, Sim, SimTransport};

pub type Manager = SessionManager<SimTransport, ChaCha8Rng>;

pub struct Rig {
    pub sim: Sim,
    pub server_node: NodeId,
    pub m: Manager,
    pub clients: Vec<RcClient<SimTransport>>,
}

pub fn alice() -> PrincipalId {
    PrincipalId::from_credentials("alice", "alice-secret")
}

pub fn mallory() -> PrincipalId {
    PrincipalId::from_credentials("mallory", "mallory-secret")
}

/// A pattern derived from `seed` (distinct per object).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn rig(seed: u64, cfg: ServerConfig, clients: usize) -> Rig {
    rig_with(seed, cfg, clients, ClientConfig::default())
}

pub fn rig_with(seed: u64, cfg: ServerConfig, clients: usize, ccfg: ClientConfig) -> Rig {
    let sim = Sim::new(seed);
    let server_node = sim.add_node(NodeConfig::new("server", "10.0.0.1".parse().unwrap())).unwrap();
    let m = SessionManager::new(sim.transport(server_node), ChaCha8Rng::seed_from_u64(seed), cfg).unwrap();
    let clients = (0..clients)
        .map(|i| {
            let ip = format!("10.0.1.{}", i + 1);
            let n = sim.add_node(NodeConfig::new(format!("client{i}"), ip.parse().unwrap())).unwrap();
            RcClient::new(sim.transport(n), ccfg).unwrap()
        })
        .collect();
    Rig { sim, server_node, m, clients }
}

impl Rig {
    /// A whole GET through client `c`: PREPARE (staged), connect, READY
    /// (blocking on the server), client completion, finish_final.
    pub fn get(&mut self, c: usize, who: PrincipalId, object: &[u8], cookie: u32) -> Result<Vec<u8>, String> {
        let client = &mut self.clients[c];
        let (mut x, req) =
            client.begin(who, Op::Get, "/bucket/obj", object.len() as u64, 0x1234 + c as u32, cookie).unwrap();
        let reply = prepare_get(&mut self.m, &req, object, "etag-1").map_err(|e| e.to_string())?;
        let ready = client.connect(&mut x, &reply, true).map_err(|e| e.to_string())?;
        client.ready_sent(&mut x);
        let r = self.m.ready_blocking(&ready).map_err(|e| e.to_string())?;
        if r.outcome != ReadyOutcome::Ok {
            return Err(format!("outcome {}", r.outcome));
        }
        assert_eq!(r.bytes_transferred, object.len() as u64);
        assert_eq!(r.cookie_echo, cookie);
        assert_eq!(r.etag, "etag-1");
        complete_get(&mut self.m, &reply.session).unwrap();
        self.drive_client(c, &mut x)?;
        let mut buf = vec![0u8; object.len()];
        self.clients[c].read_payload(&mut buf).unwrap();
        Ok(buf)
    }

    /// A whole PUT through client `c`; returns what the server received.
    pub fn put(&mut self, c: usize, who: PrincipalId, object: &[u8], cookie: u32) -> Result<Vec<u8>, String> {
        let client = &mut self.clients[c];
        client.write_payload(object).unwrap();
        let (mut x, req) =
            client.begin(who, Op::Put, "/bucket/obj", object.len() as u64, 0x4321 + c as u32, cookie).unwrap();
        let reply = prepare_put(&mut self.m, &req).map_err(|e| e.to_string())?;
        let ready = client.connect(&mut x, &reply, false).map_err(|e| e.to_string())?;
        let start = self.m.ready(&ready).map_err(|e| e.to_string())?;
        self.clients[c].start_put(&mut x).map_err(|e| e.to_string())?;
        let r = match start {
            ReadyStart::Done => self.m.done_reply(&reply.session).unwrap(),
            ReadyStart::Pending(t) => self.finish(t).map_err(|e| e.to_string())?,
        };
        if r.outcome != ReadyOutcome::Ok {
            return Err(format!("outcome {}", r.outcome));
        }
        // READY's OK is the PUT's completion (see RcClient::poll).
        complete_put(&mut self.m, &reply.session).map_err(|e| e.to_string())
    }

    /// Drives the server until `ticket`'s data phase ends.
    pub fn finish(&mut self, ticket: ReadyTicket) -> Result<ReadyReply, RcError> {
        loop {
            self.m.progress();
            if let Some(r) = self.m.take_ready(ticket) {
                return r;
            }
            let (cqs, next) = self.m.wait_set();
            self.m.transport_mut().wait(&cqs, next).unwrap();
        }
    }

    /// Runs the fabric until client `c`'s transfer completes.
    pub fn drive_client(&mut self, c: usize, x: &mut ClientTransfer) -> Result<(), String> {
        for _ in 0..100_000 {
            if self.clients[c].poll(x).map_err(|e| e.to_string())?.is_some() {
                return Ok(());
            }
            if self.sim.step().is_none() {
                return Err("the fabric went idle before the client's completion".into());
            }
        }
        Err("no client completion".into())
    }

    /// Reaps, then checks nothing is held: limits at zero, no leaks, and
    /// only the server PD and the clients' objects alive in the fabric.
    pub fn assert_drained(&mut self) {
        self.sim.run_until_idle();
        self.m.reap();
        let u = self.m.usage();
        assert_eq!((u.sessions, u.staging_bytes, u.qps), (0, 0, 0), "{u:?}");
        assert!(u.per_user.is_empty(), "{u:?}");
        assert_eq!((u.leaked_mrs, u.leaked_qps), (0, 0));
        let live = self.sim.live_resources();
        let n = self.clients.len();
        assert_eq!((live.qps, live.cqs, live.mrs, live.pds), (n, n, n, n), "{live:?}");
    }
}
