//! Differential test: the ops of the Tensor API against NumPy, on seeded random inputs that
//! include NaN, ±inf, -0, integer extremes, negative and out-of-range indices, 0-d and empty
//! tensors, in every dtype each op takes.
//!
//! All cases are built first; their inputs and op descriptions go to a temp dir, ONE python
//! process (`tests/reference/numpy_reference.py`) computes every case with NumPy and writes
//! the expected results back, and the device results are compared: ints and bools exactly,
//! NaN positions equal, floats within a few units in the last place of the result dtype (plus
//! the rounding of the accumulation for sums and products). f16/bf16 are checked against f32
//! math rounded once, which is what torch computes. Every failing case is listed, not only
//! the first. Gradients are checked against central differences in `autograd.rs`.
//!
//! Needs python3 with NumPy: `python3 -m pip install -r tests/requirements.txt`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use eager::prelude::*;
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const SEED: u64 = 0xd1ff_5eed;

mod common;

use common::{ALL, FLOATS, NUMERIC};

// ----- host values ----------------------------------------------------------------------------

/// Values of one tensor on the host, exact for every dtype (ints as i128, bools as 0/1).
#[derive(Clone, Debug)]
enum Data {
    F(Vec<f64>),
    I(Vec<i128>),
}

#[derive(Clone, Debug)]
struct Input {
    dtype: DType,
    shape: Vec<usize>,
    data: Data,
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `v` as `dtype` holds it, back in f64.
fn quantize(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::F32 => v as f32 as f64,
        _ => v,
    }
}

/// The numpy name of a dtype, as the reference script reads it.
fn np_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
        DType::U32 => "u32",
        DType::U64 => "u64",
        DType::Bool => "bool",
    }
}

impl Input {
    fn floats(dtype: DType, shape: &[usize], v: Vec<f64>) -> Input {
        assert_eq!(v.len(), numel(shape), "test bug: values do not fill {shape:?}");
        Input {
            dtype,
            shape: shape.to_vec(),
            data: Data::F(v.into_iter().map(|x| quantize(x, dtype)).collect()),
        }
    }

    fn ints(dtype: DType, shape: &[usize], v: Vec<i128>) -> Input {
        assert_eq!(v.len(), numel(shape), "test bug: values do not fill {shape:?}");
        Input { dtype, shape: shape.to_vec(), data: Data::I(v) }
    }

    /// A device tensor holding exactly these values.
    fn tensor(&self) -> Result<Tensor> {
        let s = &self.shape;
        match (&self.data, self.dtype) {
            (Data::F(v), DType::F32) => {
                Tensor::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), s)
            }
            (Data::F(v), DType::F64) => Tensor::from_slice(v, s),
            (Data::F(v), DType::F16) => {
                Tensor::from_slice(&v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>(), s)
            }
            (Data::F(v), DType::BF16) => {
                Tensor::from_slice(&v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>(), s)
            }
            (Data::I(v), DType::I32) => {
                Tensor::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>(), s)
            }
            (Data::I(v), DType::I64) => {
                Tensor::from_slice(&v.iter().map(|&x| x as i64).collect::<Vec<_>>(), s)
            }
            (Data::I(v), DType::U8) => Tensor::from_slice(&v.iter().map(|&x| x as u8).collect::<Vec<_>>(), s),
            (Data::I(v), DType::U32) => {
                Tensor::from_slice(&v.iter().map(|&x| x as u32).collect::<Vec<_>>(), s)
            }
            (Data::I(v), DType::U64) => {
                Tensor::from_slice(&v.iter().map(|&x| x as u64).collect::<Vec<_>>(), s)
            }
            (Data::I(v), DType::Bool) => {
                Tensor::from_slice(&v.iter().map(|&x| x != 0).collect::<Vec<_>>(), s)
            }
            (d, t) => panic!("test bug: {t} input with {d:?}"),
        }
    }

    /// Raw little-endian bytes for NumPy (bf16 as f32, which holds it exactly).
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.data {
            Data::F(v) => {
                for &x in v {
                    match self.dtype {
                        DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
                        DType::F16 => out.extend_from_slice(&f16::from_f64(x).to_bits().to_le_bytes()),
                        _ => out.extend_from_slice(&(x as f32).to_le_bytes()),
                    }
                }
            }
            Data::I(v) => {
                for &x in v {
                    match self.dtype {
                        DType::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
                        DType::I64 => out.extend_from_slice(&(x as i64).to_le_bytes()),
                        DType::U8 | DType::Bool => out.push(x as u8),
                        DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
                        DType::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
                        d => panic!("test bug: int data for {d}"),
                    }
                }
            }
        }
        out
    }
}

/// What values to draw.
#[derive(Clone, Copy, Debug)]
enum Draw {
    /// Mostly in [-4, 4] (ints in [-20, 20], clipped at 0 for unsigned), with about one in
    /// six floats special (NaN, ±inf, ±0) and the occasional int extreme.
    Mixed,
    /// Finite values in [lo, hi] (ints rounded), nothing special.
    Range(f64, f64),
    /// Standard normal (floats).
    Normal,
}

fn int_bounds(d: DType) -> (i128, i128) {
    match d {
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::U64 => (0, u64::MAX as i128),
        _ => (0, 1),
    }
}

fn draw(rng: &mut StdRng, dtype: DType, shape: &[usize], how: Draw) -> Input {
    let n = numel(shape);
    if dtype == DType::Bool {
        return Input::ints(dtype, shape, (0..n).map(|_| rng.gen_bool(0.5) as i128).collect());
    }
    if dtype.is_float() {
        let v = (0..n)
            .map(|_| match how {
                Draw::Mixed if rng.gen_bool(1.0 / 6.0) => {
                    [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0][rng.gen_range(0..5)]
                }
                Draw::Mixed => rng.gen_range(-4.0..4.0),
                Draw::Range(lo, hi) => rng.gen_range(lo..=hi),
                Draw::Normal => {
                    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
                }
            })
            .collect();
        return Input::floats(dtype, shape, v);
    }
    let (min, max) = int_bounds(dtype);
    let v = (0..n)
        .map(|_| match how {
            Draw::Mixed if rng.gen_bool(0.08) => [min, max][rng.gen_range(0..2)],
            Draw::Mixed | Draw::Normal => rng.gen_range(-20i128..=20).clamp(min, max),
            Draw::Range(lo, hi) => (rng.gen_range(lo..=hi).round() as i128).clamp(min, max),
        })
        .collect();
    Input::ints(dtype, shape, v)
}

// ----- cases ----------------------------------------------------------------------------------

type OpFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

/// How closely a float result must match.
#[derive(Clone, Copy, Debug)]
struct Tol {
    /// Units in the last place of the result dtype.
    ulps: f64,
    /// Absolute slack in units of the result dtype's epsilon (for results near 0 of
    /// functions whose error scales with the input, like sin).
    abs_eps: f64,
    /// Against NumPy in f64 (not f32 rounded to the result): `ulps` of the exact result.
    f64_ref: bool,
}

/// Exact up to the rounding of the result: arithmetic, movement, comparisons.
const EXACT: Tol = Tol { ulps: 1.0, abs_eps: 0.0, f64_ref: false };
/// Transcendental functions: XLA's approximations are a few ulps off.
const TRANSCENDENTAL: Tol = Tol { ulps: 4.0, abs_eps: 4.0, f64_ref: false };
/// Composites of several rounded ops (softmax, gelu, losses).
const COMPOSITE: Tol = Tol { ulps: 8.0, abs_eps: 8.0, f64_ref: false };
/// f16/bf16 softmax and norms: statistics in f32, rounded once, so within half an ulp of the
/// exact (f64) result, as torch (plus what f32 arithmetic may move a result sitting on a
/// rounding midpoint: `ONCE_SLACK` of an ulp).
const ONCE: Tol = Tol { ulps: 0.5, abs_eps: 0.0, f64_ref: true };
const ONCE_SLACK: f64 = 1.0 / 64.0;

/// The largest distance (in ulps of the exact result) seen per `op dtype` of [`ONCE`] cases.
static WORST_ONCE: std::sync::Mutex<std::collections::BTreeMap<String, f64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The tolerance of a softmax or norm in `d`: [`ONCE`] for half precision.
fn norm_tol(d: DType) -> Tol {
    if matches!(d, DType::F16 | DType::BF16) {
        ONCE
    } else {
        COMPOSITE
    }
}

/// The spacing of `d`'s values at `v` (its unit in the last place), subnormals included.
fn ulp(v: f64, d: DType) -> f64 {
    let (mantissa, min_exp) = match d {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 => (23, -126),
        _ => (52, -1022),
    };
    let e = if v == 0.0 { min_exp } else { (v.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(e - mantissa)
}

struct Case {
    op: &'static str,
    attrs: Value,
    inputs: Vec<Input>,
    run: OpFn,
    /// The result dtype eager must give.
    out: DType,
    tol: Tol,
    /// Why this case is here, for the failure list.
    note: String,
}

#[derive(Default)]
struct Suite {
    cases: Vec<Case>,
}

impl Suite {
    fn add(
        &mut self,
        op: &'static str,
        attrs: Value,
        inputs: Vec<Input>,
        out: DType,
        tol: Tol,
        run: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    ) {
        let shapes: Vec<String> = inputs.iter().map(|i| format!("{}{:?}", i.dtype, i.shape)).collect();
        let mut attrs = attrs;
        if tol.f64_ref {
            attrs["f64"] = json!(true); // the reference computes in f64
        }
        let note = format!("{op}({}) {attrs}", shapes.join(", "));
        self.cases.push(Case { op, attrs, inputs, run: Box::new(run), out, tol, note });
    }

    fn note(&mut self, why: &str) {
        if let Some(c) = self.cases.last_mut() {
            c.note = format!("{} [{why}]", c.note);
        }
    }
}

macro_rules! unary {
    ($s:expr, $rng:expr, $name:literal, $method:ident, $dtypes:expr, $how:expr, $tol:expr) => {
        for &d in $dtypes {
            for shape in [&[3usize, 4][..], &[][..], &[0, 3][..]] {
                // Edge shapes (0-d, empty) on two dtypes only: each new shape is a compile.
                if shape != [3, 4] && !matches!(d, DType::F32 | DType::I32) {
                    continue;
                }
                let x = draw($rng, d, shape, $how);
                $s.add($name, json!({}), vec![x], d, $tol, |t| t[0].$method());
            }
        }
    };
}

fn unary_cases(s: &mut Suite, rng: &mut StdRng) {
    unary!(s, rng, "neg", neg, NUMERIC, Draw::Mixed, EXACT);
    unary!(s, rng, "abs", abs, NUMERIC, Draw::Mixed, EXACT);
    unary!(s, rng, "relu", relu, NUMERIC, Draw::Mixed, EXACT);
    unary!(s, rng, "exp", exp, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "log", log, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "sqrt", sqrt, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "rsqrt", rsqrt, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "tanh", tanh, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "sigmoid", sigmoid, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "sin", sin, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "cos", cos, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "erf", erf, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "log1p", log1p, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "expm1", expm1, FLOATS, Draw::Mixed, TRANSCENDENTAL);
    unary!(s, rng, "floor", floor, FLOATS, Draw::Mixed, EXACT);
    unary!(s, rng, "ceil", ceil, FLOATS, Draw::Mixed, EXACT);
    unary!(s, rng, "round", round, FLOATS, Draw::Mixed, EXACT);
    unary!(s, rng, "sign", sign, NUMERIC, Draw::Mixed, EXACT);
    unary!(s, rng, "square", square, NUMERIC, Draw::Mixed, EXACT);
    // Halves to even, the case round-half-away-from-zero would get wrong.
    let halves = Input::floats(DType::F32, &[6], vec![-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]);
    s.add("round", json!({}), vec![halves], DType::F32, EXACT, |t| t[0].round());
    for &d in FLOATS {
        let x = draw(rng, d, &[3, 4], Draw::Mixed);
        s.add("gelu", json!({}), vec![x], d, COMPOSITE, |t| eager::nn::gelu(&t[0]));
        let x = draw(rng, d, &[3, 4], Draw::Mixed);
        s.add("gelu_exact", json!({}), vec![x], d, COMPOSITE, |t| eager::nn::gelu_exact(&t[0]));
        let x = draw(rng, d, &[3, 4], Draw::Mixed);
        s.add("silu", json!({}), vec![x], d, COMPOSITE, |t| t[0].silu());
    }
    for &d in NUMERIC {
        for (lo, hi) in
            [(Some(-1.0), Some(2.0)), (Some(0.5), None), (None, Some(-0.5)), (Some(2.0), Some(1.0))]
        {
            let x = draw(rng, d, &[3, 4], Draw::Mixed);
            s.add("clamp", json!({"min": lo, "max": hi}), vec![x], d, EXACT, move |t| t[0].clamp(lo, hi));
        }
    }
    for &d in NUMERIC {
        for (dim, shape) in
            [(1isize, &[3usize, 4][..]), (0, &[5][..]), (-1, &[2, 3, 4]), (0, &[]), (1, &[2, 0])]
        {
            if shape != [3, 4] && !matches!(d, DType::F32 | DType::I32) {
                continue;
            }
            // Products of ints in a small range, so that they do not wrap differently.
            let x = draw(rng, d, shape, Draw::Range(-2.0, 2.0));
            s.add("cumsum", json!({"dim": dim}), vec![x.clone()], d, COMPOSITE, move |t| t[0].cumsum(dim));
            s.add("cumprod", json!({"dim": dim}), vec![x], d, COMPOSITE, move |t| t[0].cumprod(dim));
        }
    }
    for &d in FLOATS {
        // Specials: NaN and inf run on to every later element.
        let x = draw(rng, d, &[4, 6], Draw::Mixed);
        s.add("cumsum", json!({"dim": 1}), vec![x], d, COMPOSITE, |t| t[0].cumsum(1));
    }
    for &d in ALL {
        for (dim, shape) in
            [(1isize, &[3usize, 5][..]), (0, &[6][..]), (-1, &[2, 2, 4]), (0, &[]), (1, &[2, 0])]
        {
            if shape != [3, 5] && !matches!(d, DType::F32 | DType::I32) {
                continue;
            }
            // Few distinct values, so that ties show whether the sort is stable.
            let how = if d.is_float() { Draw::Mixed } else { Draw::Range(-2.0, 2.0) };
            let x = draw(rng, d, shape, how);
            for descending in [false, true] {
                let a = json!({"dim": dim, "descending": descending});
                s.add("argsort", a.clone(), vec![x.clone()], DType::I64, EXACT, move |t| {
                    t[0].argsort(dim, descending)
                });
                s.add("sort_values", a, vec![x.clone()], d, EXACT, move |t| {
                    Ok(t[0].sort(dim, descending)?.0)
                });
            }
        }
    }
    for &d in &[DType::F32, DType::I64, DType::BF16] {
        let x = draw(rng, d, &[3, 6], Draw::Mixed);
        for (k, largest) in [(2usize, true), (3, false), (0, true), (6, true)] {
            let a = json!({"dim": 1, "k": k, "largest": largest});
            s.add("topk_values", a.clone(), vec![x.clone()], d, EXACT, move |t| {
                Ok(t[0].topk(k, 1, largest)?.0)
            });
            s.add("topk_indices", a, vec![x.clone()], DType::I64, EXACT, move |t| {
                Ok(t[0].topk(k, 1, largest)?.1)
            });
        }
    }
    for &d in FLOATS {
        let x = draw(rng, d, &[2, 3, 4], Draw::Normal);
        s.add("rms_norm", json!({"dims": 1}), vec![x.clone()], d, norm_tol(d), |t| t[0].rms_norm(1, 1e-5));
        s.add("rms_norm", json!({"dims": 2}), vec![x], d, norm_tol(d), |t| t[0].rms_norm(2, 1e-5));
        let x = draw(rng, d, &[2, 6, 3], Draw::Normal);
        s.add("group_norm", json!({"groups": 3}), vec![x], d, norm_tol(d), |t| t[0].group_norm(3, 1e-5));
        let (q, k, v) = (
            draw(rng, d, &[2, 3, 4], Draw::Normal),
            draw(rng, d, &[2, 5, 4], Draw::Normal),
            draw(rng, d, &[2, 5, 2], Draw::Normal),
        );
        let mask = Input::ints(DType::Bool, &[3, 5], vec![1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1]);
        for causal in [false, true] {
            let a = json!({"causal": causal, "mask": false});
            s.add("sdpa", a, vec![q.clone(), k.clone(), v.clone()], d, COMPOSITE, move |t| {
                t[0].scaled_dot_product_attention(&t[1], &t[2], None, causal)
            });
            let a = json!({"causal": causal, "mask": true});
            s.add("sdpa", a, vec![q.clone(), k.clone(), v.clone(), mask.clone()], d, COMPOSITE, move |t| {
                t[0].scaled_dot_product_attention(&t[1], &t[2], Some(&t[3]), causal)
            });
        }
    }
    for (idx, why) in
        [(&[2i128, 0, 4, 4, 1, 3][..], "in range"), (&[1, 5], "a class past the end"), (&[-1, 0], "negative")]
    {
        for it in [DType::I32, DType::I64] {
            let i = Input::ints(it, &[idx.len()], idx.to_vec());
            s.add("one_hot", json!({"classes": 5}), vec![i], DType::I64, EXACT, |t| t[0].one_hot(5));
            s.note(why);
        }
    }
    let i = Input::ints(DType::I64, &[2, 3], vec![0, 1, 2, 2, 1, 0]);
    s.add("one_hot", json!({"classes": 3}), vec![i], DType::I64, EXACT, |t| t[0].one_hot(3));
    for &d in NUMERIC {
        let x = draw(rng, d, &[3, 4], Draw::Mixed);
        let mask = draw(rng, DType::Bool, &[1, 4], Draw::Mixed);
        s.add("masked_fill", json!({"value": 3.0}), vec![x, mask], d, EXACT, |t| {
            t[0].masked_fill(&t[1], 3.0)
        });
    }
    for &d in ALL {
        for (k, shape) in
            [(0i64, &[3usize, 4][..]), (-1, &[2, 3, 4]), (2, &[4, 3]), (-5, &[3, 4]), (0, &[0, 3])]
        {
            if shape != [3, 4] && !matches!(d, DType::F32 | DType::I32) {
                continue;
            }
            let x = draw(rng, d, shape, Draw::Mixed);
            s.add("tril", json!({"diagonal": k}), vec![x.clone()], d, EXACT, move |t| t[0].tril(k));
            s.add("triu", json!({"diagonal": k}), vec![x], d, EXACT, move |t| t[0].triu(k));
        }
    }
}

fn binary_cases(s: &mut Suite, rng: &mut StdRng) {
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: &[(&'static str, Bin, &[DType])] = &[
        ("add", |a, b| a.add(b), NUMERIC),
        ("sub", |a, b| a.sub(b), NUMERIC),
        ("mul", |a, b| a.mul(b), NUMERIC),
        ("maximum", |a, b| a.maximum(b), NUMERIC),
        ("minimum", |a, b| a.minimum(b), NUMERIC),
        ("div", |a, b| a.div(b), NUMERIC),
        ("pow", |a, b| a.pow(b), NUMERIC),
        ("eq", |a, b| a.eq(b), ALL),
        ("ne", |a, b| a.ne(b), ALL),
        ("lt", |a, b| a.lt(b), NUMERIC),
        ("le", |a, b| a.le(b), NUMERIC),
        ("gt", |a, b| a.gt(b), NUMERIC),
        ("ge", |a, b| a.ge(b), NUMERIC),
    ];
    // Broadcasting pairs: the first on every dtype, the edge cases on f32 and i32.
    let pairs: &[(&[usize], &[usize])] =
        &[(&[3, 4], &[4]), (&[], &[3, 4]), (&[2, 1, 4], &[3, 1]), (&[0, 3], &[1, 3])];
    for &(name, f, dtypes) in ops {
        let compare = matches!(name, "eq" | "ne" | "lt" | "le" | "gt" | "ge");
        for &d in dtypes {
            for (k, &(sa, sb)) in pairs.iter().enumerate() {
                if k > 0 && !matches!(d, DType::F32 | DType::I32) {
                    continue;
                }
                let (a, b) = match (name, d.is_float()) {
                    // Int division: no zero divisors (XLA's values for those are documented and
                    // tested below) and no MIN / -1.
                    ("div", false) => (
                        draw(rng, d, sa, Draw::Range(-50.0, 50.0)),
                        nonzero(draw(rng, d, sb, Draw::Range(-7.0, 7.0))),
                    ),
                    ("pow", false) => {
                        (draw(rng, d, sa, Draw::Range(-3.0, 3.0)), draw(rng, d, sb, Draw::Range(0.0, 4.0)))
                    }
                    // Comparisons: small integers so that ties occur, plus the specials.
                    _ if compare && !d.is_float() => {
                        (draw(rng, d, sa, Draw::Range(-2.0, 2.0)), draw(rng, d, sb, Draw::Range(-2.0, 2.0)))
                    }
                    ("pow", true) => {
                        let (a, b) = (draw(rng, d, sa, Draw::Mixed), draw(rng, d, sb, Draw::Mixed));
                        (a, integral_or_half(rng, b))
                    }
                    _ => (draw(rng, d, sa, Draw::Mixed), draw(rng, d, sb, Draw::Mixed)),
                };
                let out = if compare { DType::Bool } else { d };
                let tol = if name == "pow" { TRANSCENDENTAL } else { EXACT };
                s.add(name, json!({}), vec![a, b], out, tol, move |t| f(&t[0], &t[1]));
            }
        }
    }
    // A scalar operand (`x * 2.5`) goes through the same ops with a 0-d input.
    let x = draw(rng, DType::F32, &[3, 4], Draw::Mixed);
    let two = Input::floats(DType::F32, &[], vec![2.5]);
    s.add("mul", json!({}), vec![x, two], DType::F32, EXACT, |t| t[0].mul_scalar(2.5));
}

/// Replaces zero divisors by 1.
fn nonzero(mut x: Input) -> Input {
    if let Data::I(v) = &mut x.data {
        v.iter_mut().filter(|v| **v == 0).for_each(|v| *v = 1);
    }
    x
}

/// Exponents: integers (negative bases then give real powers) and halves, specials kept.
fn integral_or_half(rng: &mut StdRng, mut x: Input) -> Input {
    if let Data::F(v) = &mut x.data {
        for e in v.iter_mut().filter(|e| e.is_finite()) {
            *e = if rng.gen_bool(0.5) { e.round() } else { (*e * 2.0).round() / 2.0 };
        }
    }
    x
}

fn where_cases(s: &mut Suite, rng: &mut StdRng) {
    for &d in ALL {
        let c = draw(rng, DType::Bool, &[3, 1], Draw::Mixed);
        let (a, b) = (draw(rng, d, &[3, 4], Draw::Mixed), draw(rng, d, &[4], Draw::Mixed));
        s.add("where", json!({}), vec![c, a, b], d, EXACT, |t| t[0].where_cond(&t[1], &t[2]));
    }
}

fn matmul_cases(s: &mut Suite, rng: &mut StdRng) {
    let shapes: &[(&[usize], &[usize])] =
        &[(&[3, 5], &[5, 4]), (&[2, 3, 5], &[5, 2]), (&[5], &[5, 4]), (&[3, 5], &[5]), (&[3, 0], &[0, 4])];
    for &d in NUMERIC {
        for (k, &(sa, sb)) in shapes.iter().enumerate() {
            if k > 0 && !matches!(d, DType::F32 | DType::I32) {
                continue;
            }
            let how = if d.is_float() { Draw::Mixed } else { Draw::Range(-5.0, 5.0) };
            let (a, b) = (draw(rng, d, sa, how), draw(rng, d, sb, how));
            s.add("matmul", json!({}), vec![a, b], d, EXACT, |t| t[0].matmul(&t[1]));
        }
    }
    // Operands read transposed: the reference transposes them first.
    let transposed: &[(&[usize], &[usize], bool, bool)] = &[
        (&[5, 3], &[5, 4], true, false),
        (&[3, 5], &[4, 5], false, true),
        (&[2, 5, 3], &[4, 5], true, true),
    ];
    for &d in [DType::F32, DType::I32, DType::BF16].iter() {
        for &(sa, sb, lhs_t, rhs_t) in transposed {
            let how = if d.is_float() { Draw::Mixed } else { Draw::Range(-5.0, 5.0) };
            let (a, b) = (draw(rng, d, sa, how), draw(rng, d, sb, how));
            let attrs = json!({"lhs_t": lhs_t, "rhs_t": rhs_t});
            s.add("matmul", attrs, vec![a, b], d, EXACT, move |t| {
                t[0].matmul_transposed(&t[1], lhs_t, rhs_t)
            });
        }
    }
    // A long inner dim: f16/bf16 products must accumulate in f32 (torch, JAX).
    for &d in FLOATS {
        let (a, b) = (draw(rng, d, &[4, 512], Draw::Normal), draw(rng, d, &[512, 3], Draw::Normal));
        s.add("matmul", json!({}), vec![a, b], d, EXACT, |t| t[0].matmul(&t[1]));
        s.note("accumulates in f32");
    }
}

fn reduction_cases(s: &mut Suite, rng: &mut StdRng) {
    type Red = fn(&Tensor, &[isize], bool) -> Result<Tensor>;
    let ops: &[(&'static str, Red, &[DType])] = &[
        ("sum", |x, d, k| x.sum(d, k), NUMERIC),
        ("mean", |x, d, k| x.mean(d, k), FLOATS),
        ("max", |x, d, k| x.max(d, k), NUMERIC),
        ("min", |x, d, k| x.min(d, k), NUMERIC),
    ];
    let configs: &[(&[usize], &[isize], bool)] =
        &[(&[3, 4], &[1], false), (&[2, 3, 4], &[0, 2], true), (&[3, 4], &[], false), (&[0, 3], &[0], false)];
    for &(name, f, dtypes) in ops {
        for &d in dtypes {
            for (k, &(shape, dims, keep)) in configs.iter().enumerate() {
                if k > 1 && !matches!(d, DType::F32 | DType::I32) {
                    continue;
                }
                let x = draw(rng, d, shape, Draw::Mixed);
                let dims_v: Vec<isize> = dims.to_vec();
                s.add(name, json!({"dims": dims, "keepdim": keep}), vec![x], d, EXACT, move |t| {
                    f(&t[0], &dims_v, keep)
                });
            }
        }
    }
    for &(name, is_max) in &[("argmax", true), ("argmin", false)] {
        for &d in NUMERIC {
            for &(shape, dim, keep) in
                &[(&[3usize, 4][..], Some(1isize), false), (&[2, 3, 4][..], None, true)]
            {
                let x = draw(rng, d, shape, Draw::Mixed);
                s.add(name, json!({"dim": dim, "keepdim": keep}), vec![x], DType::I64, EXACT, move |t| {
                    if is_max {
                        t[0].argmax(dim, keep)
                    } else {
                        t[0].argmin(dim, keep)
                    }
                });
            }
        }
    }
    // NaN propagates through max/min and is the extreme of argmax/argmin (torch, NumPy).
    for &d in FLOATS {
        let v = vec![1.0, f64::NAN, 3.0, f64::INFINITY, 2.0, -1.0, f64::NAN, 0.0];
        let x = Input::floats(d, &[2, 4], v);
        type R = fn(&Tensor) -> Result<Tensor>;
        let cases: &[(&'static str, Value, DType, R)] = &[
            ("max", json!({"dims": [1], "keepdim": false}), d, |t| t.max(&[1], false)),
            ("min", json!({"dims": [1], "keepdim": false}), d, |t| t.min(&[1], false)),
            ("argmax", json!({"dim": 1, "keepdim": false}), DType::I64, |t| t.argmax(Some(1), false)),
            ("argmin", json!({"dim": 1, "keepdim": false}), DType::I64, |t| t.argmin(Some(1), false)),
            ("max", json!({"dims": [], "keepdim": false}), d, |t| t.max(&[], false)),
            ("argmax", json!({"dim": null, "keepdim": false}), DType::I64, |t| t.argmax(None, false)),
        ];
        for (name, attrs, out, f) in cases {
            let f = *f;
            s.add(name, attrs.clone(), vec![x.clone()], *out, EXACT, move |t| f(&t[0]));
            s.note("NaN propagates");
        }
    }
    // Half-precision sums accumulate in f32 and round once (torch, JAX).
    for &(d, shape) in &[(DType::BF16, [64usize, 256]), (DType::F16, [64, 33])] {
        let x = draw(rng, d, &shape, Draw::Normal);
        s.add("sum", json!({"dims": [], "keepdim": false}), vec![x.clone()], d, EXACT, |t| t[0].sum_all());
        s.note("accumulates in f32");
        s.add("sum", json!({"dims": [1], "keepdim": false}), vec![x.clone()], d, EXACT, |t| {
            t[0].sum(&[1], false)
        });
        s.note("accumulates in f32");
        s.add("mean", json!({"dims": [], "keepdim": false}), vec![x], d, EXACT, |t| t[0].mean_all());
    }
    for &d in FLOATS {
        for &(name, log) in &[("softmax", false), ("log_softmax", true)] {
            let x = draw(rng, d, &[3, 5], Draw::Mixed);
            s.add(name, json!({"dim": 1}), vec![x], d, norm_tol(d), move |t| {
                if log {
                    t[0].log_softmax(-1)
                } else {
                    t[0].softmax(-1)
                }
            });
        }
        let x = draw(rng, d, &[4, 5], Draw::Range(-3.0, 3.0));
        s.add("softmax", json!({"dim": 0}), vec![x], d, norm_tol(d), |t| t[0].softmax(0));
    }
    norm_cases(s, rng);
}

/// The normalisation layers' functions (with their weights) and softmax over wider rows, in
/// every float dtype: f16 and bf16 within half an ulp of the exact result ([`ONCE`]).
fn norm_cases(s: &mut Suite, rng: &mut StdRng) {
    for &d in FLOATS {
        // Running statistics are f32 beside half-precision inputs, as torch's BatchNorm2d.
        let stats = if matches!(d, DType::F16 | DType::BF16) { DType::F32 } else { d };
        let (x, w, b) = (
            draw(rng, d, &[3, 2, 40], Draw::Normal),
            draw(rng, d, &[40], Draw::Normal),
            draw(rng, d, &[40], Draw::Normal),
        );
        s.add("layer_norm", json!({}), vec![x.clone(), w.clone(), b], d, norm_tol(d), |t| {
            eager::nn::layer_norm(&t[0], &[40], Some(&t[1]), Some(&t[2]), 1e-5)
        });
        s.add("rms_norm_w", json!({}), vec![x.clone(), w], d, norm_tol(d), |t| {
            eager::nn::rms_norm(&t[0], Some(&t[1]), 1e-5)
        });
        for &(name, log) in &[("softmax", false), ("log_softmax", true)] {
            let x = draw(rng, d, &[4, 64], Draw::Range(-6.0, 6.0));
            s.add(name, json!({"dim": 1}), vec![x], d, norm_tol(d), move |t| {
                if log {
                    t[0].log_softmax(1)
                } else {
                    t[0].softmax(1)
                }
            });
        }
        let x = draw(rng, d, &[4, 3, 5, 5], Draw::Normal);
        let (w, b) = (draw(rng, d, &[3], Draw::Normal), draw(rng, d, &[3], Draw::Normal));
        let mean = Input::floats(stats, &[3], vec![0.5, -0.25, 0.125]);
        let var = Input::floats(stats, &[3], vec![2.0, 0.5, 1.5]);
        for training in [true, false] {
            let inputs = vec![x.clone(), w.clone(), b.clone(), mean.clone(), var.clone()];
            s.add("batch_norm", json!({"training": training}), inputs, d, norm_tol(d), move |t| {
                let (m, v) = (Var::new("running_mean", t[3].clone()), Var::new("running_var", t[4].clone()));
                let y = eager::nn::batch_norm(&t[0], &m, &v, Some(&t[1]), Some(&t[2]), training, 0.1, 1e-5)?;
                // The running statistics keep their dtype.
                assert_eq!((m.get().dtype(), v.get().dtype()), (t[3].dtype(), t[4].dtype()));
                Ok(y)
            });
        }
    }
}

fn movement_cases(s: &mut Suite, rng: &mut StdRng) {
    for &d in ALL {
        let x = draw(rng, d, &[2, 3, 4], Draw::Mixed);
        s.add("reshape", json!({"shape": [4, 6]}), vec![x.clone()], d, EXACT, |t| t[0].reshape(&[4, -1]));
        s.add("permute", json!({"perm": [2, 0, 1]}), vec![x.clone()], d, EXACT, |t| t[0].permute(&[2, 0, 1]));
        s.add("slice", json!({"dim": 2, "start": 1, "end": 4, "step": 2}), vec![x.clone()], d, EXACT, |t| {
            t[0].slice(2, 1, 4, 2)
        });
        let y = draw(rng, d, &[2, 1, 4], Draw::Mixed);
        s.add("cat", json!({"dim": 1}), vec![x.clone(), y], d, EXACT, |t| Tensor::cat(&[&t[0], &t[1]], 1));
        let z = draw(rng, d, &[3, 1], Draw::Mixed);
        s.add("broadcast_to", json!({"shape": [2, 3, 4]}), vec![z], d, EXACT, |t| {
            t[0].broadcast_to(&[2, 3, 4])
        });
        let idx = Input::ints(DType::I64, &[5], vec![2, 0, -1, 1, -3]);
        s.add("index_select", json!({"dim": 1}), vec![x, idx], d, EXACT, |t| t[0].index_select(1, &t[1]));
        s.note("negative indices wrap");
    }
    // Edge shapes.
    let e = draw(rng, DType::F32, &[0, 3], Draw::Mixed);
    s.add("reshape", json!({"shape": [3, 0]}), vec![e.clone()], DType::F32, EXACT, |t| t[0].reshape(&[3, 0]));
    s.add("permute", json!({"perm": [1, 0]}), vec![e.clone()], DType::F32, EXACT, |t| t[0].permute(&[1, 0]));
    let scalar = draw(rng, DType::F32, &[], Draw::Mixed);
    s.add("reshape", json!({"shape": [1, 1]}), vec![scalar.clone()], DType::F32, EXACT, |t| {
        t[0].reshape(&[1, 1])
    });
    s.add("broadcast_to", json!({"shape": [2, 3]}), vec![scalar], DType::F32, EXACT, |t| {
        t[0].broadcast_to(&[2, 3])
    });
    let a = draw(rng, DType::I32, &[2, 3], Draw::Mixed);
    s.add("cat", json!({"dim": 0}), vec![a, e.clone().retype(DType::I32)], DType::I32, EXACT, |t| {
        Tensor::cat(&[&t[0], &t[1]], 0)
    });
    s.add("slice", json!({"dim": 0, "start": 0, "end": 0, "step": 1}), vec![e], DType::F32, EXACT, |t| {
        t[0].slice(0, 0, 0, 1)
    });

    // Indices: i32 and i64, negative ones wrap, out-of-range ones are refused (NumPy raises
    // IndexError; eager must return an error naming the op, the index and the size).
    let src = draw(rng, DType::F32, &[5, 3], Draw::Mixed);
    let index_sets: &[(&[i128], &str)] = &[
        (&[4, 0, 0, 2], "in range"),
        (&[-1, -5, 3], "negative indices wrap"),
        (&[], "no indices"),
        (&[1, 7], "index past the end"),
        (&[0, -6], "index before the start"),
    ];
    for &(idx, why) in index_sets {
        for it in [DType::I32, DType::I64] {
            let i = Input::ints(it, &[idx.len()], idx.to_vec());
            s.add("index_select", json!({"dim": 0}), vec![src.clone(), i], DType::F32, EXACT, |t| {
                t[0].index_select(0, &t[1])
            });
            s.note(why);
        }
        // The same indices computed on the device (no host copy to check): the check runs
        // on the device and its failure is reported by the read.
        let i = Input::ints(DType::I64, &[idx.len()], idx.to_vec());
        s.add("index_select", json!({"dim": 0}), vec![src.clone(), i], DType::F32, EXACT, |t| {
            let on_device = t[1].add_scalar(0.0)?;
            t[0].index_select(0, &on_device)
        });
        s.note(&format!("{why}; indices computed on the device"));
    }
    // gather and scatter_add: indices of the input's rank, on both dims, smaller than the
    // input outside the dim, repeated, negative and out of range (host and device).
    let x = draw(rng, DType::F32, &[4, 3], Draw::Mixed);
    let gathers: &[(isize, &[usize], &[i128], &str)] = &[
        (0, &[2, 3], &[3, 0, 1, 0, 0, 2], "in range, repeated"),
        (1, &[4, 2], &[2, 0, -1, 1, 0, -3, 2, 2], "negative indices wrap"),
        (0, &[1, 2], &[1, -2], "smaller than the input outside the dim"),
        (0, &[0, 3], &[], "no indices"),
        (1, &[2, 2], &[0, 3, 1, 1], "index past the end"),
        (0, &[1, 3], &[0, -5, 1], "index before the start"),
    ];
    for &(dim, shape, idx, why) in gathers {
        for it in [DType::I32, DType::I64] {
            let i = Input::ints(it, shape, idx.to_vec());
            s.add("gather", json!({"dim": dim}), vec![x.clone(), i], DType::F32, EXACT, move |t| {
                t[0].gather(dim, &t[1])
            });
            s.note(why);
        }
        let i = Input::ints(DType::I64, shape, idx.to_vec());
        s.add("gather", json!({"dim": dim}), vec![x.clone(), i], DType::F32, EXACT, move |t| {
            t[0].gather(dim, &t[1].add_scalar(0.0)?)
        });
        s.note(&format!("{why}; indices computed on the device"));
        // The same places scatter into the input, from a source one larger in each dim.
        let src_shape: Vec<usize> = shape.iter().map(|&n| n + 1).collect();
        for &d in &[DType::F32, DType::I32, DType::F16] {
            let base = draw(rng, d, &[4, 3], Draw::Range(-4.0, 4.0));
            let src = draw(rng, d, &src_shape, Draw::Range(-4.0, 4.0));
            let i = Input::ints(DType::I64, shape, idx.to_vec());
            s.add("scatter_add", json!({"dim": dim}), vec![base, i, src], d, COMPOSITE, move |t| {
                t[0].scatter_add(dim, &t[1], &t[2])
            });
            s.note(why);
        }
    }
    // take_along_dim: the indices and the input broadcast against each other outside `dim`.
    type Take = (isize, &'static [usize], &'static [usize], &'static [i128], &'static str);
    let takes: &[Take] = &[
        (1, &[4, 3], &[1, 2], &[2, -1], "indices broadcast over dim 0"),
        (0, &[4, 3], &[2, 1], &[3, -4], "indices broadcast over dim 1"),
        (1, &[4, 1], &[4, 2], &[0, 0, 0, -1, 0, 0, -1, -1], "input broadcast over dim 1"),
        (0, &[4, 3], &[1, 3], &[0, 4, 1], "index past the end"),
    ];
    for &(dim, x_shape, shape, idx, why) in takes {
        let x = draw(rng, DType::F32, x_shape, Draw::Mixed);
        let i = Input::ints(DType::I64, shape, idx.to_vec());
        s.add("take_along_dim", json!({"dim": dim}), vec![x, i], DType::F32, EXACT, move |t| {
            t[0].take_along_dim(&t[1], dim)
        });
        s.note(why);
    }
    // index_add: slices of a source added at a 1-D index's positions along either dim.
    let adds: &[(isize, &[i128], &str)] = &[
        (0, &[3, 0, 3, -1], "repeated and negative indices"),
        (1, &[2, -3], "along dim 1"),
        (0, &[], "no indices"),
        (1, &[0, 3], "index past the end"),
    ];
    for &(dim, idx, why) in adds {
        for &d in &[DType::F32, DType::I64, DType::BF16] {
            let base = draw(rng, d, &[4, 3], Draw::Range(-4.0, 4.0));
            let src_shape: &[usize] = if dim == 0 { &[idx.len(), 3] } else { &[4, idx.len()] };
            let src = draw(rng, d, src_shape, Draw::Range(-4.0, 4.0));
            let i = Input::ints(DType::I32, &[idx.len()], idx.to_vec());
            s.add("index_add", json!({"dim": dim}), vec![base, i, src], d, COMPOSITE, move |t| {
                t[0].index_add(dim, &t[1], &t[2])
            });
            s.note(why);
        }
    }
    // Embedding takes the same indices (any shape).
    let table = draw(rng, DType::F32, &[6, 3], Draw::Range(-1.0, 1.0));
    let lookups: &[(&[usize], &[i128], &str)] =
        &[(&[2, 2], &[0, 5, -1, 2], "in range and negative"), (&[2], &[3, 6], "index past the end")];
    for &(shape, idx, why) in lookups {
        let i = Input::ints(DType::I64, shape, idx.to_vec());
        s.add("embedding", json!({}), vec![table.clone(), i], DType::F32, EXACT, |t| {
            eager::nn::Embedding { weight: Var::new("weight", t[0].clone()) }.lookup(&t[1])
        });
        s.note(why);
    }
}

impl Input {
    /// The same values in another dtype of the same kind of data.
    fn retype(mut self, dtype: DType) -> Input {
        if let Data::F(v) = &self.data {
            self.data = if dtype.is_float() {
                Data::F(v.clone())
            } else {
                Data::I(v.iter().map(|&x| x as i128).collect())
            };
        }
        self.dtype = dtype;
        self
    }
}

fn cast_cases(s: &mut Suite, rng: &mut StdRng) {
    for &from in ALL {
        for &to in ALL {
            if from == to {
                continue;
            }
            // Float to int is undefined for NaN, inf and out-of-range values in torch and NumPy
            // (C casts): only finite values in range are compared (non-negative for unsigned).
            let how = match (from.is_float(), to) {
                (true, DType::Bool) => Draw::Mixed,
                (true, t) if t.is_float() => Draw::Mixed,
                (true, t) if t.is_signed_int() => Draw::Range(-100.0, 100.0),
                (true, _) => Draw::Range(0.0, 200.0),
                _ => Draw::Mixed,
            };
            let x = draw(rng, from, &[2, 5], how);
            s.add("cast", json!({"to": np_name(to)}), vec![x], to, EXACT, move |t| t[0].to_dtype(to));
        }
    }
}

/// Constructors, wrappers of the movement ops and the scalar forms of binary ops, checked
/// through the references of the ops they are made of.
fn wrapper_cases(s: &mut Suite, rng: &mut StdRng) {
    for &d in &[DType::F32, DType::I64, DType::BF16] {
        let attrs = json!({"start": 1, "end": 11, "step": 3, "dtype": np_name(d)});
        s.add("arange", attrs, vec![], d, EXACT, move |_| Tensor::arange(1.0, 11.0, 3.0, d));
        s.add("eye", json!({"n": 3, "m": 4, "dtype": np_name(d)}), vec![], d, EXACT, move |_| {
            Tensor::eye_on(3, 4, d, eager::default_device())
        });
        let attrs = json!({"shape": [2, 3], "value": 2.5, "dtype": np_name(d)});
        s.add("full", attrs, vec![], d, EXACT, move |_| Tensor::full(&[2, 3], 2.5, d));
    }
    let x = draw(rng, DType::F32, &[3, 4], Draw::Mixed);
    let one = |shape: &[usize]| json!({ "shape": shape });
    s.add("reshape", one(&[3, 1, 4]), vec![x.clone()], DType::F32, EXACT, |t| t[0].unsqueeze(1));
    s.add("reshape", one(&[12]), vec![x.clone()], DType::F32, EXACT, |t| t[0].flatten());
    s.add("permute", json!({"perm": [1, 0]}), vec![x.clone()], DType::F32, EXACT, |t| t[0].t());
    let narrow = json!({"dim": 1, "start": 1, "end": 3, "step": 1});
    s.add("slice", narrow, vec![x.clone()], DType::F32, EXACT, |t| t[0].narrow(1, 1, 2));
    let y = draw(rng, DType::I32, &[2, 1, 3], Draw::Mixed);
    s.add("reshape", one(&[2, 3]), vec![y.clone()], DType::I32, EXACT, |t| t[0].squeeze(1));
    s.add("permute", json!({"perm": [2, 1, 0]}), vec![y], DType::I32, EXACT, |t| t[0].transpose(0, -1));
    // Scalar forms: the scalar is a 0-d operand of the tensor's dtype.
    type Scalar = fn(&Tensor, f64) -> Result<Tensor>;
    let ops: &[(&'static str, Scalar, DType)] = &[
        ("add", |a, v| a.add_scalar(v), DType::F16),
        ("sub", |a, v| a.sub_scalar(v), DType::I64),
        ("div", |a, v| a.div_scalar(v), DType::I32),
        ("div", |a, v| a.div_scalar(v), DType::F64),
        ("pow", |a, v| a.pow_scalar(v), DType::F32),
        ("maximum", |a, v| a.maximum_scalar(v), DType::BF16),
        ("minimum", |a, v| a.minimum_scalar(v), DType::U8),
        ("lt", |a, v| a.lt_scalar(v), DType::F32),
        ("ge", |a, v| a.ge_scalar(v), DType::I32),
        ("eq", |a, v| a.eq_scalar(v), DType::F32),
    ];
    for &(name, f, d) in ops {
        let x = draw(rng, d, &[3, 4], if d.is_float() { Draw::Mixed } else { Draw::Range(-9.0, 9.0) });
        let v = 3.0;
        let scalar = if d.is_float() { Input::floats(d, &[], vec![v]) } else { Input::ints(d, &[], vec![3]) };
        let out = if matches!(name, "lt" | "ge" | "eq") { DType::Bool } else { d };
        let tol = if name == "pow" { TRANSCENDENTAL } else { EXACT };
        s.add(name, json!({}), vec![x, scalar], out, tol, move |t| f(&t[0], v));
    }
}

fn loss_cases(s: &mut Suite, rng: &mut StdRng) {
    for &d in &[DType::F32, DType::F64] {
        let logits = draw(rng, d, &[4, 5], Draw::Range(-4.0, 4.0));
        let targets = Input::ints(DType::I64, &[4], vec![0, 4, 2, 2]);
        s.add("cross_entropy", json!({}), vec![logits, targets], d, COMPOSITE, |t| {
            eager::nn::cross_entropy(&t[0], &t[1])
        });
        let (p, q) =
            (draw(rng, d, &[3, 4], Draw::Range(-4.0, 4.0)), draw(rng, d, &[3, 4], Draw::Range(-4.0, 4.0)));
        s.add("mse", json!({}), vec![p, q], d, COMPOSITE, |t| eager::nn::mse(&t[0], &t[1]));
    }
}

fn conv_cases(s: &mut Suite, rng: &mut StdRng) {
    // (input, weight, stride, padding, dilation, groups); "same" is padding None.
    type Conv = (&'static [usize], &'static [usize], usize, Option<usize>, usize, usize);
    let cases: &[Conv] = &[
        (&[2, 3, 9], &[4, 3, 3], 1, Some(0), 1, 1),
        (&[2, 3, 10], &[4, 3, 3], 2, Some(1), 1, 1),
        (&[2, 4, 11], &[6, 2, 3], 1, None, 2, 2),
        (&[2, 4, 12], &[4, 2, 4], 2, Some(1), 2, 2),
        (&[2, 3, 7, 8], &[4, 3, 3, 3], 1, Some(0), 1, 1),
        (&[2, 3, 8, 9], &[4, 3, 3, 3], 2, Some(1), 1, 1),
        (&[2, 3, 8, 7], &[5, 3, 3, 2], 1, None, 1, 1),
        (&[2, 4, 9, 9], &[6, 2, 3, 3], 1, Some(1), 2, 2),
        (&[2, 4, 10, 9], &[2, 2, 3, 3], 2, None, 1, 2),
    ];
    for &(xs, ws, stride, pad, dil, groups) in cases {
        let ns = xs.len() - 2;
        // torch's "same": the total padding dil * (k - 1), the odd element after. With a
        // stride torch refuses it, and so must eager: the reference is told "same" and refuses.
        let pads: Value = match pad {
            None if stride != 1 => json!("same"),
            Some(p) => json!(vec![[p, p]; ns]),
            None => json!((0..ns)
                .map(|d| {
                    let t = dil * (ws[2 + d] - 1);
                    [t / 2, t - t / 2]
                })
                .collect::<Vec<_>>()),
        };
        let attrs =
            json!({"stride": vec![stride; ns], "padding": pads, "dilation": vec![dil; ns], "groups": groups});
        let op = if ns == 1 { "conv1d" } else { "conv2d" };
        let padding = move || pad.map_or(Padding::Same, Padding::from);
        for &d in FLOATS {
            let (x, w) = (draw(rng, d, xs, Draw::Normal), draw(rng, d, ws, Draw::Normal));
            if ns == 1 {
                s.add(op, attrs.clone(), vec![x, w], d, EXACT, move |t| {
                    t[0].conv1d(&t[1], stride, padding(), dil, groups)
                });
            } else {
                s.add(op, attrs.clone(), vec![x, w], d, EXACT, move |t| {
                    t[0].conv2d(&t[1], [stride; 2], padding(), [dil; 2], groups)
                });
            }
        }
    }
    // NaN and infinities propagate through the sums.
    let (x, w) = (
        draw(rng, DType::F32, &[1, 2, 6, 6], Draw::Mixed),
        draw(rng, DType::F32, &[2, 2, 2, 2], Draw::Normal),
    );
    let attrs = json!({"stride": [1, 1], "padding": [[0, 0], [0, 0]], "dilation": [1, 1], "groups": 1});
    s.add("conv2d", attrs, vec![x, w], DType::F32, EXACT, |t| {
        t[0].conv2d(&t[1], [1, 1], 0.into(), [1, 1], 1)
    });
    s.note("specials");
}

fn conv_transpose_cases(s: &mut Suite, rng: &mut StdRng) {
    // (input, weight [C_in, C_out/G, kh, kw], stride, padding, output_padding, dilation, groups)
    type Case = (&'static [usize], &'static [usize], usize, usize, usize, usize, usize);
    let cases: &[Case] = &[
        (&[2, 3, 4, 5], &[3, 2, 3, 3], 1, 0, 0, 1, 1),
        (&[2, 3, 4, 4], &[3, 2, 3, 3], 2, 1, 1, 1, 1),
        (&[2, 4, 3, 4], &[4, 3, 2, 3], 2, 1, 0, 2, 2),
    ];
    for &(xs, ws, st, p, op, dil, groups) in cases {
        let attrs = json!({"stride": [st, st], "padding": [p, p], "output_padding": [op, op],
            "dilation": [dil, dil], "groups": groups});
        for &d in FLOATS {
            let (x, w) = (draw(rng, d, xs, Draw::Normal), draw(rng, d, ws, Draw::Normal));
            s.add("conv_transpose2d", attrs.clone(), vec![x, w], d, EXACT, move |t| {
                t[0].conv_transpose2d(&t[1], [st; 2], [p; 2], [op; 2], [dil; 2], groups)
            });
        }
    }
}

fn pool_cases(s: &mut Suite, rng: &mut StdRng) {
    type PoolCase = (&'static [usize], [usize; 2], Option<[usize; 2]>, [usize; 2]);
    let cases: &[PoolCase] = &[
        (&[2, 3, 6, 6], [2, 2], None, [0, 0]),
        (&[2, 3, 7, 7], [3, 3], Some([2, 2]), [1, 1]),
        (&[3, 5, 6], [3, 2], Some([1, 2]), [1, 1]),
    ];
    for &(xs, k, stride, p) in cases {
        let attrs = json!({"kernel": k, "stride": stride.unwrap_or(k), "padding": p});
        for &d in FLOATS {
            // Mixed draws: NaN propagates through max pooling, as in torch.
            let x = draw(rng, d, xs, Draw::Mixed);
            s.add("max_pool2d", attrs.clone(), vec![x.clone()], d, EXACT, move |t| {
                t[0].max_pool2d(k, stride, p)
            });
            s.add("avg_pool2d", attrs.clone(), vec![x], d, EXACT, move |t| t[0].avg_pool2d(k, stride, p));
        }
    }
}

// ----- running NumPy --------------------------------------------------------------------------

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/numpy_reference.py")
}

const INSTALL: &str =
    "the differential test needs python3 with NumPy: run `python3 -m pip install -r tests/requirements.txt`";

/// Writes every case's inputs, runs the reference once and returns its results by case id.
fn run_numpy(dir: &Path, cases: &[Case]) -> serde_json::Map<String, Value> {
    let mut list = Vec::new();
    for (id, c) in cases.iter().enumerate() {
        let inputs: Vec<Value> = c
            .inputs
            .iter()
            .enumerate()
            .map(|(k, x)| {
                let file = format!("{id}.in{k}");
                std::fs::write(dir.join(&file), x.bytes()).expect("writing an input");
                json!({"file": file, "dtype": np_name(x.dtype), "shape": x.shape})
            })
            .collect();
        list.push(json!({"id": id, "op": c.op, "attrs": c.attrs, "inputs": inputs}));
    }
    std::fs::write(dir.join("cases.json"), json!({ "cases": list }).to_string()).expect("writing cases.json");
    let python = std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(script())
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; {INSTALL}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'numpy'") {
        panic!("{INSTALL} ({python} says: {})", stderr.trim());
    }
    assert!(out.status.success(), "the NumPy reference failed ({}):\n{stderr}", out.status);
    let text = std::fs::read_to_string(dir.join("results.json")).expect("reading results.json");
    let v: Value = serde_json::from_str(&text).expect("results.json is JSON");
    v["results"].as_object().expect("results by id").clone()
}

/// Expected values: f64 for floats, i128 for ints and bools.
fn read_expected(dir: &Path, file: &str, dtype: &str) -> Data {
    let b = std::fs::read(dir.join(file)).expect("reading a result");
    match dtype {
        "<f8" => Data::F(b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
        "<i8" => {
            Data::I(b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as i128).collect())
        }
        "<u8" => {
            Data::I(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap()) as i128).collect())
        }
        "|u1" => Data::I(b.iter().map(|&x| x as i128).collect()),
        other => panic!("unexpected result dtype {other}"),
    }
}

/// The device values, exact.
fn read_device(t: &Tensor) -> Result<Data> {
    Ok(match t.dtype() {
        DType::F32 => Data::F(t.to_vec::<f32>()?.into_iter().map(|x| x as f64).collect()),
        DType::F64 => Data::F(t.to_vec::<f64>()?),
        DType::F16 => Data::F(t.to_vec::<f16>()?.into_iter().map(|x| x.to_f64()).collect()),
        DType::BF16 => Data::F(t.to_vec::<bf16>()?.into_iter().map(|x| x.to_f64()).collect()),
        DType::I32 => Data::I(t.to_vec::<i32>()?.into_iter().map(|x| x as i128).collect()),
        DType::I64 => Data::I(t.to_vec::<i64>()?.into_iter().map(|x| x as i128).collect()),
        DType::U8 => Data::I(t.to_vec::<u8>()?.into_iter().map(|x| x as i128).collect()),
        DType::U32 => Data::I(t.to_vec::<u32>()?.into_iter().map(|x| x as i128).collect()),
        DType::U64 => Data::I(t.to_vec::<u64>()?.into_iter().map(|x| x as i128).collect()),
        DType::Bool => Data::I(t.to_vec::<bool>()?.into_iter().map(|x| x as i128).collect()),
    })
}

fn eps(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

/// The first mismatch of `got` against `want` (rounded to the result dtype), if any.
fn mismatch(c: &Case, got: &Data, want: &Data, mag: Option<&[f64]>) -> Option<String> {
    match (got, want) {
        (Data::I(g), Data::I(w)) => g
            .iter()
            .zip(w)
            .position(|(a, b)| a != b)
            .map(|i| format!("element {i} is {}, expected {}", g[i], w[i])),
        (Data::F(g), Data::F(w)) => {
            // The accumulation of sums and products rounds in f32 (f64 for f64): allow that,
            // scaled by the sum of magnitudes.
            let acc_eps = if c.out == DType::F64 { f64::EPSILON } else { f32::EPSILON as f64 };
            for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
                let q = quantize(b, c.out);
                let ok = if q.is_nan() || a.is_nan() {
                    q.is_nan() && a.is_nan()
                } else if q.is_infinite() || a.is_infinite() {
                    a == q
                } else if c.tol.f64_ref {
                    let off = (a - b).abs() / ulp(b, c.out);
                    let mut worst = eager::shared::lock(&WORST_ONCE);
                    let w = worst.entry(format!("{} {}", c.op, c.out)).or_insert(0.0);
                    *w = w.max(off);
                    off <= c.tol.ulps + ONCE_SLACK
                } else {
                    let slack = c.tol.ulps * eps(c.out) * q.abs().max(f64::MIN_POSITIVE)
                        + c.tol.abs_eps * eps(c.out)
                        + mag.map_or(0.0, |m| 16.0 * acc_eps * m[i]);
                    (a - q).abs() <= slack
                };
                if !ok {
                    return Some(format!("element {i} is {a}, expected {q} (NumPy {b})"));
                }
            }
            None
        }
        _ => Some("kinds differ (float vs int)".into()),
    }
}

fn preview(d: &Data) -> String {
    match d {
        Data::F(v) if v.len() <= 8 => format!("{v:?}"),
        Data::I(v) if v.len() <= 8 => format!("{v:?}"),
        Data::F(v) => format!("{:?}…", &v[..8]),
        Data::I(v) => format!("{:?}…", &v[..8]),
    }
}

/// Runs one case and compares it with NumPy's result `e`: why it differs, if it does.
fn check(c: &Case, e: &Value, dir: &Path) -> Option<String> {
    let got = c.inputs.iter().map(Input::tensor).collect::<Result<Vec<_>>>().and_then(|t| (c.run)(&t));
    // An error may come at dispatch or, for checks that run on the device, at the read.
    let got = got.and_then(|t| read_device(&t).map(|v| (t, v)));
    if let Some(why) = e.get("error") {
        return match got {
            Ok((_, v)) => Some(format!("NumPy refuses ({why}) but eager gave {}", preview(&v))),
            Err(err) => {
                let text = err.to_string();
                let named = text.contains(c.op) || (c.op == "embedding" && text.contains("index_select"));
                (!named).then(|| format!("the error does not name the op: {text}"))
            }
        };
    }
    let (t, values) = match got {
        Ok(v) => v,
        Err(err) => return Some(format!("eager failed: {err}")),
    };
    let shape: Vec<usize> =
        e["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    if t.shape() != shape.as_slice() {
        return Some(format!("shape {:?}, NumPy {shape:?}", t.shape()));
    }
    if t.dtype() != c.out {
        return Some(format!("dtype {}, expected {}", t.dtype(), c.out));
    }
    let want = read_expected(dir, e["file"].as_str().unwrap(), e["dtype"].as_str().unwrap());
    let mag = e.get("mag_file").map(|f| match read_expected(dir, f.as_str().unwrap(), "<f8") {
        Data::F(v) => v,
        Data::I(_) => unreachable!(),
    });
    mismatch(c, &values, &want, mag.as_deref())
        .map(|why| format!("{why}; got {}, NumPy {}", preview(&values), preview(&want)))
}

#[test]
fn every_op_matches_numpy() {
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut suite = Suite::default();
    unary_cases(&mut suite, &mut rng);
    binary_cases(&mut suite, &mut rng);
    where_cases(&mut suite, &mut rng);
    matmul_cases(&mut suite, &mut rng);
    reduction_cases(&mut suite, &mut rng);
    movement_cases(&mut suite, &mut rng);
    cast_cases(&mut suite, &mut rng);
    wrapper_cases(&mut suite, &mut rng);
    loss_cases(&mut suite, &mut rng);
    conv_cases(&mut suite, &mut rng);
    conv_transpose_cases(&mut suite, &mut rng);
    pool_cases(&mut suite, &mut rng);
    let cases = suite.cases;
    let (failures, numpy_s) = differences(&cases);
    let ops: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.op).collect();
    println!(
        "differential: {} cases of {} ops in {:.1} s (NumPy {:.1} s), {} failed",
        cases.len(),
        ops.len(),
        start.elapsed().as_secs_f64(),
        numpy_s,
        failures.len()
    );
    for (case, ulps) in eager::shared::lock(&WORST_ONCE).iter() {
        println!("  {case}: at most {ulps:.4} ulp from the exact result");
    }
    let failures: Vec<String> = failures.into_iter().map(|(_, f)| f).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from NumPy:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The cases that differ from NumPy, by index, with why; and the seconds NumPy took.
fn differences(cases: &[Case]) -> (Vec<(usize, String)>, f64) {
    let start = Instant::now();
    let dir = tempfile::tempdir().expect("a temp dir");
    let expected = run_numpy(dir.path(), cases);
    let numpy_s = start.elapsed().as_secs_f64();

    // Cases run on a few threads: a first run is mostly compiles, which use one core each.
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let mut failures: Vec<(usize, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut found = Vec::new();
                    loop {
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = cases.get(id) else { break };
                        if let Some(why) = check(c, &expected[&id.to_string()], dir.path()) {
                            found.push((id, format!("{}: {why}", c.note)));
                        }
                    }
                    found
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker panicked")).collect()
    });
    failures.sort();
    (failures, numpy_s)
}

/// The suite catches wrong rules: each case below is a plausible bug in one of the new ops,
/// checked as that op against NumPy, and every one must be found.
#[test]
fn deliberately_broken_rules_are_caught() {
    let mut rng = StdRng::seed_from_u64(SEED ^ 0xbad);
    let rng = &mut rng;
    let mut s = Suite::default();
    let f32s = |rng: &mut StdRng, shape: &[usize]| draw(rng, DType::F32, shape, Draw::Normal);
    let conv = json!({"stride": [1, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1], "groups": 1});
    let (x, w) = (f32s(rng, &[2, 3, 6, 6]), f32s(rng, &[4, 3, 3, 3]));
    s.add("conv2d", conv.clone(), vec![x.clone(), w.clone()], DType::F32, EXACT, |t| {
        t[0].conv2d(&t[1].flip(&[2, 3])?, [1, 1], 1.into(), [1, 1], 1) // a true convolution
    });
    s.note("kernel flipped");
    s.add("conv2d", conv, vec![x.clone(), w], DType::F32, EXACT, |t| {
        t[0].conv2d(&t[1], [1, 1], 2.into(), [2, 2], 1)
    });
    s.note("dilated (the same output shape)");
    let pool = json!({"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]});
    s.add("max_pool2d", pool, vec![x], DType::F32, EXACT, |t| t[0].avg_pool2d([2, 2], None, [0, 0]));
    s.note("averages");
    let halves = Input::floats(DType::F32, &[6], vec![0.5, 1.5, 2.5, -0.5, -2.5, 3.4]);
    s.add("round", json!({}), vec![halves], DType::F32, EXACT, |t| t[0].add_scalar(0.5)?.floor());
    s.note("halves up, not to even");
    let x = f32s(rng, &[3, 5]);
    s.add("erf", json!({}), vec![x.clone()], DType::F32, TRANSCENDENTAL, |t| t[0].mul_scalar(1.2)?.tanh());
    s.note("a tanh look-alike");
    s.add("cumsum", json!({"dim": 1}), vec![x.clone()], DType::F32, COMPOSITE, |t| {
        t[0].cumsum(1)?.sub(&t[0])
    });
    s.note("exclusive");
    s.add("argsort", json!({"dim": 1, "descending": false}), vec![x.clone()], DType::I64, EXACT, |t| {
        t[0].argsort(1, true)
    });
    s.note("descending");
    s.add(
        "topk_values",
        json!({"dim": 1, "k": 2, "largest": true}),
        vec![x.clone()],
        DType::F32,
        EXACT,
        |t| Ok(t[0].topk(2, 1, false)?.0),
    );
    s.note("smallest");
    let idx = Input::ints(DType::I64, &[1, 5], vec![0, -1, 2, -3, 1]);
    s.add("take_along_dim", json!({"dim": 0}), vec![x.clone(), idx], DType::F32, EXACT, |t| {
        t[0].take_along_dim(&t[1].clamp(Some(0.0), None)?, 0)
    });
    s.note("negative indices clamped, not wrapped");
    let (base, src) = (f32s(rng, &[4, 3]), f32s(rng, &[3, 3]));
    let rows = Input::ints(DType::I64, &[3], vec![1, 1, 2]);
    s.add("index_add", json!({"dim": 0}), vec![base, rows, src], DType::F32, COMPOSITE, |t| {
        // Repeated rows overwrite (index_copy) instead of adding up.
        let once = t[1].narrow(0, 1, 2)?;
        t[0].index_add(0, &once, &t[2].narrow(0, 1, 2)?)
    });
    s.note("repeated indices overwrite");
    let (q, k, v) = (f32s(rng, &[2, 3, 4]), f32s(rng, &[2, 5, 4]), f32s(rng, &[2, 5, 2]));
    s.add("sdpa", json!({"causal": true, "mask": false}), vec![q, k, v], DType::F32, COMPOSITE, |t| {
        t[0].matmul(&t[1].transpose(-2, -1)?)?.softmax(-1)?.matmul(&t[2]) // unscaled, not causal
    });
    s.note("no 1/sqrt(d), no causal mask");
    let (a, b) = (f32s(rng, &[3, 5]), f32s(rng, &[5, 5]));
    s.add("matmul", json!({}), vec![a, b], DType::F32, EXACT, |t| t[0].matmul(&t[1].t()?));
    s.note("rhs read transposed");
    let x = f32s(rng, &[3, 4]);
    s.add("mean", json!({"dims": [1], "keepdim": false}), vec![x], DType::F32, EXACT, |t| {
        t[0].sum(&[1], false)?.mul_scalar(1.0 / 3.0)
    });
    s.note("divides by n - 1");
    let x = draw(rng, DType::F32, &[2, 5], Draw::Range(-100.0, 100.0));
    s.add("cast", json!({"to": np_name(DType::I32)}), vec![x], DType::I32, EXACT, |t| {
        t[0].round()?.to_dtype(DType::I32)
    });
    s.note("rounds to nearest, not toward zero");
    let cases = s.cases;
    let (failures, _) = differences(&cases);
    // Each must be caught by the comparison of values (an error, or a shape or dtype that
    // differs, would be a catch for another reason).
    let mut missed = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        match failures.iter().find(|(f, _)| *f == i) {
            None => missed.push(format!("{}: passed", c.note)),
            Some((_, why)) if !why.contains(": element ") || !why.contains(", expected ") => {
                missed.push(format!("not caught as a value difference: {why}"))
            }
            Some(_) => {}
        }
    }
    assert!(missed.is_empty(), "broken rules the suite did not catch: {missed:#?}");
}

/// Integer division by zero and overflow do not raise: eager gives XLA's values (documented on
/// `Tensor::div`, `add`, `mul`, `pow`). torch raises for division by zero and for negative
/// integer powers; its overflow wraps as here.
#[test]
fn integer_division_by_zero_and_overflow_give_xlas_values() -> Result<()> {
    let a = Tensor::from_vec(vec![7i32, -7, 0, i32::MIN, i32::MAX])?;
    let b = Tensor::from_vec(vec![0i32, 0, 0, -1, -1])?;
    assert_eq!(a.div(&b)?.to_vec::<i32>()?, [-1, -1, -1, i32::MIN, -i32::MAX]);
    let a = Tensor::from_vec(vec![7i64, i64::MIN])?;
    assert_eq!(a.div(&Tensor::from_vec(vec![0i64, -1])?)?.to_vec::<i64>()?, [-1, i64::MIN]);
    let u = Tensor::from_vec(vec![7u8, 0])?;
    assert_eq!(u.div(&u.zeros_like()?)?.to_vec::<u8>()?, [u8::MAX, u8::MAX]);
    let u = Tensor::from_vec(vec![7u32, 0])?;
    assert_eq!(u.div(&u.zeros_like()?)?.to_vec::<u32>()?, [u32::MAX, u32::MAX]);
    let u = Tensor::from_vec(vec![7u64])?;
    assert_eq!(u.div(&u.zeros_like()?)?.to_vec::<u64>()?, [u64::MAX]);

    let m = Tensor::from_vec(vec![i32::MAX, i32::MIN, 65536])?;
    assert_eq!(m.add_scalar(1.0)?.to_vec::<i32>()?, [i32::MIN, i32::MIN + 1, 65537]);
    assert_eq!(m.sub_scalar(1.0)?.to_vec::<i32>()?, [i32::MAX - 1, i32::MAX, 65535]);
    assert_eq!(m.mul(&m)?.to_vec::<i32>()?, [1, 0, 0]);
    assert_eq!(m.neg()?.to_vec::<i32>()?, [-i32::MAX, i32::MIN, -65536]);
    assert_eq!(m.abs()?.to_vec::<i32>()?, [i32::MAX, i32::MIN, 65536]);
    let m = Tensor::from_vec(vec![i64::MAX])?;
    assert_eq!(m.add_scalar(1.0)?.to_vec::<i64>()?, [i64::MIN]);

    // Powers wrap; a negative exponent gives the truncated value (0 for |base| > 1, and 0 for
    // a zero base).
    let base = Tensor::from_vec(vec![2i32, 3, 2, 0, 1, -1, -1])?;
    let exp = Tensor::from_vec(vec![31i32, 40, -1, -1, -1, -1, -2])?;
    assert_eq!(base.pow(&exp)?.to_vec::<i32>()?, [i32::MIN, 689956897, 0, 0, 1, -1, 1]);

    // Float to int conversion saturates and takes NaN to 0 (undefined in torch and C).
    let f = Tensor::from_vec(vec![f32::NAN, f32::INFINITY, -1e10, 1e10, -2.7])?;
    assert_eq!(f.to_dtype(DType::I32)?.to_vec::<i32>()?, [0, i32::MAX, i32::MIN, i32::MAX, -2]);
    let f = Tensor::from_vec(vec![-5.0f32, 300.0, f32::NAN, 2.9])?;
    assert_eq!(f.to_dtype(DType::U8)?.to_vec::<u8>()?, [0, 255, 0, 2]);
    Ok(())
}

/// Bad indices are refused, naming the op, the index and the size: at once for indices from
/// the host, at the next read for indices computed on the device.
#[test]
fn bad_indices_are_errors_naming_op_index_and_size() -> Result<()> {
    let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[5, 2])?;
    let host = Tensor::from_vec(vec![1i64, 7, -1])?;
    let err = x.index_select(0, &host).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Invalid { op: "index_select", .. }), "{err:?}");
    assert_eq!(err.to_string(), "index_select: index 7 is out of range for dim 0 of size 5");
    let err = x.index_select(1, &Tensor::from_vec(vec![-3i32])?).map(|_| ()).unwrap_err();
    assert_eq!(err.to_string(), "index_select: index -3 is out of range for dim 1 of size 2");
    // Reshapes of host indices keep their bounds: an embedding of [2, 2] indices is checked at once.
    let table = eager::nn::Embedding { weight: Var::new("weight", x.clone()) };
    let err = table.lookup(&Tensor::from_slice(&[0i64, 1, 2, 5], &[2, 2])?).map(|_| ()).unwrap_err();
    assert_eq!(err.to_string(), "index_select: index 5 is out of range for dim 0 of size 5");
    assert_eq!(
        table.lookup(&Tensor::from_slice(&[-1i64, 0], &[1, 2])?)?.to_vec::<f32>()?,
        [8.0, 9.0, 0.0, 1.0]
    );

    // Computed on the device: dispatch does not wait for the check; reads fail, naming the op,
    // and so do reads of results that depend on it.
    let on_device = host.add_scalar(0.0)?;
    let picked = x.index_select(0, &on_device)?;
    let later = picked.mul_scalar(2.0)?.sum_all()?;
    for (what, t) in [("the result", &picked), ("a dependent result", &later)] {
        let err = t.to_vec::<f32>().map(|_| ()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::DeviceFailure { .. }), "{what}: {err:?}");
        assert!(
            text.starts_with("index_select(f32[5, 2], i64[3]) {dim=0 checked} failed on the device"),
            "{what}: {text}"
        );
        assert!(text.contains("index 7 is out of range for dim 0 of size 5"), "{what}: {text}");
    }
    // A later op on the failed result fails with the first failure, named.
    let later_err = later.block_until_ready().unwrap_err().to_string();
    assert!(later_err.contains("index 7 is out of range for dim 0 of size 5"), "{later_err}");
    // Good device indices pass, wrapped; results that do not depend on the bad op still read.
    let good = Tensor::from_vec(vec![4i64, -5])?.add_scalar(0.0)?;
    assert_eq!(x.index_select(0, &good)?.to_vec::<f32>()?, [8.0, 9.0, 0.0, 1.0]);
    assert_eq!(x.sum_all()?.item::<f32>()?, 45.0);
    // Indices computed from values: argmax picks the largest row.
    let row = x.sum(&[1], false)?.argmax(None, true)?;
    assert_eq!(x.index_select(0, &row)?.to_vec::<f32>()?, [8.0, 9.0]);
    Ok(())
}

/// All compiles, at every tier, carry the NaN-propagating min/max flag, so the disk cache
/// keys on it too.
#[test]
fn compile_options_carry_nan_propagating_min_max() {
    use eager::pjrt::{compile_options, Tier};
    let flag = b"xla_cpu_enable_fast_min_max";
    for options in [compile_options(Tier::Quick, None), compile_options(Tier::Optimized, Some(&[0, 1]))] {
        assert!(options.windows(flag.len()).any(|w| w == flag));
    }
}
