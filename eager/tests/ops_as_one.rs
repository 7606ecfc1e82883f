//! An op is the user's op: composites (softmax, layer_norm, gelu, cross_entropy, attention, a
//! convolution with its bias …), a backward pass and an optimizer's step each run as one
//! executable named after it, and give what their primitives give one by one, what host math
//! gives and, for gradients, what central differences give.

mod common;

use common::assert_all_close;
use eager::nn::{self, Conv2d, LayerNorm, Module, MultiheadAttention};
use eager::optim::{Adam, Optimizer};
use eager::prelude::*;
use eager::profiler::EventKind;

/// The names of the executables `f` ran, in order.
fn executions(f: impl FnOnce() -> Result<()>) -> Result<Vec<String>> {
    synchronize();
    let mark = profiler::next_seq();
    f()?;
    synchronize();
    Ok(profiler::events_since(mark)
        .iter()
        .filter(|e| e.kind == EventKind::Op)
        .map(|e| e.name().to_string())
        .collect())
}

fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_f64_vec()
}

fn rows(n: usize, m: usize, seed: u64) -> Vec<f64> {
    (0..n * m).map(|i| (((i as u64 * 7919 + seed * 104729) % 1000) as f64 / 250.0) - 2.0).collect()
}

#[test]
fn a_composite_is_one_execution_named_by_it_with_its_primitives_values() -> Result<()> {
    let _serial = common::serial();
    let host = rows(3, 5, 1);
    let x = Tensor::from_slice(&host, &[3, 5])?.to_dtype(DType::F32)?;
    let targets = Tensor::from_slice(&[4i64, 0, 2], &[3])?;
    let norm = LayerNorm::new(5)?;
    // A convolution with its bias (torch's `F.conv2d(x, w, b)`) is one op too.
    let image = Tensor::from_slice(&rows(2 * 3, 5 * 5, 2), &[2, 3, 5, 5])?.to_dtype(DType::F32)?;
    let conv = Conv2d::new(3, 4, [3, 3])?;
    type Case<'a> = (&'static str, Box<dyn Fn() -> Result<Tensor> + 'a>);
    let cases: Vec<Case> = vec![
        ("softmax", Box::new(|| x.softmax(-1))),
        ("log_softmax", Box::new(|| x.log_softmax(1))),
        ("layer_norm", Box::new(|| norm.forward(&x))),
        ("gelu", Box::new(|| nn::gelu_exact(&x))),
        ("silu", Box::new(|| x.silu())),
        ("rms_norm", Box::new(|| x.rms_norm(1, 1e-6))),
        ("cross_entropy", Box::new(|| nn::cross_entropy(&x, &targets))),
        ("conv2d", Box::new(|| conv.forward(&image))),
    ];
    for (name, op) in &cases {
        let mut out = None;
        let ran = executions(|| {
            out = Some(op()?);
            Ok(())
        })?;
        assert_eq!(ran, [*name], "{name} ran as {ran:?}");
        let one = values(&out.unwrap())?;
        let by_primitives = {
            let _op_by_op = common::OpByOp::new();
            let mut out = None;
            let ran = executions(|| {
                out = Some(op()?);
                Ok(())
            })?;
            // (The convolution's own primitive is named conv2d too.)
            assert!(ran.len() > 1, "{name} op by op ran {ran:?}");
            values(&out.unwrap())?
        };
        assert_all_close(name, &one, &by_primitives, 1e-6, 1e-6);
    }

    // Against host math: softmax rows, and the mean cross-entropy of those rows.
    let soft = values(&x.softmax(-1)?)?;
    let mut want = Vec::new();
    let mut loss = 0.0;
    for (r, t) in host.chunks(5).zip([4usize, 0, 2]) {
        let max = r.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = r.iter().map(|v| (v - max).exp()).sum();
        want.extend(r.iter().map(|v| (v - max).exp() / sum));
        loss -= (r[t] - max) - sum.ln();
    }
    assert_all_close("softmax vs host", &soft, &want, 1e-5, 1e-6);
    let ce = nn::cross_entropy(&x, &targets)?.item::<f32>()? as f64;
    assert_all_close("cross_entropy vs host", &[ce], &[loss / 3.0], 1e-5, 1e-6);

    // The profiler names the composite and says what it is made of.
    let mark = profiler::next_seq();
    x.softmax(-1)?.block_until_ready()?;
    let events = profiler::events_since(mark);
    let e = events.iter().find(|e| e.kind == EventKind::Op).expect("an op event");
    assert_eq!(e.name(), "softmax");
    assert!(e.info.attrs.ends_with("ops compiled into one"), "{}", e.info.attrs);
    Ok(())
}

/// The loss of a small attention model, in f64: layer norm, attention, GELU, softmax.
fn attention_loss(x: &Tensor, norm: &LayerNorm, attn: &MultiheadAttention) -> Result<Tensor> {
    let h = attn.forward(&norm.forward(x)?)?;
    nn::gelu(&h)?.softmax(-1)?.mul(&h)?.sum_all()
}

#[test]
fn a_backward_pass_is_one_execution_with_central_differences_gradients() -> Result<()> {
    let _serial = common::serial();
    manual_seed(3);
    let norm = LayerNorm::new(4)?;
    let attn = MultiheadAttention::new(4, 2, true)?;
    let host = rows(2 * 3, 4, 2);
    let x = Tensor::from_slice(&host, &[2, 3, 4])?.to_dtype(DType::F32)?.set_requires_grad(true)?;

    let loss = attention_loss(&x, &norm, &attn)?;
    let ran = executions(|| loss.backward())?;
    assert_eq!(ran, ["backward"], "the backward pass ran as {ran:?}");
    let grad = values(&x.grad().expect("a gradient"))?;
    let weight_grad = values(&attn.out_proj.weight.grad().expect("a weight gradient"))?;

    // The same pass primitive by primitive.
    x.zero_grad();
    attn.out_proj.weight.zero_grad();
    {
        let _op_by_op = common::OpByOp::new();
        let ran = executions(|| attention_loss(&x, &norm, &attn)?.backward())?;
        assert!(ran.len() > 20, "op by op ran only {ran:?}");
        assert_all_close("x grad vs op by op", &values(&x.grad().unwrap())?, &grad, 1e-5, 1e-6);
        assert_all_close(
            "w grad vs op by op",
            &values(&attn.out_proj.weight.grad().unwrap())?,
            &weight_grad,
            1e-5,
            1e-6,
        );
    }

    // Central differences in f64 on the input.
    let f = |v: &[f64]| -> Result<f64> {
        let t = Tensor::from_slice(v, &[2, 3, 4])?.to_dtype(DType::F32)?;
        no_grad(|| attention_loss(&t, &norm, &attn))?.to_dtype(DType::F64)?.item::<f64>()
    };
    let h = 1e-2;
    let mut numeric = Vec::new();
    for i in 0..host.len() {
        let (mut up, mut down) = (host.clone(), host.clone());
        up[i] += h;
        down[i] -= h;
        numeric.push((f(&up)? - f(&down)?) / (2.0 * h));
    }
    assert_all_close("x grad vs central differences", &grad, &numeric, 2e-2, 2e-3);
    Ok(())
}

#[test]
fn an_adamw_step_over_all_parameters_is_one_execution_matching_host_math() -> Result<()> {
    let _serial = common::serial();
    let (p0, q0) = (rows(2, 3, 4), rows(1, 3, 5));
    let p = Var::parameter("p", Tensor::from_slice(&p0, &[2, 3])?.to_dtype(DType::F32)?)?;
    let q = Var::parameter("q", Tensor::from_slice(&q0, &[3])?.to_dtype(DType::F32)?)?;
    let (lr, wd, (b1, b2), eps) = (0.1, 0.01, (0.9, 0.999), 1e-8);
    let adam = Adam::adamw(vec![p.clone(), q.clone()], lr, wd)?;
    // loss = sum(p²) + sum(3 q): gradients 2p and 3.
    let loss = || p.get().square()?.sum_all()?.add(&q.get().mul_scalar(3.0)?.sum_all()?);
    let (mut hp, mut hq) = (p0.clone(), q0.clone());
    let (mut m, mut v) = (vec![0.0; 9], vec![0.0; 9]);
    for t in 1..=3 {
        loss()?.backward()?;
        let ran = executions(|| adam.step())?;
        assert_eq!(ran, ["adam.step"], "step {t} ran as {ran:?}");
        adam.zero_grad();
        // Host AdamW (torch's): decay, moments, bias corrections.
        let grads: Vec<f64> = hp.iter().map(|w| 2.0 * w).chain(hq.iter().map(|_| 3.0)).collect();
        let mut all: Vec<f64> = hp.iter().chain(hq.iter()).cloned().collect();
        for (i, w) in all.iter_mut().enumerate() {
            *w *= 1.0 - lr * wd;
            m[i] = b1 * m[i] + (1.0 - b1) * grads[i];
            v[i] = b2 * v[i] + (1.0 - b2) * grads[i] * grads[i];
            let (mh, vh) = (m[i] / (1.0 - b1.powi(t)), v[i] / (1.0 - b2.powi(t)));
            *w -= lr * mh / (vh.sqrt() + eps);
        }
        hp = all[..6].to_vec();
        hq = all[6..].to_vec();
        assert_all_close(&format!("p after step {t}"), &values(&p.get())?, &hp, 1e-4, 1e-5);
        assert_all_close(&format!("q after step {t}"), &values(&q.get())?, &hq, 1e-4, 1e-5);
    }
    Ok(())
}
