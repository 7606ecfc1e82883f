//! Device memory over time (eager's ledger, `eager::memory`): live tensor bytes as an area,
//! the peak marked, and beside it the largest tensors live at the peak with the ops that made
//! them: where the memory of a training step goes.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{outputs, Drawing};
use crate::style::{tick_format, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, MUTED};
use eager::memory::{format_bytes, MemorySnapshot};

/// Live bytes over time with the peak and the largest tensors at it. Build it with
/// [`memory_chart`] (the ledger now) or [`MemoryChart::new`]; it draws like the other charts
/// and shows as SVG when it ends an evcxr cell; [`MemoryChart::text`] is the same in words.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryChart {
    snapshot: MemorySnapshot,
    title: String,
}

/// The chart of eager's memory ledger as it stands now.
pub fn memory_chart() -> MemoryChart {
    MemoryChart::new(eager::memory::snapshot())
}

/// How many tensors the side list names.
const LISTED: usize = 8;

impl MemoryChart {
    /// A chart of `snapshot` (usually [`eager::memory::snapshot`]), titled "Device memory".
    pub fn new(snapshot: MemorySnapshot) -> MemoryChart {
        MemoryChart { snapshot, title: "Device memory".into() }
    }

    /// Another title ("Memory of one training step").
    pub fn title(mut self, title: &str) -> MemoryChart {
        self.title = title.into();
        self
    }

    /// The snapshot the chart draws.
    pub fn snapshot(&self) -> &MemorySnapshot {
        &self.snapshot
    }

    /// The live total, the peak and the largest tensors, as `:memory` prints them.
    pub fn text(&self) -> String {
        self.snapshot.summary(LISTED)
    }

    fn subtitle(&self, t0: u64) -> String {
        let s = &self.snapshot;
        let span = s.timeline.last().map_or(0, |p| p.0.saturating_sub(t0)).max(1);
        let (div, unit) = time_unit(span);
        let at = (s.peak_ns.saturating_sub(t0)) as f64 / div;
        let mut text = format!(
            "live {} in {} tensors · peak {} at {at:.1} {unit}",
            format_bytes(s.live_bytes),
            s.live.len(),
            format_bytes(s.peak_bytes)
        );
        if let Some(limit) = s.limit {
            text.push_str(&format!(" · limit {}", format_bytes(limit)));
        }
        text
    }
}

outputs!(MemoryChart);

/// Divisor and unit for a byte axis up to `max`.
fn byte_unit(max: u64) -> (f64, &'static str) {
    match max {
        m if m >= 1 << 30 => ((1u64 << 30) as f64, "GiB"),
        m if m >= 1 << 20 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 1 << 10 => (1024.0, "KiB"),
        _ => (1.0, "B"),
    }
}

impl Drawing for MemoryChart {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn natural_size(&self) -> (u32, u32) {
        (1100, 520)
    }

    fn draw_on<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
        let s = &self.snapshot;
        let t0 = s.timeline.first().map_or(0, |p| p.0);
        let legend = [("live bytes", EXECUTE), ("peak", COMPILE)];
        let body = look.header(root, &self.title, &self.subtitle(t0), &legend)?;
        if s.timeline.is_empty() {
            return look.nothing(&body, "no tensors made yet");
        }
        let (w, _) = body.dim_in_pixel();
        let (plot, side) = body.split_horizontally(w * 64 / 100);

        let t_end = s.timeline.last().map_or(t0, |p| p.0).max(s.peak_ns);
        let span = t_end.saturating_sub(t0).max(1);
        let (tdiv, tunit) = time_unit(span);
        let top = s.timeline.iter().map(|p| p.1).max().unwrap_or(0).max(s.peak_bytes).max(1);
        let (bdiv, bunit) = byte_unit(top);
        let x = |t: u64| t.saturating_sub(t0) as f64 / tdiv;
        let y_max = top as f64 / bdiv * 1.12;
        let mut chart = ChartBuilder::on(&plot)
            .margin_left(look.px(16))
            .margin_right(look.px(20))
            .margin_bottom(look.px(8))
            .x_label_area_size(look.px(56))
            .y_label_area_size(look.px(84))
            .build_cartesian_2d(0.0..(span as f64 / tdiv), 0.0..y_max)?;
        let (x_fmt, y_fmt) = (tick_format(span as f64 / tdiv, 6), tick_format(y_max, 6));
        look.mesh(
            chart
                .configure_mesh()
                .x_labels(6)
                .y_labels(6)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .x_desc(format!("time ({tunit})"))
                .y_desc(format!("live ({bunit})")),
        )
        .draw()?;
        // Each point holds from its time to the next: a step, not a slope.
        let mut steps = Vec::with_capacity(s.timeline.len() * 2);
        for (i, &(t, b)) in s.timeline.iter().enumerate() {
            if i > 0 {
                steps.push((x(t), steps.last().map_or(0.0, |p: &(f64, f64)| p.1)));
            }
            steps.push((x(t), b as f64 / bdiv));
        }
        chart.draw_series(
            AreaSeries::new(steps.iter().copied(), 0.0, EXECUTE.mix(0.25))
                .border_style(EXECUTE.stroke_width(look.px(2).max(1))),
        )?;
        let peak = (x(s.peak_ns), s.peak_bytes as f64 / bdiv);
        chart.draw_series(std::iter::once(Circle::new(peak, look.px(6), COMPILE.filled())))?;
        let label = format!("peak {}", format_bytes(s.peak_bytes));
        // Left of the mark when it is near the right edge, so that the label stays inside.
        let near_right = peak.0 > span as f64 / tdiv * 0.7;
        let (anchor, dx) =
            if near_right { (HPos::Right, -(look.px(8) as i32)) } else { (HPos::Left, look.px(8) as i32) };
        let style = look.tick().color(&COMPILE).pos(Pos::new(anchor, VPos::Bottom));
        let mark = EmptyElement::at(peak) + Text::new(label, (dx, -(look.px(6) as i32)), style);
        chart.draw_series(std::iter::once(mark))?;

        // The side list: the largest tensors at the peak, each with the op that made it.
        let (sw, _) = side.dim_in_pixel();
        let left = look.px(12) as i32;
        side.draw(&Text::new("Largest at the peak", (left, look.px(8) as i32), look.heading()))?;
        if s.at_peak.is_empty() {
            let style = look.caption().color(&MUTED);
            return side.draw(&Text::new("none", (left, look.px(36) as i32), style));
        }
        let line = look.px(21) as i32;
        let mut y = look.px(38) as i32;
        for t in s.at_peak.iter().take(LISTED) {
            let what = format!("{} {}", format_bytes(t.bytes), t.spec());
            let what = crate::units::truncate(&what, 44);
            let style = crate::style::fit(&side, &what, look.caption(), sw.saturating_sub(look.px(16)))?;
            side.draw(&Text::new(what, (left, y), style))?;
            let by = format!("made by {} on {}", t.op, t.device);
            side.draw(&Text::new(by, (left + look.px(12) as i32, y + line), look.caption().color(&MUTED)))?;
            y += line * 2 + look.px(4) as i32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eager::memory::LiveTensor;
    use eager::{DType, Device};

    fn tensor(bytes: u64, op: &str) -> LiveTensor {
        LiveTensor {
            bytes,
            device: Device::cpu(),
            dtype: DType::F32,
            shape: vec![bytes as usize / 4],
            op: op.into(),
            made_ns: 0,
        }
    }

    #[test]
    fn the_chart_marks_the_peak_and_names_the_largest_tensors_at_it() {
        let snap = MemorySnapshot {
            live_bytes: 1 << 20,
            peak_bytes: 3 << 20,
            peak_ns: 2_000_000,
            live: vec![tensor(1 << 20, "upload")],
            at_peak: vec![tensor(2 << 20, "matmul"), tensor(1 << 20, "upload")],
            timeline: vec![(0, 1 << 20), (2_000_000, 3 << 20), (4_000_000, 1 << 20)],
            limit: None,
        };
        let chart = MemoryChart::new(snap);
        let svg = chart.svg().unwrap();
        assert!(svg.contains("peak 3.0 MiB"), "the peak's label");
        assert!(svg.contains("made by matmul on cpu:0"));
        assert!(svg.contains("2.0 MiB f32[524288]"));
        assert!(svg.contains("live 1.0 MiB in 1 tensors · peak 3.0 MiB at 2.0 ms"));
        assert!(chart
            .text()
            .contains("largest at the peak:\n  f32[524288] 2.0 MiB on cpu:0, made by matmul"));
        // PNG too, and an empty ledger says so instead of failing.
        assert!(chart.png(800, 400).unwrap().starts_with(b"\x89PNG"));
        assert!(MemoryChart::new(MemorySnapshot::default()).svg().unwrap().contains("no tensors made yet"));
    }
}
