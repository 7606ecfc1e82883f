//! Gradients on the real CPU plugin: every differentiable op's rule (`Op::backward`) against
//! central finite differences in f64, plus what must not have a gradient, accumulation,
//! `no_grad`, and the backward ops going through the single-op compile cache.
//!
//! One helper checks every op, as tinygrad's `helper_test_op` does: [`check_gradients`] runs
//! `f` on leaves, backpropagates `sum(f(x) * R)` for a fixed random `R` (so every output
//! element matters) and compares each input's `.grad()` with finite differences of the same
//! weighted sum, evaluated through eager ops under `no_grad` and read back to the host.

mod common;

use eager::ops::{Binary, Fill, Op, Pad, Unary};
use eager::prelude::*;
use eager::profiler::EventKind;
use ndarray::{ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x9_7ad;

// ----- inputs ---------------------------------------------------------------------------------

fn uniform(rng: &mut StdRng, shape: &[usize], lo: f64, hi: f64) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(shape), |_| rng.gen_range(lo..hi))
}

/// Magnitudes in `lo..hi` with random signs: away from the kinks of abs and relu at 0.
fn away_from_zero(rng: &mut StdRng, shape: &[usize], lo: f64, hi: f64) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        (if rng.gen_bool(0.5) { 1.0 } else { -1.0 }) * rng.gen_range(lo..hi)
    })
}

/// Values at least 0.2 apart in random order, so max and min have one clear winner.
fn distinct(rng: &mut StdRng, shape: &[usize]) -> ArrayD<f64> {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> =
        (0..n).map(|k| (k as f64 - n as f64 / 2.0) * 0.25 + rng.gen_range(0.0..0.05)).collect();
    v.shuffle(rng);
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

/// Each value below (-1..0) or above (2..3) the other operand's range (0.5..1.5), at random,
/// so maximum and minimum never tie and both operands win somewhere.
fn far_from_mid(rng: &mut StdRng, shape: &[usize]) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        if rng.gen_bool(0.5) {
            rng.gen_range(-1.0..0.0)
        } else {
            rng.gen_range(2.0..3.0)
        }
    })
}

fn array(shape: &[usize], values: &[f64]) -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(shape), values.to_vec()).unwrap()
}

fn upload(a: &ArrayD<f64>) -> Tensor {
    Tensor::from_ndarray(a).unwrap_or_else(|e| panic!("uploading f64{:?}: {e}", a.shape()))
}

// ----- the check ------------------------------------------------------------------------------

/// Finite-difference step and tolerance: |analytic - numeric| <= atol + rtol * max(|both|).
#[derive(Debug, Clone, Copy)]
struct Tol {
    eps: f64,
    rtol: f64,
    atol: f64,
}

/// f64 throughout: truncation error ~eps² f''' ≈ 1e-12, rounding ~ulp(f)/eps ≈ 1e-10 (only
/// the outputs a perturbed input moves are differenced), so 1e-6 relative + 1e-8 absolute
/// leaves two orders of margin while a wrong rule (off by a factor, a sign, a term) fails.
const F64: Tol = Tol { eps: 1e-6, rtol: 1e-6, atol: 1e-8 };

fn check_gradients(name: &str, f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: Vec<ArrayD<f64>>) {
    check_gradients_tol(name, F64, f, inputs)
}

/// The check, with its step and tolerance (for functions that round through f32).
fn check_gradients_tol(
    name: &str,
    tol: Tol,
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: Vec<ArrayD<f64>>,
) {
    let shapes: Vec<&[usize]> = inputs.iter().map(|a| a.shape()).collect();
    let what = format!("{name} on {shapes:?}");
    let leaves: Vec<Tensor> = inputs.iter().map(|a| upload(a).set_requires_grad(true).unwrap()).collect();
    let out = f(&leaves).unwrap_or_else(|e| panic!("{what}: forward: {e}"));
    assert_eq!(out.dtype(), DType::F64, "{what}: the checked function must give f64");
    assert!(out.tracks_grad(), "{what}: the result does not track gradients");

    // Weights of either sign, bounded away from 0, so no output element is ignored.
    let mut rng = StdRng::seed_from_u64(SEED);
    let weights: Vec<f64> = (0..out.numel())
        .map(|_| (if rng.gen_bool(0.5) { 1.0 } else { -1.0 }) * rng.gen_range(0.5..1.5))
        .collect();
    let r = Tensor::from_slice(&weights, out.shape()).unwrap();
    let loss = out.mul(&r).and_then(|l| l.sum_all()).unwrap_or_else(|e| panic!("{what}: loss: {e}"));
    loss.backward().unwrap_or_else(|e| panic!("{what}: backward: {e}"));

    // f's values at `xs`, computed on the device with nothing recorded.
    let values = |xs: &[ArrayD<f64>]| -> Vec<f64> {
        no_grad(|| {
            let ts: Vec<Tensor> = xs.iter().map(upload).collect();
            let y = f(&ts).unwrap_or_else(|e| panic!("{what}: forward under no_grad: {e}"));
            assert!(!y.tracks_grad(), "{what}: no_grad recorded a graph");
            y.to_vec::<f64>().unwrap()
        })
    };
    for (i, leaf) in leaves.iter().enumerate() {
        let grad = leaf.grad().unwrap_or_else(|| panic!("{what}: input {i} got no gradient"));
        assert_eq!(
            (grad.shape(), grad.dtype()),
            (inputs[i].shape(), DType::F64),
            "{what}: gradient of input {i}"
        );
        let analytic = grad.to_vec::<f64>().unwrap();
        let mut xs = inputs.clone();
        for (j, &a) in analytic.iter().enumerate() {
            let x0 = inputs[i].as_slice().expect("standard layout")[j];
            let (up, down) = (x0 + tol.eps, x0 - tol.eps);
            xs[i].as_slice_mut().unwrap()[j] = up;
            let f_up = values(&xs);
            xs[i].as_slice_mut().unwrap()[j] = down;
            let f_down = values(&xs);
            xs[i].as_slice_mut().unwrap()[j] = x0;
            // Differences per output first: outputs the input does not move cancel exactly.
            let diff: f64 = f_up.iter().zip(&f_down).zip(&weights).map(|((u, d), w)| w * (u - d)).sum();
            let numeric = diff / (up - down);
            let bound = tol.atol + tol.rtol * a.abs().max(numeric.abs());
            assert!(
                (a - numeric).abs() <= bound,
                "{what}: d/d input {i}[{j}] is {a}, finite differences give {numeric} (bound {bound:e})"
            );
        }
    }
}

// ----- elementwise ----------------------------------------------------------------------------

type UnaryMethod = fn(&Tensor) -> Result<Tensor>;

#[test]
fn every_unary_op() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    for &u in Unary::ALL {
        // Exhaustive: a new variant does not compile until it is checked here.
        let (method, x): (UnaryMethod, ArrayD<f64>) = match u {
            Unary::Neg => (Tensor::neg, uniform(&mut rng, &[2, 3], -2.0, 2.0)),
            Unary::Abs => (Tensor::abs, away_from_zero(&mut rng, &[2, 3], 0.1, 2.0)),
            Unary::Exp => (Tensor::exp, uniform(&mut rng, &[2, 3], -2.0, 2.0)),
            Unary::Log => (Tensor::log, uniform(&mut rng, &[2, 3], 0.2, 3.0)),
            Unary::Sqrt => (Tensor::sqrt, uniform(&mut rng, &[2, 3], 0.2, 3.0)),
            Unary::Rsqrt => (Tensor::rsqrt, uniform(&mut rng, &[2, 3], 0.2, 3.0)),
            Unary::Tanh => (Tensor::tanh, uniform(&mut rng, &[2, 3], -2.0, 2.0)),
            Unary::Sigmoid => (Tensor::sigmoid, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Sin => (Tensor::sin, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Cos => (Tensor::cos, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Relu => (Tensor::relu, away_from_zero(&mut rng, &[2, 3], 0.1, 2.0)),
            Unary::Erf => (Tensor::erf, uniform(&mut rng, &[2, 3], -2.0, 2.0)),
            Unary::Log1p => (Tensor::log1p, uniform(&mut rng, &[2, 3], -0.5, 3.0)),
            Unary::Expm1 => (Tensor::expm1, uniform(&mut rng, &[2, 3], -2.0, 2.0)),
            // Piecewise constant: zero away from the steps (random points are, by far).
            Unary::Floor => (Tensor::floor, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Ceil => (Tensor::ceil, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Round => (Tensor::round, uniform(&mut rng, &[2, 3], -3.0, 3.0)),
            Unary::Sign => (Tensor::sign, away_from_zero(&mut rng, &[2, 3], 0.1, 2.0)),
        };
        check_gradients(u.name(), |a| method(&a[0]), vec![x.clone()]);
        // And on a rank-3 tensor: the rules are elementwise whatever the shape.
        let x3 = ArrayD::from_shape_vec(IxDyn(&[3, 1, 2]), x.iter().copied().collect()).unwrap();
        check_gradients(u.name(), |a| method(&a[0]), vec![x3]);
    }
}

#[test]
fn every_binary_op_with_broadcasting() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3], &[2, 3]),
        (&[2, 3], &[3]),
        (&[2, 3], &[2, 1]),
        (&[3, 1], &[1, 4]),
        (&[2, 3], &[]),
        (&[3], &[2, 2, 3]),
    ];
    for &b in Binary::ALL {
        for &(sa, sb) in cases {
            // Exhaustive: a new variant does not compile until it is checked here.
            let (method, a, c): (fn(&Tensor, &Tensor) -> Result<Tensor>, _, _) = match b {
                Binary::Add => {
                    (Tensor::add, uniform(&mut rng, sa, -2.0, 2.0), uniform(&mut rng, sb, -2.0, 2.0))
                }
                Binary::Sub => {
                    (Tensor::sub, uniform(&mut rng, sa, -2.0, 2.0), uniform(&mut rng, sb, -2.0, 2.0))
                }
                Binary::Mul => {
                    (Tensor::mul, uniform(&mut rng, sa, -2.0, 2.0), uniform(&mut rng, sb, -2.0, 2.0))
                }
                Binary::Div => {
                    (Tensor::div, uniform(&mut rng, sa, -2.0, 2.0), away_from_zero(&mut rng, sb, 0.5, 2.0))
                }
                // Positive bases: a^c and ln a are smooth there.
                Binary::Pow => {
                    (Tensor::pow, uniform(&mut rng, sa, 0.5, 2.0), uniform(&mut rng, sb, -2.0, 2.0))
                }
                Binary::Maximum => {
                    (Tensor::maximum, uniform(&mut rng, sa, 0.5, 1.5), far_from_mid(&mut rng, sb))
                }
                Binary::Minimum => {
                    (Tensor::minimum, uniform(&mut rng, sa, 0.5, 1.5), far_from_mid(&mut rng, sb))
                }
            };
            check_gradients(b.name(), |x| method(&x[0], &x[1]), vec![a, c]);
        }
    }
}

#[test]
fn maximum_and_minimum_split_the_gradient_at_ties() {
    let _serial = common::serial();
    // Central differences at a tie give 1/2 to each side: torch's convention, and the rule's.
    let a = array(&[4], &[1.0, 2.0, -3.0, 0.5]);
    let b = array(&[4], &[1.0, 0.0, -3.0, 4.0]);
    check_gradients("maximum", |x| x[0].maximum(&x[1]), vec![a.clone(), b.clone()]);
    check_gradients("minimum", |x| x[0].minimum(&x[1]), vec![a, b]);
}

#[test]
fn where_sends_the_gradient_to_the_branch_taken() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let cond = Tensor::from_slice(&[true, false, true, false, false, true], &[2, 3]).unwrap();
    let cases: &[(&[usize], &[usize])] = &[(&[2, 3], &[2, 3]), (&[3], &[2, 1]), (&[2, 3], &[])];
    for &(sa, sb) in cases {
        let (a, b) = (uniform(&mut rng, sa, -2.0, 2.0), uniform(&mut rng, sb, -2.0, 2.0));
        check_gradients("where", |x| cond.where_cond(&x[0], &x[1]), vec![a, b]);
    }
}

#[test]
fn a_tensor_used_twice_sums_its_gradients() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let x = uniform(&mut rng, &[2, 3], -1.0, 1.0);
    check_gradients(
        "x * exp(x) + sin(x) * x",
        |a| a[0].mul(&a[0].exp()?)?.add(&a[0].sin()?.mul(&a[0])?),
        vec![x],
    );
}

// ----- linear algebra and reductions ----------------------------------------------------------

#[test]
fn matmul_2d_batched_and_vector() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let cases: &[(&[usize], &[usize])] =
        &[(&[2, 3], &[3, 4]), (&[3, 2, 4], &[4, 2]), (&[2, 4], &[3, 4, 2]), (&[2, 3], &[3]), (&[3], &[3, 2])];
    for &(sa, sb) in cases {
        let (a, b) = (uniform(&mut rng, sa, -1.0, 1.0), uniform(&mut rng, sb, -1.0, 1.0));
        check_gradients("matmul", |x| x[0].matmul(&x[1]), vec![a, b]);
    }
    // Either operand read transposed, batched and broadcast too.
    let cases: &[(&[usize], &[usize], bool, bool)] = &[
        (&[3, 2], &[3, 4], true, false),
        (&[2, 3], &[4, 3], false, true),
        (&[3, 2], &[4, 3], true, true),
        (&[2, 3, 2], &[4, 3], true, true),
        (&[2, 3], &[3, 4, 3], false, true),
    ];
    for &(sa, sb, lhs_t, rhs_t) in cases {
        let (a, b) = (uniform(&mut rng, sa, -1.0, 1.0), uniform(&mut rng, sb, -1.0, 1.0));
        check_gradients(
            "matmul_transposed",
            move |x| x[0].matmul_transposed(&x[1], lhs_t, rhs_t),
            vec![a, b],
        );
    }
}

#[test]
fn reductions_over_dims_with_and_without_keepdim() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    type Reduction = fn(&Tensor, &[isize], bool) -> Result<Tensor>;
    let ops: [(&str, Reduction); 4] =
        [("sum", Tensor::sum), ("mean", Tensor::mean), ("max", Tensor::max), ("min", Tensor::min)];
    let all_dims: &[&[isize]] = &[&[1], &[0, 2], &[-1], &[]];
    for (name, op) in ops {
        for &dims in all_dims {
            for keepdim in [false, true] {
                let x = distinct(&mut rng, &[3, 4, 2]);
                check_gradients(
                    &format!("{name} dims={dims:?} keepdim={keepdim}"),
                    |a| op(&a[0], dims, keepdim),
                    vec![x],
                );
            }
        }
    }
    let x = distinct(&mut rng, &[2, 3]);
    check_gradients("sum_all", |a| a[0].sum_all(), vec![x.clone()]);
    check_gradients("mean_all", |a| a[0].mean_all(), vec![x]);
}

#[test]
fn softmax_and_log_softmax() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    for dim in [-1isize, 0] {
        let x = uniform(&mut rng, &[3, 4], -2.0, 2.0);
        check_gradients("softmax", |a| a[0].softmax(dim), vec![x.clone()]);
        check_gradients("log_softmax", |a| a[0].log_softmax(dim), vec![x]);
    }
}

// ----- movement -------------------------------------------------------------------------------

#[test]
fn reshape_permute_and_broadcast() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let x = uniform(&mut rng, &[3, 4, 2], -1.0, 1.0);
    check_gradients("reshape", |a| a[0].reshape(&[4, -1]), vec![x.clone()]);
    check_gradients("unsqueeze", |a| a[0].unsqueeze(1), vec![x.clone()]);
    check_gradients("permute", |a| a[0].permute(&[2, 0, 1]), vec![x.clone()]);
    check_gradients("transpose", |a| a[0].transpose(0, 2), vec![x.clone()]);
    check_gradients("t", |a| a[0].t(), vec![x]);
    check_gradients("broadcast_to", |a| a[0].broadcast_to(&[2, 3]), vec![uniform(&mut rng, &[3], -1.0, 1.0)]);
    check_gradients(
        "broadcast_to",
        |a| a[0].broadcast_to(&[4, 2, 3]),
        vec![uniform(&mut rng, &[2, 1], -1.0, 1.0)],
    );
    check_gradients("broadcast_to", |a| a[0].broadcast_to(&[2, 2]), vec![uniform(&mut rng, &[], -1.0, 1.0)]);
}

#[test]
fn slice_narrow_and_pad() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let x = uniform(&mut rng, &[3, 5, 2], -1.0, 1.0);
    check_gradients("slice step 2", |a| a[0].slice(1, 0, 5, 2), vec![x.clone()]);
    check_gradients("slice step 3", |a| a[0].slice(1, 1, 5, 3), vec![x.clone()]);
    check_gradients("slice step 2 of dim 0", |a| a[0].slice(0, 1, 3, 2), vec![x.clone()]);
    check_gradients("narrow", |a| a[0].narrow(-1, 1, 1), vec![x.clone()]);
    check_gradients("narrow", |a| a[0].narrow(1, 2, 3), vec![x]);
    // Pad has no method of its own (it is slice's gradient): reached through the dispatcher.
    let pad = |x: &Tensor| {
        let op = Op::Pad(Pad {
            low: [1usize, 0].as_slice().into(),
            high: [0usize, 2].as_slice().into(),
            interior: [0usize, 1].as_slice().into(),
        });
        eager::dispatch(op, &[x], None)
    };
    check_gradients("pad", |a| pad(&a[0]), vec![uniform(&mut rng, &[2, 3], -1.0, 1.0)]);
}

#[test]
fn index_select_adds_up_repeated_indices() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    let x = uniform(&mut rng, &[3, 4], -1.0, 1.0);
    let rows = Tensor::from_vec(vec![2i64, 0, 2, 2]).unwrap();
    let cols = Tensor::from_vec(vec![1i32, 1, 3]).unwrap();
    check_gradients("index_select dim 0", |a| a[0].index_select(0, &rows), vec![x.clone()]);
    check_gradients("index_select dim 1", |a| a[0].index_select(1, &cols), vec![x]);
    check_gradients(
        "index_select of rank 3",
        |a| a[0].index_select(1, &cols),
        vec![uniform(&mut rng, &[2, 4, 2], -1.0, 1.0)],
    );
    // Row 2 is picked three times: its gradient is the sum of three rows of R, not one.
    let x = upload(&array(&[3, 1], &[1.0, 2.0, 3.0])).set_requires_grad(true).unwrap();
    x.index_select(0, &rows).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), [1.0, 0.0, 3.0]);
}

#[test]
fn gather_and_scatter_add_route_gradients_to_the_indexed_places() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    // Repeated and negative indices; an index smaller than the input outside the dim.
    let idx = Tensor::from_slice(&[2i64, 0, -1, 0, 0, 1], &[2, 3]).unwrap();
    check_gradients("gather", |a| a[0].gather(0, &idx), vec![uniform(&mut rng, &[3, 3], -2.0, 2.0)]);
    let idx1 = Tensor::from_slice(&[1i64, 1, 0, -3], &[2, 2]).unwrap();
    check_gradients("gather", |a| a[0].gather(1, &idx1), vec![uniform(&mut rng, &[3, 3], -2.0, 2.0)]);
    // Into the input and from a source larger than the indices (its extra elements get zero).
    let inputs = vec![uniform(&mut rng, &[3, 3], -2.0, 2.0), uniform(&mut rng, &[3, 4], -2.0, 2.0)];
    check_gradients("scatter_add", |a| a[0].scatter_add(0, &idx, &a[1]), inputs);
}

#[test]
fn sort_and_topk_send_the_gradient_to_where_the_values_were() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    for descending in [false, true] {
        check_gradients("sort", |a| Ok(a[0].sort(1, descending)?.0), vec![distinct(&mut rng, &[3, 4])]);
    }
    check_gradients("topk", |a| Ok(a[0].topk(2, 0, true)?.0), vec![distinct(&mut rng, &[4, 3])]);
}

#[test]
fn rms_norm_group_norm_and_attention() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    check_gradients("rms_norm", |a| a[0].rms_norm(1, 1e-5), vec![uniform(&mut rng, &[2, 4], -2.0, 2.0)]);
    check_gradients(
        "group_norm",
        |a| a[0].group_norm(2, 1e-5),
        vec![uniform(&mut rng, &[2, 4, 3], -2.0, 2.0)],
    );
    let qkv = vec![
        uniform(&mut rng, &[2, 3, 4], -1.0, 1.0),
        uniform(&mut rng, &[2, 3, 4], -1.0, 1.0),
        uniform(&mut rng, &[2, 3, 2], -1.0, 1.0),
    ];
    check_gradients("sdpa causal", |a| a[0].scaled_dot_product_attention(&a[1], &a[2], None, true), qkv);
}

#[test]
fn take_along_dim_index_add_and_batch_norm() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    // Indices broadcast over dim 0; repeated and negative.
    let idx = Tensor::from_slice(&[2i64, -1, 0], &[1, 3]).unwrap();
    check_gradients(
        "take_along_dim",
        |a| a[0].take_along_dim(&idx, 1),
        vec![uniform(&mut rng, &[2, 3], -2.0, 2.0)],
    );
    let rows = Tensor::from_slice(&[1i64, -1, 1], &[3]).unwrap();
    let inputs = vec![uniform(&mut rng, &[4, 2], -2.0, 2.0), uniform(&mut rng, &[3, 2], -2.0, 2.0)];
    check_gradients("index_add", |a| a[0].index_add(0, &rows, &a[1]), inputs);
    // Training mode: the batch statistics depend on the input, so its gradient is not the
    // evaluation-mode one; weight and bias per channel.
    for training in [true, false] {
        let stats = |v: f64| Var::new("stat", Tensor::full(&[3], v, DType::F64).unwrap());
        let (mean, var) = (stats(0.2), stats(1.5));
        let inputs = vec![
            uniform(&mut rng, &[2, 3, 2, 2], -2.0, 2.0),
            uniform(&mut rng, &[3], 0.5, 1.5),
            uniform(&mut rng, &[3], -1.0, 1.0),
        ];
        check_gradients(
            &format!("batch_norm training={training}"),
            |a| eager::nn::batch_norm(&a[0], &mean, &var, Some(&a[1]), Some(&a[2]), training, 0.1, 1e-5),
            inputs,
        );
    }
}

/// The value of `a` with the gradient of `b`: a plausible wrong rule, for the test below.
fn value_of_with_gradient_of(a: Tensor, b: Tensor) -> Result<Tensor> {
    a.detach().add(&b.sub(&b.detach())?)
}

/// Runs the gradient check on `f`; the message of the mismatch it reports, or why there is none
/// (it passed, or it failed some other way: a forward or backward error is no catch).
fn reported_mismatch(
    name: &str,
    tol: Tol,
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: Vec<ArrayD<f64>>,
) -> std::result::Result<String, String> {
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_gradients_tol(name, tol, f, inputs)));
    let payload = match caught {
        Ok(()) => return Err("the gradient check passed".into()),
        Err(p) => p,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    // The comparison's own report: an analytic derivative against its finite difference.
    if message.contains(": d/d input ") && message.contains(", finite differences give ") {
        Ok(message)
    } else {
        Err(format!("failed, but not on a gradient difference: {message}"))
    }
}

/// The gradient check catches wrong rules: each function computes an op's value but carries a
/// plausible wrong gradient, and the check must report the difference itself.
#[test]
fn deliberately_broken_gradient_rules_are_caught() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    type Broken = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;
    let pool = |x: &Tensor| x.max_pool2d([2, 2], None, [0, 0]);
    let spread = |x: &Tensor| x.avg_pool2d([2, 2], None, [0, 0])?.mul_scalar(4.0);
    let conv = |x: &Tensor, w: &Tensor| x.conv2d(w, [1, 1], 1.into(), [1, 1], 1);
    let normalise = |x: &Tensor, constant_stats: bool| -> Result<Tensor> {
        let (mut mean, mut var) =
            (x.mean(&[0, 2], true)?, x.sub(&x.mean(&[0, 2], true)?)?.square()?.mean(&[0, 2], true)?);
        if constant_stats {
            (mean, var) = (mean.detach(), var.detach());
        }
        x.sub(&mean)?.mul(&var.add_scalar(1e-5)?.rsqrt()?)
    };
    // Casts round through f32: checked with the tolerance of `cast_through_f32_and_fill`.
    let f32_tol = Tol { eps: 1e-2, rtol: 1e-4, atol: 1e-5 };
    let cast = |x: &Tensor| x.to_dtype(DType::F32)?.to_dtype(DType::F64);
    let cases: Vec<(&str, Tol, Broken, Vec<ArrayD<f64>>)> = vec![
        (
            "max_pool2d sending the gradient to every element of the window",
            F64,
            Box::new(move |a| value_of_with_gradient_of(pool(&a[0])?, spread(&a[0])?)),
            vec![uniform(&mut rng, &[1, 2, 4, 4], -2.0, 2.0)],
        ),
        (
            "conv2d with the flipped kernel's gradients",
            F64,
            Box::new(move |a| {
                value_of_with_gradient_of(conv(&a[0], &a[1])?, conv(&a[0], &a[1].flip(&[2, 3])?)?)
            }),
            vec![uniform(&mut rng, &[1, 2, 4, 4], -1.0, 1.0), uniform(&mut rng, &[3, 2, 3, 3], -1.0, 1.0)],
        ),
        (
            "cumsum passing the gradient straight through",
            F64,
            Box::new(|a| value_of_with_gradient_of(a[0].cumsum(1)?, a[0].clone())),
            vec![uniform(&mut rng, &[2, 4], -1.0, 1.0)],
        ),
        (
            "sort not permuting the gradient back",
            F64,
            Box::new(|a| value_of_with_gradient_of(a[0].sort(1, false)?.0, a[0].clone())),
            vec![distinct(&mut rng, &[2, 4])],
        ),
        (
            "batch statistics treated as constants",
            F64,
            Box::new(move |a| value_of_with_gradient_of(normalise(&a[0], false)?, normalise(&a[0], true)?)),
            vec![uniform(&mut rng, &[3, 2, 2], -2.0, 2.0)],
        ),
        (
            "matmul whose gradients miss a transpose",
            F64,
            Box::new(|a| value_of_with_gradient_of(a[0].matmul(&a[1])?, a[0].matmul(&a[1].t()?)?)),
            vec![uniform(&mut rng, &[2, 3], -1.0, 1.0), uniform(&mut rng, &[3, 3], -1.0, 1.0)],
        ),
        (
            "mean passing the gradient on undivided (as sum)",
            F64,
            Box::new(|a| value_of_with_gradient_of(a[0].mean(&[1], false)?, a[0].sum(&[1], false)?)),
            vec![uniform(&mut rng, &[2, 4], -1.0, 1.0)],
        ),
        (
            "a float cast dropping the gradient (as an integer cast does)",
            f32_tol,
            Box::new(move |a| value_of_with_gradient_of(cast(&a[0])?, a[0].mul_scalar(0.0)?)),
            vec![uniform(&mut rng, &[2, 3], -2.0, 2.0)],
        ),
    ];
    for (name, tol, f, inputs) in cases {
        if let Err(why) = reported_mismatch(name, tol, &f, inputs) {
            panic!("{name}: the wrong rule was not caught as a gradient difference: {why}");
        }
    }
}

#[test]
fn cat_splits_the_gradient() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    for (dim, shapes) in [(0isize, [[1usize, 3], [2, 3], [3, 3]]), (1, [[2, 1], [2, 2], [2, 3]])] {
        let inputs: Vec<ArrayD<f64>> = shapes.iter().map(|s| uniform(&mut rng, s, -1.0, 1.0)).collect();
        check_gradients(&format!("cat dim {dim}"), |a| Tensor::cat(&[&a[0], &a[1], &a[2]], dim), inputs);
    }
}

#[test]
fn cast_through_f32_and_fill() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    // f32 rounds values by 2^-24 relative: over a step of 2e-2 that is ~1e-5 of the
    // derivative, and the gradient itself passes through f32. A quadratic has no truncation
    // error, so 1e-4 relative + 1e-5 absolute has a margin of ~5.
    let f32_tol = Tol { eps: 1e-2, rtol: 1e-4, atol: 1e-5 };
    let x = uniform(&mut rng, &[2, 3], -2.0, 2.0);
    check_gradients_tol(
        "cast f64 -> f32 -> f64",
        f32_tol,
        |a| {
            let y = a[0].to_dtype(DType::F32)?;
            y.mul(&y)?.to_dtype(DType::F64)
        },
        vec![x],
    );
    // Fill broadcasts its scalar input: the gradient is the sum (constructors take a value,
    // so the op is reached through the dispatcher).
    let fill =
        |x: &Tensor| eager::dispatch(Op::Fill(Fill { shape: [2usize, 3].as_slice().into() }), &[x], None);
    check_gradients("full", |a| fill(&a[0]), vec![uniform(&mut rng, &[], -1.0, 1.0)]);
}

// ----- nn -------------------------------------------------------------------------------------

#[test]
fn cumsum_and_cumprod_along_each_dim() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    for dim in [0, 1, -1] {
        check_gradients("cumsum", |a| a[0].cumsum(dim), vec![uniform(&mut rng, &[3, 4], -2.0, 2.0)]);
        // No zeros: the product rule divides by the input.
        check_gradients("cumprod", |a| a[0].cumprod(dim), vec![away_from_zero(&mut rng, &[3, 4], 0.3, 1.5)]);
    }
    check_gradients("cumsum", |a| a[0].cumsum(1), vec![uniform(&mut rng, &[2, 3, 2], -2.0, 2.0)]);
}

#[test]
fn silu_square_clamp_and_triangles() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    check_gradients("silu", |a| a[0].silu(), vec![uniform(&mut rng, &[2, 3], -3.0, 3.0)]);
    check_gradients("square", |a| a[0].square(), vec![uniform(&mut rng, &[2, 3], -3.0, 3.0)]);
    // Away from the bounds: clamp's gradient is 1 inside and 0 outside.
    let x = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![-2.0, -0.7, 0.2, 0.9, 1.6, 3.0]).unwrap();
    check_gradients("clamp", |a| a[0].clamp(Some(-1.0), Some(1.5)), vec![x.clone()]);
    check_gradients("clamp(min)", |a| a[0].clamp(Some(0.5), None), vec![x]);
    for k in [-1, 0, 2] {
        check_gradients("tril", |a| a[0].tril(k), vec![uniform(&mut rng, &[2, 3, 4], -2.0, 2.0)]);
        check_gradients("triu", |a| a[0].triu(k), vec![uniform(&mut rng, &[3, 4], -2.0, 2.0)]);
    }
}

#[test]
fn gelu_layer_norm_cross_entropy_and_mse() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    check_gradients("gelu", |a| nn::gelu(&a[0]), vec![uniform(&mut rng, &[2, 3], -3.0, 3.0)]);
    check_gradients("gelu_exact", |a| nn::gelu_exact(&a[0]), vec![uniform(&mut rng, &[2, 3], -3.0, 3.0)]);

    // The module itself, with f64 weights, for the gradient of its input.
    let ln = nn::LayerNorm::new(4).unwrap();
    ln.weight.set(upload(&uniform(&mut rng, &[4], 0.5, 1.5))).unwrap();
    ln.bias.set(upload(&uniform(&mut rng, &[4], -0.5, 0.5))).unwrap();
    check_gradients("layer_norm", |a| ln.forward(&a[0]), vec![uniform(&mut rng, &[3, 4], -2.0, 2.0)]);
    // Its weight and bias (Vars, not inputs here): the same formula with them as inputs.
    let unit = nn::LayerNorm::new(4).unwrap();
    unit.weight.set(Tensor::ones(&[4], DType::F64).unwrap()).unwrap();
    unit.bias.set(Tensor::zeros(&[4], DType::F64).unwrap()).unwrap();
    let inputs = vec![
        uniform(&mut rng, &[2, 3, 4], -2.0, 2.0),
        uniform(&mut rng, &[4], 0.5, 1.5),
        uniform(&mut rng, &[4], -0.5, 0.5),
    ];
    check_gradients("layer_norm weight and bias", |a| unit.forward(&a[0])?.mul(&a[1])?.add(&a[2]), inputs);

    let targets = Tensor::from_vec(vec![2i64, 0, 1, 2]).unwrap();
    check_gradients(
        "cross_entropy",
        |a| nn::cross_entropy(&a[0], &targets),
        vec![uniform(&mut rng, &[4, 3], -2.0, 2.0)],
    );
    let inputs = vec![uniform(&mut rng, &[3, 2], -1.0, 1.0), uniform(&mut rng, &[3, 2], -1.0, 1.0)];
    check_gradients("mse", |a| nn::mse(&a[0], &a[1]), inputs);
}

// ----- what has no gradient -------------------------------------------------------------------

#[test]
fn comparisons_and_argmax_carry_no_gradient() -> Result<()> {
    let _serial = common::serial();
    let x = upload(&array(&[2, 3], &[0.5, -1.0, 2.0, -0.3, 1.5, -2.0])).set_requires_grad(true)?;
    assert!(!x.gt_scalar(0.0)?.tracks_grad(), "a comparison's result tracks gradients");
    assert!(!x.argmax(Some(1), false)?.tracks_grad(), "argmax's result tracks gradients");
    // A loss that depends on x only through argmax does not depend on it differentiably.
    let through_argmax = x.argmax(Some(1), false)?.to_dtype(DType::F64)?.sum_all()?;
    assert!(matches!(through_argmax.backward(), Err(Error::Invalid { op: "backward", .. })));
    assert!(x.grad().is_none());
    // A mask from a comparison is a constant: x * (x > 0) has gradient (x > 0).
    let mut rng = StdRng::seed_from_u64(SEED);
    check_gradients(
        "x * (x > 0)",
        |a| a[0].mul(&a[0].gt_scalar(0.0)?.to_dtype(DType::F64)?),
        vec![away_from_zero(&mut rng, &[2, 3], 0.1, 2.0)],
    );
    // Picking the largest element by its argmax: the gradient goes to that element only.
    let largest = x.reshape(&[-1])?.index_select(0, &x.argmax(None, false)?.reshape(&[1])?)?;
    largest.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn detach_cuts_the_graph() -> Result<()> {
    let _serial = common::serial();
    let x = upload(&array(&[3], &[1.0, -2.0, 3.0])).set_requires_grad(true)?;
    // d/dx (x * c) with c = x detached is c, not 2x.
    x.mul(&x.detach())?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [1.0, -2.0, 3.0]);
    assert!(!x.detach().tracks_grad());
    Ok(())
}

#[test]
fn bad_backward_calls_are_clear_errors() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3])?.set_requires_grad(true)?;
    let y = x.mul_scalar(2.0)?;
    match y.backward() {
        Err(Error::Shape { op: "backward", msg }) => assert!(msg.contains("[3]"), "{msg}"),
        other => panic!("backward of a non-scalar: expected a shape error, got {other:?}"),
    }
    let i = Tensor::from_slice(&[1i32, 2], &[2])?;
    assert!(matches!(i.set_requires_grad(true), Err(Error::DType { op: "requires_grad", .. })));
    // Nothing here requires gradients.
    let c = Tensor::from_slice(&[1.0f64, 2.0], &[2])?.exp()?.sum_all()?;
    assert!(matches!(c.backward(), Err(Error::Invalid { op: "backward", .. })));
    Ok(())
}

// ----- accumulation and no_grad ---------------------------------------------------------------

#[test]
fn gradients_accumulate_until_zeroed() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3])?.set_requires_grad(true)?;
    let loss = || x.mul(&x).and_then(|s| s.sum_all());
    loss()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [2.0, 4.0, 6.0]);
    loss()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [4.0, 8.0, 12.0], "a second backward adds");
    x.zero_grad();
    assert!(x.grad().is_none());
    loss()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [2.0, 4.0, 6.0], "after zero_grad, one backward's worth");
    Ok(())
}

#[test]
fn backward_frees_the_graph_unless_retained() -> Result<()> {
    let _serial = common::serial();
    let activation = 256 * 64 * 4;
    let x = Tensor::randn(&[256, 64], DType::F32)?;
    let w = (Tensor::randn(&[64, 64], DType::F32)? * 0.1).set_requires_grad(true)?;
    let forward = || x.matmul(&w)?.tanh()?.matmul(&w)?.tanh()?.sum_all();
    let base = eager::memory::live_bytes();
    let loss = forward()?;
    let held = eager::memory::live_bytes() - base;
    // What the rules read, as torch saves it: each tanh's output (also the second matmul's
    // input); not the matmuls' results, which tanh's rule does not read.
    assert!(
        (2 * activation..3 * activation).contains(&held),
        "the graph holds two of its four activations: {held} bytes"
    );
    loss.backward()?;
    let after = eager::memory::live_bytes() - base;
    assert!(
        after < activation,
        "after backward the loss holds {after} bytes (its graph's activations are freed)"
    );
    let once = w.grad().unwrap().to_vec::<f32>()?;
    let e = loss.backward().unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "backward", .. }), "{e}");
    assert!(e.to_string().contains("backward_retain_graph"), "{e}");
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, once, "a refused pass adds nothing");
    // Retained, the graph serves a second pass, and the gradients add up.
    w.zero_grad();
    let loss = forward()?;
    loss.backward_retain_graph()?;
    assert!(eager::memory::live_bytes() - base >= 2 * activation, "retained: the activations stay");
    loss.backward()?;
    let twice: Vec<f32> = w.grad().unwrap().to_vec::<f32>()?;
    for (t, o) in twice.iter().zip(&once) {
        assert!((t - 2.0 * o).abs() <= 1e-5 * (1.0 + o.abs()), "{t} vs 2 x {o}");
    }
    Ok(())
}

#[test]
fn no_grad_runs_ops_and_records_no_graph() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3])?.set_requires_grad(true)?;
    let mark = profiler::next_seq();
    let (y, z) = no_grad(|| -> Result<_> {
        let y = x.exp()?;
        Ok((y.clone(), y.mul(&x)?.sum_all()?))
    })?;
    assert!(!y.tracks_grad() && !z.tracks_grad(), "no_grad recorded a graph");
    assert!(matches!(z.backward(), Err(Error::Invalid { op: "backward", .. })));
    assert!(x.grad().is_none());
    // The ops still ran, and gave the values.
    let ran: Vec<&str> =
        profiler::events_since(mark).iter().filter(|e| e.kind == EventKind::Op).map(|e| e.name()).collect();
    assert_eq!(ran, ["exp", "mul", "sum"]);
    let want: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v * v.exp()).sum();
    assert!((z.item::<f64>()? - want).abs() <= 1e-12 * want);
    // The guard form, and recording back on after the scope.
    {
        let _guard = eager::NoGradGuard::new();
        assert!(!x.exp()?.tracks_grad());
    }
    assert!(x.exp()?.tracks_grad());
    Ok(())
}

// ----- the cache ------------------------------------------------------------------------------

#[test]
fn backward_ops_go_through_the_single_op_cache() -> Result<()> {
    let _serial = common::serial();
    // A pass run op by op (as off the default device, or with ops as one turned off).
    let _op_by_op = common::OpByOp::new();
    // Shapes no other test uses, so these keys are this test's.
    let a = Tensor::rand(&[5, 7], DType::F32)?.set_requires_grad(true)?;
    let b = Tensor::rand(&[7, 3], DType::F32)?.set_requires_grad(true)?;
    let pass = || -> Result<()> { a.matmul(&b)?.tanh()?.sum_all()?.backward() };
    pass()?;
    let signatures: Vec<String> = cache::entries().iter().map(|e| e.info.signature()).collect();
    // dL/da = g bᵀ and dL/db = aᵀ g: products that read an operand transposed (no transposes).
    for want in ["matmul(f32[5, 3], f32[7, 3]) {rhsᵀ}", "matmul(f32[5, 7], f32[5, 3]) {lhsᵀ}"] {
        assert!(signatures.iter().any(|s| s == want), "{want} is not in the cache: {signatures:?}");
    }
    assert_eq!(
        (a.grad().unwrap().shape(), b.grad().unwrap().shape()),
        ([5, 7].as_slice(), [7, 3].as_slice())
    );

    // The same pass again (after zeroing, so no accumulating add): every op is a hit.
    a.zero_grad();
    b.zero_grad();
    let before = cache::stats();
    let mark = profiler::next_seq();
    pass()?;
    let after = cache::stats();
    assert_eq!(after.misses + after.disk_hits, before.misses + before.disk_hits, "the second pass compiled");
    let ops: Vec<_> = profiler::events_since(mark).into_iter().filter(|e| e.kind == EventKind::Op).collect();
    assert!(
        ops.iter().any(|e| e.info.signature() == "matmul(f32[5, 3], f32[7, 3]) {rhsᵀ}"),
        "the backward matmul ran"
    );
    assert!(
        ops.iter().all(|e| e.is_hit()),
        "not all hits: {:?}",
        ops.iter().map(|e| e.info.signature()).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn conv1d_and_conv2d_with_stride_padding_dilation_and_groups() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    // (input, weight, stride, padding, dilation, groups); 1-D cases use the first entries.
    type Case = (&'static [usize], &'static [usize], usize, Padding, usize, usize);
    let cases1: Vec<Case> = vec![
        (&[2, 2, 7], &[3, 2, 3], 1, 0.into(), 1, 1),
        (&[2, 2, 8], &[3, 2, 3], 2, 1.into(), 1, 1),
        (&[1, 4, 9], &[4, 2, 2], 2, 0.into(), 2, 2),
        (&[2, 2, 6], &[2, 2, 4], 1, Padding::Same, 1, 1),
        (&[1, 2, 5], &[2, 2, 1], 1, 2.into(), 1, 1),
    ];
    for (xs, ws, s, p, d, g) in cases1 {
        let (x, w) = (uniform(&mut rng, xs, -1.0, 1.0), uniform(&mut rng, ws, -1.0, 1.0));
        check_gradients("conv1d", |t| t[0].conv1d(&t[1], s, p.clone(), d, g), vec![x, w]);
    }
    let cases2: Vec<Case> = vec![
        (&[2, 2, 5, 5], &[3, 2, 3, 3], 1, 1.into(), 1, 1),
        (&[2, 2, 6, 5], &[2, 2, 3, 2], 2, 0.into(), 1, 1),
        (&[1, 4, 7, 6], &[4, 2, 2, 3], 2, 1.into(), 2, 2),
        (&[1, 2, 5, 4], &[2, 2, 3, 2], 1, Padding::Same, 2, 1),
    ];
    for (xs, ws, s, p, d, g) in cases2 {
        let (x, w) = (uniform(&mut rng, xs, -1.0, 1.0), uniform(&mut rng, ws, -1.0, 1.0));
        check_gradients("conv2d", |t| t[0].conv2d(&t[1], [s, s], p.clone(), [d, d], g), vec![x, w]);
    }
}

#[test]
fn conv_transpose2d_with_stride_padding_output_padding_dilation_and_groups() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    // (input, weight [C_in, C_out/G, kh, kw], stride, padding, output_padding, dilation, groups)
    type Case = (&'static [usize], &'static [usize], usize, usize, usize, usize, usize);
    let cases: &[Case] = &[
        (&[2, 2, 3, 4], &[2, 3, 3, 2], 1, 0, 0, 1, 1),
        (&[1, 2, 3, 3], &[2, 2, 3, 3], 2, 1, 1, 1, 1),
        (&[1, 4, 3, 2], &[4, 1, 2, 3], 2, 1, 0, 2, 2),
    ];
    for &(xs, ws, s, p, op, d, g) in cases {
        let (x, w) = (uniform(&mut rng, xs, -1.0, 1.0), uniform(&mut rng, ws, -1.0, 1.0));
        check_gradients(
            "conv_transpose2d",
            |t| t[0].conv_transpose2d(&t[1], [s, s], [p, p], [op, op], [d, d], g),
            vec![x, w],
        );
    }
}

#[test]
fn max_and_avg_pool2d() {
    let _serial = common::serial();
    let mut rng = StdRng::seed_from_u64(SEED);
    type PoolCase = (&'static [usize], [usize; 2], Option<[usize; 2]>, [usize; 2]);
    let cases: &[PoolCase] = &[
        (&[2, 2, 4, 4], [2, 2], None, [0, 0]),
        (&[1, 2, 5, 5], [3, 3], Some([2, 2]), [1, 1]),
        (&[2, 5, 4], [3, 2], Some([1, 2]), [1, 0]),
        // Strides that leave an input tail no window reaches (an asymmetric gradient pad).
        (&[1, 2, 5, 6], [2, 3], Some([2, 2]), [0, 1]),
        // Windows that tile the input (a reduce and a select, not select_and_scatter), with
        // and without a tail they leave out.
        (&[2, 6, 4], [3, 2], None, [0, 0]),
        (&[1, 2, 5, 7], [2, 2], None, [0, 0]),
    ];
    for &(xs, k, s, p) in cases {
        // Distinct values: every window has one clear max.
        let x = distinct(&mut rng, xs);
        check_gradients("max_pool2d", |t| t[0].max_pool2d(k, s, p), vec![x.clone()]);
        check_gradients("avg_pool2d", |t| t[0].avg_pool2d(k, s, p), vec![x]);
    }
    let x = uniform(&mut rng, &[2, 3, 4, 6], -1.0, 1.0);
    check_gradients("adaptive_avg_pool2d", |t| t[0].adaptive_avg_pool2d([1, 1]), vec![x.clone()]);
    check_gradients("adaptive_avg_pool2d", |t| t[0].adaptive_avg_pool2d([2, 3]), vec![x]);
}

/// Ties in a max-pool window: the whole gradient goes to one argmax (the first in row-major
/// order), as torch sends it to one.
#[test]
fn max_pool_sends_a_tied_window_gradient_to_the_first_argmax() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&[1.0f64, 3.0, 3.0, 0.0, 2.0, 2.0, 2.0, 2.0], &[1, 2, 2, 2])?
        .set_requires_grad(true)?;
    x.max_pool2d([2, 2], None, [0, 0])?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    // NaN counts as the max: the window's last NaN takes the gradient, as torch's kernels
    // pick it (`val > max || isnan(val)`; torch 2.9 gives these gradients), with windows that
    // tile and windows that overlap.
    let nan = f32::NAN;
    let v = [1.0f32, nan, 5.0, nan, 0.0, 2.0, 9.0, 9.0, 3.0];
    for (k, s, want) in [
        ([2, 2], None, vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        ([2, 2], Some([1, 1]), vec![0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
    ] {
        let x = Tensor::from_slice(&v, &[1, 1, 3, 3])?.set_requires_grad(true)?;
        x.max_pool2d(k, s, [0, 0])?.sum_all()?.backward()?;
        assert_eq!(x.grad().unwrap().to_vec::<f32>()?, want, "kernel {k:?} stride {s:?}");
    }
    Ok(())
}
