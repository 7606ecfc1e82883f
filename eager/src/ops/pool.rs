//! Pooling over windows of the last two dims (`stablehlo.reduce_window`): max pooling (NaN
//! propagates, as in torch; padding counts as -inf) and sum pooling, from which average
//! pooling divides (padding zeros count, torch's `count_include_pad=True`). f16 and bf16 sums
//! accumulate in f32 and round once.
//!
//! Gradients: max pooling sends each window's gradient to one element, as torch's kernels
//! pick it: the first max in row-major order, or the last NaN where the window holds NaN;
//! through `stablehlo.select_and_scatter` ([`MaxPoolGrad`]) or, where the windows tile the
//! input, through a reduce and a select (faster on XLA:CPU). Sum pooling's gradient is the
//! sum pooling of `g` dilated by the stride (`base_dilations`) and padded by
//! `(k-1-lo, k-1-hi+r)`, `r` the input tail no window reached: every input element gets the
//! sum of the windows holding it.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::elementwise::ElementwiseOps;
use super::emit::{accumulator, i64_array, Emitter, Value};
use super::reduce::ReduceOps;
use super::GradReads;
use super::{check_arity, one, same_dtype, Accepts, Grads, Op, OpDef, Operand};

/// Zero (or -inf) padding of each dim, `[before, after]`.
pub type PoolPads = Vec<[usize; 2]>;

/// What a pool reduces with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The maximum of each window.
    Max,
    /// The sum of each window.
    Sum,
}

/// A window reduction; every attribute has one entry per dim of the input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pool {
    /// What the windows reduce with.
    pub kind: PoolKind,
    /// Window size per dim.
    pub window: Vec<usize>,
    /// Window stride per dim.
    pub stride: Vec<usize>,
    /// Dilation of the input (`base_dilations`): only sum pooling's gradient uses it.
    pub base_dilation: Vec<usize>,
    /// Padding per dim, `[before, after]`.
    pub padding: PoolPads,
}

/// Output length of a window `k` with stride `s` over `n` elements dilated by `b` and padded.
fn window_out(n: usize, b: usize, pad: [usize; 2], k: usize, s: usize) -> Option<usize> {
    let dilated = if n == 0 { 0 } else { (n - 1) * b + 1 };
    (dilated + pad[0] + pad[1]).checked_sub(k).map(|v| v / s + 1)
}

fn check_attrs(name: &'static str, x: &Spec, lists: &[&[usize]], pads: &PoolPads) -> Result<()> {
    let r = x.rank();
    if lists.iter().any(|l| l.len() != r || l.contains(&0)) || pads.len() != r {
        return Err(Error::invalid(name, format!("needs {r} window sizes, strides and pads (sizes >= 1)")));
    }
    Ok(())
}

impl OpDef for Pool {
    fn grad_reads(&self) -> GradReads {
        match self.kind {
            PoolKind::Max => GradReads::inputs(&[0]),
            PoolKind::Sum => GradReads::NONE,
        }
    }
    fn name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "max_pool",
            PoolKind::Sum => "sum_pool",
        }
    }

    fn attrs(&self) -> String {
        let mut s = format!(
            "window={:?} stride={:?} padding={:?}",
            self.window.as_slice(),
            self.stride.as_slice(),
            self.padding.as_slice()
        );
        if self.base_dilation.iter().any(|&d| d != 1) {
            s += &format!(" base_dilation={:?}", self.base_dilation.as_slice());
        }
        s
    }

    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 1)?;
        let x = &inputs[0];
        Accepts::Float.check(name, x.dtype)?;
        check_attrs(name, x, &[&self.window, &self.stride, &self.base_dilation], &self.padding)?;
        let mut shape = Shape::new();
        for d in 0..x.rank() {
            let n = window_out(
                x.shape[d],
                self.base_dilation[d],
                self.padding[d],
                self.window[d],
                self.stride[d],
            )
            .ok_or_else(|| {
                Error::shape(
                    name,
                    format!(
                        "the window {:?} is larger than the padded input {:?} (padding {:?})",
                        self.window.as_slice(),
                        x.shape.as_slice(),
                        self.padding.as_slice()
                    ),
                )
            })?;
            shape.push(n);
        }
        Ok(Spec { shape, dtype: x.dtype })
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let (combine, init, acc) = match self.kind {
            PoolKind::Max => ("stablehlo.maximum", f64::NEG_INFINITY, out.dtype),
            PoolKind::Sum => ("stablehlo.add", 0.0, accumulator(out.dtype)),
        };
        let v = if acc == x[0].spec.dtype {
            x[0].clone()
        } else {
            e.op("stablehlo.convert", &[&x[0]], "", &Spec { shape: x[0].spec.shape.clone(), dtype: acc })
        };
        let wide = Spec { shape: out.shape.clone(), dtype: acc };
        let attrs = format!(
            "base_dilations = {}, padding = {}, window_dimensions = {}, window_strides = {}",
            i64_array(&self.base_dilation),
            pads_attr(&self.padding),
            i64_array(&self.window),
            i64_array(&self.stride)
        );
        let r = e.reduce_window(&v, combine, init, &attrs, &wide);
        if acc == out.dtype {
            r
        } else {
            e.op("stablehlo.convert", &[&r], "", out)
        }
    }

    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        if self.base_dilation.iter().any(|&d| d != 1) {
            return Err(Error::invalid(
                self.name(),
                "no gradient of a dilated pool (second-order gradients)",
            ));
        }
        match self.kind {
            PoolKind::Max => {
                let op = MaxPoolGrad {
                    window: self.window.clone(),
                    stride: self.stride.clone(),
                    padding: self.padding.clone(),
                };
                one(T::apply(Op::MaxPoolGrad(op), &[x[0], g], None)?)
            }
            PoolKind::Sum => {
                let xs = x[0].shape_of();
                let mut padding = PoolPads::new();
                for (d, &n) in xs.iter().enumerate() {
                    let (k, s, p) = (self.window[d], self.stride[d], self.padding[d]);
                    let tail = (n + p[0] + p[1] - k) % s;
                    if p[0] > k - 1 || p[1] > k - 1 + tail {
                        return Err(Error::invalid(
                            self.name(),
                            "no gradient when the padding exceeds the window",
                        ));
                    }
                    padding.push([k - 1 - p[0], k - 1 - p[1] + tail]);
                }
                let ones: Vec<usize> = xs.iter().map(|_| 1).collect();
                let op = Pool {
                    kind: PoolKind::Sum,
                    window: self.window.clone(),
                    stride: ones,
                    base_dilation: self.stride.clone(),
                    padding,
                };
                one(T::apply(Op::Pool(op), &[g], None)?)
            }
        }
    }
}

fn pads_attr(p: &PoolPads) -> String {
    let rows: Vec<String> = p.iter().map(|p| format!("[{}, {}]", p[0], p[1])).collect();
    format!("dense<[{}]> : tensor<{}x2xi64>", rows.join(", "), p.len())
}

/// Max pooling's gradient: `g` (one value per window) added at each window's first argmax of
/// `x` or its last NaN (as torch), via `stablehlo.select_and_scatter`, or without it where the
/// windows tile the input (see `emit_tiled`). Inputs: `x`, `g`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxPoolGrad {
    /// Window size per dim.
    pub window: Vec<usize>,
    /// Window stride per dim.
    pub stride: Vec<usize>,
    /// Padding per dim, `[before, after]`.
    pub padding: PoolPads,
}

impl OpDef for MaxPoolGrad {
    fn name(&self) -> &'static str {
        "max_pool_grad"
    }

    fn attrs(&self) -> String {
        format!(
            "window={:?} stride={:?} padding={:?}",
            self.window.as_slice(),
            self.stride.as_slice(),
            self.padding.as_slice()
        )
    }

    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        same_dtype(name, &inputs[0], &inputs[1])?;
        let x = &inputs[0];
        Accepts::Float.check(name, x.dtype)?;
        let ones: Vec<usize> = x.shape.iter().map(|_| 1).collect();
        check_attrs(name, x, &[&self.window, &self.stride, &ones], &self.padding)?;
        let want: Option<Shape> = (0..x.rank())
            .map(|d| window_out(x.shape[d], 1, self.padding[d], self.window[d], self.stride[d]))
            .collect();
        if want.as_deref() != Some(inputs[1].shape.as_slice()) {
            return Err(Error::shape(
                name,
                format!("g {:?} is not the pooled shape of {:?}", inputs[1].shape, x.shape),
            ));
        }
        Ok(x.clone())
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        if self.tiles() {
            return self.emit_tiled(e, &x[0], &x[1], out);
        }
        use std::fmt::Write as _;
        let scalar = Spec::new(&[], out.dtype);
        let zero = e.constant(&scalar, 0.0);
        let t = scalar.mlir();
        let name = e.fresh();
        let (a, b) = (e.fresh(), e.fresh());
        let _ = writeln!(
            e.body,
            "    {name} = \"stablehlo.select_and_scatter\"({}, {}, {}) ({{",
            x[0].name, x[1].name, zero.name
        );
        let _ = writeln!(e.body, "    ^bb0({a}: {t}, {b}: {t}):");
        // Keep the current pick `a` if it is at least `b` or NaN, unless `b` is NaN (torch's
        // `val > max || isnan(val)`: the first max, or the last NaN).
        let av = Value { name: a.clone(), spec: scalar.clone() };
        let bv = Value { name: b.clone(), spec: scalar.clone() };
        let bool = Spec::new(&[], DType::Bool);
        let ge = e.compare("GE", &av, &bv);
        let a_nan = e.compare("NE", &av, &av);
        let b_number = e.compare("EQ", &bv, &bv);
        let pick = e.op("stablehlo.or", &[&ge, &a_nan], "", &bool);
        let keep = e.op("stablehlo.and", &[&pick, &b_number], "", &bool);
        let _ = writeln!(e.body, "      \"stablehlo.return\"({}) : (tensor<i1>) -> ()", keep.name);
        let (c, d, s) = (e.fresh(), e.fresh(), e.fresh());
        let _ = write!(
            e.body,
            concat!(
                "    }}, {{\n    ^bb0({c}: {t}, {d}: {t}):\n",
                "      {s} = \"stablehlo.add\"({c}, {d}) : ({t}, {t}) -> {t}\n",
                "      \"stablehlo.return\"({s}) : ({t}) -> ()\n",
                "    }}) {{padding = {p}, window_dimensions = {w}, window_strides = {st}}} : ({xt}, {gt}, {t}) -> {ot}\n"
            ),
            c = c,
            d = d,
            s = s,
            t = t,
            p = pads_attr(&self.padding),
            w = i64_array(&self.window),
            st = i64_array(&self.stride),
            xt = x[0].spec.mlir(),
            gt = x[1].spec.mlir(),
            ot = out.mlir(),
        );
        Value { name, spec: out.clone() }
    }

    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        Err(Error::invalid(self.name(), "no second-order gradient of max pooling"))
    }
}

impl MaxPoolGrad {
    /// Whether the windows tile the input: unpadded, each its own size apart (`MaxPool2d(2)`).
    fn tiles(&self) -> bool {
        self.window == self.stride && self.padding.iter().all(|p| *p == [0, 0])
    }

    /// The gradient of tiling windows without `select_and_scatter` (XLA:CPU runs that as a
    /// loop over windows, ~3x torch's time): the input, cut to whole windows, is reshaped so
    /// each window has axes of its own; a reduce finds each window's pick (the first max in
    /// row-major order, or the last NaN) and a select puts `g` there. Two reduces and one
    /// elementwise pass that XLA fuses; the cut-off tail gets zeros.
    fn emit_tiled(&self, e: &mut Emitter, x: &Value, g: &Value, out: &Spec) -> Value {
        let dtype = out.dtype;
        let pooled = &g.spec.shape;
        let whole: Vec<usize> = pooled.iter().zip(&self.window).map(|(o, k)| o * k).collect();
        let x = if whole.as_slice() == x.spec.shape.as_slice() {
            x.clone()
        } else {
            let zeros = vec![0; whole.len()];
            let ones = vec![1; whole.len()];
            let attr = super::movement::slice_attr(&zeros, &whole, &ones);
            e.op("stablehlo.slice", &[x], &attr, &Spec { shape: whole.as_slice().into(), dtype })
        };
        // Axes: each dim d becomes `o_d` then, when its window is wider than 1, `k_d`.
        let (mut split, mut window_axes, mut pooled_axes) = (Shape::new(), vec![], vec![]);
        for (&o, &k) in pooled.iter().zip(&self.window) {
            pooled_axes.push(split.len());
            split.push(o);
            if k > 1 {
                window_axes.push(split.len());
                split.push(k);
            }
        }
        let split_f = Spec { shape: split.clone(), dtype };
        let split_i = Spec { shape: split.clone(), dtype: DType::I32 };
        let xs = e.op("stablehlo.reshape", &[&x], "", &split_f);
        // Each element's row-major position in its window.
        let mut pos: Option<Value> = None;
        let mut scale = 1;
        for &axis in window_axes.iter().rev() {
            let iota = e.op("stablehlo.iota", &[], &format!("iota_dimension = {axis} : i64"), &split_i);
            let term = if scale == 1 {
                iota
            } else {
                let c = e.constant(&split_i, scale as f64);
                e.op("stablehlo.multiply", &[&iota, &c], "", &split_i)
            };
            pos = Some(match pos {
                None => term,
                Some(p) => e.op("stablehlo.add", &[&p, &term], "", &split_i),
            });
            scale *= split[axis];
        }
        let pos = match pos {
            Some(p) => p,
            None => e.constant(&split_i, 0.0),
        };
        let spread = |e: &mut Emitter, v: &Value, spec: &Spec| {
            let attr = format!("broadcast_dimensions = {}", i64_array(&pooled_axes));
            e.op("stablehlo.broadcast_in_dim", &[v], &attr, spec)
        };
        // Each element's score: a NaN scores above every max (the later the higher), a max
        // above the rest (the earlier the higher); a window's top score is its pick.
        let max = e.reduce(&xs, &window_axes, "stablehlo.maximum", f64::NEG_INFINITY);
        let max = spread(e, &max, &split_f);
        let equal = e.compare("EQ", &xs, &max);
        let nan = e.compare("NE", &xs, &xs);
        let (size, last) = (e.constant(&split_i, scale as f64), e.constant(&split_i, scale as f64 - 1.0));
        let nan_score = e.op("stablehlo.add", &[&size, &pos], "", &split_i);
        let max_score = e.op("stablehlo.subtract", &[&last, &pos], "", &split_i);
        let none = e.constant(&split_i, -1.0);
        let score = e.op("stablehlo.select", &[&equal, &max_score, &none], "", &split_i);
        let score = e.op("stablehlo.select", &[&nan, &nan_score, &score], "", &split_i);
        let top = e.reduce(&score, &window_axes, "stablehlo.maximum", -1.0);
        let top = spread(e, &top, &split_i);
        let chosen = e.compare("EQ", &score, &top);
        let g_spread = spread(e, g, &split_f);
        let zero = e.constant(&split_f, 0.0);
        let grad = e.op("stablehlo.select", &[&chosen, &g_spread, &zero], "", &split_f);
        let grad = e.op("stablehlo.reshape", &[&grad], "", &Spec { shape: whole.as_slice().into(), dtype });
        if whole.as_slice() == out.shape.as_slice() {
            return grad;
        }
        let none: super::Dims = whole.iter().map(|_| 0).collect();
        let tail = out.shape.iter().zip(&whole).map(|(n, w)| n - w).collect();
        super::movement::Pad { low: none.clone(), high: tail, interior: none }.emit(e, &[grad], out)
    }
}

/// Pooling, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait PoolOps: Operand {
    /// `(H, W)` of a float `[C, H, W]` or `[N, C, H, W]` operand, or the error naming `name`.
    fn image_size(&self, name: &'static str) -> Result<(usize, usize)> {
        let r = self.rank_of();
        if !(3..=4).contains(&r) {
            let msg = format!("needs a [C, H, W] or [N, C, H, W] input, got {:?}", self.shape_of());
            return Err(Error::shape(name, msg));
        }
        Accepts::Float.check(name, self.dtype_of())?;
        Ok((self.shape_of()[r - 2], self.shape_of()[r - 1]))
    }

    /// A pool over the last two dims of a `[C, H, W]` or `[N, C, H, W]` operand.
    fn pool2d(
        &self,
        name: &'static str,
        kind: PoolKind,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<Self> {
        let (h, w) = self.image_size(name)?;
        if (0..2).any(|d| [h, w][d] + 2 * padding[d] < kernel[d]) {
            return Err(Error::shape(
                name,
                format!(
                    "the kernel {kernel:?} is larger than the padded input {:?} (padding {padding:?})",
                    self.shape_of()
                ),
            ));
        }
        let stride = stride.unwrap_or(kernel);
        if kernel.contains(&0) || stride.contains(&0) {
            return Err(Error::invalid(
                name,
                format!("kernel {kernel:?} and stride {stride:?} must be >= 1"),
            ));
        }
        if (0..2).any(|d| padding[d] > kernel[d] / 2) {
            return Err(Error::invalid(
                name,
                format!("padding {padding:?} must be at most half the kernel {kernel:?} (as torch)"),
            ));
        }
        let lead = self.rank_of() - 2;
        let ones = |v: [usize; 2]| -> Vec<usize> { (0..lead).map(|_| 1).chain(v).collect() };
        let mut pads: PoolPads = (0..lead).map(|_| [0, 0]).collect();
        pads.extend(padding.iter().map(|&p| [p, p]));
        let op = Pool {
            kind,
            window: ones(kernel),
            stride: ones(stride),
            base_dilation: ones([1, 1]),
            padding: pads,
        };
        Self::apply(Op::Pool(op), &[self], None)
    }

    fn max_pool2d(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<Self> {
        self.pool2d("max_pool2d", PoolKind::Max, kernel, stride, padding)
    }

    fn avg_pool2d(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<Self> {
        let s = self.pool2d("avg_pool2d", PoolKind::Sum, kernel, stride, padding)?;
        s.div_scalar((kernel[0] * kernel[1]) as f64)
    }

    /// Average pooling to `output` `[oh, ow]`: the mean over H and W for `[1, 1]`, else
    /// windows of `H / oh` by `W / ow`, which must divide evenly.
    fn adaptive_avg_pool2d(&self, output: [usize; 2]) -> Result<Self> {
        let name = "adaptive_avg_pool2d";
        let (h, w) = self.image_size(name)?;
        if output == [1, 1] {
            return self.mean(&[-2, -1], true);
        }
        if output.contains(&0) || h % output[0] != 0 || w % output[1] != 0 {
            return Err(Error::invalid(
                name,
                format!("output {output:?} must divide the input's H and W ({h}, {w}); other sizes are not supported"),
            ));
        }
        let k = [h / output[0], w / output[1]];
        self.avg_pool2d(k, Some(k), [0, 0])
    }
}

impl<T: Operand> PoolOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    fn pool(kind: PoolKind, k: usize, s: usize, p: usize) -> Pool {
        Pool {
            kind,
            window: [1, 1, k, k].into_iter().collect(),
            stride: [1, 1, s, s].into_iter().collect(),
            base_dilation: [1, 1, 1, 1].into_iter().collect(),
            padding: [[0, 0], [0, 0], [p, p], [p, p]].into_iter().collect(),
        }
    }

    #[test]
    fn max_pool_reduces_windows_from_minus_infinity() {
        let m = module(pool(PoolKind::Max, 3, 2, 1), &[f32s(&[2, 3, 7, 7])]);
        assert!(m.contains("\"stablehlo.reduce_window\"") && m.contains("\"stablehlo.maximum\""), "{m}");
        assert!(
            m.contains("dense<0xFF800000>") && m.contains("window_dimensions = array<i64: 1, 1, 3, 3>"),
            "{m}"
        );
        assert!(m.contains("-> tensor<2x3x4x4xf32>"), "{m}");
    }

    #[test]
    fn half_sum_pools_accumulate_in_f32() {
        let m = module(pool(PoolKind::Sum, 2, 2, 0), &[Spec::new(&[1, 1, 4, 4], DType::F16)]);
        assert!(m.contains("-> tensor<1x1x2x2xf32>") && m.contains("-> tensor<1x1x2x2xf16>"), "{m}");
    }

    /// Max pooling's gradient over the last two dims of a rank-4 input, unpadded.
    fn max_pool_grad(k: usize, s: usize) -> MaxPoolGrad {
        MaxPoolGrad {
            window: [1, 1, k, k].into_iter().collect(),
            stride: [1, 1, s, s].into_iter().collect(),
            padding: [[0, 0]; 4].into_iter().collect(),
        }
    }

    #[test]
    fn max_pool_grad_of_overlapping_windows_selects_and_scatters() {
        let m = module(max_pool_grad(3, 2), &[f32s(&[1, 1, 5, 5]), f32s(&[1, 1, 2, 2])]);
        assert!(
            m.contains("\"stablehlo.select_and_scatter\"") && m.contains("comparison_direction GE"),
            "{m}"
        );
    }

    #[test]
    fn max_pool_grad_of_tiling_windows_reduces_and_selects() {
        // 5x5 cut to whole windows (4x4), split as [1, 1, 2, 2, 2, 2], the tail padded back.
        let m = module(max_pool_grad(2, 2), &[f32s(&[1, 1, 5, 5]), f32s(&[1, 1, 2, 2])]);
        assert!(!m.contains("select_and_scatter"), "{m}");
        assert!(m.contains("\"stablehlo.slice\"") && m.contains("-> tensor<1x1x2x2x2x2xf32>"), "{m}");
        assert!(m.contains("dimensions = array<i64: 3, 5>") && m.contains("\"stablehlo.select\""), "{m}");
        assert!(m.contains("edge_padding_high = array<i64: 0, 0, 1, 1>"), "{m}");
    }

    #[test]
    fn a_window_larger_than_the_input_is_an_error() {
        let e = pool(PoolKind::Max, 5, 1, 0).infer(&[f32s(&[1, 1, 3, 3])]).unwrap_err().to_string();
        assert!(e.contains("max_pool") && e.contains("larger than the padded input"), "{e}");
    }
}
