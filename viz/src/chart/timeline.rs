//! Every dispatch as a bar on a time axis, one row per device lane: compile, load from
//! disk, execute and transfer in their colours, op names written on the bars wide enough to
//! hold them.

use std::collections::HashMap;

use eager::profiler::EventKind;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::profile::Profile;
use crate::style::{tick_format, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, LOAD, TRANSFER};
use crate::table::transfer_label;
use crate::units::duration;

pub(super) fn draw<DB: DrawingBackend>(p: &Profile, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
    // Load time only when there were loads: the subtitle shrinks to fit, so every clause costs.
    let load = if p.disk_hits() > 0 { format!(", load from disk {}", duration(p.load_ns())) } else { String::new() };
    let subtitle = format!(
        "{} dispatches in {} wall: compile {}{load}, execute {}, transfer {}",
        p.events().len(),
        duration(p.wall_ns()),
        duration(p.compile_ns()),
        duration(p.execute_ns()),
        duration(p.transfer_ns())
    );
    let legend = [("compile", COMPILE), ("load from disk", LOAD), ("execute", EXECUTE), ("transfer", TRANSFER)];
    let body = look.header(root, "Dispatch timeline", &subtitle, &legend)?;
    if p.is_empty() {
        return look.nothing(&body, "no dispatches recorded");
    }

    let (lanes, lane_of) = p.lanes();
    let n = lanes.len();
    let (per_unit, unit) = time_unit(p.wall_ns());
    let x_max = (p.wall_ns() as f64 / per_unit).max(1e-3);
    let mut label_w = 0;
    for l in &lanes {
        label_w = label_w.max(root.estimate_text_size(l, &look.tick())?.0);
    }
    let ticks = (body.dim_in_pixel().0 / look.px(110)).max(2) as usize;
    // Lane 0 at the top: lane i is centred on y = (n - i) * 100 - 50.
    // Integer rows of 100 units: plotters formats labels of integer axes with key points.
    let centers: Vec<i32> = (0..n as i32).map(|i| i * 100 + 50).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin_left(look.px(16))
        .margin_right(look.px(28))
        .margin_bottom(look.px(8))
        .x_label_area_size(look.px(56))
        .y_label_area_size(label_w + look.px(52))
        .build_cartesian_2d(0f64..x_max, (0..n as i32 * 100).with_key_points(centers))?;
    let lane_name = |y: &i32| lanes.get(n - (*y as usize / 100).min(n - 1) - 1).cloned().unwrap_or_default();
    look.mesh(
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_labels(ticks)
            .x_label_formatter(&tick_format(x_max, ticks))
            .y_label_formatter(&lane_name)
            .x_desc(format!("time since start ({unit})"))
            .y_desc("device"),
    )
    .draw()?;

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
    let text_fits_height = root.estimate_text_size("op", &look.on_bar())?.1 as f64 <= lane_h * half as f64 / 50.0;
    let t = |ns: u64| (ns - p.start_ns()) as f64 / per_unit;
    let mut bars = Vec::with_capacity(p.events().len() + (p.misses() + p.disk_hits()) as usize);
    let mut labels = Vec::new();
    let mut text_w: HashMap<&str, u32> = HashMap::new();
    for (e, &lane) in p.events().iter().zip(&lane_of) {
        let mid_y = (n - lane) as i32 * 100 - 50;
        let (y0, y1) = (mid_y - half, mid_y + half);
        let (start, mid, end) = (t(e.start_ns), t(e.start_ns + e.compile_ns), t(e.end_ns()));
        let last = if end - start > 3.0 * gap { end - gap } else { end };
        let color = if e.kind == EventKind::Op { EXECUTE } else { TRANSFER };
        // The part before execute: fetching the executable, by compile or load from disk.
        let fetch = if e.is_miss() {
            Some(COMPILE)
        } else if e.is_disk_hit() {
            Some(LOAD)
        } else {
            None
        };
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
                let w = root.estimate_text_size(name, &look.on_bar())?.0;
                text_w.insert(name, w);
                w
            }
        };
        if (w + look.px(8)) as f64 * px <= end - start && text_fits_height {
            let style = look.on_bar().pos(Pos::new(HPos::Center, VPos::Center));
            labels.push(Text::new(name, ((start + end) / 2.0, (y0 + y1) / 2), style));
        }
    }
    chart.draw_series(bars)?;
    chart.draw_series(labels)?;
    Ok(())
}
