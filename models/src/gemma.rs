//! Gemma 2 and Gemma 3's text model (`model_type` `gemma2`, `gemma3_text`;
//! `Gemma2ForCausalLM`, `Gemma3ForCausalLM`): Llama's decoder with the token embeddings scaled
//! by √hidden, RMSNorms that scale by `1 + weight`, norms before and after both attention and
//! the MLP (`input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`,
//! `post_feedforward_layernorm`), a GeGLU MLP (`gelu_pytorch_tanh`), scores scaled by
//! `query_pre_attn_scalar^-½`, sliding-window layers alternating with global ones
//! (`layer_types`; else Gemma 2's every other layer, Gemma 3's five in six), a tied head. Gemma 2
//! soft-caps the attention scores and the logits (`attn_logit_softcapping`,
//! `final_logit_softcapping`); Gemma 3 has per-head q/k norms instead and its own rope base on
//! the sliding layers (`rope_local_base_freq`, or transformers 5's
//! `rope_parameters.sliding_attention`). They run as a [`crate::llama::Llama`]; this file reads
//! their configs, with transformers' defaults.

use serde_json::Value;

use crate::config::{parse_rope_scaling, Config};

/// Both Gemmas' `head_dim` and `query_pre_attn_scalar` when the config does not say.
pub const DEFAULT_HEAD_DIM: usize = 256;
/// Gemma 3's `sliding_window_pattern` when the config does not say: every sixth layer global.
pub const DEFAULT_SLIDING_PATTERN: usize = 6;

/// Gemma's fields on top of what [`Config`] reads for every family.
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    let raw = cfg.raw.clone();
    let get = |k: &str| raw.get(k).filter(|v| !v.is_null());
    let gemma3 = cfg.model_type == "gemma3_text";
    if get("head_dim").is_none() {
        cfg.head_dim = DEFAULT_HEAD_DIM;
    }
    cfg.hidden_act =
        get("hidden_activation").and_then(Value::as_str).unwrap_or("gelu_pytorch_tanh").to_string();
    cfg.norm_offset = 1.0;
    cfg.sandwich_norms = true;
    cfg.scale_embeddings = true;
    cfg.tie_word_embeddings = get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(true);
    let scalar = get("query_pre_attn_scalar").and_then(Value::as_f64).unwrap_or(DEFAULT_HEAD_DIM as f64);
    if scalar <= 0.0 {
        return Err(format!("`query_pre_attn_scalar` must be positive, got {scalar}"));
    }
    cfg.attn_scale = Some(scalar.powf(-0.5));
    let cap = |k: &str, default: Option<f64>| match raw.get(k) {
        None => default,
        Some(v) => v.as_f64(),
    };
    cfg.attn_softcap = cap("attn_logit_softcapping", (!gemma3).then_some(50.0));
    cfg.final_softcap = cap("final_logit_softcapping", (!gemma3).then_some(30.0));
    cfg.qk_norm = gemma3;
    if gemma3 {
        // transformers 5: one rope setting per layer type; 4: a global base and a local one.
        let by_type = get("rope_parameters").filter(|r| r.get("full_attention").is_some());
        match by_type {
            Some(r) => {
                let full = &r["full_attention"];
                cfg.rope_theta = full.get("rope_theta").and_then(Value::as_f64).unwrap_or(1_000_000.0);
                cfg.rope_scaling = parse_rope_scaling(Some(full))?;
                cfg.rope_local_theta = Some(
                    r.get("sliding_attention")
                        .and_then(|s| s.get("rope_theta"))
                        .and_then(Value::as_f64)
                        .unwrap_or(10_000.0),
                );
            }
            None => {
                if get("rope_theta").is_none() && get("rope_parameters").is_none() {
                    cfg.rope_theta = 1_000_000.0;
                }
                cfg.rope_local_theta =
                    Some(get("rope_local_base_freq").and_then(Value::as_f64).unwrap_or(10_000.0));
            }
        }
    }
    Ok(())
}

/// The sliding layers when the config has no `layer_types`: Gemma 2's even layers, Gemma 3's
/// all but every `sliding_window_pattern`-th.
pub(crate) fn default_sliding_layers(model_type: &str, raw: &Value, n: usize) -> Vec<bool> {
    if model_type == "gemma2" {
        return (0..n).map(|l| l % 2 == 0).collect();
    }
    let pattern = raw
        .get("sliding_window_pattern")
        .or_else(|| raw.get("_sliding_window_pattern"))
        .and_then(Value::as_u64)
        .map_or(DEFAULT_SLIDING_PATTERN, |p| p.max(1) as usize);
    (0..n).map(|l| (l + 1) % pattern != 0).collect()
}
