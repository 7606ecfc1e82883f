//! Completion before rust-analyzer answers (a session's first seconds, or when it gives
//! nothing): the meta commands, and the build-time index of eager's, viz's and eager-cell's
//! public names (`build/names.rs`) with the names every Rust user types first (std's prelude,
//! the trait functions every type has). What is offered follows the text before the cursor:
//! `Tensor::ze` → the type's functions, `eager::memory::` → the module's items, `x.su` → the
//! methods of every indexed type, a bare word → types, functions, macros and keywords.

use crate::interface::Completion;

include!(concat!(env!("OUT_DIR"), "/names.rs"));

/// Functions any type path has through std's prelude traits (`String::from`, `Vec::default`).
const TRAIT_FUNCTIONS: &[(&str, &str)] = &[
    ("from", "from(value: T) -> Self"),
    ("default", "default() -> Self"),
    ("try_from", "try_from(value: T) -> Result<Self, Self::Error>"),
    ("clone", "clone(&self) -> Self"),
];

/// Methods every value has through std's prelude traits.
const TRAIT_METHODS: &[(&str, &str)] = &[
    ("clone", "clone(&self) -> Self"),
    ("into", "into(self) -> T"),
    ("to_owned", "to_owned(&self) -> Self::Owned"),
    ("to_string", "to_string(&self) -> String"),
    ("try_into", "try_into(self) -> Result<T, Self::Error>"),
];

/// std's prelude and the macros cells use most.
const STD_NAMES: &[(&str, &str)] = &[
    ("Box", "class"),
    ("Err", "enum member"),
    ("None", "enum member"),
    ("Ok", "enum member"),
    ("Option", "class"),
    ("Result", "class"),
    ("Some", "enum member"),
    ("String", "class"),
    ("Vec", "class"),
    ("assert!", "macro"),
    ("assert_eq!", "macro"),
    ("dbg!", "macro"),
    ("eprintln!", "macro"),
    ("format!", "macro"),
    ("print!", "macro"),
    ("println!", "macro"),
    ("vec!", "macro"),
];

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "false", "fn", "for", "if", "impl", "in", "let",
    "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "static", "struct", "trait",
    "true", "type", "use", "where", "while",
];

/// The meta commands starting with what is typed, when the input is one (`:pro` → `:profile`).
pub fn meta_completions(src: &str, pos: usize) -> Option<(usize, Vec<Completion>)> {
    let head = &src[..pos];
    if !head.trim_start().starts_with(':') || head.contains(' ') {
        return None;
    }
    let start = head.len() - head.trim_start().len();
    let names = crate::meta::META_NAMES
        .iter()
        .filter(|n| n.starts_with(head.trim_start()))
        .map(|n| Completion { text: n.to_string(), kind: "magic".into(), signature: n.to_string() })
        .collect();
    Some((start, names))
}

/// Completions at byte `pos` of `src` from the meta commands and the index alone (no session
/// needed): the start of the word they replace, and the names.
pub fn complete(src: &str, pos: usize) -> (usize, Vec<Completion>) {
    if let Some(meta) = meta_completions(src, pos) {
        return meta;
    }
    let head = &src[..pos];
    let word_len: usize =
        head.chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').map(char::len_utf8).sum();
    let start = pos - word_len;
    let (before, prefix) = (&head[..start], &head[start..]);
    let item = |name: &str, kind: &str, sig: &str| Completion {
        text: name.to_string(),
        kind: kind.to_string(),
        signature: sig.to_string(),
    };
    let mut found: Vec<Completion> = Vec::new();
    if let Some(path) = before.strip_suffix("::") {
        // The path before `::`: its last segment names a type or a module.
        let path_len: usize = path
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':'))
            .map(char::len_utf8)
            .sum();
        let path = &path[path.len() - path_len..];
        let last = path.rsplit("::").next().unwrap_or(path);
        for (scope, name, kind, sig) in NAMES {
            let scope_last = scope.rsplit("::").next().unwrap_or(scope);
            if *scope == path || scope_last == last {
                found.push(item(name, kind, sig));
            }
        }
        if last.starts_with(char::is_uppercase) {
            found.extend(TRAIT_FUNCTIONS.iter().map(|(n, s)| item(n, "function", s)));
        }
    } else if before.ends_with('.') {
        found.extend(
            NAMES.iter().filter(|n| n.2 == "method").map(|(_, name, kind, sig)| item(name, kind, sig)),
        );
        found.extend(TRAIT_METHODS.iter().map(|(n, s)| item(n, "method", s)));
    } else if !prefix.is_empty() {
        // A bare word: what the session's prelude brings in (the crates' roots and their
        // prelude), the crates themselves, std's prelude and the keywords.
        for (scope, name, kind, sig) in NAMES {
            if matches!(*scope, "eager" | "eager::prelude" | "viz" | "eager_cell") && *kind != "module" {
                found.push(item(name, kind, sig));
            }
        }
        found.extend(["eager", "viz", "eager_cell", "std"].iter().map(|n| item(n, "module", n)));
        found.extend(STD_NAMES.iter().map(|(n, kind)| item(n, kind, n)));
        found.extend(KEYWORDS.iter().map(|k| item(k, "keyword", k)));
    }
    found.retain(|c| c.text.starts_with(prefix));
    found.sort_by(|a, b| a.text.cmp(&b.text));
    found.dedup_by(|a, b| a.text == b.text);
    (start, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> (usize, Vec<String>) {
        let (start, list) = complete(src, src.len());
        (start, list.into_iter().map(|c| c.text).collect())
    }

    #[test]
    fn a_type_path_offers_its_functions() {
        let (start, names) = texts("let t = Tensor::ze");
        assert_eq!(start, "let t = Tensor::".len());
        assert!(
            names.contains(&"zeros".to_string()) && names.contains(&"zeros_like".to_string()),
            "{names:?}"
        );
        assert!(names.iter().all(|n| n.starts_with("ze")), "{names:?}");
        // Ops stamped from eager's `forward!` table are there too.
        assert!(texts("x.mat").1.contains(&"matmul".to_string()));
        assert!(texts("Tensor::sum_").1.contains(&"sum_all".to_string()));
    }

    #[test]
    fn any_type_path_has_from() {
        assert!(texts("String::fro").1.contains(&"from".to_string()));
    }

    #[test]
    fn a_module_path_offers_its_items() {
        let names = texts("eager::memory::set_").1;
        assert_eq!(names, vec!["set_limit".to_string()]);
        assert!(texts("eager::Ten").1.contains(&"Tensor".to_string()));
    }

    #[test]
    fn a_bare_word_offers_types_macros_and_keywords() {
        let names = texts("Ten").1;
        assert!(names.contains(&"Tensor".to_string()), "{names:?}");
        assert!(texts("print").1.contains(&"println!".to_string()));
        assert!(texts("lo").1.contains(&"loop".to_string()));
    }

    #[test]
    fn a_meta_command_completes() {
        let (start, list) = complete(":pro", 4);
        assert_eq!(start, 0);
        assert!(list.iter().any(|c| c.text == ":profile"));
    }
}
