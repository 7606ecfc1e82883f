//! Autocast as torch's: each op runs in the dtype its list says (low precision, f32,
//! promote, keep), casts carry gradients back to f32 parameters in f32, it works eagerly, in
//! fused mode and inside `eager::compile` (whose traces are keyed by it), and an MLP trained
//! under bf16 autocast follows torch.autocast("cpu", torch.bfloat16) from the same weights.

use eager::nn::{Linear, Module};
use eager::prelude::*;
use eager::{autocast, AutocastGuard};
use half::bf16;
use serde_json::json;

mod common;

use common::{fixed_values, json_f64, serial, torch_reference};

fn t(v: &[f64], shape: &[usize], d: DType) -> Tensor {
    let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Tensor::from_slice(&f, shape).unwrap().to_dtype(d).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn each_op_runs_in_the_dtype_of_its_list() -> Result<()> {
    let _s = serial();
    let (a, b) = (t(&fixed_values(12, 1), &[3, 4], DType::F32), t(&fixed_values(8, 2), &[4, 2], DType::F32));
    let h = t(&fixed_values(12, 3), &[3, 4], DType::BF16);
    let img = t(&fixed_values(2 * 3 * 5 * 5, 4), &[2, 3, 5, 5], DType::F32);
    let kernel = t(&fixed_values(4 * 3 * 3 * 3, 5), &[4, 3, 3, 3], DType::F32);
    let mask = h.gt_scalar(0.0)?;
    for low in [DType::BF16, DType::F16] {
        autocast(low, || -> Result<()> {
            type Case<'a> = (&'a str, Box<dyn Fn() -> Result<Tensor> + 'a>, DType);
            let cases: Vec<Case> = vec![
                // low-precision list
                ("matmul", Box::new(|| a.matmul(&b)), low),
                ("conv2d", Box::new(|| img.conv2d(&kernel, [1, 1], 0.into(), [1, 1], 1)), low),
                ("sdpa", Box::new(|| a.scaled_dot_product_attention(&a, &a, None, true)), low),
                ("linear", Box::new(|| Linear::new(4, 2)?.forward(&a)), low),
                (
                    "nn attention",
                    Box::new(|| {
                        let q = a.reshape(&[1, 1, 3, 4])?;
                        eager::nn::scaled_dot_product_attention(&q, &q, &q, Default::default())
                    }),
                    low,
                ),
                // f32 list
                ("softmax", Box::new(|| h.softmax(-1)), DType::F32),
                ("log_softmax", Box::new(|| h.log_softmax(-1)), DType::F32),
                ("layer_norm", Box::new(|| eager::nn::layer_norm(&h, &[4], None, None, 1e-5)), DType::F32),
                ("rms_norm", Box::new(|| eager::nn::rms_norm(&h, None, 1e-5)), DType::F32),
                ("group_norm", Box::new(|| h.reshape(&[3, 2, 2])?.group_norm(2, 1e-5)), DType::F32),
                (
                    "cross_entropy",
                    Box::new(|| eager::nn::cross_entropy(&h, &Tensor::from_vec(vec![0i64, 3, 1])?)),
                    DType::F32,
                ),
                ("mse", Box::new(|| eager::nn::mse(&h, &h.relu()?)), DType::F32),
                ("exp", Box::new(|| h.exp()), DType::F32),
                ("log", Box::new(|| h.log()), DType::F32),
                ("pow", Box::new(|| h.pow_scalar(2.0)), DType::F32),
                ("sum", Box::new(|| h.sum(&[1], false)), DType::F32),
                ("mean", Box::new(|| h.mean_all()), DType::F32),
                ("cumsum", Box::new(|| h.cumsum(1)), DType::F32),
                // promote list
                ("add bf16 f32", Box::new(|| h.add(&a)), DType::F32),
                ("where", Box::new(|| mask.where_cond(&h, &a)), DType::F32),
                ("cat", Box::new(|| Tensor::cat(&[&h, &a], 0)), DType::F32),
                ("add f16 bf16", Box::new(|| h.add(&h.to_dtype(DType::F16)?)), DType::F32),
                ("lt", Box::new(|| h.lt(&a)), DType::Bool),
                // the rest keep their input's dtype
                ("relu", Box::new(|| h.relu()), DType::BF16),
                ("tanh", Box::new(|| h.tanh()), DType::BF16),
                ("max", Box::new(|| h.max(&[1], false)), DType::BF16),
                ("add bf16 bf16", Box::new(|| h.add(&h)), DType::BF16),
                (
                    "f64 matmul",
                    Box::new(|| a.to_dtype(DType::F64)?.matmul(&b.to_dtype(DType::F64)?)),
                    DType::F64,
                ),
            ];
            for (name, f, want) in cases {
                assert_eq!(f()?.dtype(), want, "{name} under {low} autocast");
            }
            // Off inside: ops run in their inputs' dtypes again.
            let _off = AutocastGuard::off();
            assert_eq!(a.matmul(&b)?.dtype(), DType::F32);
            let e = h.add(&a).unwrap_err();
            assert_eq!(
                e.to_string(),
                "add: dtype error: dtypes differ: bf16 vs f32; convert one with .to_dtype(..)",
                "mixed dtypes are refused outside autocast"
            );
            Ok(())
        })?;
    }
    // Its values: the product of the inputs rounded to bf16, accumulated in f32, rounded once.
    let got = autocast(DType::BF16, || a.matmul(&b))?;
    let want = a.to_dtype(DType::BF16)?.matmul(&b.to_dtype(DType::BF16)?)?;
    assert_eq!(got.to_vec::<bf16>()?, want.to_vec::<bf16>()?);
    assert_eq!(a.matmul(&b)?.dtype(), DType::F32, "autocast ends with its scope");
    let e = autocast(DType::F32, || Ok(())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "autocast: dtype error: autocast runs in f16 or bf16, got f32",
        "f16 or bf16 only"
    );
    Ok(())
}

#[test]
fn gradients_reach_f32_parameters_in_f32() -> Result<()> {
    let _s = serial();
    let x = t(&fixed_values(12, 7), &[3, 4], DType::F32);
    let lin = Linear::new(4, 2)?;
    let loss = autocast(DType::BF16, || {
        let y = lin.forward(&x)?;
        assert_eq!(y.dtype(), DType::BF16);
        eager::nn::mse(&y, &y.zeros_like()?)
    })?;
    assert_eq!(loss.dtype(), DType::F32);
    loss.backward()?;
    let (gw, gb) = (lin.weight.grad().unwrap(), lin.bias.as_ref().unwrap().grad().unwrap());
    assert_eq!((gw.dtype(), gb.dtype()), (DType::F32, DType::F32));
    // The same graph written with explicit casts gives the same gradients.
    let w = lin.weight.get().detach().set_requires_grad(true)?;
    let b = lin.bias.as_ref().unwrap().get().detach().set_requires_grad(true)?;
    let lo = |v: &Tensor| v.to_dtype(DType::BF16);
    let y = lo(&x)?.matmul(&lo(&w)?.t()?)?.add(&lo(&b)?)?.to_dtype(DType::F32)?;
    eager::nn::mse(&y, &y.zeros_like()?)?.backward()?;
    assert_eq!(f32s(&gw), f32s(&w.grad().unwrap()));
    assert_eq!(f32s(&gb), f32s(&b.grad().unwrap()));
    Ok(())
}

struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Mlp {
    fn new(weights: &[Vec<f64>]) -> Mlp {
        let var =
            |name: &str, v: &[f64], shape: &[usize]| Var::parameter(name, t(v, shape, DType::F32)).unwrap();
        Mlp {
            l1: Linear {
                weight: var("w1", &weights[0], &[16, 8]),
                bias: Some(var("b1", &weights[1], &[16])),
            },
            l2: Linear { weight: var("w2", &weights[2], &[4, 16]), bias: Some(var("b2", &weights[3], &[4])) },
        }
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        eager::nn::cross_entropy(&self.l2.forward(&self.l1.forward(x)?.relu()?)?, y)
    }

    fn params(&self) -> Vec<Var> {
        let mut v = self.l1.parameters();
        v.extend(self.l2.parameters());
        v
    }
}

/// A batch: inputs `[32, 8]` row-major and their classes.
type Batch = (Vec<f64>, Vec<i64>);

/// The MLP's weights (w1, b1, w2, b2, flat) and 20 batches.
fn mlp_data() -> (Vec<Vec<f64>>, Vec<Batch>) {
    let scale = |v: Vec<f64>, s: f64| v.into_iter().map(|x| x * s).collect::<Vec<_>>();
    let weights = vec![
        scale(fixed_values(128, 11), 0.35),
        scale(fixed_values(16, 12), 0.1),
        scale(fixed_values(64, 13), 0.25),
        scale(fixed_values(4, 14), 0.1),
    ];
    let batches = (0..20)
        .map(|k| {
            (
                scale(fixed_values(32 * 8, 20 + k), 2.0),
                (0..32).map(|i| ((i * 7 + k * 3) % 4) as i64).collect(),
            )
        })
        .collect();
    (weights, batches)
}

/// 20 SGD steps of an MLP under bf16 autocast against torch's on the same weights and batches:
/// the losses agree within 2e-3 relative (half of bf16's epsilon: products and activations round at 2^-9
/// relative, the f32 losses of the two differ by that through the logits), and the gradients
/// and parameters stay f32.
#[test]
fn an_mlp_step_under_bf16_autocast_follows_torch() -> Result<()> {
    let _s = serial();
    let (weights, batches) = mlp_data();
    let lr = 0.2;
    let want = torch_reference(&json!({"scenario": "autocast_mlp", "weights": weights, "lr": lr,
        "shapes": [[16, 8], [16], [4, 16], [4]],
        "batches": batches.iter().map(|(x, y)| json!([x.chunks(8).collect::<Vec<_>>(), y])).collect::<Vec<_>>()}));
    let mlp = Mlp::new(&weights);
    let opt = eager::optim::Sgd::new(mlp.params(), lr);
    let mut worst: f64 = 0.0;
    for (k, (x, y)) in batches.iter().enumerate() {
        let (x, y) = (t(x, &[32, 8], DType::F32), Tensor::from_slice(y, &[32])?);
        let loss = autocast(DType::BF16, || mlp.loss(&x, &y))?;
        assert_eq!(loss.dtype(), DType::F32);
        opt.zero_grad();
        loss.backward()?;
        for p in mlp.params() {
            assert_eq!(p.grad().unwrap().dtype(), DType::F32, "{} grad", p.name());
        }
        let w = &want[k];
        assert!(w["grad_dtypes"].as_array().unwrap().iter().all(|d| d == "torch.float32"));
        assert_eq!(w["logits_dtype"], "torch.bfloat16");
        let (got, torch) = (loss.item::<f32>()? as f64, json_f64(&w["loss"]));
        worst = worst.max((got - torch).abs() / torch.abs());
        assert!((got - torch).abs() <= 2e-3 * torch.abs(), "step {k}: loss {got}, torch {torch}");
        opt.step()?;
    }
    for p in mlp.params() {
        assert_eq!(p.get().dtype(), DType::F32, "{} stays f32", p.name());
    }
    let first = json_f64(&want[0]["loss"]);
    let last = json_f64(&want[19]["loss"]);
    println!("MLP under bf16 autocast: loss {first:.4} -> {last:.4} (torch), largest relative difference {worst:.2e}");
    assert!(last < first, "it trains");
    Ok(())
}

/// The same autocast step eagerly, in a fused region, in fused mode and compiled: the same
/// dtypes and (up to XLA's fusion of f32 arithmetic) the same values; the compiled function is
/// traced once per autocast dtype.
#[test]
fn autocast_works_fused_and_compiled() -> Result<()> {
    let _s = serial();
    let (weights, batches) = mlp_data();
    let (x, y) = (t(&batches[0].0, &[32, 8], DType::F32), Tensor::from_slice(&batches[0].1, &[32])?);
    let mlp = Mlp::new(&weights);
    let eager_loss = autocast(DType::BF16, || mlp.loss(&x, &y))?.item::<f32>()?;
    let full_loss = mlp.loss(&x, &y)?.item::<f32>()?;
    assert_ne!(eager_loss, full_loss, "bf16 rounding shows in the loss");
    // XLA may fuse a program's bf16 round trips away (its float normalization on the CPU), so
    // a fused or compiled program agrees with the op-by-op one to bf16's precision.
    let close = |a: f32, b: f32, what: &str| assert!((a - b).abs() <= 4e-3 * b.abs(), "{what}: {a} vs {b}");

    let fused = autocast(DType::BF16, || eager::fused(|| mlp.loss(&x, &y)))?;
    assert_eq!(fused.dtype(), DType::F32);
    close(fused.item::<f32>()?, eager_loss, "fused region");

    eager::set_fused_mode(true);
    let in_mode = autocast(DType::BF16, || mlp.loss(&x, &y));
    eager::set_fused_mode(false);
    close(in_mode?.item::<f32>()?, eager_loss, "fused mode");

    let step = eager::compile("autocast_loss", |a: &[Tensor]| Ok(vec![mlp.loss(&a[0], &a[1])?]));
    let compiled = autocast(DType::BF16, || step.call(&[&x, &y]))?;
    close(compiled[0].item::<f32>()?, eager_loss, "compiled under autocast");
    let plain = step.call(&[&x, &y])?;
    close(plain[0].item::<f32>()?, full_loss, "compiled without autocast");
    assert_eq!(step.traces(), 2, "one trace per autocast dtype");
    let text = autocast(DType::BF16, || step.program_text(&[&x, &y]))?;
    assert!(text.contains("bf16"), "the traced program computes in bf16");

    // A compiled training step under autocast: gradients f32, parameters stay f32.
    let opt = eager::optim::Sgd::new(mlp.params(), 0.1);
    let train = eager::compile("autocast_step", |a: &[Tensor]| {
        let loss = mlp.loss(&a[0], &a[1])?;
        loss.backward()?;
        opt.step()?;
        Ok(vec![loss])
    });
    let before = f32s(&mlp.l1.weight.get());
    autocast(DType::BF16, || train.call(&[&x, &y]))?;
    assert_ne!(f32s(&mlp.l1.weight.get()), before);
    assert!(mlp.params().iter().all(|p| p.get().dtype() == DType::F32));
    Ok(())
}
