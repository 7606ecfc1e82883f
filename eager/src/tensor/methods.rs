//! The op methods of [`Tensor`]: each forwards to its family's builder in `ops/` (where the
//! op's rule, emission and gradient are), so a method is a signature and its documentation.

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::composite::CompositeOps;
use crate::ops::conv::{ConvOps, Padding};
use crate::ops::dynamic::DynamicOps;
use crate::ops::elementwise::ElementwiseOps;
use crate::ops::index::IndexOps;
use crate::ops::matmul::MatmulOps;
use crate::ops::movement::MovementOps;
use crate::ops::pool::PoolOps;
use crate::ops::reduce::{ReduceKind, ReduceOps};
use crate::ops::scan::ScanOps;
use crate::ops::sort::SortOps;
use crate::ops::Operand;

use super::Tensor;

/// Forwards methods to a builder trait: `name(args) => Trait` (the docs are the method's).
macro_rules! forward {
    ($($(#[$doc:meta])* $method:ident($($arg:ident: $ty:ty),*) => $trait:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            #[inline]
            pub fn $method(&self, $($arg: $ty),*) -> Result<Tensor> {
                $trait::$method(self, $($arg),*)
            }
        )*}
    };
}

/// Forwards methods to a composite's builder, run as one program named by the method (see
/// `trace::fused_op`): the user's op is one executable, not one per primitive.
macro_rules! forward_as_one {
    ($($(#[$doc:meta])* $method:ident($($arg:ident: $ty:ty),*) => $trait:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $method(&self, $($arg: $ty),*) -> Result<Tensor> {
                super::trace::fused_op(stringify!($method), || $trait::$method(self, $($arg),*))
            }
        )*}
    };
}

forward! {
    // ----- elementwise (ops/elementwise.rs) ----------------------------------------------------
    /// `-x`. Integer negation wraps (`-i32::MIN == i32::MIN`).
    neg() => ElementwiseOps;
    /// `|x|` (the value itself for unsigned ints).
    abs() => ElementwiseOps;
    /// `e^x`.
    exp() => ElementwiseOps;
    /// Natural log (NaN below 0, -inf at 0).
    log() => ElementwiseOps;
    /// Square root (NaN below 0).
    sqrt() => ElementwiseOps;
    /// `1 / sqrt(x)`.
    rsqrt() => ElementwiseOps;
    /// Hyperbolic tangent.
    tanh() => ElementwiseOps;
    /// `1 / (1 + e^-x)`.
    sigmoid() => ElementwiseOps;
    /// Sine (radians).
    sin() => ElementwiseOps;
    /// Cosine (radians).
    cos() => ElementwiseOps;
    /// `max(x, 0)`.
    relu() => ElementwiseOps;
    /// The error function (floats).
    erf() => ElementwiseOps;
    /// `log(1 + x)`, exact near 0.
    log1p() => ElementwiseOps;
    /// `exp(x) - 1`, exact near 0.
    expm1() => ElementwiseOps;
    /// The largest integer not above `x`.
    floor() => ElementwiseOps;
    /// The smallest integer not below `x`.
    ceil() => ElementwiseOps;
    /// To the nearest integer, halves to even (`0.5 -> 0`, `1.5 -> 2`), as torch.
    round() => ElementwiseOps;
    /// -1, 0 or 1 by the sign of each element (0 for 0 and -0; NaN stays NaN, as in NumPy and
    /// JAX); for unsigned ints 0 or 1.
    sign() => ElementwiseOps;
    /// Elementwise sum (broadcasting). Integer overflow wraps around, as in torch:
    /// `i32::MAX + 1 == i32::MIN`.
    add(other: &Tensor) => ElementwiseOps;
    /// Elementwise difference (broadcasting). Integer overflow wraps, as in torch.
    sub(other: &Tensor) => ElementwiseOps;
    /// Elementwise product (broadcasting). Integer overflow wraps, as in torch:
    /// `65536i32 * 65536 == 0`.
    mul(other: &Tensor) => ElementwiseOps;
    /// Elementwise quotient (broadcasting). Floats: IEEE division (`x / 0` is ±inf, `0 / 0`
    /// NaN). Integers: truncated toward zero, torch's `div(.., rounding_mode="trunc")` (torch's
    /// plain `/` of ints gives floats). Integer division by zero does not raise (torch raises
    /// `ZeroDivisionError`): eager keeps XLA's values, -1 for signed ints whatever the dividend
    /// (`7 / 0 == -1`, `0 / 0 == -1`) and all ones for unsigned (`7u8 / 0 == 255`). The
    /// overflow `i32::MIN / -1` gives `i32::MIN` (wrapped; XLA's value too).
    div(other: &Tensor) => ElementwiseOps;
    /// Elementwise power. Integer powers wrap on overflow. A negative integer exponent does not
    /// raise (torch refuses it): eager keeps XLA's truncated value, 0 for `|base| > 1` and for
    /// a zero base (`2 ** -1 == 0`, `0 ** -1 == 0`, `(-1) ** -1 == -1`).
    pow(other: &Tensor) => ElementwiseOps;
    /// Elementwise maximum; NaN on either side gives NaN, as in torch.
    maximum(other: &Tensor) => ElementwiseOps;
    /// Elementwise minimum; NaN on either side gives NaN, as in torch.
    minimum(other: &Tensor) => ElementwiseOps;
    /// [`Tensor::add`] with a scalar converted to this tensor's dtype.
    add_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::sub`] with a scalar converted to this tensor's dtype.
    sub_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::mul`] with a scalar converted to this tensor's dtype.
    mul_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::div`] with a scalar converted to this tensor's dtype.
    div_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::pow`] with a scalar converted to this tensor's dtype.
    pow_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::maximum`] with a scalar converted to this tensor's dtype.
    maximum_scalar(other: f64) => ElementwiseOps;
    /// [`Tensor::minimum`] with a scalar converted to this tensor's dtype.
    minimum_scalar(other: f64) => ElementwiseOps;
    /// `self == other` elementwise (broadcasting), as bool.
    eq(other: &Tensor) => ElementwiseOps;
    /// `self != other` elementwise (broadcasting), as bool.
    ne(other: &Tensor) => ElementwiseOps;
    /// `self < other` elementwise (broadcasting), as bool.
    lt(other: &Tensor) => ElementwiseOps;
    /// `self <= other` elementwise (broadcasting), as bool.
    le(other: &Tensor) => ElementwiseOps;
    /// `self > other` elementwise (broadcasting), as bool.
    gt(other: &Tensor) => ElementwiseOps;
    /// `self >= other` elementwise (broadcasting), as bool.
    ge(other: &Tensor) => ElementwiseOps;
    /// Comparisons with a scalar converted to this tensor's dtype.
    eq_scalar(other: f64) => ElementwiseOps;
    /// `self != other` with a scalar, as bool.
    ne_scalar(other: f64) => ElementwiseOps;
    /// `self < other` with a scalar, as bool.
    lt_scalar(other: f64) => ElementwiseOps;
    /// `self <= other` with a scalar, as bool.
    le_scalar(other: f64) => ElementwiseOps;
    /// `self > other` with a scalar, as bool.
    gt_scalar(other: f64) => ElementwiseOps;
    /// `self >= other` with a scalar, as bool.
    ge_scalar(other: f64) => ElementwiseOps;
    /// The lower triangle of the last two dims: elements on and below the `diagonal`-th
    /// diagonal (0 the main one, 1 the one above, -1 the one below), zeros elsewhere (torch's).
    tril(diagonal: i64) => ElementwiseOps;
    /// The upper triangle of the last two dims: on and above the `diagonal`-th diagonal.
    triu(diagonal: i64) => ElementwiseOps;
    /// `where(self, a, b)`: `a` where `self` is true, else `b` (broadcasting).
    where_cond(a: &Tensor, b: &Tensor) => ElementwiseOps;
    /// Converts to `dtype` (floats to bool: nonzero is true, NaN too; floats to ints truncate
    /// toward zero). Floats outside an int dtype's range saturate to its bounds and NaN gives 0
    /// (XLA's convert; undefined in torch): `1e10 -> i32::MAX`, `-5.0 -> 0u8`.
    to_dtype(dtype: DType) => ElementwiseOps;

    // ----- linear algebra (ops/matmul.rs) ------------------------------------------------------
    /// Matrix product with torch's rules: 1-D operands are promoted and the added dim
    /// removed; batch dims broadcast. f16 and bf16 products accumulate in f32 and round once.
    /// Integer products wrap on overflow.
    matmul(other: &Tensor) => MatmulOps;
    /// `matmul` with either operand read transposed (its last two dims swapped), as one op:
    /// `x.matmul_transposed(&w, false, true)` is `x.matmul(&w.t())` without the transpose
    /// (XLA's `dot_general` contracts any dim). A 1-D operand is never transposed.
    matmul_transposed(other: &Tensor, lhs_t: bool, rhs_t: bool) => MatmulOps;

    // ----- reductions (ops/reduce.rs; `sum_all` is `Operand`'s, in ops/mod.rs) ---------------
    /// Sum over `dims` (all dims if empty). f16 and bf16 accumulate in f32 and round once, as
    /// torch and JAX do; integer sums wrap on overflow and keep the dtype (torch gives i64).
    sum(dims: &[isize], keepdim: bool) => ReduceOps;
    /// Mean over `dims` (all dims if empty); floats only.
    mean(dims: &[isize], keepdim: bool) => ReduceOps;
    /// Largest value over `dims` (all dims if empty). NaN propagates: a lane with a NaN gives
    /// NaN, as in torch. An empty dim is an error (it has no max).
    max(dims: &[isize], keepdim: bool) => ReduceOps;
    /// Smallest value over `dims`; NaN propagates, as for [`Tensor::max`].
    min(dims: &[isize], keepdim: bool) => ReduceOps;
    /// Sum of all elements, as a 0-d tensor.
    sum_all() => Operand;
    /// Mean of all elements, as a 0-d tensor.
    mean_all() => ReduceOps;

    // ----- scans (ops/scan.rs) ----------------------------------------------------------------
    /// Running sum along `dim`: element `i` is the sum of elements `0..=i`. f16 and bf16
    /// accumulate in f32; integer sums wrap and keep the dtype (torch gives i64).
    cumsum(dim: isize) => ScanOps;
    /// Running product along `dim`. Its gradient divides by the input: exact without zeros
    /// (a zero input gives inf or NaN gradients; torch handles zeros).
    cumprod(dim: isize) => ScanOps;

    // ----- convolution (ops/conv.rs) -----------------------------------------------------------
    /// 1-D convolution as torch's `conv1d`: input `[N, C, L]`, weight `[O, C / groups, k]`,
    /// output `[N, O, L_out]`; `padding` is `p.into()` (zeros on both sides) or
    /// `Padding::Same` (stride 1 only). No bias: add it (broadcast as `[O, 1]`). f16 and bf16
    /// accumulate in f32.
    conv1d(weight: &Tensor, stride: usize, padding: Padding, dilation: usize, groups: usize) => ConvOps;
    /// 2-D convolution as torch's `conv2d`: input `[N, C, H, W]`, weight
    /// `[O, C / groups, kh, kw]`, output `[N, O, H_out, W_out]`; `padding` is
    /// `[ph, pw].into()`, `p.into()` or `Padding::Same` (stride 1 only). No bias: add it
    /// (broadcast as `[O, 1, 1]`). f16 and bf16 accumulate in f32.
    conv2d(weight: &Tensor, stride: [usize; 2], padding: Padding, dilation: [usize; 2], groups: usize) => ConvOps;
    /// Transposed 2-D convolution as torch's `conv_transpose2d`: input `[N, C_in, H, W]`,
    /// weight `[C_in, C_out / groups, kh, kw]`, output size `(n-1)*stride - 2*padding +
    /// dilation*(k-1) + output_padding + 1` per dim. It is `conv2d`'s input gradient: a
    /// convolution of the input dilated by the stride with the flipped weight. `padding` must
    /// be at most `dilation * (k - 1)`. No bias.
    conv_transpose2d(weight: &Tensor, stride: [usize; 2], padding: [usize; 2], output_padding: [usize; 2], dilation: [usize; 2], groups: usize) => ConvOps;
    /// Reverses the order of elements along `dims`.
    flip(dims: &[isize]) => ConvOps;

    // ----- pooling (ops/pool.rs) ---------------------------------------------------------------
    /// Max over `kernel` windows of the last two dims (`[C, H, W]` or `[N, C, H, W]`), as
    /// torch's `max_pool2d`: `stride` defaults (`None`) to the kernel, padding (at most half
    /// the kernel) counts as -inf. NaN propagates. The gradient goes to one argmax per window
    /// (the first in row-major order).
    max_pool2d(kernel: [usize; 2], stride: Option<[usize; 2]>, padding: [usize; 2]) => PoolOps;
    /// Mean over `kernel` windows of the last two dims, as torch's `avg_pool2d` with
    /// `count_include_pad=True`: padding zeros count in the mean. `stride` defaults to the
    /// kernel.
    avg_pool2d(kernel: [usize; 2], stride: Option<[usize; 2]>, padding: [usize; 2]) => PoolOps;
    /// Average pooling to an `[oh, ow]` output: `[1, 1]` is the mean over H and W; other
    /// sizes must divide H and W (torch's uneven windows are not supported).
    adaptive_avg_pool2d(output: [usize; 2]) => PoolOps;

    // ----- composites (ops/composite.rs) -------------------------------------------------------

    /// `value` (converted to this dtype) where the bool `mask` is true, else `self`; the mask
    /// broadcasts (torch's `masked_fill`).
    masked_fill(mask: &Tensor, value: f64) => CompositeOps;
    /// One-hot rows, i64 `[*self.shape, classes]` (torch's `F.one_hot`, with `classes` given):
    /// a class outside `0..classes` is an error (at once for indices from the host; on the
    /// device a negative one counts from the end, as eager's other indexing ops).
    one_hot(classes: usize) => CompositeOps;
    /// `x * x`.
    square() => CompositeOps;
    /// Limits values to `[min, max]` (either may be `None`, not both): `max(x, min)` then
    /// `min(., max)`, as torch, so `min > max` gives `max`. NaN stays NaN. Scalars are
    /// converted to this tensor's dtype.
    clamp(min: Option<f64>, max: Option<f64>) => CompositeOps;

    // ----- shape (ops/movement.rs) -------------------------------------------------------------
    /// Reshape; one dim may be -1 (inferred).
    reshape(shape: &[isize]) => MovementOps;
    /// The elements as one dim.
    flatten() => MovementOps;
    /// Inserts a dim of size 1 at `dim` (negative counts from the end of the result).
    unsqueeze(dim: isize) => MovementOps;
    /// Removes dim `dim`, which must have size 1.
    squeeze(dim: isize) => MovementOps;
    /// Reorders dims: result dim `i` is input dim `perm[i]`.
    permute(perm: &[isize]) => MovementOps;
    /// Swaps two dims.
    transpose(d0: isize, d1: isize) => MovementOps;
    /// Transpose of a matrix (the last two dims).
    t() => MovementOps;
    /// NumPy broadcast to `shape`.
    broadcast_to(shape: &[usize]) => MovementOps;
    /// `len` elements of dim `dim` from `start`.
    narrow(dim: isize, start: usize, len: usize) => MovementOps;
    /// Elements `start..end` with `step` along `dim`.
    slice(dim: isize, start: usize, end: usize, step: usize) => MovementOps;

    // ----- dynamic slices (ops/dynamic.rs) ------------------------------------------------------
    /// The block of `sizes` that starts at `starts` (a 1-D i32/i64 tensor, one start per dim),
    /// as `jax.lax.dynamic_slice`: the start is data, so every position runs one executable. A
    /// start is clamped so that the block fits (`clamp(start, 0, dim - size)`), as in XLA.
    dynamic_slice(starts: &Tensor, sizes: &[usize]) => DynamicOps;
    /// `self` with `update` written over the block that starts at `starts` (one start per dim,
    /// clamped so that the block fits), as `jax.lax.dynamic_update_slice`: only the block is
    /// written, in place when `self` is donated to a compiled function. Gradients flow to
    /// `self` (but the block) and to `update`.
    dynamic_update_slice(update: &Tensor, starts: &Tensor) => DynamicOps;

    // ----- indexing (ops/index.rs) -------------------------------------------------------------
    /// Picks entries along `dim` by a 1-D i32/i64 index tensor. A negative index counts from
    /// the end (`-1` is the last), as torch's `x[idx]` and NumPy's `take` do (torch's
    /// `index_select` itself refuses negative indices). An index outside `-size..size` is an
    /// error naming it: at once for indices uploaded from the host (`Tensor::from_slice` and
    /// reshapes of it), else checked on the device and reported by the next read of a result
    /// that depends on this one (as other failures on the device are).
    index_select(dim: isize, indices: &Tensor) => IndexOps;
    /// Elements picked along `dim` by `indices` of the same rank (torch's `gather`, NumPy's
    /// `take_along_axis`): `out[i][j] = self[indices[i][j]][j]` for `dim` 0; the result has the
    /// shape of `indices`, which may be smaller than `self` outside `dim`. Negative indices
    /// count from the end; out of range ones are errors, as for [`Tensor::index_select`].
    gather(dim: isize, indices: &Tensor) => IndexOps;
    /// `self` with `src`'s elements added at the places `indices` names along `dim` (torch's
    /// `scatter_add`): `out[indices[i][j]][j] += src[i][j]` for `dim` 0, repeated indices adding
    /// up. Only the part of `src` the shape of `indices` covers takes part. Negative indices
    /// count from the end; out of range ones are errors.
    scatter_add(dim: isize, indices: &Tensor, src: &Tensor) => IndexOps;
    /// [`Tensor::gather`] after broadcasting `self` and `indices` against each other in every
    /// dim but `dim` (torch's `take_along_dim`, NumPy's `take_along_axis`); both of one rank.
    take_along_dim(indices: &Tensor, dim: isize) => IndexOps;
    /// `self` with the slices of `source` added at the positions the 1-D `index` names along
    /// `dim` (torch's `index_add`): `out[index[i]] += source[i]` for `dim` 0, repeated indices
    /// adding up. `source` is shaped as `self` except along `dim`, where it has the index's
    /// length. Negative indices count from the end; out of range ones are errors.
    index_add(dim: isize, index: &Tensor, source: &Tensor) => IndexOps;
}

impl Tensor {
    /// The same values in a buffer of their own (torch's `clone()`; `Tensor::clone` shares
    /// the buffer): what to keep of a tensor that is about to be donated. Gradients flow
    /// through it.
    pub fn copy(&self) -> Result<Tensor> {
        let whole: Vec<usize> = self.shape().to_vec();
        let op = crate::ops::Slice {
            starts: whole.iter().map(|_| 0).collect(),
            limits: whole.iter().copied().collect(),
            strides: whole.iter().map(|_| 1).collect(),
        };
        super::dispatch(crate::ops::Op::Slice(op), &[self], None)
    }

    /// Index (i64) of the largest value along `dim` (the first on ties); over the flattened
    /// tensor when `dim` is `None`. NaN counts as the largest (the first NaN wins), as in torch.
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ReduceKind::ArgMax, dim, keepdim)
    }

    /// Index (i64) of the smallest value along `dim`; as [`Tensor::argmax`].
    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ReduceKind::ArgMin, dim, keepdim)
    }

    /// The positions (i64) that sort `self` along `dim`, stably (equal elements keep their
    /// order); NaN sorts as the largest value, as in torch.
    pub fn argsort(&self, dim: isize, descending: bool) -> Result<Tensor> {
        SortOps::argsort(self, dim, descending)
    }

    /// The values sorted along `dim` (stably, NaN largest) and the positions they came from
    /// (torch's `sort`). The gradient flows to the values' places.
    pub fn sort(&self, dim: isize, descending: bool) -> Result<(Tensor, Tensor)> {
        SortOps::sort(self, dim, descending)
    }

    /// The `k` largest (`largest`) or smallest values along `dim`, in order, and their
    /// positions (torch's `topk`); of equal values the earlier comes first.
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        SortOps::topk(self, k, dim, largest)
    }

    /// Joins tensors along `dim`.
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        MovementOps::cat(tensors, dim)
    }
}

forward_as_one! {
    // ----- composites run as one program each (ops/composite.rs) ----------------------------
    /// Softmax along `dim`, composed: `exp(x - max) / sum(exp(x - max))`.
    softmax(dim: isize) => CompositeOps;
    /// Log-softmax along `dim`, composed: `x - max - log(sum(exp(x - max)))`.
    log_softmax(dim: isize) => CompositeOps;
    /// `x / sqrt(mean(x²) + eps)` over the last `dims` dims (torch's `F.rms_norm` without a
    /// weight; `nn` layers multiply theirs).
    rms_norm(dims: usize, eps: f64) => CompositeOps;
    /// Channels (dim 1 of `[N, C, ...]`) in `groups` groups, each normalised to mean 0 and
    /// variance 1 (biased), as torch's `F.group_norm` without weight and bias.
    group_norm(groups: usize, eps: f64) => CompositeOps;
    /// Attention, composed: `softmax(q kᵀ / √d) v` for `self` = q `[..., L, d]`, keys
    /// `[..., S, d]` and values `[..., S, dv]` (torch's `F.scaled_dot_product_attention`).
    /// `mask` is bool, true where a query may attend (broadcast to `[..., L, S]`); `causal`
    /// lets query `i` attend keys `0..=i`. The softmax subtracts each row's max (stable); a row
    /// with nothing to attend gives 0, as torch 2.9 and `nn::scaled_dot_product_attention`.
    scaled_dot_product_attention(k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool) => CompositeOps;
    /// `x * sigmoid(x)` (SiLU, swish).
    silu() => CompositeOps;
}
