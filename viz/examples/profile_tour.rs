//! `cargo run --release -p viz --example profile_tour [OUT_DIR]`: profiles a small workload
//! (a two-layer MLP stepped a few times, then a loop whose batch size changes every step,
//! then one more step after the in-memory compile cache is dropped) and writes the three
//! charts as PNG and SVG, a Perfetto trace, and prints the table.
//!
//! Executables compiled by an earlier run come from the persistent compile cache (disk
//! loads, not compiles); `EAGER_COMPILE_CACHE_DIR=$(mktemp -d)` starts from an empty one.

use std::path::PathBuf;

use eager::prelude::*;

/// One forward pass: relu(x @ w1 + b1) @ w2, then a softmax over classes.
fn forward(x: &Tensor, w1: &Tensor, b1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    x.matmul(w1)?.add(b1)?.relu()?.matmul(w2)?.softmax(-1)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let out: PathBuf = std::env::args().nth(1).unwrap_or_else(|| "target/profile_tour".into()).into();
    std::fs::create_dir_all(&out)?;
    // Start the CPU runtime outside the profile: plugin loading is not dispatch.
    eager::devices(DeviceKind::Cpu)?;

    let (result, profile) = viz::profile(|| -> Result<(f32, viz::Profile)> {
        manual_seed(0);
        let w1 = Tensor::randn(&[64, 128], DType::F32)?;
        let b1 = Tensor::zeros(&[128], DType::F32)?;
        let w2 = Tensor::randn(&[128, 10], DType::F32)?;
        // Steady shapes: the first step compiles every op, the next ones only execute.
        let mut loss = 0.0;
        let mut steady = None;
        for step in 0..6 {
            // Recorders nest: this one sees the warm steps alone.
            if step == 1 {
                steady = Some(viz::start());
            }
            let x = Tensor::randn(&[32, 64], DType::F32)?;
            loss = forward(&x, &w1, &b1, &w2)?.mean_all()?.item::<f32>()?;
        }
        let steady = steady.expect("set at step 1").stop();
        // Shape churn: a batch size that changes every step compiles every op again.
        for batch in 1..=10 {
            let x = Tensor::randn(&[batch, 64], DType::F32)?;
            loss = forward(&x, &w1, &b1, &w2)?.mean_all()?.item::<f32>()?;
        }
        // As in a new process: memory is empty, so the steady step's ops are loaded from the
        // persistent compile cache (or compiled again if EAGER_COMPILE_CACHE=off).
        eager::cache::clear();
        let x = Tensor::randn(&[32, 64], DType::F32)?;
        forward(&x, &w1, &b1, &w2)?.mean_all()?.item::<f32>()?;
        Ok((loss, steady))
    });
    let (loss, steady) = result?;
    println!("last mean: {loss}");
    println!("{}", profile.table_text());

    for (chart, name) in profile.charts().iter().zip(["timeline", "compile_vs_execute", "cache_hits"]) {
        chart.write_png(out.join(format!("{name}.png")))?;
        chart.write_svg(out.join(format!("{name}.svg")))?;
    }
    // The warm steps on their own: execute and transfer, no compile.
    steady.timeline().write_png(out.join("timeline_steady.png"))?;
    steady.timeline().write_svg(out.join("timeline_steady.svg"))?;
    profile.write_trace(out.join("trace.json"))?;
    println!(
        "wrote {0}/{{timeline,timeline_steady,compile_vs_execute,cache_hits}}.{{png,svg}} and {0}/trace.json",
        out.display()
    );
    println!("open the trace at https://ui.perfetto.dev or chrome://tracing");
    Ok(())
}
