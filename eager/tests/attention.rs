//! The one attention on the real CPU plugin: `Tensor::scaled_dot_product_attention` and
//! `nn::scaled_dot_product_attention` give the same numbers (grouped-query heads, bool, per-head
//! and additive masks, causal, broadcast leading dims, bf16); grouped heads against their keys
//! and values repeated; a fully masked row's result and gradients 0; the shared head split and
//! merge; and `StaticKvCache::append` (prefill, then one position at a time) against causal
//! attention over the whole sequence.

mod common;

use common::assert_all_close;
use eager::nn::{
    attend_heads, merge_heads, repeat_kv, scaled_dot_product_attention, split_heads, split_qkv,
    AttentionOptions, StaticKvCache,
};
use eager::prelude::*;

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

fn bools(keep: impl Fn(usize) -> bool, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n).map(|i| keep(i) as u8).collect();
    Tensor::from_bytes_on(&bytes, shape, DType::Bool, eager::default_device()).unwrap()
}

#[test]
fn the_method_and_nn_are_one_attention_and_grouped_heads_match_repeated_ones() -> Result<()> {
    let _serial = common::serial();
    manual_seed(11);
    let (b, h, hkv, l, s, d) = (2, 4, 2, 3, 5, 8);
    let q = Tensor::randn(&[b, h, l, d], DType::F32)?;
    let k = Tensor::randn(&[b, hkv, s, d], DType::F32)?;
    let v = Tensor::randn(&[b, hkv, s, 6], DType::F32)?;
    let (kr, vr) = (repeat_kv(&k, h)?, repeat_kv(&v, h)?);
    // A mask shared by the heads, one per head (row 1 of head 3 sees nothing), and additive.
    let shared = bools(|i| (i % s) <= (i / s) % l + 2, &[l, s]);
    let per_head = bools(|i| !(i / (l * s) % h == 3 && (i / s) % l == 1) && i % 3 != 0, &[b, h, l, s]);
    let bias = Tensor::randn(&[b, 1, l, s], DType::F32)?;
    for (what, mask) in [("no mask", None), ("shared", Some(&shared)), ("per head", Some(&per_head))] {
        for causal in [false, true] {
            let method = q.scaled_dot_product_attention(&k, &v, mask, causal)?;
            let opts = AttentionOptions { mask, causal, ..Default::default() };
            let nn = scaled_dot_product_attention(&q, &k, &v, opts)?;
            let repeated = q.scaled_dot_product_attention(&kr, &vr, mask, causal)?;
            assert_eq!(method.shape(), &[b, h, l, 6]);
            let tag = format!("{what}, causal {causal}");
            assert_all_close(&format!("method vs nn, {tag}"), &values(&method), &values(&nn), 0.0, 0.0);
            assert_all_close(
                &format!("grouped vs repeated, {tag}"),
                &values(&nn),
                &values(&repeated),
                1e-5,
                1e-6,
            );
        }
    }
    // The fully masked row of head 3 is 0.
    let out = values(&q.scaled_dot_product_attention(&k, &v, Some(&per_head), false)?);
    let row = |bi: usize, hi: usize, li: usize| &out[((bi * h + hi) * l + li) * 6..][..6];
    assert_eq!(row(0, 3, 1), &[0.0; 6]);
    assert!(row(0, 2, 1).iter().any(|&x| x != 0.0));
    // An additive mask and a scale: grouped against repeated.
    let opts = AttentionOptions { mask: Some(&bias), scale: Some(0.2), ..Default::default() };
    let grouped = scaled_dot_product_attention(&q, &k, &v, opts)?;
    let repeated = scaled_dot_product_attention(&q, &kr, &vr, opts)?;
    assert_all_close("additive, scale 0.2", &values(&grouped), &values(&repeated), 1e-5, 1e-6);
    // The method takes an additive mask too.
    let method = q.scaled_dot_product_attention(&k, &v, Some(&bias), true)?;
    let nn = scaled_dot_product_attention(
        &q,
        &k,
        &v,
        AttentionOptions { mask: Some(&bias), causal: true, ..Default::default() },
    )?;
    assert_all_close("additive, method vs nn", &values(&method), &values(&nn), 0.0, 0.0);
    Ok(())
}

#[test]
fn leading_dims_broadcast_and_half_precision_is_the_same_attention() -> Result<()> {
    let _serial = common::serial();
    manual_seed(12);
    // No head dim: q [4, 3, 8] against one key/value batch [1, 5, 8] (read as grouped).
    let q = Tensor::randn(&[4, 3, 8], DType::F32)?;
    let k = Tensor::randn(&[1, 5, 8], DType::F32)?;
    let v = Tensor::randn(&[1, 5, 2], DType::F32)?;
    let got = q.scaled_dot_product_attention(&k, &v, None, true)?;
    let want = q.scaled_dot_product_attention(
        &k.broadcast_to(&[4, 5, 8])?,
        &v.broadcast_to(&[4, 5, 2])?,
        None,
        true,
    )?;
    assert_eq!(got.shape(), &[4, 3, 2]);
    assert_all_close("broadcast keys", &values(&got), &values(&want), 1e-5, 1e-6);
    // Rank 2.
    let q2 = q.narrow(0, 0, 1)?.reshape(&[3, 8])?;
    let got2 = q2.scaled_dot_product_attention(&k.reshape(&[5, 8])?, &v.reshape(&[5, 2])?, None, true)?;
    assert_all_close("rank 2", &values(&got2), &values(&want.narrow(0, 0, 1)?), 1e-5, 1e-6);
    // bf16: the method and nn agree, and stay near f32.
    let (qh, kh, vh) = (q.to_dtype(DType::BF16)?, k.to_dtype(DType::BF16)?, v.to_dtype(DType::BF16)?);
    let method = qh.scaled_dot_product_attention(&kh, &vh, None, true)?;
    let nn =
        scaled_dot_product_attention(&qh, &kh, &vh, AttentionOptions { causal: true, ..Default::default() })?;
    assert_eq!(method.dtype(), DType::BF16);
    assert_all_close("bf16 method vs nn", &values(&method), &values(&nn), 0.0, 0.0);
    assert_all_close("bf16 vs f32", &values(&method), &values(&got), 2e-2, 2e-2);
    // Shapes that neither group nor broadcast are the op's error.
    let e = Tensor::zeros(&[1, 4, 3, 8], DType::F32)?
        .scaled_dot_product_attention(
            &Tensor::zeros(&[1, 3, 5, 8], DType::F32)?,
            &Tensor::zeros(&[1, 3, 5, 8], DType::F32)?,
            None,
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("scaled_dot_product_attention:") && e.contains("Hkv dividing H"), "{e}");
    Ok(())
}

#[test]
fn a_fully_masked_row_has_zero_gradients_not_nan() -> Result<()> {
    let _serial = common::serial();
    manual_seed(13);
    let q = Tensor::randn(&[1, 2, 3, 4], DType::F32)?.set_requires_grad(true)?;
    let k = Tensor::randn(&[1, 1, 5, 4], DType::F32)?.set_requires_grad(true)?;
    let v = Tensor::randn(&[1, 1, 5, 4], DType::F32)?.set_requires_grad(true)?;
    let mask = bools(|i| (i / 5) % 3 != 1, &[1, 1, 3, 5]); // row 1 sees nothing
    q.scaled_dot_product_attention(&k, &v, Some(&mask), false)?.sum_all()?.backward()?;
    for (name, t) in [("q", &q), ("k", &k), ("v", &v)] {
        let g = values(&t.grad().expect("a gradient"));
        assert!(g.iter().all(|x| x.is_finite()), "{name} grad {g:?}");
    }
    let gq = values(&q.grad().unwrap());
    for hi in 0..2 {
        assert_eq!(&gq[(hi * 3 + 1) * 4..][..4], &[0.0; 4], "the masked row's query gradient, head {hi}");
    }
    Ok(())
}

#[test]
fn heads_split_and_merge_back() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::arange(0.0, 2.0 * 3.0 * 12.0, 1.0, DType::F32)?.reshape(&[2, 3, 12])?;
    let heads = split_heads(&x, 4)?;
    assert_eq!(heads.shape(), &[2, 4, 3, 3]);
    // Head 1 of position 2 of batch 1 is features 3..6 of that position.
    assert_eq!(values(&heads.narrow(0, 1, 1)?.narrow(1, 1, 1)?.narrow(2, 2, 1)?), [63.0, 64.0, 65.0]);
    assert_eq!(values(&merge_heads(&heads)?), values(&x));
    let qkv = Tensor::cat(&[&x, &x.neg()?, &x.mul_scalar(2.0)?], -1)?;
    let [q, k, v] = split_qkv(&qkv, 4)?;
    assert_eq!(values(&q), values(&heads));
    assert_eq!(values(&k), values(&heads.neg()?));
    assert_eq!(values(&v), values(&heads.mul_scalar(2.0)?));
    let e = split_heads(&x, 5).unwrap_err().to_string();
    assert!(e.contains("split_heads") && e.contains("5 heads") && e.contains("[2, 3, 12]"), "{e}");
    assert!(merge_heads(&x).unwrap_err().to_string().contains("merge_heads"));
    Ok(())
}

#[test]
fn appending_to_the_cache_gives_causal_attention_over_the_sequence() -> Result<()> {
    let _serial = common::serial();
    manual_seed(14);
    let (b, h, hkv, t, d, cap) = (2, 4, 2, 6, 8, 8);
    let q = Tensor::randn(&[b, h, t, d], DType::F32)?;
    let k = Tensor::randn(&[b, hkv, t, d], DType::F32)?;
    let v = Tensor::randn(&[b, hkv, t, d], DType::F32)?;
    let full =
        values(&attend_heads(&q, &k, &v, AttentionOptions { causal: true, ..Default::default() }, None)?);
    let mut cache = StaticKvCache::new(b, hkv, cap, d, DType::F32, eager::default_device())?;
    assert!(cache.is_empty());
    // A prefill of 3 positions, then one at a time.
    let mut got: Vec<Tensor> =
        vec![cache.append(&q.narrow(2, 0, 3)?, &k.narrow(2, 0, 3)?, &v.narrow(2, 0, 3)?)?];
    for i in 3..t {
        got.push(cache.append(&q.narrow(2, i, 1)?, &k.narrow(2, i, 1)?, &v.narrow(2, i, 1)?)?);
    }
    assert_eq!((cache.len(), cache.capacity()), (t, cap));
    let got = Tensor::cat(&got.iter().collect::<Vec<_>>(), 2)?;
    assert_all_close("appended vs full causal", &values(&got), &full, 1e-5, 1e-6);
    // The same through attend_heads with the position and the mask given.
    let mut given = StaticKvCache::new(b, hkv, cap, d, DType::F32, eager::default_device())?;
    let start = Tensor::from_slice(&[0i64], &[])?;
    let mask = bools(|i| i % cap <= i / cap, &[1, 1, t, cap]);
    let out = attend_heads(
        &q,
        &k,
        &v,
        AttentionOptions { mask: Some(&mask), ..Default::default() },
        Some((&mut given, &start)),
    )?;
    assert_all_close("attend_heads through a cache", &values(&out), &full, 1e-5, 1e-6);
    assert_eq!(given.len(), 0, "positions given by the caller are not counted");
    // Past the capacity.
    let e = cache.append(&q.narrow(2, 0, 3)?, &k.narrow(2, 0, 3)?, &v.narrow(2, 0, 3)?).unwrap_err();
    assert_eq!(
        e.to_string(),
        "StaticKvCache::append: the key/value cache has room for 2 more positions, got 3"
    );
    let one = |x: &Tensor| x.narrow(2, 0, 1);
    cache.append(&one(&q)?, &one(&k)?, &one(&v)?)?;
    cache.append(&one(&q)?, &one(&k)?, &one(&v)?)?;
    let e = cache.append(&one(&q)?, &one(&k)?, &one(&v)?).unwrap_err().to_string();
    assert!(e.contains("cache is full (8 positions)"), "{e}");
    Ok(())
}
