//! Actors: peer models that run on a node and react to what happens there.
//!
//! A model such as the NVMe-oF target must answer while another
//! application on the same thread blocks in [`rctb_core::Transport::wait`].
//! Registered actors run after every instant the simulator processes (in
//! `SimTransport::wait`, [`crate::Sim::step`] and [`crate::Sim::run_until`]),
//! each with a transport of its node, in registration order, so a run stays
//! deterministic. An actor that wants to run at a given time (a delayed
//! response, a timer) returns it, and the world wakes it then.
//!
//! Actors do not own a transport: the world hands one in on each run, so no
//! reference cycle keeps a world alive.
//!
//! The peer models (crate `rctb-models`) know nothing of the simulator: each
//! has a transport-generic step (`NvmeTarget::run`, `FpgaEngine::pump`), and
//! a closure over a shared handle makes it an actor:
//! `sim.add_actor(node, Box::new(move |t: &mut SimTransport| target.borrow_mut().run(t)))`.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use rctb_core::time::Instant;

use crate::transport::SimTransport;
use crate::world::{EventKind, NodeIdx, World};

/// A model driven by the simulator.
pub trait Actor {
    /// Handles whatever is pending on the actor's node. Returns the latest
    /// time it wants to run again (`None`: only when something happens).
    fn run(&mut self, t: &mut SimTransport) -> Option<Instant>;
}

/// A closure is an actor: how a transport-generic model runs on a node.
impl<F: FnMut(&mut SimTransport) -> Option<Instant>> Actor for F {
    fn run(&mut self, t: &mut SimTransport) -> Option<Instant> {
        self(t)
    }
}

/// A shared actor: the test keeps one handle to inspect and fault it.
impl<A: Actor> Actor for Rc<RefCell<A>> {
    fn run(&mut self, t: &mut SimTransport) -> Option<Instant> {
        // An actor is never re-entered by its own waits (the slots are
        // taken meanwhile), and nothing needs to wait while holding one
        // (the NVMe target can be stepped from a test's own loop): a
        // borrow held across a wait is a bug, and panics as RefCell does.
        self.borrow_mut().run(t)
    }
}

/// Identifies a registered actor. Only [`Sim::add_actor`](crate::Sim::add_actor)
/// hands ids out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActorId(pub(crate) u64);

pub(crate) struct ActorSlot {
    pub id: ActorId,
    pub node: NodeIdx,
    pub actor: Box<dyn Actor>,
    /// The wake-up already scheduled, so repeated answers add no events.
    pub wake: Option<Instant>,
}

impl fmt::Debug for ActorSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorSlot").field("id", &self.id).field("node", &self.node).field("wake", &self.wake).finish()
    }
}

/// Runs every registered actor once.
pub(crate) fn run_actors(world: &Rc<RefCell<World>>) {
    let (mut slots, any_down) = {
        let mut w = world.borrow_mut();
        (std::mem::take(&mut w.actors), w.down_nodes > 0)
    };
    if slots.is_empty() {
        return;
    }
    for s in slots.iter_mut() {
        if any_down && world.borrow().nodes[s.node].down {
            // A crashed node runs nothing (`Sim::crash`).
            continue;
        }
        let mut t = SimTransport { world: world.clone(), node: s.node };
        if let Some(at) = s.actor.run(&mut t) {
            let mut w = world.borrow_mut();
            let at = at.max(w.now);
            if s.wake != Some(at) {
                s.wake = Some(at);
                w.schedule(at, EventKind::Wake);
            }
        }
    }
    let mut w = world.borrow_mut();
    // Actors registered by an actor meanwhile go after the existing ones.
    let added = std::mem::replace(&mut w.actors, slots);
    w.actors.extend(added);
}
