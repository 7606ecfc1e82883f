//! Convolution over `stablehlo.convolution`, in torch's layout: input `[N, C, *spatial]`,
//! weight `[O, C / groups, *kernel]`, output `[N, O, *out]` (1-D and 2-D spatial dims, i.e.
//! ranks 3 and 4). f16 and bf16 convolutions accumulate in f32 and round once. Also `flip`
//! (`stablehlo.reverse`), which the input gradient needs.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): convolutions (conv1d, conv2d, conv_transpose2d) are on the
//! low-precision list, as torch's; `flip` keeps its input's dtype.
//!
//! Gradients (for a convolution with stride `s`, padding `(lo, hi)`, dilation `d`, groups `G`):
//! - input: the convolution of `g` dilated by `s` (`lhs_dilation`) with the weight flipped in
//!   its spatial dims and with in/out channels swapped per group, padded by
//!   `(d(k-1) - lo, d(k-1) - hi + r)` where `r` is the input tail no window reached;
//! - weight: the convolution of the input (channels as batch) with `g` (channels as output
//!   features, batch as input features), stride `d`, kernel dilation `s`, padding
//!   `(lo, hi - r)` and `batch_group_count = G`; its `[C/G, O, *k]` result is transposed.
//!
//! Both also hold for an input dilation `a` (`lhs_dilation`, what `conv_transpose` uses): the
//! input gradient's window stride is `a`, the weight gradient dilates the input by `a`. A
//! negative padding crops instead (elements dropped). The weight gradient's convolution
//! (`batch_groups` other than 1) has no gradient of its own (second-order weight gradients are
//! an error).

use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::emit::{accumulator, i64_array, Emitter, Value};
use super::movement::MovementOps;
use super::GradReads;
use super::{check_arity, one, same_dtype, Accepts, Grads, Op, OpDef, Operand};

/// Zero padding of each spatial dim, `[before, after]`.
pub type Pads = Vec<[usize; 2]>;

/// A convolution (see the module docs); every attribute has one entry per spatial dim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conv {
    /// Window stride per spatial dim.
    pub stride: Vec<usize>,
    /// Zero padding per spatial dim.
    pub padding: Pads,
    /// Dilation of the input (`lhs_dilation`): only gradients and transposed convs use it.
    pub lhs_dilation: Vec<usize>,
    /// Dilation of the kernel (torch's `dilation`).
    pub dilation: Vec<usize>,
    /// `feature_group_count` (torch's `groups`).
    pub groups: usize,
    /// `batch_group_count` (only the weight gradient uses it).
    pub batch_groups: usize,
}

impl Conv {
    /// A plain convolution (torch's conv attributes).
    pub fn new(stride: &[usize], padding: &[[usize; 2]], dilation: &[usize], groups: usize) -> Conv {
        Conv {
            stride: stride.into(),
            padding: padding.into(),
            lhs_dilation: stride.iter().map(|_| 1).collect(),
            dilation: dilation.into(),
            groups,
            batch_groups: 1,
        }
    }

    /// Output length of one spatial dim `i` for an input of length `n` and a kernel of `k`
    /// (`None` when the dilated kernel is longer than the padded input).
    fn out_len(&self, i: usize, n: usize, k: usize) -> Option<usize> {
        let dilated = if n == 0 { 0 } else { (n - 1) * self.lhs_dilation[i] + 1 };
        let padded = dilated + self.padding[i][0] + self.padding[i][1];
        let dk = (k - 1) * self.dilation[i] + 1;
        padded.checked_sub(dk).map(|v| v / self.stride[i] + 1)
    }
}

impl OpDef for Conv {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[0, 1])
    }
    fn autocast_list(&self) -> super::AutocastList {
        super::AutocastList::Low
    }
    fn name(&self) -> &'static str {
        if self.stride.len() == 1 {
            "conv1d"
        } else {
            "conv2d"
        }
    }

    /// A multiply and an add per output element and weight element of its output channel.
    fn flops(&self, inputs: &[Spec], output: &Spec) -> f64 {
        let w = &inputs[1].shape;
        let per_output = w.iter().product::<usize>() / w[0].max(1);
        2.0 * per_output as f64 * output.shape.iter().product::<usize>() as f64
    }

    fn attrs(&self) -> String {
        let mut s = format!(
            "stride={:?} padding={:?} dilation={:?} groups={}",
            self.stride.as_slice(),
            self.padding.as_slice(),
            self.dilation.as_slice(),
            self.groups
        );
        if self.lhs_dilation.iter().any(|&d| d != 1) {
            s += &format!(" lhs_dilation={:?}", self.lhs_dilation.as_slice());
        }
        if self.batch_groups != 1 {
            s += &format!(" batch_groups={}", self.batch_groups);
        }
        s
    }

    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        same_dtype(name, &inputs[0], &inputs[1])?;
        Accepts::Float.check(name, inputs[0].dtype)?;
        let (x, w) = (&inputs[0].shape, &inputs[1].shape);
        if !(3..=4).contains(&x.len()) || w.len() != x.len() {
            return Err(Error::shape(
                name,
                format!(
                    "needs an input [N, C, *spatial] and a weight [O, C/groups, *kernel] of the same rank 3 or 4, got input {x:?} and weight {w:?}"
                ),
            ));
        }
        let ns = x.len() - 2;
        let attrs = [&self.stride, &self.lhs_dilation, &self.dilation];
        if attrs.iter().any(|a| a.len() != ns || a.contains(&0)) || self.padding.len() != ns {
            return Err(Error::invalid(
                name,
                format!(
                    "stride, padding and dilation need {ns} entries each, all strides and dilations >= 1"
                ),
            ));
        }
        let (g, bg) = (self.groups, self.batch_groups);
        if g == 0 || bg == 0 || (g > 1 && bg > 1) {
            return Err(Error::invalid(name, format!("bad groups {g} (batch groups {bg})")));
        }
        let (n, c, o, i) = (x[0], x[1], w[0], w[1]);
        if c % g != 0 || o % g != 0 {
            return Err(Error::shape(
                name,
                format!(
                    "groups={g} must divide the input channels ({c}) and the output channels ({o}); input {x:?}, weight {w:?}"
                ),
            ));
        }
        if c != g * i {
            return Err(Error::shape(
                name,
                format!(
                    "channel mismatch: the input has {c} channels but the weight {w:?} expects groups * {i} = {}; input {x:?}",
                    g * i
                ),
            ));
        }
        if n % bg != 0 || o % bg != 0 {
            return Err(Error::shape(name, format!("batch groups {bg} must divide {n} and {o}")));
        }
        if w[2..].contains(&0) {
            return Err(Error::shape(name, format!("the kernel {w:?} is empty")));
        }
        let mut shape: Shape = [n / bg, o].into_iter().collect();
        for d in 0..ns {
            let len = self.out_len(d, x[2 + d], w[2 + d]).ok_or_else(|| {
                Error::shape(
                    name,
                    format!(
                        "the kernel is larger than the padded input: input {x:?} padded by {:?} with dilation {:?}, weight {w:?}",
                        self.padding.as_slice(),
                        self.dilation.as_slice()
                    ),
                )
            })?;
            shape.push(len);
        }
        Ok(Spec { shape, dtype: inputs[0].dtype })
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let acc = accumulator(out.dtype);
        let widen = |e: &mut Emitter, v: &Value| {
            if acc == v.spec.dtype {
                v.clone()
            } else {
                e.op("stablehlo.convert", &[v], "", &Spec { shape: v.spec.shape.clone(), dtype: acc })
            }
        };
        let (a, b) = (widen(e, &x[0]), widen(e, &x[1]));
        let ns = out.rank() - 2;
        let sp = (0..ns).map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let pads =
            self.padding.iter().map(|p| format!("[{}, {}]", p[0], p[1])).collect::<Vec<_>>().join(", ");
        let attrs = format!(
            concat!(
                "batch_group_count = {bg} : i64, ",
                "dimension_numbers = #stablehlo.conv<[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]>, ",
                "feature_group_count = {g} : i64, lhs_dilation = {ld}, ",
                "padding = dense<[{pads}]> : tensor<{ns}x2xi64>, rhs_dilation = {rd}, window_strides = {st}"
            ),
            bg = self.batch_groups,
            sp = sp,
            g = self.groups,
            ld = i64_array(&self.lhs_dilation),
            pads = pads,
            ns = ns,
            rd = i64_array(&self.dilation),
            st = i64_array(&self.stride),
        );
        let wide = Spec { shape: out.shape.clone(), dtype: acc };
        let r = e.op("stablehlo.convolution", &[&a, &b], &attrs, &wide);
        if acc == out.dtype {
            r
        } else {
            e.op("stablehlo.convert", &[&r], "", out)
        }
    }

    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        if self.batch_groups != 1 {
            return Err(Error::invalid(
                self.name(),
                "no gradient of a batch-grouped convolution (second-order conv gradients)",
            ));
        }
        let (input, weight) = (x[0], x[1]);
        let (xs, ws, gs) = (input.shape_of().to_vec(), weight.shape_of().to_vec(), g.shape_of().to_vec());
        let ns = xs.len() - 2;
        let groups = self.groups;
        let (c, o, i) = (xs[1], ws[0], ws[1]);
        let (s, a, dl) = (&self.stride, &self.lhs_dilation, &self.dilation);

        // Input gradient: g dilated by the stride, convolved with the flipped weight whose
        // in/out channels are swapped within each group ([O, I, k] -> [G*I, O/G, k]), window
        // stride = the input dilation, padding ((k-1)d - lo, (n-1)a - (L-1)s + lo).
        let mut wt_shape = vec![groups as isize, (o / groups) as isize, i as isize];
        wt_shape.extend(ws[2..].iter().map(|&k| k as isize));
        let mut flat = vec![c as isize, (o / groups) as isize];
        flat.extend(ws[2..].iter().map(|&k| k as isize));
        let spatial: Vec<isize> = (2..2 + ns as isize).collect();
        let wt = weight.reshape(&wt_shape)?.transpose(1, 2)?.reshape(&flat)?.flip(&spatial)?;
        let mut gg = g.clone();
        let mut pads = Pads::new();
        for d in 0..ns {
            let reach = ((ws[2 + d] - 1) * dl[d]) as isize;
            let lo = reach - self.padding[d][0] as isize;
            let hi = ((xs[2 + d] - 1) * a[d]) as isize - ((gs[2 + d] - 1) * s[d]) as isize
                + self.padding[d][0] as isize;
            let (t, p) = trim(&gg, 2 + d, s[d], lo, hi)?;
            gg = t;
            pads.push(p);
        }
        let gx_op = Conv {
            stride: a.clone(),
            padding: pads,
            lhs_dilation: s.clone(),
            dilation: dl.clone(),
            groups,
            batch_groups: 1,
        };
        let gx = T::apply(Op::Conv(gx_op), &[&gg, &wt], None)?;

        // Weight gradient: channels as the batch, the batch as the contracted features; the
        // input (dilated by a) is the lhs, g (dilated by the stride) the kernel, window stride
        // d, padding (lo, hi - r) with r the tail no window reached.
        let mut xt = input.transpose(0, 1)?;
        let mut pads = Pads::new();
        for d in 0..ns {
            let hi = ((ws[2 + d] - 1) * dl[d]) as isize + ((gs[2 + d] - 1) * s[d]) as isize
                - ((xs[2 + d] - 1) * a[d]) as isize
                - self.padding[d][0] as isize;
            let (t, p) = trim(&xt, 2 + d, a[d], self.padding[d][0] as isize, hi)?;
            xt = t;
            pads.push(p);
        }
        let gt = g.transpose(0, 1)?;
        let gw_op = Conv {
            stride: dl.clone(),
            padding: pads,
            lhs_dilation: a.clone(),
            dilation: s.clone(),
            groups: 1,
            batch_groups: groups,
        };
        let gw = T::apply(Op::Conv(gw_op), &[&xt, &gt], None)?.transpose(0, 1)?;
        Ok(smallvec::smallvec![Some(gx), Some(gw)])
    }
}

/// Padding `(lo, hi)` of `v` dilated by `dil` along `dim`, where a negative side (padding
/// that crops) is done by dropping elements of `v` and padding the rest: the operand to use
/// and the non-negative padding.
fn trim<T: Operand>(v: &T, dim: usize, dil: usize, lo: isize, hi: isize) -> Result<(T, [usize; 2])> {
    let mut v = v.clone();
    let (mut lo, mut hi) = (lo, hi);
    let dil = dil as isize;
    let n = v.shape_of()[dim] as isize;
    let (mut start, mut len) = (0, n);
    if lo < 0 {
        let q = (-lo + dil - 1) / dil;
        start = q;
        len -= q;
        lo += q * dil;
    }
    if hi < 0 {
        let q = (-hi + dil - 1) / dil;
        len -= q;
        hi += q * dil;
    }
    if start != 0 || len != n {
        v = v.narrow(dim as isize, start as usize, len.max(0) as usize)?;
    }
    Ok((v, [lo as usize, hi as usize]))
}

/// Reverses the order of elements along `dims` (`stablehlo.reverse`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Flip {
    /// The dims to reverse.
    pub dims: Vec<usize>,
}

impl OpDef for Flip {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn name(&self) -> &'static str {
        "flip"
    }
    fn attrs(&self) -> String {
        format!("dims={:?}", self.dims.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        if self.dims.iter().any(|&d| d >= inputs[0].rank()) {
            return Err(Error::invalid(self.name(), format!("bad dims {:?}", self.dims.as_slice())));
        }
        Ok(inputs[0].clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        e.op("stablehlo.reverse", &[&x[0]], &format!("dimensions = {}", i64_array(&self.dims)), out)
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(T::apply(Op::Flip(self.clone()), &[g], None)?)
    }
}

/// How a convolution pads its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Padding {
    /// torch's `padding="same"`: the output has the input's size (stride 1 only); an odd
    /// total padding puts the extra element after, as torch does.
    Same,
    /// Zeros on both sides of each spatial dim (torch's `padding=p` / `(ph, pw)`).
    Zeros(Vec<usize>),
}

impl From<usize> for Padding {
    fn from(p: usize) -> Padding {
        Padding::Zeros(vec![p])
    }
}

impl From<[usize; 2]> for Padding {
    fn from(p: [usize; 2]) -> Padding {
        Padding::Zeros(p.to_vec())
    }
}

impl From<&str> for Padding {
    /// torch's strings: `"same"` gives [`Padding::Same`], anything else (`"valid"`) no padding.
    fn from(s: &str) -> Padding {
        if s == "same" {
            Padding::Same
        } else {
            Padding::Zeros(vec![0])
        }
    }
}

/// Convolutions, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait ConvOps: Operand {
    /// A convolution with `ns` spatial dims; scalars of `stride`, `dilation` and a one-entry
    /// zero padding apply to every spatial dim.
    fn conv(
        &self,
        name: &'static str,
        weight: &Self,
        stride: &[usize],
        padding: &Padding,
        dilation: &[usize],
        groups: usize,
    ) -> Result<Self> {
        let ns = stride.len();
        if self.rank_of() != ns + 2 || weight.rank_of() != ns + 2 {
            return Err(Error::shape(
                name,
                format!(
                    "needs an input [N, C, *spatial] of rank {} and a weight [O, C/groups, *kernel] of rank {}, got input {:?} and weight {:?}",
                    ns + 2,
                    ns + 2,
                    self.shape_of(),
                    weight.shape_of()
                ),
            ));
        }
        let k = &weight.shape_of()[2..];
        let pads: Pads = match padding {
            Padding::Same => {
                if stride.iter().any(|&s| s != 1) {
                    return Err(Error::invalid(name, "padding=\"same\" needs stride 1 (as torch)"));
                }
                (0..ns)
                    .map(|d| {
                        let total = k[d].saturating_sub(1) * dilation[d];
                        [total / 2, total - total / 2]
                    })
                    .collect()
            }
            Padding::Zeros(p) if p.len() == ns => p.iter().map(|&p| [p, p]).collect(),
            Padding::Zeros(p) if p.len() == 1 => (0..ns).map(|_| [p[0], p[0]]).collect(),
            Padding::Zeros(p) => {
                return Err(Error::invalid(name, format!("padding {p:?} needs 1 or {ns} entries")));
            }
        };
        if groups == 0 {
            return Err(Error::invalid(name, "groups must be >= 1"));
        }
        let op = Conv::new(stride, &pads, dilation, groups);
        Self::apply(Op::Conv(op), &[self, weight], None)
    }

    fn conv1d(
        &self,
        weight: &Self,
        stride: usize,
        padding: Padding,
        dilation: usize,
        groups: usize,
    ) -> Result<Self> {
        self.conv("conv1d", weight, &[stride], &padding, &[dilation], groups)
    }

    fn conv2d(
        &self,
        weight: &Self,
        stride: [usize; 2],
        padding: Padding,
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Self> {
        self.conv("conv2d", weight, &stride, &padding, &dilation, groups)
    }

    /// A transposed convolution (the input gradient of `conv` with these attributes): input
    /// `[N, C_in, *n]`, weight `[C_in, C_out / groups, *k]` as torch, output length
    /// `(n-1)s - 2p + d(k-1) + output_padding + 1`.
    #[allow(clippy::too_many_arguments)]
    fn conv_transpose(
        &self,
        name: &'static str,
        weight: &Self,
        stride: &[usize],
        padding: &[usize],
        output_padding: &[usize],
        dilation: &[usize],
        groups: usize,
    ) -> Result<Self> {
        let ns = stride.len();
        let (xs, ws) = (self.shape_of(), weight.shape_of());
        if xs.len() != ns + 2 || ws.len() != ns + 2 {
            return Err(Error::shape(
                name,
                format!(
                    "needs an input [N, C_in, *spatial] and a weight [C_in, C_out/groups, *kernel] of rank {}, got input {xs:?} and weight {ws:?}",
                    ns + 2
                ),
            ));
        }
        if groups == 0 || xs[1] != ws[0] || ws[0] % groups != 0 {
            return Err(Error::shape(
                name,
                format!(
                    "channel mismatch: the input {xs:?} has {} channels, the weight {ws:?} needs {} (divisible by groups={groups})",
                    xs[1], ws[0]
                ),
            ));
        }
        if stride.contains(&0) || dilation.contains(&0) {
            return Err(Error::invalid(name, "strides and dilations must be >= 1"));
        }
        let mut pads = Pads::new();
        for d in 0..ns {
            let reach = (ws[2 + d].max(1) - 1) * dilation[d];
            if padding[d] > reach {
                return Err(Error::invalid(
                    name,
                    format!("padding {padding:?} beyond dilation * (kernel - 1) = {reach} is not supported"),
                ));
            }
            if output_padding[d] >= stride[d].max(dilation[d]) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "output_padding {output_padding:?} must be smaller than the stride or the dilation"
                    ),
                ));
            }
            pads.push([reach - padding[d], reach - padding[d] + output_padding[d]]);
        }
        // [C_in, C_out/G, k] -> [G, C_in/G, C_out/G, k] -> [C_out, C_in/G, k], flipped.
        let (cin, coutg) = (ws[0] as isize, ws[1] as isize);
        let g = groups as isize;
        let mut split = vec![g, cin / g, coutg];
        split.extend(ws[2..].iter().map(|&k| k as isize));
        let mut flat = vec![coutg * g, cin / g];
        flat.extend(ws[2..].iter().map(|&k| k as isize));
        let spatial: Vec<isize> = (2..2 + ns as isize).collect();
        let w = weight.reshape(&split)?.transpose(1, 2)?.reshape(&flat)?.flip(&spatial)?;
        let op = Conv {
            stride: vec![1; ns],
            padding: pads,
            lhs_dilation: stride.to_vec(),
            dilation: dilation.to_vec(),
            groups,
            batch_groups: 1,
        };
        Self::apply(Op::Conv(op), &[self, &w], None)
    }

    /// torch's `conv_transpose2d` (no bias).
    fn conv_transpose2d(
        &self,
        weight: &Self,
        stride: [usize; 2],
        padding: [usize; 2],
        output_padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Self> {
        self.conv_transpose("conv_transpose2d", weight, &stride, &padding, &output_padding, &dilation, groups)
    }

    /// Reverses the order of elements along `dims`.
    fn flip(&self, dims: &[isize]) -> Result<Self> {
        let dims = self.dims("flip", dims)?.to_vec();
        if dims.is_empty() {
            return Ok(self.clone());
        }
        Self::apply(Op::Flip(Flip { dims }), &[self], None)
    }
}

impl<T: Operand> ConvOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn a_conv2d_emits_nchw_dimension_numbers() {
        let op = Conv::new(&[2, 1], &[[1, 1], [0, 0]], &[1, 2], 1);
        let m = module(op, &[f32s(&[2, 3, 8, 8]), f32s(&[4, 3, 3, 3])]);
        assert!(m.contains("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>"), "{m}");
        assert!(m.contains("padding = dense<[[1, 1], [0, 0]]> : tensor<2x2xi64>"), "{m}");
        assert!(
            m.contains("window_strides = array<i64: 2, 1>") && m.contains("rhs_dilation = array<i64: 1, 2>")
        );
        // (8 + 2 - 3) / 2 + 1 = 4; (8 - 5) / 1 + 1 = 4.
        assert!(m.contains("-> tensor<2x4x4x4xf32>"), "{m}");
    }

    #[test]
    fn groups_are_the_feature_group_count() {
        let m = module(Conv::new(&[1], &[[0, 0]], &[1], 2), &[f32s(&[1, 4, 5]), f32s(&[6, 2, 3])]);
        assert!(m.contains("feature_group_count = 2 : i64") && m.contains("-> tensor<1x6x3xf32>"), "{m}");
    }

    #[test]
    fn half_precision_accumulates_in_f32() {
        let h = |s: &[usize]| Spec::new(s, DType::BF16);
        let m = module(Conv::new(&[1], &[[0, 0]], &[1], 1), &[h(&[1, 1, 4]), h(&[1, 1, 2])]);
        assert!(
            m.contains("-> tensor<1x1x3xf32>") && m.contains("(tensor<1x1x3xf32>) -> tensor<1x1x3xbf16>")
        );
    }

    #[test]
    fn bad_shapes_are_errors_naming_the_shapes() {
        let conv = Conv::new(&[1, 1], &[[0, 0], [0, 0]], &[1, 1], 1);
        let e = conv.infer(&[f32s(&[1, 3, 5, 5]), f32s(&[2, 4, 3, 3])]).unwrap_err().to_string();
        assert!(e.contains("channel mismatch") && e.contains("[2, 4, 3, 3]"), "{e}");
        let e = conv.infer(&[f32s(&[1, 3, 2, 5]), f32s(&[2, 3, 3, 3])]).unwrap_err().to_string();
        assert!(e.contains("larger than the padded input"), "{e}");
    }
}
