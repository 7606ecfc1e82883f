//! Views of real dispatches on the CPU PJRT plugin. The profiler log and the compile cache
//! are process-wide, so every test here holds `LOCK` while it dispatches and compares
//! against cache-stat deltas taken under it; each test uses shapes no other test uses, so
//! its expected misses do not depend on test order. The persistent compile cache outlives
//! the process: an executable a test compiled on an earlier run is loaded from disk now, so
//! tests expect "compiled or loaded" and check each view against the deltas.

use std::sync::Mutex;

use eager::prelude::*;
use eager::profiler::EventKind;
use viz::style::{RGBColor, COMPILE, EXECUTE, LOAD, TRANSFER};
use viz::{Profile, RECOMPILE_THRESHOLD};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the compile cache counted over a workload.
struct Delta {
    hits: u64,
    misses: u64,
    disk_hits: u64,
}

/// Profiles `f` and returns the profile with the cache's counter deltas over it.
fn measured(f: impl FnOnce() -> Result<()>) -> (Profile, Delta) {
    let before = cache::stats();
    let (r, p) = viz::profile(f);
    r.expect("the workload runs");
    let after = cache::stats();
    let delta = Delta {
        hits: after.hits - before.hits,
        misses: after.misses - before.misses,
        disk_hits: after.disk_hits - before.disk_hits,
    };
    (p, delta)
}

fn rects(svg: &str, c: RGBColor) -> usize {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    let want = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    doc.descendants().filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(want.as_str())).count()
}

#[test]
fn table_counts_equal_the_cache_stats() {
    let _g = lock();
    let (p, d) = measured(|| {
        let a = Tensor::from_slice(&[1.0f32; 21], &[3, 7])?;
        let b = Tensor::from_slice(&[2.0f32; 7], &[7])?;
        let mut c = a.clone();
        for _ in 0..5 {
            c = c.add(&b)?;
        }
        let m = c.matmul(&a.t()?)?;
        assert_eq!(m.shape(), [3, 3]);
        Ok(())
    });
    assert_eq!((p.hits(), p.misses(), p.disk_hits()), (d.hits, d.misses, d.disk_hits));
    // add: compiled (or loaded) once, hit four times; transpose and matmul once each.
    assert_eq!(d.misses + d.disk_hits, 3, "{}", p.table_text());
    assert_eq!(d.hits, 4);
    let t = p.table();
    assert_eq!((t.hits, t.misses, t.disk_hits), (d.hits, d.misses, d.disk_hits));
    assert_eq!((t.totals.misses, t.totals.disk_hits), (d.misses, d.disk_hits));
    let op_calls: u64 = t.rows.iter().filter(|r| !r.is_transfer()).map(|r| r.calls).sum();
    assert_eq!(op_calls, d.hits + d.misses + d.disk_hits);
    let add = t.rows.iter().find(|r| r.op == "add").expect("an add row");
    assert_eq!((add.calls, add.misses + add.disk_hits, add.shapes.as_str()), (5, 1, "f32[3, 7] x f32[7]"));
    assert!(add.compile_ns > 0 && add.execute_ns > 0);
    let uploads = t.rows.iter().filter(|r| r.kind == EventKind::HostToDevice).map(|r| r.calls).sum::<u64>();
    assert_eq!(uploads, 2);
    let rate = format!("hit rate {:.1}%", 100.0 * d.hits as f64 / op_calls as f64);
    assert!(p.table_text().contains(&rate) && p.table_html().contains(&rate));
    assert!(p.hints().is_empty(), "{:?}", p.hints());
}

#[test]
fn charts_and_trace_of_a_real_run() {
    let _g = lock();
    let (p, d) = measured(|| {
        let x = Tensor::ones(&[5, 11], DType::F32)?;
        for _ in 0..4 {
            let _ = x.exp()?.sum_all()?.item::<f32>()?;
        }
        Ok(())
    });
    let ops = p.ops().count();
    assert_eq!(ops as u64, d.hits + d.misses + d.disk_hits);
    let transfers = p.events().len() - ops;
    assert!(transfers >= 4, "four downloads at least");

    let svg = p.timeline().svg().unwrap();
    assert_eq!(rects(&svg, COMPILE) - 1, d.misses as usize);
    assert_eq!(rects(&svg, LOAD) - 1, d.disk_hits as usize);
    assert_eq!(rects(&svg, EXECUTE) - 1, ops);
    assert_eq!(rects(&svg, TRANSFER) - 1, transfers);

    for chart in p.charts() {
        let bytes = chart.png(900, 420).unwrap();
        let reader = png::Decoder::new(bytes.as_slice()).read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (900, 420));
    }

    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let slices: Vec<_> =
        v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").cloned().collect();
    let count = |c: &str| slices.iter().filter(|e| e["cat"] == c).count();
    assert_eq!(count("compile") as u64, d.misses);
    assert_eq!(count("load") as u64, d.disk_hits);
    assert_eq!(count("execute"), ops);
    assert_eq!(count("transfer"), transfers);
    let ts: Vec<f64> = slices.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    assert!(slices.iter().any(|e| e["name"] == "exp" && e["args"]["shapes"] == "f32[5, 11]"));
}

#[test]
fn shape_churn_gives_a_hint_and_steady_shapes_do_not() {
    let _g = lock();
    let (churn, _) = measured(|| {
        for n in 1..=RECOMPILE_THRESHOLD + 2 {
            let x = Tensor::ones(&[n, 13], DType::F32)?;
            let _ = x.tanh()?;
        }
        Ok(())
    });
    let hints = churn.hints();
    let tanh = hints.iter().find(|h| h.op == "tanh").expect("a hint for tanh");
    assert_eq!(tanh.shapes.len(), RECOMPILE_THRESHOLD + 2);
    assert_eq!(tanh.shapes[0], "[1, 13]");
    assert_eq!(tanh.varying, ["dim 0 of input 0"]);
    let line = tanh.to_string();
    assert!(line.contains("`tanh`") && line.contains("[1, 13]"), "{line}");
    assert!(churn.table_text().contains("`tanh`"));

    let (steady, _) = measured(|| {
        let x = Tensor::ones(&[17, 13], DType::F32)?;
        for _ in 0..3 * RECOMPILE_THRESHOLD {
            let _ = x.tanh()?;
        }
        Ok(())
    });
    assert!(steady.hints().is_empty(), "{:?}", steady.hints());
    assert!(!steady.table_text().contains("hint"));
}

#[test]
fn recorder_captures_between_start_and_stop() -> Result<()> {
    let _g = lock();
    let x = Tensor::ones(&[19], DType::F32)?;
    let r = viz::start();
    let _ = x.sin()?;
    let first = r.snapshot();
    let _ = x.cos()?;
    let p = r.stop();
    assert_eq!(first.ops().map(|e| e.name()).collect::<Vec<_>>(), ["sin"]);
    assert_eq!(p.ops().map(|e| e.name()).collect::<Vec<_>>(), ["sin", "cos"]);
    assert_eq!(p.lost(), 0);
    assert!(p.wall_ns() >= p.events().iter().map(|e| e.total_ns()).sum::<u64>());
    // The session holds them too.
    let session = Profile::session();
    let seqs: Vec<u64> = session.events().iter().map(|e| e.seq).collect();
    assert!(p.events().iter().all(|e| seqs.contains(&e.seq)));
    Ok(())
}

#[test]
fn a_recording_keeps_every_event_past_the_log_capacity_then_lets_the_log_shrink() -> Result<()> {
    let _g = lock();
    let before = eager::profiler::capacity();
    eager::profiler::set_capacity(8);
    let x = Tensor::ones(&[29], DType::F32)?;
    let (_, p) = viz::profile(|| -> Result<()> {
        for _ in 0..50 {
            let _ = x.exp()?;
        }
        Ok(())
    });
    let kept = Profile::session().events().len();
    // Without a recording, each new event pushes the oldest out.
    let dropped = eager::profiler::dropped();
    for _ in 0..20 {
        let _ = x.exp()?;
    }
    let dropped_after = eager::profiler::dropped() - dropped;
    let kept_after = Profile::session().events().len();
    eager::profiler::set_capacity(before);
    assert_eq!((p.ops().count(), p.lost()), (50, 0));
    assert_eq!(kept, 8, "the log went back to its capacity once the recording ended");
    assert_eq!((kept_after, dropped_after), (8, 20));
    Ok(())
}

#[test]
fn an_spmd_program_is_drawn_on_every_device_of_its_mesh() -> Result<()> {
    let _g = lock();
    let mesh = eager::Mesh::new(&[("data", 4)])?;
    let x = Tensor::ones(&[8, 3], DType::F32)?.shard(&mesh, &eager::PartitionSpec::new(&[Some("data")]))?;
    let (r, p) = viz::profile(|| x.exp()?.sum(&[1], false));
    r?.block_until_ready()?;
    let trace = p.trace_json();
    for d in 0..4 {
        assert!(trace.contains(&format!("\"name\":\"cpu:{d}\"")), "no lane for cpu:{d}: {trace}");
    }
    assert!(p.timeline().svg().expect("an svg").contains("cpu:3"));
    // The table says what ran over the mesh; the sum over the split rows needs no
    // collective, the sum of everything would.
    let text = p.table_text();
    assert!(text.contains("spmd: 2 dispatches ran as 2 SPMD programs over meshes"), "{text}");
    Ok(())
}

#[test]
fn a_split_that_changes_every_call_gives_a_hint() -> Result<()> {
    let _g = lock();
    use eager::PartitionSpec as P;
    let mesh = eager::Mesh::new(&[("data", 2), ("model", 2)])?;
    let specs = [
        P::replicated(),
        P::new(&[Some("data")]),
        P::new(&[Some("model")]),
        P::new(&[None, Some("data")]),
        P::new(&[None, Some("model")]),
        P::new(&[Some("data"), Some("model")]),
        P::new(&[Some("model"), Some("data")]),
        P::with_axes(&[&["data", "model"]]),
        P::with_axes(&[&[], &["data", "model"]]),
    ];
    let x = Tensor::ones(&[8, 12], DType::F32)?;
    let (r, p) = viz::profile(|| -> Result<()> {
        for spec in &specs {
            x.shard(&mesh, spec)?.log1p()?.block_until_ready()?;
        }
        Ok(())
    });
    r?;
    let hints = p.hints();
    let hint = hints.iter().find(|h| h.op == "log1p").expect("a hint for log1p");
    assert!(hint.splits_vary && hint.varying == ["the split of input 0"], "{hint:?}");
    let line = hint.to_string();
    assert!(
        line.contains("9 distinct splits of the same shapes ([8, 12] P(), [8, 12] P(\"data\")"),
        "{line}"
    );
    assert!(line.contains("keep each tensor's split steady"), "{line}");
    Ok(())
}

#[test]
fn files_are_written() {
    let _g = lock();
    let (p, _) = measured(|| {
        let x = Tensor::ones(&[23], DType::F32)?;
        let _ = x.neg()?.abs()?;
        Ok(())
    });
    let dir = tempfile::tempdir().unwrap();
    for (chart, name) in p.charts().iter().zip(["a", "b", "c"]) {
        let png_path = dir.path().join(format!("{name}.png"));
        chart.write_png(&png_path).unwrap();
        chart.write_svg(dir.path().join(format!("{name}.svg"))).unwrap();
        let file = std::fs::File::open(&png_path).unwrap();
        let reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), chart.default_size());
        let svg = std::fs::read_to_string(dir.path().join(format!("{name}.svg"))).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
    }
    p.write_trace(dir.path().join("trace.json")).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("trace.json")).unwrap()).unwrap();
    assert!(json["traceEvents"].is_array());
    let err = p.write_trace(dir.path().join("missing/trace.json")).unwrap_err();
    assert!(matches!(err, viz::Error::Io { .. }) && err.to_string().contains("missing"), "{err}");
}

#[test]
fn an_op_dropped_from_memory_comes_back_from_disk() -> Result<()> {
    let _g = lock();
    let x = Tensor::ones(&[29], DType::F32)?;
    // Compiled (or loaded, if an earlier run stored it); either way now on disk too.
    let _ = x.sqrt()?;
    // Memory only: the persistent cache keeps the executable (this zeroes the counters).
    cache::clear();
    let (p, d) = measured(|| {
        let _ = x.sqrt()?;
        Ok(())
    });
    let on_disk = eager::disk_cache::is_enabled();
    // With the persistent cache off (EAGER_COMPILE_CACHE=off), the op compiles again.
    let (misses, disk_hits) = if on_disk { (0, 1) } else { (1, 0) };
    assert_eq!((d.hits, d.misses, d.disk_hits), (0, misses, disk_hits));
    assert_eq!((p.hits(), p.misses(), p.disk_hits()), (0, misses, disk_hits));

    let t = p.table();
    let sqrt = t.rows.iter().find(|r| r.op == "sqrt").expect("a sqrt row");
    assert_eq!((sqrt.calls, sqrt.misses, sqrt.disk_hits), (1, misses, disk_hits));
    assert!(sqrt.compile_ns > 0);
    let summary = format!("0 hits, {misses} misses (compiled), {disk_hits} loaded from disk, hit rate 0.0%");
    assert!(p.table_text().contains(&summary), "{}", p.table_text());

    let svg = p.timeline().svg().unwrap();
    assert_eq!(rects(&svg, LOAD) - 1, disk_hits as usize);
    assert_eq!(rects(&svg, COMPILE) - 1, misses as usize);

    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let (fetch, outcome) = if on_disk { ("load", "disk") } else { ("compile", "miss") };
    let slice = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == format!("{fetch} sqrt"))
        .unwrap_or_else(|| panic!("a `{fetch} sqrt` slice in {v}"))
        .clone();
    assert_eq!((slice["cat"].as_str(), slice["args"]["cache"].as_str()), (Some(fetch), Some(outcome)));
    Ok(())
}

#[test]
fn a_capture_labels_its_events_with_the_cells_marked_in_the_log() -> Result<()> {
    let _g = lock();
    // Every op warm first, so the cells' widths on the timeline come from their op counts, not
    // from which op happened to compile: cell 41 (nine ops) leaves room for both names.
    let warm = Tensor::ones(&[29], DType::F32)?;
    warm.exp()?.neg()?.block_until_ready()?;
    let recorder = viz::start();
    // What the REPL's host does before each cell (through the control socket).
    eager::profiler::mark_cell(41);
    let x = Tensor::ones(&[29], DType::F32)?;
    for _ in 0..8 {
        x.exp()?.block_until_ready()?;
    }
    eager::profiler::mark_cell(42);
    x.neg()?.block_until_ready()?;
    let p = recorder.stop();
    let cells: Vec<(u64, Vec<&str>)> = p
        .cells()
        .into_iter()
        .map(|(cell, range)| {
            (cell, p.events()[range].iter().filter(|e| e.kind == EventKind::Op).map(|e| e.name()).collect())
        })
        .collect();
    let cell_41 = [vec!["full"], vec!["exp"; 8]].concat();
    assert_eq!(cells, [(41, cell_41), (42, vec!["neg"])], "ones is a `full` op");
    let svg = p.timeline().svg().expect("an svg");
    assert!(svg.contains("cell 41") && svg.contains("cell 42"), "the timeline names both cells");
    Ok(())
}
