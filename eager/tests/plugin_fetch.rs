//! The CPU plugin fetch: two processes asking at once into an empty cache fetch once, under
//! the file lock, and leave a loadable plugin. Each child is this test binary re-run.

use std::process::Command;

use eager::{pjrt, plugin, DeviceKind};

const CHILD_ENV: &str = "EAGER_TEST_FETCH_CHILD";

#[test]
#[ignore = "runs as a child process of two_processes_fetch_once_into_an_empty_cache"]
fn fetch_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    plugin::fetch(DeviceKind::Cpu).expect("fetch");
}

#[test]
fn two_processes_fetch_once_into_an_empty_cache() {
    let cache = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "fetch_child", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, "1")
                .env("EAGER_CACHE_DIR", cache.path())
                .stdin(std::process::Stdio::null())
                .output_async()
        })
        .collect();
    let outputs: Vec<_> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for o in &outputs {
        assert!(o.status.success(), "child failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    let fetched =
        outputs.iter().filter(|o| String::from_utf8_lossy(&o.stderr).contains("eager: fetching")).count();
    assert_eq!(fetched, 1, "exactly one process downloads; the other waits on the lock");

    // The file sits where the cache says, whole: it loads and speaks PJRT 0.x.
    std::env::set_var("EAGER_CACHE_DIR", cache.path());
    let path = plugin::cached_plugin_path(DeviceKind::Cpu);
    assert!(path.starts_with(cache.path()));
    let api = pjrt::Api::load(&path).expect("the fetched plugin loads");
    assert_eq!(api.version.0, 0);
    // No temp files left next to it.
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".fetch-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
    }
}
