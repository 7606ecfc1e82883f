//! The look every chart shares: colours, the embedded font, text sizes, and the header
//! (title and legend). Change a colour here and every chart follows.
//!
//! Colours carry meaning across charts: a cache miss *is* a compile, so misses are drawn in
//! the compile colour and hits in the execute colour. The pair is orange/blue, which stays
//! distinct for the common forms of colour blindness. Likewise a disk hit *is* a load from
//! the persistent cache, drawn in the load colour: a brown, kin to the compile orange (the
//! executable was not in memory) but darker, so it stays apart from orange, blue and purple
//! under protanopia and deuteranopia too.

use std::sync::Once;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

pub use plotters::style::RGBColor;

/// Compiling an executable (a cache miss).
pub const COMPILE: RGBColor = RGBColor(0xE6, 0x7E, 0x22);
/// Executing an op on the device.
pub const EXECUTE: RGBColor = RGBColor(0x1F, 0x77, 0xB4);
/// A transfer between host and device or between devices.
pub const TRANSFER: RGBColor = RGBColor(0x8E, 0x5E, 0xB8);
/// Loading an executable from the persistent compile cache instead of compiling it.
pub const LOAD: RGBColor = RGBColor(0x8C, 0x56, 0x4B);
/// A memory hit, in the cache chart: the op only executed.
pub const HIT: RGBColor = EXECUTE;
/// A miss, in the cache chart: the op compiled.
pub const MISS: RGBColor = COMPILE;
/// A disk hit, in the cache chart: the executable was loaded from the persistent cache.
pub const DISK_HIT: RGBColor = LOAD;
/// Wall time, in the comparison's totals: the window the dispatches fell in, no dispatch part.
pub const WALL: RGBColor = RGBColor(0xA0, 0xA0, 0xA0);
/// Line-chart series (loss curves), in order, repeating past the last: green and wine for
/// the common pair, then teal and olive. None is the orange, blue, purple or brown of
/// compile, execute, transfer and load, so a curve never reads as a dispatch part.
pub const SERIES: [RGBColor; 4] = [
    RGBColor(0x22, 0x88, 0x33),
    RGBColor(0xAA, 0x33, 0x77),
    RGBColor(0x44, 0xAA, 0x99),
    RGBColor(0x99, 0x99, 0x33),
];
/// Text and axes.
pub const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
/// Secondary text (subtitles, notes).
pub const MUTED: RGBColor = RGBColor(0x66, 0x66, 0x66);
/// The charts' grid lines.
pub const GRID: RGBColor = RGBColor(0xE4, 0xE4, 0xE4);
/// The charts' background.
pub const BACKGROUND: RGBColor = WHITE;

/// The family every chart uses; the bitmap backend draws it from DejaVu Sans embedded in
/// the binary (no system font library), SVG viewers use their own sans-serif.
pub const FONT: &str = "sans-serif";

/// Registers the embedded fonts with plotters, once per process.
pub(crate) fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Parsing fonts shipped in the binary only fails if the crate is broken; drawing
        // would then report the missing font as a chart error.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Sizes at one scale: charts drawn larger or smaller than their default size scale their
/// text and spacing with them, so a PNG for a slide and one for a terminal look alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    scale: f64,
}

pub(crate) type Area<DB> = DrawingArea<DB, Shift>;
pub(crate) type DrawResult<T, DB> = Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

impl Look {
    /// The look for drawing at `size` a chart whose default size is `default`.
    pub(crate) fn new(size: (u32, u32), default: (u32, u32)) -> Look {
        let (rw, rh) = (size.0 as f64 / default.0 as f64, size.1 as f64 / default.1 as f64);
        // Between the two ratios, so that a wide-but-short or tall-but-narrow canvas does
        // not shrink its text to the smaller one; text that must fit a width shrinks itself.
        let s = (rw * rh).sqrt().min(rw.min(rh) * 1.5);
        Look { scale: s.clamp(0.6, 3.0) }
    }
    /// `n` default-size pixels at this scale.
    pub(crate) fn px(&self, n: u32) -> u32 {
        (n as f64 * self.scale).round() as u32
    }
    fn font(&self, size: u32) -> FontDesc<'static> {
        (FONT, self.px(size) as f64).into_font()
    }
    /// Bold from the start: plotters' `FontDesc::style` keeps the regular face's metrics,
    /// which would measure bold text too narrow.
    fn bold(&self, size: u32) -> FontDesc<'static> {
        (FONT, self.px(size) as f64, FontStyle::Bold).into_font()
    }
    pub(crate) fn title(&self) -> TextStyle<'static> {
        self.bold(22).color(&INK)
    }
    pub(crate) fn subtitle(&self) -> TextStyle<'static> {
        self.font(15).color(&MUTED)
    }
    /// Axis descriptions ("time (ms)").
    pub(crate) fn axis(&self) -> TextStyle<'static> {
        self.font(16).color(&INK)
    }
    /// Tick labels and value labels.
    pub(crate) fn tick(&self) -> TextStyle<'static> {
        self.font(14).color(&INK)
    }
    /// The axes and grid every chart shares: tick and axis text, ink axes, a light grid.
    pub(crate) fn mesh<'m, 'a, 'b, X, Y, XT, YT, DB>(
        &self,
        mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
    ) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
    where
        X: Ranged<ValueType = XT> + ValueFormatter<XT>,
        Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
        DB: DrawingBackend,
    {
        mesh.label_style(self.tick())
            .axis_desc_style(self.axis())
            .axis_style(INK)
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
    }
    /// Op names written on bars.
    pub(crate) fn on_bar(&self) -> TextStyle<'static> {
        self.font(13).color(&WHITE)
    }
    pub(crate) fn legend(&self) -> TextStyle<'static> {
        self.font(15).color(&INK)
    }
    /// Headings of the parts of a chart drawn in several parts.
    pub(crate) fn heading(&self) -> TextStyle<'static> {
        self.bold(15).color(&INK)
    }
    /// Lines of figures under a heading.
    pub(crate) fn caption(&self) -> TextStyle<'static> {
        self.font(14).color(&INK)
    }

    /// Fills the background, writes the title, a muted subtitle and a legend (one swatch
    /// rectangle per entry) across the top, and returns the area below for the plot.
    pub(crate) fn header<DB: DrawingBackend>(
        &self,
        root: &Area<DB>,
        title: &str,
        subtitle: &str,
        legend: &[(&str, RGBColor)],
    ) -> DrawResult<Area<DB>, DB> {
        root.fill(&BACKGROUND)?;
        let (w, _) = root.dim_in_pixel();
        let room = w.saturating_sub(self.px(16)) as f64;
        let center = |s: TextStyle<'static>| s.pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(title.to_string(), (w as i32 / 2, self.px(12) as i32), center(self.title())))?;
        // The subtitle shrinks to fit narrow charts rather than run off both edges.
        let sub = fit(root, subtitle, self.subtitle(), room as u32)?;
        root.draw(&Text::new(subtitle.to_string(), (w as i32 / 2, self.px(42) as i32), center(sub)))?;
        // Legend entries side by side, centred: swatch, gap, label, spacing. Like the
        // subtitle, the whole legend shrinks to fit a narrow chart.
        let (sw, gap, space) = (self.px(14) as f64, self.px(6) as f64, self.px(26) as f64);
        let mut text_w = 0.0;
        for (label, _) in legend {
            text_w += root.estimate_text_size(label, &self.legend())?.0 as f64;
        }
        let n = legend.len() as f64;
        let full = text_w + n * (sw + gap) + space * (n - 1.0).max(0.0);
        let k = if full > room { room / full } else { 1.0 };
        let text = self.font(15).resize(self.px(15) as f64 * k).color(&INK);
        let (sw, gap, space) =
            ((sw * k).round() as i32, (gap * k).round() as i32, (space * k).round() as i32);
        let mut widths = Vec::with_capacity(legend.len());
        for (label, _) in legend {
            widths.push(root.estimate_text_size(label, &text)?.0 as i32);
        }
        let total: i32 =
            widths.iter().map(|t| sw + gap + t).sum::<i32>() + space * (legend.len() as i32 - 1).max(0);
        let (mut x, y) = (w as i32 / 2 - total / 2, self.px(76) as i32);
        for ((label, color), tw) in legend.iter().zip(widths) {
            root.draw(&Rectangle::new([(x, y - sw / 2), (x + sw, y + sw / 2)], color.filled()))?;
            let style = text.clone().pos(Pos::new(HPos::Left, VPos::Center));
            root.draw(&Text::new(label.to_string(), (x + sw + gap, y), style))?;
            x += sw + gap + tw + space;
        }
        Ok(root.split_vertically(self.px(if legend.is_empty() { 66 } else { 92 })).1)
    }

    /// Says in the plot area that there is nothing to plot.
    pub(crate) fn nothing<DB: DrawingBackend>(&self, area: &Area<DB>, what: &str) -> DrawResult<(), DB> {
        let (w, h) = area.dim_in_pixel();
        let style = self.axis().color(&MUTED).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new(what.to_string(), (w as i32 / 2, h as i32 / 2), style))
    }
}

/// Divisor and unit for a time axis spanning `span_ns`: µs, ms or s.
pub(crate) fn time_unit(span_ns: u64) -> (f64, &'static str) {
    if span_ns < 2_000_000 {
        (1e3, "µs")
    } else if span_ns < 20_000_000_000 {
        (1e6, "ms")
    } else {
        (1e9, "s")
    }
}

/// A tick formatter for an axis from 0 to `max` with about `ticks` ticks: as many
/// decimals as the tick step needs, no more.
pub(crate) fn tick_format(max: f64, ticks: usize) -> impl Fn(&f64) -> String {
    let step = max / ticks.max(1) as f64;
    let decimals = if step >= 1.0 || step <= 0.0 { 0 } else { (-step.log10().floor()) as usize };
    move |v: &f64| format!("{v:.decimals$}")
}

/// `style` shrunk, if need be, so that `text` fits in `room` pixels.
pub(crate) fn fit<DB: DrawingBackend>(
    area: &Area<DB>,
    text: &str,
    mut style: TextStyle<'static>,
    room: u32,
) -> DrawResult<TextStyle<'static>, DB> {
    let w = area.estimate_text_size(text, &style)?.0;
    if w > room {
        style.font = style.font.resize(style.font.get_size() * room as f64 / w as f64);
    }
    Ok(style)
}
