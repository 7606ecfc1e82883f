//! Text generation on a static key/value cache: the prompts (left-padded into one batch, with
//! an attention mask) are prefilled in one pass, then each step feeds one token per sequence
//! with the same shapes — the write position is a tensor — so every decode step runs the
//! same cached executables (eagerly, as one fused region, or as one compiled program).
//! Choosing the next token happens on the host from the last position's logits: greedy,
//! or sampling with temperature, top-k, top-p and a repetition penalty from a seeded RNG.

use eager::nn::StaticKvCache;
use eager::{DType, Tensor};
use rand::{Rng, SeedableRng};

use crate::config::Config;
use crate::tokenizer::Tokenizer;
use crate::{ModelError, Result};

/// A decoder that generation can drive: one call computes logits `[B, T, vocab]` of ids
/// `[B, T]` at rope/learned `positions` `[B, T]` under a bool `mask` `[B, 1, T, S]`; with a
/// cache it writes the new keys and values at the slot tensor `start` and `S` is the cache's
/// capacity, without one `S = T`.
pub trait CausalLm {
    /// The model's configuration (vocabulary size, positions, cache shapes).
    fn config(&self) -> &Config;

    /// Readies the model for inference only, as a server that owns it does: its weights stop
    /// taking gradients and its projections are stored in the layout the device's few-row
    /// products read fastest (`Var::store_transposed` on the CPU). The model is not trained
    /// afterwards. The default does nothing.
    fn prepare_inference(&self) -> Result<()> {
        Ok(())
    }

    /// One static cache per layer, for `batch` sequences of up to `capacity` positions.
    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>>;

    /// One forward pass of `ids` at `positions` under `mask`: logits `[B, T, vocab]`; with `cache`, keys and values are written at `start` and read back from the cache.
    fn step(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: Option<(&mut [StaticKvCache], &Tensor)>,
    ) -> Result<Tensor>;

    /// As [`CausalLm::step`], with the logits of the positions `rows` (i64 `[R]`) of each
    /// sequence only, `[B, R, vocab]` (transformers' `logits_to_keep`): a prefill needs its last
    /// position's, and the output head is a large product per position.
    fn step_at(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: Option<(&mut [StaticKvCache], &Tensor)>,
        rows: &Tensor,
    ) -> Result<Tensor> {
        Ok(self.step(ids, positions, mask, cache)?.index_select(1, rows)?)
    }

    /// Logits `[B, T, vocab]` of the whole sequence `ids` `[B, T]` (transformers'
    /// `model(ids).logits`); `attention_mask` `[B, T]` (1 for tokens, 0 for padding) as
    /// transformers takes it, positions counted over the tokens only.
    fn logits(&self, ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Tensor> {
        if ids.rank() != 2 {
            return Err(ModelError::Generate(format!("ids must be [B, T], got {}", ids.spec())));
        }
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let (valid, positions) = match attention_mask {
            Some(m) => {
                let valid = m.ne_scalar(0.0)?;
                let pos = valid.to_dtype(DType::I64)?.cumsum(1)?.sub_scalar(1.0)?.maximum_scalar(0.0)?;
                (valid, pos)
            }
            None => (
                Tensor::full_on(&[b, t], 1.0, DType::Bool, ids.device())?,
                Tensor::arange_on(0.0, t as f64, 1.0, DType::I64, ids.device())?
                    .unsqueeze(0)?
                    .broadcast_to(&[b, t])?,
            ),
        };
        let start = Tensor::from_slice_on(&[0i64], &[], ids.device())?;
        let mask = step_mask(&valid, &start, t)?;
        self.step(ids, &positions, &mask, None)
    }
}

/// What [`CausalLm::prepare_inference`] does for a model: none of its parameters takes
/// gradients any more, and on the CPU its `projections` (the few-row products of a decode
/// step) are stored transposed, the layout the CPU's GEMM reads fastest; other devices choose
/// their own layouts.
pub fn prepare_for_inference(
    model: &dyn eager::nn::Module,
    projections: &[&eager::nn::Linear],
) -> Result<()> {
    for (_, v) in model.named_parameters() {
        if v.is_parameter() {
            v.set_requires_grad(false)?;
        }
    }
    // Not over a mesh either: its weights' split is along their stored dims (and on the CPU
    // plugin the transposes of large split weights, launched back to back, hung in a collective).
    let first = projections.first().map(|p| p.weight.get());
    if first.is_some_and(|w| w.device().kind != eager::DeviceKind::Cpu || w.sharding().is_some()) {
        return Ok(());
    }
    for p in projections {
        p.weight.store_transposed()?;
    }
    Ok(())
}

/// Bool `[B, 1, T, S]`: query `i` (at slot `start + i`) sees slot `p` when `p <= start + i`
/// and `key_valid[b, p]` (`[B, S]`, false at padding).
pub fn step_mask(key_valid: &Tensor, start: &Tensor, t: usize) -> Result<Tensor> {
    let (b, s) = (key_valid.shape()[0] as isize, key_valid.shape()[1]);
    let dev = key_valid.device();
    let slots = Tensor::arange_on(0.0, s as f64, 1.0, DType::I64, dev)?.reshape(&[1, 1, 1, -1])?;
    let queries = Tensor::arange_on(0.0, t as f64, 1.0, DType::I64, dev)?
        .add(&start.reshape(&[1])?)?
        .reshape(&[1, 1, -1, 1])?;
    let causal = slots.le(&queries)?;
    let valid = key_valid.reshape(&[b, 1, 1, s as isize])?;
    Ok(causal.where_cond(&valid, &causal)?) // causal and valid
}

/// `mask` (bool `[B, 1, T, S]`, as [`step_mask`] makes it) within a sliding window: query `i`
/// (at slot `start + i`) keeps slot `p` only when `p > start + i - window` (transformers'
/// `sliding_window_overlay`, over cache slots as transformers' is over cache positions).
/// `start` is one slot (i64 `[]`, every row) or one per row (`[B]`, as a server's decode
/// step writes each row at its own slot).
pub fn window_mask(mask: &Tensor, start: &Tensor, window: usize) -> Result<Tensor> {
    let (t, s) = (mask.shape()[2], mask.shape()[3]);
    let dev = mask.device();
    let slots = Tensor::arange_on(0.0, s as f64, 1.0, DType::I64, dev)?.reshape(&[1, 1, 1, -1])?;
    let floor = Tensor::arange_on(0.0, t as f64, 1.0, DType::I64, dev)?
        .reshape(&[1, 1, -1, 1])?
        .add(&start.reshape(&[-1, 1, 1, 1])?)?
        .sub_scalar(window as f64)?;
    let inside = slots.gt(&floor)?;
    Ok(inside.where_cond(mask, &inside)?) // inside and mask
}

/// How each decode step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeMode {
    /// Op by op, each a cached executable.
    #[default]
    Eager,
    /// The step's ops recorded and run as one program (`eager::fused`).
    Fused,
    /// The step traced once into one compiled program (`eager::compile`).
    Compiled,
}

/// What [`generate`] does; `Default` is greedy, 32 new tokens, no stops.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate per sequence.
    pub max_new_tokens: usize,
    /// 0: greedy (argmax); otherwise logits are divided by it and sampled.
    pub temperature: f64,
    /// Sample among the `k` most likely tokens only.
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities add up to `p` (nucleus sampling).
    pub top_p: Option<f64>,
    /// transformers' `repetition_penalty`: scores of tokens already in the sequence are
    /// divided by it (multiplied when negative); 1 is none.
    pub repetition_penalty: f64,
    /// Seed of the sampling (the same seed, the same tokens).
    pub seed: u64,
    /// A sequence ends after one of these tokens (kept in its output).
    pub stop_tokens: Vec<u32>,
    /// A sequence ends once its decoded new text contains one of these (needs a tokenizer).
    pub stop_strings: Vec<String>,
    /// The id left padding uses (its value never matters: it is masked).
    pub pad_token_id: u32,
    /// How each decode step runs: op by op, fused, or compiled.
    pub mode: DecodeMode,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 32,
            temperature: 0.0,
            top_k: None,
            top_p: None,
            repetition_penalty: 1.0,
            seed: 0,
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            pad_token_id: 0,
            mode: DecodeMode::Eager,
        }
    }
}

/// Generates up to `max_new_tokens` after each prompt (a batch, left-padded), calling
/// `on_token(sequence, token)` as each token is chosen; returns each sequence's new tokens.
pub fn generate(
    model: &dyn CausalLm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    tokenizer: Option<&Tokenizer>,
    mut on_token: impl FnMut(usize, u32),
) -> Result<Vec<Vec<u32>>> {
    let vocab = model.config().vocab_size;
    if prompts.is_empty() || prompts.iter().any(|p| p.is_empty()) {
        return Err(ModelError::Generate("every prompt needs at least one token".into()));
    }
    if let Some(bad) = prompts.iter().flatten().find(|&&id| id as usize >= vocab) {
        return Err(ModelError::Generate(format!("token id {bad} is outside the vocabulary ({vocab})")));
    }
    if !opts.stop_strings.is_empty() && tokenizer.is_none() {
        return Err(ModelError::Generate("stop strings need a tokenizer".into()));
    }
    if opts.temperature < 0.0
        || opts.temperature.is_nan()
        || opts.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0))
    {
        return Err(ModelError::Generate(format!(
            "needs temperature >= 0 and top_p in (0, 1], got {} and {:?}",
            opts.temperature, opts.top_p
        )));
    }
    let _no_grad = eager::NoGradGuard::new();
    let compiled = opts.mode == DecodeMode::Compiled;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let (b, t) = (prompts.len(), prompt_length(longest, opts));
    let capacity = cache_capacity(longest, opts);
    let device = eager::default_device();
    let mut ids = Vec::with_capacity(b * t);
    let mut positions = Vec::with_capacity(b * t);
    let mut valid = Vec::with_capacity(b * capacity);
    for p in prompts {
        let pad = t - p.len();
        ids.extend(std::iter::repeat_n(opts.pad_token_id as i64, pad).chain(p.iter().map(|&x| x as i64)));
        positions.extend((0..t).map(|i| i.saturating_sub(pad) as i64));
        valid.extend((0..capacity).map(|i| (i >= pad) as u8));
    }
    let key_valid = Tensor::from_bytes_on(&valid, &[b, capacity], DType::Bool, device)?;
    let mut cache = model.new_cache(b, capacity)?;
    let start = Tensor::from_slice_on(&[0i64], &[], device)?;
    let mask = step_mask(&key_valid, &start, t)?;
    let ids_t = Tensor::from_slice_on(&ids, &[b, t], device)?;
    let pos_t = Tensor::from_slice_on(&positions, &[b, t], device)?;
    // The prefill is one pass over every prompt position; the head runs on the last one only.
    let last_row = Tensor::from_slice_on(&[t as i64 - 1], &[1], device)?;
    let logits = if compiled {
        let prefill = eager::compile("prefill_step", |args: &[Tensor]| {
            with_caches("prefill_step", args, 5, |c| {
                model.step_at(&args[0], &args[1], &args[3], Some((c, &args[2])), &args[4])
            })
        })
        .donate_from(5);
        call_with_caches(&prefill, &[&ids_t, &pos_t, &start, &mask, &last_row], &mut cache)?
    } else {
        model.step_at(&ids_t, &pos_t, &mask, Some((&mut cache, &start)), &last_row)?
    };
    let mut last = last_logits(&logits)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); b];
    let mut done = vec![false; b];
    let mut next_pos: Vec<i64> = prompts.iter().map(|p| p.len() as i64).collect();
    let decode = eager::compile("decode_step", |args: &[Tensor]| {
        with_caches("decode_step", args, 4, |c| model.step(&args[0], &args[1], &args[3], Some((c, &args[2]))))
    })
    // The caches are written in place: the step's new cache takes the old one's memory.
    .donate_from(4);
    for step in 0..opts.max_new_tokens {
        let mut tokens = Vec::with_capacity(b);
        for (i, row) in last.chunks(vocab).enumerate() {
            if done[i] {
                tokens.push(opts.pad_token_id as i64);
                continue;
            }
            let history: Vec<u32> = prompts[i].iter().chain(&out[i]).copied().collect();
            let tok = choose(row, &history, opts, &mut rng);
            out[i].push(tok);
            on_token(i, tok);
            let stopped_by_string = match tokenizer {
                Some(tk) if !opts.stop_strings.is_empty() => {
                    let text = tk.decode(&out[i], true)?;
                    opts.stop_strings.iter().any(|s| text.contains(s.as_str()))
                }
                _ => false,
            };
            if opts.stop_tokens.contains(&tok) || stopped_by_string {
                done[i] = true;
            }
            tokens.push(tok as i64);
        }
        if done.iter().all(|&d| d) || step + 1 == opts.max_new_tokens {
            break;
        }
        let ids_t = Tensor::from_slice_on(&tokens, &[b, 1], device)?;
        let pos_t = Tensor::from_slice_on(&next_pos, &[b, 1], device)?;
        next_pos.iter_mut().for_each(|p| *p += 1);
        let start = Tensor::from_slice_on(&[(t + step) as i64], &[], device)?;
        let mask = step_mask(&key_valid, &start, 1)?;
        let logits = match opts.mode {
            DecodeMode::Eager => model.step(&ids_t, &pos_t, &mask, Some((&mut cache, &start)))?,
            DecodeMode::Fused => eager::fused(|| {
                model
                    .step(&ids_t, &pos_t, &mask, Some((&mut cache, &start)))
                    .map_err(|e| crate::to_eager("decode_step", e))
            })?,
            DecodeMode::Compiled => call_with_caches(&decode, &[&ids_t, &pos_t, &start, &mask], &mut cache)?,
        };
        last = last_logits(&logits)?;
    }
    Ok(out)
}

/// The prompt length [`generate`] prefills at for prompts of up to `longest` tokens (left
/// padding fills the rest). A compiled program is one per shape, so in
/// [`DecodeMode::Compiled`] lengths come in buckets — a multiple of 16 up to 256, then a power
/// of two — and a new prompt length runs the programs compiled already; else `longest`.
pub fn prompt_length(longest: usize, opts: &GenerateOptions) -> usize {
    match opts.mode {
        DecodeMode::Compiled if longest <= 256 => longest.max(1).next_multiple_of(16),
        DecodeMode::Compiled => longest.next_power_of_two(),
        _ => longest,
    }
}

/// The positions of the key/value cache [`generate`] allocates for prompts of up to `longest`
/// tokens: the prompt length plus the token budget, rounded up to a multiple of 64 in
/// [`DecodeMode::Compiled`] (so that a new budget runs the same decode program).
pub fn cache_capacity(longest: usize, opts: &GenerateOptions) -> usize {
    let exact = prompt_length(longest, opts) + opts.max_new_tokens;
    match opts.mode {
        DecodeMode::Compiled => exact.next_multiple_of(64),
        _ => exact,
    }
}

/// The body of a compiled step: the caches are `args[first..]` (keys and values of each layer
/// in turn); `step` runs the model on them. Returns the logits, then each layer's new keys
/// and values in the same order.
fn with_caches(
    name: &'static str,
    args: &[Tensor],
    first: usize,
    step: impl FnOnce(&mut [StaticKvCache]) -> Result<Tensor>,
) -> eager::Result<Vec<Tensor>> {
    let mut c: Vec<StaticKvCache> = args[first..]
        .chunks(2)
        .map(|kv| StaticKvCache::from_parts(kv[0].clone(), kv[1].clone()))
        .collect::<eager::Result<_>>()?;
    let logits = step(&mut c).map_err(|e| crate::to_eager(name, e))?;
    let mut outs = vec![logits];
    outs.extend(c.into_iter().flat_map(StaticKvCache::into_parts).flat_map(|(k, v)| [k, v]));
    Ok(outs)
}

/// Calls a compiled step (built with [`with_caches`]) on `head` and the caches, which it
/// donates: each cache then holds the step's new keys and values. Returns the logits.
fn call_with_caches<F>(
    step: &eager::Compiled<F>,
    head: &[&Tensor],
    cache: &mut [StaticKvCache],
) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> eager::Result<Vec<Tensor>>,
{
    let held: Vec<Tensor> =
        cache.iter().map(|c| Ok([c.keys()?, c.values()?])).collect::<Result<Vec<_>>>()?.concat();
    let mut args: Vec<&Tensor> = head.to_vec();
    args.extend(held.iter());
    let mut outs = step.call(&args)?.into_iter();
    let logits =
        outs.next().ok_or_else(|| ModelError::Generate("the compiled step returned nothing".into()))?;
    for c in cache.iter_mut() {
        let lost = || ModelError::Generate("the compiled step lost a cache".into());
        let (k, v) = (outs.next().ok_or_else(lost)?, outs.next().ok_or_else(lost)?);
        *c = StaticKvCache::from_parts(k, v)?;
    }
    Ok(logits)
}

/// The last position's logits of `[B, T, vocab]`, as f32 on the host, `B × vocab` values.
fn last_logits(logits: &Tensor) -> Result<Vec<f32>> {
    let t = logits.shape()[1];
    Ok(logits.narrow(1, t - 1, 1)?.to_dtype(DType::F32)?.to_vec::<f32>()?)
}

/// The next token from one row of logits, as transformers' logits processors and warpers do
/// it: repetition penalty (over `history`, the tokens so far), then greedy, or temperature,
/// top-k, top-p and a draw from `rng`. [`generate`] and a server's engine both choose with it.
pub fn choose(row: &[f32], history: &[u32], opts: &GenerateOptions, rng: &mut rand::rngs::StdRng) -> u32 {
    let mut scores: Vec<f32> = row.to_vec();
    if opts.repetition_penalty != 1.0 {
        let p = opts.repetition_penalty as f32;
        let mut seen = history.to_vec();
        seen.sort_unstable();
        seen.dedup();
        for &id in &seen {
            let s = &mut scores[id as usize];
            *s = if *s < 0.0 { *s * p } else { *s / p };
        }
    }
    if opts.temperature == 0.0 {
        // The first of equal maxima, as torch's argmax.
        let mut best = 0;
        for (i, &s) in scores.iter().enumerate() {
            if s > scores[best] {
                best = i;
            }
        }
        return best as u32;
    }
    scores.iter_mut().for_each(|s| *s /= opts.temperature as f32);
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut keep = order.len();
    if let Some(k) = opts.top_k {
        keep = keep.min(k.max(1));
    }
    let max = scores[order[0]];
    let weights: Vec<f64> = order[..keep].iter().map(|&i| ((scores[i] - max) as f64).exp()).collect();
    let total: f64 = weights.iter().sum();
    if let Some(p) = opts.top_p {
        // The smallest prefix whose probability reaches p (at least one token).
        let mut acc = 0.0;
        let mut n = 0;
        for w in &weights {
            acc += w / total;
            n += 1;
            if acc >= p {
                break;
            }
        }
        keep = n.max(1);
    }
    let weights = &weights[..keep];
    let total: f64 = weights.iter().sum();
    let mut x = rng.gen::<f64>() * total;
    for (j, w) in weights.iter().enumerate() {
        if x < *w {
            return order[j] as u32;
        }
        x -= w;
    }
    order[keep - 1] as u32
}
