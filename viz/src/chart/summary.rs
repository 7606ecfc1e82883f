//! A run's figures, as the comparison states them in its text, table and captions.

use std::collections::{HashMap, HashSet};

use crate::profile::Profile;
use crate::table::op_label;
use crate::units::{duration, value};

/// A run's figures, as the comparison's text, table and captions state them.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run's name, as given to [`crate::compare`].
    pub name: String,
    /// Op dispatches (each an executable run: a one-op program, a fused region or a compiled function).
    pub op_dispatches: u64,
    /// Host↔device and device↔device transfers.
    pub transfers: u64,
    /// Distinct executables the ops ran: op, attributes, input specs and device.
    pub executables: u64,
    /// Time compiling (misses).
    pub compile_ns: u64,
    /// Time loading executables from the persistent compile cache.
    pub load_ns: u64,
    /// Device time executing ops.
    pub execute_ns: u64,
    /// Time transferring.
    pub transfer_ns: u64,
    /// The run's window, first dispatch to last completion.
    pub wall_ns: u64,
    /// The op (with its attributes) dispatched most often, and how often.
    pub most_dispatched: Option<(String, u64)>,
    /// Training steps the run took, if the comparison was told ([`crate::Comparison::steps`]).
    pub steps: Option<u64>,
}

impl RunSummary {
    pub(super) fn new(name: &str, p: &Profile, steps: Option<u64>) -> RunSummary {
        let mut executables = HashSet::new();
        let mut counts: HashMap<String, u64> = HashMap::new();
        for e in p.ops() {
            executables.insert((e.name(), e.info.attrs.as_str(), e.info.inputs.as_slice(), e.device()));
            *counts.entry(op_label(e)).or_default() += 1;
        }
        // Ties go to the alphabetically first, so the summary does not depend on hashing.
        let most_dispatched = counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)));
        RunSummary {
            name: name.to_string(),
            op_dispatches: p.ops().count() as u64,
            transfers: (p.events().len() - p.ops().count()) as u64,
            executables: executables.len() as u64,
            compile_ns: p.compile_ns(),
            load_ns: p.load_ns(),
            execute_ns: p.execute_ns(),
            transfer_ns: p.transfer_ns(),
            wall_ns: p.wall_ns(),
            most_dispatched,
            steps,
        }
    }

    /// Op dispatches per second of wall time (0 for an empty window).
    pub fn dispatches_per_second(&self) -> f64 {
        if self.wall_ns == 0 {
            0.0
        } else {
            self.op_dispatches as f64 * 1e9 / self.wall_ns as f64
        }
    }

    /// Op dispatches per training step, if the steps are known.
    pub fn dispatches_per_step(&self) -> Option<f64> {
        self.steps.filter(|&s| s > 0).map(|s| self.op_dispatches as f64 / s as f64)
    }

    /// Wall time per training step with compiling and loading taken out: what a step costs
    /// once warm. `None` if the steps are not known.
    pub fn steady_step_ns(&self) -> Option<f64> {
        self.steps.filter(|&s| s > 0).map(|s| self.steady_ns() as f64 / s as f64)
    }

    /// The host's own time: wall less compiling, loading, device execute and transfers (a
    /// read's wait for its producer is that op's execute, not a transfer).
    pub fn host_ns(&self) -> u64 {
        self.wall_ns.saturating_sub(self.compile_ns + self.load_ns + self.execute_ns + self.transfer_ns)
    }

    /// Wall time without compiling and loading.
    pub(super) fn steady_ns(&self) -> u64 {
        self.wall_ns.saturating_sub(self.compile_ns + self.load_ns)
    }
}

/// A run's caption: `600 op dispatches (60 per step) · 60 distinct executables · most
/// dispatched: add ×200 · 20 transfers`, then its times.
pub(super) fn caption(s: &RunSummary) -> [String; 2] {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let per_step = s.dispatches_per_step().map_or(String::new(), |d| format!(" ({} per step)", value(d)));
    let most =
        s.most_dispatched.as_ref().map_or(String::new(), |(op, n)| format!(" · most dispatched: {op} ×{n}"));
    let transfers = if s.transfers > 0 {
        format!(" · {}", plural(s.transfers, "transfer", "transfers"))
    } else {
        String::new()
    };
    let counts = format!(
        "{}{per_step} · {}{most}{transfers}",
        plural(s.op_dispatches, "op dispatch", "op dispatches"),
        plural(s.executables, "distinct executable", "distinct executables")
    );
    let load =
        if s.load_ns > 0 { format!(" · load from disk {}", duration(s.load_ns)) } else { String::new() };
    let transfer =
        if s.transfer_ns > 0 { format!(" · transfer {}", duration(s.transfer_ns)) } else { String::new() };
    let step =
        s.steady_step_ns().map_or(String::new(), |ns| format!(" ({} per warm step)", duration(ns as u64)));
    let times = format!(
        "compile {}{load} · device execute {}{transfer} · wall {}{step} · {} dispatches/s",
        duration(s.compile_ns),
        duration(s.execute_ns),
        duration(s.wall_ns),
        value(s.dispatches_per_second().round())
    );
    [counts, times]
}
