//! The service across threads, on a mock transport (the simulator is
//! single-threaded): admissions, Close waiting for every admitted call,
//! idempotent Close from several threads.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::transport::*;

struct CountingRng(u64);

impl rand_core::RngCore for CountingRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = self.next_u64() as u8;
        }
    }
}

fn mock() -> MockTransport {
    let mut t = MockTransport::new();
    t.expect_port().returning(|_| {
        Ok(PortInfo {
            port: 1,
            state: PortState::Active,
            active_mtu: Mtu::Mtu1024,
            max_mtu: Mtu::Mtu4096,
            gids: vec![GidEntry {
                index: 1,
                gid: Gid::from_ipv4("10.0.0.1".parse().unwrap()),
                gid_type: GidType::RoceV2,
            }],
        })
    });
    t.expect_now().returning(|| crate::time::Instant::ZERO);
    t
}

#[test]
fn the_service_is_send_and_sync() {
    fn shared<X: Send + Sync>() {}
    shared::<RcService<MockTransport, CountingRng>>();
}

#[test]
fn close_waits_for_every_admitted_call_and_is_idempotent() {
    let m = SessionManager::new(mock(), CountingRng(0), ServerConfig::default()).unwrap();
    let svc = RcService::new(m);
    let left = AtomicUsize::new(0);
    let entered = Barrier::new(5);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let a = svc.try_enter().expect("admitted before close");
                entered.wait();
                // Close has begun (or will): new calls are refused, ours runs on.
                while !svc.is_closing() {
                    std::thread::yield_now();
                }
                assert!(svc.try_enter().is_none());
                assert_eq!(a.with(|m| m.sessions().len()), 0);
                left.fetch_add(1, Ordering::SeqCst);
                drop(a);
            });
        }
        entered.wait();
        let closers: Vec<_> = (0..2).map(|_| s.spawn(|| svc.close())).collect();
        for c in closers {
            c.join().unwrap();
        }
        // Both closes returned only after every admitted call left.
        assert_eq!(left.load(Ordering::SeqCst), 4);
        assert_eq!(svc.active(), 0);
    });
    assert!(svc.try_enter().is_none());
}

mod client;
mod datapath;
mod fake;
mod hipobj;
mod inproc;
mod manager;
mod reaper;
mod rig;
mod service;
