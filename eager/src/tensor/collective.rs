//! Collectives over a mesh axis, in the global view: a dim split over axis `a` of size `n`
//! is the concatenation of `n` blocks, block `i` on the devices at coordinate `i` of `a`
//! (what each device holds in JAX's `shard_map`). Each collective is written with ordinary
//! ops on that view (so it has gradients, runs eagerly and inside `eager::compile`), and the
//! result is split as the collective leaves it; XLA's partitioner turns the data movement
//! into the collective itself (`all-reduce`, `all-gather`, `all-to-all`,
//! `collective-permute`), which the profiler lists per program. Inside `eager::compile` a
//! traced value's split is the one its ops' rules give it, and the result's split becomes a
//! sharding constraint of the program, so the same collective lands in the one program.

use crate::error::{Error, Result};
use crate::mesh::{PartitionSpec, Sharding};
use crate::ops::Operand;

use super::Tensor;

/// How [`Tensor::all_reduce`] combines the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The sum of the blocks.
    Sum,
    /// Their mean.
    Mean,
    /// Their elementwise maximum.
    Max,
}

impl Tensor {
    /// The sharding, and the dim split over exactly mesh axis `axis` with its size; an error
    /// naming `op` otherwise.
    fn split_over(&self, op: &'static str, axis: &str) -> Result<(Sharding, usize, usize)> {
        let s = self.sharding().cloned().ok_or_else(|| {
            Error::invalid(
                op,
                format!("{} is on one device: collectives need a tensor split over a mesh", self.spec()),
            )
        })?;
        let d = (0..self.rank()).find(|&d| s.spec().axes_of(d) == [axis.to_string()]).ok_or_else(|| {
            Error::invalid(
                op,
                format!("no dim of {} is split over mesh axis {axis:?} alone ({s})", self.spec()),
            )
        })?;
        let n = s.parts(d);
        Ok((s, d, n))
    }

    /// Per dim the axes of `s`, with `axis` taken off dim `from` and (if `to`) put on `to`.
    fn moved(s: &Sharding, from: usize, to: Option<usize>, axis: &str, rank: usize) -> PartitionSpec {
        let dims: Vec<Vec<&str>> = (0..rank)
            .map(|d| {
                let mut axes: Vec<&str> = s.spec().axes_of(d).iter().map(String::as_str).collect();
                if d == from {
                    axes.retain(|a| *a != axis);
                }
                if Some(d) == to {
                    axes.push(axis);
                }
                axes
            })
            .collect();
        let refs: Vec<&[&str]> = dims.iter().map(Vec::as_slice).collect();
        PartitionSpec::with_axes(&refs)
    }

    /// The blocks along the split dim `d` as a new dim: `[.., n, size / n, ..]`.
    fn blocks(&self, d: usize, n: usize) -> Result<Tensor> {
        let mut shape: Vec<isize> = self.shape().iter().map(|&s| s as isize).collect();
        shape[d] /= n as isize;
        shape.insert(d, n as isize);
        self.reshape(&shape)
    }

    /// The blocks along mesh axis `axis` combined (`psum`, `pmean`, `pmax`): the result has
    /// a block's shape and is whole along `axis` (every device holds the combination).
    pub fn all_reduce(&self, axis: &str, how: Reduction) -> Result<Tensor> {
        let (s, d, n) = self.split_over("all_reduce", axis)?;
        let blocks = self.blocks(d, n)?;
        let dim = [d as isize];
        let combined = match how {
            Reduction::Sum => blocks.sum(&dim, false)?,
            Reduction::Mean => blocks.mean(&dim, false)?,
            Reduction::Max => blocks.max(&dim, false)?,
        };
        combined.shard(s.mesh(), &Tensor::moved(&s, d, None, axis, self.rank()))
    }

    /// The blocks along `axis` put together (`all_gather`): the same values, whole along
    /// `axis` on every device.
    pub fn all_gather(&self, axis: &str) -> Result<Tensor> {
        let (s, d, _) = self.split_over("all_gather", axis)?;
        self.shard(s.mesh(), &Tensor::moved(&s, d, None, axis, self.rank()))
    }

    /// The blocks along `axis` summed, the sum then split over `axis` along `dim`
    /// (`psum_scatter`): each device holds its part of the sum.
    pub fn reduce_scatter(&self, axis: &str, dim: isize) -> Result<Tensor> {
        let summed = self.all_reduce(axis, Reduction::Sum)?;
        let to = summed.dim("reduce_scatter", dim)?;
        let s = summed.sharding().cloned().expect("all_reduce keeps the mesh");
        if !s.spec().axes_of(to).is_empty() {
            let msg = format!("dim {to} of the sum is split already ({s})");
            return Err(Error::invalid("reduce_scatter", msg));
        }
        summed.shard(s.mesh(), &Tensor::moved(&s, usize::MAX, Some(to), axis, summed.rank()))
    }

    /// The split over `axis` moved from dim `from` to dim `to` (`all_to_all`, with
    /// `concat_axis = from` and `split_axis = to`): the same values, each device now holding
    /// its part along `to`.
    pub fn all_to_all(&self, axis: &str, from: isize, to: isize) -> Result<Tensor> {
        let (s, d, _) = self.split_over("all_to_all", axis)?;
        let from = self.dim("all_to_all", from)?;
        let to = self.dim("all_to_all", to)?;
        if from != d || to == d || !s.spec().axes_of(to).is_empty() {
            let msg = format!(
                "moves the split over {axis:?} from dim {d} to an unsplit dim; got dims {from} -> {to}"
            );
            return Err(Error::invalid("all_to_all", msg));
        }
        self.shard(s.mesh(), &Tensor::moved(&s, d, Some(to), axis, self.rank()))
    }

    /// Block `src` along `axis` sent to position `dst`, for each `(src, dst)` of `pairs`
    /// (`ppermute`): positions no pair sends to get zeros. The split stays.
    pub fn ppermute(&self, axis: &str, pairs: &[(usize, usize)]) -> Result<Tensor> {
        let (s, d, n) = self.split_over("ppermute", axis)?;
        let mut source = vec![None; n];
        for &(src, dst) in pairs {
            if src >= n || dst >= n || source[dst].is_some() {
                let msg =
                    format!("pairs {pairs:?} must name positions 0..{n} of {axis:?}, each destination once");
                return Err(Error::invalid("ppermute", msg));
            }
            source[dst] = Some(src as i64);
        }
        let blocks = self.blocks(d, n)?;
        let order: Vec<i64> = source.iter().map(|s| s.unwrap_or(0)).collect();
        let index = Tensor::from_slice(&order, &[n])?.replicate(s.mesh())?;
        let moved = blocks.index_select(d as isize, &index)?;
        // Positions nothing is sent to hold zeros.
        let mut keep_shape = vec![1usize; blocks.rank()];
        keep_shape[d] = n;
        let keep: Vec<f64> = source.iter().map(|s| if s.is_some() { 1.0 } else { 0.0 }).collect();
        let keep = Tensor::from_vec(keep)?
            .reshape(&keep_shape.iter().map(|&k| k as isize).collect::<Vec<_>>())?
            .to_dtype(self.dtype())?
            .replicate(s.mesh())?;
        let zeros_elsewhere = moved.mul(&keep)?;
        let whole: Vec<isize> = self.shape().iter().map(|&k| k as isize).collect();
        zeros_elsewhere.reshape(&whole)?.shard(s.mesh(), s.spec())
    }
}
