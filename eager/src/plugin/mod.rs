//! Finding and loading a PJRT plugin per device kind. One module per target (`cpu`, `tpu`,
//! `cuda`), each saying "is the hardware here?" and where its plugin lives; the search order
//! is the same for all: explicit path, env var, the per-user cache, an installed pip package,
//! then (CPU only) a download from PyPI into the cache.

mod cpu;
mod cuda;
pub mod tpu;

pub use tpu::{tpu_chips, NoTpu, TpuChips, TpuGeneration};

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::device::DeviceKind;
use crate::pjrt::{Api, Client, LoadError, OptionValue, PjrtError};
use crate::shared::lock;

/// Why no plugin could be had, or it did not start.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("no {kind} device here: {why} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// The machine has no device of the kind.
    NoHardware {
        /// The device kind.
        kind: DeviceKind,
        /// Why none was found.
        why: String,
    },
    #[error("the {kind} plugin path {path} does not exist (from {source_name}) (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// A plugin path given by the user does not exist.
    MissingPath {
        /// The device kind.
        kind: DeviceKind,
        /// The path.
        path: PathBuf,
        /// Where the path came from (the variable or setting).
        source_name: String,
    },
    #[error("no PJRT plugin for {kind} found: not in {cache}, and no pip package `{package}` is installed.\n  Install it with `python3 -m pip install {package}`, or point EAGER_PJRT_PLUGIN_{upper} at the plugin's .so (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// No plugin in the cache and no pip package installed.
    NotFound {
        /// The device kind.
        kind: DeviceKind,
        /// The plugin cache directory searched.
        cache: PathBuf,
        /// The pip package that provides the plugin.
        package: &'static str,
        /// The kind's name upper-cased, for `EAGER_PJRT_PLUGIN_<KIND>`.
        upper: String,
    },
    #[error("fetching the {kind} plugin failed: {msg} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// Fetching the plugin failed.
    Fetch {
        /// The device kind.
        kind: DeviceKind,
        /// What went wrong.
        msg: String,
    },
    #[error("the plugin {path} is for platform {platform:?}, not {kind} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// The plugin is for another platform than the kind asked for.
    WrongPlatform {
        /// The device kind asked for.
        kind: DeviceKind,
        /// The plugin file.
        path: PathBuf,
        /// The platform the plugin reported.
        platform: String,
    },
    #[error("the {kind} plugin did not start within {secs} s (a hung device probe?) (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// The plugin did not start in time.
    Timeout {
        /// The device kind.
        kind: DeviceKind,
        /// Seconds waited.
        secs: u64,
    },
    #[error("the {kind} plugin {path} failed to create a client: {msg} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// The plugin failed to create a client.
    Client {
        /// The device kind.
        kind: DeviceKind,
        /// The plugin file.
        path: PathBuf,
        /// The plugin's message.
        msg: String,
    },
    #[error(
        "the TPU is in use by {holder}: libtpu lets one process own a host's TPUs, and that process \
         holds the lock on {}. To free them: {} (see \"Devices and plugins\" in the guide: docs/src/devices.md)",
        lockfile.display(),
        holder.how_to_free(lockfile)
    )]
    /// Another process owns the host's TPUs.
    TpuInUse {
        /// The process holding the lock.
        holder: tpu::LockHolder,
        /// libtpu's lockfile.
        lockfile: PathBuf,
    },
    #[error(
        "libtpu refused to start ({msg}), and no process holds its lockfile {0}: if no other process \
         uses the TPU, the file is stale: remove it (`rm {0}`) and try again (see \"Devices and plugins\" in the guide: docs/src/devices.md)",
        lockfile.display()
    )]
    /// libtpu refused to start and no process holds its lockfile.
    TpuLockStale {
        /// libtpu's lockfile (stale).
        lockfile: PathBuf,
        /// libtpu's message.
        msg: String,
    },
}

type Result<T> = std::result::Result<T, PluginError>;

/// What differs between device targets.
pub(crate) struct Target {
    /// PyPI package that ships the plugin.
    pub package: &'static str,
    /// Exact version fetched automatically (CPU only).
    pub fetch_version: Option<&'static str>,
    /// The plugin's path inside the package's wheel / site-packages.
    pub file_in_package: &'static str,
    /// `Ok` if the hardware is present, else why not (checked before loading anything).
    pub hardware: fn() -> std::result::Result<(), String>,
    /// Environment the plugin needs before it is loaded.
    pub prepare_env: fn(),
    /// Options for `PJRT_Client_Create`.
    pub client_options: fn() -> Vec<(&'static str, OptionValue)>,
    /// How long plugin initialisation and client creation may take.
    pub start_timeout: Duration,
}

pub(crate) fn target(kind: DeviceKind) -> &'static Target {
    match kind {
        DeviceKind::Cpu => &cpu::TARGET,
        DeviceKind::Tpu => &tpu::TARGET,
        DeviceKind::Cuda => &cuda::TARGET,
    }
}

/// eager's per-user cache dir: `$EAGER_CACHE_DIR`, else `$XDG_CACHE_HOME/eager`, else
/// `~/.cache/eager`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("EAGER_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("eager")
}

/// Where the cached plugin of `kind` lives.
pub fn cached_plugin_path(kind: DeviceKind) -> PathBuf {
    let t = target(kind);
    let file = Path::new(t.file_in_package).file_name().unwrap();
    cache_dir().join("plugins").join(kind.name()).join(file)
}

/// Is `kind`'s hardware present? (`Ok` for CPU.) Cheap; loads nothing.
pub fn hardware_present(kind: DeviceKind) -> std::result::Result<(), String> {
    (target(kind).hardware)()
}

/// What precedes loading `kind`'s plugin: the hardware check, for TPU the check that no other
/// process owns the TPUs, then the environment the plugin needs. Loads nothing.
pub fn prepare(kind: DeviceKind) -> Result<()> {
    let t = target(kind);
    (t.hardware)().map_err(|why| PluginError::NoHardware { kind, why })?;
    if kind == DeviceKind::Tpu {
        tpu::check_tpu_lock()?;
    }
    (t.prepare_env)();
    Ok(())
}

/// PJRT's ABORTED: libtpu's code for "another process owns the TPUs" (codes are stable, texts
/// are not).
const ABORTED: i32 = 10;

/// A TPU start that libtpu aborted, explained from its lockfile; `None` for any other error.
fn explain_tpu_abort(kind: DeviceKind, error: &PjrtError) -> Option<PluginError> {
    if kind != DeviceKind::Tpu || error.code != ABORTED {
        return None;
    }
    tpu::explain_lock_refusal(&error.to_string())
}

/// Finds the plugin of `kind`: `explicit`, `EAGER_PJRT_PLUGIN_<KIND>`, `EAGER_PJRT_PLUGIN`,
/// the cache, an installed pip package; for CPU, fetches it when it is nowhere.
pub fn locate(kind: DeviceKind, explicit: Option<&Path>) -> Result<PathBuf> {
    let upper = kind.name().to_ascii_uppercase();
    let specific = format!("EAGER_PJRT_PLUGIN_{upper}");
    let given = explicit
        .map(|p| (p.to_path_buf(), "the explicit path".to_string()))
        .or_else(|| std::env::var_os(&specific).map(|p| (PathBuf::from(p), specific.clone())))
        .or_else(|| {
            std::env::var_os("EAGER_PJRT_PLUGIN").map(|p| (PathBuf::from(p), "EAGER_PJRT_PLUGIN".to_string()))
        });
    if let Some((path, source_name)) = given {
        if !path.is_file() {
            return Err(PluginError::MissingPath { kind, path, source_name });
        }
        return Ok(path);
    }
    let cached = cached_plugin_path(kind);
    if cached.is_file() {
        return Ok(cached);
    }
    let t = target(kind);
    if let Some(p) = find_in_site_packages(t.file_in_package) {
        return Ok(p);
    }
    if t.fetch_version.is_some() {
        fetch(kind)?;
        return Ok(cached);
    }
    Err(PluginError::NotFound { kind, cache: cached, package: t.package, upper })
}

fn python() -> String {
    std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Looks for `rel` under every entry of Python's `sys.path` (pip installs land there).
fn find_in_site_packages(rel: &str) -> Option<PathBuf> {
    let out = Command::new(python())
        .args(["-c", "import sys; print('\\n'.join(p for p in sys.path if p))"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().map(|dir| Path::new(dir).join(rel)).find(|p| p.is_file())
}

/// Downloads the plugin's wheel with pip, unpacks the `.so` and moves it into the cache.
/// Runs under a file lock: parallel tests and processes fetch once, the others wait.
pub fn fetch(kind: DeviceKind) -> Result<()> {
    let t = target(kind);
    let err = |msg: String| PluginError::Fetch { kind, msg };
    let dest = cached_plugin_path(kind);
    let dir = dest.parent().unwrap();
    fs::create_dir_all(dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
    let lock = File::create(dir.join(".fetch.lock")).map_err(|e| err(format!("lock file: {e}")))?;
    lock.lock().map_err(|e| err(format!("cannot lock {}: {e}", dir.display())))?;
    if dest.is_file() {
        return Ok(()); // another process fetched it while we waited
    }
    let version = t.fetch_version.unwrap_or("");
    let spec = if version.is_empty() { t.package.to_string() } else { format!("{}=={version}", t.package) };
    eprintln!("eager: fetching the PJRT {kind} plugin ({spec} from PyPI) into {} …", dir.display());
    let tmp = tempdir_in(dir).map_err(|e| err(format!("temp dir: {e}")))?;
    let status = Command::new(python())
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(&tmp.0)
        .arg(&spec)
        // pip's report goes to stderr: a program's stdout is its own (eager-serve's first line
        // is the URL a script waits for).
        .stdout(std::io::stderr())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| err(format!("cannot run `{} -m pip`: {e}", python())))?;
    if !status.success() {
        return Err(err(format!("`pip download {spec}` failed ({status})")));
    }
    let wheel = fs::read_dir(&tmp.0)
        .map_err(|e| err(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| err("pip downloaded no wheel".into()))?;
    let part = tmp.0.join("plugin.so.part");
    unpack(&wheel, t.file_in_package, &part)
        .map_err(|e| err(format!("unpacking {}: {e}", wheel.display())))?;
    fs::rename(&part, &dest).map_err(|e| err(format!("moving into {}: {e}", dest.display())))?;
    eprintln!("eager: {kind} plugin ready at {}", dest.display());
    Ok(())
}

/// Extracts `member` of the wheel (a zip) into `out`, with a progress bar, and syncs it.
fn unpack(wheel: &Path, member: &str, out: &Path) -> io::Result<()> {
    let mut zip = zip::ZipArchive::new(File::open(wheel)?).map_err(io::Error::other)?;
    let mut entry = zip.by_name(member).map_err(|e| io::Error::other(format!("{member}: {e}")))?;
    let bar = indicatif::ProgressBar::new(entry.size());
    bar.set_style(
        indicatif::ProgressStyle::with_template("eager: unpacking {msg} {bar:30} {bytes}/{total_bytes}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(Path::new(member).file_name().unwrap().to_string_lossy().into_owned());
    let mut file = File::create(out)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf)?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    file.sync_all()
}

/// A temp dir removed on drop (inside the cache dir, so the final rename is atomic).
struct TempDir(PathBuf);

fn tempdir_in(dir: &Path) -> io::Result<TempDir> {
    let p = dir.join(format!(
        ".fetch-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    ));
    fs::create_dir_all(&p)?;
    Ok(TempDir(p))
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A started plugin: its function table and a client on it.
pub(crate) struct Started {
    pub path: PathBuf,
    pub client: Arc<Client>,
}

/// Checks the hardware, locates, loads, initialises the plugin and creates a client, under
/// the target's watchdog so that a hanging device probe becomes an error.
pub(crate) fn start(kind: DeviceKind, explicit: Option<&Path>) -> crate::Result<Started> {
    let t = target(kind);
    prepare(kind)?;
    let path = locate(kind, explicit)?;
    let (tx, rx) = mpsc::channel();
    let thread_path = path.clone();
    let options = (t.client_options)();
    std::thread::Builder::new()
        .name(format!("eager-start-{kind}"))
        .spawn(move || {
            let r = (|| -> crate::Result<(Arc<Api>, Arc<Client>)> {
                let api = loaded_api(&thread_path).map_err(|e| match &e {
                    crate::Error::Load(LoadError::Initialize { source, .. }) => {
                        explain_tpu_abort(kind, source).map_or(e, Into::into)
                    }
                    _ => e,
                })?;
                let client = Client::create(api.clone(), &options).map_err(|e| {
                    explain_tpu_abort(kind, &e).unwrap_or_else(|| PluginError::Client {
                        kind,
                        path: thread_path.clone(),
                        msg: e.to_string(),
                    })
                })?;
                Ok((api, client))
            })();
            let _ = tx.send(r);
        })
        .expect("spawn plugin start thread");
    let (_api, client) = rx
        .recv_timeout(t.start_timeout)
        .map_err(|_| PluginError::Timeout { kind, secs: t.start_timeout.as_secs() })??;
    if !platform_matches(kind, &client.platform_name) {
        return Err(PluginError::WrongPlatform { kind, path, platform: client.platform_name.clone() }.into());
    }
    Ok(Started { path, client })
}

fn platform_matches(kind: DeviceKind, platform: &str) -> bool {
    let p = platform.to_ascii_lowercase();
    match kind {
        DeviceKind::Cpu => p == "cpu" || p == "host",
        DeviceKind::Tpu => p == "tpu",
        DeviceKind::Cuda => p == "cuda" || p == "gpu",
    }
}

/// Loads and initialises each plugin file once per process (initialising twice is an error).
fn loaded_api(path: &Path) -> crate::Result<Arc<Api>> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Api>>>> = OnceLock::new();
    let mut loaded = lock(LOADED.get_or_init(Default::default));
    let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(api) = loaded.get(&key) {
        return Ok(api.clone());
    }
    let api = Arc::new(Api::load(path)?);
    api.initialize()
        .map_err(|source| crate::pjrt::LoadError::Initialize { path: path.to_path_buf(), source })?;
    loaded.insert(key, api.clone());
    Ok(api)
}
