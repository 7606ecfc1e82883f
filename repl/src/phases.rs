//! `EAGER_REPL_PHASES=1`: where a session's time goes, printed on stderr. At the start, each
//! step with its duration (the build dir and sockets, the toolchain query, evcxr's context and
//! its cell process, each preload cell with evcxr's own phases inside it, the control
//! connection); for every later cell, evcxr's phases.

use std::time::Instant;

/// Whether phases are printed.
pub fn enabled() -> bool {
    std::env::var_os("EAGER_REPL_PHASES").is_some_and(|v| v != "0" && !v.is_empty())
}

/// evcxr's phases of one cell (`Final compile 310 ms, Execution 12 ms`).
pub fn evcxr_phases(out: &evcxr::EvalOutputs) -> String {
    let phases: Vec<String> =
        out.phases.iter().map(|p| format!("{} {:.0} ms", p.name, p.duration.as_secs_f64() * 1e3)).collect();
    phases.join(", ")
}

/// Times the steps of a session's start.
pub struct StartClock {
    on: bool,
    start: Instant,
    last: Instant,
}

impl StartClock {
    pub fn new() -> StartClock {
        let now = Instant::now();
        StartClock { on: enabled(), start: now, last: now }
    }

    /// Ends a step: prints its duration (and `detail`, if any) and the time since the start.
    pub fn step(&mut self, what: &str, detail: &str) {
        let now = Instant::now();
        if self.on {
            let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
            eprintln!(
                "eager start: {what}: {:.0} ms{detail} [at {:.2} s]",
                (now - self.last).as_secs_f64() * 1e3,
                (now - self.start).as_secs_f64()
            );
        }
        self.last = now;
    }
}
