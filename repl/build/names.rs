//! The index of public names that completion offers before rust-analyzer answers (the first
//! seconds of a session): a line scanner over eager's, viz's and eager-cell's sources, at build
//! time. It finds `pub` items at module level (`eager::memory::set_limit`), the `pub fn`s of
//! inherent `impl` blocks (`Tensor::zeros`), the crate roots' `pub use` re-exports, and the
//! rows of eager's `forward!` table (the op methods of `Tensor`). It is an approximation of what
//! rustdoc would list (a `pub` item of a private module counts; macro-made items other than
//! `forward!`'s do not); rust-analyzer takes over once the session is up.

use std::fmt::Write as _;
use std::path::Path;

/// (scope, name, kind, signature): scope is a type (`Tensor`) or a module path (`eager::memory`).
pub type Name = (String, String, &'static str, String);

/// Scans every crate in `crates` ((crate name, its `src` dir)) and writes the Rust source of
/// `NAMES: &[(&str, &str, &str, &str)]` to `out`.
pub fn write_index(crates: &[(&str, &Path)], out: &Path) {
    let mut names = Vec::new();
    for (krate, src) in crates {
        println!("cargo::rerun-if-changed={}", src.display());
        let mut files = Vec::new();
        walk(src, &mut files);
        files.sort();
        for file in files {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut module = vec![krate.to_string()];
            for part in rel.iter() {
                let part = part.to_string_lossy();
                if part != "lib" && part != "mod" {
                    module.push(part.into_owned());
                }
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            scan_file(&text, &module.join("::"), &mut names);
        }
    }
    names.sort();
    names.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    let mut rs = String::from("pub(crate) static NAMES: &[(&str, &str, &str, &str)] = &[\n");
    for (scope, name, kind, sig) in &names {
        let _ = writeln!(rs, "    ({scope:?}, {name:?}, {kind:?}, {sig:?}),");
    }
    rs.push_str("];\n");
    std::fs::write(out, rs).expect("writing the completion index");
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The line without its `//` comment and with string and char literals blanked (their braces
/// must not count).
fn code_of(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            if c == '\\' {
                chars.next();
            } else if c == '"' {
                in_str = false;
                out.push('"');
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push('"');
            }
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('{', '\n') or a lifetime ('a): skip the literal's body.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') || rest.chars().nth(1) == Some('\'') {
                    for d in chars.by_ref() {
                        if d == '\'' {
                            break;
                        }
                    }
                    out.push_str("' '");
                } else {
                    out.push('\'');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The type an inherent `impl` block is for (`impl<T> Foo<T> {` → `Foo`); `None` for a trait
/// impl (`impl Display for Foo`).
fn impl_type(t: &str) -> Option<String> {
    let mut rest = t.strip_prefix("impl")?;
    if rest.starts_with('<') {
        let mut depth = 0;
        let end = rest.char_indices().find(|&(_, c)| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            depth == 0
        })?;
        rest = &rest[end.0 + 1..];
    } else if !rest.starts_with(' ') {
        return None;
    }
    let head = rest.split('{').next().unwrap_or("");
    if head.contains(" for ") {
        return None;
    }
    let path = head.trim().split('<').next().unwrap_or("").trim();
    let name = path.rsplit("::").next().unwrap_or(path);
    (!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')).then(|| name.to_string())
}

fn scan_file(text: &str, module: &str, names: &mut Vec<Name>) {
    let mut depth: i32 = 0;
    // (type, the depth inside its block)
    let mut impls: Vec<(String, i32)> = Vec::new();
    let mut pending_impl: Option<String> = None;
    // Inside eager's `forward!` table: the depth inside it.
    let mut forward: Option<i32> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let code = code_of(line);
        let t = code.trim();
        // Tests sit at the end of a file, in a private module.
        if t == "#[cfg(test)]"
            && depth == 0
            && lines.peek().is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            break;
        }
        if let Some(inner) = forward {
            if depth == inner {
                if let Some((call, _)) = t.split_once(" => ") {
                    let name = ident(call);
                    if !name.is_empty() && call[name.len()..].starts_with('(') {
                        let sig = format!("{call} -> Result<Tensor>");
                        names.push(("Tensor".into(), name.into(), "method", sig));
                    }
                }
            }
        }
        let top = impls.last().map(|(ty, d)| (ty.clone(), *d));
        let in_impl = top.as_ref().filter(|(_, d)| *d == depth).map(|(ty, _)| ty.clone());
        if let Some(rest) = t.strip_prefix("pub ") {
            let rest =
                rest.trim_start_matches("const ").trim_start_matches("unsafe ").trim_start_matches("async ");
            let sig = t.split(['{', ';']).next().unwrap_or(t).trim().trim_start_matches("pub ").to_string();
            if let Some(f) = rest.strip_prefix("fn ") {
                let name = ident(f).to_string();
                if let Some(ty) = in_impl {
                    let kind = if sig.contains("self") { "method" } else { "function" };
                    names.push((ty, name, kind, sig));
                } else if depth == 0 {
                    names.push((module.into(), name, "function", sig));
                }
            } else if depth == 0 {
                for (kw, kind) in [
                    ("struct ", "class"),
                    ("enum ", "class"),
                    ("trait ", "class"),
                    ("type ", "class"),
                    ("mod ", "module"),
                    ("const ", "constant"),
                    ("static ", "constant"),
                ] {
                    if let Some(r) = rest.strip_prefix(kw) {
                        names.push((module.into(), ident(r).into(), kind, sig.clone()));
                    }
                }
                if let Some(r) = rest.strip_prefix("use ") {
                    reexports(r, module, names);
                }
            }
        }
        if depth == 0 && t.starts_with("impl") {
            pending_impl = impl_type(t);
        }
        if t.starts_with("forward!") && t.ends_with('{') {
            forward = Some(depth + 1);
        }
        let opens = code.matches('{').count() as i32;
        let closes = code.matches('}').count() as i32;
        if opens > 0 {
            if let Some(ty) = pending_impl.take() {
                impls.push((ty, depth + 1));
            }
        }
        depth += opens - closes;
        while impls.last().is_some_and(|(_, d)| depth < *d) {
            impls.pop();
        }
        if forward.is_some_and(|d| depth < d) {
            forward = None;
        }
    }
}

/// `pub use a::b::{C, D as E};` at module level: the names it brings in.
fn reexports(r: &str, module: &str, names: &mut Vec<Name>) {
    let r = r.trim_end_matches(';');
    let (_, list) = match r.split_once('{') {
        Some((path, list)) => (path, list.trim_end_matches('}')),
        None => ("", r.rsplit("::").next().unwrap_or(r)),
    };
    for item in list.split(',') {
        let item = item.trim();
        let name = item.rsplit(" as ").next().unwrap_or(item).trim();
        if !name.is_empty() && name != "self" && name != "*" && ident(name) == name {
            let kind = if name.starts_with(char::is_uppercase) { "class" } else { "function" };
            names.push((module.into(), name.into(), kind, format!("use {}::{name}", module)));
        }
    }
}
