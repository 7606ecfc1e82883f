//! Placement over a mesh: `shard` pins its input's split (JAX's `with_sharding_constraint`),
//! a Shardy `sdy.sharding_constraint` on the values, which stay the same. Eagerly it moves a
//! sharded tensor's blocks between devices (one SPMD program, nothing through the host);
//! inside a compiled function it tells the partitioner where a value lies, which is how
//! collectives written in the global view become XLA's collectives. The mesh itself is the
//! module's `@mesh` (see `emit::partitioned`); `Tensor::shard` (in
//! `tensor/sharded.rs`, the layer that knows meshes) builds it.

use crate::error::Result;
use crate::shape::Spec;

use super::emit::{Emitter, Value};
use super::GradReads;
use super::{check_arity, one, DimSources, Grads, OpDef, Operand};

/// The input's values, split per dim over mesh axes `axes[d]` (major first; dims past the
/// end unsplit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shard {
    /// The mesh axes each dim is split over.
    pub axes: Vec<Vec<String>>,
}

impl Shard {
    /// JAX's spelling of a partition spec: `P("data", None, ("x", "y"))`.
    pub(crate) fn text(axes: &[Vec<String>]) -> String {
        let dims: Vec<String> = axes
            .iter()
            .map(|d| match d.len() {
                0 => "None".to_string(),
                1 => format!("{:?}", d[0]),
                _ => format!("({})", d.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")),
            })
            .collect();
        format!("P({})", dims.join(", "))
    }

    /// `#sdy.sharding<@mesh, [{"data"}, {}]>` for a value of rank `rank`.
    pub(crate) fn sdy(axes: &[Vec<String>], rank: usize) -> String {
        let dims: Vec<String> = (0..rank)
            .map(|d| {
                let names: Vec<String> =
                    axes.get(d).map_or(&[][..], Vec::as_slice).iter().map(|a| format!("{a:?}")).collect();
                format!("{{{}}}", names.join(", "))
            })
            .collect();
        format!("#sdy.sharding<@mesh, [{}]>", dims.join(", "))
    }
}

impl OpDef for Shard {
    fn grad_reads(&self) -> GradReads {
        GradReads::NONE
    }
    fn name(&self) -> &'static str {
        "shard"
    }
    fn attrs(&self) -> String {
        Shard::text(&self.axes)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        check_arity(self.name(), inputs, 1)?;
        Ok(inputs[0].clone())
    }
    fn emit(&self, e: &mut Emitter, x: &[Value], out: &Spec) -> Value {
        let sharding = Shard::sdy(&self.axes, out.rank());
        e.op("sdy.sharding_constraint", &[&x[0]], &format!("sharding = {sharding}"), out)
    }
    /// The values pass through unchanged, so does their gradient (its split is the
    /// partitioner's choice, as for any op).
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, g: &T) -> Result<Grads<T>> {
        one(g.clone())
    }
    fn dim_sources(&self, inputs: &[Spec], _output: &Spec) -> DimSources {
        (0..inputs[0].rank()).map(|d| smallvec::smallvec![(0, d)]).collect()
    }
    fn result_axes(&self) -> Option<&[Vec<String>]> {
        Some(&self.axes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, module};
    use super::*;

    #[test]
    fn shard_is_a_shardy_constraint_on_the_module_mesh() {
        let op = Shard { axes: vec![vec![], vec!["data".into(), "model".into()]] };
        assert_eq!(op.attrs(), "P(None, (\"data\", \"model\"))");
        let m = module(op, &[f32s(&[4, 8, 2])]);
        assert!(
            m.contains(
                "\"sdy.sharding_constraint\"(%arg0) {sharding = #sdy.sharding<@mesh, [{}, {\"data\", \"model\"}, {}]>} : (tensor<4x8x2xf32>) -> tensor<4x8x2xf32>"
            ),
            "{m}"
        );
    }
}
