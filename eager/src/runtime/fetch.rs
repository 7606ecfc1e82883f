//! Getting an op's executable: from memory, else the persistent cache, else compiled, at the
//! tier its key starts at ([`executable`]); several keys at once before their dispatches ask
//! ([`fetch_ahead`]); and the compiles a dispatch waits on now, for a front end's heartbeat
//! ([`running_compiles`]). One key's [`Program`] at one tier is `program`'s, promotion to the
//! optimized tier `tiers'`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::program::Program;
use super::tiers::promote;
use super::{runtime, Runtime};
use crate::cache::{cache, OpKey};
use crate::error::Result;
use crate::ops::Op;
use crate::pjrt::{Executable, Tier};
use crate::profiler::{CacheOutcome, OpInfo};
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// What [`executable`] found or made: the executable, the op's info, where it came from,
/// the time that took, and the key's heat (its launches book their device time there).
pub(crate) struct Fetched {
    pub(crate) exe: Arc<Executable>,
    pub(crate) info: Arc<OpInfo>,
    pub(crate) outcome: CacheOutcome,
    pub(crate) ns: u64,
    pub(crate) heat: Arc<crate::cache::Heat>,
}

/// The executable for `key`: from memory, else from the persistent cache, else compiled (and
/// stored in both). A new key is compiled at the quick tier (unless it is a compiled
/// function, which its user asked to optimize, or the persistent cache holds it optimized);
/// a lookup that finds the key hot starts its optimized compile in the background.
pub(crate) fn executable(rt: &Runtime, key: OpKey, start: Instant) -> Result<Fetched> {
    let Some(f) = cache().lookup(&key) else { return fetch(rt, key, start, false) };
    if f.promote {
        promote(key);
    }
    // A key fetched ahead reports that fetch at its first dispatch, as if made then.
    let (outcome, ns) = match f.ahead {
        Some(a) if a.from_disk => (CacheOutcome::DiskHit, a.ns),
        Some(a) => (CacheOutcome::Miss, a.ns),
        None => (CacheOutcome::Hit, 0),
    };
    Ok(Fetched { exe: f.exe, info: f.info, outcome, ns, heat: f.heat })
}

/// Ops of at least this many operations are compiled optimized from the first call: the
/// quick tier's code runs them ~20% slower (a matmul of f32[1024, 1024]: 138 against 164
/// GFLOP/s), which costs more than the optimized compile's extra milliseconds.
const LARGE_OP_FLOPS: f64 = 1e8;

/// Single ops that move at least this many bytes (inputs and results) are compiled optimized
/// from the first call too: the quick tier runs large memory-bound ops 2-17x slower (see
/// [`crate::cache::Tiering`]: an exp of 4M f32, 32 MiB moved, 17 ms against 1.2), so one
/// quick call costs about the optimized compile's extra ~19 ms, and two make the key hot by
/// device time (20 ms) anyway: starting quick would only add a compile. Programs (fused
/// regions, ops run as one) are left to their heat: their compile grows with their size.
const LARGE_OP_BYTES: usize = 32 << 20;

/// The tier `key`'s first executable gets: optimized for a compiled function (its user asked)
/// and for a large op (its estimated work, see [`LARGE_OP_FLOPS`] and [`LARGE_OP_BYTES`]),
/// else the cache's first tier (quick, unless tiering is off).
fn first_tier(key: &OpKey) -> Result<Tier> {
    let op = &key.op;
    if let Op::Call(c) = op {
        if !c.program.tiered {
            return Ok(Tier::Optimized);
        }
    }
    let output = op.infer(&key.inputs)?;
    let bytes = || {
        let results = std::iter::once(&output).chain(op.more_outputs());
        key.inputs.iter().chain(results).map(Spec::size_in_bytes).sum::<usize>()
    };
    let large = op.flops(&key.inputs, &output) >= LARGE_OP_FLOPS
        || (!matches!(op, Op::Call(_)) && bytes() >= LARGE_OP_BYTES);
    Ok(if large { Tier::Optimized } else { cache().first_tier() })
}

/// `key`'s executable, not in memory: loaded from the persistent cache or compiled, and
/// stored (`ahead`: before any dispatch asked for it).
fn fetch(rt: &Runtime, key: OpKey, start: Instant, ahead: bool) -> Result<Fetched> {
    let tier = first_tier(&key)?;
    let mut fetched = None;
    if tier == Tier::Quick && rt.disk.is_some() {
        // Optimized in an earlier run: load that.
        let program = Program::of(rt, &key, Tier::Optimized)?;
        fetched = program.load(rt).map(|exe| (program, exe));
    }
    let (program, exe, outcome) = match fetched {
        Some((program, exe)) => (program, exe, CacheOutcome::DiskHit),
        None => {
            let program = Program::of(rt, &key, tier)?;
            match program.load(rt) {
                Some(exe) => (program, exe, CacheOutcome::DiskHit),
                None => {
                    let exe = {
                        let _running = Running::start(&program.info);
                        program.compile(rt)?
                    };
                    (program, exe, CacheOutcome::Miss)
                }
            }
        }
    };
    let (exe, info) = program.finish(exe);
    let ns = start.elapsed().as_nanos() as u64;
    let from_disk = outcome == CacheOutcome::DiskHit;
    let heat = cache().insert(key, exe.clone(), info.clone(), ns, from_disk, ahead);
    Ok(Fetched { exe, info, outcome, ns, heat })
}

/// Most compiles [`fetch_ahead`] runs at once.
const AHEAD_THREADS: usize = 8;

/// Fetches the executables of `keys` that are not in memory yet (from the persistent cache,
/// or compiled) several at once, one per core: the keys a backward pass or an optimizer step
/// is about to dispatch one after another, whose compiles are independent. Each key's first
/// dispatch then reports its fetch. A fetch that fails is left to that dispatch, which fails
/// with its own error. Returns how many were fetched here.
pub(crate) fn fetch_ahead(keys: impl IntoIterator<Item = OpKey>) -> usize {
    let mut seen = std::collections::HashSet::new();
    let missing: Vec<OpKey> =
        keys.into_iter().filter(|k| !cache().contains(k) && seen.insert(k.clone())).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(AHEAD_THREADS).min(missing.len());
    // One key, or one core: each dispatch fetches its own as soon.
    if threads < 2 {
        return 0;
    }
    let next = AtomicUsize::new(0);
    let fetched = AtomicUsize::new(0);
    let work = || {
        while let Some(key) = missing.get(next.fetch_add(1, Ordering::Relaxed)) {
            let Ok(rt) = runtime(key.device.kind) else { continue };
            if fetch(&rt, key.clone(), Instant::now(), true).is_ok() {
                fetched.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            let spawned = std::thread::Builder::new().name("eager-fetch-ahead".into()).spawn_scoped(s, work);
            // Without the thread, this one does its share.
            drop(spawned);
        }
        work();
    });
    fetched.into_inner()
}

/// The compiles a dispatch waits on now (not the background optimizer's), after the last id
/// given: what a front end's heartbeat shows during a long one.
static RUNNING: Shared<Mutex<RunningCompiles>> =
    Shared::new("eager::runtime::RunningCompiles", Mutex::default);

/// (the last id given, each compile running: its id, op and start).
type RunningCompiles = (u64, Vec<(u64, Arc<OpInfo>, Instant)>);

/// One compile in [`RUNNING`] while it lives.
struct Running(u64);

impl Running {
    fn start(info: &Arc<OpInfo>) -> Running {
        let mut running = lock(RUNNING.get());
        running.0 += 1;
        let id = running.0;
        running.1.push((id, info.clone(), Instant::now()));
        Running(id)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(RUNNING.get()).1.retain(|(id, ..)| *id != self.0);
        // On the thread that compiled, before the op runs: a front end's heartbeat ends in order
        // with what the cell prints next.
        let ended = *lock(COMPILE_ENDED.get());
        if let Some(f) = ended {
            f(self.0);
        }
    }
}

/// What is told a compile's id when it ends (see [`on_compile_end`]).
type CompileEnded = Option<fn(u64)>;

/// Called with a compile's id when it ends.
static COMPILE_ENDED: Shared<Mutex<CompileEnded>> =
    Shared::new("eager::runtime::CompileEnded", Mutex::default);

/// Has `f` called with the id of each compile in [`running_compiles`] as it ends, on the
/// thread that compiled (a front end's heartbeat clears its line there).
pub fn on_compile_end(f: fn(u64)) {
    *lock(COMPILE_ENDED.get()) = Some(f);
}

/// A compile running now that a dispatch (or a fused region's read, or a compiled function's
/// first call) waits on.
#[derive(Debug, Clone)]
pub struct RunningCompile {
    /// Unique for the process: one heartbeat per compile.
    pub id: u64,
    /// The op's signature (`matmul(f32[64, 784], f32[784, 256])`, `fused(…)`).
    pub what: String,
    /// Time since the compile began.
    pub elapsed: Duration,
}

/// The compiles running now, oldest first.
pub fn running_compiles() -> Vec<RunningCompile> {
    lock(RUNNING.get())
        .1
        .iter()
        .map(|(id, info, t)| RunningCompile { id: *id, what: info.signature(), elapsed: t.elapsed() })
        .collect()
}
