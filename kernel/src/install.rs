//! `eager-kernel install`: the kernelspec (kernel.json and logos) where Jupyter looks.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, Context, Result};
use serde_json::json;

/// Where to install, as `jupyter kernelspec install` names it.
#[derive(Debug, Clone)]
pub enum Target {
    User,
    SysPrefix,
    Prefix(PathBuf),
}

pub const KERNEL_NAME: &str = "eager";

/// Writes the kernelspec and returns its directory.
pub fn install(target: &Target) -> Result<PathBuf> {
    let dir = kernels_dir(target)?.join(KERNEL_NAME);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe()?.canonicalize()?;
    let spec = json!({
        "argv": [exe.to_string_lossy(), "--connection-file", "{connection_file}"],
        "display_name": "Rust (eager)",
        "language": "rust",
        "interrupt_mode": "message",
        "metadata": { "debugger": false },
    });
    std::fs::write(dir.join("kernel.json"), serde_json::to_string_pretty(&spec)? + "\n")?;
    for size in [32u32, 64] {
        std::fs::write(dir.join(format!("logo-{size}x{size}.png")), logo(size)?)?;
    }
    Ok(dir)
}

fn kernels_dir(target: &Target) -> Result<PathBuf> {
    Ok(match target {
        Target::User => {
            let data = std::env::var_os("JUPYTER_DATA_DIR").map(PathBuf::from).or_else(|| {
                std::env::var_os("XDG_DATA_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
                    .map(|d| d.join("jupyter"))
            });
            data.ok_or_else(|| anyhow!("no HOME to install the kernel under"))?.join("kernels")
        }
        Target::SysPrefix => {
            let out = Command::new(std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into()))
                .args(["-c", "import sys; print(sys.prefix)"])
                .output()
                .context("asking python3 for sys.prefix")?;
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("share/jupyter/kernels")
        }
        Target::Prefix(p) => p.join("share/jupyter/kernels"),
    })
}

/// The logo: eager's compile (orange) and execute (blue) colours, as on its charts.
fn logo(size: u32) -> Result<Vec<u8>> {
    let mut rgba = Vec::with_capacity((size * size * 4) as usize);
    for y in 0..size {
        for x in 0..size {
            let inside = |lo: f32, hi: f32| (x as f32) >= lo * size as f32 && (x as f32) < hi * size as f32;
            let band = (y as f32) / size as f32;
            let (r, g, b, a) = if (0.2..0.45).contains(&band) && inside(0.1, 0.55) {
                (230, 126, 34, 255)
            } else if (0.55..0.8).contains(&band) && inside(0.1, 0.9) {
                (31, 119, 180, 255)
            } else {
                (0, 0, 0, 0)
            };
            rgba.extend_from_slice(&[r, g, b, a]);
        }
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, size, size);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()?.write_image_data(&rgba)?;
    Ok(out)
}
