//! Every dispatch as a bar on a time axis, one row per device lane: compile, load from
//! disk, execute and transfer in their colours, op names written on the bars wide enough to
//! hold them. Idle stretches (see [`crate::gaps`]) are cut to marked breaks that give their
//! length, unless the chart keeps the true time axis; a session's cells are named above the
//! plot. The row chart and the slices are shared with the profile comparison.

use std::collections::HashMap;

use eager::profiler::{CacheOutcome, Event, EventKind};
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::gaps::{IdleGap, TimeAxis};
use crate::profile::Profile;
use crate::style::{
    tick_format, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, INK, LOAD, MUTED, TRANSFER,
};
use crate::table::transfer_label;
use crate::units::duration;

/// The legend of every chart drawing dispatch slices.
pub(super) const SLICE_LEGEND: [(&str, RGBColor); 4] =
    [("compile", COMPILE), ("load from disk", LOAD), ("execute", EXECUTE), ("transfer", TRANSFER)];

pub(super) fn draw<DB: DrawingBackend>(
    p: &Profile,
    true_time: bool,
    root: &Area<DB>,
    look: &Look,
) -> DrawResult<(), DB> {
    let gaps = if true_time { Vec::new() } else { p.idle_gaps() };
    let idle: u64 = gaps.iter().map(IdleGap::len_ns).sum();
    // Load time only when there were loads: the subtitle shrinks to fit, so every clause costs.
    let load =
        if p.disk_hits() > 0 { format!(", load from disk {}", duration(p.load_ns())) } else { String::new() };
    let cut = if idle > 0 { format!(" ({} idle, cut)", duration(idle)) } else { String::new() };
    let subtitle = format!(
        "{} dispatches in {} wall{cut}: compile {}{load}, execute {}, transfer {}",
        p.events().len(),
        duration(p.wall_ns()),
        duration(p.compile_ns()),
        duration(p.execute_ns()),
        duration(p.transfer_ns())
    );
    let body = look.header(root, "Dispatch timeline", &subtitle, &SLICE_LEGEND)?;
    if p.is_empty() {
        return look.nothing(&body, "no dispatches recorded");
    }

    let (lanes, lane_of) = p.lanes();
    let cells = p.cells();
    let (strip, body) = if cells.len() > 1 {
        let (strip, rest) = body.split_vertically(look.px(CELL_STRIP));
        (Some(strip), rest)
    } else {
        (None, body)
    };
    let y_area = row_label_width(root, look, &lanes)? + look.px(52);
    let plot_w = plot_width(&body, look, y_area);
    let breaks = break_labels(&body, look, &gaps, plot_w)?;
    let kept = p.wall_ns() - idle;
    let break_ns = if gaps.is_empty() {
        0.0
    } else {
        kept.max(1) as f64 * breaks.0 / (plot_w - gaps.len() as f64 * breaks.0)
    };
    let axis = TimeAxis::cut(p.start_ns(), p.end_ns(), &gaps, break_ns);
    let (per_unit, unit) = time_unit(axis.len as u64);
    let x_max = (axis.len / per_unit).max(1e-3);
    let (x_desc, ticks) = if gaps.is_empty() {
        (format!("time since start ({unit})"), None)
    } else {
        let ticks = axis.ticks(p.start_ns(), per_unit, plot_w, look.px(110) as f64, look.px(64) as f64);
        (format!("time since start ({unit}), idle stretches cut out"), Some(ticks))
    };
    let mut chart = row_chart(&body, look, &lanes, x_max, &x_desc, Some("device"), y_area, ticks)?;
    draw_breaks(&mut chart, look, lanes.len(), &axis, per_unit, &breaks.1)?;
    let slices = lane_of.into_iter().map(|(i, row)| (&p.events()[i], row));
    draw_slices(&mut chart, look, lanes.len(), slices, &axis, per_unit)?;
    if let Some(strip) = strip {
        let starts: Vec<(u64, f64)> =
            cells.iter().map(|(c, r)| (*c, axis.map(p.events()[r.start].start_ns) / per_unit)).collect();
        draw_cells(&mut chart, &strip, look, lanes.len(), &starts)?;
    }
    Ok(())
}

/// Height of the strip above the plot that names the cells, in default-size pixels.
pub(super) const CELL_STRIP: u32 = 24;

/// Width in pixels of the plot [`row_chart`] lays out on `area` with a label area `y_area` wide.
pub(super) fn plot_width<DB: DrawingBackend>(area: &Area<DB>, look: &Look, y_area: u32) -> f64 {
    (area.dim_in_pixel().0 as f64 - (look.px(16) + look.px(28) + y_area) as f64).max(1.0)
}

/// The style of the text on a break.
fn break_text(look: &Look) -> TextStyle<'static> {
    look.tick().color(&MUTED)
}

/// How wide, in pixels, each of `gaps` is drawn (wide enough for the longest label, but
/// all breaks together at most a third of the plot), and per gap the label that fits.
fn break_labels<DB: DrawingBackend>(
    area: &Area<DB>,
    look: &Look,
    gaps: &[IdleGap],
    plot_w: f64,
) -> DrawResult<(f64, Vec<Option<String>>), DB> {
    let style = break_text(look);
    let pad = look.px(14) as f64;
    let mut want = look.px(18) as f64;
    for g in gaps {
        want = want.max(area.estimate_text_size(&g.label(), &style)?.0 as f64 + pad);
    }
    let width = want.min(plot_w / 3.0 / gaps.len().max(1) as f64);
    let mut labels = Vec::with_capacity(gaps.len());
    for g in gaps {
        // The whole label, else the length alone, else nothing: the break still shows.
        let mut fits = None;
        for text in [g.label(), duration(g.len_ns())] {
            if area.estimate_text_size(&text, &style)?.0 as f64 + look.px(4) as f64 <= width {
                fits = Some(text);
                break;
            }
        }
        labels.push(fits);
    }
    Ok((width, labels))
}

/// Draws each break of `axis` as a light band across all `rows` rows, edged in grey, with
/// its label (how long the idle stretch was) in the middle.
fn draw_breaks<DB: DrawingBackend>(
    chart: &mut RowChart<DB>,
    look: &Look,
    rows: usize,
    axis: &TimeAxis,
    per_unit: f64,
    labels: &[Option<String>],
) -> DrawResult<(), DB> {
    let top = rows.max(1) as i32 * 100;
    for (b, label) in axis.breaks.iter().zip(labels) {
        let (x0, x1) = (b.at / per_unit, (b.at + b.width) / per_unit);
        chart.draw_series([Rectangle::new([(x0, 0), (x1, top)], BREAK_FILL.filled())])?;
        for x in [x0, x1] {
            chart.draw_series([PathElement::new(vec![(x, 0), (x, top)], BREAK_EDGE.stroke_width(1))])?;
        }
        if let Some(text) = label {
            let style = break_text(look).pos(Pos::new(HPos::Center, VPos::Center));
            chart.draw_series([Text::new(text.clone(), ((x0 + x1) / 2.0, top / 2), style)])?;
        }
    }
    Ok(())
}

/// Marks each cut of `axis` (a break of no width) on row `row` of `rows`: a grey line
/// across the row and, on it, how long the idle stretch was, on a white box.
pub(super) fn draw_cuts<DB: DrawingBackend>(
    chart: &mut RowChart<DB>,
    look: &Look,
    rows: usize,
    row: usize,
    axis: &TimeAxis,
    per_unit: f64,
) -> DrawResult<(), DB> {
    let n = rows.max(1);
    let mid = (n - row.min(n - 1)) as i32 * 100 - 50;
    let style = break_text(look).pos(Pos::new(HPos::Center, VPos::Center));
    for b in &axis.breaks {
        let x = b.at / per_unit;
        chart.draw_series([PathElement::new(
            vec![(x, mid - 50), (x, mid + 50)],
            BREAK_EDGE.stroke_width(2),
        )])?;
        let text = b.gap.label();
        let (w, h) = chart.plotting_area().estimate_text_size(&text, &style)?;
        let (w, h) = (w as i32 / 2 + look.px(4) as i32, h as i32 / 2 + look.px(2) as i32);
        let label = EmptyElement::at((x, mid))
            + Rectangle::new([(-w, -h), (w, h)], WHITE.filled())
            + Rectangle::new([(-w, -h), (w, h)], BREAK_EDGE.stroke_width(1))
            + Text::new(text, (0, 0), style.clone());
        chart.draw_series([label])?;
    }
    Ok(())
}

/// Names each cell (`cell 3`) in `strip`, above the plot, where its first dispatch starts
/// (`(cell, x)`), with a thin line down the plot there. The name stands right of the line,
/// or left of it where it would run past the edge (a short last cell keeps its name); a name
/// that would run into the one before it is left out.
fn draw_cells<DB: DrawingBackend>(
    chart: &mut RowChart<DB>,
    strip: &Area<DB>,
    look: &Look,
    rows: usize,
    starts: &[(u64, f64)],
) -> DrawResult<(), DB> {
    let top = rows.max(1) as i32 * 100;
    let style = look.tick().color(&INK).pos(Pos::new(HPos::Left, VPos::Center));
    let base = strip.get_base_pixel().0;
    let (strip_w, strip_h) = strip.dim_in_pixel();
    let mut free_from = i32::MIN;
    for &(cell, x) in starts {
        chart.draw_series([PathElement::new(vec![(x, 0), (x, top)], CELL_LINE.stroke_width(1))])?;
        let text = format!("cell {cell}");
        let px = chart.backend_coord(&(x, top)).0 - base;
        let (gap, w) = (look.px(4) as i32, strip.estimate_text_size(&text, &style)?.0 as i32);
        // Right of its line where it fits, else left of it.
        let text_x = if px + gap + w <= strip_w as i32 { px + gap } else { px - gap - w };
        if text_x >= free_from.max(0) {
            strip.draw(&PathElement::new(
                vec![(px, strip_h as i32 / 2), (px, strip_h as i32)],
                CELL_LINE.stroke_width(1),
            ))?;
            strip.draw(&Text::new(text, (text_x, strip_h as i32 / 2), style.clone()))?;
            free_from = text_x + w + look.px(8) as i32;
        }
    }
    Ok(())
}

/// A break's band, its edges, and the line where a cell starts.
const BREAK_FILL: RGBColor = RGBColor(0xF1, 0xF1, 0xF1);
const BREAK_EDGE: RGBColor = RGBColor(0xB4, 0xB4, 0xB4);
const CELL_LINE: RGBColor = RGBColor(0x9A, 0x9A, 0x9A);

/// A chart of named rows (the first on top) on a time axis: rows are 100 units tall, row
/// `i` of `n` centred on `(n - i) * 100 - 50`.
pub(super) type RowChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TimeX, WithKeyPoints<RangedCoordi32>>>;

/// A row chart's time axis: plotters' f64 axis with ticks where we put them (plotters'
/// `WithKeyPoints` gives an f64 axis no label formatter).
pub(super) struct TimeX {
    range: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for TimeX {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
}

/// Width of the widest row name in tick text.
pub(super) fn row_label_width<DB: DrawingBackend>(
    area: &Area<DB>,
    look: &Look,
    rows: &[String],
) -> DrawResult<u32, DB> {
    let mut w = 0;
    for r in rows {
        w = w.max(area.estimate_text_size(r, &look.tick())?.0);
    }
    Ok(w)
}

/// Builds the row chart on `area` from 0 to `x_max` and draws its axes: ticks every
/// ~110 px, or at `ticks` (position, label) if given; row names as y labels in a label
/// area `y_area` wide.
#[allow(clippy::too_many_arguments)]
pub(super) fn row_chart<'a, DB: DrawingBackend>(
    area: &'a Area<DB>,
    look: &Look,
    rows: &[String],
    x_max: f64,
    x_desc: &str,
    y_desc: Option<&str>,
    y_area: u32,
    ticks: Option<Vec<(f64, String)>>,
) -> DrawResult<RowChart<'a, DB>, DB> {
    let n = rows.len().max(1);
    let count = (area.dim_in_pixel().0 / look.px(110)).max(2) as usize;
    let points: Vec<f64> = match &ticks {
        Some(t) => t.iter().map(|(x, _)| *x).collect(),
        None => RangedCoordf64::from(0f64..x_max).key_points(count),
    };
    // Integer rows of 100 units: plotters formats labels of integer axes with key points.
    let centers: Vec<i32> = (0..n as i32).map(|i| i * 100 + 50).collect();
    let mut chart = ChartBuilder::on(area)
        .margin_left(look.px(16))
        .margin_right(look.px(28))
        .margin_bottom(look.px(8))
        .x_label_area_size(look.px(56))
        .y_label_area_size(y_area)
        .build_cartesian_2d(
            TimeX { range: (0f64..x_max).into(), ticks: points },
            (0..n as i32 * 100).with_key_points(centers),
        )?;
    let row_name = |y: &i32| rows.get(n - (*y as usize / 100).min(n - 1) - 1).cloned().unwrap_or_default();
    let auto = tick_format(x_max, count);
    let format = |x: &f64| match &ticks {
        None => auto(x),
        Some(t) => {
            t.iter().find(|(p, _)| (p - x).abs() <= 1e-9 * x_max).map(|(_, l)| l.clone()).unwrap_or_default()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_y_mesh()
        .x_labels(count.max(ticks.as_ref().map_or(0, Vec::len)))
        .x_label_formatter(&format)
        .y_label_formatter(&row_name)
        .x_desc(x_desc);
    if let Some(desc) = y_desc {
        mesh.y_desc(desc);
    }
    look.mesh(&mut mesh).draw()?;
    Ok(chart)
}

/// Draws each `(event, row)` as a slice on a row chart of `rows` rows: its compile or
/// load part, then its execute or transfer part, at `axis.map(ns) / per_unit` on the x
/// axis. Parts outside the axis are cut off; an event wholly outside it is not drawn.
pub(super) fn draw_slices<'e, DB: DrawingBackend>(
    chart: &mut RowChart<DB>,
    look: &Look,
    rows: usize,
    events: impl IntoIterator<Item = (&'e Event, usize)>,
    axis: &TimeAxis,
    per_unit: f64,
) -> DrawResult<(), DB> {
    let n = rows.max(1);
    let x_max = chart.x_range().end;
    // Every part of a bar at least one pixel wide, so that every dispatch and its execute
    // part show however short; a dispatch wider than 3 px gives up its last pixel, so that
    // back-to-back dispatches stay apart.
    let (plot_w, plot_h) = chart.plotting_area().dim_in_pixel();
    let (plot_w, lane_h) = (plot_w.max(1) as f64, (plot_h as f64 / n as f64).max(1.0));
    let px = x_max / plot_w;
    let gap = look.px(1).max(1) as f64 * px;
    let rect = |x0: f64, x1: f64, y0: i32, y1: i32, color: RGBColor| {
        Rectangle::new([(x0, y0), (x1.max(x0 + px), y1)], color.filled())
    };
    // Bars fill two thirds of a lane, but no more than 88 px: a lone lane on a tall chart
    // stays a track, not a wall.
    let half = ((lane_h * 0.34).min(look.px(44) as f64) / lane_h * 100.0).round() as i32;
    let area = chart.plotting_area();
    let text_fits_height =
        area.estimate_text_size("op", &look.on_bar())?.1 as f64 <= lane_h * half as f64 / 50.0;
    // Signed: an event may start before the origin of a zoomed axis.
    let t = |ns: u64| axis.map(ns) / per_unit;
    let mut bars = Vec::new();
    // Each drawn event's row and extent, and the labels that fit their event (with its index).
    let mut spans: Vec<(usize, f64, f64)> = Vec::new();
    let mut labels = Vec::new();
    let mut text_w: HashMap<&str, u32> = HashMap::new();
    for (e, row) in events {
        let (start, mid, end) = (t(e.start_ns), t(e.start_ns + e.compile_ns), t(e.end_ns()));
        let visible = start <= x_max && (end > 0.0 || start >= 0.0);
        if !visible {
            continue;
        }
        // The part before execute: fetching the executable, by compile or load from disk
        // (unless it ended before the axis starts).
        let fetch = match e.cache {
            _ if mid <= 0.0 && start < 0.0 => None,
            Some(CacheOutcome::Miss) => Some(COMPILE),
            Some(CacheOutcome::DiskHit) => Some(LOAD),
            _ => None,
        };
        let (start, mid, end) = (start.max(0.0), mid.clamp(0.0, x_max), end.min(x_max));
        let mid_y = (n - row.min(n - 1)) as i32 * 100 - 50;
        let (y0, y1) = (mid_y - half, mid_y + half);
        let last = if end - start > 3.0 * gap { end - gap } else { end };
        let color = if e.kind == EventKind::Op { EXECUTE } else { TRANSFER };
        if let Some(fetch) = fetch {
            let split = (last - (end - mid).max(px)).max(start);
            bars.push(rect(start, split, y0, y1, fetch));
            bars.push(rect(split, last, y0, y1, color));
        } else {
            bars.push(rect(start, last, y0, y1, color));
        }

        // The op name alone (attributes and shapes are in the table and the trace).
        let name = if e.kind == EventKind::Op { e.name() } else { transfer_label(e.kind) };
        let w = match text_w.get(name) {
            Some(&w) => w,
            None => {
                let w = area.estimate_text_size(name, &look.on_bar())?.0;
                text_w.insert(name, w);
                w
            }
        };
        if (w + look.px(8)) as f64 * px <= end - start && text_fits_height {
            let style = look.on_bar().pos(Pos::new(HPos::Center, VPos::Center));
            labels.push((spans.len(), Text::new(name, ((start + end) / 2.0, (y0 + y1) / 2), style)));
        }
        spans.push((row, start, end));
    }
    let alone = alone_on_row(&spans);
    chart.draw_series(bars)?;
    chart.draw_series(labels.into_iter().filter(|(i, _)| alone[*i]).map(|(_, label)| label))?;
    Ok(())
}

/// Which `(row, start, end)` spans (in start order per row) no other span on their row
/// overlaps. Only those are named: on a lane shared by overlapping dispatches (the
/// comparison's), a name would otherwise be written across other slices.
fn alone_on_row(spans: &[(usize, f64, f64)]) -> Vec<bool> {
    let mut alone = vec![true; spans.len()];
    // Per row, the span reaching furthest right so far.
    let mut reach: HashMap<usize, usize> = HashMap::new();
    for (i, &(row, start, end)) in spans.iter().enumerate() {
        match reach.get(&row).copied() {
            Some(r) if spans[r].2 > start => {
                alone[i] = false;
                alone[r] = false;
                if end > spans[r].2 {
                    reach.insert(row, i);
                }
            }
            _ => {
                reach.insert(row, i);
            }
        }
    }
    alone
}
