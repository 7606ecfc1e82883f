//! One key's program at one tier ([`Program`]): its StableHLO text (an SPMD program over the
//! mesh for a partitioned key), compile options and info; loaded from the persistent cache or
//! compiled, and finished with what the partitioner put in it. What `fetch` (an executable
//! now) and `tiers` (an optimized one in the background) both make.

use std::sync::Arc;

use super::start::Runtime;
use crate::cache::OpKey;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::pjrt::{self, Executable, Tier};
use crate::profiler::OpInfo;
use crate::shape::Spec;

/// One key's program at one tier: its text, compile options and info.
pub(super) struct Program {
    mlir: String,
    options: Vec<u8>,
    pub(super) info: Arc<OpInfo>,
}

impl Program {
    /// `key`'s program at `tier` on `rt`: an error when the op's rule refuses the inputs or
    /// the program needs an array larger than XLA can size.
    pub(super) fn of(rt: &Runtime, key: &OpKey, tier: Tier) -> Result<Program> {
        let output = key.op.infer(&key.inputs)?;
        let info = Arc::new(OpInfo {
            name: key.op.name(),
            attrs: key.op.attrs(),
            inputs: key.inputs.to_vec(),
            output,
            device: key.device,
            mesh: key.partitioned.as_ref().map(|p| crate::profiler::MeshInfo {
                axes: p.mesh.axes().to_vec(),
                devices: p.mesh.devices().to_vec(),
                splits: p.splits.to_vec(),
                collectives: Vec::new(),
            }),
            tier,
        });
        let mut mlir = key.op.emit_module(&key.inputs, &info.output);
        let mut options = pjrt::compile_options(tier, None);
        if let Some(p) = &key.partitioned {
            // One SPMD program over the mesh, each partition on its device.
            let params: Vec<(&Spec, &str)> =
                key.inputs.iter().zip(&p.inputs).map(|(s, h)| (s, h.as_str())).collect();
            let specs: Vec<&Spec> = std::iter::once(&info.output).chain(key.op.more_outputs()).collect();
            let mut results: Vec<(&Spec, &str)> =
                specs.into_iter().zip(&p.outputs).map(|(s, h)| (s, h.as_str())).collect();
            // Index checks, over all the indices, are whole on every device.
            let (check, whole) = (Spec::new(&[2], crate::dtype::DType::I64), crate::ops::Shard::sdy(&[], 1));
            for _ in key.op.index_checks(&key.inputs) {
                results.push((&check, whole.as_str()));
            }
            mlir = crate::ops::emit::partitioned(&mlir, &p.mesh.sdy(), p.mesh.size(), &params, &results);
            let ids: Vec<i32> =
                p.mesh.devices().iter().map(|&d| rt.device(d).map(|i| i.id)).collect::<Result<_>>()?;
            options = pjrt::compile_options(tier, Some(&ids));
        }
        // Whole programs (compiled and fused steps) on the CPU: reductions through YNNPACK.
        if rt.kind == DeviceKind::Cpu && tier == Tier::Optimized && matches!(key.op, Op::Call(_)) {
            pjrt::add_cpu_reduce_fusions(&mut options);
        }
        if let Some(ty) = crate::ops::emit::oversized_array(&mlir) {
            return Err(Error::shape(
                info.name,
                format!(
                    "{} needs an array {ty}: more than XLA can size (at most 2^63 - 1 elements and bytes)",
                    info.signature()
                ),
            ));
        }
        Ok(Program { mlir, options, info })
    }

    /// From the persistent cache, if it holds it.
    pub(super) fn load(&self, rt: &Runtime) -> Option<Executable> {
        rt.disk.as_ref()?.load(&rt.client, &self.mlir, &self.options, &self.info.signature())
    }

    /// Compiled now (and stored in the persistent cache).
    pub(super) fn compile(&self, rt: &Runtime) -> Result<Executable> {
        let signature = self.info.signature();
        let exe = rt
            .client
            .compile(&self.mlir, &self.options)
            .map_err(Error::pjrt(format!("compiling {signature}")))?;
        if let Some(d) = &rt.disk {
            d.store(&exe, &self.mlir, &self.options, &signature);
        }
        Ok(exe)
    }

    /// The executable with its info, and what the partitioner put in an SPMD program to move
    /// data between devices.
    pub(super) fn finish(self, exe: Executable) -> (Arc<Executable>, Arc<OpInfo>) {
        let info = match &self.info.mesh {
            Some(mesh) => {
                let program = exe.optimized_program().unwrap_or_default();
                let mesh =
                    crate::profiler::MeshInfo { collectives: collectives_in(&program), ..mesh.clone() };
                Arc::new(OpInfo { mesh: Some(mesh), ..(*self.info).clone() })
            }
            None => self.info,
        };
        (Arc::new(exe), info)
    }
}

/// The collectives of an optimized program (a serialized `HloModuleProto`), in order: each
/// instruction's opcode is field 2 of its `HloInstructionProto`, a string (tag `0x12`, its
/// length, the bytes), so the opcodes of collectives are found by those bytes.
fn collectives_in(program: &[u8]) -> Vec<String> {
    const COLLECTIVES: &[&str] = &[
        "all-reduce",
        "all-reduce-start",
        "all-gather",
        "all-gather-start",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-permute-start",
        "collective-broadcast",
    ];
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < program.len() {
        if program[i] == 0x12 {
            let len = program[i + 1] as usize;
            if let Some(name) = program.get(i + 2..i + 2 + len) {
                if let Some(c) = COLLECTIVES.iter().find(|c| c.as_bytes() == name) {
                    found.push(c.to_string());
                    i += 2 + len;
                    continue;
                }
            }
        }
        i += 1;
    }
    found
}
