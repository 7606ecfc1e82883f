//! Device buffers (read back, copied, awaited) and the completion events that say when an
//! upload, a copy or an execution has finished on the device.

use std::sync::Arc;

use super::{ffi, invalid_argument, slice_from, Api, Client, DeviceInfo, Result};

/// A completion event; awaited at most once, destroyed on drop.
pub struct Event<'a> {
    api: &'a Api,
    raw: *mut ffi::PJRT_Event,
}

impl<'a> Event<'a> {
    /// Takes ownership of an event (none for null).
    ///
    /// # Safety
    /// `raw` is null or a live event of `api`'s plugin that nothing else destroys.
    pub(super) unsafe fn wrap(api: &'a Api, raw: *mut ffi::PJRT_Event) -> Option<Event<'a>> {
        (!raw.is_null()).then_some(Event { api, raw })
    }

    /// Blocks until the event fires; returns the error it carries, if any.
    pub fn wait(&self) -> Result<()> {
        let mut args = ffi::PJRT_Event_Await_Args::new();
        args.event = self.raw;
        call!(self.api, PJRT_Event_Await, &mut args)
    }
}

impl Event<'_> {
    /// Calls `f` with the event's outcome once it is ready (at once, on this thread, if it
    /// already is; else on a plugin thread). The event itself may be dropped right after.
    pub fn on_ready<F: FnOnce(Result<()>) + Send + 'static>(self, api: &Arc<Api>, f: F) -> Result<()> {
        struct Pending<F> {
            api: Arc<Api>,
            f: F,
        }
        unsafe extern "C" fn fire<F: FnOnce(Result<()>)>(
            error: *mut ffi::PJRT_Error,
            user_arg: *mut std::ffi::c_void,
        ) {
            // SAFETY: `user_arg` is the Box leaked below, handed to exactly one call.
            let pending = unsafe { Box::from_raw(user_arg as *mut Pending<F>) };
            // SAFETY: the callback owns `error` (null on success), from `pending.api`'s plugin.
            let outcome = unsafe { pending.api.take_error(error, "PJRT_Event_OnReady") };
            (pending.f)(outcome);
        }
        // The callback frees the event's error through `api`: it must be this event's plugin.
        assert!(std::ptr::eq(Arc::as_ptr(api), self.api), "Event::on_ready given another plugin's Api");
        let user_arg = Box::into_raw(Box::new(Pending { api: api.clone(), f })) as *mut std::ffi::c_void;
        let mut args = ffi::PJRT_Event_OnReady_Args::new();
        args.event = self.raw;
        args.callback = Some(fire::<F>);
        args.user_arg = user_arg;
        let registered = call!(self.api, PJRT_Event_OnReady, &mut args);
        if registered.is_err() {
            // Not registered: the callback will never run, so free its state here.
            // SAFETY: the Box leaked above, which no callback received.
            drop(unsafe { Box::from_raw(user_arg as *mut Pending<F>) });
        }
        registered
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Event_Destroy_Args::new();
        args.event = self.raw;
        let _ = call!(self.api, PJRT_Event_Destroy, &mut args);
    }
}

/// A device buffer; destroyed on drop.
pub struct Buffer {
    pub(super) client: Arc<Client>,
    pub(super) raw: *mut ffi::PJRT_Buffer,
}

// SAFETY: PJRT buffers may be used and destroyed from any thread.
unsafe impl Send for Buffer {}
// SAFETY: as for Send; every method takes the buffer read-only.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// The client that owns the buffer.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The buffer's element type.
    pub fn element_type(&self) -> Result<ffi::BufferType> {
        let mut args = ffi::PJRT_Buffer_ElementType_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_ElementType, &mut args)?;
        Ok(args.type_)
    }

    /// The buffer's dimensions (empty for a scalar).
    pub fn dims(&self) -> Result<Vec<i64>> {
        let mut args = ffi::PJRT_Buffer_Dimensions_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_Dimensions, &mut args)?;
        // SAFETY: the buffer owns `num_dims` dims (none, maybe a null pointer, for a scalar).
        Ok(unsafe { slice_from(args.dims, args.num_dims) }.to_vec())
    }

    /// Bytes the buffer takes on its device.
    pub fn on_device_size(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_OnDeviceSizeInBytes_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_OnDeviceSizeInBytes, &mut args)?;
        Ok(args.on_device_size_in_bytes)
    }

    /// Whether the buffer's memory is gone: donated to an execution (which wrote an output
    /// there) or deleted.
    pub fn is_deleted(&self) -> Result<bool> {
        let mut args = ffi::PJRT_Buffer_IsDeleted_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_IsDeleted, &mut args)?;
        Ok(args.is_deleted)
    }

    /// The address of the buffer's memory on its device (for the CPU, in this process): two
    /// buffers at one address share their memory, as a donated input and the output written
    /// into it do.
    pub fn device_address(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_UnsafePointer_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_UnsafePointer, &mut args)?;
        Ok(args.buffer_pointer)
    }

    /// Waits until the buffer's contents are computed; returns the error of the computation
    /// that produces it, if it failed.
    pub fn wait_ready(&self) -> Result<()> {
        let mut args = ffi::PJRT_Buffer_ReadyEvent_Args::new();
        args.buffer = self.raw;
        call!(&self.client.api, PJRT_Buffer_ReadyEvent, &mut args)?;
        // SAFETY: the event is new and ours to destroy.
        match unsafe { Event::wrap(&self.client.api, args.event) } {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// Copies the buffer into `dst` (dense, row-major) and waits for the copy. A `dst` shorter
    /// than the buffer is refused here (for whole-byte types), whatever the plugin checks.
    pub fn to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return self.wait_ready();
        }
        if let Some(size) = ffi::element_bytes(self.element_type()?) {
            let needed =
                self.dims()?.iter().try_fold(size, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
            if needed.is_none_or(|n| dst.len() < n) {
                let message = format!("{} bytes of host memory for a buffer of {needed:?} bytes", dst.len());
                return Err(invalid_argument("PJRT_Buffer_ToHostBuffer", message));
            }
        }
        let mut args = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        args.src = self.raw;
        args.dst = dst.as_mut_ptr() as *mut _;
        args.dst_size = dst.len();
        call!(&self.client.api, PJRT_Buffer_ToHostBuffer, &mut args)?;
        // SAFETY: the event is new and ours to destroy.
        match unsafe { Event::wrap(&self.client.api, args.event) } {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// Copies the buffer to another device of the same client.
    pub fn copy_to_device(&self, device: &DeviceInfo) -> Result<Buffer> {
        self.client.check_device(device, "PJRT_Buffer_CopyToDevice")?;
        let mut args = ffi::PJRT_Buffer_CopyToDevice_Args::new();
        args.buffer = self.raw;
        args.dst_device = device.raw;
        call!(&self.client.api, PJRT_Buffer_CopyToDevice, &mut args)?;
        Ok(Buffer { client: self.client.clone(), raw: args.dst_buffer })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Buffer_Destroy_Args::new();
        args.buffer = self.raw;
        let _ = call!(&self.client.api, PJRT_Buffer_Destroy, &mut args);
    }
}
