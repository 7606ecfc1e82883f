//! [`Session`]: an evcxr context with eager preloaded, its meta commands, and the rendering of
//! values and errors, for any front end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use evcxr::CommandContext;

use crate::control::Control;
use crate::engine::{Engine, Interrupter};
use crate::interface::{CellError, Completion, Output, SessionOptions, Stream, StreamSink};
use crate::meta::{MetaCommand, META_HELP};

/// An evcxr session with eager preloaded.
pub struct Session {
    ctx: CommandContext,
    socket: PathBuf,
    control: Option<Control>,
    child_pid: u32,
    /// What the child wrote on stderr during the running cell (a panic, a `?` error).
    stderr: Arc<Mutex<StderrWatch>>,
    /// Profiler mark before the last user cell, and after it.
    last_cell: (u64, u64),
    /// The number of the cell [`Session::eval`] runs next, marked in the profiler's log.
    next_cell: u64,
    /// evcxr's build dir, ours while `_build_dir_lock` is held.
    build_dir: PathBuf,
    _build_dir_lock: File,
}

/// A variable of the preload's last cell, hidden from `:vars`.
const WARMUP_VAR: &str = "__eager_warmup";

/// The preload, one cell: eager, viz and eager-cell (what cells link: rich display, the
/// control server) as dependencies, eager's prelude, and the session attached at once so that
/// the control socket is up before the first user cell. Its last line warms what a user's first
/// tensor cell would otherwise wait for (measured 4.5–5 s): rust-analyzer's first inference of
/// a stored `Tensor`'s type, evcxr's `?` mode, and the CPU plugin's start. One cell, not one per
/// step: each cell is a cargo build, a link and a load (five of them cost seconds at the start).
fn preload_cell(eager_dir: &Path, dylib: bool) -> String {
    let viz_dir = eager_dir.parent().unwrap_or(eager_dir).join("viz");
    let cell_dir = eager_dir.parent().unwrap_or(eager_dir).join("cell");
    // Before anything is built (evcxr cleans the build dir when the mode changes after that).
    let mode = dylib.then(|| ":allow_static_linking 0".to_string());
    let lines: Vec<String> = mode
        .into_iter()
        .chain([
            format!(":dep eager = {{ path = {:?} }}", eager_dir.display().to_string()),
            format!(":dep viz = {{ path = {:?} }}", viz_dir.display().to_string()),
            format!(":dep eager-cell = {{ path = {:?} }}", cell_dir.display().to_string()),
            "use eager::prelude::*;".to_string(),
            "use eager_cell::{EvcxrDisplay as _, EvcxrResultDisplay as _};".to_string(),
            "eager_cell::attach();".to_string(),
            format!("let {WARMUP_VAR} = Tensor::from_slice_on(&[0.0f32], &[1], Device::cpu())?;"),
        ])
        .collect();
    lines.join("\n")
}

/// Whether cells link eager and its dependencies as shared libraries (evcxr's dylib mode,
/// `EAGER_EVCXR_DYLIB=1`): each cell's library holds only the cell's code.
fn dylib_mode() -> bool {
    std::env::var_os("EAGER_EVCXR_DYLIB").is_some_and(|v| v == "1")
}

/// Cargo settings for evcxr's builds under `base` (cargo reads a parent directory's
/// `.cargo/config.toml`, and its profiles override the manifest's): cells build at opt-level
/// 0, which cut a cell's compile by about a third, while eager and every other dependency
/// stay optimized. (evcxr's `:opt` therefore no longer changes the cells' level.)
fn write_cell_profile(base: &Path) -> Result<()> {
    let dir = base.join(".cargo");
    std::fs::create_dir_all(&dir)?;
    let text = "# Written by eager's REPL session: cells unoptimized, dependencies optimized.\n\
                [profile.dev]\nopt-level = 0\n\n[profile.dev.package.\"*\"]\nopt-level = 2\n";
    let path = dir.join("config.toml");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
        // Renamed into place: a session starting at the same moment reads a whole file.
        let tmp = dir.join(format!("config.toml.{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

impl Session {
    /// Starts evcxr, preloads eager and connects to its runtime. `sink` receives the child's
    /// output lines as they come.
    pub fn start(opts: &SessionOptions, sink: StreamSink) -> Result<Session> {
        let mut clock = crate::phases::StartClock::new();
        let cache = eager::plugin::cache_dir();
        let dylib = dylib_mode();
        // The two linking modes build everything differently: a build dir set for each.
        let base = cache.join(if dylib { "evcxr-dylib" } else { "evcxr" });
        let (build_dir, lock) = crate::files::lock_build_dir(&base)?;
        // Cell libraries a killed session left in this build dir (ours alone now).
        crate::files::remove_cell_libraries(&build_dir);
        write_cell_profile(&base)?;
        let sockets = crate::files::runtime_dir()?;
        crate::files::remove_stale_sockets(&sockets);
        let socket = crate::files::control_socket_path(&sockets);
        clock.step("build dir and control socket", "");
        // The child inherits these: evcxr's build dir (kept across sessions, so the preload
        // builds once), a config dir of ours, and where eager's runtime listens.
        std::env::set_var("EVCXR_TMPDIR", &build_dir);
        std::env::set_var("EVCXR_CONFIG_DIR", cache.join("evcxr-config"));
        std::env::set_var(eager_cell::CONTROL_SOCKET_ENV, &socket);
        // Cells link the toolchain's libstd-*.so through a RUNPATH relative to evcxr's deps
        // dir, which is wrong for the uplifted copy evcxr loads when the build dir is deep
        // (as ours, under ~/.cache): name the toolchain's lib dir for the child's loader.
        std::env::set_var("LD_LIBRARY_PATH", with_toolchain_libdir(std::env::var_os("LD_LIBRARY_PATH"))?);
        if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
            std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "3");
        }
        // A session's runtime loads the executables the last sessions used while the user
        // types (the persistent cache's warm start), unless the user said otherwise.
        if std::env::var_os("EAGER_PRELOAD").is_none() {
            std::env::set_var("EAGER_PRELOAD", "1");
        }
        // Four CPU devices in a session, whatever the cores (a program gets one per core up to
        // four): the guide's and notebooks' meshes run anywhere.
        if std::env::var_os("EAGER_CPU_DEVICES").is_none() {
            std::env::set_var("EAGER_CPU_DEVICES", "4");
        }
        if let Some(d) = &opts.device {
            let device: eager::Device = d.parse().map_err(|e: String| anyhow!(e))?;
            std::env::set_var("EAGER_DEVICE", device.to_string());
            if let Some(p) = &opts.plugin {
                std::env::set_var(
                    format!("EAGER_PJRT_PLUGIN_{}", device.kind.name().to_ascii_uppercase()),
                    p,
                );
            }
        } else if let Some(p) = &opts.plugin {
            std::env::set_var("EAGER_PJRT_PLUGIN", p);
        }

        clock.step("environment (rustc's lib dir)", "");
        let (ctx, outputs) = CommandContext::new().map_err(|e| anyhow!("starting evcxr: {e}"))?;
        clock.step("evcxr context and cell process", "");
        let stderr: Arc<Mutex<StderrWatch>> = Arc::default();
        for (rx, stream) in [(outputs.stdout, Stream::Stdout), (outputs.stderr, Stream::Stderr)] {
            let (sink, panic) = (sink.clone(), stderr.clone());
            std::thread::spawn(move || {
                let mut in_backtrace = false;
                while let Ok(line) = rx.recv() {
                    if stream == Stream::Stderr {
                        if line == crate::STDERR_SYNC_LINE {
                            panic.lock().unwrap().synced = true;
                            continue;
                        }
                        // Dropped before the watch sees it: never taken for a `?` error's message.
                        if is_warmup_notice(&line) {
                            continue;
                        }
                        panic.lock().unwrap().see(&line);
                    }
                    if !skip_backtrace_line(&line, &mut in_backtrace) {
                        sink(stream, &line);
                    }
                }
            });
        }
        let child_pid = ctx.process_handle().lock().map(|c| c.id()).unwrap_or(0);
        let mut session = Session {
            ctx,
            socket,
            control: None,
            child_pid,
            stderr,
            last_cell: (0, 0),
            next_cell: 1,
            build_dir,
            _build_dir_lock: lock,
        };
        let eager_dir = opts
            .eager_dir
            .clone()
            .or_else(|| std::env::var_os("EAGER_SOURCE_DIR").map(PathBuf::from))
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../eager"));
        let eager_dir =
            eager_dir.canonicalize().with_context(|| format!("eager's source at {}", eager_dir.display()))?;
        let cell = preload_cell(&eager_dir, dylib);
        match session.ctx.execute(&cell) {
            Ok(out) => clock
                .step("preload cell (deps, prelude, attach, warm-up)", &crate::phases::evcxr_phases(&out)),
            Err(e) => return Err(anyhow!("preloading eager ({cell}): {}", render_error(&e, &cell).evalue)),
        }
        crate::files::remove_cell_libraries(&session.build_dir);
        session.control()?;
        clock.step("control connection", "");
        Ok(session)
    }

    /// The control connection, reconnecting (and re-attaching eager) if the child restarted.
    fn control(&mut self) -> Result<&mut Control> {
        let pid = self.ctx.process_handle().lock().map(|c| c.id()).unwrap_or(0);
        if pid != self.child_pid {
            self.child_pid = pid;
            self.control = None;
            self.ctx.execute("eager_cell::attach();").map_err(|e| anyhow!("re-attaching eager: {e}"))?;
        }
        if self.control.is_none() {
            self.control = Some(Control::connect(&self.socket)?);
        }
        Ok(self.control.as_mut().unwrap())
    }

    /// A handle that interrupts the running cell from another thread (the front end's Ctrl-C
    /// or a Jupyter interrupt).
    pub fn interrupter(&self) -> Interrupter {
        Interrupter::local(self.socket.clone(), self.ctx.process_handle())
    }

    /// Takes on a front end's working directory and environment (a warm session handed over by
    /// the session server was started elsewhere): this process's and the cell process's.
    pub fn adopt(&mut self, cwd: &Path, env: &[(String, String)]) -> Result<()> {
        std::env::set_current_dir(cwd).with_context(|| format!("entering {}", cwd.display()))?;
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        self.control()?.adopt(cwd, env)
    }

    /// Numbers the next cell [`Session::eval`] runs (a kernel's execution count); cells
    /// count up from 1 otherwise.
    pub fn set_cell_number(&mut self, n: u64) {
        self.next_cell = n;
    }

    /// Evaluates a cell: one of our meta commands, or Rust (and evcxr's commands) in the child.
    pub fn eval(&mut self, cell: &str) -> std::result::Result<Vec<Output>, CellError> {
        let number = self.next_cell;
        self.next_cell += 1;
        if let Some(cmd) = MetaCommand::parse(cell) {
            let cmd = cmd.map_err(|e| CellError::new("UsageError", e))?;
            return self.meta(cmd).map_err(|e| CellError::new("MetaCommandError", format!("{e:#}")));
        }
        let before = self.control().and_then(|c| {
            c.clear_interrupt()?;
            c.take_error()?;
            c.start_cell(number)
        });
        *self.stderr.lock().unwrap() = StderrWatch::default();
        let result = self.ctx.execute(cell);
        // The cell process has loaded the cell's library (or the cell failed): its file is
        // not needed again, and 400 of them took 2 GB.
        crate::files::remove_cell_libraries(&self.build_dir);
        let restarted = self.ctx.process_handle().lock().map(|c| c.id()).unwrap_or(0) != self.child_pid;
        if !restarted {
            // Fused mode: what the cell recorded and did not read runs now. Then the pages the
            // loader read from this cell's library go back (1.3 MB a cell otherwise).
            let _ = self.control().and_then(|c| c.end_region());
            let _ = self.control().and_then(|c| c.trim());
        }
        if let Ok(before) = before {
            let after = if restarted { Ok(0) } else { self.control().and_then(|c| c.seq()) };
            self.last_cell = (before, after.unwrap_or(before));
        }
        match result {
            Ok(mut out) => {
                // evcxr reports a panic as success: the child's stdout watch marks it (and a `?`
                // error) with an error block; the message comes on stderr, on its own thread.
                let block = out.content_by_mime_type.remove(eager_cell::ERROR_MIME);
                // A block without its message (a panic, a `?`): the message is on stderr.
                if block.as_deref().is_some_and(|b| !b.contains("\"evalue\"")) {
                    self.wait_for_stderr();
                }
                if let Some(msg) = self.stderr.lock().unwrap().panic.take() {
                    let traceback = vec![format!("panic: {msg}")];
                    return Err(CellError { ename: "panic".into(), traceback, evalue: msg, on_stderr: true });
                }
                if crate::phases::enabled() {
                    eprintln!("evcxr phases: {}", crate::phases::evcxr_phases(&out));
                }
                if let Some(block) = block {
                    return Err(self.cell_error(&block));
                }
                let mut data: Vec<(String, String)> = out.content_by_mime_type.into_iter().collect();
                data.sort_by_key(|(m, _)| (m != "text/plain", m.clone()));
                Ok(if data.is_empty() { vec![] } else { vec![Output { data, is_result: true }] })
            }
            Err(e) => Err(render_error(&e, cell)),
        }
    }

    /// Waits (up to 2 s) for the failing cell's message on stderr: the cell process's stdout
    /// watch writes a sync line to stderr after the line that marked the failure, so every
    /// line the cell wrote before it has arrived once the sync line has.
    fn wait_for_stderr(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !self.stderr.lock().unwrap().synced {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The cell's error from its error block: an `Err` that ended the cell (ename and evalue
    /// in the block), or a `?` (the child's stdout watch saw evcxr's error line; the message
    /// is the last line the cell wrote on stderr, and eager's own errors name their kind).
    fn cell_error(&mut self, block: &str) -> CellError {
        let v: serde_json::Value = serde_json::from_str(block).unwrap_or_default();
        let ename = v["ename"].as_str().unwrap_or("Error");
        if let Some(evalue) = v["evalue"].as_str() {
            return CellError::new(ename, evalue);
        }
        let last = self.stderr.lock().unwrap().last_line.clone().unwrap_or_default();
        if ename == "panic" {
            // Its message did not come in time: the last line is the best there is.
            return CellError { on_stderr: true, ..CellError::new("panic", last) };
        }
        let shown = self.control().and_then(|c| c.take_error()).ok().flatten();
        let (ename, evalue) = match shown {
            // The error printed last was eager's: its kind, and its whole text.
            Some((kind, text)) if !last.is_empty() && text.ends_with(last.as_str()) => (kind, text),
            _ => ("Error".to_string(), last),
        };
        CellError { on_stderr: true, ..CellError::new(&ename, evalue) }
    }

    fn meta(&mut self, cmd: MetaCommand) -> Result<Vec<Output>> {
        Ok(match cmd {
            MetaCommand::Help => vec![Output::text(META_HELP)],
            MetaCommand::Quit => vec![],
            MetaCommand::Devices => {
                let (default, lines, mesh) = self.control()?.devices()?;
                let mesh = mesh.map(|m| format!("\nmesh in use: {m}")).unwrap_or_default();
                vec![Output::text(format!("default device: {default}\n{}{mesh}", lines.join("\n")))]
            }
            MetaCommand::Mesh => {
                let grid = self.control()?.mesh()?;
                let none = "no mesh yet: make one with Mesh::new(&[(\"data\", 2), (\"model\", 2)])?";
                vec![Output::text(grid.unwrap_or_else(|| none.to_string()).trim_end().to_string())]
            }
            MetaCommand::Mode(set) => {
                let fused = self.control()?.mode(set)?;
                let text = if fused {
                    "fused mode: each cell's ops are recorded and run as one program at the first read or the cell's end"
                } else {
                    "eager mode: each op runs at once"
                };
                vec![Output::text(text)]
            }
            MetaCommand::Autocast(set) => {
                let text = match self.control()?.autocast(set.as_deref())? {
                    Some(d) => format!("autocast {d}: matmul, linear, convolutions and attention run in {d} (f32 accumulation); softmax, norms, losses, exp/log/pow, sums and means in f32"),
                    None => "autocast off: each op runs in its inputs' dtype".to_string(),
                };
                vec![Output::text(text)]
            }
            MetaCommand::Memory { reset } => {
                let (snapshot, device, stats) = self.control()?.memory(reset)?;
                let mut text = snapshot.summary(8);
                if reset {
                    text = format!("peak reset to what is live now\n{text}");
                }
                text.push_str(&match stats {
                    Some(s) => {
                        let opt = |v: Option<u64>| v.map_or("?".into(), eager::memory::format_bytes);
                        format!(
                            "\n{device} (the plugin's allocator): {} in use · peak {} · limit {}",
                            eager::memory::format_bytes(s.bytes_in_use),
                            opt(s.peak_bytes_in_use),
                            opt(s.bytes_limit)
                        )
                    }
                    None => format!(
                        "\n{device}: the plugin reports no allocator figures (eager's own count above)"
                    ),
                });
                let mut out = vec![Output::text(text)];
                // The chart for notebooks (a terminal prints text/plain alone, and it has none).
                if let Ok(svg) = viz::MemoryChart::new(snapshot).svg() {
                    out.push(Output { data: vec![("image/svg+xml".into(), svg)], is_result: false });
                }
                out
            }
            MetaCommand::Device(d) => {
                let d = self.control()?.set_device(&d)?;
                vec![Output::text(format!("default device is now {d}"))]
            }
            MetaCommand::Profile { session } => {
                let p = self.profile(session)?;
                let what = if session { "the session" } else { "the last cell" };
                if p.is_empty() {
                    vec![Output::text(format!("no eager ops in {what}"))]
                } else {
                    // The table's footer already carries the recompile hints.
                    vec![Output {
                        data: vec![
                            ("text/plain".into(), p.table_text()),
                            ("text/html".into(), p.table_html()),
                        ],
                        is_result: false,
                    }]
                }
            }
            MetaCommand::Timeline(file) => {
                let mut p = self.profile(false)?;
                if p.is_empty() {
                    p = self.profile(true)?;
                }
                let chart = p.timeline();
                let path = file.unwrap_or_else(|| PathBuf::from("eager-timeline.png"));
                if path.extension().is_some_and(|e| e == "svg") {
                    chart.write_svg(&path)?;
                } else {
                    chart.write_png(&path)?;
                }
                let shown = absolute(&path);
                vec![Output {
                    data: vec![
                        ("text/plain".into(), format!("timeline written to {}", shown.display())),
                        ("image/svg+xml".into(), chart.svg()?),
                    ],
                    is_result: false,
                }]
            }
            MetaCommand::Trace(file) => {
                self.profile(true)?.write_trace(&file)?;
                vec![Output::text(format!(
                    "trace written to {} (open it in ui.perfetto.dev or chrome://tracing)",
                    absolute(&file).display()
                ))]
            }
            MetaCommand::Cache => {
                let (stats, entries) = self.control()?.cache()?;
                // The disk cache is files under the same settings as the child's: read here.
                let mut text = format!("{stats}\n{}\n", eager::cache::disk_stats());
                let mut by_cost = entries;
                by_cost.sort_by_key(|e| std::cmp::Reverse(e.stats.compile_ns));
                for e in by_cost.iter().take(15) {
                    text.push_str(&format!(
                        "  {:<48} hits {:>7}  compiles {:>3}  disk loads {:>3}  compile/load {:>8.1} ms\n",
                        e.info.signature(),
                        e.stats.hits,
                        e.stats.misses,
                        e.stats.disk_hits,
                        e.stats.compile_ns as f64 / 1e6
                    ));
                }
                vec![Output::text(text.trim_end().to_string())]
            }
            MetaCommand::CacheClear { disk } => {
                self.control()?.cache_clear()?;
                if disk {
                    let removed =
                        eager::cache::clear_disk().context("clearing the persistent compile cache")?;
                    vec![Output::text(format!(
                        "compile cache cleared, in memory and on disk ({removed} entries removed)"
                    ))]
                } else {
                    vec![Output::text("in-memory compile cache cleared (the disk cache stays; :cache clear --disk empties it)")]
                }
            }
            MetaCommand::Vars => {
                let mut vars: Vec<String> =
                    self.variables().into_iter().map(|(n, t)| format!("{n}: {t}")).collect();
                vars.sort();
                vec![Output::text(if vars.is_empty() { "no variables".into() } else { vars.join("\n") })]
            }
        })
    }

    /// The profile of the last cell, or of everything in the session's log.
    pub fn profile(&mut self, session: bool) -> Result<viz::Profile> {
        let (from, to) = if session { (0, u64::MAX) } else { self.last_cell };
        let (events, _dropped, cells) = self.control()?.events_since(from)?;
        Ok(viz::Profile::from_events(events.into_iter().filter(|e| e.seq < to).collect()).with_cells(cells))
    }

    /// Completions at byte `pos` of `src`: meta commands, else evcxr's (rust-analyzer), else
    /// (it failed or found nothing) the build-time index's.
    pub fn completions(&mut self, src: &str, pos: usize) -> (usize, Vec<Completion>) {
        if let Some(meta) = crate::names::meta_completions(src, pos) {
            return meta;
        }
        match quietly(|| self.ctx.completions(src, pos)) {
            Some(Ok(c)) if !c.completions.is_empty() => {
                let mut seen = std::collections::HashSet::new();
                let list = c
                    .completions
                    .into_iter()
                    .map(|c| Completion::from_snippet(c.code, c.kind, c.label))
                    .filter(|c| seen.insert(c.text.clone()))
                    .collect();
                (c.start_offset, list)
            }
            _ => crate::names::complete(src, pos),
        }
    }

    /// Variables and their types.
    pub fn variables(&self) -> Vec<(String, String)> {
        self.ctx
            .variables_and_types()
            .filter(|(n, _)| *n != WARMUP_VAR)
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    /// Docs of the item at byte `pos` (rust-analyzer hover), for Jupyter's inspect.
    pub fn hover(&mut self, src: &str, pos: usize) -> Option<String> {
        quietly(|| self.ctx.hover_at(src, pos))
            .and_then(|r| r.ok())
            .map(|(_, text)| text)
            .filter(|t| !t.is_empty())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        crate::files::remove_cell_libraries(&self.build_dir);
    }
}

/// evcxr's error as a Jupyter-style error, compiler errors rendered with their spans.
fn render_error(e: &evcxr::Error, src: &str) -> CellError {
    match e {
        evcxr::Error::CompilationErrors(errors) => {
            let mut traceback = Vec::new();
            for err in errors {
                if err.is_from_user_code() {
                    if let Some(report) = err.build_report("cell".into(), src.to_string(), evcxr::Theme::Dark)
                    {
                        let mut buf = Vec::new();
                        if report
                            .write(ariadne::sources([("cell".to_string(), src.to_string())]), &mut buf)
                            .is_ok()
                        {
                            traceback.push(String::from_utf8_lossy(&buf).trim_end().to_string());
                            continue;
                        }
                    }
                    traceback.push(err.message());
                } else {
                    traceback.push(err.rendered());
                }
            }
            let evalue = errors.first().map(|e| e.message()).unwrap_or_default();
            CellError { ename: "CompilationError".into(), evalue, traceback, on_stderr: false }
        }
        evcxr::Error::SubprocessTerminated(msg) => CellError::new(
            "SubprocessTerminated",
            format!("{msg}\nthe cell process restarted: variables are gone (definitions and :dep remain)"),
        ),
        other => CellError::new("Error", other.to_string()),
    }
}

/// Runs `f`, turning a panic into `None` without printing it: rust-analyzer, which evcxr's
/// completions and hovers use, panics on some inputs, and a Tab press must not end the session.
fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.ok()
}

/// Watches the child's stderr during a cell: a panic (`thread '…' panicked at …:` then its
/// message), and the last line (the message of a `?` error).
#[derive(Default)]
struct StderrWatch {
    after_header: bool,
    panic: Option<String>,
    last_line: Option<String>,
    /// The cell process's sync line came (see `wait_for_stderr`).
    synced: bool,
}

impl StderrWatch {
    fn see(&mut self, line: &str) {
        if line.starts_with("thread '") && line.contains(" panicked at ") {
            self.after_header = true;
            self.panic = Some(String::from("(no message)"));
        } else if self.after_header {
            self.after_header = false;
            self.panic = Some(line.to_string());
        }
        if !line.trim().is_empty() {
            self.last_line = Some(line.to_string());
        }
    }
}

/// evcxr's note that a variable was dropped because its type changed (a `:dep` that rebuilds
/// eager does that), for the preload's hidden variable: not the user's, so not news to them.
fn is_warmup_notice(line: &str) -> bool {
    line.strip_prefix("The type of the variable ")
        .and_then(|rest| rest.strip_prefix(WARMUP_VAR))
        .is_some_and(|rest| rest == " was redefined, so was lost.")
}

/// evcxr runs cells with `RUST_BACKTRACE=1`: a panic's message is what users need, not the
/// frames of evcxr's runner. Drops the lines from `stack backtrace:` to its closing note.
fn skip_backtrace_line(line: &str, in_backtrace: &mut bool) -> bool {
    if line == "stack backtrace:" {
        *in_backtrace = true;
        return true;
    }
    if *in_backtrace {
        let frame = line.starts_with("  ") || line.is_empty();
        if line.starts_with("note: Some details are omitted") {
            *in_backtrace = false;
            return true;
        }
        if frame {
            return true;
        }
        *in_backtrace = false;
    }
    false
}

/// `LD_LIBRARY_PATH` with rustc's target lib dir (where `libstd-*.so` is) in front.
fn with_toolchain_libdir(current: Option<std::ffi::OsString>) -> Result<std::ffi::OsString> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "target-libdir"])
        .output()
        .context("running rustc (evcxr needs a Rust toolchain)")?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let mut paths = vec![dir];
    paths.extend(current.iter().flat_map(std::env::split_paths));
    Ok(std::env::join_paths(paths)?)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Engine for Session {
    fn eval(&mut self, cell: &str) -> Result<Vec<Output>, CellError> {
        Session::eval(self, cell)
    }
    fn completions(&mut self, src: &str, pos: usize) -> (usize, Vec<Completion>) {
        Session::completions(self, src, pos)
    }
    fn hover(&mut self, src: &str, pos: usize) -> Option<String> {
        Session::hover(self, src, pos)
    }
    fn interrupter(&self) -> Interrupter {
        Session::interrupter(self)
    }
    fn set_cell_number(&mut self, n: u64) {
        Session::set_cell_number(self, n)
    }
    fn comm(&mut self, message: serde_json::Value) -> Result<serde_json::Value, String> {
        // A callback starts, as a cell does, with no interrupt pending.
        self.control()
            .and_then(|c| c.clear_interrupt().and_then(|()| c.comm(message)))
            .map_err(|e| format!("{e:#}"))
    }
}
