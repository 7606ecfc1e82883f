//! Ops that make tensors on the device: a filled shape, a range, an identity matrix.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::emit::{Emitter, Value};
use super::{check_arity, none, one, Accepts, Grads, Op, OpDef, Operand};

/// The scalar input broadcast to `shape` (zeros, ones, full).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fill {
    /// The result's shape.
    pub shape: Shape,
}

impl OpDef for Fill {
    fn name(&self) -> &'static str {
        "full"
    }
    fn attrs(&self) -> String {
        format!("shape={:?}", self.shape.as_slice())
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        if inputs[0].rank() != 0 {
            return Err(Error::shape(self.name(), "the fill value must be a scalar"));
        }
        Ok(Spec { shape: self.shape.clone(), dtype: inputs[0].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], _out: &Spec) -> Value {
        e.broadcast(&x[0], &self.shape)
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(g.sum_all()?)
    }
}

/// `start + step * [0, 1, …, n-1]`; start and step are scalar inputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arange {
    /// Number of elements.
    pub n: usize,
    /// The result's dtype.
    pub dtype: DType,
}

impl OpDef for Arange {
    fn name(&self) -> &'static str {
        "arange"
    }
    fn attrs(&self) -> String {
        format!("n={} dtype={}", self.n, self.dtype)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, dtype) = (self.name(), self.dtype);
        check_arity(name, inputs, 2)?;
        Accepts::Numeric.check(name, dtype)?;
        if inputs.iter().any(|s| s.rank() != 0 || s.dtype != dtype) {
            return Err(Error::dtype(name, format!("start and step must be {dtype} scalars")));
        }
        Ok(Spec::new(&[self.n], dtype))
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let iota = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", out);
        let start = e.broadcast(&x[0], &out.shape);
        let step = e.broadcast(&x[1], &out.shape);
        let scaled = e.op("stablehlo.multiply", &[&iota, &step], "", out);
        e.op("stablehlo.add", &[&scaled, &start], "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        none(x.len())
    }
}

/// The `n x m` matrix with ones on the diagonal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Eye {
    /// Number of rows.
    pub n: usize,
    /// Number of columns.
    pub m: usize,
    /// The result's dtype.
    pub dtype: DType,
}

impl OpDef for Eye {
    fn name(&self) -> &'static str {
        "eye"
    }
    fn attrs(&self) -> String {
        format!("n={} m={} dtype={}", self.n, self.m, self.dtype)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 0)?;
        Ok(Spec::new(&[self.n, self.m], self.dtype))
    }
    fn emit(&self, e: &mut Emitter, _x: &[Value], out: &Spec) -> Value {
        // The smallest index type that counts the dims: the grid is as large as the result.
        let wide = self.n.max(self.m) > i32::MAX as usize;
        let idx = Spec::new(&[self.n, self.m], if wide { DType::I64 } else { DType::I32 });
        let rows = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &idx);
        let cols = e.op("stablehlo.iota", &[], "iota_dimension = 1 : i64", &idx);
        let diag = e.compare("EQ", &rows, &cols);
        e.op("stablehlo.convert", &[&diag], "", out)
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        none(0)
    }
}

/// The creation ops, built on any [`Operand`] (the `Tensor` constructors of the same names).
pub(crate) trait CreateOps: Operand {
    fn full_on(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Self> {
        let v = Self::scalar_on(value, dtype, device)?;
        if shape.is_empty() {
            return Ok(v); // a scalar is its own fill
        }
        Self::apply(Op::Fill(Fill { shape: shape.into() }), &[&v], None)
    }

    /// `value` in `shape` and `dtype`, where this operand is (see [`Operand::scalar_at`]).
    fn full_at(&self, shape: &[usize], value: f64, dtype: DType) -> Result<Self> {
        let v = self.scalar_at(value, dtype)?;
        if shape.is_empty() {
            return Ok(v);
        }
        Self::apply(Op::Fill(Fill { shape: shape.into() }), &[&v], None)
    }

    /// `value` in this operand's shape and dtype, where it is.
    fn full_like(&self, value: f64) -> Result<Self> {
        self.full_at(self.shape_of(), value, self.dtype_of())
    }

    fn zeros_like(&self) -> Result<Self> {
        self.full_like(0.0)
    }

    fn ones_like(&self) -> Result<Self> {
        self.full_like(1.0)
    }

    /// `[start, start + step, …]` below `end` (like `torch.arange`).
    fn arange_on(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Self> {
        let n = arange_len(start, end, step)?;
        let s = Self::scalar_on(start, dtype, device)?;
        let d = Self::scalar_on(step, dtype, device)?;
        Self::apply(Op::Arange(Arange { n, dtype }), &[&s, &d], None)
    }

    /// [`CreateOps::arange_on`] where this operand is (see [`Operand::scalar_at`]).
    fn arange_at(&self, start: f64, end: f64, step: f64, dtype: DType) -> Result<Self> {
        let n = arange_len(start, end, step)?;
        let (s, d) = (self.scalar_at(start, dtype)?, self.scalar_at(step, dtype)?);
        Self::apply(Op::Arange(Arange { n, dtype }), &[&s, &d], None)
    }

    fn eye_on(n: usize, m: usize, dtype: DType, device: Device) -> Result<Self> {
        Self::apply(Op::Eye(Eye { n, m, dtype }), &[], Some(device))
    }
}

impl<T: Operand> CreateOps for T {}

/// How many elements `arange(start, end, step)` has, or an error for a range with none.
fn arange_len(start: f64, end: f64, step: f64) -> Result<usize> {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return Err(Error::invalid("arange", format!("bad range {start}..{end} step {step}")));
    }
    let n = ((end - start) / step).ceil().max(0.0);
    // Past 2^63 the count saturates or rounds: no XLA array holds that many anyway.
    if n >= i64::MAX as f64 {
        return Err(Error::invalid(
            "arange",
            format!("range {start}..{end} step {step} has {n:e} elements: more than an XLA array can hold (at most 2^63 - 1)"),
        ));
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn fill_broadcasts_its_scalar() {
        let m = module(Fill { shape: [2, 3].as_slice().into() }, &[f32s(&[])]);
        assert!(m.contains("broadcast_dimensions = array<i64>") && m.contains("-> tensor<2x3xf32>"), "{m}");
    }

    #[test]
    fn arange_scales_an_iota() {
        let m = module(
            Arange { n: 4, dtype: DType::I64 },
            &[Spec::new(&[], DType::I64), Spec::new(&[], DType::I64)],
        );
        assert!(m.contains("\"stablehlo.iota\"") && m.contains("\"stablehlo.multiply\""), "{m}");
        assert!(m.contains("-> tensor<4xi64>"), "{m}");
    }

    #[test]
    fn eye_compares_two_iotas() {
        let m = module(Eye { n: 2, m: 3, dtype: DType::F32 }, &[]);
        assert!(m.contains("iota_dimension = 1") && m.contains("comparison_direction EQ"), "{m}");
        assert!(m.contains("@main() -> tensor<2x3xf32>"), "{m}");
    }
}
