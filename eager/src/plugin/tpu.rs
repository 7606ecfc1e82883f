//! The TPU target: PyPI `libtpu`, set up as JAX's `cloud_tpu_init` sets it up on a Cloud TPU VM.
//!
//! - Chips are counted as JAX's `hardware_utils` counts them: each PCI device under
//!   `<sysfs>/bus/pci/devices/` with Google's vendor id and a known TPU device id is one chip,
//!   and the device id tells the generation. `EAGER_SYSFS_ROOT` (default `/sys`) moves the
//!   sysfs root, so that tests can simulate machines.
//! - libtpu is loaded only where chips are found, or where the user asks to try it anyway
//!   (`EAGER_TPU_SKIP_HARDWARE_CHECK`). Only in that no-chip case is `TPU_SKIP_MDS_QUERY` set
//!   (off GCE, libtpu would wait minutes on the metadata server); on a TPU VM libtpu reads the
//!   accelerator type and the slice's topology from it. A variable the user set is never changed.
//! - On v5e and newer, a warning (once per process) where transparent hugepages are not `always`.
//! - libtpu lets one process own a host's TPUs (a `lockf` lock on `/tmp/libtpu_lockfile`):
//!   before loading, a lock held by another process becomes [`PluginError::TpuInUse`], naming it.

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{PluginError, Target};

pub(crate) static TARGET: Target = Target {
    package: "libtpu",
    fetch_version: None,
    file_in_package: "libtpu/libtpu.so",
    hardware,
    prepare_env,
    client_options: Vec::new,
    start_timeout: Duration::from_secs(120),
};

/// Moves the sysfs root (default `/sys`) for PCI devices and the hugepages setting.
pub const SYSFS_ROOT_ENV: &str = "EAGER_SYSFS_ROOT";
/// Set (any value): try libtpu even where no TPU chip is found.
pub const SKIP_HARDWARE_CHECK_ENV: &str = "EAGER_TPU_SKIP_HARDWARE_CHECK";
/// The one lockfile to check instead of libtpu's own locations.
pub const LOCKFILE_ENV: &str = "EAGER_TPU_LOCKFILE";

/// Google's PCI vendor id, as sysfs writes it.
const GOOGLE_PCI_VENDOR: &str = "0x1ae0";

/// A TPU generation. The order is JAX's `TpuVersion` order (v5p before v5e), which its
/// "v5e and newer" test relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TpuGeneration {
    /// v2 and v3 share one PCI device id.
    V2V3,
    /// A generation with no public name.
    Plc,
    /// TPU v4.
    V4,
    /// TPU v5p.
    V5p,
    /// TPU v5e.
    V5e,
    /// TPU v6e (Trillium).
    V6e,
    /// TPU7x.
    Tpu7x,
    /// TPU8i.
    Tpu8i,
    /// TPU8t.
    Tpu8t,
}

/// PCI device id → generation, as in JAX's `hardware_utils._TPU_PCI_DEVICE_IDS`.
const PCI_DEVICE_IDS: [(&str, TpuGeneration); 9] = [
    ("0x0027", TpuGeneration::V2V3),
    ("0x0056", TpuGeneration::Plc),
    ("0x005e", TpuGeneration::V4),
    ("0x0062", TpuGeneration::V5p),
    ("0x0063", TpuGeneration::V5e),
    ("0x006f", TpuGeneration::V6e),
    ("0x0076", TpuGeneration::Tpu7x),
    ("0x0083", TpuGeneration::Tpu8i),
    ("0x007c", TpuGeneration::Tpu8t),
];

impl TpuGeneration {
    /// The generation of a PCI device id such as `0x005e`, if it is a TPU's.
    pub fn from_pci_device_id(id: &str) -> Option<TpuGeneration> {
        let id = id.trim().to_ascii_lowercase();
        PCI_DEVICE_IDS.iter().find(|(known, _)| *known == id).map(|(_, g)| *g)
    }

    /// The PCI device id of this generation.
    pub fn pci_device_id(self) -> &'static str {
        PCI_DEVICE_IDS.iter().find(|(_, g)| *g == self).map(|(id, _)| *id).unwrap_or("?")
    }

    /// Short name, as JAX's `TpuVersion` names it (`v4`, `v5e`, `tpu7x`; `v2/v3` for 0x0027).
    pub fn name(self) -> &'static str {
        match self {
            TpuGeneration::V2V3 => "v2/v3",
            TpuGeneration::Plc => "plc",
            TpuGeneration::V4 => "v4",
            TpuGeneration::V5p => "v5p",
            TpuGeneration::V5e => "v5e",
            TpuGeneration::V6e => "v6e",
            TpuGeneration::Tpu7x => "tpu7x",
            TpuGeneration::Tpu8i => "tpu8i",
            TpuGeneration::Tpu8t => "tpu8t",
        }
    }

    /// Whether transparent hugepages speed up its runtime's start (JAX: v5e and newer).
    pub fn wants_hugepages(self) -> bool {
        self >= TpuGeneration::V5e
    }
}

impl fmt::Display for TpuGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name().strip_prefix("tpu") {
            Some(n) => write!(f, "TPU{n}"),
            None => write!(f, "TPU {}", self.name()),
        }
    }
}

/// The TPU chips found on the PCI bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpuChips {
    /// The newest generation among them (a host holds one generation).
    pub generation: TpuGeneration,
    /// One per PCI device, as JAX counts them.
    pub count: usize,
    /// Their PCI addresses (`0000:00:04.0`), sorted.
    pub pci_addresses: Vec<String>,
}

impl fmt::Display for TpuChips {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.count == 1 { "" } else { "s" };
        write!(
            f,
            "{} {} chip{s} on the PCI bus (device id {}: {})",
            self.count,
            self.generation,
            self.generation.pci_device_id(),
            self.pci_addresses.join(", ")
        )
    }
}

/// Why no TPU chip was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoTpu {
    #[error("cannot list PCI devices in {}: {msg}", dir.display())]
    /// The PCI device directory could not be listed.
    NoPciBus {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        msg: String,
    },
    #[error("no PCI device with Google's vendor id {GOOGLE_PCI_VENDOR} in {}", dir.display())]
    /// No PCI device has Google's vendor id.
    NoGoogleDevice {
        /// The directory searched.
        dir: PathBuf,
    },
    #[error(
        "the Google PCI devices in {} are not TPU chips (device ids {}; 0x0042 is the gVNIC \
         network card of any GCE VM)",
        dir.display(),
        ids.join(", ")
    )]
    /// Google PCI devices were found, but none is a TPU chip.
    NotTpu {
        /// The directory searched.
        dir: PathBuf,
        /// Their device ids.
        ids: Vec<String>,
    },
}

/// The sysfs root: `$EAGER_SYSFS_ROOT`, else `/sys`.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os(SYSFS_ROOT_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/sys"))
}

/// The TPU chips of this machine (under [`sysfs_root`]), or why there are none.
pub fn tpu_chips() -> Result<TpuChips, NoTpu> {
    detect_tpu_chips(&sysfs_root())
}

/// Counts the TPU chips among the PCI devices under `sysfs`: a device whose `vendor` is
/// Google's and whose `device` id is a TPU generation's is one chip.
pub fn detect_tpu_chips(sysfs: &Path) -> Result<TpuChips, NoTpu> {
    let dir = sysfs.join("bus/pci/devices");
    let entries = fs::read_dir(&dir).map_err(|e| NoTpu::NoPciBus { dir: dir.clone(), msg: e.to_string() })?;
    let mut generation = None;
    let mut pci_addresses = Vec::new();
    let mut other_ids = Vec::new();
    for entry in entries.flatten() {
        let device = entry.path();
        let read = |file: &str| fs::read_to_string(device.join(file)).map(|s| s.trim().to_ascii_lowercase());
        if read("vendor").ok().as_deref() != Some(GOOGLE_PCI_VENDOR) {
            continue;
        }
        let id = read("device").unwrap_or_else(|_| "unreadable".into());
        match TpuGeneration::from_pci_device_id(&id) {
            Some(g) => {
                generation = generation.max(Some(g));
                pci_addresses.push(entry.file_name().to_string_lossy().into_owned());
            }
            None => other_ids.push(id),
        }
    }
    match generation {
        Some(generation) => {
            pci_addresses.sort();
            Ok(TpuChips { generation, count: pci_addresses.len(), pci_addresses })
        }
        None if other_ids.is_empty() => Err(NoTpu::NoGoogleDevice { dir }),
        None => {
            other_ids.sort();
            other_ids.dedup();
            Err(NoTpu::NotTpu { dir, ids: other_ids })
        }
    }
}

/// One line for `:devices`: the chips found and the hugepages setting where it matters, or why
/// there are none.
pub fn describe_chips() -> String {
    match tpu_chips() {
        Ok(chips) => {
            let thp = thp_mode(&sysfs_root());
            match hugepages_warning(chips.generation, thp.as_deref()) {
                Some(_) => format!(
                    "tpu: {chips}; transparent hugepages {} (not `always`: slower runtime start)",
                    thp.as_deref().unwrap_or("unavailable")
                ),
                None => format!("tpu: {chips}"),
            }
        }
        Err(why) if std::env::var_os(SKIP_HARDWARE_CHECK_ENV).is_some() => {
            format!("tpu: no TPU chip found ({why}); trying libtpu anyway ({SKIP_HARDWARE_CHECK_ENV} is set)")
        }
        Err(why) => format!("tpu: no TPU chip found: {why}"),
    }
}

fn hardware() -> Result<(), String> {
    match tpu_chips() {
        Ok(_) => Ok(()),
        Err(_) if std::env::var_os(SKIP_HARDWARE_CHECK_ENV).is_some() => Ok(()),
        Err(why) => Err(format!(
            "no TPU: {why}; use the cpu device, or set {SKIP_HARDWARE_CHECK_ENV}=1 to try libtpu anyway"
        )),
    }
}

/// The variables to set before libtpu loads, given what was found and the current environment
/// (`current`): each only where the user has not set it.
pub fn tpu_env_plan(
    chips: &Result<TpuChips, NoTpu>,
    current: impl Fn(&str) -> Option<String>,
) -> Vec<(&'static str, &'static str)> {
    let wanted: &[(&'static str, &'static str)] = match chips {
        // No chip (the user asked to try anyway): off GCE the metadata query hangs for minutes.
        Err(_) => &[("TPU_SKIP_MDS_QUERY", "1")],
        // A TPU VM: libtpu reads the slice from the metadata server; gRPC kept quiet as JAX does.
        Ok(_) => &[("GRPC_VERBOSITY", "ERROR")],
    };
    wanted.iter().filter(|(name, _)| current(name).is_none()).copied().collect()
}

fn prepare_env() {
    let chips = tpu_chips();
    let current = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    for (name, value) in tpu_env_plan(&chips, current) {
        std::env::set_var(name, value);
    }
    if let Ok(chips) = &chips {
        let warning = hugepages_warning(chips.generation, thp_mode(&sysfs_root()).as_deref());
        static WARNED: AtomicBool = AtomicBool::new(false);
        if let Some(w) = warning {
            if !WARNED.swap(true, Ordering::Relaxed) {
                eprintln!("eager: warning: {w}");
            }
        }
    }
}

/// The transparent-hugepages mode the kernel has selected (the bracketed word of
/// `<sysfs>/kernel/mm/transparent_hugepage/enabled`: `always`, `madvise`, `never`), if readable.
pub fn thp_mode(sysfs: &Path) -> Option<String> {
    let text = fs::read_to_string(sysfs.join("kernel/mm/transparent_hugepage/enabled")).ok()?;
    let selected = match (text.find('['), text.find(']')) {
        (Some(open), Some(close)) if open < close => &text[open + 1..close],
        _ => text.trim(),
    };
    Some(selected.to_string())
}

/// The warning for a `generation` whose runtime would start faster with transparent hugepages,
/// where they are not `always` (JAX's test); `None` where it does not apply.
pub fn hugepages_warning(generation: TpuGeneration, thp_mode: Option<&str>) -> Option<String> {
    if !generation.wants_hugepages() || thp_mode == Some("always") {
        return None;
    }
    let now = thp_mode.map_or_else(|| "unavailable".to_string(), |m| format!("`{m}`"));
    Some(format!(
        "transparent hugepages are {now}, not `always`: on {generation} (and any v5e or newer) the TPU \
         runtime starts and shuts down much faster with them. Enable them in the VM image: \
         sudo sh -c \"echo always > /sys/kernel/mm/transparent_hugepage/enabled\""
    ))
}

/// A process holding a TPU lockfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// `None` where the holder is outside this PID namespace (another container).
    pub pid: Option<u32>,
    /// Its command line, where `/proc` shows it.
    pub command: Option<String>,
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.pid, &self.command) {
            (Some(pid), Some(cmd)) => write!(f, "process {pid} (`{cmd}`)"),
            (Some(pid), None) => write!(f, "process {pid}"),
            (None, _) => write!(f, "a process this one cannot see (another container or PID namespace)"),
        }
    }
}

impl LockHolder {
    /// How to free the TPUs from this holder of `lockfile`.
    pub fn how_to_free(&self, lockfile: &Path) -> String {
        match self.pid {
            Some(pid) => format!(
                "stop that process (another eager kernel or REPL is the usual one: shut it down, or \
                 `kill {pid}`), then try again"
            ),
            None => format!(
                "stop that process (`sudo lsof {}` names it on the host), then try again",
                lockfile.display()
            ),
        }
    }
}

/// The lockfiles libtpu may take, in its order: `/tmp/libtpu_lockfile`, then, where that cannot
/// be opened, `/tmp/libtpu_lock_<uid>/libtpu_lockfile` and `~/.libtpu_lockfile`.
/// `$EAGER_TPU_LOCKFILE` replaces the list.
pub fn tpu_lockfiles() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os(LOCKFILE_ENV) {
        return vec![PathBuf::from(p)];
    }
    let mut paths = vec![PathBuf::from("/tmp/libtpu_lockfile")];
    // /proc/self belongs to this process's user: its uid without a libc call.
    if let Ok(me) = fs::metadata("/proc/self") {
        paths.push(PathBuf::from(format!("/tmp/libtpu_lock_{}/libtpu_lockfile", me.uid())));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        paths.push(Path::new(&home).join(".libtpu_lockfile"));
    }
    paths
}

/// Whether libtpu takes its one-process lock under the environment `current`: not where it is
/// told to load regardless (`TPU_LOAD_LIBRARY=1`, `ALLOW_MULTIPLE_LIBTPU_LOAD`), not to load at
/// all, or where this process uses a subset of the host's chips (`TPU_CHIPS_PER_PROCESS_BOUNDS`
/// other than `2,2,1`).
pub fn libtpu_takes_lock(current: impl Fn(&str) -> Option<String>) -> bool {
    if matches!(current("TPU_LOAD_LIBRARY").as_deref(), Some("0" | "1")) {
        return false;
    }
    let allow_multiple = match current("ALLOW_MULTIPLE_LIBTPU_LOAD").as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => v.trim().parse::<i64>().is_ok_and(|n| n != 0),
    };
    if allow_multiple {
        return false;
    }
    let bounds = current("TPU_CHIPS_PER_PROCESS_BOUNDS")
        .filter(|b| !b.is_empty())
        .or_else(|| current("TPU_CHIPS_PER_HOST_BOUNDS"))
        .unwrap_or_default();
    bounds.is_empty() || bounds == "2,2,1"
}

/// The other process holding a lock on `lockfile`, from `/proc/locks` (which shows `lockf`,
/// `fcntl` and `flock` locks alike); `None` if the file is missing or no other process holds it.
/// The file is only `stat`ed: closing a descriptor of it would drop this process's own lock.
pub fn tpu_lock_holder(lockfile: &Path) -> Option<LockHolder> {
    let meta = fs::metadata(lockfile).ok()?;
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let pid = lock_holder_pid(&locks, dev_major_minor(meta.dev()), meta.ino(), std::process::id())?;
    let pid = u32::try_from(pid).ok().filter(|p| *p > 0);
    Some(LockHolder { pid, command: pid.and_then(command_line) })
}

/// A `dev_t` split as the kernel prints it in `/proc/locks` (glibc's encoding).
fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// The pid of the first lock in `/proc/locks` text `locks` on the file `(major, minor)`/`inode`
/// that is not `own_pid`'s and not a waiter's (`->`); 0 or -1 where the pid is not visible.
fn lock_holder_pid(locks: &str, (major, minor): (u64, u64), inode: u64, own_pid: u32) -> Option<i64> {
    locks.lines().find_map(|line| {
        // `1: POSIX  ADVISORY  WRITE 1837 fe:00:10011065 0 EOF`
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1] == "->" {
            return None;
        }
        let pid: i64 = fields[4].parse().ok()?;
        let mut id = fields[5].split(':');
        let file = (
            u64::from_str_radix(id.next()?, 16).ok()?,
            u64::from_str_radix(id.next()?, 16).ok()?,
            id.next()?.parse::<u64>().ok()?,
        );
        (file == (major, minor, inode) && pid != i64::from(own_pid)).then_some(pid)
    })
}

/// `/proc/<pid>/cmdline` on one line, at most 200 characters (else its `comm`).
fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 200 {
        line = line.chars().take(199).chain(['…']).collect();
    }
    if !line.is_empty() {
        return Some(line);
    }
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim().to_string()).filter(|c| !c.is_empty())
}

/// Before loading libtpu: the TPUs held by another process is [`PluginError::TpuInUse`].
pub fn check_tpu_lock() -> Result<(), PluginError> {
    let current = |name: &str| std::env::var(name).ok();
    if !libtpu_takes_lock(current) {
        return Ok(());
    }
    for lockfile in tpu_lockfiles() {
        if let Some(holder) = tpu_lock_holder(&lockfile) {
            return Err(PluginError::TpuInUse { holder, lockfile });
        }
    }
    Ok(())
}

/// libtpu refused to start with ABORTED (`msg`), its code for the one-process lock: who holds
/// a lockfile, or that an existing lockfile is held by nobody; `None` where there is no lockfile.
pub fn explain_lock_refusal(msg: &str) -> Option<PluginError> {
    let lockfiles: Vec<PathBuf> = tpu_lockfiles().into_iter().filter(|p| p.exists()).collect();
    if let Some((holder, lockfile)) =
        lockfiles.iter().find_map(|p| tpu_lock_holder(p).map(|h| (h, p.clone())))
    {
        return Some(PluginError::TpuInUse { holder, lockfile });
    }
    let lockfile = lockfiles.into_iter().next()?;
    Some(PluginError::TpuLockStale { lockfile, msg: msg.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCKS: &str = "\
1: POSIX  ADVISORY  WRITE 4242 fe:00:10011065 0 EOF
1: -> POSIX  ADVISORY  WRITE 5151 fe:00:10011065 0 EOF
2: FLOCK  ADVISORY  WRITE 77 00:1b:10011065 0 EOF
3: OFDLCK ADVISORY  READ  -1 fe:00:99 0 EOF
";

    #[test]
    fn proc_locks_lines_name_the_holder_of_that_file_only() {
        assert_eq!(lock_holder_pid(LOCKS, (0xfe, 0), 10011065, 1), Some(4242));
        // The same inode on another device is another file.
        assert_eq!(lock_holder_pid(LOCKS, (0, 0x1b), 10011065, 1), Some(77));
        assert_eq!(lock_holder_pid(LOCKS, (0xfe, 0), 12345, 1), None);
        // Our own lock is no conflict, and a waiter (`->`) holds nothing.
        assert_eq!(lock_holder_pid(LOCKS, (0xfe, 0), 10011065, 4242), None);
        assert_eq!(lock_holder_pid(LOCKS, (0xfe, 0), 99, 1), Some(-1));
    }

    #[test]
    fn dev_t_splits_as_the_kernel_prints_it() {
        assert_eq!(dev_major_minor(0xfe00), (0xfe, 0));
        assert_eq!(dev_major_minor(0x1b), (0, 0x1b));
        assert_eq!(dev_major_minor(0x0000_1000_0100_2345), (0x1023, 0x1045));
    }

    #[test]
    fn the_generation_order_is_jaxs() {
        assert!(TpuGeneration::V5p < TpuGeneration::V5e);
        assert!(!TpuGeneration::V5p.wants_hugepages() && TpuGeneration::V5e.wants_hugepages());
        assert_eq!(TpuGeneration::Tpu7x.to_string(), "TPU7x");
        assert_eq!(TpuGeneration::V6e.to_string(), "TPU v6e");
        for (id, g) in PCI_DEVICE_IDS {
            assert_eq!(TpuGeneration::from_pci_device_id(id), Some(g));
            assert_eq!(g.pci_device_id(), id);
        }
        assert_eq!(TpuGeneration::from_pci_device_id("0x0042"), None);
    }
}
