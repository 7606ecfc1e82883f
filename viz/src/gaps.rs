//! Idle stretches of a profile (no dispatch running on any lane) and the time axis that
//! cuts them: a session's pauses between cells would otherwise squeeze its work into
//! slivers. A stretch is cut when it lasts over [`IDLE_GAP_MIN`] and over a tenth of the
//! time dispatches ran ([`Profile::busy_ns`]); host work between dispatches shorter than
//! that stays on the axis at its length.

use std::time::Duration;

use crate::profile::Profile;

/// Idle stretches shorter than this are never cut.
pub const IDLE_GAP_MIN: Duration = Duration::from_millis(50);

/// Idle stretches are cut only past this share of the time dispatches ran, so that the
/// host's time between the dispatches of a loop keeps its width.
pub const IDLE_GAP_SHARE: f64 = 0.1;

/// A stretch of the profile's window, on the profiler's clock, in which no dispatch ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleGap {
    /// Where the stretch starts (the last dispatch before it ended here).
    pub from_ns: u64,
    /// Where it ends (the next dispatch started here).
    pub to_ns: u64,
}

impl IdleGap {
    /// The stretch's length.
    pub fn len_ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }
    /// What a timeline writes on the break: `⋯ 1.20 s idle`.
    pub fn label(&self) -> String {
        format!("⋯ {} idle", crate::units::duration(self.len_ns()))
    }
}

impl Profile {
    /// The stretches of the window in which dispatches ran, merged where they overlap
    /// (ordered, disjoint).
    pub(crate) fn busy_spans(&self) -> Vec<(u64, u64)> {
        merge(self.events().iter().map(|e| (e.start_ns, e.end_ns())))
    }

    /// Wall time during which at least one dispatch ran: what the dispatches' times add up
    /// to with their overlaps (threads, a mesh's devices, asynchronous execution) counted once.
    pub fn busy_ns(&self) -> u64 {
        self.busy_spans().iter().map(|(a, b)| b - a).sum()
    }

    /// The idle stretches a timeline cuts: no dispatch running, longer than
    /// [`IDLE_GAP_MIN`] and than [`IDLE_GAP_SHARE`] of [`Profile::busy_ns`]. The window's
    /// edges count: a capture started long before its first dispatch begins with one.
    pub fn idle_gaps(&self) -> Vec<IdleGap> {
        let spans = self.busy_spans();
        let busy: u64 = spans.iter().map(|(a, b)| b - a).sum();
        let min = (IDLE_GAP_MIN.as_nanos() as u64).max((busy as f64 * IDLE_GAP_SHARE) as u64);
        let mut gaps = Vec::new();
        let mut t = self.start_ns();
        for &(a, b) in spans.iter().chain(std::iter::once(&(self.end_ns(), self.end_ns()))) {
            if a > t && a - t > min {
                gaps.push(IdleGap { from_ns: t, to_ns: a });
            }
            t = t.max(b);
        }
        gaps
    }
}

/// `spans` merged where they overlap or touch, ordered.
pub(crate) fn merge(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = spans.into_iter().collect();
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// A cut idle stretch as drawn: from `at` on the axis, `width` wide.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Break {
    pub at: f64,
    pub width: f64,
    pub gap: IdleGap,
}

/// Where times fall on a chart's x axis (in nanoseconds of axis): the profiler's clock
/// less the start, with each cut stretch shrunk to a break of fixed width. Every stretch
/// kept keeps its length, so bars keep the ratio of their durations.
#[derive(Debug, Clone)]
pub(crate) struct TimeAxis {
    /// (time, axis position) pairs, both increasing; straight lines between them, slope 1
    /// before the first and after the last.
    knots: Vec<(u64, f64)>,
    pub breaks: Vec<Break>,
    pub len: f64,
}

impl TimeAxis {
    /// The true time axis from `start_ns` to `end_ns`.
    pub fn linear(start_ns: u64, end_ns: u64) -> TimeAxis {
        TimeAxis::cut(start_ns, end_ns, &[], 0.0)
    }

    /// The axis from `start_ns` to `end_ns` with each of `gaps` (ordered, inside the window)
    /// cut to a break `break_ns` wide.
    pub fn cut(start_ns: u64, end_ns: u64, gaps: &[IdleGap], break_ns: f64) -> TimeAxis {
        let mut knots = vec![(start_ns, 0.0)];
        let mut breaks = Vec::with_capacity(gaps.len());
        let (mut t, mut pos) = (start_ns, 0.0);
        for &gap in gaps {
            pos += gap.from_ns.saturating_sub(t) as f64;
            knots.push((gap.from_ns, pos));
            breaks.push(Break { at: pos, width: break_ns, gap });
            pos += break_ns;
            knots.push((gap.to_ns, pos));
            t = gap.to_ns;
        }
        pos += end_ns.saturating_sub(t) as f64;
        knots.push((end_ns.max(t), pos));
        TimeAxis { knots, breaks, len: pos }
    }

    /// The axis position of `ns` (profiler clock); before the start it is negative.
    pub fn map(&self, ns: u64) -> f64 {
        let (first, last) = (self.knots[0], self.knots[self.knots.len() - 1]);
        if ns <= first.0 {
            return first.1 - (first.0 - ns) as f64;
        }
        if ns >= last.0 {
            return last.1 + (ns - last.0) as f64;
        }
        let i = self.knots.partition_point(|k| k.0 <= ns) - 1;
        let (k0, k1) = (self.knots[i], self.knots[i + 1]);
        if k1.0 == k0.0 {
            return k0.1;
        }
        k0.1 + (ns - k0.0) as f64 / (k1.0 - k0.0) as f64 * (k1.1 - k0.1)
    }

    /// Stretches kept at their length: (from, to) on the profiler's clock.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let cut: Vec<(u64, u64)> = self.breaks.iter().map(|b| (b.gap.from_ns, b.gap.to_ns)).collect();
        let (start, end) = (self.knots[0].0, self.knots[self.knots.len() - 1].0);
        let mut from = start;
        let mut out = Vec::with_capacity(cut.len() + 1);
        for (a, b) in cut {
            if a > from {
                out.push((from, a));
            }
            from = b;
        }
        if end > from {
            out.push((from, end));
        }
        out.into_iter()
    }

    /// Tick marks for an axis `plot_px` wide shown in units of `per_unit` ns: round times
    /// since `origin_ns` about every `every_px`, in each stretch kept, none closer than
    /// `min_px` to the last. Returns (axis position / `per_unit`, label).
    pub fn ticks(
        &self,
        origin_ns: u64,
        per_unit: f64,
        plot_px: f64,
        every_px: f64,
        min_px: f64,
    ) -> Vec<(f64, String)> {
        let units_per_px = self.len.max(1.0) / per_unit / plot_px.max(1.0);
        let step = nice_step(every_px * units_per_px);
        let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
        let mut out: Vec<(f64, String)> = Vec::new();
        let spaced = |out: &Vec<(f64, String)>, x: f64| {
            out.last().is_none_or(|(last, _)| (x - last) / units_per_px >= min_px)
        };
        for (from, to) in self.pieces() {
            let (a, b) = ((from - origin_ns) as f64 / per_unit, (to - origin_ns) as f64 / per_unit);
            let before = out.len();
            let mut k = (a / step - 1e-9).ceil();
            while k * step <= b + 1e-9 {
                // `+ 0.0`: no `-0` label for the tick at the start.
                let v = k * step + 0.0;
                let ns = origin_ns + (v * per_unit).round().max(0.0) as u64;
                let x = self.map(ns) / per_unit;
                if spaced(&out, x) {
                    out.push((x, format!("{v:.decimals$}")));
                }
                k += 1.0;
            }
            // A stretch too short for a round time still says when it starts.
            let x = self.map(from) / per_unit;
            if out.len() == before && spaced(&out, x) {
                out.push((x, format!("{a:.decimals$}")));
            }
        }
        out
    }
}

/// 1, 2 or 5 times a power of ten, the first at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_axis_keeps_lengths_and_shrinks_gaps() {
        let gap = IdleGap { from_ns: 100, to_ns: 1_100 };
        let axis = TimeAxis::cut(0, 1_200, &[gap], 10.0);
        assert_eq!(axis.len, 210.0);
        assert_eq!(axis.map(50), 50.0);
        assert_eq!(axis.map(100), 100.0);
        assert_eq!(axis.map(600), 105.0);
        assert_eq!(axis.map(1_150), 160.0);
        assert_eq!(axis.map(1_300), 310.0);
        assert_eq!(axis.pieces().collect::<Vec<_>>(), [(0, 100), (1_100, 1_200)]);
        assert_eq!(TimeAxis::linear(10, 20).map(5), -5.0);
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(13.0), 20.0);
        assert_eq!(nice_step(30.0), 50.0);
        assert_eq!(nice_step(51.0), 100.0);
        assert_eq!(nice_step(100.0), 100.0);
    }
}
