//! Sessions with long idle stretches and several cells (timelines cut the idle stretches to
//! marked breaks and name the cells), and tables of ops that ran on a device and over a
//! mesh, with overlapping dispatches. Hand-made events: exact figures, no device needed.
//! With `VIZ_DUMP_DIR` set, the session's charts are written there to be looked at.

use std::sync::Arc;

use eager::profiler::{CacheOutcome, CellMark, Event, EventKind, MeshInfo, OpInfo};
use eager::{DType, Device, DeviceKind, Spec};
use viz::style::{RGBColor, EXECUTE};
use viz::{IdleGap, Profile};

const MS: u64 = 1_000_000;
/// The fill of a break's band.
const BREAK_FILL: &str = "#F1F1F1";

fn info(name: &'static str, shape: &[usize], device: Device, mesh: Option<MeshInfo>) -> Arc<OpInfo> {
    let spec = Spec::new(shape, DType::F32);
    Arc::new(OpInfo {
        name,
        attrs: String::new(),
        inputs: vec![spec.clone()],
        output: spec,
        device,
        mesh,
        tier: Default::default(),
    })
}

fn event(
    seq: u64,
    info: &Arc<OpInfo>,
    cache: Option<CacheOutcome>,
    start_ns: u64,
    compile_ns: u64,
    execute_ns: u64,
) -> Event {
    let kind = if cache.is_some() { EventKind::Op } else { EventKind::HostToDevice };
    Event { seq, kind, info: info.clone(), cache, start_ns, compile_ns, execute_ns, bytes: 64 }
}

/// Three cells: cell 1 runs exp (10 ms) then compiles and runs add (20 + 5 ms); 800 ms
/// later cell 2 runs mul (20 ms) and an upload (1 ms); 1.2 s later cell 3 runs exp (30 ms).
fn session() -> Profile {
    let cpu = Device::cpu();
    let (exp, add, mul) =
        (info("exp", &[64], cpu, None), info("add", &[64], cpu, None), info("mul", &[64], cpu, None));
    let up = info("to_device", &[64], cpu, None);
    let (hit, miss) = (Some(CacheOutcome::Hit), Some(CacheOutcome::Miss));
    let t0 = MS;
    let events = vec![
        event(0, &exp, hit, t0, 0, 10 * MS),
        event(1, &add, miss, t0 + 10 * MS + MS / 2, 20 * MS, 5 * MS),
        event(2, &mul, hit, t0 + 35 * MS + MS / 2 + 800 * MS, 0, 20 * MS),
        event(3, &up, None, t0 + 855 * MS + MS / 2, 0, MS),
        event(4, &exp, hit, t0 + 856 * MS + MS / 2 + 1200 * MS, 0, 30 * MS),
    ];
    let marks = [(0, 1), (2, 2), (4, 3)].map(|(seq, cell)| CellMark { seq, cell }).to_vec();
    Profile::from_events(events).with_cells(marks)
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// `(x, y, width)` of every `<rect>` filled with `fill`, left first.
fn rects(svg: &str, fill: &str) -> Vec<(f64, f64, f64)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let num = |n: roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    let mut boxes: Vec<(f64, f64, f64)> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f.eq_ignore_ascii_case(fill))
        })
        .map(|n| (num(n, "x"), num(n, "y"), num(n, "width")))
        .collect();
    boxes.sort_by(|a, b| a.0.total_cmp(&b.0));
    boxes
}

/// The execute parts of the bars, left first (the legend's swatch, above them, left out).
fn bars(svg: &str) -> Vec<(f64, f64)> {
    let all = rects(svg, &hex(EXECUTE));
    let top = all.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    all.into_iter().filter(|r| r.1 > top).map(|(x, _, w)| (x, w)).collect()
}

/// `(x, text)` of every `<text>` element.
fn texts(svg: &str) -> Vec<(f64, String)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            (
                n.attribute("x").unwrap_or("0").parse().unwrap_or(0.0),
                n.text().unwrap_or("").trim().to_string(),
            )
        })
        .collect()
}

fn dump(name: &str, bytes: &[u8]) {
    if let Some(dir) = std::env::var_os("VIZ_DUMP_DIR") {
        std::fs::write(std::path::Path::new(&dir).join(name), bytes).unwrap();
    }
}

#[test]
fn the_idle_stretches_between_cells_are_found_to_the_nanosecond() {
    let p = session();
    let gaps = p.idle_gaps();
    let lens: Vec<u64> = gaps.iter().map(IdleGap::len_ns).collect();
    assert_eq!(lens, [800 * MS, 1200 * MS]);
    assert_eq!(gaps[0].from_ns, MS + 35 * MS + MS / 2, "from the end of add in cell 1");
    assert_eq!(gaps[0].label(), "⋯ 800 ms idle");
    assert_eq!(gaps[1].label(), "⋯ 1.20 s idle");
    assert_eq!(p.busy_ns(), (10 + 25 + 20 + 1 + 30) * MS);
    let cells: Vec<u64> = p.cells().iter().map(|(c, _)| *c).collect();
    assert_eq!(cells, [1, 2, 3]);
    assert_eq!(p.cell_of(&p.events()[3]), Some(2));
}

#[test]
fn short_pauses_stay_on_the_axis() {
    let cpu = Device::cpu();
    let exp = info("exp", &[64], cpu, None);
    let hit = Some(CacheOutcome::Hit);
    // 40 ms apart: under the 50 ms floor.
    let p = Profile::from_events(vec![event(0, &exp, hit, 0, 0, MS), event(1, &exp, hit, 41 * MS, 0, MS)]);
    assert!(p.idle_gaps().is_empty());
    // 90 ms apart, but the dispatches ran 1 s: under a tenth of it.
    let p = Profile::from_events(vec![
        event(0, &exp, hit, 0, 0, 500 * MS),
        event(1, &exp, hit, 590 * MS, 0, 500 * MS),
    ]);
    assert!(p.idle_gaps().is_empty());
    // 200 ms apart: cut.
    let p = Profile::from_events(vec![
        event(0, &exp, hit, 0, 0, 500 * MS),
        event(1, &exp, hit, 700 * MS, 0, 500 * MS),
    ]);
    assert_eq!(p.idle_gaps(), [IdleGap { from_ns: 500 * MS, to_ns: 700 * MS }]);
    assert!(!p.timeline().svg().unwrap().contains("cell 1"), "no cells known, none named");
}

#[test]
fn the_timeline_cuts_idle_stretches_to_labelled_breaks_and_keeps_bar_ratios() {
    let p = session();
    let chart = p.timeline();
    let svg = chart.svg().unwrap();
    dump("session-timeline.svg", svg.as_bytes());
    dump("session-timeline.png", &chart.png(chart.default_size().0, chart.default_size().1).unwrap());
    let true_svg = p.timeline().true_time().svg().unwrap();
    dump("session-timeline-true-time.svg", true_svg.as_bytes());

    // One band per idle stretch, each labelled with its length, between the bars around it.
    let bands = rects(&svg, BREAK_FILL);
    assert_eq!(bands.len(), 2, "{bands:?}");
    let bars = bars(&svg);
    assert_eq!(bars.len(), 4, "exp, add, mul, exp: the upload is no execute bar");
    let end = |(x, w): (f64, f64)| x + w;
    for (band, (before, after)) in bands.iter().zip([(bars[1], bars[2]), (bars[2], bars[3])]) {
        assert!(
            band.0 + 1.5 >= end(before),
            "band at {} starts before the bar ending {}",
            band.0,
            end(before)
        );
        assert!(
            band.0 + band.2 <= after.0 + 1.5,
            "band ends at {} past the bar at {}",
            band.0 + band.2,
            after.0
        );
    }
    let texts = texts(&svg);
    for (band, label) in bands.iter().zip(["⋯ 800 ms idle", "⋯ 1.20 s idle"]) {
        let (x, _) =
            texts.iter().find(|(_, t)| t == label).unwrap_or_else(|| panic!("no {label:?} in {texts:?}"));
        assert!((band.0..band.0 + band.2).contains(x), "{label:?} at {x} outside its band {band:?}");
    }
    assert!(svg.contains("in 2.09 s wall (2.00 s idle, cut)"), "the subtitle says what was cut");
    assert!(svg.contains("idle stretches cut out"), "the axis says so");
    // Each cell named once, in order, left to right.
    let cells: Vec<&(f64, String)> = texts.iter().filter(|(_, t)| t.starts_with("cell ")).collect();
    assert_eq!(cells.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(), ["cell 1", "cell 2", "cell 3"]);
    assert!(cells.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(chart.default_size().1, 230 + 24 + 56, "a strip for the cells' names");

    // Bars keep the ratio of their durations: exp of cell 3 (30 ms) is 3 times exp of cell
    // 1 (10 ms); each bar gives up its last pixel, and ends land on whole pixels.
    let (first, last) = (bars[0].1 + 1.0, bars[3].1 + 1.0);
    assert!((last - 3.0 * first).abs() <= 4.0, "widths {first} and {last} are not 1:3");
    // The work fills the chart: cut, the 30 ms bar is far wider than on the true axis.
    let true_last = self::bars(&true_svg)[3].1 + 1.0;
    assert!(last > 8.0 * true_last, "cut {last} px, true time {true_last} px");
    // The true axis has no break, and the same bars.
    assert!(rects(&true_svg, BREAK_FILL).is_empty() && !true_svg.contains("idle"));
    assert_eq!(self::bars(&true_svg).len(), 4);
}

#[test]
fn a_short_last_cell_keeps_its_name_left_of_its_line() {
    // Cell 2 starts where the plot ends: its name would run past the edge right of its line.
    let cpu = Device::cpu();
    let (exp, neg) = (info("exp", &[64], cpu, None), info("neg", &[64], cpu, None));
    let hit = Some(CacheOutcome::Hit);
    let events = vec![event(0, &exp, hit, MS, 0, 100 * MS), event(1, &neg, hit, 101 * MS, 0, MS / 100)];
    let marks = [(0, 41), (1, 42)].map(|(seq, cell)| CellMark { seq, cell }).to_vec();
    let p = Profile::from_events(events).with_cells(marks);
    let chart = p.timeline();
    let svg = chart.svg().unwrap();
    dump("short_last_cell.png", &chart.png(1000, 320).unwrap());
    let texts = texts(&svg);
    let x_of = |name: &str| texts.iter().find(|(_, t)| t == name).map(|(x, _)| *x);
    let (first, last) = (x_of("cell 41").expect("cell 41 named"), x_of("cell 42").expect("cell 42 named"));
    let width = chart.default_size().0 as f64;
    assert!(first < last && last < width - 40.0, "cell 41 at {first}, cell 42 at {last}, width {width}");
}

#[test]
fn a_timeline_of_one_cell_names_no_cell_and_draws_as_png() {
    let p = session();
    let one = Profile::from_events(p.events().to_vec()).with_cells(vec![CellMark { seq: 0, cell: 7 }]);
    assert!(!one.timeline().svg().unwrap().contains("cell 7"));
    assert_eq!(one.timeline().default_size().1, 230 + 56);
    let bytes = p.timeline().png(1200, 400).unwrap();
    let mut reader = png::Decoder::new(bytes.as_slice()).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut rgb).unwrap();
    assert!(rgb.chunks(3).any(|px| px == [0xF1, 0xF1, 0xF1]), "a break's band is drawn");
}

#[test]
fn the_trace_keeps_true_times_and_marks_cells_and_idle_stretches() {
    let p = session();
    let v: serde_json::Value = serde_json::from_str(&p.trace_json()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tracks, ["cpu:0", "cells", "idle (cut from timelines)"]);
    let of = |cat: &str| -> Vec<&serde_json::Value> { events.iter().filter(|e| e["cat"] == cat).collect() };
    let idle = of("idle");
    assert_eq!(
        idle.iter().map(|e| e["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["⋯ 800 ms idle", "⋯ 1.20 s idle"]
    );
    assert_eq!(idle[0]["dur"].as_f64(), Some(800_000.0));
    assert_eq!(idle[0]["ts"].as_f64(), Some(35_500.0), "µs since the profile's start, not shifted");
    let cells = of("cell");
    assert_eq!(
        cells.iter().map(|e| e["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["cell 1", "cell 2", "cell 3"]
    );
    assert_eq!(cells[1]["dur"].as_f64(), Some(21_000.0), "mul and the upload");
    // The last exec starts at its true time.
    let last = of("execute").last().copied().unwrap();
    assert_eq!(last["ts"].as_f64(), Some(2_056_500.0));
    assert_eq!(v["metadata"]["idle_gaps"][1]["dur"].as_f64(), Some(1_200_000.0));
    assert_eq!(v["metadata"]["cells"].as_array().unwrap().len(), 3);
}

#[test]
fn the_comparison_cuts_each_runs_idle_stretches_at_a_marked_line() {
    let p = session();
    let compact = Profile::from_events(p.events()[..2].to_vec());
    let cmp = viz::compare(&[("session", &p), ("cell 1", &compact)]);
    let svg = cmp.svg().unwrap();
    dump("session-compare.png", &cmp.png(cmp.default_size().0, cmp.default_size().1).unwrap());
    assert!(svg.contains("⋯ 800 ms idle") && svg.contains("⋯ 1.20 s idle"));
    assert!(svg.contains("idle stretches cut out"), "the axis says so");
    let true_svg = cmp.true_time().svg().unwrap();
    assert!(!true_svg.contains("idle stretches") && !true_svg.contains("⋯ 800 ms idle"));
}

#[test]
fn the_table_tells_a_device_from_a_mesh_and_states_overlaps() {
    let cpu = Device::cpu();
    let cpu1 = Device::new(DeviceKind::Cpu, 1);
    let mesh = MeshInfo {
        axes: vec![("data".into(), 2)],
        devices: vec![cpu, cpu1],
        splits: vec![],
        collectives: vec![],
    };
    let on_device = info("add", &[8, 4], cpu, None);
    let on_mesh = info("add", &[8, 4], cpu, Some(mesh));
    let (hit, disk) = (Some(CacheOutcome::Hit), Some(CacheOutcome::DiskHit));
    // add on cpu:0 loads from disk (1 ms) and runs (1 ms) from 0; meanwhile, from 0.5 ms,
    // the same add over the mesh runs 2 ms; then each runs once more, alone.
    let events = vec![
        event(0, &on_device, disk, 0, MS, MS),
        event(1, &on_mesh, hit, MS / 2, 0, 2 * MS),
        event(2, &on_device, hit, 3 * MS, 0, MS),
        event(3, &on_mesh, hit, 4 * MS, 0, MS),
    ];
    let p = Profile::from_events(events);
    let t = p.table();
    let rows: Vec<(&str, &str, u64)> =
        t.rows.iter().map(|r| (r.op.as_str(), r.placement.as_str(), r.calls)).collect();
    assert_eq!(rows, [("add", "cpu:0", 2), ("add", "mesh {data: 2}", 2)]);
    // Wall: 0 to 5 ms; busy 0-2.5, 3-5 ms; the rows' times add up to 6 ms.
    assert_eq!(t.wall_ns, 5 * MS);
    assert_eq!(t.totals.busy_ns, 9 * MS / 2);
    assert_eq!(t.totals.total_ns(), 6 * MS);
    assert_eq!(t.overlap_ns, 3 * MS / 2);
    assert!((t.share(&t.totals) - 90.0).abs() < 1e-9);
    assert!((t.share(&t.rows[0]) - 60.0).abs() < 1e-9 && (t.share(&t.rows[1]) - 60.0).abs() < 1e-9);
    assert!(t.rows.iter().chain([&t.totals]).all(|r| t.share(r) <= 100.0));

    let text = t.to_text();
    let header: Vec<&str> =
        text.lines().next().unwrap().split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(header[..4], ["op", "input shapes", "placement", "calls"]);
    let line = |placement: &str| {
        text.lines()
            .find(|l| l.starts_with("add ") && l.contains(placement))
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert!(line("mesh {data: 2}").trim_end().ends_with("60.0%"), "{text}");
    assert!(line("cpu:0").contains("f32[8, 4]"), "{text}");
    assert!(text.contains("wall 5.00 ms · in dispatch 90.0%"), "{text}");
    assert!(text.contains("overlapped: 1.50 ms of dispatch time ran alongside other dispatches"), "{text}");
    assert!(text.contains("add up to 120.0% of wall"), "{text}");
    let html = t.to_html();
    assert!(html.contains(">mesh {data: 2}</td>") && html.contains("overlapped: 1.50 ms"), "{html}");
}
