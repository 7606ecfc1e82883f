//! Chrome trace-event JSON (the format Perfetto and `chrome://tracing` open): one complete
//! event (`ph: "X"`) per compile, load from disk, execute and transfer, on one track per
//! device lane. Times stay true (a viewer zooms); a session's cells and the idle stretches
//! a timeline cuts get tracks of their own and are listed in the trace's `metadata`.

use std::path::Path;

use eager::profiler::{CacheOutcome, Event, EventKind};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{write, Result};
use crate::profile::Profile;
use crate::table::transfer_label;

/// One entry of `traceEvents`.
#[derive(Serialize)]
struct TraceEvent {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    /// Microseconds since the profile's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    args: Value,
}

#[derive(Serialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<TraceEvent>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Value>,
}

const PID: u32 = 1;

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn slice(name: String, cat: &'static str, ts_ns: u64, dur_ns: u64, tid: u32, args: Value) -> TraceEvent {
    TraceEvent {
        name,
        cat: Some(cat),
        ph: "X",
        ts: Some(us(ts_ns)),
        dur: Some(us(dur_ns)),
        pid: PID,
        tid,
        args,
    }
}

fn meta(name: &str, tid: u32, args: Value) -> TraceEvent {
    TraceEvent { name: name.into(), cat: None, ph: "M", ts: None, dur: None, pid: PID, tid, args }
}

/// What a viewer shows when a slice is selected.
fn args(e: &Event, cache: Option<&str>) -> Value {
    let mut a = json!({
        "signature": e.info.signature(),
        "shapes": e.info.inputs.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" x "),
        "output": e.info.output.to_string(),
        "device": e.device().to_string(),
        "bytes": e.bytes,
        "seq": e.seq,
    });
    if let Some(c) = cache {
        a["cache"] = c.into();
    }
    if !e.info.attrs.is_empty() {
        a["attrs"] = e.info.attrs.clone().into();
    }
    a
}

impl Profile {
    /// The trace as Chrome trace-event JSON. Times are µs since the profile's start; a miss
    /// gives a `compile` slice then an `execute` slice, a disk hit a `load` slice (the
    /// executable read from the persistent compile cache) then an `execute` slice, a hit an
    /// `execute` slice, a transfer a `transfer` slice. Every op slice has a `cache` arg:
    /// `hit`, `miss` or `disk`. Slices are ordered by `ts`.
    pub fn trace_json(&self) -> String {
        let (lanes, lane_of) = self.lanes();
        let mut events = vec![meta("process_name", 0, json!({ "name": "eager" }))];
        for (i, lane) in lanes.iter().enumerate() {
            events.push(meta("thread_name", i as u32 + 1, json!({ "name": lane })));
            events.push(meta("thread_sort_index", i as u32 + 1, json!({ "sort_index": i })));
        }
        let mut slices = Vec::new();
        for (e, lane) in lane_of.into_iter().map(|(i, row)| (&self.events()[i], row)) {
            let tid = lane as u32 + 1;
            let t = e.start_ns - self.start_ns();
            // Op names alone, so that viewers colour and group all calls of an op alike.
            let name = if e.kind == EventKind::Op { e.name() } else { transfer_label(e.kind) };
            match e.kind {
                EventKind::Op => {
                    // The outcome, and the slice (also its category) that fetched the executable.
                    let (cache, fetch) = match e.cache {
                        Some(CacheOutcome::Miss) => ("miss", Some("compile")),
                        Some(CacheOutcome::DiskHit) => ("disk", Some("load")),
                        Some(CacheOutcome::Hit) | None => ("hit", None),
                    };
                    if let Some(fetch) = fetch {
                        // 1 ns short: float µs round-off must never make it overlap the execute
                        // slice that follows, or viewers misnest the two.
                        let dur = e.compile_ns.saturating_sub(1);
                        slices.push(slice(
                            format!("{fetch} {name}"),
                            fetch,
                            t,
                            dur,
                            tid,
                            args(e, Some(cache)),
                        ));
                    }
                    slices.push(slice(
                        name.into(),
                        "execute",
                        t + e.compile_ns,
                        e.execute_ns,
                        tid,
                        args(e, Some(cache)),
                    ));
                }
                _ => slices.push(slice(name.into(), "transfer", t, e.execute_ns, tid, args(e, None))),
            }
        }
        let metadata = self.session_tracks(lanes.len() as u32 + 1, &mut events, &mut slices);
        // Events are sorted by start; an execute can still start after the next event does
        // when lanes overlap, so sort the slices themselves (stable: compile or load before
        // execute).
        slices.sort_by(|a, b| a.ts.partial_cmp(&b.ts).unwrap_or(std::cmp::Ordering::Equal));
        events.extend(slices);
        let trace = Trace { trace_events: events, display_time_unit: "ms", metadata };
        serde_json::to_string(&trace).expect("a trace of strings and numbers always serializes")
    }

    /// Tracks from `tid` on for the cells (when the events come from several) and the idle
    /// stretches (see [`Profile::idle_gaps`]), and the same as the trace's metadata; `None`
    /// when there are neither.
    fn session_tracks(
        &self,
        tid: u32,
        meta_events: &mut Vec<TraceEvent>,
        slices: &mut Vec<TraceEvent>,
    ) -> Option<Value> {
        let cells = self.cells();
        let cells = if cells.len() > 1 { cells } else { Vec::new() };
        let gaps = self.idle_gaps();
        if cells.is_empty() && gaps.is_empty() {
            return None;
        }
        let t = |ns: u64| ns - self.start_ns();
        let mut cell_list = Vec::new();
        if !cells.is_empty() {
            meta_events.push(meta("thread_name", tid, json!({ "name": "cells" })));
            meta_events.push(meta("thread_sort_index", tid, json!({ "sort_index": tid })));
            for (cell, range) in &cells {
                let events = &self.events()[range.clone()];
                let start = events[0].start_ns;
                let end = events.iter().map(Event::end_ns).max().unwrap_or(start);
                let args = json!({ "cell": cell, "dispatches": events.len() });
                slices.push(slice(format!("cell {cell}"), "cell", t(start), end - start, tid, args.clone()));
                cell_list.push(json!({ "cell": cell, "ts": us(t(start)), "dur": us(end - start), "dispatches": events.len() }));
            }
        }
        let idle_tid = tid + 1;
        let mut gap_list = Vec::new();
        if !gaps.is_empty() {
            meta_events.push(meta("thread_name", idle_tid, json!({ "name": "idle (cut from timelines)" })));
            meta_events.push(meta("thread_sort_index", idle_tid, json!({ "sort_index": idle_tid })));
            for g in &gaps {
                let args = json!({ "idle_ms": g.len_ns() as f64 / 1e6 });
                slices.push(slice(g.label(), "idle", t(g.from_ns), g.len_ns(), idle_tid, args));
                gap_list.push(json!({ "ts": us(t(g.from_ns)), "dur": us(g.len_ns()), "label": g.label() }));
            }
        }
        Some(json!({ "cells": cell_list, "idle_gaps": gap_list }))
    }

    /// Writes [`Profile::trace_json`] to `path` (open it at ui.perfetto.dev or chrome://tracing).
    pub fn write_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        write(path.as_ref(), self.trace_json().as_bytes())
    }
}
