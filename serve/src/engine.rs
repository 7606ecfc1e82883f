//! The engine: one thread that owns the model and the key/value cache and takes requests on
//! a channel. Each step it asks the [`Scheduler`] for a plan, prefills the planned prompt
//! chunks (one compiled program per chunk-length bucket), runs one decode step of every
//! sequence whose prompt is cached (one compiled program per batch-size bucket, 1, 2, 4, …),
//! chooses each next token on the host and sends each request its text as it grows.
//!
//! The cache is one slot per running sequence (`layers × 2` tensors of `[1, kv_heads,
//! max_model_len, head_dim]`); a decode step joins the slots of its sequences into a batch
//! inside the program and splits the updated rows back out, so a step's work follows the
//! sequences running, not the slots in all. Every program is compiled (or loaded from eager's
//! disk cache) before the engine reports ready: no step compiles while serving.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use eager::nn::StaticKvCache;
use eager::{DType, Device, Tensor};
use eager_models::{AutoModel, CausalLm, Tokenizer};
use llguidance::Matcher;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::metrics::{Metrics, Outcome};
use crate::sampling::{token_logprob, Sampler, SamplingParams, TokenLogprob};
use crate::scheduler::{Admission, QueueFull, Scheduler, SeqId, Ticket};
use crate::structured::allowed;
use crate::text::TextStream;
use crate::{Result, ServeError};

/// How the engine sizes its cache and its steps.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most sequences decoding together (key/value slots).
    pub max_batch: usize,
    /// Most positions of one sequence, prompt and generated (each slot's capacity); `None`:
    /// the model's `max_position_embeddings`, at most 2048.
    pub max_model_len: Option<usize>,
    /// A bound on the key/value cache's bytes: fewer slots than `max_batch` where it binds.
    pub kv_cache_memory: Option<u64>,
    /// Most prompt tokens prefilled in one step (longer prompts go in chunks between decode steps).
    pub prefill_chunk: usize,
    /// Most requests waiting for a slot; more are refused.
    pub max_waiting: usize,
    /// Tokens that end a sequence besides the tokenizer's and `config.json`'s end tokens
    /// (`generation_config.json`'s, which often add a chat model's end of turn).
    pub eos_token_ids: Vec<u32>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_batch: 8,
            max_model_len: None,
            kv_cache_memory: None,
            prefill_chunk: 256,
            max_waiting: 256,
            eos_token_ids: Vec::new(),
        }
    }
}

/// Why a sequence ended, as OpenAI's `finish_reason` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens`, or the context's end.
    Length,
}

impl FinishReason {
    /// `"stop"` or `"length"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What ended a sequence that stopped, as vLLM's `stop_reason` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A stop string (not returned in the text).
    String(String),
    /// A token of `stop_token_ids`.
    Token(u32),
}

/// What a request hears from the engine, in order: the prompt's logprobs when asked, each
/// choice's text deltas and its `Done`; or `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Each prompt token's logprob (the first has none), once its prompt is cached.
    Prompt(Vec<Option<TokenLogprob>>),
    /// Text of choice `index` that is final now, and the logprobs of the tokens chosen since
    /// the last delta (when asked).
    Text {
        /// The choice.
        index: usize,
        /// The text.
        text: String,
        /// The tokens' logprobs.
        logprobs: Vec<TokenLogprob>,
    },
    /// Choice `index` ended.
    Done {
        /// The choice.
        index: usize,
        /// Why.
        reason: FinishReason,
        /// The stop string or token, when one ended it (`None` for the end-of-sequence token).
        stop_reason: Option<StopReason>,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Prompt tokens found in the cache (not prefilled again).
        cached_tokens: usize,
        /// Tokens generated.
        completion_tokens: usize,
    },
    /// The engine failed while running it.
    Failed(String),
}

/// What the engine serves: the sizes a front end validates requests against.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    /// Positions per sequence, prompt and generated.
    pub max_model_len: usize,
    /// Key/value slots (sequences that decode together at most).
    pub slots: usize,
    /// Bytes of the key/value cache.
    pub kv_cache_bytes: u64,
    /// The batch-size buckets of the decode programs.
    pub decode_buckets: Vec<usize>,
    /// The prompt-chunk buckets of the prefill programs.
    pub prefill_buckets: Vec<usize>,
    /// The vocabulary's size.
    pub vocab_size: usize,
    /// Seconds the programs took to compile or load at start.
    pub warmup_seconds: f64,
}

struct Submission {
    prompt: Vec<u32>,
    params: SamplingParams,
    /// The output's grammar, compiled (structured output).
    matcher: Option<Matcher>,
    events: UnboundedSender<Event>,
    ticket: Ticket,
    arrived: Instant,
}

enum Command {
    Submit(Box<Submission>),
    /// Finish what runs and waits, then end the thread.
    Drain,
}

/// A request handed to the engine: its events arrive on `events`; dropping the receiver
/// cancels it (its slot is freed at the next step).
pub struct Submitted {
    /// Text deltas, then the end.
    pub events: UnboundedReceiver<Event>,
}

/// The handle to a running engine thread.
pub struct Engine {
    tx: mpsc::Sender<Command>,
    admission: Admission,
    info: EngineInfo,
    metrics: Arc<Metrics>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread over `model` (moved into it) and compiles every program;
    /// returns once it is ready to serve, or the error that stopped it.
    pub fn start(
        model: AutoModel,
        tokenizer: Arc<Tokenizer>,
        opts: EngineOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Engine> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let admission = Admission::new(opts.max_waiting.max(1));
        let m = metrics.clone();
        let thread = std::thread::Builder::new()
            .name("eager-serve-engine".into())
            .spawn(move || {
                let _no_grad = eager::NoGradGuard::new();
                let lm = match model.causal_lm() {
                    Ok(lm) => lm,
                    Err(e) => {
                        let _ = ready_tx.send(Err(ServeError::Model(e)));
                        return;
                    }
                };
                let mut core = match Core::new(lm, &tokenizer, &opts, &m) {
                    Ok(core) => core,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                if ready_tx.send(Ok(core.info.clone())).is_err() {
                    return;
                }
                core.serve(rx);
            })
            .map_err(|e| ServeError::Engine(format!("could not start the engine thread: {e}")))?;
        let info = match ready_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let why = match thread.join() {
                    Err(p) => panic_text(&p),
                    Ok(()) => "it ended before it was ready".into(),
                };
                return Err(ServeError::Engine(format!("the engine thread failed: {why}")));
            }
        };
        Ok(Engine { tx, admission, info, metrics, thread: Some(thread) })
    }

    /// Queues `prompt` (its output held to `matcher`'s grammar when given); refused at once
    /// when the queue is full.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        matcher: Option<Matcher>,
    ) -> std::result::Result<Submitted, Refusal> {
        let ticket = self.admission.enter().map_err(Refusal::QueueFull)?;
        let (events, rx) = unbounded_channel();
        let s = Submission { prompt, params, matcher, events, ticket, arrived: Instant::now() };
        self.tx.send(Command::Submit(Box::new(s))).map_err(|_| Refusal::Stopped)?;
        Ok(Submitted { events: rx })
    }

    /// The sizes requests are validated against.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The engine's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether the engine thread still runs (false once it died, or was drained).
    pub fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Lets what runs and waits finish, then ends the engine thread (later submissions are
    /// refused). Waits for the thread.
    pub fn drain(&mut self) {
        let _ = self.tx.send(Command::Drain);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.drain();
    }
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The queue is full.
    #[error(transparent)]
    QueueFull(QueueFull),
    /// The engine has stopped (draining or failed).
    #[error("the engine is shutting down")]
    Stopped,
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// A sequence the engine holds: one choice of a request.
struct Active {
    prompt: Arc<[u32]>,
    params: Arc<SamplingParams>,
    /// The tokens that end it: the model's end tokens (unless `ignore_eos`) and `stop_token_ids`.
    ends: Arc<[u32]>,
    /// The choice's index in its request (OpenAI's `n`).
    index: usize,
    sampler: Sampler,
    /// The grammar the output must follow: each step's allowed tokens.
    matcher: Option<Matcher>,
    generated: Vec<u32>,
    text: TextStream,
    /// Logprobs of tokens whose text is not sent yet.
    logprobs: Vec<TokenLogprob>,
    /// The prompt's logprobs as its chunks are prefilled (when asked).
    prompt_logprobs: Vec<Option<TokenLogprob>>,
    events: UnboundedSender<Event>,
    /// The queue place, given back once the request holds a slot.
    ticket: Option<Ticket>,
    arrived: Instant,
    last_token: Option<Instant>,
}

/// The powers of two below `max`, and `max`.
fn buckets(min: usize, max: usize) -> Vec<usize> {
    let mut b = Vec::new();
    let mut n = min.max(1);
    while n < max {
        b.push(n);
        n *= 2;
    }
    b.push(max);
    b
}

/// The prompt-chunk buckets up to `chunk`: powers of two from 16 to 64, then every multiple of
/// 64, then `chunk`. A chunk pays for its padding as for real tokens (prefill's cost is linear in
/// its length): with powers of two a 400-token prompt ran 256 + 256 where 256 + 192 do, for one
/// program more than powers of two at a chunk of 256.
fn prefill_buckets(chunk: usize) -> Vec<usize> {
    let mut b = buckets(16.min(chunk), 64.min(chunk));
    b.pop();
    let mut n = 64.min(chunk);
    while n < chunk {
        b.push(n);
        n += 64;
    }
    b.push(chunk);
    b
}

fn bucket_for(buckets: &[usize], n: usize) -> usize {
    buckets.iter().copied().find(|&b| b >= n).unwrap_or(n)
}

type Program<'a> = eager::Compiled<Box<dyn Fn(&[Tensor]) -> eager::Result<Vec<Tensor>> + 'a>>;

/// The engine thread's state: the model's programs, the slots and the requests.
struct Core<'a> {
    tokenizer: &'a Tokenizer,
    metrics: &'a Metrics,
    info: EngineInfo,
    device: Device,
    layers: usize,
    /// Each slot's `[k0, v0, k1, v1, …]`; the last one is scratch (the rows that pad a batch).
    slots: Vec<Vec<Tensor>>,
    decode: Program<'a>,
    prefill: Program<'a>,
    scheduler: Scheduler,
    active: std::collections::HashMap<SeqId, Active>,
    next_id: SeqId,
    /// Tokens that end a sequence: the tokenizer's end of sequence and the config's.
    eos: Vec<u32>,
    draining: bool,
}

impl<'a> Core<'a> {
    fn new(
        lm: &'a dyn CausalLm,
        tokenizer: &'a Tokenizer,
        opts: &EngineOptions,
        metrics: &'a Metrics,
    ) -> Result<Core<'a>> {
        lm.prepare_inference()?;
        let cfg = lm.config();
        let model_len = cfg.max_position_embeddings.max(1);
        let cap = opts.max_model_len.unwrap_or(model_len.min(2048));
        if cap < 2 || cap > model_len {
            return Err(ServeError::Options(format!(
                "--max-model-len must be between 2 and the model's max_position_embeddings ({model_len}), got {cap}"
            )));
        }
        let first = lm.new_cache(1, cap)?;
        let layers = first.len();
        let slot_bytes: u64 = first.iter().map(|c| c.size_in_bytes() as u64).sum();
        let mut n = opts.max_batch.max(1);
        if let Some(bound) = opts.kv_cache_memory {
            let fit = (bound / slot_bytes.max(1)) as usize;
            if fit == 0 {
                return Err(ServeError::Options(format!(
                    "--kv-cache-memory {bound} holds no sequence: one of {cap} positions needs {slot_bytes} bytes"
                )));
            }
            n = n.min(fit);
        }
        let device = first[0].keys()?.device();
        let to_tensors = |c: Vec<StaticKvCache>| -> Vec<Tensor> {
            c.into_iter().flat_map(StaticKvCache::into_parts).flat_map(|(k, v)| [k, v]).collect()
        };
        let mut slots = vec![to_tensors(first)];
        for _ in 0..n {
            slots.push(to_tensors(lm.new_cache(1, cap)?));
        }
        let decode: Program<'a> =
            eager::compile("serve_decode", Box::new(move |args: &[Tensor]| decode_program(lm, layers, args)));
        // Each slot's cache is written in place: the step's new cache takes the old one's memory.
        let decode = decode.donate_from(4);
        let prefill: Program<'a> =
            eager::compile("serve_prefill", Box::new(move |args: &[Tensor]| prefill_program(lm, args)));
        let prefill = prefill.donate_from(5);
        let chunk = opts.prefill_chunk.clamp(1, cap);
        let info = EngineInfo {
            max_model_len: cap,
            slots: n,
            kv_cache_bytes: slot_bytes * n as u64,
            decode_buckets: buckets(1, n),
            prefill_buckets: prefill_buckets(chunk),
            vocab_size: cfg.vocab_size,
            warmup_seconds: 0.0,
        };
        metrics.kv_blocks_total.set(n as i64);
        let mut core = Core {
            tokenizer,
            metrics,
            info,
            device,
            layers,
            slots,
            decode,
            prefill,
            scheduler: Scheduler::new(n, chunk),
            active: Default::default(),
            next_id: 0,
            eos: tokenizer
                .eos_token_id()
                .into_iter()
                .chain(cfg.eos_token_ids.iter().copied())
                .chain(opts.eos_token_ids.iter().copied())
                .collect(),
            draining: false,
        };
        let t0 = Instant::now();
        core.warm_up()?;
        core.info.warmup_seconds = t0.elapsed().as_secs_f64();
        Ok(core)
    }

    /// Runs every program once on the scratch slot, so that serving never compiles.
    fn warm_up(&mut self) -> Result<()> {
        let scratch = 0;
        for &b in &self.info.decode_buckets.clone() {
            self.run_decode(&vec![(scratch, 0, 0); b])?;
        }
        for &t in &self.info.prefill_buckets.clone() {
            self.run_prefill(scratch, 0, &vec![0; t], false)?;
        }
        Ok(())
    }

    /// The loop: take commands, plan, run, answer; blocks while idle.
    fn serve(&mut self, rx: mpsc::Receiver<Command>) {
        loop {
            if self.scheduler.is_idle() {
                if self.draining {
                    return;
                }
                match rx.recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        self.draining = true;
                        break;
                    }
                }
            }
            self.drop_cancelled();
            if let Err(e) = self.step() {
                // A failed step fails the requests it ran; the engine goes on with the next.
                let msg = e.to_string();
                self.scheduler.forget_contents();
                for id in self.scheduler.running_sequences() {
                    if let Some(a) = self.active.get(&id) {
                        if a.ticket.is_none() {
                            let _ = a.events.send(Event::Failed(msg.clone()));
                            self.end(id, Outcome::Failed);
                        }
                    }
                }
            }
            self.publish();
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(s) if self.draining => {
                let _ = s.events.send(Event::Failed("the server is shutting down".into()));
                self.metrics.request(Outcome::Refused);
            }
            Command::Submit(s) => {
                let n = s.params.n.max(1);
                let ids: Vec<SeqId> = (0..n)
                    .map(|_| {
                        self.next_id += 1;
                        self.next_id
                    })
                    .collect();
                let seed = s.params.seed.unwrap_or_else(rand::random);
                let prompt: Arc<[u32]> = s.prompt.into();
                // Prompt logprobs need every prompt row's logits: nothing cached is reused.
                let reuse = s.params.prompt_logprobs.is_none();
                self.scheduler.add_group(ids[0], &ids[1..], prompt.clone(), reuse);
                let params = Arc::new(s.params);
                let eos = if params.ignore_eos { &[][..] } else { &self.eos[..] };
                let ends: Arc<[u32]> = eos.iter().chain(&params.stop_token_ids).copied().collect();
                let mut ticket = Some(s.ticket);
                for (index, &id) in ids.iter().enumerate() {
                    let mut text = TextStream::new(params.stop.clone());
                    text.arm(params.min_tokens == 0);
                    let active = Active {
                        prompt: prompt.clone(),
                        params: params.clone(),
                        ends: ends.clone(),
                        index,
                        sampler: Sampler::new(seed, index),
                        // Each choice follows the grammar on its own.
                        matcher: s.matcher.as_ref().map(Matcher::deep_clone),
                        generated: Vec::new(),
                        text,
                        logprobs: Vec::new(),
                        prompt_logprobs: Vec::new(),
                        events: s.events.clone(),
                        // The leader holds the request's place in the queue.
                        ticket: ticket.take(),
                        arrived: s.arrived,
                        last_token: None,
                    };
                    self.active.insert(id, active);
                }
            }
            Command::Drain => self.draining = true,
        }
    }

    /// Requests whose client went away end now, freeing their slots.
    fn drop_cancelled(&mut self) {
        let gone: Vec<SeqId> =
            self.active.iter().filter(|(_, a)| a.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.end(id, Outcome::Cancelled);
        }
    }

    /// Ends sequence `id` (a request is counted once, by its first choice).
    fn end(&mut self, id: SeqId, outcome: Outcome) {
        self.scheduler.finish(id);
        if let Some(a) = self.active.remove(&id) {
            if a.index == 0 {
                self.metrics.request(outcome);
            }
        }
    }

    fn publish(&self) {
        self.metrics.queue_length.set(self.scheduler.waiting() as i64);
        self.metrics.kv_blocks_in_use.set(self.scheduler.running() as i64);
    }

    fn step(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let (plan, admitted) = self.scheduler.plan();
        for id in admitted {
            if let Some(a) = self.active.get_mut(&id) {
                a.ticket = None;
                if a.index == 0 && a.params.prompt_logprobs.is_none() {
                    self.metrics.prefix_cache_queries.inc_by(a.prompt.len() as u64);
                    self.metrics.prefix_cache_hits.inc_by(self.scheduler.cached_tokens(id) as u64);
                }
            }
        }
        self.publish();
        for chunk in &plan.prefill {
            // A chunk padded to its bucket must fit in the cache (the write's start would be
            // clamped): one that would run past the end starts earlier, prefilling a few
            // positions again from the same tokens.
            let cap = self.info.max_model_len;
            let t = bucket_for(&self.info.prefill_buckets, chunk.len).min(cap);
            let from = chunk.start.min(cap - t);
            let a = &self.active[&chunk.seq];
            let tokens = a.prompt[from..chunk.start + chunk.len].to_vec();
            let prompt_logprobs = a.params.prompt_logprobs;
            let logits = self.run_prefill(chunk.slot + 1, from, &tokens, prompt_logprobs.is_some())?;
            self.metrics.prompt_tokens.inc_by(chunk.len as u64);
            let forks = self.scheduler.prefilled(chunk);
            let vocab = self.info.vocab_size;
            let last_row = match prompt_logprobs {
                Some(k) => {
                    self.score_prompt(chunk.seq, from, chunk.start, chunk.len, &logits, k);
                    let r = chunk.start + chunk.len - 1 - from;
                    &logits[r * vocab..(r + 1) * vocab]
                }
                None => &logits[..],
            };
            if chunk.last {
                self.first_tokens(chunk.seq, chunk.slot, &forks, last_row)?;
            }
        }
        if !plan.decode.is_empty() {
            let rows: Vec<(usize, u32, usize)> = plan
                .decode
                .iter()
                .map(|&(id, slot)| {
                    let a = &self.active[&id];
                    let last = *a.generated.last().expect("a decoding sequence has its first token");
                    (slot + 1, last, a.prompt.len() + a.generated.len() - 1)
                })
                .collect();
            self.metrics.running_batch.set(rows.len() as i64);
            let logits = self.run_decode(&rows)?;
            for (&(_, slot), r) in plan.decode.iter().zip(&rows) {
                self.scheduler.decoded(slot, r.2, r.1);
            }
            let vocab = self.info.vocab_size;
            for (i, &(id, _)) in plan.decode.iter().enumerate() {
                self.accept(id, &logits[i * vocab..(i + 1) * vocab])?;
            }
        } else {
            self.metrics.running_batch.set(0);
        }
        self.metrics.step_seconds.observe(t0.elapsed().as_secs_f64());
        Ok(())
    }

    /// The logprobs of the prompt tokens that chunk `start..start + len` (run from `from`,
    /// its rows `from..`) predicts, each with its `k` most likely alternatives.
    fn score_prompt(&mut self, id: SeqId, from: usize, start: usize, len: usize, logits: &[f32], k: usize) {
        let vocab = self.info.vocab_size;
        let Some(a) = self.active.get_mut(&id) else { return };
        if start == 0 {
            a.prompt_logprobs.push(None);
        }
        for pos in start..start + len {
            // Position `pos`'s logits predict the token at `pos + 1`.
            if let Some(&next) = a.prompt.get(pos + 1) {
                let r = pos - from;
                a.prompt_logprobs.push(Some(token_logprob(&logits[r * vocab..(r + 1) * vocab], next, k)));
            }
        }
    }

    /// A prompt is cached: its forks take copies of its slot, each choice draws its first token
    /// from the prompt's last logits (a request of `max_tokens` 0 ends here).
    fn first_tokens(&mut self, id: SeqId, slot: usize, forks: &[(SeqId, usize)], row: &[f32]) -> Result<()> {
        for &(_, fork_slot) in forks {
            self.slots[fork_slot + 1] =
                self.slots[slot + 1].iter().map(Tensor::copy).collect::<eager::Result<_>>()?;
        }
        let Some(a) = self.active.get_mut(&id) else { return Ok(()) };
        if a.params.prompt_logprobs.is_some() {
            let _ = a.events.send(Event::Prompt(std::mem::take(&mut a.prompt_logprobs)));
        }
        let score_only = a.params.max_tokens == 0;
        let cached_tokens = self.scheduler.cached_tokens(id);
        for seq in std::iter::once(id).chain(forks.iter().map(|f| f.0)) {
            if !score_only {
                self.accept(seq, row)?;
            } else if let Some(a) = self.active.get(&seq) {
                // Every choice of a request that only scores its prompt ends here, none decodes.
                let done = Event::Done {
                    index: a.index,
                    reason: FinishReason::Length,
                    stop_reason: None,
                    prompt_tokens: a.prompt.len(),
                    cached_tokens,
                    completion_tokens: 0,
                };
                let _ = a.events.send(done);
                self.end(seq, Outcome::Completed);
            }
        }
        Ok(())
    }

    /// Chooses `id`'s next token from its logits row, sends the text it adds, and ends the
    /// sequence at an end token, a stop, its `max_tokens` or the context's end.
    fn accept(&mut self, id: SeqId, row: &[f32]) -> Result<()> {
        let cap = self.info.max_model_len;
        let Some(a) = self.active.get_mut(&id) else { return Ok(()) };
        let p = a.params.clone();
        let ends = a.ends.clone();
        let chosen = match &mut a.matcher {
            None => Ok(a.sampler.choose(row, &p, &a.prompt, &a.generated, &ends)),
            Some(m) => constrained(m, &mut a.sampler, row, &p, &a.prompt, &a.generated, &ends),
        };
        let token = match chosen {
            Ok(t) => t,
            Err(e) => return self.fail(id, format!("structured output: {e}")),
        };
        let grammar_done = a.matcher.as_ref().is_some_and(Matcher::is_stopped);
        a.generated.push(token);
        if let Some(k) = p.logprobs {
            a.logprobs.push(token_logprob(row, token, k));
        }
        let now = Instant::now();
        match a.last_token {
            None => self.metrics.time_to_first_token.observe((now - a.arrived).as_secs_f64()),
            Some(t) => self.metrics.inter_token_latency.observe((now - t).as_secs_f64()),
        }
        a.last_token = Some(now);
        self.metrics.generation_tokens.inc();
        let ended_by_token = ends.contains(&token);
        a.text.arm(a.generated.len() >= p.min_tokens);
        let delta = if ended_by_token { Default::default() } else { a.text.push(token, self.tokenizer)? };
        let mut stop_reason = None;
        let mut reason = None;
        if ended_by_token {
            reason = Some(FinishReason::Stop);
            stop_reason = p.stop_token_ids.contains(&token).then_some(StopReason::Token(token));
        } else if delta.stopped {
            reason = Some(FinishReason::Stop);
            stop_reason = a.text.matched().map(|s| StopReason::String(s.to_string()));
        } else if grammar_done {
            // The grammar is complete and allows nothing more.
            reason = Some(FinishReason::Stop);
        } else if a.generated.len() >= p.max_tokens || a.prompt.len() + a.generated.len() >= cap {
            reason = Some(FinishReason::Length);
        }
        let mut text = delta.text;
        if reason.is_some() && !delta.stopped {
            text.push_str(&a.text.finish(self.tokenizer)?);
        }
        if !text.is_empty() || (reason.is_some() && !a.logprobs.is_empty()) {
            let logprobs = std::mem::take(&mut a.logprobs);
            let _ = a.events.send(Event::Text { index: a.index, text, logprobs });
        }
        if let Some(reason) = reason {
            let done = Event::Done {
                index: a.index,
                reason,
                stop_reason,
                prompt_tokens: a.prompt.len(),
                cached_tokens: self.scheduler.cached_tokens(id),
                completion_tokens: a.generated.len(),
            };
            let _ = a.events.send(done);
            self.end(id, Outcome::Completed);
        }
        Ok(())
    }

    /// Ends sequence `id` with `message` as its failure.
    fn fail(&mut self, id: SeqId, message: String) -> Result<()> {
        if let Some(a) = self.active.get(&id) {
            let _ = a.events.send(Event::Failed(message));
        }
        self.end(id, Outcome::Failed);
        Ok(())
    }

    /// One decode step of `rows` (slot index into `self.slots`, input token, its position),
    /// padded to a bucket with scratch rows: the logits of each row, `rows × vocab` values.
    fn run_decode(&mut self, rows: &[(usize, u32, usize)]) -> Result<Vec<f32>> {
        let cap = self.info.max_model_len;
        let b = bucket_for(&self.info.decode_buckets, rows.len());
        let pad = (0usize, 0u32, 0usize);
        let all: Vec<(usize, u32, usize)> =
            rows.iter().copied().chain(std::iter::repeat_n(pad, b - rows.len())).collect();
        let ids: Vec<i64> = all.iter().map(|r| r.1 as i64).collect();
        let pos: Vec<i64> = all.iter().map(|r| r.2 as i64).collect();
        let mut mask = vec![0u8; b * cap];
        for (j, r) in all.iter().enumerate() {
            mask[j * cap..j * cap + r.2 + 1].fill(1);
        }
        let d = self.device;
        let ids = Tensor::from_slice_on(&ids, &[b, 1], d)?;
        let positions = Tensor::from_slice_on(&pos, &[b, 1], d)?;
        let start = Tensor::from_slice_on(&pos, &[b], d)?;
        let mask = Tensor::from_bytes_on(&mask, &[b, 1, 1, cap], DType::Bool, d)?;
        let mut args: Vec<&Tensor> = vec![&ids, &positions, &start, &mask];
        for r in &all {
            args.extend(self.slots[r.0].iter());
        }
        let outs = self.decode.call(&args)?;
        let per_slot = 2 * self.layers;
        let mut outs = outs.into_iter();
        let logits =
            outs.next().ok_or_else(|| ServeError::Engine("the decode step returned nothing".into()))?;
        let rest: Vec<Tensor> = outs.collect();
        // Every row's slot takes its new cache, the padding rows' scratch slot too: a slot
        // passed once was donated to the step (its old tensors hold nothing now).
        for (j, r) in all.iter().enumerate() {
            self.slots[r.0] = rest[j * per_slot..(j + 1) * per_slot].to_vec();
        }
        let vocab = self.info.vocab_size;
        let host = logits.to_dtype(DType::F32)?.to_vec::<f32>()?;
        Ok(host[..rows.len() * vocab].to_vec())
    }

    /// Prefills `tokens` at positions from `start` into `self.slots[slot]`, right-padded to a
    /// bucket: the logits of the last token, or of every row of the bucket when `all_rows`
    /// (prompt logprobs; that program is compiled at its first use).
    fn run_prefill(&mut self, slot: usize, start: usize, tokens: &[u32], all_rows: bool) -> Result<Vec<f32>> {
        let cap = self.info.max_model_len;
        let t = bucket_for(&self.info.prefill_buckets, tokens.len()).min(cap);
        let mut ids: Vec<i64> = tokens.iter().map(|&x| x as i64).collect();
        ids.resize(t, 0);
        // Padding rows sit after the chunk: no real query sees them, and decoding overwrites them.
        let pos: Vec<i64> = (0..t).map(|i| (start + i).min(cap - 1) as i64).collect();
        let mut mask = vec![0u8; t * cap];
        for i in 0..t {
            let upto = (start + i).min(cap - 1);
            mask[i * cap..i * cap + upto + 1].fill(1);
        }
        let d = self.device;
        let ids = Tensor::from_slice_on(&ids, &[1, t], d)?;
        let positions = Tensor::from_slice_on(&pos, &[1, t], d)?;
        let start = Tensor::from_slice_on(&[start as i64], &[], d)?;
        let mask = Tensor::from_bytes_on(&mask, &[1, 1, t, cap], DType::Bool, d)?;
        let rows: Vec<i64> = if all_rows { (0..t as i64).collect() } else { vec![tokens.len() as i64 - 1] };
        let last = Tensor::from_slice_on(&rows, &[rows.len()], d)?;
        let mut args: Vec<&Tensor> = vec![&ids, &positions, &start, &mask, &last];
        args.extend(self.slots[slot].iter());
        let mut outs = self.prefill.call(&args)?.into_iter();
        let logits = outs.next().ok_or_else(|| ServeError::Engine("the prefill returned nothing".into()))?;
        self.slots[slot] = outs.collect();
        Ok(logits.to_dtype(DType::F32)?.to_vec::<f32>()?)
    }
}

/// The next token under the grammar of `m`: tokens it does not allow next cannot be chosen (the
/// logprobs stay the model's); `m` takes the token chosen.
fn constrained(
    m: &mut Matcher,
    sampler: &mut Sampler,
    row: &[f32],
    p: &SamplingParams,
    prompt: &[u32],
    generated: &[u32],
    ends: &[u32],
) -> std::result::Result<u32, String> {
    let ok = allowed(m)?;
    let masked: Vec<f32> =
        row.iter().enumerate().map(|(i, &x)| if ok(i as u32) { x } else { f32::NEG_INFINITY }).collect();
    if masked.iter().all(|x| *x == f32::NEG_INFINITY) {
        return Err("the grammar allows no token here".into());
    }
    let t = sampler.choose(&masked, p, prompt, generated, ends);
    m.consume_token(t).map_err(|e| e.to_string())?;
    Ok(t)
}

/// The decode program: `[ids [B,1], positions [B,1], start [B], mask [B,1,1,S]]` then each
/// row's slot (`layers × (k, v)`, `[1, kv, S, d]` each); returns the logits `[B, 1, vocab]`
/// and each row's updated slot in the same order. The slots are never joined into one batch
/// tensor: each is written and attended as a part of its own (`StaticKvCache::from_rows`).
fn decode_program(lm: &dyn CausalLm, layers: usize, args: &[Tensor]) -> eager::Result<Vec<Tensor>> {
    let b = args[0].shape()[0];
    let slot = |j: usize, l: usize| {
        (args[4 + (j * layers + l) * 2].clone(), args[4 + (j * layers + l) * 2 + 1].clone())
    };
    let mut caches = (0..layers)
        .map(|l| StaticKvCache::from_rows((0..b).map(|j| slot(j, l)).collect()))
        .collect::<eager::Result<Vec<_>>>()?;
    let logits = lm
        .step(&args[0], &args[1], &args[3], Some((&mut caches, &args[2])))
        .map_err(|e| eager::Error::Invalid { op: "serve_decode", msg: e.to_string() })?;
    let per_layer: Vec<Vec<(Tensor, Tensor)>> = caches.into_iter().map(StaticKvCache::into_parts).collect();
    let mut outs = vec![logits];
    for j in 0..b {
        for parts in &per_layer {
            let (k, v) = &parts[j];
            outs.push(k.clone());
            outs.push(v.clone());
        }
    }
    Ok(outs)
}

/// The prefill program: `[ids [1,T], positions [1,T], start [], mask [1,1,T,S], rows [R]]`
/// then the slot's `layers × (k, v)`; returns the logits at `rows` `[1, R, vocab]` and the
/// updated slot.
fn prefill_program(lm: &dyn CausalLm, args: &[Tensor]) -> eager::Result<Vec<Tensor>> {
    let mut caches: Vec<StaticKvCache> = args[5..]
        .chunks(2)
        .map(|kv| StaticKvCache::from_parts(kv[0].clone(), kv[1].clone()))
        .collect::<eager::Result<_>>()?;
    let logits = lm
        .step_at(&args[0], &args[1], &args[3], Some((&mut caches, &args[2])), &args[4])
        .map_err(|e| eager::Error::Invalid { op: "serve_prefill", msg: e.to_string() })?;
    let mut outs = vec![logits];
    outs.extend(caches.into_iter().flat_map(StaticKvCache::into_parts).flat_map(|(k, v)| [k, v]));
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_up_to_the_bound() {
        assert_eq!(buckets(1, 8), vec![1, 2, 4, 8]);
        assert_eq!(buckets(1, 6), vec![1, 2, 4, 6]);
        assert_eq!(buckets(16, 256), vec![16, 32, 64, 128, 256]);
        assert_eq!(buckets(1, 1), vec![1]);
        assert_eq!(bucket_for(&[1, 2, 4, 6], 5), 6);
        assert_eq!(bucket_for(&[16, 32], 3), 16);
    }

    #[test]
    fn prefill_buckets_step_by_64_past_64() {
        assert_eq!(prefill_buckets(256), vec![16, 32, 64, 128, 192, 256]);
        assert_eq!(prefill_buckets(200), vec![16, 32, 64, 128, 192, 200]);
        assert_eq!(prefill_buckets(64), vec![16, 32, 64]);
        assert_eq!(prefill_buckets(40), vec![16, 32, 40]);
        assert_eq!(prefill_buckets(8), vec![8]);
        assert_eq!(prefill_buckets(512).len(), 10);
    }
}
