//! `AutoModel::from_dir`: reads `config.json`, picks the architecture by `model_type` (or
//! `architectures`), maps the weights and loads them in the checkpoint's dtype or the one
//! asked for. An architecture it does not implement is named in the error.

use std::path::Path;

use eager::nn::Module;
use eager::{DType, Device};

use crate::bert::Bert;
use crate::config::Config;
use crate::generate::CausalLm;
use crate::gpt2::Gpt2;
use crate::gpt_neox::GptNeoX;
use crate::llama::Llama;
use crate::qwen3;
use crate::weights::Weights;
use crate::{ModelError, Result};

/// A loaded checkpoint, one variant per architecture family.
pub enum AutoModel {
    /// GPT-2 (`model_type` `gpt2`).
    Gpt2(Gpt2),
    /// Llama, Mistral, Qwen2, Qwen3 (with per-head query/key norms), Phi-3 (its fused
    /// projections split on load) and Mixtral (a sparse mixture of experts for each MLP).
    Llama(Llama),
    /// GPT-NeoX (`model_type` `gpt_neox`: Pythia, GPT-NeoX-20B).
    GptNeoX(GptNeoX),
    /// BERT's encoder (`model_type` `bert`).
    Bert(Bert),
}

/// The `model_type`s that load, and the family each belongs to.
pub const SUPPORTED: &[&str] =
    &["gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen3", "phi3", "bert"];

impl AutoModel {
    /// Loads the checkpoint in `dir` onto `device`, in `dtype` (cast on load) or, with `None`,
    /// in the dtype its weights are stored in.
    pub fn from_dir(dir: impl AsRef<Path>, device: Device, dtype: Option<DType>) -> Result<AutoModel> {
        let dir = dir.as_ref();
        let config = Config::from_file(dir.join("config.json"))?;
        if !SUPPORTED.contains(&config.model_type.as_str()) {
            return Err(ModelError::Unsupported(format!(
                "architecture `{}` ({}) in {}; eager-models loads {}",
                config.model_type,
                config.architectures.join(", "),
                dir.display(),
                SUPPORTED.join(", ")
            )));
        }
        let weights = Weights::open(dir)?;
        let dtype = dtype.or_else(|| weights.float_dtype()).or(config.dtype).unwrap_or(DType::F32);
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16 | DType::F64) {
            return Err(ModelError::Unsupported(format!(
                "loading a model as {dtype} (f32, bf16, f16 or f64)"
            )));
        }
        Ok(match config.model_type.as_str() {
            "gpt2" => AutoModel::Gpt2(Gpt2::load(&config, &weights, dtype, device)?),
            "bert" => AutoModel::Bert(Bert::load(&config, &weights, dtype, device)?),
            "qwen3" => AutoModel::Llama(qwen3::load(&config, &weights, dtype, device)?),
            "gpt_neox" => AutoModel::GptNeoX(GptNeoX::load(&config, &weights, dtype, device)?),
            _ => AutoModel::Llama(Llama::load(&config, &weights, dtype, device)?),
        })
    }

    /// The checkpoint's configuration.
    pub fn config(&self) -> &Config {
        match self {
            AutoModel::Gpt2(m) => &m.config,
            AutoModel::Llama(m) => &m.config,
            AutoModel::GptNeoX(m) => &m.config,
            AutoModel::Bert(m) => &m.config,
        }
    }

    /// The model as a decoder that generates (an error for an encoder such as BERT).
    pub fn causal_lm(&self) -> Result<&dyn CausalLm> {
        match self {
            AutoModel::Gpt2(m) => Ok(m),
            AutoModel::Llama(m) => Ok(m),
            AutoModel::GptNeoX(m) => Ok(m),
            AutoModel::Bert(_) => {
                Err(ModelError::Unsupported("BERT is an encoder: it does not generate".into()))
            }
        }
    }

    /// The model as an `eager::nn::Module`: its parameters under Hugging Face's names (for `state_dict`, optimizers, `save_pretrained`).
    pub fn module(&self) -> &dyn Module {
        match self {
            AutoModel::Gpt2(m) => m,
            AutoModel::Llama(m) => m,
            AutoModel::GptNeoX(m) => m,
            AutoModel::Bert(m) => m,
        }
    }
}
