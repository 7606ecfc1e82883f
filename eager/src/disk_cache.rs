//! The persistent compile cache: every compiled executable is serialized (PJRT's executable
//! serialize) into the user's cache dir, keyed by its StableHLO text, the compile options and
//! the plugin's identity, so that a fresh process loads it (deserialize-and-load) instead of
//! compiling. An entry is checked on load (format, key, length, checksum); a bad one is
//! removed with a warning and the op recompiles. Writes are atomic (temp file + rename), so
//! processes filling one cache at once leave only whole entries. A size bound evicts the
//! least recently used entries.
//!
//! Warm start: each process appends the entries it uses, in order, to a log per plugin
//! identity; with `EAGER_PRELOAD=1` (the REPL and the kernel set it) a fresh process loads the
//! last sessions' entries ([`PRELOAD_MAX`]) on a background thread as its runtime starts, and
//! a load finds them ready.
//!
//! Settings: `EAGER_COMPILE_CACHE=off` turns it off; `EAGER_COMPILE_CACHE_DIR` moves it
//! (default `<cache dir>/compiled`); `EAGER_COMPILE_CACHE_MAX_MB` bounds it (default 1024).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::pjrt::{Client, Executable};

/// First bytes of every entry; bumped when the layout changes (older entries then count as
/// stale and are replaced).
const MAGIC: &[u8; 8] = b"EAGERXC1";
/// Extension of entry files (temp files being written have none, so readers skip them).
const EXT: &str = "xla";
/// Default size bound.
pub const DEFAULT_MAX_BYTES: u64 = 1024 << 20;
/// Entries a warm start loads at most: the most recently used (each costs about 110 KiB
/// loaded on the CPU plugin).
pub const PRELOAD_MAX: usize = 256;

/// Where the cache lives and how big it may grow, as the environment says; `None` when
/// `EAGER_COMPILE_CACHE` turns it off.
pub fn configured_dir() -> Option<PathBuf> {
    let off = std::env::var("EAGER_COMPILE_CACHE")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "off" | "false" | "no"))
        .unwrap_or(false);
    if off {
        return None;
    }
    Some(
        std::env::var_os("EAGER_COMPILE_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::plugin::cache_dir().join("compiled")),
    )
}

fn configured_max_bytes() -> u64 {
    std::env::var("EAGER_COMPILE_CACHE_MAX_MB")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|mb| *mb >= 0.0)
        .map(|mb| (mb * (1u64 << 20) as f64) as u64)
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// What is on disk now.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DiskStats {
    /// The cache's directory.
    pub dir: PathBuf,
    /// Programs stored.
    pub entries: usize,
    /// Bytes stored.
    pub bytes: u64,
    /// The cap on bytes stored.
    pub max_bytes: u64,
}

impl std::fmt::Display for DiskStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "disk cache: {} entries, {:.1} MiB of {:.0} MiB, in {}",
            self.entries,
            self.bytes as f64 / (1 << 20) as f64,
            self.max_bytes as f64 / (1 << 20) as f64,
            self.dir.display()
        )
    }
}

/// The persistent cache of one runtime (one plugin).
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// The plugin's identity: path, size, mtime, API and platform versions.
    identity: String,
    max_bytes: u64,
    /// Bytes on disk as last counted plus bytes written since; a recount runs when it
    /// passes the bound (other processes write too, so it is an estimate).
    estimate: AtomicU64,
    counted: std::sync::Once,
    /// The log of entries used, in order (see the module's warm start), and the entries this
    /// process appended to it.
    log: PathBuf,
    logged: Mutex<HashSet<String>>,
    warm: Warm,
    /// A write failed (a read-only or full dir): this process writes no more entries, after
    /// one warning saying why (loads go on).
    writes_off: AtomicBool,
}

/// What a warm start loaded ahead, and the stop at exit.
#[derive(Default)]
struct Warm {
    state: Mutex<WarmState>,
    /// Signalled as each background load ends.
    settled: std::sync::Condvar,
    /// Held through each background load; [`DiskCache::stop_preloading`] takes it for good.
    loading: Mutex<()>,
    stopped: AtomicBool,
}

#[derive(Default)]
struct WarmState {
    /// Loaded entries by name, with the key stored in each.
    ready: HashMap<String, (Vec<u8>, Executable)>,
    /// Names a load read itself: the preloader skips them.
    claimed: HashSet<String>,
    /// The entry the preloader is loading now: a load of it waits instead of loading it twice.
    in_flight: Option<String>,
}

/// Why an entry on disk could not be used.
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    #[error("it was written by another version of eager's cache format")]
    Format,
    #[error("it belongs to a different program or plugin")]
    Key,
    #[error("it is truncated")]
    Truncated,
    #[error("its checksum does not match (corrupt)")]
    Checksum,
    #[error("the plugin cannot load it: {0}")]
    Load(crate::pjrt::PjrtError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl DiskCache {
    /// The cache for `client`'s plugin at `plugin_path`, or `None` when turned off.
    pub(crate) fn open(client: &Client, plugin_path: &Path) -> Option<Arc<DiskCache>> {
        let dir = configured_dir()?;
        let meta = fs::metadata(plugin_path).ok();
        let mtime = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // `XLA_FLAGS` changes what the plugin compiles (and `--xla_dump_to` dumps only at a
        // compile): executables compiled under other flags are not loaded.
        let identity = format!(
            "plugin={} size={} mtime={mtime} api={}.{} platform={} {} attrs={:?} xla_flags={:?}",
            plugin_path.display(),
            meta.map(|m| m.len()).unwrap_or(0),
            client.api.version.0,
            client.api.version.1,
            client.platform_name,
            client.platform_version,
            client.api.attributes().unwrap_or_default(),
            std::env::var("XLA_FLAGS").unwrap_or_default(),
        );
        let digest = Sha256::digest(identity.as_bytes());
        let log = dir.join(format!("used-{}.log", hex(&digest[..8])));
        Some(Arc::new(DiskCache {
            dir,
            identity,
            max_bytes: configured_max_bytes(),
            estimate: AtomicU64::new(0),
            counted: std::sync::Once::new(),
            log,
            logged: Mutex::default(),
            warm: Warm::default(),
            writes_off: AtomicBool::new(false),
        }))
    }

    /// Appends `name` to the log of entries used, once per process (one short append: lines
    /// of processes writing at once do not mix).
    fn note_used(&self, name: &str) {
        if !crate::shared::lock(&self.logged).insert(name.to_string()) {
            return;
        }
        let line = format!("{name}\n");
        let _ = open_regular(&self.log, fs::OpenOptions::new().create(true).append(true))
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }

    /// Starts the warm start on a background thread: `warm_up` first (a tiny compile, which
    /// makes XLA's one-time state), then the entries the last sessions used (the most recent
    /// [`PRELOAD_MAX`], oldest first); `after_first` runs after the warm-up and after the
    /// first entry. The log is trimmed to them when it has grown past four times as many lines.
    pub(crate) fn preload(
        self: &Arc<Self>,
        client: Arc<Client>,
        warm_up: fn(&Arc<Client>),
        after_first: fn(),
    ) {
        let mut text = String::new();
        let _ = open_regular(&self.log, fs::OpenOptions::new().read(true))
            .and_then(|mut f| f.read_to_string(&mut text));
        let lines: Vec<&str> = text.lines().filter(|l| l.len() == 32).collect();
        let mut seen = HashSet::new();
        let mut names: Vec<String> = lines
            .iter()
            .rev()
            .filter(|l| seen.insert(**l))
            .take(PRELOAD_MAX)
            .map(|l| l.to_string())
            .collect();
        names.reverse();
        if lines.len() > 4 * PRELOAD_MAX {
            let kept: String = names.iter().map(|n| format!("{n}\n")).collect();
            let _ = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&self.dir)
                .and_then(|mut t| t.write_all(kept.as_bytes()).map(|_| t))
                .and_then(|t| t.persist(&self.log).map_err(|e| e.error));
        }
        let cache = self.clone();
        let spawned = std::thread::Builder::new().name("eager-preload".into()).spawn(move || {
            {
                let _loading = crate::shared::lock(&cache.warm.loading);
                if cache.warm.stopped.load(Ordering::Acquire) {
                    return;
                }
                warm_up(&client);
            }
            after_first();
            let mut first = true;
            for name in names {
                let _loading = crate::shared::lock(&cache.warm.loading);
                if cache.warm.stopped.load(Ordering::Acquire) {
                    return;
                }
                {
                    let mut st = crate::shared::lock(&cache.warm.state);
                    if st.claimed.contains(&name) {
                        continue;
                    }
                    st.in_flight = Some(name.clone());
                }
                let path = cache.dir.join(format!("{name}.{EXT}"));
                let loaded = open_regular(&path, fs::OpenOptions::new().read(true))
                    .ok()
                    .and_then(|mut f| read_any_entry(&mut f).ok())
                    .and_then(|(key, payload)| Some((key, client.deserialize(&payload).ok()?)));
                let was_loaded = loaded.is_some();
                {
                    let mut st = crate::shared::lock(&cache.warm.state);
                    st.in_flight = None;
                    if let Some(entry) = loaded {
                        st.ready.insert(name, entry);
                    }
                }
                cache.warm.settled.notify_all();
                if was_loaded && std::mem::take(&mut first) {
                    after_first();
                }
            }
        });
        drop(spawned); // without the thread, loads read the files as usual
    }

    /// Entries the warm start loaded that no load has taken yet.
    pub(crate) fn preloaded(&self) -> usize {
        crate::shared::lock(&self.warm.state).ready.len()
    }

    /// Stops the warm start: waits for the load in flight and starts no other (at exit).
    pub(crate) fn stop_preloading(&self) {
        // Once: the exit hook is registered (so run) more than once.
        if self.warm.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        std::mem::forget(crate::shared::lock(&self.warm.loading));
    }

    /// The bytes an entry's key is made of: who compiles (the plugin) and what (program and
    /// options).
    fn key(&self, program: &str, options: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.identity.len() + program.len() + options.len() + 2);
        k.extend_from_slice(self.identity.as_bytes());
        k.push(0);
        k.extend_from_slice(program.as_bytes());
        k.push(0);
        k.extend_from_slice(options);
        k
    }

    /// The entry's file name (without extension) for `key`.
    fn name_for(key: &[u8]) -> String {
        hex(&Sha256::digest(key)[..16])
    }

    fn path_for(&self, key: &[u8]) -> PathBuf {
        self.dir.join(format!("{}.{EXT}", DiskCache::name_for(key)))
    }

    /// The executable stored for `program`, loaded into `client`; `None` if there is none or
    /// it is unusable (then it is removed, with a warning on stderr).
    pub(crate) fn load(
        &self,
        client: &Arc<Client>,
        program: &str,
        options: &[u8],
        what: &str,
    ) -> Option<Executable> {
        let key = self.key(program, options);
        let name = DiskCache::name_for(&key);
        let path = self.dir.join(format!("{name}.{EXT}"));
        {
            let mut st = crate::shared::lock(&self.warm.state);
            // Being loaded ahead now: wait for it (a stuck preloader is given 10 s).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while st.in_flight.as_deref() == Some(name.as_str()) {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                st = self
                    .warm
                    .settled
                    .wait_timeout(st, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            if let Some((_, exe)) = st.ready.remove(&name).filter(|(stored, _)| *stored == key) {
                drop(st);
                let _ = file_for_touch(&path).and_then(|f| f.set_modified(SystemTime::now()));
                self.note_used(&name);
                return Some(exe);
            }
            st.claimed.insert(name.clone());
        }
        let file = match open_regular(&path, fs::OpenOptions::new().read(true)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            file => file.map_err(BadEntry::Io),
        };
        match file
            .and_then(|mut f| read_entry(&mut f, &key))
            .and_then(|bytes| client.deserialize(&bytes).map_err(BadEntry::Load))
        {
            Ok(exe) => {
                // Mark it recently used, for eviction (best effort).
                let _ = file_for_touch(&path).and_then(|f| f.set_modified(SystemTime::now()));
                self.note_used(&name);
                Some(exe)
            }
            Err(why) => {
                eprintln!(
                    "eager: warning: ignoring compile cache entry {} for {what}: {why}; recompiling",
                    path.display()
                );
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes `exe` (compiled from `program`) atomically; evicts old entries past the bound.
    /// A failure warns once and turns writing off for the process: the cache is an
    /// optimisation, and a read-only or full dir would fail every compile the same way.
    pub(crate) fn store(&self, exe: &Executable, program: &str, options: &[u8], what: &str) {
        if self.writes_off.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.try_store(exe, program, options) {
            if !self.writes_off.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "eager: warning: cannot write to the compile cache in {} ({e}, writing the entry for {what}): \
                     compiled programs are not stored for the rest of this process (entries there still load)",
                    self.dir.display()
                );
            }
        }
    }

    fn try_store(&self, exe: &Executable, program: &str, options: &[u8]) -> std::io::Result<()> {
        let payload = exe.serialize().map_err(std::io::Error::other)?;
        let key = self.key(program, options);
        fs::create_dir_all(&self.dir)?;
        let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(&self.dir)?;
        {
            let f = tmp.as_file_mut();
            f.write_all(MAGIC)?;
            f.write_all(&(key.len() as u64).to_le_bytes())?;
            f.write_all(&key)?;
            f.write_all(&(payload.len() as u64).to_le_bytes())?;
            f.write_all(&Sha256::digest(&payload))?;
            f.write_all(&payload)?;
        }
        // Rename is atomic: a reader sees the old entry, no entry or the whole new one.
        tmp.persist(self.path_for(&key)).map_err(|e| e.error)?;
        self.note_used(&DiskCache::name_for(&key));
        let written = (MAGIC.len() + 16 + key.len() + 32 + payload.len()) as u64;
        self.counted.call_once(|| {
            self.estimate.store(scan(&self.dir).iter().map(|e| e.1).sum(), Ordering::Relaxed);
        });
        if self.estimate.fetch_add(written, Ordering::Relaxed) + written > self.max_bytes {
            self.evict();
        }
        Ok(())
    }

    /// Removes least recently used entries until the cache is under 90% of its bound.
    fn evict(&self) {
        let mut entries = scan(&self.dir);
        entries.sort_by_key(|e| e.2);
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        let target = self.max_bytes / 10 * 9;
        for (path, size, _) in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
        self.estimate.store(total, Ordering::Relaxed);
    }
}

/// The file to set the modification time on (opened for writing, as `set_modified` needs).
fn file_for_touch(path: &Path) -> std::io::Result<File> {
    open_regular(path, fs::OpenOptions::new().append(true))
}

/// Opens `path` as `options` say, only if it is a regular file: never through a symbolic
/// link, and never blocking (a FIFO in an entry's or the log's place would hang the open, or
/// the read, for good).
fn open_regular(path: &Path, options: &mut fs::OpenOptions) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    Ok(file)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads and checks one entry; returns the serialized executable.
fn read_entry(file: &mut File, key: &[u8]) -> Result<Vec<u8>, BadEntry> {
    let (stored, payload) = read_any_entry(file)?;
    if stored != key {
        return Err(BadEntry::Key);
    }
    Ok(payload)
}

/// Reads one entry and checks its format and checksum; returns its key and serialized
/// executable.
fn read_any_entry(file: &mut File) -> Result<(Vec<u8>, Vec<u8>), BadEntry> {
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    let mut rest = data.as_slice();
    let mut take = |n: usize| -> Result<&[u8], BadEntry> {
        if rest.len() < n {
            return Err(BadEntry::Truncated);
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    if take(MAGIC.len()).map_err(|_| BadEntry::Format)? != MAGIC {
        return Err(BadEntry::Format);
    }
    let key_len = u64::from_le_bytes(take(8)?.try_into().unwrap()) as usize;
    let key = take(key_len)?.to_vec();
    let len = u64::from_le_bytes(take(8)?.try_into().unwrap()) as usize;
    let sum = take(32)?.to_vec();
    let payload = take(len)?;
    if Sha256::digest(payload).as_slice() != sum.as_slice() {
        return Err(BadEntry::Checksum);
    }
    Ok((key, payload.to_vec()))
}

/// Removes every entry (with stray temp files and the logs of entries used) from the cache
/// dir; returns how many entries went. Works whether or not a runtime has started.
pub fn clear() -> std::io::Result<usize> {
    let Some(dir) = configured_dir() else { return Ok(0) };
    let Ok(entries) = fs::read_dir(&dir) else { return Ok(0) };
    let mut removed = 0;
    for e in entries.filter_map(|e| e.ok()) {
        let p = e.path();
        let name = e.file_name();
        let is_entry = p.extension().is_some_and(|x| x == EXT);
        let name = name.to_string_lossy();
        let is_log = name.starts_with("used-") && name.ends_with(".log");
        if is_entry || is_log || name.starts_with(".tmp-") {
            fs::remove_file(&p)?;
            removed += is_entry as usize;
        }
    }
    Ok(removed)
}

/// What is on disk (entries and bytes), whether or not a runtime has started.
pub fn stats() -> DiskStats {
    let max_bytes = configured_max_bytes();
    let Some(dir) = configured_dir() else { return DiskStats { max_bytes, ..Default::default() } };
    let entries = scan(&dir);
    DiskStats { entries: entries.len(), bytes: entries.iter().map(|e| e.1).sum(), dir, max_bytes }
}

/// Entries in `dir`: (path, size, last used).
fn scan(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let Ok(dir) = fs::read_dir(dir) else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == EXT))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((e.path(), m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
        })
        .collect()
}

/// Whether the persistent cache is on (`EAGER_COMPILE_CACHE` not `off`).
pub fn is_enabled() -> bool {
    configured_dir().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key holds the compile options, NaN-propagating min/max flag included: executables
    /// compiled without it are not loaded for programs compiled with it.
    #[test]
    fn the_key_holds_the_compile_options() {
        let cache = DiskCache {
            dir: PathBuf::from("cache"),
            identity: "plugin".into(),
            max_bytes: 0,
            estimate: AtomicU64::new(0),
            counted: std::sync::Once::new(),
            log: PathBuf::from("cache/used.log"),
            logged: Mutex::default(),
            warm: Warm::default(),
            writes_off: AtomicBool::new(false),
        };
        let options = &crate::pjrt::compile_options(crate::pjrt::Tier::Optimized, None);
        let key = cache.key("module", options);
        let flag = b"xla_cpu_enable_fast_min_max";
        assert!(key.windows(flag.len()).any(|w| w == flag));
        // The options before the override: the basics alone.
        let without = &options[..options.len() - 35];
        assert_eq!(without, b"\x1a\x04\x20\x01\x28\x01\x20\x01");
        assert_ne!(cache.path_for(&key), cache.path_for(&cache.key("module", without)));
        // The tiers are different programs.
        let quick = &crate::pjrt::compile_options(crate::pjrt::Tier::Quick, None);
        assert_ne!(cache.path_for(&key), cache.path_for(&cache.key("module", quick)));
    }
}
