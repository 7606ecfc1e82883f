//! The process-wide log of dispatches: every op and transfer, with its cache outcome,
//! compile and execute time, bytes moved and start time. Bounded: the oldest events go first.
//! The viz crate, the REPL and the kernel read it; nothing here formats it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use crate::device::Device;
use crate::shape::Spec;
use crate::shared::{lock, Shared};

/// What an op (or transfer) is: name, attributes, input and output specs, device. Shared by
/// all events of one cache key, so recording an event copies one pointer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpInfo {
    /// The op's name (or the transfer's).
    pub name: &'static str,
    /// The op's attributes, as printed.
    pub attrs: String,
    /// The specs of the inputs.
    pub inputs: Vec<Spec>,
    /// The spec of the output.
    pub output: Spec,
    /// The device it ran on.
    pub device: Device,
    /// For an SPMD program: the mesh it ran over (`device` is the mesh's first device).
    #[serde(default)]
    pub mesh: Option<MeshInfo>,
    /// How hard XLA optimized the executable that ran (see [`crate::cache::Tiering`]).
    #[serde(default)]
    pub tier: crate::pjrt::Tier,
}

/// The mesh an SPMD program ran over: its named axes and its devices, partition `i` on
/// `devices[i]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MeshInfo {
    /// The mesh's named axes and their sizes.
    pub axes: Vec<(String, usize)>,
    /// The mesh's devices, partition `i` on `devices[i]`.
    pub devices: Vec<Device>,
    /// The partition specs of the inputs then the results (`P("data")`, `P()`).
    #[serde(default)]
    pub splits: Vec<String>,
    /// The collectives XLA's partitioner put in the program (`all-reduce`, `all-gather`, …),
    /// in order.
    #[serde(default)]
    pub collectives: Vec<String>,
}

impl std::fmt::Display for MeshInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let axes: Vec<String> = self.axes.iter().map(|(n, s)| format!("{n}: {s}")).collect();
        write!(f, "mesh {{{}}}", axes.join(", "))
    }
}

impl OpInfo {
    /// Input shapes as `[2, 3] x [3]`.
    pub fn input_shapes(&self) -> String {
        self.inputs.iter().map(|s| format!("{:?}", s.shape.as_slice())).collect::<Vec<_>>().join(" x ")
    }

    /// `add(f32[2, 3], f32[3])`, with attributes if any.
    pub fn signature(&self) -> String {
        let args: Vec<String> = self.inputs.iter().map(|s| s.to_string()).collect();
        let attrs = if self.attrs.is_empty() { String::new() } else { format!(" {{{}}}", self.attrs) };
        let over = self.mesh.as_ref().map(|m| format!(" over {m}")).unwrap_or_default();
        format!("{}({}){attrs}{over}", self.name, args.join(", "))
    }
}

/// [`OpInfo`] as read back from JSON (derived Deserialize cannot make `&'static str`) (a REPL host reading a child's log).
#[derive(serde::Deserialize)]
struct OpInfoWire {
    name: String,
    attrs: String,
    inputs: Vec<Spec>,
    output: Spec,
    device: Device,
    #[serde(default)]
    mesh: Option<MeshInfo>,
    #[serde(default)]
    tier: crate::pjrt::Tier,
}

impl<'de> serde::Deserialize<'de> for OpInfo {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OpInfo, D::Error> {
        let w = OpInfoWire::deserialize(d)?;
        Ok(OpInfo {
            name: intern(w.name),
            attrs: w.attrs,
            inputs: w.inputs,
            output: w.output,
            device: w.device,
            mesh: w.mesh,
            tier: w.tier,
        })
    }
}

/// Op names are few (one per op kind, one per compiled function): each distinct one is
/// leaked once.
pub(crate) fn intern(name: String) -> &'static str {
    use std::collections::HashSet;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = lock(&NAMES);
    let names = names.get_or_insert_with(HashSet::new);
    match names.get(name.as_str()) {
        Some(n) => n,
        None => {
            let n: &'static str = Box::leak(name.into_boxed_str());
            names.insert(n);
            n
        }
    }
}

/// What a dispatch was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum EventKind {
    /// An op run through the compile cache.
    Op,
    /// A transfer from the host to a device.
    HostToDevice,
    /// A transfer from a device to the host.
    DeviceToHost,
    /// A transfer between devices.
    DeviceToDevice,
}

/// Where an op's executable came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CacheOutcome {
    /// Found in the in-memory cache: executed only.
    Hit,
    /// Compiled now.
    Miss,
    /// Not in memory: loaded from the persistent compile cache (no compile).
    DiskHit,
}

/// One recorded dispatch (serializable, so a REPL host can read a child's log).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Position in the process's sequence of events (never reused, survives `reset`).
    pub seq: u64,
    /// What was dispatched: an op or a transfer.
    pub kind: EventKind,
    /// The op (or transfer): name, attributes, specs, device.
    pub info: Arc<OpInfo>,
    /// `Some` for ops, `None` for transfers.
    pub cache: Option<CacheOutcome>,
    /// Start, in nanoseconds since the profiler's epoch (the first use of eager).
    pub start_ns: u64,
    /// Time spent getting the executable: compiling on a miss, loading on a disk hit, 0 on
    /// a hit.
    pub compile_ns: u64,
    /// Time the device spent on the op (dispatch is asynchronous: from when the op was
    /// enqueued, or its inputs were ready if later, to when it finished), or transferring.
    pub execute_ns: u64,
    /// Bytes read and written: inputs plus output for an op, the payload for a transfer.
    pub bytes: u64,
}

impl Event {
    /// Whether the executable was found in the in-memory cache.
    pub fn is_hit(&self) -> bool {
        self.cache == Some(CacheOutcome::Hit)
    }
    /// Whether the op was compiled now.
    pub fn is_miss(&self) -> bool {
        self.cache == Some(CacheOutcome::Miss)
    }
    /// Whether the executable was loaded from the persistent cache.
    pub fn is_disk_hit(&self) -> bool {
        self.cache == Some(CacheOutcome::DiskHit)
    }
    /// Wall time of the whole dispatch.
    pub fn total_ns(&self) -> u64 {
        self.compile_ns + self.execute_ns
    }
    /// End, in nanoseconds since the profiler's epoch.
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.total_ns()
    }
    /// The op's (or transfer's) name.
    pub fn name(&self) -> &'static str {
        self.info.name
    }
    /// The device it ran on.
    pub fn device(&self) -> Device {
        self.info.device
    }
}

/// Events kept when nothing else is said (`EAGER_PROFILE_CAPACITY` overrides).
pub const DEFAULT_CAPACITY: usize = 100_000;

pub(crate) struct Profiler {
    epoch: Instant,
    enabled: AtomicBool,
    log: Mutex<Log>,
    /// Ops dispatched whose completion has not been seen yet: their device times are not
    /// final until it is (see [`wait_for_ops`]).
    /// Padded: completion callbacks write it while dispatches read the fields beside it.
    in_flight: CachePadded<AtomicUsize>,
}

struct Log {
    events: VecDeque<Event>,
    capacity: usize,
    next_seq: u64,
    dropped: u64,
    /// Marks of the live [`Hold`]s: events from the oldest one on stay past the capacity.
    holds: Vec<u64>,
    /// Where REPL or notebook cells began (see [`mark_cell`]), oldest first.
    cells: Vec<CellMark>,
}

/// How far past its capacity the log grows for a [`Hold`] (a bound on a forgotten one).
const HOLD_LIMIT: usize = 20;

impl Log {
    /// Whether the oldest event must go to leave room for `incoming` more: the log would be
    /// over capacity, and the event is older than every hold (or the held log is at its limit).
    fn must_drop(&self, incoming: usize) -> bool {
        let held_from = self.holds.iter().min().copied().unwrap_or(u64::MAX);
        let after = self.events.len() + incoming;
        match self.events.front() {
            Some(first) if first.seq >= held_from => after > self.capacity.max(1).saturating_mul(HOLD_LIMIT),
            Some(_) => after > self.capacity,
            None => false,
        }
    }

    fn trim(&mut self, incoming: usize) {
        while self.must_drop(incoming) {
            self.events.pop_front();
            self.dropped += 1;
        }
    }
}

impl Profiler {
    pub(crate) fn new() -> Profiler {
        let capacity = std::env::var("EAGER_PROFILE_CAPACITY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_CAPACITY);
        Profiler {
            epoch: Instant::now(),
            enabled: AtomicBool::new(std::env::var_os("EAGER_PROFILE_OFF").is_none()),
            log: Mutex::new(Log {
                events: VecDeque::new(),
                capacity,
                next_seq: 0,
                dropped: 0,
                holds: Vec::new(),
                cells: Vec::new(),
            }),
            in_flight: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// An op was enqueued; its completion will call [`Profiler::op_done`].
    pub(crate) fn op_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn op_done(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn ns_since(&self, start: Instant) -> u64 {
        start.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &self,
        kind: EventKind,
        info: &Arc<OpInfo>,
        cache: Option<CacheOutcome>,
        start: Instant,
        compile_ns: u64,
        execute_ns: u64,
        bytes: u64,
    ) -> Option<u64> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        let start_ns = self.ns_since(start);
        let mut log = lock(&self.log);
        let seq = log.next_seq;
        log.next_seq += 1;
        log.trim(1);
        if log.capacity > 0 {
            log.events.push_back(Event {
                seq,
                kind,
                info: info.clone(),
                cache,
                start_ns,
                compile_ns,
                execute_ns,
                bytes,
            });
        }
        Some(seq)
    }

    /// Sets the device time of event `seq` once its op finished (if it is still in the log).
    pub(crate) fn complete(&self, seq: u64, execute_ns: u64) {
        let mut log = lock(&self.log);
        let Some(first) = log.events.front().map(|e| e.seq) else { return };
        if let Some(e) = seq.checked_sub(first).and_then(|i| log.events.get_mut(i as usize)) {
            if e.seq == seq {
                e.execute_ns = execute_ns;
            }
        }
    }
}

static PROFILER: Shared<Profiler> = Shared::new("eager::profiler::Profiler", Profiler::new);

/// The process's profiler (one per session, see [`crate::shared`]).
pub(crate) fn profiler() -> &'static Profiler {
    PROFILER.get()
}

/// Waits until every op dispatched so far has completed on its device (so that its device time
/// is booked). `eager::synchronize` is this.
pub fn wait_for_ops() {
    wait_for_ops_until(None);
}

/// [`wait_for_ops`], giving up at `deadline`.
pub(crate) fn wait_for_ops_until(deadline: impl Into<Option<std::time::Instant>>) {
    let deadline = deadline.into();
    let p = profiler();
    let mut spins = 0u32;
    while p.in_flight.load(Ordering::Acquire) != 0 && deadline.is_none_or(|d| std::time::Instant::now() < d) {
        spins += 1;
        if spins < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Ops dispatched whose completion has not been seen yet (`synchronize` waits until none
/// are): what shows that dispatch returned before the device finished, with no clock.
pub fn ops_in_flight() -> usize {
    profiler().in_flight.load(Ordering::Acquire)
}

/// A copy of every event still in the log, oldest first (after the ops dispatched so far
/// finished, so that their device times are final).
pub fn events() -> Vec<Event> {
    wait_for_ops();
    let log = lock(&profiler().log);
    log.events.iter().cloned().collect()
}

/// A copy of the events whose `seq` is at least `seq` (see [`next_seq`]).
pub fn events_since(seq: u64) -> Vec<Event> {
    wait_for_ops();
    let log = lock(&profiler().log);
    let skip = log.events.partition_point(|e| e.seq < seq);
    log.events.iter().skip(skip).cloned().collect()
}

/// The `seq` the next event will get: a mark to read [`events_since`] from.
pub fn next_seq() -> u64 {
    lock(&profiler().log).next_seq
}

/// Where a REPL or notebook cell began: events from `seq` on came from cell `cell` (its
/// number as the front end shows it, `In [3]`), until the next mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CellMark {
    /// The first event's position in the sequence of events.
    pub seq: u64,
    /// The cell's number as the front end shows it.
    pub cell: u64,
}

/// Cell marks kept (the oldest go first): far more cells than a session runs.
const CELL_MARKS: usize = 10_000;

/// Marks that the events from [`next_seq`] on come from cell `cell` (the REPL's host calls
/// it through the control socket before each cell), so that views can label them.
pub fn mark_cell(cell: u64) {
    let mut log = lock(&profiler().log);
    let seq = log.next_seq;
    // A cell that dispatched nothing leaves its mark to be replaced.
    if log.cells.last().is_some_and(|m| m.seq == seq) {
        log.cells.pop();
    }
    log.cells.push(CellMark { seq, cell });
    if log.cells.len() > CELL_MARKS {
        log.cells.remove(0);
    }
}

/// The cell marks, oldest first (empty outside a REPL or notebook).
pub fn cell_marks() -> Vec<CellMark> {
    lock(&profiler().log).cells.clone()
}

/// Empties the log (sequence numbers go on).
pub fn reset() {
    let mut log = lock(&profiler().log);
    log.events.clear();
    log.dropped = 0;
}

/// Number of events pushed out of the full log since the last reset.
pub fn dropped() -> u64 {
    lock(&profiler().log).dropped
}

/// Sets how many events the log keeps (0 keeps none).
pub fn set_capacity(capacity: usize) {
    let mut log = lock(&profiler().log);
    log.capacity = capacity;
    log.trim(0);
}

/// Keeps every event from the next one on in the log, past its capacity (up to 20 times
/// it), while alive: what a profile of a long stretch of work holds so that none of it is lost.
#[derive(Debug)]
pub struct Hold {
    mark: u64,
}

/// Starts a [`Hold`] at [`next_seq`].
pub fn hold() -> Hold {
    let mut log = lock(&profiler().log);
    let mark = log.next_seq;
    log.holds.push(mark);
    Hold { mark }
}

impl Hold {
    /// The `seq` of the first event held.
    pub fn mark(&self) -> u64 {
        self.mark
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut log = lock(&profiler().log);
        if let Some(i) = log.holds.iter().position(|&m| m == self.mark) {
            log.holds.swap_remove(i);
        }
        log.trim(0);
    }
}

/// How many events the log keeps.
pub fn capacity() -> usize {
    lock(&profiler().log).capacity
}

/// Turns recording on or off (on by default; `EAGER_PROFILE_OFF` starts it off).
pub fn set_enabled(on: bool) {
    profiler().enabled.store(on, Ordering::Relaxed);
}

/// Whether recording is on.
pub fn is_enabled() -> bool {
    profiler().enabled.load(Ordering::Relaxed)
}

/// Nanoseconds since the profiler's epoch, on the clock events use.
pub fn now_ns() -> u64 {
    profiler().now_ns()
}
