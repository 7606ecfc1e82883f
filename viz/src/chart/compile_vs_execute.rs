//! Per op kind (op name, or transfer direction): compile, load-from-disk and execute time
//! as stacked horizontal bars, longest on top, each with its numbers written beside it.

use eager::profiler::EventKind;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::profile::Profile;
use crate::style::{tick_format, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, LOAD, TRANSFER};
use crate::table::transfer_label;
use crate::units::duration;

/// Rows beyond this are merged into one "others" row, so labels never crowd.
const MAX_ROWS: usize = 20;

/// One row: an op name or a transfer direction (or the sum of the rows left out).
#[derive(Default)]
struct Kind {
    label: String,
    calls: u64,
    compile_ns: u64,
    /// Loading executables from the persistent compile cache.
    load_ns: u64,
    execute_ns: u64,
    transfer_ns: u64,
}

impl Kind {
    fn total(&self) -> u64 {
        self.compile_ns + self.load_ns + self.execute_ns + self.transfer_ns
    }
    fn add(&mut self, k: &Kind) {
        self.calls += k.calls;
        self.compile_ns += k.compile_ns;
        self.load_ns += k.load_ns;
        self.execute_ns += k.execute_ns;
        self.transfer_ns += k.transfer_ns;
    }
    /// `compile 12.3 ms + load 1.10 ms + execute 410 µs · 10 calls`, naming only the parts
    /// there are.
    fn caption(&self) -> String {
        let parts: Vec<String> = [
            ("compile", self.compile_ns),
            ("load", self.load_ns),
            ("execute", self.execute_ns),
            ("transfer", self.transfer_ns),
        ]
        .iter()
        .filter(|(_, ns)| *ns > 0)
        .map(|(what, ns)| format!("{what} {}", duration(*ns)))
        .collect();
        let calls = if self.calls == 1 { "1 call".to_string() } else { format!("{} calls", self.calls) };
        format!("{} · {calls}", parts.join(" + "))
    }
}

/// Totals per op kind, longest first.
fn kinds_of(p: &Profile) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = Vec::new();
    for e in p.events() {
        let label = if e.kind == EventKind::Op { e.name() } else { transfer_label(e.kind) };
        let i = match kinds.iter().position(|k| k.label == label) {
            Some(i) => i,
            None => {
                kinds.push(Kind { label: label.to_string(), ..Kind::default() });
                kinds.len() - 1
            }
        };
        let k = &mut kinds[i];
        k.calls += 1;
        if e.is_disk_hit() {
            k.load_ns += e.compile_ns;
        } else {
            k.compile_ns += e.compile_ns;
        }
        if e.kind == EventKind::Op {
            k.execute_ns += e.execute_ns;
        } else {
            k.transfer_ns += e.execute_ns;
        }
    }
    kinds.sort_by(|a, b| b.total().cmp(&a.total()).then_with(|| a.label.cmp(&b.label)));
    kinds
}

/// Rows the chart shows at its default size.
pub(super) fn kinds(p: &Profile) -> usize {
    kinds_of(p).len().min(MAX_ROWS)
}

pub(super) fn draw<DB: DrawingBackend>(p: &Profile, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
    // Load time only when there were loads: the subtitle shrinks to fit, so every clause costs.
    let load = if p.disk_hits() > 0 {
        format!(" · load from disk {}", duration(p.load_ns()))
    } else {
        String::new()
    };
    let dispatch_ns = p.compile_ns() + p.load_ns() + p.execute_ns() + p.transfer_ns();
    let subtitle = format!(
        "compile {}{load} · execute {} · transfer {} · {:.0}% of dispatch time spent compiling",
        duration(p.compile_ns()),
        duration(p.execute_ns()),
        duration(p.transfer_ns()),
        100.0 * p.compile_ns() as f64 / dispatch_ns.max(1) as f64
    );
    let legend =
        [("compile", COMPILE), ("load from disk", LOAD), ("execute", EXECUTE), ("transfer", TRANSFER)];
    let body = look.header(root, "Compile vs execute time per op", &subtitle, &legend)?;
    let mut kinds = kinds_of(p);
    if kinds.is_empty() {
        return look.nothing(&body, "no dispatches recorded");
    }
    // As many rows as fit at 20 px each (at this scale), the rest merged.
    let (x_area, margins) = (look.px(56), look.px(24));
    let fit = ((body.dim_in_pixel().1.saturating_sub(x_area + margins)) / look.px(20)).max(2) as usize;
    let rows = fit.min(MAX_ROWS);
    if kinds.len() > rows {
        let rest = kinds.split_off(rows - 1);
        let mut other = Kind { label: format!("{} others", rest.len()), ..Kind::default() };
        rest.iter().for_each(|k| other.add(k));
        kinds.push(other);
    }
    let n = kinds.len();

    let max_total = kinds.iter().map(Kind::total).max().unwrap_or(0).max(1);
    let (per_unit, unit) = time_unit(max_total);
    let mut label_w = 0;
    for k in &kinds {
        label_w = label_w.max(root.estimate_text_size(&k.label, &look.tick())?.0);
    }
    // Leave room right of each bar for its caption: the bar of `total` ends at
    // total / x_max of the plot width, and the caption needs its own width after it.
    let y_area = label_w + look.px(52);
    let plot_w = body.dim_in_pixel().0.saturating_sub(y_area + margins + look.px(16)).max(1) as f64;
    let gap = look.px(8) as f64;
    let mut x_max = max_total as f64 / per_unit;
    for k in &kinds {
        let cw = root.estimate_text_size(&k.caption(), &look.tick())?.0 as f64 + 2.0 * gap;
        let room = (plot_w - cw).max(plot_w * 0.25);
        x_max = x_max.max(k.total() as f64 / per_unit * plot_w / room);
    }

    let ticks = (plot_w as u32 / look.px(110)).max(2) as usize;
    // Integer rows of 100 units: plotters formats labels of integer axes with key points.
    let centers: Vec<i32> = (0..n as i32).map(|i| i * 100 + 50).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin_left(look.px(16))
        .margin_right(margins)
        .margin_bottom(look.px(8))
        .x_label_area_size(x_area)
        .y_label_area_size(y_area)
        .build_cartesian_2d(0f64..x_max, (0..n as i32 * 100).with_key_points(centers))?;
    // Longest on top: row i is centred on y = (n - i) * 100 - 50.
    let row_label = |y: &i32| {
        kinds.get(n - (*y as usize / 100).min(n - 1) - 1).map(|k| k.label.clone()).unwrap_or_default()
    };
    look.mesh(
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_labels(ticks)
            .x_label_formatter(&tick_format(x_max, ticks))
            .y_label_formatter(&row_label)
            .x_desc(format!("total time ({unit})"))
            .y_desc("op"),
    )
    .draw()?;

    let min_w = x_max / plot_w;
    let mut bars = Vec::new();
    let mut captions = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let (y0, y1) = ((n - i) as i32 * 100 - 82, (n - i) as i32 * 100 - 18);
        // Segments left to right; an op's execute part is at least two pixels wide, so that
        // a tiny execute next to a long compile still shows.
        let is_op = k.transfer_ns == 0;
        let segments = [
            (k.compile_ns, COMPILE, 0.0),
            (k.load_ns, LOAD, 0.0),
            (k.execute_ns, EXECUTE, if is_op { 2.0 * min_w } else { 0.0 }),
            (k.transfer_ns, TRANSFER, 0.0),
        ];
        let mut x = 0.0;
        for (ns, color, least) in segments {
            if ns == 0 && least == 0.0 {
                continue;
            }
            let end = (x + ns as f64 / per_unit).max(x + least.max(min_w));
            bars.push(Rectangle::new([(x, y0), (end, y1)], color.filled()));
            x = end;
        }
        captions.push(Text::new(
            k.caption(),
            (x + gap * min_w, (y0 + y1) / 2),
            look.tick().pos(Pos::new(HPos::Left, VPos::Center)),
        ));
    }
    chart.draw_series(bars)?;
    chart.draw_series(captions)?;
    Ok(())
}
