//! The scheduler: host code only, no model and no device. It decides, step by step, which
//! requests hold a key/value slot, which prompt chunks are prefilled and which sequences
//! decode. Continuous batching: a waiting request takes a slot the step one frees, and joins
//! the running decode batch as soon as its prompt is in the cache; a long prompt is
//! prefilled in chunks of at most `prefill_chunk` tokens a step, between decode steps, so it
//! never stalls the sequences already decoding.
//!
//! The cache is slots of a fixed-batch cache (as JetStream keeps XLA's shapes static): a slot
//! holds one sequence's whole context (`max_model_len` positions), reserved at admission. A
//! running sequence therefore never runs out of cache and is never preempted; a request waits
//! in the queue until a slot is free, and [`Admission`] refuses it (HTTP 503) when the queue
//! is full.
//!
//! Prefix caching at the slot level: a freed slot keeps its keys and values, and the scheduler
//! remembers which tokens they are. A new request takes the free slot whose tokens share the
//! longest prefix with its prompt and prefills only the rest (its last token always, for the
//! logits of its first new token): a repeated system prompt, a chat history that grows, a
//! few-shot header.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A request's number, unique in one engine.
pub type SeqId = u64;

/// One prompt chunk to prefill this step: tokens `start..start + len` of `seq`'s prompt
/// into its `slot`; `last` when the chunk ends the prompt (its last logits give the first
/// new token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillChunk {
    /// The sequence.
    pub seq: SeqId,
    /// Its key/value slot.
    pub slot: usize,
    /// The chunk's first prompt position.
    pub start: usize,
    /// The chunk's length in tokens.
    pub len: usize,
    /// Whether the chunk ends the prompt.
    pub last: bool,
}

/// What one engine step runs: prompt chunks, then one decode step of every sequence whose
/// prompt is in the cache, each `(sequence, slot)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Chunks to prefill, oldest request first.
    pub prefill: Vec<PrefillChunk>,
    /// Sequences that decode one token, with their slots.
    pub decode: Vec<(SeqId, usize)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Prefilling,
    /// A fork holding its slot until its leader's prompt is cached (then copied into it).
    Forking,
    Decoding,
}

#[derive(Debug)]
struct Seq {
    /// The prompt's tokens, when known: a prefix already in a free slot is not prefilled again.
    prompt: Option<Arc<[u32]>>,
    /// Prompt tokens found in the slot's cache at admission.
    cached: usize,
    prompt_len: usize,
    prefilled: usize,
    slot: Option<usize>,
    phase: Phase,
    /// The sequences forked from this one's prompt (OpenAI's `n`): admitted with it.
    forks: Vec<SeqId>,
}

/// Waiting and running sequences and the slots they hold.
#[derive(Debug)]
pub struct Scheduler {
    slots: Vec<Option<SeqId>>,
    prefill_chunk: usize,
    waiting: VecDeque<SeqId>,
    /// Sequences holding a slot, in the order they were admitted.
    running: Vec<SeqId>,
    seqs: HashMap<SeqId, Seq>,
    /// The tokens each slot's cache holds, position by position (kept after its sequence ends).
    contents: Vec<Vec<u32>>,
}

impl Scheduler {
    /// A scheduler over `slots` key/value slots that prefills at most `prefill_chunk` prompt
    /// tokens a step (both at least 1).
    pub fn new(slots: usize, prefill_chunk: usize) -> Scheduler {
        Scheduler {
            slots: vec![None; slots.max(1)],
            prefill_chunk: prefill_chunk.max(1),
            waiting: VecDeque::new(),
            running: Vec::new(),
            seqs: HashMap::new(),
            contents: vec![Vec::new(); slots.max(1)],
        }
    }

    /// Queues `seq` with a prompt of `prompt_len` tokens (at least 1) whose tokens are not
    /// given: it reuses no cached prefix and leaves none.
    pub fn add(&mut self, seq: SeqId, prompt_len: usize) {
        self.queue(seq, &[], None, prompt_len);
    }

    /// Queues `seq` and `forks`, sequences of `prompt`: they are admitted together when as many
    /// slots are free, `seq` alone is prefilled (from the longest prefix of `prompt` a free
    /// slot holds, when `reuse`), and once its prompt is cached the forks decode beside it from
    /// copies of its slot. At most `slots() - 1` forks.
    pub fn add_group(&mut self, seq: SeqId, forks: &[SeqId], prompt: Arc<[u32]>, reuse: bool) {
        let len = prompt.len();
        self.queue(seq, forks, Some(prompt).filter(|_| reuse), len);
    }

    fn queue(&mut self, seq: SeqId, forks: &[SeqId], prompt: Option<Arc<[u32]>>, prompt_len: usize) {
        let prompt_len = prompt_len.max(1);
        let new = |forks: Vec<SeqId>| Seq {
            prompt: prompt.clone(),
            cached: 0,
            prompt_len,
            prefilled: 0,
            slot: None,
            phase: Phase::Waiting,
            forks,
        };
        for &f in forks {
            self.seqs.insert(f, new(Vec::new()));
        }
        self.seqs.insert(seq, new(forks.to_vec()));
        self.waiting.push_back(seq);
    }

    /// Prompt tokens `seq` found cached in its slot (0 before it holds one).
    pub fn cached_tokens(&self, seq: SeqId) -> usize {
        self.seqs.get(&seq).map_or(0, |s| s.cached)
    }

    /// Records that the decode step wrote `token`'s keys and values at `position` of `slot`.
    pub fn decoded(&mut self, slot: usize, position: usize, token: u32) {
        let c = &mut self.contents[slot];
        c.truncate(position);
        if c.len() == position {
            c.push(token);
        }
    }

    /// Forgets what every slot holds (after a failed step, whose writes are unknown).
    pub fn forget_contents(&mut self) {
        self.contents.iter_mut().for_each(Vec::clear);
    }

    /// The next step: waiting requests take free slots (first come, first served), prompt
    /// chunks up to the step's token budget, and every sequence whose prompt is cached decodes.
    /// Returns the plan and the sequences admitted to a slot by it.
    pub fn plan(&mut self) -> (Plan, Vec<SeqId>) {
        let mut admitted = Vec::new();
        // First come, first served: a group waits until its slots are free together.
        while let Some(&seq) = self.waiting.front() {
            let forks: Vec<SeqId> =
                self.seqs[&seq].forks.iter().copied().filter(|f| self.seqs.contains_key(f)).collect();
            let free: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].is_none()).collect();
            if free.len() < 1 + forks.len() {
                break;
            }
            self.waiting.pop_front();
            // The leader takes the free slot holding the longest prefix of its prompt.
            let prompt = self.seqs[&seq].prompt.clone();
            let shared = |slot: usize| match &prompt {
                Some(p) => self.contents[slot].iter().zip(p.iter()).take_while(|(a, b)| a == b).count(),
                None => 0,
            };
            let best = (0..free.len()).max_by_key(|&k| (shared(free[k]), std::cmp::Reverse(k))).unwrap_or(0);
            let reused = shared(free[best]).min(self.seqs[&seq].prompt_len - 1);
            let mut order = free.clone();
            order.swap(0, best);
            for (k, id) in std::iter::once(seq).chain(forks).enumerate() {
                let slot = order[k];
                self.slots[slot] = Some(id);
                self.contents[slot].truncate(if k == 0 { reused } else { 0 });
                let s = self.seqs.get_mut(&id).expect("a waiting sequence is known");
                s.slot = Some(slot);
                if k == 0 {
                    s.phase = Phase::Prefilling;
                    s.prefilled = reused;
                    s.cached = reused;
                } else {
                    s.phase = Phase::Forking;
                }
                self.running.push(id);
                admitted.push(id);
            }
        }
        let mut plan = Plan::default();
        let mut budget = self.prefill_chunk;
        for &seq in &self.running {
            let s = &self.seqs[&seq];
            let slot = s.slot.expect("a running sequence holds a slot");
            match s.phase {
                Phase::Decoding => plan.decode.push((seq, slot)),
                Phase::Prefilling if budget > 0 => {
                    let len = (s.prompt_len - s.prefilled).min(budget);
                    budget -= len;
                    let last = s.prefilled + len == s.prompt_len;
                    plan.prefill.push(PrefillChunk { seq, slot, start: s.prefilled, len, last });
                }
                _ => {}
            }
        }
        (plan, admitted)
    }

    /// Records that `chunk` was prefilled: after its prompt's last chunk the sequence decodes,
    /// and so do its forks that still hold their slots (returned with their slots, to be
    /// copied from the leader's).
    pub fn prefilled(&mut self, chunk: &PrefillChunk) -> Vec<(SeqId, usize)> {
        let Some(s) = self.seqs.get_mut(&chunk.seq) else { return Vec::new() };
        s.prefilled = (chunk.start + chunk.len).min(s.prompt_len);
        let written = match &s.prompt {
            Some(p) => p[..s.prefilled].to_vec(),
            None => Vec::new(),
        };
        self.contents[chunk.slot] = written;
        if s.prefilled < s.prompt_len {
            return Vec::new();
        }
        s.phase = Phase::Decoding;
        let forks = std::mem::take(&mut s.forks);
        let mut ready = Vec::new();
        for f in forks {
            if let Some(fs) = self.seqs.get_mut(&f) {
                fs.phase = Phase::Decoding;
                fs.prefilled = fs.prompt_len;
                let slot = fs.slot.expect("an admitted fork holds a slot");
                self.contents[slot] = self.contents[chunk.slot].clone();
                ready.push((f, slot));
            }
        }
        ready
    }

    /// Ends `seq` (finished, cancelled or failed): its slot is free for the next plan; forks
    /// still waiting for its prompt end with it. Returns whether it was known.
    pub fn finish(&mut self, seq: SeqId) -> bool {
        let Some(s) = self.seqs.remove(&seq) else { return false };
        for f in &s.forks {
            self.finish(*f);
        }
        if let Some(slot) = s.slot {
            self.slots[slot] = None;
        }
        self.running.retain(|&r| r != seq);
        self.waiting.retain(|&w| w != seq);
        true
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Sequences holding a slot (prefilling or decoding).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Every sequence known, waiting or running (the engine's iteration order).
    pub fn sequences(&self) -> Vec<SeqId> {
        self.running.iter().chain(&self.waiting).copied().collect()
    }

    /// The sequences holding a slot, in the order they were admitted.
    pub fn running_sequences(&self) -> Vec<SeqId> {
        self.running.clone()
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }
}

/// The bound on requests not yet holding a slot, checked when a request arrives so that a
/// full queue is refused at once (HTTP 503 with `Retry-After`) rather than after a step.
#[derive(Debug, Clone)]
pub struct Admission {
    pending: Arc<AtomicUsize>,
    limit: usize,
}

/// A request's place in the queue; dropping it (once the request holds a slot, or ends) gives
/// the place back.
#[derive(Debug)]
pub struct Ticket {
    pending: Arc<AtomicUsize>,
}

/// The queue is full: the request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server's queue is full ({limit} requests waiting); retry later")]
pub struct QueueFull {
    /// The queue's bound.
    pub limit: usize,
}

impl Admission {
    /// At most `limit` requests waiting for a slot.
    pub fn new(limit: usize) -> Admission {
        Admission { pending: Arc::new(AtomicUsize::new(0)), limit }
    }

    /// A place in the queue, or [`QueueFull`].
    pub fn enter(&self) -> Result<Ticket, QueueFull> {
        let taken = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1));
        match taken {
            Ok(_) => Ok(Ticket { pending: self.pending.clone() }),
            Err(_) => Err(QueueFull { limit: self.limit }),
        }
    }

    /// Requests holding a place now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_ids(p: &Plan) -> Vec<SeqId> {
        p.decode.iter().map(|d| d.0).collect()
    }

    #[test]
    fn a_request_joins_the_running_batch_at_the_next_step() {
        let mut s = Scheduler::new(4, 64);
        s.add(1, 10);
        let (p, admitted) = s.plan();
        assert_eq!(admitted, vec![1]);
        assert_eq!(p.prefill, vec![PrefillChunk { seq: 1, slot: 0, start: 0, len: 10, last: true }]);
        assert!(p.decode.is_empty());
        s.prefilled(&p.prefill[0]);
        // Sequence 1 decodes; 2 arrives while it does and is prefilled the very next step,
        // then decodes beside it: nobody waits for a batch to end.
        let (p, _) = s.plan();
        assert_eq!(decode_ids(&p), vec![1]);
        s.add(2, 5);
        let (p, admitted) = s.plan();
        assert_eq!(admitted, vec![2]);
        assert_eq!(p.prefill, vec![PrefillChunk { seq: 2, slot: 1, start: 0, len: 5, last: true }]);
        assert_eq!(decode_ids(&p), vec![1]);
        s.prefilled(&p.prefill[0]);
        let (p, _) = s.plan();
        assert_eq!(p.decode, vec![(1, 0), (2, 1)]);
    }

    #[test]
    fn a_finished_sequence_frees_its_slot_for_the_next_waiting_one() {
        let mut s = Scheduler::new(2, 64);
        for id in 1..=3 {
            s.add(id, 4);
        }
        let (p, admitted) = s.plan();
        assert_eq!(admitted, vec![1, 2]);
        assert_eq!(s.waiting(), 1);
        p.prefill.iter().for_each(|c| {
            s.prefilled(c);
        });
        // A disconnect (or a finish) ends 1: its slot goes to 3 at the next plan.
        assert!(s.finish(1));
        assert!(!s.finish(1), "finishing twice is a no-op");
        let (p, admitted) = s.plan();
        assert_eq!(admitted, vec![3]);
        assert_eq!(p.prefill[0].slot, 0, "3 takes the slot 1 held");
        assert_eq!(decode_ids(&p), vec![2]);
        assert_eq!((s.running(), s.waiting()), (2, 0));
        s.finish(2);
        s.finish(3);
        assert!(s.is_idle());
    }

    #[test]
    fn a_long_prompt_is_prefilled_in_chunks_between_decode_steps() {
        let mut s = Scheduler::new(4, 16);
        s.add(1, 3);
        let (p, _) = s.plan();
        s.prefilled(&p.prefill[0]);
        s.add(2, 40);
        let mut chunks = Vec::new();
        for _ in 0..3 {
            let (p, _) = s.plan();
            // Every step still decodes sequence 1.
            assert_eq!(decode_ids(&p), vec![1]);
            assert_eq!(p.prefill.len(), 1);
            chunks.push((p.prefill[0].start, p.prefill[0].len, p.prefill[0].last));
            s.prefilled(&p.prefill[0]);
        }
        assert_eq!(chunks, vec![(0, 16, false), (16, 16, false), (32, 8, true)]);
        let (p, _) = s.plan();
        assert_eq!(decode_ids(&p), vec![1, 2]);
    }

    #[test]
    fn the_prefill_budget_is_shared_by_the_step() {
        let mut s = Scheduler::new(4, 16);
        s.add(1, 10);
        s.add(2, 10);
        let (p, _) = s.plan();
        assert_eq!(
            p.prefill,
            vec![
                PrefillChunk { seq: 1, slot: 0, start: 0, len: 10, last: true },
                PrefillChunk { seq: 2, slot: 1, start: 0, len: 6, last: false },
            ]
        );
    }

    #[test]
    fn a_cancelled_waiting_request_leaves_the_queue() {
        let mut s = Scheduler::new(1, 8);
        s.add(1, 4);
        s.add(2, 4);
        s.plan();
        assert_eq!(s.sequences(), vec![1, 2]);
        assert!(s.finish(2));
        assert_eq!((s.waiting(), s.running()), (0, 1));
    }

    #[test]
    fn a_group_is_admitted_together_prefilled_once_and_its_forks_decode_after() {
        let mut s = Scheduler::new(3, 64);
        s.add(1, 4);
        s.add_group(2, &[3, 4], (0..6).collect::<Vec<u32>>().into(), false);
        s.add(5, 2);
        let (p, admitted) = s.plan();
        // Three slots: 1 takes one; the group of three waits for three, and 5 waits behind it.
        assert_eq!(admitted, vec![1]);
        assert_eq!(s.waiting(), 2);
        s.prefilled(&p.prefill[0]);
        s.finish(1);
        let (p, admitted) = s.plan();
        assert_eq!(admitted, vec![2, 3, 4]);
        assert_eq!(p.prefill, vec![PrefillChunk { seq: 2, slot: 0, start: 0, len: 6, last: true }]);
        assert!(p.decode.is_empty(), "the forks wait for the leader's prompt");
        assert_eq!(s.prefilled(&p.prefill[0]), vec![(3, 1), (4, 2)]);
        let (p, _) = s.plan();
        assert_eq!(p.decode, vec![(2, 0), (3, 1), (4, 2)]);
        assert!(p.prefill.is_empty());
        // Cancelling a leader before its prompt is cached ends its forks.
        let mut s = Scheduler::new(2, 4);
        s.add_group(7, &[8], (0..10).collect::<Vec<u32>>().into(), false);
        s.plan();
        assert!(s.finish(7));
        assert!(s.is_idle(), "the fork left with its leader");
    }

    #[test]
    fn a_prompt_reuses_the_longest_prefix_a_free_slot_holds() {
        let mut s = Scheduler::new(2, 64);
        let prompt = |v: &[u32]| -> Arc<[u32]> { v.into() };
        s.add_group(1, &[], prompt(&[5, 6, 7, 8]), true);
        let (p, _) = s.plan();
        s.prefilled(&p.prefill[0]);
        // Decoded 9 at position 4, then 10 at 5; then it ends, its slot keeping 5 6 7 8 9 10.
        s.decoded(0, 4, 9);
        s.decoded(0, 5, 10);
        s.finish(1);
        // A longer prompt sharing 5 tokens prefills from the 6th; the cached tokens are reported.
        s.add_group(2, &[], prompt(&[5, 6, 7, 8, 9, 11, 12]), true);
        let (p, _) = s.plan();
        assert_eq!(p.prefill, vec![PrefillChunk { seq: 2, slot: 0, start: 5, len: 2, last: true }]);
        assert_eq!(s.cached_tokens(2), 5);
        s.prefilled(&p.prefill[0]);
        // The same prompt again (slot 0 busy, slot 1 empty): nothing cached. After 2 ends, the
        // whole prompt is cached but its last token is prefilled again for its logits.
        s.add_group(3, &[], prompt(&[5, 6, 7, 8, 9, 11, 12]), true);
        let (p, _) = s.plan();
        assert_eq!((p.prefill[0].slot, p.prefill[0].start), (1, 0));
        s.prefilled(&p.prefill[0]);
        s.finish(2);
        s.finish(3);
        s.add_group(4, &[], prompt(&[5, 6, 7, 8, 9, 11, 12]), true);
        let (p, _) = s.plan();
        assert_eq!((p.prefill[0].start, p.prefill[0].len, s.cached_tokens(4)), (6, 1, 6));
        // A request that may not reuse (prompt logprobs need every row) prefills it all.
        s.finish(4);
        s.add_group(5, &[], prompt(&[5, 6, 7, 8, 9, 11, 12]), false);
        let (p, _) = s.plan();
        assert_eq!((p.prefill[0].start, s.cached_tokens(5)), (0, 0));
    }

    #[test]
    fn a_full_queue_refuses_until_a_place_is_given_back() {
        let a = Admission::new(2);
        let t1 = a.enter().expect("first place");
        let _t2 = a.enter().expect("second place");
        assert_eq!(a.enter().unwrap_err(), QueueFull { limit: 2 });
        assert_eq!(a.pending(), 2);
        drop(t1);
        assert_eq!(a.pending(), 1);
        assert!(a.enter().is_ok(), "a place given back is free again");
    }
}
