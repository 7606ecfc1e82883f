//! How one sequence's next token is chosen from its logits row, as vLLM's sampler chooses it:
//! the row's log-softmax read first (the logprobs a client asks for are the model's own), then
//! `min_tokens` (end tokens barred), `logit_bias`, the repetition, frequency and presence
//! penalties, and greedy (temperature 0) or the temperature, `min_p`, `top_k` and `top_p`
//! filters and a draw from the request's own seeded generator. Host code only.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`).
const GREEDY_BELOW: f64 = 1e-5;

/// The logprob JSON carries for an impossible token (JSON has no `-inf`; vLLM writes the same).
pub const LOGPROB_FLOOR: f32 = -9999.0;

/// How a request's tokens are chosen and when it ends (OpenAI's fields and vLLM's extensions).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Fewest tokens before an end token or a stop may end the sequence (vLLM's `min_tokens`).
    pub min_tokens: usize,
    /// 0: greedy; otherwise logits are divided by it and sampled.
    pub temperature: f64,
    /// Nucleus sampling's mass (`None`: 1, no filter).
    pub top_p: Option<f64>,
    /// Sample among the `k` most likely tokens only (`None`: all).
    pub top_k: Option<usize>,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f64,
    /// The sampling's seed (the same seed, the same tokens); `None`: drawn per request.
    pub seed: Option<u64>,
    /// The text ends before the first of these.
    pub stop: Vec<String>,
    /// These tokens end the sequence too (their text is not returned), as the end token does.
    pub stop_token_ids: Vec<u32>,
    /// The end-of-sequence tokens do not end it.
    pub ignore_eos: bool,
    /// Subtracted from a token's logit once it was generated at all (OpenAI's, -2 to 2).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit per time it was generated (OpenAI's, -2 to 2).
    pub frequency_penalty: f32,
    /// Logits of tokens in the prompt or the output divided by it (multiplied when negative);
    /// 1 is none (transformers' and vLLM's `repetition_penalty`).
    pub repetition_penalty: f32,
    /// Added to these tokens' logits before the penalties (OpenAI's `logit_bias`).
    pub logit_bias: Vec<(u32, f32)>,
    /// Each generated token's logprob and this many most likely alternatives (`None`: none).
    pub logprobs: Option<usize>,
    /// Each prompt token's logprob and this many alternatives (completions' `echo` with
    /// `logprobs`).
    pub prompt_logprobs: Option<usize>,
    /// Choices generated from the one prompt (each its own sequence, the prompt prefilled once).
    pub n: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            max_tokens: 16,
            min_tokens: 0,
            temperature: 0.0,
            top_p: None,
            top_k: None,
            min_p: 0.0,
            seed: None,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            logprobs: None,
            prompt_logprobs: None,
            n: 1,
        }
    }
}

/// One token's logprob and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub token: u32,
    /// Its log-probability under the model.
    pub logprob: f32,
    /// The most likely tokens there, most likely first (ties: lower id first).
    pub top: Vec<(u32, f32)>,
}

/// `row`'s log-softmax.
pub fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let log_sum = max as f64 + sum.ln();
    row.iter().map(|&x| ((x as f64 - log_sum) as f32).max(LOGPROB_FLOOR)).collect()
}

/// `token`'s logprob in `row` and the `k` most likely tokens.
pub fn token_logprob(row: &[f32], token: u32, k: usize) -> TokenLogprob {
    let lp = log_softmax(row);
    TokenLogprob { token, logprob: lp[token as usize], top: top_k(&lp, k) }
}

/// The `k` largest of `values` with their indices, largest first, ties by lower index.
fn top_k(values: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut order: Vec<u32> = (0..values.len() as u32).collect();
    let k = k.min(order.len());
    if k == 0 {
        return Vec::new();
    }
    let by = |a: &u32, b: &u32| values[*b as usize].total_cmp(&values[*a as usize]).then(a.cmp(b));
    order.select_nth_unstable_by(k - 1, by);
    order.truncate(k);
    order.sort_by(by);
    order.into_iter().map(|i| (i, values[i as usize])).collect()
}

/// One sequence's sampler: its own seeded generator.
#[derive(Debug, Clone)]
pub struct Sampler {
    rng: rand::rngs::StdRng,
}

impl Sampler {
    /// A sampler for choice `index` of a request seeded `seed`: choice 0 draws from `seed`
    /// itself, the others from seeds derived from it.
    pub fn new(seed: u64, index: usize) -> Sampler {
        let seed = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Sampler { rng: rand::rngs::StdRng::seed_from_u64(seed) }
    }

    /// The next token of a sequence with `prompt` and `generated` so far, from its logits
    /// `row`; `ends` are the tokens that end it (barred while `min_tokens` are not reached).
    pub fn choose(
        &mut self,
        row: &[f32],
        p: &SamplingParams,
        prompt: &[u32],
        generated: &[u32],
        ends: &[u32],
    ) -> u32 {
        let plain = generated.len() >= p.min_tokens
            && p.logit_bias.is_empty()
            && p.presence_penalty == 0.0
            && p.frequency_penalty == 0.0
            && p.repetition_penalty == 1.0;
        if plain && p.temperature < GREEDY_BELOW {
            argmax(row)
        } else {
            let mut scores = row.to_vec();
            self.adjust(&mut scores, p, prompt, generated, ends);
            if p.temperature < GREEDY_BELOW {
                argmax(&scores)
            } else {
                self.draw(&mut scores, p)
            }
        }
    }

    /// `min_tokens`, `logit_bias` and the penalties, in vLLM's order.
    fn adjust(
        &self,
        scores: &mut [f32],
        p: &SamplingParams,
        prompt: &[u32],
        generated: &[u32],
        ends: &[u32],
    ) {
        if generated.len() < p.min_tokens {
            for &t in ends {
                if let Some(s) = scores.get_mut(t as usize) {
                    *s = f32::NEG_INFINITY;
                }
            }
        }
        for &(t, b) in &p.logit_bias {
            if let Some(s) = scores.get_mut(t as usize) {
                *s += b;
            }
        }
        if p.repetition_penalty != 1.0 {
            let mut seen: Vec<u32> = prompt.iter().chain(generated).copied().collect();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(s) = scores.get_mut(t as usize) {
                    *s = if *s > 0.0 { *s / p.repetition_penalty } else { *s * p.repetition_penalty };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &t in generated {
                *counts.entry(t).or_default() += 1;
            }
            for (t, c) in counts {
                if let Some(s) = scores.get_mut(t as usize) {
                    *s -= p.frequency_penalty * c as f32 + p.presence_penalty;
                }
            }
        }
    }

    /// Temperature, `min_p`, `top_k`, `top_p`, then a draw.
    fn draw(&mut self, scores: &mut [f32], p: &SamplingParams) -> u32 {
        let t = p.temperature as f32;
        scores.iter_mut().for_each(|s| *s /= t);
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut order: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > f32::NEG_INFINITY).collect();
        if order.is_empty() {
            return argmax(scores);
        }
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let mut weights: Vec<f64> = order.iter().map(|&i| ((scores[i] - max) as f64).exp()).collect();
        if p.min_p > 0.0 {
            // Relative to the most likely token's probability, which has weight 1 here.
            let keep = weights.iter().take_while(|&&w| w >= p.min_p).count().max(1);
            weights.truncate(keep);
        }
        if let Some(k) = p.top_k {
            weights.truncate(k.max(1));
        }
        if let Some(top_p) = p.top_p {
            let total: f64 = weights.iter().sum();
            let mut acc = 0.0;
            let mut n = 0;
            for w in &weights {
                acc += w / total;
                n += 1;
                if acc >= top_p {
                    break;
                }
            }
            weights.truncate(n.max(1));
        }
        let total: f64 = weights.iter().sum();
        let mut x = self.rng.gen::<f64>() * total;
        for (j, w) in weights.iter().enumerate() {
            if x < *w {
                return order[j] as u32;
            }
            x -= w;
        }
        order[weights.len() - 1] as u32
    }
}

/// The first of equal maxima, as torch's argmax.
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &s) in row.iter().enumerate() {
        if s > row[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams::default()
    }

    #[test]
    fn log_softmax_is_the_log_of_the_normalized_exponentials() {
        let row = [1.0f32, 2.0, 3.0, -1.0];
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        for (got, &x) in log_softmax(&row).iter().zip(&row) {
            assert!((*got as f64 - ((x as f64).exp() / z).ln()).abs() < 1e-6);
        }
        let lp = token_logprob(&row, 0, 2);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
        assert!((lp.logprob as f64 - ((1f64).exp() / z).ln()).abs() < 1e-6);
        assert_eq!(log_softmax(&[0.0, f32::NEG_INFINITY])[1], LOGPROB_FLOOR);
    }

    #[test]
    fn top_k_breaks_ties_by_the_lower_id() {
        assert_eq!(top_k(&[0.5, 0.9, 0.9, 0.1], 3), vec![(1, 0.9), (2, 0.9), (0, 0.5)]);
        assert_eq!(top_k(&[0.5], 4), vec![(0, 0.5)]);
        assert!(top_k(&[0.5], 0).is_empty());
    }

    #[test]
    fn greedy_takes_the_argmax_after_bias_and_penalties() {
        let mut s = Sampler::new(0, 0);
        let row = [0.0f32, 3.0, 2.5, 1.0];
        assert_eq!(s.choose(&row, &params(), &[], &[], &[]), 1);
        // logit_bias moves the argmax.
        let p = SamplingParams { logit_bias: vec![(3, 2.5)], ..params() };
        assert_eq!(Sampler::new(0, 0).choose(&row, &p, &[], &[], &[]), 3);
        // repetition_penalty 2 on the prompt's token 1: 3.0 / 2 = 1.5 < 2.5.
        let p = SamplingParams { repetition_penalty: 2.0, ..params() };
        assert_eq!(Sampler::new(0, 0).choose(&row, &p, &[1], &[], &[]), 2);
        // A negative logit is multiplied: -1 * 2 = -2 for token 0 keeps it last.
        let mut scores = vec![-1.0f32, 0.5];
        Sampler::new(0, 0).adjust(&mut scores, &p, &[0], &[], &[]);
        assert_eq!(scores, vec![-2.0, 0.5]);
    }

    #[test]
    fn frequency_and_presence_count_generated_tokens_only() {
        let p = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..params() };
        let mut s = Sampler::new(0, 0);
        let row = [0.0f32, 3.0, 2.4];
        assert_eq!(s.choose(&row, &p, &[2, 2, 2], &[], &[]), 1, "the prompt is not penalized");
        // Token 1 once: 3.0 - 0.5 - 0.25 = 2.25 < 2.4.
        assert_eq!(s.choose(&row, &p, &[], &[1], &[]), 2);
        let mut scores = row.to_vec();
        s.adjust(&mut scores, &p, &[], &[1, 2, 2], &[]);
        assert_eq!(scores, vec![0.0, 2.25, 2.4 - 1.0 - 0.25]);
    }

    #[test]
    fn min_tokens_bars_the_end_tokens_until_reached() {
        let p = SamplingParams { min_tokens: 2, ..params() };
        let row = [0.0f32, 5.0, 1.0];
        let mut s = Sampler::new(0, 0);
        assert_eq!(s.choose(&row, &p, &[], &[], &[1]), 2);
        assert_eq!(s.choose(&row, &p, &[], &[2], &[1]), 2);
        assert_eq!(s.choose(&row, &p, &[], &[2, 2], &[1]), 1, "allowed from the third token on");
    }

    #[test]
    fn filters_leave_only_the_allowed_tokens_to_draw() {
        let row = [2.0f32, 1.9, 0.0, -0.5];
        let draws = |p: &SamplingParams| -> Vec<u32> {
            let mut s = Sampler::new(3, 0);
            let mut seen: Vec<u32> = (0..400).map(|_| s.choose(&row, p, &[], &[], &[])).collect();
            seen.sort_unstable();
            seen.dedup();
            seen
        };
        let hot = SamplingParams { temperature: 1.0, ..params() };
        assert_eq!(draws(&hot), vec![0, 1, 2, 3]);
        assert_eq!(draws(&SamplingParams { top_k: Some(2), ..hot.clone() }), vec![0, 1]);
        // min_p 0.5: exp(0 - 2) = 0.135 of the best is dropped, exp(-0.1) = 0.90 kept.
        assert_eq!(draws(&SamplingParams { min_p: 0.5, ..hot.clone() }), vec![0, 1]);
        // top_p 0.4: the best alone holds 0.47 of the mass.
        assert_eq!(draws(&SamplingParams { top_p: Some(0.4), ..hot.clone() }), vec![0]);
    }

    #[test]
    fn a_seed_repeats_and_choices_of_one_request_differ() {
        let row: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.1).collect();
        let p = SamplingParams { temperature: 1.0, ..params() };
        let run = |seed, index| -> Vec<u32> {
            let mut s = Sampler::new(seed, index);
            (0..20).map(|_| s.choose(&row, &p, &[], &[], &[])).collect()
        };
        assert_eq!(run(7, 0), run(7, 0));
        assert_ne!(run(7, 0), run(8, 0));
        assert_ne!(run(7, 0), run(7, 1));
    }
}
