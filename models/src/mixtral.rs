//! Mixtral (`model_type` `mixtral`, `MixtralForCausalLM`): Mistral's decoder with each MLP
//! replaced by a sparse mixture of experts (`block_sparse_moe`: a router `gate` and
//! `num_local_experts` SwiGLU experts `experts.{e}.w1/w2/w3`, `num_experts_per_tok` of them per
//! token, their weights renormalised). It runs as a [`crate::llama::Llama`] whose layers hold an
//! [`eager::nn::SparseMoe`] (stacked on load by [`crate::moe`]). This file reads Mixtral's config
//! (sliding window none unless set; no biases).

use serde_json::Value;

use crate::config::{Config, MoeNames};
use crate::moe::read_experts;

/// MixtralConfig's `num_experts_per_tok` when the config does not say.
pub const DEFAULT_EXPERTS_PER_TOKEN: usize = 2;
/// MixtralConfig's `num_local_experts` when the config does not say.
pub const DEFAULT_EXPERTS: usize = 8;

/// Mixtral's fields on top of what [`Config`] reads for every family: the experts, every layer's
/// MLP, of `intermediate_size`, renormalised, under Mixtral's names.
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    read_experts(cfg, "num_local_experts", DEFAULT_EXPERTS, DEFAULT_EXPERTS_PER_TOKEN)?;
    cfg.norm_topk_prob = true;
    cfg.moe_intermediate_size = cfg.intermediate_size;
    cfg.sparse_layers = vec![true; cfg.num_hidden_layers];
    cfg.moe_names = MoeNames { block: "block_sparse_moe", gate: "w1", up: "w3", down: "w2" };
    cfg.qkv_bias = false;
    cfg.o_bias = false;
    cfg.mlp_bias = false;
    Ok(())
}

/// Whether `raw` is a Mixtral config that slides: MixtralConfig's `sliding_window` is none
/// unless set.
pub(crate) fn slides(raw: &Value) -> bool {
    raw.get("sliding_window").is_some_and(|v| !v.is_null())
}
