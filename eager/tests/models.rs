//! The layers of CNNs and transformers on the real CPU plugin: BatchNorm2d in training and
//! evaluation mode against host statistics (eager and compiled), causal attention that never
//! looks ahead, key/value-cached decoding that gives the full forward's numbers, and the
//! errors of bad shapes.

mod common;

use eager::nn::{self, BatchNorm2d, Module, MultiheadAttention, Sequential, TransformerBlock};
use eager::prelude::*;

/// Per-channel mean and biased variance of `[N, C, H, W]` values on the host.
fn channel_stats(x: &[f32], shape: [usize; 4]) -> Vec<(f64, f64)> {
    let [n, c, h, w] = shape;
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..n)
                .flat_map(|i| (0..h * w).map(move |k| (i * c + ch) * h * w + k))
                .map(|at| x[at] as f64)
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            (mean, vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64)
        })
        .collect()
}

fn normalized(x: &[f32], shape: [usize; 4], stats: &[(f64, f64)], eps: f64) -> Vec<f64> {
    let hw = shape[2] * shape[3];
    x.iter()
        .enumerate()
        .map(|(at, &v)| {
            let (mean, var) = stats[(at / hw) % shape[1]];
            (v as f64 - mean) / (var + eps).sqrt()
        })
        .collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

#[test]
fn batch_norm_uses_batch_statistics_in_training_and_running_ones_in_evaluation() -> Result<()> {
    let _serial = common::serial();
    manual_seed(3);
    let shape = [4, 3, 2, 2];
    // Channels with distinct means and spreads.
    let x = Tensor::randn(&shape, DType::F32)?
        .mul(&Tensor::from_slice(&[1.0f32, 3.0, 0.5], &[1, 3, 1, 1])?)?
        .add(&Tensor::from_slice(&[0.0f32, -2.0, 5.0], &[1, 3, 1, 1])?)?;
    let host = x.to_vec::<f32>()?;
    let stats = channel_stats(&host, shape);
    let bn = BatchNorm2d::new(3)?;
    let y = bn.forward(&x)?;
    common::assert_all_close(
        "train forward",
        &values(&y),
        &normalized(&host, shape, &stats, 1e-5),
        1e-4,
        1e-4,
    );
    // Running statistics move 0.1 of the way, the variance unbiased (n = 16 per channel).
    let want_mean: Vec<f64> = stats.iter().map(|s| 0.1 * s.0).collect();
    let want_var: Vec<f64> = stats.iter().map(|s| 0.9 + 0.1 * s.1 * 16.0 / 15.0).collect();
    common::assert_all_close("running mean", &values(&bn.running_mean.get()), &want_mean, 1e-5, 1e-5);
    common::assert_all_close("running var", &values(&bn.running_var.get()), &want_var, 1e-5, 1e-5);

    // Evaluation: the running statistics normalise, and nothing moves.
    bn.eval();
    let running: Vec<(f64, f64)> = want_mean.iter().copied().zip(want_var.iter().copied()).collect();
    let y = bn.forward(&x)?;
    common::assert_all_close(
        "eval forward",
        &values(&y),
        &normalized(&host, shape, &running, 1e-5),
        1e-4,
        1e-4,
    );
    common::assert_all_close(
        "running mean after eval",
        &values(&bn.running_mean.get()),
        &want_mean,
        1e-6,
        1e-6,
    );

    // Saved with the parameters, as torch's state_dict.
    let names: Vec<String> = nn::state_dict(&bn).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias", "running_mean", "running_var"]);

    // A compiled training step updates the running statistics as the eager one does.
    bn.train();
    let eager_bn = BatchNorm2d::new(3)?;
    let compiled_bn = BatchNorm2d::new(3)?;
    let step = eager::compile("bn_step", |a: &[Tensor]| Ok(vec![compiled_bn.forward(&a[0])?]));
    for _ in 0..3 {
        let want = eager_bn.forward(&x)?;
        let got = step.call(&[&x])?.remove(0);
        common::assert_all_close("compiled forward", &values(&got), &values(&want), 1e-5, 1e-5);
    }
    assert_eq!(step.traces(), 1);
    let (want, got) = (values(&eager_bn.running_var.get()), values(&compiled_bn.running_var.get()));
    common::assert_all_close("compiled running var", &got, &want, 1e-6, 1e-6);
    Ok(())
}

#[test]
fn batch_norm_errors_name_the_op_and_shapes() -> Result<()> {
    let _serial = common::serial();
    let bn = BatchNorm2d::new(3)?;
    let err = bn.forward(&Tensor::zeros(&[2, 4, 2, 2], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("batch_norm") && err.contains("[2, 4, 2, 2]") && err.contains("[3]"), "{err}");
    let err = bn.forward(&Tensor::zeros(&[1, 3, 1, 1], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("more than 1 value per channel"), "{err}");
    // One value is fine in evaluation: normalised by the fresh running statistics (mean 0,
    // variance 1), zeros stay zeros.
    bn.eval();
    let y = bn.forward(&Tensor::from_slice(&[0.0f32, 2.0, -3.0], &[1, 3, 1, 1])?)?;
    assert_eq!(y.shape(), &[1, 3, 1, 1]);
    let scale = 1.0 / (1.0f64 + 1e-5).sqrt();
    common::assert_all_close(
        "one value in evaluation",
        &values(&y),
        &[0.0, 2.0 * scale, -3.0 * scale],
        1e-6,
        1e-7,
    );
    Ok(())
}

#[test]
fn causal_attention_never_looks_ahead_and_cached_decoding_matches_it() -> Result<()> {
    let _serial = common::serial();
    manual_seed(5);
    let block = TransformerBlock::new(16, 4)?;
    let x = Tensor::randn(&[2, 6, 16], DType::F32)?;
    let full = block.forward(&x)?;
    // Changing the last two positions leaves the first four as they were.
    let later = Tensor::randn(&[2, 2, 16], DType::F32)?;
    let changed = Tensor::cat(&[&x.narrow(1, 0, 4)?, &later], 1)?;
    let again = block.forward(&changed)?;
    common::assert_all_close(
        "first four positions",
        &values(&again.narrow(1, 0, 4)?),
        &values(&full.narrow(1, 0, 4)?),
        1e-6,
        1e-6,
    );
    assert!(values(&again.narrow(1, 4, 2)?) != values(&full.narrow(1, 4, 2)?));

    // One position at a time through a key/value cache: the full forward's numbers.
    let mut cache = block.attn.new_cache(2, 8)?;
    for t in 0..6 {
        let y = block.decode(&x.narrow(1, t, 1)?, &mut cache)?;
        let want = values(&full.narrow(1, t, 1)?);
        common::assert_all_close(&format!("decoded position {t}"), &values(&y), &want, 1e-5, 1e-5);
    }
    assert_eq!((cache.len(), cache.capacity()), (6, 8));
    let names: Vec<String> = block.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[..4], ["ln1.weight", "ln1.bias", "attn.in_proj.weight", "attn.in_proj.bias"]);
    assert_eq!(names.len(), 12);
    Ok(())
}

#[test]
fn attention_errors_name_the_layer_and_shapes() -> Result<()> {
    let _serial = common::serial();
    let err = MultiheadAttention::new(10, 3, true).err().unwrap().to_string();
    assert!(err.contains("MultiheadAttention") && err.contains("10") && err.contains('3'), "{err}");
    let attn = MultiheadAttention::new(8, 2, true)?;
    let err = attn.forward(&Tensor::zeros(&[2, 3, 6], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("[B, T, 8]") && err.contains("[2, 3, 6]"), "{err}");
    let mut cache = attn.new_cache(1, 1)?;
    attn.decode(&Tensor::zeros(&[1, 1, 8], DType::F32)?, &mut cache)?;
    let err = attn.decode(&Tensor::zeros(&[1, 1, 8], DType::F32)?, &mut cache).unwrap_err().to_string();
    assert!(err.contains("cache is full (1 positions)"), "{err}");
    // Modes reach every layer of a Sequential.
    let model = Sequential::new().add(BatchNorm2d::new(2)?).add(nn::Dropout::new(0.5)?);
    model.eval();
    let x = Tensor::ones(&[1, 2, 1, 1], DType::F32)?;
    let y = values(&model.forward(&x)?);
    common::assert_all_close("eval", &y, &[1.0 / (1.0f64 + 1e-5).sqrt(); 2], 1e-6, 1e-6);
    Ok(())
}
