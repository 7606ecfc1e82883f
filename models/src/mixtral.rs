//! Mixtral (`model_type` `mixtral`, `MixtralForCausalLM`): Mistral's decoder with each MLP
//! replaced by a sparse mixture of experts (`block_sparse_moe`: a router `gate` and
//! `num_local_experts` SwiGLU experts `experts.{e}.w1/w2/w3`, `num_experts_per_tok` of them per
//! token, their weights renormalised). It runs as a [`crate::llama::Llama`] whose layers hold an
//! [`eager::nn::SparseMoe`]: the experts' weights are stacked on load ([`load_experts`]), so
//! they run as one grouped program, and split back under Hugging Face's names on save
//! ([`split_for_save`]). This file reads Mixtral's config (sliding window none unless set).

use eager::nn::{Linear, SparseMoe};
use eager::{DType, Device, Tensor, Var};
use serde_json::Value;

use crate::config::Config;
use crate::weights::Weights;
use crate::{ModelError, Result};

/// MixtralConfig's `num_experts_per_tok` when the config does not say.
pub const DEFAULT_EXPERTS_PER_TOKEN: usize = 2;
/// MixtralConfig's `num_local_experts` when the config does not say.
pub const DEFAULT_EXPERTS: usize = 8;

/// Mixtral's fields on top of what [`Config`] reads for every family: the experts and how
/// many a token takes. Its projections have no biases.
pub(crate) fn read_config(cfg: &mut Config) -> std::result::Result<(), String> {
    let uint = |name: &str, default: usize| -> std::result::Result<usize, String> {
        match cfg.raw.get(name).filter(|v| !v.is_null()) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| format!("`{name}` must be a whole number, got {v}")),
        }
    };
    cfg.num_experts = uint("num_local_experts", DEFAULT_EXPERTS)?;
    cfg.num_experts_per_tok = uint("num_experts_per_tok", DEFAULT_EXPERTS_PER_TOKEN)?;
    if cfg.num_experts == 0 || cfg.num_experts_per_tok == 0 || cfg.num_experts_per_tok > cfg.num_experts {
        return Err(format!(
            "`num_experts_per_tok` {} must be in 1..={} (`num_local_experts`)",
            cfg.num_experts_per_tok, cfg.num_experts
        ));
    }
    cfg.norm_topk_prob = true;
    cfg.qkv_bias = false;
    cfg.o_bias = false;
    cfg.mlp_bias = false;
    Ok(())
}

/// Layer `p`'s experts (`{p}.block_sparse_moe.*`), stacked into one [`SparseMoe`].
pub fn load_experts(cfg: &Config, w: &Weights, p: &str, dtype: DType, device: Device) -> Result<SparseMoe> {
    let (h, i, e) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_experts);
    let m = format!("{p}.block_sparse_moe");
    let stacked = |name: &str, shape: &[usize]| -> Result<Var> {
        let parts = (0..e)
            .map(|x| {
                Ok(w.get(&format!("{m}.experts.{x}.{name}.weight"), shape, dtype, device)?.unsqueeze(0)?)
            })
            .collect::<Result<Vec<Tensor>>>()?;
        Ok(Var::parameter(name, Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?)?)
    };
    let gate = Linear {
        weight: Var::parameter("weight", w.get(&format!("{m}.gate.weight"), &[e, h], dtype, device)?)?,
        bias: None,
    };
    Ok(SparseMoe {
        gate,
        w1: stacked("w1", &[i, h])?,
        w2: stacked("w2", &[h, i])?,
        w3: stacked("w3", &[i, h])?,
        top_k: cfg.num_experts_per_tok,
        norm_topk_prob: cfg.norm_topk_prob,
    })
}

/// A Mixtral state dict under eager's stacked names (`block_sparse_moe.experts.w1`, `[E, I,
/// H]`) split into Hugging Face's (`block_sparse_moe.experts.{e}.w1.weight`), in place; the
/// rest unchanged.
pub fn split_for_save(tensors: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let Some((prefix, which)) = ["w1", "w2", "w3"]
            .iter()
            .find_map(|k| Some((name.strip_suffix(&format!(".experts.{k}"))?.to_string(), *k)))
        else {
            out.push((name, t));
            continue;
        };
        let experts = t.shape().first().copied().ok_or_else(|| {
            ModelError::Unsupported(format!("saving Mixtral: `{name}` is 0-d, not stacked experts"))
        })?;
        for e in 0..experts {
            out.push((format!("{prefix}.experts.{e}.{which}.weight"), t.narrow(0, e, 1)?.squeeze(0)?));
        }
    }
    Ok(out)
}

/// Whether `raw` is a Mixtral config that slides: MixtralConfig's `sliding_window` is none
/// unless set.
pub(crate) fn slides(raw: &Value) -> bool {
    raw.get("sliding_window").is_some_and(|v| !v.is_null())
}
