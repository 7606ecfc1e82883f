//! Saving a model as a Hugging Face directory that transformers loads: `config.json` (the
//! model's config with its dtype, in transformers 5's field names as well as 4's),
//! `model.safetensors` under Hugging Face's names, and the tokenizer files when given.

use std::collections::HashMap;
use std::path::Path;

use eager::nn::{state_dict, Module};
use eager::DType;

use crate::config::{dtype_name, Config};
use crate::{io_error, ModelError, Result};

/// Writes `config.json` and `model.safetensors` (every parameter, HF names) into `dir`, and
/// copies the tokenizer files of `tokenizer_dir` if given.
pub fn save_pretrained(
    model: &dyn Module,
    config: &Config,
    dir: impl AsRef<Path>,
    tokenizer_dir: Option<&Path>,
) -> Result<()> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let mut tensors = state_dict(model);
    if config.model_type == "phi3" {
        // Phi-3 runs on split projections; transformers reads them fused.
        tensors = crate::phi3::fuse_for_save(tensors)?;
    }
    if config.num_experts > 0 {
        // The experts run stacked; transformers reads one tensor per expert.
        tensors = crate::moe::split_for_save(tensors, &config.moe_names)?;
    }
    let dtype = tensors.iter().map(|(_, t)| t.dtype()).find(|d| d.is_float()).unwrap_or(DType::F32);
    let mut raw = config.raw.clone();
    if let Some(obj) = raw.as_object_mut() {
        obj.insert("dtype".into(), dtype_name(dtype).into());
        obj.insert("torch_dtype".into(), dtype_name(dtype).into());
    }
    let path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&raw).unwrap_or_default();
    std::fs::write(&path, text).map_err(io_error(&path))?;
    write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    if let Some(src) = tokenizer_dir {
        for name in [
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "chat_template.jinja",
            "generation_config.json",
        ] {
            let from = src.join(name);
            if from.exists() {
                std::fs::copy(&from, dir.join(name)).map_err(io_error(&from))?;
            }
        }
    }
    Ok(())
}

/// A safetensors file with the `{"format": "pt"}` metadata transformers looks for.
fn write_safetensors(path: &Path, tensors: &[(String, eager::Tensor)]) -> Result<()> {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, t)| t.to_bytes()).collect::<eager::Result<_>>()?;
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, t), data)| {
            let view = safetensors::tensor::TensorView::new(safe_dtype(t.dtype()), t.shape().to_vec(), data)
                .map_err(|e| ModelError::Weights {
                    path: path.into(),
                    msg: format!("tensor `{name}`: {e}"),
                })?;
            Ok((name.as_str(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path)
        .map_err(|e| ModelError::Weights { path: path.into(), msg: format!("cannot write: {e}") })
}

fn safe_dtype(dtype: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match dtype {
        DType::Bool => S::BOOL,
        DType::U8 => S::U8,
        DType::I32 => S::I32,
        DType::I64 => S::I64,
        DType::U32 => S::U32,
        DType::U64 => S::U64,
        DType::F16 => S::F16,
        DType::BF16 => S::BF16,
        DType::F32 => S::F32,
        DType::F64 => S::F64,
    }
}
