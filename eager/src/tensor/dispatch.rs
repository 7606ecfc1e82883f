//! Where a tensor meets the runtime on one device: [`dispatch_all`] runs one op there now
//! (execute → wrap), transfers wrap buffers as tensors, and scalars are uploaded once per
//! value. The way in, [`dispatch`](super::dispatch) (trace → autograd → a mesh or one device,
//! ending here), is the parent's: `trace` and `sharded` run ops here and come back through it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use smallvec::SmallVec;

use crate::cache::OpKey;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::runtime::{self, default_device, Arg, Completion, Source};
use crate::shape::Spec;
use crate::shared::{lock, Shared};

use super::Tensor;

/// [`dispatch`] for ops with any number of outputs (a compiled function's call).
pub(crate) fn dispatch_all(
    op: Op,
    inputs: &[&Tensor],
    device: Option<Device>,
) -> Result<SmallVec<[Tensor; 1]>> {
    dispatch_donating(op, inputs, device, &[])
}

/// [`dispatch_all`] giving the buffers of `inputs[i]` for each `i` in `donate` to the program
/// (a compiled function's call: see `Program::aliases`). Each donated tensor is marked so
/// before its results are booked: the ledger never counts the memory twice, and every handle
/// of it reads as an error naming the program afterwards.
pub(crate) fn dispatch_donating(
    op: Op,
    inputs: &[&Tensor],
    device: Option<Device>,
    donate: &[usize],
) -> Result<SmallVec<[Tensor; 1]>> {
    let start = Instant::now();
    runtime::check_interrupt(&op)?;
    let (rt, device) = match inputs.first() {
        Some(t) => (t.runtime().clone(), t.device()),
        None => {
            let d = device.unwrap_or_else(default_device);
            (runtime::runtime(d.kind)?, d)
        }
    };
    if let Some(other) = inputs.iter().find(|t| t.device() != device) {
        return Err(Error::invalid(
            op.name(),
            format!(
                "expected all tensors on one device, got {device} and {}; move one with .to(..)",
                other.device()
            ),
        ));
    }
    let mut args: SmallVec<[Arg; 4]> = SmallVec::with_capacity(inputs.len());
    for (i, t) in inputs.iter().enumerate() {
        args.push(Arg { buffer: t.buffer()?, completion: t.completion(), donate: donate.contains(&i) });
    }
    let program = op.name();
    let key = OpKey::new(op, inputs.iter().map(|t| t.spec()), device);
    let launched = runtime::execute(&rt, device, key, &args, start)?;
    for &i in donate {
        inputs[i].mark_donated(program, i);
    }
    let (info, completion) = (launched.info, launched.completion);
    Ok(launched
        .outputs
        .into_iter()
        .map(|(buffer, spec)| {
            Tensor::from_parts(buffer, spec, device, rt.clone(), (Some(info.clone()), ""), completion.clone())
        })
        .collect())
}

/// The executable `op` runs for `inputs` (compiling it if needed): for benchmarks that time
/// the raw PJRT execute of exactly what a dispatch runs.
#[doc(hidden)]
pub fn executable_for(op: Op, inputs: &[&Tensor]) -> Result<Arc<crate::pjrt::Executable>> {
    let device = inputs.first().map(|t| t.device()).unwrap_or_else(default_device);
    let rt = runtime::runtime(device.kind)?;
    let key = OpKey::new(op, inputs.iter().map(|t| t.spec()), device);
    Ok(runtime::executable(&rt, key, Instant::now())?.exe)
}

/// Builds the key of `op` on `inputs` and looks it up, as a dispatch does, and nothing else:
/// for benchmarks that take the hit path apart. Returns whether it hit.
#[doc(hidden)]
pub fn lookup_only(op: Op, inputs: &[&Tensor]) -> bool {
    let device = inputs.first().map(|t| t.device()).unwrap_or_else(default_device);
    let key = OpKey::new(op, inputs.iter().map(|t| t.spec()), device);
    crate::cache::cache().lookup(&key).is_some()
}

/// Copies host bytes (dense, row-major, of `spec`) to `device` as a tensor.
pub(crate) fn upload(bytes: &[u8], spec: Spec, device: Device) -> Result<Tensor> {
    let (buffer, rt) = runtime::upload(bytes, &spec, device)?;
    Ok(Tensor::from_parts(buffer, spec, device, rt, (None, "upload"), Completion::ready()))
}

impl Tensor {
    /// This tensor as a buffer to read (see [`runtime::Source`]).
    pub(super) fn with_source<T>(&self, f: impl FnOnce(&Source) -> Result<T>) -> Result<T> {
        let describe = || self.describe();
        let src = Source {
            buffer: self.buffer()?,
            completion: self.completion(),
            spec: self.spec(),
            device: self.device(),
            describe: &describe,
        };
        f(&src)
    }
}

/// Copies a tensor to another device (same plugin: device to device; else through the host).
pub(crate) fn copy_to(t: &Tensor, device: Device) -> Result<Tensor> {
    if device == t.device() && t.shards().is_none() {
        return Ok(t.clone());
    }
    if device.kind != t.device().kind || t.shards().is_some() {
        let bytes = super::download(t)?;
        return upload(&bytes, t.spec().clone(), device);
    }
    let rt = t.runtime().clone();
    let buffer = t.with_source(|src| runtime::copy_to_device(src, &rt, device))?;
    Ok(Tensor::from_parts(buffer, t.spec().clone(), device, rt, (None, "to"), Completion::ready()))
}

/// Scalars kept on the device before the map is emptied (a loop uses a few constants; a
/// sweep over many values must not grow it without bound).
const SCALAR_CACHE_ENTRIES: usize = 1024;

/// Where a cached scalar lives: on one device, or on every device of a mesh.
#[derive(PartialEq, Eq, Hash)]
pub(crate) enum Place {
    Device(Device),
    Mesh(crate::mesh::Mesh),
}

/// Scalars already placed, by (place, dtype, bits of the value in that dtype).
type ScalarCache = Mutex<HashMap<(Place, DType, u64), Tensor>>;

static SCALARS: Shared<ScalarCache> = Shared::new("eager::tensor::ScalarCache", ScalarCache::default);

/// A scalar of `dtype` on `device`. Values of scalars are inputs, not attributes, so that
/// `x * 2.0` and `x * 3.0` share one executable; each value is uploaded once and reused
/// (tensors never change), so a training loop's `* lr` costs no transfer per step.
pub(crate) fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
    cached_scalar(Place::Device(device), value, dtype, |bytes| upload(bytes, Spec::new(&[], dtype), device))
}

/// The scalar `value` of `dtype` at `place`, made by `make` (from its bytes) the first time.
pub(crate) fn cached_scalar(
    place: Place,
    value: f64,
    dtype: DType,
    make: impl FnOnce(&[u8]) -> Result<Tensor>,
) -> Result<Tensor> {
    let bytes = crate::dtype::encode_f64(&[value], dtype);
    let mut bits = [0u8; 8];
    bits[..bytes.len()].copy_from_slice(&bytes);
    let key = (place, dtype, u64::from_le_bytes(bits));
    let scalars = SCALARS.get();
    if let Some(t) = lock(scalars).get(&key) {
        return Ok(t.clone());
    }
    let t = make(&bytes)?;
    let mut map = lock(scalars);
    if map.len() >= SCALAR_CACHE_ENTRIES {
        map.clear();
    }
    map.insert(key, t.clone());
    Ok(t)
}
