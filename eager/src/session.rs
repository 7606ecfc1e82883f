//! What a REPL session's cells link (one runtime per session is [`crate::shared`]'s job).
//!
//! The first cell to [`attach`] serves a control socket when [`CONTROL_SOCKET_ENV`]
//! names one: the REPL host reads the profiler log and the cache through it, sets the default
//! device and interrupts a running cell.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use serde_json::{json, Value};

use std::sync::Mutex;

use crate::shared::{lock, Shared};
use crate::{cache, plugin, profiler, runtime, Device, DeviceKind};

/// Env var naming the Unix socket the session's control server listens on.
pub const CONTROL_SOCKET_ENV: &str = "EAGER_CONTROL_SOCKET";

/// The last eager error a session's cell displayed: (kind, text).
static SHOWN_ERROR: Shared<Mutex<Option<(String, String)>>> = Shared::new("eager::session::shown_error", Default::default);

/// The shown error of this process's session, if it has one (never creates it).
fn existing_session() -> Option<&'static Mutex<Option<(String, String)>>> {
    crate::shared::in_session().then(|| SHOWN_ERROR.get())
}

/// Notes an eager error as it is displayed, in a session's cell process (elsewhere nothing):
/// evcxr prints a cell's `?` error with `Display` alone, and the session reports its kind.
pub(crate) fn note_shown_error(kind: &str, text: &str) {
    // Only evcxr's cell process has a session: elsewhere skip the symbol lookup.
    static IN_CELL_PROCESS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*IN_CELL_PROCESS.get_or_init(|| std::env::var_os("EVCXR_IS_RUNTIME").is_some()) {
        return;
    }
    if let Some(shown) = existing_session() {
        *lock(shown) = Some((kind.to_string(), text.to_string()));
    }
}

/// Takes the last eager error a cell displayed: its kind (`ShapeError`, …) and text (the
/// control socket's `take_error`).
pub fn take_shown_error() -> Option<(String, String)> {
    existing_session().and_then(|shown| lock(shown).take())
}

/// The MIME type of the block a cell prints when it failed: JSON `{"ename", "evalue"}`
/// (`evalue` absent in the block the REPL's cell process writes for a `?` or a panic, whose
/// message went to stderr).
pub const ERROR_MIME: &str = "application/vnd.eager.error+json";

/// Prints a cell's error block (see [`ERROR_MIME`]).
pub fn print_error_block(ename: &str, evalue: &str) {
    let v = json!({ "ename": ename, "evalue": evalue });
    println!("EVCXR_BEGIN_CONTENT {ERROR_MIME}\n{v}\nEVCXR_END_CONTENT");
}

/// Shows any `Debug` value that ends a REPL cell in one compile: evcxr first tries the
/// value's `evcxr_display` and compiles the cell again with `Debug` when there is none.
/// Types with their own (like [`crate::Tensor`]) keep it: inherent methods win.
pub trait EvcxrDisplay {
    fn evcxr_display(&self);
}

impl<T: std::fmt::Debug + ?Sized> EvcxrDisplay for T {
    fn evcxr_display(&self) {
        let text = format!("{self:?}");
        // A statement-like cell (a loop, an assignment) shows nothing, as in evcxr.
        if text != "()" {
            println!("EVCXR_BEGIN_CONTENT text/plain\n{text}\nEVCXR_END_CONTENT");
        }
    }
}

/// Shows a `Result` that ends a cell as torch users expect: `Ok` as its value (a tensor with
/// its values and HTML table), `Err` as the cell's error (Jupyter's error reply). Taken by
/// value, so it wins over [`EvcxrDisplay`] (which takes `&self`) for `Result`s.
pub trait EvcxrResultDisplay {
    fn evcxr_display(self);
}

impl<T: std::fmt::Debug + 'static, E: std::fmt::Display + 'static> EvcxrResultDisplay for Result<T, E> {
    fn evcxr_display(self) {
        use std::any::Any;
        match self {
            Ok(v) => {
                let any: &dyn Any = &v;
                if let Some(t) = any.downcast_ref::<crate::Tensor>() {
                    t.evcxr_display();
                } else if let Some(s) = any.downcast_ref::<crate::cache::CacheStats>() {
                    s.evcxr_display();
                } else {
                    EvcxrDisplay::evcxr_display(&v);
                }
            }
            Err(e) => {
                let any: &dyn Any = &e;
                let ename = match any.downcast_ref::<crate::Error>() {
                    Some(err) => err.kind().to_string(),
                    None => short_type_name::<E>(),
                };
                print_error_block(&ename, &e.to_string());
            }
        }
    }
}

/// `ParseIntError` for `core::num::error::ParseIntError`: the name a user knows.
fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

/// A line a cell prints to ask a notebook to clear its output (Jupyter's `clear_output`).
pub const CLEAR_OUTPUT_MARKER: &str = "EAGER_CLEAR_OUTPUT";

/// Clears the cell's output in a notebook (an animation's frame, a progress line). In the
/// terminal REPL it does nothing.
pub fn clear_output() {
    use std::io::Write;
    println!("{CLEAR_OUTPUT_MARKER}");
    let _ = std::io::stdout().flush();
}

/// Makes sure the session's runtime exists (and its control server runs). The REPL's
/// preload cell calls it, so the host can talk to the child before the first user op.
pub fn attach() {
    static CONTROL: crate::shared::Shared<()> = crate::shared::Shared::new("eager::session::control", start_control_server);
    CONTROL.get();
}

fn start_control_server() {
    let Some(path) = std::env::var_os(CONTROL_SOCKET_ENV) else { return };
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("eager: cannot listen on {}: {e}", std::path::Path::new(&path).display());
            return;
        }
    };
    let _ = std::thread::Builder::new().name("eager-control".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = std::thread::Builder::new().name("eager-control-conn".into()).spawn(move || serve(stream));
        }
    });
}

/// One JSON request per line, one JSON reply per line.
fn serve(stream: UnixStream) {
    let Ok(mut out) = stream.try_clone() else { return };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(req) => handle(&req).unwrap_or_else(|e| json!({ "error": e })),
            Err(e) => json!({ "error": format!("bad request: {e}") }),
        };
        if writeln!(out, "{reply}").is_err() {
            return;
        }
    }
}

fn handle(req: &Value) -> Result<Value, String> {
    Ok(match req["op"].as_str().unwrap_or("") {
        "seq" => json!({ "seq": profiler::next_seq() }),
        "events" => {
            let since = req["since"].as_u64().unwrap_or(0);
            json!({ "events": profiler::events_since(since), "dropped": profiler::dropped() })
        }
        "cache" => json!({ "stats": cache::stats(), "entries": cache::entries() }),
        "cache_clear" => {
            cache::clear();
            json!({ "ok": true })
        }
        "profile_reset" => {
            profiler::reset();
            json!({ "ok": true })
        }
        "devices" => json!({ "default": runtime::default_device().to_string(), "lines": device_lines() }),
        "set_device" => {
            let d: Device = req["device"].as_str().unwrap_or("").parse()?;
            let rt = runtime::runtime(d.kind).map_err(|e| e.to_string())?;
            rt.device(d).map_err(|e| e.to_string())?;
            runtime::set_default_device(d);
            json!({ "device": d.to_string() })
        }
        "take_error" => match take_shown_error() {
            Some((kind, text)) => json!({ "kind": kind, "text": text }),
            None => json!({}),
        },
        "interrupt" => {
            runtime::interrupt();
            json!({ "ok": true })
        }
        "clear_interrupt" => {
            runtime::clear_interrupt();
            json!({ "ok": true })
        }
        other => return Err(format!("unknown request {other:?}")),
    })
}

/// Every device kind: its devices if its runtime starts, else why not.
fn device_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for kind in DeviceKind::ALL {
        if let Err(why) = plugin::hardware_present(kind) {
            lines.push(format!("{kind}: unavailable: {why}"));
            continue;
        }
        match runtime::describe_devices(kind) {
            Ok(ds) => lines.extend(ds),
            Err(e) => lines.push(format!("{kind}: unavailable: {e}")),
        }
    }
    lines
}
