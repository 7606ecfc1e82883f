//! What the server counts, in Prometheus' text format at `GET /metrics`: requests by outcome,
//! prompt and generated tokens, the queue, the running batch, key/value blocks in use, and
//! histograms of time to first token and of the time between tokens. The engine writes them,
//! the front end renders them; a notebook reads the same figures through [`Metrics::snapshot`].

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// How a request ended, the `outcome` label of `eager_serve_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Generated to its end (a stop, its `max_tokens` or the context's end).
    Completed,
    /// Its client went away before the end; its slot was freed at the next step.
    Cancelled,
    /// Refused: the queue was full (HTTP 503).
    Refused,
    /// Rejected before it ran: a bad parameter, a prompt too long, an unknown model (HTTP 4xx).
    Invalid,
    /// The engine failed while running it.
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Cancelled => "cancelled",
            Outcome::Refused => "refused",
            Outcome::Invalid => "invalid",
            Outcome::Failed => "failed",
        }
    }
}

/// The server's counters, gauges and histograms, in one registry.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    /// Prompt tokens prefilled.
    pub prompt_tokens: IntCounter,
    /// Tokens generated.
    pub generation_tokens: IntCounter,
    /// Prompt tokens of requests that looked for a cached prefix (vLLM's `prefix_cache_queries`).
    pub prefix_cache_queries: IntCounter,
    /// Of them, tokens found cached and not prefilled again (vLLM's `prefix_cache_hits`).
    pub prefix_cache_hits: IntCounter,
    /// Requests waiting for a key/value slot.
    pub queue_length: IntGauge,
    /// Sequences in the last decode step.
    pub running_batch: IntGauge,
    /// Key/value blocks (slots of `max_model_len` positions) held by running requests.
    pub kv_blocks_in_use: IntGauge,
    /// Key/value blocks in all.
    pub kv_blocks_total: IntGauge,
    /// Seconds from a request's arrival to its first token.
    pub time_to_first_token: Histogram,
    /// Seconds between a request's consecutive tokens.
    pub inter_token_latency: Histogram,
    /// Seconds of one engine step (its prefill chunks and its decode step).
    pub step_seconds: Histogram,
}

/// The figures a live display shows, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    /// Requests that completed.
    pub completed: u64,
    /// Tokens generated so far.
    pub generation_tokens: u64,
    /// Requests waiting.
    pub queue_length: i64,
    /// Sequences in the last decode step.
    pub running_batch: i64,
    /// Key/value blocks in use and in all.
    pub kv_blocks: (i64, i64),
}

fn buckets() -> Vec<f64> {
    vec![0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]
}

impl Metrics {
    /// Fresh metrics, every figure zero.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("eager_serve_requests_total", "Requests by how they ended"),
            &["outcome"],
        )
        .expect("a valid counter");
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("a valid counter");
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("a valid gauge");
        let histogram = |name: &str, help: &str| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets()))
                .expect("a valid histogram")
        };
        let m = Metrics {
            requests,
            prompt_tokens: counter("eager_serve_prompt_tokens_total", "Prompt tokens prefilled"),
            generation_tokens: counter("eager_serve_generation_tokens_total", "Tokens generated"),
            prefix_cache_queries: counter(
                "eager_serve_prefix_cache_queries_total",
                "Prompt tokens of requests that looked for a cached prefix",
            ),
            prefix_cache_hits: counter(
                "eager_serve_prefix_cache_hits_total",
                "Prompt tokens found cached in a slot and not prefilled again",
            ),
            queue_length: gauge("eager_serve_queue_length", "Requests waiting for a key/value block"),
            running_batch: gauge("eager_serve_running_batch", "Sequences in the last decode step"),
            kv_blocks_in_use: gauge(
                "eager_serve_kv_blocks_in_use",
                "Key/value cache blocks (slots of max_model_len positions) held by running requests",
            ),
            kv_blocks_total: gauge("eager_serve_kv_blocks_total", "Key/value cache blocks in all"),
            time_to_first_token: histogram(
                "eager_serve_time_to_first_token_seconds",
                "Seconds from a request's arrival to its first token",
            ),
            inter_token_latency: histogram(
                "eager_serve_inter_token_latency_seconds",
                "Seconds between consecutive tokens of a request",
            ),
            step_seconds: histogram("eager_serve_step_seconds", "Seconds of one engine step"),
            registry,
        };
        m.registry.register(Box::new(m.requests.clone())).expect("registered once");
        for c in [&m.prompt_tokens, &m.generation_tokens, &m.prefix_cache_queries, &m.prefix_cache_hits] {
            m.registry.register(Box::new(c.clone())).expect("registered once");
        }
        for g in [&m.queue_length, &m.running_batch, &m.kv_blocks_in_use, &m.kv_blocks_total] {
            m.registry.register(Box::new(g.clone())).expect("registered once");
        }
        for h in [&m.time_to_first_token, &m.inter_token_latency, &m.step_seconds] {
            m.registry.register(Box::new(h.clone())).expect("registered once");
        }
        // Every outcome shows from the start, at zero.
        for o in [Outcome::Completed, Outcome::Cancelled, Outcome::Refused, Outcome::Invalid, Outcome::Failed]
        {
            m.requests.with_label_values(&[o.label()]);
        }
        m
    }

    /// Counts a request that ended with `outcome`.
    pub fn request(&self, outcome: Outcome) {
        self.requests.with_label_values(&[outcome.label()]).inc();
    }

    /// Requests that ended with `outcome` so far.
    pub fn requests(&self, outcome: Outcome) -> u64 {
        self.requests.with_label_values(&[outcome.label()]).get()
    }

    /// The figures a live display shows.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            completed: self.requests(Outcome::Completed),
            generation_tokens: self.generation_tokens.get(),
            queue_length: self.queue_length.get(),
            running_batch: self.running_batch.get(),
            kv_blocks: (self.kv_blocks_in_use.get(), self.kv_blocks_total.get()),
        }
    }

    /// Every metric in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding to memory");
        String::from_utf8(out).expect("Prometheus' text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_names_each_figure_with_its_value() {
        let m = Metrics::new();
        m.request(Outcome::Completed);
        m.request(Outcome::Completed);
        m.request(Outcome::Refused);
        m.generation_tokens.inc_by(7);
        m.kv_blocks_total.set(4);
        m.time_to_first_token.observe(0.03);
        let text = m.render();
        assert!(text.contains("eager_serve_requests_total{outcome=\"completed\"} 2"), "{text}");
        assert!(text.contains("eager_serve_requests_total{outcome=\"refused\"} 1"), "{text}");
        assert!(text.contains("eager_serve_requests_total{outcome=\"cancelled\"} 0"), "{text}");
        assert!(text.contains("eager_serve_generation_tokens_total 7"), "{text}");
        assert!(text.contains("eager_serve_kv_blocks_total 4"), "{text}");
        assert!(text.contains("eager_serve_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"), "{text}");
        assert!(text.contains("eager_serve_time_to_first_token_seconds_bucket{le=\"0.02\"} 0"), "{text}");
        assert!(text.contains("# TYPE eager_serve_inter_token_latency_seconds histogram"), "{text}");
        assert_eq!(m.snapshot().completed, 2);
    }
}
