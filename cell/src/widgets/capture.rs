//! Runs code with the process's stdout and stderr going to files, and reads what it printed
//! back as Jupyter outputs (nbformat's JSON): stream text, displays (evcxr's content blocks,
//! live displays with their updates applied), an error block or a panic as an `error` output.
//! Comm lines it printed are sent on. What an Output widget and a callback show comes from
//! here; a panic is caught, so a callback that panics leaves the session running.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use super::comm::{emit, CommLine};
use crate::{DisplayLine, CLEAR_OUTPUT_MARKER, ERROR_MIME};

/// One capture at a time in the process (descriptors and the panic hook are the process's);
/// the thread that holds it may capture again inside (an Output's capture in a callback).
struct CaptureLock {
    owner: Mutex<(Option<std::thread::ThreadId>, usize)>,
    free: std::sync::Condvar,
}

static CAPTURE: eager::shared::Shared<CaptureLock> =
    eager::shared::Shared::new("eager_cell::widgets::capture", || CaptureLock {
        owner: Mutex::new((None, 0)),
        free: std::sync::Condvar::new(),
    });

struct Held(&'static CaptureLock);

fn hold() -> Held {
    let lock = CAPTURE.get();
    let me = std::thread::current().id();
    let mut owner = lock.owner.lock().unwrap_or_else(|p| p.into_inner());
    while owner.0.is_some_and(|t| t != me) {
        owner = lock.free.wait(owner).unwrap_or_else(|p| p.into_inner());
    }
    *owner = (Some(me), owner.1 + 1);
    Held(lock)
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut owner = self.0.owner.lock().unwrap_or_else(|p| p.into_inner());
        owner.1 -= 1;
        if owner.1 == 0 {
            owner.0 = None;
            self.0.free.notify_all();
        }
    }
}

/// The message of a caught panic.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// What `f` returned (`None` when it panicked) and what it printed, as Jupyter outputs. What
/// other threads print meanwhile is taken too (the descriptors are the process's).
pub(crate) fn run<R>(f: impl FnOnce() -> R) -> (Option<R>, Vec<Value>) {
    let _held = hold();
    let (out, err) = match (scratch_file(), scratch_file()) {
        (Ok(o), Ok(e)) => (o, e),
        // Nowhere to capture to: run as is (the output goes where the process's goes).
        _ => {
            return match std::panic::catch_unwind(AssertUnwindSafe(f)) {
                Ok(r) => (Some(r), Vec::new()),
                Err(payload) => (None, vec![error_output("panic", &panic_text(payload.as_ref()))]),
            }
        }
    };
    flush();
    // SAFETY: dup/dup2/close on descriptors this process owns; the saved copies are put back
    // before they are closed.
    let saved = unsafe { (libc::dup(1), libc::dup(2)) };
    unsafe {
        libc::dup2(out.as_raw_fd(), 1);
        libc::dup2(err.as_raw_fd(), 2);
    }
    // This copy's static: the hook below is this copy's code too.
    static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);
    let panic_message = &PANIC_MESSAGE;
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *panic_message.lock().unwrap_or_else(|p| p.into_inner()) = Some(info.to_string());
    }));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(previous_hook);
    flush();
    unsafe {
        libc::dup2(saved.0, 1);
        libc::dup2(saved.1, 2);
        libc::close(saved.0);
        libc::close(saved.1);
    }
    let mut outputs = parse(&read_all(out), &read_all(err));
    let result = match result {
        Ok(r) => Some(r),
        Err(payload) => {
            let message = panic_message.lock().unwrap_or_else(|p| p.into_inner()).take();
            let text = message.unwrap_or_else(|| panic_text(payload.as_ref()));
            outputs.push(error_output("panic", &text));
            None
        }
    };
    (result, outputs)
}

fn flush() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

/// A file in the temp dir, already unlinked (it goes with its descriptor).
fn scratch_file() -> std::io::Result<File> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("eager-capture-{}-{n}-{:p}", std::process::id(), &N));
    let f = File::options().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

fn read_all(mut f: File) -> String {
    let mut s = String::new();
    if f.rewind().is_ok() {
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        s = String::from_utf8_lossy(&bytes).into_owned();
    }
    s
}

/// An `error` output: its name, message and a one-line traceback.
pub(crate) fn error_output(ename: &str, evalue: &str) -> Value {
    json!({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [format!("{ename}: {evalue}")]})
}

/// A `stream` output.
pub(crate) fn stream_output(name: &str, text: &str) -> Value {
    json!({"output_type": "stream", "name": name, "text": text})
}

/// A `display_data` output of a bundle (value per MIME type; JSON types as JSON).
pub(crate) fn display_output(bundle: &[(String, String)]) -> Value {
    let mut data = Map::new();
    for (mime, v) in bundle {
        let value = if mime.ends_with("json") {
            serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()))
        } else {
            Value::String(v.clone())
        };
        data.insert(mime.clone(), value);
    }
    json!({"output_type": "display_data", "data": data, "metadata": {}})
}

/// The outputs that `stdout` and `stderr` stand for, in order (stderr's text last); comm lines
/// are sent on as they are met.
pub(crate) fn parse(stdout: &str, stderr: &str) -> Vec<Value> {
    let mut outputs: Vec<Value> = Vec::new();
    // Live displays by id: where each sits in `outputs`.
    let mut live: Vec<(String, usize)> = Vec::new();
    // Content blocks one after another make one display (a value shown as several types).
    let mut bundle: Vec<(String, String)> = Vec::new();
    let mut lines = stdout.lines();
    let flush_bundle = |bundle: &mut Vec<(String, String)>, outputs: &mut Vec<Value>| {
        if !bundle.is_empty() {
            outputs.push(display_output(bundle));
            bundle.clear();
        }
    };
    while let Some(line) = lines.next() {
        if let Some(mime) = line.strip_prefix("EVCXR_BEGIN_CONTENT ") {
            let mut body = Vec::new();
            for l in lines.by_ref() {
                if l == "EVCXR_END_CONTENT" {
                    break;
                }
                body.push(l);
            }
            let body = body.join("\n");
            if mime == ERROR_MIME {
                flush_bundle(&mut bundle, &mut outputs);
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                let ename = v["ename"].as_str().unwrap_or("Error");
                outputs.push(error_output(ename, v["evalue"].as_str().unwrap_or("")));
                continue;
            }
            if bundle.iter().any(|(m, _)| m == mime) {
                flush_bundle(&mut bundle, &mut outputs);
            }
            bundle.push((mime.to_string(), body));
            continue;
        }
        flush_bundle(&mut bundle, &mut outputs);
        if line == CLEAR_OUTPUT_MARKER {
            outputs.clear();
            live.clear();
        } else if let Some(c) = CommLine::parse(line) {
            emit(c);
        } else if let Some(d) = DisplayLine::parse(line) {
            let at = live.iter().find(|(id, _)| *id == d.id).map(|(_, i)| *i);
            match (at, d.data.is_empty()) {
                (Some(i), false) => outputs[i] = display_output(&d.data),
                (Some(i), true) => outputs[i] = Value::Null,
                (None, false) => {
                    live.push((d.id.clone(), outputs.len()));
                    outputs.push(display_output(&d.data));
                }
                (None, true) => {}
            }
        } else {
            push_text(&mut outputs, "stdout", &format!("{line}\n"));
        }
    }
    flush_bundle(&mut bundle, &mut outputs);
    if !stderr.is_empty() {
        push_text(&mut outputs, "stderr", stderr);
    }
    // Emptied live displays (a finished compile heartbeat) leave nothing.
    outputs.retain(|o| !o.is_null());
    outputs
}

/// Appends text to the last output when it is the same stream, else as a new one.
fn push_text(outputs: &mut Vec<Value>, name: &str, text: &str) {
    if let Some(last) = outputs.last_mut() {
        if last["output_type"] == "stream" && last["name"] == name {
            let joined = format!("{}{text}", last["text"].as_str().unwrap_or(""));
            last["text"] = Value::String(joined);
            return;
        }
    }
    outputs.push(stream_output(name, text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_text_displays_and_live_updates_become_outputs() {
        let shown =
            DisplayLine { id: "h".into(), update: false, data: vec![("text/plain".into(), "0%".into())] };
        let updated =
            DisplayLine { id: "h".into(), update: true, data: vec![("text/plain".into(), "100%".into())] };
        let stdout = format!(
            "a\nb\n{}\n{}\n{}\nc\n",
            crate::content_block("text/plain", "x"),
            shown.to_line(),
            updated.to_line()
        );
        let got = parse(&stdout, "warn\n");
        assert_eq!(
            got,
            vec![
                stream_output("stdout", "a\nb\n"),
                json!({"output_type": "display_data", "data": {"text/plain": "x"}, "metadata": {}}),
                json!({"output_type": "display_data", "data": {"text/plain": "100%"}, "metadata": {}}),
                stream_output("stdout", "c\n"),
                stream_output("stderr", "warn\n"),
            ]
        );
    }

    #[test]
    fn an_error_block_is_an_error_output_and_clear_output_clears() {
        let stdout =
            format!("gone\n{CLEAR_OUTPUT_MARKER}\n{}\n", crate::error_block("ShapeMismatch", Some("bad")));
        assert_eq!(parse(&stdout, ""), vec![error_output("ShapeMismatch", "bad")]);
    }

    #[test]
    fn a_capture_takes_what_was_printed_and_a_panic_becomes_an_error() {
        // Written to the descriptor (the test harness takes `println!`'s text before it).
        let (r, out) = run(|| {
            let _ = writeln!(std::io::stdout(), "inside");
            7
        });
        assert_eq!(r, Some(7));
        assert_eq!(out, vec![stream_output("stdout", "inside\n")]);
        let (r, out) = run(|| -> i32 { panic!("boom {}", 3) });
        assert_eq!(r, None);
        let last = out.last().expect("an error output");
        assert_eq!(last["output_type"], "error");
        assert!(last["evalue"].as_str().unwrap().contains("boom 3"), "{last}");
    }
}
