//! Compile-cache outcomes over the run: cumulative memory hits, disk loads and misses
//! against op dispatch number. Warm-up shows as a steep miss (or, with a warm persistent
//! cache, disk-load) line that flattens; shape churn as one that never does.

use eager::profiler::CacheOutcome;
use plotters::prelude::*;

use crate::profile::Profile;
use crate::style::{tick_format, Area, DrawResult, Look, DISK_HIT, HIT, MISS};

pub(super) fn draw<DB: DrawingBackend>(p: &Profile, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
    let (hits, misses, disk_hits) = (p.hits(), p.misses(), p.disk_hits());
    let dispatches = hits + misses + disk_hits;
    let subtitle = format!(
        "{hits} hits, {misses} misses (compiled), {disk_hits} loaded from disk over {dispatches} op dispatches · hit rate {:.1}%",
        100.0 * p.hit_rate()
    );
    let legend = [
        ("hits (execute only)", HIT),
        ("disk loads (load + execute)", DISK_HIT),
        ("misses (compile + execute)", MISS),
    ];
    let body = look.header(root, "Compile cache hits, disk loads and misses", &subtitle, &legend)?;
    if dispatches == 0 {
        return look.nothing(&body, "no op dispatches recorded");
    }

    // Cumulative counts, with points only where the outcome switches: between switches
    // each line is straight, so thousands of dispatches stay a few points.
    let (mut h, mut d, mut m) = (Vec::new(), Vec::new(), Vec::new());
    let (mut nh, mut nd, mut nm) = (0u64, 0u64, 0u64);
    let mut last = None;
    let mut i = 0usize;
    for e in p.ops() {
        let Some(outcome) = e.cache else { continue };
        if last != Some(outcome) {
            h.push((i as f64, nh as f64));
            d.push((i as f64, nd as f64));
            m.push((i as f64, nm as f64));
            last = Some(outcome);
        }
        match outcome {
            CacheOutcome::Hit => nh += 1,
            CacheOutcome::DiskHit => nd += 1,
            CacheOutcome::Miss => nm += 1,
        }
        i += 1;
    }
    let n = dispatches as f64;
    h.push((n, nh as f64));
    d.push((n, nd as f64));
    m.push((n, nm as f64));

    let y_max = (hits.max(misses).max(disk_hits) as f64 * 1.08).max(1.0);
    let (w, _) = body.dim_in_pixel();
    let x_ticks = (w / look.px(110)).clamp(2, 12) as usize;
    let y_ticks = 6;
    let mut chart = ChartBuilder::on(&body)
        .margin_left(look.px(16))
        .margin_right(look.px(28))
        .margin_bottom(look.px(8))
        .x_label_area_size(look.px(56))
        .y_label_area_size(look.px(84))
        .build_cartesian_2d(0f64..n, 0f64..y_max)?;
    look.mesh(
        chart
            .configure_mesh()
            .x_labels(x_ticks)
            .y_labels(y_ticks)
            .x_label_formatter(&tick_format(n.max(x_ticks as f64), x_ticks))
            .y_label_formatter(&tick_format(y_max.max(y_ticks as f64), y_ticks))
            .x_desc("op dispatches so far (count)")
            .y_desc("cumulative count"),
    )
    .draw()?;
    let stroke = look.px(3).max(2);
    // Disk loads under the others: without a persistent cache their line lies along the axis.
    chart.draw_series(LineSeries::new(d, DISK_HIT.stroke_width(stroke)))?;
    chart.draw_series(LineSeries::new(h, HIT.stroke_width(stroke)))?;
    chart.draw_series(LineSeries::new(m, MISS.stroke_width(stroke)))?;
    Ok(())
}
