//! `eager-kernel`: a Jupyter kernel for Rust cells on an XLA device. A thin front end over
//! [`repl::Session`] (the REPL's engine, on its [`Worker`] thread): Jupyter messaging over
//! ZeroMQ (pure Rust), with every message's HMAC-SHA256 signature checked (a bad one is logged
//! and dropped, never run). A cell's live displays (`eager_cell::DisplayHandle`: progress
//! bars, live charts, the compile heartbeat) go out as they come, as `display_data` with a
//! `display_id` and `update_display_data`. The sockets serve at once (`kernel_info` within a second) while
//! the session starts behind them; cells sent meanwhile wait for it. Widgets speak Jupyter's
//! comms (`comms`): the session's comm lines go out on iopub, a front end's comm messages go to
//! the session's widgets, whose callbacks run there.

mod comms;
mod history;
mod install;
mod media;
mod shell;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use jupyter_protocol::{
    ClearOutput, CodeMirrorMode, CommInfoReply, CompleteReply, ConnectionInfo, DisplayData, ErrorOutput,
    ExecuteInput, ExecuteReply, ExecuteResult, ExecutionCount, HelpLink, HistoryReply, InspectReply,
    InterruptReply, IsCompleteReply, IsCompleteReplyStatus, JupyterMessage, JupyterMessageContent,
    KernelInfoReply, LanguageInfo, Media, MediaType, Payload, ReplyError, ReplyStatus, ShutdownReply, Status,
    StreamContent,
};
use jupyter_zmq_client as zmq;
use repl::input::{completeness, Completeness};
use repl::{CellError, Output, SessionOptions, Stream, Worker};
use tokio::sync::mpsc;

repl::export_session_slot!();

/// A Jupyter kernel for Rust whose tensor ops run at once on an XLA device.
#[derive(Parser)]
#[command(name = "eager-kernel", version)]
struct Args {
    /// The connection file Jupyter gives a kernel it starts.
    #[arg(long, value_name = "FILE")]
    connection_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Installs the kernelspec (kernel.json and logos) so that Jupyter lists "Rust (eager)".
    Install {
        /// Into the user's Jupyter data dir (the default).
        #[arg(long, conflicts_with_all = ["sys_prefix", "prefix"])]
        user: bool,
        /// Into the current Python environment (`sys.prefix`).
        #[arg(long, conflicts_with = "prefix")]
        sys_prefix: bool,
        /// Under DIR/share/jupyter/kernels.
        #[arg(long, value_name = "DIR")]
        prefix: Option<PathBuf>,
    },
    /// Starts the session server (if none runs) and waits until its warm session is ready: the
    /// next kernel's first cell runs at once.
    Warm,
    /// Stops this user's session servers and their spare sessions (sessions in use go on).
    StopServer,
}

fn main() -> ExitCode {
    repl::child_hook();
    std::hint::black_box(&EAGER_SESSION_SLOT);
    let args = Args::parse();
    let result = match (args.command, args.connection_file) {
        (Some(Cmd::Install { sys_prefix, prefix, .. }), _) => {
            let target = match (sys_prefix, prefix) {
                (true, _) => install::Target::SysPrefix,
                (_, Some(p)) => install::Target::Prefix(p),
                _ => install::Target::User,
            };
            install::install(&target)
                .map(|dir| println!("installed kernelspec {} in {}", install::KERNEL_NAME, dir.display()))
        }
        (Some(Cmd::Warm), _) => repl::remote::warm(&session_options()),
        (Some(Cmd::StopServer), _) => {
            repl::remote::stop_servers().map(|n| eprintln!("eager-kernel: stopped {n} session server(s)"))
        }
        (None, Some(file)) => run(&file),
        (None, None) => Err(anyhow::anyhow!("give --connection-file FILE (Jupyter does), or `install`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eager-kernel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The kernel's session: on `EAGER_DEVICE`'s device when set (kernel.json's `env` can set it).
fn session_options() -> SessionOptions {
    SessionOptions { device: std::env::var("EAGER_DEVICE").ok(), ..Default::default() }
}

/// What goes out on iopub, in order, from every task and thread.
type IoPub = mpsc::UnboundedSender<JupyterMessage>;

#[tokio::main]
async fn run(connection_file: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(connection_file)
        .with_context(|| format!("reading {}", connection_file.display()))?;
    let info: ConnectionInfo = serde_json::from_str(&text).context("parsing the connection file")?;
    let session_id = format!("eager-kernel-{}", std::process::id());

    let mut heartbeat = zmq::create_kernel_heartbeat_connection(&info).await?;
    let (mut shell_tx, shell_rx) = zmq::create_kernel_shell_connection(&info, &session_id).await?.split();
    let mut control = zmq::create_kernel_control_connection(&info, &session_id).await?;
    let _stdin = zmq::create_kernel_stdin_connection(&info, &session_id).await?;
    let mut iopub = zmq::create_kernel_iopub_xpub_connection(&info, &session_id).await?;

    tokio::spawn(async move { while heartbeat.single_heartbeat().await.is_ok() {} });

    // iopub has one writer: this task. It also greets subscribers (JEP 65).
    let (iopub_tx, mut iopub_rx) = mpsc::unbounded_channel::<JupyterMessage>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                msg = iopub_rx.recv() => match msg {
                    Some(m) => { let _ = iopub.send(m).await; }
                    None => break,
                },
                sub = iopub.recv_subscription() => {
                    if let Ok(zmq::SubscriptionEvent::Subscribe(topic)) = sub {
                        let _ = iopub.send(jupyter_protocol::IoPubWelcome::new(topic).into()).await;
                    }
                }
            }
        }
    });

    // The child's output lines become stream messages of the request running now.
    let current: Arc<Mutex<Option<JupyterMessage>>> = Arc::default();
    let comms: Arc<Mutex<comms::Comms>> = Arc::default();
    let sink: repl::StreamSink = {
        let (current, iopub_tx, comms) = (current.clone(), iopub_tx.clone(), comms.clone());
        Arc::new(move |stream, line: &str| {
            let parent = current.lock().unwrap().clone();
            // A comm line goes out even when no request runs (one a cell's thread printed as
            // the cell ended): a comm message finds its comm by id, not by its parent.
            if let Some(c) = eager_cell::widgets::CommLine::parse(line) {
                let _ = iopub_tx.send(comms.lock().unwrap().outgoing(c, parent.as_ref()));
                return;
            }
            let Some(parent) = parent else { return };
            let msg = if line == eager_cell::CLEAR_OUTPUT_MARKER {
                ClearOutput { wait: false }.as_child_of(&parent)
            } else if let Some(d) = eager_cell::DisplayLine::parse(line) {
                JupyterMessage::new(media::live_display(d), Some(&parent))
            } else {
                let text = format!("{line}\n");
                match stream {
                    Stream::Stdout => StreamContent::stdout(&text).as_child_of(&parent),
                    Stream::Stderr => StreamContent::stderr(&text).as_child_of(&parent),
                }
            };
            let _ = iopub_tx.send(msg);
        })
    };

    let opts = session_options();
    let session = Worker::start(opts, sink);
    let running = Arc::new(AtomicU64::new(0));
    let interrupted_early = Arc::new(AtomicU64::new(0));
    exit_with_parent(session.clone());

    // SIGINT (a kernelspec's `interrupt_mode: signal`, `kill -INT`, a terminal's Ctrl-C) does
    // what an interrupt request does; while no cell runs it does nothing, as in ipykernel.
    {
        let (session, running, early) = (session.clone(), running.clone(), interrupted_early.clone());
        ctrlc::set_handler(move || interrupt(&session, &running, &early))
            .context("installing the SIGINT handler")?;
    }

    // Control: interrupt and shutdown, answered while a cell runs.
    {
        let (iopub_tx, running, session) = (iopub_tx.clone(), running.clone(), session.clone());
        let early = interrupted_early.clone();
        tokio::spawn(async move {
            loop {
                let msg = match control.read().await {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("eager-kernel: dropped a control message: {e}");
                        continue;
                    }
                };
                let _ = iopub_tx.send(Status::busy().as_child_of(&msg));
                match &msg.content {
                    JupyterMessageContent::KernelInfoRequest(_) => {
                        let _ = control.send(kernel_info().as_child_of(&msg)).await;
                    }
                    JupyterMessageContent::InterruptRequest(_) => {
                        interrupt(&session, &running, &early);
                        let _ = control.send(InterruptReply::new().as_child_of(&msg)).await;
                    }
                    JupyterMessageContent::ShutdownRequest(req) => {
                        let reply =
                            ShutdownReply { restart: req.restart, status: ReplyStatus::Ok, error: None };
                        let _ = control.send(reply.as_child_of(&msg)).await;
                        let _ = iopub_tx.send(Status::idle().as_child_of(&msg));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        // The cell process goes with us (a restart starts a fresh kernel), and
                        // the session's files with the session (its control socket, cell
                        // libraries).
                        if let Some(i) = session.interrupter() {
                            i.kill();
                        }
                        let session = session.clone();
                        let _ = tokio::task::spawn_blocking(move || session.shutdown()).await;
                        std::process::exit(0);
                    }
                    _ => {}
                }
                let _ = iopub_tx.send(Status::idle().as_child_of(&msg));
            }
        });
    }

    let mut kernel = Kernel {
        iopub: iopub_tx,
        current,
        comms,
        callbacks: 0,
        session,
        running,
        interrupted_early,
        count: 0,
        history: Vec::new(),
    };
    let mut shell = shell::Queue::start(shell_rx);
    while let Some((msg, merged)) = shell.next().await {
        // Each merged request still gets its busy and idle (a widget sends its next change when
        // its last one's idle comes).
        for m in std::iter::once(&msg).chain(&merged) {
            let _ = kernel.iopub.send(Status::busy().as_child_of(m));
        }
        let reply = kernel.handle(&msg).await;
        if let Some(reply) = reply {
            let _ = shell_tx.send(JupyterMessage::new(reply, Some(&msg))).await;
        }
        for m in std::iter::once(&msg).chain(&merged) {
            let _ = kernel.iopub.send(Status::idle().as_child_of(m));
        }
    }
    Ok(())
}

/// Stops the running cell: eager's next op fails; if the cell still runs 5 s later (a loop
/// with no eager op), its process is killed and evcxr starts a new one. A cell waiting for the
/// session's start is marked in `early`, and does not run when the session is up.
fn interrupt(session: &Worker, running: &Arc<AtomicU64>, early: &Arc<AtomicU64>) {
    let cell = running.load(Ordering::SeqCst);
    if cell == 0 {
        return;
    }
    // Marked first: a session that comes up meanwhile runs the cell's check after this.
    early.store(cell, Ordering::SeqCst);
    let Some(interrupter) = session.interrupter() else { return };
    if let Err(e) = interrupter.interrupt() {
        eprintln!("eager-kernel: interrupt: {e:#}");
    }
    let (interrupter, running) = (interrupter.clone(), running.clone());
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(5));
        if running.load(Ordering::SeqCst) == cell {
            interrupter.kill();
        }
    });
}

/// Ends the kernel when the process that launched it is gone (`JPY_PARENT_PID`, which
/// jupyter_client sets, as ipykernel does): its cell process first, then the session's process
/// as the connection closes with this one.
fn exit_with_parent(session: Worker) {
    let Some(parent) =
        std::env::var("JPY_PARENT_PID").ok().and_then(|s| s.parse::<u32>().ok()).filter(|&p| p > 1)
    else {
        return;
    };
    let adopted_by_it = std::os::unix::process::parent_id() == parent;
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        // Gone, a zombie, or (when it was our parent) no longer our parent.
        let stat = std::fs::read_to_string(format!("/proc/{parent}/stat")).unwrap_or_default();
        let dead =
            stat.is_empty() || stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
        if dead || (adopted_by_it && std::os::unix::process::parent_id() != parent) {
            eprintln!("eager-kernel: the process that started it ({parent}) is gone; exiting");
            if let Some(i) = session.interrupter() {
                i.kill();
            }
            std::process::exit(0);
        }
    });
}

/// Set in what `Kernel::running` holds while widget callbacks run (a cell's is its count + 1),
/// beside the callbacks' own count: each answer has its own id, so an interrupt's 5-s kill
/// never takes a later one.
const CALLBACK_BIT: u64 = 1 << 63;

struct Kernel {
    iopub: IoPub,
    current: Arc<Mutex<Option<JupyterMessage>>>,
    /// The comms open now (shared with the output sink, which sees the session's opens).
    comms: Arc<Mutex<comms::Comms>>,
    /// Front-end comm messages answered so far (each one's `running` id).
    callbacks: u64,
    session: Worker,
    /// The execution count of the running cell, 0 when idle.
    running: Arc<AtomicU64>,
    /// A cell interrupted while it waited for the session's start (its `running` value).
    interrupted_early: Arc<AtomicU64>,
    count: usize,
    /// (execution count, input, text of the result).
    history: Vec<(usize, String, String)>,
}

impl Kernel {
    /// Runs `f` on the session without blocking the kernel's tasks (it waits for the start).
    async fn on_session<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn repl::Engine) -> R + Send + 'static,
    ) -> Result<R, String> {
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || session.run(f))
            .await
            .unwrap_or_else(|e| Err(format!("the session thread failed: {e}")))
    }

    /// Handles a shell request; returns the reply content.
    async fn handle(&mut self, msg: &JupyterMessage) -> Option<JupyterMessageContent> {
        Some(match &msg.content {
            JupyterMessageContent::KernelInfoRequest(_) => kernel_info().into(),
            JupyterMessageContent::ExecuteRequest(req) => {
                self.execute(msg, &req.code, req.silent, req.store_history).await.into()
            }
            JupyterMessageContent::CompleteRequest(req) => {
                let byte = byte_offset(&req.code, req.cursor_pos);
                let code = req.code.clone();
                // While the session starts the index of public names answers: the shell must
                // not wait for it.
                let (start, list) = if self.session.is_ready() {
                    self.on_session(move |s| s.completions(&code, byte)).await.unwrap_or((byte, vec![]))
                } else {
                    repl::complete_from_index(&code, byte)
                };
                let cursor_start = char_offset(&req.code, start);
                // Matches are the text to insert; signatures go where JupyterLab reads them.
                let types: Vec<serde_json::Value> = list
                    .iter()
                    .map(|c| {
                        serde_json::json!({
                            "start": cursor_start, "end": req.cursor_pos,
                            "text": c.text, "type": c.kind, "signature": c.signature,
                        })
                    })
                    .collect();
                let mut metadata = serde_json::Map::new();
                metadata.insert("_jupyter_types_experimental".to_string(), serde_json::Value::Array(types));
                CompleteReply {
                    matches: list.into_iter().map(|c| c.text).collect(),
                    cursor_start,
                    cursor_end: req.cursor_pos,
                    metadata,
                    status: ReplyStatus::Ok,
                    error: None,
                }
                .into()
            }
            JupyterMessageContent::InspectRequest(req) => {
                let (code, byte) = (req.code.clone(), byte_offset(&req.code, req.cursor_pos));
                let docs = if self.session.is_ready() {
                    self.on_session(move |s| s.hover(&code, byte)).await.ok().flatten()
                } else {
                    None
                };
                InspectReply {
                    found: docs.is_some(),
                    data: docs.map(|d| Media::from(MediaType::Plain(d))).unwrap_or_default(),
                    metadata: Default::default(),
                    status: ReplyStatus::Ok,
                    error: None,
                }
                .into()
            }
            JupyterMessageContent::IsCompleteRequest(req) => {
                let status = match completeness(&req.code) {
                    Completeness::Complete => IsCompleteReplyStatus::Complete,
                    Completeness::Incomplete => IsCompleteReplyStatus::Incomplete,
                    Completeness::Invalid => IsCompleteReplyStatus::Invalid,
                };
                let indent = if status == IsCompleteReplyStatus::Incomplete { "    " } else { "" };
                IsCompleteReply { status, indent: indent.into() }.into()
            }
            JupyterMessageContent::HistoryRequest(req) => HistoryReply {
                history: history::entries(&self.history, req),
                status: ReplyStatus::Ok,
                error: None,
            }
            .into(),
            JupyterMessageContent::CommInfoRequest(req) => {
                let comms = self.comms.lock().unwrap().info(req.target_name.as_deref());
                CommInfoReply { status: ReplyStatus::Ok, comms, error: None }.into()
            }
            // Comm messages have no reply; what the session's widgets answer goes on iopub.
            JupyterMessageContent::CommOpen(_)
            | JupyterMessageContent::CommMsg(_)
            | JupyterMessageContent::CommClose(_) => {
                self.comm(msg).await;
                return None;
            }
            _ => return None,
        })
    }

    async fn execute(
        &mut self,
        msg: &JupyterMessage,
        code: &str,
        silent: bool,
        store_history: bool,
    ) -> ExecuteReply {
        if !silent && store_history {
            self.count += 1;
            self.history.push((self.count, code.to_string(), String::new()));
        }
        let count = ExecutionCount::new(self.count);
        if !silent {
            let _ = self
                .iopub
                .send(ExecuteInput { code: code.to_string(), execution_count: count }.as_child_of(msg));
        }
        if let Some(name) = help_request(code) {
            return self.page_docs(msg, name, count).await;
        }
        *self.current.lock().unwrap() = Some(msg.clone());
        let id = self.count as u64 + 1;
        self.running.store(id, Ordering::SeqCst);
        let (cell, number, early) = (code.to_string(), self.count as u64, self.interrupted_early.clone());
        let result = self
            .on_session(move |s| {
                // Interrupted while it waited for the session: never run.
                if early.compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    return Err(CellError::new(
                        "Interrupted",
                        "interrupted before it ran (the session was still starting); nothing ran",
                    ));
                }
                s.set_cell_number(number);
                s.eval(&cell)
            })
            .await
            .unwrap_or_else(|e| Err(CellError::new("KernelError", e)));
        self.running.store(0, Ordering::SeqCst);
        self.interrupted_early.store(0, Ordering::SeqCst);
        // The child's last stderr lines may still be on their way.
        tokio::time::sleep(Duration::from_millis(30)).await;
        *self.current.lock().unwrap() = None;
        match result {
            Ok(outputs) => {
                if let (Some(last), Some(text)) = (
                    self.history.last_mut(),
                    outputs.iter().find(|o| o.is_result).and_then(|o| o.get("text/plain")),
                ) {
                    if last.0 == self.count && store_history {
                        last.2 = text.to_string();
                    }
                }
                for o in outputs {
                    let _ = self.iopub.send(JupyterMessage::new(self.output(o, count), Some(msg)));
                }
                ExecuteReply {
                    status: ReplyStatus::Ok,
                    execution_count: count,
                    payload: vec![],
                    user_expressions: Some(Default::default()),
                    error: None,
                }
            }
            Err(e) => {
                let _ = self.iopub.send(
                    ErrorOutput {
                        ename: e.ename.clone(),
                        evalue: e.evalue.clone(),
                        traceback: e.traceback.clone(),
                    }
                    .as_child_of(msg),
                );
                ExecuteReply {
                    status: ReplyStatus::Error,
                    execution_count: count,
                    payload: vec![],
                    user_expressions: Some(Default::default()),
                    error: Some(Box::new(ReplyError {
                        ename: e.ename,
                        evalue: e.evalue,
                        traceback: e.traceback,
                    })),
                }
            }
        }
    }

    /// Hands a front end's comm message to the session's widgets and sends their answer (comm
    /// messages, callbacks' outputs) as its children.
    async fn comm(&mut self, msg: &JupyterMessage) {
        let Some(request) = self.comms.lock().unwrap().incoming(&msg.content) else { return };
        let id = request["comm_id"].as_str().unwrap_or_default().to_string();
        let kind = request["kind"].as_str().unwrap_or_default().to_string();
        // An interrupt stops a callback as it stops a cell.
        self.callbacks += 1;
        self.running.store(CALLBACK_BIT | self.callbacks, Ordering::SeqCst);
        let answer = self.on_session(move |s| s.comm(request)).await.and_then(|r| r);
        self.running.store(0, Ordering::SeqCst);
        self.interrupted_early.store(0, Ordering::SeqCst);
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                eprintln!("eager-kernel: comm {id}: {e}");
                return;
            }
        };
        if answer["known"] == false && kind == "msg" {
            // The session lost it (its process was restarted): the front end's view goes too.
            eprintln!("eager-kernel: comm {id} is not one of the session's: closed");
            let close = eager_cell::widgets::CommLine::close(&id);
            let out = self.comms.lock().unwrap().outgoing(close, Some(msg));
            let _ = self.iopub.send(out);
        }
        for line in answer["lines"].as_array().into_iter().flatten() {
            if let Ok(line) = serde_json::from_value(line.clone()) {
                let out = self.comms.lock().unwrap().outgoing(line, Some(msg));
                let _ = self.iopub.send(out);
            }
        }
        for output in answer["outputs"].as_array().into_iter().flatten() {
            if let Some(content) = media::output_message(output) {
                let _ = self.iopub.send(JupyterMessage::new(content, Some(msg)));
            }
        }
    }

    /// `?name`, as in IPython: the docs of `name` (what inspecting it shows) in the pager, as a
    /// `page` payload of the reply; the cell runs nothing.
    async fn page_docs(&mut self, msg: &JupyterMessage, name: &str, count: ExecutionCount) -> ExecuteReply {
        let (text, end) = (name.to_string(), name.len());
        let docs = self.on_session(move |s| s.hover(&text, end)).await.ok().flatten();
        let payload = match docs {
            Some(d) => vec![Payload::Page { data: Media::from(MediaType::Plain(d)), start: 0 }],
            None => {
                let line = format!("no documentation found for `{name}`\n");
                let _ = self.iopub.send(StreamContent::stdout(&line).as_child_of(msg));
                vec![]
            }
        };
        ExecuteReply {
            status: ReplyStatus::Ok,
            execution_count: count,
            payload,
            user_expressions: Some(Default::default()),
            error: None,
        }
    }

    /// A cell's value is an `execute_result`; charts and meta-command output are displays.
    fn output(&self, o: Output, count: ExecutionCount) -> JupyterMessageContent {
        let has_image = o.data.iter().any(|(m, _)| m.starts_with("image/"));
        let media = Media::new(o.data.into_iter().map(|(mime, v)| media::media_type(&mime, v)).collect());
        if o.is_result && !has_image {
            ExecuteResult {
                execution_count: count,
                data: media,
                metadata: Default::default(),
                transient: Some(Default::default()),
            }
            .into()
        } else {
            DisplayData::new(media).into()
        }
    }
}

fn kernel_info() -> KernelInfoReply {
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: "5.3".into(),
        implementation: "eager-kernel".into(),
        implementation_version: env!("CARGO_PKG_VERSION").into(),
        language_info: LanguageInfo {
            name: "rust".into(),
            version: rustc_version(),
            mimetype: Some("text/rust".into()),
            file_extension: Some(".rs".into()),
            pygments_lexer: Some("rust".into()),
            codemirror_mode: Some(CodeMirrorMode::Simple("rust".into())),
            nbconvert_exporter: None,
        },
        banner: "eager: Rust cells whose tensor ops run at once on an XLA device (CPU, TPU, GPU).\n\
                 :help lists the profiling commands (:profile, :timeline, :trace, :cache, :devices)."
            .into(),
        help_links: vec![
            HelpLink { text: "eager".into(), url: "https://github.com/eager-xla/eager".into() },
            HelpLink { text: "evcxr (how cells run)".into(), url: "https://github.com/evcxr/evcxr".into() },
            HelpLink { text: "Rust standard library".into(), url: "https://doc.rust-lang.org/std/".into() },
        ],
        debugger: false,
        error: None,
    }
}

fn rustc_version() -> String {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(read_rustc_version).clone()
}

fn read_rustc_version() -> String {
    std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().nth(1).map(String::from))
        .unwrap_or_default()
}

/// The name asked about by a `?name` cell (a path such as `Tensor::zeros`), if it is one.
fn help_request(code: &str) -> Option<&str> {
    let name = code.trim().strip_prefix('?')?.trim();
    let is_path = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':');
    is_path.then_some(name)
}

/// Jupyter counts cursor positions in code points; Rust strings index bytes.
fn byte_offset(s: &str, chars: usize) -> usize {
    s.char_indices().nth(chars).map_or(s.len(), |(i, _)| i)
}

fn char_offset(s: &str, byte: usize) -> usize {
    s[..byte.min(s.len())].chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_requests_are_a_question_mark_and_a_path() {
        assert_eq!(help_request("?Tensor::zeros"), Some("Tensor::zeros"));
        assert_eq!(help_request("  ? Tensor \n"), Some("Tensor"));
        assert_eq!(help_request("x?"), None, "the try operator");
        assert_eq!(help_request("?a.b()"), None);
        assert_eq!(help_request("?"), None);
    }
}
