//! Qwen2-MoE (`model_type` `qwen2_moe`, `Qwen2MoeForCausalLM`): Qwen2's decoder (biases on q, k
//! and v) whose MLPs are sparse mixtures of experts (`mlp.gate`, `mlp.experts.{e}.gate_proj/
//! up_proj/down_proj` of `moe_intermediate_size`, `num_experts_per_tok` of `num_experts` a
//! token) beside a shared expert every token takes (`mlp.shared_expert`, scaled by
//! `sigmoid(mlp.shared_expert_gate(x))`); the layers `mlp_only_layers` names, and those off
//! `decoder_sparse_step`, keep a dense MLP of `intermediate_size`. It runs as a
//! [`crate::llama::Llama`]; this file reads its config, with Qwen2MoeConfig's defaults.

use crate::config::{Config, MoeNames};
use crate::moe::{flag, read_experts, uint};

/// Qwen's names for the experts.
pub(crate) const NAMES: MoeNames =
    MoeNames { block: "mlp", gate: "gate_proj", up: "up_proj", down: "down_proj" };

/// Qwen2-MoE's fields on top of what [`Config`] reads for every family.
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    read_experts(cfg, "num_experts", 60, 4)?;
    cfg.qkv_bias = flag(cfg, "qkv_bias", true);
    cfg.moe_intermediate_size = uint(cfg, "moe_intermediate_size", 1408)?;
    cfg.shared_expert_intermediate_size = uint(cfg, "shared_expert_intermediate_size", 5632)?;
    read_sparse_layers(cfg)
}

/// What both Qwen MoE families share: `norm_topk_prob` (false unless set), the sparse layers
/// (`decoder_sparse_step`, `mlp_only_layers`) and Qwen's names.
pub(crate) fn read_sparse_layers(cfg: &mut Config) -> std::result::Result<(), String> {
    cfg.norm_topk_prob = flag(cfg, "norm_topk_prob", false);
    let step = uint(cfg, "decoder_sparse_step", 1)?.max(1);
    let dense: Vec<u64> = cfg
        .raw
        .get("mlp_only_layers")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default();
    cfg.sparse_layers =
        (0..cfg.num_hidden_layers).map(|l| !dense.contains(&(l as u64)) && (l + 1) % step == 0).collect();
    cfg.moe_names = NAMES;
    Ok(())
}
