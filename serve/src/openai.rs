//! OpenAI's API shapes: the bodies `POST /v1/completions` and `POST /v1/chat/completions`
//! take, their checks (each failure an [`ApiError`] naming the parameter, as OpenAI's error
//! JSON does), and the JSON of responses and stream chunks.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::SamplingParams;

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

/// The parameters both endpoints share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    /// The model asked for (must be the one served).
    pub model: Option<String>,
    /// Most tokens to generate.
    pub max_tokens: Option<i64>,
    /// The chat endpoint's newer name for `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature, 0 to 2 (0: greedy).
    pub temperature: Option<f64>,
    /// Nucleus sampling's mass, in (0, 1].
    pub top_p: Option<f64>,
    /// Completions asked for (1 only).
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
}

/// `POST /v1/completions`'s body.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Its text: a string, or a list of `{"type": "text", "text": …}` parts.
    pub content: Value,
}

/// `POST /v1/chat/completions`'s body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

impl ChatMessage {
    /// The message's text (text parts joined).
    pub fn text(&self) -> Result<String, ApiError> {
        match &self.content {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            Value::Array(parts) => parts
                .iter()
                .map(|p| {
                    match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => Ok(t.to_string()),
                        _ => Err(ApiError::invalid("messages", "only text content parts are supported")),
                    }
                })
                .collect(),
            _ => Err(ApiError::invalid(
                "messages",
                "a message's content must be a string or a list of text parts",
            )),
        }
    }
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

/// The sampling parameters of `common`, checked: `default_max` when no `max_tokens` is given.
pub fn sampling(common: &Common, served: &str, default_max: usize) -> Result<SamplingParams, ApiError> {
    if let Some(m) = &common.model {
        if m != served {
            return Err(ApiError {
                status: 404,
                message: format!("The model `{m}` does not exist; this server serves `{served}`"),
                kind: "invalid_request_error",
                param: Some("model".into()),
                code: Some("model_not_found"),
            });
        }
    }
    if let Some(n) = common.n {
        if n != 1 {
            return Err(ApiError::invalid("n", format!("n must be 1 here, got {n}")));
        }
    }
    let max = common.max_completion_tokens.or(common.max_tokens);
    let max_tokens = match max {
        None => default_max,
        Some(m) if m >= 1 => m as usize,
        Some(m) => {
            return Err(ApiError::invalid("max_tokens", format!("max_tokens must be at least 1, got {m}")))
        }
    };
    let temperature = common.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be in [0, 2], got {temperature}"),
        ));
    }
    if let Some(p) = common.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid("top_p", format!("top_p must be in (0, 1], got {p}")));
        }
    }
    let stop = match &common.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() <= 4 => v.clone(),
        Some(Stop::Many(v)) => {
            return Err(ApiError::invalid("stop", format!("at most 4 stop strings, got {}", v.len())))
        }
    };
    Ok(SamplingParams {
        max_tokens,
        temperature,
        top_p: common.top_p.filter(|&p| p < 1.0),
        seed: common.seed.map(|s| s as u64),
        stop,
    })
}

/// The `usage` object.
pub fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(v: Value) -> Common {
        serde_json::from_value(v).expect("a body")
    }

    #[test]
    fn parameters_are_checked_and_named() {
        let ok = sampling(
            &common(json!({"model": "m", "max_tokens": 5, "temperature": 0, "stop": "\n"})),
            "m",
            16,
        )
        .expect("valid");
        assert_eq!((ok.max_tokens, ok.temperature, ok.stop), (5, 0.0, vec!["\n".to_string()]));
        let e = sampling(&common(json!({"model": "other"})), "m", 16).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")));
        let e = sampling(&common(json!({"temperature": 3.5})), "m", 16).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("temperature")));
        let e = sampling(&common(json!({"max_tokens": 0})), "m", 16).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = sampling(&common(json!({"top_p": 0})), "m", 16).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("top_p"));
        let e = sampling(&common(json!({"n": 2})), "m", 16).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n"));
        assert_eq!(sampling(&common(json!({})), "m", 16).expect("defaults").max_tokens, 16);
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
    }
}
