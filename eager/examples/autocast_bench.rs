//! `cargo run --release -p eager --example autocast_bench [-- --seconds S]`: what bf16
//! autocast does to the three models `eager-bench` trains (the MLP 784-256-10, the digits CNN,
//! the char GPT; tests/common/models.rs), next to f32. Prints figures only; asserts nothing.
//!
//! - training steps/s, f32 against `eager::autocast(DType::BF16, ..)`, each step dispatched
//!   op by op (after its keys turned hot and moved to the optimized tier, as eager-bench
//!   measures) and compiled into one program (`eager::compile`, traced once per dtype);
//! - torch's steps/s of the same models in f32 and under `torch.autocast("cpu", bfloat16)`
//!   (tests/reference/autocast_models_reference.py --bench, 2 threads) where python3 has torch;
//! - the char GPT's memory in one training step: live bytes by dtype after the forward (the
//!   activations autograd keeps for the backward pass) and the step's peak, f32 against bf16.
//!
//! On a CPU bf16 may well be slower than f32 (XLA's CPU backend widens much bf16 arithmetic
//! to f32 and back); on a TPU it is the fast path.

use std::time::Instant;

use eager::memory::{self, format_bytes};
use eager::optim::{Adam, Sgd};
use eager::prelude::*;
use eager::{autocast, runtime};

#[path = "../tests/common/models.rs"]
mod models;

use models::{Cnn, Gpt, Mlp, GPT_CONTEXT, GPT_VOCAB};

/// Steps per second over a window of `seconds` (at least 5 steps).
fn rate(seconds: f64, mut step: impl FnMut() -> Result<()>) -> Result<f64> {
    let (t, mut n) = (Instant::now(), 0usize);
    while n < 5 || t.elapsed().as_secs_f64() < seconds {
        step()?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` under bf16 autocast or not.
fn maybe_autocast<T>(low: bool, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if low {
        autocast(DType::BF16, f)
    } else {
        f()
    }
}

/// (op by op, compiled) steps/s of one training step, f32 then bf16 autocast; windows of the
/// two alternate, so that a change in the machine's load falls on both.
fn steps_per_s(
    name: &str,
    seconds: f64,
    step: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
    x: &Tensor,
    y: &Tensor,
) -> Result<[(f64, f64); 2]> {
    let compiled = compile(name, |a: &[Tensor]| Ok(vec![step(&a[0], &a[1])?]));
    let eager_step = |low: bool| -> Result<()> {
        maybe_autocast(low, || step(x, y))?.item::<f32>()?;
        Ok(())
    };
    let compiled_step = |low: bool| -> Result<()> {
        maybe_autocast(low, || compiled.call(&[x, y]))?[0].item::<f32>()?;
        Ok(())
    };
    // Steady speed: once the step's keys turned hot and moved to the optimized tier.
    for low in [false, true] {
        for _ in 0..cache::tiering().hot_calls.min(1000) + 1 {
            eager_step(low)?;
        }
        compiled_step(low)?;
    }
    runtime::wait_for_promotions();
    let (mut rates, mut compiled_rates) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..3 {
        for (i, low) in [false, true].into_iter().enumerate() {
            rates[i].push(rate(seconds, || eager_step(low))?);
            compiled_rates[i].push(rate(seconds, || compiled_step(low))?);
        }
    }
    Ok([0, 1].map(|i| (median(&mut rates[i]), median(&mut compiled_rates[i]))))
}

/// Bytes of each dtype live now.
fn by_dtype() -> Vec<(DType, u64)> {
    memory::snapshot().by_dtype()
}

/// `now - before` per dtype, as `f32 1.2 MiB · bf16 600 KiB` (dtypes that grew only).
fn grown(now: &[(DType, u64)], before: &[(DType, u64)]) -> (String, u64) {
    let mut parts = vec![];
    let mut total = 0;
    for &(d, b) in now {
        let was = before.iter().find(|(e, _)| *e == d).map_or(0, |&(_, b)| b);
        if b > was {
            parts.push(format!("{d} {}", format_bytes(b - was)));
            total += b - was;
        }
    }
    (parts.join(" · "), total)
}

/// The char GPT's step (batch 16), f32 and under bf16 autocast: live bytes by dtype after the
/// forward pass, over what lived before it, and the step's peak over the same base.
fn gpt_memory() -> Result<()> {
    let gpt = Gpt::new()?;
    let adam = Adam::adamw(gpt.named_parameters().into_iter().map(|(_, v)| v).collect(), 3e-3, 0.01)?;
    let (xs, ys) = models::gpt_batches(1, 16, 3);
    let x = Tensor::from_slice(&xs, &[16, GPT_CONTEXT])?;
    let y = Tensor::from_slice(&ys, &[16, GPT_CONTEXT])?;
    println!(
        "\nchar GPT, one training step of 16 x {GPT_CONTEXT} tokens (vocabulary {GPT_VOCAB}), device memory:"
    );
    for low in [false, true] {
        let step = || -> Result<f32> {
            let loss = maybe_autocast(low, || gpt.loss(&x, &y))?;
            loss.backward()?;
            adam.step()?;
            adam.zero_grad();
            loss.item::<f32>()
        };
        // Warm: the optimizer's moments exist after the first step, executables are cached.
        step()?;
        step()?;
        synchronize();
        let before = by_dtype();
        // Tensors made from here on are the step's (the ledger stamps each with its birth).
        let mark = memory::snapshot().live.iter().map(|t| t.made_ns).max().unwrap_or(0);
        let base = memory::live_bytes();
        memory::reset_peak();
        let loss = maybe_autocast(low, || gpt.loss(&x, &y))?;
        loss.block_until_ready()?;
        let (after_forward, activations) = grown(&by_dtype(), &before);
        let largest: Vec<String> = memory::snapshot()
            .live
            .iter()
            .filter(|t| t.made_ns > mark)
            .take(3)
            .map(|t| t.describe())
            .collect();
        loss.backward()?;
        adam.step()?;
        adam.zero_grad();
        loss.item::<f32>()?;
        synchronize();
        let peak = memory::peak_bytes().saturating_sub(base);
        let label = if low { "bf16 autocast" } else { "f32          " };
        println!(
            "  {label}: after the forward {} kept ({after_forward}); peak of the step {} over the {} held before it",
            format_bytes(activations),
            format_bytes(peak),
            format_bytes(base)
        );
        println!("    the largest it kept: {}", largest.join("; "));
    }
    Ok(())
}

/// torch's figures from the reference script, or why there are none.
fn torch_rates(seconds: f64) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/autocast_models_reference.py");
    let python = std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(["--bench", "--seconds", &seconds.to_string()])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
                let (f, b) = (
                    v["f32_steps_per_s"].as_f64().unwrap_or(0.0),
                    v["bf16_steps_per_s"].as_f64().unwrap_or(0.0),
                );
                println!(
                    "  {:<4} torch {} CPU (2 threads): f32 {f:8.1}  bf16 autocast {b:8.1}  bf16/f32 {:.2}",
                    v["model"].as_str().unwrap_or("?"),
                    v["torch"].as_str().unwrap_or("?"),
                    b / f
                );
            }
        }
        Ok(o) => {
            println!("  torch: the reference script failed: {}", String::from_utf8_lossy(&o.stderr).trim())
        }
        Err(e) => println!("  torch: cannot run {python}: {e}"),
    }
}

fn main() -> Result<()> {
    let mut seconds = 1.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).expect("--seconds S"),
            other => panic!("unknown argument {other}; usage: autocast_bench [--seconds S]"),
        }
    }
    println!("training steps/s, f32 against bf16 autocast (medians of 3 windows of {seconds} s, f32 and bf16 alternating)");
    println!("  {:<4} {:>24}   {:>24}", "", "op by op", "compiled step");
    println!(
        "  {:<4} {:>7} {:>7} {:>8}   {:>7} {:>7} {:>8}",
        "", "f32", "bf16", "bf16/f32", "f32", "bf16", "bf16/f32"
    );

    let mlp = Mlp::new()?;
    let sgd = Sgd::with_momentum(mlp.model.parameters(), 0.05, 0.9)?;
    let mlp_x = Tensor::rand(&[64, 784], DType::F32)?;
    let classes = Tensor::from_slice(&(0..64).map(|i| (i % 10) as i64).collect::<Vec<_>>(), &[64])?;
    let mlp_step = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let loss = mlp.loss(x, y)?;
        loss.backward()?;
        sgd.step()?;
        sgd.zero_grad();
        Ok(loss)
    };

    let cnn = Cnn::new()?;
    let cnn_sgd = Sgd::with_momentum(cnn.model.parameters(), 0.05, 0.9)?;
    let cnn_x = Tensor::rand(&[64, 1, 8, 8], DType::F32)?;
    let cnn_step = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let loss = cnn.loss(x, y)?;
        loss.backward()?;
        cnn_sgd.step()?;
        cnn_sgd.zero_grad();
        Ok(loss)
    };

    let gpt = Gpt::new()?;
    let adam = Adam::adamw(gpt.named_parameters().into_iter().map(|(_, v)| v).collect(), 3e-3, 0.01)?;
    let (xs, ys) = models::gpt_batches(1, 16, 3);
    let gpt_x = Tensor::from_slice(&xs, &[16, GPT_CONTEXT])?;
    let gpt_y = Tensor::from_slice(&ys, &[16, GPT_CONTEXT])?;
    let gpt_step = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let loss = gpt.loss(x, y)?;
        loss.backward()?;
        adam.step()?;
        adam.zero_grad();
        Ok(loss)
    };

    type Case<'a> = (&'a str, &'a dyn Fn(&Tensor, &Tensor) -> Result<Tensor>, &'a Tensor, &'a Tensor);
    let cases: [Case; 3] = [
        ("mlp", &mlp_step, &mlp_x, &classes),
        ("cnn", &cnn_step, &cnn_x, &classes),
        ("gpt", &gpt_step, &gpt_x, &gpt_y),
    ];
    for (name, step, x, y) in cases {
        let [(e32, c32), (e16, c16)] = steps_per_s(&format!("autocast_bench_{name}"), seconds, step, x, y)?;
        println!("  {name:<4} {e32:7.1} {e16:7.1} {:8.2}   {c32:7.1} {c16:7.1} {:8.2}", e16 / e32, c16 / c32);
    }
    println!(
        "  (mlp: 784-256-10, batch 64, SGD; cnn: digits CNN, batch 64, SGD; gpt: char GPT, 16 x 32, AdamW)"
    );
    torch_rates(seconds);
    gpt_memory()
}
