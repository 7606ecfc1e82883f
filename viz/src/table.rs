//! The per-op table: one row per op, input specs and placement (a device, or a mesh), sorted
//! by time, with totals and the cache outcomes (memory hits, compiles, loads from disk), as
//! aligned text or as HTML. Shares of wall time count overlapping dispatches' time once;
//! what overlapped is stated under the table.

use std::collections::HashMap;
use std::fmt::{self, Write};

use eager::profiler::{Event, EventKind};
use eager::Spec;

use crate::gaps::merge;
use crate::profile::Profile;
use crate::units::{duration, truncate};

/// One line of the table: every dispatch of one op (with its attributes) on one list of
/// input specs and one placement, or every transfer of one direction, spec and device.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `add`, `sum{dims=[1]}`, or a transfer: `host→device`, `device→host`, `device→device`.
    pub op: String,
    /// An op dispatch or a transfer's direction.
    pub kind: EventKind,
    /// `f32[2, 3] x f32[3]`.
    pub shapes: String,
    /// Where it ran: a device (`cpu:0`), or the mesh of an SPMD program (`mesh {data: 2}`);
    /// empty for the sums.
    pub placement: String,
    /// Dispatches (or transfers) in the row.
    pub calls: u64,
    /// Compiles (0 for transfers).
    pub misses: u64,
    /// Loads from the persistent compile cache (0 for transfers).
    pub disk_hits: u64,
    /// Getting the executable: compiling and loading from disk.
    pub compile_ns: u64,
    /// Executing, or transferring.
    pub execute_ns: u64,
    /// Bytes moved (transfers; 0 for ops).
    pub bytes: u64,
    /// Wall time during which at least one of the row's dispatches ran (overlaps counted once).
    pub busy_ns: u64,
    /// The row's dispatches as (start, end), merged where they overlap.
    spans: Vec<(u64, u64)>,
}

impl Row {
    /// Compile and execute time together.
    pub fn total_ns(&self) -> u64 {
        self.compile_ns + self.execute_ns
    }
    /// Execute (or transfer) time per call; 0 with no calls.
    pub fn mean_execute_ns(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.execute_ns as f64 / self.calls as f64
        }
    }
    /// Whether the row is a transfer, not an op.
    pub fn is_transfer(&self) -> bool {
        self.kind != EventKind::Op
    }
    fn empty(op: String, kind: EventKind, shapes: String, placement: String) -> Row {
        Row {
            op,
            kind,
            shapes,
            placement,
            calls: 0,
            misses: 0,
            disk_hits: 0,
            compile_ns: 0,
            execute_ns: 0,
            bytes: 0,
            busy_ns: 0,
            spans: Vec::new(),
        }
    }
    /// Merges the spans added and sums them into `busy_ns`.
    fn settle(&mut self) {
        self.spans = merge(std::mem::take(&mut self.spans));
        self.busy_ns = self.spans.iter().map(|(a, b)| b - a).sum();
    }
    fn add(&mut self, e: &Event) {
        self.calls += 1;
        self.misses += e.is_miss() as u64;
        self.disk_hits += e.is_disk_hit() as u64;
        self.compile_ns += e.compile_ns;
        self.execute_ns += e.execute_ns;
        self.bytes += e.bytes;
        self.spans.push((e.start_ns, e.end_ns()));
    }
}

/// The per-op table of a [`Profile`]: [`Table::to_text`] for terminals, [`Table::to_html`]
/// for notebooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Sorted by total (compile + execute) time, longest first.
    pub rows: Vec<Row>,
    /// Rows left out by [`Table::top`], summed into one (`op` is `… N more`).
    pub rest: Option<Row>,
    /// Sums over all rows, left out or not (`op` is `total`).
    pub totals: Row,
    /// Op dispatches executed from memory.
    pub hits: u64,
    /// Op dispatches that compiled.
    pub misses: u64,
    /// Op dispatches that loaded their executable from the persistent compile cache.
    pub disk_hits: u64,
    /// The window's length (what "share of wall time" divides by).
    pub wall_ns: u64,
    /// Dispatch time that ran alongside other dispatches (threads, a mesh's devices,
    /// asynchronous execution): the rows' compile and execute times add up to this much
    /// more than the wall time in which any dispatch ran (`totals.busy_ns`).
    pub overlap_ns: u64,
    /// Events the bounded log dropped before they were read.
    pub lost: u64,
    /// One-line recompile hints (see [`crate::Hint`]).
    pub hints: Vec<String>,
    /// What ran over meshes: SPMD dispatches, their distinct programs, and the collectives
    /// those dispatches ran (`all-reduce` ×12), most first.
    pub spmd: Option<SpmdSummary>,
    /// Which tier the executables that ran were compiled at (`None` when all optimized).
    pub tiers: Option<TierSummary>,
}

/// Op dispatches per compile tier, and the keys seen at both (swapped as they turned hot).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TierSummary {
    /// Op dispatches that ran a quick-tier executable.
    pub quick: u64,
    /// Op dispatches that ran an optimized executable.
    pub optimized: u64,
    /// Keys that ran at both tiers (swapped to optimized as they turned hot).
    pub swapped: usize,
}

impl TierSummary {
    fn of(profile: &Profile) -> Option<TierSummary> {
        use eager::pjrt::Tier;
        let mut s = TierSummary::default();
        let mut quick_keys: Vec<&eager::profiler::OpInfo> = Vec::new();
        let mut optimized_keys: Vec<&eager::profiler::OpInfo> = Vec::new();
        for e in profile.ops() {
            let (count, keys) = match e.info.tier {
                Tier::Quick => (&mut s.quick, &mut quick_keys),
                Tier::Optimized => (&mut s.optimized, &mut optimized_keys),
            };
            *count += 1;
            if !keys.contains(&&*e.info) {
                keys.push(&e.info);
            }
        }
        let same_key = |a: &eager::profiler::OpInfo, b: &eager::profiler::OpInfo| {
            (a.name, &a.attrs, &a.inputs, a.device) == (b.name, &b.attrs, &b.inputs, b.device)
        };
        s.swapped = quick_keys.iter().filter(|q| optimized_keys.iter().any(|o| same_key(q, o))).count();
        (s.quick > 0).then_some(s)
    }
}

/// The SPMD part of a profile (see [`Table::spmd`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpmdSummary {
    /// Op dispatches that ran over a mesh.
    pub dispatches: u64,
    /// Distinct SPMD programs among them.
    pub programs: usize,
    /// The collectives XLA's partitioner put in them, with their counts, most first (`("all-reduce", 12)`).
    pub collectives: Vec<(String, u64)>,
}

impl SpmdSummary {
    fn of(profile: &Profile) -> Option<SpmdSummary> {
        let mut s = SpmdSummary::default();
        let mut programs: Vec<&eager::profiler::OpInfo> = Vec::new();
        for e in profile.ops() {
            let Some(mesh) = &e.info.mesh else { continue };
            s.dispatches += 1;
            if !programs.contains(&&*e.info) {
                programs.push(&e.info);
            }
            for c in &mesh.collectives {
                match s.collectives.iter_mut().find(|(n, _)| n == c) {
                    Some((_, k)) => *k += 1,
                    None => s.collectives.push((c.clone(), 1)),
                }
            }
        }
        s.programs = programs.len();
        s.collectives.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (s.dispatches > 0).then_some(s)
    }
}

/// The label of an event's row: transfers by direction, ops by name and attributes.
pub(crate) fn op_label(e: &Event) -> String {
    match e.kind {
        EventKind::Op if e.info.attrs.is_empty() => e.name().to_string(),
        EventKind::Op => format!("{}{{{}}}", e.name(), e.info.attrs),
        kind => transfer_label(kind).to_string(),
    }
}

pub(crate) fn transfer_label(kind: EventKind) -> &'static str {
    match kind {
        EventKind::HostToDevice => "host→device",
        EventKind::DeviceToHost => "device→host",
        EventKind::DeviceToDevice => "device→device",
        EventKind::Op => "op",
    }
}

/// One row summing `rows` (its kind is `Op` so that its misses and disk loads show).
fn sum(op: String, rows: &[Row]) -> Row {
    let mut s = Row::empty(op, EventKind::Op, String::new(), String::new());
    for r in rows {
        s.calls += r.calls;
        s.misses += r.misses;
        s.disk_hits += r.disk_hits;
        s.compile_ns += r.compile_ns;
        s.execute_ns += r.execute_ns;
        s.bytes += r.bytes;
        s.spans.extend_from_slice(&r.spans);
    }
    s.settle();
    s
}

/// Where an event ran: its device, or the mesh of an SPMD program.
pub(crate) fn placement(e: &Event) -> String {
    match &e.info.mesh {
        Some(mesh) => mesh.to_string(),
        None => e.device().to_string(),
    }
}

fn specs(specs: &[Spec]) -> String {
    specs.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" x ")
}

impl Table {
    /// The table of `profile` (what [`Profile::table`] returns).
    pub fn new(profile: &Profile) -> Table {
        let mut index: HashMap<(EventKind, &str, &str, &[Spec], String), usize> = HashMap::new();
        let mut rows: Vec<Row> = Vec::new();
        for e in profile.events() {
            let key = (e.kind, e.name(), e.info.attrs.as_str(), e.info.inputs.as_slice(), placement(e));
            let i = *index.entry(key).or_insert_with_key(|key| {
                rows.push(Row::empty(op_label(e), e.kind, specs(&e.info.inputs), key.4.clone()));
                rows.len() - 1
            });
            rows[i].add(e);
        }
        rows.iter_mut().for_each(Row::settle);
        let totals = sum("total".into(), &rows);
        let overlap_ns = totals.total_ns().saturating_sub(totals.busy_ns);
        rows.sort_by(|a, b| b.total_ns().cmp(&a.total_ns()).then_with(|| a.op.cmp(&b.op)));
        Table {
            rows,
            rest: None,
            totals,
            hits: profile.hits(),
            misses: profile.misses(),
            disk_hits: profile.disk_hits(),
            wall_ns: profile.wall_ns(),
            overlap_ns,
            lost: profile.lost(),
            hints: profile.hints().iter().map(|h| h.to_string()).collect(),
            spmd: SpmdSummary::of(profile),
            tiers: TierSummary::of(profile),
        }
    }

    /// Keeps the `n` longest rows and sums the others into [`Table::rest`].
    pub fn top(mut self, n: usize) -> Table {
        if self.rows.len() > n {
            let rest = self.rows.split_off(n);
            self.rest = Some(sum(format!("… {} more", rest.len()), &rest));
        }
        self
    }

    /// The rows as shown: kept rows, the sum of the others if any, then the totals.
    fn shown(&self) -> impl Iterator<Item = (&Row, bool)> {
        self.rows.iter().chain(&self.rest).map(|r| (r, false)).chain(std::iter::once((&self.totals, true)))
    }

    /// Memory hits over all op dispatches (disk loads are not hits).
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses + self.disk_hits;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }

    /// Share of the wall time during which `row`'s dispatches ran, in percent (never above
    /// 100: its overlapping dispatches count once; see [`Row::busy_ns`]).
    pub fn share(&self, row: &Row) -> f64 {
        self.percent(row.busy_ns)
    }

    fn percent(&self, ns: u64) -> f64 {
        if self.wall_ns == 0 {
            0.0
        } else {
            100.0 * ns as f64 / self.wall_ns as f64
        }
    }

    /// The cells of a row, formatted, in column order.
    fn cells(&self, r: &Row) -> [String; COLUMNS] {
        let transfer = r.is_transfer();
        [
            r.op.clone(),
            r.shapes.clone(),
            r.placement.clone(),
            r.calls.to_string(),
            if transfer { "-".into() } else { r.misses.to_string() },
            if transfer { "-".into() } else { r.disk_hits.to_string() },
            if transfer { "-".into() } else { format!("{:.2}", r.compile_ns as f64 / 1e6) },
            format!("{:.1}", r.execute_ns as f64 / 1e3),
            format!("{:.1}", r.mean_execute_ns() / 1e3),
            format!("{:.1}%", self.share(r)),
        ]
    }

    /// Lines under the table: cache summary, lost events, hints.
    fn footer(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "cache: {} hits, {} misses (compiled), {} loaded from disk, hit rate {:.1}% · wall {} · in dispatch {:.1}%",
            self.hits,
            self.misses,
            self.disk_hits,
            100.0 * self.hit_rate(),
            duration(self.wall_ns),
            self.share(&self.totals)
        )];
        // Below a thousandth of the wall time, overlaps change no figure shown.
        if self.overlap_ns * 1000 > self.wall_ns {
            lines.push(format!(
                "overlapped: {} of dispatch time ran alongside other dispatches (threads, devices, asynchronous execution): the rows' times add up to {:.1}% of wall; wall % counts time that overlapped once",
                duration(self.overlap_ns),
                self.percent(self.totals.total_ns())
            ));
        }
        if let Some(s) = &self.spmd {
            let collectives: Vec<String> = s.collectives.iter().map(|(n, k)| format!("{n} ×{k}")).collect();
            let moved =
                if collectives.is_empty() { "no collectives".to_string() } else { collectives.join(", ") };
            lines.push(format!(
                "spmd: {} dispatches ran as {} SPMD program{} over meshes; collectives the partitioner added: {moved}",
                s.dispatches,
                s.programs,
                if s.programs == 1 { "" } else { "s" }
            ));
        }
        if let Some(t) = &self.tiers {
            lines.push(format!(
                "tiers: {} dispatches ran quick-compiled executables, {} optimized; {} key{} swapped to optimized as {} turned hot",
                t.quick,
                t.optimized,
                t.swapped,
                if t.swapped == 1 { "" } else { "s" },
                if t.swapped == 1 { "it" } else { "they" }
            ));
        }
        if self.lost > 0 {
            lines.push(format!(
                "note: {} events left eager's bounded log before they were read (eager::profiler::set_capacity)",
                self.lost
            ));
        }
        lines.extend(self.hints.iter().take(HINTS_SHOWN).cloned());
        if self.hints.len() > HINTS_SHOWN {
            let more = self.hints.len() - HINTS_SHOWN;
            lines
                .push(format!("… and {more} more hint{} (Profile::hints)", if more == 1 { "" } else { "s" }));
        }
        lines
    }

    /// Aligned text for a terminal: long op and shape cells are cut to keep it narrow.
    pub fn to_text(&self) -> String {
        const MAX_OP: usize = 32;
        const MAX_SHAPES: usize = 40;
        const MAX_PLACEMENT: usize = 28;
        let mut grid: Vec<[String; COLUMNS]> = vec![HEADERS.map(String::from)];
        for (r, _) in self.shown() {
            let mut c = self.cells(r);
            c[0] = truncate(&c[0], MAX_OP);
            c[1] = truncate(&c[1], MAX_SHAPES);
            c[2] = truncate(&c[2], MAX_PLACEMENT);
            grid.push(c);
        }
        let width: Vec<usize> =
            (0..COLUMNS).map(|i| grid.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        let rule: String = "─".repeat(width.iter().sum::<usize>() + 2 * (COLUMNS - 1));
        let mut out = String::new();
        for (n, row) in grid.iter().enumerate() {
            if n == 1 || n == grid.len() - 1 {
                out.push_str(&rule);
                out.push('\n');
            }
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = width[i] - cell.chars().count();
                let sep = if i == 0 { "" } else { "  " };
                // Text columns left-aligned, numbers right-aligned.
                if i < TEXT_COLUMNS {
                    let _ = write!(line, "{sep}{cell}{}", " ".repeat(pad));
                } else {
                    let _ = write!(line, "{sep}{}{cell}", " ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        for l in self.footer() {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// A self-contained HTML `<table>` (inline styles, so it looks the same in any notebook).
    pub fn to_html(&self) -> String {
        const CELL: &str = "padding:2px 10px;border-bottom:1px solid #ddd";
        let mut out = String::from("<div class=\"viz-table\">");
        out.push_str(
            "<table style=\"border-collapse:collapse;font-family:monospace;font-size:13px\">\n<thead><tr>",
        );
        for (i, h) in HEADERS.iter().enumerate() {
            let align = if i < TEXT_COLUMNS { "left" } else { "right" };
            let _ = write!(out, "<th style=\"{CELL};text-align:{align}\">{}</th>", escape(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for (r, total) in self.shown() {
            out.push_str(if total { "<tr style=\"font-weight:bold\">" } else { "<tr>" });
            for (i, c) in self.cells(r).iter().enumerate() {
                let align = if i < TEXT_COLUMNS { "left" } else { "right" };
                let _ = write!(out, "<td style=\"{CELL};text-align:{align}\">{}</td>", escape(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
        for l in self.footer() {
            let _ = writeln!(
                out,
                "<div style=\"font-family:monospace;font-size:13px;margin-top:4px\">{}</div>",
                escape(&l)
            );
        }
        out.push_str("</div>\n");
        out
    }
}

/// Rows that [`Profile::table_text`] and [`Profile::table_html`] show: the longest ones;
/// the others are summed into one row ([`Profile::table`] has them all).
pub const TABLE_ROWS: usize = 30;

/// Hints written under the table; [`Profile::hints`] has them all.
const HINTS_SHOWN: usize = 3;

const COLUMNS: usize = 10;
/// The first columns hold text (left-aligned), the others numbers.
const TEXT_COLUMNS: usize = 3;

/// "disk" counts loads from the persistent compile cache; "compile/load ms" is the time
/// getting executables either way; "wall %" the share of wall time the row's dispatches ran.
const HEADERS: [&str; COLUMNS] = [
    "op",
    "input shapes",
    "placement",
    "calls",
    "misses",
    "disk",
    "compile/load ms",
    "execute µs",
    "mean µs",
    "wall %",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Profile {
    /// The per-op table.
    pub fn table(&self) -> Table {
        Table::new(self)
    }
    /// The per-op table as aligned text, for a terminal ([`TABLE_ROWS`] rows at most).
    pub fn table_text(&self) -> String {
        self.table().top(TABLE_ROWS).to_text()
    }
    /// The per-op table as HTML, for a notebook ([`TABLE_ROWS`] rows at most).
    pub fn table_html(&self) -> String {
        self.table().top(TABLE_ROWS).to_html()
    }
}
