//! A checkpoint's `generation_config.json`, as transformers' `GenerationConfig` reads it: the
//! tokens that end a sequence (often more than `config.json` lists: a chat model's end-of-turn
//! token) and the sampling defaults its authors chose, which a server applies to requests that
//! leave them out (vLLM's `--generation-config auto`).

use std::path::Path;

use serde_json::Value;

use crate::{ModelError, Result};

/// What `generation_config.json` says; every field absent when the file or the key is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationConfig {
    /// `eos_token_id`: one id or a list.
    pub eos_token_ids: Vec<u32>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `top_k`.
    pub top_k: Option<usize>,
    /// `min_p`.
    pub min_p: Option<f64>,
    /// `repetition_penalty`.
    pub repetition_penalty: Option<f64>,
    /// `max_new_tokens`.
    pub max_new_tokens: Option<usize>,
}

impl GenerationConfig {
    /// Reads `dir/generation_config.json`; a directory without one gives the empty config.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<GenerationConfig> {
        let path = dir.as_ref().join("generation_config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(GenerationConfig::default()),
            Err(source) => return Err(ModelError::Io { path, source }),
        };
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::Config { path: path.clone(), msg: format!("not valid JSON: {e}") })?;
        let bad = |key: &str, want: &str| ModelError::Config {
            path: path.clone(),
            msg: format!("`{key}` must be {want}, got {}", v[key]),
        };
        let float = |key: &str| -> Result<Option<f64>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x.as_f64().map(Some).ok_or_else(|| bad(key, "a number")),
            }
        };
        let uint = |key: &str| -> Result<Option<usize>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x.as_u64().map(|n| Some(n as usize)).ok_or_else(|| bad(key, "a whole number")),
            }
        };
        let eos_token_ids = match v.get("eos_token_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_u64().map(|n| n as u32))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| bad("eos_token_id", "a token id or a list of them"))?,
            Some(x) => {
                vec![x.as_u64().ok_or_else(|| bad("eos_token_id", "a token id or a list of them"))? as u32]
            }
        };
        Ok(GenerationConfig {
            eos_token_ids,
            temperature: float("temperature")?,
            top_p: float("top_p")?,
            top_k: uint("top_k")?,
            min_p: float("min_p")?,
            repetition_penalty: float("repetition_penalty")?,
            max_new_tokens: uint("max_new_tokens")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_tokens_and_sampling_defaults_are_read_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().expect("a temp dir");
        assert_eq!(GenerationConfig::from_dir(dir.path()).expect("no file"), GenerationConfig::default());
        let body = r#"{"eos_token_id": [128001, 128009], "temperature": 0.6, "top_p": 0.9, "top_k": 20, "do_sample": true}"#;
        std::fs::write(dir.path().join("generation_config.json"), body).expect("written");
        let g = GenerationConfig::from_dir(dir.path()).expect("read");
        assert_eq!(g.eos_token_ids, vec![128001, 128009]);
        assert_eq!((g.temperature, g.top_p, g.top_k, g.min_p), (Some(0.6), Some(0.9), Some(20), None));
        std::fs::write(dir.path().join("generation_config.json"), r#"{"eos_token_id": 2, "top_k": "x"}"#)
            .expect("written");
        let e = GenerationConfig::from_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("`top_k` must be a whole number"), "{e}");
    }
}
