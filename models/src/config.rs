//! `config.json` of a Hugging Face checkpoint, in both formats: transformers 4's (top-level
//! `rope_theta`, `rope_scaling`, `torch_dtype`; most checkpoints on the Hub) and transformers
//! 5's (`rope_parameters` holding `rope_theta` and `rope_type`, `dtype`). GPT-2's own names
//! (`n_embd`, `n_layer`, …) are read too. What a field does not say takes transformers'
//! default for that `model_type`.

use eager::nn::RopeScaling;
use eager::DType;
use serde_json::Value;

/// The fields the architectures here read; `raw` keeps the whole file (saved back as it was).
#[derive(Debug, Clone)]
pub struct Config {
    /// `model_type` (`gpt2`, `gpt_neox`, `llama`, `mistral`, `mixtral`, `qwen2`, `qwen3`, `phi3`, `bert`).
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
    /// Experts of each layer's sparse MLP (Mixtral's `num_local_experts`); 0: a dense MLP.
    pub num_experts: usize,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub num_experts_per_tok: usize,
    /// Whether the chosen experts' router weights are renormalised to sum to 1.
    pub norm_topk_prob: bool,
    /// Width of each routed expert (Qwen-MoE's `moe_intermediate_size`; Mixtral's
    /// `intermediate_size`).
    pub moe_intermediate_size: usize,
    /// Width of the expert every token takes beside the routed ones (Qwen2-MoE's
    /// `shared_expert_intermediate_size`); 0: none.
    pub shared_expert_intermediate_size: usize,
    /// Per layer, whether its MLP is the experts (Qwen-MoE's `decoder_sparse_step` and
    /// `mlp_only_layers`; every layer for Mixtral).
    pub sparse_layers: Vec<bool>,
    /// The checkpoint's names for the experts' block and projections.
    pub moe_names: MoeNames,
    /// Added to every RMSNorm's weight (Gemma's `1 + weight`: 1; else 0).
    pub norm_offset: f64,
    /// Norms after attention and after the MLP too, as well as before (Gemma 2 and 3's
    /// `pre_feedforward_layernorm`, `post_feedforward_layernorm`).
    pub sandwich_norms: bool,
    /// The token embeddings are multiplied by √hidden, rounded to the weights' dtype (Gemma).
    pub scale_embeddings: bool,
    /// Multiplies the attention scores (Gemma's `query_pre_attn_scalar^-½`); `None`: `1 / √head_dim`.
    pub attn_scale: Option<f64>,
    /// Soft cap on the attention scores (Gemma 2's `attn_logit_softcapping`).
    pub attn_softcap: Option<f64>,
    /// Soft cap on the logits (Gemma 2's `final_logit_softcapping`).
    pub final_softcap: Option<f64>,
    /// The rope base of the sliding-window layers where it differs (Gemma 3's
    /// `rope_local_base_freq`, or `rope_parameters.sliding_attention`).
    pub rope_local_theta: Option<f64>,
    /// Sliding-window attention's window on the layers that use it (Mistral's and Phi-3's
    /// `sliding_window`; Qwen2's and Qwen3's when `use_sliding_window`): a query at position
    /// `i` attends keys `j` with `i - window < j <= i`. `None`: every layer attends fully.
    pub sliding_window: Option<usize>,
    /// Per layer, whether it attends within [`Config::sliding_window`] (Mistral, Phi-3: every layer;
    /// Qwen2 and Qwen3: `layer_types`' `sliding_attention` entries, else the layers from
    /// `max_window_layers` on). All false when there is no window.
    pub sliding_layers: Vec<bool>,
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

/// How a family names its experts: the block (`block_sparse_moe`, `mlp`) and each expert's
/// gate, up and down projections (`w1`, `w3`, `w2`; `gate_proj`, `up_proj`, `down_proj`).
#[derive(Debug, Clone, Default)]
pub struct MoeNames {
    /// The experts' block under each layer.
    pub block: &'static str,
    /// An expert's gate projection.
    pub gate: &'static str,
    /// An expert's up projection.
    pub up: &'static str,
    /// An expert's down projection.
    pub down: &'static str,
}

impl Config {
    /// The fields every family shares, read as transformers reads them for `model_type`; a
    /// family's own fields and the sliding window are read after (`family.rs`, where
    /// [`Config::from_file`] and [`Config::from_value`] are).
    pub(crate) fn parse_common(raw: Value) -> std::result::Result<Config, String> {
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
        let rope_scaling = match parse_rope_scaling(scaling.as_ref()) {
            // Phi-3's long-context rope is refused by name when the model is built (`phi3::check`).
            Err(_) if model_type == "phi3" => RopeScaling::Default,
            r => r?,
        };
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
        let config = Config {
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
            num_experts: 0,
            num_experts_per_tok: 0,
            norm_topk_prob: false,
            moe_intermediate_size: 0,
            shared_expert_intermediate_size: 0,
            sparse_layers: Vec::new(),
            moe_names: MoeNames::default(),
            norm_offset: 0.0,
            sandwich_norms: false,
            scale_embeddings: false,
            attn_scale: None,
            attn_softcap: None,
            final_softcap: None,
            rope_local_theta: None,
            sliding_window: None,
            sliding_layers: Vec::new(),
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
        Ok(config)
    }
}

/// How a family reads its sliding window (each family's rule is in `family.rs`).
pub(crate) struct SlidingRule {
    /// Whether the config's window applies at all (Qwen's `use_sliding_window`; Mixtral only
    /// when `sliding_window` is set).
    pub enabled: bool,
    /// The window when the config has no `sliding_window` field (Mistral's and the Gemmas'
    /// 4096; Phi-3's none).
    pub default_window: Option<usize>,
    /// Whether `layer_types` names the sliding layers (Qwen, Gemma); otherwise every layer slides.
    pub per_layer: bool,
    /// The sliding layers when `layer_types` is absent (`per_layer` families).
    pub default_layers: Vec<bool>,
}

/// [`Config::sliding_window`] and [`Config::sliding_layers`] by a family's `rule`: a query at
/// position `i` attends keys `j` with `i - window < j <= i`; `sliding_window` null means none.
pub(crate) fn read_sliding_window(cfg: &mut Config, rule: SlidingRule) -> std::result::Result<(), String> {
    let n = cfg.num_hidden_layers;
    cfg.sliding_layers = vec![false; n];
    let raw = &cfg.raw;
    if !rule.enabled {
        return Ok(());
    }
    let window = match raw.get("sliding_window") {
        None => rule.default_window,
        Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(w) if w > 0 => Some(w as usize),
            _ => return Err(format!("`sliding_window` must be a positive whole number, got {v}")),
        },
    };
    let Some(window) = window else { return Ok(()) };
    cfg.sliding_layers = if !rule.per_layer {
        vec![true; n]
    } else if let Some(types) = raw.get("layer_types").filter(|v| !v.is_null()) {
        let types = types.as_array().ok_or("`layer_types` must be a list")?;
        if types.len() != n {
            return Err(format!("`layer_types` has {} entries for {n} layers", types.len()));
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(format!("layer type {t} is not supported (full_attention, sliding_attention)")),
            })
            .collect::<std::result::Result<_, String>>()?
    } else {
        if rule.default_layers.len() != n {
            return Err(format!("{} default sliding layers for {n} layers", rule.default_layers.len()));
        }
        rule.default_layers
    };
    if cfg.sliding_layers.iter().any(|&s| s) {
        cfg.sliding_window = Some(window);
    }
    Ok(())
}

/// `rope_scaling` (transformers 4) or `rope_parameters` (5): `rope_type` (or the older `type`).
pub(crate) fn parse_rope_scaling(v: Option<&Value>) -> std::result::Result<RopeScaling, String> {
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
