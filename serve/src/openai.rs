//! OpenAI's API shapes: the bodies `POST /v1/completions` and `POST /v1/chat/completions`
//! take, their checks (each failure an [`ApiError`] naming the parameter, as OpenAI's error
//! JSON does); the JSON of responses is `response`'s.

use std::collections::HashMap;

use eager_models::GenerationConfig;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::sampling::SamplingParams;
use crate::structured::Constraint;

/// An error as OpenAI returns it: an HTTP status and `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, `authentication_error`, …).
    pub kind: &'static str,
    /// The parameter at fault, if one is.
    pub param: Option<String>,
    /// OpenAI's `code` (`model_not_found`, `context_length_exceeded`, …), if one applies.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 for `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
        }
    }

    /// The error's JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// A prompt as the completions endpoint takes it: text, token ids, or a list of one of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// Token ids.
    Tokens(Vec<i64>),
    /// A list of texts (one is served).
    Texts(Vec<String>),
    /// A list of token-id lists (one is served).
    TokenLists(Vec<Vec<i64>>),
}

/// `stop`: one string or up to four.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// A last chunk carries `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// The parameters both endpoints share: OpenAI's, and vLLM's sampling extensions.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    /// The model asked for (must be the one served, by its name or its path).
    pub model: Option<String>,
    /// Most tokens to generate.
    pub max_tokens: Option<i64>,
    /// The chat endpoint's newer name for `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature, 0 to 2 (0: greedy).
    pub temperature: Option<f64>,
    /// Nucleus sampling's mass, in (0, 1].
    pub top_p: Option<f64>,
    /// Choices generated from the prompt.
    pub n: Option<i64>,
    /// Stream as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// What the stream carries.
    pub stream_options: Option<StreamOptions>,
    /// The sampling's seed.
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// OpenAI's presence penalty, -2 to 2.
    pub presence_penalty: Option<f64>,
    /// OpenAI's frequency penalty, -2 to 2.
    pub frequency_penalty: Option<f64>,
    /// vLLM's (and transformers') repetition penalty, above 0.
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string) to a bias from -100 to 100 added to its logit.
    pub logit_bias: Option<HashMap<String, f64>>,
    /// vLLM's `top_k` (0 or -1: no limit).
    pub top_k: Option<i64>,
    /// vLLM's `min_p`, 0 to 1.
    pub min_p: Option<f64>,
    /// vLLM's `stop_token_ids`: tokens that end the sequence.
    pub stop_token_ids: Option<Vec<i64>>,
    /// vLLM's `ignore_eos`: the end-of-sequence token does not end it.
    pub ignore_eos: Option<bool>,
    /// vLLM's `min_tokens`: fewest tokens before an end token or stop string may end it.
    pub min_tokens: Option<i64>,
    /// An end user's id (OpenAI's `user`): logged nowhere, it changes nothing in the answer.
    pub user: Option<String>,
    /// OpenAI's output format: `text`, `json_object`, or `json_schema` with its `schema`.
    pub response_format: Option<Value>,
    /// vLLM's structured outputs: one of `json` (a schema), `regex`, `choice`, `grammar` (Lark).
    pub structured_outputs: Option<Value>,
    /// Every other field: refused with a 400 naming it (null values aside), never ignored.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, Value>,
}

/// `POST /v1/completions`'s body.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// The logprob of each token and this many most likely alternatives (0 to 20).
    pub logprobs: Option<i64>,
    /// The prompt comes back before the completion (with its logprobs when `logprobs` is set).
    #[serde(default)]
    pub echo: bool,
    /// Text after the completion (insertion): refused, no model here is trained for it.
    pub suffix: Option<String>,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer` (rendered as `system`), `user` or `assistant`.
    pub role: String,
    /// Its text: a string, or a list of `{"type": "text", "text": …}` parts (null for an
    /// assistant's message that only calls tools).
    #[serde(default)]
    pub content: Value,
    /// An assistant's calls of tools (`[{id, type: "function", function: {name, arguments}}]`).
    pub tool_calls: Option<Value>,
    /// A tool message's answer is to this call.
    pub tool_call_id: Option<String>,
    /// Every other field (`name`, `tool_calls`, …): refused, never ignored.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, Value>,
}

/// `POST /v1/chat/completions`'s body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Each generated token's logprob.
    #[serde(default)]
    pub logprobs: bool,
    /// And this many most likely alternatives (0 to 20; needs `logprobs`).
    pub top_logprobs: Option<i64>,
    /// The functions the model may call (rendered by the chat template).
    pub tools: Option<Value>,
    /// `"none"`, `"required"` or a named function (`"auto"` is refused, see `tools`).
    pub tool_choice: Option<Value>,
    /// Whether several calls may come in one reply: one call is made either way.
    pub parallel_tool_calls: Option<bool>,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

impl ChatMessage {
    /// The message as the chat template receives it: its role checked (`developer` becomes
    /// `system`, as OpenAI's older models read it), its text (text parts joined), an
    /// assistant's tool calls (their arguments as objects, as templates read them) and a tool
    /// message's call id.
    pub fn to_template(&self, i: usize) -> Result<Value, ApiError> {
        let param = format!("messages[{i}]");
        let field = |f: &str| format!("{param}.{f}");
        if let Some(k) = first_set(&self.unknown) {
            return Err(ApiError::invalid(
                &field(k),
                format!("`{k}` in a message is not supported by this server"),
            ));
        }
        let role = match self.role.as_str() {
            "system" | "user" | "assistant" | "tool" => self.role.as_str(),
            "developer" => "system",
            other => {
                return Err(ApiError::invalid(
                    &field("role"),
                    format!("unknown role `{other}`: one of system, developer, user, assistant, tool"),
                ))
            }
        };
        let calls = self.tool_calls.as_ref().filter(|c| !c.is_null());
        if calls.is_some() && role != "assistant" {
            return Err(ApiError::invalid(&field("tool_calls"), "only an assistant's message calls tools"));
        }
        let content = match &self.content {
            Value::String(s) => Value::String(s.clone()),
            Value::Array(parts) => Value::String(
                parts
                    .iter()
                    .map(|p| {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => Ok(t.to_string()),
                            _ => Err(ApiError::invalid(&param, "only text content parts are supported")),
                        }
                    })
                    .collect::<Result<String, ApiError>>()?,
            ),
            Value::Null if calls.is_some() => Value::Null,
            Value::Null => {
                return Err(ApiError::invalid(
                    &field("content"),
                    format!("a {} message needs content (a string or text parts), got null", self.role),
                ))
            }
            _ => {
                return Err(ApiError::invalid(
                    &field("content"),
                    "a message's content must be a string or a list of text parts",
                ))
            }
        };
        let mut m = json!({"role": role, "content": content});
        if let Some(calls) = calls {
            m["tool_calls"] =
                template_calls(calls).map_err(|e| ApiError::invalid(&field("tool_calls"), e))?;
        }
        match (role, &self.tool_call_id) {
            ("tool", Some(id)) => m["tool_call_id"] = json!(id),
            ("tool", None) => {
                return Err(ApiError::invalid(&field("tool_call_id"), "a tool message needs tool_call_id"))
            }
            (_, Some(_)) => {
                return Err(ApiError::invalid(&field("tool_call_id"), "only a tool message answers a call"))
            }
            _ => {}
        }
        Ok(m)
    }
}

/// An assistant's `tool_calls` as templates read them: each function's `arguments` (a JSON
/// string on the wire) parsed into an object, as vLLM and transformers pass them.
fn template_calls(calls: &Value) -> Result<Value, String> {
    let list = calls.as_array().ok_or("tool_calls must be a list")?;
    list.iter()
        .map(|c| {
            let f = c.get("function").ok_or("a tool call needs its function")?;
            let name =
                f.get("name").and_then(Value::as_str).ok_or("a tool call's function needs its name")?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s)
                    .map_err(|e| format!("the arguments of `{name}` are not JSON: {e}"))?,
                Some(v) => v.clone(),
                None => json!({}),
            };
            let mut out = c.clone();
            out["function"]["arguments"] = arguments;
            Ok(out)
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Value::Array)
}

impl ChatRequest {
    /// The number of alternatives per token, if logprobs are asked for.
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        match (self.logprobs, self.top_logprobs) {
            (false, Some(_)) => Err(ApiError::invalid("top_logprobs", "top_logprobs needs logprobs: true")),
            (false, None) => Ok(None),
            (true, k) => Ok(Some(count("top_logprobs", k.unwrap_or(0), MAX_LOGPROBS)?)),
        }
    }
}

impl CompletionRequest {
    /// Refuses `suffix`; the number of alternatives per token, if logprobs are asked for.
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid("suffix", "suffix (insertion) is not supported by this server"));
        }
        self.logprobs.map(|k| count("logprobs", k, MAX_LOGPROBS)).transpose()
    }
}

/// The constraint on the output that `response_format` or vLLM's `structured_outputs` asks for
/// (not both), checked for its shape; `None` for free text.
pub fn constraint(common: &Common) -> Result<Option<Constraint>, ApiError> {
    let from_format = match &common.response_format {
        None => None,
        Some(f) => {
            let bad = |m: String| ApiError::invalid("response_format", m);
            match f.get("type").and_then(Value::as_str) {
                Some("text") => None,
                Some("json_object") => Some(Constraint::JsonSchema(json!({"type": "object"}))),
                Some("json_schema") => match f.get("json_schema").and_then(|j| j.get("schema")) {
                    Some(schema) if schema.is_object() || schema.is_boolean() => {
                        Some(Constraint::JsonSchema(schema.clone()))
                    }
                    _ => {
                        return Err(bad(
                            "response_format json_schema needs json_schema.schema, a JSON schema".into(),
                        ))
                    }
                },
                _ => {
                    return Err(bad(format!(
                        "response_format's type must be text, json_object or json_schema, got {f}"
                    )))
                }
            }
        }
    };
    let from_vllm = match &common.structured_outputs {
        None => None,
        Some(Value::Object(o)) => {
            let set: Vec<(&String, &Value)> = o.iter().filter(|(_, v)| !v.is_null()).collect();
            let bad = |m: String| ApiError::invalid("structured_outputs", m);
            match set.as_slice() {
                [(k, v)] => Some(match (k.as_str(), v) {
                    ("json", Value::String(s)) => Constraint::JsonSchema(
                        serde_json::from_str(s).map_err(|e| bad(format!("structured_outputs.json: {e}")))?,
                    ),
                    ("json", v) if v.is_object() || v.is_boolean() => Constraint::JsonSchema((*v).clone()),
                    ("json_object", Value::Bool(true)) => Constraint::JsonSchema(json!({"type": "object"})),
                    ("regex", Value::String(r)) => Constraint::Regex(r.clone()),
                    ("grammar", Value::String(g)) => Constraint::Grammar(g.clone()),
                    ("choice", Value::Array(c)) if !c.is_empty() => Constraint::Choice(
                        c.iter()
                            .map(|x| x.as_str().map(String::from))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| bad("structured_outputs.choice must be a list of strings".into()))?,
                    ),
                    (k, _) => {
                        return Err(bad(format!(
                            "structured_outputs.{k} is not supported: one of json, json_object, regex, choice, grammar"
                        )))
                    }
                }),
                _ => {
                    return Err(bad(
                        "structured_outputs takes exactly one of json, json_object, regex, choice, grammar".into(),
                    ))
                }
            }
        }
        Some(other) => {
            return Err(ApiError::invalid("structured_outputs", format!("must be an object, got {other}")))
        }
    };
    match (from_format, from_vllm) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "structured_outputs",
            "give response_format or structured_outputs, not both",
        )),
        (a, b) => Ok(a.or(b)),
    }
}

/// Most alternatives per token (vLLM's default `max_logprobs`).
pub const MAX_LOGPROBS: usize = 20;

fn count(param: &str, k: i64, max: usize) -> Result<usize, ApiError> {
    if k < 0 || k as usize > max {
        return Err(ApiError::invalid(param, format!("{param} must be between 0 and {max}, got {k}")));
    }
    Ok(k as usize)
}

/// The first key of `fields` whose value is not null.
fn first_set(fields: &serde_json::Map<String, Value>) -> Option<&str> {
    let mut keys: Vec<&str> = fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.first().copied()
}

impl Prompt {
    /// The one prompt served: its text, or its token ids checked against the vocabulary.
    pub fn single(&self, vocab: usize) -> Result<PromptInput, ApiError> {
        let ids = |ids: &[i64]| -> Result<PromptInput, ApiError> {
            match ids.iter().find(|&&t| t < 0 || t as usize >= vocab) {
                Some(bad) => Err(ApiError::invalid(
                    "prompt",
                    format!("token id {bad} is outside the vocabulary (0..{vocab})"),
                )),
                None => Ok(PromptInput::Tokens(ids.iter().map(|&t| t as u32).collect())),
            }
        };
        match self {
            Prompt::Text(t) => Ok(PromptInput::Text(t.clone())),
            Prompt::Tokens(t) => ids(t),
            Prompt::Texts(v) if v.len() == 1 => Ok(PromptInput::Text(v[0].clone())),
            Prompt::TokenLists(v) if v.len() == 1 => ids(&v[0]),
            _ => Err(ApiError::invalid(
                "prompt",
                "one prompt per request is served (send a list of one, or one request each)",
            )),
        }
    }
}

/// A prompt before tokenization.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Text, to encode.
    Text(String),
    /// Token ids, as given.
    Tokens(Vec<u32>),
}

/// What requests are checked against: the served model and the checkpoint's defaults.
#[derive(Debug, Clone, Default)]
pub struct Served {
    /// The name in the API, then the other names it answers to (the path it was started with).
    pub names: Vec<String>,
    /// The vocabulary's size (token ids are checked against it).
    pub vocab: usize,
    /// Most choices per request (the engine's slots).
    pub max_n: usize,
    /// Sampling defaults for fields a request leaves out (`generation_config.json`).
    pub defaults: GenerationConfig,
}

/// The sampling parameters of `common`, checked: `default_max` when no `max_tokens` is given
/// (0 allowed when `echo` is set: the prompt alone is scored).
pub fn sampling(
    common: &Common,
    served: &Served,
    default_max: usize,
    echo: bool,
) -> Result<SamplingParams, ApiError> {
    if let Some(m) = &common.model {
        if !served.names.contains(m) {
            return Err(ApiError {
                status: 404,
                message: format!(
                    "The model `{m}` does not exist; this server serves `{}`",
                    served.names.first().map(String::as_str).unwrap_or("")
                ),
                kind: "invalid_request_error",
                param: Some("model".into()),
                code: Some("model_not_found"),
            });
        }
    }
    if let Some(k) = first_set(&common.unknown) {
        return Err(ApiError::invalid(k, format!("`{k}` is not supported by this server")));
    }
    let n = match common.n {
        None => 1,
        Some(n) if n >= 1 && n as usize <= served.max_n => n as usize,
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("n must be between 1 and {} (the server's slots), got {n}", served.max_n),
            ))
        }
    };
    let max = common.max_completion_tokens.or(common.max_tokens);
    let max_tokens = match max {
        None => served.defaults.max_new_tokens.unwrap_or(default_max).min(default_max.max(1)),
        Some(0) if echo => 0,
        Some(m) if m >= 1 => m as usize,
        Some(m) => {
            return Err(ApiError::invalid("max_tokens", format!("max_tokens must be at least 1, got {m}")))
        }
    };
    let d = &served.defaults;
    let temperature = common.temperature.or(d.temperature).unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be in [0, 2], got {temperature}"),
        ));
    }
    let top_p = common.top_p.or(d.top_p);
    if let Some(p) = top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid("top_p", format!("top_p must be in (0, 1], got {p}")));
        }
    }
    let top_k = match common.top_k {
        None => d.top_k.filter(|&k| k > 0),
        Some(0 | -1) => None,
        Some(k) if k > 0 => Some(k as usize),
        Some(k) => {
            return Err(ApiError::invalid("top_k", format!("top_k must be -1, 0 or at least 1, got {k}")))
        }
    };
    let min_p = common.min_p.or(d.min_p).unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::invalid("min_p", format!("min_p must be in [0, 1], got {min_p}")));
    }
    let penalty = |param: &str, v: Option<f64>| -> Result<f32, ApiError> {
        match v {
            Some(x) if !(-2.0..=2.0).contains(&x) => {
                Err(ApiError::invalid(param, format!("{param} must be in [-2, 2], got {x}")))
            }
            v => Ok(v.unwrap_or(0.0) as f32),
        }
    };
    let presence_penalty = penalty("presence_penalty", common.presence_penalty)?;
    let frequency_penalty = penalty("frequency_penalty", common.frequency_penalty)?;
    let repetition_penalty = common.repetition_penalty.or(d.repetition_penalty).unwrap_or(1.0);
    if !(repetition_penalty > 0.0 && repetition_penalty.is_finite()) {
        return Err(ApiError::invalid(
            "repetition_penalty",
            format!("repetition_penalty must be above 0, got {repetition_penalty}"),
        ));
    }
    let token = |param: &str, t: i64| -> Result<u32, ApiError> {
        if t < 0 || t as usize >= served.vocab {
            return Err(ApiError::invalid(
                param,
                format!("token id {t} is outside the vocabulary (0..{})", served.vocab),
            ));
        }
        Ok(t as u32)
    };
    let mut logit_bias = Vec::new();
    for (k, &b) in common.logit_bias.iter().flatten() {
        let id = k.parse::<i64>().map_err(|_| {
            ApiError::invalid("logit_bias", format!("logit_bias keys are token ids, got `{k}`"))
        })?;
        if !(-100.0..=100.0).contains(&b) {
            return Err(ApiError::invalid(
                "logit_bias",
                format!("a bias must be in [-100, 100], got {b} for {k}"),
            ));
        }
        logit_bias.push((token("logit_bias", id)?, b as f32));
    }
    logit_bias.sort_by_key(|b| b.0);
    let stop_token_ids = common
        .stop_token_ids
        .iter()
        .flatten()
        .map(|&t| token("stop_token_ids", t))
        .collect::<Result<_, _>>()?;
    let min_tokens = match common.min_tokens {
        None => 0,
        Some(m) if m >= 0 && m as usize <= max_tokens => m as usize,
        Some(m) => {
            return Err(ApiError::invalid(
                "min_tokens",
                format!("min_tokens must be between 0 and max_tokens ({max_tokens}), got {m}"),
            ))
        }
    };
    let stop = match &common.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() <= 4 => v.clone(),
        Some(Stop::Many(v)) => {
            return Err(ApiError::invalid("stop", format!("at most 4 stop strings, got {}", v.len())))
        }
    };
    if let Some(o) = &common.stream_options {
        if !common.stream && o.include_usage {
            return Err(ApiError::invalid("stream_options", "stream_options needs stream: true"));
        }
    }
    Ok(SamplingParams {
        max_tokens,
        min_tokens,
        temperature,
        top_p: top_p.filter(|&p| p < 1.0),
        top_k,
        min_p,
        seed: common.seed.map(|s| s as u64),
        stop,
        stop_token_ids,
        ignore_eos: common.ignore_eos.unwrap_or(false),
        presence_penalty,
        frequency_penalty,
        repetition_penalty: repetition_penalty as f32,
        logit_bias,
        logprobs: None,
        prompt_logprobs: None,
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(v: Value) -> Common {
        serde_json::from_value(v).expect("a body")
    }

    fn served() -> Served {
        Served {
            names: vec!["m".into(), "/models/m".into()],
            vocab: 10,
            max_n: 4,
            defaults: Default::default(),
        }
    }

    fn check(v: Value) -> Result<SamplingParams, ApiError> {
        sampling(&common(v), &served(), 16, false)
    }

    #[test]
    fn parameters_are_checked_and_named() {
        let ok =
            check(json!({"model": "m", "max_tokens": 5, "temperature": 0, "stop": "\n"})).expect("valid");
        assert_eq!((ok.max_tokens, ok.temperature, ok.stop), (5, 0.0, vec!["\n".to_string()]));
        assert!(check(json!({"model": "/models/m"})).is_ok(), "the path it was started with names it too");
        let e = check(json!({"model": "other"})).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")));
        for (body, param) in [
            (json!({"temperature": 3.5}), "temperature"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"n": 5}), "n"),
            (json!({"n": 0}), "n"),
            (json!({"top_k": -2}), "top_k"),
            (json!({"min_p": 1.5}), "min_p"),
            (json!({"presence_penalty": 2.5}), "presence_penalty"),
            (json!({"frequency_penalty": -3}), "frequency_penalty"),
            (json!({"repetition_penalty": 0}), "repetition_penalty"),
            (json!({"logit_bias": {"12": 1}}), "logit_bias"),
            (json!({"logit_bias": {"x": 1}}), "logit_bias"),
            (json!({"logit_bias": {"3": 101}}), "logit_bias"),
            (json!({"stop_token_ids": [10]}), "stop_token_ids"),
            (json!({"min_tokens": 17}), "min_tokens"),
            (json!({"stream_options": {"include_usage": true}}), "stream_options"),
            (json!({"best_of": 2}), "best_of"),
            (json!({"guided_json": {}}), "guided_json"),
        ] {
            let e = check(body.clone()).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{body}: {}", e.message);
        }
        assert_eq!(check(json!({})).expect("defaults").max_tokens, 16);
        assert!(check(json!({"functions": null})).is_ok(), "a null field asks for nothing");
    }

    #[test]
    fn vllm_extensions_are_read() {
        let p = check(json!({"n": 3, "top_k": 5, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
            "repetition_penalty": 1.2, "logit_bias": {"7": -100, "2": 5.5}, "stop_token_ids": [4], "ignore_eos": true,
            "min_tokens": 3, "seed": 11, "user": "u1"}))
        .expect("valid");
        assert_eq!((p.n, p.top_k, p.min_p, p.min_tokens, p.seed), (3, Some(5), 0.1, 3, Some(11)));
        assert_eq!((p.presence_penalty, p.frequency_penalty, p.repetition_penalty), (0.5, -0.5, 1.2));
        assert_eq!(p.logit_bias, vec![(2, 5.5), (7, -100.0)]);
        assert_eq!((p.stop_token_ids, p.ignore_eos), (vec![4], true));
        assert_eq!(check(json!({"top_k": -1})).expect("no limit").top_k, None);
        // max_tokens 0 scores the prompt alone, with echo only.
        assert_eq!(
            sampling(&common(json!({"max_tokens": 0})), &served(), 16, true).expect("echo").max_tokens,
            0
        );
    }

    #[test]
    fn generation_config_defaults_fill_what_a_request_leaves_out() {
        let s = Served {
            defaults: GenerationConfig {
                temperature: Some(0.6),
                top_p: Some(0.9),
                top_k: Some(20),
                max_new_tokens: Some(8),
                ..Default::default()
            },
            ..served()
        };
        let p = sampling(&common(json!({})), &s, 16, false).expect("valid");
        assert_eq!((p.temperature, p.top_p, p.top_k, p.max_tokens), (0.6, Some(0.9), Some(20), 8));
        let p = sampling(&common(json!({"temperature": 0, "top_k": 0})), &s, 16, false).expect("valid");
        assert_eq!((p.temperature, p.top_k), (0.0, None));
    }

    #[test]
    fn chat_messages_roles_and_content_are_checked() {
        let msg = |v: Value| -> ChatMessage { serde_json::from_value(v).expect("a message") };
        let m = msg(
            json!({"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        );
        let t = m.to_template(0).expect("valid");
        assert_eq!(t, json!({"role": "system", "content": "ab"}));
        // An assistant's call (content null) and the tool's answer, as templates read them.
        let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "now", "arguments": "{\"tz\": \"UTC\"}"}}]});
        let t = msg(call).to_template(1).expect("a call");
        assert_eq!(t["tool_calls"][0]["function"]["arguments"], json!({"tz": "UTC"}));
        assert_eq!(t["content"], Value::Null);
        let t = msg(json!({"role": "tool", "content": "12:00", "tool_call_id": "c1"}))
            .to_template(2)
            .expect("an answer");
        assert_eq!(t, json!({"role": "tool", "content": "12:00", "tool_call_id": "c1"}));
        for (v, param) in [
            (json!({"role": "wizard", "content": "x"}), "messages[0].role"),
            (json!({"role": "user", "content": null}), "messages[0].content"),
            (json!({"role": "user"}), "messages[0].content"),
            (json!({"role": "tool", "content": "x"}), "messages[0].tool_call_id"),
            (json!({"role": "user", "content": "x", "tool_call_id": "1"}), "messages[0].tool_call_id"),
            (json!({"role": "user", "content": "x", "tool_calls": []}), "messages[0].tool_calls"),
            (
                json!({"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}),
                "messages[0].tool_calls",
            ),
            (json!({"role": "user", "content": "x", "name": "bob"}), "messages[0].name"),
            (json!({"role": "user", "content": 3}), "messages[0].content"),
        ] {
            let e = msg(v.clone()).to_template(0).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{v}");
        }
        let chat = |v: Value| -> ChatRequest { serde_json::from_value(v).expect("a chat body") };
        let base = json!({"messages": [{"role": "user", "content": "x"}]});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            chat(b)
        };
        assert_eq!(
            with("top_logprobs", json!(2)).logprobs().unwrap_err().param.as_deref(),
            Some("top_logprobs")
        );
        let mut b = base.clone();
        b["logprobs"] = json!(true);
        b["top_logprobs"] = json!(3);
        assert_eq!(chat(b.clone()).logprobs().expect("valid"), Some(3));
        b["top_logprobs"] = json!(21);
        assert_eq!(chat(b).logprobs().unwrap_err().param.as_deref(), Some("top_logprobs"));
        // The chat request's own fields are not taken for unknown ones.
        let c = chat(json!({"messages": [], "logprobs": true, "model": "m"}));
        assert!(c.common.unknown.is_empty(), "{:?}", c.common.unknown);
    }

    #[test]
    fn structured_output_is_read_from_either_field_and_checked() {
        let c = |v: Value| constraint(&common(v));
        assert_eq!(c(json!({})).expect("none"), None);
        assert_eq!(c(json!({"response_format": {"type": "text"}})).expect("text"), None);
        assert_eq!(
            c(json!({"response_format": {"type": "json_object"}})).expect("object"),
            Some(Constraint::JsonSchema(json!({"type": "object"})))
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            c(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}))
                .expect("schema"),
            Some(Constraint::JsonSchema(schema.clone()))
        );
        assert_eq!(
            c(json!({"structured_outputs": {"json": schema.to_string()}})).expect("a schema as a string"),
            Some(Constraint::JsonSchema(schema))
        );
        assert_eq!(
            c(json!({"structured_outputs": {"choice": ["yes", "no"]}})).expect("choice"),
            Some(Constraint::Choice(vec!["yes".into(), "no".into()]))
        );
        assert_eq!(
            c(json!({"structured_outputs": {"regex": "a+"}})).expect("regex"),
            Some(Constraint::Regex("a+".into()))
        );
        for (v, param) in [
            (json!({"response_format": {"type": "xml"}}), "response_format"),
            (json!({"response_format": {"type": "json_schema"}}), "response_format"),
            (json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}), "structured_outputs"),
            (json!({"structured_outputs": {"choice": [1]}}), "structured_outputs"),
            (json!({"structured_outputs": {"xml": "x"}}), "structured_outputs"),
            (
                json!({"structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}}),
                "structured_outputs",
            ),
        ] {
            let e = c(v.clone()).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{v}");
        }
    }

    #[test]
    fn prompts_of_every_form_and_bad_token_ids() {
        let p: Prompt = serde_json::from_value(json!([1, 2, 3])).expect("ids");
        assert_eq!(p.single(10).expect("in range"), PromptInput::Tokens(vec![1, 2, 3]));
        let p: Prompt = serde_json::from_value(json!(["hi"])).expect("texts");
        assert_eq!(p.single(10).expect("one"), PromptInput::Text("hi".into()));
        let p: Prompt = serde_json::from_value(json!([1, 99])).expect("ids");
        assert!(p.single(10).unwrap_err().message.contains("token id 99"));
        let p: Prompt = serde_json::from_value(json!(["a", "b"])).expect("texts");
        assert_eq!(p.single(10).unwrap_err().param.as_deref(), Some("prompt"));
        let c: CompletionRequest =
            serde_json::from_value(json!({"prompt": "x", "echo": true, "logprobs": 2, "suffix": "y"}))
                .expect("a body");
        assert!(c.common.unknown.is_empty(), "{:?}", c.common.unknown);
        assert_eq!(c.logprobs().unwrap_err().param.as_deref(), Some("suffix"));
    }
}
