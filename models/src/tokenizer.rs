//! Tokenizers of a checkpoint: `tokenizer.json` through Hugging Face's own `tokenizers` crate
//! (the file transformers' fast tokenizers read), special tokens from
//! `tokenizer_config.json`, and the chat template (`chat_template.jinja`, or the config's
//! `chat_template`) rendered with minijinja as transformers renders it with jinja2. A new
//! byte-level BPE can be trained on texts and saved as the files transformers loads.

use std::path::Path;

use serde_json::Value;

use crate::{io_error, ModelError, Result};

/// A checkpoint's tokenizer: `tokenizer.json` read by Hugging Face's `tokenizers`, with the special tokens and chat template of `tokenizer_config.json`.
pub struct Tokenizer {
    /// The `tokenizers` crate's tokenizer.
    pub inner: tokenizers::Tokenizer,
    /// The beginning-of-sequence token's text, if the checkpoint names one.
    pub bos_token: Option<String>,
    /// The end-of-sequence token's text, if the checkpoint names one.
    pub eos_token: Option<String>,
    /// The padding token's text, if the checkpoint names one.
    pub pad_token: Option<String>,
    /// The chat template (Jinja), from `tokenizer_config.json` or `chat_template.jinja`.
    pub chat_template: Option<String>,
}

/// A role and its text, as a chat template receives `messages`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl Tokenizer {
    /// Reads `tokenizer.json`, `tokenizer_config.json` and any `chat_template.jinja` of `dir`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Tokenizer> {
        let dir = dir.as_ref();
        let file = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", file.display())))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Value = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ModelError::Config {
                path: cfg_path.clone(),
                msg: format!("not valid JSON: {e}"),
            })?,
            Err(_) => Value::Null,
        };
        // A special token is a string or an object with its `content`.
        let special = |k: &str| -> Option<String> {
            match cfg.get(k)? {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("content").and_then(Value::as_str).map(String::from),
                _ => None,
            }
        };
        let jinja = dir.join("chat_template.jinja");
        let chat_template = if jinja.exists() {
            Some(std::fs::read_to_string(&jinja).map_err(io_error(&jinja))?)
        } else {
            cfg.get("chat_template").and_then(Value::as_str).map(String::from)
        };
        Ok(Tokenizer {
            inner,
            bos_token: special("bos_token"),
            eos_token: special("eos_token"),
            pad_token: special("pad_token"),
            chat_template,
        })
    }

    /// Token ids of `text`; `special` adds what the tokenizer's post-processor adds (BOS, …),
    /// as transformers' `add_special_tokens=True`.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, special).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; `skip_special` leaves special tokens out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// A byte-level BPE of up to `vocab_size` tokens (fewer when the texts run out of pairs to
    /// merge) trained on `texts` (the kind GPT-2 and Llama 3
    /// use: any text encodes, nothing is unknown), with `<s>`, `</s>` and `<pad>` as its
    /// special tokens, ids 0, 1 and 2; transformers' `train_new_from_iterator`. The vocabulary
    /// holds the 256 byte symbols and the special tokens at least.
    pub fn train_byte_level_bpe(texts: &[&str], vocab_size: usize) -> Result<Tokenizer> {
        use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
        use tokenizers::models::TrainerWrapper;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        use tokenizers::AddedToken;
        let specials = ["<s>", "</s>", "<pad>"];
        let least = ByteLevel::alphabet().len() + specials.len();
        if vocab_size < least {
            return Err(ModelError::Tokenizer(format!(
                "train_byte_level_bpe: vocab_size {vocab_size} is below the {least} byte symbols and special tokens it must hold"
            )));
        }
        let mut trainer = TrainerWrapper::from(
            BpeTrainerBuilder::new()
                .vocab_size(vocab_size)
                .show_progress(false)
                .special_tokens(specials.iter().map(|t| AddedToken::from(*t, true)).collect())
                .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
                .build(),
        );
        let mut inner = tokenizers::Tokenizer::new(BPE::default());
        inner.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
        inner.with_decoder(Some(ByteLevel::default()));
        inner
            .train(&mut trainer, texts.iter())
            .map_err(|e| ModelError::Tokenizer(format!("train_byte_level_bpe: {e}")))?;
        let [bos, eos, pad] = specials.map(|t| Some(t.to_string()));
        Ok(Tokenizer { inner, bos_token: bos, eos_token: eos, pad_token: pad, chat_template: None })
    }

    /// Writes `tokenizer.json`, `tokenizer_config.json` (the special tokens, the chat template)
    /// into `dir`: what `Tokenizer::from_dir` and transformers' `AutoTokenizer.from_pretrained` read.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let file = dir.join("tokenizer.json");
        self.inner
            .save(&file, false)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", file.display())))?;
        let mut cfg = serde_json::json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1_000_000_000_000_000_000u64,
        });
        let specials =
            [("bos_token", &self.bos_token), ("eos_token", &self.eos_token), ("pad_token", &self.pad_token)];
        for (key, token) in specials {
            if let Some(t) = token {
                cfg[key] = t.clone().into();
            }
        }
        if let Some(t) = &self.chat_template {
            cfg["chat_template"] = t.clone().into();
        }
        let path = dir.join("tokenizer_config.json");
        let text = serde_json::to_string_pretty(&cfg).unwrap_or_default();
        std::fs::write(&path, text).map_err(io_error(&path))
    }

    /// The number of tokens, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The end-of-sequence token's id.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token.as_deref().and_then(|t| self.token_id(t))
    }

    /// The padding token's id.
    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad_token.as_deref().and_then(|t| self.token_id(t))
    }

    /// The chat template rendered for `messages` (transformers' `apply_chat_template(...,
    /// tokenize=False)`), with `bos_token`, `eos_token` and `add_generation_prompt` defined.
    pub fn apply_chat_template(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let messages = serde_json::to_value(messages).map_err(|e| ModelError::Template(e.to_string()))?;
        self.render_chat(&messages, None, add_generation_prompt)
    }

    /// The chat template rendered for `messages` as JSON (OpenAI's messages: an assistant's
    /// `tool_calls`, a tool's `tool_call_id`, …) and the `tools` the model may call, as
    /// transformers' `apply_chat_template(messages, tools=tools, tokenize=False)` renders them;
    /// `tojson` writes JSON as Python's `json.dumps` (`", "` and `": "`, keys in their order).
    pub fn render_chat(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| ModelError::Template("this tokenizer has no chat template".into()))?;
        let mut env = minijinja::Environment::new();
        // Python's str methods (`.strip()`, `.startswith()`, …), which templates call.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_filter("tojson", python_tojson);
        env.add_template("chat", template).map_err(|e| ModelError::Template(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => minijinja::Value::from_serialize(messages),
            tools => tools.map(minijinja::Value::from_serialize),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        };
        let tmpl = env.get_template("chat").map_err(|e| ModelError::Template(e.to_string()))?;
        tmpl.render(ctx).map_err(|e| ModelError::Template(e.to_string()))
    }
}

/// Jinja's `tojson` as transformers defines it for chat templates: `json.dumps(x,
/// ensure_ascii=False, indent=indent)` — `", "` between items and `": "` after keys, or lines
/// of `indent` spaces — never HTML-escaped.
fn python_tojson(
    value: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            serde::Serialize::serialize(&value, &mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonCompact);
            serde::Serialize::serialize(&value, &mut ser)
        }
    };
    written.map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(minijinja::Value::from_safe_string(String::from_utf8(out).unwrap_or_default()))
}

/// serde_json's compact output with Python's default separators.
struct PythonCompact;

impl serde_json::ser::Formatter for PythonCompact {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}
