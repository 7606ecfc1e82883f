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
//! let out = generate(model.causal_lm()?, &[tok.encode("Hello", true)?], &GenerateOptions::default(), |_, _| {})?;
//! println!("{}", tok.decode(&out[0], true)?);
//! # Ok::<(), eager_models::ModelError>(())
//! ```
//!
//! Map: [`config`] (both config formats) and [`weights`] (mapped safetensors) → [`gpt2`],
//! [`llama`], [`bert`] → [`auto`] → [`generate`], [`save`]; [`tokenizer`] stands apart.

pub mod auto;
pub mod bert;
pub mod config;
pub mod generate;
pub mod gpt2;
pub mod llama;
pub mod save;
pub mod tokenizer;
pub mod weights;

pub use auto::AutoModel;
pub use config::Config;
pub use generate::{CausalLm, GenerateOptions};
pub use tokenizer::Tokenizer;

use std::path::PathBuf;

/// What can go wrong loading, running or saving a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// `config.json` (or another JSON file of the checkpoint) is malformed or lacks a field.
    #[error("{path}: {msg}")]
    Config { path: PathBuf, msg: String },
    /// An architecture, rope type, activation or dtype this crate does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The checkpoint lacks a tensor the architecture needs.
    #[error("{dir}: missing tensor `{name}` (the config's architecture needs it)")]
    MissingTensor { dir: PathBuf, name: String },
    /// A tensor's shape disagrees with what the config implies.
    #[error("{path}: tensor `{name}` has shape {found:?}, the config implies {expected:?}")]
    ShapeMismatch { path: PathBuf, name: String, expected: Vec<usize>, found: Vec<usize> },
    /// A weights file that is not a complete safetensors file (truncated, corrupt header).
    #[error("{path}: {msg}")]
    Weights { path: PathBuf, msg: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("generate: {0}")]
    Generate(String),
    #[error(transparent)]
    Eager(#[from] eager::Error),
}

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
