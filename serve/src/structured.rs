//! Structured output through llguidance (the library behind vLLM's and llama.cpp's guided
//! decoding): a request's constraint — a JSON schema, any JSON object, a regex, a choice of
//! strings or a Lark grammar — is compiled once per request on the HTTP side into a
//! [`Matcher`], which gives the engine each step's mask of allowed tokens and takes each chosen
//! token. JSON is compact (no free whitespace between tokens, `,` and `:` as separators), so a
//! model cannot spend its budget on blanks.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

/// What a request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// A JSON value of this schema (`{"type": "object"}` for OpenAI's `json_object`).
    JsonSchema(Value),
    /// Text matching this regex (Rust's `regex` syntax).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect).
    Grammar(String),
}

/// The parser factory of one tokenizer: it turns constraints into matchers.
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammars")
    }
}

impl Grammars {
    /// The factory for the tokenizer whose `tokenizer.json` is `json`, over a model of `vocab`
    /// logits that ends at `eos` (a grammar that is complete allows only these).
    pub fn new(json: &[u8], vocab: usize, eos: &[u32]) -> Result<Grammars, String> {
        let mut tok = toktrie_hf_tokenizers::ByteTokenizer::from_json_bytes(json)
            .map_err(|e| format!("structured output: the tokenizer: {e}"))?;
        if !eos.is_empty() {
            tok.set_eos_tokens(eos);
        }
        let env =
            tok.into_tok_env(Some(vocab)).map_err(|e| format!("structured output: the tokenizer: {e}"))?;
        let factory = ParserFactory::new_simple(&env).map_err(|e| format!("structured output: {e}"))?;
        Ok(Grammars { factory: Arc::new(factory) })
    }

    /// A matcher of `c`, or why it does not compile.
    pub fn matcher(&self, c: &Constraint) -> Result<Matcher, String> {
        let grammar = match c {
            Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(compact(schema)),
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Choice(options) => {
                let alternatives: Vec<String> = options.iter().map(|o| lark_string(o)).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
            }
            Constraint::Grammar(lark) => TopLevelGrammar::from_lark(lark.clone()),
        };
        let parser = self.factory.create_parser(grammar).map_err(|e| e.to_string())?;
        let m = Matcher::new(Ok(parser));
        match m.get_error() {
            Some(e) => Err(e),
            None => Ok(m),
        }
    }
}

/// `schema` with llguidance's options for compact JSON (a schema that is not an object, such as
/// `true`, is wrapped so that it can carry them).
fn compact(schema: &Value) -> Value {
    let mut s = match schema {
        Value::Object(_) => schema.clone(),
        other => json!({"allOf": [other]}),
    };
    s["x-guidance"] = json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"});
    s
}

/// `s` as a Lark string literal.
fn lark_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The tokens `m` allows next, as a test over token ids, or the matcher's error.
pub fn allowed(m: &mut Matcher) -> Result<impl Fn(u32) -> bool, String> {
    let mask = m.compute_mask().map_err(|e| e.to_string())?;
    Ok(move |t: u32| mask.is_allowed(t))
}
