//! The TPU target: PyPI `libtpu`. Loaded only where a TPU is on the PCI bus, with the cloud
//! metadata probe off, so that a machine without a TPU gets an error in milliseconds.

use std::time::Duration;

use super::Target;

pub(crate) static TARGET: Target = Target {
    package: "libtpu",
    fetch_version: None,
    file_in_package: "libtpu/libtpu.so",
    hardware,
    prepare_env,
    client_options: Vec::new,
    start_timeout: Duration::from_secs(120),
};

/// Google's PCI vendor id, as JAX looks for it.
const GOOGLE_PCI_VENDOR: &str = "0x1ae0";

fn hardware() -> Result<(), String> {
    if std::env::var_os("EAGER_TPU_SKIP_HARDWARE_CHECK").is_some() {
        return Ok(());
    }
    let found = std::fs::read_dir("/sys/bus/pci/devices")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .any(|e| std::fs::read_to_string(e.path().join("vendor")).is_ok_and(|v| v.trim() == GOOGLE_PCI_VENDOR))
        })
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(format!(
            "no TPU on this machine (no PCI device with Google's vendor id {GOOGLE_PCI_VENDOR}); use the cpu device, \
             or set EAGER_TPU_SKIP_HARDWARE_CHECK=1 to try libtpu anyway"
        ))
    }
}

/// Without this, libtpu's initialisation queries the GCE metadata server for minutes.
fn prepare_env() {
    if std::env::var_os("TPU_SKIP_MDS_QUERY").is_none() {
        std::env::set_var("TPU_SKIP_MDS_QUERY", "1");
    }
}
