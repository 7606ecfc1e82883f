//! `cargo run --release --example quickstart`: a tensor computed on the CPU device, and what
//! the compile cache did.
use eager::prelude::*;

fn main() -> Result<()> {
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let b = Tensor::arange(0.0, 3.0, 1.0, DType::F32)?;
    // Broadcasting add, then a softmax over the last dim: each op runs now, on the device.
    let c = (&a + &b).softmax(-1)?;
    println!("{c}");
    // The same ops again on new values: cache hits, no compile.
    let d = (&(&a * 2.0) + &b).softmax(-1)?;
    println!("{d}");
    let m = a.matmul(&a.t()?)?;
    println!("{m}");
    println!("{}", cache::stats());
    Ok(())
}
