//! Multi-head attention, and the pieces every attention layer and model is made of: heads
//! split from and merged back into `[B, T, hidden]`, and one step's attention over its own
//! positions ([`scaled_dot_product_attention`]) or through a [`StaticKvCache`] (decoding one
//! position at a time on fixed shapes). `MultiheadAttention`, grouped-query attention, GPT-2
//! and BERT all attend through these.

use super::{prefixed, scaled_dot_product_attention, AttentionOptions, Linear, Module, StaticKvCache};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// `[B, T, heads · d]` split into heads, `[B, heads, T, d]`.
pub fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    if x.rank() != 3 || heads == 0 || !x.shape()[2].is_multiple_of(heads) {
        let msg = format!("needs [B, T, heads · d] with {heads} heads, got {}", x.spec());
        return Err(Error::shape("split_heads", msg));
    }
    let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
    x.reshape(&[b, t, heads as isize, -1])?.permute(&[0, 2, 1, 3])
}

/// Queries, keys and values projected as one, `[B, T, 3 · heads · d]` (q, then k, then v),
/// each split into heads, `[B, heads, T, d]`.
pub fn split_qkv(qkv: &Tensor, heads: usize) -> Result<[Tensor; 3]> {
    if qkv.rank() != 3 || !qkv.shape()[2].is_multiple_of(3) {
        let msg = format!("needs [B, T, 3 · heads · d], got {}", qkv.spec());
        return Err(Error::shape("split_qkv", msg));
    }
    let dim = qkv.shape()[2] / 3;
    let part = |i: usize| split_heads(&qkv.narrow(-1, i * dim, dim)?, heads);
    Ok([part(0)?, part(1)?, part(2)?])
}

/// Heads `[B, heads, T, d]` merged back, `[B, T, heads · d]` (the inverse of [`split_heads`]).
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    if x.rank() != 4 {
        return Err(Error::shape("merge_heads", format!("needs [B, heads, T, d], got {}", x.spec())));
    }
    let (b, t) = (x.shape()[0] as isize, x.shape()[2] as isize);
    x.permute(&[0, 2, 1, 3])?.reshape(&[b, t, -1])
}

/// One step's attention of split heads, q `[B, heads, T, d]` and k, v `[B, kv_heads, T, d]`
/// (`kv_heads` dividing `heads`): without a cache, [`scaled_dot_product_attention`] over the
/// step's own positions with `opts` (its mask broadcast to `[B, heads, T, T]`); with
/// `(cache, start)`, the keys and values go to the cache's slots from `start` and the queries
/// attend the whole cache under `opts.mask` alone (bool, `[B, 1, T, capacity]`, which holds
/// the causal rule: `opts.causal` is not read), as [`StaticKvCache::attend`]. `[B, heads, T, d]`.
pub fn attend_heads(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: AttentionOptions,
    cache: Option<(&mut StaticKvCache, &Tensor)>,
) -> Result<Tensor> {
    match cache {
        Some((cache, start)) => cache.attend(q, k, v, start, opts),
        None => scaled_dot_product_attention(q, k, v, opts),
    }
}

/// Self-attention of `[B, T, dim]` inputs over `heads` heads (torch's `nn.MultiheadAttention`
/// with `batch_first=True`, queries, keys and values all the input): one projection to q, k
/// and v (`in_proj`, `[3 dim, dim]`), scaled dot-product attention per head, the heads merged
/// and projected (`out_proj`). `causal` lets position `i` attend positions `0..=i` only.
pub struct MultiheadAttention {
    /// The projection of the input to q, k and v, `[3 dim, dim]`.
    pub in_proj: Linear,
    /// The projection of the merged heads, `[dim, dim]`.
    pub out_proj: Linear,
    /// Number of heads.
    pub heads: usize,
    /// Whether position `i` attends positions `0..=i` only.
    pub causal: bool,
}

/// The cache [`MultiheadAttention::decode`] fills: the one key/value cache,
/// [`StaticKvCache`], under the name it had when `MultiheadAttention` kept its own (its
/// [`StaticKvCache::len`] counts the positions decoded).
pub type KvCache = StaticKvCache;

impl MultiheadAttention {
    /// Attention over `heads` heads of `dim / heads` (which must divide), f32, with biases.
    pub fn new(dim: usize, heads: usize, causal: bool) -> Result<MultiheadAttention> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            let msg = format!("dim {dim} must be a multiple of the number of heads ({heads})");
            return Err(Error::invalid("MultiheadAttention", msg));
        }
        Ok(MultiheadAttention {
            in_proj: Linear::new(dim, 3 * dim)?,
            out_proj: Linear::new(dim, dim)?,
            heads,
            causal,
        })
    }

    fn dim(&self) -> usize {
        self.out_proj.weight.get().shape()[0]
    }

    /// q, k, v of `[B, T, dim]`, each `[B, heads, T, head_dim]`.
    fn project(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let dim = self.dim();
        if x.rank() != 3 || x.shape()[2] != dim {
            let msg = format!("needs [B, T, {dim}] inputs, got {}", x.spec());
            return Err(Error::shape("MultiheadAttention", msg));
        }
        split_qkv(&self.in_proj.forward(x)?, self.heads)
    }

    /// Self-attention of `x` `[B, T, dim]`; `mask` (bool, broadcast to `[B, heads, T, T]`)
    /// is true where a query may attend, on top of the causal rule if set.
    pub fn attend(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        crate::compile::fused_op("attention", || {
            let [q, k, v] = self.project(x)?;
            self.out_proj.forward(&merge_heads(&attend_heads(
                &q,
                &k,
                &v,
                AttentionOptions { mask, causal: self.causal, ..Default::default() },
                None,
            )?)?)
        })
    }

    /// An empty key/value cache for decoding `batch` sequences of up to `capacity` positions
    /// (in the weights' dtype and device).
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<StaticKvCache> {
        let w = self.out_proj.weight.get();
        StaticKvCache::new(batch, self.heads, capacity, self.dim() / self.heads, w.dtype(), w.device())
    }

    /// Attention of one new position `x` `[B, 1, dim]` over it and every position in `cache`,
    /// which it joins ([`StaticKvCache::append`]): the same result as
    /// [`MultiheadAttention::attend`] (causal) gives at that position for the whole sequence,
    /// without recomputing the earlier keys and values.
    pub fn decode(&self, x: &Tensor, cache: &mut StaticKvCache) -> Result<Tensor> {
        if x.rank() != 3 || x.shape()[1] != 1 {
            let msg = format!("decodes one position at a time, [B, 1, dim], got {}", x.spec());
            return Err(Error::shape("MultiheadAttention::decode", msg));
        }
        let [q, k, v] = self.project(x)?;
        self.out_proj.forward(&merge_heads(&cache.append(&q, &k, &v)?)?)
    }
}

impl Module for MultiheadAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, None)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("in_proj", self.in_proj.named_parameters());
        v.extend(prefixed("out_proj", self.out_proj.named_parameters()));
        v
    }
}
