//! Matrix product: `[..., m, k] x [..., k, n]` with broadcast batch dims, and torch's
//! promotion of 1-D operands. f16 and bf16 products accumulate in f32 and round once.

use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::emit::{accumulator, list, Emitter, Value};
use super::movement::MovementOps;
use super::reduce::ReduceOps;
use super::{
    broadcast, broadcast_sources, check_arity, same_dtype, Accepts, DimSources, Grads, Op, OpDef, Operand,
};

/// Batched matrix product of two operands of rank >= 2 (1-D ones are promoted by
/// [`MatmulOps::matmul`] before this op).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Matmul;

impl OpDef for Matmul {
    /// Batch dims run along both operands' (broadcast), rows along the left one's, columns
    /// along the right one's; the contracted dim along none.
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        let nb = output.rank() - 2;
        let batch = |s: &Spec| Spec { shape: s.shape[..s.rank() - 2].into(), dtype: s.dtype };
        let out_batch = Spec { shape: output.shape[..nb].into(), dtype: output.dtype };
        let mut sources = broadcast_sources(&[batch(&inputs[0]), batch(&inputs[1])], &out_batch);
        sources.push(smallvec::smallvec![(0, inputs[0].rank() - 2)]);
        sources.push(smallvec::smallvec![(1, inputs[1].rank() - 1)]);
        sources
    }
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        same_dtype(name, &inputs[0], &inputs[1])?;
        Accepts::Numeric.check(name, inputs[0].dtype)?;
        let (a, b) = (&inputs[0].shape, &inputs[1].shape);
        if a.len() < 2 || b.len() < 2 {
            return Err(Error::shape(name, format!("needs rank >= 2 operands, got {a:?} and {b:?}")));
        }
        let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
        let (k2, n) = (b[b.len() - 2], b[b.len() - 1]);
        if k != k2 {
            return Err(Error::shape(name, format!("inner dimensions differ: {a:?} x {b:?} ({k} != {k2})")));
        }
        let mut shape = broadcast(name, &a[..a.len() - 2], &b[..b.len() - 2])?;
        shape.extend([m, n]);
        Ok(Spec { shape, dtype: inputs[0].dtype })
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let nb = out.rank() - 2;
        let batch = &out.shape[..nb];
        let (a, b) = (&x[0], &x[1]);
        let a_shape: Shape = batch.iter().chain(&a.spec.shape[a.spec.rank() - 2..]).copied().collect();
        let b_shape: Shape = batch.iter().chain(&b.spec.shape[b.spec.rank() - 2..]).copied().collect();
        let a = e.broadcast(a, &a_shape);
        let b = e.broadcast(b, &b_shape);
        let bd = list(0..nb);
        let attr = if nb == 0 {
            format!("lhs_contracting_dimensions = [{}], rhs_contracting_dimensions = [{}]", nb + 1, nb)
        } else {
            format!(
                "lhs_batching_dimensions = [{bd}], rhs_batching_dimensions = [{bd}], lhs_contracting_dimensions = [{}], rhs_contracting_dimensions = [{}]",
                nb + 1,
                nb
            )
        };
        // f16/bf16 products accumulate in f32 and round once, as torch and JAX do.
        let acc = Spec { shape: out.shape.clone(), dtype: accumulator(out.dtype) };
        let dims = format!("dot_dimension_numbers = #stablehlo.dot<{attr}>");
        let r = e.op("stablehlo.dot_general", &[&a, &b], &dims, &acc);
        if acc.dtype == out.dtype {
            r
        } else {
            e.op("stablehlo.convert", &[&r], "", out)
        }
    }

    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        let ga = g.matmul(&x[1].t()?)?;
        let gb = x[0].t()?.matmul(g)?;
        Ok(smallvec::smallvec![Some(ga.sum_to(x[0].shape_of())?), Some(gb.sum_to(x[1].shape_of())?)])
    }
}

/// Matrix products, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait MatmulOps: Operand {
    /// torch's rules: a 1-D operand is promoted (a dim of 1 added in front for the left, at
    /// the end for the right) and the added dim removed from the result.
    fn matmul(&self, other: &Self) -> Result<Self> {
        if self.rank_of() == 0 || other.rank_of() == 0 {
            return Err(Error::shape("matmul", "both operands need at least one dim"));
        }
        let a = if self.rank_of() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.rank_of() == 1 { other.unsqueeze(-1)? } else { other.clone() };
        let mut r = Self::apply(Op::Matmul(Matmul), &[&a, &b], None)?;
        if self.rank_of() == 1 {
            r = r.squeeze(-2)?;
        }
        if other.rank_of() == 1 {
            r = r.squeeze(-1)?;
        }
        Ok(r)
    }
}

impl<T: Operand> MatmulOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn a_matrix_product_contracts_the_inner_dims() {
        let m = module(Matmul, &[f32s(&[2, 3]), f32s(&[3, 4])]);
        assert!(m.contains("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]"), "{m}");
        assert!(m.contains("-> tensor<2x4xf32>"), "{m}");
    }

    #[test]
    fn batch_dims_broadcast_and_are_batching_dims() {
        let m = module(Matmul, &[f32s(&[5, 2, 3]), f32s(&[3, 4])]);
        assert!(m.contains("lhs_batching_dimensions = [0], rhs_batching_dimensions = [0]"), "{m}");
        assert!(m.contains("(tensor<3x4xf32>) -> tensor<5x3x4xf32>"), "{m}");
    }

    #[test]
    fn half_precision_accumulates_in_f32() {
        let m = module(Matmul, &[Spec::new(&[2, 2], DType::F16), Spec::new(&[2, 2], DType::F16)]);
        assert!(m.contains("-> tensor<2x2xf32>") && m.contains("\"stablehlo.convert\""), "{m}");
    }

    #[test]
    fn inner_dims_must_agree() {
        let e = Matmul.infer(&[f32s(&[2, 3]), f32s(&[4, 5])]).unwrap_err().to_string();
        assert!(e.contains("inner dimensions differ"), "{e}");
    }
}
