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
//! transformers' names (`gpt_neox.layers.0.attention.query_key_value.weight`, …).

use eager::nn::{
    apply_rotary, attend_heads, gelu, gelu_exact, merge_heads, split_heads, AttentionOptions, Embedding,
    LayerNorm, Linear, Module, RotaryEmbedding, StaticKvCache,
};
use eager::{DType, Device, Tensor, Var};
use serde_json::Value;

use crate::config::Config;
use crate::generate::{prepare_for_inference, CausalLm};
use crate::weights::Weights;
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
    /// q, k and v in one projection, `[heads · 3 · head_dim, hidden]`, per head q, k, v.
    pub query_key_value: Linear,
    /// The attention's output projection (`attention.dense`).
    pub dense: Linear,
    /// The MLP's first projection, `hidden -> intermediate`.
    pub dense_h_to_4h: Linear,
    /// The MLP's second projection, `intermediate -> hidden`.
    pub dense_4h_to_h: Linear,
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
    /// Exact GELU (`gelu`) or its tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`).
    pub exact_gelu: bool,
    /// The dtype the weights were loaded in.
    pub dtype: DType,
}

impl GptNeoX {
    /// Builds the model from `w` (tensors cast to `dtype`, uploaded to `device`), checking each against `cfg`.
    pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<GptNeoX> {
        let exact_gelu = match cfg.hidden_act.as_str() {
            "gelu" => true,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => false,
            other => {
                return Err(ModelError::Unsupported(format!(
                    "GPT-NeoX activation `{other}` (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)"
                )))
            }
        };
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
        let param = |name: &str, shape: &[usize]| -> Result<Var> {
            Ok(Var::parameter(name.rsplit('.').next().unwrap_or(name), w.get(name, shape, dtype, device)?)?)
        };
        let linear = |name: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
            let weight = param(&format!("{name}.weight"), &[out, inp])?;
            let bias = if bias { Some(param(&format!("{name}.bias"), &[out])?) } else { None };
            Ok(Linear { weight, bias })
        };
        let ln = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                weight: param(&format!("{name}.weight"), &[h])?,
                bias: param(&format!("{name}.bias"), &[h])?,
                eps: cfg.norm_eps,
            })
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = format!("gpt_neox.layers.{l}");
                Ok(GptNeoXLayer {
                    input_layernorm: ln(&format!("{p}.input_layernorm"))?,
                    post_attention_layernorm: ln(&format!("{p}.post_attention_layernorm"))?,
                    query_key_value: linear(
                        &format!("{p}.attention.query_key_value"),
                        3 * h,
                        h,
                        cfg.qkv_bias,
                    )?,
                    dense: linear(&format!("{p}.attention.dense"), h, h, cfg.o_bias)?,
                    dense_h_to_4h: linear(&format!("{p}.mlp.dense_h_to_4h"), i, h, true)?,
                    dense_4h_to_h: linear(&format!("{p}.mlp.dense_4h_to_h"), h, i, true)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed_in = Embedding { weight: param("gpt_neox.embed_in.weight", &[cfg.vocab_size, h])? };
        // Saved as `embed_out`; transformers 5's in-memory name `lm_head` is read too; a tied
        // checkpoint may have neither.
        let embed_out = if w.contains("lm_head.weight") && !w.contains("embed_out.weight") {
            linear("lm_head", cfg.vocab_size, h, false)?
        } else if cfg.tie_word_embeddings && !w.contains("embed_out.weight") {
            Linear { weight: embed_in.weight.clone(), bias: None }
        } else {
            linear("embed_out", cfg.vocab_size, h, false)?
        };
        let rotary = RotaryEmbedding::new(rotary_ndims, cfg.rope_theta, &cfg.rope_scaling)?
            .with_table(cfg.max_position_embeddings, device)?;
        Ok(GptNeoX {
            config: cfg.clone(),
            embed_in,
            layers,
            final_layer_norm: ln("gpt_neox.final_layer_norm")?,
            embed_out,
            rotary,
            rotary_ndims,
            use_parallel_residual: cfg
                .raw
                .get("use_parallel_residual")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            exact_gelu,
            dtype,
        })
    }

    fn head_dim(&self) -> usize {
        self.config.hidden_size / self.config.num_attention_heads
    }

    /// Rotary on the first `rotary_ndims` dims of each head of `x` `[B, heads, T, head_dim]`,
    /// the rest passed through.
    fn rotate(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (r, hd) = (self.rotary_ndims, self.head_dim());
        if r == hd {
            return Ok(apply_rotary(x, cos, sin)?);
        }
        let rotated = apply_rotary(&x.narrow(-1, 0, r)?, cos, sin)?;
        Ok(Tensor::cat(&[&rotated, &x.narrow(-1, r, hd - r)?], -1)?)
    }

    /// One layer's attention of `x` (normed) `[B, T, hidden]`.
    fn attend(
        &self,
        layer: &GptNeoXLayer,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        mask: &Tensor,
        cache: Option<(&mut StaticKvCache, &Tensor)>,
    ) -> Result<Tensor> {
        let hd = self.head_dim();
        // [B, heads, T, 3 · head_dim]: each head's q, k and v side by side.
        let qkv = split_heads(&layer.query_key_value.forward(x)?, self.config.num_attention_heads)?;
        let q = self.rotate(&qkv.narrow(-1, 0, hd)?, rope.0, rope.1)?;
        let k = self.rotate(&qkv.narrow(-1, hd, hd)?, rope.0, rope.1)?;
        let v = qkv.narrow(-1, 2 * hd, hd)?;
        Ok(layer.dense.forward(&merge_heads(&attend_heads(
            &q,
            &k,
            &v,
            AttentionOptions::causal_under(Some(mask)),
            cache,
        )?)?)?)
    }

    fn mlp(&self, layer: &GptNeoXLayer, x: &Tensor) -> Result<Tensor> {
        let up = layer.dense_h_to_4h.forward(x)?;
        let act = if self.exact_gelu { gelu_exact(&up)? } else { gelu(&up)? };
        Ok(layer.dense_4h_to_h.forward(&act)?)
    }
}

impl CausalLm for GptNeoX {
    fn config(&self) -> &Config {
        &self.config
    }

    fn prepare_inference(&self) -> Result<()> {
        let mut projections: Vec<&Linear> = Vec::new();
        for l in &self.layers {
            projections.extend([&l.query_key_value, &l.dense, &l.dense_h_to_4h, &l.dense_4h_to_h]);
        }
        // A head tied to the embeddings keeps the embeddings' layout (their lookups read rows).
        if !self.embed_out.weight.ptr_eq(&self.embed_in.weight) {
            projections.push(&self.embed_out);
        }
        prepare_for_inference(self, &projections)
    }

    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>> {
        let dev = self.embed_in.weight.get().device();
        let heads = self.config.num_attention_heads;
        Ok((0..self.layers.len())
            .map(|_| StaticKvCache::new(batch, heads, capacity, self.head_dim(), self.dtype, dev))
            .collect::<eager::Result<_>>()?)
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
            let a =
                self.attend(layer, &layer.input_layernorm.forward(&h)?, (&cos, &sin), mask, layer_cache)?;
            h = if self.use_parallel_residual {
                let m = self.mlp(layer, &layer.post_attention_layernorm.forward(&h)?)?;
                h.add(&a)?.add(&m)?
            } else {
                let y = h.add(&a)?;
                y.add(&self.mlp(layer, &layer.post_attention_layernorm.forward(&y)?)?)?
            };
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
            let sub = [
                ("input_layernorm", l.input_layernorm.named_parameters()),
                ("post_attention_layernorm", l.post_attention_layernorm.named_parameters()),
                ("attention.query_key_value", l.query_key_value.named_parameters()),
                ("attention.dense", l.dense.named_parameters()),
                ("mlp.dense_h_to_4h", l.dense_h_to_4h.named_parameters()),
                ("mlp.dense_4h_to_h", l.dense_4h_to_h.named_parameters()),
            ];
            for (name, params) in sub {
                v.extend(params.into_iter().map(|(n, var)| (format!("{p}.{name}.{n}"), var)));
            }
        }
        v.extend(
            self.final_layer_norm
                .named_parameters()
                .into_iter()
                .map(|(n, var)| (format!("gpt_neox.final_layer_norm.{n}"), var)),
        );
        if !self.embed_out.weight.ptr_eq(&self.embed_in.weight) {
            v.push(("embed_out.weight".to_string(), self.embed_out.weight.clone()));
        }
        v
    }
}
