//! `AutoModel::from_dir_sharded`: a checkpoint of each family split over the CPU plugin's 4
//! devices as it is read (Megatron's column- and row-parallel projections, the vocabulary
//! split, Mixtral's experts by expert) gives the single-device model's logits (BERT: hidden
//! states) through a compiled step and transformers' greedy tokens, and each device holds its
//! share of the weights, not the whole.

mod common;
use common::fixture;

use eager::mesh::{Mesh, PartitionSpec as P};
use eager::{DType, Tensor};
use eager_models::AutoModel;

/// One test at a time: they read the process-wide memory ledger's bytes per device.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The logits of a 15-token prompt through one compiled program (the prompt whole on every
/// device of `mesh`, when given).
fn logits(model: &AutoModel, mesh: Option<&Mesh>) -> Vec<f32> {
    let lm = model.causal_lm().unwrap();
    let ids: Vec<i64> = (0..15).map(|i| (i * 37 + 5) % 300).collect();
    let mut ids = Tensor::from_slice(&ids, &[1, 15]).unwrap();
    if let Some(mesh) = mesh {
        ids = ids.replicate(mesh).unwrap();
    }
    let step = eager::compile("sharded_logits", |a: &[Tensor]| {
        Ok(vec![lm
            .logits(&a[0], None)
            .map_err(|e| eager::Error::Invalid { op: "logits", msg: e.to_string() })?])
    });
    step.call(&[&ids]).unwrap().remove(0).to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// A Llama-family checkpoint's q and o projections, embeddings and final norm, with how each splits.
fn llama_splits() -> [(&'static str, P); 4] {
    [
        ("model.layers.0.self_attn.q_proj.weight", P::new(&[Some("model")])),
        ("model.layers.0.self_attn.o_proj.weight", P::new(&[None, Some("model")])),
        ("model.embed_tokens.weight", P::new(&[Some("model")])),
        ("model.norm.weight", P::replicated()),
    ]
}

fn check(name: &str) {
    check_split(name, &llama_splits());
}

/// Loads fixture `name` on one device and over 4: no device holds half the model, the named
/// parameters split as `splits` says, and the logits agree.
fn check_split(name: &str, splits: &[(&str, P)]) {
    let _serial = serial();
    let mesh = Mesh::new(&[("model", 4)]).expect("the CPU plugin shows 4 devices");
    let single = AutoModel::from_dir(fixture(name), eager::default_device(), None).unwrap();
    let want = logits(&single, None);
    let sharded = load_sharded_holding_a_share(name, &mesh);
    assert_splits(&sharded, splits);
    let got = logits(&sharded, Some(&mesh));
    let err = rel_err(&got, &want);
    assert!(err <= 1e-5, "{name}: sharded logits differ by {err} of the largest");
}

/// Fixture `name` loaded over `mesh`, checking that each device holds less than half its bytes.
fn load_sharded_holding_a_share(name: &str, mesh: &Mesh) -> AutoModel {
    let before: Vec<u64> = mesh.devices().iter().map(|&d| eager::memory::live_bytes_on(d)).collect();
    let sharded = AutoModel::from_dir_sharded(fixture(name), mesh, None).unwrap();
    let params = sharded.module().named_parameters();
    let total: u64 =
        params.iter().map(|(_, v)| (v.get().numel() * v.get().dtype().size_in_bytes()) as u64).sum();
    for (i, &d) in mesh.devices().iter().enumerate() {
        let held = eager::memory::live_bytes_on(d).saturating_sub(before[i]);
        assert!(held < total / 2, "{name}: {d} holds {held} of the model's {total} bytes");
    }
    sharded
}

fn assert_splits(model: &AutoModel, splits: &[(&str, P)]) {
    let params = model.module().named_parameters();
    for (name, want) in splits {
        let (_, v) = params.iter().find(|(p, _)| p == name).unwrap_or_else(|| panic!("no parameter {name}"));
        assert_eq!(v.get().sharding().unwrap().spec(), want, "{name}");
    }
}

/// The largest difference over the largest magnitude of `want`.
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

#[test]
fn llama_split_over_four_devices_gives_the_same_logits() {
    check("llama");
}

#[test]
fn mixtral_experts_one_per_device_give_the_same_logits() {
    check("mixtral");
    let _serial = serial();
    let mesh = Mesh::new(&[("model", 4)]).unwrap();
    let sharded = AutoModel::from_dir_sharded(fixture("mixtral"), &mesh, None).unwrap();
    let params = sharded.module().named_parameters();
    let w1 = &params.iter().find(|(n, _)| n == "model.layers.0.block_sparse_moe.experts.w1").unwrap().1;
    assert_eq!(w1.get().sharding().unwrap().spec(), &P::new(&[Some("model")]));
}

#[test]
fn qwen_moe_experts_and_shared_expert_split_give_the_same_logits() {
    check("qwen2_moe");
    check("qwen3_moe");
}

#[test]
fn gpt_neox_split_over_four_devices_gives_the_same_logits() {
    // 4 heads over 4 devices: each holds one head's q, k and v of the fused per-head projection.
    check_split(
        "gpt_neox",
        &[
            ("gpt_neox.layers.0.attention.query_key_value.weight", P::new(&[Some("model")])),
            ("gpt_neox.layers.0.attention.dense.weight", P::new(&[None, Some("model")])),
            ("gpt_neox.embed_in.weight", P::new(&[Some("model")])),
            ("gpt_neox.final_layer_norm.weight", P::replicated()),
        ],
    );
}

#[test]
fn gpt2_conv1d_split_by_columns_and_rows_gives_the_same_logits() {
    // Conv1D weights are [in, out]: column-parallel c_attn and c_fc split dim 1, c_proj dim 0.
    check_split(
        "gpt2",
        &[
            ("transformer.h.0.attn.c_attn.weight", P::new(&[None, Some("model")])),
            ("transformer.h.0.attn.c_attn.bias", P::new(&[Some("model")])),
            ("transformer.h.0.attn.c_proj.weight", P::new(&[Some("model")])),
            ("transformer.h.0.attn.c_proj.bias", P::replicated()),
            ("transformer.h.0.mlp.c_fc.weight", P::new(&[None, Some("model")])),
            ("transformer.wte.weight", P::new(&[Some("model")])),
            ("transformer.ln_f.weight", P::replicated()),
        ],
    );
}

#[test]
fn bert_split_over_four_devices_gives_the_same_hidden_states() {
    let _serial = serial();
    let mesh = Mesh::new(&[("model", 4)]).unwrap();
    let encode = |model: &AutoModel, mesh: Option<&Mesh>| -> Vec<f32> {
        let AutoModel::Bert(bert) = model else { panic!("bert loads as Bert") };
        let ids: Vec<i64> = (0..24).map(|i| (i * 37 + 5) % 300).collect();
        let mask: Vec<i64> = (0..24).map(|i| i64::from(i % 12 < 9)).collect();
        let (mut ids, mut mask) =
            (Tensor::from_slice(&ids, &[2, 12]).unwrap(), Tensor::from_slice(&mask, &[2, 12]).unwrap());
        if let Some(mesh) = mesh {
            (ids, mask) = (ids.replicate(mesh).unwrap(), mask.replicate(mesh).unwrap());
        }
        let step = eager::compile("sharded_bert", |a: &[Tensor]| {
            Ok(vec![bert
                .encode(&a[0], Some(&a[1]), None)
                .map_err(|e| eager::Error::Invalid { op: "encode", msg: e.to_string() })?])
        });
        step.call(&[&ids, &mask]).unwrap().remove(0).to_vec::<f32>().unwrap()
    };
    let single = AutoModel::from_dir(fixture("bert"), eager::default_device(), None).unwrap();
    let want = encode(&single, None);
    let sharded = load_sharded_holding_a_share("bert", &mesh);
    assert_splits(
        &sharded,
        &[
            ("encoder.layer.0.attention.self.query.weight", P::new(&[Some("model")])),
            ("encoder.layer.0.attention.output.dense.weight", P::new(&[None, Some("model")])),
            ("encoder.layer.0.output.dense.weight", P::new(&[None, Some("model")])),
            ("embeddings.word_embeddings.weight", P::new(&[Some("model")])),
            // 2 token types: a dim the axis does not divide stays whole.
            ("embeddings.token_type_embeddings.weight", P::replicated()),
        ],
    );
    let got = encode(&sharded, Some(&mesh));
    let err = rel_err(&got, &want);
    assert!(err <= 1e-5, "bert: sharded last_hidden_state differs by {err} of the largest");
}

/// Fixture `name` loaded over 4 devices generates transformers' greedy tokens, compiled.
fn generates_greedy_tokens_sharded(name: &str) {
    let _serial = serial();
    use eager_models::generate::{generate, DecodeMode, GenerateOptions};
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("ref.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let mesh = Mesh::new(&[("model", 4)]).unwrap();
    let model = AutoModel::from_dir_sharded(fixture(name), &mesh, None).unwrap();
    let greedy = ids(&r["greedy"]);
    let opts = GenerateOptions {
        max_new_tokens: greedy.len(),
        mode: DecodeMode::Compiled,
        pad_token_id: 2,
        ..Default::default()
    };
    let got = generate(model.causal_lm().unwrap(), &[ids(&r["prompt_ids"])], &opts, None, |_, _| {}).unwrap();
    assert_eq!(got[0], greedy, "{name}");
}

#[test]
fn a_sharded_llama_generates_transformers_greedy_tokens_compiled() {
    generates_greedy_tokens_sharded("llama");
}

#[test]
fn sharded_gpt2_and_gpt_neox_generate_transformers_greedy_tokens_compiled() {
    generates_greedy_tokens_sharded("gpt2");
    generates_greedy_tokens_sharded("gpt_neox");
}
