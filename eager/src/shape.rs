//! Shapes, the NumPy broadcasting rule and the shape a reduction leaves.

use smallvec::SmallVec;

use crate::dtype::DType;

/// Dimensions of a tensor (inline up to rank 4, so keys and specs rarely allocate).
pub type Shape = SmallVec<[usize; 4]>;

/// Shape and dtype of a tensor: what an op's rule checks and what a cache key holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// Dims, outermost first.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
}

impl Spec {
    /// The spec of `shape` and `dtype`.
    pub fn new(shape: &[usize], dtype: DType) -> Spec {
        Spec { shape: shape.into(), dtype }
    }
    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Bytes the elements take.
    pub fn size_in_bytes(&self) -> usize {
        self.numel() * self.dtype.size_in_bytes()
    }
    /// Elements and bytes, or `None` when a dim, the element count or the byte size passes
    /// what XLA can size (`i64::MAX`): such a shape must never reach a compile or a transfer,
    /// where XLA throws (an abort, not an error). [`Spec::numel`] and
    /// [`Spec::size_in_bytes`] are exact for every spec that passed this.
    pub fn checked_size(&self) -> Option<(usize, usize)> {
        const MAX: usize = i64::MAX as usize;
        let n = self.shape.iter().try_fold(1usize, |n, &d| (d <= MAX).then(|| n.checked_mul(d)).flatten())?;
        let bytes = n.checked_mul(self.dtype.size_in_bytes())?;
        (bytes <= MAX).then_some((n, bytes))
    }
    /// The StableHLO type, e.g. `tensor<2x3xf32>` or `tensor<f32>` for a scalar.
    pub fn mlir(&self) -> String {
        let mut s = String::from("tensor<");
        for d in &self.shape {
            s.push_str(&d.to_string());
            s.push('x');
        }
        s.push_str(self.dtype.mlir());
        s.push('>');
        s
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape.as_slice())
    }
}

/// NumPy broadcasting of two shapes: align on the right, sizes equal or one of them 1.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let mut out = Shape::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        });
    }
    Some(out)
}

/// Whether `from` broadcasts to exactly `to`.
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len() && broadcast_shapes(from, to).is_some_and(|s| s.as_slice() == to)
}

/// Resolves a possibly negative dim against `rank` (`-1` is the last).
pub fn resolve_dim(dim: isize, rank: usize) -> Option<usize> {
    let d = if dim < 0 { dim + rank as isize } else { dim };
    (0..rank as isize).contains(&d).then_some(d as usize)
}

/// Shape after reducing `dims` (kept as size 1 with `keepdim`).
pub(crate) fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Shape {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &s)| match (dims.contains(&d), keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}
