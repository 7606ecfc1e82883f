//! How a program is compiled: the [`Tier`] (quick or optimized) and the serialized
//! `CompileOptionsProto` each compile passes, hand-encoded (the disk cache keys on the bytes).

/// How hard XLA optimizes a program. A key's first compile is `Quick` (XLA's backend
/// optimization level 0, no fusion emitters: a one-op program compiles in about a third of
/// the time, and runs large elementwise ops several times slower); a key
/// that turns hot is compiled again `Optimized` (XLA's default) in the background and
/// swapped in, as are compiled functions from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Tier {
    /// XLA's backend optimization level 0, no fusion emitters: fast to compile.
    Quick,
    #[default]
    /// XLA's default optimization.
    Optimized,
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Quick => "quick",
            Tier::Optimized => "optimized",
        })
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// One `env_option_overrides` (7) entry of a `CompileOptionsProto`: map<string,
/// OptionOverrideProto> entries {1 key, 2 value}; the value's `bool_field` is 2, its
/// `int_field` 3.
fn flag(out: &mut Vec<u8>, name: &str, value_tag: u8, value: u64) {
    let mut entry = Vec::new();
    field(&mut entry, 0x0a, name.as_bytes());
    let mut v = vec![value_tag];
    varint(&mut v, value);
    field(&mut entry, 0x12, &v);
    field(out, 0x3a, &entry);
}

/// Adds to `options` (from [`compile_options`]) XLA:CPU's YNNPACK library fusions for
/// reductions: `xla_cpu_experimental_ynn_fusion_type` = `LIBRARY_FUSION_TYPE_REDUCE` (enum
/// value 3). The CPU plugin (xla-cpu-pjrt 0.0.1) leaves the list empty by default; newer XLA
/// (jaxlib 0.10) turns it on with YNNPACK dots. On the GPT training step of
/// peers/bench_models.py it takes the compiled step from ~17 to ~12 ms on 2 cores, as fast as
/// the JAX program compiled by the same plugin. CPU programs only: other plugins may not know
/// the option.
pub fn add_cpu_reduce_fusions(options: &mut Vec<u8>) {
    flag(options, "xla_cpu_experimental_ynn_fusion_type", 0x18, 3);
}

/// Serialized `CompileOptionsProto` (hand-encoded protobuf; field numbers in comments) for a
/// program compiled at `tier`: on one device (`spmd` `None`) compiled portable, so one
/// executable runs on any device of the client (`execute_device`); or, for an SPMD program
/// over `spmd.len()` partitions, partition `i` on the device with global id `spmd[i]`: one
/// replica, SPMD partitioning with the Shardy partitioner, that device assignment, not
/// portable (a portable executable refuses both). Always with NaN-propagating min/max (XLA's
/// fast default drops NaN in max/min: max(1, NaN) = 1; torch propagates it). Every compile
/// uses these bytes and the disk cache keys on them, so changing them recompiles.
pub fn compile_options(tier: Tier, spmd: Option<&[i32]>) -> Vec<u8> {
    let mut out = Vec::new();
    match spmd {
        None => {
            // 3 `executable_build_options` {4 `num_replicas`: 1, 5 `num_partitions`: 1} (an
            // empty proto aborts inside XLA); 4 `compile_portable_executable`: true.
            field(&mut out, 0x1a, &[0x20, 0x01, 0x28, 0x01]);
            out.extend_from_slice(&[0x20, 0x01]);
        }
        Some(ids) => {
            // `DeviceAssignmentProto` {1 `replica_count`, 2 `computation_count`, 3
            // `computation_devices` {1 `replica_device_ids`}}.
            let n = ids.len() as u64;
            let mut assignment = vec![0x08, 0x01, 0x10];
            varint(&mut assignment, n);
            for &id in ids {
                let mut device = vec![0x08];
                varint(&mut device, id as i64 as u64);
                field(&mut assignment, 0x1a, &device);
            }
            // `ExecutableBuildOptionsProto` {4 `num_replicas`, 5 `num_partitions`, 6
            // `use_spmd_partitioning`, 9 `device_assignment`, 19 `use_shardy_partitioner`}.
            let mut build = vec![0x20, 0x01, 0x28];
            varint(&mut build, n);
            build.extend_from_slice(&[0x30, 0x01]);
            field(&mut build, 0x4a, &assignment);
            build.extend_from_slice(&[0x98, 0x01, 0x01]);
            field(&mut out, 0x1a, &build);
        }
    }
    flag(&mut out, "xla_cpu_enable_fast_min_max", 0x10, 0);
    if tier == Tier::Quick {
        // A one-op add, measured under load: 30 ms optimized, 25 at level 0, 11 at level 0
        // without the MLIR fusion emitters (XLA's older LLVM IR emitters then).
        flag(&mut out, "xla_backend_optimization_level", 0x18, 0);
        flag(&mut out, "xla_cpu_use_fusion_emitters", 0x10, 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_options_encode_each_tier() {
        // Optimized on one device: the bytes every earlier release compiled with (so their
        // persistent caches stay valid).
        let optimized = compile_options(Tier::Optimized, None);
        let before =
            b"\x1a\x04\x20\x01\x28\x01\x20\x01\x3a\x21\x0a\x1bxla_cpu_enable_fast_min_max\x12\x02\x10\x00";
        assert_eq!(optimized, before);
        // Quick: the same plus `xla_backend_optimization_level` = int 0 and
        // `xla_cpu_use_fusion_emitters` = false.
        let quick = compile_options(Tier::Quick, None);
        assert!(quick.starts_with(before));
        let level = b"\x3a\x24\x0a\x1exla_backend_optimization_level\x12\x02\x18\x00";
        assert!(quick.windows(level.len()).any(|w| w == level), "{quick:?}");
        let emitters = b"\x0a\x1bxla_cpu_use_fusion_emitters\x12\x02\x10\x00";
        assert!(quick.windows(emitters.len()).any(|w| w == emitters), "{quick:?}");
        // SPMD: 4 partitions, Shardy on, not portable.
        let spmd = compile_options(Tier::Optimized, Some(&[0, 1, 2, 3]));
        assert!(spmd.windows(3).any(|w| w == [0x98, 0x01, 0x01]) && !spmd.starts_with(&before[..8]));
    }
}
