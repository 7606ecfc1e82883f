//! Phi-3 and Phi-3.5-mini (`model_type` `phi3`, `Phi3ForCausalLM`): Llama's decoder with the
//! attention's projections fused into `self_attn.qkv_proj` (the query rows, then the keys',
//! then the values') and the MLP's into `mlp.gate_up_proj` (gate rows, then up), no biases.
//! It runs as a [`crate::llama::Llama`]: the fused weights are split into eager's separate
//! projections on load ([`Llama::load`](crate::llama::Llama::load)) and fused back under
//! Hugging Face's names on save ([`fuse_for_save`]). This file reads Phi-3's config (its
//! defaults: `rms_norm_eps` 1e-5, `sliding_window` none unless set, on every layer when set)
//! and LongRoPE (`longrope`, once `su`: the long-context checkpoints' short and long factors),
//! and refuses what it does not implement: other rope scalings and rotary on part of each head
//! (`partial_rotary_factor` below 1).

use std::collections::HashMap;

use eager::nn::RopeScaling;
use eager::Tensor;
use serde_json::Value;

use crate::config::Config;
use crate::{ModelError, Result};

/// Phi3Config's `rms_norm_eps` when the config does not say.
pub const DEFAULT_RMS_NORM_EPS: f64 = 1e-5;

/// Phi-3's fields on top of what [`Config`] reads for every family: its norm epsilon's default,
/// and no biases anywhere (its projections have none, whatever `attention_bias` says).
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    if cfg.raw.get("rms_norm_eps").is_none_or(Value::is_null) {
        cfg.norm_eps = DEFAULT_RMS_NORM_EPS;
    }
    cfg.qkv_bias = false;
    cfg.o_bias = false;
    cfg.mlp_bias = false;
    if matches!(rope_kind(&cfg.raw), "longrope" | "su") {
        cfg.rope_scaling = read_longrope(cfg)?;
    }
    Ok(())
}

/// The rope settings of the config: `rope_parameters` (transformers 5) or `rope_scaling` (4).
fn rope_settings(raw: &Value) -> Option<&Value> {
    ["rope_parameters", "rope_scaling"].iter().find_map(|k| raw.get(*k).filter(|v| v.is_object()))
}

/// The rope type the config names (`rope_type`, or the older `type`), `default` when none.
fn rope_kind(raw: &Value) -> &str {
    rope_settings(raw)
        .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// LongRoPE (`longrope`, once `su`: Phi-3's long-context checkpoints) as transformers reads
/// it: the short and long factors, `original_max_position_embeddings` (in the rope settings or
/// at the top), and the attention factor (given, or `√(1 + ln(factor) / ln(original))` with
/// `factor` given or `max_position_embeddings / original`, 1 when that is at most 1).
fn read_longrope(cfg: &Config) -> std::result::Result<RopeScaling, String> {
    let rope = rope_settings(&cfg.raw).ok_or("longrope needs rope settings")?;
    let factors = |k: &str| -> std::result::Result<Vec<f64>, String> {
        rope.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .ok_or_else(|| format!("longrope needs `{k}`, a list of numbers"))
    };
    let original = rope
        .get("original_max_position_embeddings")
        .or_else(|| cfg.raw.get("original_max_position_embeddings"))
        .and_then(Value::as_u64)
        .filter(|&n| n > 1)
        .ok_or("longrope needs `original_max_position_embeddings` above 1")? as usize;
    let factor = rope
        .get("factor")
        .and_then(Value::as_f64)
        .unwrap_or(cfg.max_position_embeddings as f64 / original as f64);
    let attention_factor = match rope.get("attention_factor").and_then(Value::as_f64) {
        Some(a) => a,
        None if factor <= 1.0 => 1.0,
        None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
    };
    Ok(RopeScaling::LongRope {
        short_factor: factors("short_factor")?,
        long_factor: factors("long_factor")?,
        original_max_position_embeddings: original,
        attention_factor,
    })
}

/// Refuses a Phi-3 config that needs what is not implemented, naming it: a rope type other
/// than `default` and `longrope`/`su` (`yarn`, say) and `partial_rotary_factor` below 1.
pub(crate) fn check(cfg: &Config) -> Result<()> {
    let rope = rope_settings(&cfg.raw);
    let kind = rope_kind(&cfg.raw);
    if !matches!(kind, "default" | "longrope" | "su") {
        return Err(ModelError::Unsupported(format!(
            "Phi-3 with `{kind}` rope scaling; `default` and `longrope` (`su`) are implemented"
        )));
    }
    let partial = rope
        .and_then(|r| r.get("partial_rotary_factor"))
        .or_else(|| cfg.raw.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    if partial != 1.0 {
        return Err(ModelError::Unsupported(format!(
            "Phi-3 with rotary on part of each head (`partial_rotary_factor` {partial})"
        )));
    }
    Ok(())
}

/// A Phi-3 state dict under eager's split names (`self_attn.q_proj`, `k_proj`, `v_proj`;
/// `mlp.gate_proj`, `up_proj`) fused back into Hugging Face's (`self_attn.qkv_proj`: q, k, v
/// rows; `mlp.gate_up_proj`: gate, up rows), each where its first part was; the rest unchanged.
pub fn fuse_for_save(tensors: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
    const FUSED: [(&str, &[&str], &str); 2] = [
        (
            ".self_attn.q_proj.weight",
            &[".self_attn.k_proj.weight", ".self_attn.v_proj.weight"],
            ".self_attn.qkv_proj.weight",
        ),
        (".mlp.gate_proj.weight", &[".mlp.up_proj.weight"], ".mlp.gate_up_proj.weight"),
    ];
    let by_name: HashMap<String, Tensor> = tensors.iter().cloned().collect();
    let rest: Vec<String> = FUSED
        .iter()
        .flat_map(|(first, rest, _)| {
            tensors
                .iter()
                .filter_map(move |(n, _)| n.strip_suffix(first))
                .flat_map(|p| rest.iter().map(move |r| format!("{p}{r}")))
        })
        .collect();
    let mut out = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if rest.contains(&name) {
            continue;
        }
        let Some((prefix, others, fused)) =
            FUSED.iter().find_map(|(first, others, fused)| Some((name.strip_suffix(first)?, others, fused)))
        else {
            out.push((name, t));
            continue;
        };
        let mut parts = vec![t.clone()];
        for o in others.iter() {
            let part = by_name.get(&format!("{prefix}{o}")).ok_or_else(|| {
                ModelError::Unsupported(format!("saving Phi-3: `{prefix}{o}` is missing to fuse `{name}`"))
            })?;
            parts.push(part.clone());
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        out.push((format!("{prefix}{fused}"), Tensor::cat(&refs, 0)?));
    }
    Ok(out)
}
