"""Writes the example notebooks' cells (run `tests/notebooks/test_notebooks.py --refresh` to
execute them and store their outputs)."""
import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).parent
KERNELSPEC = {"name": "eager", "display_name": "Rust (eager)", "language": "rust"}
LANGUAGE = {"name": "rust", "file_extension": ".rs", "mimetype": "text/rust", "codemirror_mode": "rust"}

NOTEBOOKS = {
    "01-quickstart.ipynb": [
        new_markdown_cell("# eager quickstart\n\nEvery tensor op runs **at once** on the device. "
                          "The first call of an op (for given shapes and dtypes) compiles a one-op XLA program; "
                          "every later call only executes it."),
        new_code_cell("let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;\n"
                      "let b = Tensor::arange(0.0, 3.0, 1.0, DType::F32)?;\n"
                      "(&a + &b).softmax(-1)?"),
        new_markdown_cell("Matrix products, reductions and random numbers, all on the device:"),
        new_code_cell("eager::manual_seed(0);\nlet w = Tensor::randn(&[3, 4], DType::F32)?;\na.matmul(&w)?.relu()?.sum(&[1], false)?"),
        new_markdown_cell("The same ops again hit the compile cache:"),
        new_code_cell("for _ in 0..100 { let _ = (&a + &b).softmax(-1)?; }\ncache::stats()"),
        new_code_cell(":profile"),
        new_code_cell("viz::Profile::session().timeline()"),
    ],
    "02-profiling.ipynb": [
        new_markdown_cell("# Profiling eager dispatch\n\n`viz::profile` captures a stretch of work; "
                          "its table, charts and trace show where the time went."),
        new_code_cell("let (r, p) = viz::profile(|| -> Result<()> {\n"
                      "    let x = Tensor::rand(&[64, 64], DType::F32)?;\n"
                      "    for _ in 0..20 {\n"
                      "        let _ = x.matmul(&x)?.tanh()?.mean(&[0], false)?;\n"
                      "    }\n"
                      "    Ok(())\n"
                      "});\nr?;\np"),
        new_code_cell("p.timeline()"),
        new_code_cell("p.compile_vs_execute()"),
        new_code_cell("p.cache_hits()"),
        new_markdown_cell("## The recompile pitfall\n\nAn op called with a new shape each time compiles each time. "
                          "The profile names the op and the shapes:"),
        new_code_cell("let (r, churn) = viz::profile(|| -> Result<()> {\n"
                      "    for n in 1..=10 {\n"
                      "        let _ = Tensor::ones(&[n, 8], DType::F32)?.exp()?;\n"
                      "    }\n"
                      "    Ok(())\n"
                      "});\nr?;\nfor h in churn.hints() { println!(\"{h}\"); }"),
        new_code_cell("let trace = std::env::temp_dir().join(\"profiling-trace.json\");\n"
                      "p.write_trace(&trace)?;\nformat!(\"open {} in ui.perfetto.dev\", trace.display())"),
    ],
    "03-what-eager-costs.ipynb": [
        new_markdown_cell("# What eager dispatch costs, op by op\n\n"
                          "A lesson in three measurements: getting an op's executable (compiling it, or loading it "
                          "from the persistent compile cache a previous session filled), running a cached op, "
                          "and moving data. Dispatch is asynchronous: an op returns once the device has accepted "
                          "it, so the timings below wait for the result (`block_until_ready`)."),
        new_code_cell("use eager::profiler::CacheOutcome;\n"
                      "use std::time::{Instant, SystemTime, UNIX_EPOCH};\n"
                      "// How the last sin got its executable, read from the profiler's log.\n"
                      "fn how(mark: u64) -> &'static str {\n"
                      "    match profiler::events_since(mark).iter().find(|e| e.name() == \"sin\").and_then(|e| e.cache) {\n"
                      "        Some(CacheOutcome::Miss) => \"compiled\",\n"
                      "        Some(CacheOutcome::DiskHit) => \"loaded from the disk cache\",\n"
                      "        _ => \"already in memory\",\n"
                      "    }\n"
                      "}\n"
                      "// A shape this machine has never compiled for (its width comes from the clock).\n"
                      "let cols = 100 + (SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() % 900) as usize;\n"
                      "let x = Tensor::rand(&[16, cols], DType::F32)?;\n"
                      "let mark = profiler::next_seq();\n"
                      "let t = Instant::now();\nx.sin()?.block_until_ready()?;\n"
                      "format!(\"first sin of f32[16, {cols}]: {:.1} ms ({} + run)\", t.elapsed().as_secs_f64() * 1e3, how(mark))"),
        new_markdown_cell("That compile was also written to the persistent compile cache "
                          "(`~/.cache/eager/compiled`). A new session finds it there: emptying the in-memory "
                          "cache shows what that costs instead of a compile."),
        new_code_cell("cache::clear();\n"
                      "let mark = profiler::next_seq();\n"
                      "let t = Instant::now();\nx.sin()?.block_until_ready()?;\n"
                      "format!(\"sin again, in-memory cache emptied: {:.1} ms ({} + run)\", t.elapsed().as_secs_f64() * 1e3, how(mark))"),
        new_code_cell("let t = std::time::Instant::now();\nlet mut y = x.clone();\n"
                      "for _ in 0..1000 { y = x.sin()?; }\ny.block_until_ready()?;\n"
                      "format!(\"cached sin: {:.1} µs per call\", t.elapsed().as_secs_f64() * 1e6 / 1000.0)"),
        new_code_cell("let t = std::time::Instant::now();\nlet v = x.to_vec::<f32>()?;\n"
                      "format!(\"copy {} floats to the host: {:.1} µs\", v.len(), t.elapsed().as_secs_f64() * 1e6)"),
        new_markdown_cell("The per-op table of the session shows the same: a few compiles (or disk loads) dominate, "
                          "thousands of executes cost little."),
        new_code_cell(":profile session"),
        new_code_cell("viz::Profile::session().compile_vs_execute().as_png().unwrap()"),
    ],
    "04-training.ipynb": [
        new_markdown_cell("# Training in eager mode, then compiled\n\n"
                          "A small MLP learns to separate two interleaved spirals, generated here (no downloads). "
                          "First every op of every step runs eagerly — forward, loss, backward (autograd) and the "
                          "optimizer — so each one can be seen in the profile. Then the same step is compiled into "
                          "one program (`eager::compile`, the role of `jax.jit` / `torch_xla.compile`) and runs as "
                          "one executable per step."),
        new_code_cell("use eager::nn::{self, Linear, Module, Relu, Sequential};\n"
                      "use eager::optim::{Adam, Optimizer};\n"
                      "// Two spirals, 256 points each: (x, y) coordinates and a class 0 / 1.\n"
                      "let n = 256;\n"
                      "let (mut points, mut labels) = (Vec::new(), Vec::new());\n"
                      "for class in 0..2 {\n"
                      "    for i in 0..n {\n"
                      "        let r = 0.1 + i as f32 / n as f32;\n"
                      "        let angle = 3.0 * r * std::f32::consts::PI + class as f32 * std::f32::consts::PI;\n"
                      "        points.extend([r * angle.cos(), r * angle.sin()]);\n"
                      "        labels.push(class as i64);\n"
                      "    }\n"
                      "}\n"
                      "let x = Tensor::from_slice(&points, &[2 * n, 2])?;\n"
                      "let y = Tensor::from_slice(&labels, &[2 * n])?;\n"
                      "(x.shape().to_vec(), y.shape().to_vec())"),
        new_markdown_cell("## Eager\n\nA model, an optimizer, and the step written as in PyTorch. "
                          "`viz::profile` records every op the loop dispatches."),
        new_code_cell("fn mlp() -> Result<Sequential> {\n"
                      "    Ok(Sequential::new().add(Linear::new(2, 64)?).add(Relu).add(Linear::new(64, 64)?).add(Relu).add(Linear::new(64, 2)?))\n"
                      "}\n"
                      "eager::manual_seed(0);\n"
                      "let model = mlp()?;\n"
                      "let opt = Adam::new(model.parameters(), 0.02)?;\n"
                      "let steps = 150;\n"
                      "let (eager_losses, eager_profile) = viz::profile(|| -> Result<Vec<f64>> {\n"
                      "    let mut losses = Vec::new();\n"
                      "    for _ in 0..steps {\n"
                      "        let loss = nn::cross_entropy(&model.forward(&x)?, &y)?;\n"
                      "        loss.backward()?;\n"
                      "        opt.step()?;\n"
                      "        opt.zero_grad();\n"
                      "        losses.push(loss.item::<f32>()? as f64);\n"
                      "    }\n"
                      "    Ok(losses)\n"
                      "});\n"
                      "let eager_losses = eager_losses?;\n"
                      "fn accuracy(m: &Sequential, x: &Tensor, y: &Tensor) -> Result<f64> {\n"
                      "    let hit = m.forward(x)?.argmax(Some(1), false)?.eq(y)?.to_dtype(DType::F32)?;\n"
                      "    Ok(hit.mean_all()?.item::<f32>()? as f64)\n"
                      "}\n"
                      "format!(\"eager: loss {:.3} -> {:.3}, accuracy {:.1}%, {} op dispatches in {:.2} s\",\n"
                      "        eager_losses[0], eager_losses[steps - 1], 100.0 * accuracy(&model, &x, &y)?, eager_profile.ops().count(),\n"
                      "        eager_profile.wall_ns() as f64 / 1e9)"),
        new_markdown_cell("Every op of the step is in the table: the forward matmuls, the backward's transposed "
                          "matmuls, the optimizer's elementwise updates. Each compiled once, then executed "
                          "from the cache at every step."),
        new_code_cell("eager_profile"),
        new_markdown_cell("## Compiled\n\nThe same step inside `eager::compile`: the first call traces it "
                          "(every op is recorded instead of run) into one StableHLO program and compiles that; "
                          "each later call runs one executable. The model's weights and the optimizer's state are "
                          "`Var`s: read as inputs of the program, written back from its outputs."),
        new_code_cell("eager::manual_seed(0);\n"
                      "let model2 = mlp()?;\n"
                      "let opt2 = Adam::new(model2.parameters(), 0.02)?;\n"
                      "let (compiled_losses, compiled_profile) = viz::profile(|| -> Result<Vec<f64>> {\n"
                      "    let step = eager::compile(\"train_step\", |a: &[Tensor]| {\n"
                      "        let loss = nn::cross_entropy(&model2.forward(&a[0])?, &a[1])?;\n"
                      "        loss.backward()?;\n"
                      "        opt2.step()?;\n"
                      "        opt2.zero_grad();\n"
                      "        Ok(vec![loss])\n"
                      "    });\n"
                      "    let mut losses = Vec::new();\n"
                      "    for _ in 0..steps {\n"
                      "        let out = step.call(&[&x, &y])?;\n"
                      "        losses.push(out[0].item::<f32>()? as f64);\n"
                      "    }\n"
                      "    Ok(losses)\n"
                      "});\n"
                      "let compiled_losses = compiled_losses?;\n"
                      "let max_diff = eager_losses.iter().zip(&compiled_losses).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);\n"
                      "format!(\"compiled: loss {:.3} -> {:.3}, accuracy {:.1}%, {} op dispatches in {:.2} s; largest loss difference to eager {:.1e}\",\n"
                      "        compiled_losses[0], compiled_losses[steps - 1], 100.0 * accuracy(&model2, &x, &y)?, compiled_profile.ops().count(),\n"
                      "        compiled_profile.wall_ns() as f64 / 1e9, max_diff)"),
        new_markdown_cell("## Side by side\n\nThe loss curves lie on each other (same numbers, up to float "
                          "rounding of fused ops); the profiles differ in how many dispatches it took. The "
                          "compiled run pays once for its one big program: compiling it the first time "
                          "(hundreds of ms), loading it from the disk cache after that; compare the warm steps."),
        new_code_cell("viz::line_chart(\"Training loss\", \"step\", \"cross-entropy\", &[(\"eager\", &eager_losses), (\"compiled\", &compiled_losses)]).log_y()"),
        new_markdown_cell("The two profiles on one time axis, then one warm step of each magnified, then the "
                          "totals. (A PNG: the eager run's thousands of slices would make a large SVG.)"),
        new_code_cell("let comparison = viz::compare(&[(\"eager\", &eager_profile), (\"compiled\", &compiled_profile)]).steps(steps);\n"
                      "println!(\"{}\", comparison.text());\n"
                      "comparison.as_png().unwrap()"),
        new_markdown_cell("The trained weights, saved as safetensors (the format of the Hugging Face hub) and "
                          "read back:"),
        new_code_cell("let path = std::env::temp_dir().join(\"spiral-mlp.safetensors\");\n"
                      "eager::io::save_safetensors(&path, &nn::state_dict(&model2))?;\n"
                      "let loaded = eager::io::load_safetensors(&path)?;\n"
                      "loaded.iter().map(|(n, t)| format!(\"{n}: {:?} {}\", t.shape(), t.dtype())).collect::<Vec<_>>().join(\"\\n\")"),
    ],
}


def main():
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC, "language_info": LANGUAGE})
        nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    main()
