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
