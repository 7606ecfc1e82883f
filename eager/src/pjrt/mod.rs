//! A thin safe layer over the PJRT C API: the plugin's function table, client, devices,
//! buffers, executables and events. Every handle is freed on drop; every C error becomes a
//! [`PjrtError`] carrying PJRT's code and message. Nothing here knows about ops or tensors.
//! Raw PJRT pointers never leave this module: safe callers pass handles ([`Buffer`],
//! [`DeviceInfo`]), which are checked to belong to the client they are used with.
//!
//! Rooms: this file (the error type, the `call!` macro every C call goes through, and the
//! readers of plugin-owned strings and arrays), `api` (loading a plugin), `client` (a client
//! and its devices, compiles, uploads), `buffer` (buffers and completion events),
//! `executable` (running programs), `options` (the serialized compile options and tiers),
//! `ffi` (the C declarations, as `pjrt_c_api.h` has them).

// Before the rooms: `call!` is a textual macro, seen only by modules declared after it.
/// Calls one function of the table: checks that the plugin's table is long enough to hold it
/// and that it is set, then turns a returned `PJRT_Error*` into a [`PjrtError`].
macro_rules! call {
    ($api:expr, $func:ident, $args:expr) => {{
        let api: &$crate::pjrt::Api = $api;
        let table = api.table();
        let offset = std::mem::offset_of!($crate::pjrt::ffi::PJRT_Api, $func);
        let f = if offset < table.struct_size { table.$func } else { None };
        match f {
            Some(f) => {
                // SAFETY: the args struct mirrors the header (the ffi layout test) and lives
                // for the whole call; its pointers are set by the callers in this module.
                let err = unsafe { f($args) };
                // SAFETY: a PJRT function returns null or a fresh error the caller owns.
                unsafe { api.take_error(err, stringify!($func)) }
            }
            None => Err($crate::pjrt::PjrtError {
                code: $crate::pjrt::UNIMPLEMENTED,
                message: "this plugin does not provide the function".into(),
                function: stringify!($func),
            }),
        }
    }};
}

mod api;
mod buffer;
mod client;
mod executable;
pub mod ffi;
mod options;

pub use api::{Api, LoadError};
pub use buffer::{Buffer, Event};
pub use client::{Client, DeviceInfo, DeviceMemoryStats, OptionValue};
pub use executable::Executable;
pub use options::{add_cpu_reduce_fusions, compile_options, Tier};

use std::ffi::c_char;

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
