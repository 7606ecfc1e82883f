//! Rotary position embeddings (RoPE, as Llama, Mistral and Qwen2 use them in transformers):
//! the frequencies of `rope_theta` with the `default`, `linear`, `llama3` and `longrope`
//! (Phi-3's) scalings, the
//! cos/sin tables for given positions (computed on the device, so a decode step with a
//! position tensor runs the same executables at every step), and their application.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How the inverse frequencies are rescaled for longer contexts (transformers' `rope_type`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// `rope_type: "default"`: `1 / theta^(2i/d)`.
    Default,
    /// `rope_type: "linear"`: positions divided by `factor` (the frequencies are).
    Linear {
        /// The divisor of the positions.
        factor: f64,
    },
    /// `rope_type: "llama3"`: low frequencies divided by `factor`, high ones kept, a smooth
    /// blend between (Llama 3.1's long-context scheme).
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` count as low.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` count as high.
        high_freq_factor: f64,
        /// The context length the model was trained on.
        original_max_position_embeddings: f64,
    },
    /// `rope_type: "longrope"` (once `su`; Phi-3's long-context checkpoints): each frequency
    /// divided by its own factor, the short ones while a call's largest position is inside
    /// the original context, the long ones past it (transformers picks per forward call), and
    /// cos and sin scaled by `attention_factor`.
    LongRope {
        /// Per frequency, the divisor inside the original context (`dim / 2` of them).
        short_factor: Vec<f64>,
        /// Per frequency, the divisor past it.
        long_factor: Vec<f64>,
        /// The context length the model was trained on.
        original_max_position_embeddings: usize,
        /// Multiplies cos and sin (`√(1 + ln(factor) / ln(original))` unless the config says).
        attention_factor: f64,
    },
}

/// LongRoPE's second set of frequencies, for calls past the original context.
#[derive(Debug, Clone)]
struct LongFrequencies {
    inv_freq: Vec<f32>,
    table: Option<(Tensor, Tensor)>,
    original: usize,
}

/// The rotary embedding of one attention layer's head dim: inverse frequencies `[dim / 2]`.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    /// `1 / theta^(2i/dim)` after scaling, f32 as transformers keeps them.
    pub inv_freq: Vec<f32>,
    /// The head dim.
    pub dim: usize,
    /// cos and sin `[positions, dim]` (f32) of every position, when made ([`Self::with_table`]).
    table: Option<(Tensor, Tensor)>,
    /// LongRoPE's frequencies past the original context.
    long: Option<LongFrequencies>,
    /// Multiplies cos and sin (LongRoPE's attention factor; 1 otherwise).
    scaling: f32,
}

/// Most positions [`RotaryEmbedding::with_table`] tabulates (4 MB of f32 at head dim 64).
pub const MAX_TABLE_POSITIONS: usize = 8192;

impl RotaryEmbedding {
    /// The inverse frequencies of a head dim `dim` (even) for base `theta`, scaled by `scaling`.
    pub fn new(dim: usize, theta: f64, scaling: &RopeScaling) -> Result<RotaryEmbedding> {
        if dim == 0 || !dim.is_multiple_of(2) || theta <= 0.0 || theta.is_nan() {
            let msg = format!("needs an even head dim and theta > 0, got dim {dim} and theta {theta}");
            return Err(Error::invalid("RotaryEmbedding", msg));
        }
        // As transformers: the exponent in f32 (`arange(0, dim, 2).float() / dim`), the power in f32.
        let base = theta as f32;
        let powers: Vec<f32> = (0..dim / 2).map(|i| base.powf((2 * i) as f32 / dim as f32)).collect();
        let mut inv: Vec<f32> = powers.iter().map(|p| 1.0 / p).collect();
        let (mut long, mut attention) = (None, 1.0f32);
        match scaling {
            RopeScaling::Default => {}
            RopeScaling::Linear { factor } => inv.iter_mut().for_each(|f| *f /= *factor as f32),
            RopeScaling::LongRope {
                short_factor,
                long_factor,
                original_max_position_embeddings,
                attention_factor,
            } => {
                if short_factor.len() != dim / 2 || long_factor.len() != dim / 2 {
                    let msg = format!(
                        "longrope needs {} short and long factors (head dim {dim} / 2), got {} and {}",
                        dim / 2,
                        short_factor.len(),
                        long_factor.len()
                    );
                    return Err(Error::invalid("RotaryEmbedding", msg));
                }
                // As transformers: `1 / (factor * base^(2i/d))`, the factors in f32.
                let scaled = |factors: &[f64]| -> Vec<f32> {
                    factors.iter().zip(&powers).map(|(f, p)| 1.0 / (*f as f32 * p)).collect()
                };
                inv = scaled(short_factor);
                long = Some(LongFrequencies {
                    inv_freq: scaled(long_factor),
                    table: None,
                    original: *original_max_position_embeddings,
                });
                attention = *attention_factor as f32;
            }
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                if low_freq_factor >= high_freq_factor {
                    let msg = format!(
                        "llama3 scaling needs low_freq_factor < high_freq_factor, got {low_freq_factor} and {high_freq_factor}"
                    );
                    return Err(Error::invalid("RotaryEmbedding", msg));
                }
                let old = original_max_position_embeddings;
                let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
                for f in inv.iter_mut() {
                    let wavelen = 2.0 * std::f64::consts::PI / *f as f64;
                    let scaled = if wavelen > low_wavelen { *f / factor as f32 } else { *f };
                    let medium = (high_wavelen..=low_wavelen).contains(&wavelen);
                    *f = if medium {
                        let smooth =
                            ((old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)) as f32;
                        (1.0 - smooth) * scaled / factor as f32 + smooth * scaled
                    } else {
                        scaled
                    };
                }
            }
        }
        Ok(RotaryEmbedding { inv_freq: inv, dim, table: None, long, scaling: attention })
    }

    /// The same embedding with cos and sin of positions `0..positions` computed once on
    /// `device` (as transformers' `cos_cached`): [`Self::cos_sin`] then looks rows up instead
    /// of computing them, so a compiled step holds no transcendental functions, which the CPU
    /// backend otherwise recomputes inside every fused consumer. The rows are those the
    /// computation gives (the same ops, once). Past [`MAX_TABLE_POSITIONS`] no table is made.
    pub fn with_table(mut self, positions: usize, device: crate::device::Device) -> Result<RotaryEmbedding> {
        if positions == 0 || positions > MAX_TABLE_POSITIONS {
            return Ok(self);
        }
        let all = Tensor::arange_on(0.0, positions as f64, 1.0, DType::I64, device)?;
        self.table = Some(self.computed(&self.inv_freq, &all, DType::F32)?);
        if let Some(long) = &self.long {
            let table = self.computed(&long.inv_freq, &all, DType::F32)?;
            self.long.as_mut().expect("just read").table = Some(table);
        }
        Ok(self)
    }

    /// The table (if made) whole on every device of `mesh`, for a model placed over it.
    pub fn replicate(mut self, mesh: &crate::mesh::Mesh) -> Result<RotaryEmbedding> {
        if let Some((cos, sin)) = self.table.take() {
            self.table = Some((cos.replicate(mesh)?, sin.replicate(mesh)?));
        }
        if let Some((cos, sin)) = self.long.as_mut().and_then(|l| l.table.take()) {
            self.long.as_mut().expect("just read").table = Some((cos.replicate(mesh)?, sin.replicate(mesh)?));
        }
        Ok(self)
    }

    /// cos and sin `[..., T, dim]` for integer `positions` `[..., T]` (each frequency twice,
    /// as transformers' `cat((freqs, freqs), -1)`), in `dtype`; the angles are computed in f32.
    pub fn cos_sin(&self, positions: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
        if !matches!(positions.dtype(), DType::I32 | DType::I64) {
            let msg = format!("positions must be integers, got {}", positions.spec());
            return Err(Error::dtype("RotaryEmbedding", msg));
        }
        let short = self.of(&self.inv_freq, self.table.as_ref(), positions, dtype)?;
        let Some(long) = &self.long else { return Ok(short) };
        // LongRoPE: the long frequencies for a call whose largest position is past the original
        // context (transformers' choice per forward call), decided on the device.
        let past = positions.flatten()?.max(&[0], false)?.ge_scalar(long.original as f64)?;
        let long = self.of(&long.inv_freq, long.table.as_ref(), positions, dtype)?;
        Ok((past.where_cond(&long.0, &short.0)?, past.where_cond(&long.1, &short.1)?))
    }

    /// cos and sin of `positions` for frequencies `inv`, from their table where there is one.
    fn of(
        &self,
        inv: &[f32],
        table: Option<&(Tensor, Tensor)>,
        positions: &Tensor,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        if let Some((cos, sin)) = table {
            if cos.device() == positions.device() {
                // Positions past the table fail the lookup's index check, a clear error.
                let mut shape: Vec<isize> = positions.shape().iter().map(|&d| d as isize).collect();
                shape.push(self.dim as isize);
                let rows = positions.reshape(&[-1])?;
                // A table placed over a mesh (a sharded model's) looks up positions made on one device.
                let rows = match cos.sharding() {
                    Some(s) if rows.sharding().is_none() => rows.replicate(s.mesh())?,
                    _ => rows,
                };
                let look = |t: &Tensor| t.index_select(0, &rows)?.reshape(&shape)?.to_dtype(dtype);
                return Ok((look(cos)?, look(sin)?));
            }
        }
        self.computed(inv, positions, dtype)
    }

    /// cos and sin of `positions` for frequencies `inv`, computed (f32, then `dtype`), scaled.
    fn computed(&self, inv: &[f32], positions: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
        let inv = Tensor::from_slice_on(inv, &[inv.len()], positions.device())?;
        let freqs = positions.to_dtype(DType::F32)?.unsqueeze(-1)?.mul(&inv)?;
        let emb = Tensor::cat(&[&freqs, &freqs], -1)?;
        let (mut cos, mut sin) = (emb.cos()?, emb.sin()?);
        if self.scaling != 1.0 {
            (cos, sin) = (cos.mul_scalar(self.scaling as f64)?, sin.mul_scalar(self.scaling as f64)?);
        }
        Ok((cos.to_dtype(dtype)?, sin.to_dtype(dtype)?))
    }
}

/// `[-x2, x1]` of `x = [x1, x2]` split in halves along the last dim.
pub fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let d = x.shape().last().copied().unwrap_or(0);
    if !d.is_multiple_of(2) || d == 0 {
        return Err(Error::shape("rotate_half", format!("needs an even last dim, got {}", x.spec())));
    }
    let (x1, x2) = (x.narrow(-1, 0, d / 2)?, x.narrow(-1, d / 2, d / 2)?);
    Tensor::cat(&[&x2.neg()?, &x1], -1)
}

/// `x cos + rotate_half(x) sin` for `x` `[B, heads, T, dim]` and cos/sin `[B, T, dim]` (or
/// `[T, dim]`), broadcast over heads (transformers' `apply_rotary_pos_emb`).
pub fn apply_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (cos, sin) =
        if cos.rank() == 3 { (cos.unsqueeze(1)?, sin.unsqueeze(1)?) } else { (cos.clone(), sin.clone()) };
    x.mul(&cos)?.add(&rotate_half(x)?.mul(&sin)?)
}
