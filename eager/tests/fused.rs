//! Fused regions (`eager::fused`) on the real plugin: every op family gives its eager
//! result as one program; a training loop in a region equals the eager loop and compiles
//! once; reads inside a region run what was recorded and recording goes on; errors name
//! their op (shape errors at once, bad device indices on read); random state is fresh per
//! run; compiled functions run inside.

mod common;

use eager::prelude::*;
use eager::Padding;

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()))
}

/// Programs named `fused` dispatched since `mark`.
fn fused_programs(mark: u64) -> usize {
    profiler::events_since(mark).iter().filter(|e| e.name() == "fused").count()
}

#[test]
fn every_family_in_a_region_gives_its_eager_result_as_one_program() -> Result<()> {
    let _serial = common::serial();
    manual_seed(4);
    let x = Tensor::randn(&[4, 6], DType::F32)?;
    let y = Tensor::randn(&[4, 6], DType::F32)?;
    let w = Tensor::randn(&[6, 8], DType::F32)?;
    type Case = (&'static str, fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>);
    let cases: &[Case] = &[
        ("elementwise", |x, y, _| x.exp()?.add(y)?.mul_scalar(0.5)?.tanh()),
        ("compare and where", |x, y, _| x.gt(y)?.where_cond(x, y)),
        ("cast", |x, _, _| x.to_dtype(DType::F16)?.to_dtype(DType::F32)),
        ("reductions", |x, _, _| x.sum(&[0], false)?.add(&x.max(&[0], false)?)),
        ("matmul", |x, _, w| x.matmul(w)?.relu()),
        ("movement", |x, y, _| Tensor::cat(&[&x.t()?, &y.t()?], 1)?.narrow(0, 1, 3)?.flip(&[1])),
        ("softmax", |x, _, _| x.softmax(-1)),
        ("scan", |x, _, _| x.cumsum(1)),
        ("sort", |x, _, _| Ok(x.sort(1, false)?.0)),
        ("index", |x, y, _| x.take_along_dim(&y.argmax(Some(1), true)?, 1)),
        ("scatter", |x, y, _| x.scatter_add(1, &y.argsort(1, false)?, y)),
        ("conv", |x, y, _| {
            let weight = y.narrow(0, 0, 2)?.narrow(1, 0, 3)?.reshape(&[2, 1, 3])?;
            x.reshape(&[4, 1, 6])?.conv1d(&weight, 1, Padding::Same, 1, 1)
        }),
        ("pool", |x, _, _| x.reshape(&[1, 1, 4, 6])?.max_pool2d([2, 2], None, [0, 0])),
        ("creation", |x, _, _| {
            x.add(&Tensor::ones(&[4, 6], DType::F32)?)?.add(&Tensor::arange(0.0, 6.0, 1.0, DType::F32)?)
        }),
    ];
    for (name, f) in cases {
        let want = values(&f(&x, &y, &w)?);
        let mark = profiler::next_seq();
        let got = eager::fused(|| f(&x, &y, &w))?;
        let ops_outside =
            profiler::events_since(mark).iter().filter(|e| e.cache.is_some() && e.name() != "fused").count();
        assert_eq!((fused_programs(mark), ops_outside), (1, 0), "{name}: one program, no op run by itself");
        let got = values(&got);
        assert!(close(&got, &want), "{name}: {got:?} != {want:?}");
    }
    Ok(())
}

#[test]
fn a_training_loop_in_regions_equals_the_eager_loop_and_compiles_once() -> Result<()> {
    use eager::nn::{self, Linear, Module, Relu, Sequential};
    use eager::optim::{Optimizer, Sgd};
    let _serial = common::serial();
    /// Per step its loss, the parameters after, and per step the executables fetched.
    type Run = (Vec<f32>, Vec<Vec<f32>>, Vec<u64>);
    let run = |fused: bool| -> Result<Run> {
        manual_seed(7);
        let model = Sequential::new().add(Linear::new(12, 16)?).add(Relu).add(Linear::new(16, 3)?);
        let sgd = Sgd::with_momentum(model.parameters(), 0.1, 0.9)?;
        let x = Tensor::randn(&[8, 12], DType::F32)?;
        let y = Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2, 0, 1], &[8])?;
        let step = || -> Result<Tensor> {
            let loss = nn::cross_entropy(&model.forward(&x)?, &y)?;
            loss.backward()?;
            sgd.step()?;
            sgd.zero_grad();
            Ok(loss)
        };
        let (mut losses, mut misses) = (Vec::new(), Vec::new());
        for i in 0..5 {
            let before = cache::stats();
            let live = eager::memory::live_bytes() as i64;
            let loss = if fused { eager::fused(step)? } else { step()? };
            losses.push(loss.item::<f32>()?);
            // The held loss holds no activations (its backward freed the graph): beside it, a
            // step leaves what it replaced (new parameters and momenta for old), no [8, 16]
            // hidden layer (512 bytes), and in a region no program output but those.
            let kept = eager::memory::live_bytes() as i64 - live;
            assert!(i == 0 || kept < 512, "step {i} (fused: {fused}) left {kept} more bytes live");
            let after = cache::stats();
            misses.push(after.misses + after.disk_hits - before.misses - before.disk_hits);
        }
        let params = model.parameters().iter().map(|p| values(&p.get())).collect();
        Ok((losses, params, misses))
    };
    let (want_losses, want_params, _) = run(false)?;
    let mark = profiler::next_seq();
    let (losses, params, misses) = run(true)?;
    assert_eq!(fused_programs(mark), 5, "one program per step");
    assert!(close(&losses, &want_losses), "{losses:?} != {want_losses:?}");
    for (g, w) in params.iter().zip(&want_params) {
        assert!(close(g, w), "a parameter differs: {:?} vs {:?}", &g[..3], &w[..3]);
    }
    // The second step on is the same program: nothing new to compile or load.
    assert_eq!(&misses[2..], &[0, 0, 0], "executables fetched per step: {misses:?}");
    Ok(())
}

/// Fused steps against host math: least squares trained by SGD, each step (forward, backward
/// and update) one program, its loss and the weights after it as the host computes them.
#[test]
fn fused_training_steps_match_host_math() -> Result<()> {
    use eager::optim::{Optimizer, Sgd};
    let _serial = common::serial();
    let dims @ (n, k, o) = (8, 6, 4);
    let f32_of = |v: &[f64]| common::as_f32(v).into_iter().map(f64::from).collect::<Vec<_>>();
    let (xh, th) = (f32_of(&common::fixed_values(n * k, 4)), f32_of(&common::fixed_values(n * o, 5)));
    let mut host_w = f32_of(&common::fixed_values(k * o, 6));
    let x = Tensor::from_slice(&common::as_f32(&xh), &[n, k])?;
    let t = Tensor::from_slice(&common::as_f32(&th), &[n, o])?;
    let w = Var::parameter("w", Tensor::from_slice(&common::as_f32(&host_w), &[k, o])?)?;
    let lr = 0.1;
    let sgd = Sgd::new(vec![w.clone()], lr);
    let mark = profiler::next_seq();
    for step in 0..3 {
        let loss = eager::fused(|| -> Result<Tensor> {
            let loss = eager::nn::mse(&x.matmul(&w.get())?, &t)?;
            loss.backward()?;
            sgd.step()?;
            sgd.zero_grad();
            Ok(loss)
        })?;
        let (want_loss, grad) = common::host_least_squares(&xh, &host_w, &th, dims);
        common::assert_all_close(
            &format!("loss at step {step}"),
            &[loss.item::<f32>()? as f64],
            &[want_loss],
            1e-5,
            1e-6,
        );
        host_w.iter_mut().zip(&grad).for_each(|(p, g)| *p -= lr * g);
        let got: Vec<f64> = values(&w.get()).into_iter().map(f64::from).collect();
        common::assert_all_close(&format!("weights after step {step}"), &got, &host_w, 1e-5, 1e-6);
    }
    assert_eq!(fused_programs(mark), 3, "one program per step");
    Ok(())
}

#[test]
fn a_read_inside_a_region_runs_what_was_recorded_and_recording_goes_on() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
    let mark = profiler::next_seq();
    let (first, last) = eager::fused(|| {
        let a = x.mul_scalar(2.0)?;
        let first = a.sum_all()?.item::<f32>()?; // runs `a` and the sum now
        let b = a.add(&x)?.exp()?; // recorded again, on `a`'s value
        Ok((first, b))
    })?;
    assert_eq!(first, 12.0);
    let want: Vec<f32> = [3.0f32, 6.0, 9.0].iter().map(|v| v.exp()).collect();
    assert!(close(&values(&last), &want));
    assert_eq!(fused_programs(mark), 2);
    // Results are ordinary tensors afterwards, with gradients as eagerly.
    let leaf = x.set_requires_grad(true)?;
    let y = eager::fused(|| leaf.mul(&leaf)?.sum_all())?;
    y.backward()?;
    assert_eq!(values(&leaf.grad().unwrap()), vec![2.0, 4.0, 6.0]);
    Ok(())
}

#[test]
fn errors_in_a_region_name_their_op() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32)?.reshape(&[4, 6])?;
    // A shape error is raised by the op, at once, as eagerly.
    let e = eager::fused(|| x.matmul(&x)).unwrap_err().to_string();
    assert!(e.starts_with("matmul:"), "{e}");
    // A bad index computed inside the region fails the read, naming the indexing op.
    let bad = eager::fused(|| {
        let idx = Tensor::arange(0.0, 4.0, 1.0, DType::I64)?.add_scalar(3.0)?.reshape(&[4, 1])?;
        x.take_along_dim(&idx, 1)
    })?;
    let e = bad.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("gather(") && e.contains("in fused"), "{e}");
    assert!(e.contains("index 6 is out of range for dim 1 of size 6"), "{e}");
    // The same in range reads fine.
    let good = eager::fused(|| {
        let idx = Tensor::arange(0.0, 4.0, 1.0, DType::I64)?.add_scalar(2.0)?.reshape(&[4, 1])?;
        x.take_along_dim(&idx, 1)
    })?;
    assert_eq!(values(&good), vec![2.0, 9.0, 16.0, 23.0]);
    Ok(())
}

#[test]
fn random_state_is_fresh_per_run_and_compiled_functions_run_inside() -> Result<()> {
    let _serial = common::serial();
    let a = eager::fused(|| Tensor::randn(&[64], DType::F32))?;
    let b = eager::fused(|| Tensor::randn(&[64], DType::F32))?;
    assert_ne!(values(&a), values(&b));
    let double = eager::compile("double", |t: &[Tensor]| Ok(vec![t[0].mul_scalar(2.0)?]));
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2])?;
    let got = eager::fused(|| double.call(&[&x.add_scalar(1.0)?])?[0].add_scalar(1.0))?;
    assert_eq!(values(&got), vec![5.0, 7.0]);
    Ok(())
}

#[test]
fn a_trace_on_one_thread_never_takes_the_fused_region_of_another() {
    // One thread runs fused regions while another traces compiled functions: both share the
    // tracer's recording slot, and neither's values may end up in the other's program.
    let _serial = common::serial();
    let fusing = std::thread::spawn(|| -> eager::Result<()> {
        for i in 0..300 {
            let x = Tensor::from_slice(&[i as f32; 16], &[16])?;
            let y = eager::fused(|| x.add_scalar(1.0)?.mul_scalar(2.0)?.sqrt())?;
            let want = ((i as f32 + 1.0) * 2.0).sqrt();
            assert!(y.to_vec::<f32>()?.iter().all(|&v| (v - want).abs() < 1e-5), "region {i}");
        }
        Ok(())
    });
    let x = Tensor::from_slice(&[3.0f32; 16], &[16]).unwrap();
    for _ in 0..100 {
        // A new compiled function each time: each call traces.
        let f =
            eager::compile("traced_beside_a_region", |a: &[Tensor]| Ok(vec![a[0].mul_scalar(2.0)?.neg()?]));
        assert_eq!(f.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap(), vec![-6.0; 16]);
    }
    fusing.join().expect("the fusing thread").expect("every region ran as its own");
}
