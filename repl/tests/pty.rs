//! The real `eager-repl` binary, driven through a pseudo-terminal as a person would use it,
//! and through `-e` and a pipe as scripts do. Sessions run one at a time (a lock), so they
//! reuse one evcxr build dir: the first one builds eager into it, the others load it.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use expectrl::{ControlCode, Eof, Regex, Session};

static ONE_SESSION_AT_A_TIME: Mutex<()> = Mutex::new(());

const PROMPT: &str = ">> ";
/// The first session of a fresh machine builds eager and its dependencies into evcxr: the prompt
/// comes at once, and the first cell waits for that build.
const FIRST_START: Duration = Duration::from_secs(1200);
const CELL: Duration = Duration::from_secs(120);

fn repl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eager-repl"));
    // A session of its own (the session server has a test of its own).
    cmd.env("TERM", "xterm").env_remove("EAGER_DEVICE").env("EAGER_SESSION_SERVER", "0");
    cmd
}

/// Sends a cell and waits for `needle` (a regex) and then the next prompt; returns the
/// needle's first capture group, if any.
fn cell(p: &mut Session, code: &str, needle: &str) -> String {
    p.send_line(code).unwrap();
    let got = p.expect(Regex(needle)).unwrap_or_else(|e| panic!("cell {code:?}: no {needle:?}: {e}"));
    let group = got.get(1).map(|g| String::from_utf8_lossy(g).into_owned()).unwrap_or_default();
    p.expect(PROMPT).unwrap_or_else(|e| panic!("cell {code:?}: no prompt after it: {e}"));
    group
}

#[test]
fn a_session_in_a_terminal() {
    let _one = ONE_SESSION_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // A persistent compile cache of its own: the first cell's ops are compiled, not loaded.
    let compiled = dir.path().join("compiled");
    let mut cmd = repl();
    cmd.env("EAGER_COMPILE_CACHE_DIR", &compiled).env_remove("EAGER_COMPILE_CACHE");
    // The heartbeat shows every compile running at its 100 ms tick, not only those past a
    // second: the check below then needs a compile in progress, not one of a given length.
    cmd.env("EAGER_HEARTBEAT_MS", "0");
    let t = Instant::now();
    let mut p = Session::spawn(cmd).expect("spawn eager-repl in a pty");
    p.set_expect_timeout(Some(FIRST_START));
    p.expect(PROMPT).expect("the first prompt");
    let started = t.elapsed();

    // A tensor computed on the device, shown with its values.
    let t = Instant::now();
    // (Needles are chosen so that the terminal's echo of the input cannot match them.)
    cell(&mut p, "let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?; a.dtype()", "F32");
    let first_cell = t.elapsed();
    p.set_expect_timeout(Some(CELL));
    cell(
        &mut p,
        "(&a * 2.0).exp()",
        r"tensor\(\[  7\.3891,  54\.5982, 403\.4288\], shape=\[3\], dtype=f32, device=cpu:0\)",
    );

    // The ops of that cell were compiled (misses); the same cell again only executes them.
    cell(&mut p, ":profile", "cache: 0 hits, 2 misses");
    // A closure kept in a variable: evcxr's generated code names `Result<(), EvcxrUserCodeError>`,
    // which the prelude's `Result` must not shadow. A bare closure gets evcxr's own clear message
    // (it cannot be persisted); a boxed one is kept and called in the next cell.
    cell(&mut p, "let double = |x: &Tensor| x.mul_scalar(2.0);", "is a closure, which cannot be persisted");
    p.send_line(
        "let double: Box<dyn Fn(&Tensor) -> eager::Result<Tensor>> = Box::new(|x| x.mul_scalar(2.0));",
    )
    .unwrap();
    p.expect(PROMPT).unwrap_or_else(|e| panic!("the boxed closure: no prompt after it: {e}"));
    cell(&mut p, "double(&a)?.to_vec::<f32>()?", r"\[2\.0, 4\.0, 6\.0\]");
    let t = Instant::now();
    cell(&mut p, "(&a * 2.0).exp()", r"403\.4288");
    let later_cell = t.elapsed();
    cell(&mut p, ":profile", "cache: 2 hits, 0 misses");
    // The session's profile still holds the first cell's events: exp ran twice, compiled once.
    cell(&mut p, ":profile session", r"exp\s+f32\[3\]\s+cpu:0\s+2\s+1\s");

    // One runtime (one PJRT client) for the whole session, whatever cell asks.
    let client =
        "format!(\"client@{:p}\", std::sync::Arc::as_ptr(&eager::runtime::runtime(DeviceKind::Cpu)?.client))";
    let first = cell(&mut p, client, r"client@(0x[0-9a-f]+)");
    let second = cell(&mut p, client, r"client@(0x[0-9a-f]+)");
    assert_eq!(first, second, "cells see one PJRT client");

    // A shape error through `?`: a clear message, and the session with its variables goes on.
    cell(
        &mut p,
        "let bad = a.add(&Tensor::zeros(&[2], DType::F32)?)?;",
        r"add: shape error: shapes \[3\] and \[2\] cannot be broadcast together",
    );
    cell(&mut p, "a.sum_all()?", r"6\.0000");
    // A `Result` ending a cell shows its value (not `Ok(…)`), or its error.
    let ok =
        cell(&mut p, "Tensor::ones(&[2], DType::F32)", r"(Ok\()?tensor\(\[1\.0000, 1\.0000\], shape=\[2\]");
    assert_eq!(ok, "", "a Result<Tensor> is shown as its tensor");
    cell(&mut p, "a.add(&Tensor::zeros(&[4], DType::F32)?)", r"add: shape error: shapes \[3\] and \[4\]");
    // A panic (an operator's) likewise.
    cell(&mut p, "let c = &a + &Tensor::zeros(&[2], DType::F32)?;", "panicked");
    cell(&mut p, "a.sum_all()?", r"6\.0000");

    // Ctrl-C stops a long loop of device ops; the variables stay.
    p.send_line("let mut x = a.clone(); loop { x = &x + 1.0; }").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    p.send(ControlCode::EndOfText).unwrap();
    p.expect("add: interrupted").expect("the loop's next op fails with `interrupted`");
    p.expect(PROMPT).unwrap();
    cell(&mut p, "a.to_vec::<f32>()?", r"\[1\.0, 2\.0, 3\.0\]");

    // :timeline writes a PNG that decodes.
    let png = dir.path().join("out.png");
    cell(&mut p, &format!(":timeline {}", png.display()), "timeline written to");
    let decoder = png::Decoder::new(std::fs::File::open(&png).expect("the PNG exists"));
    let info = decoder.read_info().expect("a valid PNG").info().clone();
    assert!(info.width > 100 && info.height > 100, "{}x{}", info.width, info.height);

    // The compiled ops went to the persistent cache too; :cache clear --disk empties it.
    let on_disk: usize = cell(&mut p, ":cache", r"disk cache: (\d+) entries").parse().unwrap();
    assert!(on_disk >= 2, "{on_disk} entries on disk");
    // What must be gone afterwards is there before: the entries as files (`.xla`).
    let entries = std::fs::read_dir(&compiled)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "xla"))
        .count();
    assert_eq!(entries, on_disk, "entries in {} before :cache clear --disk", compiled.display());
    let removed: usize =
        cell(&mut p, ":cache clear --disk", r"on disk \((\d+) entries removed\)").parse().unwrap();
    assert_eq!(removed, on_disk);
    assert_eq!(std::fs::read_dir(&compiled).unwrap().count(), 0, "nothing left in {}", compiled.display());

    // A mesh of the CPU plugin's devices: `:mesh` draws it, `:devices` names it, and a
    // tensor split over it prints its sharding.
    cell(&mut p, ":mesh", "no mesh yet");
    cell(&mut p, "let mesh = Mesh::new(&[(\"data\", 2), (\"model\", 2)])?; mesh.size()", r"\b4\b");
    cell(&mut p, ":mesh", r"data=1\s+cpu:2\s+cpu:3");
    cell(&mut p, ":devices", r"mesh in use: Mesh \{data: 2, model: 2\} on cpu:0\.\.3");
    cell(
        &mut p,
        "Tensor::ones(&[4, 2], DType::F32)?.shard(&mesh, &PartitionSpec::new(&[Some(\"data\")]))?.sum(&[0], false)",
        r"tensor\(\[4\.0000, 4\.0000\], shape=\[2\], dtype=f32, sharding=P\(\) over Mesh",
    );

    // Fused mode: a cell's ops run as one program; a value kept for later cells is computed
    // at the cell's end; :profile shows the program; eager mode again runs ops one by one.
    cell(&mut p, ":mode fused", "fused mode: each cell's ops");
    cell(&mut p, "let f = a.mul_scalar(2.0)?.exp()?.sum_all()?; f.item::<f32>()?.ln()", r"6\.14\d*");
    cell(&mut p, ":profile", r"fused\{\d+ ops compiled into one");
    cell(&mut p, "let g = a.add_scalar(1.0)?.mul(&a)?;", "");
    cell(&mut p, "g.to_vec::<f32>()?", r"\[2\.0, 6\.0, 12\.0\]");
    cell(&mut p, ":mode eager", "eager mode: each op runs at once");
    cell(&mut p, ":mode", "eager mode");

    // A progress bar redraws one line in place; its last state stays.
    cell(
        &mut p,
        "let mut bar = eager_cell::Progress::new(\"steps\", 30); for _ in 0..30 { std::thread::sleep(std::time::Duration::from_millis(10)); bar.inc(); } bar.finish();",
        r"\r\x1b\[2Ksteps 100%\|█+\| 30/30 \[",
    );
    // A running compile shows a spinner line with the op and the time so far, erased when it
    // ends. (A program of 1400-1600 ops, new to the persistent cache: slow by size, it spans
    // many heartbeat ticks.)
    let ops = 1400 + std::process::id() % 200;
    p.send_line(format!(
        "let m = Tensor::full(&[32, 32], 0.01, DType::F32)?; let mut y = m.clone(); \
         let z = eager::fused(|| -> Result<Tensor> {{ for i in 0..{ops}usize {{ y = y.matmul(&m)?.tanh()?.add_scalar(i as f64)?; }} Ok(y.clone()) }})?; \
         z.sum_all()?.item::<f32>()? > 0.0"
    ))
    .unwrap();
    p.expect(Regex(r"compiling fused\(f32\[32, 32\].*… \d+\.\d s")).expect("the heartbeat of the compile");
    p.expect(Regex(r"\r\x1b\[2K")).expect("the heartbeat erased");
    p.expect("true").expect("the result after the heartbeat");
    p.expect(PROMPT).unwrap();
    // :memory: live bytes, the peak, the largest tensors and the ops that made them.
    cell(
        &mut p,
        ":memory",
        r"live: .* · peak: .*\r?\n(?s:.*)largest live tensors:\r?\n  f32\[[\d, ]*\] [\d.]+ K?i?B on cpu:\d, made by \w+",
    );

    // A widget shows as its text, and the REPL says plainly that it needs a notebook; a value
    // the session sets still runs the callback.
    cell(
        &mut p,
        "let s = eager_cell::widgets::IntSlider::new(\"batch\", 8..=256)?.with_value(64); s",
        r"IntSlider\(batch = 64, 8\.\.=256\)\r?\n\(a widget: it needs a notebook",
    );
    cell(&mut p, "s.on_change(|v| println!(\"now {v}\")); s.set_value(99);", "now 99");

    // A compile error shows its span; the session goes on.
    cell(&mut p, "let n: i32 = \"one\";", "mismatched types");
    cell(&mut p, ":vars", "a: Tensor");

    // Ctrl-D exits.
    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect(Eof).expect("exit on Ctrl-D");
    eprintln!("eager-repl: start to first prompt {started:?}, first cell {first_cell:?}, a later cell {later_cell:?}");
}

#[test]
fn scripts_with_dash_e_and_a_pipe() {
    let _one = ONE_SESSION_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = repl().args(["-e", "Tensor::arange(0.0, 4.0, 1.0, DType::F32)?.sum_all()?"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("tensor(6.0000, shape=[], dtype=f32, device=cpu:0)"), "{stdout}");

    let out = repl().args(["-e", "let n: i32 = \"one\";"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mismatched types"));

    let mut child =
        repl().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"let a = Tensor::ones(&[2, 2], DType::F32)?;\nlet b = a.matmul(\n    &a,\n)?;\nb\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("tensor([[2.0000, 2.0000],\n        [2.0000, 2.0000]], shape=[2, 2]"),
        "{stdout}"
    );
}

/// `kill -INT` on the REPL's pid, as a person's other terminal or a supervisor sends it: at the
/// prompt nothing ends; while a cell runs it interrupts the cell and the variables stay.
#[test]
fn sigint_to_the_repl_interrupts_the_cell_and_never_ends_the_session() {
    let _one = ONE_SESSION_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Session::spawn(repl()).expect("spawn eager-repl in a pty");
    let pid = p.get_process().pid().as_raw();
    let sigint = || {
        // SAFETY: kill with a pid this test started and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    };
    p.set_expect_timeout(Some(FIRST_START));
    p.expect(PROMPT).expect("the first prompt");
    cell(&mut p, "let kept = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?; kept.dtype()", "F32");
    p.set_expect_timeout(Some(CELL));

    // At the prompt: the REPL stays.
    sigint();
    std::thread::sleep(Duration::from_millis(500));
    assert!(p.get_process().is_alive().unwrap(), "SIGINT at the prompt ended the REPL");
    cell(&mut p, "kept.sum_all()?", r"6\.0000");

    // While a cell runs: the cell stops with `interrupted`, the session and `kept` stay.
    p.send_line("let mut x = kept.clone(); loop { x = &x + 1.0; }").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    sigint();
    p.expect("add: interrupted").expect("the loop's next op fails with `interrupted`");
    p.expect(PROMPT).unwrap();
    cell(&mut p, "kept.to_vec::<f32>()?", r"\[1\.0, 2\.0, 3\.0\]");
    assert!(p.get_process().is_alive().unwrap());

    p.send(ControlCode::EndOfTransmission).unwrap();
    p.expect(Eof).expect("exit on Ctrl-D");
}
