//! Every op, defined once, one family per file. Each file holds its ops' whole story: the
//! attributes, the shape/dtype rule, the StableHLO emission, the gradient rule, the methods
//! that build it (written against `Operand`, which `Tensor` implements) and tests of the
//! emitted text. This file keeps the [`Op`] enum (one line per op, see `ops!` below), the
//! one-line dispatch of each aspect and what the families share (`Operand`, with the sums
//! the gradient rules of several families take, the checks, broadcasting); `emit` holds the
//! emitter and the module template.
//!
//! The cache keys on [`Op`] values, the profiler prints [`Op::name`], autograd only calls
//! `Op::backward` and compiled functions emit each traced op with its own emission: nothing
//! else special-cases an op. Nothing here imports a layer above (runtime, tensor, autograd):
//! the ops are applied through `Operand`.

pub(crate) mod emit;

pub mod call;
pub(crate) mod composite;
pub mod conv;
pub mod create;
pub mod dynamic;
pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod movement;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod scan;
pub mod shard;
pub mod sort;

use smallvec::SmallVec;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{broadcast_shapes, resolve_dim, Shape, Spec};

pub(crate) use call::ValueDef;
pub use call::{Call, Program};
pub use conv::{Conv, Flip, Padding};
pub use create::{Arange, Eye, Fill};
pub use dynamic::{DynamicSlice, DynamicUpdateSlice};
use elementwise::ElementwiseOps;
pub use elementwise::{Binary, Cast, Compare, Triangle, Unary, Where};
pub(crate) use emit::Emitter;
use emit::Value;
pub(crate) use index::IndexCheck;
pub use index::{Gather, IndexSelect, ScatterAdd};
pub use matmul::Matmul;
use movement::MovementOps;
pub use movement::{BroadcastTo, Concat, Pad, Permute, Reshape, Slice};
pub use pool::{MaxPoolGrad, Pool, PoolKind};
pub use random::{Dist, Random};
use reduce::ReduceOps;
pub use reduce::{Reduce, ReduceKind};
pub use scan::{Scan, ScanKind};
pub use shard::Shard;
pub use sort::Argsort;

/// Dims of an attribute (inline up to 4).
pub type Dims = SmallVec<[usize; 4]>;

/// The index checks of an op's module (see [`OpDef::index_checks`]).
pub(crate) type Checks = SmallVec<[IndexCheck; 1]>;

/// Gradients with respect to an op's inputs (`None`: no gradient flows to that input).
pub(crate) type Grads<T> = SmallVec<[Option<T>; 3]>;

/// What every op defines. Implemented once per op, in its family's file.
pub(crate) trait OpDef {
    /// The op's name, as methods, the profiler and errors print it.
    fn name(&self) -> &'static str;
    /// The attributes, as the profiler prints them (`dims=[1] keepdim`); empty if none.
    fn attrs(&self) -> String {
        String::new()
    }
    /// The shape/dtype rule: checks the inputs and gives the output spec. Runs before anything
    /// reaches XLA, so bad input is an [`Error`], never an abort.
    fn infer(&self, inputs: &[Spec]) -> Result<Spec>;
    /// Emits the op on `x` giving `out` (as `infer` said) into `e`.
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value;
    /// The gradient rule: given the inputs, the output and the gradient `g` of a scalar with
    /// respect to the output, the gradient with respect to each input. Written with ops, so
    /// gradients run through the same single-op cache.
    fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>>;
    /// The checks the op's module returns after its results, in order (see [`IndexCheck`]):
    /// an indexing op's own, or those of the indexing ops of a program.
    fn index_checks(&self, _inputs: &[Spec]) -> Checks {
        Checks::new()
    }
    /// Specs of the outputs after the first (only a compiled function's call has more).
    fn more_outputs(&self) -> &[Spec] {
        &[]
    }
    /// About how many arithmetic operations the op does on `inputs`, to decide how hard its
    /// first compile optimizes: by default one per output element.
    fn flops(&self, _inputs: &[Spec], output: &Spec) -> f64 {
        output.shape.iter().product::<usize>() as f64
    }
    /// Where each output dim comes from: the `(input, dim)` pairs that hold the same index
    /// along it. On inputs split over a mesh, the output dim may be split as the first of
    /// them is (an elementwise op keeps its input's split, a matmul its rows' and columns');
    /// an output dim with no source is whole on every device. The default: none.
    fn dim_sources(&self, _inputs: &[Spec], _output: &Spec) -> DimSources {
        DimSources::new()
    }
    /// The mesh axes each result dim is split over, when the op itself fixes them (only
    /// [`Shard`]): they win over [`OpDef::dim_sources`].
    fn result_axes(&self) -> Option<&[Vec<String>]> {
        None
    }
    /// Which [`autocast`](mod@crate::autocast) list the op is on (each family file says why): by default
    /// none, it runs in its inputs' dtype.
    fn autocast_list(&self) -> AutocastList {
        AutocastList::Keep
    }
    /// The values `backward` reads besides `g` (see [`GradReads`]): by default all of them.
    fn grad_reads(&self) -> GradReads {
        GradReads::ALL
    }
}

/// The values an op's gradient rule reads besides `g`: which inputs' and whether its
/// output's. Shapes, dtypes and devices are always there. Autograd keeps only these (as
/// torch saves only what a formula uses): an activation no rule reads is freed at once, and
/// a composite run as one program need not write it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GradReads {
    /// Bit `i`: input `i` (inputs past 63 always count as read).
    inputs: u64,
    /// The output.
    pub(crate) output: bool,
}

impl GradReads {
    /// Every input and the output (the rule may read anything).
    pub(crate) const ALL: GradReads = GradReads { inputs: u64::MAX, output: true };
    /// Nothing but shapes (reshape, add, sum, …).
    pub(crate) const NONE: GradReads = GradReads { inputs: 0, output: false };
    /// The output only (exp, tanh, …).
    pub(crate) const OUTPUT: GradReads = GradReads { inputs: 0, output: true };

    /// The inputs at `indices`.
    pub(crate) const fn inputs(indices: &[usize]) -> GradReads {
        let mut bits = 0;
        let mut i = 0;
        while i < indices.len() {
            bits |= 1 << indices[i];
            i += 1;
        }
        GradReads { inputs: bits, output: false }
    }

    /// These reads and the output.
    pub(crate) const fn and_output(self) -> GradReads {
        GradReads { output: true, ..self }
    }

    /// Whether the rule reads input `i`.
    pub(crate) fn input(&self, i: usize) -> bool {
        i >= 64 || self.inputs & (1 << i) != 0
    }
}

/// The lists of [`autocast`](mod@crate::autocast), as torch's autocast has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastList {
    /// Runs in the autocast dtype (f32, f16 and bf16 inputs cast to it; f64 kept).
    Low,
    /// Runs in f32 (f16 and bf16 inputs cast up).
    F32,
    /// Floating inputs of different dtypes are cast to the widest of them.
    Promote,
    /// Runs in its inputs' dtype.
    Keep,
}

/// `inputs` cast as `list` says under autocast to `low`, or `None` when none needs a cast
/// (so applying it twice casts nothing the second time).
pub(crate) fn autocast_inputs<T: Operand>(
    list: AutocastList,
    low: DType,
    inputs: &[&T],
) -> Result<Option<SmallVec<[T; 3]>>> {
    let (target, eligible): (DType, fn(DType) -> bool) = match list {
        AutocastList::Keep => return Ok(None),
        AutocastList::Low => (low, |d| matches!(d, DType::F16 | DType::BF16 | DType::F32)),
        AutocastList::F32 => (DType::F32, |d| matches!(d, DType::F16 | DType::BF16)),
        AutocastList::Promote => {
            let floats: SmallVec<[DType; 3]> =
                inputs.iter().map(|t| t.dtype_of()).filter(|d| d.is_float()).collect();
            if floats.windows(2).all(|w| w[0] == w[1]) {
                return Ok(None);
            }
            // f16 beside bf16 meet in f32, as torch's promotion.
            let widest = if floats.contains(&DType::F64) { DType::F64 } else { DType::F32 };
            (widest, |d| d.is_float())
        }
    };
    if !inputs.iter().any(|t| eligible(t.dtype_of()) && t.dtype_of() != target) {
        return Ok(None);
    }
    let cast = inputs
        .iter()
        .map(|t| if eligible(t.dtype_of()) { t.to_dtype(target) } else { Ok((*t).clone()) })
        .collect::<Result<_>>()?;
    Ok(Some(cast))
}

/// `x` as an op of autocast's f32 list takes it: f32 for f16/bf16 while autocast is on, else
/// itself (for ops made of others: softmax, the norms, the losses).
pub(crate) fn autocast_f32<T: Operand>(x: &T) -> Result<T> {
    match crate::autocast::autocast_dtype() {
        Some(_) if matches!(x.dtype_of(), DType::F16 | DType::BF16) => x.to_dtype(DType::F32),
        _ => Ok(x.clone()),
    }
}

/// `x` as an op of autocast's low-precision list takes it: in the autocast dtype while
/// autocast is on (from f32, f16 or bf16), else itself (linear's bias, attention's inputs).
pub(crate) fn autocast_low<T: Operand>(x: &T) -> Result<T> {
    match crate::autocast::autocast_dtype() {
        Some(low) if matches!(x.dtype_of(), DType::F16 | DType::BF16 | DType::F32) => x.to_dtype(low),
        _ => Ok(x.clone()),
    }
}

/// Per output dim, the `(input, dim)` pairs it runs along (see `OpDef::dim_sources`).
pub type DimSources = SmallVec<[SmallVec<[(usize, usize); 2]>; 4]>;

/// The sources of an elementwise op with NumPy broadcasting: each output dim runs along the
/// inputs' aligned dims of the same size.
pub(crate) fn broadcast_sources(inputs: &[Spec], output: &Spec) -> DimSources {
    let rank = output.rank();
    (0..rank)
        .map(|j| {
            inputs
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let d = (j + s.rank()).checked_sub(rank)?;
                    (s.shape[d] == output.shape[j]).then_some((i, d))
                })
                .collect()
        })
        .collect()
}

/// Defines [`Op`] from one table, variant and the op type (which implements [`OpDef`]), and
/// each aspect's dispatch as one match over it.
macro_rules! ops {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// An op with its attributes. Together with the input specs and the device it is the
        /// cache key; attributes are only what changes the compiled program (values of scalars
        /// are inputs).
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum Op {
            $($(#[$doc])* $variant($ty),)*
        }

        $(impl From<$ty> for Op {
            fn from(o: $ty) -> Op {
                Op::$variant(o)
            }
        })*

        impl Op {
            /// The op's name, as the profiler and errors print it.
            pub fn name(&self) -> &'static str {
                match self { $(Op::$variant(o) => o.name(),)* }
            }
            /// The attributes, as the profiler prints them (`dims=[1] keepdim`); empty if none.
            pub fn attrs(&self) -> String {
                match self { $(Op::$variant(o) => o.attrs(),)* }
            }
            /// The shape/dtype rule (see `OpDef::infer`), and the result's size checked
            /// against what XLA can size (see `check_size`).
            pub fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
                let out = match self { $(Op::$variant(o) => o.infer(inputs),)* }?;
                check_size(self.name(), &out)?;
                Ok(out)
            }
            pub(crate) fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
                match self { $(Op::$variant(o) => o.emit(e, x, out),)* }
            }
            pub(crate) fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>> {
                match self { $(Op::$variant(o) => o.backward(x, out, g),)* }
            }
            /// The checks the op's module returns after its results, for `inputs`.
            pub(crate) fn index_checks(&self, inputs: &[Spec]) -> Checks {
                match self { $(Op::$variant(o) => o.index_checks(inputs),)* }
            }
            /// Specs of the outputs after the first ([`Op::infer`] gives the first): only a
            /// compiled function's call has more than one.
            pub fn more_outputs(&self) -> &[Spec] {
                match self { $(Op::$variant(o) => o.more_outputs(),)* }
            }
            /// About how many arithmetic operations the op does (see `OpDef::flops`).
            pub fn flops(&self, inputs: &[Spec], output: &Spec) -> f64 {
                match self { $(Op::$variant(o) => o.flops(inputs, output),)* }
            }
            /// Where each output dim comes from (see `OpDef::dim_sources`).
            pub fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
                match self { $(Op::$variant(o) => o.dim_sources(inputs, output),)* }
            }
            /// The result's split, when the op fixes it (see `OpDef::result_axes`).
            pub fn result_axes(&self) -> Option<&[Vec<String>]> {
                match self { $(Op::$variant(o) => o.result_axes(),)* }
            }
            /// Which autocast list the op is on (see `OpDef::autocast_list`).
            pub fn autocast_list(&self) -> AutocastList {
                match self { $(Op::$variant(o) => o.autocast_list(),)* }
            }
            /// What the gradient rule reads (see `OpDef::grad_reads`).
            pub(crate) fn grad_reads(&self) -> GradReads {
                match self { $(Op::$variant(o) => o.grad_reads(),)* }
            }
        }
    };
}

ops! {
    /// An elementwise op of one tensor.
    Unary(Unary),
    /// Elementwise arithmetic of two tensors, broadcasting.
    Binary(Binary),
    /// An elementwise comparison of two tensors, broadcasting, giving bool.
    Compare(Compare),
    /// `where(cond, a, b)`, broadcasting all three.
    Where(Where),
    /// Conversion to another dtype.
    Cast(Cast),
    /// The lower (`tril`) or upper (`triu`) triangle of the last two dims, zeros elsewhere.
    Triangle(Triangle),
    /// Batched matrix product, `[..., m, k] x [..., k, n]` with broadcast batch dims.
    Matmul(Matmul),
    /// Convolution, NCHW input and OIHW weight as torch (1-D and 2-D spatial dims).
    Conv(Conv),
    /// Reverses the order of elements along dims.
    Flip(Flip),
    /// Max or sum over windows (`reduce_window`).
    Pool(Pool),
    /// Max pooling's gradient (`select_and_scatter`).
    MaxPoolGrad(MaxPoolGrad),
    /// A reduction over dims (sum, mean, max, min, argmax, argmin).
    Reduce(Reduce),
    /// A running sum or product along a dim.
    Scan(Scan),
    /// The positions that sort the input along a dim.
    Argsort(Argsort),
    /// The same elements in another shape.
    Reshape(Reshape),
    /// Dims reordered.
    Permute(Permute),
    /// NumPy broadcast to a shape.
    BroadcastTo(BroadcastTo),
    /// Strided slice of every dim.
    Slice(Slice),
    /// Zero padding around and between elements.
    Pad(Pad),
    /// Tensors joined along a dim.
    Concat(Concat),
    /// A block read from a start that is data.
    DynamicSlice(DynamicSlice),
    /// A block written at a start that is data.
    DynamicUpdateSlice(DynamicUpdateSlice),
    /// Slices of the input at indices along a dim.
    IndexSelect(IndexSelect),
    /// Elements picked along a dim by an index tensor.
    Gather(Gather),
    /// Elements added at the places an index tensor names along a dim.
    ScatterAdd(ScatterAdd),
    /// A scalar broadcast to a shape.
    Fill(Fill),
    /// `start + step * [0, 1, …, n-1]`.
    Arange(Arange),
    /// An identity matrix.
    Eye(Eye),
    /// Random numbers from the on-device generator.
    Random(Random),
    /// The same values with their split over the mesh pinned (a Shardy constraint).
    Shard(Shard),
    /// A call of a compiled function: one program of many ops (see [`crate::compile()`]).
    Call(Call),
}

impl Op {
    /// Emits the one-op StableHLO module for `inputs` giving `output` (as [`Op::infer`] said).
    pub fn emit_module(&self, inputs: &[Spec], output: &Spec) -> String {
        if let Op::Call(c) = self {
            return c.program.text.clone();
        }
        emit::one_op_module(self, inputs, output)
    }
}

/// What op rules and builders are written against: a value with a spec that ops apply to.
/// `Tensor` implements it (dispatching at once, or recording into a trace), so `ops` never
/// sees the runtime or autograd.
pub(crate) trait Operand: Clone + Sized {
    fn spec(&self) -> &Spec;
    fn device(&self) -> Device;
    /// Runs `op` on `inputs` (on `device` when there are none).
    fn apply(op: Op, inputs: &[&Self], device: Option<Device>) -> Result<Self>;
    /// A scalar of `dtype` on `device` (an input, not an attribute: `x * 2.0` and `x * 3.0`
    /// share one executable).
    fn scalar_on(value: f64, dtype: DType, device: Device) -> Result<Self>;
    /// A fresh `u64[2]` random state on `device`.
    fn rng_state(device: Device) -> Result<Self>;
    /// Smallest and largest value of integer data known on the host (index ops check these
    /// before dispatch instead of on the device).
    fn host_bounds(&self) -> Option<(i64, i64)>;
    /// This operand with host bounds `bounds` (a fresh result of a value-preserving op).
    fn with_host_bounds(self, bounds: Option<(i64, i64)>) -> Self;
    /// Whether it stands for a value of a function being traced (no values yet).
    fn is_traced(&self) -> bool;
    /// The same value cut from the autograd graph: no gradient flows back through it
    /// (`jax.lax.stop_gradient`, torch's `detach`).
    fn detached(&self) -> Self;

    fn shape_of(&self) -> &[usize] {
        &self.spec().shape
    }
    fn dtype_of(&self) -> DType {
        self.spec().dtype
    }
    fn rank_of(&self) -> usize {
        self.spec().rank()
    }
    /// A scalar of `dtype` where this operand is (on its device; a tensor split over a mesh
    /// gets one on every device of the mesh, so what is built from it joins the mesh too).
    fn scalar_at(&self, v: f64, dtype: DType) -> Result<Self> {
        Self::scalar_on(v, dtype, self.device())
    }
    /// A scalar of this operand's dtype, where it is.
    fn scalar_like(&self, v: f64) -> Result<Self> {
        self.scalar_at(v, self.dtype_of())
    }
    /// Dim `dim` (negative counts from the end), or an error naming `op`.
    fn dim(&self, op: &'static str, dim: isize) -> Result<usize> {
        resolve_dim(dim, self.rank_of()).ok_or_else(|| {
            Error::invalid(op, format!("dim {dim} is out of range for a rank-{} tensor", self.rank_of()))
        })
    }
    /// Dims `dims` resolved and sorted; an error if one repeats.
    fn dims(&self, op: &'static str, dims: &[isize]) -> Result<Dims> {
        let mut out: Dims = dims.iter().map(|&d| self.dim(op, d)).collect::<Result<_>>()?;
        out.sort_unstable();
        if out.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid(op, format!("dims {dims:?} repeat a dim")));
        }
        Ok(out)
    }

    // The two sums the gradient rules of several families take (`full`'s, every broadcasting
    // op's): here, on what every family builds on, so that no family names `reduce` for them
    // (`reduce`'s own rule names `elementwise` and `movement`); the gradient rules' recursion
    // closes in this file, not among the families' files.

    /// Sum of all elements, as a 0-d operand (a 0-d operand is its own): `full`'s gradient,
    /// and `Tensor::sum_all`.
    fn sum_all(&self) -> Result<Self> {
        self.sum(&[], false)
    }
    /// Sums down to `shape`, undoing NumPy broadcasting (leading dims and dims of size 1):
    /// the gradient of every broadcasting op.
    fn sum_to(&self, shape: &[usize]) -> Result<Self> {
        let own = self.shape_of();
        if own == shape {
            return Ok(self.clone());
        }
        let lead = own.len() - shape.len();
        let dims: Vec<isize> = (0..own.len())
            .filter(|&d| d < lead || (shape[d - lead] == 1 && own[d] != 1))
            .map(|d| d as isize)
            .collect();
        let summed = if dims.is_empty() { self.clone() } else { self.sum(&dims, true)? };
        summed.reshape(&signed(shape))
    }
}

/// Which dtypes an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepts {
    /// Floats only (transcendental functions).
    Float,
    /// Ints and floats, not bool.
    Numeric,
    /// Anything, bool included.
    Any,
}

impl Accepts {
    pub(crate) fn check(self, op: &'static str, dtype: DType) -> Result<()> {
        let ok = match self {
            Accepts::Float => dtype.is_float(),
            Accepts::Numeric => dtype != DType::Bool,
            Accepts::Any => true,
        };
        if ok {
            return Ok(());
        }
        let wanted = match self {
            Accepts::Float => "a floating-point tensor (f16, bf16, f32, f64)",
            _ => "a numeric tensor (not bool)",
        };
        Err(Error::dtype(op, format!("expected {wanted}, got {dtype}; convert with .to_dtype(..) first")))
    }
}

pub(crate) fn check_arity(op: &'static str, inputs: &[Spec], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(Error::invalid(op, format!("expected {n} inputs, got {}", inputs.len())));
    }
    Ok(())
}

pub(crate) fn same_dtype(op: &'static str, a: &Spec, b: &Spec) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::dtype(
            op,
            format!("dtypes differ: {} vs {}; convert one with .to_dtype(..)", a.dtype, b.dtype),
        ));
    }
    Ok(())
}

/// `spec` as a result of `op`, or a shape error when it is too large for XLA to size: a dim,
/// the element count or the byte size past `i64::MAX` (XLA throws on those inside a compile,
/// which aborts the process). A dim made by a `usize` subtraction that wrapped lands here.
pub(crate) fn check_size(op: &'static str, spec: &Spec) -> Result<()> {
    if spec.checked_size().is_some() {
        return Ok(());
    }
    Err(Error::shape(op, too_large(spec)))
}

/// Why `spec` is too large (see [`check_size`]), with its size as far as it can be counted.
pub(crate) fn too_large(spec: &Spec) -> String {
    if let Some(d) = spec.shape.iter().find(|&&d| d > i64::MAX as usize) {
        return format!(
            "{spec} is too large: a dim of {d} is past what XLA allows (at most 2^63 - 1); a dim this large is usually a usize subtraction that wrapped"
        );
    }
    let elements = spec.shape.iter().try_fold(1u128, |n, &d| n.checked_mul(d as u128));
    let size = match elements.and_then(|n| n.checked_mul(spec.dtype.size_in_bytes() as u128)) {
        Some(bytes) => format!("{bytes} bytes"),
        None => "more than 2^128 bytes".to_string(),
    };
    format!("{spec} is too large: it would hold {size}, more than an XLA array can (at most 2^63 - 1 elements and bytes)")
}

/// The NumPy broadcast of two shapes, or a shape error naming `op`.
pub(crate) fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    broadcast_shapes(a, b)
        .ok_or_else(|| Error::shape(op, format!("shapes {a:?} and {b:?} cannot be broadcast together")))
}

/// One gradient, for single-input ops.
pub(crate) fn one<T>(t: T) -> Result<Grads<T>> {
    Ok(smallvec::smallvec![Some(t)])
}

/// No gradient to any of `n` inputs.
pub(crate) fn none<T>(n: usize) -> Result<Grads<T>> {
    Ok((0..n).map(|_| None).collect())
}

/// `shape` as signed dims (what reshapes take).
pub(crate) fn signed(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers of the emission tests beside each op.
    use super::*;

    pub(crate) fn f32s(shape: &[usize]) -> Spec {
        Spec::new(shape, DType::F32)
    }

    /// The one-op module of `op` on `inputs`, after its shape rule.
    pub(crate) fn module(op: impl Into<Op>, inputs: &[Spec]) -> String {
        let op = op.into();
        let out = op.infer(inputs).expect("a valid op");
        op.emit_module(inputs, &out)
    }
}
