//! Tiers over time: a key found hot is queued for its optimized compile on one background
//! thread (dispatch never waits on it) and swapped in when done. The exit guard (`exit`)
//! drops the keys still queued and waits for the compile in flight, as this hands it in.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::exit::{at_exit_wait_for_compiles, exit_hooked, exiting, hook_exit};
use super::program::Program;
use super::runtime;
use crate::cache::{cache, OpKey};
use crate::pjrt::Tier;
use crate::profiler::OpInfo;
use crate::shared::{lock, Shared};

/// Hot keys waiting for their optimized compile, and the one background thread that compiles
/// them (a low-priority queue: dispatch never waits on it).
#[derive(Default)]
struct Promoter {
    queue: Mutex<Option<std::sync::mpsc::Sender<OpKey>>>,
    pending: Mutex<usize>,
    idle: std::sync::Condvar,
    /// The op whose optimized executable is being compiled or loaded now.
    running: Mutex<Option<Arc<OpInfo>>>,
}

/// The op whose optimized executable the background thread compiles (or loads) now: its
/// signature (`exp(f32[257, 129])`).
pub fn background_compile() -> Option<String> {
    lock(&PROMOTER.get().running).as_ref().map(|info| info.signature())
}

static PROMOTER: Shared<Promoter> = Shared::new("eager::runtime::Promoter", Promoter::default);

/// Queues `key`'s optimized compile (starting the background thread on first use).
pub(super) fn promote(key: OpKey) {
    let p = PROMOTER.get();
    at_exit_wait_for_compiles(wait_for_promotions_until);
    if !exit_hooked() {
        hook_exit();
    }
    *lock(&p.pending) += 1;
    let mut queue = lock(&p.queue);
    let sender = queue.get_or_insert_with(|| {
        let (tx, rx) = std::sync::mpsc::channel::<OpKey>();
        let spawned = std::thread::Builder::new().name("eager-optimize".into()).spawn(move || {
            for key in rx {
                let p = PROMOTER.get();
                if !exiting() {
                    let start = Instant::now();
                    let optimized = runtime(key.device.kind).ok().and_then(|rt| {
                        let program = Program::of(&rt, &key, Tier::Optimized).ok()?;
                        *lock(&p.running) = Some(program.info.clone());
                        let exe = program.load(&rt).or_else(|| program.compile(&rt).ok());
                        *lock(&p.running) = None;
                        Some(program.finish(exe?))
                    });
                    cache().promote(&key, optimized, start.elapsed().as_nanos() as u64);
                    hook_exit();
                }
                let mut pending = lock(&p.pending);
                *pending -= 1;
                if *pending == 0 {
                    p.idle.notify_all();
                }
            }
        });
        // Without a thread the sends fail: keys stay quick (`promoting` keeps them from retrying).
        drop(spawned);
        tx
    });
    if sender.send(key).is_err() {
        *lock(&p.pending) -= 1;
    }
}

/// Waits until every hot key's optimized compile queued so far is swapped in (benchmarks and
/// tests that want steady figures).
pub fn wait_for_promotions() {
    wait_for_promotions_until(None);
}

/// Waits until no optimized compile is queued or running, or until `deadline`.
fn wait_for_promotions_until(deadline: Option<Instant>) {
    let p = PROMOTER.get();
    let mut pending = lock(&p.pending);
    while *pending > 0 {
        pending = match deadline {
            None => p.idle.wait(pending).unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                p.idle.wait_timeout(pending, left).unwrap_or_else(std::sync::PoisonError::into_inner).0
            }
        };
    }
}
