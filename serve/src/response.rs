//! The JSON a request gets back, as OpenAI and vLLM write it: whole responses and stream
//! chunks of both endpoints, one choice per sequence of `n`, with `logprobs` in each endpoint's
//! own shape (completions: `tokens`, `token_logprobs`, `top_logprobs`, `text_offset`; chat:
//! `content` entries with `token`, `logprob`, `bytes`, `top_logprobs`), the echoed prompt, and
//! `finish_reason` with vLLM's `stop_reason`.

use std::sync::Arc;

use eager_models::Tokenizer;
use serde_json::{json, Map, Value};

use crate::engine::{FinishReason, StopReason};
use crate::sampling::TokenLogprob;
use crate::tools::{self, ToolMode};

/// Which endpoint a response is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

/// One choice as it accumulates.
#[derive(Debug, Clone, Default)]
pub struct Choice {
    /// Its text so far.
    pub text: String,
    /// Its tokens' logprobs so far (when asked).
    pub logprobs: Vec<TokenLogprob>,
    /// How it ended, once it did.
    pub finish: Option<(FinishReason, Option<StopReason>)>,
    /// Tokens it generated.
    pub completion_tokens: usize,
}

/// A request's prompt, as `usage` counts it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptUsage {
    /// Prompt tokens.
    pub tokens: usize,
    /// Of them, tokens found in the cache.
    pub cached: usize,
}

/// What every response and chunk of one request shares.
pub struct Reply {
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// The endpoint.
    pub kind: Kind,
    /// Whether logprobs were asked for.
    pub logprobs: bool,
    /// The prompt's text and ids, when the completion echoes it.
    pub echo: Option<(String, Vec<u32>)>,
    /// Token texts come from it.
    pub tokenizer: Arc<Tokenizer>,
    /// The reply is a forced tool call of this kind (chat).
    pub tool: Option<ToolMode>,
}

/// The `usage` object, with the prompt tokens found in the cache.
pub fn usage_json(prompt: PromptUsage, completion_tokens: usize) -> Value {
    json!({"prompt_tokens": prompt.tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt.tokens + completion_tokens,
           "prompt_tokens_details": {"cached_tokens": prompt.cached}})
}

fn stop_reason(s: &Option<StopReason>) -> Value {
    match s {
        None => Value::Null,
        Some(StopReason::String(s)) => json!(s),
        Some(StopReason::Token(t)) => json!(t),
    }
}

impl Reply {
    /// `text_completion`, `chat.completion` or `chat.completion.chunk`.
    pub fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// A token's text as a client reads it (special tokens included).
    fn token(&self, id: u32) -> String {
        self.tokenizer.decode(&[id], false).unwrap_or_default()
    }

    /// The completions endpoint's `logprobs` of `entries` (a token and its logprob, none for
    /// the prompt's first), text offsets counted in characters from `offset` on.
    fn completion_logprobs<'a>(
        &self,
        entries: impl Iterator<Item = (u32, Option<&'a TokenLogprob>)>,
        offset: &mut usize,
    ) -> Value {
        let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
        for (id, lp) in entries {
            let text = self.token(id);
            offsets.push(*offset);
            *offset += text.chars().count();
            match lp {
                None => {
                    lps.push(Value::Null);
                    tops.push(Value::Null);
                }
                Some(lp) => {
                    lps.push(json!(lp.logprob));
                    // The chosen token and the most likely ones, as vLLM lists them.
                    let mut top = Map::new();
                    for &(t, l) in &lp.top {
                        top.entry(self.token(t)).or_insert(json!(l));
                    }
                    top.entry(text.clone()).or_insert(json!(lp.logprob));
                    tops.push(Value::Object(top));
                }
            }
            tokens.push(json!(text));
        }
        json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
    }

    /// The chat endpoint's `logprobs`.
    fn chat_logprobs(&self, entries: &[TokenLogprob]) -> Value {
        let entry = |id: u32, lp: f32| {
            let text = self.token(id);
            json!({"token": text, "logprob": lp, "bytes": text.as_bytes()})
        };
        let content: Vec<Value> = entries
            .iter()
            .map(|lp| {
                let mut e = entry(lp.token, lp.logprob);
                e["top_logprobs"] = lp.top.iter().map(|&(t, l)| entry(t, l)).collect();
                e
            })
            .collect();
        json!({"content": content})
    }

    /// The logprobs of `lps` (generated tokens) in this endpoint's shape; `offset` is where
    /// their text starts in the choice's text.
    fn logprobs_of(&self, lps: &[TokenLogprob], offset: &mut usize) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Completion => self.completion_logprobs(lps.iter().map(|l| (l.token, Some(l))), offset),
            Kind::Chat => self.chat_logprobs(lps),
        }
    }

    /// The echoed prompt's text and, with logprobs, its logprobs object to extend.
    fn echo_part(
        &self,
        prompt: Option<&[Option<TokenLogprob>]>,
        offset: &mut usize,
    ) -> (String, Option<Value>) {
        let Some((text, ids)) = &self.echo else { return (String::new(), None) };
        let lps = prompt
            .filter(|_| self.logprobs)
            .map(|p| self.completion_logprobs(ids.iter().zip(p).map(|(&id, lp)| (id, lp.as_ref())), offset));
        (text.clone(), lps)
    }

    /// The tool calls of choice `index` whose text is `text`, once it stopped on its own; `None`
    /// for a reply that is no forced call or did not finish one.
    pub fn calls(
        &self,
        index: usize,
        text: &str,
        finish: &Option<(FinishReason, Option<StopReason>)>,
    ) -> Option<Value> {
        let mode = self.tool.as_ref()?;
        if !matches!(finish, Some((FinishReason::Stop, _))) {
            return None;
        }
        tools::tool_calls(mode, text, &format!("call-{}-{index}", self.id))
    }

    /// The whole response of `choices`, with the prompt's logprobs when echoed.
    pub fn whole(
        &self,
        choices: &[Choice],
        prompt: Option<&[Option<TokenLogprob>]>,
        usage: PromptUsage,
    ) -> Value {
        let out: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let (reason, stop) = c.finish.clone().unwrap_or((FinishReason::Length, None));
                let mut offset = 0;
                match self.kind {
                    Kind::Completion => {
                        let (echo, echo_lps) = self.echo_part(prompt, &mut offset);
                        let mut logprobs = self.logprobs_of(&c.logprobs, &mut offset);
                        if let Some(mut e) = echo_lps {
                            for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
                                let more = logprobs[key].as_array().cloned().unwrap_or_default();
                                e[key].as_array_mut().expect("a list").extend(more);
                            }
                            logprobs = e;
                        }
                        json!({"index": index, "text": echo + &c.text, "logprobs": logprobs,
                               "finish_reason": reason.as_str(), "stop_reason": stop_reason(&stop)})
                    }
                    Kind::Chat => {
                        let logprobs = self.logprobs_of(&c.logprobs, &mut offset);
                        match self.calls(index, &c.text, &c.finish) {
                            Some(calls) => json!({"index": index, "logprobs": logprobs,
                                "message": {"role": "assistant", "content": null, "tool_calls": calls},
                                "finish_reason": "tool_calls", "stop_reason": null}),
                            None => {
                                json!({"index": index, "message": {"role": "assistant", "content": c.text},
                                "logprobs": logprobs, "finish_reason": reason.as_str(),
                                "stop_reason": stop_reason(&stop)})
                            }
                        }
                    }
                }
            })
            .collect();
        let completion_tokens = choices.iter().map(|c| c.completion_tokens).sum();
        json!({"id": self.id, "object": self.object(false), "created": self.created, "model": self.model,
               "choices": out, "usage": usage_json(usage, completion_tokens)})
    }

    /// A stream chunk of choice `index`: `text` with the logprobs of its tokens (their text
    /// starting at `offset` in the choice), the chat role first, a finish reason last.
    pub fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        role: bool,
        lps: &[TokenLogprob],
        offset: &mut usize,
        finish: Option<&(FinishReason, Option<StopReason>)>,
    ) -> Value {
        let logprobs = if lps.is_empty() { Value::Null } else { self.logprobs_of(lps, offset) };
        let (reason, stop) = match finish {
            Some((r, s)) => (json!(r.as_str()), stop_reason(s)),
            None => (Value::Null, Value::Null),
        };
        let choice = match self.kind {
            Kind::Completion => json!({"index": index, "text": text.unwrap_or(""), "logprobs": logprobs,
                                       "finish_reason": reason, "stop_reason": stop}),
            Kind::Chat => {
                let mut delta = json!({});
                if role {
                    delta["role"] = json!("assistant");
                    delta["content"] = json!("");
                }
                if let Some(t) = text {
                    delta["content"] = json!(t);
                }
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason,
                       "stop_reason": stop})
            }
        };
        json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
               "choices": [choice]})
    }

    /// The chunks that end a forced tool call's choice `index` (its text held until now): the
    /// call and `finish_reason: "tool_calls"`, or the text and its finish when it made no call.
    pub fn tool_chunks(
        &self,
        index: usize,
        text: &str,
        lps: &[TokenLogprob],
        finish: &(FinishReason, Option<StopReason>),
    ) -> Vec<Value> {
        match self.calls(index, text, &Some(finish.clone())) {
            Some(calls) => {
                let mut call = self.chunk(index, None, false, lps, &mut 0, None);
                let with_index: Vec<Value> = calls
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut c = c.clone();
                        c["index"] = json!(i);
                        c
                    })
                    .collect();
                call["choices"][0]["delta"] = json!({"tool_calls": with_index});
                let mut end = self.chunk(index, None, false, &[], &mut 0, None);
                end["choices"][0]["finish_reason"] = json!("tool_calls");
                vec![call, end]
            }
            None => vec![
                self.chunk(index, Some(text), false, lps, &mut 0, None),
                self.chunk(index, None, false, &[], &mut 0, Some(finish)),
            ],
        }
    }

    /// The first chunk of an echoing completion's choice: the prompt, with its logprobs when
    /// asked; `offset` moves past it.
    pub fn echo_chunk(
        &self,
        index: usize,
        prompt: Option<&[Option<TokenLogprob>]>,
        offset: &mut usize,
    ) -> Value {
        let (text, lps) = self.echo_part(prompt, offset);
        let mut c = self.chunk(index, Some(&text), false, &[], &mut 0, None);
        c["choices"][0]["logprobs"] = lps.unwrap_or(Value::Null);
        c
    }

    /// The last chunk of a stream that asked for `usage`.
    pub fn usage_chunk(&self, usage: PromptUsage, completion_tokens: usize) -> Value {
        json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
               "choices": [], "usage": usage_json(usage, completion_tokens)})
    }
}
