//! On-device random numbers: uniform on [0, 1) and standard normal (Box-Muller), from a
//! `u64[2]` ThreeFry state input drawn per call (seeded by `manual_seed`).

use std::fmt::Write as _;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Shape, Spec};

use super::emit::{Emitter, Value};
use super::movement::slice_attr;
use super::{check_arity, none, Accepts, Dims, Grads, Op, OpDef, Operand};

/// Distributions of on-device random numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dist {
    /// Uniform on [0, 1).
    Uniform,
    /// Standard normal.
    Normal,
}

/// Random numbers of `shape` and `dtype` from the `u64[2]` state input (ThreeFry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Random {
    /// The distribution drawn from.
    pub dist: Dist,
    /// The result's shape.
    pub shape: Shape,
    /// The result's dtype.
    pub dtype: DType,
}

impl OpDef for Random {
    fn name(&self) -> &'static str {
        match self.dist {
            Dist::Uniform => "rand",
            Dist::Normal => "randn",
        }
    }
    fn attrs(&self) -> String {
        format!("shape={:?} dtype={}", self.shape.as_slice(), self.dtype)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 1)?;
        Accepts::Float.check(name, self.dtype)?;
        if inputs[0] != Spec::new(&[2], DType::U64) {
            return Err(Error::invalid(name, "the state input must be u64[2]"));
        }
        Ok(Spec { shape: self.shape.clone(), dtype: self.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let (shape, dtype) = (&self.shape, self.dtype);
        // Generate in f32 (f64 for f64 outputs), then convert.
        let work = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let r = match self.dist {
            Dist::Uniform => {
                let u = uniform(e, &x[0], shape, work);
                // f16/bf16 would round values just below 1 up to 1: floor onto the output's
                // grid of 2^-digits first (as torch does), which it holds exactly.
                let digits = match dtype {
                    DType::F16 => 11,
                    DType::BF16 => 8,
                    _ => 0,
                };
                if digits == 0 {
                    u
                } else {
                    let spec = Spec { shape: shape.clone(), dtype: work };
                    let scale = e.constant(&spec, (1u32 << digits) as f64);
                    let inv = e.constant(&spec, 1.0 / (1u32 << digits) as f64);
                    let scaled = e.op("stablehlo.multiply", &[&u, &scale], "", &spec);
                    let floored = e.op("stablehlo.floor", &[&scaled], "", &spec);
                    e.op("stablehlo.multiply", &[&floored, &inv], "", &spec)
                }
            }
            Dist::Normal => {
                // Box-Muller: sqrt(-2 ln(1 - u1)) * cos(2 pi u2).
                let mut two: Shape = smallvec::smallvec![2];
                two.extend_from_slice(shape);
                let u = uniform(e, &x[0], &two, work);
                let spec = Spec { shape: shape.clone(), dtype: work };
                let rank = shape.len();
                let mut starts: Dims = smallvec::smallvec![0; rank + 1];
                let mut limits: Dims = std::iter::once(1).chain(shape.iter().copied()).collect();
                let strides: Dims = smallvec::smallvec![1; rank + 1];
                let half_spec = Spec { shape: limits.iter().copied().collect(), dtype: work };
                let u1 = e.op("stablehlo.slice", &[&u], &slice_attr(&starts, &limits, &strides), &half_spec);
                starts[0] = 1;
                limits[0] = 2;
                let u2 = e.op("stablehlo.slice", &[&u], &slice_attr(&starts, &limits, &strides), &half_spec);
                let u1 = e.op("stablehlo.reshape", &[&u1], "", &spec);
                let u2 = e.op("stablehlo.reshape", &[&u2], "", &spec);
                let one = e.constant(&spec, 1.0);
                let m2 = e.constant(&spec, -2.0);
                let tau = e.constant(&spec, std::f64::consts::TAU);
                let q = e.op("stablehlo.subtract", &[&one, &u1], "", &spec);
                let l = e.op("stablehlo.log", &[&q], "", &spec);
                let l = e.op("stablehlo.multiply", &[&m2, &l], "", &spec);
                let radius = e.op("stablehlo.sqrt", &[&l], "", &spec);
                let angle = e.op("stablehlo.multiply", &[&tau, &u2], "", &spec);
                let c = e.op("stablehlo.cosine", &[&angle], "", &spec);
                e.op("stablehlo.multiply", &[&radius, &c], "", &spec)
            }
        };
        if work == dtype {
            r
        } else {
            e.op("stablehlo.convert", &[&r], "", out)
        }
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        none(x.len())
    }
}

/// Uniform numbers in [0, 1) of `shape` and float `dtype` (f32 or f64) from the ThreeFry
/// state: random mantissa bits under exponent 0 give [1, 2), minus one.
fn uniform(e: &mut Emitter, state: &Value, shape: &[usize], dtype: DType) -> Value {
    let (bits_t, shift, one_bits) = match dtype {
        DType::F64 => (DType::U64, 12.0, 0x3FF0_0000_0000_0000u64 as f64),
        _ => (DType::U32, 9.0, 0x3F80_0000u32 as f64),
    };
    let bits_spec = Spec { shape: shape.into(), dtype: bits_t };
    let name = e.fresh();
    let _ = writeln!(
        e.body,
        "    {name}:2 = \"stablehlo.rng_bit_generator\"({}) {{rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>}} : ({}) -> ({}, {})",
        state.name,
        state.spec.mlir(),
        state.spec.mlir(),
        bits_spec.mlir()
    );
    let bits = Value { name: format!("{name}#1"), spec: bits_spec.clone() };
    let sh = e.constant(&bits_spec, shift);
    let mantissa = e.op("stablehlo.shift_right_logical", &[&bits, &sh], "", &bits_spec);
    let one = e.constant(&bits_spec, one_bits);
    let with_exp = e.op("stablehlo.or", &[&mantissa, &one], "", &bits_spec);
    let f_spec = Spec { shape: shape.into(), dtype };
    let f = e.op("stablehlo.bitcast_convert", &[&with_exp], "", &f_spec);
    let onef = e.constant(&f_spec, 1.0);
    e.op("stablehlo.subtract", &[&f, &onef], "", &f_spec)
}

/// The random ops, built on any [`Operand`] (`Tensor::rand`, `randn`, `random_on`).
pub(crate) trait RandomOps: Operand {
    fn random_on(dist: Dist, shape: &[usize], dtype: DType, device: Device) -> Result<Self> {
        let state = Self::rng_state(device)?;
        Self::apply(Op::Random(Random { dist, shape: shape.into(), dtype }), &[&state], None)
    }
}

impl<T: Operand> RandomOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::module;
    use super::*;

    fn state() -> Spec {
        Spec::new(&[2], DType::U64)
    }

    #[test]
    fn uniform_numbers_come_from_threefry_bits() {
        let m = module(
            Random { dist: Dist::Uniform, shape: [3].as_slice().into(), dtype: DType::F32 },
            &[state()],
        );
        assert!(m.contains("rng_algorithm THREE_FRY") && m.contains("\"stablehlo.bitcast_convert\""), "{m}");
        assert!(m.contains("-> tensor<3xf32>"), "{m}");
    }

    #[test]
    fn half_uniforms_are_floored_onto_their_grid() {
        let m = module(
            Random { dist: Dist::Uniform, shape: [3].as_slice().into(), dtype: DType::F16 },
            &[state()],
        );
        assert!(m.contains("\"stablehlo.floor\"") && m.contains("-> tensor<3xf16>"), "{m}");
    }

    #[test]
    fn normals_use_box_muller() {
        let m = module(
            Random { dist: Dist::Normal, shape: [3].as_slice().into(), dtype: DType::F32 },
            &[state()],
        );
        assert!(m.contains("\"stablehlo.cosine\"") && m.contains("\"stablehlo.log\""), "{m}");
    }
}
