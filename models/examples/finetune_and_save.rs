//! Trains a small Llama-architecture model from scratch on the repository's README in eager,
//! saves it as a Hugging Face directory (config.json, model.safetensors, tokenizer files),
//! and writes eager's own greedy continuation of a prompt next to it (`eager_greedy.json`),
//! so that transformers can load the directory and be compared (tests/models/). Without
//! `--tokenizer` it trains its own byte-level BPE on the README first.
//! usage: finetune_and_save [--tokenizer DIR] --out DIR [--steps N]

use anyhow::{bail, Context};
use eager::nn::{cross_entropy, Module};
use eager::optim::{Adam, Optimizer};
use eager::{DType, Tensor};
use eager_models::generate::{generate, CausalLm, GenerateOptions};
use eager_models::llama::Llama;
use eager_models::save::save_pretrained;
use eager_models::{Config, Tokenizer};
use rand::{Rng, SeedableRng};

const README: &str = include_str!("../../README.md");
const PROMPT: &str = "eager runs";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let Some(out) = arg("--out") else {
        bail!("usage: finetune_and_save [--tokenizer DIR] --out DIR [--steps N]")
    };
    let steps: usize = arg("--steps").map(|s| s.parse()).transpose().context("--steps")?.unwrap_or(40);
    let tok = match arg("--tokenizer") {
        Some(dir) => Tokenizer::from_dir(dir)?,
        None => Tokenizer::train_byte_level_bpe(&[README], 384)?,
    };
    let vocab = tok.vocab_size();
    let config = Config::from_value(serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "tie_word_embeddings": false,
        "hidden_act": "silu", "bos_token_id": tok.token_id("<s>"), "eos_token_id": tok.eos_token_id(),
        "pad_token_id": tok.pad_token_id(), "dtype": "float32"
    }))?;
    eager::manual_seed(0);
    let model = Llama::new(&config, DType::F32)?;
    let text: Vec<i64> = tok.encode(README, false)?.into_iter().map(i64::from).collect();
    let (batch, window) = (8, 32);
    let opt = Adam::new(model.parameters(), 3e-3)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            let at = rng.gen_range(0..text.len() - window - 1);
            x.extend_from_slice(&text[at..at + window]);
            y.extend_from_slice(&text[at + 1..at + window + 1]);
        }
        let x = Tensor::from_slice(&x, &[batch, window])?;
        let y = Tensor::from_slice(&y, &[batch * window])?;
        let logits = model.logits(&x, None)?.reshape(&[(batch * window) as isize, -1])?;
        let loss = cross_entropy(&logits, &y)?;
        loss.backward()?;
        opt.step()?;
        opt.zero_grad();
        losses.push(loss.item::<f32>()?);
    }
    println!("loss {:.3} -> {:.3} over {steps} steps", losses[0], losses[losses.len() - 1]);
    save_pretrained(&model, &config, &out, None)?;
    tok.save_pretrained(&out)?;
    let prompt = tok.encode(PROMPT, true)?;
    let opts = GenerateOptions {
        max_new_tokens: 12,
        pad_token_id: tok.pad_token_id().unwrap_or(0),
        ..Default::default()
    };
    let greedy = generate(&model, std::slice::from_ref(&prompt), &opts, None, |_, _| {})?;
    // A stretch of the README with its ids, for transformers' tokenizer to encode alike.
    let sample: String = README.chars().take(400).collect();
    let report = serde_json::json!({"prompt": PROMPT, "prompt_ids": prompt, "greedy": greedy[0], "losses": losses,
                                    "sample": sample, "sample_ids": tok.encode(&sample, false)?});
    std::fs::write(std::path::Path::new(&out).join("eager_greedy.json"), report.to_string())?;
    println!("{PROMPT}{}", tok.decode(&greedy[0], true)?);
    Ok(())
}
