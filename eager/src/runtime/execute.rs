//! Running an op: [`execute`] (one device) and [`execute_partitioned`] (an SPMD program over a
//! mesh) fetch the key's executable, enqueue it and return its outputs at once; the completion
//! event books the device time and any failure. Launch errors name out of memory as such.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use super::completion::{out_of_memory, Completion, Failure};
use super::fetch::{executable, Fetched};
use super::start::{device_slot, state};
use super::Runtime;
use crate::cache::OpKey;
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::ops::IndexCheck;
use crate::pjrt;
use crate::profiler::{profiler, EventKind, OpInfo};
use crate::shape::Spec;

/// A dispatched op's input, as the runtime sees it: its buffer and how it came to be ready.
pub(crate) struct Arg<'a> {
    pub(crate) buffer: &'a pjrt::Buffer,
    pub(crate) completion: &'a Arc<Completion>,
    /// Whether its buffer is given to the program: where the program aliases it to an output
    /// (see `Program::aliases`), that output is written into it in place and the buffer is
    /// gone after the launch. Otherwise PJRT copies an aliased argument first.
    pub(crate) donate: bool,
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
    // Aliased parameters whose argument is not donated: PJRT copies those.
    let keep: SmallVec<[i64; 4]> = match &key.op {
        crate::ops::Op::Call(c) => {
            c.program.aliases.iter().filter(|(p, _)| !args[*p].donate).map(|(p, _)| *p as i64).collect()
        }
        _ => SmallVec::new(),
    };
    let Fetched { exe, info, outcome, ns: compile_ns, heat } = executable(rt, key, start)?;
    let out_bytes = info.output.size_in_bytes() + more_outputs.iter().map(Spec::size_in_bytes).sum::<usize>();
    // A closure: the signature is formatted only on failure.
    let what = || info.signature();
    crate::memory::admit(&what, device, out_bytes as u64)?;
    let exec_start = Instant::now();
    let buffers: SmallVec<[&pjrt::Buffer; 4]> = args.iter().map(|a| a.buffer).collect();
    let mut out = SmallVec::new();
    let done = exe
        .execute(&buffers, dev, &mut out, true, &keep)
        .map_err(|e| launch_error(what, device, out_bytes, e))?;
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

/// The error of a launch or transfer PJRT refused: out of memory when the plugin says
/// RESOURCE_EXHAUSTED (naming what is live), else as PJRT put it.
pub(super) fn launch_error(
    op: impl FnOnce() -> String,
    device: Device,
    bytes: usize,
    source: pjrt::PjrtError,
) -> Error {
    if out_of_memory(source.code, &source.message) {
        return crate::memory::out_of_memory(op(), device, bytes as u64, source.message, &|_| false);
    }
    Error::Pjrt { op: op(), source }
}
