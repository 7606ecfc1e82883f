//! The executor: one runtime (plugin + client) per device kind, started on first use, and
//! `execute`, which runs one op's executable now (found in the compile cache, loaded from
//! the persistent one or compiled) and tracks its completion. Transfers of buffers to and from
//! the host. It knows buffers and specs, not tensors: `tensor::dispatch` wraps what it makes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use smallvec::SmallVec;

use crate::cache::{cache, OpKey};
use crate::device::{Device, DeviceKind};
use crate::disk_cache::DiskCache;
use crate::error::{Error, Result};
use crate::ops::IndexCheck;
use crate::ops::Op;
use crate::pjrt::{self, Client, DeviceInfo, Executable, Tier};
use crate::plugin;
use crate::profiler::{profiler, CacheOutcome, EventKind, OpInfo};
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// A started device kind: its plugin, client and devices.
pub struct Runtime {
    pub kind: DeviceKind,
    pub plugin_path: PathBuf,
    pub client: Arc<Client>,
    /// The persistent compile cache of this plugin (`None` when turned off).
    pub(crate) disk: Option<Arc<DiskCache>>,
}

impl Runtime {
    /// The PJRT device behind `device`, or a clear error naming the devices there are.
    pub fn device(&self, device: Device) -> Result<&DeviceInfo> {
        self.client.devices.get(device.index).ok_or_else(|| {
            Error::invalid(
                "device",
                format!(
                    "{device} does not exist: the {} plugin shows {} device(s)",
                    self.kind,
                    self.client.devices.len()
                ),
            )
        })
    }

    /// PJRT C API version of the plugin.
    pub fn api_version(&self) -> (i32, i32) {
        self.client.api.version
    }
}

/// The runtimes and what dispatches share: defaults, random state, the interrupt flag.
struct RuntimeState {
    runtimes: Mutex<HashMap<DeviceKind, Arc<Runtime>>>,
    /// Held while a runtime starts, so that threads asking at once start it once.
    starting: Mutex<()>,
    plugin_paths: Mutex<HashMap<DeviceKind, PathBuf>>,
    rng: Mutex<(u64, u64)>,
    default_device: Mutex<Device>,
    /// Set by an interrupt (the REPL's Ctrl-C): every dispatch fails until it is cleared.
    interrupted: AtomicBool,
    /// Per device (see [`device_slot`]): when its last completed op finished (profiler clock).
    /// Padded: completion callbacks write it while dispatches read the flags beside it.
    device_free_ns: CachePadded<[AtomicU64; DEVICE_SLOTS]>,
}

impl RuntimeState {
    fn new() -> RuntimeState {
        RuntimeState {
            runtimes: Mutex::new(HashMap::new()),
            starting: Mutex::new(()),
            plugin_paths: Mutex::new(HashMap::new()),
            rng: Mutex::new((0x5eed, 0)),
            default_device: Mutex::new(
                std::env::var("EAGER_DEVICE").ok().and_then(|d| d.parse().ok()).unwrap_or(Device::cpu()),
            ),
            interrupted: AtomicBool::new(false),
            device_free_ns: Default::default(),
        }
    }
}

/// Devices tracked for device-time accounting (more share slots: their times then merge).
const DEVICE_SLOTS: usize = 32;

fn device_slot(d: Device) -> usize {
    (d.kind as usize * 8 + d.index) % DEVICE_SLOTS
}

static STATE: Shared<RuntimeState> = Shared::new("eager::runtime::RuntimeState", RuntimeState::new);

fn state() -> &'static RuntimeState {
    STATE.get()
}

/// Interrupts the session (the REPL's Ctrl-C, through a session's control server): with `on`,
/// every dispatch fails with [`Error::Interrupted`] until it is called with `false`.
#[doc(hidden)]
pub fn set_interrupted(on: bool) {
    state().interrupted.store(on, Ordering::Relaxed);
}

/// Fails if the session was interrupted: checked by every dispatch of `op`.
pub(crate) fn check_interrupt(op: &crate::ops::Op) -> Result<()> {
    if state().interrupted.load(Ordering::Relaxed) {
        return Err(Error::Interrupted { op: op.name() });
    }
    Ok(())
}

/// The runtime of `kind`, started on first use (plugin found, or fetched for CPU).
pub fn runtime(kind: DeviceKind) -> Result<Arc<Runtime>> {
    let g = state();
    if let Some(r) = lock(&g.runtimes).get(&kind) {
        return Ok(r.clone());
    }
    // Start outside the map's lock (a fetch can take a minute) but under the start lock.
    let _starting = lock(&g.starting);
    if let Some(r) = lock(&g.runtimes).get(&kind) {
        return Ok(r.clone());
    }
    guard_exit();
    let explicit = lock(&g.plugin_paths).get(&kind).cloned();
    // XLA logs an INFO line per SPMD compile ("Using Shardy ..."): noise in a REPL. Warnings
    // and errors stay; a level the user set is kept.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1");
    }
    let started = plugin::start(kind, explicit.as_deref())?;
    let disk = DiskCache::open(&started.client, &started.path);
    if let Some(d) = disk.as_ref().filter(|_| std::env::var_os("EAGER_PRELOAD").is_some_and(|v| v == "1")) {
        d.preload(started.client.clone(), warm_up, hook_exit);
    }
    let rt = Arc::new(Runtime { kind, plugin_path: started.path, client: started.client, disk });
    Ok(lock(&g.runtimes).entry(kind).or_insert(rt).clone())
}

/// XLA makes its one-time compiler state at the first compile (about 10 ms here): the warm
/// start compiles a one-op program first, taking that off the user's first op. An add with a
/// broadcast: broadcasting has one-time state of its own.
fn warm_up(client: &Arc<Client>) {
    let (a, b) = (Spec::new(&[2, 3], crate::dtype::DType::F32), Spec::new(&[3], crate::dtype::DType::F32));
    let text = Op::Binary(crate::ops::Binary::Add).emit_module(&[a.clone(), b], &a);
    let _ = client.compile(&text, &pjrt::compile_options(Tier::Quick, None));
}

/// The persistent caches of the runtimes started.
fn disk_caches() -> Vec<Arc<DiskCache>> {
    lock(&state().runtimes).values().filter_map(|r| r.disk.clone()).collect()
}

/// Executables the warm start (`EAGER_PRELOAD=1`, see [`crate::disk_cache`]) loaded that no op
/// has taken yet, over the runtimes started.
pub fn preloaded() -> usize {
    disk_caches().iter().map(|d| d.preloaded()).sum()
}

/// Uses the plugin at `path` for `kind` (before its first use; later calls have no effect
/// on a runtime already started).
pub fn set_plugin_path(kind: DeviceKind, path: impl AsRef<Path>) {
    lock(&state().plugin_paths).insert(kind, path.as_ref().to_path_buf());
}

/// The devices of `kind` (starting its runtime).
pub fn devices(kind: DeviceKind) -> Result<Vec<Device>> {
    let rt = runtime(kind)?;
    Ok((0..rt.client.devices.len()).map(|i| Device::new(kind, i)).collect())
}

/// One line per device: `cpu:0  cpu  id=0  …`; for TPU, first a line with the chips found on
/// the PCI bus (generation and count) or why none.
pub fn describe_devices(kind: DeviceKind) -> Result<Vec<String>> {
    let chips = match kind {
        DeviceKind::Tpu => Some(plugin::tpu::describe_chips()),
        _ => None,
    };
    let rt = runtime(kind)?;
    let devices =
        rt.client.devices.iter().enumerate().map(|(i, d)| {
            format!("{}  kind={}  id={}  ({})", Device::new(kind, i), d.kind, d.id, d.description)
        });
    Ok(chips.into_iter().chain(devices).collect())
}

/// The device constructors use when none is given (`EAGER_DEVICE`, else `cpu:0`).
pub fn default_device() -> Device {
    *lock(&state().default_device)
}

pub fn set_default_device(device: Device) {
    *lock(&state().default_device) = device;
}

/// Seeds the on-device random number generator.
pub fn manual_seed(seed: u64) {
    *lock(&state().rng) = (seed, 0);
}

/// The state for the next random op: the seed and a counter bumped per call.
pub(crate) fn next_rng_state() -> [u64; 2] {
    let mut s = lock(&state().rng);
    s.1 += 1;
    [s.0, s.1]
}

/// How a tensor's buffer came to be ready, filled in by the completion of the op that makes
/// it (dispatch is asynchronous): when it was ready and, if its op failed, why.
#[derive(Default)]
pub(crate) struct Completion {
    /// Profiler-clock time the buffer was ready; 0 while pending.
    ready_ns: AtomicU64,
    failure: OnceLock<Arc<Failure>>,
    /// Device-side index checks this result depends on that no read has passed yet (its own
    /// op's and its inputs'): a read resolves them, and a bad index fails it.
    checks: Mutex<SmallVec<[Arc<PendingCheck>; 1]>>,
    /// Whether `checks` may be non-empty (dispatches skip its lock when not).
    has_checks: AtomicBool,
}

/// An op's [`IndexCheck`](IndexCheck) result on the device, read once when first
/// needed: not at dispatch, which would wait for the device.
pub(crate) struct PendingCheck {
    op: String,
    check: IndexCheck,
    flag: pjrt::Buffer,
    /// `None` once read and passed; the failure's message if an index was out of range.
    verdict: OnceLock<Option<String>>,
}

/// Pending checks one result carries before the oldest are resolved at dispatch (a loop that
/// never reads would otherwise collect them without bound).
const MAX_PENDING_CHECKS: usize = 16;

impl PendingCheck {
    /// Reads the flag (waiting for its op) unless already read; the message if it failed.
    fn resolve(&self) -> Option<&str> {
        self.verdict
            .get_or_init(|| {
                let mut bytes = [0u8; 16];
                // A failed op reports itself through its result's read, not here.
                self.flag.to_host(&mut bytes).ok()?;
                let position = i64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
                let index = i64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
                (position >= 0).then(|| self.check.message(index))
            })
            .as_deref()
    }

    fn passed(&self) -> bool {
        matches!(self.verdict.get(), Some(None))
    }
}

/// An op that failed on the device, with its inputs' completions: a failure propagates to
/// every op that reads a failed result, and the read names the first op of the chain.
pub(crate) struct Failure {
    op: String,
    message: String,
    inputs: SmallVec<[Arc<Completion>; 3]>,
    /// PJRT's code (RESOURCE_EXHAUSTED reads as out of memory), the op, and when it was
    /// launched on the profiler's clock (its own results, booked after, did not fill the
    /// memory).
    code: i32,
    info: Arc<OpInfo>,
    launched_ns: u64,
}

impl Failure {
    fn new(
        info: &Arc<OpInfo>,
        e: pjrt::PjrtError,
        inputs: SmallVec<[Arc<Completion>; 3]>,
        launched_ns: u64,
    ) -> Arc<Failure> {
        let (op, message, code, info) = (info.signature(), e.message, e.code, info.clone());
        Arc::new(Failure { op, message, inputs, code, info, launched_ns })
    }
}

impl Completion {
    /// A buffer that is ready now (an upload).
    pub(crate) fn ready() -> Arc<Completion> {
        let c = Completion::default();
        c.ready_ns.store(profiler().now_ns().max(1), Ordering::Relaxed);
        Arc::new(c)
    }

    fn is_done(&self) -> bool {
        self.ready_ns.load(Ordering::Acquire) != 0
    }

    /// Takes on the unpassed checks of `inputs` and the op's own (`own`: each check, the op
    /// it names and its flag).
    fn inherit(&self, inputs: &[Arg], own: Vec<(IndexCheck, String, pjrt::Buffer)>) {
        let mut list: SmallVec<[Arc<PendingCheck>; 1]> = SmallVec::new();
        for a in inputs.iter().filter(|a| a.completion.has_checks.load(Ordering::Acquire)) {
            for c in lock(&a.completion.checks).iter() {
                if !c.passed() && !list.iter().any(|k| Arc::ptr_eq(k, c)) {
                    list.push(c.clone());
                }
            }
        }
        for (check, op, flag) in own {
            list.push(Arc::new(PendingCheck { op, check, flag, verdict: OnceLock::new() }));
        }
        if list.len() > MAX_PENDING_CHECKS {
            // Old ones are done by now: reading them costs a small copy, not a wait. A failed
            // one stays, to fail the read.
            let excess = list.len() - MAX_PENDING_CHECKS;
            let mut k = 0;
            list.retain(|c| {
                k += 1;
                k > excess || c.resolve().is_some()
            });
        }
        if !list.is_empty() {
            *lock(&self.checks) = list;
            self.has_checks.store(true, Ordering::Release);
        }
    }

    /// Resolves the pending index checks before `read` reads this result: the first that
    /// found a bad index fails the read, naming its op.
    pub(crate) fn verify(&self, read: &str) -> Result<()> {
        if !self.has_checks.load(Ordering::Acquire) {
            return Ok(());
        }
        let pending: SmallVec<[Arc<PendingCheck>; 1]> = lock(&self.checks).clone();
        for c in &pending {
            if let Some(message) = c.resolve() {
                let (op, message, read) = (c.op.clone(), message.to_string(), read.to_string());
                return Err(Error::DeviceFailure { op, message, read });
            }
        }
        lock(&self.checks).retain(|c| !c.passed());
        Ok(())
    }

    /// The error to report for a failed read or wait of the tensor `read`.
    pub(crate) fn read_error(&self, read: &str, err: pjrt::PjrtError) -> Error {
        // The read and the completion callbacks are woken by the same events, in no fixed
        // order: give each callback a moment.
        let deadline = Instant::now() + Duration::from_secs(1);
        let settle = |c: &Completion| {
            while !c.is_done() && Instant::now() < deadline {
                std::thread::yield_now();
            }
        };
        settle(self);
        let Some(mut failure) = self.failure.get().cloned() else {
            return Error::Pjrt { op: read.to_string(), source: err };
        };
        // Walk back to the first op of the chain that failed.
        while let Some(earlier) = failure.inputs.iter().find_map(|c| {
            settle(c);
            c.failure.get().cloned()
        }) {
            failure = earlier;
        }
        if out_of_memory(failure.code, &failure.message) {
            let info = &failure.info;
            // The launch on the ledger's clock (the failure holds it on the profiler's).
            let ago = profiler().now_ns().saturating_sub(failure.launched_ns);
            let launched = crate::memory::now_ns().saturating_sub(ago);
            let own = |t: &crate::memory::LiveTensor| t.op == info.name && t.made_ns >= launched;
            let cause = format!("{}; reported when reading the result of {read}", failure.message);
            return crate::memory::out_of_memory(
                failure.op.clone(),
                info.device,
                info.output.size_in_bytes() as u64,
                cause,
                &own,
            );
        }
        Error::DeviceFailure {
            op: failure.op.clone(),
            message: failure.message.clone(),
            read: read.to_string(),
        }
    }
}

/// Waits until every op dispatched so far has finished on its device (like
/// `torch.cuda.synchronize`). Errors are not reported here but by reads of the results.
pub fn synchronize() {
    crate::profiler::wait_for_ops();
}

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

/// `key`'s executable, not in memory: loaded from the persistent cache or compiled, and
/// stored (`ahead`: before any dispatch asked for it).
fn fetch(rt: &Runtime, key: OpKey, start: Instant, ahead: bool) -> Result<Fetched> {
    let tier = match &key.op {
        Op::Call(c) if !c.program.tiered => Tier::Optimized,
        // A large op (a 1024² matmul) runs long enough that its optimized code pays at once.
        op if op.flops(&key.inputs, &op.infer(&key.inputs)?) >= LARGE_OP_FLOPS => Tier::Optimized,
        _ => cache().first_tier(),
    };
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

/// One key's program at one tier: its text, compile options and info.
struct Program {
    mlir: String,
    options: Vec<u8>,
    info: Arc<OpInfo>,
}

impl Program {
    fn of(rt: &Runtime, key: &OpKey, tier: Tier) -> Result<Program> {
        let output = key.op.infer(&key.inputs)?;
        let info = Arc::new(OpInfo {
            name: key.op.name(),
            attrs: key.op.attrs(),
            inputs: key.inputs.to_vec(),
            output,
            device: key.device,
            mesh: key.partitioned.as_ref().map(|p| crate::profiler::MeshInfo {
                axes: p.mesh.axes().to_vec(),
                devices: p.mesh.devices().to_vec(),
                splits: p.splits.to_vec(),
                collectives: Vec::new(),
            }),
            tier,
        });
        let mut mlir = key.op.emit_module(&key.inputs, &info.output);
        let mut options = pjrt::compile_options(tier, None);
        if let Some(p) = &key.partitioned {
            // One SPMD program over the mesh, each partition on its device.
            let params: Vec<(&Spec, &str)> =
                key.inputs.iter().zip(&p.inputs).map(|(s, h)| (s, h.as_str())).collect();
            let specs: Vec<&Spec> = std::iter::once(&info.output).chain(key.op.more_outputs()).collect();
            let mut results: Vec<(&Spec, &str)> =
                specs.into_iter().zip(&p.outputs).map(|(s, h)| (s, h.as_str())).collect();
            // Index checks, over all the indices, are whole on every device.
            let (check, whole) = (Spec::new(&[2], crate::dtype::DType::I64), crate::ops::Shard::sdy(&[], 1));
            for _ in key.op.index_checks(&key.inputs) {
                results.push((&check, whole.as_str()));
            }
            mlir = crate::ops::emit::partitioned(&mlir, &p.mesh.sdy(), p.mesh.size(), &params, &results);
            let ids: Vec<i32> =
                p.mesh.devices().iter().map(|&d| rt.device(d).map(|i| i.id)).collect::<Result<_>>()?;
            options = pjrt::compile_options(tier, Some(&ids));
        }
        // Whole programs (compiled and fused steps) on the CPU: reductions through YNNPACK.
        if rt.kind == DeviceKind::Cpu && tier == Tier::Optimized && matches!(key.op, Op::Call(_)) {
            pjrt::add_cpu_reduce_fusions(&mut options);
        }
        if let Some(ty) = crate::ops::emit::oversized_array(&mlir) {
            return Err(Error::shape(
                info.name,
                format!(
                    "{} needs an array {ty}: more than XLA can size (at most 2^63 - 1 elements and bytes)",
                    info.signature()
                ),
            ));
        }
        Ok(Program { mlir, options, info })
    }

    /// From the persistent cache, if it holds it.
    fn load(&self, rt: &Runtime) -> Option<Executable> {
        rt.disk.as_ref()?.load(&rt.client, &self.mlir, &self.options, &self.info.signature())
    }

    /// Compiled now (and stored in the persistent cache).
    fn compile(&self, rt: &Runtime) -> Result<Executable> {
        let signature = self.info.signature();
        let exe = rt
            .client
            .compile(&self.mlir, &self.options)
            .map_err(Error::pjrt(format!("compiling {signature}")))?;
        if let Some(d) = &rt.disk {
            d.store(&exe, &self.mlir, &self.options, &signature);
        }
        Ok(exe)
    }

    /// The executable with its info, and what the partitioner put in an SPMD program to move
    /// data between devices.
    fn finish(self, exe: Executable) -> (Arc<Executable>, Arc<OpInfo>) {
        let info = match &self.info.mesh {
            Some(mesh) => {
                let program = exe.optimized_program().unwrap_or_default();
                let mesh =
                    crate::profiler::MeshInfo { collectives: collectives_in(&program), ..mesh.clone() };
                Arc::new(OpInfo { mesh: Some(mesh), ..(*self.info).clone() })
            }
            None => self.info,
        };
        (Arc::new(exe), info)
    }
}

/// Hot keys waiting for their optimized compile, and the one background thread that compiles
/// them (a low-priority queue: dispatch never waits on it).
#[derive(Default)]
struct Promoter {
    queue: Mutex<Option<std::sync::mpsc::Sender<OpKey>>>,
    pending: Mutex<usize>,
    idle: std::sync::Condvar,
    /// The process is exiting: keys still queued are dropped (see
    /// [`finish_background_work_at_exit`]).
    closing: AtomicBool,
    /// Times the exit hook was registered.
    hooks: AtomicUsize,
    /// The op whose optimized executable is being compiled or loaded now.
    running: Mutex<Option<Arc<OpInfo>>>,
}

/// The op whose optimized executable the background thread compiles (or loads) now: its
/// signature (`exp(f32[257, 129])`).
pub fn background_compile() -> Option<String> {
    lock(&PROMOTER.get().running).as_ref().map(|info| info.signature())
}

static PROMOTER: Shared<Promoter> = Shared::new("eager::runtime::Promoter", Promoter::default);

extern "C" {
    /// The C library's: `f` runs at `exit`, before the handlers registered earlier.
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

/// At exit the plugin's C++ statics are destroyed while a background compile or load may
/// still use them (seen: crashes in MLIR's registries as a test binary ended). Exit handlers
/// run last registered first, so this hook runs before the destructors of statics that
/// existed when it was registered: it stops the warm start's loads, drops the queued keys and
/// waits for the compile in flight (at most 10 s). It is registered at the first promotion,
/// after the warm start's first load, and again after each of the first [`EXIT_HOOKS`]
/// optimized compiles (each may make statics of its own).
extern "C" fn finish_background_work_at_exit() {
    for d in disk_caches() {
        d.stop_preloading();
    }
    PROMOTER.get().closing.store(true, Ordering::Release);
    wait_for_promotions_until(Some(Instant::now() + Duration::from_secs(10)));
}

/// Stops the background work when the process exits, before anything of XLA's is destroyed.
///
/// glibc's `exit` first runs the exiting thread's thread-local destructors, and only then the
/// `atexit` handlers and C++ static destructors (`__run_exit_handlers` calls
/// `__call_tls_dtors` first). A guard in the main thread's thread-locals therefore runs before
/// any of the plugin's statics go, however the process exits: `main` returning,
/// `std::process::exit`, a test harness ending, a panic leaving `main`. (An `atexit` handler
/// is no such guarantee: statics that XLA makes later, during a compile, are destroyed before
/// it runs.)
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        finish_background_work_at_exit();
        // Ops still running on the device use XLA's thread pools too (bounded: a long op must
        // not hold the exit for good).
        crate::profiler::wait_for_ops_until(Instant::now() + Duration::from_secs(10));
    }
}

thread_local! {
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// Places the exit guard in the main thread's thread-locals, once per process (every copy of
/// this library in a REPL session shares one). On other threads it does nothing: their
/// thread-locals die when the thread ends, which is no exit.
fn guard_exit() {
    static GUARDED: Shared<AtomicBool> = Shared::new("eager::runtime::ExitGuarded", AtomicBool::default);
    // SAFETY: two syscalls with no arguments that only read the caller's ids.
    let main_thread = unsafe { libc::syscall(libc::SYS_gettid) == libc::getpid() as libc::c_long };
    if main_thread && !GUARDED.get().swap(true, Ordering::AcqRel) {
        EXIT_GUARD.with(|_| ());
    }
}

/// Runs [`guard_exit`] as the library is loaded, on the main thread (a test harness, for one,
/// runs eager only on other threads and exits from the main one).
#[used]
#[link_section = ".init_array"]
static GUARD_EXIT_AT_LOAD: extern "C" fn() = {
    extern "C" fn guard_exit_at_load() {
        guard_exit();
    }
    guard_exit_at_load
};

/// Registrations of [`finish_background_work_at_exit`] at most (later compiles rarely make new
/// statics; each registration is one more handler run at exit).
const EXIT_HOOKS: usize = 24;

fn hook_exit() {
    let p = PROMOTER.get();
    if p.hooks
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < EXIT_HOOKS).then_some(n + 1))
        .is_ok()
    {
        // SAFETY: registers a plain function with no captured state; atexit has no other effect.
        unsafe { atexit(finish_background_work_at_exit) };
    }
}

/// Queues `key`'s optimized compile (starting the background thread on first use).
fn promote(key: OpKey) {
    let p = PROMOTER.get();
    if p.hooks.load(Ordering::Acquire) == 0 {
        hook_exit();
    }
    *lock(&p.pending) += 1;
    let mut queue = lock(&p.queue);
    let sender = queue.get_or_insert_with(|| {
        let (tx, rx) = std::sync::mpsc::channel::<OpKey>();
        let spawned = std::thread::Builder::new().name("eager-optimize".into()).spawn(move || {
            for key in rx {
                let p = PROMOTER.get();
                if !p.closing.load(Ordering::Acquire) {
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

/// The collectives of an optimized program (a serialized `HloModuleProto`), in order: each
/// instruction's opcode is field 2 of its `HloInstructionProto`, a string (tag `0x12`, its
/// length, the bytes), so the opcodes of collectives are found by those bytes.
fn collectives_in(program: &[u8]) -> Vec<String> {
    const COLLECTIVES: &[&str] = &[
        "all-reduce",
        "all-reduce-start",
        "all-gather",
        "all-gather-start",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-permute-start",
        "collective-broadcast",
    ];
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < program.len() {
        if program[i] == 0x12 {
            let len = program[i + 1] as usize;
            if let Some(name) = program.get(i + 2..i + 2 + len) {
                if let Some(c) = COLLECTIVES.iter().find(|c| c.as_bytes() == name) {
                    found.push(c.to_string());
                    i += 2 + len;
                    continue;
                }
            }
        }
        i += 1;
    }
    found
}

/// A dispatched op's input, as the runtime sees it: its buffer and how it came to be ready.
pub(crate) struct Arg<'a> {
    pub(crate) buffer: &'a pjrt::Buffer,
    pub(crate) completion: &'a Arc<Completion>,
}

/// What [`execute`] enqueued: the output buffers with their specs, the op's info and the
/// completion they share.
pub(crate) struct Launched {
    pub(crate) outputs: SmallVec<[(pjrt::Buffer, Spec); 1]>,
    pub(crate) info: Arc<OpInfo>,
    pub(crate) completion: Arc<Completion>,
}

/// Runs the op of `key` on `args` on `device`: looks the key up in the compile cache
/// (compiling or loading on a miss), enqueues the execution and returns its outputs at once.
/// The device time and any failure arrive with the completion event; reads of the outputs
/// wait for it. `start` is when the dispatch began (the profiler books from it).
pub(crate) fn execute(
    rt: &Runtime,
    device: Device,
    key: OpKey,
    args: &[Arg],
    start: Instant,
) -> Result<Launched> {
    let dev = rt.device(device)?;
    // Cloned before the executable takes the key (empty, so no allocation, for one-output ops).
    let more_outputs: SmallVec<[Spec; 1]> = key.op.more_outputs().iter().cloned().collect();
    let index_checks = key.op.index_checks(&key.inputs);
    let in_bytes = key.inputs.iter().map(Spec::size_in_bytes).sum::<usize>();
    let Fetched { exe, info, outcome, ns: compile_ns, heat } = executable(rt, key, start)?;
    let out_bytes = info.output.size_in_bytes() + more_outputs.iter().map(Spec::size_in_bytes).sum::<usize>();
    // A closure: the signature is formatted only on failure.
    let what = || info.signature();
    crate::memory::admit(&what, device, out_bytes as u64)?;
    let exec_start = Instant::now();
    let buffers: SmallVec<[&pjrt::Buffer; 4]> = args.iter().map(|a| a.buffer).collect();
    let mut out = SmallVec::new();
    let done =
        exe.execute(&buffers, dev, &mut out, true).map_err(|e| launch_error(what, device, out_bytes, e))?;
    let enqueue_ns = exec_start.elapsed().as_nanos() as u64;
    let completion = Arc::new(Completion::default());
    // Index checks are the last outputs: kept by the completion, read when a result is read.
    let flags: SmallVec<[pjrt::Buffer; 1]> =
        out.drain(out.len().saturating_sub(index_checks.len())..).collect();
    completion.inherit(args, own_checks(index_checks, &info, flags));
    let p = profiler();
    let seq = p.record(
        EventKind::Op,
        &info,
        Some(outcome),
        start,
        compile_ns,
        enqueue_ns,
        (in_bytes + out_bytes) as u64,
    );
    let Some(first) = out.first() else {
        // An op's emission and its declared check disagree: a bug in the op, reported, not a panic.
        return Err(Error::invalid(info.name, "its program returned no result besides its index check"));
    };
    if let Some(done) = done {
        let enqueued_at = p.ns_since(exec_start);
        let inputs_done: SmallVec<[Arc<Completion>; 3]> = args.iter().map(|a| a.completion.clone()).collect();
        let this = completion.clone();
        let op_info = info.clone();
        p.op_started();
        let registered = done.on_ready(&rt.client.api, move |outcome| {
            if let Err(e) = outcome {
                // Which op of the chain failed first is worked out by the read (see read_error):
                // the inputs' callbacks may not have run yet.
                let _ = this.failure.set(Failure::new(&op_info, e, inputs_done.clone(), enqueued_at));
            }
            book_finished(&this, &inputs_done, &[device], enqueued_at, seq, &heat);
        });
        if registered.is_err() {
            // The plugin cannot call back: fall back to waiting here.
            p.op_done();
            first.wait_ready().map_err(|e| completion.read_error(&info.signature(), e))?;
            completion.ready_ns.store(p.now_ns().max(1), Ordering::Release);
        }
    } else {
        completion.ready_ns.store(p.now_ns().max(1), Ordering::Release);
    }
    let specs = std::iter::once(info.output.clone()).chain(more_outputs);
    Ok(Launched { outputs: out.into_iter().zip(specs).collect(), info, completion })
}

/// What [`execute_partitioned`] enqueued: per result, its buffer on each partition (with its
/// spec), the op's info and the completion they share (ready when every partition finished).
pub(crate) struct LaunchedPartitioned {
    pub(crate) outputs: Vec<(Vec<pjrt::Buffer>, Spec)>,
    pub(crate) info: Arc<OpInfo>,
    pub(crate) completion: Arc<Completion>,
}

/// Runs the SPMD program of `key` (which carries its mesh) with `args[p]` as partition `p`'s
/// arguments, one executable over every device of the mesh; as [`execute`] otherwise.
pub(crate) fn execute_partitioned(
    rt: &Runtime,
    key: OpKey,
    args: &[Vec<Arg>],
    start: Instant,
) -> Result<LaunchedPartitioned> {
    let index_checks = key.op.index_checks(&key.inputs);
    let in_bytes = key.inputs.iter().map(Spec::size_in_bytes).sum::<usize>();
    let more_outputs: Vec<Spec> = key.op.more_outputs().to_vec();
    let Fetched { exe, info, outcome, ns: compile_ns, heat } = executable(rt, key, start)?;
    let exec_start = Instant::now();
    let buffers: Vec<Vec<&pjrt::Buffer>> =
        args.iter().map(|a| a.iter().map(|a| a.buffer).collect()).collect();
    let mut out = Vec::new();
    let events = exe
        .execute_partitioned(&buffers, &mut out)
        .map_err(|e| launch_error(|| info.signature(), info.device, info.output.size_in_bytes(), e))?;
    let enqueue_ns = exec_start.elapsed().as_nanos() as u64;
    let p = profiler();
    let bytes = (in_bytes + info.output.size_in_bytes()) as u64;
    let seq = p.record(EventKind::Op, &info, Some(outcome), start, compile_ns, enqueue_ns, bytes);
    let specs: Vec<Spec> = std::iter::once(info.output.clone()).chain(more_outputs).collect();
    let checks = index_checks.len();
    if out.len() != args.len() || out.iter().any(|o| o.len() != specs.len() + checks) {
        return Err(Error::invalid(info.name, "its SPMD program did not return its results on every device"));
    }
    // Index checks are the last outputs, the same on every device: partition 0's are read.
    let mut flags: Vec<Vec<pjrt::Buffer>> = out.iter_mut().map(|o| o.split_off(o.len() - checks)).collect();
    let completion = Arc::new(Completion::default());
    completion.inherit(&args[0], own_checks(index_checks, &info, flags.swap_remove(0)));
    // Per result, its buffer on each partition.
    let mut per_result: Vec<Vec<pjrt::Buffer>> =
        specs.iter().map(|_| Vec::with_capacity(args.len())).collect();
    for partition in out {
        for (r, b) in partition.into_iter().enumerate() {
            per_result[r].push(b);
        }
    }
    let outputs: Vec<(Vec<pjrt::Buffer>, Spec)> = per_result.into_iter().zip(specs).collect();
    let enqueued_at = p.ns_since(exec_start);
    let left = Arc::new(AtomicUsize::new(events.len()));
    p.op_started();
    if events.is_empty() {
        completion.ready_ns.store(p.now_ns().max(1), Ordering::Release);
        p.op_done();
    }
    for done in events {
        let (this, op_info, remaining, heat) = (completion.clone(), info.clone(), left.clone(), heat.clone());
        let inputs_done: SmallVec<[Arc<Completion>; 3]> =
            args[0].iter().map(|a| a.completion.clone()).collect();
        let registered = done.on_ready(&rt.client.api, move |outcome| {
            if let Err(e) = outcome {
                let _ = this.failure.set(Failure::new(&op_info, e, inputs_done.clone(), enqueued_at));
            }
            // The last partition to finish completes the op, on every device of the mesh.
            if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                let devices = op_info.mesh.as_ref().map(|m| m.devices.as_slice()).unwrap_or(&[]);
                book_finished(&this, &inputs_done, devices, enqueued_at, seq, &heat);
            }
        });
        if registered.is_err() {
            for b in outputs.iter().flat_map(|(bs, _)| bs) {
                b.wait_ready().map_err(|e| completion.read_error(&info.signature(), e))?;
            }
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                completion.ready_ns.store(p.now_ns().max(1), Ordering::Release);
                p.op_done();
            }
        }
    }
    // The CPU plugin runs each partition as a task on one small thread pool. Two launches in
    // flight can deadlock there: partitions of the first wait in a collective for one queued
    // behind the second's, which wait too (XLA aborts after 40 s). So on the CPU an SPMD
    // launch finishes before the next op is dispatched (its failure, if any, is reported
    // by reads as always).
    if rt.kind == DeviceKind::Cpu {
        for b in outputs.iter().flat_map(|(bs, _)| bs) {
            let _ = b.wait_ready();
        }
    }
    Ok(LaunchedPartitioned { outputs, info, completion })
}

/// An op's index checks with their flags, each naming its op: the dispatched op, or the
/// indexing op inside a program (`gather(…) in fused`).
fn own_checks(
    checks: crate::ops::Checks,
    info: &OpInfo,
    flags: impl IntoIterator<Item = pjrt::Buffer>,
) -> Vec<(IndexCheck, String, pjrt::Buffer)> {
    checks
        .into_iter()
        .zip(flags)
        .map(|(c, flag)| {
            let op = match &c.op {
                Some(inner) => format!("{inner} in {}", info.name),
                None => info.signature(),
            };
            (c, op, flag)
        })
        .collect()
}

/// Completes an op that has just finished on `devices`, booking its device time: the devices
/// worked on it from when it was enqueued (`enqueued_at`), its inputs were ready and each of
/// them had finished what it ran before (so device times add up to at most the wall time).
fn book_finished(
    completion: &Completion,
    inputs: &[Arc<Completion>],
    devices: &[Device],
    enqueued_at: u64,
    seq: Option<u64>,
    heat: &crate::cache::Heat,
) {
    let p = profiler();
    let end = p.now_ns().max(1);
    let finished_before = devices
        .iter()
        .map(|&d| state().device_free_ns[device_slot(d)].fetch_max(end, Ordering::AcqRel))
        .fold(enqueued_at, u64::max);
    let began = inputs.iter().map(|c| c.ready_ns.load(Ordering::Acquire)).fold(finished_before, u64::max);
    completion.ready_ns.store(end, Ordering::Release);
    heat.add(end.saturating_sub(began));
    if let Some(seq) = seq {
        p.complete(seq, end.saturating_sub(began));
    }
    p.op_done();
}

/// The plugin's allocator figures for `device` (TPU and GPU plugins give them); `None` where
/// the plugin does not (the CPU plugin). eager's own count of live tensor bytes is
/// [`crate::memory`].
pub fn device_memory_stats(device: Device) -> Result<Option<crate::pjrt::DeviceMemoryStats>> {
    let rt = runtime(device.kind)?;
    let dev = rt.device(device)?;
    Ok(rt.client.memory_stats(dev).ok())
}

/// Whether a PJRT failure is a device out of memory: RESOURCE_EXHAUSTED, or (the CPU plugin
/// failing an asynchronous launch with INTERNAL) XLA's allocator message.
fn out_of_memory(code: i32, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    pjrt::code_name(code) == "RESOURCE_EXHAUSTED"
        || m.contains("out of memory")
        || m.contains("resource_exhausted")
}

/// The error of a launch or transfer PJRT refused: out of memory when the plugin says
/// RESOURCE_EXHAUSTED (naming what is live), else as PJRT put it.
fn launch_error(op: impl FnOnce() -> String, device: Device, bytes: usize, source: pjrt::PjrtError) -> Error {
    if out_of_memory(source.code, &source.message) {
        return crate::memory::out_of_memory(op(), device, bytes as u64, source.message, &|_| false);
    }
    Error::Pjrt { op: op(), source }
}

/// Copies host bytes (dense, row-major, of `spec`) to `device`, recording the transfer.
pub(crate) fn upload(bytes: &[u8], spec: &Spec, device: Device) -> Result<(pjrt::Buffer, Arc<Runtime>)> {
    crate::ops::check_size("from_slice", spec)?;
    if bytes.len() != spec.size_in_bytes() {
        return Err(Error::shape(
            "from_slice",
            format!("{} bytes do not make a {spec} tensor ({} bytes)", bytes.len(), spec.size_in_bytes()),
        ));
    }
    let rt = runtime(device.kind)?;
    let dev = rt.device(device)?;
    let what = || format!("copying {spec} to {device}");
    crate::memory::admit(&what, device, bytes.len() as u64)?;
    let start = Instant::now();
    let dims: SmallVec<[i64; 4]> = spec.shape.iter().map(|&d| d as i64).collect();
    let buffer = rt
        .client
        .buffer_from_host(bytes, spec.dtype.pjrt(), &dims, dev)
        .map_err(|e| launch_error(what, device, bytes.len(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::HostToDevice, "to_device", spec, device, start, ns);
    Ok((buffer, rt))
}

/// A buffer to read, with what a failed read reports: its completion and what made it.
pub(crate) struct Source<'a> {
    pub(crate) buffer: &'a pjrt::Buffer,
    pub(crate) completion: &'a Completion,
    pub(crate) spec: &'a Spec,
    pub(crate) device: Device,
    /// What made it (`exp(f32[4])`), for errors: formatted only when one is reported.
    pub(crate) describe: &'a dyn Fn() -> String,
}

impl Source<'_> {
    /// Waits for the op that makes the buffer (unbooked: that time is its execute, booked by
    /// its completion) and passes its pending index checks.
    fn wait(&self) -> Result<()> {
        self.buffer.wait_ready().map_err(|e| self.completion.read_error(&(self.describe)(), e))?;
        self.completion.verify(&(self.describe)())
    }
}

/// Copies a buffer's bytes to the host, recording the transfer.
pub(crate) fn download(src: &Source) -> Result<Vec<u8>> {
    src.wait()?;
    let start = Instant::now();
    let mut bytes = vec![0u8; src.spec.size_in_bytes()];
    src.buffer.to_host(&mut bytes).map_err(|e| src.completion.read_error(&(src.describe)(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToHost, "to_host", src.spec, src.device, start, ns);
    Ok(bytes)
}

/// Copies a buffer to another device of the same plugin, recording the transfer.
pub(crate) fn copy_to_device(src: &Source, rt: &Runtime, device: Device) -> Result<pjrt::Buffer> {
    let dev = rt.device(device)?;
    src.wait()?;
    let start = Instant::now();
    let buffer =
        src.buffer.copy_to_device(dev).map_err(Error::pjrt(format!("copying {} to {device}", src.spec)))?;
    buffer.wait_ready().map_err(|e| src.completion.read_error(&(src.describe)(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToDevice, "to_device", src.spec, device, start, ns);
    Ok(buffer)
}

fn record_transfer(
    kind: EventKind,
    name: &'static str,
    spec: &Spec,
    device: Device,
    start: Instant,
    ns: u64,
) {
    if !crate::profiler::is_enabled() {
        return;
    }
    let info = Arc::new(OpInfo {
        name,
        attrs: String::new(),
        inputs: vec![spec.clone()],
        output: spec.clone(),
        device,
        mesh: None,
        tier: Default::default(),
    });
    profiler().record(kind, &info, None, start, 0, ns, spec.size_in_bytes() as u64);
}
