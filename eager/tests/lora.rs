//! LoRA as PEFT: adapters on the `q_proj`/`v_proj` layers of a tiny transformers-named model,
//! the base frozen (no gradient, unchanged by training), rank-4 adapters trained, saved in
//! PEFT's format and loaded by `peft.PeftModel.from_pretrained` onto the same base in torch
//! with the same outputs, loaded back by eager, and merged into the base weights.

use eager::nn::{apply_lora, Linear, Lora, LoraConfig, Module};
use eager::optim::{Adam, Optimizer};
use eager::prelude::*;

mod common;

use common::{assert_all_close, fixed_values};

const DIM: usize = 8;

/// Per layer `x + o(tanh(q(x)) * v(x) + k(x))`, with transformers' parameter names
/// (`model.layers.0.self_attn.q_proj.weight`, …); `tests/reference/peft_reference.py` is the
/// same module in torch.
struct Tiny {
    layers: Vec<[Linear; 4]>,
}

const PROJ: [&str; 4] = ["q_proj", "k_proj", "v_proj", "o_proj"];

impl Tiny {
    fn new(seed: usize) -> Tiny {
        let lin = |k: usize| {
            let w = fixed_values(DIM * DIM, seed + k).iter().map(|v| (v * 0.4) as f32).collect::<Vec<_>>();
            let b = fixed_values(DIM, seed + 50 + k).iter().map(|v| (v * 0.1) as f32).collect::<Vec<_>>();
            Linear {
                weight: Var::parameter("weight", Tensor::from_slice(&w, &[DIM, DIM]).unwrap()).unwrap(),
                bias: Some(Var::parameter("bias", Tensor::from_slice(&b, &[DIM]).unwrap()).unwrap()),
            }
        };
        Tiny {
            layers: (0..2).map(|l| [lin(4 * l), lin(4 * l + 1), lin(4 * l + 2), lin(4 * l + 3)]).collect(),
        }
    }
}

impl Module for Tiny {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for [q, k, v, o] in &self.layers {
            x = x.add(&o.forward(&q.forward(&x)?.tanh()?.mul(&v.forward(&x)?)?.add(&k.forward(&x)?)?)?)?;
        }
        Ok(x)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (l, projs) in self.layers.iter().enumerate() {
            for (name, p) in PROJ.iter().zip(projs) {
                for (n, v) in p.named_parameters() {
                    out.push((format!("model.layers.{l}.self_attn.{name}.{n}"), v));
                }
            }
        }
        out
    }
}

fn input() -> Tensor {
    let x: Vec<f32> = fixed_values(3 * DIM, 99).iter().map(|&v| v as f32).collect();
    Tensor::from_slice(&x, &[3, DIM]).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

/// Trains rank-4 adapters of `model` towards a target for a few Adam steps.
fn fine_tune(model: &Tiny) -> Result<(Lora, Vec<f32>)> {
    let lora = apply_lora(model, &LoraConfig::new(4, 8.0, "q_proj|v_proj"))?;
    let opt = Adam::new(model.parameters(), 0.05)?;
    assert_eq!(opt.params().len(), 8, "only the adapters' A and B are trained (2 layers x 2 x 2)");
    let x = input();
    let target = x.mul_scalar(-0.5)?;
    let mut losses = Vec::new();
    for _ in 0..15 {
        let loss = eager::nn::mse(&model.forward(&x)?, &target)?;
        losses.push(loss.item::<f32>()?);
        opt.zero_grad();
        loss.backward()?;
        opt.step()?;
    }
    Ok((lora, losses))
}

#[test]
fn lora_trains_adapters_only_and_saves_loads_and_merges() -> Result<()> {
    let model = Tiny::new(1);
    let base: Vec<(String, Vec<f32>)> =
        model.named_parameters().into_iter().map(|(n, v)| (n, v.get().to_vec::<f32>().unwrap())).collect();
    let before = values(&model.forward(&input())?);
    let lora = apply_lora(&model, &LoraConfig::new(4, 8.0, "q_proj|v_proj"))?;
    assert_eq!(lora.layers.len(), 4);
    assert_eq!(values(&model.forward(&input())?), before, "B starts at zero: the base model's output");
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"model.layers.1.self_attn.v_proj.lora_B.weight".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("k_proj.lora")), "k_proj is not a target");
    Lora::merge(lora)?; // nothing learnt yet: merging B = 0 changes nothing
    assert_eq!(values(&model.forward(&input())?), before);

    let model = Tiny::new(1);
    let (lora, losses) = fine_tune(&model)?;
    assert!(losses[14] < 0.5 * losses[0], "the adapters learn: {losses:?}");
    for (name, var) in model.named_parameters() {
        if name.contains("lora_") {
            continue;
        }
        assert!(!var.requires_grad() && var.grad().is_none(), "{name} is frozen and has no gradient");
        let start = &base.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(&var.get().to_vec::<f32>()?, start, "{name} is unchanged by training");
    }
    let tuned = values(&model.forward(&input())?);

    // PEFT's format: names and shapes.
    let dir = tempfile::tempdir().unwrap();
    lora.save_pretrained(dir.path().join("adapter"))?;
    let saved = eager::io::load_safetensors(dir.path().join("adapter/adapter_model.safetensors"))?;
    assert_eq!(saved.len(), 8);
    for (name, t) in &saved {
        let want: &[usize] = if name.ends_with("lora_A.weight") { &[4, DIM] } else { &[DIM, 4] };
        assert!(
            name.starts_with("base_model.model.model.layers.") && t.shape() == want,
            "{name} {:?}",
            t.shape()
        );
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("adapter/adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!((config["peft_type"].as_str(), config["r"].as_u64()), (Some("LORA"), Some(4)));

    // Loaded onto a fresh copy of the base: the same outputs.
    let again = Tiny::new(1);
    let loaded = Lora::load(&again, dir.path().join("adapter"))?;
    assert_eq!(loaded.config, lora.config);
    assert_eq!(values(&again.forward(&input())?), tuned);

    // Merged: the same function with plain linear layers.
    Lora::merge(lora)?;
    assert!(!model.named_parameters().iter().any(|(n, _)| n.contains("lora_")));
    assert_all_close("merged", &values(&model.forward(&input())?), &tuned, 1e-5, 1e-6);
    Ok(())
}

/// `peft.PeftModel.from_pretrained` loads what eager saved onto the same base in torch and
/// computes the same outputs. Needs python3 with torch and peft
/// (`tests/requirements-models.txt`; `EAGER_PYTHON` names another interpreter).
#[test]
fn peft_loads_the_adapter_and_gives_the_same_outputs() -> Result<()> {
    let model = Tiny::new(1);
    let dir = tempfile::tempdir().unwrap();
    eager::io::save_safetensors(dir.path().join("base.safetensors"), &eager::nn::state_dict(&model))?;
    let (lora, _) = fine_tune(&model)?;
    lora.save_pretrained(dir.path().join("adapter"))?;
    let x = input();
    let rows: Vec<Vec<f32>> = x.to_vec::<f32>()?.chunks(DIM).map(|r| r.to_vec()).collect();
    std::fs::write(dir.path().join("x.json"), serde_json::to_string(&rows).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/peft_reference.py");
    let python = std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python).arg(script).arg(dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "PEFT's reference failed (python3 -m pip install -r tests/requirements-models.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["lora_keys"].as_array().unwrap().len(), 8, "PEFT made and loaded 8 LoRA weights: {v}");
    assert_eq!(v["scaling"].as_f64(), Some(2.0), "alpha / r");
    let torch: Vec<f64> = v["y"].as_array().unwrap().iter().map(|y| y.as_f64().unwrap()).collect();
    let ours = values(&model.forward(&x)?);
    assert_ne!(ours, values(&Tiny::new(1).forward(&x)?), "the adapters changed the output");
    assert_all_close("PEFT's output", &ours, &torch, 1e-5, 1e-6);
    println!("peft {} gives eager's LoRA outputs", v["peft"]);
    Ok(())
}
