//! The NVIDIA target: PyPI `jax-cuda12-pjrt` (the CUDA libraries come separately).

use std::path::Path;
use std::time::Duration;

use super::Target;

pub(crate) static TARGET: Target = Target {
    package: "jax-cuda12-pjrt",
    fetch_version: None,
    file_in_package: "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
    hardware,
    prepare_env: || {},
    client_options: Vec::new,
    start_timeout: Duration::from_secs(120),
};

fn hardware() -> Result<(), String> {
    if Path::new("/proc/driver/nvidia/version").exists() || Path::new("/dev/nvidiactl").exists() {
        Ok(())
    } else {
        Err("no NVIDIA GPU on this machine (no NVIDIA driver: /proc/driver/nvidia/version is missing)".into())
    }
}
