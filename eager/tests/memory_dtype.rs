//! The memory ledger by dtype: live bytes per dtype in the snapshot and in `:memory`'s text,
//! and a Linear's activations under bf16 autocast booked as bf16, half the bytes of f32's.
//! (Its own test binary: it reads the process-wide ledger.)

use eager::nn::{Linear, Module};
use eager::prelude::*;

fn bytes_of(d: DType) -> u64 {
    eager::memory::snapshot().by_dtype().into_iter().find(|(t, _)| *t == d).map_or(0, |(_, b)| b)
}

#[test]
fn live_bytes_are_shown_by_dtype() -> Result<()> {
    // Warm-up: the scalar a fill uploads stays cached (2 bytes per dtype).
    drop((Tensor::zeros(&[1], DType::F16)?, Tensor::zeros(&[1], DType::BF16)?));
    let (f16_before, bf16_before) = (bytes_of(DType::F16), bytes_of(DType::BF16));
    let a = Tensor::zeros(&[1000], DType::F16)?;
    let b = Tensor::zeros(&[10, 100], DType::BF16)?;
    assert_eq!(bytes_of(DType::F16) - f16_before, 2000);
    assert_eq!(bytes_of(DType::BF16) - bf16_before, 2000);
    let text = eager::memory::snapshot().summary(3);
    assert!(text.contains("by dtype: ") && text.contains("f16 ") && text.contains("bf16 "), "{text}");
    drop((a, b));
    assert_eq!((bytes_of(DType::F16), bytes_of(DType::BF16)), (f16_before, bf16_before));

    // A Linear's output under bf16 autocast: 64 x 256 bf16, half the f32 output's bytes.
    let lin = Linear::new(256, 256)?;
    let x = Tensor::randn(&[64, 256], DType::F32)?;
    let (f32_before, bf16_before) = (bytes_of(DType::F32), bytes_of(DType::BF16));
    let y32 = lin.forward(&x)?;
    y32.block_until_ready()?;
    let f32_step = bytes_of(DType::F32) - f32_before;
    let y16 = eager::autocast(DType::BF16, || lin.forward(&x))?;
    y16.block_until_ready()?;
    let bf16_step = bytes_of(DType::BF16) - bf16_before;
    println!(
        "Linear 256->256 on 64 rows: f32 output {f32_step} B, under bf16 autocast {bf16_step} B of bf16"
    );
    // f32: the output alone (the product before the bias is freed: adding the bias reads
    // neither, as torch saves neither). bf16: the output at half the bytes, plus the casts of
    // x and the weight that the product's gradient reads (not the bias's cast); no new f32
    // tensor.
    let (rows, out) = (64 * 256, 256 * 256);
    assert_eq!(f32_step, rows as u64 * 4);
    assert_eq!(bf16_step, (rows + out + rows) as u64 * 2);
    assert_eq!(bytes_of(DType::F32) - f32_before, f32_step);
    Ok(())
}
