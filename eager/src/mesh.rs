//! Meshes and shardings, in JAX's vocabulary: a [`Mesh`] arranges devices in named axes
//! (`[("data", 2), ("model", 2)]`), a [`PartitionSpec`] names, per tensor dim, the mesh axes
//! that dim is split over, and a [`Sharding`] is the two together. From a sharding come the
//! shard each device holds and the Shardy annotation XLA's SPMD partitioner reads; from an
//! op's inputs' shardings, its result's split (`result_spec`, the one rule of eager dispatch
//! over a mesh and of compiled functions). Pure bookkeeping: nothing here touches a device, so
//! the compile cache (whose keys hold meshes) and the runtime sit above it; `Mesh::new`, which
//! asks the runtime for devices, is the runtime's (`runtime/start.rs`).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::Spec;

/// Devices arranged in named axes; partition `i` of an SPMD program runs on `devices()[i]`,
/// the devices laid out row-major over the axes (the last axis varies fastest). Cloning
/// shares it; two meshes are equal when their axes and devices are.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Mesh {
    inner: Arc<MeshInner>,
}

#[derive(PartialEq, Eq, Hash)]
struct MeshInner {
    axes: Vec<(String, usize)>,
    devices: Vec<Device>,
}

impl Mesh {
    /// A mesh of `axes` over exactly `devices` (row-major over the axes), all of one kind.
    pub fn with_devices(axes: &[(&str, usize)], devices: &[Device]) -> Result<Mesh> {
        let needed: usize = axes.iter().map(|&(_, n)| n).product();
        if axes.is_empty() || axes.iter().any(|&(_, n)| n == 0) || needed != devices.len() {
            let msg = format!("{} needs {needed} devices, got {}", describe(axes), devices.len());
            return Err(Error::invalid("Mesh", msg));
        }
        for (i, &(name, _)) in axes.iter().enumerate() {
            if name.is_empty() || axes[..i].iter().any(|&(other, _)| other == name) {
                return Err(Error::invalid(
                    "Mesh",
                    format!("axis names must be distinct and non-empty: {axes:?}"),
                ));
            }
        }
        if devices.iter().any(|d| d.kind != devices[0].kind) {
            return Err(Error::invalid("Mesh", format!("devices of one kind only, got {devices:?}")));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(Error::invalid("Mesh", format!("{d} appears twice")));
            }
        }
        let axes = axes.iter().map(|&(n, s)| (n.to_string(), s)).collect();
        let mesh = Mesh { inner: Arc::new(MeshInner { axes, devices: devices.to_vec() }) };
        set_current(&mesh);
        Ok(mesh)
    }

    /// The mesh's named axes and their sizes.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.inner.axes
    }

    /// The devices, partition `i` on `devices()[i]`.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Number of devices.
    pub fn size(&self) -> usize {
        self.inner.devices.len()
    }

    /// Position and size of axis `name`, or an error naming the axes there are.
    fn axis(&self, name: &str) -> Result<(usize, usize)> {
        self.inner.axes.iter().position(|(n, _)| n == name).map(|i| (i, self.inner.axes[i].1)).ok_or_else(
            || {
                let names: Vec<&str> = self.inner.axes.iter().map(|(n, _)| n.as_str()).collect();
                Error::invalid("PartitionSpec", format!("unknown mesh axis {name:?}; the mesh has {names:?}"))
            },
        )
    }

    /// The coordinates of partition `p` along each axis.
    fn coords(&self, p: usize) -> Vec<usize> {
        let mut rest = p;
        let mut c = vec![0; self.inner.axes.len()];
        for (i, (_, n)) in self.inner.axes.iter().enumerate().rev() {
            c[i] = rest % n;
            rest /= n;
        }
        c
    }
}

/// `a mesh {data: 2, model: 2}`, for errors.
pub(crate) fn describe(axes: &[(&str, usize)]) -> String {
    let parts: Vec<String> = axes.iter().map(|(n, s)| format!("{n}: {s}")).collect();
    format!("a mesh {{{}}}", parts.join(", "))
}

/// The mesh in use: the last one made, or the one [`set_current`] names (one per session,
/// as all of eager's state, see [`crate::shared`]).
static CURRENT: crate::shared::Shared<std::sync::Mutex<Option<Mesh>>> =
    crate::shared::Shared::new("eager::mesh::Current", || std::sync::Mutex::new(None));

/// Makes `mesh` the one in use (what the REPL's `:mesh` shows); meshes made later replace it.
pub fn set_current(mesh: &Mesh) {
    *crate::shared::lock(CURRENT.get()) = Some(mesh.clone());
}

/// The mesh in use, if any was made.
pub fn current() -> Option<Mesh> {
    crate::shared::lock(CURRENT.get()).clone()
}

impl Mesh {
    /// The mesh as a grid of its devices: rows along the first axis and columns along the
    /// second (a 1-D mesh is one row; more axes list each device with its coordinates).
    pub fn grid(&self) -> String {
        let axes = &self.inner.axes;
        let mut out = format!("{self}\n");
        let name = |p: usize| self.inner.devices[p].to_string();
        match axes.len() {
            1 => {
                let cells: Vec<String> =
                    (0..self.size()).map(|p| format!("{}={p}: {}", axes[0].0, name(p))).collect();
                out.push_str(&format!("  {}\n", cells.join("   ")));
            }
            2 => {
                let (rows, cols) = (axes[0].1, axes[1].1);
                let head: Vec<String> =
                    (0..cols).map(|c| format!("{:<10}", format!("{}={c}", axes[1].0))).collect();
                let label = |r: usize| format!("{}={r}", axes[0].0);
                let w = (0..rows).map(|r| label(r).len()).max().unwrap_or(0);
                out.push_str(&format!("  {:w$}  {}\n", "", head.join(" ").trim_end()));
                for r in 0..rows {
                    let cells: Vec<String> =
                        (0..cols).map(|c| format!("{:<10}", name(r * cols + c))).collect();
                    out.push_str(&format!("  {:w$}  {}\n", label(r), cells.join(" ").trim_end()));
                }
            }
            _ => {
                for p in 0..self.size() {
                    let coords: Vec<String> =
                        self.coords(p).iter().zip(axes).map(|(c, (n, _))| format!("{n}={c}")).collect();
                    out.push_str(&format!("  {}: {}\n", coords.join(", "), name(p)));
                }
            }
        }
        out
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<String> = self.inner.axes.iter().map(|(n, s)| format!("{n}: {s}")).collect();
        let (first, last) = (self.inner.devices[0], self.inner.devices[self.size() - 1]);
        let contiguous = self.inner.devices.iter().enumerate().all(|(i, d)| d.index == first.index + i);
        if contiguous && self.size() > 1 {
            write!(f, "Mesh {{{}}} on {first}..{}", axes.join(", "), last.index)
        } else {
            let devices: Vec<String> = self.inner.devices.iter().map(|d| d.to_string()).collect();
            write!(f, "Mesh {{{}}} on {}", axes.join(", "), devices.join(", "))
        }
    }
}

impl fmt::Debug for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Per tensor dim, the mesh axes it is split over (major first), or none: JAX's
/// `PartitionSpec`. Dims past its length are not split.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PartitionSpec {
    dims: Vec<Vec<String>>,
}

impl PartitionSpec {
    /// One axis or none per dim: `PartitionSpec::new(&[Some("data"), None])` is JAX's
    /// `P("data", None)`.
    pub fn new(dims: &[Option<&str>]) -> PartitionSpec {
        PartitionSpec { dims: dims.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect() }
    }

    /// Several axes per dim: `PartitionSpec::with_axes(&[&["data", "model"], &[]])` is
    /// `P(("data", "model"), None)`.
    pub fn with_axes(dims: &[&[&str]]) -> PartitionSpec {
        PartitionSpec { dims: dims.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect() }
    }

    /// Nothing split: every device holds the whole tensor.
    pub fn replicated() -> PartitionSpec {
        PartitionSpec::default()
    }

    /// The axes dim `d` is split over (none past the spec's length).
    pub fn axes_of(&self, d: usize) -> &[String] {
        self.dims.get(d).map_or(&[], |v| v.as_slice())
    }

    /// Dims the spec names (its rank).
    pub fn len(&self) -> usize {
        self.dims.len()
    }

    /// Whether the spec names no dims.
    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }

    /// Per dim, the axes it is split over.
    pub(crate) fn dims(&self) -> &[Vec<String>] {
        &self.dims
    }

    /// Whether no dim is split.
    pub fn is_replicated(&self) -> bool {
        self.dims.iter().all(Vec::is_empty)
    }

    /// The spec of a result built from per-dim axes (trailing unsplit dims dropped).
    pub(crate) fn from_dims(mut dims: Vec<Vec<String>>) -> PartitionSpec {
        while dims.last().is_some_and(Vec::is_empty) {
            dims.pop();
        }
        PartitionSpec { dims }
    }
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::ops::Shard::text(&self.dims))
    }
}

/// How a tensor lies over a mesh: a mesh and a partition spec checked against a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sharding {
    mesh: Mesh,
    spec: PartitionSpec,
}

impl Sharding {
    /// `spec` over `mesh` for a tensor of `shape`: every axis named exists and is used once,
    /// the spec has no more dims than the shape, and each split dim divides evenly.
    pub fn new(mesh: &Mesh, spec: &PartitionSpec, shape: &[usize]) -> Result<Sharding> {
        if spec.len() > shape.len() {
            let msg = format!("{spec} has {} dims; the tensor {shape:?} has {}", spec.len(), shape.len());
            return Err(Error::shape("PartitionSpec", msg));
        }
        let mut used: Vec<&str> = Vec::new();
        for (d, axes) in spec.dims.iter().enumerate() {
            let mut parts = 1;
            for a in axes {
                let (_, size) = mesh.axis(a)?;
                if used.contains(&a.as_str()) {
                    return Err(Error::invalid(
                        "PartitionSpec",
                        format!("{spec} uses mesh axis {a:?} twice"),
                    ));
                }
                used.push(a);
                parts *= size;
            }
            if !shape[d].is_multiple_of(parts) {
                let msg = format!(
                    "dim {d} of {shape:?} (size {}) does not split evenly over {parts} devices ({spec} on {mesh})",
                    shape[d]
                );
                return Err(Error::shape("PartitionSpec", msg));
            }
        }
        Ok(Sharding { mesh: mesh.clone(), spec: PartitionSpec::from_dims(spec.dims.clone()) })
    }

    /// The mesh the tensor lies over.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// Which mesh axes split which dims.
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }

    /// How many pieces dim `d` is split into.
    pub fn parts(&self, d: usize) -> usize {
        self.spec.axes_of(d).iter().map(|a| self.mesh.axis(a).map_or(1, |(_, n)| n)).product()
    }

    /// Which piece of dim `d` partition `p` holds.
    fn piece(&self, p: usize, d: usize) -> usize {
        let coords = self.mesh.coords(p);
        self.spec.axes_of(d).iter().fold(0, |acc, a| {
            let (i, n) = self.mesh.axis(a).expect("checked when made");
            acc * n + coords[i]
        })
    }

    /// The shape each device holds.
    pub fn shard_shape(&self, shape: &[usize]) -> Vec<usize> {
        shape.iter().enumerate().map(|(d, &n)| n / self.parts(d)).collect()
    }

    /// The part of a tensor of `shape` partition `p` holds, per dim.
    pub fn shard_ranges(&self, shape: &[usize], p: usize) -> Vec<Range<usize>> {
        let sizes = self.shard_shape(shape);
        (0..shape.len()).map(|d| self.piece(p, d) * sizes[d]..(self.piece(p, d) + 1) * sizes[d]).collect()
    }
}

impl Sharding {
    /// The Shardy annotation of a tensor of rank `rank` on the mesh named `@mesh`:
    /// `#sdy.sharding<@mesh, [{"data"}, {}]>`, per dim its axes, major first.
    pub fn sdy(&self, rank: usize) -> String {
        crate::ops::Shard::sdy(&self.spec.dims, rank)
    }
}

/// The result's split: the op's own ([`Op::result_axes`]) if it fixes one; else each output
/// dim takes the mesh axes of the first of its source dims that has some none of the other
/// output dims took already.
pub(crate) fn result_spec(op: &Op, inputs: &[Spec], shardings: &[&Sharding], output: &Spec) -> PartitionSpec {
    if let Some(axes) = op.result_axes() {
        return PartitionSpec::from_dims(axes.to_vec());
    }
    let mut used: Vec<&str> = Vec::new();
    let mut dims = Vec::with_capacity(output.rank());
    for sources in op.dim_sources(inputs, output) {
        let j = dims.len();
        let axes = sources
            .iter()
            .map(|&(i, d)| (shardings[i].spec().axes_of(d), shardings[i].parts(d)))
            .find(|(axes, parts)| {
                !axes.is_empty()
                    && axes.iter().all(|a| !used.contains(&a.as_str()))
                    && output.shape[j].is_multiple_of(*parts)
            })
            .map_or(&[][..], |(axes, _)| axes);
        used.extend(axes.iter().map(String::as_str));
        dims.push(axes.to_vec());
    }
    PartitionSpec::from_dims(dims)
}

impl Mesh {
    /// The Shardy mesh declaration: `sdy.mesh @mesh = <["data"=2, "model"=2]>` (partition
    /// `i` on the mesh's `i`-th device, the default device order).
    pub fn sdy(&self) -> String {
        let axes: Vec<String> = self.inner.axes.iter().map(|(n, s)| format!("{n:?}={s}")).collect();
        format!("sdy.mesh @mesh = <[{}]>", axes.join(", "))
    }
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} over {}", self.spec, self.mesh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(axes: &[(&str, usize)]) -> Mesh {
        let n = axes.iter().map(|a| a.1).product();
        Mesh::with_devices(
            axes,
            &(0..n).map(|i| Device::new(crate::device::DeviceKind::Cpu, i)).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn shards_are_the_blocks_of_the_mesh_coordinates() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        let s = |spec: PartitionSpec, shape: &[usize]| Sharding::new(&m, &spec, shape).unwrap();
        // Rows over data: partitions 0, 1 (data 0) hold rows 0-1, and copies over model.
        let rows = s(PartitionSpec::new(&[Some("data")]), &[4, 6]);
        assert_eq!(rows.shard_ranges(&[4, 6], 2), [2..4, 0..6]);
        assert_eq!(rows.sdy(2), "#sdy.sharding<@mesh, [{\"data\"}, {}]>");
        // Columns over model: partitions 1 and 3 (model 1) hold the right half.
        let cols = s(PartitionSpec::new(&[None, Some("model")]), &[4, 6]);
        assert_eq!(cols.shard_shape(&[4, 6]), [4, 3]);
        assert_eq!(cols.shard_ranges(&[4, 6], 3), [0..4, 3..6]);
        // Rows over model and columns over data: partition 1 (data 0, model 1).
        let both = s(PartitionSpec::new(&[Some("model"), Some("data")]), &[4, 6]);
        assert_eq!(both.shard_ranges(&[4, 6], 1), [2..4, 0..3]);
        assert_eq!(both.sdy(2), "#sdy.sharding<@mesh, [{\"model\"}, {\"data\"}]>");
        let joint = s(PartitionSpec::with_axes(&[&["data", "model"]]), &[8]);
        assert_eq!(joint.shard_ranges(&[8], 3), vec![6..8]);
        assert_eq!(joint.sdy(1), "#sdy.sharding<@mesh, [{\"data\", \"model\"}]>");
        assert_eq!(Mesh::sdy(&m), "sdy.mesh @mesh = <[\"data\"=2, \"model\"=2]>");
    }

    #[test]
    fn a_mesh_draws_as_a_grid_of_its_devices() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        assert_eq!(
            m.grid(),
            "Mesh {data: 2, model: 2} on cpu:0..3\n          model=0    model=1\n  data=0  cpu:0      cpu:1\n  data=1  cpu:2      cpu:3\n"
        );
        assert_eq!(mesh(&[("x", 2)]).grid(), "Mesh {x: 2} on cpu:0..1\n  x=0: cpu:0   x=1: cpu:1\n");
    }

    #[test]
    fn bad_specs_are_errors_naming_what_is_wrong() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        let err =
            |spec: PartitionSpec, shape: &[usize]| Sharding::new(&m, &spec, shape).unwrap_err().to_string();
        let e = err(PartitionSpec::new(&[Some("batch")]), &[4]);
        assert!(e.contains("unknown mesh axis \"batch\"") && e.contains("[\"data\", \"model\"]"), "{e}");
        let e = err(PartitionSpec::new(&[Some("data")]), &[3, 2]);
        assert!(e.contains("dim 0 of [3, 2] (size 3) does not split evenly over 2 devices"), "{e}");
        let e = err(PartitionSpec::new(&[Some("data"), Some("data")]), &[4, 4]);
        assert!(e.contains("uses mesh axis \"data\" twice"), "{e}");
        let e = err(PartitionSpec::new(&[None, None, Some("data")]), &[4, 4]);
        assert!(e.contains("has 3 dims; the tensor [4, 4] has 2"), "{e}");
        let e = Mesh::with_devices(&[("x", 3)], &[Device::cpu()]).unwrap_err().to_string();
        assert!(e.contains("needs 3 devices, got 1"), "{e}");
        assert_eq!(format!("{m}"), "Mesh {data: 2, model: 2} on cpu:0..3");
        assert_eq!(
            format!("{}", PartitionSpec::with_axes(&[&["data", "model"], &[]])),
            "P((\"data\", \"model\"), None)"
        );
    }
}
