//! The in-memory compile cache: one compiled executable per (op, attributes, input specs,
//! device). A miss loads the executable from the persistent cache ([`crate::disk_cache`]) or
//! compiles it, and stores it; a hit only executes. LRU-bounded. The hit path is one
//! uncontended lock, one Fx hash and no heap allocation for keys of rank <= 4.
//!
//! Tiers: a key's first executable is usually the quick tier ([`Tier`]); when the key turns
//! hot ([`Tiering`]: calls, or device time booked by its launches' completions) a lookup
//! says so once, the runtime compiles the optimized tier in the background, and
//! `Cache::promote` swaps it in under the same lock the lookups take.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::device::Device;
use crate::mesh::Mesh;
use crate::ops::Op;
use crate::pjrt::Executable;
pub use crate::pjrt::Tier;
use crate::profiler::OpInfo;
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// What identifies one compiled program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpKey {
    /// The op with its attributes.
    pub op: Op,
    /// The specs of the inputs.
    pub inputs: SmallVec<[Spec; 3]>,
    /// The device; for an SPMD program, its mesh's first.
    pub device: Device,
    /// For an SPMD program over a mesh: the mesh and the shardings of its inputs and result.
    pub partitioned: Option<Arc<Partitioned>>,
}

/// How an SPMD program lies over its mesh: part of its key (and of its text, so of the
/// persistent cache's key too).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Partitioned {
    /// The mesh the program runs over.
    pub mesh: Mesh,
    /// The Shardy annotation of each input.
    pub inputs: SmallVec<[String; 3]>,
    /// The Shardy annotation of each result.
    pub outputs: SmallVec<[String; 1]>,
    /// The partition specs of the inputs then the results, as printed (`P("data")`).
    pub splits: SmallVec<[String; 4]>,
}

impl OpKey {
    /// The key of `op` on `inputs` on `device`.
    pub(crate) fn new<'a>(op: Op, inputs: impl IntoIterator<Item = &'a Spec>, device: Device) -> OpKey {
        OpKey { op, inputs: inputs.into_iter().cloned().collect(), device, partitioned: None }
    }
}

/// Counters of one key.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyStats {
    /// Calls executed from memory.
    pub hits: u64,
    /// Compiles.
    pub misses: u64,
    /// Loads from the persistent cache.
    #[serde(default)]
    pub disk_hits: u64,
    /// Time spent compiling and loading.
    pub compile_ns: u64,
    /// Calls (hits) before the key was swapped to the optimized tier, if it was.
    #[serde(default)]
    pub swapped_after: Option<u64>,
}

/// One cached program, as [`entries`] lists it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EntryStats {
    /// The program's op: name, attributes, specs, device.
    pub info: Arc<OpInfo>,
    /// The key's counters.
    pub stats: KeyStats,
}

/// Totals over the cache's life (since the last [`clear`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Programs in the cache now.
    pub entries: usize,
    /// Most programs the cache holds.
    pub capacity: usize,
    /// Executed from memory.
    pub hits: u64,
    /// Compiled.
    pub misses: u64,
    /// Loaded from the persistent cache instead of compiled.
    #[serde(default)]
    pub disk_hits: u64,
    /// Programs evicted to make room.
    pub evictions: u64,
    /// Time spent compiling.
    pub compile_ns: u64,
    /// Time spent loading from the persistent cache.
    #[serde(default)]
    pub load_ns: u64,
    /// Hot keys swapped to the optimized tier, and the time their background compiles took.
    #[serde(default)]
    pub swaps: u64,
    #[serde(default)]
    /// Time the background compiles of the optimized tier took.
    pub promote_ns: u64,
    /// Of the misses and disk loads, those fetched ahead of their dispatch, side by side (the
    /// first backward pass and optimizer step of a loop).
    #[serde(default)]
    pub ahead: u64,
}

impl CacheStats {
    /// Share of lookups found in memory.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses + self.disk_hits;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

impl std::fmt::Display for CacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cache: {} entries (capacity {}), {} hits, {} misses (compiled), {} loaded from disk, hit rate {:.1}%, {} evictions, compile {:.1} ms, disk load {:.1} ms, {} fetched ahead, {} swapped to the optimized tier ({:.1} ms in the background)",
            self.entries,
            self.capacity,
            self.hits,
            self.misses,
            self.disk_hits,
            100.0 * self.hit_rate(),
            self.evictions,
            self.compile_ns as f64 / 1e6,
            self.load_ns as f64 / 1e6,
            self.ahead,
            self.swaps,
            self.promote_ns as f64 / 1e6
        )
    }
}

/// Entries kept when nothing else is said (`EAGER_CACHE_CAPACITY` overrides); each live
/// executable costs about 110 KiB on the CPU plugin.
pub const DEFAULT_CAPACITY: usize = 2048;

/// When a key compiled at the quick tier turns hot and is recompiled optimized. Measured on
/// the CPU plugin: the quick tier compiles a one-op add in about 11 ms against 30, and runs
/// large elementwise ops 2-17x slower (add of 4M f32 3.7 ms against 1.6-2.2, exp 17 ms
/// against 1.2, a row sum of 1024x1024 2.2 ms against 0.3; matmul the same). So a key is
/// hot after `hot_calls` calls (a loop: one background compile pays off) or once its device
/// time passes `hot_device_ms` (a big op: a few calls pay for the compile).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tiering {
    /// Off: every key is compiled optimized at once (`EAGER_TIERING=0`).
    pub enabled: bool,
    /// `EAGER_HOT_CALLS` overrides.
    pub hot_calls: u64,
    /// `EAGER_HOT_DEVICE_MS` overrides.
    pub hot_device_ms: f64,
}

impl Tiering {
    fn from_env() -> Tiering {
        let var = |name: &str| std::env::var(name).ok();
        Tiering {
            enabled: var("EAGER_TIERING").is_none_or(|v| v != "0"),
            hot_calls: var("EAGER_HOT_CALLS").and_then(|v| v.parse().ok()).unwrap_or(100),
            hot_device_ms: var("EAGER_HOT_DEVICE_MS").and_then(|v| v.parse().ok()).unwrap_or(20.0),
        }
    }
}

/// A key's device time so far, booked by the completions of its launches (they run on the
/// plugin's threads, without the cache's lock).
#[derive(Debug, Default)]
pub(crate) struct Heat {
    device_ns: AtomicU64,
}

impl Heat {
    pub(crate) fn add(&self, ns: u64) {
        self.device_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// A key swapped from the quick tier to the optimized one, as [`swaps`] lists it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TierSwap {
    /// The key's info after the swap (`tier` optimized).
    pub info: Arc<OpInfo>,
    /// Calls at the quick tier before it turned hot, and their device time.
    pub calls: u64,
    /// Device time of those calls, in milliseconds.
    pub device_ms: f64,
    /// The background compile (or load) of the optimized tier.
    pub compile_ms: f64,
    /// When the swap happened, on the profiler's clock.
    pub at_ns: u64,
}

/// What a hit finds.
pub(crate) struct Found {
    pub(crate) exe: Arc<Executable>,
    pub(crate) info: Arc<OpInfo>,
    pub(crate) heat: Arc<Heat>,
    /// This lookup made the key hot: the caller starts its optimized compile.
    pub(crate) promote: bool,
    /// The key's first dispatch after a fetch ahead ([`crate::runtime::fetch_ahead`]): how its
    /// executable was fetched (loaded from disk or compiled) and the time that took.
    pub(crate) ahead: Option<Ahead>,
}

/// How a key fetched ahead of its first dispatch got its executable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ahead {
    pub(crate) from_disk: bool,
    pub(crate) ns: u64,
}

struct Entry {
    exe: Arc<Executable>,
    info: Arc<OpInfo>,
    stats: KeyStats,
    last_used: u64,
    heat: Arc<Heat>,
    /// Its optimized compile is under way.
    promoting: bool,
    /// Fetched ahead and not dispatched yet: the first lookup reports the fetch.
    ahead: Option<Ahead>,
}

/// Swaps kept for [`swaps`] (a session swaps each hot key once).
const SWAPS_KEPT: usize = 4096;

struct Inner {
    map: HashMap<OpKey, Entry, FxBuildHasher>,
    tick: u64,
    totals: CacheStats,
    tiering: Tiering,
    swaps: Vec<TierSwap>,
}

pub(crate) struct Cache {
    inner: Mutex<Inner>,
}

impl Cache {
    pub(crate) fn new() -> Cache {
        let capacity = std::env::var("EAGER_CACHE_CAPACITY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_CAPACITY);
        let totals = CacheStats { capacity, ..Default::default() };
        let tiering = Tiering::from_env();
        let inner = Inner { map: HashMap::default(), tick: 0, totals, tiering, swaps: Vec::new() };
        Cache { inner: Mutex::new(inner) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// A hit returns the executable and its info and counts the hit (the first dispatch of a
    /// key fetched ahead is that fetch, no hit). A miss is counted when its compile is stored
    /// (an op rejected by its shape rule is no miss).
    pub(crate) fn lookup(&self, key: &OpKey) -> Option<Found> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.tick += 1;
        let (tick, t) = (inner.tick, inner.tiering);
        let e = inner.map.get_mut(key)?;
        e.last_used = tick;
        let ahead = e.ahead.take();
        if ahead.is_none() {
            e.stats.hits += 1;
            inner.totals.hits += 1;
        }
        let promote = e.info.tier == Tier::Quick
            && t.enabled
            && !e.promoting
            && (e.stats.hits >= t.hot_calls
                || e.heat.device_ns.load(Ordering::Relaxed) as f64 >= t.hot_device_ms * 1e6);
        e.promoting |= promote;
        Some(Found { exe: e.exe.clone(), info: e.info.clone(), heat: e.heat.clone(), promote, ahead })
    }

    /// Whether `key` has an executable in memory (nothing counted).
    pub(crate) fn contains(&self, key: &OpKey) -> bool {
        self.lock().map.contains_key(key)
    }

    /// Executables fetched so far (compiled or loaded): a region whose keys all hit last time
    /// hits again unless this moved (see `compile::AheadMark`).
    pub(crate) fn fetches(&self) -> u64 {
        let inner = self.lock();
        inner.totals.misses + inner.totals.disk_hits
    }

    /// The tier a key's first executable gets.
    pub(crate) fn first_tier(&self) -> Tier {
        if self.lock().tiering.enabled {
            Tier::Quick
        } else {
            Tier::Optimized
        }
    }

    pub(crate) fn tiering(&self) -> Tiering {
        self.lock().tiering
    }

    pub(crate) fn set_tiering(&self, tiering: Tiering) {
        self.lock().tiering = tiering;
    }

    /// Swaps in the optimized executable of a hot key (`exe`, `info`), compiled in `ns`; a
    /// key evicted meanwhile stays out. `None` (its compile failed): the key stays quick.
    pub(crate) fn promote(&self, key: &OpKey, optimized: Option<(Arc<Executable>, Arc<OpInfo>)>, ns: u64) {
        let mut inner = self.lock();
        let Some(e) = inner.map.get_mut(key) else { return };
        let Some((exe, info)) = optimized else {
            return; // `promoting` stays set: no second try
        };
        e.exe = exe;
        e.info = info.clone();
        e.promoting = false;
        e.stats.compile_ns += ns;
        e.stats.swapped_after = Some(e.stats.hits);
        let swap = TierSwap {
            info,
            calls: e.stats.hits,
            device_ms: e.heat.device_ns.load(Ordering::Relaxed) as f64 / 1e6,
            compile_ms: ns as f64 / 1e6,
            at_ns: crate::profiler::now_ns(),
        };
        inner.totals.swaps += 1;
        inner.totals.promote_ns += ns;
        if inner.swaps.len() < SWAPS_KEPT {
            inner.swaps.push(swap);
        }
    }

    pub(crate) fn swaps(&self) -> Vec<TierSwap> {
        self.lock().swaps.clone()
    }

    /// Stores an executable just compiled (`from_disk` false) or loaded from the persistent
    /// cache, evicting the least recently used beyond capacity; `ahead`: fetched before any
    /// dispatch asked for it.
    pub(crate) fn insert(
        &self,
        key: OpKey,
        exe: Arc<Executable>,
        info: Arc<OpInfo>,
        ns: u64,
        from_disk: bool,
        ahead: bool,
    ) -> Arc<Heat> {
        let mut inner = self.lock();
        inner.tick += 1;
        let last_used = inner.tick;
        let (misses, disk_hits) = if from_disk { (0, 1) } else { (1, 0) };
        if from_disk {
            inner.totals.load_ns += ns;
        } else {
            inner.totals.compile_ns += ns;
        }
        inner.totals.misses += misses;
        inner.totals.disk_hits += disk_hits;
        inner.totals.ahead += u64::from(ahead);
        let stats = KeyStats { hits: 0, misses, disk_hits, compile_ns: ns, swapped_after: None };
        let heat = match inner.map.get_mut(&key) {
            // Two threads compiled the same key at once: keep the first, count the work.
            Some(e) => {
                e.stats.misses += misses;
                e.stats.disk_hits += disk_hits;
                e.stats.compile_ns += ns;
                e.heat.clone()
            }
            None => {
                let heat = Arc::new(Heat::default());
                let ahead = ahead.then_some(Ahead { from_disk, ns });
                let entry =
                    Entry { exe, info, stats, last_used, heat: heat.clone(), promoting: false, ahead };
                inner.map.insert(key, entry);
                heat
            }
        };
        let capacity = inner.totals.capacity;
        evict_to(&mut inner, capacity);
        heat
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats { entries: inner.map.len(), ..inner.totals.clone() }
    }

    pub(crate) fn entries(&self) -> Vec<EntryStats> {
        let inner = self.lock();
        let mut v: Vec<(u64, EntryStats)> = inner
            .map
            .values()
            .map(|e| (e.last_used, EntryStats { info: e.info.clone(), stats: e.stats.clone() }))
            .collect();
        v.sort_by_key(|(t, _)| *t);
        v.into_iter().map(|(_, e)| e).collect()
    }

    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.swaps.clear();
        let capacity = inner.totals.capacity;
        inner.totals = CacheStats { capacity, ..Default::default() };
    }

    pub(crate) fn set_capacity(&self, capacity: usize) {
        let mut inner = self.lock();
        inner.totals.capacity = capacity;
        evict_to(&mut inner, capacity);
    }
}

/// Drops least recently used entries until at most `capacity` remain. Linear scan: it runs
/// only after a compile, which costs a million times more.
fn evict_to(inner: &mut Inner, capacity: usize) {
    while inner.map.len() > capacity {
        let oldest = inner.map.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone());
        match oldest {
            Some(k) => {
                inner.map.remove(&k);
                inner.totals.evictions += 1;
            }
            None => break,
        }
    }
}

static CACHE: Shared<Cache> = Shared::new("eager::cache::Cache", Cache::new);

/// The process's compile cache (one per session, see [`crate::shared`]).
pub(crate) fn cache() -> &'static Cache {
    CACHE.get()
}

/// Totals: entries, hits, misses, evictions, compile time.
pub fn stats() -> CacheStats {
    cache().stats()
}

/// Per-key counters, least recently used first.
pub fn entries() -> Vec<EntryStats> {
    cache().entries()
}

/// Keys swapped from the quick tier to the optimized one, in order.
pub fn swaps() -> Vec<TierSwap> {
    cache().swaps()
}

/// When keys turn hot (see [`Tiering`]).
pub fn tiering() -> Tiering {
    cache().tiering()
}

/// Sets when keys turn hot; `enabled: false` compiles every new key optimized at once.
pub fn set_tiering(tiering: Tiering) {
    cache().set_tiering(tiering)
}

/// Drops every compiled executable from memory and zeroes the counters (the persistent
/// cache stays: see [`clear_disk`]).
pub fn clear() {
    cache().clear()
}

/// Removes every entry of the persistent compile cache; returns how many there were.
pub fn clear_disk() -> std::io::Result<usize> {
    crate::disk_cache::clear()
}

/// Entries and bytes of the persistent compile cache.
pub fn disk_stats() -> crate::disk_cache::DiskStats {
    crate::disk_cache::stats()
}

/// Bounds the number of cached executables (LRU eviction).
pub fn set_capacity(capacity: usize) {
    cache().set_capacity(capacity)
}
