//! Qwen3 (`model_type` `qwen3`, `Qwen3ForCausalLM`): Llama's decoder (grouped-query attention,
//! rotary positions, SwiGLU, RMSNorm) with an RMSNorm on each query and each key head
//! (`self_attn.q_norm`, `self_attn.k_norm`, weights of `head_dim`), applied after the heads
//! are split and before rotary. It runs as a [`Llama`] with [`Config::qk_norm`] set; this file
//! reads Qwen3's config (its names and defaults: an explicit `head_dim`, 128 when absent; no
//! bias on q, k and v unless `attention_bias`; an untied head unless `tie_word_embeddings`).
//! Sliding-window attention (`use_sliding_window`, `max_window_layers`, `layer_types`) is read
//! by [`Config`] as for Qwen2.

use eager::{DType, Device};
use serde_json::Value;

use crate::config::Config;
use crate::llama::Llama;
use crate::weights::Weights;
use crate::{ModelError, Result};

/// Qwen3Config's `head_dim` when the config does not say (it is not `hidden_size / heads`).
pub const DEFAULT_HEAD_DIM: usize = 128;

/// Qwen3's fields on top of what [`Config`] reads for every family: `head_dim` (default
/// [`DEFAULT_HEAD_DIM`]) and the per-head query/key norms. `attention_bias` and
/// `tie_word_embeddings` (both false by default) are read as for Llama.
pub(crate) fn read_config(cfg: &mut Config) {
    if cfg.raw.get("head_dim").is_none_or(Value::is_null) {
        cfg.head_dim = DEFAULT_HEAD_DIM;
    }
    cfg.qk_norm = true;
}

/// Loads a Qwen3 checkpoint (in `dtype`) onto `device`, as a [`Llama`] with per-head query
/// and key norms.
pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<Llama> {
    if !cfg.qk_norm {
        return Err(ModelError::Unsupported(format!("a `{}` config loaded as Qwen3", cfg.model_type)));
    }
    Llama::load(cfg, w, dtype, device)
}
