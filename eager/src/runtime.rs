//! The eager executor: one runtime (plugin + client) per device kind, the process-wide
//! compile cache and profiler, and [`dispatch`], which runs one op now.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::cache::{Cache, OpKey};
use crate::device::{Device, DeviceKind};
use crate::disk_cache::DiskCache;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::pjrt::{self, Client, DeviceInfo, Executable};
use crate::plugin;
use crate::profiler::{CacheOutcome, EventKind, OpInfo, Profiler};
use crate::shape::Spec;
use crate::shared::{lock, Shared};
use crate::tensor::Tensor;

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
    pub(crate) fn device(&self, device: Device) -> Result<&DeviceInfo> {
        self.client.devices.get(device.index).ok_or_else(|| {
            Error::invalid(
                "device",
                format!("{device} does not exist: the {} plugin shows {} device(s)", self.kind, self.client.devices.len()),
            )
        })
    }

    /// PJRT C API version of the plugin.
    pub fn api_version(&self) -> (i32, i32) {
        self.client.api.version
    }
}

/// Process-wide state: runtimes, cache, profiler, random state, defaults.
pub(crate) struct Global {
    runtimes: Mutex<HashMap<DeviceKind, Arc<Runtime>>>,
    /// Held while a runtime starts, so that threads asking at once start it once.
    starting: Mutex<()>,
    plugin_paths: Mutex<HashMap<DeviceKind, PathBuf>>,
    pub(crate) cache: Cache,
    pub(crate) profiler: Profiler,
    rng: Mutex<(u64, u64)>,
    default_device: Mutex<Device>,
    /// Set by an interrupt (the REPL's Ctrl-C): every dispatch fails until it is cleared.
    interrupted: AtomicBool,
    /// Ops dispatched whose completion has not been seen yet.
    pending: AtomicUsize,
    /// Per device (see [`device_slot`]): when its last completed op finished (profiler clock).
    device_free_ns: [AtomicU64; DEVICE_SLOTS],
    /// Threads inside `no_grad` scopes.
    grad_mode: crate::autograd::GradMode,
    /// Scalars already on a device, by (device, dtype, bits of the value).
    scalars: Mutex<HashMap<(Device, DType, u64), Tensor>>,
    /// The compiled function being traced, if any.
    pub(crate) tracer: crate::compile::Tracer,
    /// The last eager error a session's cell displayed: (kind, text) (see `session`).
    pub(crate) shown_error: Mutex<Option<(String, String)>>,
}

impl Global {
    fn new() -> Global {
        Global {
            runtimes: Mutex::new(HashMap::new()),
            starting: Mutex::new(()),
            plugin_paths: Mutex::new(HashMap::new()),
            cache: Cache::new(),
            profiler: Profiler::new(),
            rng: Mutex::new((0x5eed, 0)),
            default_device: Mutex::new(
                std::env::var("EAGER_DEVICE").ok().and_then(|d| d.parse().ok()).unwrap_or(Device::cpu()),
            ),
            interrupted: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            device_free_ns: Default::default(),
            grad_mode: Default::default(),
            scalars: Mutex::new(HashMap::new()),
            tracer: Default::default(),
            shown_error: Mutex::new(None),
        }
    }

    pub(crate) fn set_interrupted(&self, on: bool) {
        self.interrupted.store(on, Ordering::Relaxed);
    }
}

/// Devices tracked for device-time accounting (more share slots: their times then merge).
const DEVICE_SLOTS: usize = 32;

fn device_slot(d: Device) -> usize {
    (d.kind as usize * 8 + d.index) % DEVICE_SLOTS
}

/// The process's state: shared with other copies of this library in the process when a host
/// offers a slot for it (see [`crate::shared`]).
pub(crate) fn global() -> &'static Global {
    static GLOBAL: Shared<Global> = Shared::new("eager::runtime::Global", Global::new);
    GLOBAL.get()
}

/// The runtime of `kind`, started on first use (plugin found, or fetched for CPU).
pub fn runtime(kind: DeviceKind) -> Result<Arc<Runtime>> {
    let g = global();
    if let Some(r) = lock(&g.runtimes).get(&kind) {
        return Ok(r.clone());
    }
    // Start outside the map's lock (a fetch can take a minute) but under the start lock.
    let _starting = lock(&g.starting);
    if let Some(r) = lock(&g.runtimes).get(&kind) {
        return Ok(r.clone());
    }
    let explicit = lock(&g.plugin_paths).get(&kind).cloned();
    let started = plugin::start(kind, explicit.as_deref())?;
    let disk = DiskCache::open(&started.client, &started.path);
    let rt = Arc::new(Runtime { kind, plugin_path: started.path, client: started.client, disk });
    Ok(lock(&g.runtimes).entry(kind).or_insert(rt).clone())
}

/// Uses the plugin at `path` for `kind` (before its first use; later calls have no effect
/// on a runtime already started).
pub fn set_plugin_path(kind: DeviceKind, path: impl AsRef<Path>) {
    lock(&global().plugin_paths).insert(kind, path.as_ref().to_path_buf());
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
    let devices = rt.client.devices.iter().enumerate().map(|(i, d)| {
        format!("{}  kind={}  id={}  ({})", Device::new(kind, i), d.kind, d.id, d.description)
    });
    Ok(chips.into_iter().chain(devices).collect())
}

/// The device constructors use when none is given (`EAGER_DEVICE`, else `cpu:0`).
pub fn default_device() -> Device {
    *lock(&global().default_device)
}

pub fn set_default_device(device: Device) {
    *lock(&global().default_device) = device;
}

/// Seeds the on-device random number generator.
pub fn manual_seed(seed: u64) {
    *lock(&global().rng) = (seed, 0);
}

/// The state for the next random op: the seed and a counter bumped per call.
pub(crate) fn next_rng_state() -> [u64; 2] {
    let mut s = lock(&global().rng);
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

/// An op's [`IndexCheck`](crate::ops::IndexCheck) result on the device, read once when first
/// needed: not at dispatch, which would wait for the device.
pub(crate) struct PendingCheck {
    op: String,
    check: crate::ops::IndexCheck,
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
}

impl Completion {
    /// A buffer that is ready now (an upload).
    pub(crate) fn ready() -> Arc<Completion> {
        let c = Completion::default();
        c.ready_ns.store(global().profiler.now_ns().max(1), Ordering::Relaxed);
        Arc::new(c)
    }

    fn is_done(&self) -> bool {
        self.ready_ns.load(Ordering::Acquire) != 0
    }

    /// Takes on the unpassed checks of `inputs` and the op's own (`own`: its check and flag).
    fn inherit(&self, inputs: &[&Tensor], own: Option<(crate::ops::IndexCheck, String, pjrt::Buffer)>) {
        let mut list: SmallVec<[Arc<PendingCheck>; 1]> = SmallVec::new();
        for t in inputs.iter().filter(|t| t.completion().has_checks.load(Ordering::Acquire)) {
            for c in lock(&t.completion().checks).iter() {
                if !c.passed() && !list.iter().any(|k| Arc::ptr_eq(k, c)) {
                    list.push(c.clone());
                }
            }
        }
        if let Some((check, op, flag)) = own {
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
        Error::DeviceFailure { op: failure.op.clone(), message: failure.message.clone(), read: read.to_string() }
    }
}

/// Waits until every op dispatched so far has finished on its device (like
/// `torch.cuda.synchronize`). Errors are not reported here but by reads of the results.
pub fn synchronize() {
    let g = global();
    let mut spins = 0u32;
    while g.pending.load(Ordering::Acquire) != 0 {
        spins += 1;
        if spins < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The executable for `key`: from memory, else from the persistent cache, else compiled (and
/// stored in both). Returns it with the op's info, where it came from and the time it took.
fn executable(rt: &Runtime, key: OpKey, start: Instant) -> Result<(Arc<Executable>, Arc<OpInfo>, CacheOutcome, u64)> {
    let g = global();
    if let Some((exe, info)) = g.cache.lookup(&key) {
        return Ok((exe, info, CacheOutcome::Hit, 0));
    }
    let output = key.op.infer(&key.inputs)?;
    let info = Arc::new(OpInfo {
        name: key.op.name(),
        attrs: key.op.attrs(),
        inputs: key.inputs.to_vec(),
        output,
        device: key.device,
    });
    let mlir = key.op.emit_module(&key.inputs, &info.output);
    let signature = info.signature();
    let options = pjrt::COMPILE_OPTIONS;
    let loaded = rt.disk.as_ref().and_then(|d| d.load(&rt.client, &mlir, options, &signature));
    let (exe, outcome) = match loaded {
        Some(exe) => (exe, CacheOutcome::DiskHit),
        None => {
            let exe = rt.client.compile(&mlir, options).map_err(Error::pjrt(format!("compiling {signature}")))?;
            if let Some(d) = &rt.disk {
                d.store(&exe, &mlir, options, &signature);
            }
            (exe, CacheOutcome::Miss)
        }
    };
    let exe = Arc::new(exe);
    let ns = start.elapsed().as_nanos() as u64;
    g.cache.insert(key, exe.clone(), info.clone(), ns, outcome == CacheOutcome::DiskHit);
    Ok((exe, info, outcome, ns))
}

/// The compiled executable `op` runs for `inputs` (compiling it if needed): for benchmarks
/// that time the raw PJRT execute of exactly what a dispatch runs.
#[doc(hidden)]
pub fn executable_for(op: Op, inputs: &[&Tensor]) -> Result<Arc<Executable>> {
    let device = inputs.first().map(|t| t.device()).unwrap_or_else(default_device);
    let rt = runtime(device.kind)?;
    let key = OpKey::new(op, inputs, device);
    Ok(executable(&rt, key, Instant::now())?.0)
}

/// Builds the key of `op` on `inputs` and looks it up, as a dispatch does, and nothing else:
/// for benchmarks that take the hit path apart. Returns whether it hit.
#[doc(hidden)]
pub fn lookup_only(op: Op, inputs: &[&Tensor]) -> bool {
    let device = inputs.first().map(|t| t.device()).unwrap_or_else(default_device);
    let key = OpKey::new(op, inputs, device);
    global().cache.lookup(&key).is_some()
}

/// Runs `op` on `inputs`: looks the key up in the compile cache (compiling or loading on a
/// miss), enqueues the execution and returns its result at once. The device time and any
/// failure arrive with the completion event; reads of the result wait for it. Inside a
/// compiled function being traced, records the op instead.
pub fn dispatch(op: Op, inputs: &[&Tensor], device: Option<Device>) -> Result<Tensor> {
    if inputs.iter().any(|t| t.trace_ref().is_some()) {
        return crate::compile::record_op(op, inputs);
    }
    let node = crate::autograd::record(&op, inputs);
    let mut outs = dispatch_all(op, inputs, device)?;
    Ok(outs.swap_remove(0).with_node(node))
}

/// [`dispatch`] for ops with any number of outputs (a compiled function's call).
pub(crate) fn dispatch_all(op: Op, inputs: &[&Tensor], device: Option<Device>) -> Result<SmallVec<[Tensor; 1]>> {
    let start = Instant::now();
    let g = global();
    if g.interrupted.load(Ordering::Relaxed) {
        return Err(Error::Interrupted { op: op.name() });
    }
    let (rt, device) = match inputs.first() {
        Some(t) => (t.runtime().clone(), t.device()),
        None => {
            let d = device.unwrap_or_else(default_device);
            (runtime(d.kind)?, d)
        }
    };
    if let Some(other) = inputs.iter().find(|t| t.device() != device) {
        return Err(Error::invalid(
            op.name(),
            format!("expected all tensors on one device, got {device} and {}; move one with .to(..)", other.device()),
        ));
    }
    let dev = rt.device(device)?;
    // Cloned before the key takes the op (empty, so no allocation, for one-output ops).
    let more_outputs: SmallVec<[Spec; 1]> = op.more_outputs().iter().cloned().collect();
    let index_check = op.index_check(inputs);
    let key = OpKey::new(op, inputs, device);
    let (exe, info, outcome, compile_ns) = executable(&rt, key, start)?;
    let exec_start = Instant::now();
    let args: SmallVec<[&pjrt::Buffer; 4]> = inputs.iter().map(|t| t.buffer()).collect::<Result<_>>()?;
    let mut out = SmallVec::new();
    // A closure, not Error::pjrt(..): the signature is formatted only on failure.
    let done = exe.execute(&args, dev, &mut out, true).map_err(|source| Error::Pjrt { op: info.signature(), source })?;
    let enqueue_ns = exec_start.elapsed().as_nanos() as u64;
    let completion = Arc::new(Completion::default());
    // An index check is the last output: kept by the completion, read when a result is read.
    let own_check = index_check.and_then(|c| Some((c, info.signature(), out.pop()?)));
    completion.inherit(inputs, own_check);
    let out_bytes = info.output.size_in_bytes() + more_outputs.iter().map(Spec::size_in_bytes).sum::<usize>();
    let bytes = inputs.iter().map(|t| t.spec().size_in_bytes()).sum::<usize>() + out_bytes;
    let seq = g.profiler.record(EventKind::Op, &info, Some(outcome), start, compile_ns, enqueue_ns, bytes as u64);
    let first = out.first().expect("every op has an output");
    if let Some(done) = done {
        let enqueued_at = g.profiler.ns_since(exec_start);
        let inputs_done: SmallVec<[Arc<Completion>; 3]> = inputs.iter().map(|t| t.completion().clone()).collect();
        let this = completion.clone();
        let op_info = info.clone();
        g.pending.fetch_add(1, Ordering::AcqRel);
        let registered = done.on_ready(&rt.client.api, move |outcome| {
            let g = global();
            let end = g.profiler.now_ns().max(1);
            // The device works on the op from when it is enqueued, its inputs are ready and the
            // device finished the op before (so device times add up to at most the wall time).
            let finished_before = g.device_free_ns[device_slot(device)].fetch_max(end, Ordering::AcqRel);
            let began = inputs_done
                .iter()
                .map(|c| c.ready_ns.load(Ordering::Acquire))
                .fold(enqueued_at.max(finished_before), u64::max);
            if let Err(e) = outcome {
                // Which op of the chain failed first is worked out by the read (see read_error):
                // the inputs' callbacks may not have run yet.
                let failure = Failure { op: op_info.signature(), message: e.message, inputs: inputs_done.clone() };
                let _ = this.failure.set(Arc::new(failure));
            }
            this.ready_ns.store(end, Ordering::Release);
            if let Some(seq) = seq {
                g.profiler.complete(seq, end.saturating_sub(began));
            }
            g.pending.fetch_sub(1, Ordering::AcqRel);
        });
        if registered.is_err() {
            // The plugin cannot call back: fall back to waiting here.
            g.pending.fetch_sub(1, Ordering::AcqRel);
            first.wait_ready().map_err(|e| completion.read_error(&info.signature(), e))?;
            completion.ready_ns.store(g.profiler.now_ns().max(1), Ordering::Release);
        }
    } else {
        completion.ready_ns.store(g.profiler.now_ns().max(1), Ordering::Release);
    }
    let specs = std::iter::once(info.output.clone()).chain(more_outputs);
    Ok(out
        .into_iter()
        .zip(specs)
        .map(|(buffer, spec)| Tensor::from_parts(buffer, spec, device, rt.clone(), Some(info.clone()), completion.clone()))
        .collect())
}

/// A fresh `u64[2]` random state on `device` (inside a trace: a parameter drawn per call).
pub(crate) fn rng_state_tensor(device: Device) -> Result<Tensor> {
    if let Some(t) = crate::compile::traced_rng_state(device) {
        return Ok(t);
    }
    let state = next_rng_state();
    upload(crate::dtype::as_bytes(&state), Spec::new(&[2], DType::U64), device)
}

/// This thread's gradient mode (the process-wide state).
pub(crate) fn grad_mode() -> &'static crate::autograd::GradMode {
    &global().grad_mode
}

/// Copies host bytes (dense, row-major, of `spec`) to `device`, recording the transfer.
pub(crate) fn upload(bytes: &[u8], spec: Spec, device: Device) -> Result<Tensor> {
    if bytes.len() != spec.size_in_bytes() {
        return Err(Error::shape(
            "from_slice",
            format!("{} bytes do not make a {spec} tensor ({} bytes)", bytes.len(), spec.size_in_bytes()),
        ));
    }
    let rt = runtime(device.kind)?;
    let dev = rt.device(device)?;
    let start = Instant::now();
    let dims: SmallVec<[i64; 4]> = spec.shape.iter().map(|&d| d as i64).collect();
    let buffer =
        rt.client.buffer_from_host(bytes, spec.dtype.pjrt(), &dims, dev).map_err(Error::pjrt(format!("copying {spec} to {device}")))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::HostToDevice, "to_device", &spec, device, start, ns);
    Ok(Tensor::from_parts(buffer, spec, device, rt, None, Completion::ready()))
}

/// Copies a tensor's bytes to the host, recording the transfer.
pub(crate) fn download(t: &Tensor) -> Result<Vec<u8>> {
    // Wait for the producing op first, unbooked: that time is its execute (booked by its
    // completion), and only the copy after it is the transfer.
    let buffer = t.buffer()?;
    buffer.wait_ready().map_err(|e| t.completion().read_error(&t.describe(), e))?;
    t.completion().verify(&t.describe())?;
    let start = Instant::now();
    let mut bytes = vec![0u8; t.spec().size_in_bytes()];
    buffer.to_host(&mut bytes).map_err(|e| t.completion().read_error(&t.describe(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToHost, "to_host", t.spec(), t.device(), start, ns);
    Ok(bytes)
}

/// Copies a tensor to another device (same plugin: device to device; else through the host).
pub(crate) fn copy_to(t: &Tensor, device: Device) -> Result<Tensor> {
    if device == t.device() {
        return Ok(t.clone());
    }
    if device.kind != t.device().kind {
        let bytes = download(t)?;
        return upload(&bytes, t.spec().clone(), device);
    }
    let rt = t.runtime().clone();
    let dev = rt.device(device)?;
    // As in `download`: the wait for the producer is its execute, not this transfer.
    t.buffer()?.wait_ready().map_err(|e| t.completion().read_error(&t.describe(), e))?;
    t.completion().verify(&t.describe())?;
    let start = Instant::now();
    let buffer = t.buffer()?.copy_to_device(dev).map_err(Error::pjrt(format!("copying {} to {device}", t.spec())))?;
    buffer.wait_ready().map_err(|e| t.completion().read_error(&t.describe(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToDevice, "to_device", t.spec(), device, start, ns);
    Ok(Tensor::from_parts(buffer, t.spec().clone(), device, rt, None, Completion::ready()))
}

fn record_transfer(kind: EventKind, name: &'static str, spec: &Spec, device: Device, start: Instant, ns: u64) {
    let g = global();
    if !crate::profiler::is_enabled() {
        return;
    }
    let info = Arc::new(OpInfo { name, attrs: String::new(), inputs: vec![spec.clone()], output: spec.clone(), device });
    g.profiler.record(kind, &info, None, start, 0, ns, spec.size_in_bytes() as u64);
}

/// Scalars kept on the device before the map is emptied (a loop uses a few constants; a
/// sweep over many values must not grow it without bound).
const SCALAR_CACHE_ENTRIES: usize = 1024;

/// A scalar of `dtype` on `device`. Values of scalars are inputs, not attributes, so that
/// `x * 2.0` and `x * 3.0` share one executable; each value is uploaded once and reused
/// (tensors never change), so a training loop's `* lr` costs no transfer per step.
pub(crate) fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
    let bytes = crate::tensor::encode_f64(&[value], dtype);
    let mut bits = [0u8; 8];
    bits[..bytes.len()].copy_from_slice(&bytes);
    let key = (device, dtype, u64::from_le_bytes(bits));
    let g = global();
    if let Some(t) = lock(&g.scalars).get(&key) {
        return Ok(t.clone());
    }
    let t = upload(&bytes, Spec::new(&[], dtype), device)?;
    let mut scalars = lock(&g.scalars);
    if scalars.len() >= SCALAR_CACHE_ENTRIES {
        scalars.clear();
    }
    scalars.insert(key, t.clone());
    Ok(t)
}
