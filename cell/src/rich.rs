//! The rich forms of eager's and viz's values (a tensor's text and HTML table, a chart's SVG, a
//! profile's table, …) per MIME type, and the printing of a value or a `Result` as a cell's
//! output: what a cell's last value, a live display and an Output widget show alike.

use std::any::{Any, TypeId};
use std::fmt::Debug;

use crate::{print_error_block, show_all};

/// How `value` shows, per MIME type: its rich form for eager's and viz's types (a tensor's
/// text and HTML, a chart's SVG, …), else its `Debug` text.
pub fn bundle_of<T: Debug + ?Sized>(value: &T) -> Vec<(String, String)> {
    // SAFETY: the pointer is `value`'s and the id is `T`'s.
    match unsafe { rich(typeid::of::<T>(), value as *const T as *const ()) } {
        Some(bundle) => bundle,
        None => vec![("text/plain".into(), format!("{value:?}"))],
    }
}

/// Prints `bundle` as a cell's output; a statement-like value (`()`, a loop, an assignment)
/// shows nothing, as in evcxr.
pub(crate) fn print_bundle(bundle: &[(String, String)]) {
    if bundle.len() == 1 && bundle[0].1 == "()" {
        return;
    }
    let pairs: Vec<(&str, &str)> = bundle.iter().map(|(m, v)| (m.as_str(), v.as_str())).collect();
    show_all(&pairs);
}

/// Prints a `Result` as torch users expect: `Ok` as its value, `Err` as the cell's error block
/// (its kind for eager's errors, else its type's short name, and its message).
pub(crate) fn print_result<T: Debug + 'static, E: std::fmt::Display + 'static>(result: Result<T, E>) {
    match result {
        Ok(v) => print_bundle(&bundle_of(&v)),
        Err(e) => {
            let any: &dyn Any = &e;
            let ename = match any.downcast_ref::<eager::Error>() {
                Some(err) => err.kind().to_string(),
                None => short_type_name::<E>(),
            };
            print_error_block(&ename, &e.to_string());
        }
    }
}

/// The rich form of the value at `p`, if its type (`id`) has one.
///
/// # Safety
/// `p` points to a live value whose type has the `TypeId` `id` (lifetimes aside).
unsafe fn rich(id: TypeId, p: *const ()) -> Option<Vec<(String, String)>> {
    /// The value as `T`: its type is `T`'s (the lifetimes of `T`, chosen by the caller, are
    /// no longer than the value's: it is only read during this call).
    unsafe fn cast<'a, T>(p: *const ()) -> &'a T {
        // SAFETY: see `rich`.
        unsafe { &*(p as *const T) }
    }
    let text = |t: String| vec![("text/plain".to_string(), t)];
    let both =
        |t: String, (mime, v): (&str, String)| vec![("text/plain".to_string(), t), (mime.to_string(), v)];
    // SAFETY (every `cast`): `id` is the id of the type it is cast to.
    unsafe {
        Some(if id == TypeId::of::<eager::Tensor>() {
            tensor(cast(p))
        } else if id == TypeId::of::<eager::cache::CacheStats>() {
            text(cast::<eager::cache::CacheStats>(p).to_string())
        } else if id == TypeId::of::<viz::Profile>() {
            let p: &viz::Profile = cast(p);
            both(p.table_text().trim_end().to_string(), ("text/html", p.table_html()))
        } else if id == TypeId::of::<viz::Chart<'static>>() {
            svg(cast::<viz::Chart<'_>>(p).svg())
        } else if id == TypeId::of::<viz::LineChart>() {
            svg(cast::<viz::LineChart>(p).svg())
        } else if id == TypeId::of::<viz::MemoryChart>() {
            let c: &viz::MemoryChart = cast(p);
            let mut b = svg(c.svg());
            b.insert(0, ("text/plain".into(), c.text()));
            b
        } else if id == TypeId::of::<eager::memory::MemorySnapshot>() {
            text(cast::<eager::memory::MemorySnapshot>(p).summary(10))
        } else if id == TypeId::of::<viz::Comparison>() {
            let c: &viz::Comparison = cast(p);
            both(c.text().trim_end().to_string(), ("text/html", c.html()))
        } else if id == TypeId::of::<viz::PngImage>() {
            use base64::Engine as _;
            let png = base64::engine::general_purpose::STANDARD.encode(&cast::<viz::PngImage>(p).0);
            vec![("image/png".into(), png)]
        } else {
            return None;
        })
    }
}

/// A tensor: its text, and the same in HTML for notebooks.
fn tensor(t: &eager::Tensor) -> Vec<(String, String)> {
    let text = t.to_string();
    let html = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    vec![
        ("text/plain".into(), text),
        ("text/html".into(), format!("<pre class=\"eager-tensor\">{html}</pre>")),
    ]
}

/// A chart as SVG, or the error that kept it from being drawn as text.
fn svg(svg: viz::Result<String>) -> Vec<(String, String)> {
    match svg {
        Ok(svg) => chart_bundle(svg),
        Err(e) => vec![("text/plain".into(), e.to_string())],
    }
}

/// A chart's SVG as notebooks show it: an HTML image that shrinks to the output area's width
/// (JupyterLab draws `image/svg+xml` as an image at its own width and scrolls a wide one: the
/// 1200-px timeline ran past the right edge), and the SVG itself for every other front end.
pub(crate) fn chart_bundle(svg: String) -> Vec<(String, String)> {
    use base64::Engine as _;
    let width = svg
        .split_once("width=\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .and_then(|w| w.parse::<u32>().ok())
        .unwrap_or(800);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&svg);
    let html = format!(
        "<img class=\"eager-chart\" alt=\"chart\" width=\"{width}\" style=\"max-width:100%; height:auto\" \
         src=\"data:image/svg+xml;base64,{b64}\"/>"
    );
    vec![("text/html".into(), html), ("image/svg+xml".into(), svg)]
}

/// `ParseIntError` for `core::num::error::ParseIntError`: the name a user knows.
fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_ignore_lifetimes_and_tell_types_apart() {
        fn id_of_borrowed<'a>(_: &'a str) -> TypeId {
            typeid::of::<viz::Chart<'a>>()
        }
        assert_eq!(id_of_borrowed(&String::from("x")), TypeId::of::<viz::Chart<'static>>());
        assert_ne!(typeid::of::<&eager::Tensor>(), TypeId::of::<eager::Tensor>());
        assert_ne!(typeid::of::<str>(), TypeId::of::<String>());
    }

    #[test]
    fn a_chart_that_borrows_a_local_profile_shows_its_rich_form() {
        // The profile lives on this stack frame: the chart is a `Chart<'a>` with `'a` shorter
        // than `'static`, and still finds the arm of `Chart<'static>`, not the `Debug` fallback.
        let profile = viz::Profile::default();
        let chart = profile.cache_hits();
        let b = bundle_of(&chart);
        assert_eq!(b, svg(chart.svg()));
        assert_ne!(b, vec![("text/plain".to_string(), format!("{chart:?}"))], "the Debug fallback");
        // A reference to it is another type: its `Debug` text.
        assert_eq!(bundle_of(&&chart), vec![("text/plain".to_string(), format!("{chart:?}"))]);
    }

    #[test]
    fn a_plain_value_shows_its_debug_text_and_a_chart_its_svg() {
        assert_eq!(bundle_of(&vec![1, 2]), vec![("text/plain".to_string(), "[1, 2]".to_string())]);
        let chart = viz::line_chart("loss", "step", "loss", &[("a", [1.0f32, 0.5])]);
        let b = bundle_of(&chart);
        assert!(b.len() == 2 && b[1].0 == "image/svg+xml" && b[1].1.starts_with("<svg"));
        // The HTML form shrinks to the page, at most the chart's own width.
        assert_eq!(b[0].0, "text/html");
        assert!(b[0].1.contains("style=\"max-width:100%; height:auto\""), "{}", b[0].1);
        let width = chart.default_size().0;
        assert!(b[0].1.contains(&format!("width=\"{width}\"")), "{}", &b[0].1[..120]);
    }

    #[test]
    fn short_type_names() {
        assert_eq!(short_type_name::<std::num::ParseIntError>(), "ParseIntError");
        assert_eq!(short_type_name::<Vec<u8>>(), "Vec");
    }
}
