//! The host's end of the session's control socket, which `eager_cell` serves in the cell
//! process: JSON lines to the child.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use eager::cache::{CacheStats, EntryStats};
use eager::profiler::{CellMark, Event};
use serde_json::{json, Value};

/// A connection to the session's eager runtime.
pub struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Control {
    pub fn connect(path: &Path) -> Result<Control> {
        let writer = UnixStream::connect(path)
            .with_context(|| format!("connecting to eager's control socket {}", path.display()))?;
        writer.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Control { reader: BufReader::new(writer.try_clone()?), writer })
    }

    fn call(&mut self, req: Value) -> Result<Value> {
        writeln!(self.writer, "{req}")?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(anyhow!("the session's runtime closed the control socket"));
        }
        let v: Value = serde_json::from_str(&line)?;
        match v.get("error").and_then(Value::as_str) {
            Some(e) => Err(anyhow!("{e}")),
            None => Ok(v),
        }
    }

    /// The profiler's next sequence number: a mark before a cell.
    pub fn seq(&mut self) -> Result<u64> {
        Ok(self.call(json!({"op": "seq"}))?["seq"].as_u64().unwrap_or(0))
    }

    /// [`Control::seq`], marking in the profiler's log that cell `cell` starts there (what
    /// viz labels the cells of a session's timeline with).
    pub fn start_cell(&mut self, cell: u64) -> Result<u64> {
        Ok(self.call(json!({"op": "seq", "cell": cell}))?["seq"].as_u64().unwrap_or(0))
    }

    /// Events since `seq`, how many the bounded log dropped, and where cells began.
    pub fn events_since(&mut self, seq: u64) -> Result<(Vec<Event>, u64, Vec<CellMark>)> {
        let mut v = self.call(json!({"op": "events", "since": seq}))?;
        let events = serde_json::from_value(v["events"].take())?;
        // A runtime older than cell marks sends none.
        let cells = serde_json::from_value(v["cells"].take()).unwrap_or_default();
        Ok((events, v["dropped"].as_u64().unwrap_or(0), cells))
    }

    pub fn cache(&mut self) -> Result<(CacheStats, Vec<EntryStats>)> {
        let mut v = self.call(json!({"op": "cache"}))?;
        Ok((serde_json::from_value(v["stats"].take())?, serde_json::from_value(v["entries"].take())?))
    }

    pub fn cache_clear(&mut self) -> Result<()> {
        self.call(json!({"op": "cache_clear"})).map(drop)
    }

    /// (default device, one line per device or unavailable kind).
    /// The default device, a line per device kind, and the mesh in use (if any).
    pub fn devices(&mut self) -> Result<(String, Vec<String>, Option<String>)> {
        let v = self.call(json!({"op": "devices"}))?;
        let lines = v["lines"]
            .as_array()
            .map(|a| a.iter().filter_map(|l| l.as_str().map(String::from)).collect())
            .unwrap_or_default();
        Ok((v["default"].as_str().unwrap_or("?").to_string(), lines, v["mesh"].as_str().map(String::from)))
    }

    /// The mesh in use, drawn as a grid of its devices.
    pub fn mesh(&mut self) -> Result<Option<String>> {
        let v = self.call(json!({"op": "mesh"}))?;
        Ok(v["grid"].as_str().map(String::from))
    }

    /// The memory ledger, and the default device's allocator figures where the plugin gives
    /// them; with `reset`, the peak starts again first.
    pub fn memory(
        &mut self,
        reset: bool,
    ) -> Result<(eager::memory::MemorySnapshot, String, Option<eager::pjrt::DeviceMemoryStats>)> {
        let mut v = self.call(json!({"op": "memory", "reset": reset}))?;
        let device = v["device"].as_str().unwrap_or("?").to_string();
        Ok((
            serde_json::from_value(v["snapshot"].take())?,
            device,
            serde_json::from_value(v["stats"].take())?,
        ))
    }

    /// Sets fused mode (`Some`) and says whether it is on.
    pub fn mode(&mut self, fused: Option<bool>) -> Result<bool> {
        let v = self.call(json!({"op": "mode", "fused": fused}))?;
        Ok(v["fused"].as_bool().unwrap_or(false))
    }

    /// The session-wide autocast dtype (`bf16`, `f16`), set first when `set` says (`off` too).
    pub fn autocast(&mut self, set: Option<&str>) -> Result<Option<String>> {
        let v = self.call(json!({"op": "autocast", "dtype": set}))?;
        Ok(v["dtype"].as_str().map(String::from))
    }

    /// Runs what fused mode recorded in the cell that just ended.
    pub fn end_region(&mut self) -> Result<()> {
        self.call(json!({"op": "end_region"})).map(drop)
    }

    pub fn set_device(&mut self, device: &str) -> Result<String> {
        let v = self.call(json!({"op": "set_device", "device": device}))?;
        Ok(v["device"].as_str().unwrap_or(device).to_string())
    }

    /// The last eager error a cell displayed (kind, text), taken.
    pub fn take_error(&mut self) -> Result<Option<(String, String)>> {
        let v = self.call(json!({"op": "take_error"}))?;
        Ok(match (v["kind"].as_str(), v["text"].as_str()) {
            (Some(k), Some(t)) => Some((k.to_string(), t.to_string())),
            _ => None,
        })
    }

    pub fn interrupt(&mut self) -> Result<()> {
        self.call(json!({"op": "interrupt"})).map(drop)
    }

    /// Hands a front end's comm message (`kind`, `comm_id`, `target_name`, `data`) to the
    /// session's widgets; their answer: `known`, the comm `lines` and callbacks' `outputs`.
    pub fn comm(&mut self, message: Value) -> Result<Value> {
        let mut req = message;
        req["op"] = json!("comm");
        self.call(req)
    }

    /// Pages out the cell libraries' mappings in the cell process (see `eager_cell::trim`).
    pub fn trim(&mut self) -> Result<()> {
        self.call(json!({"op": "trim"})).map(drop)
    }

    /// The cell process takes on a front end's working directory and environment variables.
    pub fn adopt(&mut self, cwd: &Path, env: &[(String, String)]) -> Result<()> {
        let env: serde_json::Map<String, Value> =
            env.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        self.call(json!({"op": "adopt", "cwd": cwd, "env": env})).map(drop)
    }

    pub fn clear_interrupt(&mut self) -> Result<()> {
        self.call(json!({"op": "clear_interrupt"})).map(drop)
    }
}
