//! The command line of issue 28: generate text from a Hugging Face model directory.
//! `--temperature 0` is greedy and ignores the end-of-text token (always N tokens);
//! `--logits-out` writes the prompt's logits (f32 `[prompt tokens, vocab]`, .npy);
//! `--tokens-out` the generated ids as a JSON list.

use std::io::Write;

use anyhow::{bail, Context};
use eager::{DType, Device, DeviceKind};
use eager_models::generate::{generate, DecodeMode, GenerateOptions};
use eager_models::{AutoModel, Tokenizer};

const USAGE: &str = "usage: generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-p P] \
[--seed S] [--dtype f32|bf16] [--device cpu:0] [--logits-out FILE.npy] [--tokens-out FILE.json] [--mode eager|fused|compiled]";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut model, mut prompt, mut logits_out, mut tokens_out) = (None, None, None, None);
    let mut opts = GenerateOptions { max_new_tokens: 32, temperature: 0.0, ..Default::default() };
    let (mut dtype, mut device) = (None, Device { kind: DeviceKind::Cpu, index: 0 });
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--model" => model = Some(value()?),
            "--prompt" => prompt = Some(value()?),
            "--max-new-tokens" => opts.max_new_tokens = value()?.parse().context("--max-new-tokens")?,
            "--temperature" => opts.temperature = value()?.parse().context("--temperature")?,
            "--top-p" => opts.top_p = Some(value()?.parse().context("--top-p")?),
            "--seed" => opts.seed = value()?.parse().context("--seed")?,
            "--dtype" => {
                dtype = Some(match value()?.as_str() {
                    "f32" => DType::F32,
                    "bf16" => DType::BF16,
                    "f16" => DType::F16,
                    other => bail!("--dtype {other}: use f32, bf16 or f16"),
                })
            }
            "--device" => {
                device = value()?.parse::<Device>().map_err(|e| anyhow::anyhow!("--device: {e}"))?
            }
            "--logits-out" => logits_out = Some(value()?),
            "--tokens-out" => tokens_out = Some(value()?),
            "--mode" => {
                opts.mode = match value()?.as_str() {
                    "eager" => DecodeMode::Eager,
                    "fused" => DecodeMode::Fused,
                    "compiled" => DecodeMode::Compiled,
                    other => bail!("--mode {other}: use eager, fused or compiled"),
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let (Some(dir), Some(prompt)) = (model, prompt) else {
        bail!("--model and --prompt are required\n{USAGE}")
    };
    eager::set_default_device(device);
    let model = AutoModel::from_dir(&dir, device, dtype).with_context(|| format!("loading {dir}"))?;
    let lm = model.causal_lm()?;
    let tok = Tokenizer::from_dir(&dir)?;
    let ids = tok.encode(&prompt, true)?;
    if let Some(path) = logits_out {
        let t = eager::Tensor::from_slice_on(
            &ids.iter().map(|&i| i as i64).collect::<Vec<_>>(),
            &[1, ids.len()],
            device,
        )?;
        let logits = lm.logits(&t, None)?.squeeze(0)?.to_dtype(DType::F32)?;
        eager::io::save_npy(&path, &logits)?;
    }
    if opts.temperature > 0.0 {
        opts.stop_tokens = lm.config().eos_token_ids.clone();
    }
    opts.pad_token_id = tok.pad_token_id().unwrap_or(0);
    print!("{prompt}");
    let mut shown = String::new();
    let mut produced = Vec::new();
    let out = generate(lm, &[ids], &opts, Some(&tok), |_, t| {
        // Stream the text as it grows (decoding the whole so far keeps multi-byte characters whole).
        produced.push(t);
        if let Ok(text) = tok.decode(&produced, true) {
            if text.starts_with(&shown) {
                print!("{}", &text[shown.len()..]);
                let _ = std::io::stdout().flush();
            }
            shown = text;
        }
    })?;
    println!();
    if let Some(path) = tokens_out {
        std::fs::write(&path, serde_json::to_string(&out[0])?).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}
