//! `cargo run --release -p viz --example training_views [OUT_DIR]`: the views a training
//! notebook shows, drawn from synthetic profiles shaped like its two runs: a small MLP
//! trained for 200 steps with every op dispatched on its own (57 ops a step, each compiled
//! on the first step), and the same steps compiled into one program (one `train_step`
//! dispatch a step). Writes the loss curves (per step, and against wall time) and the
//! side-by-side comparison as PNG and SVG (and as the HTML a notebook shows), and prints
//! the comparison's table.
//!
//! Synthetic, so that it runs without a device and draws the same every time; the
//! notebook draws the same views from real profiles.

use std::path::PathBuf;
use std::sync::Arc;

use eager::profiler::{CacheOutcome, Event, EventKind, OpInfo};
use eager::{DType, Device, Spec};

const STEPS: usize = 200;

/// The ops of one eager step: forward, loss, backward, and an SGD update per parameter.
const STEP_OPS: [&str; 57] = [
    "matmul",
    "add",
    "relu",
    "matmul",
    "add",
    "max",
    "sub",
    "exp",
    "sum",
    "log",
    "sub",
    "mul",
    "sum",
    "neg",
    "div",
    "exp",
    "sum",
    "div",
    "sub",
    "div",
    "transpose",
    "matmul",
    "sum",
    "transpose",
    "matmul",
    "gt",
    "convert",
    "mul",
    "transpose",
    "matmul",
    "sum",
    "transpose",
    "matmul",
    "mul",
    "sub",
    "mul",
    "sub",
    "mul",
    "sub",
    "mul",
    "sub",
    "mul",
    "add",
    "mul",
    "add",
    "mul",
    "add",
    "mul",
    "add",
    "sqrt",
    "div",
    "mul",
    "sub",
    "mean",
    "abs",
    "max",
    "copy",
];

/// A deterministic stream of numbers in [0, 1), so the example draws the same every run.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// `ns` give or take a quarter.
    fn around(&mut self, ns: u64) -> u64 {
        (ns as f64 * (0.75 + 0.5 * self.next())) as u64
    }
}

/// Events back to back on one clock, each after some host time.
struct Run {
    events: Vec<Event>,
    t: u64,
    jitter: Jitter,
}

impl Run {
    fn new(seed: u64) -> Run {
        Run { events: Vec::new(), t: 1_000_000_000, jitter: Jitter(seed) }
    }
    fn push(
        &mut self,
        kind: EventKind,
        info: &Arc<OpInfo>,
        cache: Option<CacheOutcome>,
        compile: u64,
        execute: u64,
    ) {
        self.t += self.jitter.around(15_000);
        let seq = self.events.len() as u64;
        self.events.push(Event {
            seq,
            kind,
            info: info.clone(),
            cache,
            start_ns: self.t,
            compile_ns: compile,
            execute_ns: execute,
            bytes: 4096,
        });
        self.t += compile + execute;
    }
    /// An op, compiled on its first step.
    fn op(&mut self, info: &Arc<OpInfo>, first: bool, compile: u64, execute: u64) {
        let (cache, compile) =
            if first { (CacheOutcome::Miss, self.jitter.around(compile)) } else { (CacheOutcome::Hit, 0) };
        let execute = self.jitter.around(execute);
        self.push(EventKind::Op, info, Some(cache), compile, execute);
    }
    /// The batch up to the device, the loss back.
    fn transfers(&mut self, up: &Arc<OpInfo>, down: &Arc<OpInfo>) {
        let (a, b, c) = (self.jitter.around(12_000), self.jitter.around(12_000), self.jitter.around(6_000));
        self.push(EventKind::HostToDevice, up, None, 0, a);
        self.push(EventKind::HostToDevice, up, None, 0, b);
        self.push(EventKind::DeviceToHost, down, None, 0, c);
    }
    fn profile(self) -> viz::Profile {
        viz::Profile::from_events(self.events)
    }
}

/// An op on a `[32, width]` input: the step's ops differ in shape, so each has its own
/// executable.
fn info(name: &'static str, attrs: &str, width: usize) -> Arc<OpInfo> {
    let spec = Spec::new(&[32, width], DType::F32);
    Arc::new(OpInfo {
        name,
        attrs: attrs.into(),
        inputs: vec![spec.clone()],
        output: spec,
        device: Device::cpu(),
        mesh: None,
        tier: Default::default(),
    })
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let out: PathBuf = std::env::args().nth(1).unwrap_or_else(|| "target/training_views".into()).into();
    std::fs::create_dir_all(&out)?;
    let (up, down) = (info("to_device", "", 64), info("to_host", "", 1));

    // Eager: every op its own dispatch, compiled on the first step.
    let ops: Vec<Arc<OpInfo>> =
        STEP_OPS.iter().enumerate().map(|(i, &name)| info(name, "", 64 + i)).collect();
    let mut eager = Run::new(1);
    // Compiled: one program a step, compiled once.
    let train_step = info("train_step", &format!("{} ops compiled into one", STEP_OPS.len()), 64);
    let mut compiled = Run::new(2);

    let mut loss = Vec::with_capacity(STEPS);
    let (mut eager_at, mut compiled_at) = (Vec::with_capacity(STEPS), Vec::with_capacity(STEPS));
    let mut noise = Jitter(3);
    for step in 0..STEPS {
        eager.transfers(&up, &down);
        for op in &ops {
            eager.op(op, step == 0, 9_000_000, 14_000);
        }
        compiled.transfers(&up, &down);
        compiled.op(&train_step, step == 0, 380_000_000, 260_000);
        // The same arithmetic either way: one loss curve, reached at different times.
        loss.push(2.3 * (-(step as f64) / 45.0).exp() + 0.06 + 0.03 * (noise.next() - 0.5));
        eager_at.push(((eager.t - 1_000_000_000) as f64 / 1e9, loss[step]));
        compiled_at.push(((compiled.t - 1_000_000_000) as f64 / 1e9, loss[step]));
    }
    let (eager, compiled) = (eager.profile(), compiled.profile());

    let by_step =
        viz::line_chart("Training loss", "step", "loss", &[("eager", &loss), ("compiled", &loss)]).log_y();
    let by_time =
        viz::LineChart::new("Training loss against wall time", "seconds since the first step", "loss")
            .series_xy("eager", &eager_at)
            .series_xy("compiled", &compiled_at)
            .log_y();
    let cmp = viz::compare(&[("eager", &eager), ("compiled", &compiled)]).steps(STEPS);
    println!("{}", cmp.text());

    by_step.write_png(out.join("loss_by_step.png"))?;
    by_step.write_svg(out.join("loss_by_step.svg"))?;
    by_time.write_png(out.join("loss_by_time.png"))?;
    by_time.write_svg(out.join("loss_by_time.svg"))?;
    cmp.write_png(out.join("compare.png"))?;
    cmp.write_svg(out.join("compare.svg"))?;
    // What a notebook shows when the comparison ends a cell: the chart above the table.
    std::fs::write(out.join("compare.html"), format!("<meta charset=\"utf-8\">\n{}", cmp.html()))?;
    println!(
        "wrote {0}/{{loss_by_step,loss_by_time,compare}}.{{png,svg}} and {0}/compare.html",
        out.display()
    );
    Ok(())
}
