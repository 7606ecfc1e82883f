//! Indexing: rows picked by an integer index tensor (negative indices count from the end),
//! and the check of indices computed on the device, read lazily by the runtime.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Spec;

use super::create::CreateOps;
use super::elementwise::ElementwiseOps;
use super::emit::{i64_array, list, Emitter, Value};
use super::matmul::MatmulOps;
use super::movement::MovementOps;
use super::GradReads;
use super::{check_arity, Accepts, Checks, Dims, Grads, Op, OpDef, Operand};

/// Rows of input 0 along `dim` picked by the 1-D integer input 1; negative indices count from
/// the end. With `check`, the module also returns a check of the indices (`IndexCheck`: for
/// indices computed on the device; those from the host are checked before dispatch).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexSelect {
    /// The dim indexed.
    pub dim: usize,
    /// Whether the module also returns a check of the indices.
    pub check: bool,
}

/// What the check result of an op on indices computed on the device is about (`i64[2]`: the
/// position of the first index out of range, or -1, and that index). The runtime reads it
/// lazily, when a result that depends on the op is read, and reports a bad index as the op's
/// failure.
#[derive(Debug, Clone)]
pub(crate) struct IndexCheck {
    pub dim: usize,
    pub size: usize,
    /// The op inside a program that checks (`None`: the dispatched op itself).
    pub op: Option<String>,
}

impl IndexCheck {
    /// The check of an op indexing `dim` of `input`, if it checks on the device.
    fn of(check: bool, dim: usize, input: &Spec) -> Option<IndexCheck> {
        check.then(|| IndexCheck { dim, size: input.shape[dim], op: None })
    }

    /// The attributes of an indexing op, as the profiler prints them: `dim=0 checked`.
    fn attrs(dim: usize, check: bool) -> String {
        format!("dim={dim}{}", if check { " checked" } else { "" })
    }

    /// The failure for a bad `index` (the same words as the check of host indices).
    pub(crate) fn message(&self, index: i64) -> String {
        format!("index {index} is out of range for dim {} of size {}", self.dim, self.size)
    }
}

impl OpDef for IndexSelect {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[1])
    }
    fn name(&self) -> &'static str {
        "index_select"
    }
    fn attrs(&self) -> String {
        IndexCheck::attrs(self.dim, self.check)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let (name, dim) = (self.name(), self.dim);
        check_arity(name, inputs, 2)?;
        let (x, idx) = (&inputs[0], &inputs[1]);
        if dim >= x.rank() {
            return Err(Error::invalid(name, format!("dim {dim} out of range for rank {}", x.rank())));
        }
        if !matches!(idx.dtype, DType::I32 | DType::I64) || idx.rank() != 1 {
            return Err(Error::dtype(name, format!("indices must be a 1-D i32 or i64 tensor, got {idx}")));
        }
        if x.shape[dim] == 0 && idx.shape[0] > 0 {
            return Err(Error::shape(name, "cannot select from an empty dim"));
        }
        let mut shape = x.shape.clone();
        shape[dim] = idx.shape[0];
        Ok(Spec { shape, dtype: x.dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let dim = self.dim;
        let (src, idx) = (&x[0], &x[1]);
        let n = idx.spec.shape[0];
        // Negative indices count from the end: idx < 0 ? idx + size : idx.
        let zero = e.constant(&idx.spec, 0.0);
        let size = e.constant(&idx.spec, src.spec.shape[dim] as f64);
        let negative = e.compare("LT", idx, &zero);
        let shifted = e.op("stablehlo.add", &[idx, &size], "", &idx.spec);
        let wrapped = e.op("stablehlo.select", &[&negative, &shifted, idx], "", &idx.spec);
        if self.check {
            let flag = emit_index_check(e, &wrapped, idx, &size);
            e.extra.push(flag);
        }
        let idx2 = e.op("stablehlo.reshape", &[&wrapped], "", &Spec::new(&[n, 1], idx.spec.dtype));
        let offset: Vec<usize> = (0..src.spec.rank()).filter(|&d| d != dim).collect();
        let mut sizes: Dims = src.spec.shape.clone().into_iter().collect();
        sizes[dim] = 1;
        let attr = format!(
            "dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{dim}], start_index_map = [{dim}], index_vector_dim = 1>, slice_sizes = {}, indices_are_sorted = false",
            list(offset),
            i64_array(&sizes)
        );
        e.op("stablehlo.gather", &[src, &idx2], &attr, out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // Scatter-add, composed: move `dim` first, multiply by the one-hot of the indices
        // (transposed), move it back.
        let dim = self.dim;
        let (src, idx) = (x[0], x[1]);
        let n = src.shape_of()[dim];
        let rank = src.rank_of();
        // The forward wrapped negative indices; so does the one-hot.
        let wrapped;
        let idx = match idx.host_bounds() {
            Some((lo, _)) if lo >= 0 => idx,
            _ => {
                wrapped = idx.lt_scalar(0.0)?.where_cond(&idx.add_scalar(n as f64)?, idx)?;
                &wrapped
            }
        };
        let mut perm: Vec<isize> = vec![dim as isize];
        perm.extend((0..rank as isize).filter(|&d| d != dim as isize));
        let gp = g.permute(&perm)?;
        let k = gp.shape_of()[0];
        let rest: Vec<usize> = gp.shape_of()[1..].to_vec();
        let g2 = gp.reshape(&[k as isize, -1])?;
        let positions = idx.arange_at(0.0, n as f64, 1.0, idx.dtype_of())?;
        let onehot = idx.unsqueeze(1)?.eq(&positions.unsqueeze(0)?)?.to_dtype(g.dtype_of())?;
        let scattered = onehot.matmul_transposed(&g2, true, false)?;
        let mut full: Vec<isize> = vec![n as isize];
        full.extend(rest.iter().map(|&r| r as isize));
        let mut inverse = vec![0isize; rank];
        for (i, &d) in perm.iter().enumerate() {
            inverse[d as usize] = i as isize;
        }
        Ok(smallvec::smallvec![Some(scattered.reshape(&full)?.permute(&inverse)?), None])
    }
    fn index_checks(&self, inputs: &[Spec]) -> Checks {
        IndexCheck::of(self.check, self.dim, &inputs[0]).into_iter().collect()
    }
}

/// Elements of input 0 picked along `dim` by the integer input 1 of the same rank (torch's
/// `gather`): `out[i][j] = x[idx[i][j]][j]` for `dim` 0. Negative indices count from the end;
/// `check` as for [`IndexSelect`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gather {
    /// The dim indexed.
    pub dim: usize,
    /// Whether the module also returns a check of the indices.
    pub check: bool,
}

/// Input 0 with input 2's elements added at the places input 1 names along `dim` (torch's
/// `scatter_add`): `out[idx[i][j]][j] += src[i][j]` for `dim` 0; repeated indices add up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScatterAdd {
    /// The dim indexed.
    pub dim: usize,
    /// Whether the module also returns a check of the indices.
    pub check: bool,
}

/// The shape rule of an index tensor used along `dim` of `x` (same rank, i32 or i64, no larger
/// than `x` in the other dims; `limit` bounds it in every dim, for scatter's source).
fn check_index(op: &'static str, dim: usize, x: &Spec, idx: &Spec, limit: Option<&Spec>) -> Result<()> {
    if !matches!(idx.dtype, DType::I32 | DType::I64) {
        return Err(Error::dtype(op, format!("indices must be i32 or i64, got {idx}")));
    }
    if x.rank() == 0 || idx.rank() != x.rank() {
        return Err(Error::shape(
            op,
            format!("indices {idx} must have the rank of the input {x} (at least 1)"),
        ));
    }
    if dim >= x.rank() {
        return Err(Error::invalid(op, format!("dim {dim} out of range for {x}")));
    }
    let too_big = (0..x.rank()).find(|&d| {
        (d != dim && idx.shape[d] > x.shape[d]) || limit.is_some_and(|l| idx.shape[d] > l.shape[d])
    });
    if let Some(d) = too_big {
        let what = limit.map_or(format!("the input {x}"), |l| {
            format!("the input {x} (outside dim {dim}) and the source {l}")
        });
        return Err(Error::shape(op, format!("indices {idx} are larger than {what} in dim {d}")));
    }
    if x.shape[dim] == 0 && idx.numel() > 0 {
        return Err(Error::shape(op, format!("cannot index dim {dim} of {x}: it is empty")));
    }
    Ok(())
}

/// Wraps negative indices (`idx < 0 ? idx + size : idx`), adds the check of the op's module
/// when asked, and gives the full coordinates `[*idx.shape, rank]` (i64) of every element: the
/// index along `dim`, the element's own position along the others.
fn coordinates(e: &mut Emitter, idx: &Value, dim: usize, size: usize, check: bool) -> Value {
    let zero = e.constant(&idx.spec, 0.0);
    let size_v = e.constant(&idx.spec, size as f64);
    let negative = e.compare("LT", idx, &zero);
    let shifted = e.op("stablehlo.add", &[idx, &size_v], "", &idx.spec);
    let wrapped = e.op("stablehlo.select", &[&negative, &shifted, idx], "", &idx.spec);
    if check {
        let flat = Spec::new(&[idx.spec.numel()], idx.spec.dtype);
        let (w, raw) =
            (e.op("stablehlo.reshape", &[&wrapped], "", &flat), e.op("stablehlo.reshape", &[idx], "", &flat));
        let size_flat = e.constant(&flat, size as f64);
        let flag = emit_index_check(e, &w, &raw, &size_flat);
        e.extra.push(flag);
    }
    let rank = idx.spec.rank();
    let mut one_col: Dims = idx.spec.shape.iter().copied().collect();
    one_col.push(1);
    let col = Spec { shape: one_col.iter().copied().collect(), dtype: DType::I64 };
    let wide = Spec { shape: idx.spec.shape.clone(), dtype: DType::I64 };
    let cols: Vec<Value> = (0..rank)
        .map(|d| {
            let v = if d == dim {
                match idx.spec.dtype {
                    DType::I64 => wrapped.clone(),
                    _ => e.op("stablehlo.convert", &[&wrapped], "", &wide),
                }
            } else {
                e.op("stablehlo.iota", &[], &format!("iota_dimension = {d} : i64"), &wide)
            };
            e.op("stablehlo.reshape", &[&v], "", &col)
        })
        .collect();
    let refs: Vec<&Value> = cols.iter().collect();
    let mut full = col.clone();
    full.shape[rank] = rank;
    e.op("stablehlo.concatenate", &refs, &format!("dimension = {rank} : i64"), &full)
}

/// With `check`, the result of a check that found nothing (for an op with no indices to check).
fn passed_check(e: &mut Emitter, check: bool) {
    if check {
        let flag = e.op(
            "stablehlo.constant",
            &[],
            "value = dense<[-1, 0]> : tensor<2xi64>",
            &Spec::new(&[2], DType::I64),
        );
        e.extra.push(flag);
    }
}

impl OpDef for Gather {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[1])
    }
    fn name(&self) -> &'static str {
        "gather"
    }
    fn attrs(&self) -> String {
        IndexCheck::attrs(self.dim, self.check)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 2)?;
        check_index(self.name(), self.dim, &inputs[0], &inputs[1], None)?;
        Ok(Spec { shape: inputs[1].shape.clone(), dtype: inputs[0].dtype })
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let (src, idx) = (&x[0], &x[1]);
        let rank = src.spec.rank();
        if out.numel() == 0 || src.spec.numel() == 0 {
            // Nothing to pick (and a gather of an empty dim is malformed): the empty result.
            passed_check(e, self.check);
            let zero = e.constant(&Spec::new(&[], out.dtype), 0.0);
            return e.broadcast(&zero, &out.shape);
        }
        let full = coordinates(e, idx, self.dim, src.spec.shape[self.dim], self.check);
        let all = list(0..rank);
        let attr = format!(
            "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [{all}], start_index_map = [{all}], index_vector_dim = {rank}>, slice_sizes = {}, indices_are_sorted = false",
            i64_array(&vec![1; rank])
        );
        e.op("stablehlo.gather", &[src, &full], &attr, out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // Every picked element gets its output's gradient; repeated picks add up.
        let scatter = Op::ScatterAdd(ScatterAdd { dim: self.dim, check: false });
        Ok(smallvec::smallvec![Some(T::apply(scatter, &[&x[0].zeros_like()?, x[1], g], None)?), None])
    }
    fn index_checks(&self, inputs: &[Spec]) -> Checks {
        IndexCheck::of(self.check, self.dim, &inputs[0]).into_iter().collect()
    }
}

impl OpDef for ScatterAdd {
    fn grad_reads(&self) -> GradReads {
        GradReads::inputs(&[1])
    }
    fn name(&self) -> &'static str {
        "scatter_add"
    }
    fn attrs(&self) -> String {
        IndexCheck::attrs(self.dim, self.check)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 3)?;
        let (x, idx, src) = (&inputs[0], &inputs[1], &inputs[2]);
        Accepts::Numeric.check(name, x.dtype)?;
        super::same_dtype(name, x, src)?;
        if src.rank() != x.rank() {
            return Err(Error::shape(name, format!("the source {src} must have the rank of the input {x}")));
        }
        check_index(name, self.dim, x, idx, Some(src))?;
        Ok(x.clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let (dst, idx, src) = (&x[0], &x[1], &x[2]);
        let rank = dst.spec.rank();
        if idx.spec.numel() == 0 || dst.spec.numel() == 0 {
            passed_check(e, self.check);
            return dst.clone(); // nothing to add
        }
        let full = coordinates(e, idx, self.dim, dst.spec.shape[self.dim], self.check);
        // Only the part of the source the indices cover takes part (as torch).
        let updates = if src.spec.shape == idx.spec.shape {
            src.clone()
        } else {
            let spec = Spec { shape: idx.spec.shape.clone(), dtype: src.spec.dtype };
            let attr = super::movement::slice_attr(&vec![0; rank], &idx.spec.shape, &vec![1; rank]);
            e.op("stablehlo.slice", &[src], &attr, &spec)
        };
        let all = list(0..rank);
        let attrs = format!(
            "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [{all}], scatter_dims_to_operand_dims = [{all}], index_vector_dim = {rank}>, indices_are_sorted = false, unique_indices = false"
        );
        e.with_combine("stablehlo.scatter", &[dst, &full, &updates], "stablehlo.add", &attrs, out)
    }
    fn backward<T: Operand>(&self, x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        // The input passes through; each used source element gets the gradient where it landed.
        let (idx, src) = (x[1], x[2]);
        let picked = T::apply(Op::Gather(Gather { dim: self.dim, check: false }), &[g, idx], None)?;
        let src_grad = if picked.shape_of() == src.shape_of() {
            picked
        } else {
            // Source elements the indices do not cover get zero.
            let rank = src.rank_of();
            let high: Dims = (0..rank).map(|d| src.shape_of()[d] - idx.shape_of()[d]).collect();
            let pad = super::movement::Pad {
                low: smallvec::smallvec![0; rank],
                high,
                interior: smallvec::smallvec![0; rank],
            };
            T::apply(Op::Pad(pad), &[&picked], None)?
        };
        Ok(smallvec::smallvec![Some(g.clone()), None, Some(src_grad)])
    }
    fn index_checks(&self, inputs: &[Spec]) -> Checks {
        IndexCheck::of(self.check, self.dim, &inputs[0]).into_iter().collect()
    }
}

/// The [`IndexCheck`] result, `i64[2]`: the position of the first of the `wrapped` indices
/// outside `[0, size)`, or -1, and that index as given (`raw`).
fn emit_index_check(e: &mut Emitter, wrapped: &Value, raw: &Value, size: &Value) -> Value {
    let k = raw.spec.shape[0];
    let zero = e.constant(&wrapped.spec, 0.0);
    let below = e.compare("LT", wrapped, &zero);
    let above = e.compare("GE", wrapped, size);
    let bad = e.op("stablehlo.or", &[&below, &above], "", &below.spec);
    let ks = Spec::new(&[k], DType::I64);
    let iota = e.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &ks);
    let none = e.constant(&ks, k as f64);
    let keys = e.op("stablehlo.select", &[&bad, &iota, &none], "", &ks);
    let values = match raw.spec.dtype {
        DType::I64 => raw.clone(),
        _ => e.op("stablehlo.convert", &[raw], "", &ks),
    };
    // The smallest key (position) and its index, as one reduce of the pairs.
    let s = Spec::new(&[], DType::I64);
    let (init_k, init_v) = (e.constant(&s, k as f64), e.constant(&s, 0.0));
    let name = e.fresh();
    let (ak, av, bk, bv) = (e.fresh(), e.fresh(), e.fresh(), e.fresh());
    let t = s.mlir();
    let _ = writeln!(
        e.body,
        concat!(
            "    {name}:2 = \"stablehlo.reduce\"({}, {}, {}, {}) ({{\n",
            "    ^bb0({ak}: {t}, {av}: {t}, {bk}: {t}, {bv}: {t}):"
        ),
        keys.name,
        values.name,
        init_k.name,
        init_v.name,
        name = name,
        ak = ak,
        av = av,
        bk = bk,
        bv = bv,
        t = t,
    );
    let v = |n: &str| Value { name: n.to_string(), spec: s.clone() };
    let first = e.compare("LE", &v(&ak), &v(&bk));
    let rk = e.op("stablehlo.select", &[&first, &v(&ak), &v(&bk)], "", &s);
    let rv = e.op("stablehlo.select", &[&first, &v(&av), &v(&bv)], "", &s);
    let _ = write!(
        e.body,
        concat!(
            "      \"stablehlo.return\"({}, {}) : ({t}, {t}) -> ()\n",
            "    }}) {{dimensions = array<i64: 0>}} : ({kt}, {kt}, {t}, {t}) -> ({t}, {t})\n"
        ),
        rk.name,
        rv.name,
        kt = ks.mlir(),
        t = t,
    );
    let (pos, index) = (v(&format!("{name}#0")), v(&format!("{name}#1")));
    let found = e.compare("LT", &pos, &init_k);
    let minus_one = e.constant(&s, -1.0);
    let pos = e.op("stablehlo.select", &[&found, &pos, &minus_one], "", &s);
    let one = Spec::new(&[1], DType::I64);
    let pos = e.op("stablehlo.reshape", &[&pos], "", &one);
    let index = e.op("stablehlo.reshape", &[&index], "", &one);
    e.op("stablehlo.concatenate", &[&pos, &index], "dimension = 0 : i64", &Spec::new(&[2], DType::I64))
}

/// Whether indices must be checked on the device: an error now for host indices out of
/// `-size..size`, else `true` unless traced (traced indices have no values yet).
fn device_check<T: Operand>(op: &'static str, x: &T, dim: usize, indices: &T) -> Result<bool> {
    let size = x.shape_of()[dim];
    match indices.host_bounds() {
        Some((lo, hi)) => {
            let bad = if hi >= size as i64 { hi } else { lo };
            if lo <= hi && (lo < -(size as i64) || hi >= size as i64) {
                return Err(Error::invalid(op, IndexCheck { dim, size, op: None }.message(bad)));
            }
            Ok(false)
        }
        None => Ok(!indices.is_traced() && !x.is_traced()),
    }
}

/// The indexing ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait IndexOps: Operand {
    fn gather(&self, dim: isize, indices: &Self) -> Result<Self> {
        let d = self.dim("gather", dim)?;
        // The shape rule first: a bound check needs the dim to exist.
        Gather { dim: d, check: false }.infer(&[self.spec().clone(), indices.spec().clone()])?;
        let check = device_check("gather", self, d, indices)?;
        Self::apply(Op::Gather(Gather { dim: d, check }), &[self, indices], None)
    }

    fn scatter_add(&self, dim: isize, indices: &Self, src: &Self) -> Result<Self> {
        let d = self.dim("scatter_add", dim)?;
        let specs = [self.spec().clone(), indices.spec().clone(), src.spec().clone()];
        ScatterAdd { dim: d, check: false }.infer(&specs)?;
        let check = device_check("scatter_add", self, d, indices)?;
        Self::apply(Op::ScatterAdd(ScatterAdd { dim: d, check }), &[self, indices, src], None)
    }

    /// `gather` after broadcasting `self` and `indices` against each other in every dim but
    /// `dim` (torch's `take_along_dim`, NumPy's `take_along_axis`).
    fn take_along_dim(&self, indices: &Self, dim: isize) -> Result<Self> {
        let d = self.dim("take_along_dim", dim)?;
        let (xs, is) = (self.shape_of(), indices.shape_of());
        let mismatch = || {
            let msg = format!(
                "{} and indices {} must have the same rank and broadcast in every dim but {d}",
                self.spec(),
                indices.spec()
            );
            Error::shape("take_along_dim", msg)
        };
        if xs.len() != is.len() {
            return Err(mismatch());
        }
        let mut x_shape = xs.to_vec();
        let mut i_shape = is.to_vec();
        for k in (0..xs.len()).filter(|&k| k != d) {
            let size = match (xs[k], is[k]) {
                (a, b) if a == b || b == 1 => a,
                (1, b) => b,
                _ => return Err(mismatch()),
            };
            (x_shape[k], i_shape[k]) = (size, size);
        }
        device_check("take_along_dim", self, d, indices)?; // host indices fail here, naming this op
        let bounds = indices.host_bounds();
        self.broadcast_to(&x_shape)?.gather(dim, &indices.broadcast_to(&i_shape)?.with_host_bounds(bounds))
    }

    /// `self` with the slices of `source` added at the positions a 1-D `index` names along
    /// `dim` (torch's `index_add`): `out[index[i]] += source[i]` for `dim` 0, repeated indices
    /// adding up. A `scatter_add` of `source` with `index` broadcast to its shape.
    fn index_add(&self, dim: isize, index: &Self, source: &Self) -> Result<Self> {
        let d = self.dim("index_add", dim)?;
        let (xs, ss) = (self.shape_of(), source.shape_of());
        let fits = index.rank_of() == 1
            && ss.len() == xs.len()
            && ss[d] == index.shape_of()[0]
            && (0..xs.len()).all(|k| k == d || xs[k] == ss[k]);
        if !fits {
            let msg = format!(
                "needs a 1-D index and a source shaped as {} except along dim {d} (of the index's \
                 length), got index {} and source {}",
                self.spec(),
                index.spec(),
                source.spec()
            );
            return Err(Error::shape("index_add", msg));
        }
        if !matches!(index.dtype_of(), DType::I32 | DType::I64) {
            return Err(Error::dtype("index_add", format!("index must be i32 or i64, got {}", index.spec())));
        }
        device_check("index_add", self, d, index)?; // host indices fail here, naming this op
        let mut column = vec![1isize; xs.len()];
        column[d] = -1;
        let spread = index.reshape(&column)?.broadcast_to(ss)?.with_host_bounds(index.host_bounds());
        self.scatter_add(dim, &spread, source)
    }

    /// Indices from the host (with known bounds) are checked here, at once; others on the
    /// device, reported by the next read of a result that depends on this one.
    fn index_select(&self, dim: isize, indices: &Self) -> Result<Self> {
        let d = self.dim("index_select", dim)?;
        let check = device_check("index_select", self, d, indices)?;
        Self::apply(Op::IndexSelect(IndexSelect { dim: d, check }), &[self, indices], None)
    }
}

impl<T: Operand> IndexOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn index_select_wraps_negative_indices_then_gathers() {
        let m = module(IndexSelect { dim: 0, check: false }, &[f32s(&[5, 3]), Spec::new(&[2], DType::I64)]);
        assert!(m.contains("comparison_direction LT") && m.contains("\"stablehlo.select\""), "{m}");
        assert!(
            m.contains("collapsed_slice_dims = [0]") && m.contains("slice_sizes = array<i64: 1, 3>"),
            "{m}"
        );
        assert!(m.contains("-> tensor<2x3xf32>"), "{m}");
    }

    #[test]
    fn gather_reads_full_coordinates_of_every_element() {
        let m = module(Gather { dim: 1, check: false }, &[f32s(&[4, 3]), Spec::new(&[2, 2], DType::I32)]);
        assert!(m.contains("iota_dimension = 0") && m.contains("dimension = 2 : i64"), "{m}");
        assert!(
            m.contains("collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 2"),
            "{m}"
        );
        assert!(m.contains("slice_sizes = array<i64: 1, 1>") && m.contains("-> tensor<2x2xf32>"), "{m}");
    }

    #[test]
    fn scatter_add_adds_in_its_region_and_slices_a_larger_source() {
        let specs = [f32s(&[4, 3]), Spec::new(&[2, 3], DType::I64), f32s(&[3, 3])];
        let m = module(ScatterAdd { dim: 0, check: true }, &specs);
        assert!(m.contains("\"stablehlo.scatter\"") && m.contains("\"stablehlo.add\""), "{m}");
        assert!(m.contains("limit_indices = array<i64: 2, 3>"), "the source is cut to the indices: {m}");
        assert!(m.contains("-> (tensor<4x3xf32>, tensor<2xi64>)"), "with its check: {m}");
        let e = ScatterAdd { dim: 0, check: false }.infer(&[
            f32s(&[4, 3]),
            Spec::new(&[2, 3], DType::I64),
            f32s(&[1, 3]),
        ]);
        assert!(e.unwrap_err().to_string().contains("larger than"), "indices larger than the source");
    }

    #[test]
    fn a_checked_select_also_returns_its_check() {
        let m = module(IndexSelect { dim: 1, check: true }, &[f32s(&[5, 3]), Spec::new(&[2], DType::I32)]);
        assert!(m.contains("-> (tensor<5x2xf32>, tensor<2xi64>)"), "{m}");
        let c = Op::IndexSelect(IndexSelect { dim: 1, check: true }).index_checks(&[f32s(&[5, 3])]).remove(0);
        assert_eq!(c.message(7), "index 7 is out of range for dim 1 of size 3");
    }
}
