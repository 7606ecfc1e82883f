//! A thin safe layer over the PJRT C API: the plugin's function table, client, devices,
//! buffers, executables and events. Every handle is freed on drop; every C error becomes a
//! [`PjrtError`] carrying PJRT's code and message. Nothing here knows about ops or tensors.
//! Raw PJRT pointers never leave this module: safe callers pass handles ([`Buffer`],
//! [`DeviceInfo`]), which are checked to belong to the client they are used with.

pub mod ffi;

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Arc;

use smallvec::SmallVec;

/// An error returned by a PJRT call (or a function the plugin does not provide).
#[derive(Debug, Clone, thiserror::Error)]
#[error("PJRT {function} failed ({}): {message}", code_name(*.code))]
pub struct PjrtError {
    /// PJRT's error code (`PJRT_Error_Code`, the absl status codes); stable across plugins.
    pub code: i32,
    /// The plugin's error message.
    pub message: String,
    /// The C API function that failed.
    pub function: &'static str,
}

/// Name of a `PJRT_Error_Code`.
pub fn code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN_CODE")
}

/// Error code a missing function is reported with.
const UNIMPLEMENTED: i32 = 12;
/// Error code of a call refused before it reaches the plugin (a handle of another client, a
/// host array of the wrong size).
const INVALID_ARGUMENT: i32 = 3;

fn invalid_argument(function: &'static str, message: String) -> PjrtError {
    PjrtError { code: INVALID_ARGUMENT, message, function }
}

/// A result whose error is a [`PjrtError`].
pub type Result<T> = std::result::Result<T, PjrtError>;

/// Calls one function of the table: checks that the plugin's table is long enough to hold it
/// and that it is set, then turns a returned `PJRT_Error*` into a [`PjrtError`].
macro_rules! call {
    ($api:expr, $func:ident, $args:expr) => {{
        let api: &Api = $api;
        let table = api.table();
        let offset = std::mem::offset_of!(ffi::PJRT_Api, $func);
        let f = if offset < table.struct_size { table.$func } else { None };
        match f {
            Some(f) => {
                // SAFETY: the args struct mirrors the header (the ffi layout test) and lives
                // for the whole call; its pointers are set by the callers in this module.
                let err = unsafe { f($args) };
                // SAFETY: a PJRT function returns null or a fresh error the caller owns.
                unsafe { api.take_error(err, stringify!($func)) }
            }
            None => Err(PjrtError {
                code: UNIMPLEMENTED,
                message: "this plugin does not provide the function".into(),
                function: stringify!($func),
            }),
        }
    }};
}

/// A loaded plugin: the dlopen handle and its `PJRT_Api` table.
pub struct Api {
    table: *const ffi::PJRT_Api,
    /// The plugin file it was loaded from.
    pub path: PathBuf,
    /// The PJRT C API version the plugin speaks (major, minor).
    pub version: (i32, i32),
    // Never dlclosed: XLA plugins keep threads and static destructors that crash on unload.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

// SAFETY: the PJRT C API is thread-safe by contract; the table is immutable after load.
unsafe impl Send for Api {}
// SAFETY: as for Send.
unsafe impl Sync for Api {}

/// Why a plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load PJRT plugin {path}: {source} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// dlopen failed.
    Dlopen {
        /// The plugin file.
        path: PathBuf,
        /// The loader's error.
        source: libloading::Error,
    },
    #[error("{path} is not a PJRT plugin (no GetPjrtApi symbol): {source} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// The file has no `GetPjrtApi` symbol.
    NoSymbol {
        /// The file.
        path: PathBuf,
        /// The loader's error.
        source: libloading::Error,
    },
    #[error(
        "{path}: GetPjrtApi returned null (see \"Devices and plugins\" in the guide: docs/src/devices.md)"
    )]
    /// `GetPjrtApi` returned null.
    NullApi {
        /// The plugin file.
        path: PathBuf,
    },
    #[error("{path} speaks PJRT C API {major}.{minor}; eager supports major version {} (see \"Devices and plugins\" in the guide: docs/src/devices.md)", ffi::API_MAJOR)]
    /// The plugin speaks a C API major version eager does not.
    Version {
        /// The plugin file.
        path: PathBuf,
        /// Its API major version.
        major: i32,
        /// Its API minor version.
        minor: i32,
    },
    #[error("PJRT plugin {path} failed to initialize: {source} (see \"Devices and plugins\" in the guide: docs/src/devices.md)")]
    /// `PJRT_Plugin_Initialize` failed.
    Initialize {
        /// The plugin file.
        path: PathBuf,
        /// The error it returned.
        source: PjrtError,
    },
}

impl Api {
    /// dlopens `path`, reads its table and checks the API major version. Does not initialize.
    pub fn load(path: &Path) -> std::result::Result<Api, LoadError> {
        // SAFETY: loading a shared library runs its initialisers; a PJRT plugin is trusted code.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|source| LoadError::Dlopen { path: path.into(), source })?;
        // SAFETY: GetPjrtApi has this signature in every PJRT plugin.
        let get: libloading::Symbol<ffi::GetPjrtApi> = unsafe { lib.get(b"GetPjrtApi\0") }
            .map_err(|source| LoadError::NoSymbol { path: path.into(), source })?;
        // SAFETY: GetPjrtApi takes no arguments and returns the plugin's static table.
        let table = unsafe { get() };
        if table.is_null() {
            return Err(LoadError::NullApi { path: path.into() });
        }
        // SAFETY: non-null table returned by the plugin, valid for the library's lifetime.
        let v = unsafe { &(*table).pjrt_api_version };
        let version = (v.major_version, v.minor_version);
        if version.0 != ffi::API_MAJOR {
            return Err(LoadError::Version { path: path.into(), major: version.0, minor: version.1 });
        }
        Ok(Api { table, path: path.into(), version, _lib: std::mem::ManuallyDrop::new(lib) })
    }

    /// `PJRT_Plugin_Initialize`; call once per process per plugin.
    pub fn initialize(&self) -> Result<()> {
        let mut args = ffi::PJRT_Plugin_Initialize_Args::new();
        call!(self, PJRT_Plugin_Initialize, &mut args)
    }

    /// The plugin's attributes (`xla_version`, `stablehlo_current_version`, …) as text.
    pub fn attributes(&self) -> Result<Vec<(String, String)>> {
        let mut args = ffi::PJRT_Plugin_Attributes_Args::new();
        call!(self, PJRT_Plugin_Attributes, &mut args)?;
        let mut out = Vec::new();
        // SAFETY: the plugin owns `num_attributes` named values for the process's lifetime.
        let attributes = unsafe { slice_from(args.attributes, args.num_attributes) };
        for nv in attributes {
            // SAFETY: a named value's name is `name_size` bytes the plugin owns.
            let name = unsafe { str_from(nv.name, nv.name_size) };
            // `type_` says which union member the plugin set.
            let value = match nv.type_ {
                // SAFETY: a string member: `value_size` bytes the plugin owns.
                ffi::NAMED_VALUE_STRING => unsafe { str_from(nv.value.string_value, nv.value_size) },
                // SAFETY: the member `type_` names.
                ffi::NAMED_VALUE_INT64 => unsafe { nv.value.int64_value }.to_string(),
                ffi::NAMED_VALUE_INT64_LIST => {
                    // SAFETY: a list member: `value_size` integers the plugin owns.
                    let list = unsafe { slice_from(nv.value.int64_array_value, nv.value_size) };
                    format!("{list:?}")
                }
                // SAFETY: the member `type_` names.
                ffi::NAMED_VALUE_FLOAT => unsafe { nv.value.float_value }.to_string(),
                // SAFETY: the member `type_` names.
                ffi::NAMED_VALUE_BOOL => unsafe { nv.value.bool_value }.to_string(),
                _ => "?".into(),
            };
            out.push((name, value));
        }
        Ok(out)
    }

    fn table(&self) -> &ffi::PJRT_Api {
        // SAFETY: checked non-null at load; lives as long as `_lib`.
        unsafe { &*self.table }
    }

    /// Converts (and frees) a returned error pointer.
    ///
    /// # Safety
    /// `err` is null or an error this plugin returned that nothing has freed; it is freed
    /// here and must not be used afterwards.
    unsafe fn take_error(&self, err: *mut ffi::PJRT_Error, function: &'static str) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let t = self.table();
        let mut code = ffi::PJRT_Error_GetCode_Args::new();
        code.error = err;
        let mut msg = ffi::PJRT_Error_Message_Args::new();
        msg.error = err;
        // The three error functions are required members of every table: no call! lookup.
        if let Some(f) = t.PJRT_Error_GetCode {
            // SAFETY: `err` is a live error of this plugin (the caller's contract).
            let e = unsafe { f(&mut code) };
            if !e.is_null() {
                code.code = 2;
            }
        }
        if let Some(f) = t.PJRT_Error_Message {
            // SAFETY: as above.
            unsafe { f(&mut msg) };
        }
        // SAFETY: the message is `message_size` bytes owned by `err`, which is still alive.
        let message = unsafe { str_from(msg.message, msg.message_size) };
        let mut destroy = ffi::PJRT_Error_Destroy_Args::new();
        destroy.error = err;
        if let Some(f) = t.PJRT_Error_Destroy {
            // SAFETY: `err` is ours to free (the caller's contract) and not used after this.
            unsafe { f(&mut destroy) };
        }
        Err(PjrtError { code: code.code, message, function })
    }
}

/// Copies a (pointer, length) string the plugin owns; null is the empty string.
///
/// # Safety
/// `p` is null, or points to `len` readable bytes that stay unchanged during the call.
unsafe fn str_from(p: *const c_char, len: usize) -> String {
    // SAFETY: the caller's contract, with null handled by `slice_from`.
    let bytes = unsafe { slice_from(p as *const u8, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// A (pointer, length) array the plugin returned, as a slice; null or zero length is empty
/// (plugins may return null for no elements, which `slice::from_raw_parts` does not allow).
///
/// # Safety
/// `p` is null, or points to `len` initialised, aligned `T`s that stay alive and unchanged
/// for `'a`.
unsafe fn slice_from<'a, T>(p: *const T, len: usize) -> &'a [T] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: non-null and the caller's contract.
    unsafe { std::slice::from_raw_parts(p, len) }
}

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
    raw: *mut ffi::PJRT_Device,
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

    fn check_device(&self, device: &DeviceInfo, function: &'static str) -> Result<()> {
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
    unsafe fn wrap(api: &'a Api, raw: *mut ffi::PJRT_Event) -> Option<Event<'a>> {
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
    client: Arc<Client>,
    raw: *mut ffi::PJRT_Buffer,
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

/// A compiled, loaded executable; destroyed on drop.
pub struct Executable {
    client: Arc<Client>,
    raw: *mut ffi::PJRT_LoadedExecutable,
    /// Outputs of one execution.
    pub num_outputs: usize,
}

// SAFETY: loaded executables may be executed concurrently from any thread.
unsafe impl Send for Executable {}
// SAFETY: as for Send.
unsafe impl Sync for Executable {}

impl Executable {
    /// Takes ownership of a loaded executable (destroyed on drop, also when this fails).
    ///
    /// # Safety
    /// `raw` is a live loaded executable of `client` that nothing else destroys.
    unsafe fn wrap(client: &Arc<Client>, raw: *mut ffi::PJRT_LoadedExecutable) -> Result<Executable> {
        let mut exe = Executable { client: client.clone(), raw, num_outputs: 0 };
        exe.num_outputs = exe.with_executable(|api, e| {
            let mut args = ffi::PJRT_Executable_NumOutputs_Args::new();
            args.executable = e;
            call!(api, PJRT_Executable_NumOutputs, &mut args)?;
            Ok(args.num_outputs)
        })?;
        Ok(exe)
    }

    /// Runs `f` with the (unloaded) `PJRT_Executable` view, freed afterwards.
    fn with_executable<T>(&self, f: impl FnOnce(&Api, *mut ffi::PJRT_Executable) -> Result<T>) -> Result<T> {
        let api = &self.client.api;
        let mut args = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
        args.loaded_executable = self.raw;
        call!(api, PJRT_LoadedExecutable_GetExecutable, &mut args)?;
        let out = f(api, args.executable);
        let mut d = ffi::PJRT_Executable_Destroy_Args::new();
        d.executable = args.executable;
        let _ = call!(api, PJRT_Executable_Destroy, &mut d);
        out
    }

    /// Size of the generated code, in bytes.
    pub fn code_size(&self) -> Result<i64> {
        self.with_executable(|api, e| {
            let mut args = ffi::PJRT_Executable_SizeOfGeneratedCodeInBytes_Args::new();
            args.executable = e;
            call!(api, PJRT_Executable_SizeOfGeneratedCodeInBytes, &mut args)?;
            Ok(args.size_in_bytes)
        })
    }

    /// The program as XLA optimized it (for SPMD, after partitioning): a serialized
    /// `HloModuleProto` (format `hlo`).
    pub fn optimized_program(&self) -> Result<Vec<u8>> {
        self.with_executable(|api, e| {
            let format = b"hlo";
            let mut program = ffi::PJRT_Program {
                struct_size: std::mem::size_of::<ffi::PJRT_Program>(),
                extension_start: ptr::null_mut(),
                code: ptr::null_mut(),
                code_size: 0,
                format: format.as_ptr() as *const c_char,
                format_size: format.len(),
            };
            let mut args = ffi::PJRT_Executable_OptimizedProgram_Args::new();
            args.executable = e;
            args.program = &mut program;
            // First the size, then the bytes into a buffer of ours.
            call!(api, PJRT_Executable_OptimizedProgram, &mut args)?;
            let mut code = vec![0u8; program.code_size];
            program.code = code.as_mut_ptr() as *mut c_char;
            args.program = &mut program;
            call!(api, PJRT_Executable_OptimizedProgram, &mut args)?;
            code.truncate(program.code_size);
            Ok(code)
        })
    }

    /// Serializes the executable (for a persistent compile cache).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        self.with_executable(|api, e| {
            let mut args = ffi::PJRT_Executable_Serialize_Args::new();
            args.executable = e;
            call!(api, PJRT_Executable_Serialize, &mut args)?;
            // SAFETY: bytes owned by `serialized_executable` until its deleter runs.
            let bytes = unsafe { slice_from(args.serialized_bytes as *const u8, args.serialized_bytes_size) }
                .to_vec();
            if let Some(del) = args.serialized_executable_deleter {
                // SAFETY: called once, after the last read of the bytes.
                unsafe { del(args.serialized_executable) };
            }
            Ok(bytes)
        })
    }

    /// Executes on `device` with `args` and writes the `num_outputs` new buffers into
    /// `outputs`. Returns as soon as the plugin accepted the work; with `completion`, also
    /// the event that fires when the device finished (carrying the execution's error).
    /// `device` and every argument must belong to this executable's client.
    pub fn execute(
        &self,
        args: &[&Buffer],
        device: &DeviceInfo,
        outputs: &mut SmallVec<[Buffer; 1]>,
        completion: bool,
    ) -> Result<Option<Event<'_>>> {
        const F: &str = "PJRT_LoadedExecutable_Execute";
        self.client.check_device(device, F)?;
        // Inline for up to 4 arguments: no allocation on the dispatch hot path.
        let mut raw_args: SmallVec<[*mut ffi::PJRT_Buffer; 4]> = SmallVec::with_capacity(args.len());
        for (i, b) in args.iter().enumerate() {
            if !Arc::ptr_eq(&b.client, &self.client) {
                return Err(invalid_argument(F, format!("argument {i} is a buffer of another client")));
            }
            raw_args.push(b.raw);
        }
        let mut opts = ffi::PJRT_ExecuteOptions::new();
        let mut raw_out: SmallVec<[*mut ffi::PJRT_Buffer; 2]> =
            smallvec::smallvec![ptr::null_mut(); self.num_outputs];
        let arg_list: *const *mut ffi::PJRT_Buffer = raw_args.as_ptr();
        let out_list: *mut *mut ffi::PJRT_Buffer = raw_out.as_mut_ptr();
        let mut done: *mut ffi::PJRT_Event = ptr::null_mut();
        let mut ex = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        ex.executable = self.raw;
        ex.options = &mut opts;
        ex.argument_lists = &arg_list;
        ex.num_devices = 1;
        ex.num_args = args.len();
        ex.output_lists = &out_list;
        ex.device_complete_events = if completion { &mut done } else { ptr::null_mut() };
        ex.execute_device = device.raw;
        call!(&self.client.api, PJRT_LoadedExecutable_Execute, &mut ex)?;
        outputs.extend(raw_out.into_iter().map(|raw| Buffer { client: self.client.clone(), raw }));
        // SAFETY: the completion event (or null, without `completion`) is new and ours.
        Ok(unsafe { Event::wrap(&self.client.api, done) })
    }

    /// Executes an SPMD program on every device it was compiled for (partition `i` on the
    /// `i`-th device of its device assignment): `args[i]` are partition `i`'s arguments, and
    /// its outputs come back as `outputs[i]`. Returns each partition's completion event.
    pub fn execute_partitioned(
        &self,
        args: &[Vec<&Buffer>],
        outputs: &mut Vec<Vec<Buffer>>,
    ) -> Result<Vec<Event<'_>>> {
        const F: &str = "PJRT_LoadedExecutable_Execute";
        let num_args = args.first().map_or(0, Vec::len);
        let mut raw_args: Vec<Vec<*mut ffi::PJRT_Buffer>> = Vec::with_capacity(args.len());
        for (p, list) in args.iter().enumerate() {
            if list.len() != num_args {
                return Err(invalid_argument(
                    F,
                    format!("partition {p} has {} arguments, not {num_args}", list.len()),
                ));
            }
            let mut raw = Vec::with_capacity(num_args);
            for (i, b) in list.iter().enumerate() {
                if !Arc::ptr_eq(&b.client, &self.client) {
                    return Err(invalid_argument(
                        F,
                        format!("argument {i} of partition {p} is a buffer of another client"),
                    ));
                }
                raw.push(b.raw);
            }
            raw_args.push(raw);
        }
        let n = args.len();
        let arg_lists: Vec<*const *mut ffi::PJRT_Buffer> = raw_args.iter().map(|l| l.as_ptr()).collect();
        let mut raw_out: Vec<Vec<*mut ffi::PJRT_Buffer>> = vec![vec![ptr::null_mut(); self.num_outputs]; n];
        let out_lists: Vec<*mut *mut ffi::PJRT_Buffer> = raw_out.iter_mut().map(|l| l.as_mut_ptr()).collect();
        let mut done: Vec<*mut ffi::PJRT_Event> = vec![ptr::null_mut(); n];
        let mut opts = ffi::PJRT_ExecuteOptions::new();
        // A launch id of its own: collectives of programs in flight at once meet by it (with
        // all launches at 0, partitions of two launches joined one rendezvous and hung).
        static LAUNCHES: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
        opts.launch_id = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed).max(1);
        let mut ex = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        ex.executable = self.raw;
        ex.options = &mut opts;
        ex.argument_lists = arg_lists.as_ptr();
        ex.num_devices = n;
        ex.num_args = num_args;
        ex.output_lists = out_lists.as_ptr();
        ex.device_complete_events = done.as_mut_ptr();
        ex.execute_device = ptr::null_mut();
        call!(&self.client.api, PJRT_LoadedExecutable_Execute, &mut ex)?;
        outputs.extend(
            raw_out
                .into_iter()
                .map(|l| l.into_iter().map(|raw| Buffer { client: self.client.clone(), raw }).collect()),
        );
        // SAFETY: each completion event is new and ours.
        Ok(done.into_iter().filter_map(|e| unsafe { Event::wrap(&self.client.api, e) }).collect())
    }

    /// Executes and blocks until the device finished; returns the execution's error.
    pub fn execute_and_wait(
        &self,
        args: &[&Buffer],
        device: &DeviceInfo,
        outputs: &mut SmallVec<[Buffer; 1]>,
    ) -> Result<()> {
        match self.execute(args, device, outputs, true)? {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// The client that owns the executable.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
        args.executable = self.raw;
        let _ = call!(&self.client.api, PJRT_LoadedExecutable_Destroy, &mut args);
    }
}

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
