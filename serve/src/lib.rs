//! # eager-serve
//!
//! Serves a Hugging Face checkpoint loaded by `eager-models` over OpenAI's HTTP API, with
//! continuous batching, as vLLM serves on a TPU. Layered as mistral.rs is, each layer unaware
//! of the one above:
//!
//! - [`scheduler`]: host code only: waiting and running sequences, key/value slots, chunked
//!   prefill, the queue's bound;
//! - [`engine`]: one thread that owns the model and the cache, runs the scheduler's plans as
//!   compiled prefill and decode programs, chooses each token ([`sampling`], within a grammar: [`structured`]) and sends each
//!   request its text ([`text`]);
//! - [`http`] (with [`openai`]'s request shapes and [`response`]'s JSON): the thin front end on tokio and
//!   axum; [`metrics`]: what `GET /metrics` shows;
//! - [`server`]: engine and front end started together in the background, for the binary and
//!   for a notebook cell.
//!
//! ```no_run
//! use eager_models::{AutoModel, Tokenizer};
//! use eager_serve::{Server, ServerOptions};
//! let model = AutoModel::from_dir("tiny-llama", eager::default_device(), None)?;
//! let server = Server::start(model, Tokenizer::from_dir("tiny-llama")?, ServerOptions::default())?;
//! println!("serving at {}/v1", server.url());
//! server.stop();
//! # Ok::<(), eager_serve::ServeError>(())
//! ```

#![warn(missing_docs)]

pub mod engine;
pub mod http;
pub mod metrics;
pub mod openai;
pub mod response;
pub mod sampling;
pub mod scheduler;
pub mod server;
pub mod structured;
pub mod text;
pub mod tools;

pub use engine::{Engine, EngineOptions};
pub use sampling::SamplingParams;
pub use server::{Server, ServerOptions};

/// What can go wrong starting or running a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// An option is out of range for the model or the memory.
    #[error("{0}")]
    Options(String),
    /// The model failed to load, tokenize or run.
    #[error(transparent)]
    Model(#[from] eager_models::ModelError),
    /// eager itself failed (a device, a program).
    #[error(transparent)]
    Eager(#[from] eager::Error),
    /// The engine thread failed.
    #[error("engine: {0}")]
    Engine(String),
    /// The HTTP front end could not start.
    #[error("http: {0}")]
    Http(String),
}

/// eager-serve's `Result`.
pub type Result<T> = std::result::Result<T, ServeError>;
