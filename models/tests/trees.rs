//! The parameter trees of the families built through `params::Params`: a fresh model (`new`)
//! holds the names, shapes and dtypes of the one loaded from each transformers-written fixture,
//! and a checkpoint's other naming (GPT-2 without `transformer.`, BERT under `bert.`) loads to
//! the same outputs and saves back under its own names.

mod common;
use common::{copy_fixture, fixture};
use std::path::Path;

use eager::nn::{state_dict, Module};
use eager::{DType, Tensor};
use eager_models::bert::Bert;
use eager_models::generate::CausalLm;
use eager_models::gpt2::Gpt2;
use eager_models::gpt_neox::GptNeoX;
use eager_models::llama::Llama;
use eager_models::AutoModel;

fn load(dir: &Path, dtype: Option<DType>) -> AutoModel {
    AutoModel::from_dir(dir, eager::default_device(), dtype).unwrap()
}

/// What a model's tree holds: each parameter's name, shape and dtype.
fn tree(m: &dyn Module) -> Vec<(String, Vec<usize>, DType)> {
    state_dict(m).into_iter().map(|(n, t)| (n, t.shape().to_vec(), t.dtype())).collect()
}

/// Fresh models (`new`) walk the tree loading walks: the names, shapes and dtypes of the model
/// loaded from each fixture, norms at their identity; fresh decoders and encoders run.
#[test]
fn fresh_models_walk_the_loaded_tree() {
    for name in ["gpt2", "gpt_neox", "gpt_neox_seq", "bert", "llama", "qwen3"] {
        let loaded = load(&fixture(name), Some(DType::F32));
        let cfg = loaded.config();
        let fresh: Box<dyn Module> = match &loaded {
            AutoModel::Gpt2(_) => Box::new(Gpt2::new(cfg, DType::F32).unwrap()),
            AutoModel::GptNeoX(_) => Box::new(GptNeoX::new(cfg, DType::F32).unwrap()),
            AutoModel::Bert(_) => Box::new(Bert::new(cfg, DType::F32).unwrap()),
            AutoModel::Llama(_) => Box::new(Llama::new(cfg, DType::F32).unwrap()),
        };
        assert_eq!(tree(fresh.as_ref()), tree(loaded.module()), "{name}: fresh and loaded trees");
    }
    let cfg = load(&fixture("gpt_neox"), None).config().clone();
    let neox = GptNeoX::new(&cfg, DType::F32).unwrap();
    let norm = &neox.final_layer_norm;
    assert!(norm.weight.get().to_vec::<f32>().unwrap().iter().all(|&x| x == 1.0));
    assert!(norm.bias.get().to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    let ids = Tensor::from_slice(&[1i64, 5, 7], &[1, 3]).unwrap();
    assert_eq!(neox.logits(&ids, None).unwrap().shape(), &[1, 3, cfg.vocab_size]);
    let cfg = load(&fixture("gpt2"), None).config().clone();
    assert_eq!(
        Gpt2::new(&cfg, DType::F32).unwrap().logits(&ids, None).unwrap().shape(),
        &[1, 3, cfg.vocab_size]
    );
    let cfg = load(&fixture("bert"), None).config().clone();
    let hidden = Bert::new(&cfg, DType::F32).unwrap().encode(&ids, None, None).unwrap();
    assert_eq!(hidden.shape(), &[1, 3, cfg.hidden_size]);
}

/// GPT-2's tensors without `transformer.` (the Hub's `gpt2`) and BERT's under `bert.` (a task
/// model's) load as the fixtures do, give the same outputs and save back under their own names.
#[test]
fn bare_and_prefixed_checkpoints_load_alike() {
    let ids = Tensor::from_slice(&[1i64, 5, 7, 3], &[1, 4]).unwrap();
    let run = |m: &AutoModel| -> Vec<f32> {
        match m {
            AutoModel::Bert(b) => b.encode(&ids, None, None).unwrap().to_vec::<f32>().unwrap(),
            _ => m.causal_lm().unwrap().logits(&ids, None).unwrap().to_vec::<f32>().unwrap(),
        }
    };
    let rename = |name: &str, n: &str| match name {
        "gpt2" => n.strip_prefix("transformer.").unwrap_or(n).to_string(),
        _ => format!("bert.{n}"),
    };
    for name in ["gpt2", "bert"] {
        let dir = copy_fixture(name);
        let file = dir.path().join("model.safetensors");
        let tensors: Vec<(String, Tensor)> = eager::io::load_safetensors(&file)
            .unwrap()
            .into_iter()
            .map(|(n, t)| (rename(name, &n), t))
            .collect();
        eager::io::save_safetensors(&file, &tensors).unwrap();
        let (model, renamed) = (load(&fixture(name), None), load(dir.path(), None));
        assert_eq!(run(&renamed), run(&model), "{name}: renamed tensors, the same outputs");
        let want: Vec<String> =
            state_dict(model.module()).into_iter().map(|(n, _)| rename(name, &n)).collect();
        let got: Vec<String> = state_dict(renamed.module()).into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, want, "{name}: saved back under the checkpoint's names");
    }
}
