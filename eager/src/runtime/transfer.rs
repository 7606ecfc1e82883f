//! Transfers: host bytes to a device ([`upload`]), a buffer to the host ([`download`], after
//! its op and index checks pass) and to another device of the same plugin
//! ([`copy_to_device`]), each recorded by the profiler.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use super::completion::Completion;
use super::execute::launch_error;
use super::{runtime, Runtime};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::pjrt;
use crate::profiler::{profiler, EventKind, OpInfo};
use crate::shape::Spec;

/// Copies host bytes (dense, row-major, of `spec`) to `device`, recording the transfer.
pub(crate) fn upload(bytes: &[u8], spec: &Spec, device: Device) -> Result<(pjrt::Buffer, Arc<Runtime>)> {
    crate::ops::check_size("from_slice", spec)?;
    if bytes.len() != spec.size_in_bytes() {
        return Err(Error::shape(
            "from_slice",
            format!("{} bytes do not make a {spec} tensor ({} bytes)", bytes.len(), spec.size_in_bytes()),
        ));
    }
    let rt = runtime(device.kind)?;
    let dev = rt.device(device)?;
    let what = || format!("copying {spec} to {device}");
    crate::memory::admit(&what, device, bytes.len() as u64)?;
    let start = Instant::now();
    let dims: SmallVec<[i64; 4]> = spec.shape.iter().map(|&d| d as i64).collect();
    let buffer = rt
        .client
        .buffer_from_host(bytes, spec.dtype.pjrt(), &dims, dev)
        .map_err(|e| launch_error(what, device, bytes.len(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::HostToDevice, "to_device", spec, device, start, ns);
    Ok((buffer, rt))
}

/// A buffer to read, with what a failed read reports: its completion and what made it.
pub(crate) struct Source<'a> {
    pub(crate) buffer: &'a pjrt::Buffer,
    pub(crate) completion: &'a Completion,
    pub(crate) spec: &'a Spec,
    pub(crate) device: Device,
    /// What made it (`exp(f32[4])`), for errors: formatted only when one is reported.
    pub(crate) describe: &'a dyn Fn() -> String,
}

impl Source<'_> {
    /// Waits for the op that makes the buffer (unbooked: that time is its execute, booked by
    /// its completion) and passes its pending index checks.
    fn wait(&self) -> Result<()> {
        self.buffer.wait_ready().map_err(|e| self.completion.read_error(&(self.describe)(), e))?;
        self.completion.verify(&(self.describe)())
    }
}

/// Copies a buffer's bytes to the host, recording the transfer.
pub(crate) fn download(src: &Source) -> Result<Vec<u8>> {
    src.wait()?;
    let start = Instant::now();
    let mut bytes = vec![0u8; src.spec.size_in_bytes()];
    src.buffer.to_host(&mut bytes).map_err(|e| src.completion.read_error(&(src.describe)(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToHost, "to_host", src.spec, src.device, start, ns);
    Ok(bytes)
}

/// Copies a buffer to another device of the same plugin, recording the transfer.
pub(crate) fn copy_to_device(src: &Source, rt: &Runtime, device: Device) -> Result<pjrt::Buffer> {
    let dev = rt.device(device)?;
    src.wait()?;
    let start = Instant::now();
    let buffer =
        src.buffer.copy_to_device(dev).map_err(Error::pjrt(format!("copying {} to {device}", src.spec)))?;
    buffer.wait_ready().map_err(|e| src.completion.read_error(&(src.describe)(), e))?;
    let ns = start.elapsed().as_nanos() as u64;
    record_transfer(EventKind::DeviceToDevice, "to_device", src.spec, device, start, ns);
    Ok(buffer)
}

fn record_transfer(
    kind: EventKind,
    name: &'static str,
    spec: &Spec,
    device: Device,
    start: Instant,
    ns: u64,
) {
    if !crate::profiler::is_enabled() {
        return;
    }
    let info = Arc::new(OpInfo {
        name,
        attrs: String::new(),
        inputs: vec![spec.clone()],
        output: spec.clone(),
        device,
        mesh: None,
        tier: Default::default(),
    });
    profiler().record(kind, &info, None, start, 0, ns, spec.size_in_bytes() as u64);
}
