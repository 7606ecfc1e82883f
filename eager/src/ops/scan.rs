//! Scans: running sums and products along a dim (`cumsum`, `cumprod`), each element the
//! reduction of the window of elements up to it (`stablehlo.reduce_window`). f16 and bf16
//! accumulate in f32 and round once per element.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): cumsum and cumprod are on the f32 list, as torch's.

use crate::error::{Error, Result};
use crate::shape::Spec;

use super::elementwise::ElementwiseOps;
use super::emit::{accumulator, Emitter, Value};
use super::{check_arity, one, Accepts, Grads, Op, OpDef, Operand};

/// What a scan accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// A running sum.
    Sum,
    /// A running product.
    Prod,
}

/// A running sum or product along `dim`; `reverse` runs from the end (the gradient of a scan
/// is the reverse scan).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scan {
    /// What is accumulated.
    pub kind: ScanKind,
    /// The dim scanned along.
    pub dim: usize,
    /// Whether the scan runs from the end.
    pub reverse: bool,
}

impl OpDef for Scan {
    fn autocast_list(&self) -> super::AutocastList {
        super::AutocastList::F32
    }
    fn name(&self) -> &'static str {
        match self.kind {
            ScanKind::Sum => "cumsum",
            ScanKind::Prod => "cumprod",
        }
    }
    fn attrs(&self) -> String {
        format!("dim={}{}", self.dim, if self.reverse { " reverse" } else { "" })
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let name = self.name();
        check_arity(name, inputs, 1)?;
        Accepts::Numeric.check(name, inputs[0].dtype)?;
        if self.dim >= inputs[0].rank().max(1) {
            return Err(Error::invalid(name, format!("dim {} out of range for {}", self.dim, inputs[0])));
        }
        Ok(inputs[0].clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let n = out.shape.get(self.dim).copied().unwrap_or(1);
        if out.numel() == 0 || out.rank() == 0 {
            return x[0].clone(); // nothing to accumulate (a scalar is its own running sum)
        }
        let acc = accumulator(out.dtype);
        let wide = Spec { shape: out.shape.clone(), dtype: acc };
        let v = if acc == out.dtype { x[0].clone() } else { e.op("stablehlo.convert", &[&x[0]], "", &wide) };
        let (combine, init) = match self.kind {
            ScanKind::Sum => ("stablehlo.add", 0.0),
            ScanKind::Prod => ("stablehlo.multiply", 1.0),
        };
        // Window: `n` elements along `dim` ending at (or, reversed, starting at) each element.
        let rank = out.rank();
        let windows: Vec<String> = (0..rank).map(|d| if d == self.dim { n } else { 1 }.to_string()).collect();
        let pads: Vec<String> = (0..rank)
            .map(|d| match (d == self.dim, self.reverse) {
                (false, _) => "[0, 0]".to_string(),
                (true, false) => format!("[{}, 0]", n - 1),
                (true, true) => format!("[0, {}]", n - 1),
            })
            .collect();
        let attrs = format!(
            "window_dimensions = array<i64: {}>, window_strides = array<i64: {}>, padding = dense<[{}]> : tensor<{rank}x2xi64>",
            windows.join(", "),
            vec!["1"; rank].join(", "),
            pads.join(", "),
        );
        let scanned = e.reduce_window(&v, combine, init, &attrs, &wide);
        if acc == out.dtype {
            scanned
        } else {
            e.op("stablehlo.convert", &[&scanned], "", out)
        }
    }
    fn backward<T: Operand>(&self, x: &[&T], out: &T, g: &T) -> Result<Grads<T>> {
        let reversed = Scan { reverse: !self.reverse, ..self.clone() };
        match self.kind {
            // Each input adds to every output at or after it: the reverse running sum of g.
            ScanKind::Sum => one(T::apply(Op::Scan(reversed), &[g], None)?),
            // d out_j / d x_i = out_j / x_i for j at or after i: the reverse running sum of
            // g * out, over x. Exact for inputs without zeros (a zero gives inf or NaN).
            ScanKind::Prod => {
                let summed =
                    T::apply(Op::Scan(Scan { kind: ScanKind::Sum, ..reversed }), &[&g.mul(out)?], None)?;
                one(summed.div(x[0])?)
            }
        }
    }
}

/// The scans, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait ScanOps: Operand {
    fn scan(&self, kind: ScanKind, dim: isize) -> Result<Self> {
        let name = Scan { kind, dim: 0, reverse: false }.name();
        let dim = match self.rank_of() {
            // A 0-d tensor scans along its one implicit dim, 0 or -1 (as torch).
            0 if dim == 0 || dim == -1 => 0,
            0 => return Err(Error::invalid(name, format!("dim {dim} is out of range for a 0-d tensor"))),
            _ => self.dim(name, dim)?,
        };
        Self::apply(Op::Scan(Scan { kind, dim, reverse: false }), &[self], None)
    }
    fn cumsum(&self, dim: isize) -> Result<Self> {
        self.scan(ScanKind::Sum, dim)
    }
    fn cumprod(&self, dim: isize) -> Result<Self> {
        self.scan(ScanKind::Prod, dim)
    }
}

impl<T: Operand> ScanOps for T {}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;
    use crate::dtype::DType;
    use crate::ops::emit::literal;

    #[test]
    fn a_running_sum_pads_the_window_before_each_element() {
        let m = module(Scan { kind: ScanKind::Sum, dim: 1, reverse: false }, &[f32s(&[2, 4])]);
        assert!(m.contains("\"stablehlo.reduce_window\"") && m.contains("\"stablehlo.add\""), "{m}");
        assert!(m.contains("window_dimensions = array<i64: 1, 4>"), "{m}");
        assert!(m.contains("padding = dense<[[0, 0], [3, 0]]> : tensor<2x2xi64>"), "{m}");
    }

    #[test]
    fn a_reverse_product_pads_after_and_starts_from_one() {
        let m = module(Scan { kind: ScanKind::Prod, dim: 0, reverse: true }, &[f32s(&[3])]);
        assert!(m.contains("padding = dense<[[0, 2]]> : tensor<1x2xi64>"), "{m}");
        assert!(m.contains(&literal(DType::F32, 1.0)) && m.contains("\"stablehlo.multiply\""), "{m}");
    }

    #[test]
    fn half_scans_accumulate_in_f32() {
        let m = module(Scan { kind: ScanKind::Sum, dim: 0, reverse: false }, &[Spec::new(&[5], DType::BF16)]);
        assert!(
            m.contains("(tensor<5xbf16>) -> tensor<5xf32>")
                && m.contains("(tensor<5xf32>) -> tensor<5xbf16>"),
            "{m}"
        );
    }

    #[test]
    fn bool_and_bad_dims_are_errors() {
        let e = Scan { kind: ScanKind::Sum, dim: 0, reverse: false }.infer(&[Spec::new(&[2], DType::Bool)]);
        assert!(e.unwrap_err().to_string().starts_with("cumsum: dtype error"));
        let e = Scan { kind: ScanKind::Prod, dim: 2, reverse: false }.infer(&[f32s(&[2, 2])]);
        assert!(e.unwrap_err().to_string().contains("dim 2 out of range"));
    }
}
