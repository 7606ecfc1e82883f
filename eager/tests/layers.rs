//! The library's layers have no back-edges and its modules no circles: no module of
//! `eager/src` names a module of a layer above its own, and no chain of modules names its
//! own start (read from the source, comments aside). Bottom up, as the guide's map
//! (docs/src/architecture.md): dtype, shape, device, shared → error, pjrt, plugin → memory,
//! autocast → ops → mesh → cache, disk_cache, profiler → runtime → tensor → autograd, var →
//! compile → nn, optim, io. (Circles among the files of one folder, in every crate of the
//! workspace: `tests/folder_circles.rs`.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

const LAYERS: &[&[&str]] = &[
    &["dtype", "shape", "device", "shared"],
    &["error", "pjrt", "plugin"],
    &["memory", "autocast"],
    &["ops"],
    &["mesh"],
    &["cache", "disk_cache", "profiler"],
    &["runtime"],
    &["tensor"],
    &["autograd", "var"],
    &["compile"],
    &["nn", "optim", "io"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every `.rs` file under `dir` with the top module it belongs to.
fn sources(dir: &Path, top: Option<&str>, out: &mut Vec<(String, std::path::PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            sources(&path, Some(top.unwrap_or(&stem)), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((top.unwrap_or(&stem).to_string(), path));
        }
    }
}

/// The top modules a source names through `crate::…` (comments left out).
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if rest.starts_with('{') {
                // `use crate::{a, b::c}`: every name in the group.
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                names.extend(group.split(',').map(|n| n.trim().split("::").next().unwrap_or("").to_string()));
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                names.push(name);
            }
        }
    }
    names
}

/// The library's sources: (top module, path, text), `bin` and `lib.rs` left out.
fn library() -> Vec<(String, std::path::PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, None, &mut files);
    files
        .into_iter()
        .filter(|(module, path)| !path.starts_with(src.join("bin")) && module != "lib")
        .map(|(module, path)| {
            let text = std::fs::read_to_string(&path).unwrap();
            (module, path, text)
        })
        .collect()
}

/// The back-edges among `files`, and how many references to layered modules were read.
fn back_edges(files: &[(String, std::path::PathBuf, String)]) -> (Vec<String>, usize) {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (module, path, text) in files {
        let own = layer(module)
            .unwrap_or_else(|| panic!("{}: module `{module}` is in no layer of this test", path.display()));
        for name in named_modules(text) {
            if let Some(l) = layer(&name) {
                checked += 1;
                if l > own {
                    wrong.push(format!("{} (layer {own}) names `{name}` (layer {l})", path.display()));
                }
            }
        }
    }
    (wrong, checked)
}

/// Circles among the top modules, each as `a → b → … → a` (at least one per circle; none
/// for a layered crate). Modules of one layer may name each other, so layers alone do not
/// rule circles out.
fn circles(files: &[(String, std::path::PathBuf, String)]) -> Vec<String> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, _, text) in files {
        let out = edges.entry(module.clone()).or_default();
        out.extend(named_modules(text).into_iter().filter(|n| n != module && layer(n).is_some()));
    }
    // Depth first: a module met again while it is still on the path closes a circle.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        on_path: &mut HashMap<String, bool>,
        path: &mut Vec<String>,
        found: &mut Vec<String>,
    ) {
        on_path.insert(m.to_string(), true);
        path.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            match on_path.get(n) {
                None => visit(n, edges, on_path, path, found),
                Some(true) => {
                    let at = path.iter().position(|p| p == n).expect("on the path");
                    found.push(format!("{} → {n}", path[at..].join(" → ")));
                }
                Some(false) => {}
            }
        }
        path.pop();
        on_path.insert(m.to_string(), false);
    }
    let (mut on_path, mut found) = (HashMap::new(), Vec::new());
    for m in edges.keys() {
        if !on_path.contains_key(m) {
            visit(m, &edges, &mut on_path, &mut Vec::new(), &mut found);
        }
    }
    found
}

#[test]
fn no_module_imports_one_above_it() {
    let (wrong, checked) = back_edges(&library());
    assert!(checked > 100, "too few imports read ({checked}): is the parser still right?");
    assert!(wrong.is_empty(), "back-edges:\n{}", wrong.join("\n"));
}

#[test]
fn no_modules_name_each_other_in_a_circle() {
    let found = circles(&library());
    assert!(found.is_empty(), "circles:\n{}", found.join("\n"));
}

/// A circle within one layer (which the layer check allows) is reported: `io` naming `nn`,
/// which names `io`.
#[test]
fn an_injected_circle_is_reported() {
    let mut files = library();
    let io = files.iter().position(|(m, ..)| m == "io").expect("src/io.rs");
    files[io].2.push_str("\nfn back() -> Option<crate::nn::Linear> { None }\n");
    let found = circles(&files);
    assert!(found.iter().any(|c| c.contains("io → nn") || c.contains("nn → io")), "{found:#?}");
    assert!(back_edges(&files).0.is_empty(), "nn and io share a layer: no back-edge");
}

/// The check reports a back-edge put into the real sources: a path and a group naming modules
/// of higher layers, in a file of the lowest layer and in one inside a folder module.
#[test]
fn an_injected_back_edge_is_reported() {
    let mut files = library();
    let dtype = files.iter().position(|(m, ..)| m == "dtype").expect("src/dtype.rs");
    files[dtype].2.push_str("\nfn back() -> crate::nn::Linear { todo!() }\n");
    let nested = files
        .iter()
        .position(|(m, p, _)| m == "ops" && p.parent().unwrap().ends_with("ops"))
        .expect("src/ops/*.rs");
    files[nested].2.push_str("\nuse crate::{shape::Spec, tensor::Tensor};\n");
    let (wrong, _) = back_edges(&files);
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    let (dtype, nn, ops, tensor) = (layer("dtype"), layer("nn"), layer("ops"), layer("tensor"));
    let (dtype, nn, ops, tensor) = (dtype.unwrap(), nn.unwrap(), ops.unwrap(), tensor.unwrap());
    let low = format!("/dtype.rs (layer {dtype}) names `nn` (layer {nn})");
    assert!(wrong.iter().any(|w| w.ends_with(&low)), "{wrong:#?}");
    let nested = format!("(layer {ops}) names `tensor` (layer {tensor})");
    assert!(wrong.iter().any(|w| w.contains("/ops/") && w.ends_with(&nested)), "{wrong:#?}");
}

#[test]
fn the_parser_reads_groups_and_paths() {
    let names = named_modules(
        "use crate::{ops::Op, shape::Spec};\nlet x = crate::runtime::runtime(k); // crate::nn\n",
    );
    assert_eq!(names, ["ops", "shape", "runtime"]);
}
