//! The CPU target: the official OpenXLA build on PyPI, fetched automatically.

use std::time::Duration;

use super::Target;
use crate::pjrt::OptionValue;

pub(crate) static TARGET: Target = Target {
    package: "xla-cpu-pjrt",
    fetch_version: Some("0.0.1"),
    file_in_package: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    hardware: || Ok(()),
    prepare_env: || {},
    client_options,
    start_timeout: Duration::from_secs(300),
};

/// Most CPU devices a client is asked for: the plugin makes each device's state up front, and
/// a count in the hundred thousands keeps `PJRT_Client_Create` busy for minutes.
const MAX_CPU_DEVICES: i64 = 256;

/// How many CPU devices the client shows: `EAGER_CPU_DEVICES` (at most [`MAX_CPU_DEVICES`]),
/// else one per core up to 4 (the plugin's own default is 4 whatever the cores: XLA then runs
/// a worker thread per device, and on a 2-core machine the two threads too many cost a
/// one-device program about 20%, measured on the char GPT's compiled step). The REPL and the
/// kernel ask for 4 (see `repl`'s session): meshes can be tried on any machine there.
fn client_options() -> Vec<(&'static str, OptionValue)> {
    let count = match std::env::var("EAGER_CPU_DEVICES").ok().and_then(|v| v.parse::<i64>().ok()) {
        Some(n) if n > MAX_CPU_DEVICES => {
            eprintln!("eager: warning: EAGER_CPU_DEVICES={n} is more than {MAX_CPU_DEVICES}; using {MAX_CPU_DEVICES}");
            MAX_CPU_DEVICES
        }
        Some(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(4, |n| n.get().min(4) as i64),
    };
    vec![("cpu_device_count", OptionValue::Int(count))]
}
