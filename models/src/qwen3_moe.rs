//! Qwen3-MoE (`model_type` `qwen3_moe`, `Qwen3MoeForCausalLM`): Qwen3's decoder (per-head q/k
//! norms, an explicit `head_dim`) whose MLPs are sparse mixtures of experts (`mlp.gate`,
//! `mlp.experts.{e}.gate_proj/up_proj/down_proj` of `moe_intermediate_size`, no shared expert),
//! dense where `mlp_only_layers` or `decoder_sparse_step` say. It runs as a
//! [`crate::llama::Llama`]; this file reads its config, with Qwen3MoeConfig's defaults.

use crate::config::Config;
use crate::moe::{read_experts, uint};

/// Qwen3-MoE's fields on top of what [`Config`] reads for every family (Qwen3's `head_dim` and
/// q/k norms are read by `qwen3.rs`).
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    crate::qwen3::read_config(cfg);
    // transformers 5 writes `num_local_experts`; 4 and the Hub's checkpoints `num_experts`.
    let key = if cfg.raw.get("num_experts").is_some_and(|v| !v.is_null()) {
        "num_experts"
    } else {
        "num_local_experts"
    };
    read_experts(cfg, key, 128, 8)?;
    cfg.moe_intermediate_size = uint(cfg, "moe_intermediate_size", 768)?;
    crate::qwen2_moe::read_sparse_layers(cfg)
}
