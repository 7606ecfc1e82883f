//! `config.json` of a Hugging Face checkpoint, in both formats: transformers 4's (top-level
//! `rope_theta`, `rope_scaling`, `torch_dtype`; most checkpoints on the Hub) and transformers
//! 5's (`rope_parameters` holding `rope_theta` and `rope_type`, `dtype`). GPT-2's own names
//! (`n_embd`, `n_layer`, …) are read too. What a field does not say takes transformers'
//! default for that `model_type`.

use std::path::Path;

use eager::nn::RopeScaling;
use eager::DType;
use serde_json::Value;

use crate::{io_error, ModelError, Result};

/// The fields the architectures here read; `raw` keeps the whole file (saved back as it was).
#[derive(Debug, Clone)]
pub struct Config {
    /// `model_type` (`gpt2`, `gpt_neox`, `llama`, `mistral`, `qwen2`, `qwen3`, `bert`).
    pub model_type: String,
    /// `architectures` (`LlamaForCausalLM`, …).
    pub architectures: Vec<String>,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of the residual stream (GPT-2's `n_embd`).
    pub hidden_size: usize,
    /// Transformer layers (GPT-2's `n_layer`).
    pub num_hidden_layers: usize,
    /// Query heads (GPT-2's `n_head`).
    pub num_attention_heads: usize,
    /// Key/value heads (fewer than query heads for grouped-query attention; the same when the config does not say).
    pub num_key_value_heads: usize,
    /// Width of one head (`hidden_size / num_attention_heads` unless the config says).
    pub head_dim: usize,
    /// Width of the MLP's hidden layer (GPT-2's `n_inner`, else 4 × `hidden_size`).
    pub intermediate_size: usize,
    /// Longest sequence the position embeddings or rope cover.
    pub max_position_embeddings: usize,
    /// RMS norm's (Llama) or layer norm's (GPT-2, BERT) epsilon.
    pub norm_eps: f64,
    /// Rotary embeddings' base (`rope_theta`, top-level or in `rope_parameters`).
    pub rope_theta: f64,
    /// Rotary embeddings' scaling (`default`, `linear`, `llama3`).
    pub rope_scaling: RopeScaling,
    /// Whether the output head shares the token embeddings' weight.
    pub tie_word_embeddings: bool,
    /// Bias on q, k and v (Qwen2 always; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the attention's output projection (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Bias on the MLP's projections (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// RMSNorm on each query and key head before rotary (Qwen3's `q_norm` and `k_norm`).
    pub qk_norm: bool,
    /// The MLP's activation (`silu`, `gelu_new`, `gelu`, …; GPT-2's `activation_function`).
    pub hidden_act: String,
    /// Segment vocabulary size (BERT's `type_vocab_size`).
    pub type_vocab_size: usize,
    /// The checkpoint's dtype (`dtype` or `torch_dtype`), when it says.
    pub dtype: Option<DType>,
    /// Beginning-of-sequence token.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens (`eos_token_id`, one or a list).
    pub eos_token_ids: Vec<u32>,
    /// Padding token.
    pub pad_token_id: Option<u32>,
    /// The whole `config.json`, as read.
    pub raw: Value,
}

impl Config {
    /// Reads `config.json` at `path` (transformers 4's or 5's format).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        let raw: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::Config { path: path.into(), msg: format!("not valid JSON: {e}") })?;
        Config::parse(raw).map_err(|msg| ModelError::Config { path: path.into(), msg })
    }

    /// Reads a parsed `config.json` (`eager_models::serde_json::json!` makes one); the error
    /// says which field is missing or wrong.
    pub fn from_value(raw: Value) -> Result<Config> {
        Config::parse(raw)
            .map_err(|msg| ModelError::Config { path: "config.json (given as a value)".into(), msg })
    }

    fn parse(raw: Value) -> std::result::Result<Config, String> {
        let get = |names: &[&str]| names.iter().find_map(|n| raw.get(*n).filter(|v| !v.is_null()));
        let uint = |names: &[&str]| -> std::result::Result<Option<usize>, String> {
            match get(names) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| format!("`{}` must be a whole number, got {v}", names[0])),
            }
        };
        let need = |names: &[&str]| -> std::result::Result<usize, String> {
            uint(names)?.ok_or_else(|| format!("`{}` is missing", names[0]))
        };
        let float = |names: &[&str], default: f64| get(names).and_then(Value::as_f64).unwrap_or(default);
        let model_type =
            get(&["model_type"]).and_then(Value::as_str).ok_or("`model_type` is missing")?.to_string();
        let architectures = get(&["architectures"])
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default();
        let gpt2 = model_type == "gpt2";
        let hidden_size = need(&["hidden_size", "n_embd"])?;
        let heads = need(&["num_attention_heads", "n_head"])?;
        if heads == 0 {
            return Err("`num_attention_heads` must be at least 1".into());
        }
        let kv_heads = uint(&["num_key_value_heads"])?.unwrap_or(heads);
        let head_dim = uint(&["head_dim"])?.unwrap_or(hidden_size / heads);
        let intermediate = uint(&["intermediate_size", "n_inner"])?.unwrap_or(4 * hidden_size);
        // transformers 5 nests the rope settings in `rope_parameters`; 4 has them at the top.
        let rope = get(&["rope_parameters"]).cloned();
        let rope_theta = rope
            .as_ref()
            .and_then(|r| r.get("rope_theta"))
            .and_then(Value::as_f64)
            .unwrap_or_else(|| float(&["rope_theta"], 10000.0));
        let scaling = rope.or_else(|| get(&["rope_scaling"]).cloned());
        let rope_scaling = parse_rope_scaling(scaling.as_ref())?;
        let dtype = match get(&["dtype", "torch_dtype"]).and_then(Value::as_str) {
            None => None,
            Some(name) => Some(parse_dtype(name).ok_or_else(|| format!("unknown dtype `{name}`"))?),
        };
        let ids = |v: Option<&Value>| -> Vec<u32> {
            match v {
                Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64().map(|n| n as u32)).collect(),
                Some(x) => x.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
                None => Vec::new(),
            }
        };
        let attention_bias = get(&["attention_bias"]).and_then(Value::as_bool).unwrap_or(false);
        let mut config = Config {
            vocab_size: need(&["vocab_size"])?,
            hidden_size,
            num_hidden_layers: need(&["num_hidden_layers", "n_layer"])?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            intermediate_size: intermediate,
            max_position_embeddings: uint(&["max_position_embeddings", "n_positions"])?.unwrap_or(2048),
            norm_eps: float(
                &["rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"],
                if gpt2 { 1e-5 } else { 1e-6 },
            ),
            rope_theta,
            rope_scaling,
            tie_word_embeddings: get(&["tie_word_embeddings"]).and_then(Value::as_bool).unwrap_or(gpt2),
            qkv_bias: model_type == "qwen2" || attention_bias,
            o_bias: attention_bias,
            mlp_bias: get(&["mlp_bias"]).and_then(Value::as_bool).unwrap_or(false),
            qk_norm: false,
            hidden_act: get(&["hidden_act", "activation_function"])
                .and_then(Value::as_str)
                .unwrap_or("silu")
                .to_string(),
            type_vocab_size: uint(&["type_vocab_size"])?.unwrap_or(2),
            dtype,
            bos_token_id: get(&["bos_token_id"]).and_then(Value::as_u64).map(|n| n as u32),
            eos_token_ids: ids(get(&["eos_token_id"])),
            pad_token_id: get(&["pad_token_id"]).and_then(Value::as_u64).map(|n| n as u32),
            model_type,
            architectures,
            raw,
        };
        // A family whose config differs from Llama's reads its own fields and defaults.
        match config.model_type.as_str() {
            "qwen3" => crate::qwen3::read_config(&mut config),
            "gpt_neox" => crate::gpt_neox::read_config(&mut config),
            _ => {}
        }
        Ok(config)
    }
}

/// `rope_scaling` (transformers 4) or `rope_parameters` (5): `rope_type` (or the older `type`).
fn parse_rope_scaling(v: Option<&Value>) -> std::result::Result<RopeScaling, String> {
    let Some(v) = v.filter(|v| v.is_object()) else { return Ok(RopeScaling::Default) };
    let kind = v.get("rope_type").or_else(|| v.get("type")).and_then(Value::as_str).unwrap_or("default");
    let num =
        |k: &str| v.get(k).and_then(Value::as_f64).ok_or_else(|| format!("rope type `{kind}` needs `{k}`"));
    match kind {
        "default" => Ok(RopeScaling::Default),
        "linear" => Ok(RopeScaling::Linear { factor: num("factor")? }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")?,
        }),
        other => Err(format!("rope type `{other}` is not supported (supported: default, linear, llama3)")),
    }
}

/// torch's dtype names as configs write them (`"bfloat16"`, `"float32"`, …).
pub fn parse_dtype(name: &str) -> Option<DType> {
    match name.trim_start_matches("torch.") {
        "float32" | "float" | "f32" => Some(DType::F32),
        "bfloat16" | "bf16" => Some(DType::BF16),
        "float16" | "half" | "f16" => Some(DType::F16),
        "float64" | "f64" => Some(DType::F64),
        _ => None,
    }
}

/// The config name transformers writes for `dtype`.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::F64 => "float64",
        _ => "float32",
    }
}
