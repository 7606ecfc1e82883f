//! Views of hand-made events: exact counts, no device needed.

use std::sync::Arc;

use eager::profiler::{CacheOutcome, Event, EventKind, OpInfo};
use eager::{DType, Device, Spec};
use viz::style::{RGBColor, COMPILE, EXECUTE, HIT, MISS, TRANSFER};
use viz::{ChartKind, Profile, RECOMPILE_THRESHOLD};

fn info(name: &'static str, attrs: &str, shapes: &[&[usize]], device: Device) -> Arc<OpInfo> {
    let inputs: Vec<Spec> = shapes.iter().map(|s| Spec::new(s, DType::F32)).collect();
    let output = inputs.first().cloned().unwrap_or_else(|| Spec::new(&[], DType::F32));
    Arc::new(OpInfo { name, attrs: attrs.into(), inputs, output, device })
}

/// Builds events back to back on one clock, with `gap_ns` of host time between them.
struct Log {
    events: Vec<Event>,
    t: u64,
    gap_ns: u64,
}

impl Log {
    fn new() -> Log {
        Log { events: Vec::new(), t: 1_000_000, gap_ns: 20_000 }
    }
    fn push(
        &mut self,
        kind: EventKind,
        info: &Arc<OpInfo>,
        cache: Option<CacheOutcome>,
        compile_ns: u64,
        execute_ns: u64,
    ) {
        let bytes = info.inputs.iter().chain([&info.output]).map(|s| s.size_in_bytes() as u64).sum();
        let seq = self.events.len() as u64;
        self.events.push(Event {
            seq,
            kind,
            info: info.clone(),
            cache,
            start_ns: self.t,
            compile_ns,
            execute_ns,
            bytes,
        });
        self.t += compile_ns + execute_ns + self.gap_ns;
    }
    /// An op: compiled (2 ms) if `miss`, then executed (50 µs).
    fn op(&mut self, info: &Arc<OpInfo>, miss: bool) {
        let (cache, compile) = if miss { (CacheOutcome::Miss, 2_000_000) } else { (CacheOutcome::Hit, 0) };
        self.push(EventKind::Op, info, Some(cache), compile, 50_000);
    }
    fn transfer(&mut self, kind: EventKind, info: &Arc<OpInfo>) {
        self.push(kind, info, None, 0, 8_000);
    }
    fn profile(&self) -> Profile {
        Profile::from_events(self.events.clone())
    }
}

/// add (1 miss, 3 hits), matmul (1 miss, 1 hit), two uploads.
fn small() -> Log {
    let cpu = Device::cpu();
    let add = info("add", "", &[&[2, 3], &[3]], cpu);
    let matmul = info("matmul", "", &[&[4, 8], &[8, 2]], cpu);
    let up = info("to_device", "", &[&[4, 8]], cpu);
    let mut log = Log::new();
    log.transfer(EventKind::HostToDevice, &up);
    log.transfer(EventKind::HostToDevice, &up);
    for i in 0..4 {
        log.op(&add, i == 0);
    }
    log.op(&matmul, true);
    log.op(&matmul, false);
    log
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The `points` of the SVG's polylines stroked in `color`.
fn lines(svg: &str, color: RGBColor) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let want = hex(color);
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke").is_some_and(|s| s.eq_ignore_ascii_case(&want)))
        .map(|n| n.attribute("points").unwrap_or_default().to_string())
        .collect()
}

/// Number of `<rect>`s filled with `color` in an SVG document.
fn rects(svg: &str, color: RGBColor) -> usize {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    let want = hex(color);
    doc.descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f.eq_ignore_ascii_case(&want)))
        .count()
}

#[test]
fn table_counts_sort_and_totals() {
    let p = small().profile();
    let t = p.table();
    assert_eq!((t.hits, t.misses), (4, 2));
    assert!((t.hit_rate() - 4.0 / 6.0).abs() < 1e-12);
    let ops: Vec<(&str, u64, u64)> = t.rows.iter().map(|r| (r.op.as_str(), r.calls, r.misses)).collect();
    // Both ops compiled once (2 ms): add runs 4 x 50 µs, matmul 2 x 50 µs, uploads 2 x 8 µs.
    assert_eq!(ops, [("add", 4, 1), ("matmul", 2, 1), ("host→device", 2, 0)]);
    assert_eq!(t.rows[0].shapes, "f32[2, 3] x f32[3]");
    assert_eq!(t.rows[0].compile_ns, 2_000_000);
    assert_eq!(t.rows[0].execute_ns, 200_000);
    assert_eq!(t.rows[0].mean_execute_ns(), 50_000.0);
    assert_eq!(t.totals.calls, 8);
    assert_eq!(t.totals.misses, 2);
    assert_eq!(t.totals.compile_ns, 4_000_000);
    assert_eq!(t.totals.execute_ns, 316_000);
    assert_eq!(t.wall_ns, p.wall_ns());
    let shares: f64 = t.rows.iter().map(|r| t.share(r)).sum();
    assert!((shares - t.share(&t.totals)).abs() < 1e-9);
    assert!(t.share(&t.totals) < 100.0, "host gaps are not dispatch time");

    let text = p.table_text();
    assert!(text.contains("hit rate 66.7%"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("op") && lines[0].contains("compile ms") && lines[0].contains("wall %"));
    assert!(lines[2].starts_with("add ") && lines[2].contains("f32[2, 3] x f32[3]"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("total") && l.contains(" 8 ") && l.contains(" 2 ")), "{text}");

    let html = p.table_html();
    roxmltree::Document::parse(&html).expect("the HTML table is well-formed");
    // Header, three rows, totals.
    assert_eq!(html.matches("<tr").count(), 5);
    assert!(html.contains("host→device") && html.contains("hit rate 66.7%"));
}

#[test]
fn table_top_sums_the_rest() {
    let mut log = Log::new();
    for n in 1..=5 {
        log.op(&info("exp", "", &[&[n]], Device::cpu()), true);
    }
    let t = log.profile().table().top(2);
    assert_eq!(t.rows.len(), 2);
    let rest = t.rest.as_ref().expect("three rows left out");
    assert_eq!((rest.op.as_str(), rest.calls, rest.misses), ("… 3 more", 3, 3));
    assert_eq!(t.totals.calls, 5);
    assert!(t.to_text().contains("… 3 more"));
}

#[test]
fn timeline_svg_holds_one_bar_per_dispatch() {
    let p = small().profile();
    let svg = p.timeline().svg().unwrap();
    // Each colour also has one legend swatch.
    assert_eq!(rects(&svg, COMPILE) - 1, p.misses() as usize);
    assert_eq!(rects(&svg, EXECUTE) - 1, p.ops().count());
    assert_eq!(rects(&svg, TRANSFER) - 1, p.events().len() - p.ops().count());
    assert!(svg.contains("Dispatch timeline") && svg.contains("time since start (ms)"));
    // Compiles of 2 ms on a ~4.5 ms axis are wide enough to carry the op name.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let on_bars: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("fill") == Some("#FFFFFF"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    assert_eq!(on_bars, ["add", "matmul"]);
}

#[test]
fn every_chart_draws_as_svg_and_png() {
    let p = small().profile();
    for chart in p.charts() {
        let svg = chart.svg().unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let (w, h) = chart.default_size();
        assert_eq!(doc.root_element().attribute("width"), Some(w.to_string().as_str()));
        assert_eq!(doc.root_element().attribute("height"), Some(h.to_string().as_str()));
        for (w, h) in [(1200, 500), (640, 360), (320, 200), (2400, 1000)] {
            let bytes = chart.png(w, h).unwrap();
            let mut reader = png::Decoder::new(bytes.as_slice()).read_info().unwrap();
            let mut rgb = vec![0; reader.output_buffer_size()];
            let frame = reader.next_frame(&mut rgb).unwrap();
            assert_eq!((frame.width, frame.height), (w, h), "{:?}", chart.kind());
            assert_eq!(frame.color_type, png::ColorType::Rgb);
            // Something in each series colour is drawn.
            let has = |c: RGBColor| rgb.chunks(3).any(|px| px == [c.0, c.1, c.2]);
            assert!(has(COMPILE) && has(EXECUTE), "{:?} at {w}x{h}", chart.kind());
        }
    }
    assert!(matches!(p.timeline().png(100, 50), Err(viz::Error::Size { width: 100, height: 50 })));
}

#[test]
fn compile_vs_execute_has_a_stacked_bar_per_op_kind() {
    let p = small().profile();
    let svg = p.compile_vs_execute().svg().unwrap();
    // add and matmul: one compile and one execute bar each; uploads: one transfer bar.
    assert_eq!(rects(&svg, COMPILE) - 1, 2);
    assert_eq!(rects(&svg, EXECUTE) - 1, 2);
    assert_eq!(rects(&svg, TRANSFER) - 1, 1);
    assert!(svg.contains("compile 2.00 ms + execute 200 µs · 4 calls"), "{svg}");
}

#[test]
fn cache_chart_states_the_hit_rate() {
    let p = small().profile();
    let svg = p.cache_hits().svg().unwrap();
    assert!(svg.contains("4 hits, 2 misses over 6 op dispatches · hit rate 66.7%"));
    // One line per series.
    assert_eq!(lines(&svg, HIT).len(), 1);
    assert_eq!(lines(&svg, MISS).len(), 1);
}

#[test]
fn trace_has_a_compile_slice_per_miss_and_an_execute_slice_per_dispatch() {
    let p = small().profile();
    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let cat = |c: &str| slices.iter().filter(|e| e["cat"] == c).count();
    assert_eq!(cat("compile"), p.misses() as usize);
    assert_eq!(cat("execute"), p.ops().count());
    assert_eq!(cat("transfer"), 2);
    assert_eq!(slices.len(), cat("compile") + cat("execute") + cat("transfer"));
    let ts: Vec<f64> = slices.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "slices ordered by time: {ts:?}");
    // Nothing overlaps on a track (one device, one thread here).
    for w in slices.windows(2) {
        let end = w[0]["ts"].as_f64().unwrap() + w[0]["dur"].as_f64().unwrap();
        assert!(end <= w[1]["ts"].as_f64().unwrap(), "{} overlaps {}", w[0], w[1]);
    }
    for e in &slices {
        for key in ["name", "ts", "dur", "pid", "tid", "args"] {
            assert!(!e[key].is_null(), "{key} missing in {e}");
        }
    }
    // The first add: compile 2 ms, then execute 50 µs, with shapes, outcome and bytes.
    let add: Vec<_> = slices.iter().filter(|e| e["args"]["shapes"] == "f32[2, 3] x f32[3]").collect();
    assert_eq!(add[0]["name"], "compile add");
    assert_eq!(add[1]["name"], "add");
    assert_eq!(add[1]["args"]["cache"], "miss");
    assert_eq!(add[2]["args"]["cache"], "hit");
    assert_eq!(add[1]["args"]["bytes"], (6 + 3 + 6) * 4);
    assert_eq!(add[1]["dur"].as_f64().unwrap(), 50.0);
    assert!((add[0]["dur"].as_f64().unwrap() - 2000.0).abs() < 0.01);
    assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "cpu:0"));
}

#[test]
fn overlapping_dispatches_get_their_own_lanes() {
    let cpu = Device::cpu();
    let a = info("exp", "", &[&[8]], cpu);
    let mut log = Log::new();
    log.op(&a, false);
    log.op(&a, false);
    // Another thread's dispatch, started while the first ran.
    let mut other = log.events[0].clone();
    other.seq = 99;
    other.start_ns += 10_000;
    log.events.push(other);
    let p = log.profile();
    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cpu:0", "cpu:0 (2)"]);
    assert_eq!(p.timeline().default_size().1, 230 + 2 * 56);
    assert_eq!(rects(&p.timeline().svg().unwrap(), EXECUTE) - 1, 3);
}

#[test]
fn hint_fires_for_shape_churn_and_names_op_and_shapes() {
    let mut log = Log::new();
    for n in 1..=RECOMPILE_THRESHOLD {
        log.op(&info("add", "", &[&[n, 16], &[16]], Device::cpu()), true);
    }
    let hints = log.profile().hints();
    assert_eq!(hints.len(), 1);
    let h = &hints[0];
    assert_eq!(h.op, "add");
    assert_eq!(h.shapes.len(), RECOMPILE_THRESHOLD);
    assert_eq!(h.shapes[0], "[1, 16] x [16]");
    assert_eq!(h.varying, ["dim 0 of input 0"]);
    let line = h.to_string();
    assert!(!line.contains('\n'));
    assert!(
        line.contains("`add`")
            && line.contains("[1, 16] x [16]")
            && line.contains(&format!("[{RECOMPILE_THRESHOLD}, 16] x [16]")),
        "{line}"
    );
    assert!(log.profile().table_text().contains(&line));
}

#[test]
fn hint_stays_silent_below_the_threshold_and_for_steady_shapes() {
    let mut churn = Log::new();
    for n in 1..RECOMPILE_THRESHOLD {
        churn.op(&info("add", "", &[&[n, 16], &[16]], Device::cpu()), true);
    }
    assert!(churn.profile().hints().is_empty());

    let mut steady = Log::new();
    let add = info("add", "", &[&[32, 16], &[16]], Device::cpu());
    for i in 0..200 {
        steady.op(&add, i == 0);
    }
    // Many op kinds with one shape each is not churn either.
    for name in ["exp", "log", "sin", "cos", "tanh", "neg", "abs", "sqrt", "relu", "sigmoid"] {
        steady.op(&info(name, "", &[&[32, 16]], Device::cpu()), true);
    }
    assert!(steady.profile().hints().is_empty());
    assert!(!steady.profile().table_text().contains("hint"));
}

#[test]
fn hint_for_ops_without_inputs_shows_output_shapes() {
    let mut log = Log::new();
    for n in 1..=RECOMPILE_THRESHOLD {
        let mut i = (*info("full", "", &[], Device::cpu())).clone();
        i.attrs = format!("shape=[{n}]");
        i.output = Spec::new(&[n], DType::F32);
        log.op(&Arc::new(i), true);
    }
    let hints = log.profile().hints();
    assert_eq!(hints[0].shapes[0], "→ [1]");
    assert_eq!(hints[0].varying, ["dim 0 of the output"]);
}

#[test]
fn empty_profile_still_draws() {
    let p = Profile::from_events(Vec::new());
    assert!(p.table_text().contains("0 hits, 0 misses"));
    for chart in p.charts() {
        let svg = chart.svg().unwrap();
        roxmltree::Document::parse(&svg).unwrap();
        assert!(svg.contains("no ") && svg.contains("recorded"), "{:?}", chart.kind());
        chart.png(640, 360).unwrap();
    }
    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().iter().all(|e| e["ph"] != "X"));
}

#[test]
fn many_dispatches_draw_in_full() {
    let cpu = Device::cpu();
    let mut log = Log::new();
    log.gap_ns = 500;
    let kinds: Vec<_> = ["add", "mul", "exp", "sum"].iter().map(|&n| info(n, "", &[&[64, 64]], cpu)).collect();
    for i in 0..5000 {
        log.op(&kinds[i % 4], i < 4);
    }
    let p = log.profile();
    let svg = p.timeline().svg().unwrap();
    assert_eq!(rects(&svg, EXECUTE) - 1, 5000);
    assert_eq!(rects(&svg, COMPILE) - 1, 4);
    for chart in p.charts() {
        chart.png(1200, 400).unwrap();
    }
    assert_eq!(p.cache_hits().kind(), ChartKind::CacheHits);
    // Runs of hits make straight lines: a handful of points, not 5000.
    let svg = p.cache_hits().svg().unwrap();
    let points: usize = [HIT, MISS].iter().flat_map(|&c| lines(&svg, c)).map(|p| p.split_whitespace().count()).sum();
    assert!(points < 20, "{points} points");
}

#[test]
fn compile_vs_execute_merges_what_does_not_fit() {
    const NAMES: [&str; 30] = [
        "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8",
        "b9", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9",
    ];
    let mut log = Log::new();
    for name in NAMES {
        log.op(&info(name, "", &[&[4]], Device::cpu()), true);
    }
    let p = log.profile();
    let chart = p.compile_vs_execute();
    let svg = chart.svg().unwrap();
    // 19 op kinds and one row summing the other 11, one compile bar each.
    assert_eq!(rects(&svg, COMPILE) - 1, 20);
    assert!(svg.contains("11 others") && svg.contains("compile 22.0 ms + execute 550 µs · 11 calls"), "{svg}");
    // A short canvas keeps fewer rows, each still at least 20 px at its scale.
    let short = chart.svg_sized(1000, 400).unwrap();
    let rows = rects(&short, COMPILE) - 1;
    assert!((2..20).contains(&rows), "{rows} rows");
}
