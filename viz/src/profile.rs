//! Capturing a stretch of eager's dispatch log as a [`Profile`].

use std::sync::Arc;

use eager::profiler::{self, CellMark, Event, EventKind};
use eager::Device;

/// Recorded dispatches (ops and transfers), sorted by start, and the wall-clock window they
/// fell in. Every view (table, charts, trace, hints) is drawn from this alone.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    events: Vec<Event>,
    start_ns: u64,
    end_ns: u64,
    lost: u64,
    /// Where REPL or notebook cells began, by event `seq` (empty outside a session).
    cells: Vec<CellMark>,
}

impl Profile {
    /// A profile of `events` (any order); its window spans them.
    pub fn from_events(mut events: Vec<Event>) -> Profile {
        events.sort_by_key(|e| (e.start_ns, e.seq));
        let start_ns = events.first().map_or(0, |e| e.start_ns);
        let end_ns = events.iter().map(Event::end_ns).max().unwrap_or(start_ns);
        Profile { events, start_ns, end_ns, lost: 0, cells: Vec::new() }
    }

    /// Labels the events with the cells they came from: `marks` say where each cell's
    /// events begin ([`eager::profiler::cell_marks`] in a REPL or notebook session).
    /// Timelines of events from several cells name the cells.
    pub fn with_cells(mut self, mut marks: Vec<CellMark>) -> Profile {
        marks.sort_by_key(|m| m.seq);
        self.cells = marks;
        self
    }

    /// The cell `e` came from, if the profile knows its cells.
    pub fn cell_of(&self, e: &Event) -> Option<u64> {
        let after = self.cells.partition_point(|m| m.seq <= e.seq);
        after.checked_sub(1).map(|i| self.cells[i].cell)
    }

    /// The cells the events came from, in order, each with the range of its events in
    /// [`Profile::events`] (events of one cell are contiguous by start, but for dispatches
    /// still running when the next cell began). Empty if the profile knows no cells.
    pub fn cells(&self) -> Vec<(u64, std::ops::Range<usize>)> {
        let mut out: Vec<(u64, std::ops::Range<usize>)> = Vec::new();
        for (i, e) in self.events.iter().enumerate() {
            let Some(cell) = self.cell_of(e) else { continue };
            match out.last_mut() {
                Some((c, r)) if *c == cell => r.end = i + 1,
                _ => out.push((cell, i..i + 1)),
            }
        }
        out
    }

    /// Widens the window to cover `[start_ns, end_ns]` (profiler clock), so that host time
    /// before the first and after the last dispatch counts as wall time.
    pub fn with_window(mut self, start_ns: u64, end_ns: u64) -> Profile {
        if self.events.is_empty() {
            (self.start_ns, self.end_ns) = (start_ns, end_ns.max(start_ns));
        } else {
            self.start_ns = self.start_ns.min(start_ns);
            self.end_ns = self.end_ns.max(end_ns);
        }
        self
    }

    /// Everything still in eager's log (since the start of the process or the last
    /// [`eager::profiler::reset`]), labelled with the cells it came from in a REPL or
    /// notebook session.
    pub fn session() -> Profile {
        let lost = profiler::dropped();
        Profile { lost, ..Profile::from_events(profiler::events()).with_cells(profiler::cell_marks()) }
    }

    /// The dispatches, by start time.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
    /// Op dispatches only (transfers left out).
    pub fn ops(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.kind == EventKind::Op)
    }
    /// Whether the window holds no event at all.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
    /// Start of the window, in nanoseconds on the profiler's clock.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
    /// End of the window, in nanoseconds on the profiler's clock.
    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }
    /// Length of the window: what "share of wall time" divides by.
    pub fn wall_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
    /// Events that happened in the window but had left eager's bounded log before they
    /// were read (raise it with `eager::profiler::set_capacity`).
    pub fn lost(&self) -> u64 {
        self.lost
    }
    /// Op dispatches whose executable was in memory (executed only).
    pub fn hits(&self) -> u64 {
        self.events.iter().filter(|e| e.is_hit()).count() as u64
    }
    /// Op dispatches that compiled their executable.
    pub fn misses(&self) -> u64 {
        self.events.iter().filter(|e| e.is_miss()).count() as u64
    }
    /// Op dispatches that loaded their executable from the persistent compile cache.
    pub fn disk_hits(&self) -> u64 {
        self.events.iter().filter(|e| e.is_disk_hit()).count() as u64
    }
    /// Memory hits over all op dispatches (0 when there were none): a disk hit is cheaper
    /// than a compile but still not a hit.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits() + self.misses() + self.disk_hits();
        if n == 0 {
            0.0
        } else {
            self.hits() as f64 / n as f64
        }
    }
    /// Time compiling (misses only; loads from disk are [`Profile::load_ns`]).
    pub fn compile_ns(&self) -> u64 {
        self.events.iter().filter(|e| e.is_miss()).map(|e| e.compile_ns).sum()
    }
    /// Time loading executables from the persistent compile cache (disk hits).
    pub fn load_ns(&self) -> u64 {
        self.events.iter().filter(|e| e.is_disk_hit()).map(|e| e.compile_ns).sum()
    }
    /// Time executing ops (transfers not included).
    pub fn execute_ns(&self) -> u64 {
        self.ops().map(|e| e.execute_ns).sum()
    }
    /// Time transferring (host to device, device to host, between devices).
    pub fn transfer_ns(&self) -> u64 {
        self.events.iter().filter(|e| e.kind != EventKind::Op).map(|e| e.execute_ns).sum()
    }

    /// Rows to draw dispatches on: one per device, more where dispatches overlap (several
    /// threads), so that no two slices on a row overlap. An SPMD program over a mesh is
    /// drawn on every device of the mesh. Returns the row names and the slices to draw, each
    /// an event's index and its row.
    pub(crate) fn lanes(&self) -> (Vec<String>, Vec<(usize, usize)>) {
        // Greedy interval partitioning per device: events come sorted by start.
        let mut rows: Vec<(Device, u64)> = Vec::new();
        let mut of_event = Vec::with_capacity(self.events.len());
        for (i, e) in self.events.iter().enumerate() {
            let devices = e.info.mesh.as_ref().map_or_else(|| vec![e.device()], |m| m.devices.clone());
            for device in devices {
                let free = rows.iter().position(|&(d, end)| d == device && end <= e.start_ns);
                let row = free.unwrap_or_else(|| {
                    rows.push((device, 0));
                    rows.len() - 1
                });
                rows[row].1 = e.end_ns();
                of_event.push((i, row));
            }
        }
        // Order rows by device, keeping first-use order within one device.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&r| (rows[r].0, r));
        let mut rank = vec![0; rows.len()];
        let mut names = Vec::with_capacity(rows.len());
        for (i, &r) in order.iter().enumerate() {
            rank[r] = i;
            let nth = order[..i].iter().filter(|&&o| rows[o].0 == rows[r].0).count();
            names.push(if nth == 0 { rows[r].0.to_string() } else { format!("{} ({})", rows[r].0, nth + 1) });
        }
        (names, of_event.into_iter().map(|(i, r)| (i, rank[r])).collect())
    }
}

/// A started capture: everything eager dispatches from now until [`Recorder::stop`]
/// (from every thread: the log is process-wide). For a REPL or a kernel, where the work
/// to profile spans several inputs. While it (or a clone) lives, eager's log keeps every
/// event it covers past the log's usual capacity (up to 20 times it).
#[derive(Debug, Clone)]
pub struct Recorder {
    hold: Arc<profiler::Hold>,
    start_ns: u64,
}

/// Starts capturing dispatches; see [`Recorder`].
pub fn start() -> Recorder {
    Recorder { start_ns: profiler::now_ns(), hold: Arc::new(profiler::hold()) }
}

impl Recorder {
    /// The profile so far; recording goes on.
    pub fn snapshot(&self) -> Profile {
        let end_ns = profiler::now_ns();
        let next = profiler::next_seq();
        // Events recorded after `next` was read belong to a later snapshot.
        let mark = self.hold.mark();
        let events: Vec<Event> = profiler::events_since(mark).into_iter().filter(|e| e.seq < next).collect();
        let lost = (next - mark).saturating_sub(events.len() as u64);
        let p = Profile::from_events(events).with_window(self.start_ns, end_ns);
        Profile { lost, ..p.with_cells(profiler::cell_marks()) }
    }

    /// The profile from [`start`] to now.
    pub fn stop(self) -> Profile {
        self.snapshot()
    }
}

/// Runs `f` and returns its result with a profile of what it dispatched (plus whatever
/// other threads dispatched meanwhile).
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Profile) {
    let recorder = start();
    let r = f();
    (r, recorder.stop())
}
