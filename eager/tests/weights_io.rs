//! Weights files on the real CPU plugin: safetensors and .npy round-trip every dtype bit for
//! bit (NaN payloads, -0.0, infinities, integer extremes, 0-d and empty shapes), files we
//! write decode with the `safetensors` crate's own reader, .npy files NumPy wrote (the
//! fixtures in tests/data, from make_npy_fixtures.py) load to the values written there,
//! our .npy files are byte-identical to NumPy's, and malformed files are errors naming
//! the file.

use std::path::{Path, PathBuf};

use eager::io::{load_npy, load_npy_on, load_safetensors, load_safetensors_on, save_npy, save_safetensors};
use eager::prelude::*;
use eager::Element;
use half::{bf16, f16};
use safetensors::tensor::{Dtype as SafeDtype, SafeTensors, TensorView};

/// Little-endian bytes of a host value: the reference the files and tensors are checked
/// against.
trait LeBytes: Element {
    fn le_bytes(self) -> Vec<u8>;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn le_bytes(self) -> Vec<u8> { self.to_le_bytes().to_vec() }
        }
    )*};
}
le_bytes!(u8, i32, i64, u32, u64, f16, bf16, f32, f64);

impl LeBytes for bool {
    fn le_bytes(self) -> Vec<u8> {
        vec![self as u8]
    }
}

/// A tensor made from host values, and what it must read back as.
struct Case {
    name: String,
    tensor: Tensor,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn case<T: LeBytes>(name: &str, values: &[T], shape: &[usize]) -> Case {
    Case {
        name: name.to_string(),
        tensor: Tensor::from_slice(values, shape).expect("upload"),
        dtype: T::DTYPE,
        shape: shape.to_vec(),
        bytes: values.iter().flat_map(|v| v.le_bytes()).collect(),
    }
}

/// A full, a 0-d and an empty case of `values`' dtype.
fn cases_of<T: LeBytes>(label: &str, values: &[T], shape: &[usize]) -> Vec<Case> {
    vec![
        case(label, values, shape),
        case(&format!("{label}.scalar"), &values[..1], &[]),
        case(&format!("{label}.empty"), &values[..0], &[2, 0, 3]),
    ]
}

/// Special values of every dtype: NaNs with payloads (quiet and signalling), -0.0,
/// infinities, extremes, subnormals.
fn every_dtype() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(cases_of("bool", &[true, false, false, true, true, false], &[2, 3]));
    cases.extend(cases_of("u8", &[255u8, 0, 1, 127, 128], &[5]));
    cases.extend(cases_of("i32", &[i32::MIN, -1, 0, 1, i32::MAX, 7], &[3, 2]));
    cases.extend(cases_of("i64", &[i64::MIN, -1, 0, i64::MAX], &[2, 2]));
    cases.extend(cases_of("u32", &[u32::MAX, 0, 1], &[3, 1]));
    cases.extend(cases_of("u64", &[u64::MAX, 0, 1 << 63], &[1, 3]));
    cases.extend(cases_of(
        "f16",
        &[
            f16::from_bits(0x7e01),
            f16::NEG_ZERO,
            f16::INFINITY,
            f16::NEG_INFINITY,
            f16::MAX,
            f16::MIN,
            f16::from_bits(0x0001),
            f16::from_bits(0x7c01),
        ],
        &[2, 2, 2],
    ));
    cases.extend(cases_of(
        "bf16",
        &[
            bf16::from_bits(0x7fc1),
            bf16::NEG_ZERO,
            bf16::INFINITY,
            bf16::NEG_INFINITY,
            bf16::MAX,
            bf16::from_bits(0x0001),
        ],
        &[6],
    ));
    cases.extend(cases_of(
        "f32",
        &[
            f32::from_bits(0x7fc0_0001),
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::from_bits(1),
            f32::from_bits(0xff80_0001),
        ],
        &[4, 2],
    ));
    cases.extend(cases_of(
        "f64",
        &[
            f64::from_bits(0x7ff8_0000_dead_beef),
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::from_bits(1),
        ],
        &[2, 1, 3],
    ));
    cases
}

/// A tensor's values as little-endian bytes, read through the public API.
fn le_bytes_of(t: &Tensor) -> Vec<u8> {
    fn conv<T: LeBytes>(t: &Tensor) -> Vec<u8> {
        t.to_vec::<T>().expect("read back").into_iter().flat_map(LeBytes::le_bytes).collect()
    }
    match t.dtype() {
        DType::Bool => conv::<bool>(t),
        DType::U8 => conv::<u8>(t),
        DType::I32 => conv::<i32>(t),
        DType::I64 => conv::<i64>(t),
        DType::U32 => conv::<u32>(t),
        DType::U64 => conv::<u64>(t),
        DType::F16 => conv::<f16>(t),
        DType::BF16 => conv::<bf16>(t),
        DType::F32 => conv::<f32>(t),
        DType::F64 => conv::<f64>(t),
    }
}

fn assert_matches(loaded: &Tensor, case: &Case) {
    assert_eq!(loaded.dtype(), case.dtype, "{}: dtype", case.name);
    assert_eq!(loaded.shape(), case.shape.as_slice(), "{}: shape", case.name);
    assert_eq!(le_bytes_of(loaded), case.bytes, "{}: bytes", case.name);
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The error is a format error about `path`, and its message names the file and says `words`.
fn assert_format_error<T: std::fmt::Debug>(result: Result<T>, path: &Path, words: &[&str]) {
    let err = result.expect_err("a malformed file must be an error");
    let text = err.to_string();
    match &err {
        Error::Format { path: p, .. } => assert_eq!(p, path, "{text}"),
        other => panic!("expected a format error, got {other:?}"),
    }
    assert!(text.contains(&path.display().to_string()), "error does not name the file: {text}");
    for w in words {
        assert!(text.contains(w), "error does not say {w:?}: {text}");
    }
}

// ----- safetensors ----------------------------------------------------------------------------

/// Saves one tensor of every dtype case to `path`; returns the cases.
fn save_every_dtype(path: &std::path::Path) -> Result<Vec<Case>> {
    let cases = every_dtype();
    let named: Vec<(&str, &Tensor)> = cases.iter().map(|c| (c.name.as_str(), &c.tensor)).collect();
    save_safetensors(path, &named)?;
    Ok(cases)
}

#[test]
fn safetensors_round_trips_every_dtype_bit_for_bit() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.safetensors");
    let cases = save_every_dtype(&path)?;

    let loaded = load_safetensors(&path)?;
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(loaded.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), names, "sorted by name");
    for (name, t) in &loaded {
        assert_eq!(t.device(), eager::default_device());
        assert_matches(t, cases.iter().find(|c| &c.name == name).unwrap());
    }

    let on = load_safetensors_on(&path, Device::cpu())?;
    assert!(on.iter().all(|(_, t)| t.device() == Device::cpu()));
    Ok(())
}

#[test]
fn safetensors_we_write_decode_with_the_safetensors_crate() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.safetensors");
    let cases = save_every_dtype(&path)?;

    let file = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&file).expect("the crate reads our file");
    assert_eq!(st.len(), cases.len());
    for c in &cases {
        let view = st.tensor(&c.name).expect("tensor present");
        // The format's own dtype names, written out here rather than taken from our mapping.
        let expected = match c.dtype {
            DType::Bool => "BOOL",
            DType::U8 => "U8",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::U32 => "U32",
            DType::U64 => "U64",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F32 => "F32",
            DType::F64 => "F64",
        };
        assert_eq!(view.dtype().to_string(), expected, "{}", c.name);
        assert_eq!(view.shape(), c.shape.as_slice(), "{}", c.name);
        assert_eq!(view.data(), c.bytes.as_slice(), "{}", c.name);
    }
    Ok(())
}

#[test]
fn safetensors_the_crate_writes_load_and_unknown_dtypes_are_named() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("crate.safetensors");
    let weight: Vec<u8> = [0.5f32, -1.0, 2.0, f32::NAN].iter().flat_map(|v| v.to_le_bytes()).collect();
    let ids: Vec<u8> = [3i64, -4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mask = [1u8, 0, 1];
    let views = vec![
        ("layer.weight", TensorView::new(SafeDtype::F32, vec![2, 2], &weight).unwrap()),
        ("ids", TensorView::new(SafeDtype::I64, vec![2], &ids).unwrap()),
        ("mask", TensorView::new(SafeDtype::BOOL, vec![3], &mask).unwrap()),
    ];
    let mut metadata = std::collections::HashMap::new();
    metadata.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(views, Some(metadata), &good).unwrap();

    let loaded = load_safetensors(&good)?;
    let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ids", "layer.weight", "mask"]);
    assert_eq!(loaded[0].1.to_vec::<i64>()?, [3, -4]);
    assert_eq!(loaded[1].1.shape(), [2, 2]);
    assert_eq!(le_bytes_of(&loaded[1].1), weight);
    assert_eq!(loaded[2].1.to_vec::<bool>()?, [true, false, true]);

    let bad = dir.path().join("int8.safetensors");
    let q = [1u8, 255];
    let views = vec![
        ("fine", TensorView::new(SafeDtype::F32, vec![1], &weight[..4]).unwrap()),
        ("layer.qweight", TensorView::new(SafeDtype::I8, vec![2], &q).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, &bad).unwrap();
    assert_format_error(load_safetensors(&bad), &bad, &["layer.qweight", "I8"]);
    Ok(())
}

#[test]
fn safetensors_names_must_be_distinct() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.safetensors");
    let t = Tensor::from_slice(&[1.0f32], &[1])?;
    assert_format_error(save_safetensors(&path, &[("w", &t), ("w", &t)]), &path, &["`w`", "twice"]);
    assert_format_error(save_safetensors(&path, &[("__metadata__", &t)]), &path, &["__metadata__"]);
    assert!(!path.exists());
    Ok(())
}

#[test]
fn malformed_safetensors_are_errors_naming_the_file() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.safetensors");
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
    save_safetensors(&good, &[("w", &t)])?;
    let bytes = std::fs::read(&good).unwrap();

    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let mut lying = bytes.clone();
    lying[..8].copy_from_slice(&(header_len + 1000).to_le_bytes());
    let mut bad_json = bytes.clone();
    bad_json[8] = b'[';
    let files: [(&str, Vec<u8>); 5] = [
        ("empty", vec![]),
        ("garbage", b"this is not a safetensors file at all".to_vec()),
        ("truncated", bytes[..bytes.len() - 3].to_vec()),
        ("lying_header_length", lying),
        ("bad_json", bad_json),
    ];
    for (name, contents) in files {
        let path = dir.path().join(format!("{name}.safetensors"));
        std::fs::write(&path, contents).unwrap();
        assert_format_error(load_safetensors(&path), &path, &["not a valid safetensors file"]);
    }

    let missing = dir.path().join("missing.safetensors");
    match load_safetensors(&missing) {
        Err(Error::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    Ok(())
}

// ----- .npy -----------------------------------------------------------------------------------

#[test]
fn npy_round_trips_every_numpy_dtype_bit_for_bit() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    for c in every_dtype().iter().filter(|c| c.dtype != DType::BF16) {
        let path = dir.path().join(format!("{}.npy", c.name));
        save_npy(&path, &c.tensor)?;
        let loaded = load_npy(&path)?;
        assert_eq!(loaded.device(), eager::default_device());
        assert_matches(&loaded, c);
        assert_matches(&load_npy_on(&path, Device::cpu())?, c);
    }
    Ok(())
}

#[test]
fn npy_refuses_bf16_and_says_what_to_do() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bf16.npy");
    let t = Tensor::from_slice(&[bf16::ONE], &[1])?;
    assert_format_error(save_npy(&path, &t), &path, &["bf16", "save_safetensors", ".to_dtype(DType::F32)"]);
    assert!(!path.exists());
    Ok(())
}

/// The fixtures NumPy wrote in C order, as the values make_npy_fixtures.py gave it.
fn numpy_c_order_fixtures() -> Vec<(&'static str, Case)> {
    let f32_bits = [0x3FC0_0000u32, 0xC000_0000, 0x0000_0000, 0x8000_0000, 0x7F80_0000, 0x7FC0_0001];
    vec![
        ("f32_2x3.npy", case("f32", &f32_bits.map(f32::from_bits), &[2, 3])),
        ("i64_vec.npy", case("i64", &[0i64, -1, i64::MAX, i64::MIN, 42], &[5])),
        ("bool_scalar.npy", case("bool", &[true], &[])),
        ("bool_2x2.npy", case("bool", &[true, false, false, true], &[2, 2])),
        (
            "f16_vec.npy",
            case("f16", &[1.0f32, -0.5, 65504.0, 2f32.powi(-14), f32::NEG_INFINITY].map(f16::from_f32), &[5]),
        ),
        ("u8_1x5.npy", case("u8", &[0u8, 1, 127, 128, 255], &[1, 5])),
        ("i32_vec.npy", case("i32", &[i32::MIN, -1, 0, i32::MAX], &[4])),
        ("u32_vec.npy", case("u32", &[0u32, 1, u32::MAX], &[3])),
        ("u64_vec.npy", case("u64", &[0u64, 1, u64::MAX], &[3])),
        ("f64_empty_0x3.npy", case::<f64>("f64", &[], &[0, 3])),
        ("u8_rank18.npy", case("u8", &[7u8], &[1; 18])),
    ]
}

#[test]
fn npy_files_numpy_wrote_load_to_their_values() -> Result<()> {
    for (file, c) in numpy_c_order_fixtures() {
        assert_matches(&load_npy(fixture(file))?, &c);
    }
    let others = [
        // Fortran order: NumPy stored these column-major.
        ("f64_2x3_fortran.npy", case("f64", &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])),
        ("i32_2x3x4_fortran.npy", case("i32", &(0..24).collect::<Vec<i32>>(), &[2, 3, 4])),
        // Big-endian.
        ("i32_be_vec.npy", case("i32", &[1i32, -2, 3_000_000], &[3])),
        ("f64_be_2x2.npy", case("f64", &[1.5f64, -2.25, 1e300, -0.0], &[2, 2])),
        // Format versions 2.0 and 3.0.
        ("f32_vec_v2.npy", case("f32", &[1.0f32, 2.0, 3.0], &[3])),
        ("f32_vec_v3.npy", case("f32", &[1.0f32, 2.0, 3.0], &[3])),
    ];
    for (file, c) in others {
        assert_matches(&load_npy(fixture(file))?, &c);
    }
    let i16 = fixture("i16_vec.npy");
    assert_format_error(load_npy(&i16), &i16, &["'<i2'"]);
    Ok(())
}

#[test]
fn npy_we_write_is_byte_identical_to_numpys() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    for (file, c) in numpy_c_order_fixtures() {
        let path = dir.path().join(file);
        save_npy(&path, &c.tensor)?;
        assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(fixture(file)).unwrap(), "{file}");
    }
    Ok(())
}

#[test]
fn npy_header_layout_aligns_the_data_for_any_shape() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let shapes: [&[usize]; 7] =
        [&[], &[0], &[1], &[12345, 0], &[1, 2, 3, 4, 5, 6, 7], &[0, 99999999, 1], &[100000000000000000, 0]];
    for shape in shapes {
        let n: usize = shape.iter().product();
        let t = Tensor::from_slice(&vec![7u8; n], shape)?;
        let path = dir.path().join("t.npy");
        save_npy(&path, &t)?;
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "{shape:?}");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let data_start = 10 + header_len;
        assert_eq!(data_start % 64, 0, "{shape:?}");
        assert_eq!(bytes.len(), data_start + n, "{shape:?}");
        let header = std::str::from_utf8(&bytes[10..data_start]).unwrap();
        assert!(
            header.ends_with('\n')
                && header.starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': ("),
            "{header:?}"
        );
        assert_eq!(load_npy(&path)?.shape(), shape);
    }
    Ok(())
}

/// A v1.0 .npy file with `header` (padded as NumPy pads) and `data`.
fn npy_with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut text = header.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_headers_parse_however_they_are_spaced() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = [1.0f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let headers = [
        r#"{"descr":"<f4","fortran_order":False,"shape":(2,)}"#,
        "{'shape': (2L,), 'fortran_order': False, 'descr': '<f4'}",
        "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , ) , }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
    ];
    for (i, header) in headers.iter().enumerate() {
        let path = dir.path().join(format!("h{i}.npy"));
        std::fs::write(&path, npy_with_header(header, &data)).unwrap();
        let t = load_npy(&path)?;
        assert_eq!((t.shape(), t.to_vec::<f32>()?), (&[2][..], vec![1.0, -2.0]), "{header}");
    }
    Ok(())
}

#[test]
fn malformed_npy_are_errors_naming_the_file() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture("f32_2x3.npy")).unwrap();
    let mut lying_length = good.clone();
    lying_length[8..10].copy_from_slice(&500u16.to_le_bytes());
    let mut version9 = good.clone();
    version9[6] = 9;
    let f4 = |header: &str, n: usize| npy_with_header(header, &vec![0u8; 4 * n]);
    let files: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "not a .npy file"),
        ("garbage", b"PK\x03\x04 this is a zip, not an npy".to_vec(), "not a .npy file"),
        ("magic_only", b"\x93NUMPY\x01\x00\x76".to_vec(), "header length"),
        ("version9", version9, "version 9.0"),
        ("lying_header_length", lying_length, "past the end"),
        ("truncated_data", good[..good.len() - 3].to_vec(), "truncated"),
        ("extra_data", [good.as_slice(), &[0, 0, 0, 0]].concat(), "28 bytes after the header"),
        (
            "overflowing_shape",
            f4("{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615, 2), }", 0),
            "too large",
        ),
        (
            "negative_dim",
            f4("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0),
            "unexpected '-'",
        ),
        ("complex", f4("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 2), "'<c8'"),
        (
            "structured",
            f4("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 1),
            "structured",
        ),
        ("no_shape", f4("{'descr': '<f4', 'fortran_order': False, }", 1), "no 'shape'"),
        (
            "extra_key",
            f4("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 1),
            "unexpected key 'x'",
        ),
        (
            "fortran_string",
            f4("{'descr': '<f4', 'fortran_order': 'yes', 'shape': (1,), }", 1),
            "not True or False",
        ),
        ("not_a_dict", f4("('<f4', False, (1,))", 1), "not a dict"),
        ("unclosed", f4("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", 1), "unexpected end"),
        ("unterminated_string", f4("{'descr': '<f4", 1), "unterminated string"),
    ];
    for (name, contents, words) in files {
        let path = dir.path().join(format!("{name}.npy"));
        std::fs::write(&path, contents).unwrap();
        assert_format_error(load_npy(&path), &path, &[words]);
    }

    let missing = dir.path().join("missing.npy");
    assert!(matches!(load_npy(&missing), Err(Error::Io { path, .. }) if path == missing));
    Ok(())
}

#[test]
fn bool_bytes_other_than_one_load_as_true() -> Result<()> {
    // Other writers may store true as any nonzero byte; ops on the device must see 1.
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("bool.npy");
    std::fs::write(
        &npy,
        npy_with_header("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", &[0, 1, 2, 255]),
    )
    .unwrap();
    let st = dir.path().join("bool.safetensors");
    let data = [0u8, 1, 2, 255];
    safetensors::serialize_to_file(
        [("b", TensorView::new(SafeDtype::BOOL, vec![4], &data).unwrap())],
        None,
        &st,
    )
    .unwrap();
    for t in [load_npy(&npy)?, load_safetensors(&st)?.remove(0).1] {
        assert_eq!(t.to_dtype(DType::U8)?.to_vec::<u8>()?, [0, 1, 1, 1]);
        assert_eq!(t.to_dtype(DType::I32)?.sum_all()?.item::<i32>()?, 3);
    }
    Ok(())
}
