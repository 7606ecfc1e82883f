//! The persistent compile cache across real processes: each test runs this test binary again
//! as child processes (the ignored `child_runs_ops` test) over its own cache dir, and reads
//! back what each child did.

use std::path::Path;
use std::process::{Command, Output};

use eager::prelude::*;
use eager::profiler::CacheOutcome;

/// What a child reports: per op, where its executable came from, and the values it computed.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct ChildReport {
    outcomes: Vec<(String, CacheOutcome)>,
    values: Vec<f64>,
    /// With `EAGER_TEST_WAIT_PRELOAD=n`: the executables the warm start had loaded before the
    /// ops (once n were), and those left untaken after.
    #[serde(default)]
    preloaded: Option<(usize, usize)>,
}

const CHILD_ENV: &str = "EAGER_TEST_DISK_CHILD";

/// Runs in a child process only: a fixed set of ops on fixed data (shapes only this file
/// uses), reported as one JSON line.
#[test]
#[ignore = "runs as a child process of the other tests here"]
fn child_runs_ops() -> Result<()> {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    let wait: Option<usize> = std::env::var("EAGER_TEST_WAIT_PRELOAD").ok().and_then(|v| v.parse().ok());
    let before = wait.map(|n| {
        eager::devices(DeviceKind::Cpu).expect("the CPU runtime starts");
        let start = std::time::Instant::now();
        // A guard against a hang, not a claim about speed: the count is what is checked.
        while eager::runtime::preloaded() < n && start.elapsed().as_secs() < 300 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        eager::runtime::preloaded()
    });
    let x = Tensor::from_slice(&(0..29 * 3).map(|i| i as f32 / 50.0).collect::<Vec<_>>(), &[29, 3])?;
    let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[3, 1])?;
    let y = x.matmul(&w)?.tanh()?.exp()?.sum(&[0], false)?;
    let z = x.sub_scalar(0.3)?.relu()?.mean_all()?;
    let mut values = y.to_f64_vec()?;
    values.extend(z.to_f64_vec()?);
    let outcomes =
        profiler::events().into_iter().filter_map(|e| e.cache.map(|c| (e.info.signature(), c))).collect();
    let preloaded = before.map(|b| (b, eager::runtime::preloaded()));
    println!("CHILD_REPORT {}", serde_json::to_string(&ChildReport { outcomes, values, preloaded }).unwrap());
    Ok(())
}

fn spawn(dir: &Path, extra: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_runs_ops", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("EAGER_COMPILE_CACHE_DIR", dir)
        .env_remove("EAGER_COMPILE_CACHE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn the test binary")
}

fn report(out: Output) -> (ChildReport, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD_REPORT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no report:\n{stdout}"));
    (serde_json::from_str(line).unwrap(), stderr)
}

fn run_child(dir: &Path, extra: &[(&str, &str)]) -> (ChildReport, String) {
    report(spawn(dir, extra).wait_with_output().unwrap())
}

/// The same numbers, computed on the host in f64.
fn reference() -> Vec<f64> {
    let x: Vec<f64> = (0..29 * 3).map(|i| (i as f32 / 50.0) as f64).collect();
    let w = [0.5, -1.0, 2.0];
    let y: f64 = (0..29).map(|r| (0..3).map(|c| x[r * 3 + c] * w[c]).sum::<f64>().tanh().exp()).sum();
    let z = x.iter().map(|v| (v - 0.3f32 as f64).max(0.0)).sum::<f64>() / x.len() as f64;
    vec![y, z]
}

fn assert_values(r: &ChildReport) {
    for (got, want) in r.values.iter().zip(reference()) {
        assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{got} vs {want}");
    }
    assert_eq!(r.values.len(), 2);
}

/// Every op of the child came from the disk cache, and nothing was wrong with an entry.
fn assert_all_loaded_without_warnings(r: &ChildReport, stderr: &str) {
    assert!(r.outcomes.iter().all(|(_, c)| *c == CacheOutcome::DiskHit), "{:?}", r.outcomes);
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// The cache's entries (its log of entries used left out).
fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "xla"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every file in the cache dir, by name (none if the dir was never made).
fn all_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The entries named in the cache's log of entries used, in the order they were written.
fn logged_entries(dir: &Path) -> Vec<String> {
    let logs: Vec<String> =
        all_files(dir).into_iter().filter(|n| n.starts_with("used-") && n.ends_with(".log")).collect();
    assert_eq!(logs.len(), 1, "one log of entries used: {logs:?}");
    let text = std::fs::read_to_string(dir.join(&logs[0])).unwrap();
    text.lines().map(|l| format!("{l}.xla")).collect()
}

#[test]
fn a_second_process_loads_from_disk_and_compiles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run_child(dir.path(), &[]);
    assert!(!first.outcomes.is_empty());
    assert!(first.outcomes.iter().all(|(_, c)| *c == CacheOutcome::Miss), "{:?}", first.outcomes);
    assert_values(&first);
    let files = entries(dir.path());
    assert_eq!(files.len(), first.outcomes.len(), "one entry per compiled key: {files:?}");

    let (second, stderr) = run_child(dir.path(), &[]);
    assert_eq!(second.outcomes.len(), first.outcomes.len());
    assert_all_loaded_without_warnings(&second, &stderr);
    assert_eq!(second.values, first.values);
}

/// A warm start (`EAGER_PRELOAD=1`, as the REPL and kernel run) loads the entries the last
/// sessions used as the runtime starts; the ops then take each one, computing the same.
#[test]
fn a_warm_start_loads_the_last_sessions_entries_before_they_are_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run_child(dir.path(), &[]);
    let n = entries(dir.path()).len();
    assert_eq!(n, first.outcomes.len());
    let wait = n.to_string();
    let (warm, stderr) = run_child(dir.path(), &[("EAGER_PRELOAD", "1"), ("EAGER_TEST_WAIT_PRELOAD", &wait)]);
    assert_eq!(warm.preloaded, Some((n, 0)), "loaded before the ops, and left after");
    assert_all_loaded_without_warnings(&warm, &stderr);
    assert_eq!(warm.values, first.values);
    // Without it, nothing is loaded ahead.
    let (cold, _) = run_child(dir.path(), &[("EAGER_TEST_WAIT_PRELOAD", "0")]);
    assert_eq!(cold.preloaded, Some((0, 0)));
}

#[test]
fn corrupt_truncated_and_foreign_entries_are_recompiled_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run_child(dir.path(), &[]);
    let files = entries(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    // One entry with a flipped byte at the end (in the executable), one cut in half, one
    // that is not an entry at all.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&files[0], bytes).unwrap();
    let bytes = std::fs::read(&files[1]).unwrap();
    std::fs::write(&files[1], &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(&files[2], b"not a compile cache entry").unwrap();

    let (second, stderr) = run_child(dir.path(), &[]);
    assert_eq!(stderr.matches("warning: ignoring compile cache entry").count(), 3, "{stderr}");
    assert!(
        stderr.contains("checksum") && stderr.contains("truncated") && stderr.contains("another version"),
        "{stderr}"
    );
    let compiled = second.outcomes.iter().filter(|(_, c)| *c == CacheOutcome::Miss).count();
    let loaded = second.outcomes.iter().filter(|(_, c)| *c == CacheOutcome::DiskHit).count();
    assert_eq!((compiled, loaded), (3, first.outcomes.len() - 3));
    assert_values(&second);

    // The bad entries were replaced by good ones.
    let (third, stderr) = run_child(dir.path(), &[]);
    assert_all_loaded_without_warnings(&third, &stderr);
}

#[test]
fn two_processes_filling_one_cache_at_once_leave_it_valid() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn(dir.path(), &[]);
    let b = spawn(dir.path(), &[]);
    let (ra, _) = report(a.wait_with_output().unwrap());
    let (rb, _) = report(b.wait_with_output().unwrap());
    assert_values(&ra);
    assert_values(&rb);
    // Only whole entries and the log of entries used: no temp files left behind.
    let files = all_files(dir.path());
    let stray: Vec<&String> = files
        .iter()
        .filter(|n| {
            let used_log = n.starts_with("used-") && n.ends_with(".log");
            !n.ends_with(".xla") && !used_log
        })
        .collect();
    assert!(stray.is_empty(), "files other than entries and the log: {stray:?}");
    assert_eq!(entries(dir.path()).len(), ra.outcomes.len());
    let (third, stderr) = run_child(dir.path(), &[]);
    assert_all_loaded_without_warnings(&third, &stderr);
}

#[test]
fn a_size_bound_evicts_the_oldest_entries() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run_child(dir.path(), &[]);
    let sizes: Vec<u64> = entries(dir.path()).iter().map(|f| f.metadata().unwrap().len()).collect();
    let total: u64 = sizes.iter().sum();
    assert_eq!(sizes.len(), first.outcomes.len());
    // A bound of half of what the run writes: the cache stays under it and keeps the newest.
    let bound_mb = (total / 2) as f64 / (1u64 << 20) as f64;
    let small = tempfile::tempdir().unwrap();
    let (bounded, _) = run_child(small.path(), &[("EAGER_COMPILE_CACHE_MAX_MB", &bound_mb.to_string())]);
    assert_values(&bounded);
    let kept: u64 = entries(small.path()).iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(kept <= total / 2, "{kept} bytes kept over a bound of {}", total / 2);
    // The newest entries survive: those kept are the last ones written (the log lists them in
    // the order they were written), the oldest went, and the last one written is there.
    let written = logged_entries(small.path());
    assert_eq!(written.len(), first.outcomes.len(), "{written:?}");
    let survivors: Vec<String> =
        all_files(small.path()).into_iter().filter(|n| n.ends_with(".xla")).collect();
    let evicted = written.len() - survivors.len();
    assert!(evicted >= 1, "nothing evicted under half the size: {survivors:?}");
    let mut newest: Vec<String> = written[evicted..].to_vec();
    newest.sort();
    assert_eq!(survivors, newest, "the entries kept are not the newest (written in this order: {written:?})");
}

#[test]
fn turned_off_it_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = run_child(dir.path(), &[("EAGER_COMPILE_CACHE", "off")]);
    assert!(!r.outcomes.is_empty() && r.outcomes.iter().all(|(_, c)| *c == CacheOutcome::Miss));
    // No entry, no temp file, no log: nothing at all.
    assert_eq!(all_files(dir.path()), Vec::<String>::new());
}

#[test]
fn clear_disk_removes_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    run_child(dir.path(), &[]);
    let n = entries(dir.path()).len();
    assert!(n > 0);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_clears_disk", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env("EAGER_COMPILE_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains(&format!("CLEARED {n}")), "{stdout}");
    assert!(entries(dir.path()).is_empty());
}

#[test]
#[ignore = "runs as a child process of clear_disk_removes_every_entry"]
fn child_clears_disk() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    println!("CLEARED {}", cache::clear_disk().unwrap());
}
