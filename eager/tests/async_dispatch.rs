//! Asynchronous dispatch on the real CPU plugin: ops return before the device finished, reads
//! wait, a failure on the device is reported by the read naming the op that failed, and the
//! profiler still reports the device time.

mod common;

use eager::prelude::*;

#[test]
fn an_op_returns_before_the_device_finishes_and_reads_wait() -> Result<()> {
    // Alone: another test's ops would join the ops in flight counted here, and its tensors
    // would join the live tensors the failure test lists.
    let _serial = common::serial();
    // Slow by size (137 GFLOP: a second or more on any CPU), against the microseconds a cached
    // dispatch takes: the product is still running when its dispatch returns.
    let n = 4096;
    let a = Tensor::rand(&[n, n], DType::F32)?;
    // Compile first, so that the dispatch observed is a cache hit.
    a.matmul(&a)?.block_until_ready()?;
    synchronize();
    let mark = profiler::next_seq();
    let c = a.matmul(&a)?;
    let dispatched_at = profiler::now_ns();
    let in_flight = profiler::ops_in_flight();
    let sum = c.sum_all()?.item::<f32>()?;
    let read_at = profiler::now_ns();
    // The dispatch returned with the product still queued on the device.
    assert!(in_flight >= 1, "the product had finished on the device when its dispatch returned");
    // The reference, on the host: sum(A A) = sum over k of (column k's sum) * (row k's sum).
    let host = a.to_vec::<f32>()?;
    let (mut col, mut row) = (vec![0.0f64; n], vec![0.0f64; n]);
    for (at, &v) in host.iter().enumerate() {
        col[at % n] += v as f64;
        row[at / n] += v as f64;
    }
    let want: f64 = col.iter().zip(&row).map(|(c, r)| c * r).sum();
    assert!(((sum as f64) - want).abs() <= 1e-3 * want.abs(), "{sum} vs {want}");
    // The profiler books the device time of the matmul, not the microseconds to enqueue it:
    // its span ends after the dispatch returned (an enqueue time would end before), and no
    // later than the read that waited for it.
    let events = profiler::events_since(mark);
    let settled_at = profiler::now_ns();
    let mm = events.iter().find(|e| e.name() == "matmul").expect("matmul recorded");
    assert!(
        mm.end_ns() > dispatched_at,
        "the matmul's span ends at {} ns, before its dispatch returned ({dispatched_at} ns): {mm:?}",
        mm.end_ns()
    );
    assert!(
        mm.end_ns() <= settled_at,
        "span end {} ns, read at {read_at} ns, settled {settled_at} ns",
        mm.end_ns()
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
    let again = result.block_until_ready().unwrap_err().to_string();
    assert!(again.contains("out of memory on cpu:0: asked for 4.0 TiB"), "{again}");

    // The session goes on: the next ops work.
    let ok = a.slice(0, 0, 2, 1)?.sum_all()?.item::<f32>()?;
    let want: f32 = a.to_vec::<f32>()?[..2 * 1200].iter().sum();
    assert!((ok - want).abs() < 1e-2, "{ok} vs {want}");
    Ok(())
}

#[test]
fn synchronize_waits_for_every_pending_op() -> Result<()> {
    let _serial = common::serial();
    let a = Tensor::rand(&[2048, 2048], DType::F32)?;
    a.matmul(&a)?.block_until_ready()?;
    // Eight products of 17 GFLOP each, queued: seconds of device work.
    let mut outs = Vec::new();
    for _ in 0..8 {
        outs.push(a.matmul(&a)?);
    }
    assert!(profiler::ops_in_flight() >= 1, "the products finished before synchronize was called");
    synchronize();
    // Only synchronize brings the count to 0 here: nothing was read.
    assert_eq!(profiler::ops_in_flight(), 0, "synchronize returned with ops in flight");
    let first = outs[0].to_vec::<f32>()?;
    for o in &outs[1..] {
        assert_eq!(o.to_vec::<f32>()?, first);
    }
    Ok(())
}
