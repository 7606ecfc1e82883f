//! Tiered compilation on the real plugin: a new key runs at the quick tier; once hot (by
//! calls, or by device time) its optimized executable is compiled in the background and
//! swapped in, giving the same results; the persistent cache keeps both tiers, so a fresh
//! process loads the optimized one; a compiled function, and an op large by its FLOPs or the
//! bytes it moves, is optimized from the start.

use std::process::Command;

use eager::cache::{self, Tier, Tiering};
use eager::prelude::*;
use eager::profiler::CacheOutcome;
use eager::runtime;

const CHILD_ENV: &str = "EAGER_TEST_TIERS_CHILD";

/// The tier and cache outcome of the last op dispatched since `mark`.
fn last_op(mark: u64) -> (Tier, CacheOutcome) {
    let events = profiler::events_since(mark);
    let e = events.iter().rev().find(|e| e.cache.is_some()).expect("an op ran");
    (e.info.tier, e.cache.unwrap())
}

fn host_exp(x: &[f32]) -> Vec<f32> {
    x.iter().map(|v| (*v as f64).exp() as f32).collect()
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 2e-6 * w.abs().max(1.0))
}

/// Runs in a child process only: the first exp of the parent's shape, from the cache dir the
/// parent filled; prints its tier and outcome.
#[test]
#[ignore = "runs as a child process of the test below"]
fn child_runs_exp() -> Result<()> {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    let x = Tensor::rand(&[53, 61], DType::F32)?;
    let mark = profiler::next_seq();
    x.exp()?.block_until_ready()?;
    println!("CHILD_TIER {:?}", last_op(mark));
    Ok(())
}

#[test]
fn a_hot_key_is_swapped_to_the_optimized_tier_and_gives_the_same_results() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("EAGER_COMPILE_CACHE_DIR", dir.path());
    std::env::remove_var("EAGER_COMPILE_CACHE");
    cache::set_tiering(Tiering { enabled: true, hot_calls: 5, hot_device_ms: 1e9 });

    // Hot by calls: the first call compiles quick, the fifth hit queues the optimized compile.
    let x = Tensor::rand(&[53, 61], DType::F32)?;
    let want = host_exp(&x.to_vec::<f32>()?);
    let mark = profiler::next_seq();
    let quick = x.exp()?.to_vec::<f32>()?;
    assert_eq!(last_op(mark), (Tier::Quick, CacheOutcome::Miss));
    assert!(close(&quick, &want), "quick tier: {:?} vs {:?}", &quick[..4], &want[..4]);
    for _ in 0..5 {
        x.exp()?.block_until_ready()?;
    }
    runtime::wait_for_promotions();
    let mark = profiler::next_seq();
    let optimized = x.exp()?.to_vec::<f32>()?;
    assert_eq!(last_op(mark), (Tier::Optimized, CacheOutcome::Hit));
    assert!(close(&optimized, &want), "optimized tier: {:?} vs {:?}", &optimized[..4], &want[..4]);
    let swaps = cache::swaps();
    let swap = swaps.iter().find(|s| s.info.name == "exp").expect("exp was swapped");
    assert_eq!((swap.calls, swap.info.tier), (5, Tier::Optimized));
    assert!(cache::stats().swaps >= 1);

    // Hot by device time: calls alone never would be.
    cache::set_tiering(Tiering { enabled: true, hot_calls: u64::MAX, hot_device_ms: 0.001 });
    let mark = profiler::next_seq();
    x.tanh()?.block_until_ready()?;
    assert_eq!(last_op(mark).0, Tier::Quick);
    runtime::synchronize(); // its device time is booked
    x.tanh()?.block_until_ready()?;
    runtime::wait_for_promotions();
    let mark = profiler::next_seq();
    x.tanh()?.block_until_ready()?;
    assert_eq!(last_op(mark).0, Tier::Optimized);
    let tanh = cache::swaps().into_iter().find(|s| s.info.name == "tanh").expect("tanh was swapped");
    assert!(tanh.device_ms > 0.0 && tanh.calls == 1, "{tanh:?}");

    // A compiled function is optimized from the start.
    let f = eager::compile("exp_then_sum", |a: &[Tensor]| Ok(vec![a[0].exp()?.sum_all()?]));
    let mark = profiler::next_seq();
    f.call(&[&x])?;
    assert_eq!(last_op(mark).0, Tier::Optimized);

    // A large op starts optimized (its quick code would run it slower until hot): a matmul of
    // f32[1024, 1024] by its FLOPs (2^31), an exp of 4M f32 by the bytes it moves (32 MiB);
    // a small matmul starts quick. Each gives the host's values.
    let (a, b) = (Tensor::rand(&[1024, 1024], DType::F32)?, Tensor::rand(&[1024, 1024], DType::F32)?);
    let mark = profiler::next_seq();
    let big = a.matmul(&b)?.to_vec::<f32>()?;
    assert_eq!(last_op(mark), (Tier::Optimized, CacheOutcome::Miss));
    let (av, bv) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    for (i, j) in [(0, 0), (1, 1023), (517, 3), (1023, 1023), (300, 700)] {
        let want: f64 = (0..1024).map(|k| av[i * 1024 + k] as f64 * bv[k * 1024 + j] as f64).sum();
        let got = big[i * 1024 + j] as f64;
        assert!((got - want).abs() <= 1e-4 * want.abs(), "[{i}, {j}]: {got} vs {want}");
    }
    let (s, t) = (Tensor::rand(&[8, 16], DType::F32)?, Tensor::rand(&[16, 4], DType::F32)?);
    let mark = profiler::next_seq();
    let small = s.matmul(&t)?.to_vec::<f32>()?;
    assert_eq!(last_op(mark), (Tier::Quick, CacheOutcome::Miss));
    let (sv, tv) = (s.to_vec::<f32>()?, t.to_vec::<f32>()?);
    for (i, j) in (0..8).flat_map(|i| (0..4).map(move |j| (i, j))) {
        let want: f64 = (0..16).map(|k| sv[i * 16 + k] as f64 * tv[k * 4 + j] as f64).sum();
        assert!((small[i * 4 + j] as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "[{i}, {j}]");
    }
    let wide = Tensor::rand(&[2048, 2048], DType::F32)?;
    let mark = profiler::next_seq();
    let got = wide.exp()?.to_vec::<f32>()?;
    assert_eq!(last_op(mark), (Tier::Optimized, CacheOutcome::Miss));
    assert!(close(&got, &host_exp(&wide.to_vec::<f32>()?)), "exp of 4M f32 at the optimized tier");

    // Tiering off: a new key compiles optimized at once.
    cache::set_tiering(Tiering { enabled: false, ..cache::tiering() });
    let mark = profiler::next_seq();
    x.sigmoid()?.block_until_ready()?;
    assert_eq!(last_op(mark).0, Tier::Optimized);

    // A fresh process with this cache dir loads exp's optimized executable (both tiers are
    // on disk; the optimized one wins).
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_runs_exp", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("CHILD_TIER (Optimized, DiskHit)"), "{stdout}");
    Ok(())
}
