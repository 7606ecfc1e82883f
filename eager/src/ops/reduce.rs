//! Reductions over dims: sum, mean, max, min (NaN propagates, as in torch) and the index of
//! the max or min (the first on ties; NaN counts as the extreme). f16 and bf16 sums and means
//! accumulate in f32 and round once.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): sum and mean are on the f32 list (their result is f32, as
//! torch's autocast gives); max, min and the arg reductions keep their input's dtype.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{reduced_shape, Spec};

use super::elementwise::ElementwiseOps;
use super::emit::{accumulator, i64_array, Emitter, Value};
use super::movement::MovementOps;
use super::GradReads;
use super::{check_arity, none, one, Accepts, DimSources, Dims, Grads, Op, OpDef, Operand};

/// What a reduction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// The sum.
    Sum,
    /// The mean.
    Mean,
    /// The maximum.
    Max,
    /// The minimum.
    Min,
    /// The position (i64) of the maximum.
    ArgMax,
    /// The position (i64) of the minimum.
    ArgMin,
}

/// A reduction over `dims` (sorted, unique, non-empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reduce {
    /// What is computed.
    pub kind: ReduceKind,
    /// The dims reduced over.
    pub dims: Dims,
    /// Whether reduced dims stay, with size 1.
    pub keepdim: bool,
}

impl OpDef for Reduce {
    fn grad_reads(&self) -> GradReads {
        match self.kind {
            ReduceKind::Max | ReduceKind::Min => GradReads::inputs(&[0]).and_output(),
            _ => GradReads::NONE,
        }
    }
    fn autocast_list(&self) -> super::AutocastList {
        match self.kind {
            ReduceKind::Sum | ReduceKind::Mean => super::AutocastList::F32,
            _ => super::AutocastList::Keep,
        }
    }
    /// Kept dims run along the input's; reduced ones (kept with size 1) along nothing.
    fn dim_sources(&self, inputs: &[Spec], _output: &Spec) -> DimSources {
        let kept = (0..inputs[0].rank()).filter(|d| self.keepdim || !self.dims.contains(d));
        kept.map(|d| if self.dims.contains(&d) { Default::default() } else { smallvec::smallvec![(0, d)] })
            .collect()
    }
    fn name(&self) -> &'static str {
        match self.kind {
            ReduceKind::Sum => "sum",
            ReduceKind::Mean => "mean",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::ArgMax => "argmax",
            ReduceKind::ArgMin => "argmin",
        }
    }

    fn attrs(&self) -> String {
        format!("dims={:?}{}", self.dims.as_slice(), if self.keepdim { " keepdim" } else { "" })
    }

    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, dims) = (self.name(), &self.dims);
        check_arity(name, inputs, 1)?;
        let x = &inputs[0];
        if dims.is_empty() || dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= x.rank()) {
            return Err(Error::invalid(
                name,
                format!("bad dims {:?} for a rank-{} tensor", dims.as_slice(), x.rank()),
            ));
        }
        let dtype = match self.kind {
            ReduceKind::Mean => {
                Accepts::Float.check(name, x.dtype)?;
                x.dtype
            }
            ReduceKind::ArgMax | ReduceKind::ArgMin => {
                Accepts::Numeric.check(name, x.dtype)?;
                if dims.len() != 1 {
                    return Err(Error::invalid(name, "takes exactly one dim"));
                }
                if x.shape[dims[0]] == 0 {
                    return Err(Error::shape(name, "cannot take the arg of an empty dim"));
                }
                DType::I64
            }
            ReduceKind::Max | ReduceKind::Min => {
                Accepts::Numeric.check(name, x.dtype)?;
                // As torch: an empty dim has no max (XLA would give the identity, -inf).
                if let Some(&d) = dims.iter().find(|&&d| x.shape[d] == 0) {
                    let msg = format!("cannot reduce over dim {d} of size 0: it has no {name}");
                    return Err(Error::shape(name, msg));
                }
                x.dtype
            }
            ReduceKind::Sum => {
                Accepts::Numeric.check(name, x.dtype)?;
                x.dtype
            }
        };
        Ok(Spec { shape: reduced_shape(&x.shape, dims, self.keepdim), dtype })
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let dims = &self.dims;
        let flat = Spec { shape: reduced_shape(&x[0].spec.shape, dims, false), dtype: out.dtype };
        let r = match self.kind {
            ReduceKind::Sum if accumulator(out.dtype) != out.dtype => {
                // f16/bf16: accumulate in f32 and round once (as torch and JAX).
                let wide = Spec { shape: x[0].spec.shape.clone(), dtype: accumulator(out.dtype) };
                let v = e.op("stablehlo.convert", &[&x[0]], "", &wide);
                let s = e.reduce(&v, dims, "stablehlo.add", 0.0);
                e.op("stablehlo.convert", &[&s], "", &flat)
            }
            ReduceKind::Sum => e.reduce(&x[0], dims, "stablehlo.add", 0.0),
            ReduceKind::Max => e.reduce(&x[0], dims, "stablehlo.maximum", lowest(x[0].spec.dtype)),
            ReduceKind::Min => e.reduce(&x[0], dims, "stablehlo.minimum", highest(x[0].spec.dtype)),
            ReduceKind::Mean => {
                // f16/bf16: sum and divide in f32 (as torch does), so that neither the sum nor
                // the count (inf in f16 past 65504) overflows.
                let narrow = accumulator(out.dtype) != out.dtype;
                let v = if narrow {
                    e.op(
                        "stablehlo.convert",
                        &[&x[0]],
                        "",
                        &Spec { shape: x[0].spec.shape.clone(), dtype: DType::F32 },
                    )
                } else {
                    x[0].clone()
                };
                let s = e.reduce(&v, dims, "stablehlo.add", 0.0);
                let count: usize = dims.iter().map(|&d| x[0].spec.shape[d]).product();
                let c = e.constant(&s.spec, count as f64);
                let m = e.op("stablehlo.divide", &[&s, &c], "", &s.spec);
                if narrow {
                    e.op("stablehlo.convert", &[&m], "", &flat)
                } else {
                    m
                }
            }
            ReduceKind::ArgMax => arg_reduce(e, &x[0], dims[0], "GT"),
            ReduceKind::ArgMin => arg_reduce(e, &x[0], dims[0], "LT"),
        };
        if self.keepdim {
            e.op("stablehlo.reshape", &[&r], "", out)
        } else {
            r
        }
    }

    fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>> {
        let (dims, keepdim) = (&self.dims, self.keepdim);
        let shape = x[0].shape_of();
        let kept: Vec<isize> =
            shape.iter().enumerate().map(|(d, &s)| if dims.contains(&d) { 1 } else { s as isize }).collect();
        let g_kept = if keepdim { g.clone() } else { g.reshape(&kept)? };
        match self.kind {
            ReduceKind::Sum => one(g_kept.broadcast_to(shape)?),
            ReduceKind::Mean => {
                let count: usize = dims.iter().map(|&d| shape[d]).product();
                one(g_kept.broadcast_to(shape)?.div_scalar(count as f64)?)
            }
            ReduceKind::Max | ReduceKind::Min => {
                // Every element equal to the extreme shares the gradient evenly.
                let extreme = if keepdim { out.clone() } else { out.reshape(&kept)? };
                let hit = x[0].eq(&extreme)?.to_dtype(g.dtype_of())?;
                let dims_i: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
                let count = hit.sum(&dims_i, true)?;
                one(g_kept.div(&count)?.mul(&hit)?)
            }
            ReduceKind::ArgMax | ReduceKind::ArgMin => none(1),
        }
    }
}

/// The identity of `max`: -inf for floats, the smallest value for ints.
fn lowest(d: DType) -> f64 {
    match d {
        d if d.is_float() => f64::NEG_INFINITY,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => 0.0,
    }
}

/// The identity of `min`: +inf for floats, the largest value for ints.
fn highest(d: DType) -> f64 {
    match d {
        d if d.is_float() => f64::INFINITY,
        DType::I32 => i32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        DType::U8 => u8::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::U64 => u64::MAX as f64,
        _ => 1.0,
    }
}

/// Index of the max (`GT`) or min (`LT`) along `dim`, the first on ties. NaN counts as the
/// extreme either way (the first NaN wins), as in torch and NumPy.
fn arg_reduce(e: &mut Emitter, x: &Value, dim: usize, direction: &str) -> Value {
    let d = x.spec.dtype;
    let idx_spec = Spec { shape: x.spec.shape.clone(), dtype: DType::I64 };
    let iota = e.op("stablehlo.iota", &[], &format!("iota_dimension = {dim} : i64"), &idx_spec);
    let vs = Spec::new(&[], d);
    let is = Spec::new(&[], DType::I64);
    let init_v = e.constant(&vs, if direction == "GT" { lowest(d) } else { highest(d) });
    let init_i = e.constant(&is, 0.0);
    let out_v = Spec { shape: reduced_shape(&x.spec.shape, &[dim], false), dtype: d };
    let out_i = Spec { shape: out_v.shape.clone(), dtype: DType::I64 };
    let name = e.fresh();
    let (av, ai, bv, bi) = (e.fresh(), e.fresh(), e.fresh(), e.fresh());
    let _ = writeln!(
        e.body,
        "    {name}:2 = \"stablehlo.reduce\"({}, {}, {}, {}) ({{\n    ^bb0({av}: {vt}, {ai}: {it}, {bv}: {vt}, {bi}: {it}):",
        x.name,
        iota.name,
        init_v.name,
        init_i.name,
        vt = vs.mlir(),
        it = is.mlir()
    );
    let v = |n: &str, s: &Spec| Value { name: n.to_string(), spec: s.clone() };
    let (av_, ai_, bv_, bi_) = (v(&av, &vs), v(&ai, &is), v(&bv, &vs), v(&bi, &is));
    let better = e.compare(direction, &av_, &bv_);
    let equal = e.compare("EQ", &av_, &bv_);
    let earlier = e.compare("LT", &ai_, &bi_);
    let bs = Spec::new(&[], DType::Bool);
    let tie = e.op("stablehlo.and", &[&equal, &earlier], "", &bs);
    let mut take = e.op("stablehlo.or", &[&better, &tie], "", &bs);
    if d.is_float() {
        // With a NaN on either side, a wins if it is NaN and b is not, or both are and a is earlier.
        let a_nan = e.compare("NE", &av_, &av_);
        let b_nan = e.compare("NE", &bv_, &bv_);
        let any_nan = e.op("stablehlo.or", &[&a_nan, &b_nan], "", &bs);
        let b_num = e.op("stablehlo.not", &[&b_nan], "", &bs);
        let b_loses = e.op("stablehlo.or", &[&b_num, &earlier], "", &bs);
        let a_wins = e.op("stablehlo.and", &[&a_nan, &b_loses], "", &bs);
        take = e.op("stablehlo.select", &[&any_nan, &a_wins, &take], "", &bs);
    }
    let rv = e.op("stablehlo.select", &[&take, &av_, &bv_], "", &vs);
    let ri = e.op("stablehlo.select", &[&take, &ai_, &bi_], "", &is);
    let _ = write!(
        e.body,
        "      \"stablehlo.return\"({}, {}) : ({}, {}) -> ()\n    }}) {{dimensions = {}}} : ({}, {}, {}, {}) -> ({}, {})\n",
        rv.name,
        ri.name,
        vs.mlir(),
        is.mlir(),
        i64_array(&[dim]),
        x.spec.mlir(),
        idx_spec.mlir(),
        vs.mlir(),
        is.mlir(),
        out_v.mlir(),
        out_i.mlir()
    );
    Value { name: format!("{name}#1"), spec: out_i }
}

/// The reductions, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait ReduceOps: Operand {
    /// Reduces over `dims` (all dims if empty); a 0-d operand reduces to itself.
    fn reduce(&self, kind: ReduceKind, dims: &[isize], keepdim: bool) -> Result<Self> {
        let name = Reduce { kind, dims: Dims::new(), keepdim }.name();
        let dims = if dims.is_empty() { (0..self.rank_of()).collect() } else { self.dims(name, dims)? };
        if dims.is_empty() {
            // A 0-d tensor reduces to itself (as torch.sum of a scalar).
            return match kind {
                ReduceKind::Mean if !self.dtype_of().is_float() => {
                    Err(Error::dtype(name, "expected a floating-point tensor"))
                }
                _ => Ok(self.clone()),
            };
        }
        Self::apply(Op::Reduce(Reduce { kind, dims, keepdim }), &[self], None)
    }

    fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Self> {
        self.reduce(ReduceKind::Sum, dims, keepdim)
    }
    fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Self> {
        self.reduce(ReduceKind::Mean, dims, keepdim)
    }
    fn max(&self, dims: &[isize], keepdim: bool) -> Result<Self> {
        self.reduce(ReduceKind::Max, dims, keepdim)
    }
    fn min(&self, dims: &[isize], keepdim: bool) -> Result<Self> {
        self.reduce(ReduceKind::Min, dims, keepdim)
    }
    fn mean_all(&self) -> Result<Self> {
        self.mean(&[], false)
    }

    /// The index of the max or min along `dim`; over the flattened operand for `None`.
    fn arg_reduce(&self, kind: ReduceKind, dim: Option<isize>, keepdim: bool) -> Result<Self> {
        match dim {
            Some(d) => self.reduce(kind, &[d], keepdim),
            None => {
                let r = self.flatten()?.reduce(kind, &[0], false)?;
                if keepdim {
                    r.reshape(&vec![1; self.rank_of()])
                } else {
                    Ok(r)
                }
            }
        }
    }
}

impl<T: Operand> ReduceOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    fn reduce(kind: ReduceKind, dims: &[usize], keepdim: bool) -> Reduce {
        Reduce { kind, dims: dims.into(), keepdim }
    }

    #[test]
    fn a_sum_reduces_with_add_from_zero() {
        let m = module(reduce(ReduceKind::Sum, &[1], false), &[f32s(&[2, 3])]);
        assert!(m.contains("\"stablehlo.add\"") && m.contains("dimensions = array<i64: 1>"), "{m}");
        assert!(m.contains("dense<0x00000000>") && m.contains("-> tensor<2xf32>"), "{m}");
    }

    #[test]
    fn keepdim_reshapes_to_size_one() {
        let m = module(reduce(ReduceKind::Max, &[0], true), &[f32s(&[2, 3])]);
        assert!(m.contains("dense<0xFF800000>"), "max starts from -inf: {m}");
        assert!(m.contains("\"stablehlo.reshape\"") && m.contains("-> tensor<1x3xf32>"), "{m}");
    }

    #[test]
    fn half_sums_accumulate_in_f32() {
        let m = module(reduce(ReduceKind::Sum, &[0], false), &[Spec::new(&[8], DType::F16)]);
        assert!(
            m.contains("(tensor<8xf16>) -> tensor<8xf32>") && m.contains("(tensor<f32>) -> tensor<f16>"),
            "{m}"
        );
    }

    #[test]
    fn argmax_reduces_values_and_indices_together() {
        let m = module(reduce(ReduceKind::ArgMax, &[1], false), &[f32s(&[2, 3])]);
        assert!(m.contains(":2 = \"stablehlo.reduce\"") && m.contains("iota_dimension = 1"), "{m}");
        assert!(m.contains("comparison_direction NE"), "NaN handling: {m}");
        assert!(m.contains("-> tensor<2xi64>"), "{m}");
    }

    #[test]
    fn an_empty_dim_has_no_max() {
        let e = reduce(ReduceKind::Max, &[0], false).infer(&[f32s(&[0, 2])]).unwrap_err().to_string();
        assert!(e.contains("cannot reduce over dim 0 of size 0"), "{e}");
    }
}
