//! The nn pieces Hugging Face architectures are built from, against plain math on the host:
//! functional scaled dot-product attention (bool and additive float masks, an explicit scale,
//! fewer key/value heads, a fully masked row giving 0 as torch 2.9, dropout's expectation),
//! rms_norm and layer_norm, rotary embeddings (computed and tabulated), the static key/value
//! cache's writes at a position held in a tensor (one batch or a part per sequence), and a
//! Linear whose weight is stored transposed for inference. (Whole models are checked against
//! transformers in models/.)

use eager::nn::{
    apply_rotary, layer_norm, rms_norm, rotate_half, scaled_dot_product_attention, AttentionOptions, Linear,
    Module, RopeScaling, RotaryEmbedding, StaticKvCache,
};
use eager::{DType, Tensor};

/// Attention options of a bool mask alone.
fn masked(mask: &Tensor) -> AttentionOptions<'_> {
    AttentionOptions { mask: Some(mask), ..Default::default() }
}

fn seq(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * k).sin() * 1.7).round() / 2.0 + (i % 3) as f32 * 0.1).collect()
}

/// softmax(q kᵀ scale + add) v on the host, per (batch·head) block; `keep` false masks; a row
/// with nothing kept is 0. `kv_group` query heads share one key/value head.
#[allow(clippy::too_many_arguments)]
fn host_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: usize,
    kv_heads: usize,
    l: usize,
    s: usize,
    d: usize,
    scale: f32,
    keep: &dyn Fn(usize, usize, usize) -> bool,
    add: &dyn Fn(usize, usize) -> f32,
) -> Vec<f32> {
    let mut out = vec![0f32; heads * l * d];
    for h in 0..heads {
        let kh = h / (heads / kv_heads);
        for i in 0..l {
            let scores: Vec<f32> = (0..s)
                .map(|j| {
                    if !keep(h, i, j) {
                        return f32::NEG_INFINITY;
                    }
                    (0..d).map(|c| q[(h * l + i) * d + c] * k[(kh * s + j) * d + c]).sum::<f32>() * scale
                        + add(i, j)
                })
                .collect();
            let m = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                continue;
            }
            let e: Vec<f32> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f32 = e.iter().sum();
            for c in 0..d {
                out[(h * l + i) * d + c] = (0..s).map(|j| e[j] / z * v[(kh * s + j) * d + c]).sum();
            }
        }
    }
    out
}

fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}: [{i}] {x} vs {y}");
    }
}

#[test]
fn grouped_query_attention_with_masks_and_scale_matches_plain_math() {
    let (h, hkv, l, s, d) = (4, 2, 3, 5, 4);
    let (q, k, v) = (seq(h * l * d, 0.37), seq(hkv * s * d, 0.53), seq(hkv * s * d, 0.71));
    let qt = Tensor::from_slice(&q, &[1, h, l, d]).unwrap();
    let kt = Tensor::from_slice(&k, &[1, hkv, s, d]).unwrap();
    let vt = Tensor::from_slice(&v, &[1, hkv, s, d]).unwrap();
    // Bool mask: query i sees keys j <= i + 1, except key 0 for query 1; row 2 of head... all rows keep something.
    let keep = |_h: usize, i: usize, j: usize| j <= i + 1 && !(i == 1 && j == 0);
    let mask: Vec<u8> = (0..l * s).map(|x| keep(0, x / s, x % s) as u8).collect();
    let mask_t = Tensor::from_bytes_on(&mask, &[l, s], DType::Bool, eager::default_device()).unwrap();
    let got = scaled_dot_product_attention(
        &qt,
        &kt,
        &vt,
        AttentionOptions { mask: Some(&mask_t), scale: Some(0.3), ..Default::default() },
    )
    .unwrap();
    let want = host_attention(&q, &k, &v, h, hkv, l, s, d, 0.3, &keep, &|_, _| 0.0);
    close(&got.to_vec::<f32>().unwrap(), &want, 1e-5, "bool mask, scale 0.3, 2 kv heads for 4");
    // An additive float mask: finite biases, and -inf where the bool mask was false.
    let bias = |i: usize, j: usize| (i as f32 - j as f32) * 0.25;
    let add: Vec<f32> = (0..l * s)
        .map(|x| if keep(0, x / s, x % s) { bias(x / s, x % s) } else { f32::NEG_INFINITY })
        .collect();
    let add_t = Tensor::from_slice(&add, &[l, s]).unwrap();
    let got = scaled_dot_product_attention(
        &qt,
        &kt,
        &vt,
        AttentionOptions { mask: Some(&add_t), ..Default::default() },
    )
    .unwrap();
    let want = host_attention(&q, &k, &v, h, hkv, l, s, d, 0.5, &keep, &bias);
    close(&got.to_vec::<f32>().unwrap(), &want, 1e-5, "additive float mask, default scale 1/√d");
    // Causal on top of no mask.
    let got =
        scaled_dot_product_attention(&qt, &kt, &vt, AttentionOptions { causal: true, ..Default::default() })
            .unwrap();
    let want = host_attention(&q, &k, &v, h, hkv, l, s, d, 0.5, &|_, i, j| j <= i, &|_, _| 0.0);
    close(&got.to_vec::<f32>().unwrap(), &want, 1e-5, "causal");
}

#[test]
fn a_fully_masked_row_gives_zeros_not_nan() {
    let (l, s, d) = (3, 4, 2);
    let (q, k, v) = (seq(l * d, 0.3), seq(s * d, 0.4), seq(s * d, 0.5));
    let qt = Tensor::from_slice(&q, &[1, 1, l, d]).unwrap();
    let kt = Tensor::from_slice(&k, &[1, 1, s, d]).unwrap();
    let vt = Tensor::from_slice(&v, &[1, 1, s, d]).unwrap();
    let keep = |_: usize, i: usize, j: usize| i != 1 && j >= i; // row 1 sees nothing
    let mask: Vec<u8> = (0..l * s).map(|x| keep(0, x / s, x % s) as u8).collect();
    let mask_t = Tensor::from_bytes_on(&mask, &[l, s], DType::Bool, eager::default_device()).unwrap();
    let attend = |mask: &Tensor| {
        let opts = AttentionOptions { mask: Some(mask), ..Default::default() };
        scaled_dot_product_attention(&qt, &kt, &vt, opts).unwrap().to_vec::<f32>().unwrap()
    };
    let got = attend(&mask_t);
    assert_eq!(&got[d..2 * d], &[0.0, 0.0], "the fully masked row");
    // The tensor method gives the same answer: one rule for a row with nothing to attend.
    let method =
        qt.scaled_dot_product_attention(&kt, &vt, Some(&mask_t), false).unwrap().to_vec::<f32>().unwrap();
    close(&method, &got, 1e-6, "Tensor::scaled_dot_product_attention against nn's");
    close(
        &got,
        &host_attention(&q, &k, &v, 1, 1, l, s, d, 1.0 / (d as f32).sqrt(), &keep, &|_, _| 0.0),
        1e-5,
        "the other rows",
    );
    // The same with an all -inf float row.
    let add: Vec<f32> = mask.iter().map(|&m| if m == 1 { 0.0 } else { f32::NEG_INFINITY }).collect();
    let add_t = Tensor::from_slice(&add, &[l, s]).unwrap();
    let got2 = attend(&add_t);
    assert_eq!(got, got2);
}

#[test]
fn attention_dropout_keeps_the_expectation() {
    // With every value 1, each output is (sum of kept weights) / (1 - p): 1 on average.
    let (l, s) = (2048, 8);
    let q = Tensor::from_slice(&seq(l * 4, 0.1), &[1, 1, l, 4]).unwrap();
    let k = Tensor::from_slice(&seq(s * 4, 0.2), &[1, 1, s, 4]).unwrap();
    let v = Tensor::ones(&[1, 1, s, 1], DType::F32).unwrap();
    eager::manual_seed(3);
    let out =
        scaled_dot_product_attention(&q, &k, &v, AttentionOptions { dropout: 0.5, ..Default::default() })
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
    let mean = out.iter().sum::<f32>() / out.len() as f32;
    assert!((mean - 1.0).abs() < 0.05, "mean {mean}");
    assert!(out.iter().any(|&x| x < 0.999) && out.iter().any(|&x| x > 1.001), "dropout changed something");
    let e = scaled_dot_product_attention(&q, &k, &v, AttentionOptions { dropout: 1.0, ..Default::default() })
        .unwrap_err();
    assert_eq!(e.to_string(), "scaled_dot_product_attention: dropout must be in [0, 1), got 1");
}

#[test]
fn rms_norm_and_layer_norm_match_plain_math() {
    let (rows, dim) = (3, 5);
    let x = seq(rows * dim, 0.9);
    let w: Vec<f32> = (0..dim).map(|i| 0.5 + i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..dim).map(|i| i as f32 * -0.1).collect();
    let xt = Tensor::from_slice(&x, &[rows, dim]).unwrap();
    let wt = Tensor::from_slice(&w, &[dim]).unwrap();
    let bt = Tensor::from_slice(&b, &[dim]).unwrap();
    let mut rms = Vec::new();
    let mut ln = Vec::new();
    for r in x.chunks(dim) {
        let ms = r.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        rms.extend(r.iter().zip(&w).map(|(v, w)| v / (ms + 1e-6).sqrt() * w));
        let mean = r.iter().sum::<f32>() / dim as f32;
        let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / dim as f32;
        ln.extend(r.iter().zip(&w).zip(&b).map(|((v, w), b)| (v - mean) / (var + 1e-5).sqrt() * w + b));
    }
    close(&rms_norm(&xt, Some(&wt), 1e-6).unwrap().to_vec::<f32>().unwrap(), &rms, 1e-5, "rms_norm");
    close(
        &layer_norm(&xt, &[dim], Some(&wt), Some(&bt), 1e-5).unwrap().to_vec::<f32>().unwrap(),
        &ln,
        1e-5,
        "layer_norm",
    );
    let e = layer_norm(&xt, &[4], None, None, 1e-5).unwrap_err();
    assert_eq!(
        e.to_string(),
        "layer_norm: shape error: needs a float input ending in [4] and weight and bias of that shape, \
         got f32[3, 5], none and none",
        "a shape that is not the input's tail"
    );
    let e = rms_norm(&xt, Some(&bt.reshape(&[1, -1]).unwrap()), 1e-6).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rms_norm: shape error: the weight must be [5] for input f32[3, 5], got f32[1, 5]"
    );
    // bf16 is normalised in f32 and keeps its dtype.
    let y =
        rms_norm(&xt.to_dtype(DType::BF16).unwrap(), Some(&wt.to_dtype(DType::BF16).unwrap()), 1e-6).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    close(&y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), &rms, 2e-2, "bf16 rms_norm");
}

#[test]
fn rotary_embedding_rotates_pairs_by_position_times_frequency() {
    let (dim, t) = (4, 3);
    let rope = RotaryEmbedding::new(dim, 100.0, &RopeScaling::Default).unwrap();
    assert_eq!(rope.inv_freq, vec![1.0, 0.1]);
    let linear = RotaryEmbedding::new(dim, 100.0, &RopeScaling::Linear { factor: 4.0 }).unwrap();
    assert_eq!(linear.inv_freq, vec![0.25, 0.025]);
    let pos = Tensor::from_slice(&[0i64, 1, 5], &[1, t]).unwrap();
    let (cos, sin) = rope.cos_sin(&pos, DType::F32).unwrap();
    let x = seq(t * dim, 0.8);
    let xt = Tensor::from_slice(&x, &[1, 1, t, dim]).unwrap();
    let got = apply_rotary(&xt, &cos, &sin).unwrap().to_vec::<f32>().unwrap();
    let mut want = Vec::new();
    for (p, r) in [0f32, 1.0, 5.0].iter().zip(x.chunks(dim)) {
        // Pair (i, i + dim/2) turns by p·inv_freq[i].
        let mut out = vec![0f32; dim];
        for i in 0..dim / 2 {
            let a = p * rope.inv_freq[i];
            out[i] = r[i] * a.cos() - r[i + dim / 2] * a.sin();
            out[i + dim / 2] = r[i + dim / 2] * a.cos() + r[i] * a.sin();
        }
        want.extend(out);
    }
    close(&got, &want, 1e-6, "apply_rotary");
    let half = rotate_half(&Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4]).unwrap()).unwrap();
    assert_eq!(half.to_vec::<f32>().unwrap(), vec![-3.0, -4.0, 1.0, 2.0]);
    let e = RotaryEmbedding::new(3, 100.0, &RopeScaling::Default).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RotaryEmbedding: needs an even head dim and theta > 0, got dim 3 and theta 100"
    );
}

#[test]
fn the_static_cache_writes_at_a_position_held_in_a_tensor() {
    let dev = eager::default_device();
    let (cap, d) = (6, 2);
    let mut cache = StaticKvCache::new(1, 1, cap, d, DType::F32, dev).unwrap();
    let at = |p: i64| Tensor::from_slice(&[p], &[]).unwrap();
    // Three positions at slot 1, then one at slot 4.
    let k3 = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 1, 3, d]).unwrap();
    cache.write(&k3, &k3.neg().unwrap(), &at(1)).unwrap();
    let k1 = Tensor::from_slice(&[9f32, 9.5], &[1, 1, 1, d]).unwrap();
    cache.write(&k1, &k1, &at(4)).unwrap();
    assert_eq!(
        cache.keys().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 9.5, 0.0, 0.0]
    );
    assert_eq!(
        cache.values().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, 9.0, 9.5, 0.0, 0.0]
    );
    // Overwriting slot 2.
    cache.write(&k1, &k1, &at(2)).unwrap();
    assert_eq!(&cache.keys().unwrap().to_vec::<f32>().unwrap()[4..6], &[9.0, 9.5]);
    let e = cache.write(&k1, &k1, &Tensor::from_slice(&[1.0f32], &[]).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "StaticKvCache::write: start must be one i64 (or [1] i64 when T = 1), got f32[] with T = 1",
        "the position must be an i64"
    );
    let e = cache.write(&k1.reshape(&[1, 1, 2, 1]).unwrap(), &k1, &at(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "StaticKvCache::write: shape error: needs keys and values [1, 1, 2, 2] (T ≤ 6), \
         got f32[1, 1, 2, 1] and f32[1, 1, 1, 2]",
        "a shape that is not [B, heads, T, dim]"
    );
}

#[test]
fn sign_of_negative_zero_is_positive_zero_as_torch() {
    let x = Tensor::from_slice(&[-0.0f32, 0.0, -2.5, 3.0, f32::NAN], &[5]).unwrap();
    let got = x.sign().unwrap().to_vec::<f32>().unwrap();
    // torch.sign(torch.tensor([-0., 0., -2.5, 3., nan])) = [0., 0., -1., 1., nan], both zeros +0.
    assert_eq!(got[0].to_bits(), 0.0f32.to_bits(), "sign(-0.0) is +0.0, got {}", got[0]);
    assert_eq!(got[1].to_bits(), 0.0f32.to_bits());
    assert_eq!(&got[2..4], &[-1.0, 1.0]);
    assert!(got[4].is_nan(), "sign(nan) is nan, got {}", got[4]);
}

#[test]
fn a_cache_of_rows_writes_each_at_its_own_position_and_attends_as_one_batch() {
    // Two sequences at positions 2 and 4 of a 6-slot cache: held as one [2, ...] part, or as a
    // part per sequence (a server's slots), the writes and the attention agree.
    let dev = eager::default_device();
    let (cap, d, heads, kv) = (6, 4, 2, 1);
    let fill = |n: usize, s: f32| -> Vec<f32> { (0..n).map(|i| ((i as f32) * s).sin()).collect() };
    let old_k = Tensor::from_slice(&fill(2 * kv * cap * d, 0.7), &[2, kv, cap, d]).unwrap();
    let old_v = Tensor::from_slice(&fill(2 * kv * cap * d, 0.3), &[2, kv, cap, d]).unwrap();
    let k = Tensor::from_slice(&fill(2 * kv * d, 1.3), &[2, kv, 1, d]).unwrap();
    let v = Tensor::from_slice(&fill(2 * kv * d, 1.9), &[2, kv, 1, d]).unwrap();
    let q = Tensor::from_slice(&fill(2 * heads * d, 0.5), &[2, heads, 1, d]).unwrap();
    let start = Tensor::from_slice(&[2i64, 4], &[2]).unwrap();
    let seen: Vec<u8> = (0..2 * cap).map(|i| ((i % cap) <= [2, 4][i / cap]) as u8).collect();
    let mask = Tensor::from_bytes_on(&seen, &[2, 1, 1, cap], DType::Bool, dev).unwrap();
    let mut batched = StaticKvCache::from_parts(old_k.clone(), old_v.clone()).unwrap();
    let a = batched.attend(&q, &k, &v, &start, masked(&mask)).unwrap().to_vec::<f32>().unwrap();
    let row = |t: &Tensor, j: usize| t.narrow(0, j, 1).unwrap();
    let mut rows =
        StaticKvCache::from_rows((0..2).map(|j| (row(&old_k, j), row(&old_v, j))).collect()).unwrap();
    let b = rows.attend(&q, &k, &v, &start, masked(&mask)).unwrap().to_vec::<f32>().unwrap();
    close(&b, &a, 1e-6, "rows against one batch");
    assert_eq!(
        rows.keys().unwrap().to_vec::<f32>().unwrap(),
        batched.keys().unwrap().to_vec::<f32>().unwrap()
    );
    // Row 0 took its new key at slot 2 and kept slot 4's; row 1 the other way round.
    let got = rows.into_parts();
    let (k0, k1) = (got[0].0.to_vec::<f32>().unwrap(), got[1].0.to_vec::<f32>().unwrap());
    let new = k.to_vec::<f32>().unwrap();
    let old = old_k.to_vec::<f32>().unwrap();
    assert_eq!(&k0[2 * d..3 * d], &new[..d]);
    assert_eq!(&k0[4 * d..5 * d], &old[4 * d..5 * d]);
    assert_eq!(&k1[4 * d..5 * d], &new[d..]);
    assert_eq!(&k1[2 * d..3 * d], &old[cap * d + 2 * d..cap * d + 3 * d]);
    // By hand for row 1: softmax over slots 0..=4 of q·k/√d, then the values.
    let (keys1, vals1) = (&k1, got[1].1.to_vec::<f32>().unwrap());
    let q1 = &q.to_vec::<f32>().unwrap()[heads * d..heads * d + d];
    let scores: Vec<f32> =
        (0..=4).map(|p| (0..d).map(|i| q1[i] * keys1[p * d + i]).sum::<f32>() / (d as f32).sqrt()).collect();
    let m = scores.iter().cloned().fold(f32::MIN, f32::max);
    let w: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
    let z: f32 = w.iter().sum();
    let want: Vec<f32> = (0..d).map(|i| (0..=4).map(|p| w[p] / z * vals1[p * d + i]).sum()).collect();
    close(&b[heads * d..heads * d + d], &want, 1e-5, "row 1, head 0, by hand");
}

#[test]
fn a_weight_stored_transposed_gives_the_same_products_and_refuses_updates() {
    let layer = Linear::with_options(6, 4, true, DType::F32).unwrap();
    let x = Tensor::from_slice(&seq(3 * 2 * 6, 0.9), &[3, 2, 6]).unwrap();
    let before = layer.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let w = layer.weight.get().to_vec::<f32>().unwrap();
    // A parameter that takes gradients keeps its layout: the error says what to do.
    let err = layer.weight.store_transposed().unwrap_err().to_string();
    assert!(err.contains("Var::store_transposed") && err.contains("set_requires_grad(false)"), "{err}");
    layer.weight.set_requires_grad(false).unwrap();
    layer.weight.store_transposed().unwrap();
    assert!(layer.weight.is_stored_transposed());
    let stored = layer.weight.get();
    assert_eq!(stored.shape(), &[6, 4]);
    let t = stored.to_vec::<f32>().unwrap();
    assert!((0..4).all(|o| (0..6).all(|i| t[i * 4 + o] == w[o * 6 + i])), "stored [in, out]");
    close(&layer.forward(&x).unwrap().to_vec::<f32>().unwrap(), &before, 1e-6, "the same products");
    let err = layer.weight.set(Tensor::from_slice(&w, &[4, 6]).unwrap()).unwrap_err().to_string();
    assert!(err.contains("Var::set") && err.contains("stored transposed"), "{err}");
}

#[test]
fn tabulated_rotary_rows_equal_the_computed_ones() {
    let dev = eager::default_device();
    let rope = RotaryEmbedding::new(8, 10000.0, &RopeScaling::Default).unwrap();
    let table = rope.clone().with_table(64, dev).unwrap();
    let pos = Tensor::from_slice(&[0i64, 5, 63, 17, 2, 40], &[2, 3]).unwrap();
    let (c1, s1) = rope.cos_sin(&pos, DType::F32).unwrap();
    let (c2, s2) = table.cos_sin(&pos, DType::F32).unwrap();
    assert_eq!(c2.shape(), &[2, 3, 8]);
    assert_eq!(c1.to_vec::<f32>().unwrap(), c2.to_vec::<f32>().unwrap(), "cos to the bit");
    assert_eq!(s1.to_vec::<f32>().unwrap(), s2.to_vec::<f32>().unwrap(), "sin to the bit");
    // Past the table: a clear error naming the lookup, not a wrong row.
    let far = Tensor::from_slice(&[64i64], &[1, 1]).unwrap();
    let err = table.cos_sin(&far, DType::F32).and_then(|(c, _)| c.to_vec::<f32>()).unwrap_err().to_string();
    assert!(err.contains("index_select") || err.contains("out of"), "{err}");
}
