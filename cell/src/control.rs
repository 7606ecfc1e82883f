//! The session's control server, in the cell process: the first cell to [`attach`] serves a
//! Unix socket when [`CONTROL_SOCKET_ENV`] names one, one JSON request per line and one JSON
//! reply per line (the host's end is `repl::Control`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use eager::shared::Shared;
use eager::{cache, plugin, profiler, runtime, Device, DeviceKind};
use serde_json::{json, Value};

/// Env var naming the Unix socket the session's control server listens on.
pub const CONTROL_SOCKET_ENV: &str = "EAGER_CONTROL_SOCKET";

/// Makes sure the session's runtime exists and its control server runs (once per session,
/// whichever cell's copy of this crate calls first). The REPL's preload cell calls it, so the
/// host can talk to the child before the first user op.
pub fn attach() {
    static CONTROL: Shared<()> = Shared::new("eager_cell::control", start_control_server);
    // Any call that reads the session's state makes it.
    let _ = runtime::default_device();
    CONTROL.get();
}

fn start_control_server() {
    crate::live::start_heartbeat();
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
            let _ =
                std::thread::Builder::new().name("eager-control-conn".into()).spawn(move || serve(stream));
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
        "seq" => {
            // The host asks for the mark before each cell, and names the cell it starts.
            if let Some(cell) = req["cell"].as_u64() {
                profiler::mark_cell(cell);
            }
            json!({ "seq": profiler::next_seq() })
        }
        "events" => {
            let since = req["since"].as_u64().unwrap_or(0);
            json!({
                "events": profiler::events_since(since),
                "dropped": profiler::dropped(),
                "cells": profiler::cell_marks(),
            })
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
        "devices" => json!({
            "default": runtime::default_device().to_string(),
            "lines": device_lines(),
            "mesh": eager::mesh::current().map(|m| m.to_string()),
        }),
        "mesh" => json!({ "grid": eager::mesh::current().map(|m| m.grid()) }),
        "memory" => {
            if req["reset"].as_bool() == Some(true) {
                eager::memory::reset_peak();
            }
            let device = runtime::default_device();
            let stats = runtime::device_memory_stats(device).ok().flatten();
            json!({ "snapshot": eager::memory::snapshot(), "device": device.to_string(), "stats": stats })
        }
        "mode" => {
            if let Some(fused) = req["fused"].as_bool() {
                eager::set_fused_mode(fused);
            }
            json!({ "fused": eager::fused_mode() })
        }
        "autocast" => {
            let set = match req["dtype"].as_str() {
                None => None,
                Some("off") => Some(None),
                Some("bf16") => Some(Some(eager::DType::BF16)),
                Some("f16") => Some(Some(eager::DType::F16)),
                Some(other) => return Err(format!("autocast: no dtype {other:?} (bf16, f16 or off)")),
            };
            if let Some(d) = set {
                eager::set_autocast(d).map_err(|e| e.to_string())?;
            }
            json!({ "dtype": eager::autocast_dtype().map(|d| d.to_string()) })
        }
        "end_region" => {
            eager::end_fused_region();
            json!({ "ok": true })
        }
        "set_device" => {
            let d: Device = req["device"].as_str().unwrap_or("").parse()?;
            let rt = runtime::runtime(d.kind).map_err(|e| e.to_string())?;
            rt.device(d).map_err(|e| e.to_string())?;
            runtime::set_default_device(d);
            json!({ "device": d.to_string() })
        }
        "take_error" => match eager::error::take_shown() {
            Some((kind, text)) => json!({ "kind": kind, "text": text }),
            None => json!({}),
        },
        "interrupt" => {
            runtime::set_interrupted(true);
            json!({ "ok": true })
        }
        // A front end's comm message (a widget moved): the comm lines and outputs to send back.
        "comm" => {
            let kind: crate::widgets::CommKind =
                serde_json::from_value(req["kind"].clone()).map_err(|e| format!("comm: bad kind: {e}"))?;
            let id = req["comm_id"].as_str().ok_or("comm: no comm_id")?;
            crate::widgets::answer(kind, id, req["target_name"].as_str(), &req["data"])
        }
        "trim" => json!({ "mappings": crate::trim::trim_cell_libraries() }),
        "clear_interrupt" => {
            runtime::set_interrupted(false);
            json!({ "ok": true })
        }
        // A warm session handed to a front end takes on its directory and environment.
        "adopt" => {
            let cwd = req["cwd"].as_str().ok_or("adopt: no cwd")?;
            std::env::set_current_dir(cwd).map_err(|e| format!("adopt: entering {cwd}: {e}"))?;
            for (k, v) in req["env"].as_object().into_iter().flatten() {
                std::env::set_var(k, v.as_str().unwrap_or_default());
            }
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
