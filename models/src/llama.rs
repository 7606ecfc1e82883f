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
        check(cfg)?;
        let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nq, nkv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
        let param = |name: &str, shape: &[usize], split: Option<usize>| -> Result<Var> {
            let t = w.get_placed(name, shape, dtype, placement, split)?;
            Ok(Var::parameter(name.rsplit('.').next().unwrap_or(name), t)?)
        };
        // `split`: 0 splits the output rows (and the bias), 1 the input columns.
        let linear = |name: &str, out: usize, inp: usize, bias: bool, split: usize| -> Result<Linear> {
            let weight = param(&format!("{name}.weight"), &[out, inp], Some(split))?;
            let bias_split = (split == 0).then_some(0);
            let bias = if bias { Some(param(&format!("{name}.bias"), &[out], bias_split)?) } else { None };
            Ok(Linear { weight, bias })
        };
        let (col, row) = (0, 1);
        let norm_of = |name: &str, dim: usize| -> Result<RmsNorm> {
            let weight = param(&format!("{name}.weight"), &[dim], None)?;
            Ok(RmsNorm { weight, eps: cfg.norm_eps, offset: cfg.norm_offset })
        };
        let act = gate_activation(cfg)?;
        let norm = |name: &str| norm_of(name, h);
        let head_norm =
            |name: &str| -> Result<Option<RmsNorm>> { cfg.qk_norm.then(|| norm_of(name, hd)).transpose() };
        let sandwich =
            |name: &str| -> Result<Option<RmsNorm>> { cfg.sandwich_norms.then(|| norm(name)).transpose() };
        // Phi-3 fuses q, k and v into `qkv_proj` and gate and up into `gate_up_proj` (no biases):
        // row blocks of one weight, split here into eager's projections.
        let fused = cfg.model_type == "phi3";
        let rows = |t: &Tensor, start: usize, n: usize| -> Result<Linear> {
            let weight = placement.resplit(&t.narrow(0, start, n)?, Some(col))?;
            Ok(Linear { weight: Var::parameter("weight", weight)?, bias: None })
        };
        let fused_weight = |name: &str, shape: &[usize]| w.get_placed(name, shape, dtype, placement, None);
        let embed_tokens =
            Embedding { weight: param("model.embed_tokens.weight", &[cfg.vocab_size, h], Some(0))? };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let [q_proj, k_proj, v_proj] = if fused {
                let qkv = fused_weight(&format!("{p}.self_attn.qkv_proj.weight"), &[nq + 2 * nkv, h])?;
                [rows(&qkv, 0, nq)?, rows(&qkv, nq, nkv)?, rows(&qkv, nq + nkv, nkv)?]
            } else {
                [
                    linear(&format!("{p}.self_attn.q_proj"), nq, h, cfg.qkv_bias, col)?,
                    linear(&format!("{p}.self_attn.k_proj"), nkv, h, cfg.qkv_bias, col)?,
                    linear(&format!("{p}.self_attn.v_proj"), nkv, h, cfg.qkv_bias, col)?,
                ]
            };
            let mlp = if cfg.sparse_layers.get(l) == Some(&true) {
                LlamaMlp::Sparse(crate::moe::load_experts(cfg, w, &p, dtype, placement)?)
            } else {
                let [gate_proj, up_proj] = if fused {
                    let gate_up = fused_weight(&format!("{p}.mlp.gate_up_proj.weight"), &[2 * i, h])?;
                    [rows(&gate_up, 0, i)?, rows(&gate_up, i, i)?]
                } else {
                    [
                        linear(&format!("{p}.mlp.gate_proj"), i, h, cfg.mlp_bias, col)?,
                        linear(&format!("{p}.mlp.up_proj"), i, h, cfg.mlp_bias, col)?,
                    ]
                };
                let down_proj = linear(&format!("{p}.mlp.down_proj"), h, i, cfg.mlp_bias, row)?;
                LlamaMlp::Dense(SwiGlu { gate_proj, up_proj, down_proj, act })
            };
            layers.push(LlamaLayer {
                input_layernorm: norm(&format!("{p}.input_layernorm"))?,
                self_attn: GroupedQueryAttention {
                    q_proj,
                    k_proj,
                    v_proj,
                    o_proj: linear(&format!("{p}.self_attn.o_proj"), h, nq, cfg.o_bias, row)?,
                    heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    head_dim: hd,
                    q_norm: head_norm(&format!("{p}.self_attn.q_norm"))?,
                    k_norm: head_norm(&format!("{p}.self_attn.k_norm"))?,
                    scale: cfg.attn_scale,
                    softcap: cfg.attn_softcap,
                },
                post_attention_layernorm: norm(&format!("{p}.post_attention_layernorm"))?,
                pre_feedforward_layernorm: sandwich(&format!("{p}.pre_feedforward_layernorm"))?,
                post_feedforward_layernorm: sandwich(&format!("{p}.post_feedforward_layernorm"))?,
                mlp,
            });
        }
        // A checkpoint saved with tied embeddings has no lm_head (transformers drops it).
        let lm_head = if cfg.tie_word_embeddings && !w.contains("lm_head.weight") {
            Linear { weight: embed_tokens.weight.clone(), bias: None }
        } else {
            linear("lm_head", cfg.vocab_size, h, false, col)?
        };
        let (rotary, rotary_local) = rotaries(cfg)?;
        let table = |r: RotaryEmbedding| -> Result<RotaryEmbedding> {
            let r = r.with_table(cfg.max_position_embeddings, placement.first_device())?;
            Ok(match placement {
                Placement::Mesh { mesh, .. } => r.replicate(mesh)?,
                Placement::Device(_) => r,
            })
        };
        let rotary = table(rotary)?;
        let rotary_local = rotary_local.map(table).transpose()?;
        Ok(Llama {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: norm("model.norm")?,
            lm_head,
            rotary,
            rotary_local,
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
        let act = gate_activation(cfg)?;
        // Gemma's norms scale by `1 + weight` and start at zeros; the others' by `weight`, ones.
        let fresh_norm = |dim: usize| -> Result<RmsNorm> {
            let mut n = RmsNorm::new(dim, cfg.norm_eps, dtype)?;
            if cfg.norm_offset != 0.0 {
                n.weight.set(Tensor::zeros(&[dim], dtype)?)?;
                n.offset = cfg.norm_offset;
            }
            Ok(n)
        };
        let (nq, nkv, i) =
            (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size);
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                Ok(LlamaLayer {
                    input_layernorm: fresh_norm(h)?,
                    self_attn: GroupedQueryAttention {
                        q_proj: lin(nq, h, cfg.qkv_bias)?,
                        k_proj: lin(nkv, h, cfg.qkv_bias)?,
                        v_proj: lin(nkv, h, cfg.qkv_bias)?,
                        o_proj: lin(h, nq, cfg.o_bias)?,
                        heads: cfg.num_attention_heads,
                        kv_heads: cfg.num_key_value_heads,
                        head_dim: hd,
                        q_norm: cfg.qk_norm.then(|| fresh_norm(hd)).transpose()?,
                        k_norm: cfg.qk_norm.then(|| fresh_norm(hd)).transpose()?,
                        scale: cfg.attn_scale,
                        softcap: cfg.attn_softcap,
                    },
                    post_attention_layernorm: fresh_norm(h)?,
                    pre_feedforward_layernorm: cfg.sandwich_norms.then(|| fresh_norm(h)).transpose()?,
                    post_feedforward_layernorm: cfg.sandwich_norms.then(|| fresh_norm(h)).transpose()?,
                    mlp: if cfg.sparse_layers.get(l) == Some(&true) {
                        LlamaMlp::Sparse(crate::moe::new_experts(cfg, dtype)?)
                    } else {
                        LlamaMlp::Dense(SwiGlu {
                            gate_proj: lin(i, h, cfg.mlp_bias)?,
                            up_proj: lin(i, h, cfg.mlp_bias)?,
                            down_proj: lin(h, i, cfg.mlp_bias)?,
                            act,
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
        let (rotary, rotary_local) = rotaries(cfg)?;
        Ok(Llama {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: fresh_norm(h)?,
            lm_head,
            rotary,
            rotary_local,
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
            let x = layer.input_layernorm.forward(&h)?;
            let attn = layer.self_attn.forward_with(&x, cos, sin, Some(layer_mask), layer_cache)?;
            match (&layer.pre_feedforward_layernorm, &layer.post_feedforward_layernorm) {
                (Some(pre), Some(post)) => {
                    h = h.add(&layer.post_attention_layernorm.forward(&attn)?)?;
                    h = h.add(&post.forward(&layer.mlp.forward(&pre.forward(&h)?)?)?)?;
                }
                _ => {
                    h = h.add(&attn)?;
                    h = h.add(&layer.mlp.forward(&layer.post_attention_layernorm.forward(&h)?)?)?;
                }
            }
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
