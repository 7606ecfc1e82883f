//! The HTTP front end, thin over the engine: OpenAI's routes (`GET /v1/models`, `POST
//! /v1/completions`, `POST /v1/chat/completions`, streamed as server-sent events ending in
//! `data: [DONE]`), `GET /health` and `GET /metrics`. It tokenizes, checks, hands the request
//! to the engine and turns the engine's events into JSON; a client that goes away drops its
//! event receiver, which cancels the request at the engine's next step.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eager_models::tokenizer::Message;
use eager_models::Tokenizer;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Engine, Event};
use crate::metrics::Outcome;
use crate::openai::{self, ApiError, ChatRequest, CompletionRequest, PromptInput};

/// What every handler reads.
pub struct AppState {
    /// The engine requests go to.
    pub engine: Arc<Engine>,
    /// The checkpoint's tokenizer (and chat template).
    pub tokenizer: Arc<Tokenizer>,
    /// The name clients ask for in `model`.
    pub model: String,
    /// Requests to `/v1` need `Authorization: Bearer KEY` when set.
    pub api_key: Option<String>,
    /// Set once the server shuts down: new requests get 503.
    pub closing: AtomicBool,
}

/// The routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .merge(v1)
        .fallback(|| async {
            error(&ApiError {
                status: 404,
                message: "no such route".into(),
                kind: "invalid_request_error",
                param: None,
                code: None,
            })
        })
        .with_state(state)
}

fn error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = (status, Json(e.body())).into_response();
    if e.status == 503 {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

async fn authorize(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given.and_then(|v| v.strip_prefix("Bearer ")) != Some(key.as_str()) {
            s.engine.metrics().request(Outcome::Invalid);
            return error(&ApiError {
                status: 401,
                message: "a valid API key is needed: send `Authorization: Bearer KEY`".into(),
                kind: "authentication_error",
                param: None,
                code: Some("invalid_api_key"),
            });
        }
    }
    next.run(req).await
}

async fn metrics(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.engine.metrics().render())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": s.model, "object": "model", "created": now(), "owned_by": "eager",
        "max_model_len": s.engine.info().max_model_len,
    }]}))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError {
        status: 400,
        message: format!("the body is not a valid request: {e}"),
        kind: "invalid_request_error",
        param: None,
        code: None,
    })
}

/// Which endpoint a response is for.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

async fn completions(State(s): State<Arc<AppState>>, _: HeaderMap, body: Bytes) -> Response {
    let run = || -> Result<(Vec<u32>, CompletionRequest), ApiError> {
        let req: CompletionRequest = parse(&body)?;
        let ids = match req.prompt.single(s.engine.info().vocab_size)? {
            PromptInput::Tokens(t) => t,
            PromptInput::Text(t) => {
                s.tokenizer.encode(&t, true).map_err(|e| ApiError::invalid("prompt", e.to_string()))?
            }
        };
        Ok((ids, req))
    };
    match run() {
        Ok((ids, req)) => generate(&s, ids, &req.common, Kind::Completion, 16).await,
        Err(e) => invalid(&s, e),
    }
}

async fn chat_completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let run = || -> Result<(Vec<u32>, ChatRequest), ApiError> {
        let req: ChatRequest = parse(&body)?;
        if req.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages must not be empty"));
        }
        let messages = req
            .messages
            .iter()
            .map(|m| Ok(Message { role: m.role.clone(), content: m.text()? }))
            .collect::<Result<Vec<_>, ApiError>>()?;
        let text = s
            .tokenizer
            .apply_chat_template(&messages, true)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        // The template writes the special tokens itself, as apply_chat_template(tokenize=True).
        let ids =
            s.tokenizer.encode(&text, false).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        Ok((ids, req))
    };
    match run() {
        Ok((ids, req)) => {
            let room = s.engine.info().max_model_len.saturating_sub(ids.len()).max(1);
            generate(&s, ids, &req.common, Kind::Chat, room).await
        }
        Err(e) => invalid(&s, e),
    }
}

fn invalid(s: &AppState, e: ApiError) -> Response {
    s.engine.metrics().request(if e.status == 503 { Outcome::Refused } else { Outcome::Invalid });
    error(&e)
}

async fn generate(
    s: &Arc<AppState>,
    ids: Vec<u32>,
    common: &openai::Common,
    kind: Kind,
    default_max: usize,
) -> Response {
    let params = match openai::sampling(common, &s.model, default_max) {
        Ok(p) => p,
        Err(e) => return invalid(s, e),
    };
    let limit = s.engine.info().max_model_len;
    if ids.is_empty() {
        return invalid(s, ApiError::invalid("prompt", "the prompt has no tokens"));
    }
    if ids.len() + params.max_tokens > limit {
        return invalid(
            s,
            ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::invalid(
                    "max_tokens",
                    format!(
                        "This model's maximum context length is {limit} tokens. However, you requested {} tokens ({} in the prompt, {} for the completion).",
                        ids.len() + params.max_tokens,
                        ids.len(),
                        params.max_tokens
                    ),
                )
            },
        );
    }
    let overloaded = |message: String| ApiError {
        status: 503,
        message,
        kind: "server_error",
        param: None,
        code: Some("overloaded"),
    };
    if s.closing.load(Ordering::Acquire) {
        return invalid(s, overloaded("the server is shutting down".into()));
    }
    let submitted = match s.engine.submit(ids, params) {
        Ok(sub) => sub,
        // A full queue or a stopped engine: the client may retry.
        Err(refusal) => return invalid(s, overloaded(refusal.to_string())),
    };
    let id = format!("{}-{}", if kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, uuid());
    let reply = Reply { id, created: now(), model: s.model.clone(), kind };
    if common.stream {
        let usage = common.stream_options.as_ref().is_some_and(|o| o.include_usage);
        stream(reply, submitted.events, usage).into_response()
    } else {
        whole(reply, submitted.events).await
    }
}

/// A request id: the time and a counter (unique in the process).
fn uuid() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{t:x}{n:04x}")
}

struct Reply {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// A stream chunk carrying `text` (or the chat role first) and a finish reason.
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        let choice = match self.kind {
            Kind::Completion => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
            Kind::Chat => {
                let mut delta = json!({});
                if role {
                    delta["role"] = json!("assistant");
                    delta["content"] = json!("");
                }
                if let Some(t) = text {
                    delta["content"] = json!(t);
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
        };
        json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model, "choices": [choice]})
    }
}

async fn whole(reply: Reply, mut events: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Done { reason, prompt_tokens, completion_tokens } => {
                let choice = match reply.kind {
                    Kind::Completion => {
                        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason.as_str()})
                    }
                    Kind::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                                         "logprobs": null, "finish_reason": reason.as_str()}),
                };
                return Json(json!({"id": reply.id, "object": reply.object(false), "created": reply.created,
                    "model": reply.model, "choices": [choice], "usage": openai::usage(prompt_tokens, completion_tokens)}))
                .into_response();
            }
            Event::Failed(msg) => return engine_failed(msg),
        }
    }
    engine_failed("the engine stopped".into())
}

fn engine_failed(message: String) -> Response {
    error(&ApiError { status: 500, message, kind: "server_error", param: None, code: None })
}

/// The events as server-sent events: chunks, the finish, `usage` if asked, then `[DONE]`.
/// The stream owns the event receiver: a client that hangs up drops it, cancelling the request.
fn stream(
    reply: Reply,
    events: UnboundedReceiver<Event>,
    usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut first = VecDeque::new();
    if reply.kind == Kind::Chat {
        first.push_back(SseEvent::default().data(reply.chunk(None, true, None).to_string()));
    }
    let state = (Some(events), first, reply);
    Sse::new(futures_util::stream::unfold(state, move |(mut rx, mut queue, reply)| async move {
        loop {
            if let Some(ev) = queue.pop_front() {
                return Some((Ok(ev), (rx, queue, reply)));
            }
            let ev = rx.as_mut()?.recv().await;
            let data = |v: Value| SseEvent::default().data(v.to_string());
            match ev {
                Some(Event::Text(t)) => queue.push_back(data(reply.chunk(Some(&t), false, None))),
                Some(Event::Done { reason, prompt_tokens, completion_tokens }) => {
                    queue.push_back(data(reply.chunk(None, false, Some(reason.as_str()))));
                    if usage {
                        queue.push_back(data(json!({"id": reply.id, "object": reply.object(true),
                            "created": reply.created, "model": reply.model, "choices": [],
                            "usage": openai::usage(prompt_tokens, completion_tokens)})));
                    }
                    queue.push_back(SseEvent::default().data("[DONE]"));
                    rx = None;
                }
                Some(Event::Failed(msg)) => {
                    queue.push_back(data(json!({"error": {"message": msg, "type": "server_error", "param": null, "code": null}})));
                    queue.push_back(SseEvent::default().data("[DONE]"));
                    rx = None;
                }
                None => {
                    queue.push_back(data(json!({"error": {"message": "the engine stopped", "type": "server_error", "param": null, "code": null}})));
                    queue.push_back(SseEvent::default().data("[DONE]"));
                    rx = None;
                }
            }
        }
    }))
}
