//! The recording of dispatched ops: while a compiled function is traced, a fused region runs
//! or a dry run looks ahead, the ops this thread dispatches are recorded (one value each)
//! instead of run, and the recording becomes one StableHLO program, emitted op by op by the
//! same definitions the eager ops use. It is the tensor layer's because dispatch consults it on
//! every op and what it hands back are tensors; `compile` (above) only caches and runs the
//! programs of traced functions.
//!
//! Rooms: this file (the recording, and what dispatch, Vars and sharding ask of it), `fused`
//! (fused regions, ops as one program, fused mode), `ahead` (dry runs that fetch executables
//! ahead), `function` (tracing a compiled function into its program).

mod ahead;
mod function;
mod fused;

pub(crate) use ahead::{ahead, AheadMark};
pub(crate) use function::{trace_function, Traced};
use fused::Region;
pub use fused::{end_fused_region, fused, fused_mode, ops_as_one, set_fused_mode, set_ops_as_one};
pub(crate) use fused::{fused_op, record_fused, resolve, set_fused_aside};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use smallvec::SmallVec;

use super::{Lazy, Tensor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mesh::{Mesh, PartitionSpec, Sharding};
use crate::ops::{Op, ValueDef};
use crate::runtime::Runtime;
use crate::shape::Spec;
use crate::shared::{lock, Shared};

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
pub(crate) enum Source {
    /// The i-th argument of the call.
    Arg(usize),
    /// A tensor the function captured (or made from captured data while tracing).
    Captured(Tensor),
    /// The value of a Var at the time of the call.
    Var(Arc<dyn VarSlot>),
    /// Fresh random-number state (`u64[2]`), drawn at every call.
    Rng,
}

/// A Var as a recording sees it. Vars sit above this layer (a Var holds a tensor), so `var`
/// implements this: a trace reads and writes a Var's slot through it, and the compiled
/// function that ran the trace sets the Var after each call.
pub(crate) trait VarSlot: Send + Sync {
    /// Identity of the slot (the same for every clone of the Var).
    fn id(&self) -> usize;
    /// The Var's name, for errors.
    fn name(&self) -> &str;
    /// The value in the slot, whatever is being traced.
    fn current(&self) -> Tensor;
    /// Whether it is a parameter that takes gradients now.
    fn requires_grad(&self) -> bool;
    /// Sets the slot as `Var::set` does (a compiled call writing back what it computed).
    fn set(&self, value: Tensor) -> Result<()>;
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
    writes: Vec<(Arc<dyn VarSlot>, usize)>,
    ops: usize,
    /// For a fused region ([`fused()`]): each result handed out, by value (weak: a result
    /// nobody holds any more is no output of the region's program).
    fused: Option<Vec<(usize, Weak<Lazy>)>>,
    /// Fused mode's region, started by an op rather than by [`fused()`].
    implicit: bool,
    /// The region's name and whether its program starts at the quick tier (see [`fused_op`]).
    region: Region,
    /// A dry region ([`ahead()`]): it records only to learn its ops' keys and never runs; Var
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

static TRACER: Shared<Tracer> = Shared::new("eager::tensor::Tracer", || {
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
        let spec = crate::mesh::result_spec(op, &specs, &shardings, output);
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

/// Whether this thread is tracing a compiled function.
pub(crate) fn in_trace() -> bool {
    with_recording(|_| ()).is_some()
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
    Ok(out.with_node(super::grad::record(&op, &refs)))
}

/// Inside a trace, makes `mesh` the function's mesh (an error if it has another one).
pub(crate) fn use_mesh(mesh: &Mesh, op: &'static str) -> Result<()> {
    with_recording(|rec| rec.join_mesh(mesh, op)).unwrap_or(Ok(()))
}

/// Inside a trace, the traced value of `var` (read once per trace, then what was last set).
pub(crate) fn read_var<V: VarSlot + Clone + 'static>(var: &V) -> Option<Tensor> {
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
            Source::Var(Arc::new(var.clone())),
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
                rec.add_param(Source::Var(Arc::new(var.clone())), spec, None, "Var::get")
                    .expect("no mesh to join")
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
pub(crate) fn write_var<V: VarSlot + Clone + 'static>(var: &V, value: &Tensor) -> Result<bool> {
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
            None => rec.writes.push((Arc::new(var.clone()), v)),
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
    .and_then(|r: Result<Tensor>| r.ok())
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

/// Puts `rec` into the tracer's one recording slot. Another thread's recording there is waited
/// for (its fused region ends soon; a trace or a resumed region must not take the slot from
/// under it), up to [`CLAIM_WAIT`], past which it is taken over (a region whose thread died
/// mid-way never ends); this thread's own is replaced, as a trace always did.
fn claim_recording(rec: Recording) {
    let t = tracer();
    let deadline = std::time::Instant::now() + CLAIM_WAIT;
    loop {
        let mut slot = lock(&t.recording);
        let free = match slot.as_ref() {
            None => true,
            Some(other) => other.thread == rec.thread || std::time::Instant::now() >= deadline,
        };
        if free {
            *slot = Some(rec);
            t.active.store(true, Ordering::Release);
            return;
        }
        drop(slot);
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// How long [`claim_recording`] waits for another thread's recording.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

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
