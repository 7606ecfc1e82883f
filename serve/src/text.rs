//! A sequence's text as its tokens arrive: each new token gives the text it adds (a delta for
//! a stream), never half of a UTF-8 character and never the beginning of a stop string that
//! may still complete; a stop string ends the text before it, as OpenAI's `stop` does (the
//! stop string itself is not returned). Tokens are decoded incrementally, as `tokenizers`'
//! `DecodeStream` does (a window of the last tokens, not the whole output at every token).

use eager_models::Tokenizer;

/// What one token added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Text that is final now (may be empty while characters or a stop string are pending).
    pub text: String,
    /// A stop string was reached: the sequence ends, its text ends before the stop string.
    pub stopped: bool,
}

/// The decoded text of a sequence's new tokens, emitted in deltas.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    /// The tokens so far.
    tokens: Vec<u32>,
    /// The text decoded so far (complete characters only).
    full: String,
    /// `DecodeStream`'s state: the window of tokens still decoded together, the text of its
    /// first part, and where that part ends.
    window: Vec<u32>,
    prefix: String,
    prefix_index: usize,
    /// Bytes of the decoded text already emitted.
    emitted: usize,
    stops: Vec<String>,
    /// Whether the stops are looked for yet, and from which byte on.
    armed: bool,
    armed_at: usize,
    /// The stop string found.
    matched: Option<String>,
}

impl TextStream {
    /// A stream that ends at any of `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> TextStream {
        TextStream {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            armed: true,
            ..Default::default()
        }
    }

    /// Adds `token`; returns the text that is final now.
    pub fn push(&mut self, token: u32, tokenizer: &Tokenizer) -> eager_models::Result<Delta> {
        self.tokens.push(token);
        let step = tokenizers::step_decode_stream(
            &*tokenizer.inner,
            vec![token],
            true,
            &mut self.window,
            &mut self.prefix,
            &mut self.prefix_index,
        );
        match step {
            Ok(Some(piece)) => self.full.push_str(&piece),
            Ok(None) => {}
            // A decoder whose window's text does not extend its prefix (some clean-up rules):
            // the whole output decoded once, and the window starts again after it.
            Err(_) => {
                let whole = tokenizer.decode(&self.tokens, true)?;
                self.full = whole.trim_end_matches('\u{FFFD}').to_string();
                self.window.clear();
                self.prefix.clear();
                self.prefix_index = 0;
            }
        }
        let full = std::mem::take(&mut self.full);
        let delta = self.advance(&full, false);
        self.full = full;
        Ok(delta)
    }

    /// The text still held back (a partial stop string, an unfinished character) once the
    /// sequence ends for another reason.
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> eager_models::Result<String> {
        // An unfinished character at the very end decodes as U+FFFD, as a whole decode gives it.
        let tail = tokenizer.decode(&self.window, true)?;
        let mut full = std::mem::take(&mut self.full);
        if tail.len() > self.prefix.len() && tail.starts_with(self.prefix.as_str()) {
            full.push_str(&tail[self.prefix.len()..]);
        }
        let text = self.advance(&full, true).text;
        self.full = full;
        Ok(text)
    }

    /// The whole text decoded so far, emitted or not.
    pub fn text(&self) -> &str {
        &self.full
    }

    /// The delta of `full` past what was emitted: up to a stop string (then stopped), or up to
    /// what can no longer change (all of it when `last`).
    fn advance(&mut self, full: &str, last: bool) -> Delta {
        // Decoding more tokens can rewrite the tail (a byte-level character split over two
        // tokens); what was emitted is kept as emitted.
        let from = floor_boundary(full, self.emitted.min(full.len()));
        if self.armed {
            let back = from.saturating_sub(self.longest_stop()).max(self.armed_at);
            let search_from = floor_boundary(full, back);
            let hit = self
                .stops
                .iter()
                .filter_map(|s| full[search_from..].find(s.as_str()).map(|i| (search_from + i, s)))
                .min_by_key(|h| h.0);
            if let Some((at, stop)) = hit {
                let at = at.max(from);
                self.emitted = at;
                self.matched = Some(stop.clone());
                return Delta { text: full[from..at].to_string(), stopped: true };
            }
        }
        let mut end = full.len();
        if !last {
            // An unfinished character decodes as U+FFFD until its last byte arrives.
            end = full.trim_end_matches('\u{FFFD}').len();
            if self.armed {
                end -= self.pending_stop_prefix(&full[..end]);
            }
        }
        let end = floor_boundary(full, end.max(from));
        self.emitted = end;
        Delta { text: full[from..end].to_string(), stopped: false }
    }

    /// Whether stop strings end the text (not before `min_tokens`, as vLLM's stop checker).
    pub fn arm(&mut self, armed: bool) {
        if armed && !self.armed {
            // A stop string already passed as text stays text.
            self.armed_at = self.emitted;
        }
        self.armed = armed;
    }

    /// The stop string that ended the text, once one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    fn longest_stop(&self) -> usize {
        self.stops.iter().map(String::len).max().unwrap_or(0)
    }

    /// Bytes at the end of `text` that begin some stop string (held until it completes or not).
    fn pending_stop_prefix(&self, text: &str) -> usize {
        let mut held = 0;
        for s in &self.stops {
            for n in (1..s.len()).rev() {
                if n > held && s.is_char_boundary(n) && text.ends_with(&s[..n]) {
                    held = n;
                    break;
                }
            }
        }
        held
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deltas of a sequence whose decoded text is each of `texts` in turn, and whether a
    /// stop string ended it.
    fn run(stops: &[&str], texts: &[&str]) -> (Vec<String>, bool) {
        let mut t = TextStream::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for full in texts {
            let d = t.advance(full, false);
            out.push(d.text);
            if d.stopped {
                return (out, true);
            }
        }
        out.push(t.advance(texts.last().copied().unwrap_or(""), true).text);
        (out, false)
    }

    #[test]
    fn deltas_add_up_to_the_text() {
        let (out, stopped) = run(&[], &["Hel", "Hello", "Hello world"]);
        assert_eq!(out, vec!["Hel", "lo", " world", ""]);
        assert!(!stopped);
    }

    #[test]
    fn a_stop_string_ends_the_text_before_it_and_is_held_while_it_may_complete() {
        let (out, stopped) = run(&["\n\n"], &["one", "one\n", "one\n\n", "one\n\ntwo"]);
        assert_eq!(out, vec!["one", "", ""]);
        assert!(stopped);
        // A prefix of a stop string that does not complete is emitted after all.
        let (out, stopped) = run(&["END"], &["a", "aEN", "aENd"]);
        assert_eq!(out, vec!["a", "", "ENd", ""], "`EN` is held while it may become END");
        assert!(!stopped);
        // Inside one token's text, with text before it in the same token.
        let (out, stopped) = run(&["stop"], &["go ", "go and stop here"]);
        assert_eq!(out.concat(), "go and ");
        assert!(stopped);
    }

    #[test]
    fn a_disarmed_stream_passes_stop_strings_and_names_the_one_that_ends_it() {
        let mut t = TextStream::new(vec!["x".into(), "yz".into()]);
        t.arm(false);
        assert_eq!(t.advance("ax", false).text, "ax", "not armed: x is text");
        t.arm(true);
        let d = t.advance("axbyzc", false);
        assert_eq!((d.text.as_str(), d.stopped, t.matched()), ("b", true, Some("yz")));
    }

    #[test]
    fn an_unfinished_character_waits_for_its_last_byte() {
        let (out, _) = run(&[], &["caf", "caf\u{FFFD}", "café"]);
        assert_eq!(out, vec!["caf", "", "é", ""]);
    }
}
