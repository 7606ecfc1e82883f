//! The memory ledger (`eager::memory`) on the real plugin: live bytes go up and down as
//! tensors are made and dropped and equal the sum of the tensors held (sizes from their
//! shapes), each buffer names the op that made it, the peak holds the largest tensors live at
//! it, a sharded tensor books a shard on each device, and a cap makes an op fail with an
//! out-of-memory error that names the request and the largest live tensor, as the plugin's
//! own RESOURCE_EXHAUSTED does.
//! (Its own test binary, one test: the ledger and the cap are process-wide.)

use eager::memory::{self, LiveTensor};
use eager::prelude::*;

fn of_op<'a>(live: &'a [LiveTensor], op: &str, shape: &[usize]) -> Option<&'a LiveTensor> {
    live.iter().find(|t| t.op == op && t.shape == shape)
}

#[test]
fn the_ledger_follows_tensors_names_their_ops_and_guards_the_cap() -> Result<()> {
    let cpu = Device::cpu();
    let base = memory::live_bytes();

    // Made: an upload of 1000 f32 and its exp, 4000 bytes each.
    let a = Tensor::from_slice(&vec![0.5f32; 1000], &[1000])?;
    assert_eq!(memory::live_bytes(), base + 4000);
    let b = a.exp()?;
    let c = b.reshape(&[10, 100])?.sum(&[1], false)?;
    let want = base + 4000 + 4000 + 40;
    assert_eq!(memory::live_bytes(), want, "{:#?}", memory::live_tensors());
    let live = memory::live_tensors();
    assert_eq!(live.iter().map(|t| t.bytes).sum::<u64>(), memory::live_bytes());
    assert_eq!(of_op(&live, "upload", &[1000]).map(|t| (t.bytes, t.dtype)), Some((4000, DType::F32)));
    assert_eq!(of_op(&live, "exp", &[1000]).map(|t| t.bytes), Some(4000));
    assert_eq!(of_op(&live, "sum", &[10]).map(|t| t.bytes), Some(40));
    // Largest first.
    assert!(live.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    assert!(memory::peak_bytes() >= want);

    // Dropped: the exp goes (c does not hold it), then the upload.
    drop(b);
    assert_eq!(memory::live_bytes(), want - 4000);
    drop(a);
    assert_eq!(memory::live_bytes(), base + 40);
    let snap = memory::snapshot();
    assert_eq!(snap.live_bytes, base + 40);
    assert!(snap.peak_bytes >= want);
    assert!(snap.timeline.iter().any(|&(_, b)| b >= want), "{:?}", snap.timeline);
    drop(c);
    assert_eq!(memory::live_bytes(), base);

    // The peak: a big matmul result, dropped, is still among the largest tensors at the peak.
    memory::reset_peak();
    let x = Tensor::from_slice(&vec![1.0f32; 512 * 256], &[512, 256])?;
    let y = x.matmul_transposed(&x, false, true)?; // [512, 512]: 1 MiB
    let at_peak_bytes = memory::live_bytes();
    drop(y);
    let snap = memory::snapshot();
    assert_eq!(snap.peak_bytes, at_peak_bytes);
    assert_eq!(snap.at_peak[0].op, "matmul");
    assert_eq!((snap.at_peak[0].shape.clone(), snap.at_peak[0].bytes), (vec![512, 512], 1 << 20));
    assert!(snap.live.iter().all(|t| t.op != "matmul"));
    assert!(
        snap.summary(5).contains("f32[512, 512] 1.0 MiB on cpu:0, made by matmul"),
        "{}",
        snap.summary(5)
    );

    // A fused region's results are booked when its program runs.
    let before = memory::live_bytes();
    let z = eager::fused(|| x.exp()?.tanh())?;
    z.to_vec::<f32>()?;
    assert_eq!(memory::live_bytes(), before + 512 * 256 * 4);
    drop(z);

    // Sharded: a [8, 256] f32 split by rows over 4 devices is 2 KiB on each.
    let mesh = Mesh::new(&[("data", 4)])?;
    let on = |i: usize| memory::live_bytes_on(Device::new(DeviceKind::Cpu, i));
    let before: Vec<u64> = (0..4).map(on).collect();
    let rows = Tensor::from_slice(&vec![1.0f32; 8 * 256], &[8, 256])?
        .shard(&mesh, &PartitionSpec::new(&[Some("data")]))?;
    for (i, b) in before.iter().enumerate() {
        assert_eq!(on(i), b + 2048, "cpu:{i}");
    }
    drop(rows);
    assert_eq!((0..4).map(on).collect::<Vec<_>>(), before);

    // The CPU plugin keeps no allocator figures: none, and no failure.
    assert!(eager::runtime::device_memory_stats(cpu)?.is_none());

    // A cap 1 MiB above what is live: a 4 MiB result is refused before it runs, naming the op,
    // the request and the largest live tensor (x, an upload of 512 KiB).
    memory::set_limit(Some(memory::live_bytes_on(cpu) + (1 << 20)));
    let refused = Tensor::randn(&[1024, 1024], DType::F32);
    memory::set_limit(None);
    let e = refused.expect_err("a 4 MiB result past a 1 MiB margin is refused");
    let text = e.to_string();
    assert_eq!(e.kind(), "OutOfMemoryError");
    assert!(text.contains("out of memory on cpu:0: asked for 4.0 MiB"), "{text}");
    assert!(
        text.contains("largest live tensors: f32[512, 256] 512.0 KiB on cpu:0, made by upload"),
        "{text}"
    );
    // And the session goes on: the same op runs once the cap is lifted.
    assert_eq!(Tensor::randn(&[1024, 1024], DType::F32)?.shape(), &[1024, 1024]);

    // The plugin's own out of memory (RESOURCE_EXHAUSTED for 1 TiB) reads the same. The kernel
    // refuses such a request under vm.overcommit_memory 0 or 2, but grants it under 1 (and
    // zeros would then touch it all): the address space is capped for the case, which every
    // overcommit setting honours, so it runs on every machine.
    let cap = AddressSpaceCap::headroom(16 << 30);
    // Refused at launch, or (launched asynchronously) reported by the first read.
    let e = match Tensor::zeros(&[1 << 38], DType::F32) {
        Ok(t) => t.sum(&[0], false)?.to_vec::<f32>().expect_err("no 1 TiB buffer"),
        Err(e) => e,
    };
    drop(cap);
    let text = e.to_string();
    assert_eq!(e.kind(), "OutOfMemoryError", "{text}");
    assert!(text.contains("asked for 1.0 TiB with 512.0 KiB live there"), "{text}");
    assert!(text.contains("f32[512, 256] 512.0 KiB on cpu:0, made by upload"), "{text}");
    drop(x);
    Ok(())
}

/// The process's address space capped (RLIMIT_AS) at what is mapped now plus a headroom, while
/// alive; the previous limit comes back on drop.
struct AddressSpaceCap {
    previous: libc::rlimit,
}

impl AddressSpaceCap {
    fn headroom(bytes: u64) -> AddressSpaceCap {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let mapped_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmSize in /proc/self/status");
        let mut previous = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut previous), 0);
            let cap = (mapped_kb * 1024 + bytes).min(previous.rlim_max);
            let limit = libc::rlimit { rlim_cur: cap, rlim_max: previous.rlim_max };
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &limit), 0, "setrlimit(RLIMIT_AS)");
        }
        AddressSpaceCap { previous }
    }
}

impl Drop for AddressSpaceCap {
    fn drop(&mut self) {
        // SAFETY: as above; the soft limit goes back up to at most the unchanged hard one.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &self.previous) };
    }
}
