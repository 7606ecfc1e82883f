//! The in-memory compile cache: one compiled executable per (op, attributes, input specs,
//! device). A miss loads the executable from the persistent cache ([`crate::disk_cache`]) or
//! compiles it, and stores it; a hit only executes. LRU-bounded. The hit path is one
//! uncontended lock, one Fx hash and no heap allocation for keys of rank <= 4.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::device::Device;
use crate::mesh::Mesh;
use crate::ops::Op;
use crate::pjrt::Executable;
use crate::profiler::OpInfo;
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// What identifies one compiled program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpKey {
    pub op: Op,
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
    pub hits: u64,
    /// Compiles.
    pub misses: u64,
    /// Loads from the persistent cache.
    #[serde(default)]
    pub disk_hits: u64,
    /// Time spent compiling and loading.
    pub compile_ns: u64,
}

/// One cached program, as [`entries`] lists it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EntryStats {
    pub info: Arc<OpInfo>,
    pub stats: KeyStats,
}

/// Totals over the cache's life (since the last [`clear`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    pub entries: usize,
    pub capacity: usize,
    /// Executed from memory.
    pub hits: u64,
    /// Compiled.
    pub misses: u64,
    /// Loaded from the persistent cache instead of compiled.
    #[serde(default)]
    pub disk_hits: u64,
    pub evictions: u64,
    /// Time spent compiling.
    pub compile_ns: u64,
    /// Time spent loading from the persistent cache.
    #[serde(default)]
    pub load_ns: u64,
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
            "cache: {} entries (capacity {}), {} hits, {} misses (compiled), {} loaded from disk, hit rate {:.1}%, {} evictions, compile {:.1} ms, disk load {:.1} ms",
            self.entries,
            self.capacity,
            self.hits,
            self.misses,
            self.disk_hits,
            100.0 * self.hit_rate(),
            self.evictions,
            self.compile_ns as f64 / 1e6,
            self.load_ns as f64 / 1e6
        )
    }
}

/// Entries kept when nothing else is said (`EAGER_CACHE_CAPACITY` overrides); each live
/// executable costs about 110 KiB on the CPU plugin.
pub const DEFAULT_CAPACITY: usize = 2048;

struct Entry {
    exe: Arc<Executable>,
    info: Arc<OpInfo>,
    stats: KeyStats,
    last_used: u64,
}

struct Inner {
    map: HashMap<OpKey, Entry, FxBuildHasher>,
    tick: u64,
    totals: CacheStats,
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
        Cache { inner: Mutex::new(Inner { map: HashMap::default(), tick: 0, totals }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// A hit returns the executable and its info and counts the hit. A miss is counted when
    /// its compile is stored (an op rejected by its shape rule is no miss).
    pub(crate) fn lookup(&self, key: &OpKey) -> Option<(Arc<Executable>, Arc<OpInfo>)> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        match inner.map.get_mut(key) {
            Some(e) => {
                e.last_used = tick;
                e.stats.hits += 1;
                let found = (e.exe.clone(), e.info.clone());
                inner.totals.hits += 1;
                Some(found)
            }
            None => None,
        }
    }

    /// Stores an executable just compiled (`from_disk` false) or loaded from the persistent
    /// cache, evicting the least recently used beyond capacity.
    pub(crate) fn insert(
        &self,
        key: OpKey,
        exe: Arc<Executable>,
        info: Arc<OpInfo>,
        ns: u64,
        from_disk: bool,
    ) {
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
        let stats = KeyStats { hits: 0, misses, disk_hits, compile_ns: ns };
        match inner.map.get_mut(&key) {
            // Two threads compiled the same key at once: keep the first, count the work.
            Some(e) => {
                e.stats.misses += misses;
                e.stats.disk_hits += disk_hits;
                e.stats.compile_ns += ns;
            }
            None => {
                inner.map.insert(key, Entry { exe, info, stats, last_used });
            }
        }
        let capacity = inner.totals.capacity;
        evict_to(&mut inner, capacity);
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
