//! Tracing a compiled function: its arguments become the program's first parameters, the
//! function runs with this thread's ops recorded, and what it returned and the Vars it set
//! become the program's outputs. `compile` keeps one [`Traced`] per input signature and runs it.
//! Captured tensors, Vars and random state the function reads become parameters too (the
//! recording adds them as it meets them; see `compile` for what each is fed at a call).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{claim_recording, tracer, Recording, Source, VarSlot};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::mesh::{Mesh, Sharding};
use crate::ops::Program;
use crate::runtime;
use crate::shared::lock;
use crate::tensor::Tensor;

/// One trace of a compiled function: its program and what feeds it.
pub(crate) struct Traced {
    pub(crate) program: Arc<Program>,
    pub(crate) sources: Vec<Source>,
    /// Outputs the function returned (the rest are Var writes).
    pub(crate) returned: usize,
    pub(crate) writes: Vec<Arc<dyn VarSlot>>,
    /// The mesh it runs over (as one SPMD program), the split each parameter was traced
    /// with, and the split of each output.
    pub(crate) mesh: Option<Mesh>,
    pub(crate) param_splits: Vec<Option<Sharding>>,
    pub(crate) output_splits: Vec<Option<Sharding>>,
}

/// Traces `f`, the function of the compiled function `name`, on `args` on `device` into its
/// program (one trace at a time in the process). The arguments at `donate` are aliased to
/// outputs of their shape and dtype, as are the Vars the function overwrites (see
/// [`aliases`]).
pub(crate) fn trace_function(
    name: &'static str,
    f: &impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    args: &[&Tensor],
    device: Device,
    donate: &[usize],
) -> Result<Traced> {
    let t = tracer();
    let _one = lock(&t.one_at_a_time);
    let rt = runtime::runtime(device.kind)?;
    let mut rec = Recording::new(device, rt, false);
    let arg_tensors: Vec<Tensor> = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let v = rec.add_param(Source::Arg(i), a.spec().clone(), a.sharding().cloned(), name)?;
            let traced = rec.tensor(v);
            // An argument that requires gradients is differentiable inside the function.
            if a.requires_grad() {
                traced.set_requires_grad(true)
            } else {
                Ok(traced)
            }
        })
        .collect::<Result<_>>()?;
    claim_recording(rec);
    let returned = f(&arg_tensors);
    t.active.store(false, Ordering::Release);
    let mut rec = lock(&t.recording).take().expect("the recording of this trace");
    let returned = returned?;
    if let Some(e) = rec.failed.take() {
        return Err(e);
    }
    let mut outputs = Vec::with_capacity(returned.len() + rec.writes.len());
    for r in &returned {
        outputs.push(rec.value_of(r, name)?);
    }
    let writes: Vec<Arc<dyn VarSlot>> = rec.writes.iter().map(|(v, _)| v.clone()).collect();
    outputs.extend(rec.writes.iter().map(|(_, value)| *value));
    if outputs.is_empty() {
        return Err(Error::invalid(name, "a compiled function must return a tensor or set a Var"));
    }
    let specs: Vec<&crate::shape::Spec> = outputs.iter().map(|&v| &rec.values[v].1).collect();
    // Over a mesh the program is rewritten per partition with no aliases: nothing is donated.
    let aliases = match rec.mesh {
        None => aliases(name, &rec.sources, &rec.values, returned.len(), &writes, &specs, donate)?,
        Some(_) => Vec::new(),
    };
    let program = Program::new(name, &rec.values, rec.sources.len(), &outputs, rec.ops, &aliases);
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

/// The parameters the program may write outputs into, as `(parameter, output)`: each Var it
/// reads and overwrites (to its write), then each argument at `donate` (to the first output of
/// its shape and dtype not taken, as JAX pairs `donate_argnums`). A donated argument that no
/// output fits is an error: nothing could be written into it.
fn aliases(
    name: &'static str,
    sources: &[Source],
    values: &[(crate::ops::ValueDef, crate::shape::Spec)],
    returned: usize,
    writes: &[Arc<dyn VarSlot>],
    outputs: &[&crate::shape::Spec],
    donate: &[usize],
) -> Result<Vec<(usize, usize)>> {
    let param_spec = |p: usize| {
        values.iter().find_map(|(d, s)| matches!(d, crate::ops::ValueDef::Param(i) if *i == p).then_some(s))
    };
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (w, var) in writes.iter().enumerate() {
        let read = sources.iter().position(|s| matches!(s, Source::Var(v) if v.id() == var.id()));
        if let Some(p) = read {
            if param_spec(p) == Some(outputs[returned + w]) {
                pairs.push((p, returned + w));
            }
        }
    }
    for &i in donate {
        let Some(p) = sources.iter().position(|s| matches!(s, Source::Arg(a) if *a == i)) else {
            return Err(Error::invalid(
                name,
                format!("donates argument {i}, but it takes only {} arguments", count_args(sources)),
            ));
        };
        let spec = param_spec(p).expect("every parameter has a value");
        let free = (0..outputs.len()).find(|&o| outputs[o] == spec && pairs.iter().all(|&(_, t)| t != o));
        match free {
            Some(o) => pairs.push((p, o)),
            None => {
                return Err(Error::invalid(
                    name,
                    format!("donates argument {i} ({spec}), but no result it returns or Var it sets is a {spec} left to write into it; donate only what a result replaces"),
                ))
            }
        }
    }
    Ok(pairs)
}

/// The arguments a trace took.
fn count_args(sources: &[Source]) -> usize {
    sources.iter().filter(|s| matches!(s, Source::Arg(_))).count()
}
