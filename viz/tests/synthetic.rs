//! Views of hand-made events: exact counts, no device needed.

use std::sync::Arc;

use eager::profiler::{CacheOutcome, Event, EventKind, OpInfo};
use eager::{DType, Device, Spec};
use viz::style::{RGBColor, COMPILE, DISK_HIT, EXECUTE, HIT, LOAD, MISS, SERIES, TRANSFER, WALL};
use viz::{ChartKind, Profile, RECOMPILE_THRESHOLD};

fn info(name: &'static str, attrs: &str, shapes: &[&[usize]], device: Device) -> Arc<OpInfo> {
    let inputs: Vec<Spec> = shapes.iter().map(|s| Spec::new(s, DType::F32)).collect();
    let output = inputs.first().cloned().unwrap_or_else(|| Spec::new(&[], DType::F32));
    Arc::new(OpInfo {
        name,
        attrs: attrs.into(),
        inputs,
        output,
        device,
        mesh: None,
        tier: Default::default(),
    })
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
    /// An op whose executable was loaded from the persistent cache (1 ms), then executed
    /// (50 µs).
    fn disk(&mut self, info: &Arc<OpInfo>) {
        self.push(EventKind::Op, info, Some(CacheOutcome::DiskHit), 1_000_000, 50_000);
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

/// add (1 miss, 2 hits), matmul (1 disk load, 1 hit), exp (1 disk load), one upload: what a
/// fresh process sees with a warm persistent cache and one new shape.
fn mixed() -> Log {
    let cpu = Device::cpu();
    let add = info("add", "", &[&[2, 3], &[3]], cpu);
    let matmul = info("matmul", "", &[&[4, 8], &[8, 2]], cpu);
    let exp = info("exp", "", &[&[4, 2]], cpu);
    let up = info("to_device", "", &[&[4, 8]], cpu);
    let mut log = Log::new();
    log.transfer(EventKind::HostToDevice, &up);
    log.op(&add, true);
    log.disk(&matmul);
    log.op(&add, false);
    log.op(&matmul, false);
    log.disk(&exp);
    log.op(&add, false);
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
        .filter(|n| {
            n.has_tag_name("polyline") && n.attribute("stroke").is_some_and(|s| s.eq_ignore_ascii_case(&want))
        })
        .map(|n| n.attribute("points").unwrap_or_default().to_string())
        .collect()
}

/// Number of `<rect>`s filled with `color` in an SVG document.
fn rects(svg: &str, color: RGBColor) -> usize {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    let want = hex(color);
    doc.descendants()
        .filter(|n| {
            n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f.eq_ignore_ascii_case(&want))
        })
        .count()
}

#[test]
fn table_counts_sort_and_totals() {
    let p = small().profile();
    let t = p.table();
    assert_eq!((t.hits, t.misses, t.disk_hits), (4, 2, 0));
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
    assert_eq!(t.totals.disk_hits, 0);
    assert_eq!(t.totals.compile_ns, 4_000_000);
    assert_eq!(t.totals.execute_ns, 316_000);
    assert_eq!(t.wall_ns, p.wall_ns());
    let shares: f64 = t.rows.iter().map(|r| t.share(r)).sum();
    assert!((shares - t.share(&t.totals)).abs() < 1e-9);
    assert!(t.share(&t.totals) < 100.0, "host gaps are not dispatch time");

    let text = p.table_text();
    assert!(text.contains("hit rate 66.7%"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("op") && lines[0].contains("compile/load ms") && lines[0].contains("wall %")
    );
    assert!(lines[2].starts_with("add ") && lines[2].contains("f32[2, 3] x f32[3]"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("total") && l.contains(" 8 ") && l.contains(" 2 ")), "{text}");

    let html = p.table_html();
    roxmltree::Document::parse(&html).expect("the HTML table is well-formed");
    // Header, three rows, totals.
    assert_eq!(html.matches("<tr").count(), 5);
    assert!(html.contains("host→device") && html.contains("hit rate 66.7%"));
}

#[test]
fn the_table_counts_dispatches_per_tier_and_the_keys_swapped() {
    use eager::pjrt::Tier;
    let quick = |name, shape: &[usize]| {
        let i = info(name, "", &[shape], Device::cpu());
        Arc::new(OpInfo { tier: Tier::Quick, ..(*i).clone() })
    };
    let (add_quick, exp_quick) = (quick("add", &[4]), quick("exp", &[4]));
    let add_optimized = info("add", "", &[&[4]], Device::cpu());
    let mut log = Log::new();
    log.op(&add_quick, true);
    log.op(&add_quick, false);
    log.op(&exp_quick, true);
    // add turned hot: its optimized executable ran from then on.
    log.op(&add_optimized, false);
    log.op(&add_optimized, false);
    let t = log.profile().table();
    assert_eq!(t.tiers, Some(viz::TierSummary { quick: 3, optimized: 2, swapped: 1 }));
    // One row per op whatever the tier.
    assert_eq!(t.rows.iter().find(|r| r.op == "add").map(|r| r.calls), Some(4));
    let text = t.to_text();
    assert!(
        text.contains("tiers: 3 dispatches ran quick-compiled executables, 2 optimized; 1 key swapped to optimized as it turned hot"),
        "{text}"
    );
    // All optimized (tiering off, or a compiled function): no line.
    let mut log = Log::new();
    log.op(&add_optimized, true);
    assert_eq!(log.profile().table().tiers, None);
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
    assert_eq!(rects(&svg, LOAD), 1, "the legend swatch alone");
    assert!(svg.contains("Dispatch timeline") && svg.contains("time since start (ms)"));
    assert!(!svg.contains("load from disk 0"), "no load time without loads");
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
            // Every chart's legend has a swatch for loads from disk.
            assert!(has(LOAD), "{:?} at {w}x{h}", chart.kind());
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
    assert_eq!(rects(&svg, LOAD), 1, "the legend swatch alone");
    assert!(svg.contains("compile 2.00 ms + execute 200 µs · 4 calls"), "{svg}");
}

#[test]
fn cache_chart_states_the_hit_rate() {
    let p = small().profile();
    let svg = p.cache_hits().svg().unwrap();
    assert!(
        svg.contains("4 hits, 2 misses (compiled), 0 loaded from disk over 6 op dispatches · hit rate 66.7%")
    );
    // One line per series.
    assert_eq!(lines(&svg, HIT).len(), 1);
    assert_eq!(lines(&svg, MISS).len(), 1);
    assert_eq!(lines(&svg, DISK_HIT).len(), 1);
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
    assert_eq!(cat("load"), 0);
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
    assert!(line.contains("was compiled for") && !line.contains("disk"), "{line}");
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
    assert!(p.table_text().contains("0 hits, 0 misses (compiled), 0 loaded from disk"));
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
    let kinds: Vec<_> =
        ["add", "mul", "exp", "sum"].iter().map(|&n| info(n, "", &[&[64, 64]], cpu)).collect();
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
    let points: usize = [HIT, MISS, DISK_HIT]
        .iter()
        .flat_map(|&c| lines(&svg, c))
        .map(|p| p.split_whitespace().count())
        .sum();
    assert!(points < 20, "{points} points");
}

#[test]
fn compile_vs_execute_merges_what_does_not_fit() {
    const NAMES: [&str; 30] = [
        "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3", "b4", "b5", "b6",
        "b7", "b8", "b9", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9",
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
    assert!(
        svg.contains("11 others") && svg.contains("compile 22.0 ms + execute 550 µs · 11 calls"),
        "{svg}"
    );
    // A short canvas keeps fewer rows, each still at least 20 px at its scale.
    let short = chart.svg_sized(1000, 400).unwrap();
    let rows = rects(&short, COMPILE) - 1;
    assert!((2..20).contains(&rows), "{rows} rows");
}

/// The numeric cells of the text table's line starting with `op`: calls, misses, disk,
/// compile/load ms, execute µs, mean µs, wall %.
fn numbers<'a>(text: &'a str, op: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{op} ")))
        .unwrap_or_else(|| panic!("no {op} row in\n{text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    cells[cells.len() - 7..].to_vec()
}

#[test]
fn disk_loads_are_counted_apart_from_hits_and_misses() {
    let p = mixed().profile();
    assert_eq!((p.hits(), p.misses(), p.disk_hits()), (3, 1, 2));
    // Memory hits over all six op dispatches: a disk load is no hit.
    assert!((p.hit_rate() - 0.5).abs() < 1e-12);
    assert_eq!((p.compile_ns(), p.load_ns()), (2_000_000, 2_000_000));

    let t = p.table();
    assert_eq!((t.hits, t.misses, t.disk_hits), (3, 1, 2));
    assert!((t.hit_rate() - 0.5).abs() < 1e-12);
    let rows: Vec<(&str, u64, u64, u64)> =
        t.rows.iter().map(|r| (r.op.as_str(), r.calls, r.misses, r.disk_hits)).collect();
    assert_eq!(rows, [("add", 3, 1, 0), ("matmul", 2, 0, 1), ("exp", 1, 0, 1), ("host→device", 1, 0, 0)]);
    // The compile/load column holds both: 2 ms compiling add, 1 ms loading matmul.
    assert_eq!((t.rows[0].compile_ns, t.rows[1].compile_ns), (2_000_000, 1_000_000));
    assert_eq!(
        (t.totals.calls, t.totals.misses, t.totals.disk_hits, t.totals.compile_ns),
        (7, 1, 2, 4_000_000)
    );

    let text = p.table_text();
    let header: Vec<&str> =
        text.lines().next().unwrap().split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(
        header,
        [
            "op",
            "input shapes",
            "placement",
            "calls",
            "misses",
            "disk",
            "compile/load ms",
            "execute µs",
            "mean µs",
            "wall %"
        ]
    );
    assert_eq!(numbers(&text, "add")[..4], ["3", "1", "0", "2.00"]);
    assert_eq!(numbers(&text, "matmul")[..4], ["2", "0", "1", "1.00"]);
    assert_eq!(numbers(&text, "exp")[..4], ["1", "0", "1", "1.00"]);
    assert_eq!(numbers(&text, "host→device")[..4], ["1", "-", "-", "-"]);
    assert_eq!(numbers(&text, "total")[..4], ["7", "1", "2", "4.00"]);
    let summary = "cache: 3 hits, 1 misses (compiled), 2 loaded from disk, hit rate 50.0%";
    assert!(text.contains(summary), "{text}");

    // The HTML table has the same columns and cells.
    let html = p.table_html();
    assert!(html.contains(summary), "{html}");
    let doc = roxmltree::Document::parse(&html).expect("the HTML table is well-formed");
    let cells = |tag: &str| -> Vec<Vec<String>> {
        doc.descendants()
            .filter(|n| n.has_tag_name("tr"))
            .map(|tr| {
                tr.children()
                    .filter(|c| c.has_tag_name(tag))
                    .map(|c| c.text().unwrap_or_default().to_string())
                    .collect()
            })
            .filter(|r: &Vec<String>| !r.is_empty())
            .collect()
    };
    assert_eq!(cells("th"), [header.iter().map(|h| h.to_string()).collect::<Vec<_>>()]);
    let body = cells("td");
    assert!(body.iter().all(|r| r.len() == header.len()));
    let matmul = body.iter().find(|r| r[0] == "matmul").expect("a matmul row");
    assert_eq!(matmul[2..7], ["cpu:0", "2", "0", "1", "1.00"]);
    let total = body.last().unwrap();
    assert_eq!(total[..7], ["total", "", "", "7", "1", "2", "4.00"]);
}

/// `(x, y, width)` of every `<rect>` filled with `color`, top first.
fn rect_boxes(svg: &str, color: RGBColor) -> Vec<(f64, f64, f64)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let want = hex(color);
    let num = |n: roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    let mut boxes: Vec<(f64, f64, f64)> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f.eq_ignore_ascii_case(&want))
        })
        .map(|n| (num(n, "x"), num(n, "y"), num(n, "width")))
        .collect();
    boxes.sort_by(|a, b| a.1.total_cmp(&b.1));
    boxes
}

#[test]
fn timeline_draws_a_load_part_before_execute_for_disk_loads() {
    let p = mixed().profile();
    let svg = p.timeline().svg().unwrap();
    // Less the legend swatch of each colour.
    assert_eq!(rects(&svg, COMPILE) - 1, 1);
    assert_eq!(rects(&svg, LOAD) - 1, 2);
    assert_eq!(rects(&svg, EXECUTE) - 1, 6);
    assert_eq!(rects(&svg, TRANSFER) - 1, 1);
    assert!(svg.contains("load from disk"), "legend entry");
    assert!(svg.contains("compile 2.00 ms, load from disk 2.00 ms, execute 300 µs"), "{svg}");
    // Each load part (the first box is the legend swatch) ends where an execute part starts.
    let executes = rect_boxes(&svg, EXECUTE);
    for (x, y, w) in rect_boxes(&svg, LOAD).into_iter().skip(1) {
        assert!(
            executes.iter().any(|&(ex, ey, _)| ey == y && (ex - (x + w)).abs() <= 1.0),
            "no execute part right after the load part at x {x}..{}",
            x + w
        );
    }
}

#[test]
fn compile_vs_execute_stacks_load_time_in_its_own_colour() {
    let p = mixed().profile();
    let svg = p.compile_vs_execute().svg().unwrap();
    // add: compile + execute; matmul and exp: load + execute; uploads: transfer.
    assert_eq!(rects(&svg, COMPILE) - 1, 1);
    assert_eq!(rects(&svg, LOAD) - 1, 2);
    assert_eq!(rects(&svg, EXECUTE) - 1, 3);
    assert!(svg.contains("compile 2.00 ms + execute 150 µs · 3 calls"), "{svg}");
    assert!(svg.contains("load 1.00 ms + execute 100 µs · 2 calls"), "{svg}");
    assert!(svg.contains("load 1.00 ms + execute 50.0 µs · 1 call"), "{svg}");
    // Compiling is 2 of the 4.308 ms of dispatch: loads are not counted as compiling.
    assert!(svg.contains("compile 2.00 ms · load from disk 2.00 ms · execute 300 µs"), "{svg}");
    assert!(svg.contains("46% of dispatch time spent compiling"), "{svg}");
}

/// The last point's height above the first (the count axis starts at 0), in pixels.
fn rise(points: &str) -> f64 {
    let y = |p: &str| p.split(',').nth(1).unwrap().parse::<f64>().unwrap();
    let all: Vec<&str> = points.split_whitespace().collect();
    y(all[0]) - y(all[all.len() - 1])
}

#[test]
fn cache_chart_has_a_disk_load_line() {
    let p = mixed().profile();
    let svg = p.cache_hits().svg().unwrap();
    assert!(
        svg.contains("3 hits, 1 misses (compiled), 2 loaded from disk over 6 op dispatches · hit rate 50.0%")
    );
    assert!(
        svg.contains("disk loads (load + execute)")
            && svg.contains("Compile cache hits, disk loads and misses")
    );
    let (hits, disk, misses) = (lines(&svg, HIT), lines(&svg, DISK_HIT), lines(&svg, MISS));
    assert_eq!((hits.len(), disk.len(), misses.len()), (1, 1, 1));
    // Final counts 3, 2 and 1 on one axis.
    let (h, d, m) = (rise(&hits[0]), rise(&disk[0]), rise(&misses[0]));
    assert!((d / h - 2.0 / 3.0).abs() < 0.01 && (m / h - 1.0 / 3.0).abs() < 0.01, "rises {h} {d} {m}");
}

#[test]
fn trace_names_a_disk_load_a_load_slice() {
    let p = mixed().profile();
    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let slices: Vec<&serde_json::Value> =
        v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    let cat = |c: &str| slices.iter().filter(|e| e["cat"] == c).count();
    assert_eq!((cat("compile"), cat("load"), cat("execute"), cat("transfer")), (1, 2, 6, 1));
    assert_eq!(slices.len(), 10);
    for w in slices.windows(2) {
        let end = w[0]["ts"].as_f64().unwrap() + w[0]["dur"].as_f64().unwrap();
        assert!(end <= w[1]["ts"].as_f64().unwrap(), "{} overlaps {}", w[0], w[1]);
    }
    let matmul: Vec<_> = slices.iter().filter(|e| e["args"]["shapes"] == "f32[4, 8] x f32[8, 2]").collect();
    assert_eq!(matmul[0]["name"], "load matmul");
    assert_eq!(matmul[0]["cat"], "load");
    assert!((matmul[0]["dur"].as_f64().unwrap() - 1000.0).abs() < 0.01);
    assert_eq!(matmul[1]["name"], "matmul");
    let outcomes: Vec<&str> = matmul.iter().map(|e| e["args"]["cache"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["disk", "disk", "hit"]);
    let add = slices.iter().find(|e| e["name"] == "compile add").expect("the compile of add");
    assert_eq!(add["args"]["cache"], "miss");
}

#[test]
fn hint_counts_shapes_loaded_from_disk() {
    // Half the shapes compiled, half loaded from an earlier run's persistent cache.
    let mut log = Log::new();
    for n in 1..=RECOMPILE_THRESHOLD {
        let add = info("add", "", &[&[n, 16], &[16]], Device::cpu());
        if n % 2 == 0 {
            log.op(&add, true);
        } else {
            log.disk(&add);
        }
    }
    let hints = log.profile().hints();
    assert_eq!(hints.len(), 1);
    let h = &hints[0];
    let (compiled, loaded) =
        (RECOMPILE_THRESHOLD as u64 / 2, RECOMPILE_THRESHOLD as u64 - RECOMPILE_THRESHOLD as u64 / 2);
    assert_eq!((h.shapes.len(), h.compiles, h.disk_loads), (RECOMPILE_THRESHOLD, compiled, loaded));
    assert_eq!(h.compile_ns, compiled * 2_000_000 + loaded * 1_000_000);
    let line = h.to_string();
    assert!(
        line.contains(&format!("`add` needed new executables for {RECOMPILE_THRESHOLD} distinct shapes")),
        "{line}"
    );
    assert!(line.contains(&format!("{compiled} compiled and {loaded} loaded from disk")), "{line}");
    assert!(line.contains("of compiling and loading") && line.contains("pad or bucket"), "{line}");

    // Every shape loaded from disk is churn too: the next new shape compiles.
    let mut all_disk = Log::new();
    for n in 1..=RECOMPILE_THRESHOLD {
        all_disk.disk(&info("exp", "", &[&[n, 16]], Device::cpu()));
    }
    let hints = all_disk.profile().hints();
    assert_eq!(hints.len(), 1, "{hints:?}");
    assert_eq!((hints[0].op, hints[0].compiles, hints[0].disk_loads), ("exp", 0, RECOMPILE_THRESHOLD as u64));
    let line = hints[0].to_string();
    assert!(line.contains(&format!("{RECOMPILE_THRESHOLD} loaded from disk, none compiled, ")), "{line}");
    assert!(line.contains(" ms of loading: pad or bucket"), "{line}");

    // Below the threshold, loads or not, no hint.
    let mut few = Log::new();
    for n in 1..RECOMPILE_THRESHOLD {
        few.disk(&info("exp", "", &[&[n, 16]], Device::cpu()));
    }
    assert!(few.profile().hints().is_empty());
}

/// `steps` steps of add, mul, exp, sum dispatched one by one (compiled on the first step),
/// and the same steps as one `train_step` dispatch each (compiled once, 150 µs a step).
fn eager_and_compiled(steps: usize) -> (Profile, Profile) {
    let cpu = Device::cpu();
    let ops: Vec<_> = ["add", "mul", "exp", "sum"].iter().map(|&n| info(n, "", &[&[32, 8]], cpu)).collect();
    let mut eager = Log::new();
    for step in 0..steps {
        for op in &ops {
            eager.op(op, step == 0);
        }
    }
    let train_step = info("train_step", "4 ops compiled into one", &[&[32, 8]], cpu);
    let mut compiled = Log::new();
    for step in 0..steps {
        let (cache, compile) =
            if step == 0 { (CacheOutcome::Miss, 2_000_000) } else { (CacheOutcome::Hit, 0) };
        compiled.push(EventKind::Op, &train_step, Some(cache), compile, 150_000);
    }
    (eager.profile(), compiled.profile())
}

/// The cells of the comparison table's row labelled `label` (cells are two spaces apart).
fn row<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.starts_with(label) && l[label.len()..].starts_with("  "))
        .unwrap_or_else(|| panic!("no {label:?} row in\n{text}"));
    line[label.len()..].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

#[test]
fn comparison_states_counts_and_times_per_run() {
    let (eager, compiled) = eager_and_compiled(10);
    let cmp = viz::compare(&[("eager", &eager), ("compiled", &compiled)]).steps(10);
    let s = cmp.summaries();
    assert_eq!(s.len(), 2);
    let (e, c) = (&s[0], &s[1]);
    assert_eq!((e.name.as_str(), e.op_dispatches, e.executables, e.transfers), ("eager", 40, 4, 0));
    assert_eq!((c.name.as_str(), c.op_dispatches, c.executables, c.transfers), ("compiled", 10, 1, 0));
    assert_eq!((e.compile_ns, e.execute_ns), (4 * 2_000_000, 40 * 50_000));
    assert_eq!((c.compile_ns, c.execute_ns), (2_000_000, 10 * 150_000));
    // Back to back with 20 µs of host time between dispatches.
    assert_eq!(e.wall_ns, 8_000_000 + 2_000_000 + 39 * 20_000);
    assert_eq!(c.wall_ns, 2_000_000 + 1_500_000 + 9 * 20_000);
    assert_eq!(e.most_dispatched, Some(("add".to_string(), 10)));
    assert_eq!(c.most_dispatched, Some(("train_step{4 ops compiled into one}".to_string(), 10)));
    assert_eq!((e.dispatches_per_step(), c.dispatches_per_step()), (Some(4.0), Some(1.0)));
    assert_eq!(e.steady_step_ns(), Some(278_000.0));
    // Host time is what wall time leaves after compile, load, device execute and transfers.
    assert_eq!(c.host_ns() + c.transfer_ns, 180_000);
    assert!((e.dispatches_per_second() - 40.0 / 10.78e-3).abs() < 1e-6);

    let text = cmp.text();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["eager", "compiled"]);
    assert_eq!(row(&text, "op dispatches"), ["40", "10"]);
    assert_eq!(row(&text, "  per step"), ["4", "1"]);
    assert_eq!(row(&text, "distinct executables"), ["4", "1"]);
    assert_eq!(row(&text, "most dispatched"), ["add ×10", "train_step{4 ops compiled into one} ×10"]);
    assert_eq!(row(&text, "compile"), ["8.00 ms", "2.00 ms"]);
    assert_eq!(row(&text, "device execute"), ["2.00 ms", "1.50 ms"]);
    assert_eq!(row(&text, "wall"), ["10.8 ms", "3.68 ms"]);
    assert_eq!(row(&text, "  per step, warm"), ["278 µs", "168 µs"]);
    assert_eq!(row(&text, "dispatches / s"), ["3711", "2717"]);
    assert!(!text.contains("load from disk"), "no load row without loads:\n{text}");
    assert!(text.contains("compiled: 2.93× less wall time than eager, 4× fewer op dispatches"), "{text}");

    let html = cmp.html();
    let doc = roxmltree::Document::parse(&html).expect("the HTML is well-formed");
    // The chart, as an image of the SVG.
    let images: Vec<&str> =
        doc.descendants().filter(|n| n.has_tag_name("img")).filter_map(|n| n.attribute("src")).collect();
    assert_eq!(images.len(), 1);
    let b64 = images[0].strip_prefix("data:image/svg+xml;base64,").expect("an SVG data URL");
    use base64::Engine as _;
    let svg = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap();
    assert_eq!(svg, cmp.svg().unwrap());
    let compile_row: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("tr"))
        .find(|tr| tr.children().next().and_then(|td| td.text()) == Some("compile"))
        .expect("a compile row")
        .children()
        .filter_map(|td| td.text())
        .collect();
    assert_eq!(compile_row, ["compile", "8.00 ms", "2.00 ms"]);
}

/// The `<rect>`s filled with `color`, grouped by their top edge: `(y, count)`, top first.
fn rect_rows(svg: &str, color: RGBColor) -> Vec<(f64, usize)> {
    let mut rows: Vec<(f64, usize)> = Vec::new();
    for (_, y, _) in rect_boxes(svg, color) {
        match rows.last_mut() {
            Some((last, n)) if *last == y => *n += 1,
            _ => rows.push((y, 1)),
        }
    }
    rows
}

#[test]
fn comparison_chart_has_a_lane_per_run() {
    let (eager, compiled) = eager_and_compiled(10);
    let cmp = viz::compare(&[("eager", &eager), ("compiled", &compiled)]).steps(10);
    // One warm step of the slower run: eager's 4 ops, 70 µs apart with their gaps.
    assert_eq!(cmp.zoom_ns(), 278_000);
    let svg = cmp.svg().unwrap();
    let (w, h) = cmp.default_size();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().attribute("height"), Some(h.to_string().as_str()));
    assert_eq!(doc.root_element().attribute("width"), Some(w.to_string().as_str()));

    // Top to bottom: the legend swatch, the whole runs (every dispatch), the zoom (one
    // eager step against two compiled ones), the execute bar of each run's totals.
    let counts: Vec<usize> = rect_rows(&svg, EXECUTE).into_iter().map(|(_, n)| n).collect();
    assert_eq!(counts, [1, 40, 10, 4, 2, 1, 1]);
    // Compiles on the first step only: none in the warm window.
    let counts: Vec<usize> = rect_rows(&svg, COMPILE).into_iter().map(|(_, n)| n).collect();
    assert_eq!(counts, [1, 4, 1, 1, 1]);
    assert_eq!(rects(&svg, WALL), 1 + 2, "the legend swatch and a wall bar per run");

    // Each lane is labelled with its run's name, level with it.
    let labels = |name: &str| -> Vec<f64> {
        doc.descendants()
            .filter(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some(name))
            .map(|n| n.attribute("y").unwrap().parse::<f64>().unwrap())
            .collect()
    };
    let lanes = rect_rows(&svg, EXECUTE);
    for (name, lane) in [("eager", 1), ("compiled", 2), ("eager", 3), ("compiled", 4)] {
        let top = lanes[lane].0;
        assert!(
            labels(name).iter().any(|&y| y > top - 5.0 && y < top + 40.0),
            "no {name} label by the lane at y {top}: {:?}",
            labels(name)
        );
    }
    assert!(svg.contains("whole runs on one shared time axis (0 to 10.8 ms)"), "states the shared axis");
    assert!(svg.contains("Zoom: the same 278 µs (one warm step of the slowest run;"));
    assert!(svg.contains("40 op dispatches (4 per step) · 4 distinct executables"));
    assert!(svg.contains("10 op dispatches (1 per step) · 1 distinct executable ·"));
    assert!(svg.contains("wall 10.8 ms (278 µs per warm step)"));
    // The compiled step is wide enough in the zoom to carry its name.
    let on_bars: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("fill") == Some("#FFFFFF"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    assert!(on_bars.contains(&"train_step"), "{on_bars:?}");

    let png = cmp.png(w, h).unwrap();
    let mut reader = png::Decoder::new(png.as_slice()).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut rgb).unwrap();
    let has = |c: RGBColor| rgb.chunks(3).any(|px| px == [c.0, c.1, c.2]);
    assert!(has(COMPILE) && has(EXECUTE) && has(WALL));
}

#[test]
fn comparison_names_no_slice_that_others_overlap() {
    // Two long dispatches from two threads, overlapping on one run's lane.
    let cpu = Device::cpu();
    let mut log = Log::new();
    log.push(EventKind::Op, &info("matmul", "", &[&[8, 8]], cpu), Some(CacheOutcome::Hit), 0, 5_000_000);
    let mut other = log.events[0].clone();
    other.seq = 1;
    other.start_ns += 1_000_000;
    log.events.push(other);
    let overlapping = log.profile();
    let mut log = Log::new();
    log.push(EventKind::Op, &info("matmul", "", &[&[8, 8]], cpu), Some(CacheOutcome::Hit), 0, 5_000_000);
    let alone = log.profile();
    let white_text = |p: &Profile| {
        let svg = viz::compare(&[("run", p)]).svg().unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let names: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && n.attribute("fill") == Some("#FFFFFF"))
            .filter_map(|n| n.text().map(|t| t.trim().to_string()))
            .collect();
        names.len()
    };
    // The lone dispatch is named in both lanes (whole run and zoom); overlapping ones not.
    assert_eq!(white_text(&alone), 2);
    assert_eq!(white_text(&overlapping), 0);
    // The timeline gives them rows of their own, and names both.
    let svg = overlapping.timeline().svg().unwrap();
    assert_eq!(svg.matches(">matmul<").count() + svg.matches(">\nmatmul\n<").count(), 2, "{svg}");
}

#[test]
fn comparison_of_nothing_draws() {
    let cmp = viz::compare(&[]);
    let svg = cmp.svg().unwrap();
    assert!(svg.contains("no profiles to compare"));
    cmp.png(640, 400).unwrap();
    assert_eq!(cmp.text(), "no profiles to compare\n");
    assert!(cmp.summaries().is_empty());

    let empty = Profile::from_events(Vec::new());
    let (eager, _) = eager_and_compiled(2);
    let cmp = viz::compare(&[("nothing", &empty), ("eager", &eager)]);
    let text = cmp.text();
    assert_eq!(row(&text, "op dispatches"), ["0", "8"]);
    assert_eq!(row(&text, "most dispatched"), ["-", "add ×2"]);
    // 8 dispatches in 8 ms of compiles, 8 x 50 µs of executes and 7 x 20 µs of host time.
    assert_eq!(row(&text, "dispatches / s"), ["0", "937"]);
    // No ratio against an empty run.
    assert!(!text.contains("than nothing"), "{text}");
    roxmltree::Document::parse(&cmp.svg().unwrap()).unwrap();
    cmp.png(800, 600).unwrap();
    let cmp = viz::compare(&[("a", &empty), ("b", &empty)]).steps(3);
    assert!(cmp.svg().unwrap().contains("no dispatches recorded"));
    cmp.png(320, 200).unwrap();
    assert!(matches!(cmp.png(100, 50), Err(viz::Error::Size { width: 100, height: 50 })));
}

#[test]
fn line_chart_draws_one_line_per_series_with_its_name() {
    let falling: Vec<f32> = (0..50).map(|i| 2.0 / (1.0 + i as f32)).collect();
    let flat = vec![0.5f32; 50];
    let chart = viz::line_chart("Training loss", "step", "loss", &[("eager", &falling), ("compiled", &flat)]);
    let svg = chart.svg().unwrap();
    let (eager, compiled) = (lines(&svg, SERIES[0]), lines(&svg, SERIES[1]));
    assert_eq!((eager.len(), compiled.len()), (1, 1));
    assert_eq!(eager[0].split_whitespace().count(), 50);
    // The falling line falls: its last point is lower on the page than its first.
    assert!(rise(&eager[0]) < 0.0 && rise(&compiled[0]).abs() < 1e-9);
    assert_eq!(rects(&svg, SERIES[0]), 1, "a legend swatch");
    assert_eq!(rects(&svg, SERIES[1]), 1, "a legend swatch");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> =
        doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
    for want in ["Training loss", "eager", "compiled", "step", "loss", "last: eager 0.04 · compiled 0.5"] {
        assert!(texts.iter().any(|t| t.trim() == want), "no {want:?} in {texts:?}");
    }
    // Steps are integers: no x tick label (centred under the axis) with decimals.
    let x_ticks: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("middle"))
        .filter_map(|n| n.text().map(str::trim))
        .filter(|t| t.parse::<f64>().is_ok())
        .collect();
    assert_eq!(x_ticks, ["0", "10", "20", "30", "40"]);
    // None of the dispatch colours.
    for c in [COMPILE, EXECUTE, TRANSFER, LOAD] {
        assert_eq!(lines(&svg, c).len(), 0);
    }
    let bytes = chart.png(800, 400).unwrap();
    let mut reader = png::Decoder::new(bytes.as_slice()).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut rgb).unwrap();
    assert!(rgb.chunks(3).any(|px| px == [SERIES[0].0, SERIES[0].1, SERIES[0].2]));
    assert!(rgb.chunks(3).any(|px| px == [SERIES[1].0, SERIES[1].1, SERIES[1].2]));
}

#[test]
fn line_chart_leaves_out_what_it_cannot_draw() {
    let gappy = [1.0, f64::NAN, 2.0, 3.0, f64::INFINITY, 2.5];
    let chart = viz::line_chart(
        "gaps",
        "step",
        "loss",
        &[("gappy", &gappy[..]), ("nan", &[f64::NAN][..]), ("none", &[][..])],
    );
    let svg = chart.svg().unwrap();
    // Broken where a value is missing: [1], [2, 3], [2.5].
    let runs = lines(&svg, SERIES[0]);
    let sizes: Vec<usize> = runs.iter().map(|p| p.split_whitespace().count()).collect();
    assert_eq!(sizes, [1, 2, 1]);
    assert!(lines(&svg, SERIES[1]).is_empty() && lines(&svg, SERIES[2]).is_empty());
    assert!(
        svg.contains("last: gappy 2.5 · nan (no values) · none (no values) · 3 non-finite values left out"),
        "{svg}"
    );
    for name in ["gappy", "nan", "none"] {
        assert!(
            svg.contains(&format!(">{name}<")) || svg.contains(&format!(">\n{name}\n<")),
            "legend {name}"
        );
    }
    chart.png(640, 360).unwrap();

    // A log scale also leaves out zero and below.
    let log = viz::line_chart("log", "step", "loss", &[("a", &[0.0, -1.0, 0.05, 0.5, 3.0][..])]).log_y();
    let svg = log.svg().unwrap();
    assert_eq!(lines(&svg, SERIES[0]).len(), 1);
    assert!(svg.contains("2 non-finite or not positive values left out"), "{svg}");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for tick in ["0.1", "0.2", "0.5", "1", "2"] {
        assert!(texts.contains(&tick), "no {tick} tick in {texts:?}");
    }
    log.png(640, 360).unwrap();
    // Between two digits, the log axis still has labels.
    let narrow =
        viz::line_chart("narrow", "step", "loss", &[("a", &[0.311, 0.32, 0.338][..])]).log_y().svg().unwrap();
    let doc = roxmltree::Document::parse(&narrow).unwrap();
    let y_ticks = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
        .filter(|n| n.text().is_some_and(|t| t.trim().parse::<f64>().is_ok()))
        .count();
    assert!(y_ticks >= 3, "{y_ticks} labels on a narrow log axis");

    // Nothing to draw, in every way there is.
    let nothing: [(&str, &[f64]); 0] = [];
    for chart in [
        viz::line_chart("empty", "step", "loss", &nothing),
        viz::line_chart("nan only", "step", "loss", &[("nan", &[f64::NAN, f64::NAN][..])]),
        viz::line_chart("no points", "step", "loss", &[("a", &[0f64; 0][..])]),
        viz::line_chart("not positive", "step", "loss", &[("a", &[0.0, -2.0][..])]).log_y(),
        viz::LineChart::new("xy", "s", "loss").series_xy("a", &[(f64::NAN, 1.0f32)]),
    ] {
        let svg = chart.svg().unwrap();
        assert!(svg.contains("no finite values to plot"), "{svg}");
        chart.png(320, 200).unwrap();
    }
    // One point, and a flat line, still get an axis with room around them.
    for ys in [&[4.0][..], &[4.0, 4.0, 4.0][..]] {
        let svg = viz::line_chart("one", "step", "loss", &[("a", ys)]).svg().unwrap();
        assert!(svg.contains("last: a 4"));
    }
}

#[test]
fn line_chart_against_time_starts_at_zero() {
    let chart = viz::LineChart::new("loss against time", "seconds", "loss")
        .series_xy("eager", &[(0.5, 2.0), (1.0, 1.0), (1.5, 0.5)])
        .series_xy("compiled", &[(0.2f64, 2.0f32), (0.3, 1.0), (0.4, 0.5)]);
    let svg = chart.svg().unwrap();
    assert_eq!((lines(&svg, SERIES[0]).len(), lines(&svg, SERIES[1]).len()), (1, 1));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(texts.contains(&"0.0"), "the x axis starts at 0: {texts:?}");
}
