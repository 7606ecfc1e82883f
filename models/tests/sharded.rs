//! `AutoModel::from_dir_sharded`: a checkpoint split over the CPU plugin's 4 devices as it is
//! read (Megatron's column- and row-parallel projections, the vocabulary split, Mixtral's
//! experts by expert) gives the single-device model's logits through a compiled step, and
//! each device holds its share of the weights, not the whole.

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

/// The names of a family's q projection, output projection, embeddings and final norm.
const LLAMA_NAMES: [&str; 4] = [
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.embed_tokens.weight",
    "model.norm.weight",
];

fn check(name: &str) {
    check_named(name, LLAMA_NAMES);
}

fn check_named(name: &str, [q, o, embed, norm]: [&str; 4]) {
    let _serial = serial();
    let mesh = Mesh::new(&[("model", 4)]).expect("the CPU plugin shows 4 devices");
    let single = AutoModel::from_dir(fixture(name), eager::default_device(), None).unwrap();
    let want = logits(&single, None);
    let before: Vec<u64> = mesh.devices().iter().map(|&d| eager::memory::live_bytes_on(d)).collect();
    let sharded = AutoModel::from_dir_sharded(fixture(name), &mesh, None).unwrap();
    let params = sharded.module().named_parameters();
    let total: u64 =
        params.iter().map(|(_, v)| (v.get().numel() * v.get().dtype().size_in_bytes()) as u64).sum();
    for (i, &d) in mesh.devices().iter().enumerate() {
        let held = eager::memory::live_bytes_on(d).saturating_sub(before[i]);
        assert!(held < total / 2, "{name}: {d} holds {held} of the model's {total} bytes");
    }
    let split =
        |n: &str| params.iter().find(|(p, _)| p == n).unwrap().1.get().sharding().unwrap().spec().clone();
    assert_eq!(split(q), P::new(&[Some("model")]));
    assert_eq!(split(o), P::new(&[None, Some("model")]));
    assert_eq!(split(embed), P::new(&[Some("model")]));
    assert_eq!(split(norm), P::replicated());
    let got = logits(&sharded, Some(&mesh));
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
    assert!(err <= 1e-5, "{name}: sharded logits differ by {err} of the largest");
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
    check_named(
        "gpt_neox",
        [
            "gpt_neox.layers.0.attention.query_key_value.weight",
            "gpt_neox.layers.0.attention.dense.weight",
            "gpt_neox.embed_in.weight",
            "gpt_neox.final_layer_norm.weight",
        ],
    );
}

#[test]
fn gpt2_refuses_sharded_loading_by_name() {
    let _serial = serial();
    let mesh = Mesh::new(&[("model", 4)]).unwrap();
    let e = AutoModel::from_dir_sharded(fixture("gpt2"), &mesh, None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("loading `gpt2` sharded over a mesh"), "{e}");
}

#[test]
fn a_sharded_llama_generates_transformers_greedy_tokens_compiled() {
    let _serial = serial();
    use eager_models::generate::{generate, DecodeMode, GenerateOptions};
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama").join("ref.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let mesh = Mesh::new(&[("model", 4)]).unwrap();
    let model = AutoModel::from_dir_sharded(fixture("llama"), &mesh, None).unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 8,
        mode: DecodeMode::Compiled,
        pad_token_id: 2,
        ..Default::default()
    };
    let got = generate(model.causal_lm().unwrap(), &[ids(&r["prompt_ids"])], &opts, None, |_, _| {}).unwrap();
    assert_eq!(got[0], ids(&r["greedy"]));
}
