//! The executor's contract on the real CPU plugin: the cache compiles a key once, bad input is
//! a typed error (never an abort), devices and plugins fail clearly.

use std::path::Path;

use eager::prelude::*;
use eager::profiler::{CacheOutcome, EventKind};
use eager::{plugin, runtime};

/// The cache entry whose signature is `sig` (each test uses shapes no other test uses, so
/// parallel tests do not share keys).
fn entry(sig: &str) -> Option<eager::cache::EntryStats> {
    cache::entries().into_iter().find(|e| e.info.signature() == sig)
}

#[test]
fn a_key_compiles_once_then_hits() -> Result<()> {
    let a = Tensor::from_slice(&[1.0f32; 7 * 13], &[7, 13])?;
    let b = Tensor::from_slice(&[2.0f32; 13], &[13])?;
    let mark = profiler::next_seq();
    for _ in 0..10 {
        let c = a.add(&b)?;
        assert_eq!(c.to_vec::<f32>()?, vec![3.0; 7 * 13]);
    }
    let e = entry("add(f32[7, 13], f32[13])").expect("add is cached");
    // The first call compiled, or loaded what an earlier process compiled (the disk cache).
    assert_eq!((e.stats.misses + e.stats.disk_hits, e.stats.hits), (1, 9));
    assert!(e.stats.compile_ns > 0);

    // The profiler saw the same: one compile (or load), then hits with none.
    let adds: Vec<_> = profiler::events_since(mark)
        .into_iter()
        .filter(|e| e.info.signature() == "add(f32[7, 13], f32[13])")
        .collect();
    assert_eq!(adds.len(), 10);
    assert!(matches!(adds[0].cache, Some(CacheOutcome::Miss | CacheOutcome::DiskHit)));
    assert!(adds[0].compile_ns > 0);
    assert!(adds[1..].iter().all(|e| e.cache == Some(CacheOutcome::Hit) && e.compile_ns == 0));
    assert!(adds.iter().all(|e| e.kind == EventKind::Op && e.execute_ns > 0));
    assert_eq!(adds[0].bytes as usize, (7 * 13 + 13 + 7 * 13) * 4);

    // A new shape is a new key: compiled again, once.
    let b2 = Tensor::from_slice(&[2.0f32; 7], &[7, 1])?;
    a.add(&b2)?;
    a.add(&b2)?;
    let e2 = entry("add(f32[7, 13], f32[7, 1])").expect("second key");
    assert_eq!((e2.stats.misses + e2.stats.disk_hits, e2.stats.hits), (1, 1));
    Ok(())
}

#[test]
fn scalar_values_share_one_executable() -> Result<()> {
    let a = Tensor::from_slice(&[1.0f64; 11 * 3], &[11, 3])?;
    let x = (&a * 2.0).to_vec::<f64>()?;
    let y = (&a * 3.0).to_vec::<f64>()?;
    assert_eq!((x[0], y[0]), (2.0, 3.0));
    let e = entry("mul(f64[11, 3], f64[])").expect("mul by a scalar");
    assert_eq!((e.stats.misses + e.stats.disk_hits, e.stats.hits), (1, 1));
    Ok(())
}

#[test]
fn bad_input_is_an_error_before_xla() -> Result<()> {
    let a = Tensor::from_slice(&[1.0f32; 6], &[2, 3])?;
    let b = Tensor::from_slice(&[1.0f32; 4], &[4])?;
    let err = a.add(&b).unwrap_err();
    assert!(matches!(err, Error::Shape { op: "add", .. }), "{err}");
    assert!(err.to_string().contains("[2, 3] and [4] cannot be broadcast"), "{err}");

    let i = Tensor::from_slice(&[1i32; 6], &[2, 3])?;
    let err = a.add(&i).unwrap_err();
    assert!(matches!(err, Error::DType { op: "add", .. }), "{err}");
    assert!(err.to_string().contains("f32 vs i32"), "{err}");

    let err = i.exp().unwrap_err();
    assert!(matches!(err, Error::DType { op: "exp", .. }), "{err}");

    let err = a.matmul(&a).unwrap_err();
    assert!(err.to_string().contains("inner dimensions differ"), "{err}");

    let err = Tensor::from_slice(&[1.0f32; 5], &[2, 3]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");

    let err = a.to_vec::<i64>().unwrap_err();
    assert!(err.to_string().contains("i64 values of a f32 tensor"), "{err}");

    // Same byte size, wrong shape: PJRT would silently reinterpret; we reject it first.
    let err = a.reshape(&[4, 2]).unwrap_err();
    assert!(err.to_string().contains("cannot reshape"), "{err}");
    Ok(())
}

#[test]
#[should_panic(expected = "add: shape error: shapes [2] and [3] cannot be broadcast together")]
fn operators_panic_with_the_same_message() {
    let a = Tensor::from_slice(&[1.0f32; 2], &[2]).unwrap();
    let b = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
    let _ = &a + &b;
}

#[test]
fn devices_are_named_and_ops_stay_on_their_device() -> Result<()> {
    let devs = runtime::devices(DeviceKind::Cpu)?;
    assert!(devs.len() >= 2, "the CPU plugin shows several devices");
    assert_eq!(devs[1].to_string(), "cpu:1");
    assert_eq!("cpu:1".parse::<Device>().unwrap(), devs[1]);

    let a = Tensor::from_slice_on(&[1.0f32, 2.0, 3.0], &[3], devs[1])?;
    let b = a.exp()?;
    assert_eq!(b.device(), devs[1]);
    let want: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|x| x.exp()).collect();
    assert_eq!(b.to_vec::<f32>()?, want);

    let c = Tensor::from_slice(&[1.0f32, 1.0, 1.0], &[3])?;
    assert_eq!(c.device(), Device::cpu());
    let err = a.add(&c).unwrap_err();
    assert!(err.to_string().contains("one device"), "{err}");
    let moved = c.to(devs[1])?;
    assert_eq!(moved.device(), devs[1]);
    assert_eq!(a.add(&moved)?.to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);

    let err = Tensor::from_slice_on(&[1.0f32], &[1], Device::new(DeviceKind::Cpu, 99)).unwrap_err();
    assert!(err.to_string().contains("cpu:99 does not exist"), "{err}");
    Ok(())
}

/// Fast because no plugin is loaded at all: the hardware check refuses first (libtpu, once
/// loaded, can spend minutes asking a metadata server). Shown by the process's mappings, not a
/// clock.
#[test]
fn no_tpu_and_no_gpu_fail_fast_and_clearly() {
    let cases = [
        (DeviceKind::Tpu, "no TPU: ", "libtpu"),
        (DeviceKind::Cuda, "no NVIDIA GPU on this machine", "xla_cuda_plugin"),
    ];
    for (kind, words, library) in cases {
        let err = Tensor::from_slice_on(&[1.0f32], &[1], Device::new(kind, 0)).unwrap_err();
        assert!(err.to_string().contains(words), "{err}");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.contains(library), "{kind}: {library} was loaded before the hardware check refused");
    }
}

#[test]
fn a_missing_or_wrong_plugin_path_is_a_clear_error() {
    let err = plugin::locate(DeviceKind::Cpu, Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/plugin.so does not exist"), "{err}");

    // A shared library that is not a PJRT plugin.
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("libc");
    let err = eager::pjrt::Api::load(Path::new(libc)).err().expect("libc is no plugin");
    assert!(err.to_string().contains("not a PJRT plugin"), "{err}");

    // A file that is not a shared library at all.
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.so");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let err = eager::pjrt::Api::load(&junk).err().expect("junk is no plugin");
    assert!(err.to_string().contains("cannot load PJRT plugin"), "{err}");
}

#[test]
fn pjrt_errors_carry_code_and_message() {
    let rt = runtime::runtime(DeviceKind::Cpu).unwrap();
    let err = rt
        .client
        .compile("module @m { func.func public @main() -> () { \"stablehlo.addd\"() : () -> () \"func.return\"() : () -> () } }", &eager::pjrt::compile_options(eager::pjrt::Tier::Optimized, None))
        .err()
        .expect("invalid MLIR");
    assert_ne!(err.code, 0);
    assert_eq!(err.function, "PJRT_Client_Compile");
    assert!(!err.message.is_empty());
    assert!(err.to_string().starts_with("PJRT PJRT_Client_Compile failed ("), "{err}");
}

#[test]
fn plugin_reports_its_identity() {
    let rt = runtime::runtime(DeviceKind::Cpu).unwrap();
    assert_eq!(rt.api_version().0, 0);
    assert!(rt.api_version().1 >= 81);
    assert_eq!(rt.client.platform_name, "cpu");
    let attrs = rt.client.api.attributes().unwrap();
    assert!(attrs.iter().any(|(k, _)| k.contains("stablehlo")), "{attrs:?}");
}

#[test]
fn pjrt_handles_of_another_client_or_a_wrong_size_are_refused() -> Result<()> {
    use eager::pjrt::{Buffer, Client};
    use smallvec::SmallVec;
    let rt = runtime::runtime(DeviceKind::Cpu)?;
    let other = Client::create(rt.client.api.clone(), &[]).unwrap();
    let (dev, other_dev) = (&rt.client.devices[0], &other.devices[0]);
    assert!(rt.client.owns(dev) && !rt.client.owns(other_dev));
    let f32_ = DType::F32.pjrt();
    let bytes: Vec<u8> = [1.5f32, 2.5, 3.5].iter().flat_map(|x| x.to_le_bytes()).collect();

    // Host data of the wrong size, or a device of another client: refused before the plugin.
    let err = rt.client.buffer_from_host(&bytes[..8], f32_, &[3], dev).err().expect("8 bytes are no f32[3]");
    assert_eq!((err.code, err.function), (3, "PJRT_Client_BufferFromHostBuffer"));
    let err = rt.client.buffer_from_host(&bytes, f32_, &[-3], dev).err().expect("a negative dim");
    assert_eq!((err.code, err.function), (3, "PJRT_Client_BufferFromHostBuffer"));
    assert!(err.message.starts_with("12 bytes of host data") && err.message.ends_with("dims [-3]"), "{err}");
    // INVALID type aborts in the plugin: refused here.
    let err = rt.client.buffer_from_host(&bytes, 0, &[3], dev).err().expect("the INVALID buffer type");
    assert_eq!((err.code, err.function), (3, "PJRT_Client_BufferFromHostBuffer"));
    assert_eq!(err.message, "12 bytes of host data for buffer type 0 with dims [3]", "{err}");
    assert_eq!(
        rt.client
            .buffer_from_host(&bytes, f32_, &[3], other_dev)
            .err()
            .expect("another client's device")
            .code,
        3
    );

    let mine = rt.client.buffer_from_host(&bytes, f32_, &[3], dev).unwrap();
    let theirs = other.buffer_from_host(&bytes, f32_, &[3], other_dev).unwrap();
    assert_eq!(mine.copy_to_device(other_dev).err().expect("another client's device").code, 3);

    // The executable a cached add runs: fine with its own client's buffers and device only.
    let x = Tensor::from_slice(&[1.5f32, 2.5, 3.5], &[3])?;
    let exe = eager::tensor::executable_for(eager::ops::Op::Binary(eager::ops::Binary::Add), &[&x, &x])?;
    let mut out: SmallVec<[Buffer; 1]> = SmallVec::new();
    let err = exe.execute_and_wait(&[&mine, &theirs], dev, &mut out).expect_err("a buffer of another client");
    assert_eq!((err.code, err.function), (3, "PJRT_LoadedExecutable_Execute"));
    assert_eq!(
        exe.execute_and_wait(&[&mine, &mine], other_dev, &mut out).expect_err("another client's device").code,
        3
    );
    assert!(out.is_empty());
    exe.execute_and_wait(&[&mine, x.buffer()?], dev, &mut out).unwrap();
    assert_eq!(out[0].to_host(&mut [0u8; 8]).expect_err("8 bytes for 12").code, 3);
    let mut sum = vec![0u8; 12];
    out[0].to_host(&mut sum).unwrap();
    let expected: Vec<u8> = [3.0f32, 5.0, 7.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(sum, expected);

    // A scalar's dims come back empty (the plugin may hand a null pointer for them).
    let scalar = rt.client.buffer_from_host(&bytes[..4], f32_, &[], dev).unwrap();
    assert_eq!(scalar.dims().unwrap(), Vec::<i64>::new());
    Ok(())
}

#[test]
fn a_program_gets_one_cpu_device_per_core_up_to_four() {
    // In a child of this test binary with no EAGER_CPU_DEVICES (cargo sets 4 for the tests).
    let name = "a_program_gets_one_cpu_device_per_core_up_to_four";
    if std::env::var_os("EAGER_TEST_DEVICE_COUNT").is_some() {
        let n = eager::devices(eager::DeviceKind::Cpu).expect("the CPU runtime").len();
        println!("@@cpu devices: {n}@@");
        return;
    }
    let run = |setting: Option<&str>| {
        let mut child = std::process::Command::new(std::env::current_exe().expect("this test binary"));
        child.args(["--exact", name, "--nocapture", "--test-threads=1"]).env("EAGER_TEST_DEVICE_COUNT", "1");
        match setting {
            Some(n) => child.env("EAGER_CPU_DEVICES", n),
            None => child.env_remove("EAGER_CPU_DEVICES"),
        };
        String::from_utf8_lossy(&child.output().expect("the child runs").stdout).into_owned()
    };
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    let out = run(None);
    assert!(out.contains(&format!("@@cpu devices: {}@@", cores.min(4))), "{cores} cores: {out}");
    let out = run(Some("3"));
    assert!(out.contains("@@cpu devices: 3@@"), "{out}");
}
