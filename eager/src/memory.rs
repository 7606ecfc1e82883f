//! What device memory the session's tensors hold: every tensor's buffers are booked here when
//! made and released when its last handle drops, with the op that made them, so that live
//! bytes, the peak, the largest tensors at the peak and live bytes over time can be shown
//! (`viz::memory_chart`, the REPL's and kernel's `:memory`), and an out-of-memory failure can
//! name what holds the memory.
//!
//! - [`live_bytes`], [`live_tensors`], [`snapshot`] (all of it, for charts), [`reset_peak`].
//! - [`set_limit`]: a per-device cap (torch's `set_per_process_memory_fraction`): an op or a
//!   transfer whose results would take a device past it fails with [`Error::OutOfMemory`]
//!   before it runs. A plugin's own RESOURCE_EXHAUSTED becomes the same error.
//! - The plugin's own figures where it gives them (TPU, GPU): `runtime::device_memory_stats`.
//!
//! A layer over the error type (which owns [`LiveTensor`], the rows an out-of-memory error
//! lists) and under the runtime: the runtime asks `admit` before it launches, tensors book
//! and release their buffers.
//!
//! Bytes are logical (elements × dtype size, a shard's of its own shape); buffers
//! outside tensors (index-check flags, executables) are not counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
// The ledger's rows and its byte formatting are the words of the out-of-memory error, so they
// live in `error`, the layer below; their names here stay what they were.
pub use crate::error::{format_bytes, LiveTensor};
use crate::shared::{lock, Shared};

/// Everything the ledger knows, for charts and `:memory`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemorySnapshot {
    /// Bytes live tensors hold now, all devices together.
    pub live_bytes: u64,
    /// The most bytes live at once so far.
    pub peak_bytes: u64,
    /// When the peak was reached (ns since the ledger's start).
    pub peak_ns: u64,
    /// Live tensors, largest first.
    pub live: Vec<LiveTensor>,
    /// The largest tensors live at the peak, largest first (at most [`TOP`]).
    pub at_peak: Vec<LiveTensor>,
    /// Live bytes over time: `(ns, bytes)`, the most held in each interval (intervals widen
    /// as a long session goes on, so the list stays short).
    pub timeline: Vec<(u64, u64)>,
    /// The cap set with [`set_limit`], per device.
    pub limit: Option<u64>,
}

impl MemorySnapshot {
    /// Live bytes per device, most first.
    pub fn by_device(&self) -> Vec<(Device, u64)> {
        let mut m: HashMap<Device, u64> = HashMap::new();
        for t in &self.live {
            *m.entry(t.device).or_default() += t.bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|&(d, b)| (std::cmp::Reverse(b), d));
        v
    }

    /// Live bytes per dtype, most first (a bf16-autocast step next to an f32 one shows where
    /// its activations went).
    pub fn by_dtype(&self) -> Vec<(DType, u64)> {
        let mut m: HashMap<DType, u64> = HashMap::new();
        for t in &self.live {
            *m.entry(t.dtype).or_default() += t.bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|&(d, b)| (std::cmp::Reverse(b), d));
        v
    }

    /// The `:memory` text: live total, peak, per device and per dtype, the top tensors now and
    /// at the peak.
    pub fn summary(&self, top: usize) -> String {
        let mut s = format!(
            "live: {} in {} tensor(s) · peak: {}",
            format_bytes(self.live_bytes),
            self.live.len(),
            format_bytes(self.peak_bytes)
        );
        if let Some(limit) = self.limit {
            s.push_str(&format!(" · limit: {} per device", format_bytes(limit)));
        }
        s.push('\n');
        let by_device = self.by_device();
        if by_device.len() > 1 {
            let per: Vec<String> =
                by_device.iter().map(|(d, b)| format!("{d} {}", format_bytes(*b))).collect();
            s.push_str(&format!("by device: {}\n", per.join(" · ")));
        }
        let by_dtype = self.by_dtype();
        if !by_dtype.is_empty() {
            let per: Vec<String> =
                by_dtype.iter().map(|(d, b)| format!("{d} {}", format_bytes(*b))).collect();
            s.push_str(&format!("by dtype: {}\n", per.join(" · ")));
        }
        if !self.live.is_empty() {
            s.push_str("largest live tensors:\n");
            for t in self.live.iter().take(top) {
                s.push_str(&format!("  {}\n", t.describe()));
            }
        }
        if !self.at_peak.is_empty() {
            s.push_str("largest at the peak:\n");
            for t in self.at_peak.iter().take(top) {
                s.push_str(&format!("  {}\n", t.describe()));
            }
        }
        s.trim_end().to_string()
    }
}

/// How many of the largest tensors the ledger keeps at the peak.
pub const TOP: usize = 10;
/// Points of the timeline before neighbours are merged (and the interval doubled).
const TIMELINE_POINTS: usize = 4096;

#[derive(Default)]
struct Ledger {
    state: Mutex<State>,
    /// Per-device cap in bytes; 0 for none.
    limit: AtomicU64,
}

/// A live buffer as booked: no allocation but the map's (the hit path books every result).
struct Entry {
    bytes: u64,
    device: Device,
    dtype: DType,
    shape: smallvec::SmallVec<[usize; 4]>,
    op: &'static str,
    made_ns: u64,
}

impl Entry {
    fn live(&self) -> LiveTensor {
        LiveTensor {
            bytes: self.bytes,
            device: self.device,
            dtype: self.dtype,
            shape: self.shape.to_vec(),
            op: self.op.to_string(),
            made_ns: self.made_ns,
        }
    }
}

#[derive(Default)]
struct State {
    next: u64,
    live: rustc_hash::FxHashMap<u64, Entry>,
    per_device: rustc_hash::FxHashMap<Device, u64>,
    live_bytes: u64,
    peak_bytes: u64,
    peak_ns: u64,
    at_peak: Vec<LiveTensor>,
    /// The live bytes `at_peak` was taken at.
    at_peak_bytes: u64,
    timeline: Vec<(u64, u64)>,
    /// Width of a timeline interval, ns.
    interval_ns: u64,
}

static LEDGER: Shared<Ledger> = Shared::new("eager::memory::Ledger", Ledger::default);

/// Nanoseconds since the ledger's start. (Its own clock: the profiler's is a layer above.)
pub(crate) fn now_ns() -> u64 {
    static EPOCH: Shared<std::time::Instant> = Shared::new("eager::memory::epoch", std::time::Instant::now);
    EPOCH.get().elapsed().as_nanos() as u64
}

impl State {
    fn sample(&mut self, now: u64) {
        if self.interval_ns == 0 {
            self.interval_ns = 100_000;
        }
        match self.timeline.last_mut() {
            // Within the last interval: keep the most held in it, and the time it ends at.
            Some(last) if now < last.0 + self.interval_ns => last.1 = last.1.max(self.live_bytes),
            _ => self.timeline.push((now, self.live_bytes)),
        }
        if self.timeline.len() >= TIMELINE_POINTS {
            self.timeline =
                self.timeline.chunks(2).map(|c| (c[0].0, c.iter().map(|p| p.1).max().unwrap_or(0))).collect();
            self.interval_ns *= 2;
        }
    }

    /// The largest live tensors now, largest first.
    fn top(&self, n: usize) -> Vec<LiveTensor> {
        let mut v: Vec<&Entry> = self.live.values().collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.made_ns.cmp(&b.made_ns)));
        v.into_iter().take(n).map(Entry::live).collect()
    }
}

/// Books a new buffer of `bytes` on `device`; the id goes back to [`release`].
pub(crate) fn book(bytes: u64, device: Device, dtype: DType, shape: &[usize], op: &'static str) -> u64 {
    let now = now_ns();
    let mut s = lock(&LEDGER.get().state);
    s.next += 1;
    let id = s.next;
    s.live_bytes += bytes;
    *s.per_device.entry(device).or_default() += bytes;
    s.live.insert(id, Entry { bytes, device, dtype, shape: shape.into(), op, made_ns: now });
    if s.live_bytes > s.peak_bytes {
        s.peak_bytes = s.live_bytes;
        s.peak_ns = now;
        // Retaken when the peak grew by a 64th, or by a tensor that enters the top list, so
        // that a loop making many small tensors does not sort the live set each time.
        let enters = s.at_peak.len() < TOP || s.at_peak.last().is_some_and(|t| bytes >= t.bytes);
        if enters || s.live_bytes - s.at_peak_bytes > s.at_peak_bytes / 64 {
            s.at_peak = s.top(TOP);
            s.at_peak_bytes = s.live_bytes;
        }
    }
    s.sample(now);
    id
}

/// Releases what [`book`] booked.
pub(crate) fn release(id: u64) {
    let now = now_ns();
    let mut s = lock(&LEDGER.get().state);
    if let Some(t) = s.live.remove(&id) {
        s.live_bytes -= t.bytes;
        if let Some(d) = s.per_device.get_mut(&t.device) {
            *d -= t.bytes;
        }
        s.sample(now);
    }
}

/// Bytes held by live tensors, on every device.
pub fn live_bytes() -> u64 {
    lock(&LEDGER.get().state).live_bytes
}

/// Bytes held by live tensors on `device`.
pub fn live_bytes_on(device: Device) -> u64 {
    lock(&LEDGER.get().state).per_device.get(&device).copied().unwrap_or(0)
}

/// The most live bytes held at once since the start or [`reset_peak`].
pub fn peak_bytes() -> u64 {
    lock(&LEDGER.get().state).peak_bytes
}

/// Every live tensor buffer, largest first.
pub fn live_tensors() -> Vec<LiveTensor> {
    let s = lock(&LEDGER.get().state);
    s.top(s.live.len())
}

/// The whole ledger: totals, live tensors, the peak and the timeline.
pub fn snapshot() -> MemorySnapshot {
    let s = lock(&LEDGER.get().state);
    MemorySnapshot {
        live_bytes: s.live_bytes,
        peak_bytes: s.peak_bytes,
        peak_ns: s.peak_ns,
        live: s.top(s.live.len()),
        at_peak: s.at_peak.clone(),
        timeline: s.timeline.clone(),
        limit: limit(),
    }
}

/// Starts the peak (and the timeline) again from what is live now.
pub fn reset_peak() {
    let now = now_ns();
    let mut s = lock(&LEDGER.get().state);
    s.peak_bytes = s.live_bytes;
    s.peak_ns = now;
    s.at_peak = s.top(TOP);
    s.at_peak_bytes = s.live_bytes;
    s.timeline.clear();
    s.interval_ns = 0;
    s.sample(now);
}

/// Caps what live tensors may hold on each device (`None`: no cap but the device's).
pub fn set_limit(bytes: Option<u64>) {
    LEDGER.get().limit.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// The cap set by [`set_limit`], if any.
pub fn limit() -> Option<u64> {
    Some(LEDGER.get().limit.load(Ordering::Relaxed)).filter(|&b| b > 0)
}

/// Fails with [`Error::OutOfMemory`] if `bytes` more on `device` would pass the cap.
pub(crate) fn admit(op: &dyn Fn() -> String, device: Device, bytes: u64) -> Result<()> {
    let Some(limit) = limit() else { return Ok(()) };
    let on_device = live_bytes_on(device);
    if on_device + bytes <= limit {
        return Ok(());
    }
    let cause =
        format!("it would pass the limit of {} set with eager::memory::set_limit", format_bytes(limit));
    Err(out_of_memory(op(), device, bytes, cause, &|_| false))
}

/// The out-of-memory error for a request of `bytes` on `device` by `op`: what is live there
/// and the largest tensors with the ops that made them (leaving out the request's own
/// results, booked before an asynchronous launch failed: `own`).
pub(crate) fn out_of_memory(
    op: String,
    device: Device,
    bytes: u64,
    cause: String,
    own: &dyn Fn(&LiveTensor) -> bool,
) -> Error {
    let held: Vec<LiveTensor> =
        live_tensors().into_iter().filter(|t| t.device == device && !own(t)).collect();
    let live = held.iter().map(|t| t.bytes).sum();
    let largest = held.into_iter().take(3).collect();
    Error::OutOfMemory { op, device, requested: bytes, live, largest, cause }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_keeps_the_most_held_as_it_narrows() {
        let mut s = State::default();
        for i in 0..(TIMELINE_POINTS as u64 * 3) {
            s.live_bytes = if i == 5000 { 1 << 30 } else { i };
            s.sample(i * 1_000_000);
        }
        assert!(s.timeline.len() < TIMELINE_POINTS);
        assert_eq!(s.timeline.iter().map(|p| p.1).max(), Some(1 << 30));
        assert!(s.timeline.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
