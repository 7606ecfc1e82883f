//! The REPL and kernel binaries (the kernel builds with this script too) export one symbol,
//! `EAGER_SESSION_SLOT`, to the shared objects evcxr loads into them (one per cell), so that
//! every cell's copy of eager shares one runtime.
fn main() {
    println!("cargo::rustc-link-arg-bins=-Wl,--export-dynamic-symbol=EAGER_SESSION_SLOT");
}
