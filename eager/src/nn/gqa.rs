//! Grouped-query attention as Llama, Mistral and Qwen2 have it (`q_proj`, `k_proj`, `v_proj`,
//! `o_proj`; fewer key/value heads than query heads, rotary positions), and the static
//! key/value cache decoding writes into: fixed capacity, the write position a tensor, so
//! every decode step has the same shapes and runs the same executables.

use super::{apply_rotary, prefixed, scaled_dot_product_attention, AttentionOptions, Linear, Module};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// Keys and values of one attention layer, `[B, kv_heads, capacity, head_dim]` each.
pub struct StaticKvCache {
    /// The keys, `[B, kv_heads, capacity, head_dim]`.
    pub keys: Tensor,
    /// The values, `[B, kv_heads, capacity, head_dim]`.
    pub values: Tensor,
    /// `0..capacity`, i64: compared with the write position on the device.
    slots: Tensor,
}

impl StaticKvCache {
    /// An all-zero cache of `capacity` positions on `device`.
    pub fn new(
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: Device,
    ) -> Result<StaticKvCache> {
        let shape = [batch, kv_heads, capacity, head_dim];
        Ok(StaticKvCache {
            keys: Tensor::full_on(&shape, 0.0, dtype, device)?,
            values: Tensor::full_on(&shape, 0.0, dtype, device)?,
            slots: Tensor::arange_on(0.0, capacity as f64, 1.0, DType::I64, device)?,
        })
    }

    /// A cache holding `keys` and `values` `[B, kv_heads, capacity, head_dim]` (as a compiled
    /// decode step receives them).
    pub fn from_parts(keys: Tensor, values: Tensor) -> Result<StaticKvCache> {
        if keys.rank() != 4 || keys.spec() != values.spec() {
            let msg = format!(
                "needs keys and values of one [B, heads, capacity, dim] spec, got {} and {}",
                keys.spec(),
                values.spec()
            );
            return Err(Error::shape("StaticKvCache", msg));
        }
        let slots = Tensor::arange_on(0.0, keys.shape()[2] as f64, 1.0, DType::I64, keys.device())?;
        Ok(StaticKvCache { keys, values, slots })
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.slots.shape()[0]
    }

    /// Writes `k` and `v` `[B, kv_heads, T, head_dim]` into slots `start..start + T`, `start`
    /// an i64 scalar tensor (so the step's position is data, not part of any op's key). The
    /// caller keeps `start + T <= capacity`: slots past the end are not written.
    pub fn write(&mut self, k: &Tensor, v: &Tensor, start: &Tensor) -> Result<()> {
        let t = k.shape().get(2).copied().unwrap_or(0);
        let mut want = self.keys.shape().to_vec();
        want[2] = t;
        if k.shape() != want || v.shape() != want || t == 0 || t > self.capacity() {
            let msg = format!(
                "needs keys and values {want:?} (T ≤ {}), got {} and {}",
                self.capacity(),
                k.spec(),
                v.spec()
            );
            return Err(Error::shape("StaticKvCache::write", msg));
        }
        if start.numel() != 1 || start.dtype() != DType::I64 {
            return Err(Error::invalid(
                "StaticKvCache::write",
                format!("start must be one i64, got {}", start.spec()),
            ));
        }
        let start = start.reshape(&[1])?;
        // Slot p takes row p - start of the new keys where start <= p < start + T.
        let offset = self.slots.sub(&start)?;
        let inside = offset.ge_scalar(0.0)?;
        let inside = inside.where_cond(&offset.lt_scalar(t as f64)?, &inside)?.reshape(&[1, 1, -1, 1])?;
        let rows = offset.maximum_scalar(0.0)?.minimum_scalar((t - 1) as f64)?;
        let place = |new: &Tensor, old: &Tensor| -> Result<Tensor> {
            let spread = if t == 1 { new.broadcast_to(old.shape())? } else { new.index_select(2, &rows)? };
            inside.where_cond(&spread, old)
        };
        self.keys = place(&k.to_dtype(self.keys.dtype())?, &self.keys)?;
        self.values = place(&v.to_dtype(self.values.dtype())?, &self.values)?;
        Ok(())
    }
}

/// Self-attention with `heads` query heads and `kv_heads` key/value heads of `head_dim`.
pub struct GroupedQueryAttention {
    /// Projection to the queries.
    pub q_proj: Linear,
    /// Projection to the keys.
    pub k_proj: Linear,
    /// Projection to the values.
    pub v_proj: Linear,
    /// Projection of the merged heads to the output.
    pub o_proj: Linear,
    /// Number of query heads.
    pub heads: usize,
    /// Number of key/value heads.
    pub kv_heads: usize,
    /// Size of each head.
    pub head_dim: usize,
}

impl GroupedQueryAttention {
    /// `qkv_bias`: biases on q, k and v (Qwen2); `o_bias` on the output projection.
    pub fn new(
        hidden: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        qkv_bias: bool,
        o_bias: bool,
        dtype: DType,
    ) -> Result<GroupedQueryAttention> {
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) || head_dim == 0 {
            let msg = format!(
                "needs key/value heads ({kv_heads}) dividing the query heads ({heads}) and head_dim > 0"
            );
            return Err(Error::invalid("GroupedQueryAttention", msg));
        }
        Ok(GroupedQueryAttention {
            q_proj: Linear::with_options(hidden, heads * head_dim, qkv_bias, dtype)?,
            k_proj: Linear::with_options(hidden, kv_heads * head_dim, qkv_bias, dtype)?,
            v_proj: Linear::with_options(hidden, kv_heads * head_dim, qkv_bias, dtype)?,
            o_proj: Linear::with_options(heads * head_dim, hidden, o_bias, dtype)?,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// `x` `[B, T, hidden]` with rotary `cos`/`sin` `[B, T, head_dim]`: with a `cache`, the new
    /// keys and values go to its slots from `start` and the queries attend the whole cache
    /// under `mask` (bool `[B, 1, T, capacity]`); without, causal attention over `x` under
    /// `mask` (bool `[B, 1, T, T]`, or none).
    pub fn forward_with(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        cache: Option<(&mut StaticKvCache, &Tensor)>,
    ) -> Result<Tensor> {
        if x.rank() != 3 {
            return Err(Error::shape(
                "GroupedQueryAttention",
                format!("needs [B, T, hidden], got {}", x.spec()),
            ));
        }
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let split = |y: Tensor, n: usize| {
            y.reshape(&[b, t, n as isize, self.head_dim as isize])?.permute(&[0, 2, 1, 3])
        };
        let q = apply_rotary(&split(self.q_proj.forward(x)?, self.heads)?, cos, sin)?;
        let k = apply_rotary(&split(self.k_proj.forward(x)?, self.kv_heads)?, cos, sin)?;
        let v = split(self.v_proj.forward(x)?, self.kv_heads)?;
        let out = match cache {
            Some((cache, start)) => {
                cache.write(&k, &v, start)?;
                let opts = AttentionOptions { mask, ..Default::default() };
                scaled_dot_product_attention(&q, &cache.keys, &cache.values, opts)?
            }
            None => scaled_dot_product_attention(
                &q,
                &k,
                &v,
                AttentionOptions { mask, causal: true, ..Default::default() },
            )?,
        };
        self.o_proj.forward(&out.permute(&[0, 2, 1, 3])?.reshape(&[b, t, -1])?)
    }

    /// An empty cache for this layer.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<StaticKvCache> {
        let w = self.k_proj.weight.get();
        StaticKvCache::new(batch, self.kv_heads, capacity, self.head_dim, w.dtype(), w.device())
    }

    /// Every parameter with its dotted path (`q_proj.weight`, …).
    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("q_proj", self.q_proj.named_parameters());
        v.extend(prefixed("k_proj", self.k_proj.named_parameters()));
        v.extend(prefixed("v_proj", self.v_proj.named_parameters()));
        v.extend(prefixed("o_proj", self.o_proj.named_parameters()));
        v
    }
}

/// Llama's MLP: `down_proj(silu(gate_proj(x)) * up_proj(x))`.
pub struct SwiGlu {
    /// The gate projection, `hidden -> intermediate`.
    pub gate_proj: Linear,
    /// The up projection, `hidden -> intermediate`.
    pub up_proj: Linear,
    /// The down projection, `intermediate -> hidden`.
    pub down_proj: Linear,
}

impl SwiGlu {
    /// An MLP of `hidden -> intermediate -> hidden`, with biases if `bias`.
    pub fn new(hidden: usize, intermediate: usize, bias: bool, dtype: DType) -> Result<SwiGlu> {
        Ok(SwiGlu {
            gate_proj: Linear::with_options(hidden, intermediate, bias, dtype)?,
            up_proj: Linear::with_options(hidden, intermediate, bias, dtype)?,
            down_proj: Linear::with_options(intermediate, hidden, bias, dtype)?,
        })
    }
}

impl Module for SwiGlu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::compile::fused_op("swiglu", || {
            self.down_proj.forward(&self.gate_proj.forward(x)?.silu()?.mul(&self.up_proj.forward(x)?)?)
        })
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("gate_proj", self.gate_proj.named_parameters());
        v.extend(prefixed("up_proj", self.up_proj.named_parameters()));
        v.extend(prefixed("down_proj", self.down_proj.named_parameters()));
        v
    }
}
