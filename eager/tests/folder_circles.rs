//! No circle inside any folder of any crate of the workspace: in every folder, the sibling
//! modules (a file `a.rs` and a folder `a/` are the node `a`; `mod.rs`, `lib.rs`, `main.rs`
//! and each crate root of `tests/`, `examples/`, `benches/` and `src/bin/` are their folder's
//! own module, no node) name each other without a chain that comes back to its start. A file
//! names a sibling when a path in its code (comments and literals left out) resolves to it:
//! `super::b`, `crate::…::b`, `self::…`, `$crate::…`, through `use` groups (`use
//! super::{a, b::{c}}`) and from inline modules (`mod tests { use super::super::b; }`); the
//! last name of a call or macro (`super::b(..)`) is no module. A name a module re-exports
//! (`super::X` for its `pub use b::X`) counts for that module, not for `b`: the parent, never
//! a sibling. `tests/layers.rs` checks the library's top modules against its layers; this checks every
//! folder of the workspace (the crates of its `Cargo.toml`), read from the source.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its crate's folder (relative to the workspace root), its path inside that
/// crate and its text.
struct Source {
    krate: String,
    path: PathBuf,
    text: String,
}

/// The crates of the workspace: the `members` of its `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members").expect("[workspace] members");
    let list = &manifest[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

/// Every `.rs` file under `dir` (build outputs and hidden folders left out).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The workspace's sources, crate by crate.
fn workspace() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut sources = Vec::new();
    for krate in members(&root) {
        let dir = root.join(&krate);
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            sources.push(Source {
                krate: krate.clone(),
                path: file.strip_prefix(&dir).unwrap().into(),
                text,
            });
        }
    }
    sources
}

/// Where a file sits in its crate's module tree: the folder its module paths start from (the
/// crate root's folder) and its module path below it, empty for a crate root.
fn module_of(path: &Path) -> (PathBuf, Vec<String>) {
    let parts: Vec<String> = path.iter().map(|p| p.to_string_lossy().to_string()).collect();
    // Folders whose files are crate roots, and the names that are a root wherever they sit
    // directly in their base.
    let (base_len, roots): (usize, &[&str]) = match parts.first().map(String::as_str) {
        Some("src") if parts.get(1).is_some_and(|p| p == "bin") && parts.len() > 2 => {
            if parts.len() == 3 {
                (2, &[])
            } else {
                (3, &["main.rs"])
            }
        }
        Some("src") => (1, &["lib.rs", "main.rs"]),
        Some("tests" | "examples" | "benches") => (1, &[]),
        _ => (0, &[]),
    };
    let base: PathBuf = parts[..base_len].iter().collect();
    let rest = &parts[base_len..];
    let file = rest.last().unwrap();
    if rest.len() == 1 && (roots.is_empty() || roots.contains(&file.as_str())) {
        return (base, Vec::new());
    }
    let mut module: Vec<String> = rest[..rest.len() - 1].to_vec();
    if file != "mod.rs" {
        module.push(file.trim_end_matches(".rs").to_string());
    }
    (base, module)
}

/// A token of Rust source: an identifier or keyword, or one punctuation character (`::` is
/// one token); with its line.
#[derive(Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// The tokens of `text`, comments and string and character literals left out.
fn tokens(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' || ((ch == 'r' || ch == 'b') && raw_or_byte_string(&c, i).is_some()) {
            // A string: "…" with escapes, b"…", r#"…"#, br#"…"#.
            let (start, hashes) = if ch == '"' { (i, None) } else { raw_or_byte_string(&c, i).unwrap() };
            i = start + 1;
            while i < c.len() {
                line += usize::from(c[i] == '\n');
                match hashes {
                    None if c[i] == '\\' => i += 2,
                    None if c[i] == '"' => break,
                    Some(n) if c[i] == '"' && (1..=n).all(|k| at(i + k) == '#') => {
                        i += n;
                        break;
                    }
                    _ => i += 1,
                }
            }
            i += 1;
        } else if ch == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Token { text: c[start..i].iter().collect(), line });
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token { text: "::".into(), line });
            i += 2;
        } else {
            out.push(Token { text: ch.to_string(), line });
            i += 1;
        }
    }
    out
}

/// Whether a raw or byte string starts at `i` (`r"`, `r#"`, `b"`, `br#"`): where its opening
/// quote is, and its number of `#` (`Some` for a raw string).
fn raw_or_byte_string(c: &[char], i: usize) -> Option<(usize, Option<usize>)> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    let byte = c.get(j) == Some(&'b');
    j += usize::from(byte);
    let raw = c.get(j) == Some(&'r');
    j += usize::from(raw);
    let hashes = c[j.min(c.len())..].iter().take_while(|&&h| h == '#').count();
    j += hashes;
    match (c.get(j), raw) {
        (Some('"'), true) => Some((j, Some(hashes))),
        (Some('"'), false) if byte && hashes == 0 => Some((j, None)),
        _ => None,
    }
}

/// A path a file names, written from `crate`, `super` or `self`: the inline modules it sits in
/// (`mod tests { … }`), its segments with groups spelled out, and its line.
#[derive(Debug, PartialEq)]
struct Named {
    inline: Vec<String>,
    segments: Vec<String>,
    line: usize,
}

/// The paths from `crate`, `$crate`, `super` or `self` in a file's tokens.
fn named_paths(tokens: &[Token]) -> Vec<Named> {
    let t = |i: usize| tokens.get(i).map(|t| t.text.as_str()).unwrap_or("");
    let (mut out, mut inline, mut depth, mut i) = (Vec::new(), Vec::<(String, usize)>::new(), 0, 0);
    while i < tokens.len() {
        match t(i) {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if t(i + 2) == "{" => {
                inline.push((t(i + 1).to_string(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            "crate" | "super" | "self" if t(i + 1) == "::" && t(i.wrapping_sub(1)) != "::" => {
                let mut paths = Vec::new();
                let next = use_tree(tokens, i, Vec::new(), &mut paths);
                if t(next) == "(" || t(next) == "!" {
                    // A call (`super::dispatch(..)`) or a macro: its last name is no module,
                    // even where a module has that name too.
                    for p in &mut paths {
                        p.pop();
                    }
                }
                let here = inline.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>();
                for segments in paths {
                    out.push(Named { inline: here.clone(), segments, line: tokens[i].line });
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Reads the path (or `use` tree) starting at token `i` below `prefix` into `out`, each group
/// spelled out; returns the index after it.
fn use_tree(tokens: &[Token], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let t = |i: usize| tokens.get(i).map(|t| t.text.as_str()).unwrap_or("");
    let is_ident = |s: &str| s.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut segments = prefix;
    loop {
        match t(i) {
            "{" => {
                i += 1;
                while t(i) != "}" && i < tokens.len() {
                    i = use_tree(tokens, i, segments.clone(), out);
                    if t(i) == "," {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "*" => {
                out.push(segments);
                return i + 1;
            }
            s if is_ident(s) => {
                segments.push(s.to_string());
                i += 1;
                if t(i) == "::" && (is_ident(t(i + 1)) || t(i + 1) == "{" || t(i + 1) == "*") {
                    i += 1;
                    continue;
                }
                if t(i) == "as" {
                    i += 2;
                }
                out.push(segments);
                return i;
            }
            _ => {
                out.push(segments);
                return i;
            }
        }
    }
}

/// The module a path names, resolved from the module `from` against the crate's `modules`
/// (those with a file or folder): the longest module prefix of what it names.
fn resolve(from: &[String], segments: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut at: Vec<String> = from.to_vec();
    let mut rest = segments.iter().peekable();
    match rest.peek().map(|s| s.as_str()) {
        Some("crate") => {
            at.clear();
            rest.next();
        }
        Some("self") => {
            rest.next();
        }
        Some("super") => {}
        _ => return None,
    }
    while rest.peek().is_some_and(|s| s.as_str() == "super") {
        rest.next();
        at.pop()?;
    }
    for s in rest {
        if s == "self" {
            continue;
        }
        at.push(s.clone());
        if !modules.contains(&at) {
            at.pop();
            break;
        }
    }
    Some(at)
}

/// A folder's graph: its sibling nodes and, for each edge, where it is first named.
#[derive(Default)]
struct Folder {
    nodes: BTreeSet<String>,
    edges: BTreeMap<(String, String), String>,
}

/// The sibling graph of every folder that has one, keyed by the folder's path from the
/// workspace root; and how many paths were resolved to a module.
fn folders(sources: &[Source]) -> (BTreeMap<String, Folder>, usize) {
    // Per crate root folder: its modules (each file's module path and every prefix of it).
    let mut modules: BTreeMap<(String, PathBuf), BTreeSet<Vec<String>>> = BTreeMap::new();
    for s in sources {
        let (base, module) = module_of(&s.path);
        let known = modules.entry((s.krate.clone(), base)).or_default();
        for n in 0..=module.len() {
            known.insert(module[..n].to_vec());
        }
    }
    let folder_name = |krate: &str, base: &Path, inside: &[String]| {
        let mut p = Path::new(krate).join(base);
        p.extend(inside);
        p.to_string_lossy().replace('\\', "/")
    };
    let (mut out, mut resolved) = (BTreeMap::<String, Folder>::new(), 0);
    for s in sources {
        let (base, module) = module_of(&s.path);
        if let Some((last, parent)) = module.split_last() {
            out.entry(folder_name(&s.krate, &base, parent)).or_default().nodes.insert(last.clone());
            // A folder `a/` is a node of its parent too, with or without a file of its own.
            for n in 0..parent.len() {
                let name = folder_name(&s.krate, &base, &parent[..n]);
                out.entry(name).or_default().nodes.insert(parent[n].clone());
            }
        }
        let known = &modules[&(s.krate.clone(), base.clone())];
        for named in named_paths(&tokens(&s.text)) {
            let from: Vec<String> = module.iter().chain(&named.inline).cloned().collect();
            let Some(to) = resolve(&from, &named.segments, known) else { continue };
            resolved += 1;
            let common = module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < module.len() && common < to.len() {
                let folder = out.entry(folder_name(&s.krate, &base, &module[..common])).or_default();
                let place = format!(
                    "{} line {} names {}",
                    Path::new(&s.krate).join(&s.path).display(),
                    named.line,
                    named.segments.join("::")
                );
                folder.edges.entry((module[common].clone(), to[common].clone())).or_insert(place);
            }
        }
    }
    (out, resolved)
}

/// The circles of one folder's graph: each group of nodes that reach each other (at least two),
/// as `a → b → … → a` (a shortest way round from its first node), with the edges that make it.
fn folder_circles(folder: &Folder) -> Vec<(String, Vec<String>)> {
    let next = |a: &str| -> Vec<String> {
        folder.edges.keys().filter(|(f, _)| f == a).map(|(_, t)| t.clone()).collect()
    };
    let reach = |from: &str| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from.to_string()]);
        while let Some(a) = todo.pop() {
            for b in next(&a) {
                if seen.insert(b.clone()) {
                    todo.push(b);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> =
        folder.nodes.iter().map(|n| (n.as_str(), reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &folder.nodes {
        if done.contains(n) || !reaches[n.as_str()].contains(n) {
            continue;
        }
        let group: BTreeSet<String> = folder
            .nodes
            .iter()
            .filter(|m| reaches[n.as_str()].contains(*m) && reaches[m.as_str()].contains(n))
            .cloned()
            .collect();
        done.extend(group.iter().cloned());
        // Breadth first from `n` back to `n` inside the group: a shortest circle.
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([n.clone()]);
        'search: while let Some(a) = queue.pop_front() {
            for b in next(&a) {
                let b = b.as_str();
                if b == n {
                    back.insert(format!("{n}'"), a.clone());
                    break 'search;
                }
                if group.contains(b) && !back.contains_key(b) && b != n {
                    back.insert(b.to_string(), a.clone());
                    queue.push_back(b.to_string());
                }
            }
        }
        let mut way = vec![n.clone()];
        let mut at = back[&format!("{n}'")].clone();
        while &at != n {
            way.push(at.clone());
            at = back[&at].clone();
        }
        way.push(n.clone());
        way.reverse();
        let mut circle = way.join(" → ");
        if group.len() > way.len() - 1 {
            circle += &format!(" (one circle of {})", group.iter().cloned().collect::<Vec<_>>().join(", "));
        }
        let because = folder
            .edges
            .iter()
            .filter(|((a, b), _)| group.contains(a) && group.contains(b))
            .map(|((a, b), place)| format!("    {a} → {b}: {place}"))
            .collect();
        out.push((circle, because));
    }
    out
}

/// Every circle of the workspace `sources`, as `folder: a → b → a`, each with the edges that
/// make it; and how many paths were resolved to a module.
fn circles(sources: &[Source]) -> (Vec<(String, Vec<String>)>, usize) {
    let (folders, resolved) = folders(sources);
    let mut out = Vec::new();
    for (name, folder) in &folders {
        for (circle, because) in folder_circles(folder) {
            out.push((format!("{name}: {circle}"), because));
        }
    }
    (out, resolved)
}

/// The circles `found`, each with the edges that make it, for a failure's message.
fn report(found: &[(String, Vec<String>)]) -> String {
    found.iter().map(|(c, because)| format!("{c}\n{}", because.join("\n"))).collect::<Vec<_>>().join("\n")
}

#[test]
fn no_folder_of_the_workspace_has_a_circle() {
    let sources = workspace();
    let crates: BTreeSet<&str> = sources.iter().map(|s| s.krate.as_str()).collect();
    assert!(crates.len() >= 7 && crates.contains("eager") && crates.contains("repl"), "{crates:?}");
    let (found, resolved) = circles(&sources);
    assert!(resolved > 1000, "too few paths resolved ({resolved}): is the parser still right?");
    assert!(found.is_empty(), "circles:\n{}", report(&found));
}

/// A small tree with a circle two folders down (and one at the top of a second crate), and
/// what is no circle: a parent naming its child, a child naming its parent, a test module
/// naming the parent's items, a path in a comment or a string.
#[test]
fn the_detector_reports_an_injected_circle_by_name() {
    let file = |krate: &str, path: &str, text: &str| Source {
        krate: krate.into(),
        path: path.into(),
        text: text.into(),
    };
    let sources = [
        file("a", "src/lib.rs", "mod x; use crate::x::deep::one::f;"),
        file("a", "src/x/mod.rs", "mod deep; pub use deep::one::f; pub fn top() {}"),
        file("a", "src/x/deep/mod.rs", "mod one; mod two; mod three;"),
        file("a", "src/x/deep/one.rs", "use super::{two::{self, g}};\npub fn f() { super::super::top() }"),
        file("a", "src/x/deep/two.rs", "pub fn g() { crate::x::deep::three::h() } // super::one"),
        file("a", "src/x/deep/three.rs", "pub fn h() { let _ = \"super::one::f\"; }\n#[cfg(test)]\nmod tests {\n    use super::super::one::f;\n}"),
        file("b", "src/lib.rs", "mod p; mod q;"),
        file("b", "src/p.rs", "pub(crate) use self::inner::X; mod inner { pub struct X(crate::q::Y); }"),
        file("b", "src/q.rs", "pub struct Y; fn x() -> crate::p::X { todo!() }"),
        file("b", "tests/t.rs", "use crate::common::helper; mod common;"),
    ];
    let (found, _) = circles(&sources);
    let names: Vec<&str> = found.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["a/src/x/deep: one → two → three → one", "b/src: p → q → p"], "{}", report(&found));
    let because = &found[0].1;
    assert!(
        because
            .iter()
            .any(|b| b == "    three → one: a/src/x/deep/three.rs line 4 names super::super::one::f"),
        "{because:#?}"
    );
    // Without the test module's import, no circle is left in `deep`.
    let mut sources = sources;
    sources[5].text = "pub fn h() {}".into();
    let (found, _) = circles(&sources);
    assert_eq!(found.len(), 1, "{}", report(&found));
}

/// The check reports a circle put into the real sources: the emitter (which every op family
/// names) naming the convolutions.
#[test]
fn a_circle_injected_into_the_workspace_is_reported() {
    let mut sources = workspace();
    let emit = sources
        .iter()
        .position(|s| s.krate == "eager" && s.path == Path::new("src/ops/emit.rs"))
        .expect("eager/src/ops/emit.rs");
    sources[emit].text.push_str("\nfn back() -> Option<crate::ops::conv::Conv> { None }\n");
    let (found, _) = circles(&sources);
    assert!(
        found.iter().any(|(c, _)| c.starts_with("eager/src/ops: ") && c.contains("conv → emit")),
        "{}",
        report(&found)
    );
}

#[test]
fn the_parser_reads_groups_inline_modules_and_skips_comments_and_literals() {
    let text = r##"
        use crate::{ops::{self, Op as O}, shape::Spec};
        /* crate::no /* nested */ crate::no */
        let s = r#"crate::no"#; let c = '"'; let l: &'static str = "crate::no \" crate::no";
        mod tests { use super::super::x::*; fn f() -> $crate::y::Z {} }
        pub(super) fn g() { self::h::i(); super::dispatch(op) }
    "##;
    let paths: Vec<(Vec<String>, String, usize)> =
        named_paths(&tokens(text)).into_iter().map(|n| (n.inline, n.segments.join("::"), n.line)).collect();
    let tests = vec!["tests".to_string()];
    let expected = [
        (vec![], "crate::ops::self", 2),
        (vec![], "crate::ops::Op", 2),
        (vec![], "crate::shape::Spec", 2),
        (tests.clone(), "super::super::x", 5),
        (tests, "crate::y::Z", 5),
        (vec![], "self::h", 6),
        (vec![], "super", 6),
    ];
    let expected: Vec<(Vec<String>, String, usize)> =
        expected.into_iter().map(|(i, p, l)| (i, p.to_string(), l)).collect();
    assert_eq!(paths, expected);
}
