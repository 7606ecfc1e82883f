//! Element types: their PJRT buffer type, their StableHLO name and their Rust host type.

use half::{bf16, f16};

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Boolean (one byte).
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Used for random-number state; rarely needed by users.
    U32,
    /// Unsigned 64-bit integer.
    U64,
}

impl DType {
    /// Every dtype tensors can hold.
    pub const ALL: [DType; 10] = [
        DType::Bool,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::U32,
        DType::U64,
    ];

    /// Short name as torch prints it (`f32`, `bf16`, `bool`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    /// Element type in StableHLO tensor types (`tensor<2x3xf32>`).
    pub fn mlir(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::U8 => "ui8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U32 => "ui32",
            DType::U64 => "ui64",
        }
    }

    /// `PJRT_Buffer_Type` value.
    pub fn pjrt(self) -> i32 {
        match self {
            DType::Bool => 1,
            DType::U8 => 6,
            DType::I32 => 4,
            DType::I64 => 5,
            DType::F16 => 10,
            DType::BF16 => 13,
            DType::F32 => 11,
            DType::F64 => 12,
            DType::U32 => 8,
            DType::U64 => 9,
        }
    }

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 | DType::U32 => 4,
            DType::I64 | DType::F64 | DType::U64 => 8,
        }
    }

    /// Whether it is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Whether it is an integer type (signed or not; not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64 | DType::U32 | DType::U64)
    }

    /// Whether it is a signed integer type.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Parses `f32`, `float32`, `bf16`, `int64`, `bool`, ….
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "bool" | "pred" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" | "long" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            _ => return None,
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the host form of a [`DType`].
pub trait Element: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The dtype this type holds.
    const DTYPE: DType;
    /// The value as an `f64`.
    fn to_f64(self) -> f64;
    /// `v` converted to this type.
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($($t:ty => $d:ident, |$x:ident| $to:expr, |$y:ident| $from:expr;)*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 { let $x = self; $to }
            fn from_f64(v: f64) -> Self { let $y = v; $from }
        }
    )*};
}

element! {
    bool => Bool, |x| if x { 1.0 } else { 0.0 }, |v| v != 0.0;
    u8 => U8, |x| x as f64, |v| v as u8;
    i32 => I32, |x| x as f64, |v| v as i32;
    i64 => I64, |x| x as f64, |v| v as i64;
    u32 => U32, |x| x as f64, |v| v as u32;
    u64 => U64, |x| x as f64, |v| v as u64;
    f16 => F16, |x| x.to_f64(), |v| f16::from_f64(v);
    bf16 => BF16, |x| x.to_f64(), |v| bf16::from_f64(v);
    f32 => F32, |x| x as f64, |v| v as f32;
    f64 => F64, |x| x, |v| v;
}

/// Views a slice of elements as bytes.
pub(crate) fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: every Element is plain old data with no padding (bool is one byte 0/1).
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

/// Host bytes of `values` converted to `dtype`.
pub(crate) fn encode_f64(values: &[f64], dtype: DType) -> Vec<u8> {
    fn conv<T: Element>(v: &[f64]) -> Vec<u8> {
        let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
        as_bytes(&t).to_vec()
    }
    match dtype {
        DType::Bool => conv::<bool>(values),
        DType::U8 => conv::<u8>(values),
        DType::I32 => conv::<i32>(values),
        DType::I64 => conv::<i64>(values),
        DType::U32 => conv::<u32>(values),
        DType::U64 => conv::<u64>(values),
        DType::F16 => conv::<f16>(values),
        DType::BF16 => conv::<bf16>(values),
        DType::F32 => conv::<f32>(values),
        DType::F64 => conv::<f64>(values),
    }
}
