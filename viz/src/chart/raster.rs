//! The PNG backend: plotters' bitmap backend with its own text drawing. plotters 0.3.7's
//! ab_glyph text path drops each glyph's left bearing (`di spatches`, `50. 8`), so text is
//! laid out here with ab_glyph directly; everything else goes to the bitmap backend.

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, FontStyle,
};

pub(crate) struct Raster<'a> {
    inner: BitMapBackend<'a>,
    regular: FontRef<'static>,
    bold: FontRef<'static>,
}

type Result<T> =
    std::result::Result<T, DrawingErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>;

impl<'a> Raster<'a> {
    pub(crate) fn new(rgb: &'a mut [u8], size: (u32, u32)) -> Raster<'a> {
        let font = |bytes| FontRef::try_from_slice(bytes).expect("the embedded DejaVu font parses");
        Raster {
            inner: BitMapBackend::with_buffer(rgb, size),
            regular: font(dejavu::sans::regular()),
            bold: font(dejavu::sans::bold()),
        }
    }
}

impl DrawingBackend for Raster<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<()> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<()> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<()> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(&mut self, from: BackendCoord, to: BackendCoord, style: &S) -> Result<()> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<()> {
        self.inner.draw_rect(ul, br, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<()> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<()> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<()> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, (w, h): (u32, u32), src: &[u8]) -> Result<()> {
        self.inner.blit_bitmap(pos, (w, h), src)
    }

    /// Anchors the text box as plotters does (its size from the same estimate the layout
    /// used), then draws each glyph at its pen position plus its own bearing.
    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, style: &T, pos: BackendCoord) -> Result<()> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let ((x0, y0), (x1, y1)) =
            style.layout_box(text).map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (x1 - x0, y1 - y0);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Center => -width / 2,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let font = if matches!(style.style(), FontStyle::Bold) { &self.bold } else { &self.regular };
        let scale = PxScale::from(style.size() as f32);
        let scaled = font.as_scaled(scale);
        // Capitals and digits centred in the box: the baseline sits half a cap height
        // below the box's middle.
        let cap =
            font.outline_glyph(font.glyph_id('H').with_scale(scale)).map_or(0.0, |g| -g.px_bounds().min.y);
        let baseline = (height as f32 + cap) / 2.0;
        let trans = style.transform();
        let mut pen = 0.0f32;
        let mut prev = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                pen += scaled.kern(p, id);
            }
            prev = Some(id);
            if let Some(g) = font.outline_glyph(id.with_scale_and_position(scale, point(pen, baseline))) {
                let b = g.px_bounds();
                let mut result = Ok(());
                g.draw(|gx, gy, coverage| {
                    let (x, y) = (b.min.x as i32 + gx as i32 + dx, b.min.y as i32 + gy as i32 + dy);
                    let (x, y) = trans.transform(x, y);
                    let c = BackendColor { alpha: color.alpha * coverage.min(1.0) as f64, rgb: color.rgb };
                    if result.is_ok() && coverage > 0.0 {
                        result = self.inner.draw_pixel((pos.0 + x, pos.1 + y), c);
                    }
                });
                result?;
            }
            pen += scaled.h_advance(id);
        }
        Ok(())
    }
}
