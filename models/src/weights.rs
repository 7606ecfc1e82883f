//! The tensors of a checkpoint: `model.safetensors`, or the shards `model.safetensors.index.json`
//! maps names to. Files are memory-mapped and their headers read once; a tensor is read on
//! request straight from the mapping, checked against the shape the architecture expects,
//! cast on the host when asked for another dtype, and uploaded once: to one device, or (a
//! [`Placement`] over a mesh) each device's block to that device alone.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use eager::{DType, Device, Mesh, PartitionSpec, Tensor};
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype as SafeDtype, SafeTensors};

use crate::{io_error, ModelError, Result};

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    range: (usize, usize),
}

/// The mapped weights files of one checkpoint directory.
pub struct Weights {
    dir: PathBuf,
    files: Vec<(PathBuf, Mmap)>,
    entries: HashMap<String, Entry>,
}

impl Weights {
    /// Maps `model.safetensors`, or every shard the index names.
    pub fn open(dir: impl AsRef<Path>) -> Result<Weights> {
        let dir = dir.as_ref().to_path_buf();
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let names: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(io_error(&index))?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
                path: index.clone(),
                msg: format!("not valid JSON: {e}"),
            })?;
            let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| ModelError::Config {
                path: index.clone(),
                msg: "`weight_map` is missing".into(),
            })?;
            let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
            files.sort();
            files.dedup();
            files.into_iter().map(|f| dir.join(f)).collect()
        } else {
            let msg =
                "no model.safetensors or model.safetensors.index.json (only safetensors checkpoints load)";
            return Err(ModelError::Weights { path: dir, msg: msg.into() });
        };
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        for path in names {
            let file = std::fs::File::open(&path).map_err(io_error(&path))?;
            // SAFETY: the file is mapped read-only; a checkpoint changed on disk while a model
            // loads from it is outside what this reader promises (as for every mmap reader).
            let map = unsafe { Mmap::map(&file) }.map_err(io_error(&path))?;
            // deserialize checks the header and that every tensor's bytes are in the file.
            let st = SafeTensors::deserialize(&map).map_err(|e| ModelError::Weights {
                path: path.clone(),
                msg: format!("not a complete safetensors file: {e}"),
            })?;
            let base = map.as_ptr() as usize;
            for (name, view) in st.tensors() {
                let dtype = eager_dtype(view.dtype()).ok_or_else(|| {
                    ModelError::Unsupported(format!(
                        "{}: tensor `{name}` has dtype {}",
                        path.display(),
                        view.dtype()
                    ))
                })?;
                let start = view.data().as_ptr() as usize - base;
                let range = (start, start + view.data().len());
                entries.insert(name, Entry { file: files.len(), dtype, shape: view.shape().to_vec(), range });
            }
            files.push((path, map));
        }
        Ok(Weights { dir, files, entries })
    }

    /// Whether the checkpoint has a tensor named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Every tensor's name and shape, sorted by name.
    pub fn shapes(&self) -> BTreeMap<String, Vec<usize>> {
        self.entries.iter().map(|(n, e)| (n.clone(), e.shape.clone())).collect()
    }

    /// The stored dtype of the first floating-point tensor (what "load in its dtype" means).
    pub fn float_dtype(&self) -> Option<DType> {
        let mut names: Vec<&String> = self.entries.keys().collect();
        names.sort();
        names.into_iter().map(|n| self.entries[n].dtype).find(|d| d.is_float())
    }

    /// Tensor `name` of `shape`, in `dtype`, on `device`: an error names a missing tensor or
    /// a shape that differs from what the config implies.
    pub fn get(&self, name: &str, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        self.get_placed(name, shape, dtype, &Placement::Device(device), None)
    }

    /// Tensor `name` placed by `placement`, split along dim `split` when it is a mesh's.
    pub fn get_placed(
        &self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        placement: &Placement,
        split: Option<usize>,
    ) -> Result<Tensor> {
        let dtype = if self.entries.get(name).is_some_and(|e| !e.dtype.is_float()) {
            self.entries[name].dtype
        } else {
            dtype
        };
        placement.place(&self.bytes(name, shape, dtype)?, shape, dtype, split)
    }

    /// The bytes of tensor `name` (checked to be of `shape`) in `dtype` (cast on the host when
    /// stored in another float type; integer tensors keep theirs).
    pub fn bytes(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Cow<'_, [u8]>> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { dir: self.dir.clone(), name: name.to_string() })?;
        let (path, map) = &self.files[e.file];
        if e.shape != shape {
            return Err(ModelError::ShapeMismatch {
                path: path.clone(),
                name: name.to_string(),
                expected: shape.to_vec(),
                found: e.shape.clone(),
            });
        }
        let bytes = &map[e.range.0..e.range.1];
        Ok(if e.dtype == dtype || !e.dtype.is_float() {
            Cow::Borrowed(bytes)
        } else {
            Cow::Owned(cast(bytes, e.dtype, dtype)?)
        })
    }
}

/// Where loaded weights go: one device, or split over one axis of a mesh (each weight along
/// the dim its layer names; the rest whole on every device).
#[derive(Clone)]
pub enum Placement {
    /// Every weight on this device.
    Device(Device),
    /// Weights split over mesh axis `axis`.
    Mesh {
        /// The mesh.
        mesh: Mesh,
        /// The axis weights are split over.
        axis: String,
    },
}

impl Placement {
    /// The devices' count along the split axis (1 on one device).
    pub fn parts(&self) -> usize {
        match self {
            Placement::Device(_) => 1,
            Placement::Mesh { mesh, axis } => {
                mesh.axes().iter().find(|(a, _)| a == axis).map_or(1, |(_, n)| *n)
            }
        }
    }

    /// The spec that splits dim `split` of `shape` over the axis, or whole (a dim the axis does
    /// not divide stays whole).
    fn spec(&self, shape: &[usize], split: Option<usize>) -> PartitionSpec {
        let Placement::Mesh { axis, .. } = self else { return PartitionSpec::replicated() };
        match split {
            Some(d) if d < shape.len() && shape[d].is_multiple_of(self.parts()) => {
                let dims: Vec<Option<&str>> =
                    (0..shape.len()).map(|i| (i == d).then_some(axis.as_str())).collect();
                PartitionSpec::new(&dims)
            }
            _ => PartitionSpec::replicated(),
        }
    }

    /// Row-major `bytes` of `shape` and `dtype` uploaded: to the device, or each device's block
    /// of a split along dim `split` to that device alone.
    pub fn place(&self, bytes: &[u8], shape: &[usize], dtype: DType, split: Option<usize>) -> Result<Tensor> {
        Ok(match self {
            Placement::Device(d) => Tensor::from_bytes_on(bytes, shape, dtype, *d)?,
            Placement::Mesh { mesh, .. } => {
                Tensor::from_bytes_sharded(bytes, shape, dtype, mesh, &self.spec(shape, split))?
            }
        })
    }

    /// An already placed tensor split along dim `split` instead (weights cut from a fused one).
    pub fn resplit(&self, t: &Tensor, split: Option<usize>) -> Result<Tensor> {
        Ok(match self {
            Placement::Device(_) => t.clone(),
            Placement::Mesh { mesh, .. } => t.shard(mesh, &self.spec(t.shape(), split))?,
        })
    }

    /// The device small tables (rotary's) are made on before they are placed.
    pub fn first_device(&self) -> Device {
        match self {
            Placement::Device(d) => *d,
            Placement::Mesh { mesh, .. } => mesh.devices()[0],
        }
    }

    /// A tensor made on [`Placement::first_device`] made whole on every device of the mesh.
    pub fn whole(&self, t: Tensor) -> Result<Tensor> {
        Ok(match self {
            Placement::Device(_) => t,
            Placement::Mesh { mesh, .. } => t.replicate(mesh)?,
        })
    }
}

/// Floating-point bytes of `from` as `to` (little-endian), through f32 (exact for every pair
/// here but f64 → narrower, which rounds to nearest as torch's `.to()`).
fn cast(bytes: &[u8], from: DType, to: DType) -> Result<Vec<u8>> {
    let values: Vec<f32> = match from {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        DType::F16 => {
            bytes.chunks_exact(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        DType::F64 => {
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect()
        }
        other => return Err(ModelError::Unsupported(format!("casting {other} weights"))),
    };
    Ok(match to {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        DType::F64 => values.iter().flat_map(|v| (*v as f64).to_le_bytes()).collect(),
        other => return Err(ModelError::Unsupported(format!("loading weights as {other}"))),
    })
}

fn eager_dtype(dtype: SafeDtype) -> Option<DType> {
    Some(match dtype {
        SafeDtype::BOOL => DType::Bool,
        SafeDtype::U8 => DType::U8,
        SafeDtype::I32 => DType::I32,
        SafeDtype::I64 => DType::I64,
        SafeDtype::U32 => DType::U32,
        SafeDtype::U64 => DType::U64,
        SafeDtype::F16 => DType::F16,
        SafeDtype::BF16 => DType::BF16,
        SafeDtype::F32 => DType::F32,
        SafeDtype::F64 => DType::F64,
        _ => return None,
    })
}
