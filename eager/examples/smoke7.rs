use eager::prelude::*;
fn main() -> Result<()> {
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3])?.set_requires_grad(true)?;
    let y = x.mul(&x)?.sum_all()?;
    y.backward()?;
    println!("grad x^2: {}", x.grad().unwrap());
    let w = Var::parameter("w", Tensor::from_slice(&[0.5f32, -0.5], &[2, 1])?)?;
    let data = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    let target = Tensor::from_slice(&[1.0f32, 0.0], &[2, 1])?;
    let step = compile("sgd_step", |a: &[Tensor]| {
        let p = w.get();
        let loss = a[0].matmul(&p)?.sub(&a[1])?.mul(&a[0].matmul(&p)?.sub(&a[1])?)?.mean_all()?;
        loss.backward()?;
        let g = p.grad().unwrap();
        w.set(p.sub(&g.mul_scalar(0.1)?)?)?;
        w.zero_grad();
        Ok(vec![loss])
    });
    for i in 0..3 {
        let out = step.call(&[&data, &target])?;
        println!("step {i}: loss {} w {}", out[0], w.get());
    }
    // eager reference of the same
    let w2 = Var::parameter("w2", Tensor::from_slice(&[0.5f32, -0.5], &[2, 1])?)?;
    for i in 0..3 {
        let p = w2.get();
        let d = data.matmul(&p)?.sub(&target)?;
        let loss = d.mul(&d)?.mean_all()?;
        loss.backward()?;
        let g = p.grad().unwrap();
        w2.set(no_grad(|| p.sub(&g.mul_scalar(0.1)?))?)?;
        w2.zero_grad();
        println!("eager {i}: loss {} w {}", loss, w2.get());
    }
    println!("{}", step.program_text(&[&data, &target])?);
    let sl = Tensor::from_slice(&[1.0f32,2.,3.,4.,5.,6.], &[6])?.set_requires_grad(true)?;
    let s = sl.slice(0, 1, 6, 2)?.sum_all()?; s.backward()?; println!("slice grad {}", sl.grad().unwrap());
    Ok(())
}
