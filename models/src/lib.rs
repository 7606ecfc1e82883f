//! # eager-models
//!
//! Hugging Face checkpoints on eager: a model directory (`config.json`, `model.safetensors` or
//! shards with `model.safetensors.index.json`, `tokenizer.json`) loads by its `model_type`
//! into an architecture written on `eager::nn`, one file per architecture, weights under
//! Hugging Face's names (so `state_dict` and [`save::save_pretrained`] round-trip).
//!
//! ```no_run
//! use eager_models::{AutoModel, Tokenizer, generate::{generate, GenerateOptions}};
//! let model = AutoModel::from_dir("tiny-llama", eager::default_device(), None)?;
//! let tok = Tokenizer::from_dir("tiny-llama")?;
//! let out = generate(model.causal_lm()?, &[tok.encode("Hello", true)?], &GenerateOptions::default(), Some(&tok), |_, _| {})?;
//! println!("{}", tok.decode(&out[0], true)?);
//! # Ok::<(), eager_models::ModelError>(())
//! ```
//!
//! Map: [`config`] (both config formats) and [`weights`] (mapped safetensors) → [`params`]
//! (one tree walk for loading and fresh weights) and [`layers`] (the shared norm layouts,
//! attention and GELU MLP) → [`gpt2`], [`gpt_neox`], [`llama`] (and [`qwen3`], [`phi3`] on it),
//! [`bert`] → [`auto`] → [`generate`], [`save`]; [`tokenizer`] stands apart.

#![warn(missing_docs)]

pub mod auto;
pub mod bert;
pub mod config;
mod family;
pub mod gemma;
pub mod generate;
pub mod generation_config;
pub mod gpt2;
pub mod gpt_neox;
pub mod layers;
pub mod llama;
pub mod mixtral;
pub mod moe;
pub mod params;
pub mod phi3;
pub mod qwen2_moe;
pub mod qwen3;
pub mod qwen3_moe;
pub mod save;
pub mod tokenizer;
pub mod weights;

pub use auto::AutoModel;
pub use config::Config;
pub use generate::{CausalLm, GenerateOptions};
pub use generation_config::GenerationConfig;
/// `Config::from_value` takes a JSON value: `eager_models::serde_json::json!` makes one where
/// the caller has no serde_json of its own (a notebook).
pub use serde_json;
pub use tokenizer::Tokenizer;

use std::path::PathBuf;

/// What can go wrong loading, running or saving a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file of the checkpoint could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `config.json` (or another JSON file of the checkpoint) is malformed or lacks a field.
    #[error("{path}: {msg}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// An architecture, rope type, activation or dtype this crate does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The checkpoint lacks a tensor the architecture needs.
    #[error("{dir}: missing tensor `{name}` (the config's architecture needs it)")]
    MissingTensor {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The tensor's Hugging Face name.
        name: String,
    },
    /// A tensor's shape disagrees with what the config implies.
    #[error("{path}: tensor `{name}` has shape {found:?}, the config implies {expected:?}")]
    ShapeMismatch {
        /// The weights file that holds the tensor.
        path: PathBuf,
        /// The tensor's Hugging Face name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A weights file that is not a complete safetensors file (truncated, corrupt header).
    #[error("{path}: {msg}")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The tokenizer failed to load, encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template is missing or failed to render.
    #[error("chat template: {0}")]
    Template(String),
    /// Generation was asked something it cannot do (an empty prompt, a token outside the vocabulary, …).
    #[error("generate: {0}")]
    Generate(String),
    /// An error of eager itself (a shape, a device, a file).
    #[error(transparent)]
    Eager(#[from] eager::Error),
}

/// eager-models' `Result`: its error is [`ModelError`].
pub type Result<T> = std::result::Result<T, ModelError>;

pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ModelError {
    let path = path.into();
    move |source| ModelError::Io { path, source }
}

/// A model error where eager's `Module` or `compile` wants an eager error (eager's own errors
/// pass through unchanged).
pub(crate) fn to_eager(op: &'static str, e: ModelError) -> eager::Error {
    match e {
        ModelError::Eager(e) => e,
        other => eager::Error::Invalid { op, msg: other.to_string() },
    }
}
