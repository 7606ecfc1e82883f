//! `nn::SparseMoe` against plain math on the host (per token: softmax over the router's
//! logits, the top k renormalised, the weighted sum of those experts' SwiGLU): the grouped
//! path (as many (token, choice) pairs as experts or more), the gathered-weights path (fewer),
//! and the experts split over the CPU plugin's 4 devices (expert parallelism), eagerly and
//! compiled into one program whose partitioned form exchanges tokens by all-to-all.

mod common;

use eager::mesh::{Mesh, PartitionSpec as P};
use eager::nn::{Module, SparseMoe};
use eager::prelude::*;

const H: usize = 8;
const I: usize = 12;

fn host(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// The block's output for `x` `[n, H]`, one token at a time in f64.
fn reference(moe: &SparseMoe, x: &[f64], n: usize) -> Vec<f64> {
    let (gate, w1, w2, w3) =
        (host(&moe.gate.weight.get()), host(&moe.w1.get()), host(&moe.w2.get()), host(&moe.w3.get()));
    let e = moe.experts();
    let mut out = vec![0.0; n * H];
    for t in 0..n {
        let xt = &x[t * H..(t + 1) * H];
        let logits: Vec<f64> = (0..e).map(|j| (0..H).map(|d| gate[j * H + d] * xt[d]).sum()).collect();
        let max = logits.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        let mut probs: Vec<(f64, usize)> = logits.iter().map(|l| (l - max).exp() / z).zip(0..).collect();
        probs.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
        let top = &probs[..moe.top_k];
        let total: f64 = top.iter().map(|p| p.0).sum();
        for &(p, j) in top {
            let w = p / total;
            let hidden: Vec<f64> = (0..I)
                .map(|r| {
                    let g: f64 = (0..H).map(|d| w1[(j * I + r) * H + d] * xt[d]).sum();
                    let u: f64 = (0..H).map(|d| w3[(j * I + r) * H + d] * xt[d]).sum();
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            for d in 0..H {
                out[t * H + d] += w * (0..I).map(|r| w2[(j * H + d) * I + r] * hidden[r]).sum::<f64>();
            }
        }
    }
    out
}

fn tokens(n: usize) -> (Vec<f64>, Tensor) {
    let x = Tensor::randn(&[n, H], DType::F32).unwrap();
    (host(&x), x)
}

fn worst(got: &Tensor, want: &[f64]) -> f64 {
    host(got).iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max)
}

/// A block whose router is decisive (weights x20: no two experts tie within rounding).
fn block(experts: usize, top_k: usize) -> SparseMoe {
    let moe = SparseMoe::new(H, I, experts, top_k, DType::F32).unwrap();
    moe.gate.weight.set(moe.gate.weight.get().mul_scalar(20.0).unwrap()).unwrap();
    // Larger expert weights, so that the outputs are well above rounding.
    for w in [&moe.w1, &moe.w2, &moe.w3] {
        w.set(w.get().mul_scalar(20.0).unwrap()).unwrap();
    }
    moe
}

#[test]
fn grouped_and_gathered_experts_equal_plain_math() {
    let _serial = common::serial();
    let moe = block(4, 2);
    // 9 tokens x 2 choices over 4 experts: grouped; 1 token x 2 < 4: gathered weights.
    for n in [9, 1] {
        let (xs, x) = tokens(n);
        let got = moe.forward(&x).unwrap();
        assert_eq!(got.shape(), [n, H]);
        let want = reference(&moe, &xs, n);
        let err = worst(&got, &want);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 1e-2 && err <= 1e-5 * scale.max(1.0), "{n} tokens: off by {err} (largest {scale})");
    }
    // A [B, T, H] input keeps its shape; top_k 1 of 3 experts.
    let one = block(3, 1);
    let (xs, x) = tokens(6);
    let got = one.forward(&x.reshape(&[2, 3, H as isize]).unwrap()).unwrap();
    assert_eq!(got.shape(), [2, 3, H]);
    let err = worst(&got.reshape(&[6, H as isize]).unwrap(), &reference(&one, &xs, 6));
    assert!(err <= 1e-4, "top-1: off by {err}");
}

#[test]
fn experts_split_over_the_mesh_equal_one_device() {
    let _serial = common::serial();
    let mesh = Mesh::new(&[("expert", 4)]).expect("the CPU plugin shows 4 devices");
    let moe = block(8, 2);
    // 10 tokens: groups of 3 per device, 2 padding tokens.
    let (xs, x) = tokens(10);
    let want = reference(&moe, &xs, 10);
    let split = P::new(&[Some("expert")]);
    moe.gate.weight.set(moe.gate.weight.get().replicate(&mesh).unwrap()).unwrap();
    for w in [&moe.w1, &moe.w2, &moe.w3] {
        w.set(w.get().shard(&mesh, &split).unwrap()).unwrap();
    }
    let x = x.replicate(&mesh).unwrap();
    let got = moe.forward(&x).unwrap();
    let err = worst(&got, &want);
    assert!(err <= 1e-4, "expert-parallel, eager: off by {err}");
    // Compiled: one SPMD program, its tokens sent to their experts' devices and back by all-to-all.
    let step = eager::compile("moe_step", |a: &[Tensor]| Ok(vec![moe.forward(&a[0])?]));
    let mark = profiler::next_seq();
    let got = step.call(&[&x]).unwrap().remove(0);
    let err = worst(&got, &want);
    assert!(err <= 1e-4, "expert-parallel, compiled: off by {err}");
    let events = profiler::events_since(mark);
    let collectives: Vec<String> = events
        .iter()
        .filter(|e| e.name() == "moe_step")
        .filter_map(|e| e.info.mesh.clone())
        .flat_map(|m| m.collectives)
        .collect();
    assert!(
        collectives.iter().filter(|c| c.as_str() == "all-to-all").count() >= 2,
        "the step's collectives: {collectives:?}"
    );
}

#[test]
fn bad_blocks_are_clear_errors() {
    let _serial = common::serial();
    let e = SparseMoe::new(H, I, 4, 5, DType::F32).err().expect("top_k 5 of 4 experts").to_string();
    assert!(e.contains("top_k 5 must be in 1..=4"), "{e}");
    // Experts' weights of mismatched shapes: the forward names them before anything runs.
    let moe = block(4, 2);
    moe.w2.set(Tensor::zeros(&[4, I, H], DType::F32).unwrap()).unwrap();
    let e = moe.forward(&tokens(3).1).unwrap_err().to_string();
    assert!(e.contains("SparseMoe") && e.contains("w2 [4, 12, 8]"), "{e}");
}
