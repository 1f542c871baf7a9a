//! NumPy `.npy` files: little-endian float16 (`<f2`) and float32 (`<f4`), C order, format versions
//! 1.0 to 3.0 on read; 1.0 (or 2.0 when the header needs it) on write.
//!
//! The parser is strict and checks sizes before allocating, so a hostile or truncated file gets a
//! one-line error, never a panic or a huge allocation.

use std::path::Path;

use half::f16;
use thiserror::Error;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The elements of an array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// An array read from or written to a `.npy` file.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    pub data: NpyData,
}

impl NpyArray {
    pub fn len(&self) -> usize {
        match &self.data {
            NpyData::F16(x) => x.len(),
            NpyData::F32(x) => x.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `float16` or `float32`.
    pub fn dtype_name(&self) -> &'static str {
        match self.data {
            NpyData::F16(_) => "float16",
            NpyData::F32(_) => "float32",
        }
    }

    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            NpyData::F16(x) => x.iter().map(|h| h.to_f32()).collect(),
            NpyData::F32(x) => x.clone(),
        }
    }
}

#[derive(Debug, Error)]
pub enum NpyError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {error}")]
    InFile { path: String, error: Box<NpyError> },
    #[error("not a .npy file (bad magic bytes)")]
    BadMagic,
    #[error("unsupported .npy format version {0}.{1}")]
    Version(u8, u8),
    #[error("truncated: {0}")]
    Truncated(String),
    #[error("malformed header: {0}")]
    Header(String),
    #[error("unsupported dtype `{0}`: only little-endian float16 (<f2) and float32 (<f4)")]
    Dtype(String),
    #[error("Fortran-ordered arrays are not supported: save a C-contiguous array")]
    FortranOrder,
    #[error("shape {0:?} is too large")]
    TooLarge(Vec<usize>),
    #[error("{0} bytes of data after the declared array")]
    TrailingData(usize),
    #[error("shape {shape:?} needs {expected} elements, the data has {actual}")]
    ShapeMismatch {
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
}

/// Reads a `.npy` file; errors name the file.
pub fn read_npy(path: &Path) -> Result<NpyArray, NpyError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: name.clone(),
        source,
    })?;
    parse_npy(&bytes).map_err(|error| NpyError::InFile {
        path: name,
        error: Box::new(error),
    })
}

/// Parses the bytes of a `.npy` file.
pub fn parse_npy(bytes: &[u8]) -> Result<NpyArray, NpyError> {
    if bytes.len() < MAGIC.len() + 2 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(if bytes.len() < MAGIC.len() + 2 && MAGIC.starts_with(bytes) {
            NpyError::Truncated(format!("{} bytes, not even a header", bytes.len()))
        } else {
            NpyError::BadMagic
        });
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, header_start) = match major {
        1 => (2, 10),
        2 | 3 => (4, 12),
        _ => return Err(NpyError::Version(major, minor)),
    };
    if bytes.len() < header_start {
        return Err(NpyError::Truncated("header length missing".into()));
    }
    let header_len = if len_bytes == 2 {
        u16::from_le_bytes([bytes[8], bytes[9]]) as usize
    } else {
        u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
    };
    let data_start = header_start
        .checked_add(header_len)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| {
            NpyError::Truncated(format!(
                "header declares {header_len} bytes, the file has {}",
                bytes.len()
            ))
        })?;
    let header = std::str::from_utf8(&bytes[header_start..data_start])
        .map_err(|_| NpyError::Header("not UTF-8 text".into()))?;
    let header = parse_header(header)?;
    let count = header
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| NpyError::TooLarge(header.shape.clone()))?;
    let data = &bytes[data_start..];
    let expected = count
        .checked_mul(header.item_size)
        .ok_or_else(|| NpyError::TooLarge(header.shape.clone()))?;
    if data.len() < expected {
        return Err(NpyError::Truncated(format!(
            "shape {:?} of {} needs {expected} bytes of data, the file holds {}",
            header.shape,
            header.descr,
            data.len()
        )));
    }
    if data.len() > expected {
        return Err(NpyError::TrailingData(data.len() - expected));
    }
    let data = if header.item_size == 2 {
        NpyData::F16(
            data.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
        )
    } else {
        NpyData::F32(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        )
    };
    Ok(NpyArray {
        shape: header.shape,
        data,
    })
}

struct Header {
    descr: String,
    item_size: usize,
    shape: Vec<usize>,
}

/// Parses `{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }`: exactly these three keys,
/// in any order, single or double quotes.
fn parse_header(text: &str) -> Result<Header, NpyError> {
    let bad = |why: &str| NpyError::Header(format!("{why} in `{}`", text.trim()));
    let body = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| bad("not a dict"))?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    let mut rest = body.trim();
    while !rest.is_empty() {
        let (key, after_key) = quoted(rest).ok_or_else(|| bad("expected a quoted key"))?;
        let after_colon = after_key
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| bad("expected `:`"))?
            .trim_start();
        let after_value = match key {
            "descr" => {
                let (value, tail) = quoted(after_colon).ok_or_else(|| bad("descr is not a string"))?;
                descr = Some(value.to_string());
                tail
            }
            "fortran_order" => {
                let (value, tail) = if let Some(t) = after_colon.strip_prefix("False") {
                    (false, t)
                } else if let Some(t) = after_colon.strip_prefix("True") {
                    (true, t)
                } else {
                    return Err(bad("fortran_order is not True or False"));
                };
                fortran = Some(value);
                tail
            }
            "shape" => {
                let inner = after_colon
                    .strip_prefix('(')
                    .ok_or_else(|| bad("shape is not a tuple"))?;
                let close = inner.find(')').ok_or_else(|| bad("unclosed shape tuple"))?;
                let dims = inner[..close]
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.parse::<usize>()
                            .map_err(|_| bad("shape entry is not a non-negative integer"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                shape = Some(dims);
                &inner[close + 1..]
            }
            other => return Err(bad(&format!("unexpected key `{other}`"))),
        };
        rest = after_value.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    let descr = descr.ok_or_else(|| bad("no descr"))?;
    if fortran.ok_or_else(|| bad("no fortran_order"))? {
        return Err(NpyError::FortranOrder);
    }
    let item_size = match descr.as_str() {
        "<f2" => 2,
        "<f4" => 4,
        _ => return Err(NpyError::Dtype(descr)),
    };
    Ok(Header {
        descr,
        item_size,
        shape: shape.ok_or_else(|| bad("no shape"))?,
    })
}

/// A quoted string at the start of `text` and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let end = text[1..].find(quote)? + 1;
    Some((&text[1..end], &text[end + 1..]))
}

/// Encodes an array as `.npy` bytes.
pub fn encode_npy(shape: &[usize], data: &NpyData) -> Result<Vec<u8>, NpyError> {
    let (descr, payload): (&str, Vec<u8>) = match data {
        NpyData::F16(x) => ("<f2", x.iter().flat_map(|h| h.to_le_bytes()).collect()),
        NpyData::F32(x) => ("<f4", x.iter().flat_map(|f| f.to_le_bytes()).collect()),
    };
    let expected = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| NpyError::TooLarge(shape.to_vec()))?;
    let actual = payload.len() / if descr == "<f2" { 2 } else { 4 };
    if expected != actual {
        return Err(NpyError::ShapeMismatch {
            shape: shape.to_vec(),
            expected,
            actual,
        });
    }
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // Pad with spaces so that the data starts on a 64-byte boundary, newline last.
    let prefix = if header.len() + 11 <= u16::MAX as usize {
        10
    } else {
        12
    };
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + payload.len());
    out.extend_from_slice(MAGIC);
    if prefix == 10 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Writes an array to a `.npy` file.
pub fn write_npy(path: &Path, shape: &[usize], data: &NpyData) -> Result<(), NpyError> {
    let bytes = encode_npy(shape, data)?;
    std::fs::write(path, bytes).map_err(|source| NpyError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_hand(version: u8, header: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn round_trips_both_dtypes_and_odd_shapes() {
        let shapes: [&[usize]; 5] = [&[], &[3], &[2, 3], &[1, 2, 3, 4], &[0, 5]];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let f32s = NpyData::F32((0..n).map(|i| i as f32 * 0.5 - 3.0).collect());
            let f16s = NpyData::F16((0..n).map(|i| f16::from_f32(i as f32 - 1.5)).collect());
            for data in [f32s, f16s] {
                let bytes = encode_npy(shape, &data).unwrap();
                let header_end = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
                assert_eq!(header_end % 64, 0, "data must start 64-byte aligned");
                let back = parse_npy(&bytes).unwrap();
                assert_eq!(
                    back,
                    NpyArray {
                        shape: shape.to_vec(),
                        data
                    }
                );
            }
        }
    }

    #[test]
    fn reads_numpy_layouts_of_every_version() {
        let payload: Vec<u8> = [1.0f32, -2.5].iter().flat_map(|f| f.to_le_bytes()).collect();
        let header = "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}              \n";
        for version in [1, 2, 3] {
            let array = parse_npy(&by_hand(version, header, &payload)).unwrap();
            assert_eq!(array.shape, vec![2]);
            assert_eq!(array.to_f32(), vec![1.0, -2.5]);
        }
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        let ok = encode_npy(&[2, 2], &NpyData::F32(vec![1.0; 4])).unwrap();
        let err = |bytes: &[u8]| parse_npy(bytes).unwrap_err().to_string();
        assert!(err(&ok[..ok.len() - 1]).contains("truncated"));
        assert!(err(&ok[..5]).contains("truncated"));
        assert!(err(b"PK\x03\x04 not numpy").contains("magic"));
        assert!(err(&[ok.clone(), vec![0, 0, 0, 0]].concat()).contains("after the declared array"));
        let header = |h: &str| by_hand(1, h, &[0; 16]);
        assert!(err(&header(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"
        ))
        .contains("<f8"));
        assert!(err(&header(
            "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }"
        ))
        .contains(">f4"));
        assert!(err(&header(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }"
        ))
        .contains("Fortran"));
        assert!(err(&header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }"
        ))
        .contains("header"));
        assert!(err(&header("{'descr': '<f4', 'shape': (4,), }")).contains("fortran_order"));
        assert!(err(&header("not a dict")).contains("header"));
        // A declared size far beyond the file is refused before any allocation.
        let huge =
            header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000000000), }");
        assert!(err(&huge).contains("too large") || err(&huge).contains("truncated"));
        let big = header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }");
        assert!(err(&big).contains("truncated"));
        // Header length past the end of the file.
        let mut lying = ok.clone();
        lying[8] = 0xff;
        lying[9] = 0xff;
        assert!(err(&lying).contains("truncated"));
        assert!(err(&by_hand(9, "{}", &[])).contains("version"));
    }

    #[test]
    fn encode_checks_the_shape() {
        assert!(matches!(
            encode_npy(&[3], &NpyData::F32(vec![0.0; 2])),
            Err(NpyError::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn file_errors_name_the_file() {
        let err = read_npy(Path::new("/nonexistent/q.npy")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/q.npy"), "{err}");
    }
}
