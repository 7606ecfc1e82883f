//! Functional scaled dot-product attention (torch's `F.scaled_dot_product_attention`): a bool
//! or additive float mask, a causal rule, an explicit `scale`, dropout on the weights, and
//! fewer key/value heads than query heads (grouped-query attention, `enable_gqa=True`).
//! A query row with nothing to attend gives 0, as torch 2.9 does, not NaN. This is the
//! crate's one attention (`ops::composite::attention`, which `Tensor::scaled_dot_product_attention`
//! runs without scale or dropout) with its options as a struct; every attention layer and
//! model calls it.

use crate::error::Result;
use crate::tensor::Tensor;

/// What [`scaled_dot_product_attention`] takes beyond q, k and v; `Default` is torch's.
#[derive(Default, Clone, Copy)]
pub struct AttentionOptions<'a> {
    /// Bool (true where a query may attend) or float (added to the scores), broadcast to
    /// `[B, heads, L, S]`.
    pub mask: Option<&'a Tensor>,
    /// Query `i` attends keys `0..=i` only (on top of `mask`).
    pub causal: bool,
    /// Multiplies `q kᵀ`; `None` is `1 / √d`.
    pub scale: Option<f64>,
    /// Caps the scaled scores softly, `cap · tanh(scores / cap)`, before the mask (Gemma 2's
    /// `attn_logit_softcapping`); `None`: no cap.
    pub softcap: Option<f64>,
    /// Probability of zeroing each attention weight (the rest scaled by `1 / (1 - p)`).
    pub dropout: f64,
}

impl<'a> AttentionOptions<'a> {
    /// Causal attention under `mask` too, torch's other defaults: a decoder's usual step.
    pub fn causal_under(mask: Option<&'a Tensor>) -> AttentionOptions<'a> {
        AttentionOptions { mask, causal: true, ..Default::default() }
    }
}

/// `softmax(q kᵀ scale + mask) v` for q `[B, H, L, d]`, k `[B, Hkv, S, d]`, v `[B, Hkv, S, dv]`
/// where `Hkv` divides `H` (each key/value head serves `H / Hkv` query heads; leading dims
/// broadcast as matmul's). Scores and the softmax are computed in f32 for half-precision
/// inputs, the result cast back. One program (`attention`), as torch's user-level ops are.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: AttentionOptions,
) -> Result<Tensor> {
    crate::compile::fused_op("attention", || {
        let scores = crate::ops::composite::Scores { scale: opts.scale, softcap: opts.softcap };
        crate::ops::composite::attention(q, k, v, opts.mask, opts.causal, scores, opts.dropout)
    })
}

/// Key/value heads `[..., Hkv, S, d]` repeated to `heads` (each `heads / Hkv` times, adjacent,
/// as transformers' `repeat_kv`).
pub fn repeat_kv(x: &Tensor, heads: usize) -> Result<Tensor> {
    let rank = x.rank();
    let kv = x.shape()[rank - 3];
    if kv == heads {
        return Ok(x.clone());
    }
    let mut wide: Vec<usize> = x.shape().to_vec();
    wide.insert(rank - 2, heads / kv);
    let mut target: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    target[rank - 3] = heads as isize;
    x.unsqueeze((rank - 2) as isize)?.broadcast_to(&wide)?.reshape(&target)
}
