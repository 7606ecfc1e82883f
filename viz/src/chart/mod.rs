//! Charts of a [`Profile`], each drawn once for both backends: SVG text for notebooks and
//! PNG bytes for terminals and files.

mod cache_hits;
mod compile_vs_execute;
mod raster;
mod timeline;

use std::path::Path;

use plotters::prelude::*;

use crate::error::{write, Error, Result};
use crate::profile::Profile;
use crate::style::{fonts, Area, DrawResult, Look};

/// Smallest chart drawn: below it labels cannot be kept apart.
pub(crate) const MIN_SIZE: (u32, u32) = (320, 200);
/// Largest side, in pixels.
pub(crate) const MAX_SIDE: u32 = 16_384;

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
}

impl<'a> Chart<'a> {
    pub fn new(profile: &'a Profile, kind: ChartKind) -> Chart<'a> {
        Chart { profile, kind }
    }

    pub fn kind(&self) -> ChartKind {
        self.kind
    }

    /// The size [`Chart::svg`] and [`Chart::write_png`] use: fits the content (one row per
    /// lane or op kind).
    pub fn default_size(&self) -> (u32, u32) {
        match self.kind {
            ChartKind::Timeline => (1200, (230 + 56 * self.profile.lanes().0.len() as u32).min(900)),
            ChartKind::CompileVsExecute => {
                (1000, (210 + 30 * compile_vs_execute::kinds(self.profile) as u32).clamp(380, 900))
            }
            ChartKind::CacheHits => (1000, 500),
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &Area<DB>, size: (u32, u32)) -> DrawResult<(), DB> {
        fonts();
        let look = Look::new(size, self.default_size());
        match self.kind {
            ChartKind::Timeline => timeline::draw(self.profile, root, &look),
            ChartKind::CompileVsExecute => compile_vs_execute::draw(self.profile, root, &look),
            ChartKind::CacheHits => cache_hits::draw(self.profile, root, &look),
        }?;
        root.present()
    }

    fn error<E: std::error::Error + Send + Sync>(&self, e: DrawingAreaErrorKind<E>) -> Error {
        Error::Draw { chart: self.kind.name(), message: e.to_string() }
    }

    /// The chart as an SVG document at its default size.
    pub fn svg(&self) -> Result<String> {
        let (w, h) = self.default_size();
        self.svg_sized(w, h)
    }

    /// The chart as an SVG document of `width` x `height` pixels.
    pub fn svg_sized(&self, width: u32, height: u32) -> Result<String> {
        check(width, height)?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
            self.draw(&root, (width, height)).map_err(|e| self.error(e))?;
        }
        Ok(svg)
    }

    /// The chart as PNG bytes of `width` x `height` pixels (RGB, 8 bits).
    pub fn png(&self, width: u32, height: u32) -> Result<Vec<u8>> {
        check(width, height)?;
        let mut rgb = vec![0u8; width as usize * height as usize * 3];
        {
            let root = raster::Raster::new(&mut rgb, (width, height)).into_drawing_area();
            self.draw(&root, (width, height)).map_err(|e| self.error(e))?;
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

    /// Writes the SVG at its default size.
    pub fn write_svg(&self, path: impl AsRef<Path>) -> Result<()> {
        write(path.as_ref(), self.svg()?.as_bytes())
    }

    /// Writes a PNG at the default size.
    pub fn write_png(&self, path: impl AsRef<Path>) -> Result<()> {
        let (w, h) = self.default_size();
        write(path.as_ref(), &self.png(w, h)?)
    }
}

/// Rich display in evcxr (the REPL and the Jupyter kernel): a chart ending a cell shows as
/// SVG; [`Chart::as_png`] shows it as a PNG instead.
impl Chart<'_> {
    pub fn evcxr_display(&self) {
        match self.svg() {
            Ok(svg) => println!("EVCXR_BEGIN_CONTENT image/svg+xml\n{svg}\nEVCXR_END_CONTENT"),
            Err(e) => eprintln!("{e}"),
        }
    }

    /// The chart at its default size as a PNG, for display.
    pub fn as_png(&self) -> Result<PngImage> {
        let (w, h) = self.default_size();
        Ok(PngImage(self.png(w, h)?))
    }
}

/// PNG bytes that display as an image when they end an evcxr cell.
pub struct PngImage(pub Vec<u8>);

impl std::fmt::Debug for PngImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PngImage({} bytes)", self.0.len())
    }
}

impl PngImage {
    pub fn evcxr_display(&self) {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.0);
        println!("EVCXR_BEGIN_CONTENT image/png\n{b64}\nEVCXR_END_CONTENT");
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
    /// four colours).
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
