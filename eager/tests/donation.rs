//! Buffer donation: a compiled function writes its results into the memory of the inputs it
//! overwrites (its donated arguments, the Vars it sets) — the same device address, the input
//! buffer deleted by PJRT — and a donated tensor still held is a clear error, never a stale
//! value. And `dynamic_update_slice` / `dynamic_slice` against plain indexing, with their
//! gradients against central differences.

// The memory ledger and device addresses are process-wide: every test holds `common::serial`.
mod common;

use eager::prelude::*;
use eager::Var;

fn address(t: &Tensor) -> usize {
    t.buffer().expect("a live buffer").device_address().expect("PJRT_Buffer_UnsafePointer")
}

#[test]
fn a_donated_argument_holds_the_result_in_its_own_memory() -> Result<()> {
    let _serial = common::serial();
    let step = eager::compile("bump", |a: &[Tensor]| Ok(vec![a[0].add_scalar(1.0)?, a[1].mul_scalar(2.0)?]))
        .donate([0]);
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4])?;
    let kept = Tensor::from_slice(&[5.0f32; 4], &[4])?;
    let at = address(&x);
    let held = x.clone();
    let out = step.call(&[&x, &kept])?;
    assert_eq!(out[0].to_vec::<f32>()?, vec![2.0, 3.0, 4.0, 5.0]);
    assert_eq!(address(&out[0]), at, "the result was written where the donated argument was");
    assert!(x.is_donated() && held.is_donated(), "every handle of a donated tensor sees it");
    // An argument not donated is untouched.
    assert!(!kept.is_donated());
    assert_eq!(kept.to_vec::<f32>()?, vec![5.0; 4]);
    // Using the donated tensor is an error naming it and the function, never its old values.
    let read = held.to_vec::<f32>().unwrap_err().to_string();
    assert!(
        read.contains("f32[4] was donated to `bump` (its input 0)")
            && read.contains("use what the call returned"),
        "{read}"
    );
    let used = x.add_scalar(1.0).unwrap_err().to_string();
    assert!(used.contains("was donated to `bump`"), "{used}");
    // The next call donates the result of the last, as a loop carries a state.
    let again = step.call(&[&out[0], &kept])?;
    assert_eq!(again[0].to_vec::<f32>()?, vec![3.0, 4.0, 5.0, 6.0]);
    assert!(out[0].is_donated());
    Ok(())
}

#[test]
fn an_argument_passed_twice_is_copied_not_donated() -> Result<()> {
    let _serial = common::serial();
    let step = eager::compile("twice", |a: &[Tensor]| Ok(vec![a[0].add(&a[1])?])).donate([0]);
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2])?;
    let out = step.call(&[&x, &x])?;
    assert_eq!(out[0].to_vec::<f32>()?, vec![2.0, 4.0]);
    assert!(!x.is_donated());
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, 2.0]);
    Ok(())
}

#[test]
fn donating_what_no_result_replaces_is_an_error_at_the_first_call() -> Result<()> {
    let _serial = common::serial();
    let step = eager::compile("shrink", |a: &[Tensor]| Ok(vec![a[0].sum_all()?])).donate([0]);
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2])?;
    let e = step.call(&[&x]).unwrap_err().to_string();
    assert!(e.contains("shrink: donates argument 0 (f32[2]), but no result"), "{e}");
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, 2.0], "nothing ran, nothing was donated");
    let e =
        eager::compile("none", |a: &[Tensor]| Ok(vec![a[0].clone()])).donate([3]).call(&[&x]).unwrap_err();
    assert!(e.to_string().contains("donates argument 3, but it takes only 1 arguments"), "{e}");
    Ok(())
}

#[test]
fn a_var_the_step_overwrites_is_updated_in_place_unless_its_old_value_is_held() -> Result<()> {
    let _serial = common::serial();
    let w = Var::new("w", Tensor::from_slice(&[1.0f32; 64], &[8, 8])?);
    let step = eager::compile("decay", |_: &[Tensor]| {
        w.set(w.get().mul_scalar(0.5)?)?;
        Ok(vec![])
    });
    step.call(&[])?; // traced and compiled
    let live = eager::memory::live_bytes();
    let at = address(&w.get());
    step.call(&[])?;
    assert_eq!(address(&w.get()), at, "the Var's new value is in its old memory");
    assert_eq!(eager::memory::live_bytes(), live, "one copy of the Var, before and after");
    assert_eq!(w.get().to_vec::<f32>()?, vec![0.25; 64]);
    // A value held elsewhere is the holder's: copied, left as it was.
    let old = w.get();
    step.call(&[])?;
    assert!(!old.is_donated());
    assert_eq!(old.to_vec::<f32>()?, vec![0.25; 64]);
    assert_eq!(w.get().to_vec::<f32>()?, vec![0.125; 64]);
    Ok(())
}

#[test]
fn a_copy_keeps_the_values_of_a_tensor_about_to_be_donated() -> Result<()> {
    let _serial = common::serial();
    let step = eager::compile("neg", |a: &[Tensor]| Ok(vec![a[0].neg()?])).donate([0]);
    let x = Tensor::from_slice(&[1.0f32, -2.0], &[2])?;
    let keep = x.copy()?;
    assert_ne!(address(&keep), address(&x));
    let out = step.call(&[&x])?;
    assert_eq!(out[0].to_vec::<f32>()?, vec![-1.0, 2.0]);
    assert_eq!(keep.to_vec::<f32>()?, vec![1.0, -2.0]);
    Ok(())
}

#[test]
fn dynamic_update_slice_writes_one_block_at_a_start_that_is_data() -> Result<()> {
    let _serial = common::serial();
    let x = Tensor::from_slice(&(0..24).map(|v| v as f32).collect::<Vec<_>>(), &[2, 4, 3])?;
    let u = Tensor::from_slice(&[-1.0f32, -2.0, -3.0], &[1, 1, 3])?;
    for (start, row) in [(0i64, 0usize), (2, 2), (3, 3), (9, 3)] {
        let at = Tensor::from_slice(&[1i64, start, 0], &[3])?;
        let got = x.dynamic_update_slice(&u, &at)?.to_vec::<f32>()?;
        // Plain indexing: batch 1, row `row` (a start past the end is clamped to fit, as XLA).
        let mut want: Vec<f32> = (0..24).map(|v| v as f32).collect();
        want[12 + row * 3..12 + row * 3 + 3].copy_from_slice(&[-1.0, -2.0, -3.0]);
        assert_eq!(got, want, "start {start}");
        let block = x.dynamic_slice(&at, &[1, 1, 3])?.to_vec::<f32>()?;
        assert_eq!(block, x.to_vec::<f32>()?[12 + row * 3..12 + row * 3 + 3].to_vec(), "start {start}");
    }
    let e = x
        .dynamic_update_slice(&u.to_dtype(DType::F64)?, &Tensor::from_slice(&[0i64, 0, 0], &[3])?)
        .unwrap_err();
    assert!(e.to_string().contains("the update f64[1, 1, 3] must have the dtype of f32[2, 4, 3]"), "{e}");
    Ok(())
}

#[test]
fn dynamic_update_slice_gradients_match_central_differences() -> Result<()> {
    let _serial = common::serial();
    let xs: Vec<f64> = (0..6).map(|v| 0.3 * v as f64 - 0.7).collect();
    let us: Vec<f64> = vec![1.5, -0.25];
    let weights: Vec<f64> = (0..6).map(|v| 1.0 + v as f64).collect();
    let at = Tensor::from_slice(&[1i64, 0], &[2])?;
    let wt = Tensor::from_slice(&weights, &[3, 2])?;
    // f(x, u) = sum(w * dus(x, u, [1, 0])^2)
    let f = |x: &Tensor, u: &Tensor| -> Result<Tensor> {
        let y = x.dynamic_update_slice(u, &at)?;
        y.mul(&y)?.mul(&wt)?.sum_all()
    };
    let x = Tensor::from_slice(&xs, &[3, 2])?.set_requires_grad(true)?;
    let u = Tensor::from_slice(&us, &[1, 2])?.set_requires_grad(true)?;
    f(&x, &u)?.backward()?;
    let (gx, gu) =
        (x.grad().expect("x's gradient").to_vec::<f64>()?, u.grad().expect("u's gradient").to_vec::<f64>()?);
    let value = |xs: &[f64], us: &[f64]| -> f64 {
        let x = Tensor::from_slice(xs, &[3, 2]).unwrap();
        let u = Tensor::from_slice(us, &[1, 2]).unwrap();
        f(&x, &u).unwrap().item::<f64>().unwrap()
    };
    // Each gradient against (f(v + h) - f(v - h)) / 2h, one element of `at` moved at a time.
    let check = |what: &str, grad: &[f64], at: &[f64], f_of: &dyn Fn(&[f64]) -> f64| {
        let h = 1e-6;
        for i in 0..at.len() {
            let (mut up, mut down) = (at.to_vec(), at.to_vec());
            up[i] += h;
            down[i] -= h;
            let numeric = (f_of(&up) - f_of(&down)) / (2.0 * h);
            assert!((grad[i] - numeric).abs() < 1e-5, "{what}[{i}]: {} vs {numeric}", grad[i]);
        }
    };
    check("x", &gx, &xs, &|x| value(x, &us));
    // The overwritten row takes no gradient; the update takes it.
    assert_eq!(&gx[2..4], &[0.0, 0.0]);
    check("u", &gu, &us, &|u| value(&xs, u));
    // dynamic_slice's gradient: the block's gradient lands where it was read.
    let x = Tensor::from_slice(&xs, &[3, 2])?.set_requires_grad(true)?;
    x.dynamic_slice(&at, &[2, 1])?.mul_scalar(3.0)?.sum_all()?.backward()?;
    assert_eq!(x.grad().expect("x's gradient").to_vec::<f64>()?, vec![0.0, 0.0, 3.0, 0.0, 3.0, 0.0]);
    Ok(())
}

#[test]
fn a_compiled_decode_step_writes_the_cache_in_place() -> Result<()> {
    let _serial = common::serial();
    use eager::nn::StaticKvCache;
    // One layer's cache, [1, 2, 16, 4]; the step writes one position and returns the cache.
    let step = eager::compile("decode", |a: &[Tensor]| {
        let mut cache = StaticKvCache::from_parts(a[2].clone(), a[3].clone())?;
        cache.write(&a[0], &a[1], &a[4])?;
        let (k, v) = cache.into_parts().remove(0);
        Ok(vec![k, v])
    })
    .donate([2, 3]);
    let cache = StaticKvCache::new(1, 2, 16, 4, DType::F32, eager::default_device())?;
    let (mut k, mut v) = (cache.keys()?, cache.values()?);
    let new_k = Tensor::from_slice(&[1.0f32; 8], &[1, 2, 1, 4])?;
    let new_v = Tensor::from_slice(&[2.0f32; 8], &[1, 2, 1, 4])?;
    let at = address(&k);
    drop(cache);
    for pos in 0..3i64 {
        let start = Tensor::from_slice(&[pos], &[])?;
        let mut out = step.call(&[&new_k, &new_v, &k, &v, &start])?.into_iter();
        (k, v) = (out.next().unwrap(), out.next().unwrap());
        assert_eq!(address(&k), at, "step {pos} wrote the keys in place");
    }
    let keys = k.to_vec::<f32>()?;
    // Head 0: positions 0..3 written, the rest still zero.
    assert_eq!(&keys[..12], &[1.0; 12]);
    assert!(keys[12..64].iter().all(|&x| x == 0.0));
    assert_eq!(v.to_vec::<f32>()?[64..76], [2.0; 12]);
    Ok(())
}

#[test]
fn a_fused_region_writes_what_it_replaces_in_place() -> Result<()> {
    let _serial = common::serial();
    // The Var's old value is held by nothing but the region when it runs: donated.
    let w = Var::new("w", Tensor::from_slice(&[1.0f32; 64], &[8, 8])?);
    let halve = || eager::fused(|| w.set(w.get().mul_scalar(0.5)?));
    halve()?;
    let (at, live) = (address(&w.get()), eager::memory::live_bytes());
    halve()?;
    assert_eq!(address(&w.get()), at, "the region's result took the old value's memory");
    assert_eq!(eager::memory::live_bytes(), live);
    assert_eq!(w.get().to_vec::<f32>()?, vec![0.25; 64]);
    // A value still held is left as it was.
    let old = w.get();
    halve()?;
    assert_eq!(old.to_vec::<f32>()?, vec![0.25; 64]);
    assert_eq!(w.get().to_vec::<f32>()?, vec![0.125; 64]);
    Ok(())
}

#[test]
fn a_fused_training_step_updates_parameters_and_momentum_in_place() -> Result<()> {
    let _serial = common::serial();
    use eager::optim::{Optimizer, Sgd};
    let w = Var::parameter("w", Tensor::from_slice(&[0.5f32; 256], &[16, 16])?)?;
    let sgd = Sgd::with_momentum(vec![w.clone()], 0.1, 0.9)?;
    // The whole step one fused region (as fused mode runs it): the old values are the region's only.
    let step = || -> Result<()> {
        eager::fused(|| {
            w.get().mul(&w.get())?.sum_all()?.backward()?;
            sgd.step()?;
            sgd.zero_grad();
            Ok(())
        })
    };
    step()?;
    let (at, velocity) = (address(&w.get()), address(&sgd.state()[0].get()));
    step()?;
    assert_eq!(address(&w.get()), at, "the parameter");
    assert_eq!(address(&sgd.state()[0].get()), velocity, "its momentum");
    // Plain math: v1 = g0 = 1.0, w1 = 0.4; g1 = 0.8, v2 = 0.9 + 0.8 = 1.7, w2 = 0.4 - 0.17.
    let got = w.get().to_vec::<f32>()?;
    assert!(got.iter().all(|&x| (x - 0.23).abs() < 1e-6), "{:?}", &got[..4]);
    Ok(())
}
