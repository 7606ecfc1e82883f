//! Starting a device kind and the state dispatches share: one [`Runtime`] (plugin, client,
//! persistent cache) per kind, started once on first use (with the warm start when asked);
//! the default device, the random state, the interrupt flag, and when each device last
//! finished an op (for device-time accounting), and `Mesh::new` (a mesh over the first
//! devices of the default kind). Nothing here dispatches or compiles ops.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use super::exit::{at_exit_stop_loads, guard_exit, hook_exit};
use crate::device::{Device, DeviceKind};
use crate::disk_cache::DiskCache;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::ops::Op;
use crate::pjrt::{self, Client, DeviceInfo, Tier};
use crate::plugin;
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// A started device kind: its plugin, client and devices.
pub struct Runtime {
    /// The device kind.
    pub kind: DeviceKind,
    /// The plugin file loaded.
    pub plugin_path: PathBuf,
    /// The PJRT client.
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
pub(super) struct RuntimeState {
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
    pub(super) device_free_ns: CachePadded<[AtomicU64; DEVICE_SLOTS]>,
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

pub(super) fn device_slot(d: Device) -> usize {
    (d.kind as usize * 8 + d.index) % DEVICE_SLOTS
}

static STATE: Shared<RuntimeState> = Shared::new("eager::runtime::RuntimeState", RuntimeState::new);

pub(super) fn state() -> &'static RuntimeState {
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
    at_exit_stop_loads(stop_loads);
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
/// broadcast: broadcasting has one-time state of its own. Then it runs one small matmul: the
/// first matmul a process runs pays a one-time cost of its own (on the CPU, oneDNN's JIT).
/// Measured on 2 shared cores, fresh processes, 6 each, the user's first f32[1024, 1024]
/// matmul 1.5 s after start (compile and run): no warm start 62 ms (median), the add alone 50,
/// the add and this matmul 28 — as much as a second, fresh matmul key costs (~23).
fn warm_up(client: &Arc<Client>) {
    let f32 = crate::dtype::DType::F32;
    let (a, b) = (Spec::new(&[2, 3], f32), Spec::new(&[3], f32));
    let text = Op::Binary(crate::ops::Binary::Add).emit_module(&[a.clone(), b], &a);
    let _ = client.compile(&text, &pjrt::compile_options(Tier::Quick, None));
    // Nothing to report: a failure here only leaves the cost to the user's first matmul.
    let _ = warm_matmul(client);
}

/// Compiles and runs an 8x8 f32 matmul on the client's first device, waiting for it.
fn warm_matmul(client: &Arc<Client>) -> pjrt::Result<()> {
    let Some(device) = client.devices.first() else { return Ok(()) };
    let spec = Spec::new(&[8, 8], crate::dtype::DType::F32);
    let matmul = Op::Matmul(crate::ops::Matmul { lhs_t: false, rhs_t: false });
    let text = matmul.emit_module(&[spec.clone(), spec.clone()], &spec);
    let exe = client.compile(&text, &pjrt::compile_options(Tier::Quick, None))?;
    let x = client.buffer_from_host(&[0u8; 256], spec.dtype.pjrt(), &[8, 8], device)?;
    let mut out = smallvec::SmallVec::new();
    exe.execute(&[&x, &x], device, &mut out, false, &[])?;
    out.iter().try_for_each(|b| b.wait_ready())
}

/// The persistent caches of the runtimes started.
pub(super) fn disk_caches() -> Vec<Arc<DiskCache>> {
    lock(&state().runtimes).values().filter_map(|r| r.disk.clone()).collect()
}

/// Stops the warm start's loads of the runtimes started (at exit: see `exit`).
fn stop_loads() {
    for d in disk_caches() {
        d.stop_preloading();
    }
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

// The one mesh constructor that needs started devices lives with them: `mesh` below stays
// bookkeeping that the cache's keys can hold.
impl Mesh {
    /// A mesh of `axes` over the first devices of the default device's kind (as
    /// `jax.make_mesh`): `Mesh::new(&[("data", 2), ("model", 2)])` takes 4 devices.
    pub fn new(axes: &[(&str, usize)]) -> Result<Mesh> {
        let kind = default_device().kind;
        let all = devices(kind)?;
        let needed: usize = axes.iter().map(|&(_, n)| n).product();
        if needed > all.len() {
            let msg = format!(
                "{} needs {needed} devices; the {kind} plugin shows {}",
                crate::mesh::describe(axes),
                all.len()
            );
            return Err(Error::invalid("Mesh", msg));
        }
        Mesh::with_devices(axes, &all[..needed])
    }
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

/// Sets the device constructors use when none is given.
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

/// The plugin's allocator figures for `device` (TPU and GPU plugins give them); `None` where
/// the plugin does not (the CPU plugin). eager's own count of live tensor bytes is
/// [`crate::memory`].
pub fn device_memory_stats(device: Device) -> Result<Option<crate::pjrt::DeviceMemoryStats>> {
    let rt = runtime(device.kind)?;
    let dev = rt.device(device)?;
    Ok(rt.client.memory_stats(dev).ok())
}
