//! `eager-repl`: Rust cells on an XLA device, evaluated at once, with profiling one command
//! away. A thin front end over [`repl::Session`] (on its [`Worker`] thread, started behind the
//! prompt): line editing (rustyline), Ctrl-C, flags.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Parser;
use repl::input::{completeness, Completeness};
use repl::{CellError, Interrupter, Output, SessionOptions, Stream, Worker};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Helper, Highlighter, Hinter};

repl::export_session_slot!();

/// A Rust REPL whose tensor ops run at once on an XLA device (CPU, TPU, GPU).
#[derive(Parser)]
#[command(name = "eager-repl", version)]
struct Args {
    /// Default device: cpu, tpu, cuda, or one device such as cpu:1.
    #[arg(long)]
    device: Option<String>,
    /// PJRT plugin (.so) for the device's kind.
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// Evaluate CODE and exit (for scripts).
    #[arg(short = 'e', value_name = "CODE")]
    eval: Option<String>,
    /// Start the session server (if none runs) and wait until its warm session is ready, then
    /// exit: the next eager-repl starts at once.
    #[arg(long, conflicts_with = "eval")]
    warm: bool,
    /// Stop this user's session servers and their spare sessions (sessions in use go on), then
    /// exit.
    #[arg(long, conflicts_with_all = ["eval", "warm"])]
    stop_server: bool,
}

fn main() -> ExitCode {
    repl::child_hook();
    // Keep the exported slot in the binary even though Rust code never reads it.
    std::hint::black_box(&EAGER_SESSION_SLOT);
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("eager-repl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What SIGINT (Ctrl-C, `kill -INT`) does depends on what runs: a cell is interrupted, and its
/// process killed if a second one comes while it still runs; a cell waiting for the session's
/// start stops waiting. At the prompt of an interactive session nothing happens (the REPL
/// never ends on it, as IPython's); a script (`-e`, a pipe) ends with 130.
#[derive(Default)]
struct CtrlC {
    interactive: bool,
    running: AtomicBool,
    /// A cell waits for the session's start; set back to false by the signal (stop waiting).
    waiting: AtomicBool,
    interrupter: Mutex<Option<Interrupter>>,
    first: Mutex<Option<Instant>>,
}

impl CtrlC {
    fn on_signal(&self) {
        if !self.running.load(Ordering::SeqCst) {
            if self.interactive {
                if self.waiting.swap(false, Ordering::SeqCst) {
                    eprintln!("\n^C: the cell was not run (the session is still starting)");
                }
                return;
            }
            eprintln!("\ninterrupted");
            std::process::exit(130);
        }
        let mut first = self.first.lock().unwrap();
        let Some(i) = self.interrupter.lock().unwrap().clone() else { return };
        match *first {
            Some(t) if t.elapsed() < Duration::from_secs(5) => {
                eprintln!("\n^C again: stopping the cell process (variables are lost)");
                i.kill();
            }
            _ => {
                eprintln!(
                    "\n^C: interrupting (eager ops fail from now on; Ctrl-C again to kill the cell process)"
                );
                *first = Some(Instant::now());
                if let Err(e) = i.interrupt() {
                    eprintln!("interrupt failed: {e:#}");
                }
            }
        }
    }

    fn run<T>(&self, interrupter: Option<Interrupter>, f: impl FnOnce() -> T) -> T {
        *self.first.lock().unwrap() = None;
        *self.interrupter.lock().unwrap() = interrupter;
        self.running.store(true, Ordering::SeqCst);
        let r = f();
        self.running.store(false, Ordering::SeqCst);
        r
    }
}

fn run(args: Args) -> Result<ExitCode> {
    let interactive = args.eval.is_none() && std::io::stdin().is_terminal();
    // The prompt is up while the session starts; a cell waits for it (see `wait_for_start`).
    let opts = SessionOptions { device: args.device.clone(), plugin: args.plugin.clone(), eager_dir: None };
    if args.warm {
        repl::remote::warm(&opts)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.stop_server {
        eprintln!("eager-repl: stopped {} session server(s)", repl::remote::stop_servers()?);
        return Ok(ExitCode::SUCCESS);
    }
    let sink: repl::StreamSink = Arc::new(|stream, line: &str| match stream {
        Stream::Stdout if line == eager_cell::CLEAR_OUTPUT_MARKER => {}
        // A widget's comm messages are for notebooks (the terminal shows its text form).
        Stream::Stdout if eager_cell::widgets::CommLine::parse(line).is_some() => {}
        Stream::Stdout => match eager_cell::DisplayLine::parse(line) {
            Some(d) => live_line(&d),
            None => {
                end_live_line();
                println!("{line}");
            }
        },
        Stream::Stderr => {
            end_live_line();
            eprintln!("{line}");
        }
    });
    let ctrl_c = Arc::new(CtrlC { interactive, ..CtrlC::default() });
    {
        let c = ctrl_c.clone();
        ctrlc::set_handler(move || c.on_signal()).context("installing the Ctrl-C handler")?;
    }
    let device = opts.device.clone().unwrap_or_else(|| "cpu:0".into());
    let session = Worker::start(opts, sink);

    let code = if let Some(code) = args.eval {
        let ok = eval_and_print(&session, &ctrl_c, &code);
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    } else if !interactive {
        Ok(run_piped(&session, &ctrl_c))
    } else {
        eprintln!("eager-repl: Rust cells run on {device} at once. :help for commands, Ctrl-D to exit.");
        interactive_loop(session.clone(), ctrl_c)
    };
    // The session's cell process and control socket go with it.
    session.shutdown();
    code
}

/// Before a cell runs: if the session is still starting, says so on one line (with a spinner
/// in a terminal) and waits; the error if it could not start.
fn wait_for_start(session: &Worker, ctrl_c: &CtrlC) -> Result<Interrupter, String> {
    if let Some(r) = session.wait_timeout(Duration::ZERO) {
        return r.map_err(|e| format!("the Rust session could not start: {e}"));
    }
    let spinner = std::io::stderr().is_terminal().then(|| {
        let s = indicatif::ProgressBar::new_spinner();
        s.set_message("starting… (the Rust context starts behind the prompt; the first session of a machine builds eager into it, a few minutes)");
        s.enable_steady_tick(Duration::from_millis(120));
        s
    });
    if spinner.is_none() && std::io::stdin().is_terminal() {
        eprintln!("starting… (the Rust context starts behind the prompt; the cell runs when it is ready)");
    }
    ctrl_c.waiting.store(true, Ordering::SeqCst);
    let r = loop {
        if let Some(r) = session.wait_timeout(Duration::from_millis(50)) {
            break r.map_err(|e| format!("the Rust session could not start: {e}"));
        }
        if !ctrl_c.waiting.load(Ordering::SeqCst) {
            break Err("interrupted while the session was starting".to_string());
        }
    };
    ctrl_c.waiting.store(false, Ordering::SeqCst);
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    r
}

/// The live display drawn on the terminal's last line, not ended yet (its id).
static LIVE_LINE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Draws a live display's text (a progress bar, a chart's summary, the compile heartbeat) on
/// one line, redrawn in place by its updates; an empty update erases it.
fn live_line(d: &eager_cell::DisplayLine) {
    let mut open = LIVE_LINE.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = std::io::stdout().lock();
    let text = d.get("text/plain").unwrap_or("");
    let here = open.as_deref() == Some(d.id.as_str());
    if d.data.is_empty() || text.is_empty() {
        // Erased if it is on the line; a display drawn earlier (above) stays as it was.
        if here {
            let _ = write!(out, "\r\x1b[2K");
            *open = None;
        }
    } else {
        if here {
            // Back to the start of the line, and clear it.
            let _ = write!(out, "\r\x1b[2K");
        } else if open.is_some() {
            let _ = writeln!(out);
        }
        let _ = write!(out, "{text}");
        *open = Some(d.id.clone());
    }
    let _ = out.flush();
}

/// Ends the live line (another output comes below it).
fn end_live_line() {
    let mut open = LIVE_LINE.lock().unwrap_or_else(|p| p.into_inner());
    if open.take().is_some() {
        println!();
    }
}

/// Evaluates one cell and prints what it gives; false if it failed.
fn eval_and_print(session: &Worker, ctrl_c: &CtrlC, cell: &str) -> bool {
    let result = match wait_for_start(session, ctrl_c) {
        Ok(interrupter) => {
            let cell = cell.to_string();
            ctrl_c
                .run(Some(interrupter), || session.run(move |s| s.eval(&cell)))
                .unwrap_or_else(|e| Err(CellError::new("SessionError", e)))
        }
        Err(e) => Err(CellError::new("SessionError", e)),
    };
    // Let the child's last output lines (already in the sink's channel) reach the terminal
    // before the result.
    std::thread::sleep(Duration::from_millis(5));
    end_live_line();
    match result {
        Ok(outputs) => {
            for o in outputs {
                print_output(&o);
            }
            true
        }
        Err(e) => {
            print_error(&e);
            false
        }
    }
}

fn print_output(o: &Output) {
    if let Some(text) = o.get("text/plain") {
        println!("{text}");
    }
    if o.get(eager_cell::widgets::WIDGET_VIEW_MIME).is_some() {
        println!("{WIDGETS_NEED_A_NOTEBOOK}");
    }
    let _ = std::io::stdout().flush();
}

/// What the REPL says under a widget, which it can only show as text.
const WIDGETS_NEED_A_NOTEBOOK: &str =
    "(a widget: it needs a notebook to be moved. Here it shows as text and its \
     callbacks run only when the session sets a value; open the same code in Jupyter with the \
     \"Rust (eager)\" kernel to drag it.)";

fn print_error(e: &CellError) {
    // A `?` error or a panic printed its message on the cell's stderr already.
    if e.on_stderr {
        return;
    }
    for line in &e.traceback {
        eprintln!("{line}");
    }
}

/// Standard input that is not a terminal: cells are read from it (split where brackets close
/// or at an empty line), evaluated in order; the exit code says whether all succeeded.
fn run_piped(session: &Worker, ctrl_c: &CtrlC) -> ExitCode {
    let mut ok = true;
    let mut cell = String::new();
    for line in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
        cell.push_str(&line);
        cell.push('\n');
        if completeness(&cell) != Completeness::Incomplete {
            if !cell.trim().is_empty() {
                if matches!(repl::MetaCommand::parse(&cell), Some(Ok(repl::MetaCommand::Quit))) {
                    break;
                }
                ok &= eval_and_print(session, ctrl_c, cell.trim_end());
            }
            cell.clear();
        }
    }
    if !cell.trim().is_empty() {
        ok &= eval_and_print(session, ctrl_c, cell.trim_end());
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// rustyline's view of the session: completion from evcxr, and multi-line input while
/// brackets are open.
#[derive(Helper, Hinter, Highlighter)]
struct EditorHelper {
    session: Worker,
}

impl Completer for EditorHelper {
    type Candidate = String;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        // While the session starts, the index of public names answers: Tab must not block.
        let (start, list) = if self.session.is_ready() {
            let src = line.to_string();
            self.session.run(move |s| s.completions(&src, pos)).unwrap_or((pos, vec![]))
        } else {
            repl::complete_from_index(line, pos)
        };
        Ok((start, list.into_iter().map(|c| c.text).collect()))
    }
}

impl Validator for EditorHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(match completeness(ctx.input()) {
            Completeness::Incomplete => ValidationResult::Incomplete,
            _ => ValidationResult::Valid(None),
        })
    }
}

fn interactive_loop(session: Worker, ctrl_c: Arc<CtrlC>) -> Result<ExitCode> {
    let config = rustyline::Config::builder()
        .completion_type(rustyline::CompletionType::List)
        .auto_add_history(false)
        .build();
    let mut editor: rustyline::Editor<EditorHelper, rustyline::history::DefaultHistory> =
        rustyline::Editor::with_config(config)?;
    editor.set_helper(Some(EditorHelper { session: session.clone() }));
    let history = eager::plugin::cache_dir().join("repl-history.txt");
    let _ = editor.load_history(&history);
    loop {
        match editor.readline(">> ") {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                let _ = std::fs::create_dir_all(history.parent().unwrap());
                let _ = editor.save_history(&history);
                if matches!(repl::MetaCommand::parse(&line), Some(Ok(repl::MetaCommand::Quit))) {
                    break;
                }
                eval_and_print(&session, &ctrl_c, &line);
            }
            // Ctrl-C at the prompt clears the line, as in a shell.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ExitCode::SUCCESS)
}
