//! One session server and one client, one session at a time: the rig of
//! the sessions-per-second benchmark (`sim/benches/rcsession.rs`) and of
//! the instruction count per session (`sim/examples/session_cost.rs`).

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::Transport;
use rctb_core::rcsession::inproc::{complete_get, complete_put, prepare_get, prepare_put};
use rctb_core::rcsession::*;
use rctb_core::time::Duration;

/// One session server and one client, each on its own transport (two nodes
/// of a fabric: the benchmarks put the server at 10.0.0.1, the client at
/// 10.0.0.2), running one session at a time from PREPARE to reaped.
/// [`SessionPair::transfer`] blocks in the transports' `wait` until the
/// session is reaped; every failure is a `String` naming the step.
#[derive(Debug)]
pub struct SessionPair<T: Transport> {
    /// The session server.
    pub server: SessionManager<T, ChaCha8Rng>,
    /// Its one client.
    pub client: RcClient<T>,
    principal: PrincipalId,
    sessions: u64,
    got: Vec<u8>,
}

impl<T: Transport> SessionPair<T> {
    /// A pair whose client region holds objects up to `capacity` bytes; the
    /// server's token RNG is seeded with `seed`.
    pub fn new(seed: u64, capacity: u64, server: T, client: T) -> Result<Self, String> {
        let server = SessionManager::new(server, ChaCha8Rng::seed_from_u64(seed), ServerConfig::default())
            .map_err(|e| e.to_string())?;
        let client = RcClient::new(client, {
            let mut client_config = ClientConfig::default();
            client_config.capacity = capacity;
            client_config
        })
        .map_err(|e| e.to_string())?;
        Ok(SessionPair {
            server,
            client,
            principal: PrincipalId::from_credentials("bench", "secret"),
            sessions: 0,
            got: vec![0; capacity as usize],
        })
    }

    /// Sessions run so far.
    pub fn sessions(&self) -> u64 {
        self.sessions
    }

    /// One session: PREPARE (a GET stages `object`), the client connects,
    /// READY, the data phase, the client's completion, the final step (GET)
    /// or the commit (PUT, whose received bytes are compared with
    /// `object`), and the reaper. Errors describe the failing step.
    pub fn transfer(&mut self, op: Op, object: &[u8]) -> Result<(), String> {
        let n = self.sessions;
        self.sessions += 1;
        let size = object.len() as u64;
        let (mut x, req) = self
            .client
            .begin(self.principal, op, "/bench/object", size, (n as u32).wrapping_mul(7919) + 1, n as u32 | 1)
            .map_err(|e| format!("begin: {e}"))?;
        if op == Op::Put {
            self.client.write_payload(object).map_err(|e| format!("write_payload: {e}"))?;
        }
        let reply = match op {
            Op::Get => prepare_get(&mut self.server, &req, object, "etag"),
            Op::Put => prepare_put(&mut self.server, &req),
        }
        .map_err(|e| format!("PREPARE: {e}"))?;
        let ready = self.client.connect(&mut x, &reply, true).map_err(|e| format!("connect: {e}"))?;
        let ticket = match self.server.ready(&ready).map_err(|e| format!("READY: {e}"))? {
            ReadyStart::Pending(t) => t,
            ReadyStart::Done => return Err("READY moved no data".into()),
        };
        match op {
            Op::Put => self.client.start_put(&mut x).map_err(|e| format!("start_put: {e}"))?,
            Op::Get => self.client.ready_sent(&mut x),
        }
        let outcome = loop {
            self.server.progress();
            if let Some(r) = self.server.take_ready(ticket) {
                break r.map_err(|e| format!("READY result: {e}"))?.outcome;
            }
            let (cqs, next) = self.server.wait_set();
            self.server.transport_mut().wait(&cqs, next).map_err(|e| format!("wait: {e}"))?;
        };
        if outcome != ReadyOutcome::Ok {
            return Err(format!("READY answered {outcome:?}"));
        }
        match op {
            Op::Get => {
                while self.client.poll(&mut x).map_err(|e| format!("client: {e}"))?.is_none() {
                    let cq = self.client.cq();
                    let until = self.client.transport().now() + Duration::from_millis(1);
                    self.client.transport_mut().wait(&[cq], until).map_err(|e| format!("wait: {e}"))?;
                }
                complete_get(&mut self.server, &reply.session).map_err(|e| format!("finish_final: {e}"))?;
                let got = &mut self.got[..object.len()];
                self.client.read_payload(got).map_err(|e| format!("read_payload: {e}"))?;
                if got != object {
                    return Err(format!("session {n}: the GET's bytes differ from the object"));
                }
            }
            Op::Put => {
                let data = complete_put(&mut self.server, &reply.session).map_err(|e| format!("commit: {e}"))?;
                if data != object {
                    return Err(format!("session {n}: the PUT's bytes differ from the object"));
                }
            }
        }
        self.server.reap();
        if self.server.usage().sessions != 0 {
            return Err(format!("session {n} was not reaped: {:?}", self.server.sessions()));
        }
        Ok(())
    }
}
