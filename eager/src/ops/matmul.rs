//! Matrix product: `[..., m, k] x [..., k, n]` with broadcast batch dims, and torch's
//! promotion of 1-D operands. f16 and bf16 products accumulate in f32 and round once. Either
//! operand may be read transposed (`dot_general` contracts any dim), so `x @ wᵀ` (a Linear),
//! `q @ kᵀ` (attention) and the products of matmul's own gradient are one op, not two.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): on the low-precision list, as torch's `matmul`: f32 inputs
//! are cast to the autocast dtype (and still accumulate in f32).

use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::emit::{accumulator, list, Emitter, Value};
use super::movement::MovementOps;
use super::GradReads;
use super::{
    broadcast, broadcast_sources, check_arity, same_dtype, Accepts, DimSources, Grads, Op, OpDef, Operand,
};

/// Batched matrix product of two operands of rank >= 2 (1-D ones are promoted by
/// `MatmulOps::matmul` before this op), each read with its last two dims swapped when
/// `lhs_t` / `rhs_t` say so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Matmul {
    /// Whether the left operand is read with its last two dims swapped.
    pub lhs_t: bool,
    /// Whether the right operand is read with its last two dims swapped.
    pub rhs_t: bool,
}

impl Matmul {
    /// `(rows, inner)` of the left operand as read, `(inner, columns)` of the right.
    fn dims(&self, a: &[usize], b: &[usize]) -> ((usize, usize), (usize, usize)) {
        let last2 = |s: &[usize], t: bool| {
            let (p, q) = (s[s.len() - 2], s[s.len() - 1]);
            if t {
                (q, p)
            } else {
                (p, q)
            }
        };
        (last2(a, self.lhs_t), last2(b, self.rhs_t))
    }
}

impl OpDef for Matmul {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[0, 1])
    }
    fn autocast_list(&self) -> super::AutocastList {
        super::AutocastList::Low
    }
    /// Batch dims run along both operands' (broadcast), rows along the left one's, columns
    /// along the right one's; the contracted dim along none.
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        let nb = output.rank() - 2;
        let batch = |s: &Spec| Spec { shape: s.shape[..s.rank() - 2].into(), dtype: s.dtype };
        let out_batch = Spec { shape: output.shape[..nb].into(), dtype: output.dtype };
        let mut sources = broadcast_sources(&[batch(&inputs[0]), batch(&inputs[1])], &out_batch);
        let (ra, rb) = (inputs[0].rank(), inputs[1].rank());
        sources.push(smallvec::smallvec![(0, if self.lhs_t { ra - 1 } else { ra - 2 })]);
        sources.push(smallvec::smallvec![(1, if self.rhs_t { rb - 2 } else { rb - 1 })]);
        sources
    }
    fn name(&self) -> &'static str {
        "matmul"
    }
    /// A multiply and an add per output element and contracted index.
    fn flops(&self, inputs: &[Spec], output: &Spec) -> f64 {
        let ((_, k), _) = self.dims(&inputs[0].shape, &inputs[1].shape);
        2.0 * k as f64 * output.shape.iter().product::<usize>() as f64
    }
    fn attrs(&self) -> String {
        match (self.lhs_t, self.rhs_t) {
            (false, false) => String::new(),
            (true, false) => "lhsᵀ".into(),
            (false, true) => "rhsᵀ".into(),
            (true, true) => "lhsᵀ rhsᵀ".into(),
        }
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
        let ((m, k), (k2, n)) = self.dims(a, b);
        if k != k2 {
            let t = |on: bool| if on { "ᵀ" } else { "" };
            let msg = format!(
                "inner dimensions differ: {a:?}{} x {b:?}{} ({k} != {k2})",
                t(self.lhs_t),
                t(self.rhs_t)
            );
            return Err(Error::shape(name, msg));
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
        // The left operand contracts its columns (its rows when read transposed), the right
        // its rows (its columns); dot_general's result is batch, then free dims in order.
        let (lc, rc) = (nb + usize::from(!self.lhs_t), nb + usize::from(self.rhs_t));
        let attr = if nb == 0 {
            format!("lhs_contracting_dimensions = [{lc}], rhs_contracting_dimensions = [{rc}]")
        } else {
            format!(
                "lhs_batching_dimensions = [{bd}], rhs_batching_dimensions = [{bd}], lhs_contracting_dimensions = [{lc}], rhs_contracting_dimensions = [{rc}]"
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

    /// With A' and B' the operands as read (C = A' B'): dA' = g B'ᵀ and dB' = A'ᵀ g, each a
    /// product with transposed reads; a transposed operand's gradient is that transposed,
    /// which swaps the product's operands (`(g B'ᵀ)ᵀ = B' gᵀ`).
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        let (a, b) = (x[0], x[1]);
        let mm = |l: &T, r: &T, lhs_t: bool, rhs_t: bool| {
            T::apply(Op::Matmul(Matmul { lhs_t, rhs_t }), &[l, r], None)
        };
        let ga = if self.lhs_t { mm(b, g, self.rhs_t, true)? } else { mm(g, b, false, !self.rhs_t)? };
        let gb = if self.rhs_t { mm(g, a, true, self.lhs_t)? } else { mm(a, g, !self.lhs_t, false)? };
        Ok(smallvec::smallvec![Some(ga.sum_to(a.shape_of())?), Some(gb.sum_to(b.shape_of())?)])
    }
}

/// Matrix products, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait MatmulOps: Operand {
    /// torch's rules: a 1-D operand is promoted (a dim of 1 added in front for the left, at
    /// the end for the right) and the added dim removed from the result.
    fn matmul(&self, other: &Self) -> Result<Self> {
        self.matmul_transposed(other, false, false)
    }

    /// `matmul` of the operands read with their last two dims swapped where `lhs_t` / `rhs_t`
    /// say (`a.matmul_transposed(&w, false, true)` is `a.matmul(&w.t())`, as one op). A 1-D
    /// operand is never transposed.
    fn matmul_transposed(&self, other: &Self, lhs_t: bool, rhs_t: bool) -> Result<Self> {
        if self.rank_of() == 0 || other.rank_of() == 0 {
            return Err(Error::shape("matmul", "both operands need at least one dim"));
        }
        let a = if self.rank_of() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.rank_of() == 1 { other.unsqueeze(-1)? } else { other.clone() };
        let op = Matmul { lhs_t: lhs_t && self.rank_of() > 1, rhs_t: rhs_t && other.rank_of() > 1 };
        let mut r = Self::apply(Op::Matmul(op), &[&a, &b], None)?;
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
        let m = module(Matmul::default(), &[f32s(&[2, 3]), f32s(&[3, 4])]);
        assert!(m.contains("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]"), "{m}");
        assert!(m.contains("-> tensor<2x4xf32>"), "{m}");
    }

    #[test]
    fn batch_dims_broadcast_and_are_batching_dims() {
        let m = module(Matmul::default(), &[f32s(&[5, 2, 3]), f32s(&[3, 4])]);
        assert!(m.contains("lhs_batching_dimensions = [0], rhs_batching_dimensions = [0]"), "{m}");
        assert!(m.contains("(tensor<3x4xf32>) -> tensor<5x3x4xf32>"), "{m}");
    }

    #[test]
    fn half_precision_accumulates_in_f32() {
        let m = module(Matmul::default(), &[Spec::new(&[2, 2], DType::F16), Spec::new(&[2, 2], DType::F16)]);
        assert!(m.contains("-> tensor<2x2xf32>") && m.contains("\"stablehlo.convert\""), "{m}");
    }

    #[test]
    fn transposed_reads_contract_the_other_dim() {
        let op = Matmul { lhs_t: false, rhs_t: true };
        let m = module(op, &[f32s(&[2, 3]), f32s(&[4, 3])]);
        assert!(m.contains("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]"), "{m}");
        assert!(m.contains("-> tensor<2x4xf32>"), "{m}");
        let op = Matmul { lhs_t: true, rhs_t: false };
        let m = module(op, &[f32s(&[5, 3, 2]), f32s(&[5, 3, 4])]);
        assert!(m.contains("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]"), "{m}");
        assert!(m.contains("-> tensor<5x2x4xf32>"), "{m}");
        assert_eq!(op.attrs(), "lhsᵀ");
    }

    #[test]
    fn inner_dims_must_agree() {
        let e = Matmul::default().infer(&[f32s(&[2, 3]), f32s(&[4, 5])]).unwrap_err().to_string();
        assert!(e.contains("inner dimensions differ"), "{e}");
    }
}
