//! The REPL and kernel binaries (the kernel builds with this script too) export one symbol,
//! `EAGER_SESSION_SLOT`, to the shared objects evcxr loads into them (one per cell), so that
//! every cell's copy of eager shares one runtime. For the repl crate it also writes the index of
//! eager's, viz's and eager-cell's public names that completion offers before rust-analyzer is
//! up (see `build/names.rs`).

#[path = "build/names.rs"]
mod names;

fn main() {
    println!("cargo::rustc-link-arg-bins=-Wl,--export-dynamic-symbol=EAGER_SESSION_SLOT");
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("repl") {
        let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
        let crates = [
            ("eager", root.join("eager/src")),
            ("viz", root.join("viz/src")),
            ("eager_cell", root.join("cell/src")),
        ];
        let crates: Vec<(&str, &std::path::Path)> = crates.iter().map(|(n, p)| (*n, p.as_path())).collect();
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("names.rs");
        names::write_index(&crates, &out);
    }
}
