//! What fault probes found, each now a clear error or a bounded wait — never an abort, a
//! stack overflow or a hang: shapes past what XLA can size (XLA throws inside the compile, and
//! a C++ exception aborts the process), a hostile `.npy` header, a FIFO in the compile cache's
//! place, a cache dir that cannot be written, and a process exiting while a background compile
//! runs. Each case runs in a child process (the ignored `child_case`), so a regression fails
//! one test, with the child's output, instead of killing the harness.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eager::cache::{self, Tiering};
use eager::prelude::*;

const CASE_ENV: &str = "EAGER_TEST_FAULT_CASE";

/// What a child reports per step: `ok …` or the error's kind and text.
fn report(what: &str, r: Result<Tensor>) {
    match r.and_then(|t| t.block_until_ready().map(|t| t.shape().to_vec())) {
        Ok(shape) => println!("STEP {what} => ok {shape:?}"),
        Err(e) => println!("STEP {what} => {}: {e}", e.kind()),
    }
}

/// Runs in a child process only: the case `EAGER_TEST_FAULT_CASE` names.
#[test]
#[ignore = "runs as a child process of the other tests here"]
fn child_case() {
    let Ok(case) = std::env::var(CASE_ENV) else { return };
    match case.as_str() {
        "sizes" => {
            let big = 1usize << 62;
            report("ones [2^32, 2^32]", Tensor::ones(&[1 << 32, 1 << 32], DType::F32));
            report("zeros [2^62]", Tensor::zeros(&[big], DType::F32));
            report("eye 2^32", Tensor::eye(1 << 32, DType::F32));
            report(
                "broadcast_to [2^62, 4]",
                Tensor::ones(&[1], DType::F32).and_then(|t| t.broadcast_to(&[big, 4])),
            );
            report("randn [2^62, 4]", Tensor::randn(&[big, 4], DType::F32));
            report(
                "reshape [2^62, 4]",
                Tensor::ones(&[4], DType::F32).and_then(|t| t.reshape(&[big as isize, 4])),
            );
            let (n, m) = (std::hint::black_box(3usize), std::hint::black_box(5usize));
            report("zeros [3 - 5]", Tensor::zeros(&[n.wrapping_sub(m)], DType::F32));
            report("from_slice [2^62, 4]", Tensor::from_slice(&[1.0f32], &[big, 4]));
            report("arange 0..1e30", Tensor::arange(0.0, 1e30, 1.0, DType::F32));
            // Results XLA can size, whose programs hold larger intermediates (random bits).
            report("randn [2^60]", Tensor::randn(&[1 << 60], DType::F32));
            // 2^62 bytes: a legal shape, which no device has room for.
            report("eye 2^30", Tensor::eye(1 << 30, DType::F32));
            eager::memory::set_limit(Some(1 << 20));
            report("zeros [2^40] under a 1 MiB cap", Tensor::zeros(&[1 << 40], DType::F32));
            report("zeros [2^62] under a 1 MiB cap", Tensor::zeros(&[big], DType::F32));
        }
        "files" => {
            let dir = std::env::var("EAGER_TEST_FAULT_DIR").unwrap();
            for name in ["nested.npy", "huge_dim.npy"] {
                report(name, eager::io::load_npy(Path::new(&dir).join(name)));
            }
            let st = eager::io::load_safetensors(Path::new(&dir).join("huge_dim.safetensors"));
            report("huge_dim.safetensors", st.map(|mut v| v.remove(0).1));
        }
        "ops" => {
            // Five programs compiled (and stored in the cache, where the dir lets them).
            let x = Tensor::from_slice(&[0.5f32, 1.0, 2.0], &[3]).unwrap();
            let y = (&x.exp().unwrap() + &x.sqrt().unwrap()).tanh().unwrap().sin().unwrap();
            println!("VALUES {:?}", y.to_vec::<f32>().unwrap());
        }
        "exit_during_promotion" => {
            cache::set_tiering(Tiering { enabled: true, hot_calls: 2, hot_device_ms: 1e9 });
            let x = Tensor::rand(&[257, 129], DType::F32).unwrap();
            for _ in 0..4 {
                x.exp().unwrap().block_until_ready().unwrap();
            }
            // Returns while the optimized compile of the hot exp runs in the background (a key
            // still queued at exit is dropped, by design: wait until it is being compiled).
            while eager::runtime::background_compile().is_none() {
                std::thread::yield_now();
            }
        }
        other => panic!("unknown case {other}"),
    }
}

/// What a finished child printed, and how it ended.
struct Child {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Child {
    /// The `STEP` lines: what each step gave.
    fn step(&self, what: &str) -> &str {
        let prefix = format!("STEP {what} => ");
        // The first step shares its line with the harness's `test child_case ... `.
        self.stdout
            .lines()
            .find_map(|l| l.find(prefix.as_str()).map(|at| &l[at + prefix.len()..]))
            .unwrap_or_else(|| {
                panic!("the child reported no step {what:?}:\n{}\n{}", self.stdout, self.stderr)
            })
    }
}

/// Runs `case` in a child process with `env`, killing it past `limit` (a hang fails the test).
fn run_case(case: &str, env: &[(&str, &str)], limit: Duration) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_case", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the test binary runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut stderr = String::new();
    let err_reader = std::thread::spawn(move || {
        let _ = err.read_to_string(&mut stderr);
        stderr
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("case {case} hung: killed after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Child { success: status.success(), stdout: reader.join().unwrap(), stderr: err_reader.join().unwrap() }
}

/// Every shape a user can pass that XLA cannot size is a shape (or value) error naming the op
/// and the shape; a legal shape with a huge intermediate or result fails as out of memory;
/// the memory cap counts the true size.
#[test]
fn shapes_past_what_xla_sizes_are_errors_not_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let child = run_case(
        "sizes",
        &[("EAGER_COMPILE_CACHE_DIR", dir.path().to_str().unwrap())],
        Duration::from_secs(300),
    );
    assert!(child.success, "the child died:\n{}\n{}", child.stdout, child.stderr);
    let expect = |what: &str, parts: &[&str]| {
        let got = child.step(what);
        for p in parts {
            assert!(got.contains(p), "{what}: expected {p:?} in {got:?}");
        }
    };
    let too_big = "more than an XLA array can";
    expect("ones [2^32, 2^32]", &["ShapeError", "full", "f32[4294967296, 4294967296]", too_big]);
    expect(
        "zeros [2^62]",
        &[
            "ShapeError",
            "full",
            "f32[4611686018427387904]",
            "too large: it would hold 18446744073709551616 bytes",
        ],
    );
    expect("eye 2^32", &["ShapeError", "eye", "f32[4294967296, 4294967296]", too_big]);
    expect("broadcast_to [2^62, 4]", &["ShapeError", "broadcast_to", "f32[4611686018427387904, 4]", too_big]);
    expect("randn [2^62, 4]", &["ShapeError", "randn", "f32[4611686018427387904, 4]", too_big]);
    expect(
        "reshape [2^62, 4]",
        &["ShapeError", "reshape", "[4611686018427387904, 4]", "more elements than an XLA array can hold"],
    );
    expect(
        "zeros [3 - 5]",
        &["ShapeError", "full", "too large: a dim of 18446744073709551614", "subtraction that wrapped"],
    );
    expect("from_slice [2^62, 4]", &["ShapeError", "from_slice", "f32[4611686018427387904, 4]", too_big]);
    expect("arange 0..1e30", &["ValueError", "arange", "1e30 elements", "more than an XLA array can hold"]);
    expect(
        "randn [2^60]",
        &["ShapeError", "randn", "tensor<2x1152921504606846976xui32>", "more than XLA can size"],
    );
    expect("eye 2^30", &["OutOfMemoryError", "eye", "4096.0 PiB"]);
    expect("zeros [2^40] under a 1 MiB cap", &["OutOfMemoryError", "full", "asked for 4.0 TiB"]);
    expect("zeros [2^62] under a 1 MiB cap", &["ShapeError", "full", too_big]);
}

/// A `.npy` header of 32,000 nested brackets is a format error (the parser's depth is
/// bounded), and headers with a dim of 2^64 - 1 are format errors naming the file.
#[test]
fn hostile_weight_file_headers_are_format_errors() {
    let dir = tempfile::tempdir().unwrap();
    let npy = |name: &str, header: &str| {
        let mut text = header.to_string();
        text.push('\n');
        let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
        bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
        bytes.extend_from_slice(text.as_bytes());
        std::fs::write(dir.path().join(name), bytes).unwrap();
    };
    let nested = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}}}", "(".repeat(32_000));
    npy("nested.npy", &nested);
    npy("huge_dim.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 18446744073709551615), }");
    let header = r#"{"t":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}}"#;
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend_from_slice(header.as_bytes());
    std::fs::write(dir.path().join("huge_dim.safetensors"), st).unwrap();

    let child = run_case(
        "files",
        &[("EAGER_TEST_FAULT_DIR", dir.path().to_str().unwrap())],
        Duration::from_secs(120),
    );
    assert!(child.success, "the child died:\n{}\n{}", child.stdout, child.stderr);
    let nested = child.step("nested.npy");
    assert!(nested.contains("FormatError") && nested.contains("nest deeper than 32 levels"), "{nested}");
    assert!(nested.len() < 400, "the error quotes the whole hostile header: {} chars", nested.len());
    let npy_dim = child.step("huge_dim.npy");
    assert!(npy_dim.contains("FormatError") && npy_dim.contains("huge_dim.npy"), "{npy_dim}");
    assert!(
        npy_dim.contains("f32[0, 18446744073709551615] is too large: a dim of 18446744073709551615"),
        "{npy_dim}"
    );
    let st_dim = child.step("huge_dim.safetensors");
    assert!(st_dim.contains("FormatError") && st_dim.contains("tensor `t`"), "{st_dim}");
    assert!(st_dim.contains("f32[0, 18446744073709551615]"), "{st_dim}");
}

/// Entries (and the log of entries used) replaced by FIFOs are skipped with a warning and
/// recompiled: opening one does not block.
#[test]
fn a_fifo_in_the_compile_cache_is_skipped_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("EAGER_COMPILE_CACHE_DIR", dir.path().to_str().unwrap()), ("EAGER_PRELOAD", "1")];
    let first = run_case("ops", &env, Duration::from_secs(300));
    assert!(first.success, "{}\n{}", first.stdout, first.stderr);
    let mut fifos = 0;
    for e in std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()) {
        let name = e.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".xla") || (name.starts_with("used-") && name.ends_with(".log")) {
            std::fs::remove_file(&e).unwrap();
            assert!(Command::new("mkfifo").arg(&e).status().unwrap().success());
            fifos += 1;
        }
    }
    assert!(fifos >= 6, "expected 5 entries and a log, found {fifos} files to replace");
    let second = run_case("ops", &env, Duration::from_secs(300));
    assert!(second.success, "{}\n{}", second.stdout, second.stderr);
    let values = |c: &Child| c.stdout.lines().find(|l| l.starts_with("VALUES")).map(str::to_string);
    assert_eq!(values(&second), values(&first));
    assert!(second.stderr.contains("it is not a regular file"), "no warning:\n{}", second.stderr);
}

/// A cache dir that cannot be written warns once, naming why, however many programs compile.
#[test]
fn an_unwritable_cache_dir_warns_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a dir").unwrap();
    let cache_dir = file.join("compiled");
    let child = run_case(
        "ops",
        &[("EAGER_COMPILE_CACHE_DIR", cache_dir.to_str().unwrap())],
        Duration::from_secs(300),
    );
    assert!(child.success, "{}\n{}", child.stdout, child.stderr);
    let warnings = child.stderr.lines().filter(|l| l.contains("cannot write to the compile cache")).count();
    assert_eq!(warnings, 1, "expected one warning for five compiles:\n{}", child.stderr);
    assert!(child.stderr.contains("not stored for the rest of this process"), "{}", child.stderr);
}

/// A process that returns from `main` while a hot key's optimized compile runs in the
/// background waits for it (the entry lands in the cache) and exits cleanly: the guard runs
/// before XLA's statics are destroyed. Repeated, as the crash it prevents was a race.
#[test]
fn exit_during_a_background_compile_waits_for_it() {
    for run in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let child = run_case(
            "exit_during_promotion",
            &[("EAGER_COMPILE_CACHE_DIR", dir.path().to_str().unwrap())],
            Duration::from_secs(300),
        );
        assert!(child.success, "run {run}: the child failed:\n{}\n{}", child.stdout, child.stderr);
        let entries = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "xla"))
            .count();
        // rand and exp at the quick tier, and exp optimized: written during the exit.
        assert_eq!(entries, 3, "run {run}: the optimized compile did not finish before exit");
    }
}
