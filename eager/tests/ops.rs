//! Op correctness on the real CPU plugin: every op against an independent reference computed
//! in f64 (ndarray or plain Rust math), over seeded random shapes, broadcasting edge cases,
//! 0-d and empty tensors and each dtype the op takes.
//!
//! One helper runs every op, as tinygrad's `helper_test_op` does: [`Check::run`] draws inputs,
//! runs the op on the device, runs the reference on the same (dtype-rounded) values and
//! compares. [`Check::unary`], [`Check::binary`] and [`check_reduce`] only choose shapes and
//! lift a scalar function to arrays.

use eager::prelude::*;
use eager::Element;
use half::{bf16, f16};
use ndarray::{ArrayD, Axis, Dimension, IxDyn, Slice, Zip};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x0e4_6e5;

mod common;

use common::{ALL, FLOATS, NUMERIC};

const INTS: &[DType] = &[DType::I32, DType::I64, DType::U8, DType::U32, DType::U64];
/// The dtypes casts are checked among.
const CASTABLE: &[DType] =
    &[DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::Bool];

/// The input shapes of one call of an op.
type Case = Vec<Vec<usize>>;

/// `shapes![[2, 3], [3]]`: one case's input shapes.
macro_rules! shapes {
    ($([$($d:expr),*]),* $(,)?) => { vec![$(vec![$($d as usize),*]),*] };
}

// ----- inputs ---------------------------------------------------------------------------------

/// Where input values are drawn from. Ints take the integers in range (clipped at 0 for
/// unsigned dtypes); bool inputs are 0/1 whatever the domain.
#[derive(Debug, Clone, Copy)]
struct Domain {
    lo: f64,
    hi: f64,
    /// Values closer to zero are drawn again (divisors).
    min_abs: f64,
    /// Round to integers for every dtype (so comparisons see ties).
    integral: bool,
}

const fn range(lo: f64, hi: f64) -> Domain {
    Domain { lo, hi, min_abs: 0.0, integral: false }
}

impl Domain {
    const fn nonzero(self, min_abs: f64) -> Domain {
        Domain { min_abs, ..self }
    }
    const fn integral(self) -> Domain {
        Domain { integral: true, ..self }
    }
}

/// `v` as the device will hold it in `dtype`, back in f64.
fn quantize(v: f64, dtype: DType) -> f64 {
    fn q<T: Element>(v: f64) -> f64 {
        T::from_f64(v).to_f64()
    }
    match dtype {
        DType::Bool => q::<bool>(v),
        DType::U8 => q::<u8>(v),
        DType::I32 => q::<i32>(v),
        DType::I64 => q::<i64>(v),
        DType::U32 => q::<u32>(v),
        DType::U64 => q::<u64>(v),
        DType::F16 => q::<f16>(v),
        DType::BF16 => q::<bf16>(v),
        DType::F32 => q::<f32>(v),
        DType::F64 => v,
    }
}

fn sample(rng: &mut StdRng, d: Domain, dtype: DType) -> f64 {
    if dtype == DType::Bool {
        return rng.gen_bool(0.5) as u8 as f64;
    }
    let lo = if dtype.is_int() && !dtype.is_signed_int() { d.lo.max(0.0) } else { d.lo };
    loop {
        let mut v = rng.gen_range(lo..=d.hi);
        if dtype.is_int() || d.integral {
            v = v.round();
        }
        let v = quantize(v, dtype);
        if v.abs() >= d.min_abs {
            return v;
        }
    }
}

/// A device tensor holding exactly `a`'s values (already representable in `dtype`).
fn tensor(a: &ArrayD<f64>, dtype: DType) -> Tensor {
    fn up<T: Element>(a: &ArrayD<f64>) -> Result<Tensor> {
        let v: Vec<T> = a.iter().map(|&x| T::from_f64(x)).collect();
        Tensor::from_slice(&v, a.shape())
    }
    match dtype {
        DType::Bool => up::<bool>(a),
        DType::U8 => up::<u8>(a),
        DType::I32 => up::<i32>(a),
        DType::I64 => up::<i64>(a),
        DType::U32 => up::<u32>(a),
        DType::U64 => up::<u64>(a),
        DType::F16 => up::<f16>(a),
        DType::BF16 => up::<bf16>(a),
        DType::F32 => up::<f32>(a),
        DType::F64 => up::<f64>(a),
    }
    .unwrap_or_else(|e| panic!("uploading {dtype}{:?}: {e}", a.shape()))
}

fn random_shape(rng: &mut StdRng) -> Vec<usize> {
    let rank = rng.gen_range(0..=4);
    (0..rank).map(|_| rng.gen_range(1..=4)).collect()
}

/// Edge cases (0-d, empty, size 1) and seeded random shapes.
fn unary_shapes() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut cases =
        vec![shapes![[]], shapes![[0]], shapes![[2, 0, 3]], shapes![[1]], shapes![[7]], shapes![[2, 3]]];
    cases.extend((0..3).map(|_| vec![random_shape(&mut rng)]));
    cases
}

/// NumPy broadcasting edge cases and seeded random broadcastable pairs.
fn binary_shapes() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut cases = vec![
        shapes![[], []],
        shapes![[5], [5]],
        shapes![[3, 1], [1, 4]],
        shapes![[2, 3, 4], [4]],
        shapes![[], [2, 3]],
        shapes![[2, 3], []],
        shapes![[0, 3], [1, 3]],
        shapes![[4, 1, 3], [2, 1]],
        shapes![[1], [0]],
    ];
    for _ in 0..3 {
        // A partner of a random shape: some leading dims dropped, some dims set to 1.
        let a = random_shape(&mut rng);
        let drop = rng.gen_range(0..=a.len());
        let b: Vec<usize> = a[drop..].iter().map(|&d| if rng.gen_bool(0.4) { 1 } else { d }).collect();
        cases.push(if rng.gen_bool(0.5) { vec![a, b] } else { vec![b, a] });
    }
    cases
}

// ----- references -----------------------------------------------------------------------------

/// NumPy's broadcast of two shapes (written here, not taken from eager).
fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => panic!("test bug: {a:?} and {b:?} do not broadcast ({x} vs {y})"),
        })
        .collect()
}

/// `f` applied elementwise to the broadcast inputs.
fn map_broadcast(inputs: &[ArrayD<f64>], f: impl Fn(&[f64]) -> f64) -> ArrayD<f64> {
    let shape = inputs.iter().fold(vec![], |s, a| broadcast_shape(&s, a.shape()));
    let views: Vec<_> = inputs.iter().map(|a| a.broadcast(IxDyn(&shape)).expect("broadcastable")).collect();
    ArrayD::from_shape_fn(IxDyn(&shape), |idx| {
        let xs: Vec<f64> = views.iter().map(|v| v[idx.slice()]).collect();
        f(&xs)
    })
}

/// Reduction of `x` over `dims` by `f` of each lane's values (row-major over those dims).
fn reduce_ref(x: &ArrayD<f64>, dims: &[usize], keepdim: bool, f: &dyn Fn(&[f64]) -> f64) -> ArrayD<f64> {
    let kept: Vec<usize> = (0..x.ndim()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(dims).copied().collect();
    let values: Vec<f64> = x.view().permuted_axes(IxDyn(&perm)).iter().copied().collect();
    let inner: usize = dims.iter().map(|&d| x.shape()[d]).product();
    let outer: usize = kept.iter().map(|&d| x.shape()[d]).product();
    let out: Vec<f64> = (0..outer).map(|o| f(&values[o * inner..(o + 1) * inner])).collect();
    let shape: Vec<usize> = (0..x.ndim())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(x.shape()[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(&shape), out).unwrap()
}

/// `f` applied to each 1-D lane along `dim` (softmax and friends).
fn lanes_ref(x: &ArrayD<f64>, dim: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> ArrayD<f64> {
    let mut out = x.clone();
    Zip::from(out.lanes_mut(Axis(dim))).and(x.lanes(Axis(dim))).for_each(|mut o, i| {
        let v = f(&i.to_vec());
        o.iter_mut().zip(v).for_each(|(o, v)| *o = v);
    });
    out
}

/// torch's matmul: 1-D operands promoted (and the added dim dropped), batch dims broadcast.
fn matmul_ref(a: &ArrayD<f64>, b: &ArrayD<f64>) -> ArrayD<f64> {
    let a2 = if a.ndim() == 1 { a.clone().insert_axis(Axis(0)) } else { a.clone() };
    let b2 = if b.ndim() == 1 { b.clone().insert_axis(Axis(1)) } else { b.clone() };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let (m, k, n) = (a2.shape()[ra - 2], a2.shape()[ra - 1], b2.shape()[rb - 1]);
    let batch = broadcast_shape(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]);
    let with = |x: usize, y: usize| batch.iter().copied().chain([x, y]).collect::<Vec<_>>();
    let av = a2.broadcast(IxDyn(&with(m, k))).unwrap();
    let bv = b2.broadcast(IxDyn(&with(k, n))).unwrap();
    let mut out = ArrayD::from_shape_fn(IxDyn(&with(m, n)), |idx| {
        let idx = idx.slice();
        let (bi, i, j) = (&idx[..idx.len() - 2], idx[idx.len() - 2], idx[idx.len() - 1]);
        let at = |x: usize, y: usize| bi.iter().copied().chain([x, y]).collect::<Vec<_>>();
        (0..k).map(|p| av[at(i, p).as_slice()] * bv[at(p, j).as_slice()]).sum()
    });
    if b.ndim() == 1 {
        let last = out.ndim() - 1;
        out = out.remove_axis(Axis(last));
    }
    if a.ndim() == 1 {
        let row = out.ndim() - if b.ndim() == 1 { 1 } else { 2 };
        out = out.remove_axis(Axis(row));
    }
    out
}

/// An int result as the device computes it: truncated toward zero, wrapped to the dtype's bits.
fn as_int(v: f64, dtype: DType) -> f64 {
    let i = v.trunc() as i128;
    match dtype {
        DType::U8 => i as u8 as f64,
        DType::I32 => i as i32 as f64,
        DType::I64 => i as i64 as f64,
        DType::U32 => i as u32 as f64,
        DType::U64 => i as u64 as f64,
        _ => v,
    }
}

fn resolve(dim: isize, rank: usize) -> usize {
    if dim < 0 {
        (dim + rank as isize) as usize
    } else {
        dim as usize
    }
}

// ----- the check ------------------------------------------------------------------------------

/// Relative and absolute tolerance of a result dtype: a few units in the last place of the
/// dtype's precision; ints and bools are exact.
#[derive(Debug, Clone, Copy)]
struct Tol {
    rtol: f64,
    atol: f64,
}

fn tol(dtype: DType) -> Tol {
    match dtype {
        DType::F64 => Tol { rtol: 1e-12, atol: 1e-12 },
        DType::F32 => Tol { rtol: 1e-5, atol: 1e-6 },
        DType::F16 => Tol { rtol: 2e-3, atol: 2e-3 },
        DType::BF16 => Tol { rtol: 1.6e-2, atol: 1.6e-2 },
        _ => Tol { rtol: 0.0, atol: 0.0 },
    }
}

fn assert_close(what: &str, got: &Tensor, want: &ArrayD<f64>, t: Tol) {
    assert_eq!(got.shape(), want.shape(), "{what}: wrong shape");
    let values = got.to_f64_vec().unwrap_or_else(|e| panic!("{what}: reading back: {e}"));
    let want: Vec<f64> = want.iter().copied().collect();
    common::assert_all_close(what, &values, &want, t.rtol, t.atol);
}

/// How to check one op: its dtypes, input domains, result dtype and tolerance.
#[derive(Clone)]
struct Check {
    name: String,
    dtypes: Vec<DType>,
    /// One per input; the last repeats.
    domains: Vec<Domain>,
    /// Inputs whose dtype is fixed whatever the checked dtype (the condition of `where`).
    fixed: Vec<(usize, DType)>,
    /// The result dtype when it is not the input's (comparisons, casts, argmax).
    out: Option<DType>,
    tol_scale: f64,
    /// Shapes for `unary`/`binary` instead of the default edge cases and random shapes.
    cases: Option<Vec<Case>>,
}

impl Check {
    fn new(name: impl Into<String>, dtypes: &[DType]) -> Check {
        Check {
            name: name.into(),
            dtypes: dtypes.to_vec(),
            domains: vec![range(-10.0, 10.0)],
            fixed: vec![],
            out: None,
            tol_scale: 1.0,
            cases: None,
        }
    }
    fn domain(self, d: Domain) -> Check {
        Check { domains: vec![d], ..self }
    }
    fn domains(self, d: &[Domain]) -> Check {
        Check { domains: d.to_vec(), ..self }
    }
    fn input_dtype(mut self, input: usize, dtype: DType) -> Check {
        self.fixed.push((input, dtype));
        self
    }
    fn out(self, dtype: DType) -> Check {
        Check { out: Some(dtype), ..self }
    }
    /// Widens the float tolerance by `k` (for ops whose error compounds).
    fn tol(self, k: f64) -> Check {
        Check { tol_scale: k, ..self }
    }
    fn on(self, cases: Vec<Case>) -> Check {
        Check { cases: Some(cases), ..self }
    }

    /// For each case and dtype: draw inputs, run `op` on the device and `reference` on the same
    /// values in f64, and compare.
    fn run(
        &self,
        cases: &[Case],
        op: impl Fn(&[Tensor]) -> Result<Tensor>,
        reference: impl Fn(&[ArrayD<f64>]) -> ArrayD<f64>,
    ) {
        let mut rng = StdRng::seed_from_u64(SEED);
        for case in cases {
            for &dtype in &self.dtypes {
                let dtype_of = |i: usize| self.fixed.iter().find(|f| f.0 == i).map_or(dtype, |f| f.1);
                let inputs: Vec<ArrayD<f64>> = case
                    .iter()
                    .enumerate()
                    .map(|(i, shape)| {
                        let d = self.domains[i.min(self.domains.len() - 1)];
                        ArrayD::from_shape_fn(IxDyn(shape), |_| sample(&mut rng, d, dtype_of(i)))
                    })
                    .collect();
                let tensors: Vec<Tensor> =
                    inputs.iter().enumerate().map(|(i, a)| tensor(a, dtype_of(i))).collect();
                let mut what = format!("{} on {dtype} inputs of shapes {case:?}", self.name);
                if inputs.iter().map(|a| a.len()).sum::<usize>() <= 12 {
                    let vals: Vec<Vec<f64>> = inputs.iter().map(|a| a.iter().copied().collect()).collect();
                    what.push_str(&format!(" (values {vals:?})"));
                }
                let got = op(&tensors).unwrap_or_else(|e| panic!("{what}: returned an error: {e}"));
                let out = self.out.unwrap_or(dtype);
                assert_eq!(got.dtype(), out, "{what}: wrong result dtype");
                let mut want = reference(&inputs);
                if out.is_int() {
                    want.mapv_inplace(|v| as_int(v, out));
                }
                let t = tol(out);
                assert_close(
                    &what,
                    &got,
                    &want,
                    Tol { rtol: t.rtol * self.tol_scale, atol: t.atol * self.tol_scale },
                );
            }
        }
    }

    fn unary(&self, op: impl Fn(&Tensor) -> Result<Tensor>, f: impl Fn(f64) -> f64) {
        let cases = self.cases.clone().unwrap_or_else(unary_shapes);
        self.run(&cases, |x| op(&x[0]), |x| x[0].mapv(&f));
    }

    fn binary(&self, op: impl Fn(&Tensor, &Tensor) -> Result<Tensor>, f: impl Fn(f64, f64) -> f64) {
        let cases = self.cases.clone().unwrap_or_else(binary_shapes);
        self.run(&cases, |x| op(&x[0], &x[1]), |x| map_broadcast(x, |v| f(v[0], v[1])));
    }
}

// ----- elementwise ----------------------------------------------------------------------------

#[test]
fn unary_ops() {
    let numeric = |name: &str| Check::new(name, NUMERIC);
    numeric("neg").unary(|x| x.neg(), |x| -x);
    numeric("abs").unary(|x| x.abs(), f64::abs);
    numeric("relu").unary(|x| x.relu(), |x| x.max(0.0));

    let float = |name: &str, lo: f64, hi: f64| Check::new(name, FLOATS).domain(range(lo, hi));
    float("exp", -5.0, 5.0).unary(|x| x.exp(), f64::exp);
    float("log", 0.01, 100.0).unary(|x| x.log(), f64::ln);
    float("sqrt", 0.0, 100.0).unary(|x| x.sqrt(), f64::sqrt);
    float("rsqrt", 0.01, 100.0).unary(|x| x.rsqrt(), |x| 1.0 / x.sqrt());
    float("tanh", -5.0, 5.0).unary(|x| x.tanh(), f64::tanh);
    float("sigmoid", -10.0, 10.0).unary(|x| x.sigmoid(), |x| 1.0 / (1.0 + (-x).exp()));
    float("sin", -10.0, 10.0).unary(|x| x.sin(), f64::sin);
    float("cos", -10.0, 10.0).unary(|x| x.cos(), f64::cos);
}

#[test]
fn binary_ops_broadcast() {
    let numeric = |name: &str| Check::new(name, NUMERIC);
    numeric("add").binary(|a, b| a.add(b), |a, b| a + b);
    numeric("sub").binary(|a, b| a.sub(b), |a, b| a - b);
    numeric("mul").binary(|a, b| a.mul(b), |a, b| a * b);
    numeric("maximum").binary(|a, b| a.maximum(b), f64::max);
    numeric("minimum").binary(|a, b| a.minimum(b), f64::min);
    // Int division truncates toward zero (as_int); divisors stay away from zero.
    numeric("div")
        .domains(&[range(-10.0, 10.0), range(-5.0, 5.0).nonzero(0.5)])
        .binary(|a, b| a.div(b), |a, b| a / b);
    // pow: positive float bases; int exponents non-negative (a negative one has no int result).
    Check::new("pow", FLOATS)
        .domains(&[range(0.1, 3.0), range(-2.0, 2.0)])
        .tol(4.0)
        .binary(|a, b| a.pow(b), f64::powf);
    Check::new("pow", INTS).domains(&[range(-3.0, 3.0), range(0.0, 3.0)]).binary(|a, b| a.pow(b), f64::powf);
}

#[test]
fn comparisons_give_bool() {
    // Small integers, so that equal values (ties) occur in every dtype.
    let cmp = |name: &str, dtypes: &[DType]| {
        Check::new(name, dtypes).domain(range(-3.0, 3.0).integral()).out(DType::Bool)
    };
    let b = |c: bool| c as u8 as f64;
    cmp("eq", ALL).binary(|x, y| x.eq(y), |x, y| b(x == y));
    cmp("ne", ALL).binary(|x, y| x.ne(y), |x, y| b(x != y));
    cmp("lt", NUMERIC).binary(|x, y| x.lt(y), |x, y| b(x < y));
    cmp("le", NUMERIC).binary(|x, y| x.le(y), |x, y| b(x <= y));
    cmp("gt", NUMERIC).binary(|x, y| x.gt(y), |x, y| b(x > y));
    cmp("ge", NUMERIC).binary(|x, y| x.ge(y), |x, y| b(x >= y));
    // Scalar forms: the scalar's conversion is what is new here, so fewer shapes.
    let few = || vec![shapes![[]], shapes![[0]], shapes![[2, 3]]];
    cmp("eq_scalar", NUMERIC).on(few()).unary(|x| x.eq_scalar(1.0), |x| b(x == 1.0));
    cmp("lt_scalar", NUMERIC).on(few()).unary(|x| x.lt_scalar(1.0), |x| b(x < 1.0));
    cmp("ge_scalar", NUMERIC).on(few()).unary(|x| x.ge_scalar(2.0), |x| b(x >= 2.0));
}

#[test]
fn scalar_forms_and_operators() {
    // Scalars are small non-negative integers, so they mean the same in every dtype (a negative
    // scalar saturates to 0 in u8); int results wrap (as_int). The ops themselves are checked
    // over all shapes above: here only the scalar and operator paths, on a few shapes.
    let c = |name: &str| {
        Check::new(name, NUMERIC).on(vec![shapes![[]], shapes![[0]], shapes![[2, 3]], shapes![[2, 1, 4]]])
    };
    let pairs = || vec![shapes![[3, 1], [1, 4]], shapes![[2, 3], []], shapes![[0, 3], [1, 3]]];
    c("add_scalar").unary(|x| x.add_scalar(3.0), |x| x + 3.0);
    c("sub_scalar").unary(|x| x.sub_scalar(2.0), |x| x - 2.0);
    c("mul_scalar").unary(|x| x.mul_scalar(3.0), |x| x * 3.0);
    c("div_scalar").unary(|x| x.div_scalar(4.0), |x| x / 4.0);
    c("pow_scalar").domain(range(-4.0, 4.0)).unary(|x| x.pow_scalar(2.0), |x| x * x);
    c("maximum_scalar").unary(|x| x.maximum_scalar(1.0), |x| x.max(1.0));
    c("minimum_scalar").unary(|x| x.minimum_scalar(2.0), |x| x.min(2.0));
    c("&a * 2.0").unary(|x| Ok(x * 2.0), |x| x * 2.0);
    c("2.0 - &a").unary(|x| Ok(2.0 - x), |x| 2.0 - x);
    c("-&a").unary(|x| Ok(-x), |x| -x);
    c("a / 2.0").unary(|x| Ok(x.clone() / 2.0), |x| x / 2.0);
    c("&a + &b").on(pairs()).binary(|a, b| Ok(a + b), |a, b| a + b);
    c("a * b").on(pairs()).binary(|a, b| Ok(a.clone() * b.clone()), |a, b| a * b);
    c("&a - b").on(pairs()).binary(|a, b| Ok(a - b.clone()), |a, b| a - b);
}

#[test]
fn where_selects_with_broadcasting() {
    let cases = vec![
        shapes![[2, 3], [2, 3], [2, 3]],
        shapes![[3, 1], [1, 4], []],
        shapes![[], [2, 2], [2, 2]],
        shapes![[0, 2], [2], [1, 2]],
        shapes![[2, 1, 3], [4, 1], [3]],
    ];
    Check::new("where", ALL).input_dtype(0, DType::Bool).run(
        &cases,
        |x| x[0].where_cond(&x[1], &x[2]),
        |x| map_broadcast(x, |v| if v[0] != 0.0 { v[1] } else { v[2] }),
    );
}

// ----- matmul ---------------------------------------------------------------------------------

#[test]
fn matmul_like_torch() {
    let cases = vec![
        shapes![[3, 4], [4, 5]],
        shapes![[1, 1], [1, 1]],
        shapes![[2, 3, 4], [2, 4, 5]],
        shapes![[2, 3, 4], [4, 5]],
        shapes![[3, 4], [2, 4, 2]],
        shapes![[2, 1, 3, 4], [5, 4, 2]],
        shapes![[4], [4, 5]],
        shapes![[3, 4], [4]],
        shapes![[4], [4]],
        shapes![[2, 3, 4], [4]],
        shapes![[4], [2, 4, 3]],
        shapes![[0, 3], [3, 4]],
        shapes![[3, 0], [0, 4]],
    ];
    // Small values keep int sums in range; the float error grows with the inner dim.
    Check::new("matmul", NUMERIC).domain(range(-2.0, 2.0)).tol(4.0).run(
        &cases,
        |x| x[0].matmul(&x[1]),
        |x| matmul_ref(&x[0], &x[1]),
    );
}

// ----- reductions -----------------------------------------------------------------------------

/// (shape, dims): empty dims means all dims.
type ReduceCase = (&'static [usize], &'static [isize]);

/// Runs `op(x, dims, keepdim)` for each case, with and without keepdim, against `f` of each
/// reduced lane.
fn check_reduce(
    check: &Check,
    cases: &[ReduceCase],
    op: impl Fn(&Tensor, &[isize], bool) -> Result<Tensor>,
    f: impl Fn(&[f64]) -> f64,
) {
    for &(shape, dims) in cases {
        let resolved: Vec<usize> = if dims.is_empty() {
            (0..shape.len()).collect()
        } else {
            let mut d: Vec<usize> = dims.iter().map(|&d| resolve(d, shape.len())).collect();
            d.sort();
            d
        };
        for keepdim in [false, true] {
            let c =
                Check { name: format!("{} dims={dims:?} keepdim={keepdim}", check.name), ..check.clone() };
            c.run(
                &[vec![shape.to_vec()]],
                |x| op(&x[0], dims, keepdim),
                |x| reduce_ref(&x[0], &resolved, keepdim, &f),
            );
        }
    }
}

/// Every lane non-empty (max, min and argmax of nothing are not defined).
const REDUCE_CASES: &[ReduceCase] = &[
    (&[2, 3, 4], &[1]),
    (&[2, 3, 4], &[0, 2]),
    (&[2, 3, 4], &[-1]),
    (&[2, 3, 4], &[]),
    (&[5], &[0]),
    (&[], &[]),
    (&[0, 4], &[1]),
];
/// Sums and means of nothing too: 0 and NaN, as torch.
const EMPTY_LANE_CASES: &[ReduceCase] = &[(&[3, 0], &[1]), (&[0, 4], &[]), (&[2, 0, 3], &[0, 1])];

#[test]
fn sum_and_mean() -> Result<()> {
    // Positive values, so f16/bf16 sums have no cancellation to blow up their relative error.
    let sum = Check::new("sum", NUMERIC).domain(range(0.0, 4.0)).tol(4.0);
    let mean = Check::new("mean", FLOATS).domain(range(0.0, 4.0)).tol(4.0);
    for cases in [REDUCE_CASES, EMPTY_LANE_CASES] {
        check_reduce(&sum, cases, |x, d, k| x.sum(d, k), |v| v.iter().sum());
        check_reduce(&mean, cases, |x, d, k| x.mean(d, k), |v| v.iter().sum::<f64>() / v.len() as f64);
    }
    // Long f16/bf16 reductions accumulate in f32, as torch's: a running f16 sum of ones stops
    // at 2048, and a mean over more than 65504 elements (f16's largest count) is still right.
    for dtype in [DType::F16, DType::BF16] {
        assert_eq!(
            Tensor::ones(&[4096], dtype)?.sum_all()?.to_f64_vec()?,
            [4096.0],
            "sum of 4096 {dtype} ones"
        );
        let x = Tensor::full(&[7, 10_000], 0.5, dtype)?;
        assert_eq!(x.mean_all()?.to_f64_vec()?, [0.5], "mean of 70000 {dtype} halves");
        assert_eq!(x.mean(&[1], false)?.to_f64_vec()?, [0.5; 7], "row means of {dtype} halves");
    }
    Ok(())
}

#[test]
fn max_and_min() {
    check_reduce(
        &Check::new("max", NUMERIC),
        REDUCE_CASES,
        |x, d, k| x.max(d, k),
        |v| v.iter().copied().fold(f64::MIN, f64::max),
    );
    check_reduce(
        &Check::new("min", NUMERIC),
        REDUCE_CASES,
        |x, d, k| x.min(d, k),
        |v| v.iter().copied().fold(f64::MAX, f64::min),
    );
}

#[test]
fn argmax_and_argmin_take_the_first_on_ties() {
    // One dim or none (the flattened tensor); small integers, so ties occur.
    let cases: &[ReduceCase] = &[
        (&[2, 3, 4], &[1]),
        (&[2, 3, 4], &[-1]),
        (&[2, 3, 4], &[]),
        (&[7], &[0]),
        (&[], &[]),
        (&[0, 4], &[1]),
    ];
    let first = |v: &[f64], better: fn(f64, f64) -> bool| {
        (1..v.len()).fold(0, |best, i| if better(v[i], v[best]) { i } else { best }) as f64
    };
    let c = |name: &str| Check::new(name, NUMERIC).domain(range(-3.0, 3.0).integral()).out(DType::I64);
    let arg = |d: &[isize]| d.first().copied();
    check_reduce(&c("argmax"), cases, |x, d, k| x.argmax(arg(d), k), |v| first(v, |a, b| a > b));
    check_reduce(&c("argmin"), cases, |x, d, k| x.argmin(arg(d), k), |v| first(v, |a, b| a < b));
}

#[test]
fn softmax_and_log_softmax_against_f64() {
    let cases = vec![shapes![[2, 3, 4]], shapes![[5]], shapes![[0, 3]], shapes![[3, 1]]];
    let softmax = |v: &[f64]| {
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = v.iter().map(|x| (x - m).exp()).sum();
        v.iter().map(|x| (x - m).exp() / s).collect::<Vec<_>>()
    };
    let log_softmax = |v: &[f64]| softmax(v).into_iter().map(f64::ln).collect::<Vec<_>>();
    // Large offsets too: the max is subtracted first, so nothing overflows.
    for (dtypes, d) in [(FLOATS, range(-10.0, 10.0)), (&[DType::F32, DType::F64][..], range(1000.0, 1010.0))]
    {
        for dim in [-1isize, 0] {
            let c = Check::new("softmax", dtypes).domain(d).tol(4.0);
            c.run(&cases, |x| x[0].softmax(dim), |x| lanes_ref(&x[0], resolve(dim, x[0].ndim()), softmax));
            let c = Check { name: "log_softmax".into(), ..c };
            c.run(
                &cases,
                |x| x[0].log_softmax(dim),
                |x| lanes_ref(&x[0], resolve(dim, x[0].ndim()), log_softmax),
            );
        }
    }
}

// ----- movement -------------------------------------------------------------------------------

#[test]
fn reshape_with_inferred_dim() {
    let cases: &[(&[usize], &[isize])] = &[
        (&[2, 3, 4], &[4, -1]),
        (&[2, 3, 4], &[24]),
        (&[2, 3, 4], &[-1]),
        (&[], &[1, 1]),
        (&[1, 1], &[]),
        (&[0, 3], &[3, -1, 2]),
    ];
    for &(from, to) in cases {
        let numel: usize = from.iter().product();
        let known: usize = to.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
        let shape: Vec<usize> = to.iter().map(|&d| if d < 0 { numel / known } else { d as usize }).collect();
        Check::new("reshape", ALL).run(
            &[vec![from.to_vec()]],
            |x| x[0].reshape(to),
            |x| ArrayD::from_shape_vec(IxDyn(&shape), x[0].iter().copied().collect()).unwrap(),
        );
    }
}

#[test]
fn permute_transpose_and_t() {
    let perms: &[(&[usize], &[isize])] = &[
        (&[2, 3, 4], &[2, 0, 1]),
        (&[2, 3, 4], &[1, 0, -1]),
        (&[2, 0, 3], &[2, 1, 0]),
        (&[], &[]),
        (&[3], &[0]),
    ];
    for &(shape, perm) in perms {
        let p: Vec<usize> = perm.iter().map(|&d| resolve(d, shape.len())).collect();
        Check::new("permute", ALL).run(
            &[vec![shape.to_vec()]],
            |x| x[0].permute(perm),
            |x| x[0].clone().permuted_axes(IxDyn(&p)),
        );
    }
    let swaps: &[(&[usize], isize, isize)] =
        &[(&[2, 3], 0, 1), (&[2, 3, 4], -1, 0), (&[2, 3, 4], 1, 1), (&[4, 0], 0, 1)];
    for &(shape, a, b) in swaps {
        let (ra, rb) = (resolve(a, shape.len()), resolve(b, shape.len()));
        Check::new("transpose", ALL).run(
            &[vec![shape.to_vec()]],
            |x| x[0].transpose(a, b),
            |x| {
                let mut y = x[0].clone();
                y.swap_axes(ra, rb);
                y
            },
        );
    }
    // t() swaps the last two dims; below rank 2 it is the identity, as torch's.
    let cases = vec![shapes![[2, 3]], shapes![[2, 3, 4]], shapes![[3]], shapes![[]]];
    Check::new("t", ALL).run(
        &cases,
        |x| x[0].t(),
        |x| {
            let mut y = x[0].clone();
            if y.ndim() >= 2 {
                y.swap_axes(y.ndim() - 2, y.ndim() - 1);
            }
            y
        },
    );
}

#[test]
fn broadcast_to_numpy_rules() {
    let cases: &[(&[usize], &[usize])] =
        &[(&[3], &[2, 3]), (&[], &[2, 2]), (&[3, 1], &[2, 3, 4]), (&[1, 3], &[0, 3]), (&[2, 3], &[2, 3])];
    for &(from, to) in cases {
        Check::new("broadcast_to", ALL).run(
            &[vec![from.to_vec()]],
            |x| x[0].broadcast_to(to),
            |x| x[0].broadcast(IxDyn(to)).expect("test case broadcasts").to_owned(),
        );
    }
}

#[test]
fn slice_and_narrow_with_step() {
    // (shape, dim, start, end, step)
    let cases: &[(&[usize], isize, usize, usize, usize)] = &[
        (&[8], 0, 1, 7, 2),
        (&[8], 0, 0, 8, 3),
        (&[3, 5], 1, 0, 5, 3),
        (&[3, 5], -1, 4, 5, 1),
        (&[3, 5], 0, 1, 1, 1),
        (&[2, 6, 3], 1, 2, 6, 2),
        (&[0, 4], 1, 1, 3, 1),
    ];
    for &(shape, dim, start, end, step) in cases {
        let d = resolve(dim, shape.len());
        let reference = |x: &[ArrayD<f64>]| {
            x[0].slice_axis(Axis(d), Slice::new(start as isize, Some(end as isize), step as isize)).to_owned()
        };
        Check::new("slice", ALL).run(
            &[vec![shape.to_vec()]],
            |x| x[0].slice(dim, start, end, step),
            reference,
        );
        if step == 1 {
            Check::new("narrow", ALL).run(
                &[vec![shape.to_vec()]],
                |x| x[0].narrow(dim, start, end - start),
                reference,
            );
        }
    }
}

#[test]
fn index_select_with_i32_and_i64_indices() {
    let cases: &[(&[usize], isize, &[usize])] = &[
        (&[4, 3], 0, &[3, 0, 0, 2]),
        (&[4, 3], -1, &[2, 1]),
        (&[5], 0, &[]),
        (&[2, 3, 4], 1, &[2, 2]),
        (&[0, 3], 1, &[1]),
    ];
    for &(shape, dim, idx) in cases {
        let d = resolve(dim, shape.len());
        let as_i32: Vec<i32> = idx.iter().map(|&i| i as i32).collect();
        let as_i64: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
        for indices in [Tensor::from_vec(as_i32).unwrap(), Tensor::from_vec(as_i64).unwrap()] {
            Check::new("index_select", ALL).run(
                &[vec![shape.to_vec()]],
                |x| x[0].index_select(dim, &indices),
                |x| x[0].select(Axis(d), idx),
            );
        }
    }
    // Negative indices count from the end; out-of-range ones are an error naming the index
    // (they used to clamp, XLA's gather semantics).
    let x = Tensor::from_slice(&[10i64, 11, 12, 13], &[4]).unwrap();
    let picked = x.index_select(0, &Tensor::from_vec(vec![-4i32, -1, 2]).unwrap()).unwrap();
    assert_eq!(picked.to_vec::<i64>().unwrap(), [10, 13, 12]);
    let err = x.index_select(0, &Tensor::from_vec(vec![7i32, -1, 2]).unwrap()).map(|_| ()).unwrap_err();
    assert_eq!(err.to_string(), "index_select: index 7 is out of range for dim 0 of size 4");
}

#[test]
fn cat_along_a_dim() {
    let cases: &[(Case, isize)] = &[
        (shapes![[2, 3], [4, 3], [0, 3]], 0),
        (shapes![[2, 1], [2, 4]], -1),
        (shapes![[3], [2]], 0),
        (shapes![[2, 2]], 1),
        (shapes![[2, 0, 1], [2, 3, 1]], 1),
    ];
    for (case, dim) in cases {
        let d = resolve(*dim, case[0].len());
        Check::new("cat", ALL).run(
            std::slice::from_ref(case),
            |x| Tensor::cat(&x.iter().collect::<Vec<_>>(), *dim),
            |x| ndarray::concatenate(Axis(d), &x.iter().map(|a| a.view()).collect::<Vec<_>>()).unwrap(),
        );
    }
}

// ----- casts ----------------------------------------------------------------------------------

#[test]
fn casts_among_dtypes() {
    let cases = vec![shapes![[2, 3]], shapes![[]], shapes![[0, 2]], shapes![[17]]];
    let to_bool = |x: f64| (x != 0.0) as u8 as f64;
    for &from in CASTABLE {
        for &to in CASTABLE.iter().filter(|&&to| to != from) {
            let reference = |x: &[ArrayD<f64>]| x[0].mapv(|v| if to == DType::Bool { to_bool(v) } else { v });
            let op = |x: &[Tensor]| x[0].to_dtype(to);
            // Integers every dtype holds exactly (bf16 up to 256, u8 up to 255).
            let c = Check::new(format!("cast {from} -> {to}"), &[from]).out(to);
            c.clone().domain(range(0.0, 120.0).integral()).run(&cases, op, reference);
            // Small signed fractions (zeros included): floats to ints truncate toward zero,
            // anything to bool is "nonzero". Negative floats to u8 are undefined, so skipped.
            if matches!(to, DType::I32 | DType::I64 | DType::Bool) {
                c.clone().domain(range(-3.0, 3.0)).run(&cases, op, reference);
            }
            // Rounding between float precisions.
            if from.is_float() && to.is_float() {
                c.domain(range(-300.0, 300.0)).run(&cases, op, reference);
            }
        }
    }
}

// ----- construction and reading back ----------------------------------------------------------

#[test]
fn full_zeros_ones_eye_and_arange() -> Result<()> {
    for &dtype in CASTABLE {
        let shapes: [&[usize]; 3] = [&[], &[0], &[2, 3]];
        for shape in shapes {
            let what = |f: &str| format!("{f}({shape:?}, {dtype})");
            let n: usize = shape.iter().product();
            let expect = |t: Tensor, v: f64, f: &str| {
                assert_eq!((t.shape(), t.dtype()), (shape, dtype), "{}", what(f));
                assert_eq!(t.to_f64_vec().unwrap(), vec![v; n], "{}", what(f));
            };
            expect(Tensor::zeros(shape, dtype)?, 0.0, "zeros");
            expect(Tensor::ones(shape, dtype)?, 1.0, "ones");
            expect(Tensor::full(shape, 7.0, dtype)?, if dtype == DType::Bool { 1.0 } else { 7.0 }, "full");
            expect(Tensor::ones(shape, dtype)?.zeros_like()?, 0.0, "zeros_like");
            expect(Tensor::zeros(shape, dtype)?.ones_like()?, 1.0, "ones_like");
        }
        let eye = Tensor::eye(3, dtype)?;
        assert_eq!(eye.dtype(), dtype);
        let want: Vec<f64> = (0..9).map(|i| (i % 4 == 0) as u8 as f64).collect();
        assert_eq!(eye.to_f64_vec()?, want, "eye(3, {dtype})");
        let rect = Tensor::eye_on(2, 4, dtype, eager::default_device())?;
        assert_eq!(rect.shape(), [2, 4]);
        assert_eq!(rect.to_f64_vec()?, [1., 0., 0., 0., 0., 1., 0., 0.], "eye(2, 4, {dtype})");
    }
    // A fractional fill converts like a cast: truncated in ints.
    assert_eq!(Tensor::full(&[2], 2.5, DType::F32)?.to_vec::<f32>()?, [2.5, 2.5]);
    assert_eq!(Tensor::full(&[2], 2.5, DType::I32)?.to_vec::<i32>()?, [2, 2]);

    // arange against plain math: n = ceil((end - start) / step) values start + i * step.
    let cases: &[(f64, f64, f64, &[DType])] = &[
        (0.0, 5.0, 1.0, NUMERIC),
        (1.5, 3.0, 0.5, FLOATS),
        (5.0, 0.0, -2.0, &[DType::I32, DType::I64, DType::F32, DType::F64]),
        (0.0, 1.0, 0.1, &[DType::F32, DType::F64]),
        (3.0, 3.0, 1.0, NUMERIC),
        (0.0, 10.0, 3.0, NUMERIC),
        (-2.0, 30.0, 7.0, &[DType::I32, DType::I64, DType::F16, DType::BF16]),
    ];
    for &(start, end, step, dtypes) in cases {
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let want = ArrayD::from_shape_fn(IxDyn(&[n]), |i| start + i[0] as f64 * step);
        for &dtype in dtypes {
            let got = Tensor::arange(start, end, step, dtype)?;
            assert_eq!(got.dtype(), dtype);
            assert_close(&format!("arange({start}, {end}, {step}, {dtype})"), &got, &want, tol(dtype));
        }
    }
    Ok(())
}

/// Host values survive every way in and out, exactly.
fn round_trip<T: Element + PartialEq>(values: [T; 6]) -> Result<()> {
    let what = T::DTYPE;
    let t = Tensor::from_slice(&values, &[2, 3])?;
    assert_eq!((t.shape(), t.dtype(), t.numel(), t.rank()), (&[2, 3][..], what, 6, 2));
    assert_eq!(t.to_vec::<T>()?, values, "{what}: to_vec");
    assert_eq!(t.to_f64_vec()?, values.iter().map(|v| v.to_f64()).collect::<Vec<_>>(), "{what}: to_f64_vec");
    let a = t.to_ndarray::<T>()?;
    assert_eq!(a.shape(), [2, 3]);
    assert_eq!(a[[1, 2]], values[5], "{what}: to_ndarray is row-major");
    // from_ndarray reads logical order, whatever the layout (a transposed view here).
    let back = Tensor::from_ndarray(&a.t())?;
    assert_eq!(back.shape(), [3, 2]);
    assert_eq!(
        back.to_vec::<T>()?,
        [0, 3, 1, 4, 2, 5].map(|i| values[i]),
        "{what}: from_ndarray of a transposed view"
    );
    assert_eq!(Tensor::from_vec(values.to_vec())?.shape(), [6]);
    let s = Tensor::scalar(values[4])?;
    assert_eq!((s.shape(), s.item::<T>()?), (&[][..], values[4]), "{what}: scalar/item");
    let empty = Tensor::from_slice::<T>(&[], &[0, 3])?;
    assert_eq!((empty.shape(), empty.to_vec::<T>()?), (&[0, 3][..], vec![]), "{what}: empty");
    Ok(())
}

#[test]
fn host_round_trips_every_dtype() -> Result<()> {
    round_trip([true, false, false, true, true, false])?;
    round_trip([0u8, 1, 127, 128, 254, 255])?;
    round_trip([i32::MIN, -1, 0, 1, 7, i32::MAX])?;
    round_trip([i64::MIN, -1, 0, 1 << 40, 7, i64::MAX])?;
    round_trip([0u32, 1, u32::MAX, 5, 6, 7])?;
    round_trip([0u64, 1, u64::MAX, 5, 6, 7])?;
    round_trip([
        f16::from_f32(-1.5),
        f16::ZERO,
        f16::MAX,
        f16::MIN_POSITIVE,
        f16::from_f32(3.25),
        f16::NEG_INFINITY,
    ])?;
    round_trip([-1.5, 0.0, 1e30, 1e-30, 3.25, f32::INFINITY].map(bf16::from_f32))?;
    round_trip([-1.5f32, 0.0, f32::MAX, f32::MIN_POSITIVE, 1e-3, f32::INFINITY])?;
    round_trip([-1.5f64, 0.0, f64::MAX, f64::MIN_POSITIVE, 1e-300, 0.1])?;
    Ok(())
}

// ----- random ---------------------------------------------------------------------------------

/// Mean and standard deviation.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    (mean, (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt())
}

/// Lag-1 correlation: neighbouring values must not depend on each other.
fn lag1(v: &[f64]) -> f64 {
    let (m, s) = moments(v);
    v.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>() / ((v.len() - 1) as f64 * s * s)
}

// One test for everything random: the seed is process-wide state, and no other test here
// draws from it, so nothing interleaves with these draws.
#[test]
fn random_uniform_and_normal() -> Result<()> {
    const N: usize = 200_000;
    // Bounds are 5 standard errors wide: a correct generator fails about once in 10^6 runs.
    let se = 5.0 / (N as f64).sqrt();
    manual_seed(1234);
    for &dtype in FLOATS {
        let u = Tensor::rand(&[N], dtype)?;
        assert_eq!((u.shape(), u.dtype()), (&[N][..], dtype));
        let u = u.to_f64_vec()?;
        if let Some(bad) = u.iter().find(|v| !(0.0..1.0).contains(*v)) {
            panic!("rand {dtype}: {bad} is outside [0, 1)");
        }
        let (mean, std) = moments(&u);
        assert!((mean - 0.5).abs() < se * 0.2887, "rand {dtype}: mean {mean}");
        assert!((std - 0.2887).abs() < se * 0.15, "rand {dtype}: std {std}, expected 1/sqrt(12)");
        let below = u.iter().filter(|&&v| v < 0.1).count() as f64 / N as f64;
        assert!((below - 0.1).abs() < se * 0.3, "rand {dtype}: {below} of the values below 0.1");
        assert!(lag1(&u).abs() < se, "rand {dtype}: neighbours correlate ({})", lag1(&u));

        let z = Tensor::randn(&[N], dtype)?.to_f64_vec()?;
        assert!(z.iter().all(|v| v.is_finite()), "randn {dtype}: non-finite values");
        let (mean, std) = moments(&z);
        assert!(mean.abs() < se, "randn {dtype}: mean {mean}");
        assert!((std - 1.0).abs() < se * 0.75, "randn {dtype}: std {std}");
        let within = z.iter().filter(|v| v.abs() < 1.0).count() as f64 / N as f64;
        assert!((within - 0.6827).abs() < se * 0.47, "randn {dtype}: {within} of the values within one sd");
        assert!(lag1(&z).abs() < se, "randn {dtype}: neighbours correlate ({})", lag1(&z));
    }

    // Same seed, same values; another seed or the next draw, other values.
    let draw = || -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((Tensor::rand(&[1000], DType::F32)?.to_vec()?, Tensor::randn(&[2, 500], DType::F32)?.to_vec()?))
    };
    manual_seed(42);
    let (u1, z1) = draw()?;
    let (u2, z2) = draw()?;
    manual_seed(42);
    assert_eq!(draw()?, (u1.clone(), z1.clone()), "same seed, different values");
    manual_seed(43);
    let (u3, z3) = draw()?;
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).filter(|(x, y)| x == y).count();
    assert!(same(&u1, &u3) < 10 && same(&z1, &z3) < 10, "seeds 42 and 43 give the same values");
    assert!(same(&u1, &u2) < 10 && same(&z1, &z2) < 10, "two draws after one seed give the same values");

    // 0-d and empty shapes.
    let s = Tensor::rand(&[], DType::F64)?.item::<f64>()?;
    assert!((0.0..1.0).contains(&s));
    assert_eq!(Tensor::randn(&[0, 3], DType::F32)?.shape(), [0, 3]);
    Ok(())
}

// ----- display --------------------------------------------------------------------------------

#[test]
fn display_like_torch() -> Result<()> {
    let dev = eager::default_device();
    let show = |t: Tensor| t.to_string();
    assert_eq!(
        show(Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?),
        format!(
            "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], shape=[2, 2], dtype=f32, device={dev})"
        )
    );
    assert_eq!(show(Tensor::scalar(3.5f64)?), format!("tensor(3.5000, shape=[], dtype=f64, device={dev})"));
    assert_eq!(
        show(Tensor::from_vec(vec![-1i64, 20, 3])?),
        format!("tensor([-1, 20,  3], shape=[3], dtype=i64, device={dev})")
    );
    assert_eq!(
        show(Tensor::from_vec(vec![true, false])?),
        format!("tensor([ true, false], shape=[2], dtype=bool, device={dev})")
    );
    assert_eq!(
        show(Tensor::zeros(&[0], DType::F32)?),
        format!("tensor([], shape=[0], dtype=f32, device={dev})")
    );
    assert_eq!(
        show(Tensor::from_vec(vec![-1.5f32, 1e-5])?),
        format!("tensor([-1.5000e+00,  1.0000e-05], shape=[2], dtype=f32, device={dev})")
    );
    assert_eq!(
        show(Tensor::from_vec(vec![1e10f64, 1.0])?),
        format!("tensor([1.0000e+10, 1.0000e+00], shape=[2], dtype=f64, device={dev})")
    );

    // Over 1000 elements: three at each end of each dim, `...` between.
    assert_eq!(
        show(Tensor::arange(0.0, 1001.0, 1.0, DType::I64)?),
        format!("tensor([   0,    1,    2, ...,  998,  999, 1000], shape=[1001], dtype=i64, device={dev})")
    );
    let big = show(Tensor::ones(&[40, 50], DType::F32)?);
    let lines: Vec<&str> = big.lines().collect();
    assert_eq!(lines.len(), 7, "{big}");
    assert_eq!(lines[0], "tensor([[1.0000, 1.0000, 1.0000, ..., 1.0000, 1.0000, 1.0000],");
    assert_eq!(lines[3].trim(), "...,");
    assert!(lines[6].ends_with(&format!("]], shape=[40, 50], dtype=f32, device={dev})")), "{big}");
    Ok(())
}

// ----- bad input ------------------------------------------------------------------------------

/// `r` is an error whose message starts with the op's name.
fn assert_err<T>(op: &str, r: Result<T>) {
    match r {
        Ok(_) => panic!("{op}: expected an error, got a result"),
        Err(e) => assert!(
            e.to_string().starts_with(&format!("{op}: ")),
            "{op}: the error does not name the op: {e}"
        ),
    }
}

#[test]
fn bad_input_is_an_error_naming_the_op() -> Result<()> {
    let a = Tensor::zeros(&[2, 3], DType::F32)?;
    let i = Tensor::zeros(&[2, 3], DType::I32)?;
    let b = Tensor::zeros(&[2, 3], DType::Bool)?;
    let idx = Tensor::from_vec(vec![0i64])?;
    assert_err("add", a.add(&Tensor::zeros(&[4], DType::F32)?));
    assert_err("add", a.add(&i));
    assert_err("add", b.add(&b));
    assert_err("mul", a.mul(&Tensor::zeros(&[3, 2], DType::F32)?));
    assert_err("exp", i.exp());
    assert_err("relu", b.relu());
    assert_err("lt", b.lt(&b));
    assert_err("where", a.where_cond(&a, &a));
    assert_err("where", b.where_cond(&a, &i));
    assert_err("matmul", a.matmul(&a));
    assert_err("matmul", a.matmul(&Tensor::scalar(1.0f32)?));
    assert_err("reshape", a.reshape(&[4]));
    assert_err("reshape", a.reshape(&[-1, -1]));
    assert_err("sum", a.sum(&[2], false));
    assert_err("sum", a.sum(&[0, -2], false));
    assert_err("mean", i.mean(&[], false));
    assert_err("argmax", Tensor::zeros(&[0, 2], DType::F32)?.argmax(Some(0), false));
    assert_err("transpose", a.transpose(0, 2));
    assert_err("permute", a.permute(&[0, 0]));
    assert_err("squeeze", a.squeeze(0));
    assert_err("broadcast_to", a.broadcast_to(&[3, 3]));
    assert_err("slice", a.slice(1, 0, 4, 1));
    assert_err("slice", a.slice(1, 0, 3, 0));
    assert_err("slice", a.slice(2, 0, 1, 1));
    assert_err("index_select", a.index_select(2, &idx));
    assert_err("index_select", a.index_select(0, &a));
    assert_err("concat", Tensor::cat(&[&a, &Tensor::zeros(&[2, 2], DType::F32)?], 0));
    assert_err("concat", Tensor::cat(&[&a, &i], 0));
    assert_err("concat", Tensor::cat(&[], 0));
    assert_err("rand", Tensor::rand(&[2], DType::I32));
    assert_err("arange", Tensor::arange(0.0, 1.0, 0.0, DType::F32));
    assert_err("from_slice", Tensor::from_slice(&[1.0f32; 5], &[2, 3]));
    assert_err("to_vec", a.to_vec::<i32>());
    assert_err("item", a.item::<f32>());
    Ok(())
}

#[test]
fn bad_convolutions_and_pools_are_errors_naming_the_op() -> Result<()> {
    let x = Tensor::zeros(&[2, 4, 5, 5], DType::F32)?;
    let w = Tensor::zeros(&[6, 2, 3, 3], DType::F32)?;
    // Channel mismatch: 4 input channels, the weight expects 1 * 2.
    let e = x.conv2d(&w, [1, 1], 0.into(), [1, 1], 1).unwrap_err().to_string();
    assert!(e.starts_with("conv2d: ") && e.contains("[2, 4, 5, 5]") && e.contains("[6, 2, 3, 3]"), "{e}");
    // Groups not dividing the channels.
    assert_err("conv2d", x.conv2d(&Tensor::zeros(&[6, 2, 3, 3], DType::F32)?, [1, 1], 0.into(), [1, 1], 3));
    assert_err("conv2d", x.conv2d(&Tensor::zeros(&[5, 2, 3, 3], DType::F32)?, [1, 1], 0.into(), [1, 1], 2));
    assert_err("conv2d", x.conv2d(&w, [1, 1], 0.into(), [1, 1], 0));
    // Kernel larger than the padded input (also through dilation).
    let big = Tensor::zeros(&[6, 4, 7, 3], DType::F32)?;
    let e = x.conv2d(&big, [1, 1], 0.into(), [1, 1], 1).unwrap_err().to_string();
    assert!(e.starts_with("conv2d: ") && e.contains("larger than the padded input"), "{e}");
    assert_err("conv2d", x.conv2d(&Tensor::zeros(&[6, 4, 3, 3], DType::F32)?, [1, 1], 0.into(), [3, 3], 1));
    // Wrong ranks.
    assert_err("conv2d", x.conv2d(&Tensor::zeros(&[6, 4, 3], DType::F32)?, [1, 1], 0.into(), [1, 1], 1));
    assert_err("conv1d", x.conv1d(&w, 1, 0.into(), 1, 1));
    assert_err(
        "conv1d",
        Tensor::zeros(&[4, 5], DType::F32)?.conv1d(&Tensor::zeros(&[2, 4], DType::F32)?, 1, 0.into(), 1, 1),
    );
    // Non-float dtypes and mixed dtypes.
    let xi = Tensor::zeros(&[1, 2, 5], DType::I32)?;
    assert_err("conv1d", xi.conv1d(&Tensor::zeros(&[1, 2, 3], DType::I32)?, 1, 0.into(), 1, 1));
    let xf = Tensor::zeros(&[1, 2, 5], DType::F32)?;
    assert_err("conv1d", xf.conv1d(&Tensor::zeros(&[1, 2, 3], DType::F64)?, 1, 0.into(), 1, 1));
    // "same" needs stride 1; zero strides; padding of the wrong length.
    assert_err("conv1d", xf.conv1d(&Tensor::zeros(&[1, 2, 3], DType::F32)?, 2, Padding::Same, 1, 1));
    assert_err("conv1d", xf.conv1d(&Tensor::zeros(&[1, 2, 3], DType::F32)?, 0, 0.into(), 1, 1));
    assert_err("conv1d", xf.conv1d(&Tensor::zeros(&[1, 2, 3], DType::F32)?, 1, [1, 1].into(), 1, 1));

    // Transposed convolutions: channel mismatch, padding beyond the kernel, output padding.
    let wt = Tensor::zeros(&[3, 2, 3, 3], DType::F32)?;
    let e = x.conv_transpose2d(&wt, [1, 1], [0, 0], [0, 0], [1, 1], 1).unwrap_err().to_string();
    assert!(e.starts_with("conv_transpose2d: ") && e.contains("[3, 2, 3, 3]"), "{e}");
    let w4 = Tensor::zeros(&[4, 2, 3, 3], DType::F32)?;
    assert_err("conv_transpose2d", x.conv_transpose2d(&w4, [1, 1], [3, 0], [0, 0], [1, 1], 1));
    assert_err("conv_transpose2d", x.conv_transpose2d(&w4, [2, 2], [0, 0], [2, 0], [1, 1], 1));
    assert_err("conv_transpose2d", x.conv_transpose2d(&w4, [1, 1], [0, 0], [0, 0], [1, 1], 3));
    assert_err(
        "conv_transpose2d",
        x.conv_transpose2d(&Tensor::zeros(&[4, 2, 3], DType::F32)?, [1, 1], [0, 0], [0, 0], [1, 1], 1),
    );

    // Pools.
    assert_err("max_pool2d", x.max_pool2d([8, 2], None, [1, 0]));
    assert_err("max_pool2d", x.max_pool2d([2, 2], None, [2, 0]));
    assert_err("max_pool2d", Tensor::zeros(&[5, 5], DType::F32)?.max_pool2d([2, 2], None, [0, 0]));
    assert_err("max_pool2d", Tensor::zeros(&[1, 5, 5], DType::I32)?.max_pool2d([2, 2], None, [0, 0]));
    assert_err("max_pool2d", x.max_pool2d([0, 2], None, [0, 0]));
    assert_err("avg_pool2d", x.avg_pool2d([2, 2], Some([0, 1]), [0, 0]));
    assert_err("avg_pool2d", Tensor::zeros(&[1, 5, 5], DType::U8)?.avg_pool2d([2, 2], None, [0, 0]));
    assert_err("adaptive_avg_pool2d", x.adaptive_avg_pool2d([2, 2]));
    assert_err("adaptive_avg_pool2d", Tensor::zeros(&[5], DType::F32)?.adaptive_avg_pool2d([1, 1]));
    Ok(())
}
