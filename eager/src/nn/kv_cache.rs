//! The static key/value cache that decoding writes into, the only one: fixed capacity, the
//! write position a tensor, so every decode step has the same shapes and runs the same
//! executables. Every attention that decodes (grouped-query attention, GPT-2's,
//! `MultiheadAttention`'s) writes and attends through [`StaticKvCache::attend`], given the
//! position by the caller or, with [`StaticKvCache::append`], kept by the cache.
//!
//! A cache is held in parts along the batch: one part of `B` rows (generation's batch), or one
//! part per sequence (a server's slots, joined into a batch step by step). Each part is written
//! and attended on its own, so a step over parts reads each sequence's cache once and writes
//! it once, where joining them first would copy them twice more.

use super::{scaled_dot_product_attention, AttentionOptions};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keys and values of one attention layer, `[B, kv_heads, capacity, head_dim]` in all, held
/// in parts along the batch.
pub struct StaticKvCache {
    /// Keys and values of each part, `[rows, kv_heads, capacity, head_dim]` each.
    parts: Vec<(Tensor, Tensor)>,
    /// `0..capacity`, i64: compared with the write position on the device.
    slots: Tensor,
    /// Positions filled by [`StaticKvCache::append`].
    len: usize,
}

impl StaticKvCache {
    /// An all-zero cache of `capacity` positions on `device`, one part.
    pub fn new(
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: Device,
    ) -> Result<StaticKvCache> {
        let shape = [batch, kv_heads, capacity, head_dim];
        let (k, v) =
            (Tensor::full_on(&shape, 0.0, dtype, device)?, Tensor::full_on(&shape, 0.0, dtype, device)?);
        StaticKvCache::from_parts(k, v)
    }

    /// A cache holding `keys` and `values` `[B, kv_heads, capacity, head_dim]` as one part (as
    /// a compiled decode step receives them).
    pub fn from_parts(keys: Tensor, values: Tensor) -> Result<StaticKvCache> {
        StaticKvCache::from_rows(vec![(keys, values)])
    }

    /// A cache of the sequences whose keys and values are `rows` (each
    /// `[n, kv_heads, capacity, head_dim]`, usually `n = 1`, all of one spec but `n`), in batch
    /// order: a server's slots decoding together.
    pub fn from_rows(rows: Vec<(Tensor, Tensor)>) -> Result<StaticKvCache> {
        let Some((k0, _)) = rows.first() else {
            return Err(Error::shape("StaticKvCache", "needs at least one part"));
        };
        let tail = |t: &Tensor| t.shape().get(1..).map(<[usize]>::to_vec);
        let bad = rows.iter().find(|(k, v)| {
            k.rank() != 4 || k.spec() != v.spec() || tail(k) != tail(k0) || k.dtype() != k0.dtype()
        });
        if let Some((k, v)) = bad {
            let msg = format!(
                "needs keys and values of one [B, heads, capacity, dim] spec, got {} and {} (first part {})",
                k.spec(),
                v.spec(),
                k0.spec()
            );
            return Err(Error::shape("StaticKvCache", msg));
        }
        let slots = Tensor::arange_on(0.0, k0.shape()[2] as f64, 1.0, DType::I64, k0.device())?;
        Ok(StaticKvCache { parts: rows, slots, len: 0 })
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.slots.shape()[0]
    }

    /// Positions filled by [`StaticKvCache::append`] (which keeps the count on the host); 0 for
    /// a cache written only at the caller's positions ([`StaticKvCache::write`] and
    /// [`StaticKvCache::attend`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether [`StaticKvCache::append`] has filled no position yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sequences it holds (rows of all parts).
    pub fn batch(&self) -> usize {
        self.parts.iter().map(|(k, _)| k.shape()[0]).sum()
    }

    /// The keys `[B, kv_heads, capacity, head_dim]` (joined, a copy, when in several parts).
    pub fn keys(&self) -> Result<Tensor> {
        self.joined(|p| &p.0)
    }

    /// The values `[B, kv_heads, capacity, head_dim]` (joined, a copy, when in several parts).
    pub fn values(&self) -> Result<Tensor> {
        self.joined(|p| &p.1)
    }

    fn joined(&self, pick: impl Fn(&(Tensor, Tensor)) -> &Tensor) -> Result<Tensor> {
        match self.parts.as_slice() {
            [one] => Ok(pick(one).clone()),
            many => Tensor::cat(&many.iter().map(pick).collect::<Vec<_>>(), 0),
        }
    }

    /// The parts' keys and values, in batch order (a compiled step returns them).
    pub fn into_parts(self) -> Vec<(Tensor, Tensor)> {
        self.parts
    }

    /// Bytes its keys and values take.
    pub fn size_in_bytes(&self) -> usize {
        self.parts.iter().map(|(k, v)| k.spec().size_in_bytes() + v.spec().size_in_bytes()).sum()
    }

    /// Writes `k` and `v` `[B, kv_heads, T, head_dim]` into slots `start..start + T`, `start`
    /// an i64 scalar tensor (so the step's position is data, not part of any op's key). The
    /// caller keeps `start + T <= capacity`: past it, the block is moved back to fit (XLA
    /// clamps a `dynamic_update_slice`'s start), overwriting earlier slots. With `T = 1`,
    /// `start` may also be `[B]`, one write position per row (a batch of sequences of
    /// different lengths decoding together, as a server's continuous batch does).
    pub fn write(&mut self, k: &Tensor, v: &Tensor, start: &Tensor) -> Result<()> {
        let t = k.shape().get(2).copied().unwrap_or(0);
        let batch = self.batch();
        let first = self.parts[0].0.shape();
        let want = [batch, first[1], t, first[3]];
        if k.shape() != want || v.shape() != want || t == 0 || t > self.capacity() {
            let msg = format!(
                "needs keys and values {want:?} (T ≤ {}), got {} and {}",
                self.capacity(),
                k.spec(),
                v.spec()
            );
            return Err(Error::shape("StaticKvCache::write", msg));
        }
        let per_row = t == 1 && start.rank() == 1 && start.numel() == batch;
        if !(start.numel() == 1 || per_row) || start.dtype() != DType::I64 {
            return Err(Error::invalid(
                "StaticKvCache::write",
                format!(
                    "start must be one i64 (or [{batch}] i64 when T = 1), got {} with T = {t}",
                    start.spec()
                ),
            ));
        }
        let several = self.parts.len() > 1;
        let dev = self.slots.device();
        let index = |i: usize| Tensor::full_on(&[1], i as f64, DType::I64, dev);
        let zero = index(0)?;
        let mut row = 0;
        for part in &mut self.parts {
            let n = part.0.shape()[0];
            let take = |x: &Tensor| if several { x.narrow(0, row, n) } else { Ok(x.clone()) };
            let (k, v) = (take(k)?.to_dtype(part.0.dtype())?, take(v)?.to_dtype(part.1.dtype())?);
            // Only the new positions are written (`dynamic_update_slice`), in place when the
            // step's caller donated the cache: one block per part, or per row with per-row starts.
            let (mut keys, mut values) = part.clone();
            if per_row && n > 1 {
                let starts = take(start)?;
                for r in 0..n {
                    let at = Tensor::cat(&[&index(r)?, &zero, &starts.narrow(0, r, 1)?, &zero], 0)?;
                    keys = keys.dynamic_update_slice(&k.narrow(0, r, 1)?, &at)?;
                    values = values.dynamic_update_slice(&v.narrow(0, r, 1)?, &at)?;
                }
            } else {
                let s = if per_row { take(start)? } else { start.reshape(&[1])? };
                let at = Tensor::cat(&[&zero, &zero, &s, &zero], 0)?;
                keys = keys.dynamic_update_slice(&k, &at)?;
                values = values.dynamic_update_slice(&v, &at)?;
            }
            *part = (keys, values);
            row += n;
        }
        Ok(())
    }

    /// Writes `k` and `v` at `start` (as [`StaticKvCache::write`]), then attends the queries
    /// `q` `[B, heads, T, head_dim]` to the whole cache under `opts.mask` (bool, broadcast to
    /// `[B, 1, T, capacity]`; it holds the causal rule, `opts.causal` is not read) with
    /// `opts`' scale and soft cap: `[B, heads, T, head_dim]`. Each part attends its own rows.
    pub fn attend(
        &mut self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        start: &Tensor,
        opts: AttentionOptions,
    ) -> Result<Tensor> {
        self.write(k, v, start)?;
        let (mask, opts) = (opts.mask, AttentionOptions { causal: false, ..opts });
        if let [(keys, values)] = self.parts.as_slice() {
            return scaled_dot_product_attention(q, keys, values, opts);
        }
        // Several parts hold at least two rows: a mask with a row per sequence is split with them.
        let per_row_mask = mask.filter(|m| m.rank() == 4 && m.shape()[0] == self.batch());
        let mut row = 0;
        let mut outs = Vec::with_capacity(self.parts.len());
        for (keys, values) in &self.parts {
            let n = keys.shape()[0];
            let m = match per_row_mask {
                Some(all) => Some(all.narrow(0, row, n)?),
                None => mask.cloned(),
            };
            let part = AttentionOptions { mask: m.as_ref(), ..opts };
            outs.push(scaled_dot_product_attention(&q.narrow(0, row, n)?, keys, values, part)?);
            row += n;
        }
        Tensor::cat(&outs.iter().collect::<Vec<_>>(), 0)
    }

    /// Decoding with the position kept here: `k` and `v` `[B, kv_heads, T, head_dim]` go to
    /// slots `len..len + T` and query `i` of `q` `[B, heads, T, head_dim]` attends slots
    /// `0..=len + i` (causally, through [`StaticKvCache::attend`]); then `len` grows by `T`.
    /// The position is data (an i64 scalar), so every step of one `T` runs the same
    /// executables. `[B, heads, T, head_dim]`.
    pub fn append(&mut self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let (t, cap) = (k.shape().get(2).copied().unwrap_or(0), self.capacity());
        if self.len + t > cap {
            let msg = if self.len == cap {
                format!("the key/value cache is full ({cap} positions)")
            } else {
                format!("the key/value cache has room for {} more positions, got {t}", cap - self.len)
            };
            return Err(Error::invalid("StaticKvCache::append", msg));
        }
        let dev = self.slots.device();
        let start = Tensor::full_on(&[], self.len as f64, DType::I64, dev)?;
        // Query i sees slot p where p - i <= len.
        let rows = Tensor::arange_on(0.0, t as f64, 1.0, DType::I64, dev)?.reshape(&[-1, 1])?;
        let seen = self.slots.reshape(&[1, -1])?.sub(&rows)?.le_scalar(self.len as f64)?;
        let out =
            self.attend(q, k, v, &start, AttentionOptions { mask: Some(&seen), ..Default::default() })?;
        self.len += t;
        Ok(out)
    }
}
