//! The digits CNN and the char GPT of `eager-bench` (tests/common/models.rs), 20 training
//! steps under bf16 autocast against torch's under `torch.autocast("cpu", torch.bfloat16)`
//! (tests/reference/autocast_models_reference.py), from the same initial weights and batches
//! (saved from here to one safetensors file that torch loads): the losses agree within a bf16
//! tolerance, the models train, gradients come back f32 and parameters stay f32. The same 20
//! steps in f32 on both sides agree tightly, so the models and optimizers are the same and
//! what the bf16 tolerance covers is rounding.

use eager::autocast;
use eager::optim::{Adam, Sgd};
use eager::prelude::*;
use serde_json::{json, Value};

mod common;
#[path = "common/models.rs"]
mod models;

use common::{json_f64, python_reference, serial};
use models::{cnn_batches, gpt_batches, Cnn, Gpt, GPT_CONTEXT};

const STEPS: usize = 20;

/// bf16 keeps 8 significant bits: one rounding is off by up to u = 2^-9 ≈ 0.2% relative.
/// Both sides round every matmul, conv, attention and GELU output to bf16, but not at the same
/// points (torch's CPU kernels may add a Linear's or a conv's bias before their one rounding
/// and run attention's softmax inside one f32 kernel; eager rounds the product, then adds the
/// bias in bf16), so activations differ by about one bf16 ulp. From the same weights (step 0)
/// that moves the loss, an average over the batch, by well under u: [`FIRST_STEP_RTOL`].
/// Training then carries the differences in the weights forward and two bf16 runs drift apart
/// as any two runs of a chaotic process do: SGD with momentum 0.9 at lr 0.05 takes steps of
/// 0.5 in effect, and AdamW's first steps move each weight by about lr whatever the gradient's
/// size (a rounding that flips a small gradient's sign moves a weight by 2 lr). torch's own
/// bf16 run drifts from its f32 run by up to ≈ 0.5% of the loss on the CNN by step 20
/// (printed), and two bf16 runs drift from each other by up to about twice that. The bound
/// over the 20 steps is 2^-6 ≈ 1.6%: two bf16 epsilons. The losses check that the two sides
/// train the same models the same way (the f32 runs check it tightly); the logits' dtype
/// checks that autocast ran.
const BF16_RTOL: f64 = 1.0 / 64.0;
/// Step 0, from the same weights: one forward's roundings, averaged by the loss, within u.
const FIRST_STEP_RTOL: f64 = 1.0 / 512.0;
/// f32 on both sides: only the order of f32 sums differs.
const F32_RTOL: f64 = 1e-4;

/// One side's 20 steps: the losses.
struct Run {
    losses: Vec<f64>,
}

/// 20 steps of `forward` (per step index: the logits and the loss) then the optimizer's step,
/// under bf16 autocast or not, checking the dtypes of the logits, the loss and every gradient.
fn train(
    params: &[(String, Var)],
    opt: &dyn Optimizer,
    low: bool,
    forward: impl Fn(usize) -> Result<(Tensor, Tensor)>,
) -> Result<Run> {
    let mut losses = vec![];
    for k in 0..STEPS {
        let (logits, l) = if low { autocast(DType::BF16, || forward(k))? } else { forward(k)? };
        let want = if low { DType::BF16 } else { DType::F32 };
        assert_eq!(logits.dtype(), want, "step {k}: the logits");
        assert_eq!(l.dtype(), DType::F32, "step {k}: the loss is f32");
        l.backward()?;
        for (name, p) in params {
            assert_eq!(
                p.grad().expect("every parameter has a gradient").dtype(),
                DType::F32,
                "{name}'s gradient"
            );
        }
        opt.step()?;
        opt.zero_grad();
        losses.push(l.item::<f32>()? as f64);
    }
    for (name, p) in params {
        assert_eq!(p.get().dtype(), DType::F32, "{name} stays f32");
    }
    Ok(Run { losses })
}

/// torch's 20 steps from the parameters' present values and the batches `x`, `y`
/// (`[steps, ...]`), under bf16 autocast and in f32; `opt` gives the optimizer's settings.
fn torch_runs(
    model: &str,
    params: &[(String, Var)],
    (x, y): (&Tensor, &Tensor),
    opt: &Value,
) -> Result<[Run; 2]> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join(format!("{model}.safetensors"));
    let mut tensors: Vec<(String, Tensor)> = params.iter().map(|(n, v)| (n.clone(), v.get())).collect();
    tensors.push(("data.x".into(), x.clone()));
    tensors.push(("data.y".into(), y.clone()));
    eager::io::save_safetensors(&file, &tensors)?;
    let mut request = json!({"model": model, "file": file});
    request.as_object_mut().unwrap().extend(opt.as_object().unwrap().clone());
    let answer = python_reference("autocast_models_reference.py", &request);
    Ok([("bf16", "torch.bfloat16"), ("f32", "torch.float32")].map(|(run, logits)| {
        let steps = answer[run]["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), STEPS);
        for s in steps {
            assert_eq!(s["loss_dtype"], "torch.float32", "torch's {run} run");
            assert_eq!(s["logits_dtype"], logits, "torch's {run} run");
            assert_eq!(s["grad_dtypes"], json!(["torch.float32"]), "torch's {run} run");
        }
        assert_eq!(answer[run]["param_dtypes"], json!(["torch.float32"]), "torch's {run} run");
        Run { losses: steps.iter().map(|s| json_f64(&s["loss"])).collect() }
    }))
}

/// The largest relative difference of `got` from `want`, after asserting each is within `rtol`.
fn compare(what: &str, got: &Run, want: &Run, rtol: f64) -> f64 {
    let mut worst: f64 = 0.0;
    for (k, (&g, &w)) in got.losses.iter().zip(&want.losses).enumerate() {
        let rel = (g - w).abs() / w.abs();
        worst = worst.max(rel);
        assert!(rel <= rtol, "{what}, step {k}: loss {g}, torch {w} (relative {rel:.2e} > {rtol:.2e})");
    }
    worst
}

/// Sets each parameter back to `initial`.
fn restore(params: &[(String, Var)], initial: &[Tensor]) -> Result<()> {
    for ((_, p), t) in params.iter().zip(initial) {
        p.set(t.clone())?;
    }
    Ok(())
}

/// Both runs of a model: bf16 autocast against torch's, f32 against torch's; prints the
/// figures and returns the worst bf16 difference.
fn side_by_side(
    name: &str,
    model: &str,
    params: &[(String, Var)],
    data: (&Tensor, &Tensor),
    opt_settings: Value,
    make_opt: impl Fn() -> Result<Box<dyn Optimizer>>,
    forward: impl Fn(usize) -> Result<(Tensor, Tensor)>,
) -> Result<f64> {
    let initial: Vec<Tensor> = params.iter().map(|(_, v)| v.get()).collect();
    let [torch_bf16, torch_f32] = torch_runs(model, params, data, &opt_settings)?;

    let bf16 = train(params, make_opt()?.as_ref(), true, &forward)?;
    restore(params, &initial)?;
    let f32 = train(params, make_opt()?.as_ref(), false, &forward)?;
    assert_ne!(bf16.losses, f32.losses, "{name}: bf16 rounding shows in eager's losses");

    let worst_f32 = compare(&format!("{name} in f32"), &f32, &torch_f32, F32_RTOL);
    let worst = compare(&format!("{name} under bf16 autocast"), &bf16, &torch_bf16, BF16_RTOL);
    let first = (bf16.losses[0] - torch_bf16.losses[0]).abs() / torch_bf16.losses[0];
    assert!(
        first <= FIRST_STEP_RTOL,
        "{name}, step 0 from the same weights: relative difference {first:.2e}"
    );
    let moved = torch_bf16
        .losses
        .iter()
        .zip(&torch_f32.losses)
        .map(|(a, b)| (a - b).abs() / b.abs())
        .fold(0.0, f64::max);
    println!(
        "{name}: bf16 autocast loss {:.4} -> {:.4} (torch {:.4} -> {:.4}); largest relative difference from torch \
         {worst:.2e} under bf16 autocast (bound {BF16_RTOL:.2e}; step 0 {first:.2e}), {worst_f32:.2e} in f32; bf16 \
         autocast moves torch's loss from f32 by up to {moved:.2e}",
        bf16.losses[0], bf16.losses[STEPS - 1], torch_bf16.losses[0], torch_bf16.losses[STEPS - 1]
    );
    // It trains: the last five losses are well under the first.
    let trained = |r: &Run| r.losses[STEPS - 5..].iter().sum::<f64>() / 5.0 < 0.8 * r.losses[0];
    assert!(trained(&torch_bf16), "{name} trains in torch: {:?}", torch_bf16.losses);
    assert!(trained(&bf16), "{name} trains in eager: {:?}", bf16.losses);
    Ok(worst)
}

/// The digits CNN, batches of 16 images, SGD with momentum as eager-bench trains it.
#[test]
fn the_digits_cnn_under_bf16_autocast_follows_torch() -> Result<()> {
    let _s = serial();
    let batch = 16;
    let cnn = Cnn::new()?;
    let (xs, ys) = cnn_batches(STEPS, batch, 5);
    let x = Tensor::from_slice(&xs, &[STEPS, batch, 1, 8, 8])?;
    let y = Tensor::from_slice(&ys, &[STEPS, batch])?;
    let batches: Vec<(Tensor, Tensor)> = (0..STEPS)
        .map(|k| {
            let xk = Tensor::from_slice(&xs[k * batch * 64..(k + 1) * batch * 64], &[batch, 1, 8, 8])?;
            Ok((xk, Tensor::from_slice(&ys[k * batch..(k + 1) * batch], &[batch])?))
        })
        .collect::<Result<_>>()?;
    let params = cnn.named_parameters();
    let vars: Vec<Var> = params.iter().map(|(_, v)| v.clone()).collect();
    side_by_side(
        "digits CNN",
        "cnn",
        &params,
        (&x, &y),
        json!({"lr": 0.05, "momentum": 0.9}),
        || Ok(Box::new(Sgd::with_momentum(vars.clone(), 0.05, 0.9)?)),
        |k| {
            let logits = cnn.logits(&batches[k].0)?;
            Ok((logits.clone(), cnn.loss_of(&logits, &batches[k].1)?))
        },
    )?;
    Ok(())
}

/// The char GPT, batches of 4 windows of 32 tokens, AdamW as eager-bench trains it.
#[test]
fn the_char_gpt_under_bf16_autocast_follows_torch() -> Result<()> {
    let _s = serial();
    let batch = 4;
    let gpt = Gpt::new()?;
    let (xs, ys) = gpt_batches(STEPS, batch, 9);
    let x = Tensor::from_slice(&xs, &[STEPS, batch, GPT_CONTEXT])?;
    let y = Tensor::from_slice(&ys, &[STEPS, batch, GPT_CONTEXT])?;
    let n = batch * GPT_CONTEXT;
    let batches: Vec<(Tensor, Tensor)> = (0..STEPS)
        .map(|k| {
            let xk = Tensor::from_slice(&xs[k * n..(k + 1) * n], &[batch, GPT_CONTEXT])?;
            Ok((xk, Tensor::from_slice(&ys[k * n..(k + 1) * n], &[batch, GPT_CONTEXT])?))
        })
        .collect::<Result<_>>()?;
    let params = gpt.named_parameters();
    let vars: Vec<Var> = params.iter().map(|(_, v)| v.clone()).collect();
    side_by_side(
        "char GPT",
        "gpt",
        &params,
        (&x, &y),
        json!({"lr": 3e-3, "weight_decay": 0.01}),
        || Ok(Box::new(Adam::adamw(vars.clone(), 3e-3, 0.01)?)),
        |k| {
            let logits = gpt.logits(&batches[k].0)?;
            Ok((logits.clone(), gpt.loss_of(&logits, &batches[k].1)?))
        },
    )?;
    Ok(())
}
