//! Ops that move elements without computing: reshape, permute, broadcast, strided slice, pad
//! (the transpose of a strided slice) and concatenation.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): `cat` promotes mixed float inputs to the widest (torch's
//! promote list); the others keep their input's dtype.

use crate::error::{Error, Result};
use crate::shape::{broadcasts_to, resolve_dim, Shape, Spec};

use super::emit::{i64_array, Emitter, Value};
use super::GradReads;
use super::{
    broadcast_sources, check_arity, one, same_dtype, signed, DimSources, Dims, Grads, Op, OpDef, Operand,
};

/// The same elements in another shape (row-major).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reshape {
    /// The result's shape.
    pub shape: Shape,
}

impl OpDef for Reshape {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    /// An output dim runs along an input dim that starts at the same element offset when one
    /// is a major factor of the other (`[8] -> [2, 4]`: dim 0 along dim 0; `[2, 4] -> [8]`
    /// likewise): a split of the input dim into parts that divide the output dim carries over.
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        let (x, y) = (&inputs[0].shape, &output.shape);
        let offset = |s: &[usize], k: usize| s[..k].iter().product::<usize>();
        (0..y.len())
            .map(|j| {
                (0..x.len())
                    .filter(|&i| {
                        offset(x, i) == offset(y, j)
                            && x[i] > 1
                            && y[j] > 1
                            && (x[i] % y[j] == 0 || y[j] % x[i] == 0)
                    })
                    .map(|i| (0, i))
                    .collect()
            })
            .collect()
    }
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn attrs(&self) -> String {
        format!("shape={:?}", self.shape.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 1)?;
        let to = Spec { shape: self.shape.clone(), dtype: inputs[0].dtype };
        let Some((n, _)) = to.checked_size() else {
            return Err(Error::shape(name, super::too_large(&to)));
        };
        if n != inputs[0].numel() {
            let (from, to) = (inputs[0].shape.as_slice(), self.shape.as_slice());
            let msg =
                format!("cannot reshape {from:?} ({} elements) to {to:?} ({n} elements)", inputs[0].numel());
            return Err(Error::shape(name, msg));
        }
        Ok(Spec { shape: self.shape.clone(), dtype: inputs[0].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        e.op("stablehlo.reshape", &[&x[0]], "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(g.reshape(&signed(x[0].shape_of()))?)
    }
}

/// Dims reordered: result dim `i` is input dim `perm[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permute {
    /// Result dim `i` is input dim `perm[i]`.
    pub perm: Dims,
}

impl OpDef for Permute {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn dim_sources(&self, _inputs: &[Spec], _output: &Spec) -> DimSources {
        self.perm.iter().map(|&d| smallvec::smallvec![(0, d)]).collect()
    }
    fn name(&self) -> &'static str {
        "permute"
    }
    fn attrs(&self) -> String {
        format!("perm={:?}", self.perm.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, perm) = (self.name(), &self.perm);
        check_arity(name, inputs, 1)?;
        let x = &inputs[0];
        let mut seen = vec![false; x.rank()];
        if perm.len() != x.rank()
            || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
        {
            let msg = format!(
                "{:?} is not a permutation of the {} dims of {:?}",
                perm.as_slice(),
                x.rank(),
                x.shape.as_slice()
            );
            return Err(Error::invalid(name, msg));
        }
        Ok(Spec { shape: perm.iter().map(|&p| x.shape[p]).collect(), dtype: x.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        e.op("stablehlo.transpose", &[&x[0]], &format!("permutation = {}", i64_array(&self.perm)), out)
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        let mut inverse = vec![0isize; self.perm.len()];
        for (i, &d) in self.perm.iter().enumerate() {
            inverse[d] = i as isize;
        }
        one(g.permute(&inverse)?)
    }
}

/// NumPy broadcast to `shape`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BroadcastTo {
    /// The result's shape.
    pub shape: Shape,
}

impl OpDef for BroadcastTo {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        "broadcast_to"
    }
    fn attrs(&self) -> String {
        format!("shape={:?}", self.shape.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        if !broadcasts_to(&inputs[0].shape, &self.shape) {
            let msg =
                format!("cannot broadcast {:?} to {:?}", inputs[0].shape.as_slice(), self.shape.as_slice());
            return Err(Error::shape(self.name(), msg));
        }
        Ok(Spec { shape: self.shape.clone(), dtype: inputs[0].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], _out: &Spec) -> Value {
        e.broadcast(&x[0], &self.shape)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(g.sum_to(x[0].shape_of())?)
    }
}

/// Strided slice of every dim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Slice {
    /// First index per dim.
    pub starts: Dims,
    /// End index (exclusive) per dim.
    pub limits: Dims,
    /// Step per dim.
    pub strides: Dims,
}

impl OpDef for Slice {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn name(&self) -> &'static str {
        "slice"
    }
    fn attrs(&self) -> String {
        let (s, l, st) = (self.starts.as_slice(), self.limits.as_slice(), self.strides.as_slice());
        format!("start={s:?} limit={l:?} stride={st:?}")
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, Slice { starts, limits, strides }) = (self.name(), self);
        check_arity(name, inputs, 1)?;
        let x = &inputs[0];
        let r = x.rank();
        if starts.len() != r || limits.len() != r || strides.len() != r {
            return Err(Error::invalid(name, format!("needs {r} starts, limits and strides")));
        }
        let mut shape = Shape::new();
        for d in 0..r {
            if strides[d] == 0 || starts[d] > limits[d] || limits[d] > x.shape[d] {
                let (s, l, st, n) = (starts[d], limits[d], strides[d], x.shape[d]);
                return Err(Error::invalid(
                    name,
                    format!("range {s}..{l} step {st} is out of bounds for dim {d} of size {n}"),
                ));
            }
            shape.push((limits[d] - starts[d]).div_ceil(strides[d]));
        }
        Ok(Spec { shape, dtype: x.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        e.op("stablehlo.slice", &[&x[0]], &slice_attr(&self.starts, &self.limits, &self.strides), out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // Zeros everywhere but the sliced elements: pad the gradient back.
        let (starts, strides) = (&self.starts, &self.strides);
        let shape = x[0].shape_of();
        let low: Dims = starts.clone();
        let interior: Dims = strides.iter().map(|s| s - 1).collect();
        let high: Dims = (0..shape.len())
            .map(|d| {
                let n = g.shape_of()[d];
                let covered = if n == 0 { 0 } else { starts[d] + (n - 1) * strides[d] + 1 };
                shape[d] - covered.max(starts[d])
            })
            .collect();
        one(T::apply(Op::Pad(Pad { low, high, interior }), &[g], None)?)
    }
}

/// The attributes of `stablehlo.slice`.
pub(crate) fn slice_attr(starts: &[usize], limits: &[usize], strides: &[usize]) -> String {
    format!(
        "start_indices = {}, limit_indices = {}, strides = {}",
        i64_array(starts),
        i64_array(limits),
        i64_array(strides)
    )
}

/// Zeros around every dim: `low` before, `high` after and `interior` between elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pad {
    /// Zeros before each dim.
    pub low: Dims,
    /// Zeros after each dim.
    pub high: Dims,
    /// Zeros between elements of each dim.
    pub interior: Dims,
}

impl OpDef for Pad {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn name(&self) -> &'static str {
        "pad"
    }
    fn attrs(&self) -> String {
        let (l, h, i) = (self.low.as_slice(), self.high.as_slice(), self.interior.as_slice());
        format!("low={l:?} high={h:?} interior={i:?}")
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, Pad { low, high, interior }) = (self.name(), self);
        check_arity(name, inputs, 1)?;
        let x = &inputs[0];
        if low.len() != x.rank() || high.len() != x.rank() || interior.len() != x.rank() {
            return Err(Error::invalid(name, format!("needs {} low, high and interior sizes", x.rank())));
        }
        let shape = (0..x.rank())
            .map(|d| low[d] + high[d] + x.shape[d] + x.shape[d].saturating_sub(1) * interior[d])
            .collect();
        Ok(Spec { shape, dtype: x.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let zero = e.constant(&Spec::new(&[], out.dtype), 0.0);
        let attr = format!(
            "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
            i64_array(&self.low),
            i64_array(&self.high),
            i64_array(&self.interior)
        );
        e.op("stablehlo.pad", &[&x[0], &zero], &attr, out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // The elements that were not padding: a strided slice.
        let (low, interior) = (&self.low, &self.interior);
        let shape = x[0].shape_of();
        let starts: Dims = low.clone();
        let strides: Dims = interior.iter().map(|i| i + 1).collect();
        let limits: Dims = (0..shape.len())
            .map(|d| if shape[d] == 0 { low[d] } else { low[d] + (shape[d] - 1) * strides[d] + 1 })
            .collect();
        one(T::apply(Op::Slice(Slice { starts, limits, strides }), &[g], None)?)
    }
}

/// Tensors joined along `dim`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Concat {
    /// The dim joined along.
    pub dim: usize,
}

impl OpDef for Concat {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn autocast_list(&self) -> super::AutocastList {
        super::AutocastList::Promote
    }
    fn name(&self) -> &'static str {
        "concat"
    }
    fn attrs(&self) -> String {
        format!("dim={}", self.dim)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, dim) = (self.name(), self.dim);
        let Some(first) = inputs.first() else {
            return Err(Error::invalid(name, "needs at least one tensor"));
        };
        if dim >= first.rank() {
            return Err(Error::invalid(name, format!("dim {dim} out of range for rank {}", first.rank())));
        }
        let mut shape = first.shape.clone();
        shape[dim] = 0;
        for x in inputs {
            same_dtype(name, first, x)?;
            let differs =
                x.rank() != first.rank() || (0..x.rank()).any(|d| d != dim && x.shape[d] != first.shape[d]);
            if differs {
                let (a, b) = (first.shape.as_slice(), x.shape.as_slice());
                return Err(Error::shape(name, format!("shapes {a:?} and {b:?} differ outside dim {dim}")));
            }
            shape[dim] += x.shape[dim];
        }
        Ok(Spec { shape, dtype: first.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let refs: Vec<&Value> = x.iter().collect();
        e.op("stablehlo.concatenate", &refs, &format!("dimension = {} : i64", self.dim), out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        let mut start = 0;
        let mut grads = Grads::new();
        for t in x {
            let len = t.shape_of()[self.dim];
            grads.push(Some(g.narrow(self.dim as isize, start, len)?));
            start += len;
        }
        Ok(grads)
    }
}

/// Resolves a shape with at most one -1 against `numel`.
fn infer_shape(shape: &[isize], numel: usize) -> Result<Shape> {
    let unknown: Vec<usize> = shape.iter().enumerate().filter(|(_, &d)| d == -1).map(|(i, _)| i).collect();
    if unknown.len() > 1 || shape.iter().any(|&d| d < -1) {
        return Err(Error::shape(
            "reshape",
            format!("bad shape {shape:?} (one dim may be -1, none other negative)"),
        ));
    }
    let known = shape.iter().filter(|&&d| d >= 0).try_fold(1usize, |n, &d| n.checked_mul(d as usize));
    let Some(known) = known else {
        return Err(Error::shape(
            "reshape",
            format!("shape {shape:?} has more elements than an XLA array can hold"),
        ));
    };
    let mut out: Shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(&i) = unknown.first() {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape("reshape", format!("cannot reshape {numel} elements to {shape:?}")));
        }
        out[i] = numel / known;
    }
    Ok(out)
}

/// The movement ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait MovementOps: Operand {
    /// One dim may be -1 (inferred). Keeps host bounds (the values do not change).
    fn reshape(&self, shape: &[isize]) -> Result<Self> {
        let shape = infer_shape(shape, self.spec().numel())?;
        if shape.as_slice() == self.shape_of() {
            return Ok(self.clone());
        }
        Ok(Self::apply(Op::Reshape(Reshape { shape }), &[self], None)?.with_host_bounds(self.host_bounds()))
    }

    fn flatten(&self) -> Result<Self> {
        self.reshape(&[-1])
    }

    fn unsqueeze(&self, dim: isize) -> Result<Self> {
        let rank = self.rank_of();
        let d = resolve_dim(dim, rank + 1)
            .ok_or_else(|| Error::invalid("unsqueeze", format!("dim {dim} out of range for rank {rank}")))?;
        let mut s = signed(self.shape_of());
        s.insert(d, 1);
        self.reshape(&s)
    }

    fn squeeze(&self, dim: isize) -> Result<Self> {
        let d = self.dim("squeeze", dim)?;
        let shape = self.shape_of();
        if shape[d] != 1 {
            return Err(Error::shape(
                "squeeze",
                format!("dim {d} of {shape:?} has size {}, not 1", shape[d]),
            ));
        }
        let s: Vec<isize> =
            shape.iter().enumerate().filter(|(i, _)| *i != d).map(|(_, &x)| x as isize).collect();
        self.reshape(&s)
    }

    fn permute(&self, perm: &[isize]) -> Result<Self> {
        let perm: Dims = perm.iter().map(|&d| self.dim("permute", d)).collect::<Result<_>>()?;
        Ok(Self::apply(Op::Permute(Permute { perm }), &[self], None)?.with_host_bounds(self.host_bounds()))
    }

    fn transpose(&self, d0: isize, d1: isize) -> Result<Self> {
        let (a, b) = (self.dim("transpose", d0)?, self.dim("transpose", d1)?);
        let mut p: Vec<isize> = (0..self.rank_of() as isize).collect();
        p.swap(a, b);
        self.permute(&p)
    }

    /// Transpose of the last two dims (the operand itself below rank 2).
    fn t(&self) -> Result<Self> {
        if self.rank_of() < 2 {
            return Ok(self.clone());
        }
        self.transpose(-2, -1)
    }

    fn broadcast_to(&self, shape: &[usize]) -> Result<Self> {
        if shape == self.shape_of() {
            return Ok(self.clone());
        }
        // Broadcasting repeats values: host index bounds still hold.
        let bounds = self.host_bounds();
        Ok(Self::apply(Op::BroadcastTo(BroadcastTo { shape: shape.into() }), &[self], None)?
            .with_host_bounds(bounds))
    }

    fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Self> {
        self.slice(dim, start, start + len, 1)
    }

    fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Result<Self> {
        let d = self.dim("slice", dim)?;
        let rank = self.rank_of();
        let starts: Dims = (0..rank).map(|i| if i == d { start } else { 0 }).collect();
        let limits: Dims =
            self.shape_of().iter().enumerate().map(|(i, &s)| if i == d { end } else { s }).collect();
        let strides: Dims = (0..rank).map(|i| if i == d { step } else { 1 }).collect();
        Self::apply(Op::Slice(Slice { starts, limits, strides }), &[self], None)
    }

    fn cat(tensors: &[&Self], dim: isize) -> Result<Self> {
        let first = tensors.first().ok_or_else(|| Error::invalid("concat", "needs at least one tensor"))?;
        let dim = first.dim("concat", dim)?;
        Self::apply(Op::Concat(Concat { dim }), tensors, None)
    }
}

impl<T: Operand> MovementOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn reshape_and_permute_lower_directly() {
        let m = module(Reshape { shape: [6].as_slice().into() }, &[f32s(&[2, 3])]);
        assert!(m.contains("\"stablehlo.reshape\"(%arg0) : (tensor<2x3xf32>) -> tensor<6xf32>"), "{m}");
        let m = module(Permute { perm: [1, 0].as_slice().into() }, &[f32s(&[2, 3])]);
        assert!(m.contains("permutation = array<i64: 1, 0>") && m.contains("-> tensor<3x2xf32>"), "{m}");
    }

    #[test]
    fn broadcast_names_the_dims_it_keeps() {
        let m = module(BroadcastTo { shape: [4, 3].as_slice().into() }, &[f32s(&[3])]);
        assert!(m.contains("broadcast_dimensions = array<i64: 1>"), "{m}");
    }

    #[test]
    fn a_strided_slice_rounds_its_length_up() {
        let op = Slice {
            starts: [1].as_slice().into(),
            limits: [6].as_slice().into(),
            strides: [2].as_slice().into(),
        };
        let m = module(op, &[f32s(&[6])]);
        assert!(
            m.contains(
                "start_indices = array<i64: 1>, limit_indices = array<i64: 6>, strides = array<i64: 2>"
            ),
            "{m}"
        );
        assert!(m.contains("-> tensor<3xf32>"), "{m}");
    }

    #[test]
    fn pad_fills_with_zero() {
        let op =
            Pad { low: [1].as_slice().into(), high: [2].as_slice().into(), interior: [1].as_slice().into() };
        let m = module(op, &[f32s(&[3])]);
        assert!(m.contains("interior_padding = array<i64: 1>") && m.contains("-> tensor<8xf32>"), "{m}");
    }

    #[test]
    fn concat_adds_up_the_dim() {
        let m = module(Concat { dim: 1 }, &[f32s(&[2, 1]), f32s(&[2, 3])]);
        assert!(m.contains("dimension = 1 : i64") && m.contains("-> tensor<2x4xf32>"), "{m}");
        let e = Concat { dim: 0 }.infer(&[f32s(&[2, 1]), f32s(&[2, 3])]).unwrap_err().to_string();
        assert!(e.contains("differ outside dim 0"), "{e}");
    }

    #[test]
    fn one_dim_of_a_shape_may_be_inferred() {
        assert_eq!(infer_shape(&[-1, 2], 6).unwrap().as_slice(), &[3, 2]);
        let e = infer_shape(&[-1, -1], 6).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reshape: shape error: bad shape [-1, -1] (one dim may be -1, none other negative)"
        );
    }
}
