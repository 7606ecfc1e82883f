//! Elementwise ops: unary (`exp`, `relu`, …), binary arithmetic (broadcasting), comparisons,
//! `where` and dtype casts. The unary, binary and comparison ops are stamped from one table
//! each: variant, name, the StableHLO op it lowers to, and the dtypes it takes.
//!
//! Autocast lists ([`autocast`](mod@crate::autocast)): `exp`, `log`, `log1p`, `expm1`, `rsqrt` and `pow` on
//! the f32 list (they lose most in half precision; torch's list); the other binary ops,
//! comparisons and `where` promote mixed float inputs to the widest; the rest keep their
//! input's dtype, casts included (a cast is what autocast inserts).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Spec;

use super::create::CreateOps;
use super::emit::{Emitter, Value};
use super::GradReads;
use super::{
    broadcast, broadcast_sources, check_arity, none, one, same_dtype, Accepts, AutocastList, DimSources,
    Grads, Op, OpDef, Operand,
};

/// Defines an enum of elementwise ops from one table: variant, user-facing name, how it
/// lowers (a StableHLO op, a comparison direction, a [`Lowering`]) and the dtypes it takes.
macro_rules! elementwise {
    ($(#[$doc:meta])* $enum:ident($lower:ty) {
        $($variant:ident => $name:literal, $hlo:expr, $accepts:ident;)*
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $enum { $(#[doc = concat!("The `", $name, "` op.")] $variant),* }
        impl $enum {
            /// Every op of the family.
            pub const ALL: &'static [$enum] = &[$($enum::$variant),*];
            /// The op's name (`exp`, `add`, …).
            pub fn name(self) -> &'static str { match self { $($enum::$variant => $name),* } }
            fn hlo(self) -> $lower { match self { $($enum::$variant => $hlo),* } }
            fn accepts(self) -> Accepts { match self { $($enum::$variant => Accepts::$accepts),* } }
        }
    };
}

/// How a unary op lowers to StableHLO.
#[derive(Debug, Clone, Copy)]
enum Lowering {
    /// The one StableHLO op of that name.
    Op(&'static str),
    /// `stablehlo.abs`, but unsigned ints are their own abs (`stablehlo.abs` takes none).
    Abs,
    /// `stablehlo.maximum` with a zero constant.
    MaxWithZero,
    /// `stablehlo.sign`, but unsigned ints (which it takes none of) are `x > 0`.
    Sign,
}

elementwise!(
    /// Ops of one tensor, elementwise.
    Unary(Lowering) {
    Neg => "neg", Lowering::Op("stablehlo.negate"), Numeric;
    Abs => "abs", Lowering::Abs, Numeric;
    Exp => "exp", Lowering::Op("stablehlo.exponential"), Float;
    Log => "log", Lowering::Op("stablehlo.log"), Float;
    Sqrt => "sqrt", Lowering::Op("stablehlo.sqrt"), Float;
    Rsqrt => "rsqrt", Lowering::Op("stablehlo.rsqrt"), Float;
    Tanh => "tanh", Lowering::Op("stablehlo.tanh"), Float;
    Sigmoid => "sigmoid", Lowering::Op("stablehlo.logistic"), Float;
    Sin => "sin", Lowering::Op("stablehlo.sine"), Float;
    Cos => "cos", Lowering::Op("stablehlo.cosine"), Float;
    Relu => "relu", Lowering::MaxWithZero, Numeric;
    Erf => "erf", Lowering::Op("chlo.erf"), Float;
    Log1p => "log1p", Lowering::Op("stablehlo.log_plus_one"), Float;
    Expm1 => "expm1", Lowering::Op("stablehlo.exponential_minus_one"), Float;
    Floor => "floor", Lowering::Op("stablehlo.floor"), Float;
    Ceil => "ceil", Lowering::Op("stablehlo.ceil"), Float;
    // torch.round: halves to even.
    Round => "round", Lowering::Op("stablehlo.round_nearest_even"), Float;
    Sign => "sign", Lowering::Sign, Numeric;
});

elementwise!(
    /// Arithmetic of two tensors, broadcasting.
    Binary(&'static str) {
    Add => "add", "stablehlo.add", Numeric;
    Sub => "sub", "stablehlo.subtract", Numeric;
    Mul => "mul", "stablehlo.multiply", Numeric;
    Div => "div", "stablehlo.divide", Numeric;
    Pow => "pow", "stablehlo.power", Numeric;
    Maximum => "maximum", "stablehlo.maximum", Numeric;
    Minimum => "minimum", "stablehlo.minimum", Numeric;
});

elementwise!(
    /// Comparisons of two tensors, broadcasting, giving bool.
    Compare(&'static str) {
    Eq => "eq", "EQ", Any;
    Ne => "ne", "NE", Any;
    Lt => "lt", "LT", Numeric;
    Le => "le", "LE", Numeric;
    Gt => "gt", "GT", Numeric;
    Ge => "ge", "GE", Numeric;
});

impl OpDef for Unary {
    fn grad_reads(&self) -> GradReads {
        match self {
            Unary::Neg | Unary::Floor | Unary::Ceil | Unary::Round | Unary::Sign => GradReads::NONE,
            Unary::Exp | Unary::Sqrt | Unary::Rsqrt | Unary::Tanh | Unary::Sigmoid | Unary::Expm1 => {
                GradReads::OUTPUT
            }
            _ => GradReads::inputs(&[0]),
        }
    }
    fn autocast_list(&self) -> AutocastList {
        match self {
            Unary::Exp | Unary::Log | Unary::Log1p | Unary::Expm1 | Unary::Rsqrt => AutocastList::F32,
            _ => AutocastList::Keep,
        }
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        Unary::name(*self)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        self.accepts().check(self.name(), inputs[0].dtype)?;
        Ok(inputs[0].clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let dtype = x[0].spec.dtype;
        match self.hlo() {
            Lowering::Op(op) => e.op(op, &[&x[0]], "", out),
            Lowering::Abs if dtype.is_int() && !dtype.is_signed_int() => x[0].clone(),
            Lowering::Abs => e.op("stablehlo.abs", &[&x[0]], "", out),
            Lowering::Sign if dtype.is_int() && !dtype.is_signed_int() => {
                let zero = e.constant(&x[0].spec, 0.0);
                let positive = e.compare("GT", &x[0], &zero);
                e.op("stablehlo.convert", &[&positive], "", out)
            }
            // torch's sign(-0.0) is +0.0; stablehlo.sign keeps the zero's sign.
            Lowering::Sign if dtype.is_float() => {
                let zero = e.constant(&x[0].spec, 0.0);
                let is_zero = e.compare("EQ", &x[0], &zero);
                let sign = e.op("stablehlo.sign", &[&x[0]], "", out);
                e.op("stablehlo.select", &[&is_zero, &zero, &sign], "", out)
            }
            Lowering::Sign => e.op("stablehlo.sign", &[&x[0]], "", out),
            Lowering::MaxWithZero => {
                let zero = e.constant(&x[0].spec, 0.0);
                e.op("stablehlo.maximum", &[&x[0], &zero], "", out)
            }
        }
    }
    fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>> {
        one(match self {
            Unary::Neg => g.neg()?,
            Unary::Abs => g.mul(&x[0].sign()?)?,
            Unary::Exp => g.mul(out)?,
            Unary::Log => g.div(x[0])?,
            Unary::Sqrt => g.mul_scalar(0.5)?.div(out)?,
            Unary::Rsqrt => g.mul(&out.mul(out)?.mul(out)?)?.mul_scalar(-0.5)?,
            Unary::Tanh => g.mul(&out.mul(out)?.neg()?.add_scalar(1.0)?)?,
            Unary::Sigmoid => g.mul(&out.mul(&out.neg()?.add_scalar(1.0)?)?)?,
            Unary::Sin => g.mul(&x[0].cos()?)?,
            Unary::Cos => g.mul(&x[0].sin()?.neg()?)?,
            Unary::Relu => g.mul(&x[0].gt_scalar(0.0)?.to_dtype(g.dtype_of())?)?,
            // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
            Unary::Erf => {
                g.mul(&x[0].mul(x[0])?.neg()?.exp()?.mul_scalar(std::f64::consts::FRAC_2_SQRT_PI)?)?
            }
            Unary::Log1p => g.div(&x[0].add_scalar(1.0)?)?,
            Unary::Expm1 => g.mul(&out.add_scalar(1.0)?)?,
            // Piecewise constant: zero almost everywhere, as torch.
            Unary::Floor | Unary::Ceil | Unary::Round | Unary::Sign => g.zeros_like()?,
        })
    }
}

impl OpDef for Binary {
    fn grad_reads(&self) -> GradReads {
        match self {
            Binary::Add | Binary::Sub => GradReads::NONE,
            Binary::Mul | Binary::Maximum | Binary::Minimum => GradReads::inputs(&[0, 1]),
            Binary::Div => GradReads::inputs(&[1]).and_output(),
            Binary::Pow => GradReads::inputs(&[0, 1]).and_output(),
        }
    }
    fn autocast_list(&self) -> AutocastList {
        match self {
            Binary::Pow => AutocastList::F32,
            _ => AutocastList::Promote,
        }
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        Binary::name(*self)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        same_dtype(name, &inputs[0], &inputs[1])?;
        self.accepts().check(name, inputs[0].dtype)?;
        Ok(Spec { shape: broadcast(name, &inputs[0].shape, &inputs[1].shape)?, dtype: inputs[0].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let a = e.broadcast(&x[0], &out.shape);
        let c = e.broadcast(&x[1], &out.shape);
        let power = e.op(self.hlo(), &[&a, &c], "", out);
        if *self != Binary::Pow || !out.dtype.is_signed_int() {
            return power;
        }
        // A negative integer exponent, written out: XLA's value for it differs between its
        // optimization levels (the quick tier gave 0 for (-1)^-1). The truncated value: 1 for
        // base 1, ±1 for base -1 (odd or even exponent), 0 for any other base.
        let (zero, one, minus_one, two) =
            (e.constant(out, 0.0), e.constant(out, 1.0), e.constant(out, -1.0), e.constant(out, 2.0));
        let rem = e.op("stablehlo.remainder", &[&c, &two], "", out);
        let odd = e.compare("NE", &rem, &zero);
        let sign = e.op("stablehlo.select", &[&odd, &minus_one, &one], "", out);
        let is_minus_one = e.compare("EQ", &a, &minus_one);
        let rest = e.op("stablehlo.select", &[&is_minus_one, &sign, &zero], "", out);
        let is_one = e.compare("EQ", &a, &one);
        let negative_power = e.op("stablehlo.select", &[&is_one, &one, &rest], "", out);
        let negative = e.compare("LT", &c, &zero);
        e.op("stablehlo.select", &[&negative, &negative_power, &power], "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>> {
        let (a, c) = (x[0], x[1]);
        let (ga, gc) = match self {
            Binary::Add => (g.clone(), g.clone()),
            Binary::Sub => (g.clone(), g.neg()?),
            Binary::Mul => (g.mul(c)?, g.mul(a)?),
            Binary::Div => (g.div(c)?, g.mul(out)?.div(c)?.neg()?),
            Binary::Pow => {
                // d/da a^c = c a^(c-1); d/dc a^c = a^c ln a (taken as 0 where a <= 0).
                let da = g.mul(c)?.mul(&a.pow(&c.sub_scalar(1.0)?)?)?;
                let positive = a.gt_scalar(0.0)?;
                let ln = positive.where_cond(&a.log()?, &a.zeros_like()?)?;
                (da, g.mul(out)?.mul(&ln)?)
            }
            Binary::Maximum | Binary::Minimum => {
                // The larger (smaller) input takes the gradient; ties split it, as torch.
                let wins = if *self == Binary::Maximum { a.gt(c)? } else { a.lt(c)? };
                let dt = g.dtype_of();
                let share = wins.to_dtype(dt)?.add(&a.eq(c)?.to_dtype(dt)?.mul_scalar(0.5)?)?;
                (g.mul(&share)?, g.mul(&share.neg()?.add_scalar(1.0)?)?)
            }
        };
        Ok(smallvec::smallvec![Some(ga.sum_to(a.shape_of())?), Some(gc.sum_to(c.shape_of())?)])
    }
}

impl OpDef for Compare {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn autocast_list(&self) -> AutocastList {
        AutocastList::Promote
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        Compare::name(*self)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 2)?;
        same_dtype(name, &inputs[0], &inputs[1])?;
        self.accepts().check(name, inputs[0].dtype)?;
        Ok(Spec { shape: broadcast(name, &inputs[0].shape, &inputs[1].shape)?, dtype: DType::Bool })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let a = e.broadcast(&x[0], &out.shape);
        let b = e.broadcast(&x[1], &out.shape);
        e.compare(self.hlo(), &a, &b)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        none(x.len()) // booleans carry no gradient
    }
}

/// `where(cond, a, b)`: `a` where `cond` is true, else `b`, broadcasting all three.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Where;

impl OpDef for Where {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[0])
    }
    fn autocast_list(&self) -> AutocastList {
        AutocastList::Promote
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        "where"
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 3)?;
        if inputs[0].dtype != DType::Bool {
            return Err(Error::dtype(name, format!("condition must be bool, got {}", inputs[0].dtype)));
        }
        same_dtype(name, &inputs[1], &inputs[2])?;
        let s = broadcast(name, &inputs[0].shape, &inputs[1].shape)?;
        Ok(Spec { shape: broadcast(name, &s, &inputs[2].shape)?, dtype: inputs[1].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let p = e.broadcast(&x[0], &out.shape);
        let a = e.broadcast(&x[1], &out.shape);
        let b = e.broadcast(&x[2], &out.shape);
        e.op("stablehlo.select", &[&p, &a, &b], "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        let zero = g.zeros_like()?;
        let ga = x[0].where_cond(g, &zero)?;
        let gb = x[0].where_cond(&zero, g)?;
        Ok(smallvec::smallvec![None, Some(ga.sum_to(x[1].shape_of())?), Some(gb.sum_to(x[2].shape_of())?)])
    }
}

/// The elements on and below (`upper: false`, torch's `tril`) or on and above (`triu`) the
/// `diagonal`-th diagonal of the last two dims (0 the main one, > 0 above it), zeros elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Triangle {
    /// Which diagonal: 0 the main one, > 0 above it, < 0 below.
    pub diagonal: i64,
    /// Whether to keep the upper triangle (`triu`) rather than the lower (`tril`).
    pub upper: bool,
}

impl OpDef for Triangle {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        if self.upper {
            "triu"
        } else {
            "tril"
        }
    }
    fn attrs(&self) -> String {
        format!("diagonal={}", self.diagonal)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        if inputs[0].rank() < 2 {
            let msg = format!("needs a tensor of rank >= 2 (a matrix or a batch of them), got {}", inputs[0]);
            return Err(Error::shape(self.name(), msg));
        }
        Ok(inputs[0].clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let r = out.rank();
        let (n, m) = (out.shape[r - 2], out.shape[r - 1]);
        let idx = Spec::new(&[n, m], DType::I64);
        let rows = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &idx);
        let cols = e.op("stablehlo.iota", &[], "iota_dimension = 1 : i64", &idx);
        // Kept where cols - rows <= diagonal (tril) or >= diagonal (triu).
        let offset = e.op("stablehlo.subtract", &[&cols, &rows], "", &idx);
        let diagonal = e.constant(&idx, self.diagonal as f64);
        let keep = e.compare(if self.upper { "GE" } else { "LE" }, &offset, &diagonal);
        let keep = e.broadcast(&keep, &out.shape);
        let zero = e.constant(out, 0.0);
        e.op("stablehlo.select", &[&keep, &x[0], &zero], "", out)
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(T::apply(Op::Triangle(self.clone()), &[g], None)?)
    }
}

/// Conversion to another dtype (XLA's `convert`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cast {
    /// The target dtype.
    pub to: DType,
}

impl OpDef for Cast {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn dim_sources(&self, inputs: &[Spec], output: &Spec) -> DimSources {
        broadcast_sources(inputs, output)
    }
    fn name(&self) -> &'static str {
        "cast"
    }
    fn attrs(&self) -> String {
        format!("to={}", self.to)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        Ok(Spec { shape: inputs[0].shape.clone(), dtype: self.to })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        e.op("stablehlo.convert", &[&x[0]], "", out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        if x[0].dtype_of().is_float() && g.dtype_of().is_float() {
            return one(g.to_dtype(x[0].dtype_of())?);
        }
        none(1) // to or from ints and bool: no gradient
    }
}

macro_rules! unary_builders {
    ($($method:ident => $variant:ident),* $(,)?) => {
        $(fn $method(&self) -> Result<Self> { Self::apply(Op::Unary(Unary::$variant), &[self], None) })*
    };
}

macro_rules! binary_builders {
    ($table:ident: $($method:ident, $scalar:ident => $variant:ident),* $(,)?) => {
        $(
            fn $method(&self, other: &Self) -> Result<Self> { Self::apply(Op::$table($table::$variant), &[self, other], None) }
            fn $scalar(&self, other: f64) -> Result<Self> {
                Self::apply(Op::$table($table::$variant), &[self, &self.scalar_like(other)?], None)
            }
        )*
    };
}

/// The elementwise ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait ElementwiseOps: Operand {
    unary_builders!(neg => Neg, abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, rsqrt => Rsqrt, tanh => Tanh,
        sigmoid => Sigmoid, sin => Sin, cos => Cos, relu => Relu, erf => Erf, log1p => Log1p, expm1 => Expm1,
        floor => Floor, ceil => Ceil, round => Round, sign => Sign);
    binary_builders!(Binary: add, add_scalar => Add, sub, sub_scalar => Sub, mul, mul_scalar => Mul, div, div_scalar => Div,
        pow, pow_scalar => Pow, maximum, maximum_scalar => Maximum, minimum, minimum_scalar => Minimum);
    binary_builders!(Compare: eq, eq_scalar => Eq, ne, ne_scalar => Ne, lt, lt_scalar => Lt, le, le_scalar => Le,
        gt, gt_scalar => Gt, ge, ge_scalar => Ge);

    fn tril(&self, diagonal: i64) -> Result<Self> {
        Self::apply(Op::Triangle(Triangle { diagonal, upper: false }), &[self], None)
    }

    fn triu(&self, diagonal: i64) -> Result<Self> {
        Self::apply(Op::Triangle(Triangle { diagonal, upper: true }), &[self], None)
    }

    /// `where(self, a, b)`.
    fn where_cond(&self, a: &Self, b: &Self) -> Result<Self> {
        Self::apply(Op::Where(Where), &[self, a, b], None)
    }

    fn to_dtype(&self, dtype: DType) -> Result<Self> {
        if dtype == self.dtype_of() {
            return Ok(self.clone());
        }
        Self::apply(Op::Cast(Cast { to: dtype }), &[self], None)
    }
}

impl<T: Operand> ElementwiseOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn a_unary_op_lowers_to_its_table_entry() {
        let m = module(Unary::Exp, &[f32s(&[2, 3])]);
        assert!(m.contains("\"stablehlo.exponential\"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>"), "{m}");
    }

    #[test]
    fn relu_is_the_maximum_with_zero() {
        let m = module(Unary::Relu, &[f32s(&[4])]);
        assert!(m.contains("stablehlo.constant") && m.contains("\"stablehlo.maximum\"(%arg0, %1)"), "{m}");
    }

    #[test]
    fn abs_of_unsigned_ints_is_the_value() {
        let m = module(Unary::Abs, &[Spec::new(&[3], DType::U8)]);
        assert!(!m.contains("stablehlo.abs") && m.contains("\"func.return\"(%arg0)"), "{m}");
    }

    #[test]
    fn binary_ops_broadcast_both_sides_to_the_result() {
        let m = module(Binary::Add, &[f32s(&[2, 1]), f32s(&[3])]);
        assert_eq!(m.matches("stablehlo.broadcast_in_dim").count(), 2, "{m}");
        assert!(m.contains("-> tensor<2x3xf32>"), "{m}");
    }

    #[test]
    fn signed_integer_powers_write_out_negative_exponents() {
        let i32s = Spec::new(&[3], DType::I32);
        let m = module(Binary::Pow, &[i32s.clone(), i32s]);
        assert!(m.contains("\"stablehlo.power\"") && m.contains("\"stablehlo.remainder\""), "{m}");
        assert_eq!(m.matches("\"stablehlo.select\"").count(), 4, "{m}");
        let m = module(Binary::Pow, &[f32s(&[3]), f32s(&[3])]);
        assert!(!m.contains("stablehlo.select"), "{m}");
    }

    #[test]
    fn comparisons_name_their_kind() {
        let m = module(Compare::Lt, &[Spec::new(&[2], DType::U32), Spec::new(&[2], DType::U32)]);
        assert!(m.contains("comparison_direction LT") && m.contains("comparison_type UNSIGNED"), "{m}");
        assert!(m.contains("tensor<2xi1>"), "{m}");
    }

    #[test]
    fn where_selects_after_broadcasting() {
        let m = module(Where, &[Spec::new(&[2, 2], DType::Bool), f32s(&[]), f32s(&[2, 2])]);
        assert!(m.contains("\"stablehlo.select\""), "{m}");
    }

    #[test]
    fn a_triangle_selects_by_the_offset_of_two_iotas() {
        let m = module(Triangle { diagonal: -1, upper: false }, &[f32s(&[2, 3, 4])]);
        assert!(m.contains("iota_dimension = 1") && m.contains("comparison_direction LE"), "{m}");
        assert!(m.contains("dense<-1> : tensor<3x4xi64>") && m.contains("\"stablehlo.select\""), "{m}");
        let e = Triangle { diagonal: 0, upper: true }.infer(&[f32s(&[3])]).unwrap_err().to_string();
        assert!(e.starts_with("triu: shape error"), "{e}");
    }

    #[test]
    fn new_unary_ops_lower_to_their_table_entries() {
        let m = module(Unary::Erf, &[f32s(&[2])]);
        assert!(m.contains("\"chlo.erf\"(%arg0)"), "{m}");
        let m = module(Unary::Round, &[f32s(&[2])]);
        assert!(m.contains("\"stablehlo.round_nearest_even\"(%arg0)"), "{m}");
        let m = module(Unary::Sign, &[Spec::new(&[2], DType::U8)]);
        assert!(!m.contains("stablehlo.sign") && m.contains("comparison_direction GT"), "{m}");
        let m = module(Unary::Sign, &[Spec::new(&[2], DType::I32)]);
        assert!(m.contains("\"stablehlo.sign\"(%arg0)"), "{m}");
    }

    #[test]
    fn a_cast_converts() {
        let m = module(Cast { to: DType::I32 }, &[f32s(&[2])]);
        assert!(m.contains("\"stablehlo.convert\"(%arg0) : (tensor<2xf32>) -> tensor<2xi32>"), "{m}");
    }

    #[test]
    fn dtype_rules_name_the_op() {
        let e = Unary::Exp.infer(&[Spec::new(&[2], DType::I32)]).unwrap_err().to_string();
        assert!(e.starts_with("exp: dtype error"), "{e}");
    }
}
