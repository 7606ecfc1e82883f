//! eager-models against transformers' own outputs for tiny random checkpoints (made and
//! committed by tests/fixtures/make_fixtures.py): prompt logits (f32 within 1e-4 of the
//! largest logit; bf16 within 5e-2 of it — bf16 keeps 8 bits of mantissa and both sides round
//! at different places), greedy tokens identical (one prompt and a left-padded batch, eager,
//! fused and compiled decode), BERT hidden states, tokenizer ids and chat template, sharded
//! loads, the state_dict round trip, and the errors bad checkpoints give.

mod common;
use common::{copy_fixture, fixture};
use std::path::{Path, PathBuf};

use eager::{DType, Tensor};
use eager_models::generate::{generate, DecodeMode, GenerateOptions};
use eager_models::tokenizer::Message;
use eager_models::{AutoModel, ModelError, Tokenizer};
use serde_json::Value;

fn refs(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("ref.json")).unwrap()).unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load(dir: &Path, dtype: Option<DType>) -> AutoModel {
    AutoModel::from_dir(dir, eager::default_device(), dtype).unwrap()
}

/// The prompt's logits `[T, vocab]` as f32 values.
fn prompt_logits(model: &AutoModel, ids: &[u32]) -> Vec<f32> {
    let t = Tensor::from_slice(&ids.iter().map(|&i| i as i64).collect::<Vec<_>>(), &[1, ids.len()]).unwrap();
    let lm = model.causal_lm().unwrap();
    lm.logits(&t, None).unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// max |a - b| / max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn npy(path: PathBuf) -> Vec<f32> {
    eager::io::load_npy(path).unwrap().to_vec::<f32>().unwrap()
}

/// The prompt's logits of fixture `name` loaded in bf16, within 5e-2 of the largest of
/// transformers' f32 logits.
fn check_bf16(name: &str) {
    let prompt = ids_of(&refs(name)["prompt_ids"]);
    let reference = npy(fixture(name).join("ref_logits.npy"));
    let err = rel_err(&prompt_logits(&load(&fixture(name), Some(DType::BF16)), &prompt), &reference);
    assert!(err <= 5e-2, "{name} cast to bf16: error {err}");
}

/// The left-padded batch of fixture `name` decoded greedily in each of `modes`: transformers'
/// tokens.
fn check_batch_greedy(name: &str, model: &AutoModel, modes: &[DecodeMode]) {
    let r = refs(name);
    let batch: Vec<Vec<u32>> = r["batch_prompts"].as_array().unwrap().iter().map(ids_of).collect();
    let want: Vec<Vec<u32>> = r["batch_greedy"].as_array().unwrap().iter().map(ids_of).collect();
    for &mode in modes {
        assert_eq!(greedy(model, &batch, mode), want, "{name}, {mode:?}");
    }
}

fn greedy(model: &AutoModel, prompts: &[Vec<u32>], mode: DecodeMode) -> Vec<Vec<u32>> {
    let opts = GenerateOptions { max_new_tokens: 8, mode, pad_token_id: 2, ..Default::default() };
    generate(model.causal_lm().unwrap(), prompts, &opts, None, |_, _| {}).unwrap()
}

/// Logits and greedy tokens of one prompt; the left-padded batch's greedy tokens too where
/// `batch` (in bf16 a near tie may round either way on either side, so not there).
fn check_causal(name: &str, dtype: Option<DType>, tol: f32, batch: bool) {
    let r = refs(name);
    let model = load(&fixture(name), dtype);
    let prompt = ids_of(&r["prompt_ids"]);
    let err = rel_err(&prompt_logits(&model, &prompt), &npy(fixture(name).join("ref_logits.npy")));
    assert!(err <= tol, "{name}: logits differ from transformers' by {err} of the largest (tolerance {tol})");
    assert_eq!(
        greedy(&model, std::slice::from_ref(&prompt), DecodeMode::Eager)[0],
        ids_of(&r["greedy"]),
        "{name}: greedy tokens"
    );
    if batch {
        check_batch_greedy(name, &model, &[DecodeMode::Eager]);
    }
}

#[test]
fn gpt2_matches_transformers() {
    check_causal("gpt2", None, 1e-4, true);
}

#[test]
fn llama_matches_transformers() {
    check_causal("llama", None, 1e-4, true);
}

#[test]
fn llama_gqa_llama3_rope_tied_transformers4_config_matches() {
    check_causal("llama_gqa", None, 1e-4, true);
}

#[test]
fn qwen2_mqa_linear_rope_biases_matches() {
    check_causal("qwen2", None, 1e-4, true);
}

fn shapes(dir: &Path) -> std::collections::BTreeMap<String, Vec<usize>> {
    eager_models::weights::Weights::open(dir).unwrap().shapes()
}

/// `save_pretrained` of a model loaded from fixture `name` writes its tensors' names and shapes.
fn assert_saves_same_names(model: &AutoModel, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    eager_models::save::save_pretrained(model.module(), model.config(), dir.path(), Some(&fixture(name)))
        .unwrap();
    assert_eq!(shapes(&fixture(name)), shapes(dir.path()), "{name}: the same Hugging Face names and shapes");
}

/// Qwen3: per-head q/k norms (their weights randomised), an explicit `head_dim` unlike
/// hidden / heads, grouped queries, an untied head; cast to bf16 on load it stays close; its
/// state_dict saves back under the same names; readied by `prepare_inference` it generates the
/// same tokens; a sliding-window config reads its sliding layers.
#[test]
fn qwen3_qk_norm_explicit_head_dim_matches() {
    check_causal("qwen3", None, 1e-4, true);
    let model = load(&fixture("qwen3"), None);
    assert_eq!(model.config().head_dim, 16);
    let prompt = ids_of(&refs("qwen3")["prompt_ids"]);
    let reference = npy(fixture("qwen3").join("ref_logits.npy"));
    let err = rel_err(&prompt_logits(&load(&fixture("qwen3"), Some(DType::BF16)), &prompt), &reference);
    assert!(err <= 5e-2, "qwen3 cast to bf16: error {err}");
    assert!(shapes(&fixture("qwen3")).contains_key("model.layers.1.self_attn.k_norm.weight"));
    assert_saves_same_names(&model, "qwen3");
    model.causal_lm().unwrap().prepare_inference().unwrap();
    let greedy_ref = ids_of(&refs("qwen3")["greedy"]);
    assert_eq!(greedy(&model, &[prompt], DecodeMode::Eager)[0], greedy_ref, "after prepare_inference");
    // Sliding-window attention (read as Qwen2's): from `max_window_layers` on without `layer_types`.
    let dir = copy_fixture("qwen3");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["use_sliding_window"] = true.into();
    cfg["sliding_window"] = 4.into();
    cfg["max_window_layers"] = 1.into();
    cfg.as_object_mut().unwrap().remove("layer_types");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let slid = load(dir.path(), None);
    assert_eq!(
        (slid.config().sliding_window, slid.config().sliding_layers.clone()),
        (Some(4), vec![false, true])
    );
}

/// Mixtral: 4 experts, 2 per token (routers scaled so that no choice ties), grouped queries;
/// the prompt's 15 tokens run the grouped experts, one decoding sequence the gathered ones (2
/// pairs < 4 experts), the batch of two the grouped ones again; in every decode mode; cast to
/// bf16 on load it stays close; it saves under Hugging Face's per-expert names.
#[test]
fn mixtral_experts_match() {
    check_causal("mixtral", None, 1e-4, true);
    let model = load(&fixture("mixtral"), None);
    assert_eq!((model.config().num_experts, model.config().num_experts_per_tok), (4, 2));
    check_batch_greedy("mixtral", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    check_bf16("mixtral");
    assert!(shapes(&fixture("mixtral")).contains_key("model.layers.1.block_sparse_moe.experts.3.w2.weight"));
    assert_saves_same_names(&model, "mixtral");
}

/// Qwen2-MoE: routed experts (not renormalised) beside a shared expert behind its sigmoid gate
/// on layer 0, a dense MLP on layer 1 (`mlp_only_layers`), q/k/v biases; Qwen3-MoE: per-head
/// q/k norms, renormalised experts on every layer. Both in every decode mode, saved under the
/// checkpoint's names (`mlp.experts.{e}.gate_proj`, …).
#[test]
fn qwen_moe_shared_expert_and_dense_layers_match() {
    for name in ["qwen2_moe", "qwen3_moe"] {
        check_causal(name, None, 1e-4, true);
        let model = load(&fixture(name), None);
        check_batch_greedy(name, &model, &[DecodeMode::Compiled]);
        assert_saves_same_names(&model, name);
        check_bf16(name);
    }
    let c = load(&fixture("qwen2_moe"), None).config().clone();
    assert_eq!(
        (c.sparse_layers.clone(), c.shared_expert_intermediate_size, c.norm_topk_prob),
        (vec![true, false], 40, false)
    );
    assert!(shapes(&fixture("qwen2_moe")).contains_key("model.layers.0.mlp.shared_expert_gate.weight"));
}

/// Gemma 2: embeddings scaled by √hidden, `1 + weight` norms (randomised) before and after
/// attention and the MLP, GeGLU, scores scaled by `query_pre_attn_scalar^-½`, attention and
/// logit soft caps (small, so that they bend), a sliding window of 4 on layer 0 over prompts of
/// 37 and 15 tokens, a tied head; in every decode mode; bf16 stays close; saves its names.
#[test]
fn gemma2_sandwich_norms_soft_caps_sliding_window_match() {
    check_causal("gemma2", None, 1e-4, true);
    let model = load(&fixture("gemma2"), None);
    let c = model.config();
    assert_eq!((c.attn_softcap, c.final_softcap, c.sliding_window), (Some(0.05), Some(0.5), Some(4)));
    assert_eq!(c.sliding_layers, vec![true, false]);
    check_batch_greedy("gemma2", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    check_bf16("gemma2");
    assert_saves_same_names(&model, "gemma2");
}

/// Gemma 3's text model: per-head `1 + weight` q/k norms, rope base 10⁶ on the global layer and
/// 10⁴ on the sliding one (transformers 5's per-layer-type `rope_parameters`), no soft caps; the
/// same checkpoint with transformers 4's `rope_theta` and `rope_local_base_freq` reads the same.
#[test]
fn gemma3_local_rope_qk_norms_match() {
    check_causal("gemma3", None, 1e-4, true);
    let model = load(&fixture("gemma3"), None);
    let c = model.config();
    assert_eq!((c.rope_theta, c.rope_local_theta, c.attn_softcap), (1e6, Some(1e4), None));
    check_bf16("gemma3");
    assert_saves_same_names(&model, "gemma3");
    check_batch_greedy("gemma3", &model, &[DecodeMode::Compiled]);
    let r = refs("gemma3");
    let dir = copy_fixture("gemma3");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let obj = cfg.as_object_mut().unwrap();
    obj.remove("rope_parameters");
    obj.remove("layer_types");
    obj.insert("rope_theta".into(), 1e6.into());
    obj.insert("rope_local_base_freq".into(), 1e4.into());
    std::fs::write(&path, cfg.to_string()).unwrap();
    let v4 = load(dir.path(), None);
    assert_eq!(v4.config().sliding_layers, vec![true, false], "sliding_window_pattern 2");
    let prompt = ids_of(&r["prompt_ids"]);
    let err = rel_err(&prompt_logits(&v4, &prompt), &npy(fixture("gemma3").join("ref_logits.npy")));
    assert!(err <= 1e-4, "gemma3, transformers 4's config: {err}");
}

/// Mistral's sliding window (4, every layer) over prompts of 37 and 15 tokens: the prompt's
/// logits, then greedy tokens past the window through the static cache (one prompt and a
/// left-padded batch; eager, fused and compiled decode).
#[test]
fn mistral_sliding_window_matches() {
    check_causal("mistral_swa", None, 1e-4, true);
    let model = load(&fixture("mistral_swa"), None);
    assert_eq!(
        (model.config().sliding_window, model.config().sliding_layers.clone()),
        (Some(4), vec![true; 2])
    );
    check_batch_greedy("mistral_swa", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    // A Mistral config without `sliding_window` slides over transformers' default 4096; null: none.
    let mut cfg = model.config().raw.clone();
    cfg.as_object_mut().unwrap().remove("sliding_window");
    assert_eq!(eager_models::Config::from_value(cfg.clone()).unwrap().sliding_window, Some(4096));
    cfg["sliding_window"] = Value::Null;
    let none = eager_models::Config::from_value(cfg).unwrap();
    assert_eq!((none.sliding_window, none.sliding_layers), (None, vec![false; 2]));
}

/// The sliding-window mask over a cache: one start slot for every row, or one per row (a
/// server's decode step), each query keeping the `window` slots up to its own.
#[test]
fn window_mask_keeps_the_last_window_slots_per_row() {
    use eager_models::generate::{step_mask, window_mask};
    let valid = Tensor::full(&[2, 8], 1.0, DType::Bool).unwrap();
    let bools = |t: Tensor| t.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap();
    // A prefill of 3 queries at slots 2, 3, 4 with a window of 2.
    let start = Tensor::from_slice(&[2i64], &[]).unwrap();
    let m = window_mask(&step_mask(&valid, &start, 3).unwrap(), &start, 2).unwrap();
    assert_eq!(m.shape(), &[2, 1, 3, 8]);
    let row = |q: usize| -> Vec<u8> { (0..8).map(|p| (p <= q && p + 2 > q) as u8).collect() };
    assert_eq!(bools(m)[..24], [row(2), row(3), row(4)].concat());
    // One decode query per row, at slots 5 and 1, under a mask that allows every slot.
    let start = Tensor::from_slice(&[5i64, 1], &[2]).unwrap();
    let all = Tensor::full(&[2, 1, 1, 8], 1.0, DType::Bool).unwrap();
    let got = bools(window_mask(&all, &start, 3).unwrap());
    let keep = |q: usize| -> Vec<u8> { (0..8).map(|p| (p + 3 > q) as u8).collect() };
    assert_eq!(got, [keep(5), keep(1)].concat());
}

/// Qwen2 with `use_sliding_window` and `max_window_layers` 1: layer 0 attends fully, layer 1
/// within the window of 4 (transformers 5's `layer_types`), as transformers does.
#[test]
fn qwen2_sliding_window_on_some_layers_matches() {
    check_causal("qwen2_swa", None, 1e-4, true);
    let model = load(&fixture("qwen2_swa"), None);
    assert_eq!(
        (model.config().sliding_window, model.config().sliding_layers.clone()),
        (Some(4), vec![false, true])
    );
    // Without `use_sliding_window` (most Qwen2 checkpoints) no layer slides.
    let mut cfg = model.config().raw.clone();
    cfg["use_sliding_window"] = false.into();
    assert_eq!(eager_models::Config::from_value(cfg).unwrap().sliding_window, None);
}

/// Phi-3: its fused `qkv_proj` (grouped queries) and `gate_up_proj` split on load (norms
/// randomised, a transformers 4 config); every decode mode gives the same tokens; saved, the
/// projections are fused back under the same names and shapes and load to the same logits;
/// a rope scaling it does not implement (`yarn`) is refused by name.
#[test]
fn phi3_fused_projections_match_and_save_fused() {
    check_causal("phi3", None, 1e-4, true);
    let model = load(&fixture("phi3"), None);
    assert_eq!(model.config().norm_eps, 1e-5);
    let r = refs("phi3");
    check_batch_greedy("phi3", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    assert!(shapes(&fixture("phi3")).contains_key("model.layers.1.self_attn.qkv_proj.weight"));
    assert_saves_same_names(&model, "phi3");
    let dir = tempfile::tempdir().unwrap();
    eager_models::save::save_pretrained(model.module(), model.config(), dir.path(), None).unwrap();
    let prompt = ids_of(&r["prompt_ids"]);
    // Within rounding, not to the bit: while another test's thread records a compiled or fused
    // program, this thread's composite ops run op by op, which rounds differently.
    let err = rel_err(&prompt_logits(&load(dir.path(), None), &prompt), &prompt_logits(&model, &prompt));
    assert!(err <= 1e-6, "phi3 saved fused and loaded back: {err}");
    // `yarn` is not implemented: refused by name.
    let dir = copy_fixture("phi3");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 2.0});
    std::fs::write(&path, cfg.to_string()).unwrap();
    let e = load_err(dir.path());
    assert!(matches!(&e, ModelError::Unsupported(m) if m.contains("`yarn`")), "{e}");
}

/// Phi-3's LongRoPE (an original context of 16 in a model of 64): the 15-token prompt's logits
/// (short factors, cos and sin scaled by the attention factor), then greedy decoding past 16
/// positions, where each call's largest position switches it to the long factors, as
/// transformers does per forward call; eager, fused and compiled. The same config written as
/// transformers 4's `rope_scaling` with `type: su` reads the same.
#[test]
fn phi3_longrope_matches_across_the_original_context() {
    check_causal("phi3_longrope", None, 1e-4, true);
    check_bf16("phi3_longrope");
    let model = load(&fixture("phi3_longrope"), None);
    check_batch_greedy("phi3_longrope", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    // A 37-token prompt: long factors from the prefill on.
    let long: Vec<u32> = Tokenizer::from_dir(fixture("phi3_longrope"))
        .unwrap()
        .encode("The quick brown fox jumps over the lazy dog. Hello world", false)
        .unwrap();
    assert_eq!(long.len(), 37);
    let reference = npy(fixture("phi3_longrope").join("ref_logits_long.npy"));
    let err = rel_err(&prompt_logits(&model, &long), &reference);
    assert!(err <= 1e-4, "phi3_longrope, 37 tokens: logits differ by {err} of the largest");
    let dir = copy_fixture("phi3_longrope");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut rope = cfg["rope_parameters"].clone();
    rope.as_object_mut().unwrap().remove("rope_type");
    rope.as_object_mut().unwrap().remove("original_max_position_embeddings");
    rope["type"] = "su".into();
    let obj = cfg.as_object_mut().unwrap();
    obj.remove("rope_parameters");
    obj.insert("rope_scaling".into(), rope);
    obj.insert("rope_theta".into(), 10000.0.into());
    std::fs::write(&path, cfg.to_string()).unwrap();
    let su = load(dir.path(), None);
    check_batch_greedy("phi3_longrope", &su, &[DecodeMode::Eager]);
}

/// GPT-NeoX: the fused per-head qkv, parallel residual, rotary on half of each head (base
/// 20000), LayerNorm weights and biases randomised; cast to bf16 on load it stays close; every
/// decode mode gives the same tokens, and so does the model readied by `prepare_inference`;
/// its state_dict saves back under the same names.
#[test]
fn gpt_neox_parallel_residual_partial_rotary_matches() {
    check_causal("gpt_neox", None, 1e-4, true);
    let model = load(&fixture("gpt_neox"), None);
    let AutoModel::GptNeoX(neox) = &model else { panic!("gpt_neox loads as GptNeoX") };
    assert_eq!((neox.rotary_ndims, neox.use_parallel_residual), (4, true));
    check_bf16("gpt_neox");
    check_batch_greedy("gpt_neox", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
    assert!(shapes(&fixture("gpt_neox")).contains_key("embed_out.weight"));
    assert_saves_same_names(&model, "gpt_neox");
    model.causal_lm().unwrap().prepare_inference().unwrap();
    check_batch_greedy("gpt_neox", &model, &[DecodeMode::Eager]);
}

/// GPT-NeoX the other way: sequential residual, tanh GELU, rotary on 6 of 8 dims, no
/// attention biases, a transformers 4 config (`rotary_pct`, `rotary_emb_base`).
#[test]
fn gpt_neox_sequential_residual_transformers4_config_matches() {
    check_causal("gpt_neox_seq", None, 1e-4, true);
    let model = load(&fixture("gpt_neox_seq"), None);
    let AutoModel::GptNeoX(neox) = &model else { panic!("gpt_neox loads as GptNeoX") };
    assert_eq!((neox.rotary_ndims, neox.use_parallel_residual), (6, false));
    assert_eq!(model.config().rope_theta, 5000.0);
}

#[test]
fn bf16_checkpoint_loads_in_bf16_and_matches() {
    let model = load(&fixture("llama_bf16"), None);
    assert_eq!(model.causal_lm().unwrap().config().dtype, Some(DType::BF16));
    assert_eq!(model.module().parameters()[0].get().dtype(), DType::BF16, "loads in the checkpoint's dtype");
    check_causal("llama_bf16", None, 5e-2, false);
}

#[test]
fn cast_on_load_to_f32_and_bf16() {
    let r = refs("llama");
    let prompt = ids_of(&r["prompt_ids"]);
    let reference = npy(fixture("llama").join("ref_logits.npy"));
    let as_bf16 = load(&fixture("llama"), Some(DType::BF16));
    assert_eq!(as_bf16.module().parameters()[0].get().dtype(), DType::BF16);
    let err = rel_err(&prompt_logits(&as_bf16, &prompt), &reference);
    assert!(err <= 5e-2 && err > 0.0, "f32 checkpoint cast to bf16: error {err}");
    let bf16_as_f32 = load(&fixture("llama_bf16"), Some(DType::F32));
    let err =
        rel_err(&prompt_logits(&bf16_as_f32, &prompt), &npy(fixture("llama_bf16").join("ref_logits.npy")));
    assert!(err <= 5e-2, "bf16 checkpoint cast to f32: error {err}");
}

#[test]
fn every_decode_mode_gives_the_same_greedy_tokens() {
    let model = load(&fixture("llama_gqa"), None);
    check_batch_greedy("llama_gqa", &model, &[DecodeMode::Fused, DecodeMode::Compiled]);
}

#[test]
fn sharded_checkpoint_loads_as_the_single_file() {
    let r = refs("llama");
    let prompt = ids_of(&r["prompt_ids"]);
    let sharded = load(&fixture("llama_sharded"), None);
    let err = rel_err(&prompt_logits(&sharded, &prompt), &npy(fixture("llama").join("ref_logits.npy")));
    assert!(err <= 1e-4, "sharded: {err}");
}

#[test]
fn bert_hidden_states_match_transformers() {
    let r = refs("bert");
    let rows = |k: &str| -> (Vec<i64>, usize, usize) {
        let a = r[k].as_array().unwrap();
        let flat: Vec<i64> =
            a.iter().flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_i64().unwrap())).collect();
        (flat, a.len(), a[0].as_array().unwrap().len())
    };
    let (ids, b, t) = rows("input_ids");
    let (mask, _, _) = rows("attention_mask");
    let AutoModel::Bert(bert) = load(&fixture("bert"), None) else { panic!("bert loads as Bert") };
    let ids = Tensor::from_slice(&ids, &[b, t]).unwrap();
    let mask = Tensor::from_slice(&mask, &[b, t]).unwrap();
    let hidden = bert.encode(&ids, Some(&mask), None).unwrap().to_vec::<f32>().unwrap();
    let err = rel_err(&hidden, &npy(fixture("bert").join("ref_hidden.npy")));
    assert!(err <= 1e-4, "bert last_hidden_state: {err}");
}

#[test]
fn tokenizer_matches_transformers() {
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tokenizer_ref.json")).unwrap()).unwrap();
    let tok = Tokenizer::from_dir(fixture("llama")).unwrap();
    for ((text, ids), decoded) in r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(r["ids"].as_array().unwrap())
        .zip(r["decoded"].as_array().unwrap())
    {
        let got = tok.encode(text.as_str().unwrap(), true).unwrap();
        assert_eq!(got, ids_of(ids), "ids of {text}");
        assert_eq!(tok.decode(&got, false).unwrap(), decoded.as_str().unwrap());
    }
    assert_eq!(tok.eos_token.as_deref(), r["eos"].as_str());
    assert_eq!(tok.pad_token.as_deref(), r["pad"].as_str());
    assert_eq!(tok.eos_token_id(), Some(1));
    let messages: Vec<Message> = serde_json::from_value(r["messages"].clone()).unwrap();
    assert_eq!(tok.apply_chat_template(&messages, true).unwrap(), r["chat"].as_str().unwrap());
}

/// A BPE trained in eager: merges learned from the text (fewer tokens than bytes), any text
/// (unseen bytes too) decodes back to itself, and the saved files read back alike (transformers
/// reading them is tests/models/test_hf_roundtrip.py).
#[test]
fn trained_byte_level_bpe_round_trips() {
    let text = "the cat sat on the mat; the cat ate the rat. ".repeat(20);
    let tok = Tokenizer::train_byte_level_bpe(&[&text], 300).unwrap();
    // 259 symbols, then merges until 300 or until the text has no pair left to merge.
    assert!((260..=300).contains(&tok.vocab_size()), "{}", tok.vocab_size());
    assert_eq!([tok.token_id("<s>"), tok.eos_token_id(), tok.pad_token_id()], [Some(0), Some(1), Some(2)]);
    let ids = tok.encode("the cat sat", false).unwrap();
    assert!(ids.len() < "the cat sat".len(), "merges learned: {ids:?}");
    for s in ["the cat sat on the mat", "ünïcödé ✓ and bytes it never saw: 42"] {
        assert_eq!(tok.decode(&tok.encode(s, false).unwrap(), false).unwrap(), s);
    }
    let dir = tempfile::tempdir().unwrap();
    tok.save_pretrained(dir.path()).unwrap();
    let again = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(again.encode(&text, false).unwrap(), tok.encode(&text, false).unwrap());
    assert_eq!((again.bos_token.as_deref(), again.pad_token.as_deref()), (Some("<s>"), Some("<pad>")));
    let err = Tokenizer::train_byte_level_bpe(&[&text], 100).err().unwrap().to_string();
    assert!(err.contains("vocab_size 100 is below the 259"), "{err}");
}

#[test]
fn state_dict_round_trips_through_save_pretrained() {
    let model = load(&fixture("qwen2"), None);
    let dir = tempfile::tempdir().unwrap();
    eager_models::save::save_pretrained(model.module(), model.config(), dir.path(), Some(&fixture("qwen2")))
        .unwrap();
    let names_in = eager_models::weights::Weights::open(fixture("qwen2")).unwrap().shapes();
    let names_out = eager_models::weights::Weights::open(dir.path()).unwrap().shapes();
    assert_eq!(names_in, names_out, "the same Hugging Face names and shapes");
    let again = load(dir.path(), None);
    let prompt = ids_of(&refs("qwen2")["prompt_ids"]);
    // Within rounding (see the Phi-3 test): the same weights, read back.
    let err = rel_err(&prompt_logits(&again, &prompt), &prompt_logits(&model, &prompt));
    assert!(err <= 1e-6, "qwen2 saved and loaded back: {err}");
}

#[test]
fn sampling_is_seeded_and_stops_at_stop_tokens() {
    let model = load(&fixture("llama"), None);
    let lm = model.causal_lm().unwrap();
    let prompt = vec![ids_of(&refs("llama")["prompt_ids"])];
    let opts = GenerateOptions {
        max_new_tokens: 12,
        temperature: 1.5,
        top_k: Some(50),
        top_p: Some(0.9),
        seed: 7,
        ..Default::default()
    };
    let a = generate(lm, &prompt, &opts, None, |_, _| {}).unwrap();
    let b = generate(lm, &prompt, &opts, None, |_, _| {}).unwrap();
    assert_eq!(a, b, "one seed, one sample");
    let c = generate(lm, &prompt, &GenerateOptions { seed: 8, ..opts.clone() }, None, |_, _| {}).unwrap();
    assert_ne!(a, c, "another seed, another sample (12 tokens at temperature 1.5)");
    // Stopping at the third sampled token: it is the last one.
    let stop = a[0][2];
    let first = a[0].iter().position(|&t| t == stop).unwrap();
    let mut streamed = Vec::new();
    let d =
        generate(lm, &prompt, &GenerateOptions { stop_tokens: vec![stop], ..opts.clone() }, None, |_, t| {
            streamed.push(t)
        })
        .unwrap();
    assert_eq!(d[0], a[0][..=first].to_vec());
    assert_eq!(streamed, d[0], "every token streamed as it came");
    // top_k 1 is greedy.
    let greedy_ref = ids_of(&refs("llama")["greedy"]);
    let k1 = generate(
        lm,
        &prompt,
        &GenerateOptions { top_k: Some(1), top_p: None, max_new_tokens: 8, ..opts },
        None,
        |_, _| {},
    )
    .unwrap();
    assert_eq!(k1[0], greedy_ref);
}

fn load_err(dir: &Path) -> ModelError {
    match AutoModel::from_dir(dir, eager::default_device(), None) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn bad_checkpoints_give_clear_errors() {
    // A missing tensor.
    let dir = copy_fixture("llama");
    let file = dir.path().join("model.safetensors");
    let tensors: Vec<(String, Tensor)> = eager::io::load_safetensors(&file)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| n != "model.layers.1.mlp.up_proj.weight")
        .collect();
    eager::io::save_safetensors(&file, &tensors).unwrap();
    let e = load_err(dir.path());
    assert!(
        matches!(&e, ModelError::MissingTensor { name, .. } if name == "model.layers.1.mlp.up_proj.weight"),
        "{e}"
    );
    // A shape that disagrees with the config.
    let dir = copy_fixture("llama");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["intermediate_size"] = 48.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let e = load_err(dir.path());
    assert!(
        matches!(&e, ModelError::ShapeMismatch { expected, found, .. } if expected == &vec![48, 32] && found == &vec![64, 32]),
        "{e}"
    );
    // An unknown architecture.
    cfg["model_type"] = "mamba".into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let e = load_err(dir.path());
    assert!(matches!(&e, ModelError::Unsupported(m) if m.contains("mamba")), "{e}");
    // A rope type it does not implement.
    let dir = copy_fixture("qwen2");
    let path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["rope_parameters"]["rope_type"] = "yarn".into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let e = load_err(dir.path());
    assert!(e.to_string().contains("rope type `yarn` is not supported"), "{e}");
    // A truncated weights file.
    let dir = copy_fixture("gpt2");
    let file = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 1000]).unwrap();
    let e = load_err(dir.path());
    assert!(
        matches!(&e, ModelError::Weights { msg, .. } if msg.contains("not a complete safetensors file")),
        "{e}"
    );
    // No weights at all.
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(load_err(dir.path()), ModelError::Weights { .. }));
}
