//! The TPU path on simulated machines: sysfs trees in temp dirs (`EAGER_SYSFS_ROOT`) with no
//! chip, 4 chips of v4, 8 of v5e, 4 of v6e. Pure functions are checked in this process; what
//! changes the environment (`eager::plugin::prepare`) runs in child processes of this test
//! binary (the ignored `child_prepares_tpu`), which report as JSON. Lock holders are real child
//! processes taking `lockf` (libtpu's lock) or `flock` on a temp lockfile. libtpu is never loaded.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use eager::plugin::tpu::{self, LockHolder};
use eager::plugin::{NoTpu, TpuGeneration};
use serde_json::Value;

/// A simulated machine: its sysfs root.
struct Machine {
    dir: tempfile::TempDir,
}

const INTEL: (&str, &str) = ("0x8086", "0x1237");
/// Google's gVNIC network card: Google's vendor id on every GCE VM, but no TPU.
const GVNIC: (&str, &str) = ("0x1ae0", "0x0042");

impl Machine {
    /// PCI devices (vendor, device) at `0000:00:NN.0`, and the hugepages file's text if any.
    fn new(devices: &[(&str, &str)], thp: Option<&str>) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let bus = dir.path().join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        for (i, (vendor, device)) in devices.iter().enumerate() {
            let d = bus.join(format!("0000:00:{:02x}.0", i + 3));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            fs::write(d.join("device"), format!("{device}\n")).unwrap();
        }
        if let Some(text) = thp {
            let mm = dir.path().join("kernel/mm/transparent_hugepage");
            fs::create_dir_all(&mm).unwrap();
            fs::write(mm.join("enabled"), format!("{text}\n")).unwrap();
        }
        Machine { dir }
    }

    /// A GCE VM with `n` TPU chips of PCI device id `id` (plus a host bridge and a gVNIC).
    fn tpu_vm(n: usize, id: &str, thp: &str) -> Machine {
        let mut devices = vec![INTEL, GVNIC];
        devices.extend(std::iter::repeat_n(("0x1ae0", id), n));
        Machine::new(&devices, Some(thp))
    }

    fn no_chip() -> Machine {
        Machine::new(&[INTEL, GVNIC], Some("always [madvise] never"))
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }
}

const THP_OFF: &str = "always [madvise] never";
const THP_ON: &str = "[always] madvise never";

fn v4x4() -> Machine {
    // THP off on purpose: it must not matter before v5e.
    Machine::tpu_vm(4, "0x005e", THP_OFF)
}
fn v5ex8() -> Machine {
    Machine::tpu_vm(8, "0x0063", THP_OFF)
}
fn v6ex4() -> Machine {
    Machine::tpu_vm(4, "0x006f", THP_ON)
}

#[test]
fn chips_are_counted_and_their_generation_told() {
    let cases =
        [(v4x4(), 4, TpuGeneration::V4), (v5ex8(), 8, TpuGeneration::V5e), (v6ex4(), 4, TpuGeneration::V6e)];
    for (machine, count, generation) in cases {
        let chips = tpu::detect_tpu_chips(machine.root()).unwrap();
        assert_eq!((chips.count, chips.generation), (count, generation), "{chips}");
        assert_eq!(chips.pci_addresses.len(), count);
        // The host bridge (0000:00:03.0) and the gVNIC (0000:00:04.0) are not chips.
        assert_eq!(chips.pci_addresses[0], "0000:00:05.0");
        assert!(chips.to_string().starts_with(&format!("{count} {generation} chips")), "{chips}");
    }

    let gce_vm = tpu::detect_tpu_chips(Machine::no_chip().root()).unwrap_err();
    assert!(matches!(&gce_vm, NoTpu::NotTpu { ids, .. } if ids == &["0x0042"]), "{gce_vm}");
    let bare = tpu::detect_tpu_chips(Machine::new(&[INTEL], None).root()).unwrap_err();
    assert!(matches!(bare, NoTpu::NoGoogleDevice { .. }), "{bare}");
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(tpu::detect_tpu_chips(empty.path()), Err(NoTpu::NoPciBus { .. })));
}

#[test]
fn generations_by_pci_device_id_follow_jax() {
    let table = [
        ("0x0027", TpuGeneration::V2V3),
        ("0x005e", TpuGeneration::V4),
        ("0x0062", TpuGeneration::V5p),
        ("0x0063", TpuGeneration::V5e),
        ("0x006f", TpuGeneration::V6e),
        ("0x0076", TpuGeneration::Tpu7x),
        ("0x0083", TpuGeneration::Tpu8i),
        ("0x007c", TpuGeneration::Tpu8t),
    ];
    for (id, generation) in table {
        assert_eq!(TpuGeneration::from_pci_device_id(id), Some(generation), "{id}");
        assert_eq!(TpuGeneration::from_pci_device_id(&id.to_uppercase().replace('X', "x")), Some(generation));
    }
    assert_eq!(TpuGeneration::from_pci_device_id("0x0042"), None);
    // One chip per PCI device, whatever the generation (JAX's rule).
    let m = Machine::tpu_vm(4, "0x0027", THP_OFF);
    let chips = tpu::detect_tpu_chips(m.root()).unwrap();
    assert_eq!((chips.count, chips.generation.name()), (4, "v2/v3"));
}

#[test]
fn the_metadata_query_is_skipped_only_where_no_chip_is_found() {
    let unset = |_: &str| None;
    let names = |plan: Vec<(&'static str, &str)>| plan.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let plan = tpu::tpu_env_plan(&tpu::detect_tpu_chips(Machine::no_chip().root()), unset);
    assert_eq!(plan, vec![("TPU_SKIP_MDS_QUERY", "1")]);
    for machine in [v4x4(), v5ex8(), v6ex4()] {
        let plan = tpu::tpu_env_plan(&tpu::detect_tpu_chips(machine.root()), unset);
        assert!(!names(plan.clone()).contains(&"TPU_SKIP_MDS_QUERY"), "{plan:?}");
        // No topology variable is set: libtpu reads the slice from the metadata server.
        assert!(plan.iter().all(|(n, _)| !n.starts_with("TPU_")), "{plan:?}");
    }
    // A value the user set is kept.
    let user = |n: &str| (n == "TPU_SKIP_MDS_QUERY").then(|| "true".to_string());
    let plan = tpu::tpu_env_plan(&tpu::detect_tpu_chips(Machine::no_chip().root()), user);
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn hugepages_warning_only_from_v5e_on_and_where_not_always() {
    assert_eq!(tpu::thp_mode(v5ex8().root()).as_deref(), Some("madvise"));
    assert_eq!(tpu::thp_mode(v6ex4().root()).as_deref(), Some("always"));
    assert_eq!(tpu::thp_mode(Machine::new(&[], None).root()), None);

    use TpuGeneration::*;
    for generation in [V2V3, V4, V5p] {
        for mode in [None, Some("madvise"), Some("never"), Some("always")] {
            assert_eq!(tpu::hugepages_warning(generation, mode), None, "{generation} {mode:?}");
        }
    }
    for generation in [V5e, V6e, Tpu7x, Tpu8t] {
        assert_eq!(tpu::hugepages_warning(generation, Some("always")), None);
        let w = tpu::hugepages_warning(generation, Some("madvise")).expect("a warning");
        assert!(w.contains("`madvise`"), "{w}");
        assert!(w.contains("echo always > /sys/kernel/mm/transparent_hugepage/enabled"), "{w}");
        assert!(tpu::hugepages_warning(generation, None).unwrap().contains("unavailable"));
    }
}

#[test]
fn libtpu_takes_its_lock_unless_told_otherwise() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |n: &str| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string())
    };
    assert!(tpu::libtpu_takes_lock(env(&[])));
    assert!(tpu::libtpu_takes_lock(env(&[("ALLOW_MULTIPLE_LIBTPU_LOAD", "false")])));
    assert!(tpu::libtpu_takes_lock(env(&[("ALLOW_MULTIPLE_LIBTPU_LOAD", "0")])));
    assert!(!tpu::libtpu_takes_lock(env(&[("ALLOW_MULTIPLE_LIBTPU_LOAD", "true")])));
    assert!(!tpu::libtpu_takes_lock(env(&[("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")])));
    assert!(!tpu::libtpu_takes_lock(env(&[("TPU_LOAD_LIBRARY", "1")])));
    // The whole host's chips (2,2,1) is the default; a subset lets processes share the host.
    assert!(tpu::libtpu_takes_lock(env(&[("TPU_CHIPS_PER_PROCESS_BOUNDS", "2,2,1")])));
    assert!(!tpu::libtpu_takes_lock(env(&[("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")])));
    assert!(!tpu::libtpu_takes_lock(env(&[("TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1")])));
}

// ---- child processes -----------------------------------------------------------------------

const CHILD_ENV: &str = "EAGER_TEST_TPU_CHILD";
const HOLD_ENV: &str = "EAGER_TEST_TPU_HOLD";

/// Runs in a child process only: `prepare(Tpu)` twice (the hugepages warning must show once),
/// then reports the results and the environment libtpu would see.
#[test]
#[ignore = "runs as a child process of the other tests here"]
fn child_prepares_tpu() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    use eager::plugin::{self, PluginError};
    let result = |r: Result<(), PluginError>| match r {
        Ok(()) => serde_json::json!({ "ok": true }),
        Err(e) => serde_json::json!({
            "ok": false, "in_use": matches!(e, PluginError::TpuInUse { .. }), "error": e.to_string(),
        }),
    };
    let first = result(plugin::prepare(eager::DeviceKind::Tpu));
    let second = result(plugin::prepare(eager::DeviceKind::Tpu));
    let var = |n: &str| std::env::var(n).ok();
    let refusal = tpu::explain_lock_refusal("PJRT PJRT_Plugin_Initialize failed (ABORTED): in use");
    let report = serde_json::json!({
        "first": first,
        "second": second,
        "hardware": plugin::hardware_present(eager::DeviceKind::Tpu).err(),
        "describe": tpu::describe_chips(),
        "refusal": refusal.map(|e| e.to_string()),
        "env": {
            "TPU_SKIP_MDS_QUERY": var("TPU_SKIP_MDS_QUERY"),
            "GRPC_VERBOSITY": var("GRPC_VERBOSITY"),
            "TPU_ACCELERATOR_TYPE": var("TPU_ACCELERATOR_TYPE"),
            "TPU_WORKER_ID": var("TPU_WORKER_ID"),
        },
    });
    println!("CHILD_REPORT {report}");
}

/// What a `child_prepares_tpu` run reported, and its stderr.
struct Report {
    json: Value,
    stderr: String,
}

impl Report {
    fn env(&self, name: &str) -> Option<&str> {
        self.json["env"][name].as_str()
    }
    fn ok(&self) -> bool {
        self.json["first"]["ok"] == true
    }
    fn error(&self) -> &str {
        self.json["first"]["error"].as_str().unwrap_or("")
    }
    fn warnings(&self) -> usize {
        self.stderr.matches("transparent hugepages are").count()
    }
}

/// Runs `child_prepares_tpu` on `machine`, with `lockfile` as the only lockfile and a clean
/// TPU environment plus `extra`.
fn prepare_in_child(machine: &Machine, lockfile: &Path, extra: &[(&str, &str)]) -> Report {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_prepares_tpu", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env(tpu::SYSFS_ROOT_ENV, machine.root())
        .env(tpu::LOCKFILE_ENV, lockfile);
    for name in [
        tpu::SKIP_HARDWARE_CHECK_ENV,
        "TPU_SKIP_MDS_QUERY",
        "GRPC_VERBOSITY",
        "TPU_ACCELERATOR_TYPE",
        "TPU_WORKER_ID",
        "TPU_LOAD_LIBRARY",
        "ALLOW_MULTIPLE_LIBTPU_LOAD",
        "TPU_CHIPS_PER_PROCESS_BOUNDS",
        "TPU_CHIPS_PER_HOST_BOUNDS",
    ] {
        cmd.env_remove(name);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD_REPORT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no report:\n{stdout}\n{stderr}"));
    Report { json: serde_json::from_str(line).unwrap(), stderr }
}

/// A lockfile path no process holds (it does not exist).
fn free_lockfile() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libtpu_lockfile");
    (dir, path)
}

#[test]
fn prepare_sets_the_metadata_skip_only_for_no_chip_with_the_override() {
    let (_d, lockfile) = free_lockfile();
    let no_chip = Machine::no_chip();

    let refused = prepare_in_child(&no_chip, &lockfile, &[]);
    assert!(!refused.ok());
    let why = refused.error();
    assert!(why.contains("no TPU: ") && why.contains("0x0042"), "{why}");
    assert!(refused.json["hardware"].as_str().unwrap().starts_with("no TPU: "));
    assert!(refused.json["describe"].as_str().unwrap().starts_with("tpu: no TPU chip found"));
    assert_eq!(refused.env("TPU_SKIP_MDS_QUERY"), None);

    let forced = prepare_in_child(&no_chip, &lockfile, &[(tpu::SKIP_HARDWARE_CHECK_ENV, "1")]);
    assert!(forced.ok(), "{}", forced.error());
    assert_eq!(forced.env("TPU_SKIP_MDS_QUERY"), Some("1"));
    assert!(forced.json["describe"].as_str().unwrap().contains("trying libtpu anyway"));

    for (machine, line) in [
        (v4x4(), "tpu: 4 TPU v4 chips"),
        (v5ex8(), "tpu: 8 TPU v5e chips"),
        (v6ex4(), "tpu: 4 TPU v6e chips"),
    ] {
        let r = prepare_in_child(&machine, &lockfile, &[]);
        assert!(r.ok(), "{}", r.error());
        assert_eq!(r.json["hardware"], Value::Null);
        assert_eq!(r.env("TPU_SKIP_MDS_QUERY"), None, "{line}");
        assert_eq!(r.env("GRPC_VERBOSITY"), Some("ERROR"));
        assert!(r.json["describe"].as_str().unwrap().starts_with(line), "{}", r.json["describe"]);
        // Never on a machine with chips, even with the override.
        let r = prepare_in_child(&machine, &lockfile, &[(tpu::SKIP_HARDWARE_CHECK_ENV, "1")]);
        assert_eq!(r.env("TPU_SKIP_MDS_QUERY"), None, "{line}");
    }
}

#[test]
fn variables_the_user_set_are_left_alone() {
    let (_d, lockfile) = free_lockfile();
    let user = [("TPU_ACCELERATOR_TYPE", "v4-32"), ("TPU_WORKER_ID", "1"), ("GRPC_VERBOSITY", "DEBUG")];
    let r = prepare_in_child(&v4x4(), &lockfile, &user);
    assert!(r.ok(), "{}", r.error());
    for (name, value) in user {
        assert_eq!(r.env(name), Some(value), "{name}");
    }
    let r = prepare_in_child(
        &Machine::no_chip(),
        &lockfile,
        &[(tpu::SKIP_HARDWARE_CHECK_ENV, "1"), ("TPU_SKIP_MDS_QUERY", "true")],
    );
    assert_eq!(r.env("TPU_SKIP_MDS_QUERY"), Some("true"));
}

#[test]
fn the_hugepages_warning_shows_once_where_it_applies() {
    let (_d, lockfile) = free_lockfile();
    let v5e = prepare_in_child(&v5ex8(), &lockfile, &[]);
    assert_eq!(v5e.warnings(), 1, "prepare ran twice; stderr:\n{}", v5e.stderr);
    assert!(v5e.json["describe"].as_str().unwrap().contains("transparent hugepages madvise"));
    let v6e = prepare_in_child(&v6ex4(), &lockfile, &[]);
    assert_eq!(v6e.warnings(), 0, "{}", v6e.stderr);
    let v4 = prepare_in_child(&v4x4(), &lockfile, &[]);
    assert_eq!(v4.warnings(), 0, "{}", v4.stderr);
    let v6e_off = prepare_in_child(&Machine::tpu_vm(4, "0x006f", "always madvise [never]"), &lockfile, &[]);
    assert_eq!(v6e_off.warnings(), 1, "{}", v6e_off.stderr);
}

// ---- lock holders ---------------------------------------------------------------------------

/// Runs in a child process only: takes the lock `EAGER_TEST_TPU_HOLD=lockf:PATH` (as libtpu
/// does) or `flock:PATH`, says `LOCKED`, and holds it until its stdin closes.
#[test]
#[ignore = "runs as a child process of the other tests here"]
fn child_holds_lock() {
    let Ok(spec) = std::env::var(HOLD_ENV) else { return };
    // Never outlive a parent that failed to release it.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        std::process::exit(3);
    });
    let (how, path) = spec.split_once(':').unwrap();
    let file = fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
    match how {
        "lockf" => {
            extern "C" {
                fn lockf(fd: std::ffi::c_int, cmd: std::ffi::c_int, len: i64) -> std::ffi::c_int;
            }
            const F_TLOCK: std::ffi::c_int = 2;
            // SAFETY: a plain syscall wrapper on a descriptor this function owns.
            assert_eq!(unsafe { lockf(file.as_raw_fd(), F_TLOCK, 0) }, 0, "lockf failed");
        }
        _ => file.try_lock().unwrap(),
    }
    println!("LOCKED");
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    drop(file);
}

/// A child process holding a lockfile.
struct Holder {
    child: Child,
}

/// A child process holding `path` with `how` (`lockf` or `flock`), once it has the lock.
fn hold(how: &str, path: &Path) -> Holder {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_holds_lock", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(HOLD_ENV, format!("{how}:{}", path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read its stdout to the end on a thread (it never blocks writing), and wait bounded.
    let stdout = child.stdout.take().unwrap();
    let (locked, is_locked) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // libtest writes `test child_holds_lock ... ` before the test's own output.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim_end().ends_with("LOCKED") {
                let _ = locked.send(());
            }
        }
    });
    if is_locked.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("the holder did not lock {} within 60 s", path.display());
    }
    Holder { child }
}

/// Closes the holder's stdin: it releases the lock and exits.
fn release(mut holder: Holder) {
    drop(holder.child.stdin.take());
    let status = holder.child.wait().unwrap();
    assert!(status.success(), "the holder failed: {status}");
}

#[test]
fn a_held_lockfile_gives_an_error_naming_the_holder() {
    for how in ["lockf", "flock"] {
        let (_d, lockfile) = free_lockfile();
        let holder = hold(how, &lockfile);
        let pid = holder.child.id();

        let found = tpu::tpu_lock_holder(&lockfile).expect("a holder");
        assert_eq!(found.pid, Some(pid), "{how}");
        assert!(found.command.as_deref().unwrap_or("").contains("child_holds_lock"), "{found:?}");

        let r = prepare_in_child(&v4x4(), &lockfile, &[]);
        assert!(!r.ok() && r.json["first"]["in_use"] == true, "{how}: {}", r.json);
        let e = r.error();
        assert!(e.contains(&format!("in use by process {pid} (`")), "{e}");
        assert!(e.contains("child_holds_lock") && e.contains(&lockfile.display().to_string()), "{e}");
        assert!(e.contains(&format!("`kill {pid}`")) && e.contains("shut it down"), "{e}");
        assert!(r.json["refusal"].as_str().unwrap().contains(&format!("process {pid}")));

        // Where this process takes a subset of the chips, libtpu takes no lock: no error.
        let subset = prepare_in_child(&v4x4(), &lockfile, &[("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")]);
        assert!(subset.ok(), "{}", subset.error());

        release(holder);
        assert_eq!(tpu::tpu_lock_holder(&lockfile), None::<LockHolder>);
        let r = prepare_in_child(&v4x4(), &lockfile, &[]);
        assert!(r.ok(), "{how}, after release: {}", r.error());
    }
}

#[test]
fn a_lockfile_held_by_nobody_is_called_stale_only_after_libtpu_refused() {
    let (_d, lockfile) = free_lockfile();
    let none = prepare_in_child(&v4x4(), &lockfile, &[]);
    assert_eq!(none.json["refusal"], Value::Null, "no lockfile, nothing to explain");
    fs::write(&lockfile, "").unwrap();
    let r = prepare_in_child(&v4x4(), &lockfile, &[]);
    assert!(r.ok(), "an unheld lockfile does not stop libtpu: {}", r.error());
    let refusal = r.json["refusal"].as_str().unwrap();
    assert!(refusal.contains("no process holds") && refusal.contains(&format!("rm {}", lockfile.display())));
    // This process's own lock is no conflict.
    let file = fs::File::options().read(true).write(true).open(&lockfile).unwrap();
    file.try_lock().unwrap();
    assert_eq!(tpu::tpu_lock_holder(&lockfile), None);
}
