"""Writes the example notebooks' cells (run `tests/notebooks/test_notebooks.py --refresh` to
execute them and store their outputs)."""
import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).parent
KERNELSPEC = {"name": "eager", "display_name": "Rust (eager)", "language": "rust"}
LANGUAGE = {"name": "rust", "file_extension": ".rs", "mimetype": "text/rust", "codemirror_mode": "rust"}


# The two spirals of notebooks 04 and 07, 256 points each: `x` f32[512, 2], `y` i64[512].
SPIRALS = ("let n = 256;\n"
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
           "let y = Tensor::from_slice(&labels, &[2 * n])?;\n")

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
        new_markdown_cell("## Eager, fused, compiled\n\n"
                          "The same training step (an MLP 784-256-10, SGD with momentum, batch 64) three ways. "
                          "**Eager**: every op is dispatched at once, each its own small executable (an op made "
                          "of others, such as `cross_entropy` or `Linear`'s product and bias, is one; so are the "
                          "backward pass and the optimizer's step: `eager::set_ops_as_one(false)` dispatches "
                          "their primitives one by one instead). **Fused** "
                          "(`eager::fused`, or `:mode fused` for whole cells): the same eager code, but the ops "
                          "of a region are recorded and run as one program at the first read or the region's "
                          "end; the program is cached by its structure, so every step after the first reuses it. "
                          "**Compiled** (`eager::compile`): the step traced once into one program, its weights "
                          "read and written as `Var`s."),
        new_code_cell("use eager::nn::{self, Linear, Module, Relu, Sequential};\n"
                      "use eager::optim::{Optimizer, Sgd};\n"
                      "struct Run { model: Sequential, opt: Sgd }\n"
                      "fn run() -> Result<Run> {\n"
                      "    eager::manual_seed(0);\n"
                      "    let model = Sequential::new().add(Linear::new(784, 256)?).add(Relu).add(Linear::new(256, 10)?);\n"
                      "    let opt = Sgd::with_momentum(model.parameters(), 0.05, 0.9)?;\n"
                      "    Ok(Run { model, opt })\n"
                      "}\n"
                      "fn step(r: &Run, x: &Tensor, y: &Tensor) -> Result<Tensor> {\n"
                      "    let loss = nn::cross_entropy(&r.model.forward(x)?, y)?;\n"
                      "    loss.backward()?;\n"
                      "    r.opt.step()?;\n"
                      "    r.opt.zero_grad();\n"
                      "    Ok(loss)\n"
                      "}\n"
                      "let xb = Tensor::rand(&[64, 784], DType::F32)?;\n"
                      "let yb = Tensor::from_slice(&(0..64).map(|i| (i % 10) as i64).collect::<Vec<_>>(), &[64])?;\n"
                      "let steps: usize = 60;\n"
                      "let eager_run = run()?;\n"
                      "// Each run: (the first step's loss, the last step's).\n"
                      "let (eager_loss, eager_p) = viz::profile(|| -> Result<(f32, f32)> {\n"
                      "    let first = step(&eager_run, &xb, &yb)?.item::<f32>()?;\n"
                      "    let mut loss = first;\n"
                      "    for _ in 1..steps { loss = step(&eager_run, &xb, &yb)?.item::<f32>()?; }\n"
                      "    Ok((first, loss))\n"
                      "});\n"
                      "let fused_run = run()?;\n"
                      "let (fused_loss, fused_p) = viz::profile(|| -> Result<(f32, f32)> {\n"
                      "    let first = eager::fused(|| step(&fused_run, &xb, &yb))?.item::<f32>()?;\n"
                      "    let mut loss = first;\n"
                      "    for _ in 1..steps { loss = eager::fused(|| step(&fused_run, &xb, &yb))?.item::<f32>()?; }\n"
                      "    Ok((first, loss))\n"
                      "});\n"
                      "let compiled_run = run()?;\n"
                      "let (compiled_loss, compiled_p) = viz::profile(|| -> Result<(f32, f32)> {\n"
                      "    let program = eager::compile(\"train_step\", |a: &[Tensor]| Ok(vec![step(&compiled_run, &a[0], &a[1])?]));\n"
                      "    let first = program.call(&[&xb, &yb])?[0].item::<f32>()?;\n"
                      "    let mut loss = first;\n"
                      "    for _ in 1..steps { loss = program.call(&[&xb, &yb])?[0].item::<f32>()?; }\n"
                      "    Ok((first, loss))\n"
                      "});\n"
                      "let ((eager_first, eager_last), (fused_first, fused_last)) = (eager_loss?, fused_loss?);\n"
                      "let (compiled_first, compiled_last) = compiled_loss?;\n"
                      "format!(\"first step's loss: eager {eager_first:.7}, fused {fused_first:.7}, compiled {compiled_first:.7}; \\\n"
                      "         loss after {steps} steps: eager {eager_last:.5}, fused {fused_last:.5}, compiled {compiled_last:.5}\")"),
        new_markdown_cell("One chart: the three runs on one time axis, one warm step of each magnified, and the "
                          "totals. Eager pays a dispatch per op (and, the first time, a compile per distinct op); "
                          "fused and compiled pay one dispatch per step, and one compile of the whole step."),
        new_code_cell("let comparison = viz::compare(&[(\"eager\", &eager_p), (\"fused\", &fused_p), (\"compiled\", &compiled_p)]).steps(steps);\n"
                      "println!(\"{}\", comparison.text());\n"
                      "comparison.as_png().unwrap()"),
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
                      + SPIRALS +
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
        new_markdown_cell("Every op of the step is in the table, named as the user called it: each `linear` "
                          "(matmul and bias as one executable), `relu`, `cross_entropy`, the whole `backward` "
                          "pass and Adam's update of every parameter (`adam.step`) as one executable each. "
                          "Each compiled once, then executed from the cache at every step."),
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
        new_markdown_cell("## Watching it train\n\n"
                          "A progress bar and a loss chart that redraw in place while the loop runs (Jupyter's "
                          "display handles: one `display_data`, then `update_display_data` with the same "
                          "`display_id`; in the terminal REPL each is one line redrawn). The bar redraws at most "
                          "ten times a second, the chart every 25 steps."),
        new_code_cell("eager::manual_seed(1);\n"
                      "let model3 = mlp()?;\n"
                      "let opt3 = Adam::new(model3.parameters(), 0.02)?;\n"
                      "eager::memory::reset_peak();\n"
                      "let live_steps: usize = 300;\n"
                      "let mut bar = eager_cell::Progress::new(\"training\", live_steps);\n"
                      "let mut chart = eager_cell::LiveChart::new(\"Training loss, live\", \"step\", \"cross-entropy\").every(25).log_y();\n"
                      "for _ in 0..live_steps {\n"
                      "    let loss = nn::cross_entropy(&model3.forward(&x)?, &y)?;\n"
                      "    loss.backward()?;\n"
                      "    opt3.step()?;\n"
                      "    opt3.zero_grad();\n"
                      "    let l = loss.item::<f32>()? as f64;\n"
                      "    chart.push(l);\n"
                      "    bar.set_note(&format!(\"loss {l:.4}\"));\n"
                      "    bar.inc();\n"
                      "}\n"
                      "bar.finish();\n"
                      "chart.finish();\n"
                      "format!(\"live run: accuracy {:.1}%\", 100.0 * accuracy(&model3, &x, &y)?)"),
        new_markdown_cell("Where the device memory of those steps went: eager books every tensor's buffer with "
                          "the op that made it. Live bytes over time, the peak marked, and the largest tensors "
                          "live at the peak (`:memory` prints the same in words; an out-of-memory error names "
                          "them too)."),
        new_code_cell("viz::memory_chart().title(\"Device memory while training\")"),
        new_markdown_cell("The trained weights, saved as safetensors (the format of the Hugging Face hub) and "
                          "read back:"),
        new_code_cell("let path = std::env::temp_dir().join(\"spiral-mlp.safetensors\");\n"
                      "eager::io::save_safetensors(&path, &nn::state_dict(&model2))?;\n"
                      "let loaded = eager::io::load_safetensors(&path)?;\n"
                      "loaded.iter().map(|(n, t)| format!(\"{n}: {:?} {}\", t.shape(), t.dtype())).collect::<Vec<_>>().join(\"\\n\")"),
    ],
    "05-cnn-digits.ipynb": [
        new_markdown_cell("# A CNN on handwritten digits\n\n"
                          "scikit-learn ships 1,797 handwritten digits as 8×8 grey images inside its wheel. A small "
                          "convolutional network (conv → relu → max-pool, twice, then a linear layer) learns them: "
                          "first every op of every step eagerly, then the same step compiled into one program."),
        new_code_cell("use eager::nn::{self, Conv2d, Flatten, Linear, MaxPool2d, Module, Relu, Sequential};\n"
                      "use eager::optim::{Optimizer, Sgd};\n"
                      "// The digits, saved as .npy by the Python that runs the tests (its scikit-learn reads the wheel's file).\n"
                      "let dir = std::env::temp_dir();\n"
                      "let script = \"import sys, numpy as np\\nfrom sklearn.datasets import load_digits\\nd = load_digits()\\n\"\n"
                      "    .to_string() + \"np.save(sys.argv[1] + '/digits-x.npy', (d.images / 16).astype('float32'))\\n\"\n"
                      "    + \"np.save(sys.argv[1] + '/digits-y.npy', d.target.astype('int64'))\";\n"
                      "let saved = std::process::Command::new(\"python3\").arg(\"-c\").arg(&script).arg(&dir).status()?;\n"
                      "assert!(saved.success(), \"loading the digits needs python3 with scikit-learn\");\n"
                      "let images = eager::io::load_npy(dir.join(\"digits-x.npy\"))?.unsqueeze(1)?; // [N, 1, 8, 8], 0..1\n"
                      "let labels = eager::io::load_npy(dir.join(\"digits-y.npy\"))?;\n"
                      "// A seeded shuffle (argsort of uniform noise), then 22 batches of 64 to train on and the rest to test.\n"
                      "eager::manual_seed(0);\n"
                      "let order = Tensor::rand(&[labels.shape()[0]], DType::F32)?.argsort(0, false)?;\n"
                      "let (images, labels) = (images.index_select(0, &order)?, labels.index_select(0, &order)?);\n"
                      "let (batch, batches) = (64, 22);\n"
                      "let train: Vec<(Tensor, Tensor)> = (0..batches)\n"
                      "    .map(|b| Ok((images.narrow(0, b * batch, batch)?, labels.narrow(0, b * batch, batch)?)))\n"
                      "    .collect::<Result<_>>()?;\n"
                      "let rest = labels.shape()[0] - batch * batches;\n"
                      "let (test_x, test_y) = (images.narrow(0, batch * batches, rest)?, labels.narrow(0, batch * batches, rest)?);\n"
                      "// The first test image, in characters.\n"
                      "let first = test_x.narrow(0, 0, 1)?.to_vec::<f32>()?;\n"
                      "for row in first.chunks(8) {\n"
                      "    println!(\"{}\", row.iter().map(|&v| [' ', '.', ':', '+', '#'][(v * 4.0).round() as usize]).collect::<String>());\n"
                      "}\n"
                      "format!(\"{} training images in {batches} batches of {batch}, {rest} test images; the one above is a {}\",\n"
                      "        batch * batches, test_y.to_vec::<i64>()?[0])"),
        new_markdown_cell("## Eager\n\nThe model, written as with `torch.nn`, and plain SGD with momentum. Every op "
                          "runs as it is called; `viz::profile` records them all."),
        new_code_cell("fn cnn() -> Result<Sequential> {\n"
                      "    let conv = |i, o| Conv2d::with_options(i, o, [3, 3], [1, 1], 1.into(), [1, 1], 1, true, DType::F32);\n"
                      "    Ok(Sequential::new()\n"
                      "        .add(conv(1, 16)?).add(Relu).add(MaxPool2d::new([2, 2]))   // [N, 16, 4, 4]\n"
                      "        .add(conv(16, 32)?).add(Relu).add(MaxPool2d::new([2, 2]))  // [N, 32, 2, 2]\n"
                      "        .add(Flatten).add(Linear::new(128, 10)?))\n"
                      "}\n"
                      "fn accuracy(model: &Sequential, x: &Tensor, y: &Tensor) -> Result<f64> {\n"
                      "    let hit = model.forward(x)?.argmax(Some(1), false)?.eq(y)?.to_dtype(DType::F32)?;\n"
                      "    Ok(100.0 * hit.mean_all()?.item::<f32>()? as f64)\n"
                      "}\n"
                      "let epochs = 12;\n"
                      "eager::manual_seed(1);\n"
                      "let model = cnn()?;\n"
                      "let opt = Sgd::with_momentum(model.parameters(), 0.05, 0.9)?;\n"
                      "fn train_step(model: &Sequential, opt: &Sgd, x: &Tensor, y: &Tensor) -> Result<Tensor> {\n"
                      "    let loss = nn::cross_entropy(&model.forward(x)?, y)?;\n"
                      "    loss.backward()?;\n"
                      "    opt.step()?;\n"
                      "    opt.zero_grad();\n"
                      "    Ok(loss)\n"
                      "}\n"
                      "let (eager_losses, eager_profile) = viz::profile(|| -> Result<Vec<f64>> {\n"
                      "    let mut losses = Vec::new();\n"
                      "    for _ in 0..epochs {\n"
                      "        for (x, y) in &train {\n"
                      "            losses.push(train_step(&model, &opt, x, y)?.item::<f32>()? as f64);\n"
                      "        }\n"
                      "    }\n"
                      "    Ok(losses)\n"
                      "});\n"
                      "let eager_losses = eager_losses?;\n"
                      "format!(\"eager: {} steps, loss {:.3} -> {:.3}, test accuracy {:.1}%, {} op dispatches in {:.2} s\",\n"
                      "        eager_losses.len(), eager_losses[0], eager_losses[eager_losses.len() - 1],\n"
                      "        accuracy(&model, &test_x, &test_y)?, eager_profile.ops().count(), eager_profile.wall_ns() as f64 / 1e9)"),
        new_markdown_cell("One eager step, op by op: the two convolutions and their gradients (for the input and "
                          "for the weights), the pools and the routing of their gradient to each window's maximum, "
                          "the optimizer's updates. Every executable came from the cache."),
        new_code_cell("let (_, one_step) = viz::profile(|| train_step(&model, &opt, &train[0].0, &train[0].1));\none_step"),
        new_markdown_cell("## Compiled\n\nThe same step inside `eager::compile`: traced once into one StableHLO "
                          "program, then one executable per step. A fresh model from the same seed."),
        new_code_cell("eager::manual_seed(1);\n"
                      "let model2 = cnn()?;\n"
                      "let opt2 = Sgd::with_momentum(model2.parameters(), 0.05, 0.9)?;\n"
                      "let (compiled_losses, compiled_profile) = viz::profile(|| -> Result<Vec<f64>> {\n"
                      "    let compiled_step = eager::compile(\"cnn_step\", |a: &[Tensor]| Ok(vec![train_step(&model2, &opt2, &a[0], &a[1])?]));\n"
                      "    let mut losses = Vec::new();\n"
                      "    for _ in 0..epochs {\n"
                      "        for (x, y) in &train {\n"
                      "            losses.push(compiled_step.call(&[x, y])?[0].item::<f32>()? as f64);\n"
                      "        }\n"
                      "    }\n"
                      "    Ok(losses)\n"
                      "});\n"
                      "let compiled_losses = compiled_losses?;\n"
                      "// Fused and unfused float rounding differ a little; training then amplifies it, step by step.\n"
                      "fn largest_difference(a: &[f64], b: &[f64]) -> f64 { a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) }\n"
                      "format!(\"compiled: {} steps, loss {:.3} -> {:.3}, test accuracy {:.1}%, {} op dispatches in {:.2} s; \\\n"
                      "         largest loss difference to eager {:.1e} in the first epoch, {:.1e} over all steps\",\n"
                      "        compiled_losses.len(), compiled_losses[0], compiled_losses[compiled_losses.len() - 1],\n"
                      "        accuracy(&model2, &test_x, &test_y)?, compiled_profile.ops().count(), compiled_profile.wall_ns() as f64 / 1e9,\n"
                      "        largest_difference(&eager_losses[..batches], &compiled_losses), largest_difference(&eager_losses, &compiled_losses))"),
        new_markdown_cell("## Side by side\n\nThe loss curves, then both runs on one time axis with one warm "
                          "step of each magnified, and their totals."),
        new_code_cell("viz::line_chart(\"Digits CNN: training loss\", \"step\", \"cross-entropy\", &[(\"eager\", &eager_losses), (\"compiled\", &compiled_losses)]).log_y()"),
        new_code_cell("let comparison = viz::compare(&[(\"eager\", &eager_profile), (\"compiled\", &compiled_profile)]).steps(eager_losses.len());\n"
                      "println!(\"{}\", comparison.text());\n"
                      "comparison.as_png().unwrap()"),
    ],
    "06-char-gpt.ipynb": [
        new_markdown_cell("# A character-level GPT\n\n"
                          "A small GPT (two pre-norm transformer blocks, causal self-attention) learns to continue "
                          "the text of this repository's guide (the chapters in `docs/src`), one character at a time. It trains eagerly first, "
                          "then the same step compiled; then it writes text, one character per step, with a "
                          "key/value cache so that each step attends over what came before without recomputing it."),
        new_code_cell("use eager::nn::{self, Embedding, KvCache, LayerNorm, Linear, Module, TransformerBlock};\n"
                      "use eager::optim::{Adam, Optimizer};\n"
                      "// The guide's chapters, in file-name order, as one text.\n"
                      "let mut chapters: Vec<std::path::PathBuf> = std::fs::read_dir(\"../docs/src\")?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>()?;\n"
                      "chapters.retain(|p| p.extension().is_some_and(|x| x == \"md\") && !p.ends_with(\"SUMMARY.md\"));\n"
                      "chapters.sort();\n"
                      "let mut guide = String::new();\n"
                      "for p in &chapters { guide.push_str(&std::fs::read_to_string(p)?); }\n"
                      "let text: Vec<char> = guide.chars().collect();\n"
                      "let mut vocab: Vec<char> = text.clone();\n"
                      "vocab.sort();\n"
                      "vocab.dedup();\n"
                      "let ids: Vec<i64> = text.iter().map(|c| vocab.binary_search(c).unwrap() as i64).collect();\n"
                      "// Cross-entropy of guessing each character from its frequency alone: what the model must beat.\n"
                      "let mut counts = vec![0usize; vocab.len()];\n"
                      "ids.iter().for_each(|&i| counts[i as usize] += 1);\n"
                      "let unigram: f64 = counts.iter().map(|&c| c as f64 / ids.len() as f64).map(|p| -p * p.ln()).sum();\n"
                      "// The last tenth is held out.\n"
                      "let split = ids.len() * 9 / 10;\n"
                      "format!(\"{} characters, {} distinct; unigram entropy {:.3} nats\", ids.len(), vocab.len(), unigram)"),
        new_markdown_cell("## The model\n\nToken and position embeddings, `TransformerBlock`s (layer norm → causal "
                          "multi-head attention → residual, layer norm → GELU MLP → residual), a final layer norm "
                          "and a linear head to the vocabulary. `decode` runs one new position through the same "
                          "weights, each block's attention reading and extending its `KvCache`."),
        new_code_cell("struct Gpt { tokens: Embedding, positions: Embedding, blocks: Vec<TransformerBlock>, norm: LayerNorm, head: Linear }\n"
                      "impl Gpt {\n"
                      "    fn new(vocab: usize, context: usize, width: usize, heads: usize, layers: usize) -> Result<Gpt> {\n"
                      "        Ok(Gpt {\n"
                      "            tokens: Embedding::new(vocab, width)?,\n"
                      "            positions: Embedding::new(context, width)?,\n"
                      "            blocks: (0..layers).map(|_| TransformerBlock::new(width, heads)).collect::<Result<_>>()?,\n"
                      "            norm: LayerNorm::new(width)?,\n"
                      "            head: Linear::new(width, vocab)?,\n"
                      "        })\n"
                      "    }\n"
                      "    fn parameters(&self) -> Vec<Var> {\n"
                      "        let mut p = self.tokens.parameters();\n"
                      "        p.extend(self.positions.parameters());\n"
                      "        self.blocks.iter().for_each(|b| p.extend(b.parameters()));\n"
                      "        p.extend(self.norm.parameters());\n"
                      "        p.extend(self.head.parameters());\n"
                      "        p\n"
                      "    }\n"
                      "    /// Logits [B, T, vocab] for tokens [B, T].\n"
                      "    fn forward(&self, x: &Tensor) -> Result<Tensor> {\n"
                      "        let t = x.shape()[1];\n"
                      "        let place = Tensor::arange(0.0, t as f64, 1.0, DType::I64)?;\n"
                      "        let mut h = self.tokens.forward(x)?.add(&self.positions.forward(&place)?)?;\n"
                      "        for b in &self.blocks { h = b.forward(&h)?; }\n"
                      "        self.head.forward(&self.norm.forward(&h)?)\n"
                      "    }\n"
                      "    /// Logits [B, 1, vocab] for one more token [B, 1] at position `caches[0].len()`.\n"
                      "    fn decode(&self, x: &Tensor, caches: &mut [KvCache]) -> Result<Tensor> {\n"
                      "        let place = Tensor::from_slice(&[caches[0].len() as i64], &[1])?;\n"
                      "        let mut h = self.tokens.forward(x)?.add(&self.positions.forward(&place)?)?;\n"
                      "        for (b, cache) in self.blocks.iter().zip(caches.iter_mut()) { h = b.decode(&h, cache)?; }\n"
                      "        self.head.forward(&self.norm.forward(&h)?)\n"
                      "    }\n"
                      "}\n"
                      "let (context, batch) = (64, 16);\n"
                      "// Windows of the text from a seeded generator: inputs and the same shifted by one, as targets.\n"
                      "struct Rng(u64); // xorshift, seeded\n"
                      "impl Rng { fn next(&mut self) -> u64 { self.0 ^= self.0 << 13; self.0 ^= self.0 >> 7; self.0 ^= self.0 << 17; self.0 } }\n"
                      "let mut rng = Rng(0x2545_f491_4f6c_dd1d);\n"
                      "fn windows(from: &[i64], starts: &[usize], context: usize) -> Result<(Tensor, Tensor)> {\n"
                      "    let x: Vec<i64> = starts.iter().flat_map(|&s| from[s..s + context].to_vec()).collect();\n"
                      "    let y: Vec<i64> = starts.iter().flat_map(|&s| from[s + 1..s + 1 + context].to_vec()).collect();\n"
                      "    Ok((Tensor::from_slice(&x, &[starts.len(), context])?, Tensor::from_slice(&y, &[starts.len(), context])?))\n"
                      "}\n"
                      "let mut train_batches: Vec<(Tensor, Tensor)> = Vec::new();\n"
                      "for _ in 0..700 {\n"
                      "    let starts: Vec<usize> = (0..batch).map(|_| rng.next() as usize % (split - context - 1)).collect();\n"
                      "    train_batches.push(windows(&ids[..split], &starts, context)?);\n"
                      "}\n"
                      "let held: Vec<i64> = ids[split..].to_vec();\n"
                      "let held_starts: Vec<usize> = (0..(held.len() - 1) / context).map(|i| i * context).take(32).collect();\n"
                      "let (held_x, held_y) = windows(&held, &held_starts, context)?;\n"
                      "fn loss_of(gpt: &Gpt, x: &Tensor, y: &Tensor) -> Result<Tensor> {\n"
                      "    let logits = gpt.forward(x)?;\n"
                      "    let v = logits.shape()[2] as isize;\n"
                      "    nn::cross_entropy(&logits.reshape(&[-1, v])?, &y.reshape(&[-1])?)\n"
                      "}\n"
                      "eager::manual_seed(7);\n"
                      "let gpt = Gpt::new(vocab.len(), context, 64, 4, 2)?;\n"
                      "let params = gpt.parameters();\n"
                      "format!(\"{} parameters in {} tensors; {} training batches of {batch}×{context}\",\n"
                      "        params.iter().map(|p| p.get().numel()).sum::<usize>(), params.len(), train_batches.len())"),
        new_markdown_cell("## Eager\n\nAdamW, the step written as in PyTorch; the first 100 batches, every op "
                          "dispatched as it is called."),
        new_code_cell("let opt = Adam::adamw(gpt.parameters(), 5e-3, 0.01)?;\n"
                      "fn gpt_step(gpt: &Gpt, opt: &Adam, x: &Tensor, y: &Tensor) -> Result<Tensor> {\n"
                      "    let loss = loss_of(gpt, x, y)?;\n"
                      "    loss.backward()?;\n"
                      "    opt.step()?;\n"
                      "    opt.zero_grad();\n"
                      "    Ok(loss)\n"
                      "}\n"
                      "let eager_steps = 100;\n"
                      "let (eager_losses, eager_profile) = viz::profile(|| -> Result<Vec<f64>> {\n"
                      "    train_batches[..eager_steps].iter().map(|(x, y)| Ok(gpt_step(&gpt, &opt, x, y)?.item::<f32>()? as f64)).collect()\n"
                      "});\n"
                      "let eager_losses = eager_losses?;\n"
                      "format!(\"eager: {eager_steps} steps, loss {:.3} -> {:.3}, {} op dispatches in {:.2} s\",\n"
                      "        eager_losses[0], eager_losses[eager_steps - 1], eager_profile.ops().count(), eager_profile.wall_ns() as f64 / 1e9)"),
        new_markdown_cell("## Compiled\n\nThe same step compiled into one program continues the training, from "
                          "the eager run's weights and optimizer state (all `Var`s): the next 100 batches profiled, "
                          "to set beside the eager ones, then the rest."),
        new_code_cell("let mut compiled_losses: Vec<f64> = Vec::new();\n"
                      "let compiled_profile = {\n"
                      "    let compiled_step = eager::compile(\"gpt_step\", |a: &[Tensor]| Ok(vec![gpt_step(&gpt, &opt, &a[0], &a[1])?]));\n"
                      "    let mut run = |batches: &[(Tensor, Tensor)]| -> Result<()> {\n"
                      "        for (x, y) in batches { compiled_losses.push(compiled_step.call(&[x, y])?[0].item::<f32>()? as f64); }\n"
                      "        Ok(())\n"
                      "    };\n"
                      "    let (r, profile) = viz::profile(|| run(&train_batches[eager_steps..2 * eager_steps]));\n"
                      "    r?;\n"
                      "    run(&train_batches[2 * eager_steps..])?;\n"
                      "    profile\n"
                      "};\n"
                      "let n = compiled_losses.len();\n"
                      "let held_loss = loss_of(&gpt, &held_x, &held_y)?.item::<f32>()? as f64;\n"
                      "println!(\"compiled: {n} steps, loss {:.3} -> {:.3}; the first {eager_steps}: {} op dispatches in {:.2} s\",\n"
                      "         compiled_losses[0], compiled_losses[n - 1], compiled_profile.ops().count(), compiled_profile.wall_ns() as f64 / 1e9);\n"
                      "format!(\"final loss: train {:.3} (last 20 steps), held-out {:.3}; unigram entropy {:.3} nats\", compiled_losses[n - 20..].iter().sum::<f64>() / 20.0, held_loss, unigram)"),
        new_code_cell("let all: Vec<f64> = eager_losses.iter().chain(&compiled_losses).copied().collect();\n"
                      "viz::LineChart::new(\"Character GPT: training loss\", \"step\", \"cross-entropy (nats)\")\n"
                      "    .series(\"eager, then compiled\", &all)\n"
                      "    .series(\"unigram entropy\", &vec![unigram; all.len()])"),
        new_markdown_cell("The eager steps and the first compiled ones, side by side (the compiled run's first "
                          "step traces and compiles the program, or loads it from the disk cache):"),
        new_code_cell("let comparison = viz::compare(&[(\"eager\", &eager_profile), (\"compiled\", &compiled_profile)]).steps(eager_steps);\n"
                      "println!(\"{}\", comparison.text());\n"
                      "comparison.as_png().unwrap()"),
        new_markdown_cell("## Writing text\n\nA prompt, then one character at a time: each step feeds the last "
                          "character through `decode`, which attends over the cached keys and values of everything "
                          "before it, and samples the next from the softmax (temperature 0.8). Every step has the "
                          "same shapes, so after the first it runs only cached executables. The cache's answer "
                          "matches the full forward's at every position."),
        new_code_cell("let prompt: Vec<i64> = \"eager \".chars().map(|c| vocab.binary_search(&c).unwrap() as i64).collect();\n"
                      "let mut caches: Vec<KvCache> = gpt.blocks.iter().map(|b| b.attn.new_cache(1, context)).collect::<Result<_>>()?;\n"
                      "let mut out = prompt.clone();\n"
                      "let mut logits = Vec::new();\n"
                      "for &p in &prompt { logits.push(gpt.decode(&Tensor::from_slice(&[p], &[1, 1])?, &mut caches)?); }\n"
                      "while out.len() < context {\n"
                      "    let probs = logits.last().unwrap().mul_scalar(1.0 / 0.8)?.softmax(-1)?.to_vec::<f32>()?;\n"
                      "    let u = (rng.next() >> 11) as f32 / (1u64 << 53) as f32;\n"
                      "    let mut acc = 0.0;\n"
                      "    let pick = probs.iter().position(|&q| { acc += q; acc > u }).unwrap_or(probs.len() - 1) as i64;\n"
                      "    out.push(pick);\n"
                      "    if out.len() < context { logits.push(gpt.decode(&Tensor::from_slice(&[pick], &[1, 1])?, &mut caches)?); }\n"
                      "}\n"
                      "// The same sequence through the full (uncached) forward.\n"
                      "let full = gpt.forward(&Tensor::from_slice(&out[..logits.len()], &[1, logits.len()])?)?;\n"
                      "let cached = Tensor::cat(&logits.iter().collect::<Vec<_>>(), 1)?;\n"
                      "let diff = full.sub(&cached)?.abs()?.flatten()?.max(&[0], false)?.item::<f32>()?;\n"
                      "println!(\"{:?}\", out.iter().map(|&i| vocab[i as usize]).collect::<String>());\n"
                      "format!(\"{} characters written; largest difference between cached and full logits {:.1e}\", out.len() - prompt.len(), diff)"),
        new_markdown_cell("One decoding step, op by op: the embeddings, each block's projections (`linear`), the "
                          "cache update (a `where` at the new slot), attention over the whole cache with the "
                          "unfilled slots masked (`scaled_dot_product_attention`: scores, softmax and weighted sum "
                          "as one executable), the MLP and the head."),
        new_code_cell("let mut one = gpt.blocks.iter().map(|b| b.attn.new_cache(1, context)).collect::<Result<Vec<_>>>()?;\n"
                      "let token = Tensor::from_slice(&[prompt[0]], &[1, 1])?;\n"
                      "let (_, decode_profile) = viz::profile(|| -> Result<()> { gpt.decode(&token, &mut one)?.block_until_ready()?; Ok(()) });\n"
                      "decode_profile"),
    ],
    "07-multi-device.ipynb": [
        new_markdown_cell("# Several devices: a mesh, sharded tensors, data-parallel training\n\n"
                          "The CPU plugin shows 4 devices (a TPU host shows its 4–8 chips the same way). A `Mesh` "
                          "arranges them in named axes; a `PartitionSpec` says which dims of a tensor are split over "
                          "which axes. Every op on split tensors runs as **one** SPMD program over the mesh: XLA's "
                          "partitioner splits the work and adds the communication."),
        new_code_cell("use eager::{Mesh, PartitionSpec as P};\n"
                      "let mesh = Mesh::new(&[(\"data\", 2), (\"model\", 2)])?;\n"
                      "println!(\"{}\", mesh.grid());\n"
                      "eager::devices(DeviceKind::Cpu)?.len()"),
        new_markdown_cell("## A sharded matmul\n\nRows of `x` over `data`, columns of `w` over `model`: each device "
                          "holds a quarter of the result. Reads gather the blocks; the numbers are the single-device "
                          "ones."),
        new_code_cell("eager::manual_seed(0);\n"
                      "let x = Tensor::randn(&[8, 512], DType::F32)?;\n"
                      "let w = Tensor::randn(&[512, 256], DType::F32)?;\n"
                      "let xs = x.shard(&mesh, &P::new(&[Some(\"data\")]))?;\n"
                      "let ws = w.shard(&mesh, &P::new(&[None, Some(\"model\")]))?;\n"
                      "let (y, matmul_profile) = viz::profile(|| xs.matmul(&ws)?.relu());\n"
                      "let y = y?;\n"
                      "let single = x.matmul(&w)?.relu()?;\n"
                      "let diff = y.sub(&single.shard(&mesh, y.sharding().unwrap().spec())?)?.abs()?.flatten()?.max(&[0], false)?.item::<f32>()?;\n"
                      "println!(\"x: {}\\nw: {}\\ny: {}\", xs.sharding().unwrap(), ws.sharding().unwrap(), y.sharding().unwrap());\n"
                      "format!(\"each device holds {:?} of y's {:?}; largest difference to one device {diff:.1e}\",\n"
                      "        y.sharding().unwrap().shard_shape(y.shape()), y.shape())"),
        new_markdown_cell("Each op ran once, as one program over the four devices: the timeline draws it on each."),
        new_code_cell("matmul_profile.timeline()"),
        new_markdown_cell("## Collectives\n\nIn the global view a dim split over an axis is the concatenation of the "
                          "devices' blocks. `all_reduce` adds the blocks along `data`: written with ordinary ops, "
                          "it becomes an `all-reduce` in the program the partitioner makes, as the profile says."),
        new_code_cell("let (summed, p) = viz::profile(|| y.all_reduce(\"data\", eager::Reduction::Sum));\n"
                      "let summed = summed?;\n"
                      "let collectives: Vec<String> = p.ops().filter_map(|e| e.info.mesh.clone()).flat_map(|m| m.collectives).collect();\n"
                      "format!(\"{:?} -> {:?} ({}); collectives: {collectives:?}\", y.shape(), summed.shape(), summed.sharding().unwrap())"),
        new_markdown_cell("## Data-parallel training\n\nThe spirals of notebook 04, the batch split over a 1-D mesh "
                          "of four devices and the weights whole on each. The step is the single-device step, "
                          "unchanged: the weight gradients are sums over the batch, so the partitioner reduces them "
                          "across the devices. The same model from the same seed on one device gives the same "
                          "losses."),
        new_code_cell("use eager::nn::{self, Linear, Module, Relu, Sequential};\n"
                      "use eager::optim::{Adam, Optimizer};\n"
                      + SPIRALS +
                      "fn mlp() -> Result<Sequential> {\n"
                      "    Ok(Sequential::new().add(Linear::new(2, 64)?).add(Relu).add(Linear::new(64, 64)?).add(Relu).add(Linear::new(64, 2)?))\n"
                      "}\n"
                      "/// `steps` Adam steps; returns the losses.\n"
                      "fn train(model: &Sequential, x: &Tensor, y: &Tensor, steps: usize) -> Result<Vec<f64>> {\n"
                      "    let opt = Adam::new(model.parameters(), 0.02)?;\n"
                      "    let mut losses = Vec::new();\n"
                      "    for _ in 0..steps {\n"
                      "        let loss = nn::cross_entropy(&model.forward(x)?, y)?;\n"
                      "        loss.backward()?;\n"
                      "        opt.step()?;\n"
                      "        opt.zero_grad();\n"
                      "        losses.push(loss.item::<f32>()? as f64);\n"
                      "    }\n"
                      "    Ok(losses)\n"
                      "}\n"
                      "let steps = 150;\n"
                      "eager::manual_seed(0);\n"
                      "let one = mlp()?;\n"
                      "let single_losses = train(&one, &x, &y, steps)?;\n"
                      "// The same model on a mesh of 4: weights whole on every device, the batch split.\n"
                      "let dp = Mesh::new(&[(\"data\", 4)])?;\n"
                      "eager::manual_seed(0);\n"
                      "let model = mlp()?;\n"
                      "for p in model.parameters() { p.set(p.get().replicate(&dp)?)?; }\n"
                      "let batch = P::new(&[Some(\"data\")]);\n"
                      "let (xs, ys) = (x.shard(&dp, &batch)?, y.shard(&dp, &batch)?);\n"
                      "let (dp_losses, dp_profile) = viz::profile(|| train(&model, &xs, &ys, steps));\n"
                      "let dp_losses = dp_losses?;\n"
                      "let hit = model.forward(&xs)?.argmax(Some(1), false)?.eq(&ys)?.to_dtype(DType::F32)?.mean_all()?.item::<f32>()?;\n"
                      "let diff = single_losses.iter().zip(&dp_losses).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);\n"
                      "format!(\"data-parallel on 4 devices: loss {:.3} -> {:.3}, accuracy {:.1}%; largest loss difference to one device {diff:.1e}\",\n"
                      "        dp_losses[0], dp_losses[steps - 1], 100.0 * hit)"),
        new_code_cell("viz::line_chart(\"Spirals: training loss\", \"step\", \"cross-entropy\", &[(\"one device\", &single_losses), (\"data-parallel, 4 devices\", &dp_losses)]).log_y()"),
        new_markdown_cell("One step, device by device: every op is one program over the mesh, so the four lanes move "
                          "together. On this machine the four CPU devices share two cores, so a step over four "
                          "devices is not faster than on one (`eager-bench` prints the figures); on a TPU host each "
                          "device is its own chip."),
        new_code_cell("let (r, step_profile) = viz::profile(|| train(&model, &xs, &ys, 1));\nr?;\nstep_profile.timeline()"),
        new_code_cell("step_profile"),
    ],
}


def sources(nb):
    return [(c.cell_type, c.source) for c in nb.cells]


def main():
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC, "language_info": LANGUAGE})
        path = HERE / name
        # A notebook whose cells are unchanged keeps its committed outputs.
        if path.exists() and sources(nbformat.read(path, as_version=4)) == sources(nb):
            continue
        nbformat.write(nb, path)
        print(f"wrote {name} (no outputs: refresh it with EAGER_REFRESH_NOTEBOOKS=1)")


if __name__ == "__main__":
    main()
