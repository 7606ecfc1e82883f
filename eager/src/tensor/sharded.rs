//! Tensors split over a mesh ([`crate::mesh`]): one buffer per mesh device, made by
//! [`Tensor::shard`] and [`Tensor::replicate`], gathered by every read and by [`Tensor::to`];
//! and an op on them dispatched as one SPMD program over the mesh (XLA's partitioner splits
//! the work and inserts the communication). A tensor on one device never comes here.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use crate::cache::{OpKey, Partitioned};
use crate::error::{Error, Result};
use crate::mesh::{result_spec, Mesh, PartitionSpec, Sharding};
use crate::ops::{Op, Shard};
use crate::pjrt::Buffer;
use crate::profiler::OpInfo;
use crate::runtime::{self, Arg, Completion, Runtime, Source};
use crate::shape::Spec;

use super::{Inner, Tensor};

/// A sharded tensor's layout and its buffers, `buffers[p]` on the mesh's device `p`.
pub(crate) struct Shards {
    pub(crate) sharding: Sharding,
    pub(crate) buffers: Vec<Buffer>,
}

impl Tensor {
    fn from_shards(
        buffers: Vec<Buffer>,
        spec: Spec,
        sharding: Sharding,
        runtime: Arc<Runtime>,
        producer: Option<Arc<OpInfo>>,
        completion: Arc<Completion>,
    ) -> Tensor {
        let op = producer.as_ref().map_or("upload", |p| p.name);
        // One entry per shard, on its device, of the shape each device holds.
        let shard = Spec::new(&sharding.shard_shape(&spec.shape), spec.dtype);
        let bytes = shard.size_in_bytes() as u64;
        let booked = sharding
            .mesh()
            .devices()
            .iter()
            .map(|&d| crate::memory::book(bytes, d, shard.dtype, &shard.shape, op))
            .collect();
        let inner = Inner {
            buffer: None,
            device: sharding.mesh().devices()[0],
            spec,
            runtime,
            producer,
            completion,
            traced: None,
            host_bounds: None,
            shards: Some(Box::new(Shards { sharding, buffers })),
            lazy: None,
            booked,
            donated: std::sync::OnceLock::new(),
        };
        Tensor { inner: Arc::new(inner), autograd: None }
    }

    /// How this tensor is split over a mesh; `None` for a tensor on one device. Inside a
    /// compiled function, a traced value's split is what the ops' rules give it.
    pub fn sharding(&self) -> Option<&Sharding> {
        match self.shards() {
            Some(s) => Some(&s.sharding),
            None => self.trace_ref()?.split(),
        }
    }

    /// This tensor split over `mesh` as `spec` says (JAX's `device_put` with a
    /// `NamedSharding`): each device gets its block. A dim split over mesh axes must divide
    /// evenly; an unknown axis name is an error.
    pub fn shard(&self, mesh: &Mesh, spec: &PartitionSpec) -> Result<Tensor> {
        let sharding = Sharding::new(mesh, spec, self.shape())?;
        let pin = || Op::Shard(Shard { axes: sharding.spec().dims().to_vec() });
        if self.trace_ref().is_some() {
            // Inside a compiled function: a constraint the partitioner follows, always
            // written (what eager knows of a traced value's split is its own rule's guess).
            super::trace::use_mesh(mesh, "shard")?;
            return super::dispatch(pin(), &[self], None);
        }
        if self.sharding() == Some(&sharding) {
            return Ok(self.clone());
        }
        if self.sharding().is_some_and(|s| s.mesh() == mesh) {
            // Another split on the same mesh: one SPMD program moves the blocks between
            // devices (nothing goes to the host).
            return Ok(super::dispatch(pin(), &[self], None)?.with_host_bounds(self.host_bounds()));
        }
        let whole = super::download(self)?;
        Ok(Tensor::upload_blocks(&whole, self.spec(), sharding)?.with_host_bounds(self.host_bounds()))
    }

    /// Row-major `bytes` of `shape` and `dtype` split over `mesh` as `spec` says, each device's
    /// block cut on the host and uploaded to that device alone: no device ever holds the
    /// whole tensor (how a checkpoint too big for one chip is placed as it is read).
    pub fn from_bytes_sharded(
        bytes: &[u8],
        shape: &[usize],
        dtype: crate::dtype::DType,
        mesh: &Mesh,
        spec: &PartitionSpec,
    ) -> Result<Tensor> {
        let full = super::create::checked_bytes("from_bytes_sharded", bytes, shape, dtype)?;
        Tensor::upload_blocks(bytes, &full, Sharding::new(mesh, spec, shape)?)
    }

    /// Each device's block of `whole` (row-major, of `spec`) uploaded to it.
    fn upload_blocks(whole: &[u8], spec: &Spec, sharding: Sharding) -> Result<Tensor> {
        let shape = &spec.shape[..];
        let elem = spec.dtype.size_in_bytes();
        let block = Spec::new(&sharding.shard_shape(shape), spec.dtype);
        let mut buffers = Vec::with_capacity(sharding.mesh().size());
        let mut rt = None;
        for (p, &device) in sharding.mesh().devices().iter().enumerate() {
            let part = copy_block(whole, shape, &sharding.shard_ranges(shape, p), elem, None);
            let (buffer, runtime) = runtime::upload(&part, &block, device)?;
            buffers.push(buffer);
            rt = Some(runtime);
        }
        let rt = rt.expect("a mesh has devices");
        Ok(Tensor::from_shards(buffers, spec.clone(), sharding, rt, None, Completion::ready()))
    }

    /// This tensor whole on every device of `mesh` (JAX's `P()`).
    pub fn replicate(&self, mesh: &Mesh) -> Result<Tensor> {
        self.shard(mesh, &PartitionSpec::replicated())
    }
}

/// A scalar on every device of `mesh`, uploaded once per value (tensors never change).
pub(crate) fn replicated_scalar(value: f64, dtype: crate::dtype::DType, mesh: &Mesh) -> Result<Tensor> {
    let place = super::dispatch::Place::Mesh(mesh.clone());
    super::dispatch::cached_scalar(place, value, dtype, |_| {
        super::dispatch::scalar(value, dtype, mesh.devices()[0])?.replicate(mesh)
    })
}

/// Copies a block of a row-major array of `shape` (`elem` bytes per element): out of `whole`
/// into a new dense block, or, with `into`, from `whole` (the block) into the array.
fn copy_block(
    whole: &[u8],
    shape: &[usize],
    ranges: &[std::ops::Range<usize>],
    elem: usize,
    into: Option<&mut [u8]>,
) -> Vec<u8> {
    let rank = shape.len();
    let block: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    let count: usize = block.iter().product();
    let row = if rank == 0 { 1 } else { block[rank - 1] } * elem;
    let mut strides = vec![elem; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let rows = (count * elem).checked_div(row).unwrap_or(0);
    let mut out = Vec::new();
    let mut into = into;
    if into.is_none() {
        out.reserve(count * elem);
    }
    let mut index = vec![0usize; rank.saturating_sub(1)];
    for r in 0..rows {
        let offset: usize =
            (0..rank).map(|d| (ranges[d].start + index.get(d).copied().unwrap_or(0)) * strides[d]).sum();
        match into.as_deref_mut() {
            Some(dst) => dst[offset..offset + row].copy_from_slice(&whole[r * row..(r + 1) * row]),
            None => out.extend_from_slice(&whole[offset..offset + row]),
        }
        // The next row: count up the index over all dims but the last.
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < block[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// The whole of a sharded tensor on the host: every device's block put in its place.
pub(crate) fn gather(t: &Tensor, shards: &Shards) -> Result<Vec<u8>> {
    let elem = t.dtype().size_in_bytes();
    let mut whole = vec![0u8; t.spec().size_in_bytes()];
    let block = Spec::new(&shards.sharding.shard_shape(t.shape()), t.dtype());
    let describe = || t.describe();
    let mut done = vec![false; shards.sharding.mesh().size()];
    for (p, buffer) in shards.buffers.iter().enumerate() {
        let ranges = shards.sharding.shard_ranges(t.shape(), p);
        // Replicas hold the same block: read one of them.
        let first = (0..p).find(|&q| shards.sharding.shard_ranges(t.shape(), q) == ranges);
        if first.is_some_and(|q| done[q]) {
            continue;
        }
        let device = shards.sharding.mesh().devices()[p];
        let src = Source { buffer, completion: t.completion(), spec: &block, device, describe: &describe };
        let bytes = runtime::download(&src)?;
        copy_block(&bytes, t.shape(), &ranges, elem, Some(&mut whole));
        done[p] = true;
    }
    Ok(whole)
}

/// Runs `op` on inputs of which at least one is sharded, as one SPMD program over its mesh.
/// Scalars on one device join as replicated, and so does anything on one device while a
/// function is traced; anything else on one device, or on another mesh, is an error. The result is split as the op's [`Op::dim_sources`] allow (whole on
/// every device where nothing says otherwise).
pub(crate) fn dispatch_partitioned(op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
    let mut outs = dispatch_partitioned_all(op, inputs, |_, _| None)?;
    Ok(outs.swap_remove(0))
}

/// [`dispatch_partitioned`] for ops with any number of results (a compiled function's call):
/// `split(i, spec)` may name result `i`'s partition spec (else the op's rule gives the first
/// result's, and the others are whole on every device).
pub(crate) fn dispatch_partitioned_all(
    op: Op,
    inputs: &[&Tensor],
    split: impl Fn(usize, &Spec) -> Option<PartitionSpec>,
) -> Result<Vec<Tensor>> {
    let start = Instant::now();
    runtime::check_interrupt(&op)?;
    let mesh = inputs.iter().find_map(|t| t.sharding()).expect("one input is sharded").mesh().clone();
    let mut joined: SmallVec<[Tensor; 4]> = SmallVec::new();
    for t in inputs {
        match t.sharding() {
            Some(s) if s.mesh() == &mesh => joined.push((*t).clone()),
            Some(s) => {
                let msg = format!("inputs are split over different meshes: {} and {}", mesh, s.mesh());
                return Err(Error::invalid(op.name(), msg));
            }
            // A scalar joins as replicated; so does anything on one device while a function
            // is traced (values known at trace time become constants of its one SPMD program).
            None if t.rank() == 0 || super::trace::in_trace() => joined.push(t.replicate(&mesh)?),
            None => {
                let msg = format!(
                    "{} on {} cannot join tensors split over {mesh}: .replicate(&mesh) or .shard(&mesh, spec) it",
                    t.spec(),
                    t.device()
                );
                return Err(Error::invalid(op.name(), msg));
            }
        }
    }
    let specs: SmallVec<[Spec; 3]> = joined.iter().map(|t| t.spec().clone()).collect();
    let output = op.infer(&specs)?;
    let shardings: Vec<&Sharding> = joined.iter().map(|t| t.sharding().expect("joined")).collect();
    let results: Vec<Spec> =
        std::iter::once(output.clone()).chain(op.more_outputs().iter().cloned()).collect();
    let out_shardings: Vec<Sharding> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let spec = split(i, r).unwrap_or_else(|| {
                if i == 0 {
                    result_spec(&op, &specs, &shardings, &output)
                } else {
                    PartitionSpec::replicated()
                }
            });
            Sharding::new(&mesh, &spec, &r.shape)
        })
        .collect::<Result<_>>()?;
    let partitioned = Partitioned {
        mesh: mesh.clone(),
        inputs: specs.iter().zip(&shardings).map(|(s, sh)| sh.sdy(s.rank())).collect(),
        outputs: results.iter().zip(&out_shardings).map(|(r, sh)| sh.sdy(r.rank())).collect(),
        splits: shardings.iter().copied().chain(&out_shardings).map(|s| s.spec().to_string()).collect(),
    };
    let key =
        OpKey { op, inputs: specs, device: mesh.devices()[0], partitioned: Some(Arc::new(partitioned)) };
    let rt = joined[0].runtime().clone();
    let buffers: Vec<&Shards> = joined.iter().map(|t| t.shards().expect("joined")).collect();
    let args: Vec<Vec<Arg>> = (0..mesh.size())
        .map(|p| {
            joined
                .iter()
                .zip(&buffers)
                .map(|(t, s)| Arg { buffer: &s.buffers[p], completion: t.completion(), donate: false })
                .collect()
        })
        .collect();
    let launched = runtime::execute_partitioned(&rt, key, &args, start)?;
    let (info, completion) = (launched.info, launched.completion);
    Ok(launched
        .outputs
        .into_iter()
        .zip(out_shardings)
        .map(|((buffers, spec), sharding)| {
            Tensor::from_shards(buffers, spec, sharding, rt.clone(), Some(info.clone()), completion.clone())
        })
        .collect())
}
