//! `cargo run --release -p eager --bin eager-bench`: what eager dispatch costs, from one run.
//! Prints figures only; nothing here asserts a time.
//!
//! - the raw PJRT floor: a compiled tiny add executed through the runtime layer alone;
//! - our cached tiny add through `Tensor` (key, cache lookup, execute, event);
//! - first-call compile time of a few ops;
//! - matmul 1024x1024 f32 throughput.

use std::time::Instant;

use eager::pjrt::{self, Buffer};
use eager::prelude::*;
use eager::{runtime, DeviceKind};
use smallvec::SmallVec;

const CALLS: usize = 20_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median µs of `f` over `n` calls (after a warm-up).
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

fn main() -> anyhow::Result<()> {
    let t = Instant::now();
    let rt = runtime::runtime(DeviceKind::Cpu)?;
    let (maj, min) = rt.api_version();
    println!("eager-bench on {} (PJRT C API {maj}.{min}, {} devices), plugin {}", rt.client.platform_name, rt.client.devices.len(), rt.plugin_path.display());
    println!("  runtime start (plugin load + client):  {:8.1} ms", t.elapsed().as_secs_f64() * 1e3);
    profiler::set_capacity(1024); // keep the log small; recording stays on as users have it

    // Raw floor: the same tiny add the tensor path runs, with nothing but the PJRT layer.
    let mlir = "module @raw { func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.add %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>\n} }";
    let exe = rt.client.compile(mlir, pjrt::COMPILE_OPTIONS)?;
    let dev = &rt.client.devices[0];
    let data = [1.0f32, 2.0, 3.0, 4.0];
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = rt.client.buffer_from_host(&bytes, DType::F32.pjrt(), &[4], dev)?;
    let b = rt.client.buffer_from_host(&bytes, DType::F32.pjrt(), &[4], dev)?;
    let args = [a.raw(), b.raw()];
    let raw_wait = time_calls(CALLS, || {
        let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
        exe.execute(&args, dev, &mut out, true).unwrap();
    });
    let raw_enqueue = time_calls(CALLS, || {
        let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
        exe.execute(&args, dev, &mut out, false).unwrap();
        out[0].wait_ready().unwrap();
    });

    // Ours: the same add through Tensor (first call compiles; then cache hits).
    let x = Tensor::from_slice(&data, &[4])?;
    let y = Tensor::from_slice(&data, &[4])?;
    let _ = x.add(&y)?;
    let ours = time_calls(CALLS, || {
        let _z = x.add(&y).unwrap();
    });
    println!("\ncached tiny add (f32[4] + f32[4]), median of {CALLS} calls:");
    println!("  raw PJRT execute + completion wait:   {raw_wait:8.2} µs   (the floor)");
    println!("  raw PJRT execute, then buffer wait:   {raw_enqueue:8.2} µs");
    println!("  eager Tensor::add (cache hit):        {ours:8.2} µs   ({:+.2} µs over the floor)", ours - raw_wait);

    // First-call compile of a few ops, at shapes nothing above used.
    println!("\nfirst call (compile + execute), from the profiler:");
    let m = Tensor::rand(&[37, 53], DType::F32)?;
    let v = Tensor::rand(&[53], DType::F32)?;
    let cases: Vec<(&str, Box<dyn Fn() -> Result<Tensor>>)> = vec![
        ("add (broadcast)", Box::new(|| m.add(&v))),
        ("exp", Box::new(|| m.exp())),
        ("matmul", Box::new(|| m.matmul(&m.t()?))),
        ("sum over dim 1", Box::new(|| m.sum(&[1], false))),
        ("argmax", Box::new(|| m.argmax(Some(1), false))),
        ("cast to bf16", Box::new(|| m.to_dtype(DType::BF16))),
    ];
    for (label, f) in &cases {
        let mark = profiler::next_seq();
        let t = Instant::now();
        f()?;
        let wall = t.elapsed().as_secs_f64() * 1e3;
        let compile: u64 = profiler::events_since(mark).iter().map(|e| e.compile_ns).sum();
        let again = time_calls(200, || {
            f().unwrap();
        });
        println!("  {label:<18} compile {:7.1} ms   first call {wall:7.1} ms   cached {again:8.1} µs", compile as f64 / 1e6);
    }

    // Matmul throughput.
    let n = 1024;
    let a = Tensor::rand(&[n, n], DType::F32)?;
    let b = Tensor::rand(&[n, n], DType::F32)?;
    let _ = a.matmul(&b)?;
    let secs = time_calls(20, || {
        let _ = a.matmul(&b).unwrap();
    }) / 1e6;
    println!("\nmatmul {n}x{n} f32: {:8.2} ms  =  {:.1} GFLOP/s", secs * 1e3, 2.0 * (n as f64).powi(3) / secs / 1e9);
    println!("\n{}", cache::stats());
    Ok(())
}
