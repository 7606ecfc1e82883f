//! Fused regions (torch_xla's lazy mode, TorchTPU's deferred-and-fused): the ops a region
//! dispatches are recorded and run as one program at the first read of a result or the
//! region's end. Also the ops made of many (composites, backward passes, optimizer steps) run
//! as one program each ("ops as one"), and fused mode's implicit region.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    claim_recording, record_op, start_recording, take_recording_if, tracer, with_recording, Recording, Source,
};
use crate::device::Device;
use crate::error::Result;
use crate::ops::{Call, Op, Program};
use crate::runtime;
use crate::tensor::{Lazy, Tensor};

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
    pub(super) const FUSED: Region = Region { name: "fused", tiered: false };
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

/// Takes this thread's fused recording out of the tracer (ops then run eagerly).
fn take_fused() -> Option<Recording> {
    let this = std::thread::current().id();
    take_recording_if(|r| r.thread == this && r.fused.is_some() && !r.dry)
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
    claim_recording(rec);
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
    // An op run as one (a composite, a backward pass, an optimizer step in eager mode) donates
    // nothing: measured, donating there made the digits CNN's eager step 0.1-0.3 ms slower
    // (1.23-1.38 against 1.34-1.70 ms); a region of the user's, a fused-mode step, does.
    let aliases = if rec.region.tiered { Vec::new() } else { donations(&rec, &outputs) };
    let program = Program::of_recording(
        rec.region.name,
        &rec.values,
        rec.sources.len(),
        &outputs,
        rec.ops,
        rec.region.tiered,
        &aliases,
    );
    let donate: Vec<usize> = aliases.iter().map(|&(p, _)| p).collect();
    let run = || -> Result<Vec<Tensor>> {
        let inputs: Vec<Tensor> = rec
            .sources
            .iter()
            .map(|s| match s {
                Source::Captured(c) => Ok(c.clone()),
                Source::Rng => crate::tensor::rng_state_tensor(rec.device),
                Source::Arg(_) | Source::Var(_) => unreachable!("a fused region reads no arguments or Vars"),
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let call = Op::Call(Call { program });
        Ok(crate::tensor::dispatch::dispatch_donating(call, &refs, Some(rec.device), &donate)?.into_vec())
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

/// The inputs a region's program may write its results into, as `(parameter, output)`: each
/// captured tensor that nothing but the recording holds any more (a Var's old value that the
/// region replaced, an optimizer's old moments, a decode step's old cache), paired with the
/// first output of its shape and dtype not taken. Nobody can read such a tensor again, so its
/// memory is given to the result (donated) instead of allocating the result beside it.
fn donations(rec: &Recording, outputs: &[usize]) -> Vec<(usize, usize)> {
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (p, s) in rec.sources.iter().enumerate() {
        let Source::Captured(c) = s else { continue };
        if c.rank() == 0 || c.other_holders() > 0 || c.shards().is_some() {
            continue;
        }
        let fits = |o: usize| rec.values[outputs[o]].1 == *c.spec() && pairs.iter().all(|&(_, t)| t != o);
        // Best the output made from it (an update `p - lr·g`, a cache written in place), so
        // that XLA can write it where it reads it; else any output of its shape and dtype.
        let made_from = (0..outputs.len()).find(|&o| fits(o) && first_operands_reach(rec, outputs[o], p));
        if let Some(o) = made_from.or_else(|| (0..outputs.len()).find(|&o| fits(o))) {
            pairs.push((p, o));
        }
    }
    pairs
}

/// Whether following the first operand of each op from value `v` reaches parameter `param`:
/// `v` is an update of it (`param - x`, `dynamic_update_slice(param, …)`, `param * μ + g`).
fn first_operands_reach(rec: &Recording, mut v: usize, param: usize) -> bool {
    use crate::ops::ValueDef;
    for _ in 0..64 {
        match &rec.values[v].0 {
            ValueDef::Param(i) => return *i == param,
            ValueDef::Op { inputs, .. } => match inputs.first() {
                Some(&first) => v = first,
                None => return false,
            },
        }
    }
    false
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
