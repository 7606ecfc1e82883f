//! Fetching ahead on the real plugin: the first backward pass and optimizer step of a loop
//! record their ops dry, fetch the executables they lack side by side, then run, each first
//! dispatch reporting its fetch. Checked against host math: the dry run leaves no trace
//! (gradients not doubled, Vars set once), later steps fetch nothing ahead, and gradients
//! accumulate over two backward passes as in torch.

mod common;

use eager::optim::{Optimizer, Sgd};
use eager::prelude::*;
use eager::profiler::CacheOutcome;

use common::assert_all_close;

const X: [usize; 2] = [5, 7];
const W: [usize; 2] = [7, 11];

/// A row-major `rows x cols` matrix from a seed, in [-1, 1).
fn matrix(rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..rows * cols)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// d/dw of sum(relu(x w)) on the host: x^T (x w > 0).
fn host_grad(x: &[f64], w: &[f64]) -> Vec<f64> {
    let (n, k, m) = (X[0], X[1], W[1]);
    let mut g = vec![0.0; k * m];
    for r in 0..n {
        for c in 0..m {
            let z: f64 = (0..k).map(|i| x[r * k + i] * w[i * m + c]).sum();
            if z > 0.0 {
                for i in 0..k {
                    g[i * m + c] += x[r * k + i];
                }
            }
        }
    }
    g
}

fn loss(x: &Tensor, w: &Var) -> Result<Tensor> {
    x.matmul(&w.get())?.relu()?.sum_all()
}

fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_f64_vec()
}

#[test]
fn the_first_steps_fetch_ahead_and_match_host_math() -> Result<()> {
    let _serial = common::serial();
    // Fetching ahead serves passes run op by op (on a device other than the default, or so).
    let _op_by_op = common::OpByOp::new();
    let (x_host, w0) = (matrix(X[0], X[1], 3), matrix(W[0], W[1], 4));
    let x = Tensor::from_slice(&x_host.iter().map(|v| *v as f32).collect::<Vec<_>>(), &X)?;
    let w = Var::parameter("w", Tensor::from_slice(&w0.iter().map(|v| *v as f32).collect::<Vec<_>>(), &W)?)?;
    let (lr, momentum) = (0.1, 0.9);
    let sgd = Sgd::with_momentum(vec![w.clone()], lr, momentum)?;
    // Fetching ahead runs a compile per core: with one core it is off by design, and that is
    // what is checked there instead.
    let parallel = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;

    // Step 1: new shapes, so the backward pass and the step fetch ahead.
    let (before, mark) = (cache::stats(), profiler::next_seq());
    loss(&x, &w)?.backward()?;
    let g1 = host_grad(&x_host, &w0);
    assert_all_close(
        "gradient after one backward",
        &values(&w.grad().expect("a gradient"))?,
        &g1,
        1e-5,
        1e-5,
    );
    sgd.step()?;
    sgd.zero_grad();
    let w1: Vec<f64> = w0.iter().zip(&g1).map(|(p, g)| p - lr * g).collect();
    assert_all_close("weights after one step", &values(&w.get())?, &w1, 1e-5, 1e-5);
    let after = cache::stats();
    if parallel {
        assert!(after.ahead - before.ahead >= 2, "nothing fetched ahead: {after}");
        println!("fetch ahead with several cores: {} fetched", after.ahead - before.ahead);
    } else {
        assert_eq!(after.ahead, before.ahead, "fetched ahead on one core: {after}");
        println!("fetch ahead on one core: off, as it should be");
    }
    // Each executable fetched ahead shows as its op's miss, with its compile time; no hit is
    // counted for it.
    let events = profiler::events_since(mark);
    let misses = events.iter().filter(|e| e.cache == Some(CacheOutcome::Miss)).count() as u64;
    assert_eq!(misses, after.misses - before.misses, "misses in the log vs the counters");
    assert!(
        events.iter().filter(|e| e.is_miss()).all(|e| e.compile_ns > 0),
        "a miss without its compile time"
    );

    // Step 2: the velocity is g1; nothing new to compile.
    loss(&x, &w)?.backward()?;
    let g2 = host_grad(&x_host, &w1);
    sgd.step()?;
    sgd.zero_grad();
    let w2: Vec<f64> =
        w1.iter().zip(g1.iter().zip(&g2)).map(|(p, (a, b))| p - lr * (momentum * a + b)).collect();
    assert_all_close("weights after two steps", &values(&w.get())?, &w2, 1e-5, 1e-5);

    // Step 3: a loop's later steps record nothing dry and fetch nothing.
    let before = cache::stats();
    loss(&x, &w)?.backward()?;
    sgd.step()?;
    sgd.zero_grad();
    let after = cache::stats();
    assert_eq!((after.ahead, after.misses, after.disk_hits), (before.ahead, before.misses, before.disk_hits));
    Ok(())
}

/// The one-core rule on any machine: the test above again, in a child process pinned to one of
/// this process's CPUs (so `available_parallelism` is 1 there), where it checks that nothing is
/// fetched ahead and the numbers are the same.
#[test]
fn on_one_core_nothing_is_fetched_ahead() {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "the_first_steps_fetch_ahead_and_match_host_math",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    // SAFETY: between fork and exec the child makes two syscalls on its own affinity, with a
    // set on its stack: nothing that allocates or takes a lock.
    unsafe {
        cmd.pre_exec(|| {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let first = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).unwrap_or(0);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(first, &mut one);
            if libc::sched_setaffinity(0, size, &one) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("fetch ahead on one core: off"), "{stdout}");
}

#[test]
fn gradients_of_two_backward_passes_add_up() -> Result<()> {
    let _serial = common::serial();
    let (x_host, w0) = (matrix(X[0], X[1], 5), matrix(W[0], W[1], 6));
    let x = Tensor::from_slice(&x_host, &X)?;
    let w = Tensor::from_slice(&w0, &W)?.set_requires_grad(true)?;
    let y = x.matmul(&w)?.relu()?.sum_all()?;
    y.backward_retain_graph()?;
    y.backward()?;
    let twice: Vec<f64> = host_grad(&x_host, &w0).iter().map(|g| 2.0 * g).collect();
    assert_all_close(
        "gradient after two backward passes",
        &values(&w.grad().expect("a gradient"))?,
        &twice,
        1e-12,
        1e-12,
    );
    Ok(())
}
