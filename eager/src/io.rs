//! Weights files: safetensors (named tensors, as Hugging Face models ship) and NumPy's `.npy`
//! (one tensor). Loads read the whole file, check it, then upload each tensor; saves read
//! each tensor back from its device first.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype as SafeDtype, SafeTensorError, SafeTensors, TensorView};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime;
use crate::shape::Spec;
use crate::tensor::Tensor;

// ----- safetensors ----------------------------------------------------------------------------

/// Writes `tensors` under their names to a safetensors file (replacing it whole: the crate
/// writes a sibling temporary file and renames it). Names must be distinct; they may be `&str`
/// or `String`, the tensors owned or borrowed (`nn::state_dict(&model)` fits as it is).
pub fn save_safetensors<N, T>(path: impl AsRef<Path>, tensors: &[(N, T)]) -> Result<()>
where
    N: AsRef<str>,
    T: std::borrow::Borrow<Tensor>,
{
    let path = path.as_ref();
    let mut names: Vec<&str> = tensors.iter().map(|(name, _)| name.as_ref()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format_error(path, format!("tensor name `{}` is given twice", w[0])));
    }
    // The header keeps this key for the file's metadata.
    if names.contains(&"__metadata__") {
        return Err(format_error(path, "`__metadata__` is reserved by safetensors and cannot name a tensor"));
    }
    let bytes: Vec<Vec<u8>> =
        tensors.iter().map(|(_, t)| crate::tensor::download(t.borrow())).collect::<Result<_>>()?;
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, t), data)| {
            let (name, t) = (name.as_ref(), t.borrow());
            let view = TensorView::new(safetensors_dtype(t.dtype()), t.shape().to_vec(), data)
                .map_err(|e| format_error(path, format!("tensor `{name}`: {e}")))?;
            Ok((name, view))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, path).map_err(|e| match e {
        SafeTensorError::IoError(source) => Error::Io { path: path.to_path_buf(), source },
        e => format_error(path, e.to_string()),
    })
}

/// The tensors of a safetensors file, sorted by name, on the default device. Any metadata
/// in the file is ignored.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    load_safetensors_on(path, runtime::default_device())
}

/// The tensors of a safetensors file, sorted by name, on `device`.
pub fn load_safetensors_on(path: impl AsRef<Path>, device: Device) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let file = read(path)?;
    let st = SafeTensors::deserialize(&file)
        .map_err(|e| format_error(path, format!("not a valid safetensors file: {e}")))?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    // Every dtype is checked before anything is uploaded, so a bad file costs no transfers.
    let dtypes = views
        .iter()
        .map(|(name, view)| {
            let dtype = eager_dtype(view.dtype()).ok_or_else(|| {
                format_error(
                    path,
                    format!(
                        "tensor `{name}` has dtype {}, which eager has no dtype for (it reads {})",
                        view.dtype(),
                        DType::ALL.map(|d| safetensors_dtype(d).to_string()).join(", ")
                    ),
                )
            })?;
            let spec = Spec::new(view.shape(), dtype);
            if spec.checked_size().is_none() {
                return Err(format_error(path, format!("tensor `{name}`: {}", crate::ops::too_large(&spec))));
            }
            Ok(dtype)
        })
        .collect::<Result<Vec<_>>>()?;
    views
        .into_iter()
        .zip(dtypes)
        .map(|((name, view), dtype)| {
            let data = normalize_bools(view.data(), dtype);
            let t = crate::tensor::dispatch::upload(&data, Spec::new(view.shape(), dtype), device)?;
            Ok((name, t))
        })
        .collect()
}

fn safetensors_dtype(dtype: DType) -> SafeDtype {
    match dtype {
        DType::Bool => SafeDtype::BOOL,
        DType::U8 => SafeDtype::U8,
        DType::I32 => SafeDtype::I32,
        DType::I64 => SafeDtype::I64,
        DType::U32 => SafeDtype::U32,
        DType::U64 => SafeDtype::U64,
        DType::F16 => SafeDtype::F16,
        DType::BF16 => SafeDtype::BF16,
        DType::F32 => SafeDtype::F32,
        DType::F64 => SafeDtype::F64,
    }
}

fn eager_dtype(dtype: SafeDtype) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| safetensors_dtype(d) == dtype)
}

// ----- .npy -----------------------------------------------------------------------------------

const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy starts the data at a multiple of this, so that a file can be memory-mapped.
const NPY_ALIGN: usize = 64;
/// NumPy pads the header so that the growing axis can reach this many digits in place.
const NPY_GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// Writes `tensor` to a `.npy` file (format 1.0, or 2.0 for a header over 64 KiB), with the
/// header bytes NumPy itself writes. bf16 has no NumPy dtype and is an error.
pub fn save_npy(path: impl AsRef<Path>, tensor: &Tensor) -> Result<()> {
    let path = path.as_ref();
    let descr = npy_descr(tensor.dtype()).ok_or_else(|| {
        format_error(
            path,
            format!(
                "{} has no NumPy dtype: save it with save_safetensors, or convert it first with .to_dtype(DType::F32)",
                tensor.dtype()
            ),
        )
    })?;
    let mut data = crate::tensor::download(tensor)?;
    if cfg!(target_endian = "big") {
        swap_bytes(&mut data, tensor.dtype().size_in_bytes());
    }
    let header = npy_header(descr, tensor.shape());
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(&header)?;
        file.write_all(&data)
    };
    write().map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// The tensor of a `.npy` file, on the default device.
pub fn load_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    load_npy_on(path, runtime::default_device())
}

/// The tensor of a `.npy` file (format 1.0, 2.0 or 3.0), on `device`. Reads dtypes `b1`,
/// `u1`, `i4`, `i8`, `u4`, `u8`, `f2`, `f4`, `f8` in either byte order (big-endian data is
/// swapped) and in C or Fortran order (Fortran order is transposed on the device).
pub fn load_npy_on(path: impl AsRef<Path>, device: Device) -> Result<Tensor> {
    let path = path.as_ref();
    let file = read(path)?;
    let npy = parse_npy(&file).map_err(|msg| format_error(path, msg))?;
    let mut data = Cow::Borrowed(npy.data);
    if npy.big_endian != cfg!(target_endian = "big") {
        swap_bytes(data.to_mut(), npy.dtype.size_in_bytes());
    }
    let data = normalize_bools(&data, npy.dtype);
    let rank = npy.shape.len();
    let numel: usize = npy.shape.iter().product();
    if !npy.fortran_order || rank < 2 || numel == 0 {
        return crate::tensor::dispatch::upload(&data, Spec::new(&npy.shape, npy.dtype), device);
    }
    // Column-major data of shape (a, b, c) is row-major data of shape (c, b, a).
    let reversed: Vec<usize> = npy.shape.iter().rev().copied().collect();
    let t = crate::tensor::dispatch::upload(&data, Spec::new(&reversed, npy.dtype), device)?;
    let perm: Vec<isize> = (0..rank as isize).rev().collect();
    t.permute(&perm)
}

/// NumPy's `dtype.str` of each eager dtype it has (little-endian, as NumPy writes on x86 and
/// Arm).
fn npy_descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::BF16 => return None,
    })
}

/// Magic, version, header length and the header dict, as NumPy's `_write_array_header` lays
/// them out: sorted keys, a trailing `, `, room for the first axis to grow, then spaces and a
/// newline up to a multiple of [`NPY_ALIGN`].
fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let shape_text = match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    if let Some(first) = shape.first() {
        dict.push_str(&" ".repeat(NPY_GROWTH_AXIS_MAX_DIGITS.saturating_sub(first.to_string().len())));
    }
    // The dict and its closing newline; version 1.0 has a u16 length, 2.0 a u32.
    let text_len = dict.len() + 1;
    let padded =
        |len_field: usize| text_len + NPY_ALIGN - (NPY_MAGIC.len() + 2 + len_field + text_len) % NPY_ALIGN;
    let (major, len_field) = if padded(2) <= u16::MAX as usize { (1u8, 2) } else { (2u8, 4) };
    let header_len = padded(len_field);
    let mut out = Vec::with_capacity(NPY_MAGIC.len() + 2 + len_field + header_len);
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + header_len - text_len, b' ');
    out.push(b'\n');
    out
}

/// A checked `.npy` file: what its header says, and its data (of exactly the size it says).
struct Npy<'a> {
    dtype: DType,
    big_endian: bool,
    fortran_order: bool,
    shape: Vec<usize>,
    data: &'a [u8],
}

fn parse_npy(file: &[u8]) -> std::result::Result<Npy<'_>, String> {
    if file.len() < NPY_MAGIC.len() + 2 || &file[..NPY_MAGIC.len()] != NPY_MAGIC {
        return Err("not a .npy file (it does not start with \\x93NUMPY)".into());
    }
    let (major, minor) = (file[6], file[7]);
    let len_field = match major {
        1 => 2,
        2 | 3 => 4,
        _ => {
            return Err(format!(
                "unsupported .npy format version {major}.{minor} (eager reads 1.0, 2.0 and 3.0)"
            ))
        }
    };
    let header_start = 8 + len_field;
    let len_bytes = file.get(8..header_start).ok_or("file ends inside the header length")?;
    let header_len = len_bytes.iter().rev().fold(0usize, |acc, &b| acc << 8 | b as usize);
    let header_end = header_start + header_len;
    let header = file.get(header_start..header_end).ok_or_else(|| {
        format!("header length {header_len} runs past the end of the file ({} bytes)", file.len())
    })?;
    // Versions 1 and 2 are Latin-1, version 3 is UTF-8.
    let text: String = if major == 3 {
        std::str::from_utf8(header).map_err(|e| format!("header is not UTF-8: {e}"))?.to_string()
    } else {
        header.iter().map(|&b| b as char).collect()
    };
    // A hostile header can be long: errors quote its start.
    let quoted = {
        let t = text.trim_end();
        match t.char_indices().nth(120) {
            Some((at, _)) => format!("{:?}…", &t[..at]),
            None => format!("{t:?}"),
        }
    };
    let dict = match PyLiteral::parse(&text).map_err(|e| format!("bad header {quoted}: {e}"))? {
        PyLiteral::Dict(entries) => entries,
        _ => return Err(format!("header {quoted} is not a dict")),
    };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for (key, value) in dict {
        match key.as_str() {
            "descr" => descr = Some(value),
            "fortran_order" => fortran_order = Some(value),
            "shape" => shape = Some(value),
            other => return Err(format!("header has unexpected key '{other}'")),
        }
    }
    let descr = match descr.ok_or("header has no 'descr'")? {
        PyLiteral::Str(s) => s,
        other => return Err(format!("'descr' {other} is a structured dtype, which eager cannot hold")),
    };
    let fortran_order = match fortran_order.ok_or("header has no 'fortran_order'")? {
        PyLiteral::Bool(b) => b,
        other => return Err(format!("'fortran_order' is {other}, not True or False")),
    };
    let shape = match shape.ok_or("header has no 'shape'")? {
        PyLiteral::Tuple(items) | PyLiteral::List(items) => items
            .into_iter()
            .map(|d| match d {
                PyLiteral::Int(n) => usize::try_from(n).map_err(|_| format!("shape dim {n} is out of range")),
                other => Err(format!("shape dim {other} is not a non-negative integer")),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?,
        other => return Err(format!("'shape' is {other}, not a tuple")),
    };
    let (dtype, big_endian) = parse_descr(&descr)?;
    let spec = Spec::new(&shape, dtype);
    let (_, size) = spec.checked_size().ok_or_else(|| crate::ops::too_large(&spec))?;
    let data = &file[header_end..];
    if data.len() != size {
        return Err(format!(
            "header says '{descr}' {shape:?} ({size} bytes of data) but the file has {} bytes after the header{}",
            data.len(),
            if data.len() < size { " (truncated?)" } else { "" }
        ));
    }
    Ok(Npy { dtype, big_endian, fortran_order, shape, data })
}

/// The eager dtype of a NumPy type string (`<f4`, `|b1`, …) and whether its data is
/// big-endian.
fn parse_descr(descr: &str) -> std::result::Result<(DType, bool), String> {
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    let dtype = match code {
        "b1" | "?" => DType::Bool,
        "u1" | "B" => DType::U8,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "f2" | "e" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        _ => {
            return Err(format!(
                "NumPy dtype '{descr}' has no eager dtype (eager reads b1, u1, i4, i8, u4, u8, f2, f4, f8)"
            ))
        }
    };
    let big_endian = match order {
        '<' => false,
        '>' => true,
        '=' => cfg!(target_endian = "big"),
        _ if dtype.size_in_bytes() == 1 => false,
        _ => return Err(format!("NumPy dtype '{descr}' has no byte order")),
    };
    Ok((dtype, big_endian))
}

/// The Python literals a `.npy` header holds: a dict of strings, booleans and tuples of
/// integers (as `repr` writes them, with or without trailing commas; Python 2 `3L` too).
enum PyLiteral {
    Str(String),
    Bool(bool),
    Int(u128),
    Tuple(Vec<PyLiteral>),
    List(Vec<PyLiteral>),
    Dict(Vec<(String, PyLiteral)>),
}

/// As Python's `repr` (near enough for error messages).
impl std::fmt::Display for PyLiteral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |items: &[PyLiteral]| items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        match self {
            PyLiteral::Str(s) => write!(f, "'{s}'"),
            PyLiteral::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            PyLiteral::Int(n) => write!(f, "{n}"),
            PyLiteral::Tuple(items) if items.len() == 1 => write!(f, "({},)", items[0]),
            PyLiteral::Tuple(items) => write!(f, "({})", join(items)),
            PyLiteral::List(items) => write!(f, "[{}]", join(items)),
            PyLiteral::Dict(entries) => {
                let text: Vec<String> = entries.iter().map(|(k, v)| format!("'{k}': {v}")).collect();
                write!(f, "{{{}}}", text.join(", "))
            }
        }
    }
}

impl PyLiteral {
    fn parse(text: &str) -> std::result::Result<PyLiteral, String> {
        let mut p = PyParser { chars: text.chars().collect(), pos: 0, depth: 0 };
        let value = p.value()?;
        p.skip_space();
        if p.pos != p.chars.len() {
            return Err(format!("unexpected text at character {}", p.pos));
        }
        Ok(value)
    }
}

struct PyParser {
    chars: Vec<char>,
    pos: usize,
    /// Containers open around the value being read (see [`MAX_NESTING`]).
    depth: usize,
}

/// Containers a header may nest (NumPy writes a dict holding a tuple: 2). The parser
/// recurses per level, so a hostile header of deep brackets must end here, not in a stack
/// overflow.
const MAX_NESTING: usize = 32;

impl PyParser {
    fn skip_space(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.pos).copied()
    }

    fn expect(&mut self, c: char) -> std::result::Result<(), String> {
        match self.peek() {
            Some(x) if x == c => {
                self.pos += 1;
                Ok(())
            }
            Some(x) => Err(format!("expected '{c}' at character {}, found '{x}'", self.pos)),
            None => Err(format!("expected '{c}', found the end")),
        }
    }

    fn value(&mut self) -> std::result::Result<PyLiteral, String> {
        if matches!(self.peek(), Some('{' | '(' | '[')) {
            if self.depth == MAX_NESTING {
                return Err(format!(
                    "containers nest deeper than {MAX_NESTING} levels at character {}",
                    self.pos
                ));
            }
            self.depth += 1;
            let v = self.container();
            self.depth -= 1;
            return v;
        }
        self.scalar()
    }

    /// A dict, tuple or list (the next character opens it).
    fn container(&mut self) -> std::result::Result<PyLiteral, String> {
        match self.peek() {
            Some('{') => {
                self.pos += 1;
                let mut entries = Vec::new();
                while self.peek() != Some('}') {
                    let key = match self.value()? {
                        PyLiteral::Str(s) => s,
                        other => return Err(format!("dict key {other} is not a string")),
                    };
                    self.expect(':')?;
                    entries.push((key, self.value()?));
                    if self.peek() != Some('}') {
                        self.expect(',')?;
                    }
                }
                self.pos += 1;
                Ok(PyLiteral::Dict(entries))
            }
            Some(open @ ('(' | '[')) => {
                let close = if open == '(' { ')' } else { ']' };
                self.pos += 1;
                let mut items = Vec::new();
                while self.peek() != Some(close) {
                    items.push(self.value()?);
                    if self.peek() != Some(close) {
                        self.expect(',')?;
                    }
                }
                self.pos += 1;
                Ok(if open == '(' { PyLiteral::Tuple(items) } else { PyLiteral::List(items) })
            }
            _ => self.scalar(),
        }
    }

    /// A string, integer or boolean.
    fn scalar(&mut self) -> std::result::Result<PyLiteral, String> {
        match self.peek() {
            Some(quote @ ('\'' | '"')) => {
                self.pos += 1;
                let mut s = String::new();
                loop {
                    match self.chars.get(self.pos).copied() {
                        None => return Err("unterminated string".into()),
                        Some(c) if c == quote => break,
                        Some('\\') => {
                            s.extend(self.chars.get(self.pos + 1));
                            self.pos += 1;
                        }
                        Some(c) => s.push(c),
                    }
                    self.pos += 1;
                }
                self.pos += 1;
                Ok(PyLiteral::Str(s))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while self.chars.get(self.pos).is_some_and(char::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits: String = self.chars[start..self.pos].iter().collect();
                if matches!(self.chars.get(self.pos), Some('L' | 'l')) {
                    self.pos += 1;
                }
                digits.parse().map(PyLiteral::Int).map_err(|_| format!("integer {digits} is too large"))
            }
            Some(c) if c.is_alphabetic() => {
                let start = self.pos;
                while self.chars.get(self.pos).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
                    self.pos += 1;
                }
                let word: String = self.chars[start..self.pos].iter().collect();
                match word.as_str() {
                    "True" => Ok(PyLiteral::Bool(true)),
                    "False" => Ok(PyLiteral::Bool(false)),
                    _ => Err(format!("unexpected name '{word}'")),
                }
            }
            Some(c) => Err(format!("unexpected '{c}' at character {}", self.pos)),
            None => Err("unexpected end".into()),
        }
    }
}

// ----- shared ---------------------------------------------------------------------------------

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

fn format_error(path: &Path, msg: impl Into<String>) -> Error {
    Error::Format { path: PathBuf::from(path), msg: msg.into() }
}

/// Bool bytes as 0/1: other writers may store any nonzero byte as true.
fn normalize_bools(data: &[u8], dtype: DType) -> Cow<'_, [u8]> {
    if dtype == DType::Bool && data.iter().any(|&b| b > 1) {
        Cow::Owned(data.iter().map(|&b| (b != 0) as u8).collect())
    } else {
        Cow::Borrowed(data)
    }
}

/// Reverses the bytes of each `size`-byte element.
fn swap_bytes(data: &mut [u8], size: usize) {
    if size > 1 {
        data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
}
