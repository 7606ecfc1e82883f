//! Loading a plugin: dlopen, its `PJRT_Api` table, the API version check, its attributes,
//! and turning the error pointers it returns into [`PjrtError`]s (the `call!` macro's end).

use std::path::{Path, PathBuf};

use super::{ffi, slice_from, str_from, PjrtError, Result};

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

    pub(super) fn table(&self) -> &ffi::PJRT_Api {
        // SAFETY: checked non-null at load; lives as long as `_lib`.
        unsafe { &*self.table }
    }

    /// Converts (and frees) a returned error pointer.
    ///
    /// # Safety
    /// `err` is null or an error this plugin returned that nothing has freed; it is freed
    /// here and must not be used afterwards.
    pub(super) unsafe fn take_error(&self, err: *mut ffi::PJRT_Error, function: &'static str) -> Result<()> {
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
