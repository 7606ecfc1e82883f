//! Grouped-query attention as Llama, Mistral, Qwen2, Qwen3 and Gemma have it (`q_proj`,
//! `k_proj`, `v_proj`, `o_proj`; fewer key/value heads than query heads, rotary positions;
//! Qwen3's and Gemma 3's RMSNorm on each query and key head, `q_norm`/`k_norm`; Gemma's score
//! scale and soft cap), decoding into a [`StaticKvCache`], its heads split, attended and
//! merged by the shared pieces of `nn::attention`; and the gated MLP (Llama's SwiGLU, Gemma's
//! GeGLU).

use super::{
    apply_rotary, attend_heads, gelu, merge_heads, prefixed, split_heads, AttentionOptions, Linear, Module,
    RmsNorm, StaticKvCache,
};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

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
    /// An RMSNorm over `head_dim` on each query head, after the head split and before rotary
    /// (Qwen3's `q_norm`); `None` for Llama, Mistral and Qwen2.
    pub q_norm: Option<RmsNorm>,
    /// The same on each key head (Qwen3's `k_norm`).
    pub k_norm: Option<RmsNorm>,
    /// Multiplies `q kᵀ` (Gemma's `query_pre_attn_scalar^-½`); `None`: `1 / √head_dim`.
    pub scale: Option<f64>,
    /// Gemma 2's soft cap on the scores (`attn_logit_softcapping`); `None`: none.
    pub softcap: Option<f64>,
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
            q_norm: None,
            k_norm: None,
            scale: None,
            softcap: None,
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
        let norm = |n: &Option<RmsNorm>, heads: Tensor| match n {
            Some(n) => n.forward(&heads),
            None => Ok(heads),
        };
        let q = split_heads(&self.q_proj.forward(x)?, self.heads)?;
        let k = split_heads(&self.k_proj.forward(x)?, self.kv_heads)?;
        let q = apply_rotary(&norm(&self.q_norm, q)?, cos, sin)?;
        let k = apply_rotary(&norm(&self.k_norm, k)?, cos, sin)?;
        let v = split_heads(&self.v_proj.forward(x)?, self.kv_heads)?;
        let opts = AttentionOptions {
            scale: self.scale,
            softcap: self.softcap,
            ..AttentionOptions::causal_under(mask)
        };
        self.o_proj.forward(&merge_heads(&attend_heads(&q, &k, &v, opts, cache)?)?)
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
        for (name, norm) in [("q_norm", &self.q_norm), ("k_norm", &self.k_norm)] {
            if let Some(n) = norm {
                v.push((format!("{name}.weight"), n.weight.clone()));
            }
        }
        v
    }
}

/// The gate's activation in a gated MLP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GateActivation {
    /// SiLU: SwiGLU (Llama, Mistral, Qwen, Phi-3, Mixtral's experts).
    #[default]
    Silu,
    /// GELU's tanh approximation: GeGLU (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// The gated MLP: `down_proj(act(gate_proj(x)) * up_proj(x))`, `act` SiLU (Llama's SwiGLU) or
/// GELU-tanh (Gemma's GeGLU).
pub struct SwiGlu {
    /// The gate projection, `hidden -> intermediate`.
    pub gate_proj: Linear,
    /// The up projection, `hidden -> intermediate`.
    pub up_proj: Linear,
    /// The down projection, `intermediate -> hidden`.
    pub down_proj: Linear,
    /// The gate's activation.
    pub act: GateActivation,
}

impl SwiGlu {
    /// An MLP of `hidden -> intermediate -> hidden`, with biases if `bias`.
    pub fn new(hidden: usize, intermediate: usize, bias: bool, dtype: DType) -> Result<SwiGlu> {
        Ok(SwiGlu {
            gate_proj: Linear::with_options(hidden, intermediate, bias, dtype)?,
            up_proj: Linear::with_options(hidden, intermediate, bias, dtype)?,
            down_proj: Linear::with_options(intermediate, hidden, bias, dtype)?,
            act: GateActivation::Silu,
        })
    }
}

impl Module for SwiGlu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::compile::fused_op("swiglu", || {
            let gate = self.gate_proj.forward(x)?;
            let gate = match self.act {
                GateActivation::Silu => gate.silu()?,
                GateActivation::GeluTanh => gelu(&gate)?,
            };
            self.down_proj.forward(&gate.mul(&self.up_proj.forward(x)?)?)
        })
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("gate_proj", self.gate_proj.named_parameters());
        v.extend(prefixed("up_proj", self.up_proj.named_parameters()));
        v.extend(prefixed("down_proj", self.down_proj.named_parameters()));
        v
    }
}
