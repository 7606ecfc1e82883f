//! Generation figures of a checkpoint on one device (it asserts nothing): load time, prefill
//! tokens/s and decode tokens/s for each decode mode (eager, fused, compiled) and batch size,
//! a warm-up run first (compiles) and then the timed run. tests/bench/hf-generate runs it
//! next to transformers on the same checkpoint.
//! usage: bench_generate --model DIR [--prompt-tokens N] [--new-tokens M] [--batches 1,8]
//!        [--modes eager,fused,compiled] [--dtype f32|bf16] [--json]

use std::time::Instant;

use anyhow::Context;
use eager::DType;
use eager_models::generate::{generate, DecodeMode, GenerateOptions};
use eager_models::AutoModel;
use rand::{Rng, SeedableRng};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let dir = arg("--model").context("--model DIR is required")?;
    let prompt_tokens: usize = arg("--prompt-tokens").map_or(Ok(32), |s| s.parse())?;
    let new_tokens: usize = arg("--new-tokens").map_or(Ok(32), |s| s.parse())?;
    let batches: Vec<usize> =
        arg("--batches").unwrap_or("1,8".into()).split(',').map(str::parse).collect::<Result<_, _>>()?;
    let modes = arg("--modes").unwrap_or("eager,fused,compiled".into());
    let dtype = match arg("--dtype").as_deref() {
        Some("bf16") => Some(DType::BF16),
        Some("f32") => Some(DType::F32),
        _ => None,
    };
    let json = args.iter().any(|a| a == "--json");
    let device = eager::default_device();
    // The device's runtime starts first (plugin load, client): load time is the checkpoint's alone.
    let t0 = Instant::now();
    eager::Tensor::zeros(&[1], DType::F32)?.block_until_ready()?;
    let runtime_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let model = AutoModel::from_dir(&dir, device, dtype)?;
    for p in model.module().parameters() {
        p.get().block_until_ready()?;
    }
    let load_s = t0.elapsed().as_secs_f64();
    let params: usize = model.module().parameters().iter().map(|p| p.get().numel()).sum();
    let lm = model.causal_lm()?;
    // As a server does (and transformers' `eval()` + `inference_mode()`): no gradients, the
    // projections' weights laid out `[in, out]` for the CPU's product of few rows.
    let prepared = !args.iter().any(|a| a == "--training-layout");
    if prepared {
        lm.prepare_inference()?;
    }
    let vocab = lm.config().vocab_size as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut rows = Vec::new();
    for &batch in &batches {
        let prompts: Vec<Vec<u32>> =
            (0..batch).map(|_| (0..prompt_tokens).map(|_| rng.gen_range(3..vocab)).collect()).collect();
        for mode in modes.split(',') {
            let mode_v = match mode {
                "eager" => DecodeMode::Eager,
                "fused" => DecodeMode::Fused,
                "compiled" => DecodeMode::Compiled,
                other => anyhow::bail!("unknown mode {other}"),
            };
            let opts = GenerateOptions { max_new_tokens: new_tokens, mode: mode_v, ..Default::default() };
            let run = || -> anyhow::Result<(f64, f64, f64)> {
                let start = Instant::now();
                let mut stamps = Vec::new();
                generate(lm, &prompts, &opts, None, |seq, _| {
                    if seq == 0 {
                        stamps.push(start.elapsed().as_secs_f64());
                    }
                })?;
                let total = start.elapsed().as_secs_f64();
                // The first token comes right after the prefill; the rest are decode steps.
                let prefill = stamps[0];
                let decode = stamps[stamps.len() - 1] - prefill;
                Ok((prefill, decode, total))
            };
            let (warm_prefill, warm_decode, _) = run()?;
            let (prefill, decode, _) = run()?;
            let row = serde_json::json!({
                "mode": mode, "batch": batch,
                "first_run_prefill_s": warm_prefill, "first_run_decode_s": warm_decode,
                "prefill_tok_s": (batch * prompt_tokens) as f64 / prefill,
                "decode_tok_s": (batch * (new_tokens - 1)) as f64 / decode,
                "ms_per_step": decode * 1e3 / (new_tokens - 1) as f64,
            });
            if !json {
                println!(
                    "{mode:>8} batch {batch}: prefill {:.0} tok/s, decode {:.1} tok/s ({:.1} ms/step); first run {:.2} s + {:.2} s",
                    row["prefill_tok_s"].as_f64().unwrap_or(0.0),
                    row["decode_tok_s"].as_f64().unwrap_or(0.0),
                    row["ms_per_step"].as_f64().unwrap_or(0.0),
                    warm_prefill,
                    warm_decode
                );
            }
            rows.push(row);
        }
    }
    let report = serde_json::json!({"load_s": load_s, "runtime_start_s": runtime_s, "params": params,
        "prepared_for_inference": prepared, "runs": rows});
    if json {
        println!("{report}");
    } else {
        println!("load {load_s:.2} s (after the runtime started in {runtime_s:.2} s), {params} parameters");
    }
    Ok(())
}
