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
    Embedding, GateActivation, GroupedQueryAttention, Linear, Module, RmsNorm, RotaryEmbedding, SparseMoe,
    StaticKvCache, SwiGlu,
};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::generate::{prepare_for_inference, window_mask, CausalLm};
use crate::layers::NormLayout;
use crate::params::{Init, Params};
use crate::weights::{Placement, Weights};
use crate::{ModelError, Result};

/// One decoder layer: pre-norm attention, then pre-norm MLP, each added to the residual; with
/// Gemma's sandwich norms, each output is normed too before it is added.
pub struct LlamaLayer {
    /// The norm before attention.
    pub input_layernorm: RmsNorm,
    /// Grouped-query attention with rotary positions.
    pub self_attn: GroupedQueryAttention,
    /// The norm before the MLP; with sandwich norms, the norm of the attention's output.
    pub post_attention_layernorm: RmsNorm,
    /// With sandwich norms (Gemma), the norm before the MLP.
    pub pre_feedforward_layernorm: Option<RmsNorm>,
    /// With sandwich norms (Gemma), the norm of the MLP's output.
    pub post_feedforward_layernorm: Option<RmsNorm>,
    /// The gated MLP, or Mixtral's experts.
    pub mlp: LlamaMlp,
}

/// A decoder layer's MLP: one SwiGLU (`mlp.gate_proj`, `up_proj`, `down_proj`) or a sparse
/// mixture of SwiGLU experts (Mixtral's `block_sparse_moe`, Qwen-MoE's `mlp`).
pub enum LlamaMlp {
    /// One SwiGLU MLP, Hugging Face's `mlp`.
    Dense(SwiGlu),
    /// Routed experts (the config's `moe_names.block`).
    Sparse(SparseMoe),
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
    /// The sliding-window layers' own rotary embeddings, where their base differs (Gemma 3).
    pub rotary_local: Option<RotaryEmbedding>,
    /// The dtype the weights were loaded in.
    pub dtype: DType,
}

/// The gated MLP's activation of the config's `hidden_act`.
fn gate_activation(cfg: &Config) -> Result<GateActivation> {
    match cfg.hidden_act.as_str() {
        "silu" | "swish" => Ok(GateActivation::Silu),
        "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" => Ok(GateActivation::GeluTanh),
        other => Err(ModelError::Unsupported(format!(
            "activation `{other}` in a {} model (silu, gelu_pytorch_tanh)",
            cfg.model_type
        ))),
    }
}

/// The rotary embeddings of the global layers and, where their base differs, of the sliding ones.
fn rotaries(cfg: &Config) -> Result<(RotaryEmbedding, Option<RotaryEmbedding>)> {
    let global = RotaryEmbedding::new(cfg.head_dim, cfg.rope_theta, &cfg.rope_scaling)?;
    let local = match cfg.rope_local_theta {
        Some(theta) => Some(RotaryEmbedding::new(cfg.head_dim, theta, &eager::nn::RopeScaling::Default)?),
        None => None,
    };
    Ok((global, local))
}

/// Checks what the architecture needs of a config before anything is built.
fn check(cfg: &Config) -> Result<()> {
    gate_activation(cfg)?;
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
        Llama::load_placed(cfg, w, dtype, &Placement::Device(device))
    }

    /// Loads the weights placed by `placement`. Over a mesh axis each weight is split as it is
    /// read, as Megatron and torch_xla's SPMD partition them: q, k, v, gate and up
    /// projections by their output rows (column-parallel), o and down by their input columns
    /// (row-parallel), the embeddings and the head by the vocabulary, Mixtral's experts by
    /// expert; norms whole on every device, and a dim the axis does not divide whole too.
    pub fn load_placed(cfg: &Config, w: &Weights, dtype: DType, placement: &Placement) -> Result<Llama> {
        let mut model = Llama::build(cfg, &Params::checkpoint(w, placement, dtype))?;
        let table = |r: RotaryEmbedding| -> Result<RotaryEmbedding> {
            let r = r.with_table(cfg.max_position_embeddings, placement.first_device())?;
            Ok(match placement {
                Placement::Mesh { mesh, .. } => r.replicate(mesh)?,
                Placement::Device(_) => r,
            })
        };
        model.rotary = table(model.rotary)?;
        model.rotary_local = model.rotary_local.map(table).transpose()?;
        Ok(model)
    }

    /// A freshly initialised model of `cfg` (weights N(0, 0.02), norms at their identity, as
    /// transformers' `_init_weights`), for training from scratch.
    pub fn new(cfg: &Config, dtype: DType) -> Result<Llama> {
        Llama::build(cfg, &Params::fresh(dtype))
    }

    /// The model's tree, walked once under Hugging Face's names: read or fresh as `params` is.
    /// Fresh weights are drawn in the order embeddings, then each layer's q, k, v, o, MLP, then
    /// the head.
    fn build(cfg: &Config, params: &Params) -> Result<Llama> {
        check(cfg)?;
        let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nq, nkv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
        let (col, row) = (0, 1);
        let act = gate_activation(cfg)?;
        let norm = |p: &Params, name: &str, dim: usize| p.rms_norm(name, dim, cfg.norm_eps, cfg.norm_offset);
        let model = params.pp("model");
        let embed_tokens = model.embedding("embed_tokens", cfg.vocab_size, h)?;
        // Phi-3's checkpoints fuse q, k and v into `qkv_proj` and gate and up into `gate_up_proj`
        // (no biases): row blocks of one weight, split here into eager's projections.
        let fused = cfg.model_type == "phi3" && params.checkpoint_source().is_some();
        let rows = |t: &Tensor, start: usize, n: usize| -> Result<Linear> {
            let weight = match params.checkpoint_source() {
                Some((_, placement)) => placement.resplit(&t.narrow(0, start, n)?, Some(col))?,
                None => t.narrow(0, start, n)?,
            };
            Ok(Linear { weight: Var::parameter("weight", weight)?, bias: None })
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let layer = model.pp(&format!("layers.{l}"));
            let attn = layer.pp("self_attn");
            let [q_proj, k_proj, v_proj] = if fused {
                let qkv = attn.tensor("qkv_proj.weight", &[nq + 2 * nkv, h], Init::Normal, None)?;
                [rows(&qkv, 0, nq)?, rows(&qkv, nq, nkv)?, rows(&qkv, nq + nkv, nkv)?]
            } else {
                [
                    attn.linear("q_proj", nq, h, cfg.qkv_bias, col)?,
                    attn.linear("k_proj", nkv, h, cfg.qkv_bias, col)?,
                    attn.linear("v_proj", nkv, h, cfg.qkv_bias, col)?,
                ]
            };
            let o_proj = attn.linear("o_proj", h, nq, cfg.o_bias, row)?;
            let mlp = if cfg.sparse_layers.get(l) == Some(&true) {
                LlamaMlp::Sparse(crate::moe::experts(cfg, &layer.pp(cfg.moe_names.block))?)
            } else {
                let m = layer.pp("mlp");
                let [gate_proj, up_proj] = if fused {
                    let gate_up = m.tensor("gate_up_proj.weight", &[2 * i, h], Init::Normal, None)?;
                    [rows(&gate_up, 0, i)?, rows(&gate_up, i, i)?]
                } else {
                    [
                        m.linear("gate_proj", i, h, cfg.mlp_bias, col)?,
                        m.linear("up_proj", i, h, cfg.mlp_bias, col)?,
                    ]
                };
                let down_proj = m.linear("down_proj", h, i, cfg.mlp_bias, row)?;
                LlamaMlp::Dense(SwiGlu { gate_proj, up_proj, down_proj, act })
            };
            let head_norm = |name: &str| cfg.qk_norm.then(|| norm(&attn, name, hd)).transpose();
            let sandwich = |name: &str| cfg.sandwich_norms.then(|| norm(&layer, name, h)).transpose();
            layers.push(LlamaLayer {
                input_layernorm: norm(&layer, "input_layernorm", h)?,
                self_attn: GroupedQueryAttention {
                    q_proj,
                    k_proj,
                    v_proj,
                    o_proj,
                    heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    head_dim: hd,
                    q_norm: head_norm("q_norm")?,
                    k_norm: head_norm("k_norm")?,
                    scale: cfg.attn_scale,
                    softcap: cfg.attn_softcap,
                },
                post_attention_layernorm: norm(&layer, "post_attention_layernorm", h)?,
                pre_feedforward_layernorm: sandwich("pre_feedforward_layernorm")?,
                post_feedforward_layernorm: sandwich("post_feedforward_layernorm")?,
                mlp,
            });
        }
        // Tied: fresh, or a checkpoint saved without `lm_head` (transformers drops it).
        let tied = cfg.tie_word_embeddings && !params.contains("lm_head.weight");
        let lm_head = if tied {
            Linear { weight: embed_tokens.weight.clone(), bias: None }
        } else {
            params.linear("lm_head", cfg.vocab_size, h, false, col)?
        };
        let (rotary, rotary_local) = rotaries(cfg)?;
        Ok(Llama {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: norm(&model, "norm", h)?,
            lm_head,
            rotary,
            rotary_local,
            dtype: params.dtype(),
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
        if self.config.scale_embeddings {
            // Gemma: √hidden, rounded to the weights' dtype first (as transformers does).
            h = h.mul_scalar((self.config.hidden_size as f64).sqrt())?;
        }
        let (cos, sin) = self.rotary.cos_sin(positions, self.dtype)?;
        let local = self.rotary_local.as_ref().map(|r| r.cos_sin(positions, self.dtype)).transpose()?;
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
            let slides = self.config.sliding_layers.get(i) == Some(&true);
            let layer_mask = match &sliding {
                Some(m) if slides => m,
                _ => mask,
            };
            let (cos, sin) = match &local {
                Some((c, s)) if slides => (c, s),
                _ => (&cos, &sin),
            };
            let layout = match (&layer.pre_feedforward_layernorm, &layer.post_feedforward_layernorm) {
                (Some(pre), Some(post)) => NormLayout::Sandwich {
                    attn: &layer.input_layernorm,
                    attn_out: &layer.post_attention_layernorm,
                    mlp: pre,
                    mlp_out: post,
                },
                _ => NormLayout::Pre { attn: &layer.input_layernorm, mlp: &layer.post_attention_layernorm },
            };
            h = layout.apply(
                &h,
                |x| Ok(layer.self_attn.forward_with(x, cos, sin, Some(layer_mask), layer_cache)?),
                |x| Ok(layer.mlp.forward(x)?),
            )?;
        }
        if let Some(rows) = rows {
            h = h.index_select(1, rows)?;
        }
        let logits = self.lm_head.forward(&self.norm.forward(&h)?)?;
        Ok(match self.config.final_softcap {
            // Gemma 2: `cap · tanh(logits / cap)`.
            Some(cap) => logits.div_scalar(cap)?.tanh()?.mul_scalar(cap)?,
            None => logits,
        })
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
                (
                    "pre_feedforward_layernorm",
                    l.pre_feedforward_layernorm.as_ref().map(Module::named_parameters).unwrap_or_default(),
                ),
                (
                    "post_feedforward_layernorm",
                    l.post_feedforward_layernorm.as_ref().map(Module::named_parameters).unwrap_or_default(),
                ),
                (
                    match l.mlp {
                        LlamaMlp::Dense(_) => "mlp",
                        LlamaMlp::Sparse(_) => self.config.moe_names.block,
                    },
                    l.mlp.named_parameters(),
                ),
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
