//! A client of a plugin: its devices (and their allocator figures), compiling and loading
//! executables, and uploading host arrays as buffers. Handles made here carry their client,
//! so that no device or buffer of another client reaches this one's plugin.

use std::ffi::{c_char, CString};
use std::ptr;
use std::sync::Arc;

use super::{ffi, invalid_argument, slice_from, str_from, Api, Buffer, Event, Executable, Result};

/// A value for `PJRT_Client_Create`'s options.
#[derive(Debug, Clone)]
pub enum OptionValue {
    /// An integer option.
    Int(i64),
    /// A boolean option.
    Bool(bool),
    /// A string option.
    Str(String),
}

/// One addressable device of a client.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Only code in this module dereferences it, and only after checking the device belongs
    /// to the client in use ([`Client::owns`]).
    pub(super) raw: *mut ffi::PJRT_Device,
    /// Global device id.
    pub id: i32,
    /// The hardware's own id for the device (e.g. the CUDA device number).
    pub local_hardware_id: i32,
    /// Device kind as the plugin names it (e.g. "cpu", "TPU v4").
    pub kind: String,
    /// The plugin's description of the device (`PJRT_DeviceDescription_ToString`).
    pub description: String,
}

/// A device's allocator figures (`PJRT_Device_MemoryStats`); `None` where the plugin leaves
/// one out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceMemoryStats {
    /// Bytes allocated now.
    pub bytes_in_use: u64,
    /// Most bytes allocated at once so far.
    pub peak_bytes_in_use: Option<u64>,
    /// Bytes the allocator may hand out in all.
    pub bytes_limit: Option<u64>,
    /// The largest single allocation so far.
    pub largest_alloc_size: Option<u64>,
    /// Allocations made.
    pub num_allocs: Option<u64>,
}

/// A PJRT client; destroyed when the last buffer, executable and handle are gone.
pub struct Client {
    /// The plugin the client came from.
    pub api: Arc<Api>,
    raw: *mut ffi::PJRT_Client,
    /// The platform's name (`cpu`, `tpu`, `cuda`).
    pub platform_name: String,
    /// The platform's version string.
    pub platform_version: String,
    /// The client's addressable devices.
    pub devices: Vec<DeviceInfo>,
}

// SAFETY: a PJRT client may be used from any thread (the C API is thread-safe).
unsafe impl Send for Client {}
// SAFETY: as for Send; nothing here mutates a client after it is made.
unsafe impl Sync for Client {}

impl Client {
    /// Creates a client of `api` with the given `PJRT_Client_Create` options.
    pub fn create(api: Arc<Api>, options: &[(&str, OptionValue)]) -> Result<Arc<Client>> {
        // Keep option names and string values alive for the call.
        let names: Vec<CString> = options.iter().map(|(n, _)| CString::new(*n).unwrap()).collect();
        let strs: Vec<CString> = options
            .iter()
            .map(|(_, v)| match v {
                OptionValue::Str(s) => CString::new(s.as_str()).unwrap(),
                _ => CString::default(),
            })
            .collect();
        let values: Vec<ffi::PJRT_NamedValue> = options
            .iter()
            .enumerate()
            .map(|(i, (n, v))| {
                let (type_, value, value_size) = match v {
                    OptionValue::Int(x) => {
                        (ffi::NAMED_VALUE_INT64, ffi::NamedValueUnion { int64_value: *x }, 1)
                    }
                    OptionValue::Bool(b) => {
                        (ffi::NAMED_VALUE_BOOL, ffi::NamedValueUnion { bool_value: *b }, 1)
                    }
                    OptionValue::Str(s) => (
                        ffi::NAMED_VALUE_STRING,
                        ffi::NamedValueUnion { string_value: strs[i].as_ptr() },
                        s.len(),
                    ),
                };
                ffi::PJRT_NamedValue {
                    struct_size: std::mem::size_of::<ffi::PJRT_NamedValue>(),
                    extension_start: ptr::null_mut(),
                    name: names[i].as_ptr(),
                    name_size: n.len(),
                    type_,
                    value,
                    value_size,
                }
            })
            .collect();
        let mut args = ffi::PJRT_Client_Create_Args::new();
        args.create_options = values.as_ptr();
        args.num_options = values.len();
        call!(&api, PJRT_Client_Create, &mut args)?;
        let mut client = Client {
            api,
            raw: args.client,
            platform_name: String::new(),
            platform_version: String::new(),
            devices: Vec::new(),
        };
        let mut name = ffi::PJRT_Client_PlatformName_Args::new();
        name.client = client.raw;
        call!(&client.api, PJRT_Client_PlatformName, &mut name)?;
        // SAFETY: the name is owned by the live client.
        client.platform_name = unsafe { str_from(name.platform_name, name.platform_name_size) };
        let mut ver = ffi::PJRT_Client_PlatformVersion_Args::new();
        ver.client = client.raw;
        if call!(&client.api, PJRT_Client_PlatformVersion, &mut ver).is_ok() {
            // SAFETY: as above.
            client.platform_version = unsafe { str_from(ver.platform_version, ver.platform_version_size) };
        }
        client.devices = client.list_devices()?;
        Ok(Arc::new(client))
    }

    fn list_devices(&self) -> Result<Vec<DeviceInfo>> {
        let mut args = ffi::PJRT_Client_AddressableDevices_Args::new();
        args.client = self.raw;
        call!(&self.api, PJRT_Client_AddressableDevices, &mut args)?;
        // SAFETY: the client owns the device array for its lifetime.
        let raws = unsafe { slice_from(args.addressable_devices, args.num_addressable_devices) };
        let mut out = Vec::with_capacity(raws.len());
        for &raw in raws {
            let mut d = ffi::PJRT_Device_GetDescription_Args::new();
            d.device = raw;
            call!(&self.api, PJRT_Device_GetDescription, &mut d)?;
            let mut id = ffi::PJRT_DeviceDescription_Id_Args::new();
            id.device_description = d.device_description;
            call!(&self.api, PJRT_DeviceDescription_Id, &mut id)?;
            let mut kind = ffi::PJRT_DeviceDescription_Kind_Args::new();
            kind.device_description = d.device_description;
            call!(&self.api, PJRT_DeviceDescription_Kind, &mut kind)?;
            let mut s = ffi::PJRT_DeviceDescription_ToString_Args::new();
            s.device_description = d.device_description;
            call!(&self.api, PJRT_DeviceDescription_ToString, &mut s)?;
            let mut hw = ffi::PJRT_Device_LocalHardwareId_Args::new();
            hw.device = raw;
            let local_hardware_id = match call!(&self.api, PJRT_Device_LocalHardwareId, &mut hw) {
                Ok(()) => hw.local_hardware_id,
                Err(_) => id.id,
            };
            out.push(DeviceInfo {
                raw,
                id: id.id,
                local_hardware_id,
                // SAFETY: both strings are owned by the device, which lives as the client.
                kind: unsafe { str_from(kind.device_kind, kind.device_kind_size) },
                // SAFETY: as above.
                description: unsafe { str_from(s.to_string, s.to_string_size) },
            });
        }
        Ok(out)
    }

    /// Whether `device` is one of this client's devices (a device of another client, or of
    /// a destroyed one, must never reach this client's plugin).
    #[inline]
    pub fn owns(&self, device: &DeviceInfo) -> bool {
        self.devices.iter().any(|d| d.raw == device.raw)
    }

    pub(super) fn check_device(&self, device: &DeviceInfo, function: &'static str) -> Result<()> {
        if self.owns(device) {
            return Ok(());
        }
        Err(invalid_argument(
            function,
            format!("device {} ({}) is not a device of this client", device.id, device.kind),
        ))
    }

    /// What the plugin's allocator reports for `device` (TPU and GPU plugins do; the CPU
    /// plugin answers UNIMPLEMENTED, an error here).
    pub fn memory_stats(&self, device: &DeviceInfo) -> Result<DeviceMemoryStats> {
        self.check_device(device, "PJRT_Device_MemoryStats")?;
        let mut args = ffi::PJRT_Device_MemoryStats_Args::new();
        args.device = device.raw;
        call!(&self.api, PJRT_Device_MemoryStats, &mut args)?;
        let set = |v: i64, is_set: bool| is_set.then_some(v.max(0) as u64);
        Ok(DeviceMemoryStats {
            bytes_in_use: args.bytes_in_use.max(0) as u64,
            peak_bytes_in_use: set(args.peak_bytes_in_use, args.peak_bytes_in_use_is_set),
            bytes_limit: set(args.bytes_limit, args.bytes_limit_is_set),
            largest_alloc_size: set(args.largest_alloc_size, args.largest_alloc_size_is_set),
            num_allocs: set(args.num_allocs, args.num_allocs_is_set),
        })
    }

    /// Compiles a program (`format` "mlir": StableHLO text or bytecode) with serialized
    /// `CompileOptionsProto` bytes.
    pub fn compile(self: &Arc<Self>, code: &str, options: &[u8]) -> Result<Executable> {
        let format = b"mlir";
        let program = ffi::PJRT_Program {
            struct_size: std::mem::size_of::<ffi::PJRT_Program>(),
            extension_start: ptr::null_mut(),
            code: code.as_ptr() as *mut c_char,
            code_size: code.len(),
            format: format.as_ptr() as *const c_char,
            format_size: format.len(),
        };
        let mut args = ffi::PJRT_Client_Compile_Args::new();
        args.client = self.raw;
        args.program = &program;
        args.compile_options = options.as_ptr() as *const c_char;
        args.compile_options_size = options.len();
        call!(&self.api, PJRT_Client_Compile, &mut args)?;
        // SAFETY: a successful compile hands us a new loaded executable of this client.
        unsafe { Executable::wrap(self, args.executable) }
    }

    /// Loads an executable serialized by [`Executable::serialize`].
    pub fn deserialize(self: &Arc<Self>, bytes: &[u8]) -> Result<Executable> {
        let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
        args.client = self.raw;
        args.serialized_executable = bytes.as_ptr() as *const c_char;
        args.serialized_executable_size = bytes.len();
        call!(&self.api, PJRT_Executable_DeserializeAndLoad, &mut args)?;
        // SAFETY: a successful load hands us a new loaded executable of this client.
        unsafe { Executable::wrap(self, args.loaded_executable) }
    }

    /// Copies a dense row-major host array to `device`. `data` must hold exactly the bytes of
    /// `dims` × the element size of `ty` (checked: the plugin would read past a shorter one).
    pub fn buffer_from_host(
        self: &Arc<Self>,
        data: &[u8],
        ty: ffi::BufferType,
        dims: &[i64],
        device: &DeviceInfo,
    ) -> Result<Buffer> {
        const F: &str = "PJRT_Client_BufferFromHostBuffer";
        self.check_device(device, F)?;
        let expected = ffi::element_bytes(ty)
            .and_then(|size| dims.iter().try_fold(size, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?)));
        if expected != Some(data.len()) {
            let message =
                format!("{} bytes of host data for buffer type {ty} with dims {dims:?}", data.len());
            return Err(invalid_argument(F, message));
        }
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        args.client = self.raw;
        // A non-null pointer even for zero bytes: some plugins reject null data.
        args.data = if data.is_empty() { [0u8; 8].as_ptr() as *const _ } else { data.as_ptr() as *const _ };
        args.type_ = ty;
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.host_buffer_semantics = ffi::HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL;
        args.device = device.raw;
        call!(&self.api, PJRT_Client_BufferFromHostBuffer, &mut args)?;
        let buffer = Buffer { client: self.clone(), raw: args.buffer };
        // With "immutable only during call" the host data is already copied; just free it.
        // SAFETY: the event is new and ours to destroy.
        drop(unsafe { Event::wrap(&self.api, args.done_with_host_buffer) });
        Ok(buffer)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        let _ = call!(&self.api, PJRT_Client_Destroy, &mut args);
    }
}
