//! Displays a cell updates in place while it runs (Jupyter's display handles): a
//! [`DisplayHandle`], and on it a [`Progress`] bar and a [`LiveChart`]; and the compile
//! heartbeat, a line that shows while a compile runs past a second.
//!
//! A cell prints one line per display or update, [`DISPLAY_MARKER`] and a JSON object
//! ([`DisplayLine`]); the kernel turns it into `display_data` with a `display_id`, or
//! `update_display_data`, at once (not at the cell's end); the terminal REPL redraws the
//! text form on one line.

use std::io::Write;
use std::time::{Duration, Instant};

use eager::shared::Shared;

/// Starts a line a cell prints to show (or update) a display: a [`DisplayLine`] as JSON follows.
pub const DISPLAY_MARKER: &str = "EAGER_DISPLAY ";

/// One display or update: the handle's id, whether it updates an earlier display, and the
/// value per MIME type. An update whose data is empty removes the display's content.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DisplayLine {
    /// The display's id (the same for the display and all its updates).
    pub id: String,
    /// Whether this updates an earlier display rather than showing a new one.
    pub update: bool,
    /// The value per MIME type (`("text/plain", …)`, `("image/svg+xml", …)`).
    pub data: Vec<(String, String)>,
}

impl DisplayLine {
    /// The line a cell prints for it.
    pub fn to_line(&self) -> String {
        format!("{DISPLAY_MARKER}{}", serde_json::to_string(self).expect("strings serialize"))
    }

    /// The display a line of a cell's output stands for, if it is one.
    pub fn parse(line: &str) -> Option<DisplayLine> {
        serde_json::from_str(line.strip_prefix(DISPLAY_MARKER)?).ok()
    }

    /// The value for `mime`, if the display has one.
    pub fn get(&self, mime: &str) -> Option<&str> {
        self.data.iter().find(|(m, _)| m == mime).map(|(_, v)| v.as_str())
    }
}

/// A display that can be updated in place (IPython's `display(..., display_id=True)`): shown
/// where the cell's output is, then redrawn by [`DisplayHandle::update`], also from a later
/// cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisplayHandle {
    id: String,
}

/// Display ids given in this session (shared by every cell's copy of this crate).
static NEXT_ID: Shared<std::sync::atomic::AtomicU64> =
    Shared::new("eager_cell::live::next_id", || std::sync::atomic::AtomicU64::new(1));

impl DisplayHandle {
    /// Shows `bundle` (value per MIME type: `text/plain`, `text/html`, `image/svg+xml`, …).
    pub fn show(bundle: &[(&str, &str)]) -> DisplayHandle {
        let n = NEXT_ID.get().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let handle = DisplayHandle { id: format!("eager-{}-{n}", std::process::id()) };
        handle.emit(false, bundle);
        handle
    }

    /// Shows any value as it shows when it ends a cell (a tensor's values, a chart's SVG, a
    /// profile's table; else its `Debug` text).
    pub fn show_value<T: std::fmt::Debug + ?Sized>(value: &T) -> DisplayHandle {
        let bundle = crate::rich::bundle_of(value);
        DisplayHandle::show(&pairs(&bundle))
    }

    /// Redraws the display with `bundle`.
    pub fn update(&self, bundle: &[(&str, &str)]) {
        self.emit(true, bundle);
    }

    /// Redraws the display with `value` (see [`DisplayHandle::show_value`]).
    pub fn update_value<T: std::fmt::Debug + ?Sized>(&self, value: &T) {
        self.update(&pairs(&crate::rich::bundle_of(value)));
    }

    /// Empties the display (a finished heartbeat).
    pub fn clear(&self) {
        self.emit(true, &[]);
    }

    /// Jupyter's `display_id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn emit(&self, update: bool, bundle: &[(&str, &str)]) {
        let data = bundle.iter().map(|(m, v)| (m.to_string(), v.to_string())).collect();
        let line = DisplayLine { id: self.id.clone(), update, data }.to_line();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn pairs(bundle: &[(String, String)]) -> Vec<(&str, &str)> {
    bundle.iter().map(|(m, v)| (m.as_str(), v.as_str())).collect()
}

/// How often a progress bar redraws at most (and always at its end).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// A progress bar (tqdm's): steps done of the total, the rate, the time left and a note (the
/// loss), as a bar in a notebook and a line in the terminal, redrawn in place at most ten
/// times a second.
///
/// ```no_run
/// let mut bar = eager_cell::Progress::new("training", 500);
/// for step in 0..500 {
///     // … one step …
///     bar.set_note(&format!("loss {:.3}", 0.5));
///     bar.inc();
/// }
/// bar.finish();
/// ```
pub struct Progress {
    handle: DisplayHandle,
    label: String,
    total: usize,
    done: usize,
    note: String,
    start: Instant,
    drawn: Instant,
    /// Changed since it was last drawn: drawn when it drops (a loop left early by `?`).
    dirty: bool,
}

impl Progress {
    /// A bar for `total` steps labelled `label`, shown at once at 0.
    pub fn new(label: &str, total: usize) -> Progress {
        let now = Instant::now();
        let mut p = Progress {
            handle: DisplayHandle { id: String::new() },
            label: label.into(),
            total,
            done: 0,
            note: String::new(),
            start: now,
            drawn: now,
            dirty: false,
        };
        let (text, html) = (p.text(0.0), p.html(0.0));
        p.handle = DisplayHandle::show(&[("text/plain", &text), ("text/html", &html)]);
        p
    }

    /// One step more.
    pub fn inc(&mut self) {
        self.set(self.done + 1);
    }

    /// `done` steps of the total.
    pub fn set(&mut self, done: usize) {
        self.done = done.min(self.total);
        self.dirty = true;
        if self.drawn.elapsed() >= PROGRESS_EVERY || self.done == self.total {
            self.draw();
        }
    }

    /// Text after the figures (`loss 0.231`), drawn with the next redraw.
    pub fn set_note(&mut self, note: &str) {
        self.note = note.into();
        self.dirty = true;
    }

    /// Draws the last state (whatever the rate limit) and keeps it; dropping the bar does
    /// the same.
    pub fn finish(self) {}

    /// The id of the display the bar draws in.
    pub fn display_id(&self) -> &str {
        self.handle.id()
    }

    fn draw(&mut self) {
        self.drawn = Instant::now();
        self.dirty = false;
        // One reading of the clock for both forms.
        let secs = self.start.elapsed().as_secs_f64();
        let (text, html) = (self.text(secs), self.html(secs));
        self.handle.update(&[("text/plain", &text), ("text/html", &html)]);
    }

    fn fraction(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.done as f64 / self.total as f64
        }
    }

    /// `420/1000 [00:03<00:04, 128.3 it/s]`, `secs` after the start.
    fn figures(&self, secs: f64) -> String {
        let rate = if secs > 0.0 { self.done as f64 / secs } else { 0.0 };
        let left = if rate > 0.0 { (self.total - self.done) as f64 / rate } else { f64::NAN };
        format!("{}/{} [{}<{}, {rate:.1} it/s]", self.done, self.total, clock(secs), clock(left))
    }

    /// `training  42%|██████▍        | 420/1000 [00:03<00:04, 128.3 it/s] loss 0.231`, `secs`
    /// after the start.
    fn text(&self, secs: f64) -> String {
        const WIDTH: usize = 24;
        let eighths = (self.fraction() * (WIDTH * 8) as f64).round() as usize;
        let mut bar = "█".repeat(eighths / 8);
        if !eighths.is_multiple_of(8) {
            bar.push([' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'][eighths % 8]);
        }
        let pad = WIDTH - bar.chars().count();
        let note = if self.note.is_empty() { String::new() } else { format!(" {}", self.note) };
        let percent = (self.fraction() * 100.0).floor();
        format!("{} {percent:>3}%|{bar}{}| {}{note}", self.label, " ".repeat(pad), self.figures(secs))
    }

    fn html(&self, secs: f64) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        format!(
            "<div class=\"eager-progress\" style=\"font-family:monospace\">{} \
             <progress value=\"{}\" max=\"{}\" style=\"width:24em;vertical-align:middle\"></progress> \
             {:.0}% {} {}</div>",
            esc(&self.label),
            self.done,
            self.total.max(1),
            self.fraction() * 100.0,
            esc(&self.figures(secs)),
            esc(&self.note)
        )
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.dirty {
            self.draw();
        }
    }
}

/// `mm:ss` (`h:mm:ss` past an hour), `?` when unknown.
fn clock(secs: f64) -> String {
    if !secs.is_finite() {
        return "?".into();
    }
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

/// A line chart that redraws in place every `every` points: the loss of a training loop as
/// it runs. In a notebook the chart (SVG), in the terminal a line with the last value, the
/// lowest and a sparkline.
///
/// ```no_run
/// let mut chart = eager_cell::LiveChart::new("Training loss", "step", "loss").every(25);
/// for step in 0..500 {
///     let loss = 1.0 / (1.0 + step as f64);
///     chart.push(loss);
/// }
/// chart.finish();
/// ```
pub struct LiveChart {
    handle: Option<DisplayHandle>,
    title: String,
    x_label: String,
    y_label: String,
    series: Vec<(String, Vec<f64>)>,
    every: usize,
    pushed: usize,
    /// Points pushed when it was last drawn: the rest are drawn when it drops.
    drawn: usize,
    log_y: bool,
}

impl LiveChart {
    /// A chart shown at its first redraw (after `every` points).
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LiveChart {
        LiveChart {
            handle: None,
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            every: 10,
            pushed: 0,
            drawn: 0,
            log_y: false,
        }
    }

    /// Redraws every `n` points (10 unless set).
    pub fn every(mut self, n: usize) -> LiveChart {
        self.every = n.max(1);
        self
    }

    /// y on a log scale.
    pub fn log_y(mut self) -> LiveChart {
        self.log_y = true;
        self
    }

    /// The next value of the series named after the y axis.
    pub fn push(&mut self, y: impl Into<f64>) {
        let name = self.y_label.clone();
        self.push_to(&name, y);
    }

    /// The next value of series `name` (added at its first value).
    pub fn push_to(&mut self, name: &str, y: impl Into<f64>) {
        match self.series.iter_mut().find(|(n, _)| n == name) {
            Some((_, ys)) => ys.push(y.into()),
            None => self.series.push((name.into(), vec![y.into()])),
        }
        self.pushed += 1;
        if self.pushed.is_multiple_of(self.every) {
            self.draw();
        }
    }

    /// Draws every point (whatever `every`) and keeps the chart; dropping it does the same.
    pub fn finish(self) {}

    /// The chart as it stands, to draw elsewhere (a PNG file).
    pub fn chart(&self) -> viz::LineChart {
        let chart = self
            .series
            .iter()
            .fold(viz::LineChart::new(&self.title, &self.x_label, &self.y_label), |c, (n, ys)| {
                c.series(n, ys)
            });
        if self.log_y {
            chart.log_y()
        } else {
            chart
        }
    }

    /// The id of the display the chart draws in, once it has been shown (at its first redraw).
    pub fn display_id(&self) -> Option<&str> {
        self.handle.as_ref().map(|h| h.id())
    }

    /// `Training loss: loss 0.231 at step 420 (lowest 0.210) ▇▆▅▃▂▂▁`.
    fn text(&self) -> String {
        let parts: Vec<String> = self
            .series
            .iter()
            .map(|(name, ys)| {
                let last = ys.last().copied().unwrap_or(f64::NAN);
                let low = ys.iter().copied().filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min);
                format!(
                    "{name} {last:.4} at {} {} (lowest {low:.4}) {}",
                    self.x_label,
                    ys.len() - 1,
                    sparkline(ys)
                )
            })
            .collect();
        format!("{}: {}", self.title, parts.join(" · "))
    }

    fn draw(&mut self) {
        self.drawn = self.pushed;
        let text = self.text();
        let mut owned = vec![("text/plain".to_string(), text)];
        owned.extend(crate::rich::chart_bundle(self.chart().svg().unwrap_or_default()));
        let bundle: Vec<(&str, &str)> = owned.iter().map(|(m, v)| (m.as_str(), v.as_str())).collect();
        match &self.handle {
            Some(h) => h.update(&bundle),
            None => self.handle = Some(DisplayHandle::show(&bundle)),
        }
    }
}

impl Drop for LiveChart {
    fn drop(&mut self) {
        if self.pushed > self.drawn {
            self.draw();
        }
    }
}

/// The last 24 values (finite ones) as block characters from low to high.
fn sparkline(ys: &[f64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail: Vec<f64> = ys.iter().rev().take(24).rev().copied().filter(|v| v.is_finite()).collect();
    let (lo, hi) = tail.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
    tail.iter()
        .map(|&v| if hi > lo { BLOCKS[((v - lo) / (hi - lo) * 7.0).round() as usize] } else { BLOCKS[3] })
        .collect()
}

/// How long a compile runs before the heartbeat shows it (`EAGER_HEARTBEAT_MS`, default 1000).
fn heartbeat_after() -> Duration {
    let ms = std::env::var("EAGER_HEARTBEAT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    Duration::from_millis(ms)
}

/// The heartbeats shown: (compile id, its display).
static HEARTBEATS: Shared<std::sync::Mutex<Vec<(u64, DisplayHandle)>>> =
    Shared::new("eager_cell::live::heartbeats", Default::default);

/// In the cell process (started by [`crate::attach`]): every 100 ms, a compile running past
/// [`heartbeat_after`] gets a display with a spinner, the op and the time so far, updated as
/// it runs and emptied when it ends (`compile_ended`).
pub(crate) fn start_heartbeat() {
    eager::runtime::on_compile_end(compile_ended);
    let after = heartbeat_after();
    let _ = std::thread::Builder::new().name("eager-heartbeat".into()).spawn(move || {
        for tick in 0.. {
            std::thread::sleep(Duration::from_millis(100));
            beat(after, tick);
        }
    });
}

/// Empties the heartbeat of compile `id` as it ends (on the thread that compiled, so the line
/// goes before anything the cell prints after it).
fn compile_ended(id: u64) {
    let mut shown = eager::shared::lock(HEARTBEATS.get());
    if let Some(i) = shown.iter().position(|(c, _)| *c == id) {
        shown.remove(i).1.clear();
    }
}

fn beat(after: Duration, tick: usize) {
    const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let mut shown = eager::shared::lock(HEARTBEATS.get());
    // (Ended compiles are emptied by `compile_ended`.)
    let running = eager::runtime::running_compiles();
    for r in running.iter().filter(|r| r.elapsed >= after) {
        let what: String = if r.what.chars().count() > 90 {
            r.what.chars().take(89).chain(std::iter::once('…')).collect()
        } else {
            r.what.clone()
        };
        let text =
            format!("{} compiling {what} … {:.1} s", SPINNER[tick % SPINNER.len()], r.elapsed.as_secs_f64());
        match shown.iter().find(|(id, _)| *id == r.id) {
            Some((_, h)) => h.update(&[("text/plain", &text)]),
            None => shown.push((r.id, DisplayHandle::show(&[("text/plain", &text)]))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_display_line_round_trips() {
        let line = DisplayLine {
            id: "eager-1-2".into(),
            update: true,
            data: vec![("text/plain".into(), "a\nb".into())],
        };
        let text = line.to_line();
        assert!(!text.contains('\n'), "one line: {text}");
        assert_eq!(DisplayLine::parse(&text), Some(line));
        assert_eq!(DisplayLine::parse("plain output"), None);
    }

    #[test]
    fn the_progress_text_reads_like_tqdm() {
        let mut p = Progress {
            handle: DisplayHandle { id: "x".into() },
            label: "training".into(),
            total: 1000,
            done: 420,
            note: "loss 0.231".into(),
            start: Instant::now(),
            drawn: Instant::now(),
            dirty: false,
        };
        // 3 s after the start (given, not read from the clock): 140 it/s, 580 steps left = 4.1 s.
        let text = p.text(3.0);
        let want = format!(
            "training  42%|██████████▏{}| 420/1000 [00:03<00:04, 140.0 it/s] loss 0.231",
            " ".repeat(13)
        );
        assert_eq!(text, want);
        assert!(p.text(1.5).contains("| 420/1000 [00:02<00:02, 280.0 it/s]"), "{}", p.text(1.5));
        p.done = 1000;
        let text = p.text(3.0);
        assert!(
            text.contains("100%|████████████████████████| 1000/1000 [00:03<00:00, 333.3 it/s]"),
            "{text}"
        );
        let html = p.html(3.0);
        assert!(
            html.contains("<progress value=\"1000\" max=\"1000\"") && html.contains("333.3 it/s"),
            "{html}"
        );
    }

    #[test]
    fn sparklines_go_from_low_to_high() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), "▁▂▃▄▅▆▇█");
        assert_eq!(sparkline(&[2.0, 2.0]), "▄▄");
        assert_eq!(clock(65.0), "01:05");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
