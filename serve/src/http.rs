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
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eager_models::Tokenizer;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Engine, Event};
use crate::metrics::Outcome;
use crate::openai::{self, ApiError, ChatRequest, CompletionRequest, PromptInput, Served};
use crate::response::{Choice, Kind, PromptUsage, Reply};
use crate::sampling::{SamplingParams, TokenLogprob};
use crate::structured::{Constraint, Grammars};
use crate::tools::{self, ToolMode};

/// What every handler reads.
pub struct AppState {
    /// The engine requests go to.
    pub engine: Arc<Engine>,
    /// The checkpoint's tokenizer (and chat template).
    pub tokenizer: Arc<Tokenizer>,
    /// The names clients ask for in `model` and the checkpoint's sampling defaults.
    pub served: Served,
    /// Requests to `/v1` need `Authorization: Bearer KEY` when set.
    pub api_key: Option<String>,
    /// Set once the server shuts down: new requests get 503.
    pub closing: AtomicBool,
    /// Structured output's parser factory, or why this tokenizer has none.
    pub grammars: Result<Grammars, String>,
}

/// The routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/health", get(health))
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

/// `ok` while the engine runs; 503 once it died (the binary then exits).
async fn health(State(s): State<Arc<AppState>>) -> Response {
    if s.engine.is_alive() {
        "ok".into_response()
    } else {
        error(&ApiError {
            status: 503,
            message: "the engine has stopped".into(),
            kind: "server_error",
            param: None,
            code: Some("engine_dead"),
        })
    }
}

async fn metrics(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.engine.metrics().render())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": s.served.names[0], "object": "model", "created": now(), "owned_by": "eager",
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

/// A checked request, ready for the engine.
struct Job {
    ids: Vec<u32>,
    params: SamplingParams,
    kind: Kind,
    /// The prompt's text, when a completion echoes it.
    echo: Option<String>,
    stream: bool,
    usage: bool,
    /// What the output must match, and the field that asked for it.
    constraint: Option<(Constraint, &'static str)>,
    /// The reply is a tool call of this kind.
    tool: Option<ToolMode>,
}

/// The field a constraint came from, for its errors.
fn constraint_of(common: &openai::Common) -> Result<Option<(Constraint, &'static str)>, ApiError> {
    let field = if common.structured_outputs.is_some() { "structured_outputs" } else { "response_format" };
    Ok(openai::constraint(common)?.map(|c| (c, field)))
}

async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let run = || -> Result<Job, ApiError> {
        let req: CompletionRequest = parse(&body)?;
        let logprobs = req.logprobs()?;
        let (ids, text) = match req.prompt.single(s.engine.info().vocab_size)? {
            PromptInput::Tokens(t) => {
                let text =
                    s.tokenizer.decode(&t, true).map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
                (t, text)
            }
            PromptInput::Text(t) => {
                (s.tokenizer.encode(&t, true).map_err(|e| ApiError::invalid("prompt", e.to_string()))?, t)
            }
        };
        let mut params = openai::sampling(&req.common, &s.served, 16, req.echo)?;
        params.logprobs = logprobs;
        if req.echo {
            params.prompt_logprobs = logprobs;
        }
        Ok(Job {
            ids,
            params,
            kind: Kind::Completion,
            echo: req.echo.then_some(text),
            stream: req.common.stream,
            usage: req.common.stream_options.as_ref().is_some_and(|o| o.include_usage),
            constraint: constraint_of(&req.common)?,
            tool: None,
        })
    };
    match run() {
        Ok(job) => generate(&s, job).await,
        Err(e) => invalid(&s, e),
    }
}

async fn chat_completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let run = || -> Result<Job, ApiError> {
        let req: ChatRequest = parse(&body)?;
        if req.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages must not be empty"));
        }
        let tool = tools::tool_choice(req.tools.as_ref(), req.tool_choice.as_ref())?;
        let logprobs = req.logprobs()?;
        let messages =
            req.messages.iter().enumerate().map(|(i, m)| m.to_template(i)).collect::<Result<Vec<_>, _>>()?;
        let declared = req.tools.as_ref().filter(|t| !t.is_null());
        let text = s
            .tokenizer
            .render_chat(&Value::Array(messages), declared, true)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        // The template writes the special tokens itself, as apply_chat_template(tokenize=True).
        let ids =
            s.tokenizer.encode(&text, false).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        let room = s.engine.info().max_model_len.saturating_sub(ids.len()).max(1);
        let mut params = openai::sampling(&req.common, &s.served, room, false)?;
        params.logprobs = logprobs;
        Ok(Job {
            ids,
            params,
            kind: Kind::Chat,
            echo: None,
            stream: req.common.stream,
            usage: req.common.stream_options.as_ref().is_some_and(|o| o.include_usage),
            constraint: match (constraint_of(&req.common)?, &tool) {
                (Some(_), Some(_)) => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "a forced tool call and response_format together",
                    ))
                }
                (c, None) => c,
                (None, Some((_, c))) => Some((c.clone(), "tools")),
            },
            tool: tool.map(|t| t.0),
        })
    };
    match run() {
        Ok(job) => generate(&s, job).await,
        Err(e) => invalid(&s, e),
    }
}

fn invalid(s: &AppState, e: ApiError) -> Response {
    s.engine.metrics().request(if e.status == 503 { Outcome::Refused } else { Outcome::Invalid });
    error(&e)
}

async fn generate(s: &Arc<AppState>, job: Job) -> Response {
    let Job { ids, params, kind, echo, stream, usage, constraint, tool } = job;
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
    // A grammar is compiled once per request, here and not on the engine thread.
    let matcher = match constraint {
        None => None,
        Some((c, field)) => {
            let grammars = match &s.grammars {
                Ok(g) => g.clone(),
                Err(why) => return invalid(s, ApiError::invalid(field, why.clone())),
            };
            match tokio::task::spawn_blocking(move || grammars.matcher(&c)).await {
                Ok(Ok(m)) => Some(m),
                Ok(Err(e)) => {
                    return invalid(
                        s,
                        ApiError::invalid(field, format!("the constraint does not compile: {e}")),
                    )
                }
                Err(e) => return engine_failed(format!("compiling the constraint failed: {e}")),
            }
        }
    };
    let n = params.n;
    let logprobs = params.logprobs.is_some();
    let prompt_ids = ids.clone();
    let submitted = match s.engine.submit(ids, params, matcher) {
        Ok(sub) => sub,
        // A full queue or a stopped engine: the client may retry.
        Err(refusal) => return invalid(s, overloaded(refusal.to_string())),
    };
    let id = format!("{}-{}", if kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, uuid());
    let reply = Reply {
        id,
        created: now(),
        model: s.served.names[0].clone(),
        kind,
        logprobs,
        echo: echo.map(|t| (t, prompt_ids)),
        tokenizer: s.tokenizer.clone(),
        tool,
    };
    if stream {
        stream_events(reply, submitted.events, n, usage).into_response()
    } else {
        whole(reply, submitted.events, n).await
    }
}

/// A request id: the time and a counter (unique in the process).
fn uuid() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{t:x}{n:04x}")
}

async fn whole(reply: Reply, mut events: UnboundedReceiver<Event>, n: usize) -> Response {
    let mut choices = vec![Choice::default(); n];
    let mut prompt = None;
    let mut usage = PromptUsage::default();
    let mut open = n;
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Prompt(p) => prompt = Some(p),
            Event::Text { index, text, logprobs } => {
                choices[index].text.push_str(&text);
                choices[index].logprobs.extend(logprobs);
            }
            Event::Done { index, reason, stop_reason, prompt_tokens, cached_tokens, completion_tokens } => {
                choices[index].finish = Some((reason, stop_reason));
                choices[index].completion_tokens = completion_tokens;
                usage.tokens = prompt_tokens;
                usage.cached = usage.cached.max(cached_tokens);
                open -= 1;
                if open == 0 {
                    return Json(reply.whole(&choices, prompt.as_deref(), usage)).into_response();
                }
            }
            Event::Failed(msg) => return engine_failed(msg),
        }
    }
    engine_failed("the engine stopped".into())
}

fn engine_failed(message: String) -> Response {
    error(&ApiError { status: 500, message, kind: "server_error", param: None, code: None })
}

/// What a stream keeps between events.
struct StreamState {
    rx: Option<UnboundedReceiver<Event>>,
    queue: VecDeque<SseEvent>,
    /// Each choice's text offset (characters sent), for completions' `text_offset`.
    offsets: Vec<usize>,
    /// Choices still generating.
    open: usize,
    /// Tokens generated over all choices.
    completion_tokens: usize,
    /// The prompt's tokens, cached ones among them.
    usage: PromptUsage,
    /// Whether each echoing choice has sent its prompt.
    echoed: bool,
    /// A forced tool call's text and logprobs per choice, held until the choice ends.
    held: Vec<(String, Vec<TokenLogprob>)>,
}

/// The events as server-sent events: the chat role (or the echoed prompt) per choice, chunks,
/// each choice's finish, `usage` if asked, then `[DONE]`. The stream owns the event receiver:
/// a client that hangs up drops it, cancelling the request.
fn stream_events(
    reply: Reply,
    events: UnboundedReceiver<Event>,
    n: usize,
    usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let data = |v: Value| SseEvent::default().data(v.to_string());
    let mut queue = VecDeque::new();
    if reply.kind == Kind::Chat {
        for i in 0..n {
            queue.push_back(data(reply.chunk(i, None, true, &[], &mut 0, None)));
        }
    }
    let echo_waits_for_logprobs = reply.echo.is_some() && reply.logprobs;
    let mut st = StreamState {
        rx: Some(events),
        queue,
        offsets: vec![0; n],
        open: n,
        completion_tokens: 0,
        usage: PromptUsage::default(),
        echoed: reply.echo.is_none(),
        held: vec![Default::default(); n],
    };
    if !st.echoed && !echo_waits_for_logprobs {
        for i in 0..n {
            queue_echo(&reply, &mut st, i, None);
        }
        st.echoed = true;
    }
    Sse::new(futures_util::stream::unfold((st, reply), move |(mut st, reply)| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), (st, reply)));
            }
            let ev = st.rx.as_mut()?.recv().await;
            match ev {
                Some(Event::Prompt(p)) => {
                    for i in 0..n {
                        queue_echo(&reply, &mut st, i, Some(&p));
                    }
                    st.echoed = true;
                }
                Some(Event::Text { index, text, logprobs }) if reply.tool.is_some() => {
                    st.held[index].0.push_str(&text);
                    st.held[index].1.extend(logprobs);
                }
                Some(Event::Text { index, text, logprobs }) => {
                    let c = reply.chunk(index, Some(&text), false, &logprobs, &mut st.offsets[index], None);
                    st.queue.push_back(data(c));
                }
                Some(Event::Done {
                    index,
                    reason,
                    stop_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                }) => {
                    let finish = (reason, stop_reason);
                    if reply.tool.is_some() {
                        let (text, lps) = std::mem::take(&mut st.held[index]);
                        st.queue.extend(reply.tool_chunks(index, &text, &lps, &finish).into_iter().map(data));
                    } else {
                        let c = reply.chunk(index, None, false, &[], &mut st.offsets[index], Some(&finish));
                        st.queue.push_back(data(c));
                    }
                    st.completion_tokens += completion_tokens;
                    st.usage.tokens = prompt_tokens;
                    st.usage.cached = st.usage.cached.max(cached_tokens);
                    st.open -= 1;
                    if st.open == 0 {
                        if usage {
                            st.queue.push_back(data(reply.usage_chunk(st.usage, st.completion_tokens)));
                        }
                        st.queue.push_back(SseEvent::default().data("[DONE]"));
                        st.rx = None;
                    }
                }
                Some(Event::Failed(msg)) => {
                    st.queue.push_back(data(json!({"error": {"message": msg, "type": "server_error", "param": null, "code": null}})));
                    st.queue.push_back(SseEvent::default().data("[DONE]"));
                    st.rx = None;
                }
                None => {
                    st.queue.push_back(data(json!({"error": {"message": "the engine stopped", "type": "server_error", "param": null, "code": null}})));
                    st.queue.push_back(SseEvent::default().data("[DONE]"));
                    st.rx = None;
                }
            }
        }
    }))
}

fn queue_echo(reply: &Reply, st: &mut StreamState, index: usize, prompt: Option<&[Option<TokenLogprob>]>) {
    let c = reply.echo_chunk(index, prompt, &mut st.offsets[index]);
    st.queue.push_back(SseEvent::default().data(c.to_string()));
}
