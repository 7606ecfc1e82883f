//! Reading a checkpoint's `config.json` whole: the fields every family shares (`config.rs`),
//! then the family's own (each family's file reads them, Hugging Face names kept), then the
//! sliding window. Here, above the families, so that `config.rs` names none of them.

use std::path::Path;

use serde_json::Value;

use crate::config::{read_sliding_window, Config};
use crate::{gpt_neox, io_error, mixtral, phi3, qwen3, ModelError, Result};

impl Config {
    /// Reads `config.json` at `path` (transformers 4's or 5's format).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        let raw: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::Config { path: path.into(), msg: format!("not valid JSON: {e}") })?;
        parse(raw).map_err(|msg| ModelError::Config { path: path.into(), msg })
    }

    /// Reads a parsed `config.json` (`eager_models::serde_json::json!` makes one); the error
    /// says which field is missing or wrong.
    pub fn from_value(raw: Value) -> Result<Config> {
        parse(raw).map_err(|msg| ModelError::Config { path: "config.json (given as a value)".into(), msg })
    }
}

fn parse(raw: Value) -> std::result::Result<Config, String> {
    let mut config = Config::parse_common(raw)?;
    // A family whose config differs from Llama's reads its own fields and defaults.
    match config.model_type.as_str() {
        "qwen3" => qwen3::read_config(&mut config),
        "gpt_neox" => gpt_neox::read_config(&mut config),
        "phi3" => phi3::read_config(&mut config),
        "mixtral" => mixtral::read_config(&mut config)?,
        _ => {}
    }
    read_sliding_window(&mut config)?;
    Ok(config)
}
