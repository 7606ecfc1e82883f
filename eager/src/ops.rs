//! Every op, defined once: its name, attributes, shape/dtype rule, StableHLO emission and
//! gradient rule. The cache keys on [`Op`] values, the profiler prints [`Op::name`], the
//! tensor API only builds `Op`s, autograd only calls [`Op::backward`], and compiled functions
//! emit each traced op with [`Op`]'s own emission: nothing else special-cases an op.

use std::fmt::Write as _;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{broadcast_shapes, broadcasts_to, Shape, Spec};
use crate::tensor::Tensor;

/// Dims of an attribute (inline up to 4).
pub type Dims = SmallVec<[usize; 4]>;

/// Which dtypes an elementwise op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepts {
    /// Floats only (transcendental functions).
    Float,
    /// Ints and floats, not bool.
    Numeric,
    /// Anything, bool included.
    Any,
}

impl Accepts {
    fn check(self, op: &'static str, dtype: DType) -> Result<()> {
        let ok = match self {
            Accepts::Float => dtype.is_float(),
            Accepts::Numeric => dtype != DType::Bool,
            Accepts::Any => true,
        };
        if ok {
            return Ok(());
        }
        let wanted = match self {
            Accepts::Float => "a floating-point tensor (f16, bf16, f32, f64)",
            _ => "a numeric tensor (not bool)",
        };
        Err(Error::dtype(op, format!("expected {wanted}, got {dtype}; convert with .to_dtype(..) first")))
    }
}

/// Defines an enum of elementwise ops from one table: variant, user-facing name, the
/// StableHLO op it lowers to, and the dtypes it takes.
macro_rules! elementwise {
    ($enum:ident { $($variant:ident => $name:literal, $hlo:literal, $accepts:ident;)* }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $enum { $($variant),* }
        impl $enum {
            pub const ALL: &'static [$enum] = &[$($enum::$variant),*];
            pub fn name(self) -> &'static str { match self { $($enum::$variant => $name),* } }
            fn hlo(self) -> &'static str { match self { $($enum::$variant => $hlo),* } }
            fn accepts(self) -> Accepts { match self { $($enum::$variant => Accepts::$accepts),* } }
        }
    };
}

elementwise!(Unary {
    Neg => "neg", "stablehlo.negate", Numeric;
    Abs => "abs", "stablehlo.abs", Numeric;
    Exp => "exp", "stablehlo.exponential", Float;
    Log => "log", "stablehlo.log", Float;
    Sqrt => "sqrt", "stablehlo.sqrt", Float;
    Rsqrt => "rsqrt", "stablehlo.rsqrt", Float;
    Tanh => "tanh", "stablehlo.tanh", Float;
    Sigmoid => "sigmoid", "stablehlo.logistic", Float;
    Sin => "sin", "stablehlo.sine", Float;
    Cos => "cos", "stablehlo.cosine", Float;
    // relu is max(x, 0): the op name here is the binary op it lowers to.
    Relu => "relu", "stablehlo.maximum", Numeric;
});

elementwise!(Binary {
    Add => "add", "stablehlo.add", Numeric;
    Sub => "sub", "stablehlo.subtract", Numeric;
    Mul => "mul", "stablehlo.multiply", Numeric;
    Div => "div", "stablehlo.divide", Numeric;
    Pow => "pow", "stablehlo.power", Numeric;
    Maximum => "maximum", "stablehlo.maximum", Numeric;
    Minimum => "minimum", "stablehlo.minimum", Numeric;
});

elementwise!(Compare {
    Eq => "eq", "EQ", Any;
    Ne => "ne", "NE", Any;
    Lt => "lt", "LT", Numeric;
    Le => "le", "LE", Numeric;
    Gt => "gt", "GT", Numeric;
    Ge => "ge", "GE", Numeric;
});

/// Reductions over dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

/// Distributions of on-device random numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dist {
    /// Uniform on [0, 1).
    Uniform,
    /// Standard normal.
    Normal,
}

/// An op with its attributes. Together with the input specs and the device it is the cache
/// key; attributes are only what changes the compiled program (values of scalars are inputs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    Unary(Unary),
    Binary(Binary),
    Compare(Compare),
    /// `where(cond, a, b)`, broadcasting all three.
    Where,
    /// Batched matrix product, `[..., m, k] x [..., k, n]` with broadcast batch dims.
    Matmul,
    /// Reduction over `dims` (sorted, unique, non-empty).
    Reduce { kind: Reduce, dims: Dims, keepdim: bool },
    Reshape(Shape),
    Permute(Dims),
    BroadcastTo(Shape),
    /// Strided slice of every dim.
    Slice { starts: Dims, limits: Dims, strides: Dims },
    /// Rows of input 0 along `dim` picked by the 1-D integer input 1; negative indices count
    /// from the end. With `check`, the module also returns a check of the indices (`IndexCheck`:
    /// for indices computed on the device; those from the host are checked before dispatch).
    IndexSelect { dim: usize, check: bool },
    Concat { dim: usize },
    Cast(DType),
    /// Broadcasts the scalar input to `shape` (zeros, ones, full).
    Fill(Shape),
    /// `start + step * [0, 1, …, n-1]`; start and step are scalar inputs.
    Arange { n: usize, dtype: DType },
    /// Identity-like `n x m` matrix.
    Eye { n: usize, m: usize, dtype: DType },
    /// Random numbers from the `u64[2]` state input (ThreeFry).
    Random { dist: Dist, shape: Shape, dtype: DType },
    /// Pads every dim with zeros: `low` before, `high` after and `interior` between elements
    /// (the transpose of a strided slice).
    Pad { low: Dims, high: Dims, interior: Dims },
    /// A call of a compiled function: one program of many ops (see [`crate::compile`]).
    Call(Arc<Program>),
}

/// What the check result of an op on indices computed on the device is about (`i64[2]`: the
/// position of the first index out of range, or -1, and that index). The runtime reads it
/// lazily, when a result that depends on the op is read, and reports a bad index as the op's
/// failure.
#[derive(Debug, Clone)]
pub(crate) struct IndexCheck {
    pub dim: usize,
    pub size: usize,
}

impl IndexCheck {
    /// The failure for a bad `index` (the same words as the check of host indices).
    pub(crate) fn message(&self, index: i64) -> String {
        format!("index {index} is out of range for dim {} of size {}", self.dim, self.size)
    }
}

/// A value of a traced program: a parameter, or the result of an op on earlier values.
#[derive(Debug, Clone)]
pub(crate) enum ValueDef {
    Param(usize),
    Op { op: Op, inputs: SmallVec<[usize; 3]> },
}

/// A compiled function's StableHLO module, with its signature.
#[derive(Debug)]
pub struct Program {
    pub name: &'static str,
    pub text: String,
    pub params: Vec<Spec>,
    pub outputs: Vec<Spec>,
    /// Ops traced into it.
    pub ops: usize,
    hash: u64,
}

impl PartialEq for Program {
    fn eq(&self, other: &Program) -> bool {
        std::ptr::eq(self, other) || (self.hash == other.hash && self.text == other.text)
    }
}
impl Eq for Program {}
impl std::hash::Hash for Program {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.hash.hash(h)
    }
}

impl Program {
    /// Emits the module of a traced function: `values` in order (parameters `0..params` among
    /// them), returning `outputs`. Each op is emitted by its own [`Op`] definition.
    pub(crate) fn new(name: &'static str, values: &[(ValueDef, Spec)], params: usize, outputs: &[usize], ops: usize) -> Program {
        let mut e = Emitter::default();
        let mut emitted: Vec<Value> = Vec::with_capacity(values.len());
        let mut param_specs = vec![Spec::new(&[], DType::F32); params];
        for (def, spec) in values {
            let v = match def {
                ValueDef::Param(i) => {
                    param_specs[*i] = spec.clone();
                    Value { name: format!("%arg{i}"), spec: spec.clone() }
                }
                ValueDef::Op { op, inputs } => {
                    let args: Vec<Value> = inputs.iter().map(|&i| emitted[i].clone()).collect();
                    op.emit(&mut e, &args, spec)
                }
            };
            emitted.push(v);
        }
        let out_specs: Vec<Spec> = outputs.iter().map(|&o| values[o].1.clone()).collect();
        let types: Vec<String> = out_specs.iter().map(Spec::mlir).collect();
        let names: Vec<&str> = outputs.iter().map(|&o| emitted[o].name.as_str()).collect();
        let args: Vec<String> = param_specs.iter().enumerate().map(|(i, s)| format!("%arg{i}: {}", s.mlir())).collect();
        let text = format!(
            "module @eager_{name} {{\n  func.func public @main({}) -> ({}) {{\n{}    \"func.return\"({}) : ({}) -> ()\n  }}\n}}\n",
            args.join(", "),
            types.join(", "),
            e.body,
            names.join(", "),
            types.join(", "),
        );
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        text.hash(&mut h);
        Program { name, text, params: param_specs, outputs: out_specs, ops, hash: h.finish() }
    }
}

fn check_arity(op: &'static str, inputs: &[Spec], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(Error::invalid(op, format!("expected {n} inputs, got {}", inputs.len())));
    }
    Ok(())
}

fn same_dtype(op: &'static str, a: &Spec, b: &Spec) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::dtype(op, format!("dtypes differ: {} vs {}; convert one with .to_dtype(..)", a.dtype, b.dtype)));
    }
    Ok(())
}

fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    broadcast_shapes(a, b)
        .ok_or_else(|| Error::shape(op, format!("shapes {a:?} and {b:?} cannot be broadcast together")))
}

impl Op {
    /// The op's name, as the profiler and errors print it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Where => "where",
            Op::Matmul => "matmul",
            Op::Reduce { kind, .. } => match kind {
                Reduce::Sum => "sum",
                Reduce::Mean => "mean",
                Reduce::Max => "max",
                Reduce::Min => "min",
                Reduce::ArgMax => "argmax",
                Reduce::ArgMin => "argmin",
            },
            Op::Reshape(_) => "reshape",
            Op::Permute(_) => "permute",
            Op::BroadcastTo(_) => "broadcast_to",
            Op::Slice { .. } => "slice",
            Op::IndexSelect { .. } => "index_select",
            Op::Concat { .. } => "concat",
            Op::Cast(_) => "cast",
            Op::Fill(_) => "full",
            Op::Arange { .. } => "arange",
            Op::Eye { .. } => "eye",
            Op::Random { dist: Dist::Uniform, .. } => "rand",
            Op::Random { dist: Dist::Normal, .. } => "randn",
            Op::Pad { .. } => "pad",
            Op::Call(p) => p.name,
        }
    }

    /// The attributes, as the profiler prints them (`dims=[1] keepdim`); empty if none.
    pub fn attrs(&self) -> String {
        match self {
            Op::Reduce { dims, keepdim, .. } => {
                format!("dims={:?}{}", dims.as_slice(), if *keepdim { " keepdim" } else { "" })
            }
            Op::Reshape(s) | Op::BroadcastTo(s) | Op::Fill(s) => format!("shape={:?}", s.as_slice()),
            Op::Permute(p) => format!("perm={:?}", p.as_slice()),
            Op::Slice { starts, limits, strides } => {
                format!("start={:?} limit={:?} stride={:?}", starts.as_slice(), limits.as_slice(), strides.as_slice())
            }
            Op::IndexSelect { dim, check } => format!("dim={dim}{}", if *check { " checked" } else { "" }),
            Op::Concat { dim } => format!("dim={dim}"),
            Op::Cast(d) => format!("to={d}"),
            Op::Arange { n, dtype } => format!("n={n} dtype={dtype}"),
            Op::Eye { n, m, dtype } => format!("n={n} m={m} dtype={dtype}"),
            Op::Random { shape, dtype, .. } => format!("shape={:?} dtype={dtype}", shape.as_slice()),
            Op::Pad { low, high, interior } => {
                format!("low={:?} high={:?} interior={:?}", low.as_slice(), high.as_slice(), interior.as_slice())
            }
            Op::Call(p) => format!("{} ops compiled into one", p.ops),
            _ => String::new(),
        }
    }

    /// The shape/dtype rule: checks the inputs and gives the output spec. Runs before
    /// anything reaches XLA, so bad input is an [`Error`], never an abort.
    pub fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        match self {
            Op::Unary(u) => {
                check_arity(name, inputs, 1)?;
                u.accepts().check(name, inputs[0].dtype)?;
                Ok(inputs[0].clone())
            }
            Op::Binary(b) => {
                check_arity(name, inputs, 2)?;
                same_dtype(name, &inputs[0], &inputs[1])?;
                b.accepts().check(name, inputs[0].dtype)?;
                Ok(Spec { shape: broadcast(name, &inputs[0].shape, &inputs[1].shape)?, dtype: inputs[0].dtype })
            }
            Op::Compare(c) => {
                check_arity(name, inputs, 2)?;
                same_dtype(name, &inputs[0], &inputs[1])?;
                c.accepts().check(name, inputs[0].dtype)?;
                Ok(Spec { shape: broadcast(name, &inputs[0].shape, &inputs[1].shape)?, dtype: DType::Bool })
            }
            Op::Where => {
                check_arity(name, inputs, 3)?;
                if inputs[0].dtype != DType::Bool {
                    return Err(Error::dtype(name, format!("condition must be bool, got {}", inputs[0].dtype)));
                }
                same_dtype(name, &inputs[1], &inputs[2])?;
                let s = broadcast(name, &inputs[0].shape, &inputs[1].shape)?;
                Ok(Spec { shape: broadcast(name, &s, &inputs[2].shape)?, dtype: inputs[1].dtype })
            }
            Op::Matmul => {
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
                    return Err(Error::shape(
                        name,
                        format!("inner dimensions differ: {a:?} x {b:?} ({k} != {k2})"),
                    ));
                }
                let mut shape = broadcast(name, &a[..a.len() - 2], &b[..b.len() - 2])?;
                shape.extend([m, n]);
                Ok(Spec { shape, dtype: inputs[0].dtype })
            }
            Op::Reduce { kind, dims, keepdim } => {
                check_arity(name, inputs, 1)?;
                let x = &inputs[0];
                if dims.is_empty() || dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= x.rank()) {
                    return Err(Error::invalid(name, format!("bad dims {:?} for a rank-{} tensor", dims.as_slice(), x.rank())));
                }
                let dtype = match kind {
                    Reduce::Mean => {
                        Accepts::Float.check(name, x.dtype)?;
                        x.dtype
                    }
                    Reduce::ArgMax | Reduce::ArgMin => {
                        Accepts::Numeric.check(name, x.dtype)?;
                        if dims.len() != 1 {
                            return Err(Error::invalid(name, "takes exactly one dim"));
                        }
                        if x.shape[dims[0]] == 0 {
                            return Err(Error::shape(name, "cannot take the arg of an empty dim"));
                        }
                        DType::I64
                    }
                    Reduce::Max | Reduce::Min => {
                        Accepts::Numeric.check(name, x.dtype)?;
                        // As torch: an empty dim has no max (XLA would give the identity, -inf).
                        if let Some(&d) = dims.iter().find(|&&d| x.shape[d] == 0) {
                            let msg = format!("cannot reduce over dim {d} of size 0: it has no {name}");
                            return Err(Error::shape(name, msg));
                        }
                        x.dtype
                    }
                    Reduce::Sum => {
                        Accepts::Numeric.check(name, x.dtype)?;
                        x.dtype
                    }
                };
                let shape = reduced_shape(&x.shape, dims, *keepdim);
                Ok(Spec { shape, dtype })
            }
            Op::Reshape(shape) => {
                check_arity(name, inputs, 1)?;
                let n: usize = shape.iter().product();
                if n != inputs[0].numel() {
                    return Err(Error::shape(
                        name,
                        format!("cannot reshape {:?} ({} elements) to {:?} ({n} elements)", inputs[0].shape.as_slice(), inputs[0].numel(), shape.as_slice()),
                    ));
                }
                Ok(Spec { shape: shape.clone(), dtype: inputs[0].dtype })
            }
            Op::Permute(perm) => {
                check_arity(name, inputs, 1)?;
                let x = &inputs[0];
                let mut seen = vec![false; x.rank()];
                if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true)) {
                    return Err(Error::invalid(name, format!("{:?} is not a permutation of the {} dims of {:?}", perm.as_slice(), x.rank(), x.shape.as_slice())));
                }
                Ok(Spec { shape: perm.iter().map(|&p| x.shape[p]).collect(), dtype: x.dtype })
            }
            Op::BroadcastTo(shape) => {
                check_arity(name, inputs, 1)?;
                if !broadcasts_to(&inputs[0].shape, shape) {
                    return Err(Error::shape(name, format!("cannot broadcast {:?} to {:?}", inputs[0].shape.as_slice(), shape.as_slice())));
                }
                Ok(Spec { shape: shape.clone(), dtype: inputs[0].dtype })
            }
            Op::Slice { starts, limits, strides } => {
                check_arity(name, inputs, 1)?;
                let x = &inputs[0];
                let r = x.rank();
                if starts.len() != r || limits.len() != r || strides.len() != r {
                    return Err(Error::invalid(name, format!("needs {r} starts, limits and strides")));
                }
                let mut shape = Shape::new();
                for d in 0..r {
                    if strides[d] == 0 || starts[d] > limits[d] || limits[d] > x.shape[d] {
                        return Err(Error::invalid(
                            name,
                            format!("range {}..{} step {} is out of bounds for dim {d} of size {}", starts[d], limits[d], strides[d], x.shape[d]),
                        ));
                    }
                    shape.push((limits[d] - starts[d]).div_ceil(strides[d]));
                }
                Ok(Spec { shape, dtype: x.dtype })
            }
            Op::IndexSelect { dim, .. } => {
                check_arity(name, inputs, 2)?;
                let (x, idx) = (&inputs[0], &inputs[1]);
                if *dim >= x.rank() {
                    return Err(Error::invalid(name, format!("dim {dim} out of range for rank {}", x.rank())));
                }
                if !matches!(idx.dtype, DType::I32 | DType::I64) || idx.rank() != 1 {
                    return Err(Error::dtype(name, format!("indices must be a 1-D i32 or i64 tensor, got {idx}")));
                }
                if x.shape[*dim] == 0 && idx.shape[0] > 0 {
                    return Err(Error::shape(name, "cannot select from an empty dim"));
                }
                let mut shape = x.shape.clone();
                shape[*dim] = idx.shape[0];
                Ok(Spec { shape, dtype: x.dtype })
            }
            Op::Concat { dim } => {
                if inputs.is_empty() {
                    return Err(Error::invalid(name, "needs at least one tensor"));
                }
                let first = &inputs[0];
                if *dim >= first.rank() {
                    return Err(Error::invalid(name, format!("dim {dim} out of range for rank {}", first.rank())));
                }
                let mut shape = first.shape.clone();
                shape[*dim] = 0;
                for x in inputs {
                    same_dtype(name, first, x)?;
                    let differs = x.rank() != first.rank()
                        || (0..x.rank()).any(|d| d != *dim && x.shape[d] != first.shape[d]);
                    if differs {
                        return Err(Error::shape(
                            name,
                            format!("shapes {:?} and {:?} differ outside dim {dim}", first.shape.as_slice(), x.shape.as_slice()),
                        ));
                    }
                    shape[*dim] += x.shape[*dim];
                }
                Ok(Spec { shape, dtype: first.dtype })
            }
            Op::Cast(to) => {
                check_arity(name, inputs, 1)?;
                Ok(Spec { shape: inputs[0].shape.clone(), dtype: *to })
            }
            Op::Fill(shape) => {
                check_arity(name, inputs, 1)?;
                if inputs[0].rank() != 0 {
                    return Err(Error::shape(name, "the fill value must be a scalar"));
                }
                Ok(Spec { shape: shape.clone(), dtype: inputs[0].dtype })
            }
            Op::Arange { n, dtype } => {
                check_arity(name, inputs, 2)?;
                Accepts::Numeric.check(name, *dtype)?;
                for s in inputs {
                    if s.rank() != 0 || s.dtype != *dtype {
                        return Err(Error::dtype(name, format!("start and step must be {dtype} scalars")));
                    }
                }
                Ok(Spec::new(&[*n], *dtype))
            }
            Op::Eye { n, m, dtype } => {
                check_arity(name, inputs, 0)?;
                Ok(Spec::new(&[*n, *m], *dtype))
            }
            Op::Random { shape, dtype, .. } => {
                check_arity(name, inputs, 1)?;
                Accepts::Float.check(name, *dtype)?;
                if inputs[0] != Spec::new(&[2], DType::U64) {
                    return Err(Error::invalid(name, "the state input must be u64[2]"));
                }
                Ok(Spec { shape: shape.clone(), dtype: *dtype })
            }
            Op::Pad { low, high, interior } => {
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
            Op::Call(p) => {
                if inputs.len() != p.params.len() || inputs.iter().zip(&p.params).any(|(a, b)| a != b) {
                    let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
                    let want: Vec<String> = p.params.iter().map(|s| s.to_string()).collect();
                    return Err(Error::shape(name, format!("compiled for ({}), called with ({})", want.join(", "), got.join(", "))));
                }
                Ok(p.outputs[0].clone())
            }
        }
    }

    /// The gradient rule: given the inputs, the output and the gradient `g` of a scalar
    /// with respect to the output, the gradient with respect to each input (`None` for an
    /// input no gradient flows to). Written with eager ops, so gradients run through the same
    /// single-op cache.
    pub(crate) fn backward(&self, x: &[&Tensor], out: &Tensor, g: &Tensor) -> Result<SmallVec<[Option<Tensor>; 3]>> {
        let one = |t: Tensor| -> Result<SmallVec<[Option<Tensor>; 3]>> { Ok(smallvec::smallvec![Some(t)]) };
        let none = || -> Result<SmallVec<[Option<Tensor>; 3]>> { Ok(x.iter().map(|_| None).collect()) };
        match self {
            Op::Unary(u) => one(match u {
                Unary::Neg => g.neg()?,
                Unary::Abs => g.mul(&sign(x[0])?)?,
                Unary::Exp => g.mul(out)?,
                Unary::Log => g.div(x[0])?,
                Unary::Sqrt => g.mul_scalar(0.5)?.div(out)?,
                Unary::Rsqrt => g.mul(&out.mul(out)?.mul(out)?)?.mul_scalar(-0.5)?,
                Unary::Tanh => g.mul(&out.mul(out)?.neg()?.add_scalar(1.0)?)?,
                Unary::Sigmoid => g.mul(&out.mul(&out.neg()?.add_scalar(1.0)?)?)?,
                Unary::Sin => g.mul(&x[0].cos()?)?,
                Unary::Cos => g.mul(&x[0].sin()?.neg()?)?,
                Unary::Relu => g.mul(&x[0].gt_scalar(0.0)?.to_dtype(g.dtype())?)?,
            }),
            Op::Binary(b) => {
                let (a, c) = (x[0], x[1]);
                let (ga, gc) = match b {
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
                        let wins = if *b == Binary::Maximum { a.gt(c)? } else { a.lt(c)? };
                        let dt = g.dtype();
                        let share = wins.to_dtype(dt)?.add(&a.eq(c)?.to_dtype(dt)?.mul_scalar(0.5)?)?;
                        (g.mul(&share)?, g.mul(&share.neg()?.add_scalar(1.0)?)?)
                    }
                };
                Ok(smallvec::smallvec![Some(sum_to(&ga, a.shape())?), Some(sum_to(&gc, c.shape())?)])
            }
            Op::Where => {
                let zero = g.zeros_like()?;
                let ga = x[0].where_cond(g, &zero)?;
                let gb = x[0].where_cond(&zero, g)?;
                Ok(smallvec::smallvec![None, Some(sum_to(&ga, x[1].shape())?), Some(sum_to(&gb, x[2].shape())?)])
            }
            Op::Matmul => {
                let ga = g.matmul(&x[1].t()?)?;
                let gb = x[0].t()?.matmul(g)?;
                Ok(smallvec::smallvec![Some(sum_to(&ga, x[0].shape())?), Some(sum_to(&gb, x[1].shape())?)])
            }
            Op::Reduce { kind, dims, keepdim } => {
                let shape = x[0].shape();
                let kept: Vec<isize> = shape.iter().enumerate().map(|(d, &s)| if dims.contains(&d) { 1 } else { s as isize }).collect();
                let g_kept = if *keepdim { g.clone() } else { g.reshape(&kept)? };
                match kind {
                    Reduce::Sum => one(g_kept.broadcast_to(shape)?),
                    Reduce::Mean => {
                        let count: usize = dims.iter().map(|&d| shape[d]).product();
                        one(g_kept.broadcast_to(shape)?.div_scalar(count as f64)?)
                    }
                    Reduce::Max | Reduce::Min => {
                        // Every element equal to the extreme shares the gradient evenly.
                        let extreme = if *keepdim { out.clone() } else { out.reshape(&kept)? };
                        let hit = x[0].eq(&extreme)?.to_dtype(g.dtype())?;
                        let dims_i: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
                        let count = hit.sum(&dims_i, true)?;
                        one(g_kept.div(&count)?.mul(&hit)?)
                    }
                    Reduce::ArgMax | Reduce::ArgMin => none(),
                }
            }
            Op::Reshape(_) => one(g.reshape(&signed(x[0].shape()))?),
            Op::Permute(p) => {
                let mut inverse = vec![0isize; p.len()];
                for (i, &d) in p.iter().enumerate() {
                    inverse[d] = i as isize;
                }
                one(g.permute(&inverse)?)
            }
            Op::BroadcastTo(_) => one(sum_to(g, x[0].shape())?),
            Op::Slice { starts, limits: _, strides } => {
                // Zeros everywhere but the sliced elements: pad the gradient back.
                let shape = x[0].shape();
                let low: Dims = starts.clone();
                let interior: Dims = strides.iter().map(|s| s - 1).collect();
                let high: Dims = (0..shape.len())
                    .map(|d| {
                        let n = g.shape()[d];
                        let covered = if n == 0 { 0 } else { starts[d] + (n - 1) * strides[d] + 1 };
                        shape[d] - covered.max(starts[d])
                    })
                    .collect();
                one(crate::runtime::dispatch(Op::Pad { low, high, interior }, &[g], None)?)
            }
            Op::Pad { low, high: _, interior } => {
                let shape = x[0].shape();
                let starts: Dims = low.clone();
                let strides: Dims = interior.iter().map(|i| i + 1).collect();
                let limits: Dims = (0..shape.len())
                    .map(|d| if shape[d] == 0 { low[d] } else { low[d] + (shape[d] - 1) * strides[d] + 1 })
                    .collect();
                one(crate::runtime::dispatch(Op::Slice { starts, limits, strides }, &[g], None)?)
            }
            Op::IndexSelect { dim, .. } => {
                // Scatter-add, composed: move `dim` first, multiply by the one-hot of the
                // indices (transposed), move it back.
                let (src, idx) = (x[0], x[1]);
                let n = src.shape()[*dim];
                let rank = src.rank();
                // The forward wrapped negative indices; so does the one-hot.
                let wrapped;
                let idx = match idx.host_bounds() {
                    Some((lo, _)) if lo >= 0 => idx,
                    _ => {
                        wrapped = idx.lt_scalar(0.0)?.where_cond(&idx.add_scalar(n as f64)?, idx)?;
                        &wrapped
                    }
                };
                let mut perm: Vec<isize> = vec![*dim as isize];
                perm.extend((0..rank as isize).filter(|&d| d != *dim as isize));
                let gp = g.permute(&perm)?;
                let k = gp.shape()[0];
                let rest: Vec<usize> = gp.shape()[1..].to_vec();
                let g2 = gp.reshape(&[k as isize, -1])?;
                let positions = Tensor::arange_on(0.0, n as f64, 1.0, idx.dtype(), idx.device())?;
                let onehot = idx.unsqueeze(1)?.eq(&positions.unsqueeze(0)?)?.to_dtype(g.dtype())?;
                let scattered = onehot.t()?.matmul(&g2)?;
                let mut full: Vec<isize> = vec![n as isize];
                full.extend(rest.iter().map(|&r| r as isize));
                let mut inverse = vec![0isize; rank];
                for (i, &d) in perm.iter().enumerate() {
                    inverse[d as usize] = i as isize;
                }
                Ok(smallvec::smallvec![Some(scattered.reshape(&full)?.permute(&inverse)?), None])
            }
            Op::Concat { dim } => {
                let mut start = 0;
                let mut grads = SmallVec::new();
                for t in x {
                    let len = t.shape()[*dim];
                    grads.push(Some(g.narrow(*dim as isize, start, len)?));
                    start += len;
                }
                Ok(grads)
            }
            Op::Cast(_) if x[0].dtype().is_float() && g.dtype().is_float() => one(g.to_dtype(x[0].dtype())?),
            Op::Fill(_) => one(g.sum_all()?),
            // No gradient: booleans, integers, indices, constants and random numbers.
            Op::Compare(_) | Op::Cast(_) | Op::Arange { .. } | Op::Eye { .. } | Op::Random { .. } => none(),
            Op::Call(p) => Err(Error::invalid(
                p.name,
                "cannot differentiate through a compiled function: call backward() inside it and return the gradients",
            )),
        }
    }

    /// The check the op's module returns after its result, if any (indices computed on the
    /// device: see [`IndexCheck`]).
    pub(crate) fn index_check(&self, inputs: &[&Tensor]) -> Option<IndexCheck> {
        match self {
            Op::IndexSelect { dim, check: true } => {
                Some(IndexCheck { dim: *dim, size: inputs[0].shape()[*dim] })
            }
            _ => None,
        }
    }

    /// Specs of the outputs after the first ([`Op::infer`] gives the first): only a compiled
    /// function's call has more than one.
    pub fn more_outputs(&self) -> &[Spec] {
        match self {
            Op::Call(p) => &p.outputs[1..],
            _ => &[],
        }
    }

    /// Emits the one-op StableHLO module for `inputs` giving `output` (as [`Op::infer`] said).
    pub fn emit_module(&self, inputs: &[Spec], output: &Spec) -> String {
        if let Op::Call(p) = self {
            return p.text.clone();
        }
        let mut e = Emitter::default();
        let args: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, s)| Value { name: format!("%arg{i}"), spec: s.clone() })
            .collect();
        let result = self.emit(&mut e, &args, output);
        debug_assert_eq!(&result.spec, output, "{}: emission and shape rule disagree", self.name());
        let params: Vec<String> = args.iter().map(|a| format!("{}: {}", a.name, a.spec.mlir())).collect();
        // The result, then any check results (see `index_check`).
        let results: Vec<&Value> = std::iter::once(&result).chain(&e.extra).collect();
        let names: Vec<&str> = results.iter().map(|v| v.name.as_str()).collect();
        let types: Vec<String> = results.iter().map(|v| v.spec.mlir()).collect();
        let out = if types.len() == 1 { types[0].clone() } else { format!("({})", types.join(", ")) };
        format!(
            concat!(
                "module @eager_{name} {{\n  func.func public @main({params}) -> {out} {{\n",
                "{body}    \"func.return\"({r}) : ({types}) -> ()\n  }}\n}}\n"
            ),
            name = self.name(),
            params = params.join(", "),
            body = e.body,
            r = names.join(", "),
            types = types.join(", "),
            out = out,
        )
    }

    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        match self {
            Op::Unary(Unary::Relu) => {
                let zero = e.constant(&x[0].spec, 0.0);
                e.op(Unary::Relu.hlo(), &[&x[0], &zero], "", out)
            }
            // stablehlo.abs takes no unsigned ints; their abs is the value itself.
            Op::Unary(Unary::Abs) if x[0].spec.dtype.is_int() && !x[0].spec.dtype.is_signed_int() => x[0].clone(),
            Op::Unary(u) => e.op(u.hlo(), &[&x[0]], "", out),
            Op::Binary(b) => {
                let a = e.broadcast(&x[0], &out.shape);
                let c = e.broadcast(&x[1], &out.shape);
                e.op(b.hlo(), &[&a, &c], "", out)
            }
            Op::Compare(c) => {
                let a = e.broadcast(&x[0], &out.shape);
                let b = e.broadcast(&x[1], &out.shape);
                e.compare(c.hlo(), &a, &b)
            }
            Op::Where => {
                let p = e.broadcast(&x[0], &out.shape);
                let a = e.broadcast(&x[1], &out.shape);
                let b = e.broadcast(&x[2], &out.shape);
                e.op("stablehlo.select", &[&p, &a, &b], "", out)
            }
            Op::Matmul => {
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
            Op::Reduce { kind, dims, keepdim } => {
                let flat = Spec { shape: reduced_shape(&x[0].spec.shape, dims, false), dtype: out.dtype };
                let r = match kind {
                    Reduce::Sum if accumulator(out.dtype) != out.dtype => {
                        // f16/bf16: accumulate in f32 and round once (as torch and JAX).
                        let wide = Spec { shape: x[0].spec.shape.clone(), dtype: accumulator(out.dtype) };
                        let v = e.op("stablehlo.convert", &[&x[0]], "", &wide);
                        let s = e.reduce(&v, dims, "stablehlo.add", 0.0);
                        e.op("stablehlo.convert", &[&s], "", &flat)
                    }
                    Reduce::Sum => e.reduce(&x[0], dims, "stablehlo.add", 0.0),
                    Reduce::Max => e.reduce(&x[0], dims, "stablehlo.maximum", lowest(x[0].spec.dtype)),
                    Reduce::Min => e.reduce(&x[0], dims, "stablehlo.minimum", highest(x[0].spec.dtype)),
                    Reduce::Mean => {
                        // f16/bf16: sum and divide in f32 (as torch does), so that neither the
                        // sum nor the count (inf in f16 past 65504) overflows.
                        let narrow = accumulator(out.dtype) != out.dtype;
                        let v = if narrow {
                            e.op("stablehlo.convert", &[&x[0]], "", &Spec { shape: x[0].spec.shape.clone(), dtype: DType::F32 })
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
                    Reduce::ArgMax => e.arg_reduce(&x[0], dims[0], "GT"),
                    Reduce::ArgMin => e.arg_reduce(&x[0], dims[0], "LT"),
                };
                if *keepdim {
                    e.op("stablehlo.reshape", &[&r], "", out)
                } else {
                    r
                }
            }
            Op::Reshape(_) => e.op("stablehlo.reshape", &[&x[0]], "", out),
            Op::Permute(p) => e.op("stablehlo.transpose", &[&x[0]], &format!("permutation = {}", i64_array(p)), out),
            Op::BroadcastTo(shape) | Op::Fill(shape) => e.broadcast(&x[0], shape),
            Op::Pad { low, high, interior } => {
                let zero = e.constant(&Spec::new(&[], out.dtype), 0.0);
                let attr = format!(
                    "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
                    i64_array(low),
                    i64_array(high),
                    i64_array(interior)
                );
                e.op("stablehlo.pad", &[&x[0], &zero], &attr, out)
            }
            Op::Call(_) => unreachable!("a compiled function's module is emitted whole by Program::new"),
            Op::Slice { starts, limits, strides } => e.op(
                "stablehlo.slice",
                &[&x[0]],
                &format!("start_indices = {}, limit_indices = {}, strides = {}", i64_array(starts), i64_array(limits), i64_array(strides)),
                out,
            ),
            Op::IndexSelect { dim, check } => {
                let (src, idx) = (&x[0], &x[1]);
                let n = idx.spec.shape[0];
                // Negative indices count from the end: idx < 0 ? idx + size : idx.
                let zero = e.constant(&idx.spec, 0.0);
                let size = e.constant(&idx.spec, src.spec.shape[*dim] as f64);
                let negative = e.compare("LT", idx, &zero);
                let shifted = e.op("stablehlo.add", &[idx, &size], "", &idx.spec);
                let wrapped = e.op("stablehlo.select", &[&negative, &shifted, idx], "", &idx.spec);
                if *check {
                    let flag = e.index_check(&wrapped, idx, &size);
                    e.extra.push(flag);
                }
                let idx2 = e.op("stablehlo.reshape", &[&wrapped], "", &Spec::new(&[n, 1], idx.spec.dtype));
                let offset: Vec<usize> = (0..src.spec.rank()).filter(|d| d != dim).collect();
                let mut sizes: Dims = src.spec.shape.clone().into_iter().collect();
                sizes[*dim] = 1;
                let attr = format!(
                    "dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{dim}], start_index_map = [{dim}], index_vector_dim = 1>, slice_sizes = {}, indices_are_sorted = false",
                    list(offset),
                    i64_array(&sizes)
                );
                e.op("stablehlo.gather", &[src, &idx2], &attr, out)
            }
            Op::Concat { dim } => {
                let refs: Vec<&Value> = x.iter().collect();
                e.op("stablehlo.concatenate", &refs, &format!("dimension = {dim} : i64"), out)
            }
            Op::Cast(_) => e.op("stablehlo.convert", &[&x[0]], "", out),
            Op::Arange { .. } => {
                let iota = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", out);
                let start = e.broadcast(&x[0], &out.shape);
                let step = e.broadcast(&x[1], &out.shape);
                let scaled = e.op("stablehlo.multiply", &[&iota, &step], "", out);
                e.op("stablehlo.add", &[&scaled, &start], "", out)
            }
            Op::Eye { n, m, .. } => {
                let idx = Spec::new(&[*n, *m], DType::I64);
                let rows = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &idx);
                let cols = e.op("stablehlo.iota", &[], "iota_dimension = 1 : i64", &idx);
                let diag = e.compare("EQ", &rows, &cols);
                e.op("stablehlo.convert", &[&diag], "", out)
            }
            Op::Random { dist, shape, dtype } => {
                // Generate in f32 (f64 for f64 outputs), then convert.
                let work = if *dtype == DType::F64 { DType::F64 } else { DType::F32 };
                let r = match dist {
                    Dist::Uniform => {
                        let u = e.uniform(&x[0], shape, work);
                        // f16/bf16 would round values just below 1 up to 1: floor onto the
                        // output's grid of 2^-digits first (as torch does), which it holds exactly.
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
                        let u = e.uniform(&x[0], &two, work);
                        let spec = Spec { shape: shape.clone(), dtype: work };
                        let rank = shape.len();
                        let mut starts: Dims = smallvec::smallvec![0; rank + 1];
                        let mut limits: Dims = std::iter::once(1).chain(shape.iter().copied()).collect();
                        let strides: Dims = smallvec::smallvec![1; rank + 1];
                        let half_spec = Spec { shape: limits.iter().copied().collect(), dtype: work };
                        let slice_attr = |s: &Dims, l: &Dims| {
                            format!("start_indices = {}, limit_indices = {}, strides = {}", i64_array(s), i64_array(l), i64_array(&strides))
                        };
                        let u1 = e.op("stablehlo.slice", &[&u], &slice_attr(&starts, &limits), &half_spec);
                        starts[0] = 1;
                        limits[0] = 2;
                        let u2 = e.op("stablehlo.slice", &[&u], &slice_attr(&starts, &limits), &half_spec);
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
                if work == *dtype {
                    r
                } else {
                    e.op("stablehlo.convert", &[&r], "", out)
                }
            }
        }
    }
}

/// Sums `g` down to `shape`, undoing NumPy broadcasting (leading dims and dims of size 1).
fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.rank() - shape.len();
    let dims: Vec<isize> = (0..g.rank())
        .filter(|&d| d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1))
        .map(|d| d as isize)
        .collect();
    let summed = if dims.is_empty() { g.clone() } else { g.sum(&dims, true)? };
    summed.reshape(&signed(shape))
}

/// -1, 0 or 1 by the sign of each element (0 at 0), in `x`'s dtype.
fn sign(x: &Tensor) -> Result<Tensor> {
    let dt = x.dtype();
    x.gt_scalar(0.0)?.to_dtype(dt)?.sub(&x.lt_scalar(0.0)?.to_dtype(dt)?)
}

fn signed(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

/// Shape after reducing `dims` (kept as size 1 with `keepdim`).
fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Shape {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &s)| match (dims.contains(&d), keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// The dtype sums and products of `d` accumulate in: f32 for f16 and bf16, else `d` itself.
fn accumulator(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
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

fn list(items: impl IntoIterator<Item = usize>) -> String {
    items.into_iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

fn i64_array(items: &[usize]) -> String {
    if items.is_empty() {
        "array<i64>".into()
    } else {
        format!("array<i64: {}>", list(items.iter().copied()))
    }
}

/// A literal of `dtype` for a `dense<…>` attribute: floats as exact bit patterns.
pub(crate) fn literal(dtype: DType, v: f64) -> String {
    match dtype {
        DType::F64 => format!("0x{:016X}", v.to_bits()),
        DType::F32 => format!("0x{:08X}", (v as f32).to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(v).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(v).to_bits()),
        DType::Bool => (if v != 0.0 { "true" } else { "false" }).into(),
        DType::I64 if v <= i64::MIN as f64 => i64::MIN.to_string(),
        DType::I64 if v >= i64::MAX as f64 => i64::MAX.to_string(),
        DType::U64 if v >= u64::MAX as f64 => u64::MAX.to_string(),
        _ => format!("{}", v as i128),
    }
}

/// An SSA value of the module being emitted.
#[derive(Debug, Clone)]
struct Value {
    name: String,
    spec: Spec,
}

/// Writes StableHLO in MLIR's generic op form, which every StableHLO version parses.
#[derive(Default)]
struct Emitter {
    body: String,
    next: usize,
    /// Check results returned after the op's result (one-op modules only).
    extra: Vec<Value>,
}

impl Emitter {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%{}", self.next)
    }

    /// `%n = "op"(inputs) {attrs} : (input types) -> out`.
    fn op(&mut self, op: &str, inputs: &[&Value], attrs: &str, out: &Spec) -> Value {
        let name = self.fresh();
        let names: Vec<&str> = inputs.iter().map(|v| v.name.as_str()).collect();
        let types: Vec<String> = inputs.iter().map(|v| v.spec.mlir()).collect();
        let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
        let _ = writeln!(
            self.body,
            "    {name} = \"{op}\"({}){attrs} : ({}) -> {}",
            names.join(", "),
            types.join(", "),
            out.mlir()
        );
        Value { name, spec: out.clone() }
    }

    /// A splat constant of `spec`'s shape and dtype.
    fn constant(&mut self, spec: &Spec, v: f64) -> Value {
        let attr = format!("value = dense<{}> : {}", literal(spec.dtype, v), spec.mlir());
        self.op("stablehlo.constant", &[], &attr, spec)
    }

    /// NumPy broadcast of `v` to `shape` (a no-op when the shape already matches).
    fn broadcast(&mut self, v: &Value, shape: &[usize]) -> Value {
        if v.spec.shape.as_slice() == shape {
            return v.clone();
        }
        let offset = shape.len() - v.spec.rank();
        let attr = format!("broadcast_dimensions = {}", i64_array(&(offset..shape.len()).collect::<Vec<_>>()));
        self.op("stablehlo.broadcast_in_dim", &[v], &attr, &Spec { shape: shape.into(), dtype: v.spec.dtype })
    }

    fn compare(&mut self, direction: &str, a: &Value, b: &Value) -> Value {
        let d = a.spec.dtype;
        let kind = if d.is_float() {
            "FLOAT"
        } else if d.is_signed_int() {
            "SIGNED"
        } else {
            "UNSIGNED"
        };
        let attr = format!(
            "comparison_direction = #stablehlo<comparison_direction {direction}>, compare_type = #stablehlo<comparison_type {kind}>"
        );
        self.op("stablehlo.compare", &[a, b], &attr, &Spec { shape: a.spec.shape.clone(), dtype: DType::Bool })
    }

    /// `reduce` of `x` over `dims` with the binary `combine` op and its identity `init`.
    fn reduce(&mut self, x: &Value, dims: &[usize], combine: &str, init: f64) -> Value {
        let scalar = Spec::new(&[], x.spec.dtype);
        let init = self.constant(&scalar, init);
        let out = Spec { shape: reduced_shape(&x.spec.shape, dims, false), dtype: x.spec.dtype };
        let name = self.fresh();
        let (a, b, r) = (self.fresh(), self.fresh(), self.fresh());
        let t = scalar.mlir();
        let _ = write!(
            self.body,
            "    {name} = \"stablehlo.reduce\"({x}, {init}) ({{\n    ^bb0({a}: {t}, {b}: {t}):\n      {r} = \"{combine}\"({a}, {b}) : ({t}, {t}) -> {t}\n      \"stablehlo.return\"({r}) : ({t}) -> ()\n    }}) {{dimensions = {dims}}} : ({xt}, {t}) -> {ot}\n",
            x = x.name,
            init = init.name,
            dims = i64_array(dims),
            xt = x.spec.mlir(),
            ot = out.mlir(),
        );
        Value { name, spec: out }
    }

    /// Index of the max (`GT`) or min (`LT`) along `dim`, the first on ties. NaN counts as the
    /// extreme either way (the first NaN wins), as in torch and NumPy.
    fn arg_reduce(&mut self, x: &Value, dim: usize, direction: &str) -> Value {
        let d = x.spec.dtype;
        let idx_spec = Spec { shape: x.spec.shape.clone(), dtype: DType::I64 };
        let iota = self.op("stablehlo.iota", &[], &format!("iota_dimension = {dim} : i64"), &idx_spec);
        let vs = Spec::new(&[], d);
        let is = Spec::new(&[], DType::I64);
        let init_v = self.constant(&vs, if direction == "GT" { lowest(d) } else { highest(d) });
        let init_i = self.constant(&is, 0.0);
        let out_v = Spec { shape: reduced_shape(&x.spec.shape, &[dim], false), dtype: d };
        let out_i = Spec { shape: out_v.shape.clone(), dtype: DType::I64 };
        let name = self.fresh();
        let (av, ai, bv, bi) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let _ = writeln!(
            self.body,
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
        let better = self.compare(direction, &av_, &bv_);
        let equal = self.compare("EQ", &av_, &bv_);
        let earlier = self.compare("LT", &ai_, &bi_);
        let bs = Spec::new(&[], DType::Bool);
        let tie = self.op("stablehlo.and", &[&equal, &earlier], "", &bs);
        let mut take = self.op("stablehlo.or", &[&better, &tie], "", &bs);
        if d.is_float() {
            // With a NaN on either side, a wins if it is NaN and b is not, or both are and a is earlier.
            let a_nan = self.compare("NE", &av_, &av_);
            let b_nan = self.compare("NE", &bv_, &bv_);
            let any_nan = self.op("stablehlo.or", &[&a_nan, &b_nan], "", &bs);
            let b_num = self.op("stablehlo.not", &[&b_nan], "", &bs);
            let b_loses = self.op("stablehlo.or", &[&b_num, &earlier], "", &bs);
            let a_wins = self.op("stablehlo.and", &[&a_nan, &b_loses], "", &bs);
            take = self.op("stablehlo.select", &[&any_nan, &a_wins, &take], "", &bs);
        }
        let rv = self.op("stablehlo.select", &[&take, &av_, &bv_], "", &vs);
        let ri = self.op("stablehlo.select", &[&take, &ai_, &bi_], "", &is);
        let _ = write!(
            self.body,
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

    /// The [`IndexCheck`] result, `i64[2]`: the position of the first of the `wrapped` indices
    /// outside `[0, size)`, or -1, and that index as given (`raw`).
    fn index_check(&mut self, wrapped: &Value, raw: &Value, size: &Value) -> Value {
        let k = raw.spec.shape[0];
        let zero = self.constant(&wrapped.spec, 0.0);
        let below = self.compare("LT", wrapped, &zero);
        let above = self.compare("GE", wrapped, size);
        let bad = self.op("stablehlo.or", &[&below, &above], "", &below.spec);
        let ks = Spec::new(&[k], DType::I64);
        let iota = self.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &ks);
        let none = self.constant(&ks, k as f64);
        let keys = self.op("stablehlo.select", &[&bad, &iota, &none], "", &ks);
        let values = match raw.spec.dtype {
            DType::I64 => raw.clone(),
            _ => self.op("stablehlo.convert", &[raw], "", &ks),
        };
        // The smallest key (position) and its index, as one reduce of the pairs.
        let s = Spec::new(&[], DType::I64);
        let (init_k, init_v) = (self.constant(&s, k as f64), self.constant(&s, 0.0));
        let name = self.fresh();
        let (ak, av, bk, bv) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let t = s.mlir();
        let _ = writeln!(
            self.body,
            concat!(
                "    {name}:2 = \"stablehlo.reduce\"({}, {}, {}, {}) ({{\n",
                "    ^bb0({ak}: {t}, {av}: {t}, {bk}: {t}, {bv}: {t}):"
            ),
            keys.name,
            values.name,
            init_k.name,
            init_v.name,
            name = name,
            ak = ak,
            av = av,
            bk = bk,
            bv = bv,
            t = t,
        );
        let v = |n: &str| Value { name: n.to_string(), spec: s.clone() };
        let first = self.compare("LE", &v(&ak), &v(&bk));
        let rk = self.op("stablehlo.select", &[&first, &v(&ak), &v(&bk)], "", &s);
        let rv = self.op("stablehlo.select", &[&first, &v(&av), &v(&bv)], "", &s);
        let _ = write!(
            self.body,
            concat!(
                "      \"stablehlo.return\"({}, {}) : ({t}, {t}) -> ()\n",
                "    }}) {{dimensions = array<i64: 0>}} : ({kt}, {kt}, {t}, {t}) -> ({t}, {t})\n"
            ),
            rk.name,
            rv.name,
            kt = ks.mlir(),
            t = t,
        );
        let (pos, index) = (v(&format!("{name}#0")), v(&format!("{name}#1")));
        let found = self.compare("LT", &pos, &init_k);
        let minus_one = self.constant(&s, -1.0);
        let pos = self.op("stablehlo.select", &[&found, &pos, &minus_one], "", &s);
        let one = Spec::new(&[1], DType::I64);
        let pos = self.op("stablehlo.reshape", &[&pos], "", &one);
        let index = self.op("stablehlo.reshape", &[&index], "", &one);
        self.op("stablehlo.concatenate", &[&pos, &index], "dimension = 0 : i64", &Spec::new(&[2], DType::I64))
    }

    /// Uniform numbers in [0, 1) of `shape` and float `dtype` (f32 or f64) from the ThreeFry
    /// state: random mantissa bits under exponent 0 give [1, 2), minus one.
    fn uniform(&mut self, state: &Value, shape: &[usize], dtype: DType) -> Value {
        let (bits_t, shift, one_bits) = match dtype {
            DType::F64 => (DType::U64, 12.0, 0x3FF0_0000_0000_0000u64 as f64),
            _ => (DType::U32, 9.0, 0x3F80_0000u32 as f64),
        };
        let bits_spec = Spec { shape: shape.into(), dtype: bits_t };
        let name = self.fresh();
        let _ = writeln!(
            self.body,
            "    {name}:2 = \"stablehlo.rng_bit_generator\"({}) {{rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>}} : ({}) -> ({}, {})",
            state.name,
            state.spec.mlir(),
            state.spec.mlir(),
            bits_spec.mlir()
        );
        let bits = Value { name: format!("{name}#1"), spec: bits_spec.clone() };
        let sh = self.constant(&bits_spec, shift);
        let mantissa = self.op("stablehlo.shift_right_logical", &[&bits, &sh], "", &bits_spec);
        let one = self.constant(&bits_spec, one_bits);
        let with_exp = self.op("stablehlo.or", &[&mantissa, &one], "", &bits_spec);
        let f_spec = Spec { shape: shape.into(), dtype };
        let f = self.op("stablehlo.bitcast_convert", &[&with_exp], "", &f_spec);
        let onef = self.constant(&f_spec, 1.0);
        self.op("stablehlo.subtract", &[&f, &onef], "", &f_spec)
    }
}
