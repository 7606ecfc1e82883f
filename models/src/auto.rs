//! `AutoModel::from_dir`: reads `config.json`, picks the architecture by `model_type` (or
//! `architectures`), maps the weights and loads them in the checkpoint's dtype or the one
//! asked for. An architecture it does not implement is named in the error.

use std::path::Path;

use eager::nn::Module;
use eager::{DType, Device, Mesh};

use crate::bert::Bert;
use crate::config::Config;
use crate::generate::CausalLm;
use crate::gpt2::Gpt2;
use crate::gpt_neox::GptNeoX;
use crate::llama::Llama;
use crate::qwen3;
use crate::weights::{Placement, Weights};
use crate::{ModelError, Result};

/// A loaded checkpoint, one variant per architecture family.
pub enum AutoModel {
    /// GPT-2 (`model_type` `gpt2`).
    Gpt2(Gpt2),
    /// Llama, Mistral, Qwen2, Qwen3 (with per-head query/key norms), Phi-3 (its fused
    /// projections split on load), Mixtral (a sparse mixture of experts for each MLP), Gemma 2
    /// and Gemma 3's text model.
    Llama(Llama),
    /// GPT-NeoX (`model_type` `gpt_neox`: Pythia, GPT-NeoX-20B).
    GptNeoX(GptNeoX),
    /// BERT's encoder (`model_type` `bert`).
    Bert(Bert),
}

/// The `model_type`s that load, and the family each belongs to.
pub const SUPPORTED: &[&str] = &[
    "gpt2",
    "gpt_neox",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma2",
    "gemma3_text",
    "bert",
];

impl AutoModel {
    /// Loads the checkpoint in `dir` onto `device`, in `dtype` (cast on load) or, with `None`,
    /// in the dtype its weights are stored in.
    pub fn from_dir(dir: impl AsRef<Path>, device: Device, dtype: Option<DType>) -> Result<AutoModel> {
        let (config, weights, dtype) = open(dir.as_ref(), dtype)?;
        Ok(match config.model_type.as_str() {
            "gpt2" => AutoModel::Gpt2(Gpt2::load(&config, &weights, dtype, device)?),
            "bert" => AutoModel::Bert(Bert::load(&config, &weights, dtype, device)?),
            "qwen3" | "qwen3_moe" => AutoModel::Llama(qwen3::load(&config, &weights, dtype, device)?),
            "gpt_neox" => AutoModel::GptNeoX(GptNeoX::load(&config, &weights, dtype, device)?),
            _ => AutoModel::Llama(Llama::load(&config, &weights, dtype, device)?),
        })
    }

    /// Loads the checkpoint in `dir` over `mesh`, each weight split as it is read (each
    /// device's block uploaded to that device alone: no device ever holds the whole model),
    /// over the mesh's `model` axis, or its only axis: q, k, v, gate and up projections by
    /// output rows, o and down by input columns, the embeddings and the head by vocabulary,
    /// experts by expert, norms whole. Every family loads so ([`Llama::load_placed`],
    /// [`GptNeoX::load_placed`], [`Gpt2::load_placed`], [`Bert::load_placed`] say how each
    /// splits); run it through `eager::compile` (or `generate`'s compiled mode), where what a
    /// step makes on one device joins the mesh.
    pub fn from_dir_sharded(dir: impl AsRef<Path>, mesh: &Mesh, dtype: Option<DType>) -> Result<AutoModel> {
        let dir = dir.as_ref();
        let axis = match mesh.axes() {
            [(only, _)] => only.clone(),
            axes => match axes.iter().find(|(a, _)| a == "model") {
                Some((a, _)) => a.clone(),
                None => {
                    let names: Vec<&str> = axes.iter().map(|(a, _)| a.as_str()).collect();
                    return Err(ModelError::Unsupported(format!(
                        "loading over a mesh of axes {names:?}: name the axis to split over `model`"
                    )));
                }
            },
        };
        let placement = Placement::Mesh { mesh: mesh.clone(), axis };
        let (config, weights, dtype) = open(dir, dtype)?;
        Ok(match config.model_type.as_str() {
            "gpt2" => AutoModel::Gpt2(Gpt2::load_placed(&config, &weights, dtype, &placement)?),
            "bert" => AutoModel::Bert(Bert::load_placed(&config, &weights, dtype, &placement)?),
            "gpt_neox" => AutoModel::GptNeoX(GptNeoX::load_placed(&config, &weights, dtype, &placement)?),
            _ => AutoModel::Llama(Llama::load_placed(&config, &weights, dtype, &placement)?),
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

/// The config, the mapped weights and the dtype to load in, for a supported `model_type`.
fn open(dir: &Path, dtype: Option<DType>) -> Result<(Config, Weights, DType)> {
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
        return Err(ModelError::Unsupported(format!("loading a model as {dtype} (f32, bf16, f16 or f64)")));
    }
    Ok((config, weights, dtype))
}
