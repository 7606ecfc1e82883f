//! What the mixture-of-experts families share (Mixtral, Qwen2-MoE, Qwen3-MoE): reading the
//! experts' config fields, building one layer's experts stacked into an
//! [`eager::nn::SparseMoe`] through [`Params`] (read and placed as the rest of the model is,
//! over a mesh split by expert, or fresh), and splitting the stacked experts back into one
//! tensor per expert on save, under the family's names ([`MoeNames`]).

use eager::nn::{Linear, SparseMoe, SwiGlu};
use eager::Tensor;
use serde_json::Value;

use crate::config::{Config, MoeNames};
use crate::params::{Init, Params};
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

/// One layer's experts under `p` (the layer's `{block}`), stacked into one [`SparseMoe`]: read
/// and joined on the host, then placed as the rest of the model (over a mesh, split by expert:
/// expert parallelism), or fresh (drawn in the order router, gate, down, up, shared expert);
/// with the shared expert where the config has one.
pub fn experts(cfg: &Config, p: &Params) -> Result<SparseMoe> {
    let (h, i, e) = (cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts);
    let names = &cfg.moe_names;
    let gate = Linear { weight: p.var("gate.weight", &[e, h], Init::Normal, None)?, bias: None };
    let stacked = |var: &str, which: &str, shape: &[usize]| {
        p.stacked(var, |x| format!("experts.{x}.{which}.weight"), e, shape, Init::Normal, Some(0))
    };
    let w1 = stacked("w1", names.gate, &[i, h])?;
    let w2 = stacked("w2", names.down, &[h, i])?;
    let w3 = stacked("w3", names.up, &[i, h])?;
    let s = cfg.shared_expert_intermediate_size;
    let shared_expert = if s > 0 {
        let (col, row) = (0, 1);
        let expert = SwiGlu {
            gate_proj: p.linear("shared_expert.gate_proj", s, h, false, col)?,
            up_proj: p.linear("shared_expert.up_proj", s, h, false, col)?,
            down_proj: p.linear("shared_expert.down_proj", h, s, false, row)?,
            act: Default::default(),
        };
        let gate =
            Linear { weight: p.var("shared_expert_gate.weight", &[1, h], Init::Normal, None)?, bias: None };
        Some((expert, gate))
    } else {
        None
    };
    Ok(SparseMoe {
        gate,
        w1,
        w2,
        w3,
        top_k: cfg.num_experts_per_tok,
        norm_topk_prob: cfg.norm_topk_prob,
        shared_expert,
    })
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
