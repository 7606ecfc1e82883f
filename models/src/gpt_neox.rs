//! GPT-NeoX (`model_type` `gpt_neox`, `GPTNeoXForCausalLM`: Pythia, GPT-NeoX-20B): LayerNorm
//! with bias, one fused `query_key_value` projection laid out per head (`[heads, 3, head_dim]`
//! on its output dim: each head's q, k and v side by side, as transformers' `view(…, heads,
//! 3 · head_dim)` then `chunk(3)`), partial rotary (the first `partial_rotary_factor` ·
//! `head_dim` dims of each head rotated, the rest passed through), a GELU MLP
//! (`dense_h_to_4h`, `dense_4h_to_h`), and a parallel residual (`x + attn(ln1(x)) +
//! mlp(ln2(x))`) or, with `use_parallel_residual` false, a sequential one. The head is
//! `embed_out` (transformers 5 calls it `lm_head` in memory and saves it as `embed_out`).
//! Config names read as transformers 4 wrote them (`rotary_pct`, `rotary_emb_base`) and as 5
//! does (`rope_parameters` with `partial_rotary_factor`, `rope_theta`); parameters keep
//! transformers' names (`gpt_neox.layers.0.attention.query_key_value.weight`, …), walked
//! once through [`Params`] for loading and fresh weights; the attention, MLP and residual are
//! `layers`' shared pieces.

use eager::nn::{AttentionOptions, Embedding, LayerNorm, Linear, Module, RotaryEmbedding, StaticKvCache};
use eager::{DType, Device, Tensor, Var};
use serde_json::Value;

use crate::config::Config;
use crate::generate::{prepare_for_inference, CausalLm};
use crate::layers::{prefixed, GeluKind, GeluMlp, NormLayout, Qkv, SelfAttention};
use crate::params::Params;
use crate::weights::{Placement, Weights};
use crate::{ModelError, Result};

/// GPT-NeoX's fields and defaults where they differ from what [`Config`] reads for every
/// family: `layer_norm_eps` 1e-5, `hidden_act` `gelu`, biases on the attention unless
/// `attention_bias` is false, and transformers 4's `rotary_emb_base` for the rope base.
pub(crate) fn read_config(cfg: &mut Config) {
    let has = |k: &str| cfg.raw.get(k).is_some_and(|v| !v.is_null());
    if !has("layer_norm_eps") {
        cfg.norm_eps = 1e-5;
    }
    if !has("hidden_act") {
        cfg.hidden_act = "gelu".into();
    }
    let bias = cfg.raw.get("attention_bias").and_then(Value::as_bool).unwrap_or(true);
    (cfg.qkv_bias, cfg.o_bias) = (bias, bias);
    let rope_theta_given = cfg.raw.get("rope_parameters").and_then(|r| r.get("rope_theta")).is_some()
        || cfg.raw.get("rope_theta").is_some();
    if let (false, Some(base)) = (rope_theta_given, cfg.raw.get("rotary_emb_base").and_then(Value::as_f64)) {
        cfg.rope_theta = base;
    }
}

/// The share of each head's dims that rotary rotates: `rope_parameters.partial_rotary_factor`
/// (transformers 5), else `rotary_pct` (4), else transformers' default 0.25.
fn partial_rotary_factor(cfg: &Config) -> f64 {
    cfg.raw
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .or_else(|| cfg.raw.get("partial_rotary_factor").and_then(Value::as_f64))
        .or_else(|| cfg.raw.get("rotary_pct").and_then(Value::as_f64))
        .unwrap_or(0.25)
}

/// One GPT-NeoX layer: attention and MLP, each after its own LayerNorm, added to the residual
/// in parallel or one after the other.
pub struct GptNeoXLayer {
    /// The norm before attention.
    pub input_layernorm: LayerNorm,
    /// The norm before the MLP (of the layer's input when the residual is parallel).
    pub post_attention_layernorm: LayerNorm,
    /// The attention: q, k and v in one `attention.query_key_value`, `[heads · 3 · head_dim,
    /// hidden]`, per head q, k, v; the output `attention.dense`.
    pub attention: SelfAttention,
    /// The MLP: `mlp.dense_h_to_4h` (`hidden -> intermediate`), then `mlp.dense_4h_to_h`.
    pub mlp: GeluMlp,
}

/// GPT-NeoX (`GPTNeoXForCausalLM`): token embeddings, the layers, a final LayerNorm, the head.
pub struct GptNeoX {
    /// The checkpoint's configuration.
    pub config: Config,
    /// Token embeddings (`gpt_neox.embed_in`).
    pub embed_in: Embedding,
    /// The layers, in order.
    pub layers: Vec<GptNeoXLayer>,
    /// The final norm (`gpt_neox.final_layer_norm`).
    pub final_layer_norm: LayerNorm,
    /// The output head (`embed_out`); with tied embeddings it shares `embed_in`'s weight.
    pub embed_out: Linear,
    /// Rotary position embeddings over the first `rotary_ndims` dims of each head.
    pub rotary: RotaryEmbedding,
    /// How many leading dims of each head rotary rotates (`partial_rotary_factor · head_dim`).
    pub rotary_ndims: usize,
    /// `x + attn(ln1(x)) + mlp(ln2(x))` when true, else `y = x + attn(ln1(x)); y + mlp(ln2(y))`.
    pub use_parallel_residual: bool,
    /// The dtype the weights were loaded in.
    pub dtype: DType,
}

impl GptNeoX {
    /// Builds the model from `w` (tensors cast to `dtype`, uploaded to `device`), checking each against `cfg`.
    pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<GptNeoX> {
        GptNeoX::load_placed(cfg, w, dtype, &Placement::Device(device))
    }

    /// [`GptNeoX::load`] with each weight placed as `placement` says: over a mesh, the fused
    /// `query_key_value` and `dense_h_to_4h` split by output rows (its per-head layout gives each
    /// device whole heads' q, k and v), `dense` and `dense_4h_to_h` by input columns, the
    /// embeddings and the head by vocabulary, norms whole.
    pub fn load_placed(cfg: &Config, w: &Weights, dtype: DType, placement: &Placement) -> Result<GptNeoX> {
        let mut model = GptNeoX::build(cfg, &Params::checkpoint(w, placement, dtype))?;
        let rotary = model.rotary.with_table(cfg.max_position_embeddings, placement.first_device())?;
        model.rotary = match placement {
            Placement::Mesh { mesh, .. } => rotary.replicate(mesh)?,
            Placement::Device(_) => rotary,
        };
        Ok(model)
    }

    /// A freshly initialised model of `cfg` (weights N(0, 0.02), biases zeros, norms at their
    /// identity), for training from scratch.
    pub fn new(cfg: &Config, dtype: DType) -> Result<GptNeoX> {
        GptNeoX::build(cfg, &Params::fresh(dtype))
    }

    /// The model's tree, walked once under Hugging Face's names: read or fresh as `params` is.
    fn build(cfg: &Config, params: &Params) -> Result<GptNeoX> {
        let act = GeluKind::of(cfg, "GPT-NeoX")?;
        let (h, i, heads) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads);
        if !h.is_multiple_of(heads) {
            return Err(ModelError::Unsupported(format!("hidden_size {h} not a multiple of {heads} heads")));
        }
        let hd = h / heads;
        // transformers' int(head_dim * factor); rotary turns pairs of dims, so an even count.
        let rotary_ndims = (hd as f64 * partial_rotary_factor(cfg)) as usize;
        if rotary_ndims == 0 || rotary_ndims > hd || !rotary_ndims.is_multiple_of(2) {
            return Err(ModelError::Unsupported(format!(
                "GPT-NeoX rotary over {rotary_ndims} of {hd} dims per head (needs an even count, 2 to {hd})"
            )));
        }
        let (col, row) = (0, 1);
        let model = params.pp("gpt_neox");
        let ln = |p: &Params, name: &str| p.layer_norm(name, h, cfg.norm_eps);
        let embed_in = model.embedding("embed_in", cfg.vocab_size, h)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let layer = model.pp(&format!("layers.{l}"));
                let (attn, mlp) = (layer.pp("attention"), layer.pp("mlp"));
                let qkv = attn.linear("query_key_value", 3 * h, h, cfg.qkv_bias, col)?;
                Ok(GptNeoXLayer {
                    input_layernorm: ln(&layer, "input_layernorm")?,
                    post_attention_layernorm: ln(&layer, "post_attention_layernorm")?,
                    attention: SelfAttention {
                        qkv: Qkv::FusedPerHead(qkv),
                        out: attn.linear("dense", h, h, cfg.o_bias, row)?,
                        heads,
                        head_dim: hd,
                    },
                    mlp: GeluMlp {
                        up: mlp.linear("dense_h_to_4h", i, h, true, col)?,
                        down: mlp.linear("dense_4h_to_h", h, i, true, row)?,
                        act,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_layer_norm = ln(&model, "final_layer_norm")?;
        // Saved as `embed_out`; transformers 5's in-memory name `lm_head` is read too; a tied
        // checkpoint may have neither.
        let embed_out = if params.contains("lm_head.weight") && !params.contains("embed_out.weight") {
            params.linear("lm_head", cfg.vocab_size, h, false, col)?
        } else if cfg.tie_word_embeddings && !params.contains("embed_out.weight") {
            Linear { weight: embed_in.weight.clone(), bias: None }
        } else {
            params.linear("embed_out", cfg.vocab_size, h, false, col)?
        };
        Ok(GptNeoX {
            config: cfg.clone(),
            embed_in,
            layers,
            final_layer_norm,
            embed_out,
            rotary: RotaryEmbedding::new(rotary_ndims, cfg.rope_theta, &cfg.rope_scaling)?,
            rotary_ndims,
            use_parallel_residual: cfg
                .raw
                .get("use_parallel_residual")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            dtype: params.dtype(),
        })
    }
}

impl CausalLm for GptNeoX {
    fn config(&self) -> &Config {
        &self.config
    }

    fn prepare_inference(&self) -> Result<()> {
        let mut projections: Vec<&Linear> = Vec::new();
        for l in &self.layers {
            projections.extend(l.attention.projections());
            projections.extend([&l.mlp.up, &l.mlp.down]);
        }
        // A head tied to the embeddings keeps the embeddings' layout (their lookups read rows).
        if !self.embed_out.weight.ptr_eq(&self.embed_in.weight) {
            projections.push(&self.embed_out);
        }
        prepare_for_inference(self, &projections)
    }

    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>> {
        let dev = self.embed_in.weight.get().device();
        self.layers.iter().map(|l| l.attention.new_cache(batch, capacity, self.dtype, dev)).collect()
    }

    fn step(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        mut cache: Option<(&mut [StaticKvCache], &Tensor)>,
    ) -> Result<Tensor> {
        let mut h = self.embed_in.lookup(ids)?;
        let (cos, sin) = self.rotary.cos_sin(positions, self.dtype)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_cache = cache.as_mut().map(|(c, start)| (&mut c[i], *start));
            let (attn, mlp) = (&layer.input_layernorm, &layer.post_attention_layernorm);
            let layout = if self.use_parallel_residual {
                NormLayout::Parallel { attn, mlp }
            } else {
                NormLayout::Pre { attn, mlp }
            };
            let opts = AttentionOptions::causal_under(Some(mask));
            h = layout.apply(
                &h,
                |x| layer.attention.forward_with(x, Some((&cos, &sin)), opts, layer_cache),
                |x| layer.mlp.forward(x),
            )?;
        }
        Ok(self.embed_out.forward(&self.final_layer_norm.forward(&h)?)?)
    }
}

impl Module for GptNeoX {
    /// Logits `[B, T, vocab]` of token ids `[B, T]` (every position attends causally).
    fn forward(&self, ids: &Tensor) -> eager::Result<Tensor> {
        self.logits(ids, None).map_err(|e| crate::to_eager("GptNeoX", e))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = vec![("gpt_neox.embed_in.weight".to_string(), self.embed_in.weight.clone())];
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("gpt_neox.layers.{i}");
            v.extend(prefixed(&format!("{p}.input_layernorm"), l.input_layernorm.named_parameters()));
            v.extend(prefixed(
                &format!("{p}.post_attention_layernorm"),
                l.post_attention_layernorm.named_parameters(),
            ));
            v.extend(prefixed(
                &p,
                l.attention.named_parameters(&["attention.query_key_value", "attention.dense"]),
            ));
            v.extend(prefixed(&p, l.mlp.named_parameters(["mlp.dense_h_to_4h", "mlp.dense_4h_to_h"])));
        }
        v.extend(prefixed("gpt_neox.final_layer_norm", self.final_layer_norm.named_parameters()));
        if !self.embed_out.weight.ptr_eq(&self.embed_in.weight) {
            v.push(("embed_out.weight".to_string(), self.embed_out.weight.clone()));
        }
        v
    }
}
