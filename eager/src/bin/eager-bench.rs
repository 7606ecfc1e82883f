//! `cargo run --release -p eager --bin eager-bench [-- --json]`: what eager dispatch costs,
//! from one run, as medians. Prints figures only; nothing here asserts a time.
//!
//! - the raw PJRT floor: the very executable a cached tiny add runs, executed through the
//!   PJRT layer alone, against our cached `Tensor::add` (and the parts of our hit path);
//! - a 100-op chain of mixed ops and a 3-layer MLP forward (ops/s, passes/s);
//! - first calls: compiled cold, and loaded from the disk cache in a fresh process, per op
//!   with the tier it got, and the first step of an MLP 784-256-10 (ms and executables);
//! - the compile tiers: a one-op compile at each, the execute of large ops at each, and the
//!   keys swapped to the optimized tier as they turned hot;
//! - training steps/s of an MLP 784-256-10, the digits CNN and the character GPT of the
//!   notebooks, eager and compiled into one program; the MLP data-parallel over 1, 2 and 4
//!   devices, and what a one-op SPMD program takes to compile;
//! - matmul 1024 f32 GFLOP/s, ours against the raw execute;
//! - device memory of one MLP training step (live between steps, the peak, what is largest at
//!   it), and resident memory after 1 000 000 ops.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use eager::ops::{Binary, Matmul, Op};
use eager::pjrt::Buffer;
use eager::prelude::*;
use eager::profiler::CacheOutcome;
use eager::{runtime, DeviceKind};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

const USAGE: &str = "usage: eager-bench [--json] [--calls N] [--memory-ops N]
  --json          print one JSON object instead of the report
  --calls N       calls per hit-path median (default 20000)
  --memory-ops N  ops in the memory run (default 1000000)";

/// Command-line flags. Parsed by hand, not with clap: eager's dependencies are built by every
/// new REPL session (evcxr), so the library keeps them few.
struct Args {
    json: bool,
    calls: usize,
    memory_ops: usize,
    /// Internal: run the first-call ops in this process and print their outcomes as JSON.
    first_call_child: bool,
    /// With it: the pause between the runtime's start and the first ops (a user typing).
    pause_ms: usize,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut a =
            Args { json: false, calls: 20_000, memory_ops: 1_000_000, first_call_child: false, pause_ms: 0 };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut number = |name: &str| -> anyhow::Result<usize> {
                let v = it.next().with_context(|| format!("{name} needs a number\n{USAGE}"))?;
                v.parse().with_context(|| format!("{name}: {v:?} is not a number\n{USAGE}"))
            };
            match flag.as_str() {
                "--json" => a.json = true,
                "--calls" => a.calls = number("--calls")?.max(10),
                "--memory-ops" => a.memory_ops = number("--memory-ops")?,
                "--first-call-child" => a.first_call_child = true,
                "--pause-ms" => a.pause_ms = number("--pause-ms")?,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => anyhow::bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        Ok(a)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median µs of `f` over `n` calls (after a warm-up of n/10).
fn time_calls(n: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    median(samples)
}

/// Median µs of `a` and of `b` over `n` calls each, timed alternately (after a warm-up).
fn time_alternating(n: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    for _ in 0..n / 10 {
        a();
        b();
    }
    let (mut ta, mut tb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        a();
        ta.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        b();
        tb.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median(ta), median(tb))
}

#[derive(Serialize, Deserialize, Default)]
struct HitPath {
    /// Raw PJRT execute of the cached add's executable (no completion event, no wait).
    raw_execute_us: f64,
    /// The same, waiting for completion.
    raw_execute_wait_us: f64,
    /// Our cached `Tensor::add`, asynchronous.
    ours_us: f64,
    ours_minus_raw_us: f64,
    /// Ours, then waiting for the result.
    ours_wait_us: f64,
    /// Ours with the profiler off (the difference is event recording).
    ours_profiler_off_us: f64,
    /// Key build + hash + locked lookup alone.
    key_lookup_us: f64,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct FirstCall {
    op: String,
    outcome: String,
    /// The compile tier of the executable that ran (`quick`, `optimized`).
    tier: String,
    /// Time to get the executable (compile or disk load).
    fetch_ms: f64,
    /// The whole first call, result read back.
    first_call_ms: f64,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct FirstStep {
    ms: f64,
    /// Distinct executables the step needed (compiled or loaded).
    executables: usize,
    /// Of those, fetched ahead side by side (the backward pass and the SGD step).
    #[serde(default)]
    fetched_ahead: u64,
    /// The next 10 steps (median), before any key turned hot: the quick tier's speed where
    /// the first step compiled.
    then_steps_per_s: f64,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct TierExecute {
    op: String,
    quick_us: f64,
    optimized_us: f64,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct ChildReport {
    ops: Vec<FirstCall>,
    mlp_first_step: FirstStep,
}

#[derive(Serialize, Deserialize, Default)]
struct Report {
    platform: String,
    devices: usize,
    runtime_start_ms: f64,
    hit_path: HitPath,
    chain_100_ops_ms: f64,
    chain_ops_per_s: f64,
    mlp_forward_ms: f64,
    mlp_forward_per_s: f64,
    first_call_cold: Vec<FirstCall>,
    first_call_disk: Vec<FirstCall>,
    /// The first SGD step of an MLP 784-256-10 (batch 64) in a fresh process, cold and from
    /// the disk cache the cold run filled.
    mlp_first_step_cold: FirstStep,
    mlp_first_step_disk: FirstStep,
    /// The same from the disk cache with the warm start on (`EAGER_PRELOAD=1`, as the REPL
    /// and kernel run): the last session's executables load in the background from the
    /// runtime's start, here with no pause before the first ops.
    #[serde(default)]
    mlp_first_step_warm: FirstStep,
    /// The same a second after the runtime started (the REPL's case: the user types first).
    #[serde(default)]
    mlp_first_step_warm_after_pause: FirstStep,
    /// A cold compile of the first add of a new shape in such a session (warm-up done).
    #[serde(default)]
    first_add_in_session_ms: f64,
    /// A one-op add (f32[n, 53] + f32[n, 53], fresh shapes), compiled at each tier: medians.
    add_compile_quick_ms: f64,
    add_compile_optimized_ms: f64,
    /// Large ops executed at each tier (median µs of 20 runs, waited for).
    tier_execute: Vec<TierExecute>,
    /// Keys swapped to the optimized tier over the whole run, and their background compiles.
    tier_swaps: u64,
    tier_swap_compile_ms: f64,
    /// Steady training steps/s (after the keys turned hot): eager, fused, compiled.
    train_mlp_784_256_10_steps_per_s: Steps,
    train_cnn_digits_steps_per_s: Steps,
    train_gpt_char_steps_per_s: Steps,
    /// (devices, eager steps/s, compiled steps/s) of the MLP 784-256-10, global batch 64,
    /// data-parallel.
    data_parallel_mlp_steps_per_s: Vec<(usize, f64, f64)>,
    /// Getting the executable of a one-op SPMD program over 4 devices.
    sharded_add_compile_ms: f64,
    sharded_add_compile_outcome: String,
    matmul_1024_gflops: f64,
    matmul_1024_raw_gflops: f64,
    /// Device memory of one eager step of the MLP 784-256-10 (eager's ledger): what stays
    /// live between steps (weights, momentum, batch), the peak during a step, and the tensor
    /// largest at that peak.
    mlp_step_live_kib: f64,
    mlp_step_peak_kib: f64,
    mlp_step_largest_at_peak: String,
    /// The compiled MLP step's memory: (parameters and optimizer state KiB, peak above the
    /// live memory with them donated KiB, the same with their old values held elsewhere KiB).
    #[serde(default)]
    mlp_compiled_step_memory_kib: (f64, f64, f64),
    memory_ops: usize,
    rss_before_mib: f64,
    rss_after_mib: f64,
}

/// The ops timed on first call, at shapes nothing else in the bench uses.
fn first_call_ops() -> Result<Vec<FirstCall>> {
    let m = Tensor::from_slice(&(0..37 * 53).map(|i| i as f32 / 100.0).collect::<Vec<_>>(), &[37, 53])?;
    let v = Tensor::from_slice(&[0.5f32; 53], &[53])?;
    type Case<'a> = (&'a str, Box<dyn Fn() -> Result<Tensor> + 'a>);
    let cases: Vec<Case> = vec![
        ("add (broadcast)", Box::new(|| m.add(&v))),
        ("exp", Box::new(|| m.exp())),
        ("matmul", Box::new(|| m.matmul(&m.t()?))),
        ("sum over dim 1", Box::new(|| m.sum(&[1], false))),
        ("argmax", Box::new(|| m.argmax(Some(1), false))),
        ("cast to bf16", Box::new(|| m.to_dtype(DType::BF16))),
    ];
    let mut out = Vec::new();
    for (label, f) in &cases {
        let mark = profiler::next_seq();
        let t = Instant::now();
        f()?.to_f64_vec()?;
        let first_call_ms = t.elapsed().as_secs_f64() * 1e3;
        let events = profiler::events_since(mark);
        // The last op event is the op itself (transposes and the like come first).
        let op = events.iter().rev().find(|e| e.cache.is_some()).expect("an op ran");
        let outcome = match op.cache {
            Some(CacheOutcome::Miss) => "compiled",
            Some(CacheOutcome::DiskHit) => "disk",
            _ => "memory",
        };
        let fetch_ns: u64 = events.iter().map(|e| e.compile_ns).sum();
        out.push(FirstCall {
            op: label.to_string(),
            outcome: outcome.into(),
            tier: op.info.tier.to_string(),
            fetch_ms: fetch_ns as f64 / 1e6,
            first_call_ms,
        });
    }
    Ok(out)
}

/// The first SGD step of an MLP 784-256-10 in this process: its wall time, result read
/// back, and the executables it needed.
fn mlp_first_step() -> Result<FirstStep> {
    use eager::nn::Module;
    let m = Mlp::new(None)?;
    synchronize();
    let (mark, ahead) = (profiler::next_seq(), eager::cache::stats().ahead);
    let t = Instant::now();
    m.step(&m.x, &m.y)?.item::<f32>()?;
    for p in m.model.parameters() {
        p.get().block_until_ready()?;
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let fetched_ahead = eager::cache::stats().ahead - ahead;
    let executables = profiler::events_since(mark)
        .iter()
        .filter(|e| matches!(e.cache, Some(CacheOutcome::Miss | CacheOutcome::DiskHit)))
        .count();
    let mut steps = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        m.step(&m.x, &m.y)?.block_until_ready()?;
        steps.push(t.elapsed().as_secs_f64());
    }
    Ok(FirstStep { ms, executables, fetched_ahead, then_steps_per_s: 1.0 / median(steps) })
}

/// Compile medians of a one-op add at `tier`, over fresh shapes (offset by `round`).
fn add_compile_ms(rt: &runtime::Runtime, tier: eager::pjrt::Tier, round: usize) -> Result<f64> {
    let mut ms = Vec::new();
    for n in [37, 41, 43, 47, 53] {
        let s = eager::Spec::new(&[n + 100 * round, 53], DType::F32);
        let m = Op::Binary(Binary::Add).emit_module(&[s.clone(), s.clone()], &s);
        let t = Instant::now();
        rt.client
            .compile(&m, &eager::pjrt::compile_options(tier, None))
            .map_err(|e| Error::Invalid { op: "compile", msg: e.to_string() })?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(ms))
}

/// Large ops executed at each tier (what the quick tier costs a hot key until its swap).
fn tier_execute(rt: &runtime::Runtime) -> Result<Vec<TierExecute>> {
    use eager::ops::{Reduce, ReduceKind, Unary};
    use eager::pjrt::{compile_options, Tier};
    let x = Tensor::rand(&[1 << 22], DType::F32)?;
    let h = Tensor::rand(&[1024, 1024], DType::F32)?;
    let a = Tensor::rand(&[512, 512], DType::F32)?;
    let row_sum = Op::Reduce(Reduce { kind: ReduceKind::Sum, dims: [1].as_slice().into(), keepdim: false });
    let cases: Vec<(&str, Op, Vec<&Tensor>)> = vec![
        ("add f32[4M]", Op::Binary(Binary::Add), vec![&x, &x]),
        ("exp f32[4M]", Op::Unary(Unary::Exp), vec![&x]),
        ("row sum f32[1024, 1024]", row_sum, vec![&h]),
        ("matmul f32[512, 512]", Op::Matmul(Matmul::default()), vec![&a, &a]),
    ];
    let dev = &rt.client.devices[0];
    let mut out = Vec::new();
    for (label, op, inputs) in cases {
        let specs: Vec<eager::Spec> = inputs.iter().map(|t| t.spec().clone()).collect();
        let module = op.emit_module(&specs, &op.infer(&specs)?);
        let buffers: Vec<&Buffer> = inputs.iter().map(|t| t.buffer()).collect::<Result<_>>()?;
        let mut us = [0.0; 2];
        for (i, tier) in [Tier::Quick, Tier::Optimized].into_iter().enumerate() {
            let exe = rt
                .client
                .compile(&module, &compile_options(tier, None))
                .map_err(|e| Error::Invalid { op: "compile", msg: e.to_string() })?;
            us[i] = time_calls(20, || {
                let mut o: SmallVec<[Buffer; 1]> = SmallVec::new();
                exe.execute_and_wait(&buffers, dev, &mut o).unwrap();
            });
        }
        out.push(TierExecute { op: label.into(), quick_us: us[0], optimized_us: us[1] });
    }
    Ok(out)
}

/// Runs the first-call ops and an MLP's first step in a fresh process with the disk cache at
/// `dir` (its warm start on with `preload`), `pause_ms` after its runtime started.
fn first_call_in_child(dir: &Path, preload: bool, pause_ms: usize) -> anyhow::Result<ChildReport> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--first-call-child", "--pause-ms", &pause_ms.to_string()])
        .env("EAGER_COMPILE_CACHE", "on")
        .env("EAGER_COMPILE_CACHE_DIR", dir)
        .env("EAGER_PRELOAD", if preload { "1" } else { "0" })
        .output()
        .context("running the first-call child")?;
    anyhow::ensure!(
        out.status.success(),
        "first-call child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn mlp_forward(x: &Tensor, layers: &[(Tensor, Tensor)]) -> Result<Tensor> {
    let mut h = x.clone();
    for (i, (w, b)) in layers.iter().enumerate() {
        h = h.matmul(w)?.add(b)?;
        if i + 1 < layers.len() {
            h = h.relu()?;
        }
    }
    Ok(h)
}

/// Steps per second of one training step on `(x, y)`, eager then compiled into one program.
fn steps_per_s(
    name: &str,
    x: &Tensor,
    y: &Tensor,
    step: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Steps> {
    step(x, y)?.block_until_ready()?;
    // Steady speed: once the step's keys turned hot and were swapped to the optimized tier.
    let hot = cache::tiering().hot_calls.min(1000) as usize;
    for _ in 0..hot {
        step(x, y)?.block_until_ready()?;
    }
    runtime::wait_for_promotions();
    let eager_us = time_calls(100, || {
        step(x, y).unwrap().block_until_ready().unwrap();
    });
    // Fused: the same eager code, each step one region run as one program.
    eager::fused(|| step(x, y))?.block_until_ready()?;
    let fused_us = time_calls(100, || {
        eager::fused(|| step(x, y)).unwrap().block_until_ready().unwrap();
    });
    let compiled = compile(name, |a: &[Tensor]| Ok(vec![step(&a[0], &a[1])?]));
    compiled.call(&[x, y])?[0].block_until_ready()?;
    let compiled_us = time_calls(100, || {
        compiled.call(&[x, y]).unwrap()[0].block_until_ready().unwrap();
    });
    Ok(Steps { eager: 1e6 / eager_us, fused: 1e6 / fused_us, compiled: 1e6 / compiled_us })
}

/// Training steps per second, each step dispatched op by op, as one fused region, and
/// compiled into one program.
#[derive(Serialize, Deserialize, Default, Clone, Copy)]
struct Steps {
    eager: f64,
    fused: f64,
    compiled: f64,
}

/// The MLP 784-256-10 the bench trains: seeded, SGD with momentum 0.9, a fixed batch of 64;
/// with `mesh`, the batch split over its axis `data` and the weights whole on each device.
struct Mlp {
    model: eager::nn::Sequential,
    sgd: eager::optim::Sgd,
    x: Tensor,
    y: Tensor,
}

impl Mlp {
    fn new(mesh: Option<&eager::Mesh>) -> Result<Mlp> {
        use eager::nn::{Linear, Module, Relu, Sequential};
        manual_seed(1);
        let model = Sequential::new().add(Linear::new(784, 256)?).add(Relu).add(Linear::new(256, 10)?);
        let mut x = Tensor::rand(&[64, 784], DType::F32)?;
        let mut y = Tensor::from_slice(&(0..64).map(|i| (i % 10) as i64).collect::<Vec<_>>(), &[64])?;
        if let Some(mesh) = mesh {
            for p in model.parameters() {
                p.set(p.get().replicate(mesh)?)?;
            }
            let data = eager::PartitionSpec::new(&[Some("data")]);
            (x, y) = (x.shard(mesh, &data)?, y.shard(mesh, &data)?);
        }
        // The optimizer's state is made where the weights are.
        let sgd = eager::optim::Sgd::with_momentum(model.parameters(), 0.05, 0.9)?;
        Ok(Mlp { model, sgd, x, y })
    }

    /// One SGD step on `(x, y)`; returns the loss.
    fn step(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        use eager::nn::Module;
        use eager::optim::Optimizer;
        let loss = eager::nn::cross_entropy(&self.model.forward(x)?, y)?;
        loss.backward()?;
        self.sgd.step()?;
        self.sgd.zero_grad();
        Ok(loss)
    }
}

/// SGD (momentum 0.9) on an MLP 784-256-10 with batch 64.
fn train_mlp() -> Result<Steps> {
    let m = Mlp::new(None)?;
    steps_per_s("train_step", &m.x, &m.y, |x, y| m.step(x, y))
}

/// (live KiB between steps, peak KiB during one, the largest tensor at the peak) of the
/// MLP's eager step.
fn mlp_step_memory() -> Result<(f64, f64, String)> {
    let m = Mlp::new(None)?;
    // Warm: the momentum buffers exist after the first step.
    m.step(&m.x, &m.y)?.item::<f32>()?;
    synchronize();
    eager::memory::reset_peak();
    let base = eager::memory::live_bytes();
    m.step(&m.x, &m.y)?.item::<f32>()?;
    let snap = eager::memory::snapshot();
    let largest = snap.at_peak.first().map(|t| t.describe()).unwrap_or_default();
    Ok((base as f64 / 1024.0, snap.peak_bytes as f64 / 1024.0, largest))
}

/// The compiled MLP step's device memory: (bytes of its parameters and momentum, the peak
/// above the live memory of a step that overwrites them in place, the peak of the same step
/// while their old values are held elsewhere, so that they are copied, not donated), in KiB.
fn mlp_compiled_step_memory() -> Result<(f64, f64, f64)> {
    use eager::optim::Optimizer;
    let m = Mlp::new(None)?;
    let step = compile("mlp_memory_step", |a: &[Tensor]| Ok(vec![m.step(&a[0], &a[1])?]));
    let vars: Vec<eager::Var> = m.model.parameters().into_iter().chain(m.sgd.state()).collect();
    let updated: u64 = vars.iter().map(|v| v.get().spec().size_in_bytes() as u64).sum();
    let peak_above_live = |hold: bool| -> Result<f64> {
        step.call(&[&m.x, &m.y])?[0].item::<f32>()?;
        let held: Vec<Tensor> = if hold { vars.iter().map(eager::Var::get).collect() } else { Vec::new() };
        synchronize();
        eager::memory::reset_peak();
        let live = eager::memory::live_bytes();
        step.call(&[&m.x, &m.y])?[0].item::<f32>()?;
        drop(held);
        Ok(eager::memory::snapshot().peak_bytes.saturating_sub(live) as f64 / 1024.0)
    };
    let donated = peak_above_live(false)?;
    let held = peak_above_live(true)?;
    Ok((updated as f64 / 1024.0, donated, held))
}

/// SGD steps per second of the MLP 784-256-10 on a global batch of 64, data-parallel over
/// the first `devices` devices (batch split over a mesh axis `data`, weights whole on each
/// device; one device: no mesh at all), eager then compiled into one (SPMD) program.
fn train_mlp_data_parallel(devices: usize) -> Result<Steps> {
    let mesh = (devices > 1).then(|| eager::Mesh::new(&[("data", devices)])).transpose()?;
    let m = Mlp::new(mesh.as_ref())?;
    steps_per_s(&format!("dp_step_{devices}"), &m.x, &m.y, |x, y| m.step(x, y))
}

/// Milliseconds to get the executable of an add over 4 devices (rows split) at a shape
/// nothing else uses: a compile, or a load from the persistent cache of an earlier run.
fn sharded_add_compile_ms() -> anyhow::Result<(f64, String)> {
    use eager::{Mesh, PartitionSpec};
    let mesh = Mesh::new(&[("data", 4)])?;
    let x = Tensor::ones(&[4, 1237], DType::F32)?.shard(&mesh, &PartitionSpec::new(&[Some("data")]))?;
    let mark = profiler::next_seq();
    x.add(&x)?.block_until_ready()?;
    let e = profiler::events_since(mark).into_iter().find(|e| e.name() == "add").context("no add event")?;
    let how = if e.cache == Some(CacheOutcome::DiskHit) { "disk cache" } else { "compiled" };
    Ok((e.compile_ns as f64 / 1e6, how.to_string()))
}

/// SGD (momentum 0.9) on the digits CNN of notebook 05 with batch 64 of `[1, 8, 8]` images:
/// conv 3×3 (1→16, pad 1), relu, max-pool 2, conv 3×3 (16→32, pad 1), relu, max-pool 2,
/// linear 128→10.
fn train_cnn() -> Result<Steps> {
    use eager::nn::{self, Conv2d, Flatten, Linear, MaxPool2d, Module, Relu, Sequential};
    use eager::optim::{Optimizer, Sgd};
    manual_seed(1);
    let conv = |i, o| Conv2d::with_options(i, o, [3, 3], [1, 1], 1.into(), [1, 1], 1, true, DType::F32);
    let model = Sequential::new()
        .add(conv(1, 16)?)
        .add(Relu)
        .add(MaxPool2d::new([2, 2]))
        .add(conv(16, 32)?)
        .add(Relu)
        .add(MaxPool2d::new([2, 2]))
        .add(Flatten)
        .add(Linear::new(128, 10)?);
    let sgd = Sgd::with_momentum(model.parameters(), 0.05, 0.9)?;
    let x = Tensor::rand(&[64, 1, 8, 8], DType::F32)?;
    let y = Tensor::from_slice(&(0..64).map(|i| (i % 10) as i64).collect::<Vec<_>>(), &[64])?;
    steps_per_s("cnn_step", &x, &y, |x, y| {
        let loss = nn::cross_entropy(&model.forward(x)?, y)?;
        loss.backward()?;
        sgd.step()?;
        sgd.zero_grad();
        Ok(loss)
    })
}

/// AdamW on the character GPT of notebook 06 with batch 16 of 32 tokens: vocabulary 64,
/// width 64, 4 heads, 2 pre-norm blocks, learned positions.
fn train_gpt() -> Result<Steps> {
    use eager::nn::{self, Embedding, LayerNorm, Linear, Module, TransformerBlock};
    use eager::optim::{Adam, Optimizer};
    manual_seed(1);
    let (vocab, ctx, width) = (64usize, 32usize, 64usize);
    let tokens = Embedding::new(vocab, width)?;
    let positions = Embedding::new(ctx, width)?;
    let blocks = [TransformerBlock::new(width, 4)?, TransformerBlock::new(width, 4)?];
    let (norm, head) = (LayerNorm::new(width)?, Linear::new(width, vocab)?);
    let mut params = tokens.parameters();
    params.extend(positions.parameters());
    blocks.iter().for_each(|b| params.extend(b.parameters()));
    params.extend(norm.parameters());
    params.extend(head.parameters());
    let adam = Adam::adamw(params, 3e-3, 0.01)?;
    let draw = |seed: u64| -> Result<Tensor> {
        let ids: Vec<i64> =
            (0..16 * ctx as u64).map(|i| ((i * 37 + seed * 11) % vocab as u64) as i64).collect();
        Tensor::from_slice(&ids, &[16, ctx])
    };
    let (x, y) = (draw(1)?, draw(2)?);
    let place = Tensor::arange(0.0, ctx as f64, 1.0, DType::I64)?;
    steps_per_s("gpt_step", &x, &y, |x, y| {
        let mut h = tokens.forward(x)?.add(&positions.forward(&place)?)?;
        for b in &blocks {
            h = b.forward(&h)?;
        }
        let logits = head.forward(&norm.forward(&h)?)?;
        let loss = nn::cross_entropy(&logits.reshape(&[-1, vocab as isize])?, &y.reshape(&[-1])?)?;
        loss.backward()?;
        adam.step()?;
        adam.zero_grad();
        Ok(loss)
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    if args.first_call_child {
        if args.pause_ms > 0 {
            eager::devices(eager::default_device().kind)?;
            std::thread::sleep(std::time::Duration::from_millis(args.pause_ms as u64));
        }
        let report = ChildReport { ops: first_call_ops()?, mlp_first_step: mlp_first_step()? };
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let mut r = Report::default();
    let t = Instant::now();
    let rt = runtime::runtime(DeviceKind::Cpu)?;
    r.runtime_start_ms = t.elapsed().as_secs_f64() * 1e3;
    r.platform =
        format!("{} (PJRT C API {}.{})", rt.client.platform_name, rt.api_version().0, rt.api_version().1);
    r.devices = rt.client.devices.len();
    profiler::set_capacity(1024); // keep the log small; recording stays on as users have it

    // The hit path against the raw execute of the very same executable.
    let data = [1.0f32, 2.0, 3.0, 4.0];
    let x = Tensor::from_slice(&data, &[4])?;
    let y = Tensor::from_slice(&data, &[4])?;
    let exe = eager::tensor::executable_for(Op::Binary(Binary::Add), &[&x, &y])?;
    let dev = &rt.client.devices[0];
    let raw_args = [x.buffer()?, y.buffer()?];
    let n = args.calls;
    let h = &mut r.hit_path;
    // The pairs that are compared are timed call by call, alternating, so that both see the
    // same machine (frequency, other load) and the difference is ours.
    let (raw, ours) = time_alternating(
        n,
        || {
            let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
            let _ = exe.execute(&raw_args, dev, &mut out, false, &[]).unwrap();
        },
        || {
            let _z = x.add(&y).unwrap();
        },
    );
    (h.raw_execute_us, h.ours_us) = (raw, ours);
    let (raw_wait, ours_wait) = time_alternating(
        n,
        || {
            let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
            exe.execute_and_wait(&raw_args, dev, &mut out).unwrap();
        },
        || {
            x.add(&y).unwrap().block_until_ready().unwrap();
        },
    );
    (h.raw_execute_wait_us, h.ours_wait_us) = (raw_wait, ours_wait);
    let (on, off) = time_alternating(
        n,
        || {
            let _z = x.add(&y).unwrap();
        },
        || {
            profiler::set_enabled(false);
            let _z = x.add(&y).unwrap();
            profiler::set_enabled(true);
        },
    );
    h.ours_profiler_off_us = off + h.ours_us - on;
    h.key_lookup_us = time_calls(n, || {
        eager::tensor::lookup_only(Op::Binary(Binary::Add), &[&x, &y]);
    });
    h.ours_minus_raw_us = h.ours_us - h.raw_execute_us;

    // A 100-op chain of mixed ops (5 ops x 20), result read back.
    let v = Tensor::from_slice(&(0..256).map(|i| (i as f32 / 256.0) - 0.5).collect::<Vec<_>>(), &[256])?;
    let w = Tensor::full(&[256], 0.9, DType::F32)?;
    let chain = || -> Result<Tensor> {
        let mut z = v.clone();
        for _ in 0..20 {
            z = z.mul(&w)?.add(&v)?.tanh()?.maximum(&v)?.sub_scalar(0.01)?;
        }
        Ok(z)
    };
    chain()?.to_vec::<f32>()?;
    let chain_us = time_calls(200, || {
        chain().unwrap().block_until_ready().unwrap();
    });
    r.chain_100_ops_ms = chain_us / 1e3;
    r.chain_ops_per_s = 100.0 / (chain_us / 1e6);

    // A 3-layer MLP forward (784-256-128-10), batch 64.
    manual_seed(0);
    let dims = [784, 256, 128, 10];
    let layers: Vec<(Tensor, Tensor)> = dims
        .windows(2)
        .map(|d| {
            Ok((
                Tensor::randn(&[d[0], d[1]], DType::F32)?.mul_scalar(0.05)?,
                Tensor::zeros(&[d[1]], DType::F32)?,
            ))
        })
        .collect::<Result<_>>()?;
    let batch = Tensor::rand(&[64, 784], DType::F32)?;
    mlp_forward(&batch, &layers)?.to_vec::<f32>()?;
    let mlp_us = time_calls(500, || {
        mlp_forward(&batch, &layers).unwrap().block_until_ready().unwrap();
    });
    r.mlp_forward_ms = mlp_us / 1e3;
    r.mlp_forward_per_s = 1e6 / mlp_us;

    // Training steps of an MLP 784-256-10, batch 64: eager (every op dispatched) and compiled
    // (the same step traced into one program).
    r.train_mlp_784_256_10_steps_per_s = train_mlp()?;
    (r.mlp_step_live_kib, r.mlp_step_peak_kib, r.mlp_step_largest_at_peak) = mlp_step_memory()?;
    r.mlp_compiled_step_memory_kib = mlp_compiled_step_memory()?;
    r.train_cnn_digits_steps_per_s = train_cnn()?;
    r.train_gpt_char_steps_per_s = train_gpt()?;
    let available = runtime::devices(DeviceKind::Cpu)?.len();
    for n in [1, 2, 4].into_iter().filter(|&n| n <= available) {
        let s = train_mlp_data_parallel(n)?;
        r.data_parallel_mlp_steps_per_s.push((n, s.eager, s.compiled));
    }
    (r.sharded_add_compile_ms, r.sharded_add_compile_outcome) = sharded_add_compile_ms()?;

    // First calls in fresh processes: compiled (empty disk cache), then loaded from it.
    let dir = std::env::temp_dir().join(format!("eager-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cold = first_call_in_child(&dir, false, 0)?;
    let disk = first_call_in_child(&dir, false, 0)?;
    let warm = first_call_in_child(&dir, true, 0)?;
    let paused = first_call_in_child(&dir, true, 1000)?;
    (r.first_call_cold, r.mlp_first_step_cold) = (cold.ops, cold.mlp_first_step);
    (r.first_call_disk, r.mlp_first_step_disk) = (disk.ops, disk.mlp_first_step);
    r.mlp_first_step_warm = warm.mlp_first_step;
    r.mlp_first_step_warm_after_pause = paused.mlp_first_step;
    // The first add of a new shape in a session whose runtime started a second before (the
    // warm start's warm-up compile done): compiled, not loaded (a shape the cache lacks).
    let session = std::env::temp_dir().join(format!("eager-bench-{}-session", std::process::id()));
    let _ = std::fs::remove_dir_all(&session);
    let fresh = first_call_in_child(&session, true, 1000)?;
    r.first_add_in_session_ms = fresh.ops.first().map_or(0.0, |c| c.fetch_ms);
    let _ = std::fs::remove_dir_all(&session);

    // The tiers: what a compile costs at each, and what the quick tier costs large ops.
    let quick: Vec<f64> =
        (0..3).map(|i| add_compile_ms(&rt, eager::pjrt::Tier::Quick, i)).collect::<Result<_>>()?;
    let optimized: Vec<f64> =
        (0..3).map(|i| add_compile_ms(&rt, eager::pjrt::Tier::Optimized, i + 3)).collect::<Result<_>>()?;
    (r.add_compile_quick_ms, r.add_compile_optimized_ms) = (median(quick), median(optimized));
    r.tier_execute = tier_execute(&rt)?;
    let _ = std::fs::remove_dir_all(&dir);

    // Matmul throughput, ours against the raw execute of the same executable.
    let m = 1024;
    let a = Tensor::rand(&[m, m], DType::F32)?;
    let b = Tensor::rand(&[m, m], DType::F32)?;
    a.matmul(&b)?.block_until_ready()?;
    let flops = 2.0 * (m as f64).powi(3);
    let ours = time_calls(20, || {
        a.matmul(&b).unwrap().block_until_ready().unwrap();
    });
    let mm = eager::tensor::executable_for(Op::Matmul(Matmul::default()), &[&a, &b])?;
    let mm_args = [a.buffer()?, b.buffer()?];
    let raw = time_calls(20, || {
        let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
        mm.execute_and_wait(&mm_args, dev, &mut out).unwrap();
    });
    r.matmul_1024_gflops = flops / (ours * 1e3);
    r.matmul_1024_raw_gflops = flops / (raw * 1e3);

    // Resident memory after many ops (profiler at its default capacity, as users have it).
    profiler::set_capacity(profiler::DEFAULT_CAPACITY);
    r.memory_ops = args.memory_ops;
    r.rss_before_mib = rss_mib();
    for i in 0..args.memory_ops {
        let z = x.add(&y)?;
        if i % 10_000 == 0 {
            z.block_until_ready()?;
        }
    }
    synchronize();
    r.rss_after_mib = rss_mib();

    let stats = cache::stats();
    (r.tier_swaps, r.tier_swap_compile_ms) = (stats.swaps, stats.promote_ns as f64 / 1e6);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_report(&r, n, &rt.plugin_path);
    }
    Ok(())
}

fn print_report(r: &Report, calls: usize, plugin: &Path) {
    let h = &r.hit_path;
    println!("eager-bench on {}, {} devices, plugin {}", r.platform, r.devices, plugin.display());
    println!("  runtime start (plugin load + client):   {:8.1} ms", r.runtime_start_ms);
    println!("\ncached tiny add (f32[4] + f32[4]), median of {calls} calls, same executable:");
    println!("  raw PJRT execute (the floor):           {:8.2} µs", h.raw_execute_us);
    println!(
        "  eager Tensor::add (cache hit, async):   {:8.2} µs   ({:+.2} µs over the floor)",
        h.ours_us, h.ours_minus_raw_us
    );
    println!("    of which: key + hash + lookup         {:8.2} µs", h.key_lookup_us);
    println!(
        "              event recording             {:8.2} µs   (profiler off: {:.2} µs)",
        h.ours_us - h.ours_profiler_off_us,
        h.ours_profiler_off_us
    );
    println!("  raw execute + completion wait:          {:8.2} µs", h.raw_execute_wait_us);
    println!("  eager add + block_until_ready:          {:8.2} µs", h.ours_wait_us);
    println!("\nthroughput (result read back or awaited):");
    println!(
        "  100-op chain (mul add tanh max sub, f32[256]): {:7.3} ms = {:9.0} ops/s",
        r.chain_100_ops_ms, r.chain_ops_per_s
    );
    println!(
        "  MLP 784-256-128-10 forward, batch 64:          {:7.3} ms = {:9.0} passes/s",
        r.mlp_forward_ms, r.mlp_forward_per_s
    );
    println!("  training steps/s (steady: after the keys turned hot)   eager     fused  compiled");
    for (label, s) in [
        ("MLP 784-256-10, batch 64, SGD", r.train_mlp_784_256_10_steps_per_s),
        ("CNN digits, batch 64, SGD", r.train_cnn_digits_steps_per_s),
        ("char GPT (2 blocks, 64 wide), 16x32, AdamW", r.train_gpt_char_steps_per_s),
    ] {
        println!("    {label:<50} {:>9.0} {:>9.0} {:>9.0}", s.eager, s.fused, s.compiled);
    }
    println!(
        "  MLP 784-256-10 eager step, device memory: {:.0} KiB live between steps, {:.0} KiB at the peak (largest: {})",
        r.mlp_step_live_kib, r.mlp_step_peak_kib, r.mlp_step_largest_at_peak
    );
    let (updated, donated, held) = r.mlp_compiled_step_memory_kib;
    println!(
        "  MLP 784-256-10 compiled step, device memory above the live {updated:.0} KiB of parameters and momentum: peak +{donated:.0} KiB updating them in place (donated), +{held:.0} KiB with their old values held elsewhere (copied)"
    );
    println!("  MLP 784-256-10 data-parallel, global batch 64 (steps/s):");
    for (n, eager, compiled) in &r.data_parallel_mlp_steps_per_s {
        println!("    on {n} device(s): {eager:9.0} eager, {compiled:9.0} compiled");
    }
    println!(
        "  one-op SPMD program over 4 devices (add, rows split): {:.1} ms ({})",
        r.sharded_add_compile_ms, r.sharded_add_compile_outcome
    );
    println!("\nfirst call in a fresh process (get the executable / whole call):");
    println!("  {:<18} {:>22} {:>26}", "op", "cold: compile", "disk cache: load");
    for (c, d) in r.first_call_cold.iter().zip(&r.first_call_disk) {
        println!(
            "  {:<18} {:>8.1} / {:>7.1} ms ({}, {}) {:>8.1} / {:>7.1} ms ({}, {})",
            c.op,
            c.fetch_ms,
            c.first_call_ms,
            c.outcome,
            c.tier,
            d.fetch_ms,
            d.first_call_ms,
            d.outcome,
            d.tier
        );
    }
    let sum = |v: &[FirstCall]| v.iter().map(|c| c.fetch_ms).sum::<f64>();
    println!("  total              {:>8.1} ms {:>22.1} ms", sum(&r.first_call_cold), sum(&r.first_call_disk));
    let (c, d) = (&r.mlp_first_step_cold, &r.mlp_first_step_disk);
    println!(
        "  MLP 784-256-10 first SGD step: cold {:.0} ms ({} executables, {} of them compiled ahead side by side), disk cache {:.1} ms ({} loaded, {} ahead)",
        c.ms, c.executables, c.fetched_ahead, d.ms, d.executables, d.fetched_ahead
    );
    println!(
        "    disk cache with the warm start (EAGER_PRELOAD=1, the REPL's and kernel's default): {:.1} ms at once, {:.1} ms a second after the runtime started",
        r.mlp_first_step_warm.ms, r.mlp_first_step_warm_after_pause.ms
    );
    println!(
        "  first add (broadcast) of a new shape, compiled, a second into a session (warm start on, empty cache): {:.1} ms",
        r.first_add_in_session_ms
    );
    println!(
        "    the next 10 steps, before keys turn hot: {:.0} steps/s (cold run), {:.0} (disk run)",
        c.then_steps_per_s, d.then_steps_per_s
    );
    println!("\ncompile tiers (quick: XLA backend level 0, no fusion emitters; optimized: XLA's default):");
    println!(
        "  one-op add compile: {:.1} ms quick, {:.1} ms optimized (medians over fresh shapes)",
        r.add_compile_quick_ms, r.add_compile_optimized_ms
    );
    for t in &r.tier_execute {
        println!(
            "  execute {:<26} {:>9.0} µs quick {:>9.0} µs optimized ({:.1}x)",
            t.op,
            t.quick_us,
            t.optimized_us,
            t.quick_us / t.optimized_us
        );
    }
    println!(
        "  keys swapped to optimized as they turned hot: {} ({:.0} ms of background compiles)",
        r.tier_swaps, r.tier_swap_compile_ms
    );
    println!(
        "\nmatmul 1024x1024 f32: eager {:.1} GFLOP/s, raw execute {:.1} GFLOP/s",
        r.matmul_1024_gflops, r.matmul_1024_raw_gflops
    );
    println!(
        "\nresident memory: {:.1} MiB before, {:.1} MiB after {} ops ({:+.1} MiB)",
        r.rss_before_mib,
        r.rss_after_mib,
        r.memory_ops,
        r.rss_after_mib - r.rss_before_mib
    );
    println!("\n{}\n{}", cache::stats(), cache::disk_stats());
}
