//! A server running in the background of its caller: [`Server::start`] starts the engine, then
//! the HTTP front end on its own tokio runtime thread, and returns once both are ready with the
//! URL it listens on; [`Server::stop`] (or dropping it) refuses new requests, lets the running
//! ones finish and ends both. The `eager-serve` binary and a notebook cell start it alike.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use eager_models::{AutoModel, GenerationConfig, Tokenizer};
use tokio::sync::oneshot;

use crate::engine::{Engine, EngineInfo, EngineOptions};
use crate::http::{router, AppState};
use crate::metrics::{Metrics, Snapshot};
use crate::openai::Served;
use crate::structured::Grammars;
use crate::{Result, ServeError};

/// Where and how a [`Server`] serves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The address to listen on; port 0 takes a free port.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The model's name in the API (`model` of requests, `/v1/models`).
    pub model_name: String,
    /// Other names requests may give in `model` (the checkpoint's path, as it was given).
    pub model_aliases: Vec<String>,
    /// Sampling defaults for fields requests leave out (`generation_config.json`'s).
    pub defaults: GenerationConfig,
    /// Requests need `Authorization: Bearer KEY` when set.
    pub api_key: Option<String>,
    /// The engine's sizes.
    pub engine: EngineOptions,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            host: "127.0.0.1".into(),
            port: 0,
            model_name: "model".into(),
            model_aliases: Vec::new(),
            defaults: GenerationConfig::default(),
            api_key: None,
            engine: EngineOptions::default(),
        }
    }
}

/// A model served over HTTP in the background.
pub struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `model` with `tokenizer`: compiles the engine's programs, binds the address and
    /// returns once requests are answered.
    pub fn start(model: AutoModel, tokenizer: Tokenizer, opts: ServerOptions) -> Result<Server> {
        let tokenizer = Arc::new(tokenizer);
        let metrics = Arc::new(Metrics::new());
        let engine = Arc::new(Engine::start(model, tokenizer.clone(), opts.engine.clone(), metrics)?);
        let served = Served {
            names: std::iter::once(opts.model_name.clone())
                .chain(opts.model_aliases.iter().cloned())
                .collect(),
            vocab: engine.info().vocab_size,
            max_n: engine.info().slots,
            defaults: opts.defaults.clone(),
        };
        // Structured output's token trie, built once from the tokenizer (a tokenizer it cannot
        // read leaves constrained requests a 400 that says why).
        let eos: Vec<u32> =
            tokenizer.eos_token_id().into_iter().chain(opts.engine.eos_token_ids.iter().copied()).collect();
        let grammars = tokenizer
            .inner
            .to_string(false)
            .map_err(|e| format!("structured output: the tokenizer: {e}"))
            .and_then(|json| Grammars::new(json.as_bytes(), engine.info().vocab_size, &eos));
        let state = Arc::new(AppState {
            engine,
            tokenizer,
            served,
            grammars,
            api_key: opts.api_key.clone(),
            closing: Default::default(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("eager-serve-http")
            .enable_all()
            .build()
            .map_err(|e| ServeError::Http(format!("could not start the HTTP runtime: {e}")))?;
        let bind = format!("{}:{}", opts.host, opts.port);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(&bind))
            .map_err(|e| ServeError::Http(format!("could not listen on {bind}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| ServeError::Http(e.to_string()))?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let app = router(state.clone());
        let thread = std::thread::Builder::new()
            .name("eager-serve-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                        let _ = stopped.await;
                    });
                    if let Err(e) = serve.await {
                        eprintln!("eager-serve: the HTTP server failed: {e}");
                    }
                });
            })
            .map_err(|e| ServeError::Http(format!("could not start the HTTP thread: {e}")))?;
        Ok(Server { addr, state, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// The base URL, `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the engine serves (slots, context length, buckets, cache bytes, warm-up time).
    pub fn info(&self) -> &EngineInfo {
        self.state.engine.info()
    }

    /// Whether the engine still runs (false once it died: the server then answers nothing).
    pub fn engine_alive(&self) -> bool {
        self.state.engine.is_alive()
    }

    /// The live figures: completed requests, tokens, queue, batch, blocks in use.
    pub fn snapshot(&self) -> Snapshot {
        self.state.engine.metrics().snapshot()
    }

    /// The metrics in Prometheus' text format, as `GET /metrics` serves them.
    pub fn metrics_text(&self) -> String {
        self.state.engine.metrics().render()
    }

    /// Refuses new requests, lets the running ones finish their responses, and ends the HTTP
    /// front end and the engine.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.state.closing.store(true, Ordering::Release);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut_down();
    }
}
