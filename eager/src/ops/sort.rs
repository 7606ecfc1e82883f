//! Sorting: the stable order of the elements along a dim (`argsort`), one `stablehlo.sort`
//! of the values with their positions. `sort` and `topk` take the values by that order with
//! `gather`, so their gradients are gather's. NaN sorts as the largest value, as in torch.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Spec;

use super::emit::{Emitter, Value};
use super::index::IndexOps;
use super::movement::MovementOps;
use super::{check_arity, none, Grads, OpDef, Operand};

/// The positions (i64) that sort the input along `dim`, stably: equal elements keep their
/// order. Ascending, or `descending`; NaN counts as larger than every number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Argsort {
    /// The dim sorted along.
    pub dim: usize,
    /// Whether the order is descending.
    pub descending: bool,
}

impl OpDef for Argsort {
    fn name(&self) -> &'static str {
        "argsort"
    }
    fn attrs(&self) -> String {
        format!("dim={}{}", self.dim, if self.descending { " descending" } else { "" })
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        let x = &inputs[0];
        if self.dim >= x.rank().max(1) {
            return Err(Error::invalid(self.name(), format!("dim {} out of range for {x}", self.dim)));
        }
        Ok(Spec { shape: x.shape.clone(), dtype: DType::I64 })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        if out.rank() == 0 {
            return e.constant(out, 0.0); // the one element is first
        }
        let positions = e.op("stablehlo.iota", &[], &format!("iota_dimension = {} : i64", self.dim), out);
        if out.numel() == 0 {
            return positions;
        }
        let vs = Spec::new(&[], x[0].spec.dtype);
        let is = Spec::new(&[], DType::I64);
        let name = e.fresh();
        let (a, b, ai, bi) = (e.fresh(), e.fresh(), e.fresh(), e.fresh());
        let _ = writeln!(
            e.body,
            "    {name}:2 = \"stablehlo.sort\"({}, {}) ({{\n    ^bb0({a}: {vt}, {b}: {vt}, {ai}: {it}, {bi}: {it}):",
            x[0].name,
            positions.name,
            vt = vs.mlir(),
            it = is.mlir(),
        );
        let (a, b) = (Value { name: a, spec: vs.clone() }, Value { name: b, spec: vs.clone() });
        // Whether `a` goes before `b`: strictly smaller (larger when descending), NaN largest.
        let (first, second) = if self.descending { (&b, &a) } else { (&a, &b) };
        let mut before = e.compare("LT", first, second);
        if vs.dtype.is_float() {
            let bs = Spec::new(&[], DType::Bool);
            let first_nan = e.compare("NE", first, first);
            let second_nan = e.compare("NE", second, second);
            let first_number = e.op("stablehlo.not", &[&first_nan], "", &bs);
            let nan_after = e.op("stablehlo.and", &[&second_nan, &first_number], "", &bs);
            before = e.op("stablehlo.or", &[&before, &nan_after], "", &bs);
        }
        let _ = write!(
            e.body,
            concat!(
                "      \"stablehlo.return\"({}) : (tensor<i1>) -> ()\n",
                "    }}) {{dimension = {} : i64, is_stable = true}} : ({}, {}) -> ({}, {})\n"
            ),
            before.name,
            self.dim,
            x[0].spec.mlir(),
            out.mlir(),
            x[0].spec.mlir(),
            out.mlir(),
        );
        Value { name: format!("{name}#1"), spec: out.clone() }
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        none(x.len()) // positions carry no gradient
    }
}

/// The sorting ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait SortOps: Operand {
    fn argsort(&self, dim: isize, descending: bool) -> Result<Self> {
        let dim = match self.rank_of() {
            0 if dim == 0 || dim == -1 => 0,
            _ => self.dim("argsort", dim)?,
        };
        Self::apply(super::Op::Argsort(Argsort { dim, descending }), &[self], None)
    }

    /// The sorted values and the positions they came from.
    fn sort(&self, dim: isize, descending: bool) -> Result<(Self, Self)> {
        let order = self.argsort(dim, descending)?;
        if self.rank_of() == 0 {
            return Ok((self.clone(), order));
        }
        Ok((self.gather(dim, &order)?, order))
    }

    /// The `k` largest (or smallest) values along `dim`, in order, and their positions; ties
    /// keep the earlier element first.
    fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Self, Self)> {
        let d = self.dim("topk", dim)?;
        let n = self.shape_of()[d];
        if k > n {
            let msg = format!("k = {k} is more than the {n} elements of dim {d} of {}", self.spec());
            return Err(Error::invalid("topk", msg));
        }
        let order = self.argsort(dim, largest)?.narrow(dim, 0, k)?;
        Ok((self.gather(dim, &order)?, order))
    }
}

impl<T: Operand> SortOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn argsort_sorts_values_with_their_positions_stably() {
        let m = module(Argsort { dim: 1, descending: false }, &[f32s(&[2, 5])]);
        assert!(m.contains(":2 = \"stablehlo.sort\"") && m.contains("is_stable = true"), "{m}");
        assert!(m.contains("iota_dimension = 1") && m.contains("dimension = 1 : i64"), "{m}");
        assert!(m.contains("comparison_direction NE"), "NaN last: {m}");
        assert!(m.contains("-> tensor<2x5xi64>"), "{m}");
    }

    #[test]
    fn ints_need_no_nan_rule() {
        let m = module(Argsort { dim: 0, descending: true }, &[Spec::new(&[4], DType::U8)]);
        assert!(!m.contains("comparison_direction NE") && m.contains("comparison_type UNSIGNED"), "{m}");
    }
}
