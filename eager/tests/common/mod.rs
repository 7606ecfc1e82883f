//! Helpers the integration tests share (`mod common;` in each): the one-at-a-time lock of
//! tests that read process-wide counters, the dtype lists ops are checked over, and the one
//! closeness check.

// Each test crate uses a part of this module.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use eager::DType;

/// The random generator, the cache counters and the profiler log are process-wide: tests that
/// read them run one at a time so that one test's draws, compiles and events are not another's.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    eager::shared::lock(&LOCK)
}

/// Composite ops, backward passes and optimizer steps dispatched primitive by primitive
/// until dropped (tests of the one-op path those otherwise skip); hold with [`serial`].
pub struct OpByOp(bool);

impl OpByOp {
    pub fn new() -> OpByOp {
        let was = eager::ops_as_one();
        eager::set_ops_as_one(false);
        OpByOp(was)
    }
}

impl Drop for OpByOp {
    fn drop(&mut self) {
        eager::set_ops_as_one(self.0);
    }
}

pub const FLOATS: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16];
/// Ints and floats: what arithmetic takes.
pub const NUMERIC: &[DType] = &[
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::U64,
];
/// Every dtype: what movement ops, `where`, `eq` and `ne` take.
pub const ALL: &[DType] = &[
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::U64,
    DType::Bool,
];

/// Asserts `got` is `want` within `atol + rtol * |want|` elementwise (equal infinities and NaN
/// against NaN pass), naming `what` and the first element that is not.
pub fn assert_all_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= atol + rtol * w.abs();
        assert!(ok, "{what}: element {i} of {} is {g}, expected {w} (rtol {rtol}, atol {atol})", got.len());
    }
}

/// Fixed values in [-1, 1) (no random generator: the host reference needs them as they are).
pub fn fixed_values(len: usize, seed: usize) -> Vec<f64> {
    (0..len).map(|i| ((i * 37 + seed * 11) % 17) as f64 / 8.5 - 1.0).collect()
}

/// Each value rounded to f32, as the device sees it.
pub fn as_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&a| a as f32).collect()
}

/// Least squares on the host in f64, the reference of the sharded and fused steps: for row-major
/// `x [n, k]`, `w [k, m]`, `t [n, m]`, the loss `mean((x w - t)^2)` and its gradient in `w`,
/// `2 / (n m) x^T (x w - t)`.
pub fn host_least_squares(
    x: &[f64],
    w: &[f64],
    t: &[f64],
    (n, k, m): (usize, usize, usize),
) -> (f64, Vec<f64>) {
    let mut r = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            r[i * m + j] = (0..k).map(|p| x[i * k + p] * w[p * m + j]).sum::<f64>() - t[i * m + j];
        }
    }
    let count = (n * m) as f64;
    let loss = r.iter().map(|v| v * v).sum::<f64>() / count;
    let mut grad = vec![0.0; k * m];
    for p in 0..k {
        for j in 0..m {
            grad[p * m + j] = 2.0 * (0..n).map(|i| x[i * k + p] * r[i * m + j]).sum::<f64>() / count;
        }
    }
    (loss, grad)
}

/// torch's answer to `request` from `tests/reference/amp_reference.py` (python3 with torch,
/// from `tests/requirements-models.txt`; `EAGER_PYTHON` names another interpreter).
pub fn torch_reference(request: &serde_json::Value) -> serde_json::Value {
    python_reference("amp_reference.py", request)
}

/// The `result` of the reference script `tests/reference/<script>` given `request` as JSON on
/// its stdin (see [`torch_reference`]).
pub fn python_reference(script: &str, request: &serde_json::Value) -> serde_json::Value {
    use std::io::Write;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference").join(script);
    let python = std::env::var("EAGER_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = std::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the torch reference failed (install torch: python3 -m pip install -r tests/requirements-models.txt):\n{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the reference answers JSON");
    v["result"].clone()
}

/// A number of a torch reference answer (non-finite ones come as "nan", "inf", "-inf").
pub fn json_f64(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::String(s) => s.parse().expect("nan or inf"),
        v => v.as_f64().expect("a number"),
    }
}
