//! How a tensor prints: like torch (`tensor([[1.0000, 2.0000], …], shape=[2, 2], …)`),
//! summarised past 1000 elements (a notebook shows the same text: see the eager-cell crate).

use std::fmt;

use smallvec::SmallVec;

use crate::dtype::DType;

use super::Tensor;

/// Elements shown per dim at each end when a tensor is summarised (torch's `edgeitems`).
const EDGE_ITEMS: usize = 3;
/// Tensors with more elements than this are summarised with `...` (torch's `threshold`).
const SUMMARY_THRESHOLD: usize = 1000;

impl fmt::Display for Tensor {
    /// Like torch: `tensor([[1.0000, 2.0000], …], shape=[2, 2], dtype=f32, device=cpu:0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = match self.to_f64_vec() {
            Ok(v) => v,
            Err(e) => {
                return write!(
                    f,
                    "tensor(<unreadable: {e}>, shape={:?}, dtype={}, device={})",
                    self.shape(),
                    self.dtype(),
                    self.device()
                )
            }
        };
        let summarise = values.len() > SUMMARY_THRESHOLD;
        let fmt_one = element_formatter(&values, self.dtype());
        let mut body = String::new();
        write_nested(&mut body, &values, self.shape(), 0, summarise, &fmt_one, 7);
        // A sharded tensor says how it is split where a single-device one names its device.
        let place = match self.sharding() {
            Some(s) => format!("sharding={s}"),
            None => format!("device={}", self.device()),
        };
        write!(f, "tensor({body}, shape={:?}, dtype={}, {place})", self.shape(), self.dtype())
    }
}

/// Debug is the full text, as torch's `repr`: `Ok(t)` ending a REPL cell shows the values.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One formatter for all elements, so columns line up: fixed 4 decimals for floats unless
/// magnitudes call for scientific notation; plain integers; `true`/`false`.
fn element_formatter(values: &[f64], dtype: DType) -> impl Fn(f64) -> String {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).map(f64::abs).collect();
    let max = finite.iter().copied().fold(0.0, f64::max);
    let min_nonzero = finite.iter().copied().filter(|&v| v > 0.0).fold(f64::INFINITY, f64::min);
    let sci = dtype.is_float() && (max >= 1e8 || (min_nonzero < 1e-4 && min_nonzero.is_finite()));
    let width = values.iter().map(|&v| format_value(v, dtype, sci).len()).max().unwrap_or(0);
    move |v| format!("{:>width$}", format_value(v, dtype, sci))
}

fn format_value(v: f64, dtype: DType, sci: bool) -> String {
    if dtype == DType::Bool {
        return (if v != 0.0 { "true" } else { "false" }).into();
    }
    if !dtype.is_float() {
        return format!("{}", v as i128);
    }
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        (if v > 0.0 { "inf" } else { "-inf" }).into()
    } else if sci {
        // As Python's `%.4e` (torch): a sign and at least two digits in the exponent.
        let text = format!("{v:.4e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        format!("{v:.4}")
    }
}

/// Writes `[…]` nesting for `shape`, eliding the middle of long dims when summarising.
fn write_nested(
    out: &mut String,
    values: &[f64],
    shape: &[usize],
    offset: usize,
    summarise: bool,
    fmt_one: &dyn Fn(f64) -> String,
    indent: usize,
) {
    if shape.is_empty() {
        out.push_str(&fmt_one(values[offset]));
        return;
    }
    let n = shape[0];
    let stride: usize = shape[1..].iter().product();
    let shown: SmallVec<[Option<usize>; 8]> = if summarise && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS).map(Some).chain(std::iter::once(None)).chain((n - EDGE_ITEMS..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    for (k, item) in shown.iter().enumerate() {
        if k > 0 {
            out.push(',');
            if shape.len() > 1 {
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(indent + 1));
            } else {
                out.push(' ');
            }
        }
        match item {
            Some(i) => {
                write_nested(out, values, &shape[1..], offset + i * stride, summarise, fmt_one, indent + 1)
            }
            None => out.push_str("..."),
        }
    }
    out.push(']');
}
