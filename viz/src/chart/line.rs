//! Numbers against step (or any x), one line per series: the loss curves of training runs.
//! Non-finite values (and, on a log scale, values at or below zero) are left out and break
//! the line where they were, so a gap in the data shows as a gap.

use std::ops::Range;

use plotters::coord::combinators::{BindKeyPoints, IntoLogRange};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::{outputs, Drawing};
use crate::style::{tick_format, Area, DrawResult, Look, SERIES};
use crate::units::value;

/// One named line.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A line chart of named series, e.g. the loss of two training runs per step: one colour
/// per series from [`crate::style::SERIES`], a legend naming them, the last value of each
/// in the subtitle. Build it with [`line_chart`] or [`LineChart::new`] and
/// [`LineChart::series`]; it draws like the profile charts ([`LineChart::svg`],
/// [`LineChart::png`], [`LineChart::write_png`], [`LineChart::as_png`]) and shows as SVG
/// when it ends an evcxr cell.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    title: String,
    x_label: String,
    y_label: String,
    series: Vec<Series>,
    /// Every series was given as y values alone: x is the step, an integer.
    steps_on_x: bool,
    log_y: bool,
}

/// A line chart of `series`, each a name and its values at steps 0, 1, 2, … (`f32` or
/// `f64`, in a `Vec` or a slice).
///
/// ```no_run
/// let eager_loss: Vec<f32> = vec![2.3, 1.1, 0.6];
/// let compiled_loss: Vec<f32> = vec![2.3, 1.1, 0.6];
/// viz::line_chart("Training loss", "step", "loss", &[("eager", &eager_loss), ("compiled", &compiled_loss)])
///     .log_y()
///     .write_png("loss.png")?;
/// # Ok::<(), viz::Error>(())
/// ```
pub fn line_chart<S, T>(title: &str, x_label: &str, y_label: &str, series: &[(&str, S)]) -> LineChart
where
    S: AsRef<[T]>,
    T: Copy + Into<f64>,
{
    series.iter().fold(LineChart::new(title, x_label, y_label), |chart, (name, ys)| chart.series(name, ys))
}

impl LineChart {
    /// A chart with no series yet.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LineChart {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            steps_on_x: true,
            log_y: false,
        }
    }

    /// Adds a series of values at x = 0, 1, 2, … (steps).
    pub fn series<S, T>(mut self, name: &str, ys: S) -> LineChart
    where
        S: AsRef<[T]>,
        T: Copy + Into<f64>,
    {
        let points = ys.as_ref().iter().enumerate().map(|(i, &y)| (i as f64, y.into())).collect();
        self.series.push(Series { name: name.into(), points });
        self
    }

    /// Adds a series of `(x, y)` points, e.g. loss against seconds of training.
    pub fn series_xy<X, Y>(mut self, name: &str, points: &[(X, Y)]) -> LineChart
    where
        X: Copy + Into<f64>,
        Y: Copy + Into<f64>,
    {
        let points = points.iter().map(|&(x, y)| (x.into(), y.into())).collect();
        self.series.push(Series { name: name.into(), points });
        self.steps_on_x = false;
        self
    }

    /// Draws y on a log scale (values at or below zero are then left out).
    pub fn log_y(mut self) -> LineChart {
        self.log_y = true;
        self
    }

    /// Whether `(x, y)` can be drawn on this chart's axes.
    fn drawable(&self, (x, y): (f64, f64)) -> bool {
        x.is_finite() && y.is_finite() && (!self.log_y || y > 0.0)
    }

    /// Each series as runs of drawable points, split where a point could not be drawn.
    fn segments(&self) -> Vec<Vec<Vec<(f64, f64)>>> {
        self.series
            .iter()
            .map(|s| {
                let mut runs = vec![Vec::new()];
                for &p in &s.points {
                    if self.drawable(p) {
                        runs.last_mut().expect("starts with one run").push(p);
                    } else if !runs.last().expect("starts with one run").is_empty() {
                        runs.push(Vec::new());
                    }
                }
                runs.retain(|r| !r.is_empty());
                runs
            })
            .collect()
    }

    /// `last: eager 0.0312 · compiled 0.0298`, and how many values were left out.
    fn subtitle(&self) -> String {
        if self.series.is_empty() {
            return "no series".into();
        }
        let last: Vec<String> = self
            .series
            .iter()
            .map(|s| match s.points.iter().rev().find(|&&p| self.drawable(p)) {
                Some(&(_, y)) => format!("{} {}", s.name, value(y)),
                None => format!("{} (no values)", s.name),
            })
            .collect();
        let left_out = self.series.iter().flat_map(|s| &s.points).filter(|&&p| !self.drawable(p)).count();
        let why = if self.log_y { "non-finite or not positive" } else { "non-finite" };
        let note = match left_out {
            0 => String::new(),
            1 => format!(" · 1 {why} value left out"),
            n => format!(" · {n} {why} values left out"),
        };
        format!("last: {}{note}", last.join(" · "))
    }
}

outputs!(LineChart);

impl Drawing for LineChart {
    fn name(&self) -> &'static str {
        "line"
    }

    fn natural_size(&self) -> (u32, u32) {
        (1000, 500)
    }

    fn draw_on<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
        let legend: Vec<(&str, RGBColor)> =
            self.series.iter().zip(SERIES.iter().cycle()).map(|(s, &c)| (s.name.as_str(), c)).collect();
        let body = look.header(root, &self.title, &self.subtitle(), &legend)?;
        let segments = self.segments();
        let all = || segments.iter().flatten().flatten();
        if all().next().is_none() {
            return look.nothing(&body, "no finite values to plot");
        }
        let bounds = |of: fn(&(f64, f64)) -> f64| {
            all().map(of).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
        };
        let (mut x_lo, x_hi) = bounds(|p| p.0);
        // Times and counts that start near zero are read from zero.
        if x_lo > 0.0 && x_lo < x_hi - x_lo {
            x_lo = 0.0;
        }
        let x = if x_hi > x_lo { x_lo..x_hi } else { x_lo - 0.5..x_hi + 0.5 };
        let (y_lo, y_hi) = bounds(|p| p.1);
        if self.log_y {
            // A margin of 5% of the span in log space (a factor of two for a flat line).
            let k = if y_hi > y_lo { (y_hi / y_lo).powf(0.05) } else { 2.0 };
            let (lo, hi) = (y_lo / k, y_hi * k);
            let y = (lo..hi).log_scale().with_key_points(log_ticks(lo, hi));
            self.plot(&body, look, x, y, &|v: &f64| value(*v), &segments)
        } else {
            // A margin of 5% of the span (or of the value, for a flat line), not below zero
            // for values that are not.
            let pad = if y_hi > y_lo { (y_hi - y_lo) * 0.05 } else { (y_lo.abs() * 0.1).max(0.5) };
            let lo = if y_lo >= 0.0 { (y_lo - pad).max(0.0) } else { y_lo - pad };
            let y = lo..y_hi + pad;
            let format = tick_format(y.end - y.start, Y_TICKS);
            self.plot(&body, look, x, y, &format, &segments)
        }
    }
}

/// Ticks for a log axis from `lo` to `hi` (both positive): 1, 2 and 5 times powers of ten,
/// or powers of ten alone over many decades, or every digit over less than a decade, or
/// five evenly spaced (in log space) between two digits.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let ticks = |digits: &[u32]| -> Vec<f64> {
        (first..=last)
            .flat_map(|k| digits.iter().map(move |&m| m as f64 * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let one_two_five = ticks(&[1, 2, 5]);
    if one_two_five.len() > Y_TICKS + 2 {
        let decades = ticks(&[1]);
        // Beyond Y_TICKS decades, every other (or every third, …) decade.
        let every = decades.len().div_ceil(Y_TICKS).max(1);
        decades.into_iter().step_by(every).collect()
    } else if one_two_five.len() < 3 {
        let digits = ticks(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        if digits.len() >= 2 {
            digits
        } else {
            (0..5).map(|i| lo * (hi / lo).powf(i as f64 / 4.0)).collect()
        }
    } else {
        one_two_five
    }
}

/// Labels on the y axis, at most.
const Y_TICKS: usize = 6;
/// Series with at most this many points also get a dot at each point.
const DOTS_UP_TO: usize = 60;

impl LineChart {
    /// Draws the axes (`y` linear or log) and the lines.
    fn plot<DB, Y>(
        &self,
        body: &Area<DB>,
        look: &Look,
        x: Range<f64>,
        y: Y,
        y_format: &dyn Fn(&f64) -> String,
        segments: &[Vec<Vec<(f64, f64)>>],
    ) -> DrawResult<(), DB>
    where
        DB: DrawingBackend,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let (w, _) = body.dim_in_pixel();
        let mut x_ticks = (w / look.px(110)).clamp(2, 12) as usize;
        if self.steps_on_x {
            // Steps are integers: no more labels than steps, so that none falls between two.
            x_ticks = x_ticks.min((x.end - x.start) as usize + 1).max(2);
        }
        let span_format = tick_format(x.end - x.start, x_ticks);
        let step_format = |v: &f64| format!("{v:.0}");
        let x_format: &dyn Fn(&f64) -> String = if self.steps_on_x { &step_format } else { &span_format };
        let mut chart = ChartBuilder::on(body)
            .margin_left(look.px(16))
            .margin_right(look.px(28))
            .margin_bottom(look.px(8))
            .x_label_area_size(look.px(56))
            .y_label_area_size(look.px(84))
            .build_cartesian_2d(x, y)?;
        look.mesh(
            chart
                .configure_mesh()
                .x_labels(x_ticks)
                .y_labels(Y_TICKS)
                .x_label_formatter(x_format)
                .y_label_formatter(y_format)
                .x_desc(self.x_label.as_str())
                .y_desc(self.y_label.as_str()),
        )
        .draw()?;
        let n = segments.len() as u32;
        for (i, (runs, &color)) in segments.iter().zip(SERIES.iter().cycle()).enumerate() {
            // Earlier series drawn wider, so that a later one lying on top (two runs with the
            // same loss) leaves the earlier visible along its edges.
            let wider = (n - 1 - i as u32).min(3);
            let stroke = look.px(2 + 2 * wider).max(2);
            let dot = look.px(3 + wider).max(2);
            let points = runs.iter().map(Vec::len).sum::<usize>();
            for run in runs {
                chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(stroke)))?;
                // A lone point draws no line: a dot shows it, as on every short series.
                if points <= DOTS_UP_TO || run.len() == 1 {
                    chart.draw_series(run.iter().map(|&p| Circle::new(p, dot, color.filled())))?;
                }
            }
        }
        Ok(())
    }
}
