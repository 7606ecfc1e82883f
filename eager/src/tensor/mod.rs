//! [`Tensor`]: shape, dtype and device over a reference-counted PJRT buffer (freed on the
//! last drop). Every op method builds an [`Op`] through its family's
//! builder in `ops/` (`Tensor` is their `Operand`) and dispatches it at once.
//!
//! By topic: this file (the type and its plumbing, and the ways in that every op, random state
//! and read takes: [`dispatch`], to a trace, a mesh or one device), `create` (constructors),
//! `methods` (the op methods), `read` (values back to the host), `operators` (`+ - * /`),
//! `display`, `grad` (autograd state, `no_grad` scopes: what dispatch consults to record
//! gradients), `trace` (the recording of ops for compiled functions, fused regions and
//! fetching ahead), `sharded` (tensors split over a mesh), `dispatch` (one op on one device,
//! transfers, scalars).

mod collective;
mod create;
pub(crate) mod dispatch;
mod display;
pub(crate) mod grad;
mod methods;
mod operators;
mod read;
pub(crate) mod sharded;
pub(crate) mod trace;

pub use collective::Reduction;
pub use dispatch::{executable_for, lookup_only};

use std::sync::{Arc, OnceLock};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::{Op, Operand};
use crate::pjrt::Buffer;
use crate::profiler::OpInfo;
use crate::runtime::{Completion, Runtime};
use crate::shape::Spec;
use grad::GradState;
use trace::TraceRef;

/// A tensor on a device. Cloning is cheap (the buffer is shared).
#[derive(Clone)]
pub struct Tensor {
    inner: Arc<Inner>,
    /// Autograd state: `None` for tensors no gradient flows through (most of them, so the
    /// dispatch hit path allocates nothing for it).
    autograd: Option<Arc<GradState>>,
}

struct Inner {
    /// The device buffer; `None` for a tensor traced inside a compiled function.
    buffer: Option<Buffer>,
    spec: Spec,
    device: Device,
    runtime: Arc<Runtime>,
    /// The op that made it (`None` for uploads and copies): named when its result fails.
    producer: Option<Arc<OpInfo>>,
    completion: Arc<Completion>,
    /// Where it lives in the function being traced, for a traced tensor.
    traced: Option<TraceRef>,
    /// Smallest and largest value of integer data known on the host (uploaded from it): index
    /// ops check these before dispatch instead of on the device. `(MAX, MIN)` when empty.
    host_bounds: Option<(i64, i64)>,
    /// For a tensor split over a mesh: its sharding and one buffer per mesh device (then
    /// `buffer` is `None` and `device` the mesh's first).
    shards: Option<Box<sharded::Shards>>,
    /// For a tensor made inside a fused region ([`crate::fused`]): its value once the
    /// region's program ran (`traced` says where it is in the region until then).
    lazy: Option<Arc<Lazy>>,
    /// Its buffers' entries in [`crate::memory`]'s ledger, released on drop.
    booked: smallvec::SmallVec<[u64; 1]>,
    /// Set when its buffer was donated to a program that wrote its result there: the tensor
    /// holds no values any more, and every read names the program.
    donated: OnceLock<Donated>,
}

/// Where a tensor's buffer went (see [`Tensor::is_donated`]).
struct Donated {
    /// The compiled function it was donated to.
    program: &'static str,
    /// Its place among the program's inputs.
    input: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for &id in &self.booked {
            crate::memory::release(id);
        }
    }
}

/// The value of a fused region's result, set when the region's program runs.
#[derive(Default)]
pub(crate) struct Lazy {
    pub(crate) result: OnceLock<std::result::Result<Tensor, (String, String)>>,
    /// What `completion()` gives when the program failed (reads report the failure).
    failed: OnceLock<Arc<Completion>>,
}

impl Tensor {
    /// A tensor over `buffer`, made by `producer` (an op) or else by `made_by` (`upload`, `to`).
    pub(crate) fn from_parts(
        buffer: Buffer,
        spec: Spec,
        device: Device,
        runtime: Arc<Runtime>,
        (producer, made_by): (Option<Arc<OpInfo>>, &'static str),
        completion: Arc<Completion>,
    ) -> Tensor {
        let op = producer.as_ref().map_or(made_by, |p| p.name);
        let id = crate::memory::book(spec.size_in_bytes() as u64, device, spec.dtype, &spec.shape, op);
        let booked = smallvec::smallvec![id];
        let (buffer, traced, host_bounds, shards, lazy) = (Some(buffer), None, None, None, None);
        let inner = Inner {
            buffer,
            spec,
            device,
            runtime,
            producer,
            completion,
            traced,
            host_bounds,
            shards,
            lazy,
            booked,
            donated: OnceLock::new(),
        };
        Tensor { inner: Arc::new(inner), autograd: None }
    }

    /// A tensor standing for value `traced` of the function being traced, or (with `lazy`)
    /// of the fused region being recorded.
    pub(crate) fn traced(
        traced: TraceRef,
        spec: Spec,
        device: Device,
        runtime: Arc<Runtime>,
        lazy: Option<Arc<Lazy>>,
    ) -> Tensor {
        let inner = Inner {
            buffer: None,
            spec,
            device,
            runtime,
            producer: None,
            completion: Completion::ready(),
            traced: Some(traced),
            host_bounds: None,
            shards: None,
            lazy,
            booked: smallvec::SmallVec::new(),
            donated: OnceLock::new(),
        };
        Tensor { inner: Arc::new(inner), autograd: None }
    }

    /// Where it is in the function being traced or the fused region being recorded (`None`
    /// once a fused region's program gave it its value).
    pub(crate) fn trace_ref(&self) -> Option<&TraceRef> {
        match &self.inner.lazy {
            Some(l) if l.result.get().is_some() => None,
            _ => self.inner.traced.as_ref(),
        }
    }

    /// The inner that holds the data as things stand: a fused result's value once its
    /// program ran, else its own (never runs anything).
    fn settled(&self) -> &Inner {
        match self.inner.lazy.as_ref().and_then(|l| l.result.get()) {
            Some(Ok(t)) => &t.inner,
            _ => &self.inner,
        }
    }

    /// The inner that holds the data, running the fused region's program first if this is
    /// one of its results not computed yet.
    fn data(&self) -> Result<&Inner> {
        let Some(lazy) = &self.inner.lazy else { return Ok(&self.inner) };
        match trace::resolve(lazy) {
            Ok(t) => Ok(&t.inner),
            Err((op, message)) => {
                Err(Error::DeviceFailure { op, message, read: format!("{} of a fused region", self.spec()) })
            }
        }
    }

    /// One buffer per mesh device, for a tensor split over a mesh.
    pub(crate) fn shards(&self) -> Option<&sharded::Shards> {
        self.settled().shards.as_deref()
    }

    /// Smallest and largest value, for integer data known on the host (`Inner::host_bounds`).
    pub(crate) fn host_bounds(&self) -> Option<(i64, i64)> {
        self.settled().host_bounds
    }

    /// This tensor with host bounds `bounds` (a fresh result of a value-preserving op of a
    /// tensor that had them); unchanged if its data is shared already.
    fn with_host_bounds(mut self, bounds: Option<(i64, i64)>) -> Tensor {
        if let (Some(b), Some(inner)) = (bounds, Arc::get_mut(&mut self.inner)) {
            inner.host_bounds = Some(b);
        }
        self
    }

    /// The same values, cut from the graph: no gradient flows back through the result.
    pub fn detach(&self) -> Tensor {
        Tensor { inner: self.inner.clone(), autograd: None }
    }

    /// This tensor's place in the autograd graph without its value (the same autograd state,
    /// shape, dtype and device): what a node keeps of an input its gradient rule does not
    /// read. A tensor split over a mesh is kept whole (rules consult its split).
    pub(crate) fn without_value(&self) -> Tensor {
        if self.inner.shards.is_some() || self.inner.traced.as_ref().is_some_and(|r| r.split().is_some()) {
            return self.clone();
        }
        let inner = Inner {
            buffer: None,
            spec: self.inner.spec.clone(),
            device: self.inner.device,
            runtime: self.inner.runtime.clone(),
            producer: None,
            completion: Arc::default(),
            traced: None,
            host_bounds: None,
            shards: None,
            lazy: None,
            booked: smallvec::SmallVec::new(),
            donated: OnceLock::new(),
        };
        Tensor { inner: Arc::new(inner), autograd: self.autograd.clone() }
    }

    /// Identity of this tensor in a backward pass: its autograd state, else its data.
    pub(crate) fn identity(&self) -> usize {
        match &self.autograd {
            Some(s) => Arc::as_ptr(s) as usize,
            None => Arc::as_ptr(&self.inner) as usize,
        }
    }

    /// Identity of the data (the same for a tensor and its detached copies).
    pub(crate) fn data_identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Whether its buffer was donated to a compiled function (which wrote a result into that
    /// memory): then it holds no values, and reading or using it is an error naming the function.
    pub fn is_donated(&self) -> bool {
        self.data().is_ok_and(|inner| inner.donated.get().is_some())
    }

    /// How many handles share its data besides this one (clones, detached copies, a Var, a
    /// saved activation): a Var's value with none may be donated to a step that overwrites it.
    pub(crate) fn other_holders(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// Marks its data donated to input `input` of `program` (PJRT took the buffer at the
    /// launch): every handle of it now reads as an error, and the ledger no longer counts it.
    pub(crate) fn mark_donated(&self, program: &'static str, input: usize) {
        if let Ok(inner) = self.data() {
            if inner.donated.set(Donated { program, input }).is_ok() {
                for &id in &inner.booked {
                    crate::memory::release(id);
                }
            }
        }
    }

    /// The device buffer; an error for a traced tensor, which has values only when the
    /// compiled function runs. Public for benchmarks that execute through `pjrt` directly.
    #[doc(hidden)]
    pub fn buffer(&self) -> Result<&Buffer> {
        let inner = self.data()?;
        if let Some(d) = inner.donated.get() {
            return Err(Error::invalid(
                d.program,
                format!(
                    "{} was donated to `{}` (its input {}), which wrote its result into the same memory: the tensor holds no values any more; use what the call returned (or pass a copy, `.copy()`, to keep this one)",
                    self.spec(),
                    d.program,
                    d.input
                ),
            ));
        }
        inner.buffer.as_ref().ok_or_else(|| match &inner.shards {
            Some(s) => Error::invalid(
                "read",
                format!("{} is split over {}: one buffer per device; gather it with .to(device)", self.spec(), s.sharding),
            ),
            None => Error::invalid(
                "read",
                format!("{} is traced inside a compiled function: it has values only when the function runs; return it instead of reading it", self.spec()),
            ),
        })
    }
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    pub(crate) fn completion(&self) -> &Arc<Completion> {
        match (&self.inner.lazy, self.data()) {
            (_, Ok(inner)) => &inner.completion,
            // The program failed: reads report it through `buffer()`.
            (Some(l), Err(_)) => l.failed.get_or_init(Completion::ready),
            (None, Err(_)) => &self.inner.completion,
        }
    }

    /// What made this tensor, for errors: `exp(f32[4])`, or its spec for uploaded data.
    pub(crate) fn describe(&self) -> String {
        match &self.settled().producer {
            Some(info) => info.signature(),
            None => format!("{} on {}", self.spec(), self.device()),
        }
    }

    /// Waits until the op that makes this tensor has finished on the device (dispatch is
    /// asynchronous; reads wait by themselves). Reports the op's failure, if it failed.
    pub fn block_until_ready(&self) -> Result<&Tensor> {
        if let Some(s) = &self.data()?.shards {
            for b in &s.buffers {
                b.wait_ready().map_err(|e| self.completion().read_error(&self.describe(), e))?;
            }
            self.completion().verify(&self.describe())?;
            return Ok(self);
        }
        self.buffer()?.wait_ready().map_err(|e| self.completion().read_error(&self.describe(), e))?;
        self.completion().verify(&self.describe())?;
        Ok(self)
    }
    /// Shape and dtype.
    pub fn spec(&self) -> &Spec {
        &self.inner.spec
    }
    /// Dims, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.inner.spec.shape
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.inner.spec.dtype
    }
    /// The device it lives on.
    pub fn device(&self) -> Device {
        self.inner.device
    }
    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.inner.spec.rank()
    }
    /// Element count.
    pub fn numel(&self) -> usize {
        self.inner.spec.numel()
    }
    /// Size of dim `dim` (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        Ok(self.shape()[self.dim("size", dim)?])
    }
}

impl Operand for Tensor {
    fn detached(&self) -> Tensor {
        self.detach()
    }
    fn spec(&self) -> &Spec {
        &self.inner.spec
    }
    fn device(&self) -> Device {
        self.inner.device
    }
    #[inline]
    fn apply(op: Op, inputs: &[&Tensor], device: Option<Device>) -> Result<Tensor> {
        dispatch(op, inputs, device)
    }
    fn scalar_on(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        dispatch::scalar(value, dtype, device)
    }
    fn scalar_at(&self, value: f64, dtype: DType) -> Result<Tensor> {
        match self.sharding() {
            Some(s) => sharded::replicated_scalar(value, dtype, s.mesh()),
            None => dispatch::scalar(value, dtype, self.device()),
        }
    }
    fn rng_state(device: Device) -> Result<Tensor> {
        rng_state_tensor(device)
    }
    fn host_bounds(&self) -> Option<(i64, i64)> {
        self.settled().host_bounds
    }
    fn with_host_bounds(self, bounds: Option<(i64, i64)>) -> Tensor {
        Tensor::with_host_bounds(self, bounds)
    }
    /// A fused region's result is no traced value: it gets its value as eager code would.
    fn is_traced(&self) -> bool {
        self.trace_ref().is_some() && self.inner.lazy.is_none()
    }
}

// The ways in: every op, random state and read takes one of these, which send it to a trace
// (`trace`), a mesh (`sharded`) or one device (`dispatch`). They live here, above those rooms,
// because those rooms come back through them (a resharding is an op, a fused region's random
// state is drawn like any other, a tensor gathered from another mesh is read like any other).

/// Runs `op` on `inputs` now: the result comes back at once, computed asynchronously (reads
/// wait for it). Inside a compiled function being traced, records the op instead; with inputs
/// that track gradients, records its autograd node. `device` places an op without inputs.
pub fn dispatch(op: Op, inputs: &[&Tensor], device: Option<Device>) -> Result<Tensor> {
    // Autocast: the inputs cast as the op's list says (the casts are ops of their own, with
    // gradients), then the op on them; what a trace or a fused region records includes them.
    if let Some(low) = crate::autocast::autocast_dtype() {
        if let Some(cast) = crate::ops::autocast_inputs(op.autocast_list(), low, inputs)? {
            let refs: smallvec::SmallVec<[&Tensor; 3]> = cast.iter().collect();
            return dispatch(op, &refs, device);
        }
    }
    if inputs.iter().any(|t| t.trace_ref().is_some()) {
        return trace::record_op(op, inputs);
    }
    if let Some(recorded) = trace::record_fused(&op, inputs, device) {
        return recorded;
    }
    let node = grad::record(&op, inputs);
    if inputs.iter().any(|t| t.shards().is_some()) {
        return Ok(sharded::dispatch_partitioned(op, inputs)?.with_node(node));
    }
    let mut outs = dispatch::dispatch_all(op, inputs, device)?;
    Ok(outs.swap_remove(0).with_node(node))
}

/// A fresh `u64[2]` random state on `device` (inside a trace: a parameter drawn per call).
pub(crate) fn rng_state_tensor(device: Device) -> Result<Tensor> {
    if let Some(t) = trace::traced_rng_state(device) {
        return Ok(t);
    }
    let state = crate::runtime::next_rng_state();
    dispatch::upload(crate::dtype::as_bytes(&state), Spec::new(&[2], DType::U64), device)
}

/// A tensor's bytes on the host (waiting for the op that makes it).
pub(crate) fn download(t: &Tensor) -> Result<Vec<u8>> {
    if let Some(shards) = t.shards() {
        return sharded::gather(t, shards);
    }
    t.with_source(crate::runtime::download)
}
