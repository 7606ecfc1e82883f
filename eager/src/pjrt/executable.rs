//! A compiled, loaded executable: launching it on one device or as one SPMD program over
//! many, and what it tells about itself (code size, optimized program, serialized bytes).

use std::ffi::c_char;
use std::ptr;
use std::sync::Arc;

use smallvec::SmallVec;

use super::{ffi, invalid_argument, slice_from, Api, Buffer, Client, DeviceInfo, Event, Result};

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
    pub(super) unsafe fn wrap(
        client: &Arc<Client>,
        raw: *mut ffi::PJRT_LoadedExecutable,
    ) -> Result<Executable> {
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
    ///
    /// An argument the program aliases to an output (`tf.aliasing_output`) is donated — PJRT
    /// hands its memory to that output and the argument buffer is deleted — unless its index is
    /// in `keep`: then PJRT copies it first and the argument stays as it was.
    pub fn execute(
        &self,
        args: &[&Buffer],
        device: &DeviceInfo,
        outputs: &mut SmallVec<[Buffer; 1]>,
        completion: bool,
        keep: &[i64],
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
        if !keep.is_empty() {
            opts.non_donatable_input_indices = keep.as_ptr();
            opts.num_non_donatable_input_indices = keep.len();
        }
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
        match self.execute(args, device, outputs, true, &[])? {
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
