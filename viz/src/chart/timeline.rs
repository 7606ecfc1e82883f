//! Every dispatch as a bar on a time axis, one row per device lane: compile, load from
//! disk, execute and transfer in their colours, op names written on the bars wide enough to
//! hold them. The row chart and the slices are shared with the profile comparison.

use std::collections::HashMap;

use eager::profiler::{CacheOutcome, Event, EventKind};
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::profile::Profile;
use crate::style::{tick_format, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, LOAD, TRANSFER};
use crate::table::transfer_label;
use crate::units::duration;

/// The legend of every chart drawing dispatch slices.
pub(super) const SLICE_LEGEND: [(&str, RGBColor); 4] =
    [("compile", COMPILE), ("load from disk", LOAD), ("execute", EXECUTE), ("transfer", TRANSFER)];

pub(super) fn draw<DB: DrawingBackend>(p: &Profile, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
    // Load time only when there were loads: the subtitle shrinks to fit, so every clause costs.
    let load =
        if p.disk_hits() > 0 { format!(", load from disk {}", duration(p.load_ns())) } else { String::new() };
    let subtitle = format!(
        "{} dispatches in {} wall: compile {}{load}, execute {}, transfer {}",
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
    let (per_unit, unit) = time_unit(p.wall_ns());
    let x_max = (p.wall_ns() as f64 / per_unit).max(1e-3);
    let y_area = row_label_width(root, look, &lanes)? + look.px(52);
    let x_desc = format!("time since start ({unit})");
    let mut chart = row_chart(&body, look, &lanes, x_max, &x_desc, Some("device"), y_area)?;
    let slices = lane_of.into_iter().map(|(i, row)| (&p.events()[i], row));
    draw_slices(&mut chart, look, lanes.len(), slices, p.start_ns(), per_unit)
}

/// A chart of named rows (the first on top) on a time axis: rows are 100 units tall, row
/// `i` of `n` centred on `(n - i) * 100 - 50`.
pub(super) type RowChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<RangedCoordf64, WithKeyPoints<RangedCoordi32>>>;

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
/// ~110 px, row names as y labels in a label area `y_area` wide.
pub(super) fn row_chart<'a, DB: DrawingBackend>(
    area: &'a Area<DB>,
    look: &Look,
    rows: &[String],
    x_max: f64,
    x_desc: &str,
    y_desc: Option<&str>,
    y_area: u32,
) -> DrawResult<RowChart<'a, DB>, DB> {
    let n = rows.len().max(1);
    let ticks = (area.dim_in_pixel().0 / look.px(110)).max(2) as usize;
    // Integer rows of 100 units: plotters formats labels of integer axes with key points.
    let centers: Vec<i32> = (0..n as i32).map(|i| i * 100 + 50).collect();
    let mut chart = ChartBuilder::on(area)
        .margin_left(look.px(16))
        .margin_right(look.px(28))
        .margin_bottom(look.px(8))
        .x_label_area_size(look.px(56))
        .y_label_area_size(y_area)
        .build_cartesian_2d(0f64..x_max, (0..n as i32 * 100).with_key_points(centers))?;
    let row_name = |y: &i32| rows.get(n - (*y as usize / 100).min(n - 1) - 1).cloned().unwrap_or_default();
    let format = tick_format(x_max, ticks);
    let mut mesh = chart.configure_mesh();
    mesh.disable_y_mesh()
        .x_labels(ticks)
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
/// load part, then its execute or transfer part, at `(ns - origin_ns) / per_unit` on the x
/// axis. Parts outside the axis are cut off; an event wholly outside it is not drawn.
pub(super) fn draw_slices<'e, DB: DrawingBackend>(
    chart: &mut RowChart<DB>,
    look: &Look,
    rows: usize,
    events: impl IntoIterator<Item = (&'e Event, usize)>,
    origin_ns: u64,
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
    let t = |ns: u64| (ns as f64 - origin_ns as f64) / per_unit;
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
