//! `eager-serve`: serves a Hugging Face checkpoint directory over OpenAI's API until SIGTERM or
//! Ctrl-C, then lets the running requests finish and exits.

use anyhow::Context;
use clap::Parser;
use eager::{DType, Device};
use eager_models::{AutoModel, GenerationConfig, Tokenizer};
use eager_serve::{EngineOptions, Server, ServerOptions};

/// Serve a Hugging Face checkpoint over an OpenAI-compatible HTTP API, with continuous batching.
#[derive(Parser, Debug)]
#[command(name = "eager-serve", version)]
struct Args {
    /// The checkpoint directory (config.json, safetensors, tokenizer.json).
    #[arg(long)]
    model: std::path::PathBuf,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port (0: a free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The weights' dtype on the device (f32 or bf16; default: the checkpoint's).
    #[arg(long)]
    dtype: Option<String>,
    /// The device, `cpu:0`, `tpu:0`, `cuda:0` (default: eager's default device).
    #[arg(long)]
    device: Option<String>,
    /// Split the model over this many devices of `--device`'s kind, from it on (tensor
    /// parallelism over a mesh axis `model`, as vLLM's `--tensor-parallel-size`).
    #[arg(long, default_value_t = 1)]
    tensor_parallel: usize,
    /// Most sequences decoding together.
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Most positions of one sequence (default: the model's, at most 2048).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// A bound on the key/value cache, in bytes (fewer slots than --max-batch where it binds).
    #[arg(long)]
    kv_cache_memory: Option<u64>,
    /// Most prompt tokens prefilled per step (longer prompts go in chunks).
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    /// Most requests waiting for a slot; more get 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Requests need `Authorization: Bearer KEY`.
    #[arg(long, env = "EAGER_SERVE_API_KEY")]
    api_key: Option<String>,
    /// The model's name in the API (default: the directory's name).
    #[arg(long)]
    served_model_name: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    keep_freed_memory();
    let dtype = match args.dtype.as_deref() {
        None => None,
        Some("f32" | "float32") => Some(DType::F32),
        Some("bf16" | "bfloat16") => Some(DType::BF16),
        Some(other) => anyhow::bail!("--dtype must be f32 or bf16, got `{other}`"),
    };
    let device = match &args.device {
        Some(d) => d.parse::<Device>().map_err(|e| anyhow::anyhow!("--device `{d}`: {e}"))?,
        None => eager::default_device(),
    };
    eager::set_default_device(device);
    let started = std::time::Instant::now();
    let model = if args.tensor_parallel > 1 {
        let all = eager::devices(device.kind).context("listing the devices")?;
        let chips: Vec<Device> =
            all.iter().copied().filter(|d| d.index >= device.index).take(args.tensor_parallel).collect();
        if chips.len() < args.tensor_parallel {
            anyhow::bail!(
                "--tensor-parallel {} needs {} {:?} devices from {device} on; there are {}",
                args.tensor_parallel,
                args.tensor_parallel,
                device.kind,
                chips.len()
            );
        }
        let mesh = eager::Mesh::with_devices(&[("model", args.tensor_parallel)], &chips)?;
        AutoModel::from_dir_sharded(&args.model, &mesh, dtype)
    } else {
        AutoModel::from_dir(&args.model, device, dtype)
    }
    .with_context(|| format!("loading {}", args.model.display()))?;
    let tokenizer = Tokenizer::from_dir(&args.model)
        .with_context(|| format!("the tokenizer of {}", args.model.display()))?;
    let generation = GenerationConfig::from_dir(&args.model)
        .with_context(|| format!("the generation config of {}", args.model.display()))?;
    let canonical = args.model.canonicalize().unwrap_or_else(|_| args.model.clone());
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        canonical.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
    });
    // As vLLM and `transformers serve`, the path it was started with names the model too.
    let mut aliases =
        vec![args.model.to_string_lossy().into_owned(), canonical.to_string_lossy().into_owned()];
    aliases.dedup();
    aliases.retain(|a| *a != name);
    let opts = ServerOptions {
        host: args.host.clone(),
        port: args.port,
        model_name: name.clone(),
        model_aliases: aliases,
        defaults: generation.clone(),
        api_key: args.api_key.clone(),
        engine: EngineOptions {
            max_batch: args.max_batch,
            max_model_len: args.max_model_len,
            kv_cache_memory: args.kv_cache_memory,
            prefill_chunk: args.prefill_chunk,
            max_waiting: args.max_waiting,
            eos_token_ids: generation.eos_token_ids.clone(),
        },
    };
    let server = Server::start(model, tokenizer, opts).context("starting the server")?;
    let info = server.info();
    // One line a script can wait for: the URL once requests are answered.
    println!(
        "eager-serve: `{name}` on {device} at {} ({} slots of {} positions, {:.1} MB of key/value cache, programs ready in {:.1} s, started in {:.1} s)",
        server.url(),
        info.slots,
        info.max_model_len,
        info.kv_cache_bytes as f64 / 1e6,
        info.warmup_seconds,
        started.elapsed().as_secs_f64()
    );
    if !wait_for_signal(&server)? {
        eprintln!("eager-serve: the engine stopped unexpectedly (see above); exiting");
        std::process::exit(1);
    }
    eprintln!("eager-serve: shutting down: finishing the running requests");
    server.stop();
    eprintln!("eager-serve: stopped");
    Ok(())
}

/// Blocks until SIGTERM or SIGINT (true), or until the engine dies (false): a server whose
/// engine is gone must not go on answering as if it served.
fn wait_for_signal(server: &Server) -> anyhow::Result<bool> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let signalled = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut check = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = term.recv() => return Ok::<bool, std::io::Error>(true),
                _ = tokio::signal::ctrl_c() => return Ok(true),
                _ = check.tick() => if !server.engine_alive() { return Ok(false) },
            }
        }
    })?;
    Ok(signalled)
}

/// Every step frees and allocates the same large buffers (key/value slots, activations): with
/// glibc's defaults freed memory above 128 KiB goes back to the kernel and comes back as fresh,
/// zeroed pages at the next step (measured: a third of a batch-8 decode step in page faults).
/// Kept in the heap instead, it is reused; the process's memory stays at its peak.
fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; called before other threads allocate.
    unsafe {
        // No allocation is its own mapping (a program's temporaries, hundreds of MB, were
        // mapped and unmapped at every step), and no freed memory is trimmed.
        // One arena: threads' arenas are mapped heaps that are unmapped when they empty.
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
