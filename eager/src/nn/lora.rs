//! LoRA (low-rank adaptation, as Hugging Face's PEFT): a frozen linear layer plus a trainable
//! low-rank update, `y = x Wᵀ + b + dropout(x) Aᵀ Bᵀ · alpha / r` with `A [r, in]` (PEFT's
//! Kaiming-uniform init) and `B [out, r]` (zeros, so training starts from the base model).
//!
//! [`apply_lora`] puts adapters on a model's [`Linear`] layers whose path ends in a target
//! name (`"q_proj|v_proj"`, PEFT's `target_modules`), freezes every other parameter (the base
//! takes no gradient and gets no optimizer state) and returns a [`Lora`]: its parameters to
//! train, [`Lora::save_pretrained`] in PEFT's format (`adapter_config.json`,
//! `adapter_model.safetensors` with `base_model.model.<path>.lora_A.weight` and
//! `.lora_B.weight`, which `peft.PeftModel.from_pretrained` loads), [`Lora::load`], and
//! [`Lora::merge`] into the base weights. The adapter hangs on the layer's weight [`Var`], so
//! a model built from `nn::Linear` needs no change: its layers run the update, and list
//! `lora_A.weight` and `lora_B.weight` among their parameters, while adapted.

use std::path::Path;
use std::sync::Arc;

use super::{Dropout, Linear, Module};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// The adapter's settings (PEFT's `LoraConfig`: `r`, `lora_alpha`, `lora_dropout`,
/// `target_modules`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// The adapter's rank.
    pub r: usize,
    /// The scale numerator: the update is scaled by `alpha / r`.
    pub alpha: f64,
    /// Dropout probability on the adapter's input.
    pub dropout: f64,
    /// Layer names; a layer is adapted when its path ends in one (`q_proj` adapts
    /// `model.layers.0.self_attn.q_proj`).
    pub target_modules: Vec<String>,
}

impl LoraConfig {
    /// Rank `r`, `alpha` and the layers named by `targets` (`"q_proj|v_proj"`); no dropout.
    pub fn new(r: usize, alpha: f64, targets: &str) -> LoraConfig {
        let target_modules =
            targets.split('|').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
        LoraConfig { r, alpha, dropout: 0.0, target_modules }
    }

    fn targets(&self, path: &str) -> bool {
        self.target_modules.iter().any(|t| path == t || path.ends_with(&format!(".{t}")))
    }
}

/// The trainable part of one adapted layer (attached to the base weight's Var).
pub(crate) struct Adapter {
    a: Var,
    b: Var,
    scaling: f64,
    dropout: Dropout,
}

impl Adapter {
    /// `dropout(x) Aᵀ Bᵀ · scaling`.
    fn delta(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.dropout.forward(x)?;
        let a = self.a.get();
        let down = Linear { weight: self.a.clone(), bias: None }.forward_base(&x.to_dtype(a.dtype())?)?;
        Linear { weight: self.b.clone(), bias: None }.forward_base(&down)?.mul_scalar(self.scaling)
    }
}

/// A linear layer with a LoRA adapter (torch's `peft.tuners.lora.Linear`): the base layer
/// (frozen) and the adapter's `A` and `B` (trainable).
pub struct LoraLinear {
    /// The base layer (frozen).
    pub base: Linear,
    adapter: Arc<Adapter>,
}

impl LoraLinear {
    /// Adapts `base` with rank `r`, `alpha` and `dropout` (PEFT's initialisation), freezing
    /// it; `base`'s own forward runs the update too from now on (the adapter hangs on its
    /// weight).
    pub fn new(base: &Linear, r: usize, alpha: f64, dropout: f64) -> Result<LoraLinear> {
        let w = base.weight.get();
        if w.rank() != 2 || r == 0 {
            let msg = format!("needs a [out, in] weight and a rank > 0, got {} and r={r}", w.spec());
            return Err(Error::invalid("LoraLinear", msg));
        }
        let (out, inp) = (w.shape()[0], w.shape()[1]);
        // PEFT: A Kaiming-uniform with a = √5, i.e. uniform ±1/√in; B zeros.
        let a = Var::parameter(
            "lora_A.weight",
            super::uniform(&[r, inp], 1.0 / (inp as f64).sqrt(), w.dtype())?,
        )?;
        let b = Var::parameter("lora_B.weight", Tensor::full_on(&[out, r], 0.0, w.dtype(), w.device())?)?;
        base.weight.set_requires_grad(false)?;
        if let Some(bias) = &base.bias {
            bias.set_requires_grad(false)?;
        }
        let adapter = Arc::new(Adapter { a, b, scaling: alpha / r as f64, dropout: Dropout::new(dropout)? });
        base.weight.set_adapter(Some(adapter.clone()));
        Ok(LoraLinear { base: Linear { weight: base.weight.clone(), bias: base.bias.clone() }, adapter })
    }

    /// The adapter's `A`, `[r, in]`.
    pub fn lora_a(&self) -> &Var {
        &self.adapter.a
    }

    /// The adapter's `B`, `[out, r]`.
    pub fn lora_b(&self) -> &Var {
        &self.adapter.b
    }

    /// `alpha / r`.
    pub fn scaling(&self) -> f64 {
        self.adapter.scaling
    }

    /// `W + scaling · B A`, computed in f32 (f64 for f64) and rounded once to W's dtype.
    pub fn merged_weight(&self) -> Result<Tensor> {
        let w = self.base.weight.get();
        let wide = if w.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
        let ba = self.adapter.b.get().to_dtype(wide)?.matmul(&self.adapter.a.get().to_dtype(wide)?)?;
        w.to_dtype(wide)?.add(&ba.mul_scalar(self.adapter.scaling)?)?.to_dtype(w.dtype())
    }

    /// Writes the merged weight into the base layer and takes the adapter off it.
    pub fn merge(&self) -> Result<()> {
        let _full_precision = crate::autocast::AutocastGuard::off();
        let merged = crate::autograd::no_grad(|| self.merged_weight())?;
        self.base.weight.set(merged)?;
        self.base.weight.set_adapter(None);
        Ok(())
    }
}

impl Module for LoraLinear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.base.forward(x)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        self.base.named_parameters()
    }

    fn set_training(&self, on: bool) {
        self.adapter.dropout.set_training(on);
    }
}

impl Linear {
    /// The adapter on this layer's weight, if any.
    pub(crate) fn lora(&self) -> Option<Arc<Adapter>> {
        self.weight.adapter::<Adapter>()
    }

    /// The base output plus the adapter's update.
    pub(crate) fn forward_adapted(&self, x: &Tensor, adapter: &Adapter) -> Result<Tensor> {
        self.forward_base(x)?.add(&adapter.delta(x)?)
    }

    /// `lora_A.weight` and `lora_B.weight` of the adapter on this layer, if any.
    pub(crate) fn lora_parameters(&self) -> Vec<(String, Var)> {
        match self.lora() {
            Some(a) => vec![("lora_A.weight".into(), a.a.clone()), ("lora_B.weight".into(), a.b.clone())],
            None => Vec::new(),
        }
    }
}

/// A model's LoRA adapters, by layer path (see the module's documentation).
pub struct Lora {
    /// The settings the adapters were made with.
    pub config: LoraConfig,
    /// Each adapted layer with its path.
    pub layers: Vec<(String, LoraLinear)>,
}

/// Adapts every [`Linear`] of `model` whose path ends in one of `config`'s targets and
/// freezes the rest of the model, as PEFT's `get_peft_model`. An error if no layer matches.
pub fn apply_lora(model: &dyn Module, config: &LoraConfig) -> Result<Lora> {
    let named = model.named_parameters();
    let mut layers = Vec::new();
    for (name, var) in &named {
        let Some(path) = name.strip_suffix(".weight") else { continue };
        if !config.targets(path) || var.get().rank() != 2 || var.adapter::<Adapter>().is_some() {
            continue;
        }
        let bias = named.iter().find(|(n, _)| *n == format!("{path}.bias")).map(|(_, v)| v.clone());
        let base = Linear { weight: var.clone(), bias };
        layers.push((path.to_string(), LoraLinear::new(&base, config.r, config.alpha, config.dropout)?));
    }
    if layers.is_empty() {
        let msg =
            format!("no [out, in] weight of the model is under a layer named {:?}", config.target_modules);
        return Err(Error::invalid("apply_lora", msg));
    }
    for (_, var) in named {
        var.set_requires_grad(false)?;
    }
    Ok(Lora { config: config.clone(), layers })
}

impl Lora {
    /// The adapters' `A` and `B`: what to train.
    pub fn parameters(&self) -> Vec<Var> {
        self.layers.iter().flat_map(|(_, l)| [l.lora_a().clone(), l.lora_b().clone()]).collect()
    }

    /// PEFT's names of the adapters' weights and their values.
    pub fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (path, l) in &self.layers {
            out.push((format!("base_model.model.{path}.lora_A.weight"), l.lora_a().get().detach()));
            out.push((format!("base_model.model.{path}.lora_B.weight"), l.lora_b().get().detach()));
        }
        out
    }

    /// Writes `dir/adapter_config.json` and `dir/adapter_model.safetensors` as PEFT's
    /// `save_pretrained` does, so `PeftModel.from_pretrained(base, dir)` loads them.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
        let config = serde_json::json!({
            "peft_type": "LORA",
            "r": self.config.r,
            "lora_alpha": self.config.alpha,
            "lora_dropout": self.config.dropout,
            "target_modules": self.config.target_modules,
            "bias": "none",
            "fan_in_fan_out": false,
            "inference_mode": true,
            "init_lora_weights": true,
            "use_rslora": false,
            "use_dora": false,
            "modules_to_save": null,
            "base_model_name_or_path": null,
        });
        let path = dir.join("adapter_config.json");
        let text = serde_json::to_string_pretty(&config).expect("JSON values serialize");
        std::fs::write(&path, text).map_err(|source| Error::Io { path: path.clone(), source })?;
        crate::io::save_safetensors(dir.join("adapter_model.safetensors"), &self.state_dict())
    }

    /// Loads an adapter saved by PEFT or [`Lora::save_pretrained`] from `dir` onto `model`
    /// (adapting the layers its config targets, freezing the rest).
    pub fn load(model: &dyn Module, dir: impl AsRef<Path>) -> Result<Lora> {
        let dir = dir.as_ref();
        let path = dir.join("adapter_config.json");
        let text =
            std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
        let bad = |what: &str| Error::invalid("Lora::load", format!("{}: {what}", path.display()));
        let c: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        let targets = match &c["target_modules"] {
            serde_json::Value::Array(v) => v.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join("|"),
            serde_json::Value::String(s) => s.clone(),
            _ => return Err(bad("no target_modules")),
        };
        let r = c["r"].as_u64().ok_or_else(|| bad("no rank r"))? as usize;
        let mut config = LoraConfig::new(r, c["lora_alpha"].as_f64().unwrap_or(8.0), &targets);
        config.dropout = c["lora_dropout"].as_f64().unwrap_or(0.0);
        let lora = apply_lora(model, &config)?;
        let values = crate::io::load_safetensors(dir.join("adapter_model.safetensors"))?;
        for (path, l) in &lora.layers {
            for (part, var) in [("lora_A", l.lora_a()), ("lora_B", l.lora_b())] {
                let name = format!("base_model.model.{path}.{part}.weight");
                let (_, t) =
                    values.iter().find(|(n, _)| *n == name).ok_or_else(|| bad(&format!("no {name}")))?;
                if t.shape() != var.get().shape() {
                    return Err(bad(&format!(
                        "{name} is {}, the layer needs {}",
                        t.spec(),
                        var.get().spec()
                    )));
                }
                var.set(t.to_dtype(var.get().dtype())?)?;
            }
        }
        Ok(lora)
    }

    /// Merges every adapter into its base weight (PEFT's `merge_and_unload`): the layers
    /// compute `x (W + scaling B A)ᵀ + b` with no adapter left. The model's parameters stay
    /// frozen (unfreeze them with [`Var::set_requires_grad`]).
    pub fn merge(self) -> Result<()> {
        self.layers.iter().try_for_each(|(_, l)| l.merge())
    }

    /// Training (dropout on) or evaluation mode for every adapter.
    pub fn set_training(&self, on: bool) {
        self.layers.iter().for_each(|(_, l)| l.set_training(on));
    }
}
