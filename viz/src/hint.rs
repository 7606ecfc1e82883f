//! The recompile hint: an op compiled for many distinct shapes is the eager-mode pitfall
//! (every new shape is a new XLA compile), so name the op, the shapes and what varies. An
//! executable loaded from the persistent compile cache counts too: the compile was only
//! paid in an earlier process, and the next new shape compiles again.

use std::collections::HashSet;
use std::fmt;

use eager::profiler::{Event, EventKind};

use crate::profile::Profile;
use crate::units::duration;

/// Distinct shapes one op may be compiled (or loaded from disk) for within a profile before
/// a [`Hint`] is given.
/// Like torch.compile's recompile limit: a model with a few layer sizes stays under it, a
/// sequence length or batch size that changes every step goes over it.
pub const RECOMPILE_THRESHOLD: usize = 8;

/// One op that got new executables (compiled or loaded from disk) for
/// [`RECOMPILE_THRESHOLD`] or more distinct shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    /// The op's name (`exp`, `matmul`).
    pub op: &'static str,
    /// The distinct shapes (`[2, 16] x [16]`), in order of first compile or load.
    pub shapes: Vec<String>,
    /// Where they differ: `dim 0 of input 0`, or `the split of input 0` when the shapes
    /// stay and how tensors are split over a mesh changes.
    pub varying: Vec<String>,
    /// The shapes stay and the splits change (each listed shape then shows its splits).
    pub splits_vary: bool,
    /// Executables compiled (cache misses).
    pub compiles: u64,
    /// Executables loaded from the persistent compile cache (disk hits).
    pub disk_loads: u64,
    /// Time spent compiling and loading this op for all those shapes.
    pub compile_ns: u64,
}

/// Input shapes then output shape: what a recompile for "a new shape" means (ops without
/// inputs, like `fill` or `random`, take their shape from an attribute).
type Shapes = Vec<Vec<usize>>;

/// The shapes, and for an SPMD program the splits of its inputs and results over the mesh:
/// a new split is a new program too.
type Signature = (Shapes, Vec<String>);

fn signature(e: &Event) -> Signature {
    let shapes =
        e.info.inputs.iter().chain(std::iter::once(&e.info.output)).map(|s| s.shape.to_vec()).collect();
    (shapes, e.info.mesh.as_ref().map(|m| m.splits.clone()).unwrap_or_default())
}

fn show(shapes: &[Vec<usize>]) -> String {
    shapes.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" x ")
}

/// The dims that change most between signatures (input or output, dim): with two call
/// sites mixed (a layer of 64 and one of 128), the batch dim still has the most sizes.
fn varying(sigs: &[Shapes]) -> Vec<String> {
    let first = &sigs[0];
    let inputs = first.len() - 1;
    let mut counts: Vec<(usize, usize, usize)> = Vec::new();
    for (p, shape) in first.iter().enumerate() {
        // Only positions with the same rank everywhere have a dim to name.
        if !sigs.iter().all(|s| s.len() == first.len() && s[p].len() == shape.len()) {
            continue;
        }
        for d in 0..shape.len() {
            let sizes: HashSet<usize> = sigs.iter().map(|s| s[p][d]).collect();
            counts.push((p, d, sizes.len()));
        }
    }
    // An output dim that follows an input dim says nothing new: inputs first.
    let inputs_vary = counts.iter().any(|&(p, _, n)| p < inputs && n > 1);
    counts.retain(|&(p, _, n)| n > 1 && (p < inputs || !inputs_vary));
    let most = counts.iter().map(|c| c.2).max().unwrap_or(0);
    counts
        .iter()
        .filter(|c| c.2 == most)
        .map(
            |&(p, d, _)| {
                if p < inputs {
                    format!("dim {d} of input {p}")
                } else {
                    format!("dim {d} of the output")
                }
            },
        )
        .collect()
}

/// The compiles and disk loads of one op: distinct signatures in order of first one, how
/// many of each, and their cost.
struct Compiles {
    op: &'static str,
    sigs: Vec<Signature>,
    seen: HashSet<Signature>,
    compiles: u64,
    disk_loads: u64,
    compile_ns: u64,
}

impl Compiles {
    fn hint(self) -> Hint {
        let shapes: Vec<Shapes> = self.sigs.iter().map(|s| s.0.clone()).collect();
        if shapes.iter().all(|s| *s == shapes[0]) {
            return self.split_hint();
        }
        let sigs = shapes;
        let inputs: Vec<String> = sigs.iter().map(|s| show(&s[..s.len() - 1])).collect();
        // Show outputs too when inputs alone do not tell the compiles apart (reshape, fill).
        let with_output = inputs.iter().collect::<HashSet<_>>().len() < inputs.len();
        let shapes =
            sigs.iter()
                .zip(inputs)
                .map(|(s, i)| {
                    if with_output {
                        format!("{i} → {:?}", s[s.len() - 1]).trim_start().into()
                    } else {
                        i
                    }
                })
                .collect();
        Hint {
            op: self.op,
            shapes,
            varying: varying(&sigs),
            splits_vary: false,
            compiles: self.compiles,
            disk_loads: self.disk_loads,
            compile_ns: self.compile_ns,
        }
    }

    /// The same shapes, split over a mesh in different ways: each listed with its splits.
    fn split_hint(self) -> Hint {
        let first = &self.sigs[0];
        let inputs = first.0.len() - 1;
        let changed: Vec<usize> =
            (0..first.1.len()).filter(|&p| self.sigs.iter().any(|s| s.1.get(p) != first.1.get(p))).collect();
        // An output split that follows an input's says nothing new: inputs first.
        let inputs_vary = changed.iter().any(|&p| p < inputs);
        let varying = changed
            .into_iter()
            .filter(|&p| p < inputs || !inputs_vary)
            .map(|p| {
                if p < inputs {
                    format!("the split of input {p}")
                } else {
                    "the split of the output".into()
                }
            })
            .collect();
        let shapes = self
            .sigs
            .iter()
            .map(|(shapes, splits)| {
                let parts: Vec<String> =
                    shapes[..inputs].iter().zip(splits).map(|(s, p)| format!("{s:?} {p}")).collect();
                parts.join(" x ")
            })
            .collect();
        Hint {
            op: self.op,
            shapes,
            varying,
            splits_vary: true,
            compiles: self.compiles,
            disk_loads: self.disk_loads,
            compile_ns: self.compile_ns,
        }
    }
}

pub(crate) fn hints(events: &[Event], threshold: usize) -> Vec<Hint> {
    let mut ops: Vec<Compiles> = Vec::new();
    for e in events.iter().filter(|e| e.kind == EventKind::Op && (e.is_miss() || e.is_disk_hit())) {
        let i = ops.iter().position(|o| o.op == e.name()).unwrap_or_else(|| {
            ops.push(Compiles {
                op: e.name(),
                sigs: Vec::new(),
                seen: HashSet::new(),
                compiles: 0,
                disk_loads: 0,
                compile_ns: 0,
            });
            ops.len() - 1
        });
        let o = &mut ops[i];
        let sig = signature(e);
        if o.seen.insert(sig.clone()) {
            o.sigs.push(sig);
        }
        if e.is_disk_hit() {
            o.disk_loads += 1;
        } else {
            o.compiles += 1;
        }
        o.compile_ns += e.compile_ns;
    }
    let mut hints: Vec<Hint> =
        ops.into_iter().filter(|o| o.sigs.len() >= threshold).map(Compiles::hint).collect();
    hints.sort_by_key(|h| std::cmp::Reverse(h.compile_ns));
    hints
}

impl fmt::Display for Hint {
    /// One line: the op, how many shapes, a few of them, what varies, how many were loaded
    /// from disk if any, the cost, the fix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 3;
        let n = self.shapes.len();
        let mut listed: Vec<&str> = self.shapes.iter().take(SHOWN).map(String::as_str).collect();
        if n > SHOWN + 1 {
            listed.push("…");
        }
        if n > SHOWN {
            listed.push(&self.shapes[n - 1]);
        }
        let loaded = self.disk_loads > 0;
        let got = if loaded { "needed new executables for" } else { "was compiled for" };
        let what = if self.splits_vary { "distinct splits of the same shapes" } else { "distinct shapes" };
        write!(f, "hint: `{}` {got} {n} {what} ({}", self.op, listed.join(", "))?;
        if !self.varying.is_empty() {
            let verb = if self.varying.len() == 1 { "varies" } else { "vary" };
            write!(f, "; {} {verb}", self.varying.join(", "))?;
        }
        f.write_str("), ")?;
        let cost = duration(self.compile_ns);
        match (self.compiles, self.disk_loads) {
            (_, 0) => write!(f, "{cost} of compiling")?,
            (0, d) => write!(f, "{d} loaded from disk, none compiled, {cost} of loading")?,
            (c, d) => write!(f, "{c} compiled and {d} loaded from disk, {cost} of compiling and loading")?,
        }
        if self.splits_vary {
            f.write_str(
                ": keep each tensor's split steady (shard once, outside the loop) so the compile cache hits",
            )
        } else {
            f.write_str(": pad or bucket the varying sizes so shapes repeat and the compile cache hits")
        }
    }
}

impl Profile {
    /// Ops compiled (or loaded from disk) for [`RECOMPILE_THRESHOLD`] or more distinct
    /// shapes, costliest first; empty when shapes are steady.
    pub fn hints(&self) -> Vec<Hint> {
        hints(self.events(), RECOMPILE_THRESHOLD)
    }
}
