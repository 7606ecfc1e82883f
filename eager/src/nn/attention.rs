//! Attention layers: multi-head self-attention with a key/value cache for decoding one
//! position at a time on fixed shapes.

use super::{prefixed, Linear, Module};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

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

/// Keys and values of the positions decoded so far, for one attention layer: `[B, heads,
/// capacity, head_dim]` each, filled one position per [`MultiheadAttention::decode`]. Shapes
/// never change while it fills, so every decoding step runs the same cached executables.
pub struct KvCache {
    keys: Tensor,
    values: Tensor,
    positions: Tensor,
    len: usize,
}

impl KvCache {
    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.positions.shape()[0]
    }
}

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
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let qkv = self.in_proj.forward(x)?;
        let head = |i: usize| -> Result<Tensor> {
            qkv.narrow(-1, i * dim, dim)?.reshape(&[b, t, self.heads as isize, -1])?.permute(&[0, 2, 1, 3])
        };
        Ok([head(0)?, head(1)?, head(2)?])
    }

    /// `[B, heads, T, head_dim]` back to `[B, T, dim]`, projected.
    fn merge(&self, heads: &Tensor) -> Result<Tensor> {
        let (b, t) = (heads.shape()[0] as isize, heads.shape()[2] as isize);
        self.out_proj.forward(&heads.permute(&[0, 2, 1, 3])?.reshape(&[b, t, -1])?)
    }

    /// Self-attention of `x` `[B, T, dim]`; `mask` (bool, broadcast to `[B, heads, T, T]`)
    /// is true where a query may attend, on top of the causal rule if set.
    pub fn attend(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        crate::compile::fused_op("attention", || {
            let [q, k, v] = self.project(x)?;
            self.merge(&q.scaled_dot_product_attention(&k, &v, mask, self.causal)?)
        })
    }

    /// An empty key/value cache for decoding `batch` sequences of up to `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        let w = self.out_proj.weight.get();
        let shape = [batch, self.heads, capacity, self.dim() / self.heads];
        Ok(KvCache {
            keys: Tensor::full_on(&shape, 0.0, w.dtype(), w.device())?,
            values: Tensor::full_on(&shape, 0.0, w.dtype(), w.device())?,
            positions: Tensor::arange_on(0.0, capacity as f64, 1.0, DType::I64, w.device())?,
            len: 0,
        })
    }

    /// Attention of one new position `x` `[B, 1, dim]` over it and every position in `cache`,
    /// which it joins: the same result as [`MultiheadAttention::attend`] (causal) gives at
    /// that position for the whole sequence, without recomputing the earlier keys and values.
    pub fn decode(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        if x.rank() != 3 || x.shape()[1] != 1 {
            let msg = format!("decodes one position at a time, [B, 1, dim], got {}", x.spec());
            return Err(Error::shape("MultiheadAttention::decode", msg));
        }
        if cache.len == cache.capacity() {
            let msg = format!("the key/value cache is full ({} positions)", cache.capacity());
            return Err(Error::invalid("MultiheadAttention::decode", msg));
        }
        let [q, k, v] = self.project(x)?;
        let pos = cache.len as f64;
        // The new key and value go to slot `pos`; the query sees slots 0..=pos.
        let slot = cache.positions.eq_scalar(pos)?.reshape(&[1, 1, -1, 1])?;
        cache.keys = slot.where_cond(&k.broadcast_to(cache.keys.shape())?, &cache.keys)?;
        cache.values = slot.where_cond(&v.broadcast_to(cache.values.shape())?, &cache.values)?;
        cache.len += 1;
        let seen = cache.positions.le_scalar(pos)?.reshape(&[1, 1, 1, -1])?;
        self.merge(&q.scaled_dot_product_attention(&cache.keys, &cache.values, Some(&seen), false)?)
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
