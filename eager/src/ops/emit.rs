//! The StableHLO emitter every op writes through, in MLIR's generic op form (which every
//! StableHLO version parses), and the one module template of a one-op program.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::shape::{reduced_shape, Spec};

use super::Op;

/// An SSA value of the module being emitted.
#[derive(Debug, Clone)]
pub(crate) struct Value {
    pub(crate) name: String,
    pub(crate) spec: Spec,
}

/// Writes the body of a module, one op per line.
#[derive(Default)]
pub(crate) struct Emitter {
    pub(crate) body: String,
    next: usize,
    /// Check results returned after the op's result (one-op modules only).
    pub(crate) extra: Vec<Value>,
}

impl Emitter {
    /// A fresh SSA name.
    pub(crate) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%{}", self.next)
    }

    /// `%n = "op"(inputs) {attrs} : (input types) -> out`.
    pub(crate) fn op(&mut self, op: &str, inputs: &[&Value], attrs: &str, out: &Spec) -> Value {
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
    pub(crate) fn constant(&mut self, spec: &Spec, v: f64) -> Value {
        let attr = format!("value = dense<{}> : {}", literal(spec.dtype, v), spec.mlir());
        self.op("stablehlo.constant", &[], &attr, spec)
    }

    /// NumPy broadcast of `v` to `shape` (a no-op when the shape already matches).
    pub(crate) fn broadcast(&mut self, v: &Value, shape: &[usize]) -> Value {
        if v.spec.shape.as_slice() == shape {
            return v.clone();
        }
        let offset = shape.len() - v.spec.rank();
        let attr =
            format!("broadcast_dimensions = {}", i64_array(&(offset..shape.len()).collect::<Vec<_>>()));
        self.op("stablehlo.broadcast_in_dim", &[v], &attr, &Spec { shape: shape.into(), dtype: v.spec.dtype })
    }

    /// `a <direction> b` elementwise (`EQ`, `LT`, …), compared as the dtype's kind.
    pub(crate) fn compare(&mut self, direction: &str, a: &Value, b: &Value) -> Value {
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
        self.op(
            "stablehlo.compare",
            &[a, b],
            &attr,
            &Spec { shape: a.spec.shape.clone(), dtype: DType::Bool },
        )
    }

    /// `reduce` of `x` over `dims` with the binary `combine` op and its identity `init`.
    pub(crate) fn reduce(&mut self, x: &Value, dims: &[usize], combine: &str, init: f64) -> Value {
        let init = self.constant(&Spec::new(&[], x.spec.dtype), init);
        let out = Spec { shape: reduced_shape(&x.spec.shape, dims, false), dtype: x.spec.dtype };
        let attrs = format!("dimensions = {}", i64_array(dims));
        self.with_combine("stablehlo.reduce", &[x, &init], combine, &attrs, &out)
    }

    /// `reduce_window` of `x` with the binary `combine` op from its identity `init`; `attrs`
    /// are the window's (dimensions, strides, padding).
    pub(crate) fn reduce_window(
        &mut self,
        x: &Value,
        combine: &str,
        init: f64,
        attrs: &str,
        out: &Spec,
    ) -> Value {
        let init = self.constant(&Spec::new(&[], x.spec.dtype), init);
        self.with_combine("stablehlo.reduce_window", &[x, &init], combine, attrs, out)
    }

    /// `%n = "op"(operands) ({ region: combine two scalars of out's dtype }) {attrs} : (types)
    /// -> out`: the form of reduce, reduce_window and scatter.
    pub(crate) fn with_combine(
        &mut self,
        op: &str,
        operands: &[&Value],
        combine: &str,
        attrs: &str,
        out: &Spec,
    ) -> Value {
        let name = self.fresh();
        let (a, b, r) = (self.fresh(), self.fresh(), self.fresh());
        let t = Spec::new(&[], out.dtype).mlir();
        let names: Vec<&str> = operands.iter().map(|v| v.name.as_str()).collect();
        let types: Vec<String> = operands.iter().map(|v| v.spec.mlir()).collect();
        let _ = write!(
            self.body,
            concat!(
                "    {name} = \"{op}\"({names}) ({{\n",
                "    ^bb0({a}: {t}, {b}: {t}):\n",
                "      {r} = \"{combine}\"({a}, {b}) : ({t}, {t}) -> {t}\n",
                "      \"stablehlo.return\"({r}) : ({t}) -> ()\n",
                "    }}) {{{attrs}}} : ({types}) -> {out}\n"
            ),
            name = name,
            op = op,
            names = names.join(", "),
            a = a,
            b = b,
            r = r,
            t = t,
            combine = combine,
            attrs = attrs,
            types = types.join(", "),
            out = out.mlir(),
        );
        Value { name, spec: out.clone() }
    }
}

/// The module of one op: `main` takes `inputs` and returns the op's result, then any check
/// results it emitted (see [`super::IndexCheck`]).
pub(crate) fn one_op_module(op: &Op, inputs: &[Spec], output: &Spec) -> String {
    let mut e = Emitter::default();
    let args: Vec<Value> =
        inputs.iter().enumerate().map(|(i, s)| Value { name: format!("%arg{i}"), spec: s.clone() }).collect();
    let result = op.emit(&mut e, &args, output);
    debug_assert_eq!(&result.spec, output, "{}: emission and shape rule disagree", op.name());
    let results: Vec<Value> = std::iter::once(result).chain(std::mem::take(&mut e.extra)).collect();
    module(op.name(), inputs, &[], &results, &e.body)
}

/// The module template every program uses: `@main(params) -> results { body; return }`.
/// Each `(param, result)` of `aliases` says that the result may be written into the
/// parameter's buffer when the caller donates it (`tf.aliasing_output`, as JAX's
/// `donate_argnums` emits): XLA then updates it in place.
pub(crate) fn module(
    name: &str,
    params: &[Spec],
    aliases: &[(usize, usize)],
    results: &[Value],
    body: &str,
) -> String {
    let params: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, s)| match aliases.iter().find(|(p, _)| *p == i) {
            Some((_, r)) => format!("%arg{i}: {} {{tf.aliasing_output = {r} : i32}}", s.mlir()),
            None => format!("%arg{i}: {}", s.mlir()),
        })
        .collect();
    let names: Vec<&str> = results.iter().map(|v| v.name.as_str()).collect();
    let types: Vec<String> = results.iter().map(|v| v.spec.mlir()).collect();
    let out = if types.len() == 1 { types[0].clone() } else { format!("({})", types.join(", ")) };
    format!(
        concat!(
            "module @eager_{name} {{\n  func.func public @main({params}) -> {out} {{\n",
            "{body}    \"func.return\"({r}) : ({types}) -> ()\n  }}\n}}\n"
        ),
        name = name,
        params = params.join(", "),
        out = out,
        body = body,
        r = names.join(", "),
        types = types.join(", "),
    )
}

/// A one-op module (as [`module`] writes it) as an SPMD program over `partitions` devices:
/// the module declares the mesh (`mesh`, a Shardy `sdy.mesh` op) and the partition count,
/// each argument and result its Shardy sharding (`params[i]`, `results[i]`: spec and
/// annotation) for XLA's partitioner.
pub(crate) fn partitioned(
    module: &str,
    mesh: &str,
    partitions: usize,
    params: &[(&Spec, &str)],
    results: &[(&Spec, &str)],
) -> String {
    let mut lines = module.splitn(3, '\n');
    let (head, _func, rest) = (lines.next().unwrap_or(""), lines.next(), lines.next().unwrap_or(""));
    let name = head.trim_end_matches(" {");
    let params: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, (s, h))| format!("%arg{i}: {} {{sdy.sharding = {h}}}", s.mlir()))
        .collect();
    let results: Vec<String> =
        results.iter().map(|(s, h)| format!("{} {{sdy.sharding = {h}}}", s.mlir())).collect();
    format!(
        "{name} attributes {{mhlo.num_partitions = {partitions} : i32, mhlo.num_replicas = 1 : i32}} {{\n  {mesh}\n  func.func public @main({}) -> ({}) {{\n{rest}",
        params.join(", "),
        results.join(", "),
    )
}

/// The first array type of a module's text too large for XLA to size (more than `i64::MAX`
/// elements or bytes), as written (`tensor<1073741824x1073741824xi64>`): the last guard before a
/// compile, for intermediates no op's shape rule sees (an `eye`'s index grid, random bits).
pub(crate) fn oversized_array(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(at) = rest.find("tensor<") {
        let ty = &rest[at..];
        let end = ty.find('>').map_or(ty.len(), |e| e + 1);
        let (whole, inner) = (&ty[..end], ty[7..end].trim_end_matches('>'));
        rest = &ty[end..];
        let mut parts: Vec<&str> = inner.split('x').collect();
        let element = parts.pop().unwrap_or("");
        let bytes = match element {
            "i1" | "i8" | "ui8" => 1u128,
            "f16" | "bf16" | "i16" | "ui16" => 2,
            "f32" | "i32" | "ui32" => 4,
            _ => 8,
        };
        let fits = |n: u128| n <= i64::MAX as u128;
        let dim = |d: &&str| d.parse::<u128>().ok().filter(|&d| fits(d));
        let size = parts.iter().try_fold(1u128, |n, d| n.checked_mul(dim(d)?));
        match size {
            Some(n) if fits(n) && n.checked_mul(bytes).is_some_and(fits) => {}
            // Not a static shape (none is emitted): left to XLA.
            None if parts.iter().any(|d| d.parse::<u128>().is_err()) => {}
            _ => return Some(whole),
        }
    }
    None
}

pub(crate) fn list(items: impl IntoIterator<Item = usize>) -> String {
    items.into_iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

/// `array<i64: 1, 2>` (`array<i64>` when empty).
pub(crate) fn i64_array(items: &[usize]) -> String {
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

/// The accumulation dtype of sums and products of `d`: f32 for f16 and bf16, else `d`.
pub(crate) fn accumulator(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_past_what_xla_sizes_are_found_in_the_text() {
        let ok = "%0 = \"stablehlo.iota\"() : () -> tensor<1073741824x2xi64>";
        assert_eq!(oversized_array(ok), None);
        // 2^30 x 2^30 i64 is 2^63 bytes: one past i64::MAX.
        let eye = "(tensor<f32>) -> tensor<1073741824x1073741824xi64>";
        assert_eq!(oversized_array(eye), Some("tensor<1073741824x1073741824xi64>"));
        assert_eq!(oversized_array("tensor<1073741824x1073741824xi1>"), None);
        let wrapped = "tensor<0x18446744073709551615xf32>";
        assert_eq!(oversized_array(wrapped), Some(wrapped));
        assert!(oversized_array("tensor<18446744073709551615x18446744073709551615xf32>").is_some());
        assert_eq!(oversized_array("tensor<?x3xf32>"), None);
    }

    #[test]
    fn literals_are_exact_bit_patterns() {
        assert_eq!(literal(DType::F32, 1.0), "0x3F800000");
        assert_eq!(literal(DType::F16, 1.0), "0x3C00");
        assert_eq!(literal(DType::Bool, 2.0), "true");
        assert_eq!(literal(DType::I64, -1e300), i64::MIN.to_string());
    }

    #[test]
    fn the_module_template_returns_every_result() {
        let r = Value { name: "%1".into(), spec: Spec::new(&[2], DType::F32) };
        let m = module("x", &[Spec::new(&[2], DType::F32)], &[], &[r.clone(), r.clone()], "");
        assert!(m.contains("@main(%arg0: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)"), "{m}");
        let m = module("x", &[Spec::new(&[2], DType::F32)], &[(0, 1)], &[r.clone(), r], "");
        assert!(m.contains("@main(%arg0: tensor<2xf32> {tf.aliasing_output = 1 : i32})"), "{m}");
    }
}
