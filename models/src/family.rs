//! Reading a checkpoint's `config.json` whole: the fields every family shares (`config.rs`),
//! then the family's own (each family's file reads them, Hugging Face names kept), then the
//! sliding window. Here, above the families, so that `config.rs` names none of them.

use std::path::Path;

use serde_json::Value;

use crate::config::{read_sliding_window, Config, SlidingRule};
use crate::{gemma, gpt_neox, io_error, mixtral, phi3, qwen2_moe, qwen3, qwen3_moe, ModelError, Result};

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
        "phi3" => phi3::read_config(&mut config)?,
        "mixtral" => mixtral::read_config(&mut config)?,
        "qwen2_moe" => qwen2_moe::read_config(&mut config)?,
        "qwen3_moe" => qwen3_moe::read_config(&mut config)?,
        "gemma2" | "gemma3_text" => gemma::read_config(&mut config)?,
        _ => {}
    }
    let rule = sliding_rule(&config);
    read_sliding_window(&mut config, rule)?;
    Ok(config)
}

/// Each family's sliding-window rule, as transformers decides it: Mistral and Phi-3 slide on
/// every layer (when the field is absent: Mistral 4096, Phi-3 none; null: none), Mixtral only
/// when `sliding_window` is set; Qwen2 and Qwen3 only with `use_sliding_window`, on the layers
/// `layer_types` names `sliding_attention` or, without it, from `max_window_layers` (28) on;
/// Gemma 2 and 3 on `layer_types`' sliding layers, else Gemma 2's even layers and Gemma 3's all
/// but every `sliding_window_pattern`-th (4096 when absent). Other families never slide.
fn sliding_rule(cfg: &Config) -> SlidingRule {
    let (raw, n) = (&cfg.raw, cfg.num_hidden_layers);
    let every = |enabled: bool, default_window: Option<usize>| SlidingRule {
        enabled,
        default_window,
        per_layer: false,
        default_layers: Vec::new(),
    };
    match cfg.model_type.as_str() {
        "mistral" => every(true, Some(4096)),
        "phi3" => every(true, None),
        "mixtral" => every(mixtral::slides(raw), None),
        "qwen2" | "qwen3" | "qwen2_moe" | "qwen3_moe" => {
            let first = raw.get("max_window_layers").and_then(Value::as_u64).unwrap_or(28) as usize;
            SlidingRule {
                enabled: raw.get("use_sliding_window").and_then(Value::as_bool).unwrap_or(false),
                default_window: None,
                per_layer: true,
                default_layers: (0..n).map(|l| l >= first).collect(),
            }
        }
        "gemma2" | "gemma3_text" => SlidingRule {
            enabled: true,
            default_window: Some(4096),
            per_layer: true,
            default_layers: gemma::default_sliding_layers(cfg.model_type.as_str(), raw, n),
        },
        _ => every(false, None),
    }
}
