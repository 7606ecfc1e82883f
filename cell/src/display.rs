//! How a value that ends a cell shows: evcxr compiles `(value).evcxr_display();` first and
//! falls back to `Debug` in a second compile when there is no such method.

use std::any::{Any, TypeId};
use std::fmt::Debug;

use crate::{print_error_block, show, show_all};

/// Shows any `Debug` value that ends a REPL cell in one compile; eager's and viz's types with
/// a rich form (a tensor, cache stats, a profile, a chart, a comparison, a PNG) show that.
pub trait EvcxrDisplay {
    fn evcxr_display(&self);
}

// `typeid::of`, not `TypeId::of`: a value ending a cell often borrows (a chart its profile),
// and a `TypeId` does not depend on lifetimes.
impl<T: Debug + ?Sized> EvcxrDisplay for T {
    fn evcxr_display(&self) {
        // SAFETY: the pointer is `self`'s and the id is `T`'s.
        if unsafe { show_rich(typeid::of::<T>(), self as *const T as *const ()) } {
            return;
        }
        let text = format!("{self:?}");
        // A statement-like cell (a loop, an assignment) shows nothing, as in evcxr.
        if text != "()" {
            show("text/plain", &text);
        }
    }
}

/// Shows a `Result` that ends a cell as torch users expect: `Ok` as its value (a tensor with
/// its values and HTML table), `Err` as the cell's error (Jupyter's error reply). Taken by
/// value, so it wins over [`EvcxrDisplay`] (which takes `&self`) for `Result`s.
pub trait EvcxrResultDisplay {
    fn evcxr_display(self);
}

impl<T: Debug + 'static, E: std::fmt::Display + 'static> EvcxrResultDisplay for Result<T, E> {
    fn evcxr_display(self) {
        match self {
            Ok(v) => EvcxrDisplay::evcxr_display(&v),
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
}

/// Shows the value at `p` if its type (`id`) is one with a rich form; false if not.
///
/// # Safety
/// `p` points to a live value whose type has the `TypeId` `id` (lifetimes aside).
unsafe fn show_rich(id: TypeId, p: *const ()) -> bool {
    /// The value as `T`: its type is `T`'s (the lifetimes of `T`, chosen by the caller, are
    /// no longer than the value's: it is only read during this call).
    unsafe fn cast<'a, T>(p: *const ()) -> &'a T {
        // SAFETY: see `show_rich`.
        unsafe { &*(p as *const T) }
    }
    // SAFETY (every `cast`): `id` is the id of the type it is cast to.
    unsafe {
        if id == TypeId::of::<eager::Tensor>() {
            tensor(cast(p));
        } else if id == TypeId::of::<eager::cache::CacheStats>() {
            show("text/plain", &cast::<eager::cache::CacheStats>(p).to_string());
        } else if id == TypeId::of::<viz::Profile>() {
            let p: &viz::Profile = cast(p);
            show_all(&[("text/plain", p.table_text().trim_end()), ("text/html", &p.table_html())]);
        } else if id == TypeId::of::<viz::Chart<'static>>() {
            svg(cast::<viz::Chart<'_>>(p).svg());
        } else if id == TypeId::of::<viz::LineChart>() {
            svg(cast::<viz::LineChart>(p).svg());
        } else if id == TypeId::of::<viz::Comparison>() {
            let c: &viz::Comparison = cast(p);
            show_all(&[("text/plain", c.text().trim_end()), ("text/html", &c.html())]);
        } else if id == TypeId::of::<viz::PngImage>() {
            use base64::Engine as _;
            show("image/png", &base64::engine::general_purpose::STANDARD.encode(&cast::<viz::PngImage>(p).0));
        } else {
            return false;
        }
    }
    true
}

/// A tensor: its text, and the same in HTML for notebooks.
fn tensor(t: &eager::Tensor) {
    let text = t.to_string();
    let html = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    show_all(&[("text/plain", &text), ("text/html", &format!("<pre class=\"eager-tensor\">{html}</pre>"))]);
}

/// A chart as SVG, or the error that kept it from being drawn.
fn svg(svg: viz::Result<String>) {
    match svg {
        Ok(svg) => show("image/svg+xml", &svg),
        Err(e) => eprintln!("{e}"),
    }
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
        assert_eq!(typeid::of::<eager::Tensor>(), TypeId::of::<eager::Tensor>());
        assert_ne!(typeid::of::<&eager::Tensor>(), TypeId::of::<eager::Tensor>());
        assert_ne!(typeid::of::<str>(), TypeId::of::<String>());
    }

    #[test]
    fn a_plain_value_is_not_rich() {
        let v = vec![1, 2];
        // SAFETY: the pointer and id are `v`'s.
        assert!(!unsafe { show_rich(typeid::of::<Vec<i32>>(), &v as *const Vec<i32> as *const ()) });
    }

    #[test]
    fn short_type_names() {
        assert_eq!(short_type_name::<std::num::ParseIntError>(), "ParseIntError");
        assert_eq!(short_type_name::<Vec<u8>>(), "Vec");
    }
}
