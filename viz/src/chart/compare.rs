//! Profiles side by side, e.g. a training run dispatched op by op and the same run with its
//! step compiled into one program: per run its figures, its whole run as one lane on a time
//! axis all runs share (so their lengths compare), the same short window from the middle of
//! each run (so the slices per step compare), and grouped bars of the totals.

use std::fmt::{self, Write as _};
use std::time::Duration;

use eager::profiler::Event;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::summary::{caption, RunSummary};
use super::timeline::{draw_cuts, draw_slices, row_chart, row_label_width, SLICE_LEGEND};
use super::{outputs, Drawing};
use crate::gaps::TimeAxis;
use crate::profile::Profile;
use crate::style::{fit, time_unit, Area, DrawResult, Look, COMPILE, EXECUTE, LOAD, TRANSFER, WALL};
use crate::units::{duration, value};

/// Several profiles compared: [`Comparison::text`] for a terminal, [`Comparison::html`] and
/// the charts ([`Comparison::svg`], [`Comparison::png`], [`Comparison::write_png`],
/// [`Comparison::as_png`]) for notebooks and files. Ending an evcxr cell, it shows as its
/// chart above its table.
///
/// The chart has one lane per run (a run's overlapping dispatches share it; the
/// [`Profile::timeline`] gives them rows of their own): the whole runs on one shared time
/// axis, then the same window from the middle of each run (by default three dispatch
/// intervals of the run that dispatches least often, or one warm step of the slowest run
/// once [`Comparison::steps`] is known), then the totals as grouped bars.
#[derive(Debug, Clone)]
pub struct Comparison {
    runs: Vec<(String, Profile)>,
    steps: Option<u64>,
    zoom_ns: Option<u64>,
    true_time: bool,
}

/// Compares named profiles (copied, so the comparison outlives them, e.g. across notebook
/// cells).
///
/// ```no_run
/// # let (eager_run, compiled_run) = (viz::Profile::default(), viz::Profile::default());
/// let cmp = viz::compare(&[("eager", &eager_run), ("compiled", &compiled_run)]).steps(200);
/// println!("{}", cmp.text());
/// cmp.write_png("compare.png")?;
/// # Ok::<(), viz::Error>(())
/// ```
pub fn compare(profiles: &[(&str, &Profile)]) -> Comparison {
    Comparison {
        runs: profiles.iter().map(|&(name, p)| (name.to_string(), p.clone())).collect(),
        steps: None,
        zoom_ns: None,
        true_time: false,
    }
}

impl Comparison {
    /// Every run took `steps` training steps: the figures gain per-step columns and the zoom
    /// shows one warm step of the slowest run.
    pub fn steps(mut self, steps: usize) -> Comparison {
        self.steps = Some(steps as u64).filter(|&s| s > 0);
        self
    }

    /// Keeps the true time axis in the whole-run lanes: idle stretches (see
    /// [`Profile::idle_gaps`]) at their length instead of cut out at a marked line.
    pub fn true_time(mut self) -> Comparison {
        self.true_time = true;
        self
    }

    /// Sets the window the zoom lanes show.
    pub fn zoom(mut self, window: Duration) -> Comparison {
        self.zoom_ns = Some(window.as_nanos().min(u64::MAX as u128) as u64);
        self
    }

    /// The runs' figures, in the order given.
    pub fn summaries(&self) -> Vec<RunSummary> {
        self.runs.iter().map(|(name, p)| RunSummary::new(name, p, self.steps)).collect()
    }

    /// The window each zoom lane shows, in nanoseconds (no longer than the longest run).
    pub fn zoom_ns(&self) -> u64 {
        let longest = self.runs.iter().map(|(_, p)| p.wall_ns()).max().unwrap_or(0);
        let auto = || {
            // Unless the true time axis is kept, idle stretches are no part of a step.
            let idle: Vec<u64> = self
                .runs
                .iter()
                .map(|(_, p)| if self.true_time { 0 } else { p.idle_gaps().iter().map(|g| g.len_ns()).sum() })
                .collect();
            let summaries = self.summaries();
            let steady =
                summaries.iter().zip(&idle).map(|(s, idle)| (s, s.steady_ns().saturating_sub(*idle)));
            match self.steps {
                Some(steps) => steady.map(|(_, ns)| ns / steps).max().unwrap_or(0),
                None => {
                    let per_dispatch = |(s, ns): (&RunSummary, u64)| ns / s.op_dispatches.max(1);
                    3 * steady.filter(|(s, _)| s.op_dispatches > 0).map(per_dispatch).max().unwrap_or(0)
                }
            }
        };
        self.zoom_ns.unwrap_or_else(auto).clamp(1, longest.max(1))
    }

    /// Where each run's zoom window starts (profiler clock): centred on the warm part of
    /// the run (after its last compile or load), at the first dispatch from there, so the
    /// window holds whole dispatches.
    fn zoom_starts(&self, window: u64) -> Vec<u64> {
        self.runs
            .iter()
            .map(|(_, p)| {
                if p.wall_ns() <= window {
                    return p.start_ns();
                }
                let warm =
                    p.events().iter().filter(|e| e.compile_ns > 0).map(|e| e.start_ns + e.compile_ns).max();
                let warm = warm.unwrap_or(p.start_ns()).min(p.end_ns() - window);
                let from = warm + (p.end_ns() - warm - window) / 2;
                let events = p.events();
                let first = events.partition_point(|e| e.start_ns < from);
                events.get(first).map_or(from, |e| e.start_ns).min(p.end_ns() - window)
            })
            .collect()
    }

    /// Rows of the comparison table: a label, then one cell per run.
    fn grid(&self) -> Vec<(String, Vec<String>)> {
        let s = self.summaries();
        let row = |label: &str, cell: &dyn Fn(&RunSummary) -> String| {
            (label.to_string(), s.iter().map(cell).collect())
        };
        let mut rows = vec![row("op dispatches", &|r| r.op_dispatches.to_string())];
        if self.steps.is_some() {
            rows.push(row("  per step", &|r| r.dispatches_per_step().map_or("-".into(), value)));
        }
        rows.push(row("distinct executables", &|r| r.executables.to_string()));
        rows.push(row("most dispatched", &|r| {
            r.most_dispatched.as_ref().map_or("-".into(), |(op, n)| format!("{op} ×{n}"))
        }));
        rows.push(row("transfers", &|r| r.transfers.to_string()));
        rows.push(row("compile", &|r| duration(r.compile_ns)));
        if s.iter().any(|r| r.load_ns > 0) {
            rows.push(row("load from disk", &|r| duration(r.load_ns)));
        }
        rows.push(row("device execute", &|r| duration(r.execute_ns)));
        rows.push(row("transfer", &|r| duration(r.transfer_ns)));
        rows.push(row("host (the rest)", &|r| duration(r.host_ns())));
        rows.push(row("wall", &|r| duration(r.wall_ns)));
        if self.steps.is_some() {
            rows.push(row("  per step, warm", &|r| {
                r.steady_step_ns().map_or("-".into(), |ns| duration(ns as u64))
            }));
        }
        rows.push(row("dispatches / s", &|r| value(r.dispatches_per_second().round())));
        rows
    }

    /// One line per run after the first, against the first: `compiled: 4.6× less wall
    /// time than eager, 57× fewer op dispatches`.
    fn verdicts(&self) -> Vec<String> {
        let s = self.summaries();
        let Some((base, others)) = s.split_first() else { return Vec::new() };
        // `k× less`, `k× more`, or `same` within half a percent.
        let ratio = |a: u64, b: u64, less: &str, more: &str, same: &str| -> String {
            let k = a as f64 / b as f64;
            if (k - 1.0).abs() < 0.005 {
                same.to_string()
            } else if k < 1.0 {
                format!("{}× {less}", value(1.0 / k))
            } else {
                format!("{}× {more}", value(k))
            }
        };
        others
            .iter()
            .filter(|r| r.wall_ns > 0 && base.wall_ns > 0)
            .map(|r| {
                let wall = ratio(
                    r.wall_ns,
                    base.wall_ns,
                    "less wall time than",
                    "more wall time than",
                    "the same wall time as",
                );
                let ops = if r.op_dispatches > 0 && base.op_dispatches > 0 {
                    let ops = ratio(r.op_dispatches, base.op_dispatches, "fewer", "more", "as many");
                    format!(", {ops} op dispatches")
                } else {
                    String::new()
                };
                format!("{}: {wall} {}{ops}", r.name, base.name)
            })
            .collect()
    }

    /// A plain-text table comparing the runs, one column each, and how each run compares
    /// with the first.
    pub fn text(&self) -> String {
        if self.runs.is_empty() {
            return "no profiles to compare\n".into();
        }
        let names: Vec<&str> = self.runs.iter().map(|(n, _)| n.as_str()).collect();
        let grid = self.grid();
        let label_w = grid.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0);
        let col_w: Vec<usize> = (0..names.len())
            .map(|i| {
                grid.iter()
                    .map(|(_, c)| c[i].chars().count())
                    .chain([names[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let mut line = " ".repeat(label_w);
        for (name, w) in names.iter().zip(&col_w) {
            let _ = write!(line, "  {name:>w$}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
        for (label, cells) in &grid {
            let mut line = format!("{label:<label_w$}");
            for (cell, w) in cells.iter().zip(&col_w) {
                let _ = write!(line, "  {cell:>w$}");
            }
            out.push_str(&line);
            out.push('\n');
        }
        for v in self.verdicts() {
            out.push_str(&v);
            out.push('\n');
        }
        for (name, p) in self.runs.iter().filter(|(_, p)| p.lost() > 0) {
            let _ = writeln!(
                out,
                "{name}: {} events left eager's log before they were read; its figures are short",
                p.lost()
            );
        }
        out
    }

    /// The chart above the table, self-contained HTML for a notebook. The chart is an SVG
    /// in an `<img>` data URL: notebook viewers strip SVG written inline into HTML that
    /// they do not trust (a notebook reopened from disk), but show images.
    pub fn html(&self) -> String {
        use base64::Engine as _;
        const CELL: &str = "padding:2px 10px;border-bottom:1px solid #ddd";
        let mut out = String::from("<div class=\"viz-compare\">\n");
        match self.svg() {
            Ok(svg) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(svg);
                let names: Vec<&str> = self.runs.iter().map(|(n, _)| n.as_str()).collect();
                let _ = write!(
                    out,
                    "<img alt=\"{}\" width=\"{}\" style=\"max-width:100%\" src=\"data:image/svg+xml;base64,{b64}\"/>",
                    escape(&format!("dispatches of {} side by side", names.join(" vs "))),
                    self.default_size().0
                );
            }
            Err(e) => {
                let _ = write!(out, "<div>{}</div>", escape(&e.to_string()));
            }
        }
        out.push_str(
            "\n<table style=\"border-collapse:collapse;font-family:monospace;font-size:13px\">\n<thead><tr>",
        );
        let _ = write!(out, "<th style=\"{CELL}\"></th>");
        for (name, _) in &self.runs {
            let _ = write!(out, "<th style=\"{CELL};text-align:right\">{}</th>", escape(name));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for (label, cells) in self.grid() {
            // Rows indented in the text (per step) are indented here too.
            let indent = if label.starts_with(' ') { ";padding-left:26px" } else { "" };
            let _ = write!(
                out,
                "<tr><td style=\"{CELL};text-align:left{indent}\">{}</td>",
                escape(label.trim_start())
            );
            for c in cells {
                let _ = write!(out, "<td style=\"{CELL};text-align:right\">{}</td>", escape(&c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
        for v in self.verdicts() {
            let _ = writeln!(
                out,
                "<div style=\"font-family:monospace;font-size:13px;margin-top:4px\">{}</div>",
                escape(&v)
            );
        }
        out.push_str("</div>\n");
        out
    }

    /// Bars of the totals panel: wall, compile, execute, and load and transfer when any
    /// run had them.
    fn total_kinds(&self) -> Vec<TotalKind> {
        let s = self.summaries();
        let mut kinds: Vec<TotalKind> =
            vec![("wall", WALL, |r| r.wall_ns), ("compile", COMPILE, |r| r.compile_ns)];
        if s.iter().any(|r| r.load_ns > 0) {
            kinds.push(("load", LOAD, |r| r.load_ns));
        }
        kinds.push(("execute", EXECUTE, |r| r.execute_ns));
        if s.iter().any(|r| r.transfer_ns > 0) {
            kinds.push(("transfer", TRANSFER, |r| r.transfer_ns));
        }
        kinds
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Heights of the chart's parts, in default-size pixels.
const CAPTION_LINE: u32 = 21;
const HEADING: u32 = 28;
/// One run's lane in a timeline part.
const LANE: u32 = 46;
/// One bar of the totals.
const BAR: u32 = 15;
/// The x axis under a part (tick labels and description) and the margin below it.
const AXIS: u32 = 64;

outputs!(Comparison);

impl Drawing for Comparison {
    fn name(&self) -> &'static str {
        "comparison"
    }

    fn natural_size(&self) -> (u32, u32) {
        let n = self.runs.len().max(1) as u32;
        let bars = self.total_kinds().len() as u32;
        let header = 92;
        let captions = n * 2 * CAPTION_LINE + 10;
        let timelines = 2 * (HEADING + n * LANE + AXIS);
        let totals = HEADING + n * (bars * BAR + 14) + AXIS;
        (1200, (header + captions + timelines + totals).clamp(400, crate::error::MAX_SIDE))
    }

    fn draw_on<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
        let names: Vec<String> = self.runs.iter().map(|(n, _)| n.clone()).collect();
        let title = match names.len() {
            0 => "Profiles side by side".to_string(),
            1 => format!("{}: dispatches", names[0]),
            _ => format!("{}: dispatches side by side", names.join(" vs ")),
        };
        let window = self.zoom_ns();
        let longest = self.runs.iter().map(|(_, p)| p.wall_ns()).max().unwrap_or(0);
        // Each run's idle stretches cut out of its lane (none with the true time axis).
        let axes: Vec<TimeAxis> = self
            .runs
            .iter()
            .map(|(_, p)| {
                let gaps = if self.true_time { Vec::new() } else { p.idle_gaps() };
                TimeAxis::cut(p.start_ns(), p.end_ns(), &gaps, 0.0)
            })
            .collect();
        let cut = axes.iter().any(|a| !a.breaks.is_empty());
        let span = axes.iter().map(|a| a.len).fold(0.0, f64::max) as u64;
        let subtitle = if longest == 0 {
            "no dispatches recorded".to_string()
        } else if cut {
            format!(
                "whole runs on one shared time axis (0 to {}), idle stretches cut out at the marked lines; then the same {} of each run",
                duration(span),
                duration(window)
            )
        } else {
            format!(
                "whole runs on one shared time axis (0 to {}), so their lengths compare; then the same {} of each run",
                duration(longest),
                duration(window)
            )
        };
        let mut legend = SLICE_LEGEND.to_vec();
        legend.push(("wall time", WALL));
        let body = look.header(root, &title, &subtitle, &legend)?;
        if self.runs.is_empty() {
            return look.nothing(&body, "no profiles to compare");
        }
        let n = self.runs.len();
        let summaries = self.summaries();
        let (captions, rest) = body.split_vertically(look.px(n as u32 * 2 * CAPTION_LINE + 10));
        self.draw_captions(&captions, look, &summaries)?;

        // One label width for every part, so that their plots line up.
        let y_area = row_label_width(root, look, &names)? + look.px(24);
        let part = look.px(HEADING + n as u32 * LANE + AXIS);
        let (whole, rest) = rest.split_vertically(part);
        let (zoom, totals) = rest.split_vertically(part);

        let whole = heading(&whole, look, "Whole runs, one time axis")?;
        let (per_unit, unit) = time_unit(span);
        let x_max = (span as f64 / per_unit).max(1e-3);
        let x_desc = if cut {
            format!("time at work since the run's start ({unit}), idle stretches cut out")
        } else {
            format!("time since the run's start ({unit})")
        };
        let mut chart = row_chart(&whole, look, &names, x_max, &x_desc, None, y_area, None)?;
        for (i, ((_, p), axis)) in self.runs.iter().zip(&axes).enumerate() {
            draw_slices(&mut chart, look, n, p.events().iter().map(|e| (e, i)), axis, per_unit)?;
            draw_cuts(&mut chart, look, n, i, axis, per_unit)?;
        }

        let starts = self.zoom_starts(window);
        let from: Vec<String> = self
            .runs
            .iter()
            .zip(&starts)
            .map(|((name, p), &s)| format!("{name} from {}", duration(s - p.start_ns())))
            .collect();
        let what = match self.steps {
            Some(_) if self.zoom_ns.is_none() => "one warm step of the slowest run",
            _ => "the middle of each run after its compiles",
        };
        let zoom = heading(
            &zoom,
            look,
            &format!("Zoom: the same {} ({what}; {})", duration(window), from.join(", ")),
        )?;
        let (per_unit, unit) = time_unit(window);
        let x_max = (window as f64 / per_unit).max(1e-3);
        let x_desc = format!("time into the window ({unit})");
        let mut chart = row_chart(&zoom, look, &names, x_max, &x_desc, None, y_area, None)?;
        for (i, ((_, p), &start)) in self.runs.iter().zip(&starts).enumerate() {
            // Only the events that can reach into the window: the log is sorted by start.
            let events: &[Event] = p.events();
            let last = events.partition_point(|e| e.start_ns <= start + window);
            let axis = TimeAxis::linear(start, start + window);
            draw_slices(&mut chart, look, n, events[..last].iter().map(|e| (e, i)), &axis, per_unit)?;
        }

        let totals = heading(&totals, look, "Totals")?;
        self.draw_totals(&totals, look, &names, &summaries, y_area)
    }
}

/// Writes `text` as the heading of `area` and returns the area below it.
fn heading<DB: DrawingBackend>(area: &Area<DB>, look: &Look, text: &str) -> DrawResult<Area<DB>, DB> {
    let room = area.dim_in_pixel().0.saturating_sub(look.px(32));
    let style = fit(area, text, look.heading(), room)?.pos(Pos::new(HPos::Left, VPos::Center));
    area.draw(&Text::new(text.to_string(), (look.px(16) as i32, look.px(HEADING / 2) as i32), style))?;
    Ok(area.split_vertically(look.px(HEADING)).1)
}

impl Comparison {
    /// Two lines per run: its name in bold, then its counts and its times.
    fn draw_captions<DB: DrawingBackend>(
        &self,
        area: &Area<DB>,
        look: &Look,
        summaries: &[RunSummary],
    ) -> DrawResult<(), DB> {
        let mut name_w = 0;
        for s in summaries {
            name_w = name_w.max(area.estimate_text_size(&s.name, &look.heading())?.0);
        }
        let x0 = look.px(16) as i32;
        let x1 = x0 + (name_w + look.px(14)) as i32;
        let room = area.dim_in_pixel().0.saturating_sub(x1 as u32 + look.px(16));
        let lines: Vec<[String; 2]> = summaries.iter().map(caption).collect();
        // One size for every caption line: the longest one fits.
        let longest = lines.iter().flatten().max_by_key(|l| l.chars().count()).cloned().unwrap_or_default();
        let style = fit(area, &longest, look.caption(), room)?.pos(Pos::new(HPos::Left, VPos::Center));
        let line_h = look.px(CAPTION_LINE) as i32;
        for (i, (s, [counts, times])) in summaries.iter().zip(&lines).enumerate() {
            let y = look.px(6) as i32 + (2 * i as i32) * line_h + line_h / 2;
            let bold = look.heading().pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new(s.name.clone(), (x0, y), bold))?;
            area.draw(&Text::new(counts.clone(), (x1, y), style.clone()))?;
            area.draw(&Text::new(times.clone(), (x1, y + line_h), style.clone()))?;
        }
        Ok(())
    }

    /// Per run a group of horizontal bars, one per total, each with its figure beside it.
    fn draw_totals<DB: DrawingBackend>(
        &self,
        area: &Area<DB>,
        look: &Look,
        names: &[String],
        summaries: &[RunSummary],
        y_area: u32,
    ) -> DrawResult<(), DB> {
        let kinds = self.total_kinds();
        let n = summaries.len();
        let max_total =
            summaries.iter().flat_map(|s| kinds.iter().map(move |k| (k.2)(s))).max().unwrap_or(0).max(1);
        let (per_unit, unit) = time_unit(max_total);
        // Room right of each bar for its figure: a bar of `ns` ends at ns / x_max of the
        // plot width, and its label needs its own width after it.
        let plot_w = area.dim_in_pixel().0.saturating_sub(y_area + look.px(16 + 28)).max(1) as f64;
        let gap = look.px(6) as f64;
        let mut x_max = max_total as f64 / per_unit;
        for s in summaries {
            for (what, _, of) in &kinds {
                let label_w =
                    area.estimate_text_size(&format!("{what} {}", duration(of(s))), &look.tick())?.0 as f64;
                let room = (plot_w - label_w - 2.0 * gap).max(plot_w * 0.25);
                x_max = x_max.max(of(s) as f64 / per_unit * plot_w / room);
            }
        }
        let x_desc = format!("total time ({unit})");
        let mut chart = row_chart(area, look, names, x_max, &x_desc, None, y_area, None)?;
        let px = x_max / plot_w;
        let thick = 80 / kinds.len() as i32;
        let mut bars = Vec::new();
        let mut labels = Vec::new();
        for (i, s) in summaries.iter().enumerate() {
            let top = (n - i) as i32 * 100 - 10;
            for (j, (what, color, of)) in kinds.iter().enumerate() {
                let (y0, y1) = (top - j as i32 * thick, top - (j as i32 + 1) * thick + 3);
                let end = (of(s) as f64 / per_unit).max(px);
                bars.push(Rectangle::new([(0.0, y0), (end, y1)], color.filled()));
                let style = look.tick().pos(Pos::new(HPos::Left, VPos::Center));
                labels.push(Text::new(
                    format!("{what} {}", duration(of(s))),
                    (end + gap * px, (y0 + y1) / 2),
                    style,
                ));
            }
        }
        chart.draw_series(bars)?;
        chart.draw_series(labels)?;
        Ok(())
    }
}

/// One bar of the totals panel: its label, colour and the figure of a run it shows.
type TotalKind = (&'static str, RGBColor, fn(&RunSummary) -> u64);
