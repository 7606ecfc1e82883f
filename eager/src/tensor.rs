//! [`Tensor`]: shape, dtype and device over a reference-counted PJRT buffer (freed on the
//! last drop). Every method builds an [`Op`] and dispatches it at once.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use smallvec::SmallVec;

use crate::device::Device;
use crate::dtype::{as_bytes, DType, Element};
use crate::error::{Error, Result};
use crate::ops::{Binary, Compare, Dims, Dist, Op, Reduce, Unary};
use crate::pjrt::Buffer;
use crate::profiler::OpInfo;
use crate::autograd::GradState;
use crate::compile::TraceRef;
use crate::runtime::{self, dispatch, Completion, Runtime};
use crate::shape::{resolve_dim, Shape, Spec};

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
}

static NO_GRAD_STATE: std::sync::OnceLock<GradState> = std::sync::OnceLock::new();

impl Tensor {
    pub(crate) fn from_parts(
        buffer: Buffer,
        spec: Spec,
        device: Device,
        runtime: Arc<Runtime>,
        producer: Option<Arc<OpInfo>>,
        completion: Arc<Completion>,
    ) -> Tensor {
        let (buffer, traced, host_bounds) = (Some(buffer), None, None);
        let inner = Inner { buffer, spec, device, runtime, producer, completion, traced, host_bounds };
        Tensor { inner: Arc::new(inner), autograd: None }
    }

    /// A tensor standing for value `traced` of the function being traced.
    pub(crate) fn traced(traced: TraceRef, spec: Spec, device: Device, runtime: Arc<Runtime>) -> Tensor {
        let inner = Inner {
            buffer: None,
            spec,
            device,
            runtime,
            producer: None,
            completion: Completion::ready(),
            traced: Some(traced),
            host_bounds: None,
        };
        Tensor { inner: Arc::new(inner), autograd: None }
    }

    pub(crate) fn trace_ref(&self) -> Option<&TraceRef> {
        self.inner.traced.as_ref()
    }

    /// Smallest and largest value, for integer data known on the host (`Inner::host_bounds`).
    pub(crate) fn host_bounds(&self) -> Option<(i64, i64)> {
        self.inner.host_bounds
    }

    /// This tensor with host bounds `bounds` (a fresh result of a value-preserving op of a
    /// tensor that had them); unchanged if its data is shared already.
    fn with_host_bounds(mut self, bounds: Option<(i64, i64)>) -> Tensor {
        if let (Some(b), Some(inner)) = (bounds, Arc::get_mut(&mut self.inner)) {
            inner.host_bounds = Some(b);
        }
        self
    }

    /// This tensor with the result's autograd node (if any) attached. Bool and integer
    /// results get none, as in torch: no gradient flows through them.
    pub(crate) fn with_node(mut self, node: Option<Box<crate::autograd::Node>>) -> Tensor {
        if let Some(node) = node.filter(|_| self.dtype().is_float()) {
            self.autograd = Some(Arc::new(GradState { node: Some(node), ..Default::default() }));
        }
        self
    }

    pub(crate) fn grad_state(&self) -> &GradState {
        match &self.autograd {
            Some(s) => s,
            None => NO_GRAD_STATE.get_or_init(GradState::default),
        }
    }

    /// With a fresh autograd state (for `set_requires_grad` on a tensor that had none).
    pub(crate) fn with_fresh_grad_state(&self) -> Tensor {
        Tensor { inner: self.inner.clone(), autograd: Some(Arc::new(GradState::default())) }
    }

    pub(crate) fn has_grad_state(&self) -> bool {
        self.autograd.is_some()
    }

    /// The same values, cut from the graph: no gradient flows back through the result.
    pub fn detach(&self) -> Tensor {
        Tensor { inner: self.inner.clone(), autograd: None }
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

    /// The device buffer; an error for a traced tensor, which has values only when the
    /// compiled function runs. Public for benchmarks that execute through `pjrt` directly.
    #[doc(hidden)]
    pub fn buffer(&self) -> Result<&Buffer> {
        self.inner.buffer.as_ref().ok_or_else(|| {
            Error::invalid(
                "read",
                format!("{} is traced inside a compiled function: it has values only when the function runs; return it instead of reading it", self.spec()),
            )
        })
    }
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    pub(crate) fn completion(&self) -> &Arc<Completion> {
        &self.inner.completion
    }

    /// What made this tensor, for errors: `exp(f32[4])`, or its spec for uploaded data.
    pub(crate) fn describe(&self) -> String {
        match &self.inner.producer {
            Some(info) => info.signature(),
            None => format!("{} on {}", self.spec(), self.device()),
        }
    }

    /// Waits until the op that makes this tensor has finished on the device (dispatch is
    /// asynchronous; reads wait by themselves). Reports the op's failure, if it failed.
    pub fn block_until_ready(&self) -> Result<&Tensor> {
        self.buffer()?.wait_ready().map_err(|e| self.completion().read_error(&self.describe(), e))?;
        self.completion().verify(&self.describe())?;
        Ok(self)
    }
    pub fn spec(&self) -> &Spec {
        &self.inner.spec
    }
    pub fn shape(&self) -> &[usize] {
        &self.inner.spec.shape
    }
    pub fn dtype(&self) -> DType {
        self.inner.spec.dtype
    }
    pub fn device(&self) -> Device {
        self.inner.device
    }
    pub fn rank(&self) -> usize {
        self.inner.spec.rank()
    }
    pub fn numel(&self) -> usize {
        self.inner.spec.numel()
    }
    /// Size of dim `dim` (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        Ok(self.shape()[self.dim("size", dim)?])
    }

    fn dim(&self, op: &'static str, dim: isize) -> Result<usize> {
        resolve_dim(dim, self.rank())
            .ok_or_else(|| Error::invalid(op, format!("dim {dim} is out of range for a rank-{} tensor", self.rank())))
    }

    fn dims(&self, op: &'static str, dims: &[isize]) -> Result<Dims> {
        let mut out: Dims = dims.iter().map(|&d| self.dim(op, d)).collect::<Result<_>>()?;
        out.sort_unstable();
        if out.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid(op, format!("dims {dims:?} repeat a dim")));
        }
        Ok(out)
    }

    // ----- construction -------------------------------------------------------------------

    /// A tensor of `shape` from row-major `data`, on the default device.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice_on(data, shape, runtime::default_device())
    }

    pub fn from_slice_on<T: Element>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::shape("from_slice", format!("{} values do not fill shape {shape:?} ({n} elements)", data.len())));
        }
        let t = runtime::upload(as_bytes(data), Spec::new(shape, T::DTYPE), device)?;
        Ok(t.with_host_bounds(int_bounds(as_bytes(data), T::DTYPE)))
    }

    /// A 1-D tensor from a vector.
    pub fn from_vec<T: Element>(data: Vec<T>) -> Result<Tensor> {
        Tensor::from_slice(&data, &[data.len()])
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// A tensor from an `ndarray` array of any layout.
    pub fn from_ndarray<T: Element, S, D>(a: &ndarray::ArrayBase<S, D>) -> Result<Tensor>
    where
        S: ndarray::Data<Elem = T>,
        D: ndarray::Dimension,
    {
        let data: Vec<T> = a.iter().copied().collect();
        Tensor::from_slice(&data, a.shape())
    }

    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        Tensor::full_on(shape, value, dtype, runtime::default_device())
    }

    pub fn full_on(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let v = runtime::scalar(value, dtype, device)?;
        if shape.is_empty() {
            return Ok(v); // a scalar is its own fill
        }
        dispatch(Op::Fill(shape.into()), &[&v], None)
    }

    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype)
    }

    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype)
    }

    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::full_on(self.shape(), 0.0, self.dtype(), self.device())
    }

    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::full_on(self.shape(), 1.0, self.dtype(), self.device())
    }

    /// `[start, start + step, …]` below `end` (like `torch.arange`).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        Tensor::arange_on(start, end, step, dtype, runtime::default_device())
    }

    pub fn arange_on(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid("arange", format!("bad range {start}..{end} step {step}")));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let s = runtime::scalar(start, dtype, device)?;
        let d = runtime::scalar(step, dtype, device)?;
        dispatch(Op::Arange { n, dtype }, &[&s, &d], None)
    }

    /// The `n x n` identity.
    pub fn eye(n: usize, dtype: DType) -> Result<Tensor> {
        Tensor::eye_on(n, n, dtype, runtime::default_device())
    }

    pub fn eye_on(n: usize, m: usize, dtype: DType, device: Device) -> Result<Tensor> {
        dispatch(Op::Eye { n, m, dtype }, &[], Some(device))
    }

    /// Uniform on [0, 1), generated on the device (seed with [`crate::manual_seed`]).
    pub fn rand(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::random_on(Dist::Uniform, shape, dtype, runtime::default_device())
    }

    /// Standard normal, generated on the device (seed with [`crate::manual_seed`]).
    pub fn randn(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::random_on(Dist::Normal, shape, dtype, runtime::default_device())
    }

    pub fn random_on(dist: Dist, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let s = runtime::rng_state_tensor(device)?;
        dispatch(Op::Random { dist, shape: shape.into(), dtype }, &[&s], None)
    }

    // ----- elementwise --------------------------------------------------------------------

    fn unary(&self, u: Unary) -> Result<Tensor> {
        dispatch(Op::Unary(u), &[self], None)
    }

    fn binary(&self, b: Binary, other: &Tensor) -> Result<Tensor> {
        dispatch(Op::Binary(b), &[self, other], None)
    }

    fn compare(&self, c: Compare, other: &Tensor) -> Result<Tensor> {
        dispatch(Op::Compare(c), &[self, other], None)
    }

    /// A scalar of this tensor's dtype and device.
    fn scalar_like(&self, v: f64) -> Result<Tensor> {
        runtime::scalar(v, self.dtype(), self.device())
    }

    /// `where(self, a, b)`: `a` where `self` is true, else `b` (broadcasting).
    pub fn where_cond(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        dispatch(Op::Where, &[self, a, b], None)
    }

    // ----- linear algebra -----------------------------------------------------------------

    /// Matrix product with torch's rules: 1-D operands are promoted and the added dim
    /// removed; batch dims broadcast. f16 and bf16 products accumulate in f32 and round once.
    /// Integer products wrap on overflow.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 || other.rank() == 0 {
            return Err(Error::shape("matmul", "both operands need at least one dim"));
        }
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.rank() == 1 { other.unsqueeze(-1)? } else { other.clone() };
        let mut r = dispatch(Op::Matmul, &[&a, &b], None)?;
        if self.rank() == 1 {
            r = r.squeeze(-2)?;
        }
        if other.rank() == 1 {
            r = r.squeeze(-1)?;
        }
        Ok(r)
    }

    // ----- reductions ---------------------------------------------------------------------

    fn reduce(&self, kind: Reduce, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let name = Op::Reduce { kind, dims: Dims::new(), keepdim }.name();
        let dims = if dims.is_empty() { (0..self.rank()).collect() } else { self.dims(name, dims)? };
        if dims.is_empty() {
            // A 0-d tensor reduces to itself (as torch.sum of a scalar).
            return match kind {
                Reduce::Mean if !self.dtype().is_float() => Err(Error::dtype(name, "expected a floating-point tensor")),
                _ => Ok(self.clone()),
            };
        }
        dispatch(Op::Reduce { kind, dims, keepdim }, &[self], None)
    }

    /// Sum over `dims` (all dims if empty). f16 and bf16 accumulate in f32 and round once, as
    /// torch and JAX do; integer sums wrap on overflow and keep the dtype (torch gives i64).
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(Reduce::Sum, dims, keepdim)
    }
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(Reduce::Mean, dims, keepdim)
    }
    /// Largest value over `dims` (all dims if empty). NaN propagates: a lane with a NaN gives
    /// NaN, as in torch. An empty dim is an error (it has no max).
    pub fn max(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(Reduce::Max, dims, keepdim)
    }
    /// Smallest value over `dims`; NaN propagates, as for [`Tensor::max`].
    pub fn min(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(Reduce::Min, dims, keepdim)
    }
    /// Sum of all elements, as a 0-d tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&[], false)
    }
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(&[], false)
    }

    /// Index (i64) of the largest value along `dim` (the first on ties); over the flattened
    /// tensor when `dim` is `None`. NaN counts as the largest (the first NaN wins), as in torch.
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(Reduce::ArgMax, dim, keepdim)
    }
    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(Reduce::ArgMin, dim, keepdim)
    }

    fn arg_reduce(&self, kind: Reduce, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match dim {
            Some(d) => self.reduce(kind, &[d], keepdim),
            None => {
                let r = self.flatten()?.reduce(kind, &[0], false)?;
                if keepdim { r.reshape(&vec![1; self.rank()]) } else { Ok(r) }
            }
        }
    }

    /// Softmax along `dim`, composed: `exp(x - max) / sum(exp(x - max))`.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        if self.size(dim)? == 0 {
            return Ok(self.clone()); // nothing to normalise (and an empty dim has no max)
        }
        let shifted = self.sub(&self.max(&[dim], true)?)?;
        let e = shifted.exp()?;
        e.div(&e.sum(&[dim], true)?)
    }

    /// Log-softmax along `dim`, composed: `x - max - log(sum(exp(x - max)))`.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        if self.size(dim)? == 0 {
            return Ok(self.clone());
        }
        let shifted = self.sub(&self.max(&[dim], true)?)?;
        let lse = shifted.exp()?.sum(&[dim], true)?.log()?;
        shifted.sub(&lse)
    }

    // ----- shape --------------------------------------------------------------------------

    /// Reshape; one dim may be -1 (inferred).
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let shape = infer_shape(shape, self.numel())?;
        if shape.as_slice() == self.shape() {
            return Ok(self.clone());
        }
        Ok(dispatch(Op::Reshape(shape), &[self], None)?.with_host_bounds(self.host_bounds()))
    }

    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape(&[-1])
    }

    /// Inserts a dim of size 1 at `dim` (negative counts from the end of the result).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = resolve_dim(dim, self.rank() + 1)
            .ok_or_else(|| Error::invalid("unsqueeze", format!("dim {dim} out of range for rank {}", self.rank())))?;
        let mut s: Vec<isize> = self.shape().iter().map(|&x| x as isize).collect();
        s.insert(d, 1);
        self.reshape(&s)
    }

    /// Removes dim `dim`, which must have size 1.
    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        let d = self.dim("squeeze", dim)?;
        if self.shape()[d] != 1 {
            return Err(Error::shape("squeeze", format!("dim {d} of {:?} has size {}, not 1", self.shape(), self.shape()[d])));
        }
        let s: Vec<isize> = self.shape().iter().enumerate().filter(|(i, _)| *i != d).map(|(_, &x)| x as isize).collect();
        self.reshape(&s)
    }

    /// Reorders dims: result dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[isize]) -> Result<Tensor> {
        let p: Dims = perm.iter().map(|&d| self.dim("permute", d)).collect::<Result<_>>()?;
        Ok(dispatch(Op::Permute(p), &[self], None)?.with_host_bounds(self.host_bounds()))
    }

    /// Swaps two dims.
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Tensor> {
        let (a, b) = (self.dim("transpose", d0)?, self.dim("transpose", d1)?);
        let mut p: Vec<isize> = (0..self.rank() as isize).collect();
        p.swap(a, b);
        self.permute(&p)
    }

    /// Transpose of a matrix (the last two dims).
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Ok(self.clone());
        }
        self.transpose(-2, -1)
    }

    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        dispatch(Op::BroadcastTo(shape.into()), &[self], None)
    }

    /// `len` elements of dim `dim` from `start`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        self.slice(dim, start, start + len, 1)
    }

    /// Elements `start..end` with `step` along `dim`.
    pub fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Result<Tensor> {
        let d = self.dim("slice", dim)?;
        let starts: Dims = (0..self.rank()).map(|i| if i == d { start } else { 0 }).collect();
        let limits: Dims = self.shape().iter().enumerate().map(|(i, &s)| if i == d { end } else { s }).collect();
        let strides: Dims = (0..self.rank()).map(|i| if i == d { step } else { 1 }).collect();
        dispatch(Op::Slice { starts, limits, strides }, &[self], None)
    }

    /// Picks entries along `dim` by a 1-D i32/i64 index tensor. A negative index counts from
    /// the end (`-1` is the last), as torch's `x[idx]` and NumPy's `take` do (torch's
    /// `index_select` itself refuses negative indices). An index outside `-size..size` is an
    /// error naming it: at once for indices uploaded from the host (`Tensor::from_slice` and
    /// reshapes of it), else checked on the device and reported by the next read of a result
    /// that depends on this one (as other failures on the device are).
    pub fn index_select(&self, dim: isize, indices: &Tensor) -> Result<Tensor> {
        let d = self.dim("index_select", dim)?;
        let size = self.shape()[d];
        let check = match indices.host_bounds() {
            Some((lo, hi)) => {
                let bad = if hi >= size as i64 { hi } else { lo };
                if lo <= hi && (lo < -(size as i64) || hi >= size as i64) {
                    let c = crate::ops::IndexCheck { dim: d, size };
                    return Err(Error::invalid("index_select", c.message(bad)));
                }
                false
            }
            // Traced indices have no values until the compiled function runs: not checked.
            None => indices.trace_ref().is_none() && self.trace_ref().is_none(),
        };
        dispatch(Op::IndexSelect { dim: d, check }, &[self, indices], None)
    }

    /// Joins tensors along `dim`.
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("concat", "needs at least one tensor"))?;
        let d = first.dim("concat", dim)?;
        dispatch(Op::Concat { dim: d }, tensors, None)
    }

    /// Converts to `dtype` (floats to bool: nonzero is true, NaN too; floats to ints truncate
    /// toward zero). Floats outside an int dtype's range saturate to its bounds and NaN gives 0
    /// (XLA's convert; undefined in torch): `1e10 -> i32::MAX`, `-5.0 -> 0u8`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        dispatch(Op::Cast(dtype), &[self], None)
    }

    /// Copies to `device`.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        runtime::copy_to(self, device)
    }

    // ----- reading back -------------------------------------------------------------------

    /// The values, row-major. `T` must be this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::dtype(
                "to_vec",
                format!("asked for {} values of a {} tensor; convert with .to_dtype(DType::{:?}) first", T::DTYPE, self.dtype(), T::DTYPE),
            ));
        }
        let bytes = runtime::download(self)?;
        Ok(decode(&bytes))
    }

    /// The values as `f64`, whatever the dtype.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let bytes = runtime::download(self)?;
        Ok(decode_f64(&bytes, self.dtype()))
    }

    /// The single value of a one-element tensor.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape("item", format!("needs a one-element tensor, got shape {:?}", self.shape())));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        Ok(ArrayD::from_shape_vec(IxDyn(self.shape()), v).expect("shape matches numel"))
    }
}

/// Smallest and largest value of i32/i64 host data, for index checks (`(MAX, MIN)` if empty).
fn int_bounds(bytes: &[u8], dtype: DType) -> Option<(i64, i64)> {
    let fold = |it: &mut dyn Iterator<Item = i64>| {
        it.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    match dtype {
        DType::I32 => {
            Some(fold(&mut bytes.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap()).into())))
        }
        DType::I64 => {
            Some(fold(&mut bytes.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().unwrap()))))
        }
        _ => None,
    }
}

/// Resolves a shape with at most one -1 against `numel`.
fn infer_shape(shape: &[isize], numel: usize) -> Result<Shape> {
    let unknown: Vec<usize> = shape.iter().enumerate().filter(|(_, &d)| d == -1).map(|(i, _)| i).collect();
    if unknown.len() > 1 || shape.iter().any(|&d| d < -1) {
        return Err(Error::shape("reshape", format!("bad shape {shape:?} (one dim may be -1, none other negative)")));
    }
    let known: usize = shape.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
    let mut out: Shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(&i) = unknown.first() {
        if known == 0 || numel % known != 0 {
            return Err(Error::shape("reshape", format!("cannot reshape {numel} elements to {shape:?}")));
        }
        out[i] = numel / known;
    }
    Ok(out)
}

fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut out: Vec<T> = Vec::with_capacity(n);
    if T::DTYPE == DType::Bool {
        // Normalise to 0/1 before viewing bytes as bool.
        let norm: Vec<u8> = bytes.iter().map(|&b| (b != 0) as u8).collect();
        // SAFETY: `n` elements of a one-byte type, every byte 0 or 1.
        unsafe {
            std::ptr::copy_nonoverlapping(norm.as_ptr(), out.as_mut_ptr() as *mut u8, n);
            out.set_len(n);
        }
    } else {
        // SAFETY: every non-bool Element is valid for any bit pattern; sizes match.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, bytes.len());
            out.set_len(n);
        }
    }
    out
}

fn decode_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    fn conv<T: Element>(b: &[u8]) -> Vec<f64> {
        decode::<T>(b).into_iter().map(Element::to_f64).collect()
    }
    match dtype {
        DType::Bool => conv::<bool>(bytes),
        DType::U8 => conv::<u8>(bytes),
        DType::I32 => conv::<i32>(bytes),
        DType::I64 => conv::<i64>(bytes),
        DType::U32 => conv::<u32>(bytes),
        DType::U64 => conv::<u64>(bytes),
        DType::F16 => conv::<f16>(bytes),
        DType::BF16 => conv::<bf16>(bytes),
        DType::F32 => conv::<f32>(bytes),
        DType::F64 => conv::<f64>(bytes),
    }
}

/// Host bytes of `values` converted to `dtype`.
pub(crate) fn encode_f64(values: &[f64], dtype: DType) -> Vec<u8> {
    fn conv<T: Element>(v: &[f64]) -> Vec<u8> {
        let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
        as_bytes(&t).to_vec()
    }
    match dtype {
        DType::Bool => conv::<bool>(values),
        DType::U8 => conv::<u8>(values),
        DType::I32 => conv::<i32>(values),
        DType::I64 => conv::<i64>(values),
        DType::U32 => conv::<u32>(values),
        DType::U64 => conv::<u64>(values),
        DType::F16 => conv::<f16>(values),
        DType::BF16 => conv::<bf16>(values),
        DType::F32 => conv::<f32>(values),
        DType::F64 => conv::<f64>(values),
    }
}

/// Defines the elementwise methods from the op tables' variants: one line each.
macro_rules! unary_methods {
    ($($method:ident => $variant:ident),* $(,)?) => {
        impl Tensor {$(
            pub fn $method(&self) -> Result<Tensor> { self.unary(Unary::$variant) }
        )*}
    };
}
unary_methods!(neg => Neg, abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, rsqrt => Rsqrt, tanh => Tanh,
    sigmoid => Sigmoid, sin => Sin, cos => Cos, relu => Relu);

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $method:ident, $scalar:ident => $variant:ident),* $(,)?) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> { self.binary(Binary::$variant, other) }
            /// With a scalar converted to this tensor's dtype.
            pub fn $scalar(&self, other: f64) -> Result<Tensor> { self.binary(Binary::$variant, &self.scalar_like(other)?) }
        )*}
    };
}
binary_methods!(
    /// Elementwise sum (broadcasting). Integer overflow wraps around, as in torch:
    /// `i32::MAX + 1 == i32::MIN`.
    add, add_scalar => Add,
    /// Elementwise difference (broadcasting). Integer overflow wraps, as in torch.
    sub, sub_scalar => Sub,
    /// Elementwise product (broadcasting). Integer overflow wraps, as in torch:
    /// `65536i32 * 65536 == 0`.
    mul, mul_scalar => Mul,
    /// Elementwise quotient (broadcasting). Floats: IEEE division (`x / 0` is ±inf, `0 / 0`
    /// NaN). Integers: truncated toward zero, torch's `div(.., rounding_mode="trunc")` (torch's
    /// plain `/` of ints gives floats). Integer division by zero does not raise (torch raises
    /// `ZeroDivisionError`): eager keeps XLA's values, -1 for signed ints whatever the dividend
    /// (`7 / 0 == -1`, `0 / 0 == -1`) and all ones for unsigned (`7u8 / 0 == 255`). The
    /// overflow `i32::MIN / -1` gives `i32::MIN` (wrapped; XLA's value too).
    div, div_scalar => Div,
    /// Elementwise power. Integer powers wrap on overflow. A negative integer exponent does not
    /// raise (torch refuses it): eager keeps XLA's truncated value, 0 for `|base| > 1` and for
    /// a zero base (`2 ** -1 == 0`, `0 ** -1 == 0`, `(-1) ** -1 == -1`).
    pow, pow_scalar => Pow,
    /// Elementwise maximum; NaN on either side gives NaN, as in torch.
    maximum, maximum_scalar => Maximum,
    /// Elementwise minimum; NaN on either side gives NaN, as in torch.
    minimum, minimum_scalar => Minimum,
);

macro_rules! compare_methods {
    ($($method:ident, $scalar:ident => $variant:ident),* $(,)?) => {
        impl Tensor {$(
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> { self.compare(Compare::$variant, other) }
            pub fn $scalar(&self, other: f64) -> Result<Tensor> { self.compare(Compare::$variant, &self.scalar_like(other)?) }
        )*}
    };
}
compare_methods!(eq, eq_scalar => Eq, ne, ne_scalar => Ne, lt, lt_scalar => Lt, le, le_scalar => Le,
    gt, gt_scalar => Gt, ge, ge_scalar => Ge);

// ----- operators ------------------------------------------------------------------------------
// Operators cannot return Result: they panic with the same message the method would return.

#[track_caller]
fn or_panic(r: Result<Tensor>) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

macro_rules! operator {
    ($trait:ident, $f:ident, $method:ident, $scalar:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor { or_panic(Tensor::$method(&self, &rhs)) }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor { or_panic(Tensor::$method(&self, &rhs)) }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor { or_panic(Tensor::$method(&self, &rhs)) }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor { or_panic(Tensor::$method(&self, &rhs)) }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: f64) -> Tensor { or_panic(Tensor::$scalar(&self, rhs)) }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: f64) -> Tensor { or_panic(Tensor::$scalar(&self, rhs)) }
        }
        impl std::ops::$trait<&Tensor> for f64 {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor { or_panic(rhs.scalar_like(self).and_then(|s| Tensor::$method(&s, &rhs))) }
        }
        impl std::ops::$trait<Tensor> for f64 {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor { or_panic(rhs.scalar_like(self).and_then(|s| Tensor::$method(&s, &rhs))) }
        }
    };
}
operator!(Add, add, add, add_scalar);
operator!(Sub, sub, sub, sub_scalar);
operator!(Mul, mul, mul, mul_scalar);
operator!(Div, div, div, div_scalar);

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(self))
    }
}
impl std::ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(&self))
    }
}

// ----- display --------------------------------------------------------------------------------

/// Elements shown per dim at each end when a tensor is summarised (torch's `edgeitems`).
const EDGE_ITEMS: usize = 3;
/// Tensors with more elements than this are summarised with `...` (torch's `threshold`).
const SUMMARY_THRESHOLD: usize = 1000;

impl fmt::Display for Tensor {
    /// Like torch: `tensor([[1.0000, 2.0000], …], shape=[2, 2], dtype=f32, device=cpu:0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = match self.to_f64_vec() {
            Ok(v) => v,
            Err(e) => return write!(f, "tensor(<unreadable: {e}>, shape={:?}, dtype={}, device={})", self.shape(), self.dtype(), self.device()),
        };
        let summarise = values.len() > SUMMARY_THRESHOLD;
        let fmt_one = element_formatter(&values, self.dtype());
        let mut body = String::new();
        write_nested(&mut body, &values, self.shape(), 0, summarise, &fmt_one, 7);
        write!(f, "tensor({body}, shape={:?}, dtype={}, device={})", self.shape(), self.dtype(), self.device())
    }
}

/// Debug is the full text, as torch's `repr`: `Ok(t)` ending a REPL cell shows the values.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Tensor {
    /// How evcxr (the REPL, the Jupyter kernel) shows a tensor that ends a cell: the text, and
    /// the same in HTML for notebooks.
    pub fn evcxr_display(&self) {
        let text = self.to_string();
        let html = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        println!("EVCXR_BEGIN_CONTENT text/plain\n{text}\nEVCXR_END_CONTENT");
        println!("EVCXR_BEGIN_CONTENT text/html\n<pre class=\"eager-tensor\">{html}</pre>\nEVCXR_END_CONTENT");
    }
}

/// One formatter for all elements, so columns line up: fixed 4 decimals for floats unless
/// magnitudes call for scientific notation; plain integers; `true`/`false`.
fn element_formatter(values: &[f64], dtype: DType) -> impl Fn(f64) -> String {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).map(f64::abs).collect();
    let max = finite.iter().copied().fold(0.0, f64::max);
    let min_nonzero = finite.iter().copied().filter(|&v| v > 0.0).fold(f64::INFINITY, f64::min);
    let sci = dtype.is_float() && (max >= 1e8 || (min_nonzero < 1e-4 && min_nonzero.is_finite()));
    let width = values
        .iter()
        .map(|&v| format_value(v, dtype, sci).len())
        .max()
        .unwrap_or(0);
    move |v| format!("{:>width$}", format_value(v, dtype, sci))
}

fn format_value(v: f64, dtype: DType, sci: bool) -> String {
    if dtype == DType::Bool {
        return (if v != 0.0 { "true" } else { "false" }).into();
    }
    if !dtype.is_float() {
        return format!("{}", v as i128);
    }
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        (if v > 0.0 { "inf" } else { "-inf" }).into()
    } else if sci {
        format!("{v:.4e}")
    } else {
        format!("{v:.4}")
    }
}

/// Writes `[…]` nesting for `shape`, eliding the middle of long dims when summarising.
fn write_nested(out: &mut String, values: &[f64], shape: &[usize], offset: usize, summarise: bool, fmt_one: &dyn Fn(f64) -> String, indent: usize) {
    if shape.is_empty() {
        out.push_str(&fmt_one(values[offset]));
        return;
    }
    let n = shape[0];
    let stride: usize = shape[1..].iter().product();
    let shown: SmallVec<[Option<usize>; 8]> = if summarise && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS).map(Some).chain(std::iter::once(None)).chain((n - EDGE_ITEMS..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    for (k, item) in shown.iter().enumerate() {
        if k > 0 {
            out.push(',');
            if shape.len() > 1 {
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(indent + 1));
            } else {
                out.push(' ');
            }
        }
        match item {
            Some(i) => write_nested(out, values, &shape[1..], offset + i * stride, summarise, fmt_one, indent + 1),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}
