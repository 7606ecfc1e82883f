//! The session's own `:` commands. Anything else starting with `:` (`:dep`, `:clear`, …) is
//! evcxr's and goes to it.

use std::path::PathBuf;

/// A parsed meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCommand {
    Help,
    Devices,
    Device(String),
    /// The mesh in use, as a grid of its devices.
    Mesh,
    /// Show fused mode (`None`) or turn it on or off.
    Mode(Option<bool>),
    /// Show the session's autocast (`None`) or set it: `bf16`, `f16` or `off`.
    Autocast(Option<String>),
    /// `:memory` (live tensors and the peak), `:memory reset` (the peak starts again).
    Memory {
        reset: bool,
    },
    /// Per-op table of the last cell, or of the whole session.
    Profile {
        session: bool,
    },
    /// Timeline chart of the last cell (the session's if the last cell ran no op).
    Timeline(Option<PathBuf>),
    Trace(PathBuf),
    Cache,
    /// Empty the in-memory compile cache; with `disk`, the persistent one too.
    CacheClear {
        disk: bool,
    },
    Vars,
    Quit,
}

/// Names offered by tab completion.
pub const META_NAMES: &[&str] = &[
    ":help",
    ":devices",
    ":device",
    ":mesh",
    ":mode",
    ":mode fused",
    ":mode eager",
    ":autocast",
    ":autocast bf16",
    ":autocast f16",
    ":autocast off",
    ":profile",
    ":profile session",
    ":timeline",
    ":trace",
    ":cache",
    ":memory",
    ":memory reset",
    ":cache clear",
    ":cache clear --disk",
    ":vars",
    ":quit",
    ":dep",
    ":clear",
    ":timing",
    ":explain",
];

pub const META_HELP: &str = "\
eager commands:
  :devices               list devices (cpu, tpu, cuda) and why a kind is unavailable
  :device cpu|tpu|cuda   set the default device (also cpu:1, tpu:0, …)
  :mesh                  the mesh in use (the last Mesh made) as a grid of its devices
  :mode [fused|eager]    fused: each cell's ops run as one program at its first read or its end
  :autocast [bf16|f16|off]  matmuls, convolutions and attention in bf16/f16, the rest in f32 (torch.autocast)
  :profile               per-op table of the last cell (:profile session for all cells)
  :timeline [FILE]       timeline chart of the last cell to a .png or .svg file (default eager-timeline.png)
  :trace FILE            the session's dispatches as a Perfetto / chrome://tracing JSON file
  :cache                 compile cache statistics (memory and disk)
  :memory [reset]        device memory: live tensor bytes, the peak, the largest tensors (reset: peak from now)
  :cache clear [--disk]  empty the in-memory compile cache (--disk: the persistent one too)
  :vars                  variables and their types
  :quit                  exit (Ctrl-D too); Ctrl-C stops a running cell
evcxr's own commands work as well: :dep, :clear, :timing, :explain, :help evcxr, …";

impl MetaCommand {
    /// `None` when the line is not one of ours; `Some(Err)` for ours with bad arguments.
    pub fn parse(line: &str) -> Option<Result<MetaCommand, String>> {
        let line = line.trim();
        let mut words = line.split_whitespace();
        let head = words.next()?;
        let args: Vec<&str> = words.collect();
        let arg = args.first().copied();
        Some(Ok(match (head, arg) {
            (":help", None) => MetaCommand::Help,
            (":devices", None) => MetaCommand::Devices,
            (":mesh", None) => MetaCommand::Mesh,
            (":mode", None) => MetaCommand::Mode(None),
            (":mode", Some("fused")) => MetaCommand::Mode(Some(true)),
            (":mode", Some("eager")) => MetaCommand::Mode(Some(false)),
            (":mode", Some(other)) => {
                return Some(Err(format!(":mode takes `fused` or `eager`, not {other:?}")))
            }
            (":autocast", None) => MetaCommand::Autocast(None),
            (":autocast", Some(d @ ("bf16" | "f16" | "off"))) => MetaCommand::Autocast(Some(d.to_string())),
            (":autocast", Some(other)) => {
                return Some(Err(format!(":autocast takes `bf16`, `f16` or `off`, not {other:?}")))
            }
            (":device", Some(d)) => MetaCommand::Device(d.to_string()),
            (":device", None) => {
                return Some(Err(":device needs a device: cpu, tpu, cuda or e.g. cpu:1".into()))
            }
            (":memory", None) => MetaCommand::Memory { reset: false },
            (":memory", Some("reset")) => MetaCommand::Memory { reset: true },
            (":memory", Some(other)) => {
                return Some(Err(format!(":memory takes nothing or `reset`, not {other:?}")))
            }
            (":profile", None) => MetaCommand::Profile { session: false },
            (":profile", Some("session")) => MetaCommand::Profile { session: true },
            (":profile", Some(other)) => {
                return Some(Err(format!(":profile takes nothing or `session`, not {other:?}")))
            }
            (":timeline", f) => MetaCommand::Timeline(f.map(PathBuf::from)),
            (":trace", Some(f)) => MetaCommand::Trace(PathBuf::from(f)),
            (":trace", None) => return Some(Err(":trace needs a file name, e.g. :trace trace.json".into())),
            (":cache", None) => MetaCommand::Cache,
            (":cache", Some("clear")) => match &args[1..] {
                [] => MetaCommand::CacheClear { disk: false },
                ["--disk"] => MetaCommand::CacheClear { disk: true },
                other => {
                    return Some(Err(format!(
                        ":cache clear takes nothing or `--disk`, not {}",
                        other.join(" ")
                    )))
                }
            },
            (":cache", Some(other)) => {
                return Some(Err(format!(":cache takes nothing or `clear [--disk]`, not {other:?}")))
            }
            (":vars", None) => MetaCommand::Vars,
            (":quit", None) | (":exit", None) => MetaCommand::Quit,
            _ => return None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::MetaCommand::{self, *};

    #[test]
    fn parses_ours_and_leaves_evcxrs() {
        assert_eq!(MetaCommand::parse(":profile"), Some(Ok(Profile { session: false })));
        assert_eq!(MetaCommand::parse(" :profile session "), Some(Ok(Profile { session: true })));
        assert_eq!(MetaCommand::parse(":timeline out.svg"), Some(Ok(Timeline(Some("out.svg".into())))));
        assert_eq!(MetaCommand::parse(":device tpu"), Some(Ok(Device("tpu".into()))));
        assert_eq!(MetaCommand::parse(":cache clear"), Some(Ok(CacheClear { disk: false })));
        assert_eq!(MetaCommand::parse(":cache clear --disk"), Some(Ok(CacheClear { disk: true })));
        assert_eq!(
            MetaCommand::parse(":cache clear --all"),
            Some(Err(":cache clear takes nothing or `--disk`, not --all".into()))
        );
        assert_eq!(
            MetaCommand::parse(":trace"),
            Some(Err(":trace needs a file name, e.g. :trace trace.json".into()))
        );
        assert_eq!(
            MetaCommand::parse(":autocast bf16"),
            Some(Ok(MetaCommand::Autocast(Some("bf16".into()))))
        );
        assert_eq!(MetaCommand::parse(":autocast"), Some(Ok(MetaCommand::Autocast(None))));
        assert_eq!(
            MetaCommand::parse(":autocast f32"),
            Some(Err(":autocast takes `bf16`, `f16` or `off`, not \"f32\"".into()))
        );
        assert_eq!(MetaCommand::parse(":dep foo = \"1\""), None);
        assert_eq!(MetaCommand::parse(":help evcxr"), None);
        assert_eq!(MetaCommand::parse("let x = 1;"), None);
    }
}
