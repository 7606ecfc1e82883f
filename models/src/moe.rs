//! What the mixture-of-experts families share (Mixtral, Qwen2-MoE, Qwen3-MoE): reading the
//! experts' config fields, loading one layer's experts stacked into an
//! [`eager::nn::SparseMoe`] (placed as the rest of the model is: over a mesh, split by
//! expert), and splitting the stacked experts back into one tensor per expert on save, under
//! the family's names ([`MoeNames`]).

use eager::nn::{Linear, SparseMoe, SwiGlu};
use eager::{DType, Tensor, Var};
use serde_json::Value;

use crate::config::{Config, MoeNames};
use crate::weights::{Placement, Weights};
use crate::{ModelError, Result};

/// The experts' fields every MoE family reads: `num_experts_per_tok` (default
/// `default_per_token`) of the experts `experts_key` names (default `default_experts`).
pub(crate) fn read_experts(
    cfg: &mut Config,
    experts_key: &str,
    default_experts: usize,
    default_per_token: usize,
) -> std::result::Result<(), String> {
    cfg.num_experts = uint(cfg, experts_key, default_experts)?;
    cfg.num_experts_per_tok = uint(cfg, "num_experts_per_tok", default_per_token)?;
    if cfg.num_experts == 0 || cfg.num_experts_per_tok == 0 || cfg.num_experts_per_tok > cfg.num_experts {
        return Err(format!(
            "`num_experts_per_tok` {} must be in 1..={} (`{experts_key}`)",
            cfg.num_experts_per_tok, cfg.num_experts
        ));
    }
    Ok(())
}

/// A whole-number field of the config, or `default` when absent or null.
pub(crate) fn uint(cfg: &Config, name: &str, default: usize) -> std::result::Result<usize, String> {
    match cfg.raw.get(name).filter(|v| !v.is_null()) {
        None => Ok(default),
        Some(v) => {
            v.as_u64().map(|n| n as usize).ok_or_else(|| format!("`{name}` must be a whole number, got {v}"))
        }
    }
}

/// A bool field of the config, or `default`.
pub(crate) fn flag(cfg: &Config, name: &str, default: bool) -> bool {
    cfg.raw.get(name).and_then(Value::as_bool).unwrap_or(default)
}

/// Layer `p`'s experts (`{p}.{block}.*`), stacked on the host into one [`SparseMoe`] and placed
/// by `placement` (over a mesh, split by expert: expert parallelism), with the shared expert
/// where the config has one.
pub fn load_experts(
    cfg: &Config,
    w: &Weights,
    p: &str,
    dtype: DType,
    placement: &Placement,
) -> Result<SparseMoe> {
    let (h, i, e) = (cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts);
    let names = &cfg.moe_names;
    let m = format!("{p}.{}", names.block);
    let stacked = |name: &str, shape: &[usize]| -> Result<Var> {
        let mut bytes = Vec::new();
        for x in 0..e {
            bytes.extend_from_slice(&w.bytes(&format!("{m}.experts.{x}.{name}.weight"), shape, dtype)?);
        }
        let all: Vec<usize> = std::iter::once(e).chain(shape.iter().copied()).collect();
        Ok(Var::parameter("weight", placement.place(&bytes, &all, dtype, Some(0))?)?)
    };
    let linear = |name: &str, shape: &[usize], split: Option<usize>| -> Result<Linear> {
        let t = w.get_placed(&format!("{m}.{name}.weight"), shape, dtype, placement, split)?;
        Ok(Linear { weight: Var::parameter("weight", t)?, bias: None })
    };
    let s = cfg.shared_expert_intermediate_size;
    let shared_expert = if s > 0 {
        let expert = SwiGlu {
            gate_proj: linear("shared_expert.gate_proj", &[s, h], Some(0))?,
            up_proj: linear("shared_expert.up_proj", &[s, h], Some(0))?,
            down_proj: linear("shared_expert.down_proj", &[h, s], Some(1))?,
            act: Default::default(),
        };
        Some((expert, linear("shared_expert_gate", &[1, h], None)?))
    } else {
        None
    };
    Ok(SparseMoe {
        gate: linear("gate", &[e, h], None)?,
        w1: stacked(names.gate, &[i, h])?,
        w2: stacked(names.down, &[h, i])?,
        w3: stacked(names.up, &[i, h])?,
        top_k: cfg.num_experts_per_tok,
        norm_topk_prob: cfg.norm_topk_prob,
        shared_expert,
    })
}

/// A fresh block of the config's experts (weights N(0, 0.02)), with its shared expert if any.
pub fn new_experts(cfg: &Config, dtype: DType) -> Result<SparseMoe> {
    let h = cfg.hidden_size;
    let mut moe =
        SparseMoe::new(h, cfg.moe_intermediate_size, cfg.num_experts, cfg.num_experts_per_tok, dtype)?;
    moe.norm_topk_prob = cfg.norm_topk_prob;
    let s = cfg.shared_expert_intermediate_size;
    if s > 0 {
        let gate = Linear::with_options(h, 1, false, dtype)?;
        moe.shared_expert = Some((SwiGlu::new(h, s, false, dtype)?, gate));
    }
    Ok(moe)
}

/// A state dict under eager's stacked names (`{block}.experts.w1`, `[E, I, H]`) split into the
/// checkpoint's (`{block}.experts.{e}.{names.gate}.weight`, …), in place; the rest unchanged.
pub fn split_for_save(tensors: Vec<(String, Tensor)>, names: &MoeNames) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let Some((prefix, which)) = [("w1", names.gate), ("w2", names.down), ("w3", names.up)]
            .iter()
            .find_map(|(k, hf)| Some((name.strip_suffix(&format!(".experts.{k}"))?.to_string(), *hf)))
        else {
            out.push((name, t));
            continue;
        };
        let experts = t.shape().first().copied().ok_or_else(|| {
            ModelError::Unsupported(format!("saving experts: `{name}` is 0-d, not stacked experts"))
        })?;
        for e in 0..experts {
            out.push((format!("{prefix}.experts.{e}.{which}.weight"), t.narrow(0, e, 1)?.squeeze(0)?));
        }
    }
    Ok(out)
}
