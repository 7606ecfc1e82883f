//! Hand-written FFI for the part of `pjrt_c_api.h` (API 0.81, vendored in `include/`) that
//! eager uses. Every argument struct starts with `struct_size`, which plugins use to tell
//! which fields the caller knows; structs here mirror the header field for field, which the
//! `layout` test checks for every struct against the parsed header.
// Mirrors pjrt_c_api.h field for field; the header documents each.
#![allow(missing_docs)]
#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::ffi::{c_char, c_int, c_void};

pub const API_MAJOR: c_int = 0;
pub const API_MINOR: c_int = 81;

macro_rules! opaque {
    ($($name:ident),*) => { $( #[repr(C)] pub struct $name { _private: [u8; 0] } )* };
}
opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_Memory,
    PJRT_DeviceDescription,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_SerializedExecutable,
    PJRT_ExecuteContext,
    PJRT_Extension_Base
);

/// Declares a `#[repr(C)]` struct that mirrors the header field for field and, for the layout
/// test, lists each field's name, offset and size (so no field can escape the check).
macro_rules! c_struct {
    ($(#[$meta:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name {
            $(pub $field: $ty),*
        }
        #[cfg(test)]
        impl layout::Fields for $name {
            const NAME: &'static str = stringify!($name);
            fn fields() -> Vec<layout::Field> {
                vec![$(layout::Field {
                    name: stringify!($field),
                    offset: std::mem::offset_of!($name, $field),
                    size: std::mem::size_of::<$ty>(),
                }),*]
            }
        }
    };
}

/// Declares an args struct ([`c_struct!`] with `struct_size` and `extension_start` first) and
/// a `new()` that zero-fills it and sets `struct_size` (how the header's `*_STRUCT_SIZE` works).
macro_rules! args {
    ($name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        c_struct!($name {
            struct_size: usize,
            extension_start: *mut PJRT_Extension_Base,
            $($field: $ty),*
        });
        // No Default: `new()` is not a neutral value, it stamps `struct_size`.
        #[allow(clippy::new_without_default)]
        impl $name {
            pub fn new() -> Self {
                // SAFETY: every field is a plain integer, bool, enum-as-int, raw pointer or
                // nullable function pointer; all-zero is their "unset" value in the C API.
                let mut s: Self = unsafe { std::mem::zeroed() };
                s.struct_size = std::mem::size_of::<Self>();
                s
            }
        }
    };
}

pub type ErrorCode = c_int;
pub type BufferType = c_int;

/// Bytes per element of a `PJRT_Buffer_Type` that takes whole bytes; `None` for INVALID, TOKEN
/// and the packed sub-byte types, whose host size is not elements × bytes.
pub fn element_bytes(ty: BufferType) -> Option<usize> {
    Some(match ty {
        1 | 2 | 6 | 16..=20 | 26..=28 => 1, // PRED, S8, U8, the 8-bit floats
        3 | 7 | 10 | 13 => 2,               // S16, U16, F16, BF16
        4 | 8 | 11 => 4,                    // S32, U32, F32
        5 | 9 | 12 | 14 => 8,               // S64, U64, F64, C64
        15 => 16,                           // C128
        _ => return None,
    })
}

pub const NAMED_VALUE_STRING: c_int = 0;
pub const NAMED_VALUE_INT64: c_int = 1;
pub const NAMED_VALUE_INT64_LIST: c_int = 2;
pub const NAMED_VALUE_FLOAT: c_int = 3;
pub const NAMED_VALUE_BOOL: c_int = 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub union NamedValueUnion {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

c_struct!(PJRT_NamedValue {
    struct_size: usize,
    extension_start: *mut PJRT_Extension_Base,
    name: *const c_char,
    name_size: usize,
    type_: c_int,
    value: NamedValueUnion,
    value_size: usize,
});

c_struct!(PJRT_Api_Version {
    struct_size: usize,
    extension_start: *mut PJRT_Extension_Base,
    major_version: c_int,
    minor_version: c_int,
});

args!(PJRT_Error_Destroy_Args { error: *mut PJRT_Error });
args!(PJRT_Error_Message_Args { error: *const PJRT_Error, message: *const c_char, message_size: usize });
args!(PJRT_Error_GetCode_Args { error: *const PJRT_Error, code: ErrorCode });
args!(PJRT_Plugin_Initialize_Args {});
args!(PJRT_Plugin_Attributes_Args { attributes: *const PJRT_NamedValue, num_attributes: usize });
args!(PJRT_Event_Destroy_Args { event: *mut PJRT_Event });
args!(PJRT_Event_IsReady_Args { event: *mut PJRT_Event, is_ready: bool });
args!(PJRT_Event_Error_Args { event: *mut PJRT_Event });
args!(PJRT_Event_Await_Args { event: *mut PJRT_Event });
/// Called once an event is ready; owns `error` (null on success) and must destroy it.
pub type OnReadyCallback = unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void);
args!(PJRT_Event_OnReady_Args { event: *mut PJRT_Event, callback: Option<OnReadyCallback>, user_arg: *mut c_void });
args!(PJRT_Client_Create_Args {
    create_options: *const PJRT_NamedValue,
    num_options: usize,
    kv_get_callback: *mut c_void,
    kv_get_user_arg: *mut c_void,
    kv_put_callback: *mut c_void,
    kv_put_user_arg: *mut c_void,
    client: *mut PJRT_Client,
    kv_try_get_callback: *mut c_void,
    kv_try_get_user_arg: *mut c_void,
});
args!(PJRT_Client_Destroy_Args { client: *mut PJRT_Client });
args!(PJRT_Client_PlatformName_Args { client: *mut PJRT_Client, platform_name: *const c_char, platform_name_size: usize });
args!(PJRT_Client_PlatformVersion_Args { client: *mut PJRT_Client, platform_version: *const c_char, platform_version_size: usize });
args!(PJRT_Client_AddressableDevices_Args {
    client: *mut PJRT_Client,
    addressable_devices: *const *mut PJRT_Device,
    num_addressable_devices: usize,
});

c_struct!(PJRT_Program {
    struct_size: usize,
    extension_start: *mut PJRT_Extension_Base,
    code: *mut c_char,
    code_size: usize,
    format: *const c_char,
    format_size: usize,
});

args!(PJRT_Client_Compile_Args {
    client: *mut PJRT_Client,
    program: *const PJRT_Program,
    compile_options: *const c_char,
    compile_options_size: usize,
    executable: *mut PJRT_LoadedExecutable,
});
args!(PJRT_Client_BufferFromHostBuffer_Args {
    client: *mut PJRT_Client,
    data: *const c_void,
    type_: BufferType,
    dims: *const i64,
    num_dims: usize,
    byte_strides: *const i64,
    num_byte_strides: usize,
    host_buffer_semantics: c_int,
    device: *mut PJRT_Device,
    memory: *mut PJRT_Memory,
    device_layout: *mut c_void,
    done_with_host_buffer: *mut PJRT_Event,
    buffer: *mut PJRT_Buffer,
});
pub const HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL: c_int = 0;

args!(PJRT_DeviceDescription_Id_Args { device_description: *mut PJRT_DeviceDescription, id: c_int });
args!(PJRT_DeviceDescription_Kind_Args { device_description: *mut PJRT_DeviceDescription, device_kind: *const c_char, device_kind_size: usize });
args!(PJRT_DeviceDescription_ToString_Args { device_description: *mut PJRT_DeviceDescription, to_string: *const c_char, to_string_size: usize });
args!(PJRT_Device_GetDescription_Args { device: *mut PJRT_Device, device_description: *mut PJRT_DeviceDescription });
args!(PJRT_Device_LocalHardwareId_Args { device: *mut PJRT_Device, local_hardware_id: c_int });
args!(PJRT_Device_MemoryStats_Args {
    device: *mut PJRT_Device,
    bytes_in_use: i64,
    peak_bytes_in_use: i64,
    peak_bytes_in_use_is_set: bool,
    num_allocs: i64,
    num_allocs_is_set: bool,
    largest_alloc_size: i64,
    largest_alloc_size_is_set: bool,
    bytes_limit: i64,
    bytes_limit_is_set: bool,
    bytes_reserved: i64,
    bytes_reserved_is_set: bool,
    peak_bytes_reserved: i64,
    peak_bytes_reserved_is_set: bool,
    bytes_reservable_limit: i64,
    bytes_reservable_limit_is_set: bool,
    largest_free_block_bytes: i64,
    largest_free_block_bytes_is_set: bool,
    pool_bytes: i64,
    pool_bytes_is_set: bool,
    peak_pool_bytes: i64,
    peak_pool_bytes_is_set: bool,
});

args!(PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable });
args!(PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable });
args!(PJRT_LoadedExecutable_GetExecutable_Args { loaded_executable: *mut PJRT_LoadedExecutable, executable: *mut PJRT_Executable });
args!(PJRT_Executable_NumOutputs_Args { executable: *mut PJRT_Executable, num_outputs: usize });
args!(PJRT_Executable_OptimizedProgram_Args { executable: *mut PJRT_Executable, program: *mut PJRT_Program });
args!(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args { executable: *mut PJRT_Executable, size_in_bytes: i64 });
args!(PJRT_Executable_Serialize_Args {
    executable: *const PJRT_Executable,
    serialized_bytes: *const c_char,
    serialized_bytes_size: usize,
    serialized_executable: *mut PJRT_SerializedExecutable,
    serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>,
});
args!(PJRT_Executable_DeserializeAndLoad_Args {
    client: *mut PJRT_Client,
    serialized_executable: *const c_char,
    serialized_executable_size: usize,
    loaded_executable: *mut PJRT_LoadedExecutable,
    overridden_serialized_compile_options: *const c_char,
    overridden_serialized_compile_options_size: usize,
});
args!(PJRT_ExecuteOptions {
    send_callbacks: *mut c_void,
    recv_callbacks: *mut c_void,
    num_send_ops: usize,
    num_recv_ops: usize,
    launch_id: c_int,
    non_donatable_input_indices: *const i64,
    num_non_donatable_input_indices: usize,
    context: *mut PJRT_ExecuteContext,
    call_location: *const c_char,
    num_tasks: usize,
    task_ids: *mut c_int,
    incarnation_ids: *mut i64,
});
args!(PJRT_LoadedExecutable_Execute_Args {
    executable: *mut PJRT_LoadedExecutable,
    options: *mut PJRT_ExecuteOptions,
    argument_lists: *const *const *mut PJRT_Buffer,
    num_devices: usize,
    num_args: usize,
    output_lists: *const *mut *mut PJRT_Buffer,
    device_complete_events: *mut *mut PJRT_Event,
    execute_device: *mut PJRT_Device,
});

args!(PJRT_Buffer_Destroy_Args { buffer: *mut PJRT_Buffer });
args!(PJRT_Buffer_ElementType_Args { buffer: *mut PJRT_Buffer, type_: BufferType });
args!(PJRT_Buffer_Dimensions_Args { buffer: *mut PJRT_Buffer, dims: *const i64, num_dims: usize });
args!(PJRT_Buffer_OnDeviceSizeInBytes_Args { buffer: *mut PJRT_Buffer, on_device_size_in_bytes: usize });
args!(PJRT_Buffer_Device_Args { buffer: *mut PJRT_Buffer, device: *mut PJRT_Device });
args!(PJRT_Buffer_CopyToDevice_Args { buffer: *mut PJRT_Buffer, dst_device: *mut PJRT_Device, dst_buffer: *mut PJRT_Buffer });
args!(PJRT_Buffer_ToHostBuffer_Args {
    src: *mut PJRT_Buffer,
    host_layout: *mut c_void,
    dst: *mut c_void,
    dst_size: usize,
    event: *mut PJRT_Event,
});
args!(PJRT_Buffer_ReadyEvent_Args { buffer: *mut PJRT_Buffer, event: *mut PJRT_Event });
args!(PJRT_Buffer_IsDeleted_Args { buffer: *mut PJRT_Buffer, is_deleted: bool });
args!(PJRT_Buffer_UnsafePointer_Args { buffer: *mut PJRT_Buffer, buffer_pointer: usize });

/// A slot of the function table: a nullable C function taking its args struct.
pub type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut PJRT_Error>;
type Unused = Option<unsafe extern "C" fn()>;

c_struct!(
    /// `PJRT_Api`, in header order up to the last function eager calls. Fields past a plugin's
    /// `struct_size` must not be read; `call!` (in `pjrt`) checks that before every call.
    PJRT_Api {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        pjrt_api_version: PJRT_Api_Version,
        PJRT_Error_Destroy: Option<unsafe extern "C" fn(*mut PJRT_Error_Destroy_Args)>,
        PJRT_Error_Message: Option<unsafe extern "C" fn(*mut PJRT_Error_Message_Args)>,
        PJRT_Error_GetCode: Fn<PJRT_Error_GetCode_Args>,
        PJRT_Plugin_Initialize: Fn<PJRT_Plugin_Initialize_Args>,
        PJRT_Plugin_Attributes: Fn<PJRT_Plugin_Attributes_Args>,
        PJRT_Event_Destroy: Fn<PJRT_Event_Destroy_Args>,
        PJRT_Event_IsReady: Fn<PJRT_Event_IsReady_Args>,
        PJRT_Event_Error: Fn<PJRT_Event_Error_Args>,
        PJRT_Event_Await: Fn<PJRT_Event_Await_Args>,
        PJRT_Event_OnReady: Fn<PJRT_Event_OnReady_Args>,
        PJRT_Client_Create: Fn<PJRT_Client_Create_Args>,
        PJRT_Client_Destroy: Fn<PJRT_Client_Destroy_Args>,
        PJRT_Client_PlatformName: Fn<PJRT_Client_PlatformName_Args>,
        PJRT_Client_ProcessIndex: Unused,
        PJRT_Client_PlatformVersion: Fn<PJRT_Client_PlatformVersion_Args>,
        PJRT_Client_Devices: Unused,
        PJRT_Client_AddressableDevices: Fn<PJRT_Client_AddressableDevices_Args>,
        PJRT_Client_LookupDevice: Unused,
        PJRT_Client_LookupAddressableDevice: Unused,
        PJRT_Client_AddressableMemories: Unused,
        PJRT_Client_Compile: Fn<PJRT_Client_Compile_Args>,
        PJRT_Client_DefaultDeviceAssignment: Unused,
        PJRT_Client_BufferFromHostBuffer: Fn<PJRT_Client_BufferFromHostBuffer_Args>,
        PJRT_DeviceDescription_Id: Fn<PJRT_DeviceDescription_Id_Args>,
        PJRT_DeviceDescription_ProcessIndex: Unused,
        PJRT_DeviceDescription_Attributes: Unused,
        PJRT_DeviceDescription_Kind: Fn<PJRT_DeviceDescription_Kind_Args>,
        PJRT_DeviceDescription_DebugString: Unused,
        PJRT_DeviceDescription_ToString: Fn<PJRT_DeviceDescription_ToString_Args>,
        PJRT_Device_GetDescription: Fn<PJRT_Device_GetDescription_Args>,
        PJRT_Device_IsAddressable: Unused,
        PJRT_Device_LocalHardwareId: Fn<PJRT_Device_LocalHardwareId_Args>,
        PJRT_Device_AddressableMemories: Unused,
        PJRT_Device_DefaultMemory: Unused,
        PJRT_Device_MemoryStats: Fn<PJRT_Device_MemoryStats_Args>,
        PJRT_Memory_Id: Unused,
        PJRT_Memory_Kind: Unused,
        PJRT_Memory_DebugString: Unused,
        PJRT_Memory_ToString: Unused,
        PJRT_Memory_AddressableByDevices: Unused,
        PJRT_Executable_Destroy: Fn<PJRT_Executable_Destroy_Args>,
        PJRT_Executable_Name: Unused,
        PJRT_Executable_NumReplicas: Unused,
        PJRT_Executable_NumPartitions: Unused,
        PJRT_Executable_NumOutputs: Fn<PJRT_Executable_NumOutputs_Args>,
        PJRT_Executable_SizeOfGeneratedCodeInBytes: Fn<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>,
        PJRT_Executable_GetCostAnalysis: Unused,
        PJRT_Executable_OutputMemoryKinds: Unused,
        PJRT_Executable_OptimizedProgram: Fn<PJRT_Executable_OptimizedProgram_Args>,
        PJRT_Executable_Serialize: Fn<PJRT_Executable_Serialize_Args>,
        PJRT_LoadedExecutable_Destroy: Fn<PJRT_LoadedExecutable_Destroy_Args>,
        PJRT_LoadedExecutable_GetExecutable: Fn<PJRT_LoadedExecutable_GetExecutable_Args>,
        PJRT_LoadedExecutable_AddressableDevices: Unused,
        PJRT_LoadedExecutable_Delete: Unused,
        PJRT_LoadedExecutable_IsDeleted: Unused,
        PJRT_LoadedExecutable_Execute: Fn<PJRT_LoadedExecutable_Execute_Args>,
        PJRT_Executable_DeserializeAndLoad: Fn<PJRT_Executable_DeserializeAndLoad_Args>,
        PJRT_LoadedExecutable_Fingerprint: Unused,
        PJRT_Buffer_Destroy: Fn<PJRT_Buffer_Destroy_Args>,
        PJRT_Buffer_ElementType: Fn<PJRT_Buffer_ElementType_Args>,
        PJRT_Buffer_Dimensions: Fn<PJRT_Buffer_Dimensions_Args>,
        PJRT_Buffer_UnpaddedDimensions: Unused,
        PJRT_Buffer_DynamicDimensionIndices: Unused,
        PJRT_Buffer_GetMemoryLayout: Unused,
        PJRT_Buffer_OnDeviceSizeInBytes: Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
        PJRT_Buffer_Device: Fn<PJRT_Buffer_Device_Args>,
        PJRT_Buffer_Memory: Unused,
        PJRT_Buffer_Delete: Unused,
        PJRT_Buffer_IsDeleted: Fn<PJRT_Buffer_IsDeleted_Args>,
        PJRT_Buffer_CopyToDevice: Fn<PJRT_Buffer_CopyToDevice_Args>,
        PJRT_Buffer_ToHostBuffer: Fn<PJRT_Buffer_ToHostBuffer_Args>,
        PJRT_Buffer_IsOnCpu: Unused,
        PJRT_Buffer_ReadyEvent: Fn<PJRT_Buffer_ReadyEvent_Args>,
        PJRT_Buffer_UnsafePointer: Fn<PJRT_Buffer_UnsafePointer_Args>,
    }
);

pub type GetPjrtApi = unsafe extern "C" fn() -> *const PJRT_Api;

/// The layout check: every struct declared here against the vendored header, field by field.
/// The header is parsed (not a table copied from it) and its C layout computed under LP64
/// rules, so a field added, dropped, retyped or reordered on either side fails the test.
#[cfg(test)]
pub(crate) mod layout {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// One Rust field as `c_struct!` records it.
    pub struct Field {
        pub name: &'static str,
        pub offset: usize,
        pub size: usize,
    }

    /// Implemented by `c_struct!` for every struct it declares.
    pub trait Fields {
        const NAME: &'static str;
        fn fields() -> Vec<Field>;
    }

    const HEADER: &str = include_str!("../../include/pjrt_c_api.h");
    /// This file up to this module (the declarations, not the test's own text).
    fn source() -> &'static str {
        let all = include_str!("ffi.rs");
        &all[..all.find("pub(crate) mod layout {").expect("this module")]
    }
    /// `PJRT_Api` mirrors only a prefix of the header's table (up to the last function used).
    const PREFIX_ONLY: &str = "PJRT_Api";

    /// Name, fields and `size_of` of every struct declared in this file.
    fn rust_structs() -> Vec<(&'static str, Vec<Field>, usize)> {
        macro_rules! list {
            ($($t:ty),* $(,)?) => { vec![$((<$t as Fields>::NAME, <$t as Fields>::fields(), std::mem::size_of::<$t>())),*] };
        }
        list![
            PJRT_NamedValue,
            PJRT_Api_Version,
            PJRT_Program,
            PJRT_Api,
            PJRT_Error_Destroy_Args,
            PJRT_Error_Message_Args,
            PJRT_Error_GetCode_Args,
            PJRT_Plugin_Initialize_Args,
            PJRT_Plugin_Attributes_Args,
            PJRT_Event_Destroy_Args,
            PJRT_Event_IsReady_Args,
            PJRT_Event_Error_Args,
            PJRT_Event_Await_Args,
            PJRT_Event_OnReady_Args,
            PJRT_Client_Create_Args,
            PJRT_Client_Destroy_Args,
            PJRT_Client_PlatformName_Args,
            PJRT_Client_PlatformVersion_Args,
            PJRT_Client_AddressableDevices_Args,
            PJRT_Client_Compile_Args,
            PJRT_Client_BufferFromHostBuffer_Args,
            PJRT_DeviceDescription_Id_Args,
            PJRT_DeviceDescription_Kind_Args,
            PJRT_DeviceDescription_ToString_Args,
            PJRT_Device_GetDescription_Args,
            PJRT_Device_LocalHardwareId_Args,
            PJRT_Device_MemoryStats_Args,
            PJRT_Executable_Destroy_Args,
            PJRT_LoadedExecutable_Destroy_Args,
            PJRT_LoadedExecutable_GetExecutable_Args,
            PJRT_Executable_NumOutputs_Args,
            PJRT_Executable_OptimizedProgram_Args,
            PJRT_Executable_SizeOfGeneratedCodeInBytes_Args,
            PJRT_Executable_Serialize_Args,
            PJRT_Executable_DeserializeAndLoad_Args,
            PJRT_ExecuteOptions,
            PJRT_LoadedExecutable_Execute_Args,
            PJRT_Buffer_Destroy_Args,
            PJRT_Buffer_ElementType_Args,
            PJRT_Buffer_Dimensions_Args,
            PJRT_Buffer_OnDeviceSizeInBytes_Args,
            PJRT_Buffer_Device_Args,
            PJRT_Buffer_CopyToDevice_Args,
            PJRT_Buffer_ToHostBuffer_Args,
            PJRT_Buffer_ReadyEvent_Args,
            PJRT_Buffer_IsDeleted_Args,
            PJRT_Buffer_UnsafePointer_Args,
        ]
    }

    /// The names this file declares with `args!` or `c_struct!`, read from its source, so a
    /// struct missing from [`rust_structs`] is caught.
    fn declared_in_source() -> Vec<String> {
        let mut names = Vec::new();
        for marker in ["args!(", "c_struct!("] {
            for (i, _) in source().match_indices(marker) {
                // Skip the doc comments and attributes an invocation may start with.
                let rest = source()[i + marker.len()..]
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty() && !l.starts_with("///") && !l.starts_with("#["))
                    .unwrap_or("");
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if name.starts_with("PJRT_") {
                    names.push(name);
                }
            }
        }
        names
    }

    /// A field of a header struct, laid out by C rules.
    #[derive(Debug)]
    struct CField {
        /// Empty for an anonymous union.
        name: String,
        offset: usize,
        size: usize,
    }

    /// The vendored header with comments removed, and what the layout needs from it.
    struct Header {
        text: String,
        enums: HashSet<String>,
        fn_pointers: HashSet<String>,
        /// Struct name to the last field its `*_STRUCT_SIZE` is defined by.
        last_field: HashMap<String, String>,
    }

    fn strip_comments(s: &str) -> String {
        s.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
    }

    fn collapse_ws(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// Text between the `{` at `open` and its matching `}`.
    fn braced(s: &str, open: usize) -> &str {
        let mut depth = 0;
        for (i, c) in s[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return &s[open + 1..open + i];
                    }
                }
                _ => {}
            }
        }
        panic!("unbalanced braces in the header");
    }

    impl Header {
        fn parse() -> Header {
            let text = collapse_ws(&strip_comments(HEADER));
            let mut enums = HashSet::new();
            for (i, _) in text.match_indices("typedef enum {") {
                let open = i + "typedef enum ".len();
                let after = &text[open + braced(&text, open).len() + 2..];
                enums.insert(after.trim_start().split(';').next().unwrap().trim().to_string());
            }
            let mut fn_pointers = HashSet::new();
            for stmt in text.split(';').map(str::trim).filter(|s| s.starts_with("typedef ")) {
                if let Some(p) = stmt.find("(*") {
                    fn_pointers.insert(stmt[p + 2..].split(')').next().unwrap().trim().to_string());
                }
            }
            let mut last_field = HashMap::new();
            for (i, _) in text.match_indices("PJRT_DEFINE_STRUCT_TRAITS(") {
                let args = text[i + "PJRT_DEFINE_STRUCT_TRAITS(".len()..].split(')').next().unwrap();
                let (name, last) = args.split_once(',').unwrap();
                last_field.insert(name.trim().to_string(), last.trim().to_string());
            }
            let api = "PJRT_STRUCT_SIZE(PJRT_Api,";
            let i = text.find(api).expect("the header defines PJRT_Api_STRUCT_SIZE");
            let last = text[i + api.len()..].split(')').next().unwrap().trim().to_string();
            last_field.insert("PJRT_Api".into(), last);
            Header { text, enums, fn_pointers, last_field }
        }

        /// The body of `struct name { … }`, if the header defines it.
        fn body(&self, name: &str) -> Option<&str> {
            let open = self.text.find(&format!("struct {name} {{"))? + "struct ".len() + name.len() + 1;
            Some(braced(&self.text, open))
        }

        /// Fields, size and alignment of a header struct under LP64 C layout rules.
        fn layout(&self, name: &str) -> Option<(Vec<CField>, usize, usize)> {
            Some(self.lay_out(self.body(name)?, false))
        }

        fn lay_out(&self, body: &str, union: bool) -> (Vec<CField>, usize, usize) {
            let (mut fields, mut end, mut align) = (Vec::new(), 0usize, 1usize);
            for decl in split_decls(body) {
                let (name, size, a) = self.decl(&decl);
                let offset = if union { 0 } else { end.next_multiple_of(a) };
                end = end.max(offset + size);
                align = align.max(a);
                fields.push(CField { name, offset, size });
            }
            (fields, end.next_multiple_of(align), align)
        }

        /// Name, size and alignment of one member declaration.
        fn decl(&self, decl: &str) -> (String, usize, usize) {
            if let Some(inner) = decl.strip_prefix("union") {
                let open = inner.find('{').expect("a union body");
                let (_, size, align) = self.lay_out(braced(inner, open), true);
                return (String::new(), size, align);
            }
            if let Some(f) = decl.strip_prefix("_PJRT_API_STRUCT_FIELD(") {
                return (f.trim_end_matches(')').trim().to_string(), 8, 8);
            }
            if let Some(p) = decl.find("(*") {
                return (decl[p + 2..].split(')').next().unwrap().trim().to_string(), 8, 8);
            }
            assert!(!decl.contains('['), "arrays are not handled: {decl}");
            let words: Vec<&str> =
                decl.split(|c: char| c.is_whitespace() || c == '*').filter(|w| !w.is_empty()).collect();
            let (name, ty) = words.split_last().expect("a declaration");
            if decl.contains('*') {
                return (name.to_string(), 8, 8);
            }
            let ty: Vec<&str> = ty.iter().copied().filter(|w| *w != "const" && *w != "struct").collect();
            let (size, align) = match ty.join(" ").as_str() {
                "size_t" | "int64_t" | "uint64_t" | "double" | "intptr_t" | "uintptr_t" => (8, 8),
                "int" | "int32_t" | "uint32_t" | "float" | "unsigned" | "unsigned int" => (4, 4),
                "int16_t" | "uint16_t" => (2, 2),
                "bool" | "char" | "int8_t" | "uint8_t" => (1, 1),
                t if self.enums.contains(t) => (4, 4),
                t if self.fn_pointers.contains(t) => (8, 8),
                t => match self.layout(t) {
                    Some((_, size, align)) => (size, align),
                    None => panic!("unknown C type {t:?} in {decl:?}"),
                },
            };
            (name.to_string(), size, align)
        }
    }

    /// Member declarations of a struct body (`;`-separated at brace depth 0).
    fn split_decls(body: &str) -> Vec<String> {
        let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
        for c in body.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    out.push(std::mem::take(&mut cur).trim().to_string());
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        out.into_iter().filter(|d| !d.is_empty()).collect()
    }

    /// The header's name for a Rust field: `type_` is `type`; `value` is NamedValue's union.
    fn c_name(struct_name: &str, rust: &str) -> String {
        match (struct_name, rust) {
            ("PJRT_NamedValue", "value") => String::new(),
            _ => rust.trim_end_matches('_').to_string(),
        }
    }

    /// Every difference between one Rust struct and the header's; empty when they agree.
    fn check(h: &Header, name: &str, fields: &[Field], rust_size: usize) -> Vec<String> {
        let mut errors = Vec::new();
        let Some((c, c_size, _)) = h.layout(name) else {
            return vec![format!("{name}: declared in ffi.rs, not defined in the header")];
        };
        let Some(last) = h.last_field.get(name) else {
            return vec![format!("{name}: the header gives it no *_STRUCT_SIZE")];
        };
        let prefix_only = name == PREFIX_ONLY;
        if fields.len() > c.len() || (!prefix_only && fields.len() != c.len()) {
            errors.push(format!("{name}: {} fields in Rust, {} in the header", fields.len(), c.len()));
        }
        for (r, c) in fields.iter().zip(&c) {
            let n = c_name(name, r.name);
            if (n.as_str(), r.offset, r.size) != (c.name.as_str(), c.offset, c.size) {
                errors.push(format!(
                    "{name}: Rust field {} at {} ({} bytes), header field {:?} at {} ({} bytes)",
                    r.name, r.offset, r.size, c.name, c.offset, c.size
                ));
            }
        }
        // What PJRT_STRUCT_SIZE(name, last) means: offsetof(last) + sizeof(last).
        let c_last = c.iter().find(|f| &f.name == last).expect("the header's last field is a field");
        let header_struct_size = c_last.offset + c_last.size;
        if prefix_only {
            if rust_size > c_size {
                errors.push(format!("{name}: {rust_size} bytes in Rust, more than the header's {c_size}"));
            }
        } else {
            match fields.iter().find(|f| c_name(name, f.name) == *last) {
                Some(f) if f.offset + f.size == header_struct_size => {}
                Some(f) => errors.push(format!(
                    "{name}: {name}_STRUCT_SIZE is {header_struct_size}, Rust's {last} ends at {}",
                    f.offset + f.size
                )),
                None => errors.push(format!(
                    "{name}: no Rust field {last} ({name}_STRUCT_SIZE = {header_struct_size})"
                )),
            }
            // `new()` sends size_of as struct_size: it must be the header's size, padded.
            if rust_size != c_size || rust_size < header_struct_size {
                errors.push(format!("{name}: size_of {rust_size}, the header's struct is {c_size} (STRUCT_SIZE {header_struct_size})"));
            }
        }
        errors
    }

    // Sizes and offsets a C compiler gives for the 0.81 header's *_STRUCT_SIZE gives on x86_64/aarch64 (LP64).
    #[test]
    fn struct_sizes_match_header() {
        assert_eq!(std::mem::size_of::<PJRT_NamedValue>(), 56);
        assert_eq!(std::mem::size_of::<PJRT_Client_Create_Args>(), 88);
        assert_eq!(std::mem::size_of::<PJRT_Client_BufferFromHostBuffer_Args>(), 120);
        assert_eq!(std::mem::size_of::<PJRT_LoadedExecutable_Execute_Args>(), 80);
        assert_eq!(std::mem::size_of::<PJRT_ExecuteOptions>(), 112);
        assert_eq!(std::mem::size_of::<PJRT_Event_OnReady_Args>(), 40);
        assert_eq!(std::mem::offset_of!(PJRT_Api, PJRT_Event_OnReady), 112);
        assert_eq!(std::mem::offset_of!(PJRT_Api, PJRT_Buffer_ReadyEvent), 616);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn every_struct_matches_the_header_field_by_field() {
        let h = Header::parse();
        let structs = rust_structs();
        let listed: HashSet<&str> = structs.iter().map(|s| s.0).collect();
        let mut errors: Vec<String> = declared_in_source()
            .into_iter()
            .filter(|n| !listed.contains(n.as_str()))
            .map(|n| format!("{n}: declared in ffi.rs but missing from layout::rust_structs"))
            .collect();
        // Structs must go through c_struct! (or args!) so that their fields are listed.
        for line in source().lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("pub struct ") {
                if !rest.starts_with('$') {
                    errors.push(format!(
                        "`{line}`: declare it with c_struct! so the layout test sees its fields"
                    ));
                }
            }
        }
        for (name, fields, size) in &structs {
            errors.extend(check(&h, name, fields, *size));
        }
        assert!(structs.len() >= 43, "{} structs listed", structs.len());
        assert!(errors.is_empty(), "ffi.rs disagrees with include/pjrt_c_api.h:\n{}", errors.join("\n"));
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn the_check_catches_a_dropped_field_and_a_short_struct() {
        let h = Header::parse();
        let mut fields = PJRT_Buffer_ToHostBuffer_Args::fields();
        let size = std::mem::size_of::<PJRT_Buffer_ToHostBuffer_Args>();
        assert!(check(&h, "PJRT_Buffer_ToHostBuffer_Args", &fields, size).is_empty());
        // Without `host_layout` every later field is 8 bytes early and the struct short.
        fields.remove(3);
        for f in &mut fields[3..] {
            f.offset -= 8;
        }
        let errors = check(&h, "PJRT_Buffer_ToHostBuffer_Args", &fields, size - 8);
        assert!(errors.iter().any(|e| e.contains("STRUCT_SIZE is 56")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("fields in Rust")), "{errors:?}");
        // A struct the header does not define, and one whose last field is missing.
        assert!(!check(&h, "PJRT_No_Such_Args", &[], 16).is_empty());
        let mut fields = PJRT_Event_OnReady_Args::fields();
        fields.pop();
        assert!(check(&h, "PJRT_Event_OnReady_Args", &fields, 32)
            .iter()
            .any(|e| e.contains("no Rust field user_arg")));
    }

    #[test]
    fn element_bytes_follow_the_header_enum() {
        let text = collapse_ws(&strip_comments(HEADER));
        let end = text.find("} PJRT_Buffer_Type;").expect("the buffer type enum");
        let open = text[..end].rfind("typedef enum {").unwrap() + "typedef enum ".len();
        let names: Vec<&str> =
            braced(&text, open).split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        assert!(names.iter().all(|n| !n.contains('=')), "the enum is numbered in order");
        for (value, name) in names.iter().enumerate() {
            let t = name.strip_prefix("PJRT_Buffer_Type_").unwrap();
            let expected = match t {
                "INVALID" | "TOKEN" | "S4" | "U4" | "S2" | "U2" | "F4E2M1FN" => None,
                "PRED" | "S8" | "U8" => Some(1),
                _ if t.starts_with("F8") => Some(1),
                "S16" | "U16" | "F16" | "BF16" => Some(2),
                "S32" | "U32" | "F32" => Some(4),
                "S64" | "U64" | "F64" | "C64" => Some(8),
                "C128" => Some(16),
                other => panic!("a buffer type this test does not know: {other}"),
            };
            assert_eq!(element_bytes(value as BufferType), expected, "{name} = {value}");
        }
        assert_eq!(element_bytes(names.len() as BufferType), None);
    }
}
