//! Charts of a [`Profile`], of several side by side, and of plain numbers (line charts),
//! each drawn once for both backends: SVG text for notebooks and PNG bytes for terminals and
//! files.

mod cache_hits;
mod compare;
mod compile_vs_execute;
mod line;
mod memory;
mod raster;
mod summary;
mod timeline;

pub use compare::{compare, Comparison};
pub use line::{line_chart, LineChart};
pub use memory::{memory_chart, MemoryChart};
pub use summary::RunSummary;

use plotters::prelude::*;

use crate::error::{Error, Result, MAX_SIDE, MIN_SIZE};
use crate::profile::Profile;
use crate::style::{fonts, Area, DrawResult, Look};

/// The outputs every view has (SVG, PNG, files, a PNG for evcxr), as inherent methods of
/// `$view` so that a notebook calls them without importing a trait.
macro_rules! outputs {
    ($view:ty) => {
        impl $view {
            /// The size [`Self::svg`] and [`Self::write_png`] use: fits the content.
            pub fn default_size(&self) -> (u32, u32) {
                $crate::chart::Drawing::natural_size(self)
            }

            /// An SVG document at the default size.
            pub fn svg(&self) -> $crate::Result<String> {
                let (w, h) = self.default_size();
                $crate::chart::svg(self, w, h)
            }

            /// An SVG document of `width` x `height` pixels.
            pub fn svg_sized(&self, width: u32, height: u32) -> $crate::Result<String> {
                $crate::chart::svg(self, width, height)
            }

            /// PNG bytes of `width` x `height` pixels (RGB, 8 bits).
            pub fn png(&self, width: u32, height: u32) -> $crate::Result<Vec<u8>> {
                $crate::chart::png(self, width, height)
            }

            /// Writes the SVG at the default size.
            pub fn write_svg(&self, path: impl AsRef<std::path::Path>) -> $crate::Result<()> {
                $crate::error::write(path.as_ref(), self.svg()?.as_bytes())
            }

            /// Writes a PNG at the default size.
            pub fn write_png(&self, path: impl AsRef<std::path::Path>) -> $crate::Result<()> {
                let (w, h) = self.default_size();
                $crate::error::write(path.as_ref(), &self.png(w, h)?)
            }

            /// A PNG at the default size that shows as an image when it ends an evcxr cell.
            pub fn as_png(&self) -> $crate::Result<$crate::PngImage> {
                let (w, h) = self.default_size();
                Ok($crate::PngImage(self.png(w, h)?))
            }
        }
    };
}
pub(crate) use outputs;

/// Which view of the profile a [`Chart`] draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChartKind {
    /// Every dispatch a bar on a time axis: compile, load from disk, execute and transfer in
    /// four colours.
    Timeline,
    /// Per op kind, compile, load-from-disk and execute time as stacked horizontal bars.
    CompileVsExecute,
    /// Cumulative cache hits, disk loads and misses over the run's op dispatches.
    CacheHits,
}

impl ChartKind {
    /// The view's name in titles and errors (`"timeline"`, …).
    pub fn name(self) -> &'static str {
        match self {
            ChartKind::Timeline => "timeline",
            ChartKind::CompileVsExecute => "compile vs execute",
            ChartKind::CacheHits => "cache hits",
        }
    }
}

/// A chart of a profile, ready to draw at any size.
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    profile: &'a Profile,
    kind: ChartKind,
    true_time: bool,
}

impl<'a> Chart<'a> {
    /// A `kind` chart of `profile` (the [`Profile`] methods make these).
    pub fn new(profile: &'a Profile, kind: ChartKind) -> Chart<'a> {
        Chart { profile, kind, true_time: false }
    }

    /// Keeps the true time axis: a timeline draws idle stretches at their length instead
    /// of cutting them to marked breaks (see [`Profile::idle_gaps`]). Other charts have no
    /// time axis.
    pub fn true_time(mut self) -> Chart<'a> {
        self.true_time = true;
        self
    }

    /// Which view it draws.
    pub fn kind(&self) -> ChartKind {
        self.kind
    }
}

impl Drawing for Chart<'_> {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// Fits the content: one row per lane or op kind.
    fn natural_size(&self) -> (u32, u32) {
        match self.kind {
            ChartKind::Timeline => {
                let cells = if self.profile.cells().len() > 1 { timeline::CELL_STRIP } else { 0 };
                (1200, (230 + cells + 56 * self.profile.lanes().0.len() as u32).min(900))
            }
            ChartKind::CompileVsExecute => {
                (1000, (210 + 30 * compile_vs_execute::kinds(self.profile) as u32).clamp(380, 900))
            }
            ChartKind::CacheHits => (1000, 500),
        }
    }

    fn draw_on<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> DrawResult<(), DB> {
        match self.kind {
            ChartKind::Timeline => timeline::draw(self.profile, self.true_time, root, look),
            ChartKind::CompileVsExecute => compile_vs_execute::draw(self.profile, root, look),
            ChartKind::CacheHits => cache_hits::draw(self.profile, root, look),
        }
    }
}

outputs!(Chart<'_>);

/// What every view drawn with plotters provides; rendering it to SVG or PNG is shared.
pub(crate) trait Drawing {
    /// Names the view in errors.
    fn name(&self) -> &'static str;
    /// The size the view is drawn at unless asked otherwise; text sizes scale from it.
    fn natural_size(&self) -> (u32, u32);
    fn draw_on<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> DrawResult<(), DB>;
}

/// Draws `view` at `size` on `root`, its text scaled from the natural size.
fn draw<D: Drawing, DB: DrawingBackend>(view: &D, root: &Area<DB>, size: (u32, u32)) -> Result<()> {
    fonts();
    let look = Look::new(size, view.natural_size());
    view.draw_on(root, &look)
        .and_then(|()| root.present())
        .map_err(|e| Error::Draw { chart: view.name(), message: e.to_string() })
}

/// `view` as an SVG document of `width` x `height` pixels.
pub(crate) fn svg<D: Drawing>(view: &D, width: u32, height: u32) -> Result<String> {
    check(width, height)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        draw(view, &root, (width, height))?;
    }
    // Lets a renderer that applies the SVG's own style (a web page, an inline viewer) shrink a
    // chart wider than its container, proportions kept by the viewBox; JupyterLab scrolls it.
    Ok(svg.replacen("<svg ", "<svg style=\"max-width: 100%; height: auto\" ", 1))
}

/// `view` as PNG bytes of `width` x `height` pixels (RGB, 8 bits).
pub(crate) fn png<D: Drawing>(view: &D, width: u32, height: u32) -> Result<Vec<u8>> {
    check(width, height)?;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = raster::Raster::new(&mut rgb, (width, height)).into_drawing_area();
        draw(view, &root, (width, height))?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(out)
}

/// PNG bytes that display as an image when they end an evcxr cell (through `eager-cell`).
pub struct PngImage(pub Vec<u8>);

impl std::fmt::Debug for PngImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PngImage({} bytes)", self.0.len())
    }
}

fn check(width: u32, height: u32) -> Result<()> {
    let ok = (MIN_SIZE.0..=MAX_SIDE).contains(&width) && (MIN_SIZE.1..=MAX_SIDE).contains(&height);
    if ok {
        Ok(())
    } else {
        Err(Error::Size { width, height })
    }
}

impl Profile {
    /// Every dispatch as a bar on a time axis (compile, load from disk, execute, transfer in
    /// four colours), idle stretches cut to marked breaks ([`Chart::true_time`] keeps them)
    /// and, for a session's events, the cells they came from named.
    pub fn timeline(&self) -> Chart<'_> {
        Chart::new(self, ChartKind::Timeline)
    }
    /// Compile (and load-from-disk) vs execute time per op kind, as stacked bars.
    pub fn compile_vs_execute(&self) -> Chart<'_> {
        Chart::new(self, ChartKind::CompileVsExecute)
    }
    /// Cache hits, disk loads and misses over the run.
    pub fn cache_hits(&self) -> Chart<'_> {
        Chart::new(self, ChartKind::CacheHits)
    }
    /// The three charts, in the order above.
    pub fn charts(&self) -> [Chart<'_>; 3] {
        [self.timeline(), self.compile_vs_execute(), self.cache_hits()]
    }
}
