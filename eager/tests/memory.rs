//! 100 000 ops keep the process's memory bounded: buffers are freed on the last drop, the
//! compile cache holds one executable per key, the profiler log is bounded, and the memory
//! ledger holds only what is live.
//! (Its own test binary: it changes the process-wide profiler capacity.)

use eager::prelude::*;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn hundred_thousand_ops_keep_rss_bounded() -> Result<()> {
    profiler::set_capacity(10_000);
    let a = Tensor::from_slice(&[0.5f32; 256], &[16, 16])?;
    let b = Tensor::from_slice(&[0.25f32; 16], &[16])?;
    let step = |acc: &Tensor| -> Result<Tensor> { acc.add(&b)?.mul_scalar(0.5) };
    let mut acc = a.clone();
    for _ in 0..20_000 {
        acc = step(&acc)?;
    }
    let warm = rss_bytes();
    for _ in 0..100_000 {
        acc = step(&acc)?;
    }
    let after = rss_bytes();
    // Fixed point of x -> (x + 0.25) / 2 is 0.25.
    assert!(acc.to_vec::<f32>()?.iter().all(|&v| (v - 0.25).abs() < 1e-6));
    assert!(profiler::events().len() <= 10_000);
    // The memory ledger forgets every freed buffer: a, b, acc and the cached scalar remain.
    let live = eager::memory::live_tensors();
    assert!(live.len() <= 4, "{} ledger entries live: {live:?}", live.len());
    let grown = after.saturating_sub(warm) as f64 / (1 << 20) as f64;
    println!(
        "RSS after warm-up {:.1} MiB, after 100k more ops {:.1} MiB (+{grown:.1} MiB)",
        warm as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    assert!(grown < 32.0, "RSS grew by {grown:.1} MiB over 100k ops");
    Ok(())
}
