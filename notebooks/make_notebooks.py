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
        new_code_cell("p.write_trace(\"profiling-trace.json\")?;\n\"open profiling-trace.json in ui.perfetto.dev\""),
    ],
    "03-what-eager-costs.ipynb": [
        new_markdown_cell("# What eager dispatch costs, op by op\n\n"
                          "A lesson in three measurements: compiling an op, running a compiled op, and moving data."),
        new_code_cell("let x = Tensor::rand(&[256, 256], DType::F32)?;\n"
                      "let t = std::time::Instant::now();\nlet _ = x.sin()?;\n"
                      "format!(\"first sin: {:.1} ms (compile + run)\", t.elapsed().as_secs_f64() * 1e3)"),
        new_code_cell("let t = std::time::Instant::now();\nfor _ in 0..1000 { let _ = x.sin()?; }\n"
                      "format!(\"cached sin: {:.1} µs per call\", t.elapsed().as_secs_f64() * 1e6 / 1000.0)"),
        new_code_cell("let t = std::time::Instant::now();\nlet v = x.to_vec::<f32>()?;\n"
                      "format!(\"copy {} floats to the host: {:.1} µs\", v.len(), t.elapsed().as_secs_f64() * 1e6)"),
        new_markdown_cell("The per-op table of the session shows the same: a few compiles dominate, "
                          "thousands of executes cost little."),
        new_code_cell(":profile session"),
        new_code_cell("viz::Profile::session().compile_vs_execute().as_png().unwrap()"),
    ],
}


def main():
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC, "language_info": LANGUAGE})
        nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    main()
