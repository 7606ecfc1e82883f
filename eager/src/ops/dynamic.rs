//! Slices at positions that are data: `dynamic_slice` reads a block whose start is a tensor,
//! `dynamic_update_slice` writes one (as `jax.lax`'s of the same names). The start being an
//! input, not an attribute, every position runs the same executable: a decode step writes its
//! token into the key/value cache with one of these, touching only the new positions (and, when
//! the cache is donated, in place).
//!
//! As in XLA and JAX, a start is clamped so that the block fits: `clamp(start, 0, dim - size)`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Spec;

use super::create::CreateOps;
use super::emit::{i64_array, Emitter, Value};
use super::movement::slice_attr;
use super::{check_arity, Dims, GradReads, Grads, Op, OpDef, Operand};

/// A block of `sizes` of input 0 from the start the 1-D integer input 1 gives (one per dim,
/// clamped so the block fits).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DynamicSlice {
    /// The block's size per dim.
    pub sizes: Dims,
}

/// Input 0 with input 1 written over the block that starts where the 1-D integer input 2 says
/// (one start per dim, clamped so the block fits).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DynamicUpdateSlice;

/// The shape rule of a start tensor for `x`: 1-D, i32 or i64, one start per dim.
fn check_starts(op: &'static str, x: &Spec, starts: &Spec) -> Result<()> {
    if !matches!(starts.dtype, DType::I32 | DType::I64) || starts.shape.as_slice() != [x.rank()] {
        return Err(Error::dtype(
            op,
            format!(
                "starts must be a 1-D i32 or i64 tensor of {} values (one per dim of {x}), got {starts}",
                x.rank()
            ),
        ));
    }
    Ok(())
}

/// A block of `sizes` fits in `x` (the rank matches and no size is larger than its dim).
fn check_block(op: &'static str, x: &Spec, sizes: &[usize], what: &str) -> Result<()> {
    if sizes.len() != x.rank() || sizes.iter().zip(&x.shape).any(|(s, d)| s > d) {
        return Err(Error::shape(op, format!("{what} {sizes:?} does not fit in {x}")));
    }
    Ok(())
}

/// Each start of `starts` (`[rank]`) as a 0-d value: the operands `dynamic_slice` and
/// `dynamic_update_slice` take.
fn start_scalars(e: &mut Emitter, starts: &Value) -> Vec<Value> {
    let dtype = starts.spec.dtype;
    (0..starts.spec.shape[0])
        .map(|d| {
            let one = e.op(
                "stablehlo.slice",
                &[starts],
                &slice_attr(&[d], &[d + 1], &[1]),
                &Spec::new(&[1], dtype),
            );
            e.op("stablehlo.reshape", &[&one], "", &Spec::new(&[], dtype))
        })
        .collect()
}

impl OpDef for DynamicSlice {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[1])
    }
    fn name(&self) -> &'static str {
        "dynamic_slice"
    }
    fn attrs(&self) -> String {
        format!("sizes={:?}", self.sizes.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        let (x, starts) = (&inputs[0], &inputs[1]);
        check_starts(name, x, starts)?;
        check_block(name, x, &self.sizes, "a block of")?;
        Ok(Spec { shape: self.sizes.iter().copied().collect(), dtype: x.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let starts = start_scalars(e, &x[1]);
        let mut operands: Vec<&Value> = vec![&x[0]];
        operands.extend(starts.iter());
        e.op("stablehlo.dynamic_slice", &operands, &format!("slice_sizes = {}", i64_array(&self.sizes)), out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // The gradient lands where the block was read: zeros with `g` written at the start.
        let zeros = x[0].zeros_like()?.to_dtype_of(g)?;
        let back = T::apply(Op::DynamicUpdateSlice(DynamicUpdateSlice), &[&zeros, g, x[1]], None)?;
        Ok(smallvec::smallvec![Some(back), None])
    }
}

impl OpDef for DynamicUpdateSlice {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[2])
    }
    fn name(&self) -> &'static str {
        "dynamic_update_slice"
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 3)?;
        let (x, update, starts) = (&inputs[0], &inputs[1], &inputs[2]);
        if x.dtype != update.dtype {
            return Err(Error::dtype(
                name,
                format!("the update {update} must have the dtype of {x}; convert it with .to_dtype(..)"),
            ));
        }
        check_starts(name, x, starts)?;
        check_block(name, x, &update.shape, "an update of shape")?;
        Ok(x.clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let starts = start_scalars(e, &x[2]);
        let mut operands: Vec<&Value> = vec![&x[0], &x[1]];
        operands.extend(starts.iter());
        e.op("stablehlo.dynamic_update_slice", &operands, "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // The operand's gradient is `g` but where the update overwrote it; the update's is the
        // block of `g` it was written to.
        let (update, starts) = (x[1], x[2]);
        let hole = update.zeros_like()?.to_dtype_of(g)?;
        let operand = T::apply(Op::DynamicUpdateSlice(DynamicUpdateSlice), &[g, &hole, starts], None)?;
        let sizes: Dims = update.shape_of().iter().copied().collect();
        let block = T::apply(Op::DynamicSlice(DynamicSlice { sizes }), &[g, starts], None)?;
        Ok(smallvec::smallvec![Some(operand), Some(block), None])
    }
    fn flops(&self, inputs: &[Spec], _output: &Spec) -> f64 {
        // Only the block is written (in place when the operand is donated).
        inputs[1].numel() as f64
    }
}

/// The dynamic slicing ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait DynamicOps: Operand {
    fn dynamic_slice(&self, starts: &Self, sizes: &[usize]) -> Result<Self> {
        Self::apply(
            Op::DynamicSlice(DynamicSlice { sizes: sizes.iter().copied().collect() }),
            &[self, starts],
            None,
        )
    }

    fn dynamic_update_slice(&self, update: &Self, starts: &Self) -> Result<Self> {
        Self::apply(Op::DynamicUpdateSlice(DynamicUpdateSlice), &[self, update, starts], None)
    }

    /// This operand in `other`'s dtype (itself when they agree).
    fn to_dtype_of(&self, other: &Self) -> Result<Self> {
        if self.dtype_of() == other.dtype_of() {
            return Ok(self.clone());
        }
        super::elementwise::ElementwiseOps::to_dtype(self, other.dtype_of())
    }
}

impl<T: Operand> DynamicOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn dynamic_update_slice_takes_one_scalar_start_per_dim() {
        let specs = [f32s(&[2, 8, 4]), f32s(&[2, 1, 4]), Spec::new(&[3], DType::I64)];
        let m = module(DynamicUpdateSlice, &specs);
        assert!(m.contains("\"stablehlo.dynamic_update_slice\"(%arg0, %arg1, %2, %4, %6)"), "{m}");
        assert!(m.contains("(tensor<2x8x4xf32>, tensor<2x1x4xf32>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x8x4xf32>"), "{m}");
    }

    #[test]
    fn dynamic_slice_names_its_sizes() {
        let m = module(
            DynamicSlice { sizes: [1, 3].as_slice().into() },
            &[f32s(&[4, 5]), Spec::new(&[2], DType::I32)],
        );
        assert!(m.contains("slice_sizes = array<i64: 1, 3>"), "{m}");
    }

    #[test]
    fn bad_starts_and_blocks_are_refused_by_name() {
        let e = DynamicUpdateSlice.infer(&[f32s(&[4]), f32s(&[5]), Spec::new(&[1], DType::I64)]).unwrap_err();
        assert!(e.to_string().contains("dynamic_update_slice") && e.to_string().contains("[5]"), "{e}");
        let e = DynamicSlice { sizes: [2].as_slice().into() }
            .infer(&[f32s(&[4]), Spec::new(&[1], DType::F32)])
            .unwrap_err();
        assert!(e.to_string().contains("starts must be a 1-D i32 or i64"), "{e}");
    }
}
