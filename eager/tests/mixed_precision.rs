//! Mixed-precision training pieces against torch: `clip_grad_norm_` and `GradScaler` on the
//! same scripted gradients as torch 2.x (`tests/reference/amp_reference.py`), frozen
//! parameters, and Adam's f32 master weights against plain f32 Adam.

use eager::optim::{clip_grad_norm_, Adam, GradScaler, Optimizer, Sgd};
use eager::prelude::*;
use half::bf16;
use serde_json::json;

mod common;

use common::{assert_all_close, json_f64, torch_reference};

fn param(name: &str, v: &[f32]) -> Var {
    Var::parameter(name, Tensor::from_slice(v, &[v.len()]).unwrap()).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(json_f64).collect()
}

#[test]
fn clip_grad_norm_matches_torch_for_each_norm() -> Result<()> {
    let params = [vec![0.5f32, -1.0, 2.0], vec![0.1, 0.2]];
    let grads = [vec![3.0f32, -4.0, 1.5], vec![12.0, -0.25]];
    let norm_types = [2.0, f64::INFINITY, 1.5, 1.0];
    let want =
        torch_reference(&json!({"scenario": "clip", "params": params, "grads": grads, "max_norm": 2.5,
        "norm_types": [2.0, "inf", 1.5, 1.0]}));
    for (k, &nt) in norm_types.iter().enumerate() {
        let vars: Vec<Var> = params.iter().enumerate().map(|(i, p)| param(&format!("p{i}"), p)).collect();
        for (v, g) in vars.iter().zip(&grads) {
            v.set_grad(Some(Tensor::from_slice(g, &[g.len()])?))?;
        }
        let norm = clip_grad_norm_(&vars, 2.5, nt)?;
        let w = &want[k];
        assert_all_close(
            &format!("norm {nt}"),
            &[norm.item::<f32>()? as f64],
            &[json_f64(&w["norm"])],
            1e-6,
            0.0,
        );
        for (i, v) in vars.iter().enumerate() {
            let got = values(&v.grad().unwrap());
            assert_all_close(
                &format!("clipped grad {i}, norm {nt}"),
                &got,
                &numbers(&w["grads"][i]),
                1e-6,
                1e-7,
            );
        }
    }
    // A norm under max_norm leaves the gradients as they are (the coefficient clamps at 1).
    let v = param("small", &[1.0, 1.0]);
    v.set_grad(Some(Tensor::from_slice(&[0.3f32, 0.4], &[2])?))?;
    assert!((clip_grad_norm_(std::slice::from_ref(&v), 1.0, 2.0)?.item::<f32>()? - 0.5).abs() < 1e-7);
    assert_eq!(v.grad().unwrap().to_vec::<f32>()?, [0.3, 0.4]);
    let e = clip_grad_norm_(&[v], 1.0, 0.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "clip_grad_norm_: norm_type must be positive or infinite, got 0",
        "norm_type 0"
    );
    Ok(())
}

#[test]
fn grad_scaler_skips_and_scales_as_torch_on_scripted_gradients() -> Result<()> {
    let params = [vec![0.5f32, -1.0, 2.0], vec![0.1, 0.2]];
    let inf = "inf";
    // Already-scaled gradients (as backward of a scaled loss gives them), one row per step:
    // an inf, a NaN and a -inf make three overflow steps; growth comes after 3 good ones.
    let steps = json!([
        [[512.0, -2048.0, 300.0], [64.0, 10.0]],
        [[100.0, 20.0, -30.0], [1.0, -1.0]],
        [[inf, 1.0, 1.0], [1.0, 1.0]],
        [[40.0, -20.0, 10.0], [0.5, 0.25]],
        [[1.0, 2.0, 3.0], ["nan", 1.0]],
        [[8.0, 8.0, -8.0], [4.0, 2.0]],
        [[2.0, 1.0, 0.5], [0.25, 0.125]],
        [[16.0, -16.0, 4.0], [1.0, 3.0]],
        [[1000.0, 500.0, -250.0], [20.0, 10.0]],
        [["-inf", 0.0, 0.0], [0.0, 0.0]],
        [[0.5, 0.25, 0.125], [1.0, 2.0]]
    ]);
    let (init_scale, growth_interval, max_norm, lr) = (1024.0, 3, 1.0, 0.1);
    let want = torch_reference(&json!({"scenario": "scaler", "params": params, "steps": steps,
        "init_scale": init_scale, "growth_factor": 2.0, "backoff_factor": 0.5,
        "growth_interval": growth_interval, "max_norm": max_norm, "lr": lr}));
    let vars: Vec<Var> = params.iter().enumerate().map(|(i, p)| param(&format!("p{i}"), p)).collect();
    let opt = Sgd::new(vars.clone(), lr);
    let scaler = GradScaler::with_options(init_scale, 2.0, 0.5, growth_interval);
    let (mut scales, mut stepped) = (Vec::new(), Vec::new());
    for (k, row) in steps.as_array().unwrap().iter().enumerate() {
        for (v, g) in vars.iter().zip(row.as_array().unwrap()) {
            let g: Vec<f32> = numbers(g).iter().map(|&x| x as f32).collect();
            v.set_grad(Some(Tensor::from_slice(&g, &[g.len()])?))?;
        }
        scaler.unscale_(&opt)?;
        let norm = clip_grad_norm_(&vars, max_norm, 2.0)?.item::<f32>()? as f64;
        stepped.push(scaler.step(&opt)?);
        scaler.update()?;
        scales.push(scaler.get_scale());
        let w = &want[k];
        let tn = json_f64(&w["norm"]);
        assert!(
            norm == tn || (norm.is_nan() && tn.is_nan()) || (norm - tn).abs() <= 1e-6 * tn.abs(),
            "step {k}: norm {norm}, torch {tn}"
        );
        for (i, v) in vars.iter().enumerate() {
            assert_all_close(
                &format!("step {k} param {i}"),
                &values(&v.get()),
                &numbers(&w["params"][i]),
                1e-6,
                1e-7,
            );
        }
    }
    let torch_scales: Vec<f64> =
        want.as_array().unwrap().iter().map(|w| w["scale"].as_f64().unwrap()).collect();
    let torch_stepped: Vec<bool> =
        want.as_array().unwrap().iter().map(|w| w["stepped"].as_bool().unwrap()).collect();
    assert_eq!(scales, torch_scales, "the scale after each update");
    assert_eq!(stepped, torch_stepped, "which steps ran");
    assert_eq!(stepped.iter().filter(|s| !**s).count(), 3, "the inf, NaN and -inf steps are skipped");
    println!("scales {scales:?}\nstepped {stepped:?}");
    // Misuse is an error, as in torch: unscale_ twice, update with nothing recorded.
    scaler.unscale_(&opt)?;
    let e = scaler.unscale_(&opt).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GradScaler::unscale_: unscale_() was called on this optimizer already since the last update(), or after step()"
    );
    scaler.step(&opt)?;
    let e = scaler.step(&opt).unwrap_err();
    assert_eq!(e.to_string(), "GradScaler::step: step() was called already since the last update()");
    scaler.update()?;
    let e = scaler.update().unwrap_err();
    assert_eq!(
        e.to_string(),
        "GradScaler::update: no inf checks were recorded before update(): call step() first"
    );
    Ok(())
}

/// f16 training with loss scaling: a scale of 2^24 overflows f16 gradients, so the first
/// steps are skipped and the scale halves until the gradients fit; then the loss goes down.
#[test]
fn f16_overflow_steps_are_skipped_until_the_scale_fits() -> Result<()> {
    let x = Tensor::from_slice(&[0.5f32, -1.0, 1.5, 2.0, -0.5, 1.0], &[3, 2])?.to_dtype(DType::F16)?;
    let y = Tensor::from_slice(&[1.0f32, -2.0, 0.5], &[3, 1])?.to_dtype(DType::F16)?;
    let w = Var::parameter("w", Tensor::from_slice(&[0.1f32, 0.2], &[2, 1])?.to_dtype(DType::F16)?)?;
    let opt = Adam::new(vec![w.clone()], 0.05)?.with_master_weights()?;
    let scaler = GradScaler::with_options(16777216.0, 2.0, 0.5, 2000);
    let mut log = Vec::new();
    let mut losses = Vec::new();
    for _ in 0..30 {
        let loss = eager::nn::mse(&x.matmul(&w.get())?, &y)?;
        losses.push(loss.to_dtype(DType::F32)?.item::<f32>()?);
        opt.zero_grad();
        scaler.scale(&loss)?.backward()?;
        assert_eq!(w.grad().unwrap().dtype(), DType::F16);
        log.push((scaler.get_scale(), scaler.step(&opt)?));
        scaler.update()?;
    }
    let skipped = log.iter().take_while(|(_, s)| !s).count();
    assert!(skipped >= 3, "2^24 times these gradients overflows f16 (max 65504): {log:?}");
    for (k, &(scale, _)) in log.iter().enumerate().take(skipped + 1) {
        assert_eq!(scale, 16777216.0 / 2f64.powi(k as i32), "the scale halves at each skipped step");
    }
    assert!(log[skipped..].iter().all(|(_, s)| *s), "once it fits, every step runs: {log:?}");
    assert!(losses[29] < 0.5 * losses[skipped], "the loss goes down: {losses:?}");
    assert_eq!(w.get().dtype(), DType::F16, "the parameter stays f16");
    Ok(())
}

#[test]
fn frozen_parameters_take_no_gradient_and_no_optimizer_state() -> Result<()> {
    let (a, b) = (param("a", &[1.0, 2.0]), param("b", &[3.0, 4.0]));
    b.set_requires_grad(false)?;
    assert!(a.requires_grad() && !b.requires_grad());
    assert!(format!("{b:?}").contains("frozen"));
    let loss = a.get().mul(&b.get())?.sum_all()?;
    loss.backward()?;
    assert_eq!(a.grad().unwrap().to_vec::<f32>()?, [3.0, 4.0]);
    assert!(b.grad().is_none(), "a frozen parameter keeps no gradient");
    let e = b.set_grad(Some(Tensor::from_slice(&[1.0f32, 1.0], &[2])?)).unwrap_err();
    assert_eq!(e.to_string(), "Var::set_grad: b (f32[2], takes no gradient) cannot take a gradient f32[2]");
    let opt = Adam::new(vec![a.clone(), b.clone()], 0.1)?;
    assert_eq!(opt.params().len(), 1, "no state for the frozen parameter");
    opt.step()?;
    assert_eq!(b.get().to_vec::<f32>()?, [3.0, 4.0]);
    assert_ne!(a.get().to_vec::<f32>()?, [1.0, 2.0]);
    // Frozen after the optimizer was made: skipped by its steps.
    let sgd = Sgd::new(vec![a.clone()], 0.5);
    a.set_requires_grad(false)?;
    let before = a.get().to_vec::<f32>()?;
    sgd.step()?;
    assert_eq!(a.get().to_vec::<f32>()?, before);
    // Unfrozen: gradients again.
    a.set_requires_grad(true)?;
    a.get().mul(&b.get())?.sum_all()?.backward()?;
    assert!(a.grad().is_some());
    let e = Var::new("state", Tensor::zeros(&[1], DType::F32)?).set_requires_grad(false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Var::set_requires_grad: state is not a parameter (made with Var::new): it takes no gradient"
    );
    Ok(())
}

/// Adam with master weights on a bf16 parameter follows f32 Adam exactly (its master is the
/// f32 trajectory; the parameter is that rounded once), where plain bf16 Adam loses updates
/// below half an ulp.
#[test]
fn master_weights_follow_f32_adam() -> Result<()> {
    let start = [1.0f32, -2.0, 0.75, 3.0];
    let low = || Tensor::from_slice(&start, &[4]).unwrap().to_dtype(DType::BF16).unwrap();
    let master = Var::parameter("m", low())?;
    let plain = Var::parameter("p", low())?;
    let full = Var::parameter("f", Tensor::from_slice(&start, &[4])?)?;
    let lr = 1e-3; // each update is about lr: below half a bf16 ulp of these values
    let opts = [
        Adam::new(vec![master.clone()], lr)?.with_master_weights()?,
        Adam::new(vec![plain.clone()], lr)?,
        Adam::new(vec![full.clone()], lr)?,
    ];
    assert_eq!(opts[0].master_weight(0).unwrap().get().dtype(), DType::F32);
    assert!(opts[2].master_weight(0).is_none(), "an f32 parameter needs no master");
    for step in 0..20 {
        let g: Vec<f32> = (0..4).map(|i| ((step * 7 + i * 3) % 5) as f32 * 0.5 - 1.0).collect();
        let g_low: Vec<bf16> = g.iter().map(|&x| bf16::from_f32(x)).collect();
        master.set_grad(Some(Tensor::from_slice(&g_low, &[4])?))?;
        plain.set_grad(Some(Tensor::from_slice(&g_low, &[4])?))?;
        full.set_grad(Some(Tensor::from_slice(&g, &[4])?))?;
        opts.iter().try_for_each(|o| o.step())?;
    }
    let f = full.get().to_vec::<f32>()?;
    assert_eq!(opts[0].master_weight(0).unwrap().get().to_vec::<f32>()?, f, "the master is f32 Adam's");
    let rounded: Vec<bf16> = f.iter().map(|&x| bf16::from_f32(x)).collect();
    assert_eq!(master.get().to_vec::<bf16>()?, rounded, "the parameter is the master rounded once");
    assert_eq!(
        plain.get().to_vec::<bf16>()?,
        low().to_vec::<bf16>()?,
        "plain bf16 Adam rounds every update away"
    );
    assert_ne!(rounded, low().to_vec::<bf16>()?, "20 updates of 1e-3 move the rounded values");
    Ok(())
}
