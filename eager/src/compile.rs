//! Compiled functions (the role of `jax.jit` / `torch_xla.compile`): a closure over tensors is
//! traced once per input signature — every op it dispatches is recorded instead of run — and
//! the recording becomes one StableHLO module, emitted op by op by the same definitions the
//! eager ops use. It then runs as one executable, cached (in memory and on disk) like a single
//! op, and shows in the profiler as one slice.
//!
//! What a traced function reads becomes an input of the program: its arguments, tensors it
//! captured, [`Var`](crate::var::Var)s (read at every call) and fresh random state (drawn at
//! every call). Setting a Var becomes an output written back after the call. Ops on tensors
//! that are all known at trace time run eagerly once and their results are captured.
//!
//! The recording itself is the tensor layer's (`tensor/trace/`: dispatch consults it on every
//! op); this module keeps one trace per input signature of a [`Compiled`] function and runs
//! its program, and gives the recording's public switches (fused regions, fused mode, ops as
//! one) their names here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::mesh::Sharding;
use crate::ops::{Call, Op};
use crate::runtime;
use crate::shape::Spec;
use crate::shared::lock;
use crate::tensor::trace::{set_fused_aside, trace_function, Source, Traced};
use crate::tensor::Tensor;

pub use crate::tensor::trace::{
    end_fused_region, fused, fused_mode, ops_as_one, set_fused_mode, set_ops_as_one,
};
// Layers above (nn, optim) name these as compile's; they are the recording's.
pub(crate) use crate::tensor::trace::{ahead, fused_op, AheadMark};

/// A function compiled into one executable per input signature. Create with [`compile`].
pub struct Compiled<F> {
    name: &'static str,
    f: F,
    /// The arguments whose buffers each call gives to the program (see [`Compiled::donate`]).
    donate: Vec<usize>,
    /// And every argument from this one on (see [`Compiled::donate_from`]).
    donate_from: Option<usize>,
    traces: Mutex<HashMap<Signature, Arc<Traced>>>,
}

/// What a compiled function is traced once per: its arguments' specs, the device, the
/// arguments' splits (collectives inside take blocks along them) and the autocast dtype of
/// the call (autocast decides the dtypes the traced ops run in).
type Signature = (SmallVec<[Spec; 4]>, Device, SmallVec<[Option<Sharding>; 4]>, Option<DType>);

/// Compiles `f`: the first call with given argument shapes and dtypes traces it into one
/// StableHLO program; every call runs that program as one executable. `f` must compute its
/// results from its arguments, captured tensors and [`Var`](crate::var::Var)s with eager ops
/// only (no reads of values to the host, which do not exist while tracing).
pub fn compile<F>(name: &str, f: F) -> Compiled<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    // Op names are `&'static str`: the profiler's interning serves program names too.
    let name = crate::profiler::intern(name.to_string());
    Compiled { name, f, donate: Vec::new(), donate_from: None, traces: Mutex::new(HashMap::new()) }
}

impl<F> Compiled<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    /// Donates the arguments at `indices` at every call (JAX's `donate_argnums`): the program
    /// writes a result of the same shape and dtype into each one's memory, in place, instead
    /// of allocating it — a decode step's key/value cache, a state carried from step to step.
    /// After a call a donated argument holds no values: reading or using it (any handle of
    /// it) is an error naming this function; use what the call returned. A donated argument
    /// that no result fits is an error at the first call. An argument passed twice in one
    /// call is not donated (PJRT copies it for its result instead), nor is a 0-d one.
    ///
    /// Without this, the Vars a function overwrites are donated already, when nothing else
    /// holds their old value (a value held elsewhere is copied and left as it was).
    pub fn donate(mut self, indices: impl IntoIterator<Item = usize>) -> Self {
        self.donate = indices.into_iter().collect();
        self.donate.sort_unstable();
        self.donate.dedup();
        self
    }

    /// Donates argument `first` and every one after it, however many a call passes (as
    /// [`Compiled::donate`]): the caches of a batch whose size changes from call to call.
    pub fn donate_from(mut self, first: usize) -> Self {
        self.donate_from = Some(first);
        self
    }

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
        let mut donate = self.donate.clone();
        donate.extend(self.donate_from.map_or(0..0, |first| first..args.len()));
        donate.sort_unstable();
        donate.dedup();
        trace_function(self.name, &self.f, args, device, &donate)
    }
}

/// The inputs of a call whose buffers go to the program: each aliased one (a donated argument,
/// a Var overwritten) but those passed more than once, a Var's value something besides the
/// Var holds (its holder keeps it as it was), and scalars (nothing to save, and a scalar may
/// be one of the constants eager keeps on the device for `x * 2.0`).
fn donated_inputs(t: &Traced, inputs: &[Tensor]) -> Vec<usize> {
    let once = |p: usize| {
        let id = inputs[p].data_identity();
        inputs.iter().filter(|x| x.data_identity() == id).count() == 1
    };
    t.program
        .aliases
        .iter()
        .map(|&(p, _)| p)
        .filter(|&p| inputs[p].rank() > 0)
        .filter(|&p| match &t.sources[p] {
            // Ours and the Var's handles.
            Source::Var(_) => inputs[p].other_holders() == 1,
            _ => once(p),
        })
        .collect()
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
            Source::Rng => crate::tensor::rng_state_tensor(device),
        })
        .collect::<Result<_>>()?;
    let call = Op::Call(Call { program: t.program.clone() });
    let mut outs = match t.mesh.clone() {
        None => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let donate = donated_inputs(t, &inputs);
            crate::tensor::dispatch::dispatch_donating(call, &refs, Some(device), &donate)?.into_vec()
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
