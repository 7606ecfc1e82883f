//! Asynchronous dispatch on the real CPU plugin: ops return before the device finished, reads
//! wait, a failure on the device is reported by the read naming the op that failed, and the
//! profiler still reports the device time.

mod common;

use std::time::Instant;

use eager::prelude::*;

#[test]
fn an_op_returns_before_the_device_finishes_and_reads_wait() -> Result<()> {
    // Alone: another test's ops would slow the dispatch timed here, and its tensors would
    // join the live tensors the failure test lists.
    let _serial = common::serial();
    // Large enough (17 GFLOP) that the device's part dwarfs a dispatch slowed by a busy machine.
    let a = Tensor::rand(&[2048, 2048], DType::F32)?;
    // Compile first, so that the timed dispatch is a cache hit.
    a.matmul(&a)?.block_until_ready()?;
    let mark = profiler::next_seq();
    let t = Instant::now();
    let c = a.matmul(&a)?;
    let dispatched = t.elapsed();
    let sum = c.sum_all()?.item::<f32>()?;
    let read = t.elapsed();
    // Dispatch took a small part of the time the result needed.
    assert!(dispatched * 5 < read, "dispatch {dispatched:?}, read {read:?}");
    // The reference: the same product on the host.
    let host = a.to_ndarray::<f32>()?.into_dimensionality::<ndarray::Ix2>().unwrap();
    let want = host.dot(&host).sum();
    assert!((sum - want).abs() <= 1e-3 * want.abs(), "{sum} vs {want}");
    // The profiler reports the device time of the matmul, not the microseconds to enqueue it.
    let events = profiler::events_since(mark);
    // (Measured after the completion callbacks ran: on a busy machine they may run late.)
    let everything = t.elapsed();
    let mm = events.iter().find(|e| e.name() == "matmul").expect("matmul recorded");
    assert!(
        mm.execute_ns as u128 > 5 * dispatched.as_nanos(),
        "execute {} ns, dispatch {dispatched:?}",
        mm.execute_ns
    );
    assert!(
        (mm.execute_ns as u128) < everything.as_nanos(),
        "execute {} ns, all {everything:?}",
        mm.execute_ns
    );
    Ok(())
}

#[test]
fn a_device_failure_is_reported_on_read_naming_the_op() -> Result<()> {
    let _serial = common::serial();
    let a = Tensor::rand(&[1200, 1200], DType::F32)?;
    let huge = [1usize << 40]; // 4 TiB of f32: no machine allocates it
    let run = || -> Result<Tensor> {
        // A slow product whose result is still pending when the next ops are dispatched.
        let s = a.matmul(&a)?.matmul(&a)?.sum_all()?;
        s.broadcast_to(&huge)?.sum_all()?.mul_scalar(2.0)
    };
    // The first time, compiling lets the input finish first: XLA refuses the allocation at
    // dispatch, and the error names the op at once.
    match run() {
        Err(e) => assert!(e.to_string().contains("broadcast_to(f32[]) {shape=[1099511627776]}"), "{e}"),
        Ok(t) => drop(t.to_vec::<f32>().unwrap_err()),
    }
    // Compiled now: dispatch returns while the input is pending, and the failure comes later.
    let result = run()?;
    let err = result.to_vec::<f32>().unwrap_err();
    let msg = err.to_string();
    // A device failure, reported by the read, naming the op: here the allocator's, which
    // reads as out of memory and names the largest live tensor (a, made by rand).
    assert!(matches!(err, Error::OutOfMemory { .. }), "{msg}");
    assert!(
        msg.starts_with(
            "broadcast_to(f32[]) {shape=[1099511627776]}: out of memory on cpu:0: asked for 4.0 TiB"
        ),
        "{msg}"
    );
    assert!(msg.contains("Out of memory"), "{msg}");
    assert!(msg.contains("reading the result of mul(f32[], f32[])"), "{msg}");
    assert!(msg.contains("largest live tensors: f32[1200, 1200] 5.5 MiB on cpu:0, made by rand"), "{msg}");
    assert!(result.block_until_ready().is_err());

    // The session goes on: the next ops work.
    let ok = a.slice(0, 0, 2, 1)?.sum_all()?.item::<f32>()?;
    let want: f32 = a.to_vec::<f32>()?[..2 * 1200].iter().sum();
    assert!((ok - want).abs() < 1e-2, "{ok} vs {want}");
    Ok(())
}

#[test]
fn synchronize_waits_for_every_pending_op() -> Result<()> {
    let _serial = common::serial();
    let a = Tensor::rand(&[512, 512], DType::F32)?;
    let mut outs = Vec::new();
    for _ in 0..8 {
        outs.push(a.matmul(&a)?);
    }
    synchronize();
    // Every result is ready: reading it now is quick and right.
    let first = outs[0].to_vec::<f32>()?;
    for o in &outs[1..] {
        assert_eq!(o.to_vec::<f32>()?, first);
    }
    Ok(())
}
