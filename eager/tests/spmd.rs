//! Tensors split over a mesh of the CPU plugin's 4 devices: blocks go out and come back
//! whole; every op on sharded inputs runs as one SPMD program and gives the single-device
//! result, with the split its family's rule gives; gradients flow through; bad meshes and
//! specs are clear errors.

mod common;

use eager::mesh::{Mesh, PartitionSpec as P};
use eager::nn;
use eager::ops::Padding;
use eager::prelude::*;

fn mesh() -> Mesh {
    Mesh::new(&[("data", 2), ("model", 2)]).expect("the CPU plugin shows 4 devices")
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn specs() -> Vec<P> {
    vec![
        P::replicated(),
        P::new(&[Some("data")]),
        P::new(&[None, Some("model")]),
        P::new(&[Some("model"), Some("data")]),
        P::with_axes(&[&["data", "model"]]),
    ]
}

#[test]
fn blocks_go_out_and_come_back_whole() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32)?.reshape(&[4, 6])?;
    for spec in specs() {
        let s = x.shard(&m, &spec)?;
        assert_eq!(s.sharding().unwrap().spec(), &spec);
        assert_eq!(values(&s), values(&x), "{spec}");
        assert_eq!(values(&s.to(Device::cpu())?), values(&x));
    }
    let rows = x.shard(&m, &P::new(&[Some("data")]))?;
    let text = rows.to_string();
    assert!(text.contains("sharding=P(\"data\") over Mesh {data: 2, model: 2} on cpu:0..3"), "{text}");
    // Another split on the same mesh moves blocks between devices, not through the host.
    let mark = profiler::next_seq();
    let cols = rows.shard(&m, &P::new(&[None, Some("model")]))?;
    cols.block_until_ready()?;
    let moved = profiler::events_since(mark).iter().filter(|e| e.kind != profiler::EventKind::Op).count();
    assert_eq!(moved, 0, "the new split went through the host");
    assert_eq!(cols.sharding().unwrap().spec(), &P::new(&[None, Some("model")]));
    assert_eq!(values(&cols), values(&x));
    // A 0-d tensor and a bool one.
    assert_eq!(Tensor::scalar(3.5f32)?.replicate(&m)?.item::<f32>()?, 3.5);
    let mask = Tensor::from_slice(&[true, false, true, true], &[4])?.shard(&m, &P::new(&[Some("data")]))?;
    assert_eq!(mask.to_vec::<bool>()?, [true, false, true, true]);
    Ok(())
}

#[test]
fn every_family_gives_the_single_device_result() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    manual_seed(2);
    let x = Tensor::randn(&[4, 6], DType::F32)?;
    let y = Tensor::randn(&[4, 6], DType::F32)?;
    let w = Tensor::randn(&[6, 8], DType::F32)?;
    type Case = (&'static str, fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>);
    let cases: &[Case] = &[
        ("exp", |x, _, _| x.exp()),
        ("add", |x, y, _| x.add(y)),
        ("mul by a scalar", |x, _, _| x.mul_scalar(3.0)),
        ("where", |x, y, _| x.gt(y)?.where_cond(x, y)),
        ("broadcast row", |x, y, _| x.add(&y.narrow(0, 0, 1)?)),
        ("sum over rows", |x, _, _| x.sum(&[0], false)),
        ("max over columns, kept", |x, _, _| x.max(&[1], true)),
        ("matmul", |x, _, w| x.matmul(w)),
        ("transpose", |x, _, _| x.t()),
        ("softmax", |x, _, _| x.softmax(-1)),
        ("reshape (no rule: whole result)", |x, _, _| x.reshape(&[6, 4])),
        ("layer norm", |x, _, _| {
            let c = x.sub(&x.mean(&[-1], true)?)?;
            c.mul(&c.square()?.mean(&[-1], true)?.add_scalar(1e-5)?.rsqrt()?)
        }),
        ("cast and back", |x, _, _| x.to_dtype(DType::F16)?.to_dtype(DType::F32)),
        ("tril", |x, _, _| x.tril(0)),
        ("cumsum", |x, _, _| x.cumsum(1)),
        ("sort", |x, _, _| Ok(x.sort(1, true)?.0)),
        ("flip", |x, _, _| x.flip(&[0])),
        ("cat", |x, y, _| Tensor::cat(&[x, y], 1)),
        ("strided slice", |x, _, _| x.narrow(1, 1, 4)),
        // Indices computed on the device: checked there, over all of them.
        ("take_along_dim", |x, y, _| x.take_along_dim(&y.argmax(Some(1), true)?, 1)),
        ("index_select", |x, _, _| {
            let picked = x.index_select(0, &x.argmax(Some(0), false)?.narrow(0, 0, 2)?)?;
            picked.sum_all()?.unsqueeze(0)
        }),
        ("scatter_add", |x, y, _| x.scatter_add(1, &y.argsort(1, false)?, y)),
        ("conv1d", |x, y, _| {
            let weight = y.narrow(0, 0, 2)?.narrow(1, 0, 3)?.reshape(&[2, 1, 3])?;
            x.reshape(&[4, 1, 6])?.conv1d(&weight, 1, Padding::Same, 1, 1)?.reshape(&[4, 12])
        }),
        ("max_pool2d", |x, _, _| {
            x.reshape(&[1, 1, 4, 6])?.max_pool2d([2, 2], None, [0, 0])?.reshape(&[2, 3])
        }),
    ];
    for (name, f) in cases {
        let want = values(&f(&x, &y, &w)?);
        for spec in specs() {
            let (xs, ys) = (x.shard(&m, &spec)?, y.shard(&m, &spec)?);
            let ws = w.shard(&m, &P::new(&[None, Some("model")]))?;
            let got = f(&xs, &ys, &ws)?;
            assert!(got.sharding().is_some(), "{name} on {spec}: the result left the mesh");
            let got = values(&got);
            let close = got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()));
            assert!(close && got.len() == want.len(), "{name} on {spec}: {got:?} != {want:?}");
        }
    }
    Ok(())
}

#[test]
fn a_bad_index_computed_on_the_device_fails_the_sharded_op_that_used_it() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let x =
        Tensor::arange(0.0, 24.0, 1.0, DType::F32)?.reshape(&[4, 6])?.shard(&m, &P::new(&[Some("data")]))?;
    // [0, 1, 2, 3] + 3: index 6 of dim 1 (size 6) is out of range, found on the device.
    let idx = Tensor::arange(0.0, 4.0, 1.0, DType::I64)?.replicate(&m)?.add_scalar(3.0)?.reshape(&[4, 1])?;
    let picked = x.take_along_dim(&idx.sub_scalar(3.0)?, 1)?;
    assert_eq!(values(&picked), vec![0.0, 7.0, 14.0, 21.0]);
    let e = x.take_along_dim(&idx, 1)?.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("gather") && e.contains("index 6 is out of range for dim 1 of size 6"), "{e}");
    Ok(())
}

#[test]
fn results_keep_the_split_their_rule_gives() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let x = Tensor::ones(&[4, 6], DType::F32)?.shard(&m, &P::new(&[Some("data")]))?;
    let w = Tensor::ones(&[6, 8], DType::F32)?.shard(&m, &P::new(&[None, Some("model")]))?;
    let spec = |t: &Tensor| t.sharding().unwrap().spec().to_string();
    assert_eq!(spec(&x.exp()?), "P(\"data\")");
    assert_eq!(spec(&x.matmul(&w)?), "P(\"data\", \"model\")");
    assert_eq!(spec(&x.sum(&[0], false)?), "P()", "a reduction over the split dim is whole");
    assert_eq!(spec(&x.sum(&[1], false)?), "P(\"data\")");
    assert_eq!(spec(&x.t()?), "P(None, \"data\")");
    // A matmul contracting a split dim needs its partial sums added across devices: the
    // profiler lists the collective the partitioner put in.
    let mark = profiler::next_seq();
    let wt = Tensor::ones(&[6, 8], DType::F32)?.shard(&m, &P::new(&[Some("model")]))?;
    let split_k = Tensor::ones(&[4, 6], DType::F32)?.shard(&m, &P::new(&[None, Some("model")]))?;
    let _ = split_k.matmul(&wt)?;
    let event = profiler::events_since(mark).into_iter().find(|e| e.name() == "matmul").expect("a matmul");
    let collectives = event.info.mesh.as_ref().map(|m| m.collectives.clone()).unwrap_or_default();
    assert!(collectives.iter().any(|c| c.starts_with("all-reduce")), "{collectives:?}");
    let mark2 = profiler::next_seq();
    let _ = x.exp()?;
    let event = profiler::events_since(mark2).into_iter().find(|e| e.name() == "exp").expect("an exp");
    assert_eq!(event.info.mesh.as_ref().map(|m| m.collectives.len()), Some(0), "elementwise moves nothing");
    // The profiler knows where it ran.
    let mark = profiler::next_seq();
    x.exp()?.block_until_ready()?;
    let event = profiler::events_since(mark).into_iter().find(|e| e.name() == "exp").expect("an exp event");
    assert_eq!(event.info.signature(), "exp(f32[4, 6]) over mesh {data: 2, model: 2}");
    assert_eq!(event.info.mesh.as_ref().map(|m| m.devices.len()), Some(4));
    // The cache keys on the split: the same op on another split is another program.
    let other = x.shard(&m, &P::new(&[None, Some("data")]))?;
    let before = cache::stats().misses + cache::stats().disk_hits;
    let _ = other.add_scalar(123.0)?;
    let _ = x.add_scalar(123.0)?;
    let _ = x.add_scalar(123.0)?;
    assert_eq!(cache::stats().misses + cache::stats().disk_hits, before + 2);
    Ok(())
}

#[test]
fn gradients_flow_through_sharded_ops() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let host = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 0.5, 4.0, -1.0, 2.0, 0.0], &[4, 2])?;
    let x = host.shard(&m, &P::new(&[Some("data")]))?.set_requires_grad(true)?;
    let loss = x.mul(&x)?.sum_all()?;
    loss.backward()?;
    let grad = x.grad().expect("a gradient");
    let want: Vec<f32> = values(&host).iter().map(|v| 2.0 * v).collect();
    assert_eq!(values(&grad), want);
    Ok(())
}

/// A sharded gradient against host math: least squares with the batch split over "data" and
/// the weight's columns over "model" (the gradient sums the batch's halves across devices).
#[test]
fn a_sharded_gradient_matches_host_math() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let dims @ (n, k, o) = (8, 6, 4);
    let (xh, wh, th) =
        (common::fixed_values(n * k, 1), common::fixed_values(k * o, 2), common::fixed_values(n * o, 3));
    let rows = P::new(&[Some("data")]);
    let x = Tensor::from_slice(&common::as_f32(&xh), &[n, k])?.shard(&m, &rows)?;
    let t = Tensor::from_slice(&common::as_f32(&th), &[n, o])?.shard(&m, &rows)?;
    let w = Tensor::from_slice(&common::as_f32(&wh), &[k, o])?
        .shard(&m, &P::new(&[None, Some("model")]))?
        .set_requires_grad(true)?;
    let loss = nn::mse(&x.matmul(&w)?, &t)?;
    loss.backward()?;
    let f32_of = |v: &[f64]| common::as_f32(v).into_iter().map(f64::from).collect::<Vec<_>>();
    let (want_loss, want_grad) = common::host_least_squares(&f32_of(&xh), &f32_of(&wh), &f32_of(&th), dims);
    common::assert_all_close("sharded loss", &[loss.item::<f32>()? as f64], &[want_loss], 1e-5, 1e-6);
    let grad: Vec<f64> = values(&w.grad().expect("w has a gradient")).into_iter().map(f64::from).collect();
    common::assert_all_close("sharded gradient", &grad, &want_grad, 1e-5, 1e-6);
    Ok(())
}

#[test]
fn bad_meshes_and_specs_are_clear_errors() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let x = Tensor::zeros(&[3, 4], DType::F32)?;
    let e = x.shard(&m, &P::new(&[Some("data")])).unwrap_err().to_string();
    assert!(e.contains("dim 0 of [3, 4] (size 3) does not split evenly over 2 devices"), "{e}");
    let e = x.shard(&m, &P::new(&[None, Some("batch")])).unwrap_err().to_string();
    assert!(e.contains("unknown mesh axis \"batch\""), "{e}");
    let e = Mesh::new(&[("data", 64)]).unwrap_err().to_string();
    assert!(e.contains("needs 64 devices; the cpu plugin shows"), "{e}");
    // Tensors on different meshes, or a whole tensor on one device, do not mix silently.
    let other = Mesh::new(&[("data", 4)])?;
    let a = x.shard(&m, &P::new(&[None, Some("model")]))?;
    let b = x.shard(&other, &P::new(&[None, Some("data")]))?;
    let e = a.add(&b).unwrap_err().to_string();
    assert!(e.starts_with("add: inputs are split over different meshes"), "{e}");
    let e = a.add(&x).unwrap_err().to_string();
    assert!(
        e.contains("f32[3, 4] on cpu:0 cannot join tensors split over") && e.contains(".replicate(&mesh)"),
        "{e}"
    );
    let e = a.buffer().err().expect("no single buffer").to_string();
    assert!(e.contains("is split over"), "{e}");
    Ok(())
}

/// An MLP's parameters, read back.
fn parameters(m: &nn::Sequential) -> Vec<Vec<f32>> {
    use eager::nn::Module;
    m.parameters().iter().map(|p| values(&p.get())).collect()
}

/// 20 SGD steps of a seeded MLP on a fixed batch; `place` puts the batch, targets and each
/// parameter where the run wants them. Returns the losses and the model.
fn train(place: &dyn Fn(&str, &Tensor) -> Result<Tensor>) -> Result<(Vec<f32>, nn::Sequential)> {
    train_as(place, false)
}

/// [`train`], each step run eagerly or as one compiled (SPMD) program.
fn train_as(
    place: &dyn Fn(&str, &Tensor) -> Result<Tensor>,
    compiled: bool,
) -> Result<(Vec<f32>, nn::Sequential)> {
    use eager::nn::{Linear, Module, Relu, Sequential};
    use eager::optim::Sgd;
    manual_seed(9);
    let model = Sequential::new().add(Linear::new(6, 16)?).add(Relu).add(Linear::new(16, 4)?);
    for (name, p) in model.named_parameters() {
        p.set(place(&name, &p.get())?)?;
    }
    let x = place("x", &Tensor::randn(&[8, 6], DType::F32)?)?;
    let y = place("y", &Tensor::from_slice(&[0i64, 1, 2, 3, 3, 2, 1, 0], &[8])?)?;
    let sgd = Sgd::with_momentum(model.parameters(), 0.1, 0.9)?;
    let step = |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let loss = nn::cross_entropy(&model.forward(&a[0])?, &a[1])?;
        loss.backward()?;
        sgd.step()?;
        sgd.zero_grad();
        Ok(vec![loss])
    };
    let program = eager::compile("sharded_step", step);
    let mut losses = Vec::new();
    for _ in 0..20 {
        let loss = if compiled { program.call(&[&x, &y])? } else { step(&[x.clone(), y.clone()])? };
        losses.push(loss[0].item::<f32>()?);
    }
    if compiled {
        assert_eq!(program.traces(), 1);
    }
    Ok((losses, model))
}

#[test]
fn data_parallel_fsdp_and_tensor_parallel_steps_equal_the_single_device_step() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let (want_losses, want_model) = train(&|_, t| Ok(t.clone()))?;
    // Data-parallel: the batch split over "data", every weight whole on every device.
    let data = P::new(&[Some("data")]);
    let dp = |name: &str, t: &Tensor| {
        if name == "x" || name == "y" {
            t.shard(&m, &data)
        } else {
            t.replicate(&m)
        }
    };
    // FSDP-style: weights (and so the optimizer's state) split over "data" too; each layer's
    // weight is gathered where it is used, by the partitioner.
    let fsdp =
        |name: &str, t: &Tensor| if name.ends_with("bias") { t.replicate(&m) } else { t.shard(&m, &data) };
    // Tensor-parallel: the first layer's outputs split over "model", the second's inputs.
    let model_rows = P::new(&[Some("model")]);
    let model_cols = P::new(&[None, Some("model")]);
    let tp = |name: &str, t: &Tensor| match name {
        "0.weight" | "0.bias" => t.shard(&m, &model_rows),
        "2.weight" => t.shard(&m, &model_cols),
        _ => t.replicate(&m),
    };
    type Place<'a> = &'a dyn Fn(&str, &Tensor) -> Result<Tensor>;
    for (run, place) in [("data-parallel", &dp as Place), ("fsdp", &fsdp), ("tensor-parallel", &tp)] {
        let (losses, model) = train(place)?;
        for (step, (g, w)) in losses.iter().zip(&want_losses).enumerate() {
            assert!((g - w).abs() <= 1e-5, "{run}: loss at step {step} is {g}, one device gives {w}");
        }
        for (got, want) in parameters(&model).iter().zip(parameters(&want_model)) {
            let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0, f32::max);
            assert!(worst <= 1e-5, "{run}: a parameter is off by {worst}");
        }
        use eager::nn::Module;
        assert!(
            model.parameters().iter().all(|p| p.get().sharding().is_some()),
            "{run}: a parameter left the mesh"
        );
    }
    Ok(())
}

#[test]
fn a_compiled_sharded_step_equals_its_eager_form() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let data = P::new(&[Some("data")]);
    // Data-parallel batch; the first layer's weight split (FSDP-style), the rest whole.
    let place = |name: &str, t: &Tensor| match name {
        "x" | "y" | "0.weight" => t.shard(&m, &data),
        _ => t.replicate(&m),
    };
    let (eager_losses, eager_model) = train_as(&place, false)?;
    let mark = profiler::next_seq();
    let (compiled_losses, compiled_model) = train_as(&place, true)?;
    let calls = profiler::events_since(mark).into_iter().filter(|e| e.name() == "sharded_step").count();
    assert_eq!(calls, 20, "one SPMD program per step");
    for (step, (g, w)) in compiled_losses.iter().zip(&eager_losses).enumerate() {
        assert!((g - w).abs() <= 1e-5, "loss at step {step}: compiled {g}, eager {w}");
    }
    for (got, want) in parameters(&compiled_model).iter().zip(parameters(&eager_model)) {
        let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0, f32::max);
        assert!(worst <= 1e-5, "a parameter is off by {worst}");
    }
    // The written parameters keep their split.
    use eager::nn::Module;
    let first = compiled_model.parameters()[0].get();
    assert_eq!(first.sharding().map(|s| s.spec().clone()), Some(data));
    Ok(())
}

/// The collectives the partitioner put in the programs dispatched since `mark`.
fn collectives_since(mark: u64) -> Vec<String> {
    profiler::events_since(mark)
        .into_iter()
        .filter_map(|e| e.info.mesh.clone())
        .flat_map(|m| m.collectives)
        .collect()
}

/// 0..24 as `f32[4, 6]`, rows 0-1 on data=0 and rows 2-3 on data=1 (each whole over model):
/// the values and the tensor.
fn rows_over_data(m: &Mesh) -> Result<(Vec<f32>, Tensor)> {
    let host: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = Tensor::from_slice(&host, &[4, 6])?.shard(m, &P::new(&[Some("data")]))?;
    Ok((host, x))
}

#[test]
fn collectives_over_a_mesh_axis_against_hand_computed_blocks() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let (host, x) = rows_over_data(&m)?;
    let block = |b: usize| host[b * 12..(b + 1) * 12].to_vec();
    let (b0, b1) = (block(0), block(1));

    let mark = profiler::next_seq();
    let sum = x.all_reduce("data", eager::Reduction::Sum)?;
    assert_eq!(sum.shape(), [2, 6]);
    assert_eq!(values(&sum), b0.iter().zip(&b1).map(|(a, b)| a + b).collect::<Vec<_>>());
    assert_eq!(sum.sharding().unwrap().spec(), &P::replicated());
    assert!(
        collectives_since(mark).iter().any(|c| c.starts_with("all-reduce")),
        "{:?}",
        collectives_since(mark)
    );
    let mean = x.all_reduce("data", eager::Reduction::Mean)?;
    assert_eq!(values(&mean), b0.iter().zip(&b1).map(|(a, b)| (a + b) / 2.0).collect::<Vec<_>>());
    let max = x.neg()?.all_reduce("data", eager::Reduction::Max)?;
    assert_eq!(values(&max), b0.iter().map(|a| -a).collect::<Vec<_>>());

    let gathered = x.all_gather("data")?;
    assert_eq!(
        (values(&gathered), gathered.sharding().unwrap().spec().clone()),
        (host.clone(), P::replicated())
    );

    // The sum of the blocks, split over data along the columns: [2, 6] P(None, "data").
    let scattered = x.reduce_scatter("data", 1)?;
    assert_eq!(scattered.sharding().unwrap().spec(), &P::new(&[None, Some("data")]));
    assert_eq!(values(&scattered), values(&sum));

    // The split moves from the rows to the columns; the values stay.
    let mark = profiler::next_seq();
    let moved = x.all_to_all("data", 0, 1)?;
    assert_eq!(moved.sharding().unwrap().spec(), &P::new(&[None, Some("data")]));
    assert_eq!(values(&moved), host);
    assert!(!collectives_since(mark).is_empty(), "moving the split moved nothing");

    // Block 0 goes to position 1; position 0 gets nothing (zeros).
    let shifted = x.ppermute("data", &[(0, 1)])?;
    let want: Vec<f32> = vec![0.0; 12].into_iter().chain(b0.iter().copied()).collect();
    assert_eq!(values(&shifted), want);
    assert_eq!(shifted.sharding().unwrap().spec(), x.sharding().unwrap().spec());

    // Gradients flow through: d/dx sum(all_reduce(x)) is 1 everywhere.
    let leaf = x.set_requires_grad(true)?;
    leaf.all_reduce("data", eager::Reduction::Sum)?.sum_all()?.backward()?;
    assert_eq!(values(&leaf.grad().unwrap()), vec![1.0; 24]);

    // Errors name the collective and what is wrong.
    let e =
        Tensor::zeros(&[4], DType::F32)?.all_reduce("data", eager::Reduction::Sum).unwrap_err().to_string();
    assert!(e.starts_with("all_reduce: f32[4] is on one device"), "{e}");
    let e = x.all_gather("model").unwrap_err().to_string();
    assert!(e.contains("no dim of f32[4, 6] is split over mesh axis \"model\""), "{e}");
    let e = x.ppermute("data", &[(0, 1), (1, 1)]).unwrap_err().to_string();
    assert!(e.contains("each destination once"), "{e}");
    Ok(())
}

/// Every collective over "data" of `a[0]`, as a compiled function returns them.
fn every_collective(a: &[Tensor]) -> Result<Vec<Tensor>> {
    use eager::Reduction::{Max, Mean, Sum};
    let x = &a[0];
    Ok(vec![
        x.all_reduce("data", Sum)?,
        x.all_reduce("data", Mean)?,
        x.neg()?.all_reduce("data", Max)?,
        x.all_gather("data")?,
        x.reduce_scatter("data", 1)?,
        x.all_to_all("data", 0, 1)?,
        x.ppermute("data", &[(0, 1), (1, 0)])?,
    ])
}

#[test]
fn collectives_inside_a_compiled_function_equal_their_eager_form() -> Result<()> {
    let _serial = common::serial();
    let m = mesh();
    let (host, x) = rows_over_data(&m)?;
    let want = every_collective(std::slice::from_ref(&x))?;

    let f = eager::compile("every_collective", every_collective);
    let mark = profiler::next_seq();
    let got = f.call(&[&x])?;
    let programs: Vec<_> =
        profiler::events_since(mark).into_iter().filter(|e| e.info.mesh.is_some()).collect();
    assert_eq!(
        programs.len(),
        1,
        "one SPMD program: {:?}",
        programs.iter().map(|e| e.name()).collect::<Vec<_>>()
    );
    assert_eq!(programs[0].name(), "every_collective");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!((values(g), g.shape()), (values(w), w.shape()), "collective {i}");
        assert_eq!(
            g.sharding().map(|s| s.spec().clone()),
            w.sharding().map(|s| s.spec().clone()),
            "collective {i} leaves its result split as eagerly"
        );
    }
    // The splits are constraints of the one program, and the partitioner made collectives.
    let text = f.program_text(&[&x])?;
    assert!(text.contains("\"sdy.sharding_constraint\""), "{text}");
    let collectives = collectives_since(mark);
    for kind in ["all-reduce", "collective-permute"] {
        assert!(collectives.iter().any(|c| c.starts_with(kind)), "no {kind} in {collectives:?}");
    }

    // Gradients through collectives: against the hand-made reference below, and in a compiled
    // function equal to the eager ones. A scale `c` that differs per block after the swap makes
    // the permutation's gradient matter (a plain sum of the blocks would not see it).
    let w = Var::parameter("w", Tensor::randn(&[4, 6], DType::F32)?.shard(&m, &P::new(&[Some("data")]))?)?;
    let c_host: Vec<f32> = (0..24).map(|i| 0.5 + i as f32 / 8.0).collect();
    let c = Tensor::from_slice(&c_host, &[4, 6])?.shard(&m, &P::new(&[Some("data")]))?;
    let loss_of = |x: &Tensor| -> Result<Tensor> {
        let mixed = w.get().mul(x)?.ppermute("data", &[(0, 1), (1, 0)])?.mul(&c)?;
        let summed = mixed.all_reduce("data", eager::Reduction::Sum)?;
        summed.mul(&summed)?.sum_all()
    };
    loss_of(&x)?.backward()?;
    let eager_grad = values(&w.grad().expect("w has a gradient"));
    // The reference, by hand: the swap puts block 1 of w * x at position 0 and block 0 at 1,
    // each scaled by that position's block of c; the sum S = c0 * B1 + c1 * B0 is whole on
    // both, and the loss sum(S^2) sends 2 S back through the scale of each block's position.
    let (wh, ch) = (values(&w.get()), values(&c));
    let s: Vec<f32> =
        (0..12).map(|j| ch[j] * wh[12 + j] * host[12 + j] + ch[12 + j] * wh[j] * host[j]).collect();
    let by_hand: Vec<f64> = (0..12)
        .map(|j| 2.0 * s[j] * ch[12 + j] * host[j])
        .chain((0..12).map(|j| 2.0 * s[j] * ch[j] * host[12 + j]))
        .map(f64::from)
        .collect();
    let eager64: Vec<f64> = eager_grad.iter().copied().map(f64::from).collect();
    common::assert_all_close("gradient through ppermute and all_reduce", &eager64, &by_hand, 1e-5, 1e-4);
    w.zero_grad();
    let step = eager::compile("collective_grad", |a: &[Tensor]| {
        loss_of(&a[0])?.backward()?;
        Ok(vec![w.grad().expect("w has a gradient")])
    });
    let compiled_grad = step.call(&[&x])?;
    assert_eq!(values(&compiled_grad[0]), eager_grad);

    // A function over one mesh: another mesh inside is a clear error.
    let other = Mesh::new(&[("data", 4)])?;
    let g = eager::compile("two_meshes", |a: &[Tensor]| Ok(vec![a[0].replicate(&other)?]));
    let e = g.call(&[&x]).unwrap_err().to_string();
    assert!(e.contains("runs over one mesh"), "{e}");
    Ok(())
}
