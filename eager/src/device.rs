//! Device names: a kind (cpu, tpu, cuda) and an index, printed and parsed as `tpu:0`.

use std::fmt;
use std::str::FromStr;

/// A kind of XLA device, each reached through its own PJRT plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A Google TPU.
    Tpu,
    /// An NVIDIA GPU.
    Cuda,
}

impl DeviceKind {
    /// Every device kind.
    pub const ALL: [DeviceKind; 3] = [DeviceKind::Cpu, DeviceKind::Tpu, DeviceKind::Cuda];

    /// The kind's lowercase name: `cpu`, `tpu`, `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Tpu => "tpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(DeviceKind::Cpu),
            "tpu" => Ok(DeviceKind::Tpu),
            "cuda" | "gpu" => Ok(DeviceKind::Cuda),
            _ => Err(format!("unknown device kind {s:?} (expected cpu, tpu or cuda)")),
        }
    }
}

/// One device: `cpu:0`, `tpu:3`, `cuda:1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Device {
    /// The device's kind.
    pub kind: DeviceKind,
    /// Its index among the devices of its kind.
    pub index: usize,
}

impl Device {
    /// Device `index` of `kind`.
    pub const fn new(kind: DeviceKind, index: usize) -> Device {
        Device { kind, index }
    }
    /// The host CPU, `cpu:0`.
    pub const fn cpu() -> Device {
        Device::new(DeviceKind::Cpu, 0)
    }
    /// TPU `index`.
    pub const fn tpu(index: usize) -> Device {
        Device::new(DeviceKind::Tpu, index)
    }
    /// CUDA GPU `index`.
    pub const fn cuda(index: usize) -> Device {
        Device::new(DeviceKind::Cuda, index)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.index)
    }
}

impl FromStr for Device {
    type Err = String;
    /// `cpu`, `cpu:1`, `tpu:0`, `cuda`, `gpu:0`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, index) = match s.split_once(':') {
            Some((k, i)) => (k, i.parse().map_err(|_| format!("bad device index in {s:?}"))?),
            None => (s, 0),
        };
        Ok(Device::new(kind.parse()?, index))
    }
}
