//! Durability: what a flush hands the store, what a crash loses, and a
//! store that fails.

use std::cell::RefCell;
use std::rc::Rc;

use rctb_core::Transport;
use rctb_core::nvmeof::{Buffer, NvmeError};
use rctb_models::nvme::{DurableStore, TargetConfig};

use crate::{NQN, config, connect, pattern, setup};

#[test]
fn a_target_crash_fails_io_and_loses_unflushed_writes() {
    let s = setup(9, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(8192).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &pattern(8192, 1)).unwrap();
    c.write(&ns, 0, Buffer::slice(mr, 0, 4096)).unwrap();
    c.flush(&ns).unwrap();
    c.write(&ns, 1, Buffer::slice(mr, 4096, 4096)).unwrap();
    {
        let mut t = s.sim.transport(s.sim.node("target").unwrap());
        s.target.borrow_mut().crash(&mut t);
    }
    let e = c.read(&ns, 0, Buffer::host(mr)).unwrap_err();
    assert!(matches!(e, NvmeError::Disconnected { .. } | NvmeError::Completion { .. }), "{e:?}");
    c.close();
    s.target.borrow_mut().restart(&mut s.sim.transport(s.sim.node("target").unwrap()));
    let data = s.target.borrow().namespace_data(NQN, 2).unwrap()[..8192].to_vec();
    assert!(data[..4096] == pattern(8192, 1)[..4096], "flushed block survives");
    assert!(data[4096..].iter().all(|&b| b == 0), "unflushed block is lost");
    // After the restart, a new controller works.
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(4096).unwrap();
    c.read(&ns, 0, Buffer::host(mr)).unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![0u8; 4096];
    c.transport().mr_read(mr.id, 0, &mut got).unwrap();
    assert!(got[..] == pattern(8192, 1)[..4096]);
}

/// One store write: (nsid, byte offset, bytes).
type Stored = (u32, u64, Vec<u8>);

/// A store that keeps what it is handed: (nsid, byte offset, bytes) per
/// write, and one `sync` line per namespace synced; or fails every write.
#[derive(Clone, Default)]
struct Recorder {
    log: Rc<RefCell<Vec<Stored>>>,
    syncs: Rc<RefCell<Vec<u32>>>,
    fail: bool,
}

impl DurableStore for Recorder {
    fn write(&mut self, nqn: &str, nsid: u32, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        assert_eq!(nqn, NQN);
        if self.fail {
            return Err(std::io::Error::other("disk on fire"));
        }
        self.log.borrow_mut().push((nsid, at, bytes.to_vec()));
        Ok(())
    }
    fn sync(&mut self, _: &str, nsid: u32) -> std::io::Result<()> {
        self.syncs.borrow_mut().push(nsid);
        Ok(())
    }
}

impl Recorder {
    /// (nsid, offset, length) of what was stored since the last call.
    fn take(&self) -> Vec<(u32, u64, usize)> {
        self.log.borrow_mut().drain(..).map(|(n, at, b)| (n, at, b.len())).collect()
    }
}

#[test]
fn a_flush_hands_the_store_what_it_made_durable_and_a_crash_hands_it_nothing() {
    let s = setup(21, TargetConfig::new(NQN));
    let store = Recorder::default();
    s.target.borrow_mut().set_store(Some(Box::new(store.clone())));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(4 * 4096).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &pattern(4 * 4096, 5)).unwrap();
    // Blocks 3..5 and 7: two runs once flushed, nothing before.
    c.write(&ns, 3, Buffer::slice(mr, 0, 2 * 4096)).unwrap();
    c.write(&ns, 7, Buffer::slice(mr, 2 * 4096, 4096)).unwrap();
    assert!(store.log.borrow().is_empty(), "nothing is stored before a Flush");
    c.flush(&ns).unwrap();
    let log = store.log.borrow().clone();
    assert_eq!(
        log.iter().map(|(n, at, b)| (*n, *at, b.len())).collect::<Vec<_>>(),
        [(2, 3 * 4096, 8192), (2, 7 * 4096, 4096)]
    );
    assert!(log[0].2 == pattern(4 * 4096, 5)[..8192], "the run carries the written bytes");
    assert_eq!(*store.syncs.borrow(), [2], "synced once, before the Flush was answered");
    store.take();
    c.flush(&ns).unwrap();
    assert_eq!(store.take(), [], "a second Flush has nothing new");
    // Written, not flushed, then a crash: lost, so never stored.
    c.write(&ns, 9, Buffer::slice(mr, 0, 4096)).unwrap();
    s.target.borrow_mut().crash(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert_eq!(store.take(), []);
    c.close();
    // After the restart an orderly shutdown writes the cache back.
    s.target.borrow_mut().restart(&mut s.sim.transport(s.sim.node("target").unwrap()));
    let mut c = connect(&s, config(s.addr));
    let ns1 = c.namespace(1).unwrap();
    let mr = c.alloc(1024).unwrap();
    c.write(&ns1, 10, Buffer::host(mr)).unwrap();
    c.close();
    s.target.borrow_mut().shutdown(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert_eq!(store.take(), [(1, 10 * 512, 1024)]);
}

#[test]
fn a_failing_store_fails_the_flush_and_keeps_the_blocks_unflushed() {
    let s = setup(22, TargetConfig::new(NQN));
    s.target.borrow_mut().set_store(Some(Box::new(Recorder { fail: true, ..Recorder::default() })));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(512).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &[0xAB; 512]).unwrap();
    c.write(&ns, 0, Buffer::host(mr)).unwrap();
    let e = c.flush(&ns).unwrap_err();
    assert!(matches!(e, NvmeError::Status { .. }), "{e:?}");
    assert!(e.to_string().contains("internal error (SCT 0x0, SC 0x06)"), "{e}");
    let kept = s.target.borrow().last_error.clone().map(|e| e.to_string()).unwrap_or_default();
    assert!(kept.contains("disk on fire") && kept.contains("namespace 1"), "{kept}");
    // Not durable, so a crash still loses it.
    s.target.borrow_mut().crash(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert!(s.target.borrow().namespace_data(NQN, 1).unwrap()[..512].iter().all(|&b| b == 0));
}
