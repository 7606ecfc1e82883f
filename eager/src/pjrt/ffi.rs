//! Hand-written FFI for the part of `pjrt_c_api.h` (API 0.81, vendored in `include/`) that
//! eager uses. Every argument struct starts with `struct_size`, which plugins use to tell
//! which fields the caller knows; structs here mirror the header field for field.
#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::ffi::{c_char, c_int, c_void};

pub const API_MAJOR: c_int = 0;
pub const API_MINOR: c_int = 81;

macro_rules! opaque {
    ($($name:ident),*) => { $( #[repr(C)] pub struct $name { _private: [u8; 0] } )* };
}
opaque!(
    PJRT_Error, PJRT_Event, PJRT_Client, PJRT_Device, PJRT_Memory, PJRT_DeviceDescription,
    PJRT_Executable, PJRT_LoadedExecutable, PJRT_Buffer, PJRT_SerializedExecutable,
    PJRT_ExecuteContext, PJRT_Extension_Base
);

/// Declares a `#[repr(C)]` args struct with `struct_size` and `extension_start` first, and a
/// `new()` that zero-fills it and sets `struct_size` (how the header's `*_STRUCT_SIZE` works).
macro_rules! args {
    ($name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        #[repr(C)]
        pub struct $name {
            pub struct_size: usize,
            pub extension_start: *mut PJRT_Extension_Base,
            $(pub $field: $ty),*
        }
        impl $name {
            pub fn new() -> Self {
                // SAFETY: every field is a plain integer, bool, enum-as-int or raw pointer;
                // all-zero is their "unset" value in the C API.
                let mut s: Self = unsafe { std::mem::zeroed() };
                s.struct_size = std::mem::size_of::<Self>();
                s
            }
        }
    };
}

pub type ErrorCode = c_int;
pub type BufferType = c_int;

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

#[repr(C)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub type_: c_int,
    pub value: NamedValueUnion,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

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

#[repr(C)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

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

args!(PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable });
args!(PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable });
args!(PJRT_LoadedExecutable_GetExecutable_Args { loaded_executable: *mut PJRT_LoadedExecutable, executable: *mut PJRT_Executable });
args!(PJRT_Executable_NumOutputs_Args { executable: *mut PJRT_Executable, num_outputs: usize });
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

/// A slot of the function table: a nullable C function taking its args struct.
pub type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut PJRT_Error>;
type Unused = Option<unsafe extern "C" fn()>;

/// `PJRT_Api`, in header order up to the last function eager calls. Fields past a plugin's
/// `struct_size` must not be read; `Api::get` checks that before every call.
#[repr(C)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,
    pub PJRT_Error_Destroy: Option<unsafe extern "C" fn(*mut PJRT_Error_Destroy_Args)>,
    pub PJRT_Error_Message: Option<unsafe extern "C" fn(*mut PJRT_Error_Message_Args)>,
    pub PJRT_Error_GetCode: Fn<PJRT_Error_GetCode_Args>,
    pub PJRT_Plugin_Initialize: Fn<PJRT_Plugin_Initialize_Args>,
    pub PJRT_Plugin_Attributes: Fn<PJRT_Plugin_Attributes_Args>,
    pub PJRT_Event_Destroy: Fn<PJRT_Event_Destroy_Args>,
    pub PJRT_Event_IsReady: Fn<PJRT_Event_IsReady_Args>,
    pub PJRT_Event_Error: Fn<PJRT_Event_Error_Args>,
    pub PJRT_Event_Await: Fn<PJRT_Event_Await_Args>,
    pub PJRT_Event_OnReady: Fn<PJRT_Event_OnReady_Args>,
    pub PJRT_Client_Create: Fn<PJRT_Client_Create_Args>,
    pub PJRT_Client_Destroy: Fn<PJRT_Client_Destroy_Args>,
    pub PJRT_Client_PlatformName: Fn<PJRT_Client_PlatformName_Args>,
    pub PJRT_Client_ProcessIndex: Unused,
    pub PJRT_Client_PlatformVersion: Fn<PJRT_Client_PlatformVersion_Args>,
    pub PJRT_Client_Devices: Unused,
    pub PJRT_Client_AddressableDevices: Fn<PJRT_Client_AddressableDevices_Args>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: Fn<PJRT_Client_Compile_Args>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: Fn<PJRT_Client_BufferFromHostBuffer_Args>,
    pub PJRT_DeviceDescription_Id: Fn<PJRT_DeviceDescription_Id_Args>,
    pub PJRT_DeviceDescription_ProcessIndex: Unused,
    pub PJRT_DeviceDescription_Attributes: Unused,
    pub PJRT_DeviceDescription_Kind: Fn<PJRT_DeviceDescription_Kind_Args>,
    pub PJRT_DeviceDescription_DebugString: Unused,
    pub PJRT_DeviceDescription_ToString: Fn<PJRT_DeviceDescription_ToString_Args>,
    pub PJRT_Device_GetDescription: Fn<PJRT_Device_GetDescription_Args>,
    pub PJRT_Device_IsAddressable: Unused,
    pub PJRT_Device_LocalHardwareId: Fn<PJRT_Device_LocalHardwareId_Args>,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Unused,
    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,
    pub PJRT_Executable_Destroy: Fn<PJRT_Executable_Destroy_Args>,
    pub PJRT_Executable_Name: Unused,
    pub PJRT_Executable_NumReplicas: Unused,
    pub PJRT_Executable_NumPartitions: Unused,
    pub PJRT_Executable_NumOutputs: Fn<PJRT_Executable_NumOutputs_Args>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: Fn<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>,
    pub PJRT_Executable_GetCostAnalysis: Unused,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: Unused,
    pub PJRT_Executable_Serialize: Fn<PJRT_Executable_Serialize_Args>,
    pub PJRT_LoadedExecutable_Destroy: Fn<PJRT_LoadedExecutable_Destroy_Args>,
    pub PJRT_LoadedExecutable_GetExecutable: Fn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub PJRT_LoadedExecutable_AddressableDevices: Unused,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: Fn<PJRT_LoadedExecutable_Execute_Args>,
    pub PJRT_Executable_DeserializeAndLoad: Fn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,
    pub PJRT_Buffer_Destroy: Fn<PJRT_Buffer_Destroy_Args>,
    pub PJRT_Buffer_ElementType: Fn<PJRT_Buffer_ElementType_Args>,
    pub PJRT_Buffer_Dimensions: Fn<PJRT_Buffer_Dimensions_Args>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Unused,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
    pub PJRT_Buffer_Device: Fn<PJRT_Buffer_Device_Args>,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Unused,
    pub PJRT_Buffer_IsDeleted: Unused,
    pub PJRT_Buffer_CopyToDevice: Fn<PJRT_Buffer_CopyToDevice_Args>,
    pub PJRT_Buffer_ToHostBuffer: Fn<PJRT_Buffer_ToHostBuffer_Args>,
    pub PJRT_Buffer_IsOnCpu: Unused,
    pub PJRT_Buffer_ReadyEvent: Fn<PJRT_Buffer_ReadyEvent_Args>,
}

pub type GetPjrtApi = unsafe extern "C" fn() -> *const PJRT_Api;

#[cfg(test)]
mod layout {
    use super::*;
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
}
