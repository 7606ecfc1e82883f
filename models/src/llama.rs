//! Llama, and the architectures that share its layout: Mistral (no biases), Qwen2 (biases
//! on q, k and v) and Qwen3 (an RMSNorm on each query and key head, `Config::qk_norm`; its
//! config is read by [`crate::qwen3`]). RMSNorm, rotary embeddings (`rope_theta`,
//! `default`/`linear`/`llama3` scaling), a SwiGLU MLP, grouped- or multi-query attention,
//! tied or untied embeddings, sliding-window attention on the layers the config names
//! (`Config::sliding_window`, `Config::sliding_layers`). Phi-3 (`crate::phi3`) runs here too,
//! its fused `qkv_proj` and `gate_up_proj` split on load, and Mixtral (`crate::mixtral`), its
//! MLPs sparse mixtures of experts ([`LlamaMlp::Sparse`]). Parameters keep transformers' names
//! (`model.layers.0.self_attn.q_proj.weight`, `…self_attn.q_norm.weight`, …).

use eager::nn::{
    Embedding, GroupedQueryAttention, Linear, Module, RmsNorm, RotaryEmbedding, SparseMoe, StaticKvCache,
    SwiGlu,
};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::generate::{prepare_for_inference, window_mask, CausalLm};
use crate::weights::Weights;
use crate::{ModelError, Result};

/// One decoder layer: pre-norm attention, then pre-norm MLP, each added to the residual.
pub struct LlamaLayer {
    /// The norm before attention.
    pub input_layernorm: RmsNorm,
    /// Grouped-query attention with rotary positions.
    pub self_attn: GroupedQueryAttention,
    /// The norm before the MLP.
    pub post_attention_layernorm: RmsNorm,
    /// The gated MLP, or Mixtral's experts.
    pub mlp: LlamaMlp,
}

/// A decoder layer's MLP: one SwiGLU (`mlp.gate_proj`, `up_proj`, `down_proj`) or a sparse
/// mixture of SwiGLU experts (Mixtral's `block_sparse_moe`).
pub enum LlamaMlp {
    /// One SwiGLU MLP, Hugging Face's `mlp`.
    Dense(SwiGlu),
    /// Routed experts, Hugging Face's `block_sparse_moe`.
    Sparse(SparseMoe),
}

impl LlamaMlp {
    /// The parameters' prefix under Hugging Face's names.
    pub fn hf_name(&self) -> &'static str {
        match self {
            LlamaMlp::Dense(_) => "mlp",
            LlamaMlp::Sparse(_) => "block_sparse_moe",
        }
    }
}

impl Module for LlamaMlp {
    fn forward(&self, x: &Tensor) -> eager::Result<Tensor> {
        match self {
            LlamaMlp::Dense(m) => m.forward(x),
            LlamaMlp::Sparse(m) => m.forward(x),
        }
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        match self {
            LlamaMlp::Dense(m) => m.named_parameters(),
            LlamaMlp::Sparse(m) => m.named_parameters(),
        }
    }
}

/// Llama, and the architectures built the same way (Mistral, Qwen2, Qwen3): embeddings, decoder layers, a final RMSNorm, the output head.
pub struct Llama {
    /// The checkpoint's configuration.
    pub config: Config,
    /// Token embeddings.
    pub embed_tokens: Embedding,
    /// The decoder layers, in order.
    pub layers: Vec<LlamaLayer>,
    /// The final norm.
    pub norm: RmsNorm,
    /// The output projection; with tied embeddings it shares `embed_tokens`' weight.
    pub lm_head: Linear,
    /// Rotary position embeddings (with the config's scaling).
    pub rotary: RotaryEmbedding,
    /// The dtype the weights were loaded in.
    pub dtype: DType,
}

/// Checks what the architecture needs of a config before anything is built.
fn check(cfg: &Config) -> Result<()> {
    if !matches!(cfg.hidden_act.as_str(), "silu" | "swish") {
        return Err(ModelError::Unsupported(format!(
            "activation `{}` in a {} model (only silu)",
            cfg.hidden_act, cfg.model_type
        )));
    }
    if cfg.num_key_value_heads == 0 || !cfg.num_attention_heads.is_multiple_of(cfg.num_key_value_heads) {
        return Err(ModelError::Unsupported(format!(
            "num_key_value_heads {} does not divide num_attention_heads {}",
            cfg.num_key_value_heads, cfg.num_attention_heads
        )));
    }
    if cfg.model_type == "phi3" {
        crate::phi3::check(cfg)?;
    }
    Ok(())
}

impl Llama {
    /// Loads the weights of a checkpoint (in `dtype`) onto `device`.
    pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<Llama> {
        check(cfg)?;
        let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nq, nkv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
        let param = |name: &str, shape: &[usize]| -> Result<Var> {
            Ok(Var::parameter(name.rsplit('.').next().unwrap_or(name), w.get(name, shape, dtype, device)?)?)
        };
        let linear = |name: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
            let weight = param(&format!("{name}.weight"), &[out, inp])?;
            let bias = if bias { Some(param(&format!("{name}.bias"), &[out])?) } else { None };
            Ok(Linear { weight, bias })
        };
        let norm_of = |name: &str, dim: usize| -> Result<RmsNorm> {
            Ok(RmsNorm { weight: param(&format!("{name}.weight"), &[dim])?, eps: cfg.norm_eps })
        };
        let norm = |name: &str| norm_of(name, h);
        let head_norm =
            |name: &str| -> Result<Option<RmsNorm>> { cfg.qk_norm.then(|| norm_of(name, hd)).transpose() };
        // Phi-3 fuses q, k and v into `qkv_proj` and gate and up into `gate_up_proj` (no biases):
        // row blocks of one weight, split here into eager's projections.
        let fused = cfg.model_type == "phi3";
        let rows = |t: &Tensor, start: usize, n: usize| -> Result<Linear> {
            Ok(Linear { weight: Var::parameter("weight", t.narrow(0, start, n)?)?, bias: None })
        };
        let embed_tokens = Embedding { weight: param("model.embed_tokens.weight", &[cfg.vocab_size, h])? };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let [q_proj, k_proj, v_proj] = if fused {
                let qkv =
                    w.get(&format!("{p}.self_attn.qkv_proj.weight"), &[nq + 2 * nkv, h], dtype, device)?;
                [rows(&qkv, 0, nq)?, rows(&qkv, nq, nkv)?, rows(&qkv, nq + nkv, nkv)?]
            } else {
                [
                    linear(&format!("{p}.self_attn.q_proj"), nq, h, cfg.qkv_bias)?,
                    linear(&format!("{p}.self_attn.k_proj"), nkv, h, cfg.qkv_bias)?,
                    linear(&format!("{p}.self_attn.v_proj"), nkv, h, cfg.qkv_bias)?,
                ]
            };
            let mlp = if cfg.num_experts > 0 {
                LlamaMlp::Sparse(crate::mixtral::load_experts(cfg, w, &p, dtype, device)?)
            } else {
                let [gate_proj, up_proj] = if fused {
                    let gate_up =
                        w.get(&format!("{p}.mlp.gate_up_proj.weight"), &[2 * i, h], dtype, device)?;
                    [rows(&gate_up, 0, i)?, rows(&gate_up, i, i)?]
                } else {
                    [
                        linear(&format!("{p}.mlp.gate_proj"), i, h, cfg.mlp_bias)?,
                        linear(&format!("{p}.mlp.up_proj"), i, h, cfg.mlp_bias)?,
                    ]
                };
                let down_proj = linear(&format!("{p}.mlp.down_proj"), h, i, cfg.mlp_bias)?;
                LlamaMlp::Dense(SwiGlu { gate_proj, up_proj, down_proj })
            };
            layers.push(LlamaLayer {
                input_layernorm: norm(&format!("{p}.input_layernorm"))?,
                self_attn: GroupedQueryAttention {
                    q_proj,
                    k_proj,
                    v_proj,
                    o_proj: linear(&format!("{p}.self_attn.o_proj"), h, nq, cfg.o_bias)?,
                    heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    head_dim: hd,
                    q_norm: head_norm(&format!("{p}.self_attn.q_norm"))?,
                    k_norm: head_norm(&format!("{p}.self_attn.k_norm"))?,
                },
                post_attention_layernorm: norm(&format!("{p}.post_attention_layernorm"))?,
                mlp,
            });
        }
        // A checkpoint saved with tied embeddings has no lm_head (transformers drops it).
        let lm_head = if cfg.tie_word_embeddings && !w.contains("lm_head.weight") {
            Linear { weight: embed_tokens.weight.clone(), bias: None }
        } else {
            linear("lm_head", cfg.vocab_size, h, false)?
        };
        let rotary = RotaryEmbedding::new(hd, cfg.rope_theta, &cfg.rope_scaling)?
            .with_table(cfg.max_position_embeddings, device)?;
        Ok(Llama {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: norm("model.norm")?,
            lm_head,
            rotary,
            dtype,
        })
    }

    /// A freshly initialised model of `cfg` (weights N(0, 0.02), norms ones, as transformers'
    /// `_init_weights`), for training from scratch.
    pub fn new(cfg: &Config, dtype: DType) -> Result<Llama> {
        check(cfg)?;
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let normal = |shape: &[usize]| -> Result<Tensor> {
            Ok(Tensor::randn(shape, DType::F32)?.mul_scalar(0.02)?.to_dtype(dtype)?)
        };
        let lin = |out: usize, inp: usize, bias: bool| -> Result<Linear> {
            let b = if bias { Some(Var::parameter("bias", Tensor::zeros(&[out], dtype)?)?) } else { None };
            Ok(Linear { weight: Var::parameter("weight", normal(&[out, inp])?)?, bias: b })
        };
        let embed_tokens = Embedding { weight: Var::parameter("weight", normal(&[cfg.vocab_size, h])?)? };
        let (nq, nkv, i) =
            (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size);
        let layers = (0..cfg.num_hidden_layers)
            .map(|_| {
                Ok(LlamaLayer {
                    input_layernorm: RmsNorm::new(h, cfg.norm_eps, dtype)?,
                    self_attn: GroupedQueryAttention {
                        q_proj: lin(nq, h, cfg.qkv_bias)?,
                        k_proj: lin(nkv, h, cfg.qkv_bias)?,
                        v_proj: lin(nkv, h, cfg.qkv_bias)?,
                        o_proj: lin(h, nq, cfg.o_bias)?,
                        heads: cfg.num_attention_heads,
                        kv_heads: cfg.num_key_value_heads,
                        head_dim: hd,
                        q_norm: cfg.qk_norm.then(|| RmsNorm::new(hd, cfg.norm_eps, dtype)).transpose()?,
                        k_norm: cfg.qk_norm.then(|| RmsNorm::new(hd, cfg.norm_eps, dtype)).transpose()?,
                    },
                    post_attention_layernorm: RmsNorm::new(h, cfg.norm_eps, dtype)?,
                    mlp: if cfg.num_experts > 0 {
                        let mut moe = SparseMoe::new(h, i, cfg.num_experts, cfg.num_experts_per_tok, dtype)?;
                        moe.norm_topk_prob = cfg.norm_topk_prob;
                        LlamaMlp::Sparse(moe)
                    } else {
                        LlamaMlp::Dense(SwiGlu {
                            gate_proj: lin(i, h, cfg.mlp_bias)?,
                            up_proj: lin(i, h, cfg.mlp_bias)?,
                            down_proj: lin(h, i, cfg.mlp_bias)?,
                        })
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear { weight: embed_tokens.weight.clone(), bias: None }
        } else {
            lin(cfg.vocab_size, h, false)?
        };
        let rotary = RotaryEmbedding::new(hd, cfg.rope_theta, &cfg.rope_scaling)?;
        Ok(Llama {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: RmsNorm::new(h, cfg.norm_eps, dtype)?,
            lm_head,
            rotary,
            dtype,
        })
    }
}

impl CausalLm for Llama {
    fn config(&self) -> &Config {
        &self.config
    }

    fn prepare_inference(&self) -> Result<()> {
        let mut projections: Vec<&Linear> = Vec::new();
        for l in &self.layers {
            let a = &l.self_attn;
            projections.extend([&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj]);
            // Experts stay stacked `[E, out, in]`: their batched matmuls read them as they are.
            if let LlamaMlp::Dense(m) = &l.mlp {
                projections.extend([&m.gate_proj, &m.up_proj, &m.down_proj]);
            }
        }
        // A head tied to the embeddings keeps the embeddings' layout (their lookups read rows).
        if !self.lm_head.weight.ptr_eq(&self.embed_tokens.weight) {
            projections.push(&self.lm_head);
        }
        prepare_for_inference(self, &projections)
    }

    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>> {
        Ok(self
            .layers
            .iter()
            .map(|l| l.self_attn.new_cache(batch, capacity))
            .collect::<eager::Result<_>>()?)
    }

    fn step(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: Option<(&mut [StaticKvCache], &Tensor)>,
    ) -> Result<Tensor> {
        self.run(ids, positions, mask, cache, None)
    }

    fn step_at(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: Option<(&mut [StaticKvCache], &Tensor)>,
        rows: &Tensor,
    ) -> Result<Tensor> {
        self.run(ids, positions, mask, cache, Some(rows))
    }
}

impl Llama {
    /// The decoder, then the head on every position or on `rows` only.
    fn run(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        mut cache: Option<(&mut [StaticKvCache], &Tensor)>,
        rows: Option<&Tensor>,
    ) -> Result<Tensor> {
        let mut h = self.embed_tokens.lookup(ids)?;
        let (cos, sin) = self.rotary.cos_sin(positions, self.dtype)?;
        // The sliding layers' mask: the same, narrowed to the window (slots count from `start`).
        let sliding = match self.config.sliding_window {
            Some(window) if self.config.sliding_layers.contains(&true) => {
                let start = match &cache {
                    Some((_, start)) => (*start).clone(),
                    None => Tensor::from_slice_on(&[0i64], &[], mask.device())?,
                };
                Some(window_mask(mask, &start, window)?)
            }
            _ => None,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_cache = cache.as_mut().map(|(c, start)| (&mut c[i], *start));
            let layer_mask = match &sliding {
                Some(m) if self.config.sliding_layers.get(i) == Some(&true) => m,
                _ => mask,
            };
            let x = layer.input_layernorm.forward(&h)?;
            h = h.add(&layer.self_attn.forward_with(&x, &cos, &sin, Some(layer_mask), layer_cache)?)?;
            h = h.add(&layer.mlp.forward(&layer.post_attention_layernorm.forward(&h)?)?)?;
        }
        if let Some(rows) = rows {
            h = h.index_select(1, rows)?;
        }
        Ok(self.lm_head.forward(&self.norm.forward(&h)?)?)
    }
}

impl Module for Llama {
    /// Logits `[B, T, vocab]` of token ids `[B, T]` (every position attends causally).
    fn forward(&self, ids: &Tensor) -> eager::Result<Tensor> {
        self.logits(ids, None).map_err(|e| crate::to_eager("Llama", e))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = vec![("model.embed_tokens.weight".to_string(), self.embed_tokens.weight.clone())];
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let attn = l.self_attn.named_parameters();
            let sub = [
                ("input_layernorm", l.input_layernorm.named_parameters()),
                ("self_attn", attn),
                ("post_attention_layernorm", l.post_attention_layernorm.named_parameters()),
                (l.mlp.hf_name(), l.mlp.named_parameters()),
            ];
            for (name, params) in sub {
                v.extend(params.into_iter().map(|(n, var)| (format!("{p}.{name}.{n}"), var)));
            }
        }
        v.push(("model.norm.weight".to_string(), self.norm.weight.clone()));
        if !self.config.tie_word_embeddings {
            v.push(("lm_head.weight".to_string(), self.lm_head.weight.clone()));
        }
        v
    }
}
