//! The engine thread: every backend object (a simulated world, its peer
//! models, controllers, queues, servers) lives on one thread of its own and
//! Python reaches it by sending closures.
//!
//! Why: the simulator is single-threaded by design (`Rc<RefCell<World>>`),
//! and a Python call that blocks (a read waiting for its completion, a
//! channel waiting for a frame) must release the GIL. A closure sent to the
//! engine and a reply waited for with the GIL released satisfies both: the
//! backend never crosses threads, and another Python thread runs meanwhile.
//!
//! A panic inside a job is caught and returned as [`EngineError::Panic`]
//! (a bug in rctb, never the user's fault); the engine keeps serving.
//! Dropping the last [`Engine`] handle stops the thread after the jobs
//! already queued, and everything it owned is dropped there.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// What an engine thread owns: objects by id, of any backend.
#[derive(Default)]
pub struct State {
    next_id: u64,
    objects: BTreeMap<u64, Box<dyn Any>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("objects", &self.objects.len()).finish()
    }
}

impl State {
    /// Stores `v` and returns its id.
    pub fn insert<V: Any>(&mut self, v: V) -> u64 {
        self.next_id += 1;
        self.objects.insert(self.next_id, Box::new(v));
        self.next_id
    }
    pub fn get_mut<V: Any>(&mut self, id: u64) -> Option<&mut V> {
        self.objects.get_mut(&id).and_then(|b| b.downcast_mut())
    }
    pub fn get<V: Any>(&self, id: u64) -> Option<&V> {
        self.objects.get(&id).and_then(|b| b.downcast_ref())
    }
    /// Every object of type `V`.
    pub fn values_mut<V: Any>(&mut self) -> impl Iterator<Item = &mut V> {
        self.objects.values_mut().filter_map(|b| b.downcast_mut())
    }
    pub fn remove<V: Any>(&mut self, id: u64) -> Option<V> {
        match self.objects.get(&id) {
            Some(b) if b.is::<V>() => self.objects.remove(&id).and_then(|b| b.downcast().ok()).map(|b| *b),
            _ => None,
        }
    }
}

type Job = Box<dyn FnOnce(&mut State) + Send>;

/// Why a job did not return a value.
#[derive(Debug)]
pub enum EngineError {
    /// The engine thread is gone (it never stops while a handle exists, so
    /// this means it could not start).
    Gone,
    /// The job panicked: a bug in rctb. The text is the panic message.
    Panic(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Gone => write!(f, "the rctb engine thread is not running"),
            EngineError::Panic(m) => write!(f, "internal error in rctb (a bug, please report it): {m}"),
        }
    }
}

/// A handle to one engine thread.
#[derive(Debug)]
pub struct Engine {
    tx: Option<mpsc::Sender<Job>>,
    /// Calls sent and not yet answered (tests use it to see a caller
    /// waiting with the GIL released).
    pending: std::sync::atomic::AtomicUsize,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    pub fn start(name: &str) -> std::io::Result<Engine> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name(format!("rctb-{name}")).spawn(move || {
            let mut state = State::default();
            while let Ok(job) = rx.recv() {
                job(&mut state);
            }
        })?;
        Ok(Engine { tx: Some(tx), pending: Default::default(), thread: Some(thread) })
    }

    /// Runs `f` on the engine thread and waits for its result. Call it
    /// with the GIL released.
    pub fn call<R: Send + 'static>(&self, f: impl FnOnce(&mut State) -> R + Send + 'static) -> Result<R, EngineError> {
        let (rtx, rrx) = mpsc::sync_channel::<Result<R, EngineError>>(1);
        let job: Job = Box::new(move |state| {
            let r = catch_unwind(AssertUnwindSafe(|| f(state))).map_err(|p| EngineError::Panic(panic_text(&*p)));
            let _ = rtx.send(r);
        });
        use std::sync::atomic::Ordering::SeqCst;
        self.pending.fetch_add(1, SeqCst);
        let sent = self.tx.as_ref().ok_or(EngineError::Gone).and_then(|tx| tx.send(job).map_err(|_| EngineError::Gone));
        let r = sent.and_then(|()| rrx.recv().map_err(|_| EngineError::Gone));
        self.pending.fetch_sub(1, SeqCst);
        r?
    }

    pub fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Queues `f` without waiting (used from `Drop`, where the GIL may be
    /// held and nothing is to be returned).
    pub fn post(&self, f: impl FnOnce(&mut State) + Send + 'static) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Box::new(move |state| {
                let _ = catch_unwind(AssertUnwindSafe(|| f(state)));
            }));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}
