//! The layer pieces the families share, beside eager's own (`GroupedQueryAttention`,
//! `SwiGlu`, `SparseMoe`): where a layer's norms sit around its attention and MLP
//! ([`NormLayout`]: pre-norm, Gemma's sandwich, GPT-NeoX's parallel, BERT's post-norm), a
//! multi-head self-attention over fused or separate q, k and v projections with optional
//! (partial) rotary ([`SelfAttention`]: GPT-2, GPT-NeoX, BERT), and a GELU MLP ([`GeluMlp`]).
//! Each takes its projection type as a parameter (GPT-2's `Conv1D` or a `Linear`); the
//! families keep their own Hugging Face names in their files.

use eager::nn::{
    apply_rotary, attend_heads, gelu, gelu_exact, merge_heads, split_heads, split_qkv, AttentionOptions,
    Linear, Module, StaticKvCache,
};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::{ModelError, Result};

/// A layer's norms, borrowed for one step, and where they sit around its attention and MLP.
pub enum NormLayout<'a> {
    /// `h += attn(attn_norm(h)); h += mlp(mlp_norm(h))` (Llama, GPT-2, sequential GPT-NeoX).
    Pre {
        /// The norm before attention.
        attn: &'a dyn Module,
        /// The norm before the MLP.
        mlp: &'a dyn Module,
    },
    /// Pre-norm with each sub-block's output normed before it is added (Gemma 2 and 3).
    Sandwich {
        /// The norm before attention.
        attn: &'a dyn Module,
        /// The norm of the attention's output.
        attn_out: &'a dyn Module,
        /// The norm before the MLP.
        mlp: &'a dyn Module,
        /// The norm of the MLP's output.
        mlp_out: &'a dyn Module,
    },
    /// `h + attn(attn_norm(h)) + mlp(mlp_norm(h))`, both of the layer's input (GPT-NeoX).
    Parallel {
        /// The norm before attention.
        attn: &'a dyn Module,
        /// The norm before the MLP.
        mlp: &'a dyn Module,
    },
    /// `h = attn_norm(attn(h) + h); mlp_norm(mlp(h) + h)` (BERT).
    Post {
        /// The norm of the attention's residual sum.
        attn: &'a dyn Module,
        /// The norm of the MLP's residual sum.
        mlp: &'a dyn Module,
    },
}

impl NormLayout<'_> {
    /// The layer's output for its input `h`, running `attn` then `mlp` once each.
    pub fn apply(
        &self,
        h: &Tensor,
        attn: impl FnOnce(&Tensor) -> Result<Tensor>,
        mlp: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        Ok(match *self {
            NormLayout::Pre { attn: n1, mlp: n2 } => {
                let h = h.add(&attn(&n1.forward(h)?)?)?;
                h.add(&mlp(&n2.forward(&h)?)?)?
            }
            NormLayout::Sandwich { attn: n1, attn_out, mlp: n2, mlp_out } => {
                let h = h.add(&attn_out.forward(&attn(&n1.forward(h)?)?)?)?;
                h.add(&mlp_out.forward(&mlp(&n2.forward(&h)?)?)?)?
            }
            NormLayout::Parallel { attn: n1, mlp: n2 } => {
                let a = attn(&n1.forward(h)?)?;
                let m = mlp(&n2.forward(h)?)?;
                h.add(&a)?.add(&m)?
            }
            NormLayout::Post { attn: n1, mlp: n2 } => {
                let h = n1.forward(&attn(h)?.add(h)?)?;
                n2.forward(&mlp(&h)?.add(&h)?)?
            }
        })
    }
}

/// GELU, exact or its tanh approximation, as `hidden_act` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluKind {
    /// `gelu`: `x Φ(x)`.
    Exact,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation.
    Tanh,
}

impl GeluKind {
    /// The GELU the config's `hidden_act` names (`family` names the model in the error).
    pub fn of(cfg: &Config, family: &str) -> Result<GeluKind> {
        match cfg.hidden_act.as_str() {
            "gelu" => Ok(GeluKind::Exact),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(GeluKind::Tanh),
            other => Err(ModelError::Unsupported(format!(
                "{family} activation `{other}` (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)"
            ))),
        }
    }

    /// The activation of `x`.
    pub fn apply(self, x: &Tensor) -> eager::Result<Tensor> {
        match self {
            GeluKind::Exact => gelu_exact(x),
            GeluKind::Tanh => gelu(x),
        }
    }
}

/// The MLP `down(gelu(up(x)))` (GPT-2's `c_fc`/`c_proj`, GPT-NeoX's `dense_h_to_4h`/
/// `dense_4h_to_h`, BERT's `intermediate.dense`/`output.dense`); the family names its parameters.
pub struct GeluMlp<P = Linear> {
    /// `hidden -> intermediate`.
    pub up: P,
    /// `intermediate -> hidden`.
    pub down: P,
    /// The activation between them.
    pub act: GeluKind,
}

impl<P: Module> GeluMlp<P> {
    /// The MLP of `x` `[.., hidden]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.down.forward(&self.act.apply(&self.up.forward(x)?)?)?)
    }

    /// Every parameter, `up`'s and `down`'s under their names in `names`.
    pub fn named_parameters(&self, [up, down]: [&str; 2]) -> Vec<(String, Var)> {
        let mut v = prefixed(up, self.up.named_parameters());
        v.extend(prefixed(down, self.down.named_parameters()));
        v
    }
}

/// How a [`SelfAttention`] projects its input to queries, keys and values.
pub enum Qkv<P = Linear> {
    /// Three projections, `[query, key, value]` (BERT).
    Separate([P; 3]),
    /// One projection whose output is all queries, then all keys, then all values (GPT-2's `c_attn`).
    Fused(P),
    /// One projection whose output is per head, each head's q, k and v side by side
    /// (`[heads, 3, head_dim]`, GPT-NeoX's `query_key_value`).
    FusedPerHead(P),
}

/// Multi-head self-attention (as many key/value heads as query heads): q, k and v as [`Qkv`]
/// says, rotary on the leading dims of each query and key head when given, then the output
/// projection; the family names its parameters.
pub struct SelfAttention<P = Linear> {
    /// The q, k and v projections.
    pub qkv: Qkv<P>,
    /// The projection of the merged heads to the output.
    pub out: P,
    /// How many heads.
    pub heads: usize,
    /// Each head's size.
    pub head_dim: usize,
}

impl<P: Module> SelfAttention<P> {
    /// The attention of `x` `[B, T, hidden]` under `opts` (its mask, causal or not), with
    /// rotary `(cos, sin)` `[B, T, r]` on the first `r` dims of each query and key head, and
    /// with a `cache` its keys and values written from `start` and the whole cache attended.
    pub fn forward_with(
        &self,
        x: &Tensor,
        rope: Option<(&Tensor, &Tensor)>,
        opts: AttentionOptions,
        cache: Option<(&mut StaticKvCache, &Tensor)>,
    ) -> Result<Tensor> {
        let (heads, hd) = (self.heads, self.head_dim);
        let [q, k, v] = match &self.qkv {
            Qkv::Separate([q, k, v]) => {
                let split = |p: &P| split_heads(&p.forward(x)?, heads);
                [split(q)?, split(k)?, split(v)?]
            }
            Qkv::Fused(p) => split_qkv(&p.forward(x)?, heads)?,
            Qkv::FusedPerHead(p) => {
                let qkv = split_heads(&p.forward(x)?, heads)?;
                [qkv.narrow(-1, 0, hd)?, qkv.narrow(-1, hd, hd)?, qkv.narrow(-1, 2 * hd, hd)?]
            }
        };
        let (q, k) = match rope {
            Some((cos, sin)) => (rotate(&q, cos, sin)?, rotate(&k, cos, sin)?),
            None => (q, k),
        };
        Ok(self.out.forward(&merge_heads(&attend_heads(&q, &k, &v, opts, cache)?)?)?)
    }

    /// The projections, q, k and v's first, then the output's.
    pub fn projections(&self) -> Vec<&P> {
        let mut v: Vec<&P> = match &self.qkv {
            Qkv::Separate(qkv) => qkv.iter().collect(),
            Qkv::Fused(p) | Qkv::FusedPerHead(p) => vec![p],
        };
        v.push(&self.out);
        v
    }

    /// Every parameter, each projection's under its name in `names` (in
    /// [`SelfAttention::projections`]' order: `["attn.c_attn", "attn.c_proj"]`).
    pub fn named_parameters(&self, names: &[&str]) -> Vec<(String, Var)> {
        let projections = self.projections().into_iter().zip(names);
        projections.flat_map(|(p, name)| prefixed(name, p.named_parameters())).collect()
    }

    /// An empty cache for this layer, of `dtype` on `device`.
    pub fn new_cache(
        &self,
        batch: usize,
        capacity: usize,
        dtype: DType,
        device: Device,
    ) -> Result<StaticKvCache> {
        Ok(StaticKvCache::new(batch, self.heads, capacity, self.head_dim, dtype, device)?)
    }
}

/// Rotary on the first `r` dims of each head of `x` `[B, heads, T, head_dim]` (`r` the last dim
/// of `cos`), the rest passed through (GPT-NeoX's partial rotary).
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (r, hd) = (cos.shape()[cos.rank() - 1], x.shape()[x.rank() - 1]);
    if r == hd {
        return Ok(apply_rotary(x, cos, sin)?);
    }
    let rotated = apply_rotary(&x.narrow(-1, 0, r)?, cos, sin)?;
    Ok(Tensor::cat(&[&rotated, &x.narrow(-1, r, hd - r)?], -1)?)
}

/// `named` under `prefix.` (a sub-module's parameters in its parent's tree).
pub(crate) fn prefixed(prefix: &str, named: Vec<(String, Var)>) -> Vec<(String, Var)> {
    named.into_iter().map(|(n, v)| (format!("{prefix}.{n}"), v)).collect()
}
