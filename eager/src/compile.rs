//! Compiled functions (the role of `jax.jit` / `torch_xla.compile`): a closure over tensors is
//! traced once per input signature — every op it dispatches is recorded instead of run — and
//! the recording becomes one StableHLO module, emitted op by op by the same definitions the
//! eager ops use. It then runs as one executable, cached (in memory and on disk) like a single
//! op, and shows in the profiler as one slice.
//!
//! What a traced function reads becomes an input of the program: its arguments, tensors it
//! captured, [`Var`]s (read at every call) and fresh random state (drawn at every call).
//! Setting a Var becomes an output written back after the call. Ops on tensors that are all
//! known at trace time run eagerly once and their results are captured.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use smallvec::SmallVec;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mesh::{Mesh, PartitionSpec, Sharding};
use crate::ops::{Call, Op, Program, ValueDef};
use crate::runtime::{self, Runtime};
use crate::shape::Spec;
use crate::shared::{lock, Shared};
use crate::tensor::{Lazy, Tensor};
use crate::var::Var;

/// Where a traced tensor lives: its trace and its value number there, and its split over
/// the trace's mesh as the ops' rules give it (`None`: whole, or no mesh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceRef {
    trace: u64,
    value: usize,
    split: Option<Sharding>,
}

impl TraceRef {
    pub(crate) fn split(&self) -> Option<&Sharding> {
        self.split.as_ref()
    }
}

/// What feeds one parameter of a compiled program at each call.
#[derive(Clone)]
enum Source {
    /// The i-th argument of the call.
    Arg(usize),
    /// A tensor the function captured (or made from captured data while tracing).
    Captured(Tensor),
    /// The value of a Var at the time of the call.
    Var(Var),
    /// Fresh random-number state (`u64[2]`), drawn at every call.
    Rng,
}

/// The function being traced.
struct Recording {
    id: u64,
    thread: ThreadId,
    device: Device,
    runtime: Arc<Runtime>,
    /// Every value: a parameter or an op's result.
    values: Vec<(ValueDef, Spec)>,
    /// Each value's split over `mesh` (see [`TraceRef`]).
    splits: Vec<Option<Sharding>>,
    /// The mesh of the sharded values read or made (one per function): with one, the
    /// program runs as one SPMD program over it.
    mesh: Option<Mesh>,
    /// What feeds each parameter, in parameter order, and its split.
    sources: Vec<Source>,
    param_splits: Vec<Option<Sharding>>,
    /// An error met where it could not be returned (reading a Var), returned by the trace.
    failed: Option<Error>,
    /// Captured tensors (by data identity) -> value.
    captured: HashMap<usize, usize>,
    /// Vars read or written so far (by slot identity) -> their traced value now.
    vars: HashMap<usize, Tensor>,
    /// Vars written, with the value written last, in first-write order.
    writes: Vec<(Var, usize)>,
    ops: usize,
    /// For a fused region ([`fused`]): each result handed out, by value (weak: a result
    /// nobody holds any more is no output of the region's program).
    fused: Option<Vec<(usize, Weak<Lazy>)>>,
    /// Fused mode's region, started by an op rather than by [`fused`].
    implicit: bool,
    /// The region's name and whether its program starts at the quick tier (see [`fused_op`]).
    region: Region,
    /// A dry region ([`ahead`]): it records only to learn its ops' keys and never runs; Var
    /// writes in it are dropped.
    dry: bool,
}

/// The process-wide tracing state (shared, so every REPL cell's copy of the library sees one).
#[derive(Default)]
pub(crate) struct Tracer {
    /// Whether a trace is running: checked before taking the lock.
    active: AtomicBool,
    recording: Mutex<Option<Recording>>,
    /// Fused mode ([`set_fused_mode`]): ops outside any region record into an implicit one.
    fused_mode: AtomicBool,
    /// See [`set_ops_as_one`].
    ops_as_one: AtomicBool,
    /// Serializes traces: one function is traced at a time.
    one_at_a_time: Mutex<()>,
    next_id: AtomicU64,
}

static TRACER: Shared<Tracer> = Shared::new("eager::compile::Tracer", || {
    let t = Tracer::default();
    let on = std::env::var("EAGER_OPS_AS_ONE").map_or(true, |v| v != "0");
    t.ops_as_one.store(on, Ordering::Relaxed);
    t
});

/// The process's tracing state (one per session, see [`crate::shared`]).
pub(crate) fn tracer() -> &'static Tracer {
    TRACER.get()
}

/// Runs `f` on the recording of this thread's trace, if this thread is tracing.
fn with_recording<T>(f: impl FnOnce(&mut Recording) -> T) -> Option<T> {
    let t = tracer();
    if !t.active.load(Ordering::Acquire) {
        return None;
    }
    let mut rec = lock(&t.recording);
    match rec.as_mut() {
        Some(r) if r.thread == std::thread::current().id() => Some(f(r)),
        _ => None,
    }
}

impl Recording {
    fn add_value(&mut self, def: ValueDef, spec: Spec, split: Option<Sharding>) -> usize {
        self.values.push((def, spec));
        self.splits.push(split);
        self.values.len() - 1
    }

    /// A parameter fed by `source`; one split over a mesh makes that the function's mesh.
    fn add_param(
        &mut self,
        source: Source,
        spec: Spec,
        split: Option<Sharding>,
        op: &'static str,
    ) -> Result<usize> {
        if let Some(s) = &split {
            self.join_mesh(s.mesh(), op)?;
        }
        let index = self.sources.len();
        self.sources.push(source);
        self.param_splits.push(split.clone());
        Ok(self.add_value(ValueDef::Param(index), spec, split))
    }

    /// Makes `mesh` the function's mesh; another mesh is an error.
    fn join_mesh(&mut self, mesh: &Mesh, op: &'static str) -> Result<()> {
        match &self.mesh {
            None => self.mesh = Some(mesh.clone()),
            Some(m) if m != mesh => {
                let msg = format!("a compiled function runs over one mesh; it met {m} and {mesh}");
                return Err(Error::invalid(op, msg));
            }
            Some(_) => {}
        }
        Ok(())
    }

    fn tensor(&mut self, value: usize) -> Tensor {
        let spec = self.values[value].1.clone();
        let r = TraceRef { trace: self.id, value, split: self.splits[value].clone() };
        let is_op = matches!(self.values[value].0, ValueDef::Op { .. });
        let lazy = self.fused.as_mut().filter(|_| is_op).map(|results| {
            let lazy = Arc::new(Lazy::default());
            results.push((value, Arc::downgrade(&lazy)));
            lazy
        });
        Tensor::traced(r, spec, self.device, self.runtime.clone(), lazy)
    }

    /// A fresh recording on this thread for `device`: a function's trace, or a fused region.
    fn new(device: Device, runtime: Arc<Runtime>, fused: bool) -> Recording {
        Recording {
            id: tracer().next_id.fetch_add(1, Ordering::Relaxed),
            thread: std::thread::current().id(),
            device,
            runtime,
            values: Vec::new(),
            splits: Vec::new(),
            mesh: None,
            sources: Vec::new(),
            param_splits: Vec::new(),
            failed: None,
            captured: HashMap::new(),
            vars: HashMap::new(),
            writes: Vec::new(),
            ops: 0,
            fused: fused.then(Vec::new),
            implicit: false,
            region: Region::FUSED,
            dry: false,
        }
    }

    /// The split of `op`'s result on the values `inputs`, by the rule eager dispatch uses
    /// (an unsplit value of a function with a mesh is whole on every device).
    fn split_of(&self, op: &Op, inputs: &[usize], output: &Spec) -> Result<Option<Sharding>> {
        let Some(mesh) = &self.mesh else { return Ok(None) };
        if op.result_axes().is_none() && inputs.iter().all(|&v| self.splits[v].is_none()) {
            return Ok(None);
        }
        let whole = Sharding::new(mesh, &PartitionSpec::replicated(), &[])?;
        let specs: SmallVec<[Spec; 3]> = inputs.iter().map(|&v| self.values[v].1.clone()).collect();
        let shardings: SmallVec<[&Sharding; 3]> =
            inputs.iter().map(|&v| self.splits[v].as_ref().unwrap_or(&whole)).collect();
        let spec = crate::tensor::sharded::result_spec(op, &specs, &shardings, output);
        Ok(Some(Sharding::new(mesh, &spec, &output.shape)?))
    }

    /// The value standing for `t` in this trace: its own if traced here, else `t` captured.
    fn value_of(&mut self, t: &Tensor, op: &'static str) -> Result<usize> {
        match t.trace_ref() {
            Some(r) if r.trace == self.id => Ok(r.value),
            Some(_) => Err(Error::invalid(op, "a tensor traced in another compiled function was used here: return it from that function instead")),
            None => {
                if t.sharding().is_none() && t.device() != self.device {
                    return Err(Error::invalid(op, format!("a compiled function runs on one device: {} is on {}, the function on {}", t.spec(), t.device(), self.device)));
                }
                // A fused region's scalars are each read as their own input: scalars come from
                // a cache shared by value, so which of them alias changes from step to step (a
                // counter starting at the cached 0.0), and with it the program (a recompile).
                let by_identity = self.fused.is_none() || !t.spec().shape.is_empty();
                if let Some(&v) = self.captured.get(&t.data_identity()).filter(|_| by_identity) {
                    return Ok(v);
                }
                let split = t.sharding().cloned();
                let v = self.add_param(Source::Captured(t.detach()), t.spec().clone(), split, op)?;
                if by_identity {
                    self.captured.insert(t.data_identity(), v);
                }
                Ok(v)
            }
        }
    }
}

/// Records `op` on `inputs` (at least one of them traced) into this thread's trace.
pub(crate) fn record_op(op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
    let name = op.name();
    let node_inputs: SmallVec<[Tensor; 3]>;
    let mut fused = false;
    let out = with_recording(|rec| -> Result<Tensor> {
        fused = rec.fused.is_some();
        let values: SmallVec<[usize; 3]> = inputs.iter().map(|t| rec.value_of(t, name)).collect::<Result<_>>()?;
        let specs: SmallVec<[Spec; 3]> = values.iter().map(|&v| rec.values[v].1.clone()).collect();
        if matches!(op, Op::Call(_)) {
            return Err(Error::invalid(name, "calling a compiled function inside another is not supported: call its closure instead"));
        }
        let spec = op.infer(&specs)?;
        let split = rec.split_of(&op, &values, &spec)?;
        let v = rec.add_value(ValueDef::Op { op: op.clone(), inputs: values }, spec, split);
        rec.ops += 1;
        Ok(rec.tensor(v))
    })
    .unwrap_or_else(|| Err(Error::invalid(name, "a tensor traced inside a compiled function was used after the function returned; use the outputs of its call")))?;
    // Gradients flow inside a trace through traced tensors only: a captured tensor is a
    // constant of the program (parameters to train are Vars or arguments). A fused region
    // keeps eager's autograd: gradients flow to the tensors it read.
    node_inputs = inputs
        .iter()
        .map(|t| if fused || t.trace_ref().is_some() { (*t).clone() } else { t.detach() })
        .collect();
    let refs: SmallVec<[&Tensor; 3]> = node_inputs.iter().collect();
    Ok(out.with_node(crate::tensor::grad::record(&op, &refs)))
}

/// Inside a trace, makes `mesh` the function's mesh (an error if it has another one).
pub(crate) fn use_mesh(mesh: &Mesh, op: &'static str) -> Result<()> {
    with_recording(|rec| rec.join_mesh(mesh, op)).unwrap_or(Ok(()))
}

/// Inside a trace, the traced value of `var` (read once per trace, then what was last set).
pub(crate) fn read_var(var: &Var) -> Option<Tensor> {
    with_recording(|rec| {
        if rec.fused.is_some() {
            return None; // a fused region reads Vars as eager code does
        }
        if let Some(t) = rec.vars.get(&var.id()) {
            return Some(t.clone());
        }
        let current = var.current();
        let split = current.sharding().cloned();
        let v = match rec.add_param(
            Source::Var(var.clone()),
            current.spec().clone(),
            split.clone(),
            "Var::get",
        ) {
            Ok(v) => v,
            // Var::get cannot fail: the trace returns the error. Until then the Var reads as
            // if it were on one device.
            Err(e) => {
                rec.failed.get_or_insert(e);
                let spec = current.spec().clone();
                rec.add_param(Source::Var(var.clone()), spec, None, "Var::get").expect("no mesh to join")
            }
        };
        let mut t = rec.tensor(v);
        if var.requires_grad() {
            t = t.set_requires_grad(true).expect("parameters are floating point");
        }
        rec.vars.insert(var.id(), t.clone());
        Some(t)
    })
    .flatten()
}

/// Inside a trace, records that `var` is set to `value` (returns false outside a trace).
pub(crate) fn write_var(var: &Var, value: &Tensor) -> Result<bool> {
    with_recording(|rec| -> Result<bool> {
        if rec.dry {
            return Ok(true); // the real run sets it
        }
        if rec.fused.is_some() {
            return Ok(false);
        }
        let v = rec.value_of(value, "Var::set")?;
        let current = var.current();
        if rec.values[v].1 != *current.spec() {
            return Err(Error::shape(
                "Var::set",
                format!(
                    "{} holds {}; a compiled function cannot change it to {}",
                    var.name(),
                    current.spec(),
                    rec.values[v].1
                ),
            ));
        }
        rec.vars.insert(var.id(), value.clone());
        match rec.writes.iter_mut().find(|(w, _)| w.id() == var.id()) {
            Some(w) => w.1 = v,
            None => rec.writes.push((var.clone(), v)),
        }
        Ok(true)
    })
    .unwrap_or(Ok(false))
}

/// Inside a trace, a traced parameter fed with fresh random state at every call.
/// (Another device's state is uploaded as usual: the op using it then fails to trace, with a
/// clear error, as any tensor of another device does.)
pub(crate) fn traced_rng_state(device: Device) -> Option<Tensor> {
    with_recording(|rec| {
        (device == rec.device).then(|| {
            let v = rec.add_param(Source::Rng, Spec::new(&[2], DType::U64), None, "rng")?;
            Ok(rec.tensor(v))
        })
    })
    .flatten()
    .and_then(Result::ok)
}

/// Runs `f` as a fused region (torch_xla's lazy mode, TorchTPU's deferred-and-fused, with
/// eager's semantics kept): the ops it dispatches on this thread are recorded instead of run,
/// each result a tensor whose value comes later; at the first read of one of them (a value
/// read, printing, `block_until_ready`) and at the end of the region, what was recorded runs
/// as one program, cached by its structure like any compiled program (the same loop body
/// compiles once). Shape and dtype errors are raised by the op that makes them, as eagerly;
/// autograd, Vars and optimizers work as eagerly. Ops on another device or on tensors split
/// over a mesh run eagerly. Inside a compiled function, or another fused region, `f` just
/// runs (its ops are recorded there already).
pub fn fused<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    fused_region(Region::FUSED, f)
}

/// What a fused region is: its program's name (the profiler's slice) and whether that
/// program starts at the quick tier as a one-op program does (an op made of others) or
/// optimized as a compiled function does (a region the user asked for).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    pub(crate) name: &'static str,
    pub(crate) tiered: bool,
}

impl Region {
    const FUSED: Region = Region { name: "fused", tiered: false };
}

/// Runs `f`, an op made of many (a backward pass, an optimizer's step over all its
/// parameters), as one program named `name` where it can: in a fused region of its own, on
/// the default device. Inside a trace or a fused region it is recorded there; while another
/// thread records, its ops run one by one.
pub(crate) fn fused_op<T>(name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if !ops_as_one() {
        return f();
    }
    fused_region(Region { name, tiered: true }, f)
}

/// Composite ops, backward passes and optimizer steps as one program each (the default), or
/// off: each of their primitives dispatched on its own, as a lesson on what dispatch costs or
/// to see every primitive in the profiler (`EAGER_OPS_AS_ONE=0` at start).
pub fn set_ops_as_one(on: bool) {
    tracer().ops_as_one.store(on, Ordering::Relaxed);
}

/// Whether composite ops, backward passes and optimizer steps run as one program each.
pub fn ops_as_one() -> bool {
    tracer().ops_as_one.load(Ordering::Relaxed)
}

fn fused_region<T>(region: Region, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if with_recording(|_| ()).is_some() {
        return f();
    }
    let device = runtime::default_device();
    let rt = runtime::runtime(device.kind)?;
    if !start_recording(Recording { region, ..Recording::new(device, rt, true) }) {
        // Another thread is tracing or fused: this region runs eagerly.
        return f();
    }
    let out = f();
    // The region's end: what is left runs (its failure, if any, reaches the reads).
    if let Some(rec) = take_fused() {
        run_fused(rec);
    }
    out
}

/// Makes `rec` the tracer's recording, unless one is running (then false: `rec` is dropped).
fn start_recording(rec: Recording) -> bool {
    let t = tracer();
    let mut slot = lock(&t.recording);
    if slot.is_some() {
        return false;
    }
    *slot = Some(rec);
    t.active.store(true, Ordering::Release);
    true
}

/// Takes this thread's fused recording out of the tracer (ops then run eagerly).
fn take_fused() -> Option<Recording> {
    let this = std::thread::current().id();
    take_recording_if(|r| r.thread == this && r.fused.is_some() && !r.dry)
}

/// Takes the tracer's recording out if `which` picks it (no lock when nothing records).
fn take_recording_if(which: impl Fn(&Recording) -> bool) -> Option<Recording> {
    let t = tracer();
    if !t.active.load(Ordering::Acquire) {
        return None;
    }
    let mut slot = lock(&t.recording);
    if !slot.as_ref().is_some_and(which) {
        return None;
    }
    t.active.store(false, Ordering::Release);
    slot.take()
}

/// Runs what this thread's fused region recorded so far; returns the fresh recording the
/// region goes on with (not yet put back).
fn run_recorded() -> Option<Recording> {
    let rec = take_fused()?;
    let fresh = Recording {
        implicit: rec.implicit,
        region: rec.region,
        ..Recording::new(rec.device, rec.runtime.clone(), true)
    };
    run_fused(rec);
    Some(fresh)
}

/// Puts a fused recording back (a fresh one, after a flush, or one set aside).
fn put_fused(rec: Recording) {
    let t = tracer();
    *lock(&t.recording) = Some(rec);
    t.active.store(true, Ordering::Release);
}

/// Runs what this thread's fused region recorded so far, and goes on recording afresh.
fn flush_fused() {
    if let Some(fresh) = run_recorded() {
        put_fused(fresh);
    }
}

/// The value of a fused region's result: computed now (the region's program runs) if the
/// region has not run it yet. The error is the failed program's name and message.
pub(crate) fn resolve(lazy: &Lazy) -> std::result::Result<&Tensor, (String, String)> {
    if lazy.result.get().is_none() {
        flush_fused();
    }
    match lazy.result.get() {
        Some(r) => r.as_ref().map_err(Clone::clone),
        None => Err((
            "fused".into(),
            "this value belongs to a fused region still recording on another thread; read it there".into(),
        )),
    }
}

/// Runs the recording of a fused region as one program whose outputs are the results still
/// held, and gives each its value.
fn run_fused(rec: Recording) {
    let Some(results) = &rec.fused else { return };
    let live: Vec<(usize, Arc<Lazy>)> =
        results.iter().filter_map(|(v, l)| Some((*v, l.upgrade()?))).collect();
    if live.is_empty() {
        return;
    }
    let outputs: Vec<usize> = live.iter().map(|(v, _)| *v).collect();
    let mut program = Program::new(rec.region.name, &rec.values, rec.sources.len(), &outputs, rec.ops);
    program.tiered = rec.region.tiered;
    let run = || -> Result<Vec<Tensor>> {
        let inputs: Vec<Tensor> = rec
            .sources
            .iter()
            .map(|s| match s {
                Source::Captured(c) => Ok(c.clone()),
                Source::Rng => crate::tensor::dispatch::rng_state_tensor(rec.device),
                Source::Arg(_) | Source::Var(_) => unreachable!("a fused region reads no arguments or Vars"),
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let call = Op::Call(Call { program: Arc::new(program) });
        Ok(crate::tensor::dispatch::dispatch_all(call, &refs, Some(rec.device))?.into_vec())
    };
    match run() {
        Ok(outs) => {
            for ((_, lazy), out) in live.iter().zip(outs) {
                let _ = lazy.result.set(Ok(out));
            }
        }
        Err(e) => {
            let failure = ("fused".to_string(), e.to_string());
            for (_, lazy) in &live {
                let _ = lazy.result.set(Err(failure.clone()));
            }
        }
    }
}

/// In a fused region on this thread, records `op` on `inputs` (real tensors or earlier
/// results of the region) and returns its result to come; `None` where the region does not
/// take the op (another device, a mesh, a compiled function's call): it runs eagerly.
pub(crate) fn record_fused(op: &Op, inputs: &[&Tensor], device: Option<Device>) -> Option<Result<Tensor>> {
    let t = tracer();
    if matches!(op, Op::Call(_)) {
        return None;
    }
    if !t.active.load(Ordering::Acquire) {
        if !t.fused_mode.load(Ordering::Relaxed) {
            return None;
        }
        // Fused mode: this thread's ops go to an implicit region until it is ended.
        let device = runtime::default_device();
        let rt = runtime::runtime(device.kind).ok()?;
        if !start_recording(Recording { implicit: true, ..Recording::new(device, rt, true) }) {
            return None;
        }
    }
    let takes = with_recording(|rec| {
        let here = device.unwrap_or(rec.device) == rec.device;
        rec.fused.is_some()
            && here
            && inputs.iter().all(|t| t.device() == rec.device && t.sharding().is_none())
    })?;
    takes.then(|| record_op(op.clone(), inputs))
}

/// When a region is worth fetching ahead ([`ahead`]): the first time it runs, and again
/// while executables were fetched since its last start (its own, or new shapes before it). A
/// loop's backward pass and optimizer step record dry twice, then never.
pub(crate) struct AheadMark(AtomicU64);

impl AheadMark {
    pub(crate) const fn new() -> AheadMark {
        AheadMark(AtomicU64::new(u64::MAX))
    }

    fn due(&self) -> bool {
        let now = crate::cache::cache().fetches();
        self.0.swap(now, Ordering::Relaxed) != now
    }
}

impl Default for AheadMark {
    fn default() -> Self {
        AheadMark::new()
    }
}

/// Before `f` runs for real: if `mark` says so, runs `f` once dry on `device` (its ops on
/// this thread recorded, never run, Var writes dropped) and fetches the executables of the
/// ops it recorded, several at once ([`runtime::fetch_ahead`]); then each of `f`'s
/// dispatches hits. `f` must be an ordinary eager region (a backward pass, an optimizer
/// step) whose effects are its Var writes: what else it does happens twice. Inside a trace or
/// a fused region, in fused mode, or while another thread records, nothing is done (those
/// record anyway); `EAGER_FETCH_AHEAD=0` turns it off. Returns how many executables were
/// fetched.
pub(crate) fn ahead(mark: &AheadMark, device: Device, f: impl FnOnce() -> Result<()>) -> usize {
    // In fused mode the real run records too: one-op executables would go unused.
    if !mark.due() || fused_mode() || std::env::var_os("EAGER_FETCH_AHEAD").is_some_and(|v| v == "0") {
        return 0;
    }
    let Ok(rt) = runtime::runtime(device.kind) else { return 0 };
    if !start_recording(Recording { dry: true, ..Recording::new(device, rt, true) }) {
        return 0;
    }
    // Takes the dry recording out however `f` ends (a panic included: ops after it must run).
    struct Dry;
    impl Drop for Dry {
        fn drop(&mut self) {
            let this = std::thread::current().id();
            take_recording_if(|r| r.thread == this && r.dry);
        }
    }
    let dry = Dry;
    // A failure (a read of a value the dry run never made) ends the recording early: the
    // keys recorded until then are still fetched.
    let _ = f();
    let this = std::thread::current().id();
    let Some(rec) = take_recording_if(|r| r.thread == this && r.dry) else { return 0 };
    drop(dry);
    let keys = rec.values.iter().filter_map(|(def, _)| match def {
        ValueDef::Op { op, inputs } => {
            Some(crate::cache::OpKey::new(op.clone(), inputs.iter().map(|&v| &rec.values[v].1), device))
        }
        ValueDef::Param(_) => None,
    });
    runtime::fetch_ahead(keys.collect::<Vec<_>>())
}

/// Fused mode on or off: on, every op dispatched outside a region or trace records into an
/// implicit fused region, run at the first read or by [`end_fused_region`] (a REPL or
/// notebook cell's end: `:mode fused`); off ends that region first.
pub fn set_fused_mode(on: bool) {
    tracer().fused_mode.store(on, Ordering::Relaxed);
    if !on {
        end_fused_region();
    }
}

/// Whether fused mode is on (see [`set_fused_mode`]).
pub fn fused_mode() -> bool {
    tracer().fused_mode.load(Ordering::Relaxed)
}

/// Runs what the implicit region of fused mode recorded so far, whichever thread recorded it
/// (a REPL ends it after each cell, from its control thread); a new region starts with the
/// next op. Explicit regions ([`fused`]) and traces are left alone.
pub fn end_fused_region() {
    if let Some(rec) = take_recording_if(|r| r.fused.is_some() && r.implicit) {
        run_fused(rec);
    }
}

/// Sets this thread's fused region aside until the guard drops (a compiled function's call
/// inside a region runs as itself, on the region's values computed first).
pub(crate) fn set_fused_aside() -> Option<impl Drop> {
    struct Resume(Option<Recording>);
    impl Drop for Resume {
        fn drop(&mut self) {
            if let Some(rec) = self.0.take() {
                put_fused(rec);
            }
        }
    }
    run_recorded().map(|fresh| Resume(Some(fresh)))
}

/// One trace of a compiled function: its program and what feeds it.
struct Traced {
    program: Arc<Program>,
    sources: Vec<Source>,
    /// Outputs the function returned (the rest are Var writes).
    returned: usize,
    writes: Vec<Var>,
    /// The mesh it runs over (as one SPMD program), the split each parameter was traced
    /// with, and the split of each output.
    mesh: Option<Mesh>,
    param_splits: Vec<Option<Sharding>>,
    output_splits: Vec<Option<Sharding>>,
}

/// A function compiled into one executable per input signature. Create with [`compile`].
pub struct Compiled<F> {
    name: &'static str,
    f: F,
    traces: Mutex<HashMap<Signature, Arc<Traced>>>,
}

/// What a compiled function is traced once per: its arguments' specs, the device, the
/// arguments' splits (collectives inside take blocks along them) and the autocast dtype of
/// the call (autocast decides the dtypes the traced ops run in).
type Signature = (SmallVec<[Spec; 4]>, Device, SmallVec<[Option<Sharding>; 4]>, Option<DType>);

/// Compiles `f`: the first call with given argument shapes and dtypes traces it into one
/// StableHLO program; every call runs that program as one executable. `f` must compute its
/// results from its arguments, captured tensors and [`Var`]s with eager ops only (no reads of
/// values to the host, which do not exist while tracing).
pub fn compile<F>(name: &str, f: F) -> Compiled<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    // Op names are `&'static str`: the profiler's interning serves program names too.
    Compiled { name: crate::profiler::intern(name.to_string()), f, traces: Mutex::new(HashMap::new()) }
}

impl<F> Compiled<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    /// Runs the compiled function on `args` (tracing and compiling it first for a new
    /// signature). Returns what the function returned; Vars it set are updated.
    pub fn call(&self, args: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _region = set_fused_aside();
        let device = args.first().map(|t| t.device()).unwrap_or_else(runtime::default_device);
        let splits = args.iter().map(|t| t.sharding().cloned()).collect();
        let autocast = crate::autocast::autocast_dtype();
        let key = (args.iter().map(|t| t.spec().clone()).collect(), device, splits, autocast);
        let cached = lock(&self.traces).get(&key).cloned();
        let traced = match cached {
            // Vars read by the program must still have the shapes it was traced with.
            Some(t) if vars_match(&t) => t,
            _ => {
                let t = Arc::new(self.trace(args, device)?);
                lock(&self.traces).insert(key, t.clone());
                t
            }
        };
        run(&traced, args)
    }

    /// Number of signatures traced so far.
    pub fn traces(&self) -> usize {
        lock(&self.traces).len()
    }

    /// The StableHLO text of the program for `args` (tracing it if needed), for inspection.
    pub fn program_text(&self, args: &[&Tensor]) -> Result<String> {
        let device = args.first().map(|t| t.device()).unwrap_or_else(runtime::default_device);
        Ok(self.trace(args, device)?.program.text.clone())
    }

    fn trace(&self, args: &[&Tensor], device: Device) -> Result<Traced> {
        let t = tracer();
        let _one = lock(&t.one_at_a_time);
        let rt = runtime::runtime(device.kind)?;
        let mut rec = Recording::new(device, rt, false);
        let arg_tensors: Vec<Tensor> = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let v = rec.add_param(Source::Arg(i), a.spec().clone(), a.sharding().cloned(), self.name)?;
                let traced = rec.tensor(v);
                // An argument that requires gradients is differentiable inside the function.
                if a.requires_grad() {
                    traced.set_requires_grad(true)
                } else {
                    Ok(traced)
                }
            })
            .collect::<Result<_>>()?;
        *lock(&t.recording) = Some(rec);
        t.active.store(true, Ordering::Release);
        let returned = (self.f)(&arg_tensors);
        t.active.store(false, Ordering::Release);
        let mut rec = lock(&t.recording).take().expect("the recording of this trace");
        let returned = returned?;
        if let Some(e) = rec.failed.take() {
            return Err(e);
        }
        let mut outputs = Vec::with_capacity(returned.len() + rec.writes.len());
        for r in &returned {
            outputs.push(rec.value_of(r, self.name)?);
        }
        let writes: Vec<Var> = rec.writes.iter().map(|(v, _)| v.clone()).collect();
        outputs.extend(rec.writes.iter().map(|(_, value)| *value));
        if outputs.is_empty() {
            return Err(Error::invalid(self.name, "a compiled function must return a tensor or set a Var"));
        }
        let program = Program::new(self.name, &rec.values, rec.sources.len(), &outputs, rec.ops);
        let mut sources = std::mem::take(&mut rec.sources);
        if let Some(mesh) = &rec.mesh {
            // Captured tensors on one device join the mesh whole, once.
            for s in &mut sources {
                if let Source::Captured(c) = s {
                    if c.sharding().is_none() {
                        *c = c.replicate(mesh)?;
                    }
                }
            }
        }
        Ok(Traced {
            program: Arc::new(program),
            sources,
            returned: returned.len(),
            writes,
            output_splits: outputs.iter().map(|&v| rec.splits[v].clone()).collect(),
            param_splits: std::mem::take(&mut rec.param_splits),
            mesh: rec.mesh.take(),
        })
    }
}

/// Whether every Var the program reads still has the spec and split it was traced with.
fn vars_match(t: &Traced) -> bool {
    t.sources.iter().zip(&t.program.params).zip(&t.param_splits).all(|((s, spec), split)| match s {
        Source::Var(v) => {
            let current = v.current();
            current.spec() == spec && current.sharding() == split.as_ref()
        }
        _ => true,
    })
}

fn run(t: &Traced, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let device = args.first().map(|a| a.device()).unwrap_or_else(runtime::default_device);
    let inputs: Vec<Tensor> = t
        .sources
        .iter()
        .map(|s| match s {
            Source::Arg(i) => Ok(args[*i].detach()),
            Source::Captured(c) => Ok(c.clone()),
            Source::Var(v) => Ok(v.current().detach()),
            Source::Rng => crate::tensor::dispatch::rng_state_tensor(device),
        })
        .collect::<Result<_>>()?;
    let call = Op::Call(Call { program: t.program.clone() });
    let mut outs = match t.mesh.clone() {
        None => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            crate::tensor::dispatch::dispatch_all(call, &refs, Some(device))?.into_vec()
        }
        // One SPMD program over the mesh: what it reads from one device (its random state,
        // arguments on one device) is replicated; each Var it writes keeps its split, and
        // what it returns is split as traced.
        Some(mesh) => {
            let joined: Vec<Tensor> = inputs
                .into_iter()
                .map(|x| if x.sharding().is_none() { x.replicate(&mesh) } else { Ok(x) })
                .collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = joined.iter().collect();
            let var_split = |i: usize| {
                let var = t.writes.get(i.checked_sub(t.returned)?)?;
                let current = var.current();
                let s = current.sharding().filter(|s| s.mesh() == &mesh)?;
                Some(s.spec().clone())
            };
            let keep = |i: usize, _: &crate::shape::Spec| {
                var_split(i).or_else(|| Some(t.output_splits[i].as_ref()?.spec().clone()))
            };
            crate::tensor::sharded::dispatch_partitioned_all(call, &refs, keep)?
        }
    };
    let written = outs.split_off(t.returned);
    for (var, value) in t.writes.iter().zip(written) {
        var.set(value)?;
    }
    Ok(outs)
}
