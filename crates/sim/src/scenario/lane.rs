//! NCCL's thread structure, or all of it on one thread.
//!
//! A [`Role`] is what one NCCL thread does with the work handed to it (the proxy
//! progress thread, the CUDA callback thread, the async group thread, a socket helper).
//! Work reaches it through a [`Lane`]:
//!
//! * [`Mode::Threads`]: each role runs on its own thread behind a bounded channel, so a
//!   child really starts on another thread after its parent's stop, and the races NCCL
//!   has (ProxyOp start vs Coll stop, KernelLaunch vs a stopped GroupApi) happen.
//! * [`Mode::Single`]: lanes are queues that the driver drains after every user
//!   operation, in the order NCCL's threads would most often run them. This measures
//!   the plugin without any cross-thread traffic.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How the simulated threads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    /// Every role on its own OS thread, as in NCCL.
    Threads,
    /// Everything on the calling thread.
    Single,
}

/// One NCCL thread's behaviour.
pub trait Role<W>: Send {
    fn handle(&mut self, work: W);
    /// Nothing is queued any more (the proxy goes to sleep here).
    fn idle(&mut self) {}
    /// The lane was closed: the thread exits.
    fn finish(&mut self) {}
}

/// Bounded so that a fast user thread cannot run arbitrarily far ahead of its proxy.
const CHANNEL_BOUND: usize = 128;

enum Inner<W> {
    Queue(Arc<Mutex<VecDeque<W>>>),
    Chan(SyncSender<W>),
}

/// The sending end of a role's work queue.
pub struct Lane<W>(Inner<W>);

impl<W> Clone for Lane<W> {
    fn clone(&self) -> Self {
        Lane(match &self.0 {
            Inner::Queue(q) => Inner::Queue(Arc::clone(q)),
            Inner::Chan(s) => Inner::Chan(s.clone()),
        })
    }
}

impl<W> Lane<W> {
    pub fn post(&self, w: W) {
        match &self.0 {
            Inner::Queue(q) => q.lock().unwrap_or_else(|p| p.into_inner()).push_back(w),
            // A closed lane means the role's thread is gone; its work is moot then.
            Inner::Chan(s) => {
                let _ = s.send(w);
            }
        }
    }
}

/// A queued role that the single-thread driver drains.
trait Pump {
    /// Handles everything queued; true if there was anything.
    fn pump(&mut self) -> bool;
    fn finish(&mut self);
}

struct Queued<W, R> {
    queue: Arc<Mutex<VecDeque<W>>>,
    role: R,
}

impl<W, R: Role<W>> Pump for Queued<W, R> {
    fn pump(&mut self) -> bool {
        let mut any = false;
        loop {
            let next = self
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            match next {
                Some(w) => {
                    self.role.handle(w);
                    any = true;
                }
                None => break,
            }
        }
        if any {
            self.role.idle();
        }
        any
    }

    fn finish(&mut self) {
        self.role.finish();
    }
}

fn serve<W, R: Role<W>>(rx: Receiver<W>, mut role: R) {
    loop {
        match rx.try_recv() {
            Ok(w) => role.handle(w),
            Err(TryRecvError::Empty) => {
                role.idle();
                match rx.recv() {
                    Ok(w) => role.handle(w),
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        }
    }
    role.finish();
}

/// The roles of one run, downstream ones first.
pub struct Topology {
    mode: Mode,
    /// Single mode: roles in creation order (downstream first).
    pumps: Vec<Box<dyn Pump>>,
    /// Threads mode: role threads in creation order (downstream first).
    threads: Vec<JoinHandle<()>>,
}

impl Topology {
    pub fn new(mode: Mode) -> Topology {
        Topology {
            mode,
            pumps: Vec::new(),
            threads: Vec::new(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Starts a role and returns its lane. Create downstream roles first: a role may
    /// hold lanes of roles created before it, never after.
    pub fn spawn<W, R>(&mut self, name: &str, role: R) -> Lane<W>
    where
        W: Send + 'static,
        R: Role<W> + 'static,
    {
        match self.mode {
            Mode::Single => {
                let queue = Arc::new(Mutex::new(VecDeque::new()));
                self.pumps.push(Box::new(Queued {
                    queue: Arc::clone(&queue),
                    role,
                }));
                Lane(Inner::Queue(queue))
            }
            Mode::Threads => {
                let (tx, rx) = sync_channel(CHANNEL_BOUND);
                let handle = std::thread::Builder::new()
                    .name(name.to_string())
                    .spawn(move || serve(rx, role))
                    .expect("cannot spawn a simulated NCCL thread");
                self.threads.push(handle);
                Lane(Inner::Chan(tx))
            }
        }
    }

    /// Single mode: runs every queued role until all queues are empty, upstream roles
    /// first (they feed the downstream ones). No-op with threads.
    pub fn pump(&mut self) {
        loop {
            let mut any = false;
            for p in self.pumps.iter_mut().rev() {
                any |= p.pump();
            }
            if !any {
                break;
            }
        }
    }

    /// Ends every role, upstream first, once all lanes to it are dropped (threads mode)
    /// or its queue is empty (single mode).
    pub fn join(mut self) {
        match self.mode {
            Mode::Single => {
                self.pump();
                while let Some(mut p) = self.pumps.pop() {
                    p.finish();
                    drop(p);
                    self.pump();
                }
            }
            Mode::Threads => {
                // A thread ends when every lane to it is gone; upstream roles hold the
                // lanes of downstream ones, so join from the last spawned.
                while let Some(t) = self.threads.pop() {
                    if t.join().is_err() {
                        eprintln!("evring-sim: a simulated NCCL thread panicked");
                    }
                }
            }
        }
    }
}
