//! NumPy `.npy` files: little-endian float16 (`<f2`) and float32 (`<f4`), and int32 (`<i4`)
//! for the index arrays of varlen and paged problems (prefix sums, block tables), C order. Format
//! versions 1.0, 2.0 and 3.0 are read; 1.0 is written, or 2.0 when the header is too long for 1.0's
//! 16-bit length field.
//!
//! The layout (see numpy's `numpy/lib/format.py`): the magic `\x93NUMPY`, a major and a minor
//! version byte, the header length (u16 little-endian in 1.0, u32 in 2.0 and 3.0), the header (a
//! Python dict literal padded with spaces and ending in `\n`, so that the data starts on a 64-byte
//! boundary), then the raw elements.
//!
//! Reading is strict and checks every size against the bytes actually present before allocating,
//! so a truncated, hostile or foreign file gets a one-line error, never a panic or a huge
//! allocation.
//!
//! Why not `npyz` (0.9.1, `half` feature), measured again on hand-made files (2026-11, a scratch
//! crate calling `NpyFile::new` and `into_vec::<f16>`): it reads `<f2`/`<f4` fine, but
//! - with debug assertions (tests, fuzzing) `NpyFile::new` itself panics ("attempt to multiply
//!   with overflow") on a shape like `(2^32, 2^32)`, before a caller could check anything; in
//!   release it wraps the count instead: `(2^64-1, 2^64-1)` reads as a valid 1-element array;
//! - it accepts data past the declared shape (4 trailing bytes: no error);
//! - it hands back Fortran-ordered data as a plain vector (the caller must ask `order()`);
//! - a 12-byte file declaring a 4 GiB header gets that buffer allocated before the read fails;
//! - a header syntax error is a 5-line message (a caret diagram).
//!
//! The first and the fourth can only be avoided by parsing the preamble and the header before
//! npyz sees them, which is this module; the others need checks of their own around it. So the
//! reader stays hand-written, with its tests and the `npy_reader` fuzz target. `ndarray-npy` was
//! not measured: it would bring `ndarray`, which nothing else here needs.

use std::fmt;
use std::path::Path;

use half::f16;
use thiserror::Error;

const MAGIC: &[u8] = b"\x93NUMPY";
/// Magic, two version bytes, and the 1.0 header length field: the least any file holds.
const MIN_PREAMBLE: usize = MAGIC.len() + 2 + 2;
/// numpy aligns the data to this many bytes.
const ALIGN: usize = 64;

/// The elements of an array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// Half-precision elements (`<f2`).
    F16(Vec<f16>),
    /// Single-precision elements (`<f4`).
    F32(Vec<f32>),
    /// 32-bit signed integers (`<i4`).
    I32(Vec<i32>),
    /// Bytes (`|u1`, numpy's `uint8`): e4m3 values as their bit patterns.
    U8(Vec<u8>),
}

impl NpyData {
    fn dtype(&self) -> NpyDtype {
        match self {
            NpyData::F16(_) => NpyDtype::F16,
            NpyData::F32(_) => NpyDtype::F32,
            NpyData::I32(_) => NpyDtype::I32,
            NpyData::U8(_) => NpyDtype::U8,
        }
    }

    fn len(&self) -> usize {
        match self {
            NpyData::F16(x) => x.len(),
            NpyData::F32(x) => x.len(),
            NpyData::I32(x) => x.len(),
            NpyData::U8(x) => x.len(),
        }
    }
}

/// An array read from or written to a `.npy` file.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The dimensions, outermost first (C order); empty for a scalar.
    pub shape: Vec<usize>,
    /// The elements, in C order.
    pub data: NpyData,
}

impl NpyArray {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `"float16"`, `"float32"`, `"int32"` or `"uint8"`, numpy's names.
    pub fn dtype_name(&self) -> &'static str {
        self.data.dtype().name()
    }

    /// The elements as f32: exact for float16, float32 and uint8 (the byte's value, not an
    /// e4m3 decoding), rounded to nearest for int32 beyond 2^24.
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            NpyData::F16(x) => x.iter().map(|h| h.to_f32()).collect(),
            NpyData::F32(x) => x.clone(),
            NpyData::I32(x) => x.iter().map(|&i| i as f32).collect(),
            NpyData::U8(x) => x.iter().map(|&b| f32::from(b)).collect(),
        }
    }

    /// The elements when they are int32, else `None`.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            NpyData::I32(x) => Some(x),
            _ => None,
        }
    }

    /// The elements when they are uint8, else `None`.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            NpyData::U8(x) => Some(x),
            _ => None,
        }
    }
}

/// The element types this module handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    /// IEEE half precision (`<f2`, numpy's `float16`).
    F16,
    /// IEEE single precision (`<f4`, numpy's `float32`).
    F32,
    /// 32-bit signed integers (`<i4`, numpy's `int32`).
    I32,
    /// Bytes (`|u1`, numpy's `uint8`).
    U8,
}

impl NpyDtype {
    fn from_descr(descr: &str) -> Result<NpyDtype, NpyError> {
        match descr {
            "<f2" => Ok(NpyDtype::F16),
            "<f4" => Ok(NpyDtype::F32),
            "<i4" => Ok(NpyDtype::I32),
            // One byte has no byte order: numpy writes `|u1`.
            "|u1" | "<u1" => Ok(NpyDtype::U8),
            // Big-endian gets its own message since the fix (`astype('<f4')`) is easy.
            _ if descr.starts_with('>') && descr.len() > 1 => Err(NpyError::BigEndian(abbreviate(descr))),
            _ => Err(NpyError::UnsupportedDtype(abbreviate(descr))),
        }
    }

    fn descr(self) -> &'static str {
        match self {
            NpyDtype::F16 => "<f2",
            NpyDtype::F32 => "<f4",
            NpyDtype::I32 => "<i4",
            NpyDtype::U8 => "|u1",
        }
    }

    fn name(self) -> &'static str {
        match self {
            NpyDtype::F16 => "float16",
            NpyDtype::F32 => "float32",
            NpyDtype::I32 => "int32",
            NpyDtype::U8 => "uint8",
        }
    }

    fn size(self) -> usize {
        match self {
            NpyDtype::F16 => 2,
            NpyDtype::F32 | NpyDtype::I32 => 4,
            NpyDtype::U8 => 1,
        }
    }
}

impl fmt::Display for NpyDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A shape as people write it in messages: `2x8x512x64`, `5`, or `scalar`; past 8 dimensions,
/// the first 8 and the rank (`1x1x1x1x1x1x1x1x... (30000 dims)`), so that messages stay short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyShape(pub Vec<usize>);

impl NpyShape {
    const SHOWN: usize = 8;
}

impl fmt::Display for NpyShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("scalar");
        }
        for (i, d) in self.0.iter().take(Self::SHOWN).enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() > Self::SHOWN {
            write!(f, "x... ({} dims)", self.0.len())?;
        }
        Ok(())
    }
}

/// Everything that can go wrong reading or writing a `.npy` file, each a one-line message.
#[derive(Debug, Error)]
pub enum NpyError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file's path.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A parse error of [`read_npy`], with the file's name in front.
    #[error("{path}: {error}")]
    InFile {
        /// The file's path.
        path: String,
        /// What was wrong with its contents.
        error: Box<NpyError>,
    },
    /// Fewer bytes (the count) than the magic, version and header length take.
    #[error("truncated: {0} bytes, too short for a .npy preamble (magic, version, header length)")]
    TruncatedPreamble(usize),
    /// The bytes do not start with `\x93NUMPY`.
    #[error("not a .npy file: it does not start with the magic bytes \\x93NUMPY")]
    BadMagic,
    /// A format version other than 1.0, 2.0 and 3.0.
    #[error("unsupported .npy format version {major}.{minor}: versions 1.0, 2.0 and 3.0 are read")]
    UnsupportedVersion {
        /// The major version byte.
        major: u8,
        /// The minor version byte.
        minor: u8,
    },
    /// The header length field points past the end of the file.
    #[error("truncated: the header length field says {declared} bytes but only {available} follow it")]
    HeaderPastEnd {
        /// Header bytes the length field declares.
        declared: usize,
        /// Bytes that follow the field.
        available: usize,
    },
    /// The header is not UTF-8 text.
    #[error("malformed header: it is not ASCII/UTF-8 text")]
    HeaderNotText,
    /// The header dict could not be parsed.
    #[error("malformed header {header:?}: {reason}")]
    Header {
        /// The header text (abbreviated when long).
        header: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `descr` other than `<f2`, `<f4`, `<i4` and `|u1` (the descr, abbreviated).
    #[error("unsupported dtype `{0}`: only little-endian float16 (<f2), float32 (<f4), int32 (<i4) and uint8 (|u1) are supported")]
    UnsupportedDtype(String),
    /// A big-endian `descr` (the descr, abbreviated).
    #[error("big-endian data (`{0}`) is not supported: save it with .astype('<f4') or .astype('<f2')")]
    BigEndian(String),
    /// The header says `'fortran_order': True`.
    #[error("Fortran-ordered arrays are not supported: save np.ascontiguousarray(a) instead")]
    FortranOrder,
    /// The shape's size in bytes overflows `usize`.
    #[error("header declares {shape} {dtype}: more bytes than this machine can address")]
    TooLarge {
        /// The declared shape.
        shape: NpyShape,
        /// The declared element type.
        dtype: NpyDtype,
    },
    /// The file holds fewer data bytes than the header declares.
    #[error(
        "truncated: header declares {shape} {dtype} ({expected} bytes of data) but the file holds {actual}"
    )]
    TruncatedData {
        /// The declared shape.
        shape: NpyShape,
        /// The declared element type.
        dtype: NpyDtype,
        /// Data bytes the header declares.
        expected: usize,
        /// Data bytes present.
        actual: usize,
    },
    /// The file holds more data bytes than the header declares.
    #[error(
        "{extra} bytes after the declared {shape} {dtype} data ({expected} bytes): not a single .npy array"
    )]
    TrailingData {
        /// The declared shape.
        shape: NpyShape,
        /// The declared element type.
        dtype: NpyDtype,
        /// Data bytes the header declares.
        expected: usize,
        /// Bytes past them.
        extra: usize,
    },
    /// Writing: the data's length is not the shape's element count.
    #[error("shape {shape} needs {expected} elements but the data has {actual}")]
    ShapeMismatch {
        /// The shape asked for.
        shape: NpyShape,
        /// Elements the shape holds.
        expected: usize,
        /// Elements the data holds.
        actual: usize,
    },
    /// Writing: the header would need more than format 2.0's 32-bit length (the bytes).
    #[error("the .npy header would be {0} bytes, more than format 2.0's 4 GiB limit")]
    HeaderTooLong(usize),
}

/// Reads a `.npy` file; errors start with the file's path.
pub fn read_npy(path: &Path) -> Result<NpyArray, NpyError> {
    let name = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: name(), source })?;
    parse_npy(&bytes).map_err(|error| NpyError::InFile {
        path: name(),
        error: Box::new(error),
    })
}

/// Parses the bytes of a `.npy` file.
pub fn parse_npy(bytes: &[u8]) -> Result<NpyArray, NpyError> {
    let (header_text, data) = split_preamble(bytes)?;
    let header = parse_header(header_text)?;
    let dtype = NpyDtype::from_descr(&header.descr)?;
    if header.fortran_order {
        return Err(NpyError::FortranOrder);
    }
    let shape = header.shape;
    // Both products are checked, and compared with the bytes present, before anything is allocated.
    let expected = element_count(&shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| NpyError::TooLarge {
            shape: NpyShape(shape.clone()),
            dtype,
        })?;
    if data.len() < expected {
        return Err(NpyError::TruncatedData {
            shape: NpyShape(shape),
            dtype,
            expected,
            actual: data.len(),
        });
    }
    if data.len() > expected {
        return Err(NpyError::TrailingData {
            shape: NpyShape(shape),
            dtype,
            expected,
            extra: data.len() - expected,
        });
    }
    let data = match dtype {
        NpyDtype::F16 => NpyData::F16(
            data.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        NpyDtype::F32 => NpyData::F32(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        NpyDtype::I32 => NpyData::I32(
            data.chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        NpyDtype::U8 => NpyData::U8(data[..expected].to_vec()),
    };
    Ok(NpyArray { shape, data })
}

/// Checks the magic and version and splits the rest into the header text and the data bytes.
fn split_preamble(bytes: &[u8]) -> Result<(&str, &[u8]), NpyError> {
    // A prefix of the magic is a cut-off file; anything else is some other format.
    let magic_len = bytes.len().min(MAGIC.len());
    if bytes[..magic_len] != MAGIC[..magic_len] {
        return Err(NpyError::BadMagic);
    }
    if bytes.len() < MIN_PREAMBLE {
        return Err(NpyError::TruncatedPreamble(bytes.len()));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let rest = &bytes[8..];
    let (declared, rest) = match (major, minor) {
        (1, 0) => (u16::from_le_bytes([rest[0], rest[1]]) as usize, &rest[2..]),
        (2, 0) | (3, 0) => {
            let field: [u8; 4] = rest
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or(NpyError::TruncatedPreamble(bytes.len()))?;
            // u32 always fits in usize on the 32- and 64-bit targets Rust's std supports.
            (u32::from_le_bytes(field) as usize, &rest[4..])
        }
        _ => return Err(NpyError::UnsupportedVersion { major, minor }),
    };
    if declared > rest.len() {
        return Err(NpyError::HeaderPastEnd {
            declared,
            available: rest.len(),
        });
    }
    let (header, data) = rest.split_at(declared);
    // 1.0 and 2.0 headers are latin-1 and 3.0 ones UTF-8; every header numpy writes for the
    // dtypes handled here is plain ASCII, which both agree on.
    let header = std::str::from_utf8(header).map_err(|_| NpyError::HeaderNotText)?;
    Ok((header, data))
}

/// Text from a file, made fit for a message: cut short (a hostile header can be megabytes long)
/// and with newlines and other control characters escaped, so that every error stays one short
/// line.
fn abbreviate(text: &str) -> String {
    const SHOWN: usize = 40;
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", text[..cut].escape_debug()),
        None => text.escape_debug().to_string(),
    }
}

/// The product of the dimensions, `None` on overflow. The empty shape (a scalar) has one element.
fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The three entries of a `.npy` header.
#[derive(Debug, PartialEq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the header, `{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }` padded with
/// spaces and a newline: exactly these three keys, once each, in any order, single- or
/// double-quoted, and an optional trailing comma. Shapes follow Python's tuple syntax: `()`, `(5,)`,
/// `(2, 3)` or `(2, 3,)`; `(5)` is an int in Python, so it is rejected.
fn parse_header(text: &str) -> Result<Header, NpyError> {
    // A hostile header can be megabytes long; the message quotes only its start.
    const SHOWN: usize = 160;
    let malformed = |reason: String| {
        let text = text.trim_end();
        let header = match text.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text.to_string(),
        };
        NpyError::Header { header, reason }
    };
    let mut p = Parser { rest: text };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    p.expect('{').map_err(malformed)?;
    loop {
        if p.eat('}') {
            break;
        }
        let key = p.string().map_err(malformed)?;
        p.expect(':').map_err(malformed)?;
        let fresh = match key {
            "descr" => descr
                .replace(p.string().map_err(malformed)?.to_string())
                .is_none(),
            "fortran_order" => fortran_order.replace(p.boolean().map_err(malformed)?).is_none(),
            "shape" => shape.replace(p.tuple().map_err(malformed)?).is_none(),
            other => return Err(malformed(format!("unexpected key '{}'", abbreviate(other)))),
        };
        if !fresh {
            return Err(malformed(format!("key '{key}' appears twice")));
        }
        // After an entry comes `,` (possibly the trailing one) or the closing `}`.
        if !p.eat(',') {
            p.expect('}').map_err(malformed)?;
            break;
        }
    }
    if !p.rest.trim().is_empty() {
        return Err(malformed(format!(
            "unexpected {:?} after the dict",
            abbreviate(p.rest.trim())
        )));
    }
    let missing = |key: &str| malformed(format!("no '{key}' key"));
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// A cursor over the header text; every method skips leading whitespace and, on failure, says what
/// it expected.
struct Parser<'a> {
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// Consumes `c` if it comes next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}' at {}", self.here()))
        }
    }

    /// What comes next, for messages.
    fn here(&self) -> String {
        let rest = self.rest.trim_end();
        if rest.is_empty() {
            "the end".to_string()
        } else {
            format!("{:?}", rest.chars().take(12).collect::<String>())
        }
    }

    /// A single- or double-quoted string without escapes (numpy's keys and descrs need none).
    fn string(&mut self) -> Result<&'a str, String> {
        self.skip_space();
        let quote = match self.rest.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(format!("expected a quoted string at {}", self.here())),
        };
        let body = &self.rest[1..];
        let end = body.find(quote).ok_or("unterminated string")?;
        if body[..end].contains('\\') {
            return Err("escapes in strings are not supported".to_string());
        }
        self.rest = &body[end + 1..];
        Ok(&body[..end])
    }

    fn boolean(&mut self) -> Result<bool, String> {
        self.skip_space();
        for (word, value) in [("True", true), ("False", false)] {
            if let Some(rest) = self.rest.strip_prefix(word) {
                // `Falsey` is not `False`.
                if !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    self.rest = rest;
                    return Ok(value);
                }
            }
        }
        Err(format!("expected True or False at {}", self.here()))
    }

    /// A non-negative decimal integer that fits in usize.
    fn integer(&mut self) -> Result<usize, String> {
        self.skip_space();
        let digits = self.rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("expected a non-negative integer at {}", self.here()));
        }
        let (number, rest) = self.rest.split_at(digits);
        let value = number.parse().map_err(|_| {
            format!(
                "dimension {} does not fit in {} bits",
                abbreviate(number),
                usize::BITS
            )
        })?;
        self.rest = rest;
        Ok(value)
    }

    /// A Python tuple of integers.
    fn tuple(&mut self) -> Result<Vec<usize>, String> {
        self.expect('(')?;
        let mut dims = Vec::new();
        if self.eat(')') {
            return Ok(dims);
        }
        loop {
            dims.push(self.integer()?);
            if self.eat(')') {
                if dims.len() == 1 {
                    return Err("a one-element shape needs a trailing comma, like (5,)".to_string());
                }
                return Ok(dims);
            }
            self.expect(',')?;
            if self.eat(')') {
                return Ok(dims);
            }
        }
    }
}

/// Encodes an array as `.npy` bytes, laid out as numpy lays them out.
pub fn encode_npy(shape: &[usize], data: &NpyData) -> Result<Vec<u8>, NpyError> {
    let dtype = data.dtype();
    let expected = element_count(shape).ok_or_else(|| NpyError::TooLarge {
        shape: NpyShape(shape.to_vec()),
        dtype,
    })?;
    if expected != data.len() {
        return Err(NpyError::ShapeMismatch {
            shape: NpyShape(shape.to_vec()),
            expected,
            actual: data.len(),
        });
    }
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", dims.join(", "))
        }
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        dtype.descr()
    );
    // The header is padded with spaces and ends in '\n' so that the data is 64-byte aligned.
    let padded_len = |preamble: usize| (preamble + dict.len() + 1).div_ceil(ALIGN) * ALIGN - preamble;
    let (version, len_field): (u8, Vec<u8>) = match u16::try_from(padded_len(MIN_PREAMBLE)) {
        Ok(len) => (1, len.to_le_bytes().to_vec()),
        Err(_) => {
            let len = padded_len(MIN_PREAMBLE + 2);
            let len = u32::try_from(len).map_err(|_| NpyError::HeaderTooLong(len))?;
            (2, len.to_le_bytes().to_vec())
        }
    };
    let preamble = MAGIC.len() + 2 + len_field.len();
    let header_len = padded_len(preamble);
    let mut out = Vec::with_capacity(preamble + header_len + expected * dtype.size());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    out.extend_from_slice(&len_field);
    out.extend_from_slice(dict.as_bytes());
    out.resize(preamble + header_len - 1, b' ');
    out.push(b'\n');
    match data {
        NpyData::F16(x) => x.iter().for_each(|h| out.extend_from_slice(&h.to_le_bytes())),
        NpyData::F32(x) => x.iter().for_each(|f| out.extend_from_slice(&f.to_le_bytes())),
        NpyData::I32(x) => x.iter().for_each(|i| out.extend_from_slice(&i.to_le_bytes())),
        NpyData::U8(x) => out.extend_from_slice(x),
    }
    Ok(out)
}

/// Writes an array to a `.npy` file (format 1.0, or 2.0 for very long headers).
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

    /// The bytes numpy writes for `header` (the dict literal) in format `version`: padded with
    /// spaces, newline last, data 64-byte aligned.
    fn numpy_layout(version: u8, header: &str, payload: &[u8]) -> Vec<u8> {
        let preamble = if version == 1 { 10 } else { 12 };
        let padded = (preamble + header.len() + 1).div_ceil(64) * 64 - preamble;
        let text = format!("{header}{}\n", " ".repeat(padded - header.len() - 1));
        raw(version, &text, payload)
    }

    /// A file with `header` as is (no padding): for malformed inputs.
    fn raw(version: u8, header: &str, payload: &[u8]) -> Vec<u8> {
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

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|f| f.to_le_bytes()).collect()
    }

    fn parse_err(bytes: &[u8]) -> NpyError {
        parse_npy(bytes).expect_err("parse should fail")
    }

    /// The parse error for a version 1.0 file with `header` and 16 bytes of data.
    fn header_err(header: &str) -> NpyError {
        parse_err(&numpy_layout(1, header, &[0; 16]))
    }

    #[test]
    fn round_trips_every_dtype_and_all_ranks() {
        let shapes: [&[usize]; 7] = [&[], &[1], &[7], &[2, 3], &[2, 8, 5, 4], &[0, 5], &[0]];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let f32s = NpyData::F32((0..n).map(|i| i as f32 * 0.5 - 3.0).collect());
            let f16s = NpyData::F16((0..n).map(|i| f16::from_f32(i as f32 - 1.5)).collect());
            let i32s = NpyData::I32((0..n).map(|i| i as i32 * 7 - 20).collect());
            let u8s = NpyData::U8((0..n).map(|i| (i * 37 % 256) as u8).collect());
            for data in [f32s, f16s, i32s, u8s] {
                let bytes = encode_npy(shape, &data).unwrap();
                assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
                let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
                assert_eq!((10 + header_len) % 64, 0, "data must start 64-byte aligned");
                assert_eq!(bytes[10 + header_len - 1], b'\n');
                let back = parse_npy(&bytes).unwrap();
                assert_eq!(back.len(), n);
                assert_eq!(back.is_empty(), n == 0);
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
    fn encodes_exactly_numpy_bytes() {
        // np.save of np.array([[1, 2, 3], [4, 5, 6]], dtype='<f4') in the classic layout (without
        // the optional growth padding of recent numpy), spelled out byte by byte: 10 bytes of
        // preamble, the 59-byte dict, 58 spaces and a newline make the data start at 128.
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert_eq!(dict.len(), 59);
        let mut expected = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
        expected.extend_from_slice(dict.as_bytes());
        expected.extend_from_slice(&[b' '; 58]);
        expected.push(b'\n');
        let values = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        expected.extend_from_slice(&f32_bytes(&values));
        assert_eq!(expected.len(), 128 + 24);
        let encoded = encode_npy(&[2, 3], &NpyData::F32(values.to_vec())).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&encoded[..128]),
            String::from_utf8_lossy(&expected[..128])
        );
        assert_eq!(encoded, expected);
    }

    #[test]
    fn reads_numpy_layouts_of_every_version_and_spelling() {
        let two = f32_bytes(&[1.0, -2.5]);
        for version in [1, 2, 3] {
            for header in [
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                "{ 'fortran_order' : False ,'shape':( 2 , ),'descr':'<f4' }",
            ] {
                let array = parse_npy(&numpy_layout(version, header, &two)).unwrap();
                assert_eq!(array.shape, vec![2], "{header}");
                assert_eq!(array.dtype_name(), "float32");
                assert_eq!(array.to_f32(), vec![1.0, -2.5]);
            }
        }
        // A scalar, a trailing comma after the last dimension, and float16.
        let scalar = numpy_layout(
            1,
            "{'descr': '<f2', 'fortran_order': False, 'shape': (), }",
            &[0, 0x3c],
        );
        let scalar = parse_npy(&scalar).unwrap();
        assert_eq!((scalar.shape.clone(), scalar.dtype_name()), (vec![], "float16"));
        assert_eq!(scalar.to_f32(), vec![1.0]);
        let trailing = numpy_layout(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,), }",
            &two,
        );
        assert_eq!(parse_npy(&trailing).unwrap().shape, vec![1, 2]);
        // Padding is not required of other writers: no spaces, no newline, no alignment.
        let bare = raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", &two);
        assert_eq!(parse_npy(&bare).unwrap().to_f32(), vec![1.0, -2.5]);
        // Recent numpy versions pad by up to 21 extra spaces so that the first dimension can
        // grow in place, which makes a 128-byte header for a small array.
        let grown = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }}{}",
            " ".repeat(20)
        );
        let grown = numpy_layout(1, &grown, &two);
        assert_eq!(grown.len() - two.len(), 128);
        assert_eq!(parse_npy(&grown).unwrap().shape, vec![2]);
    }

    #[test]
    fn long_headers_switch_to_version_2() {
        // 30,000 ones ("1, " each) do not fit version 1.0's u16 header length.
        let shape = vec![1usize; 30_000];
        let bytes = encode_npy(&shape, &NpyData::F32(vec![4.5])).unwrap();
        assert_eq!(&bytes[6..8], &[2, 0]);
        let header_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        assert_eq!((12 + header_len) % 64, 0);
        assert_eq!(
            parse_npy(&bytes).unwrap(),
            NpyArray {
                shape,
                data: NpyData::F32(vec![4.5])
            }
        );
    }

    #[test]
    fn version_1_is_used_up_to_the_last_header_length_that_fits() {
        // Headers close to 65535 bytes: padding must not push a version 1.0 length past u16.
        let mut versions = Vec::new();
        for ones in 21_800..21_860 {
            let shape = vec![1usize; ones];
            let bytes = encode_npy(&shape, &NpyData::F16(vec![f16::ONE])).unwrap();
            let data_start = bytes.len() - 2;
            assert_eq!(data_start % 64, 0);
            assert_eq!(bytes[data_start - 1], b'\n');
            let declared = match bytes[6] {
                1 => u16::from_le_bytes([bytes[8], bytes[9]]) as usize + 10,
                _ => u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize + 12,
            };
            assert_eq!(declared, data_start);
            assert_eq!(parse_npy(&bytes).unwrap().shape.len(), ones);
            versions.push(bytes[6]);
        }
        assert!(versions.contains(&1) && versions.contains(&2), "{versions:?}");
    }

    #[test]
    fn rejects_broken_preambles() {
        let ok = encode_npy(&[2, 2], &NpyData::F32(vec![1.0; 4])).unwrap();
        assert!(matches!(parse_err(&[]), NpyError::TruncatedPreamble(0)));
        assert!(matches!(parse_err(&ok[..5]), NpyError::TruncatedPreamble(5)));
        assert!(matches!(parse_err(&ok[..9]), NpyError::TruncatedPreamble(9)));
        assert!(matches!(
            parse_err(&raw(2, "", &[])[..11]),
            NpyError::TruncatedPreamble(11)
        ));
        assert!(matches!(parse_err(b"PK\x03\x04 a zip"), NpyError::BadMagic));
        assert!(matches!(parse_err(b"\x93NUMPx"), NpyError::BadMagic));
        for (major, minor) in [(4, 0), (0, 0), (1, 1)] {
            let mut bytes = ok.clone();
            bytes[6..8].copy_from_slice(&[major, minor]);
            let expected = format!(
                "unsupported .npy format version {major}.{minor}: versions 1.0, 2.0 and 3.0 are read"
            );
            assert_eq!(parse_err(&bytes).to_string(), expected);
        }
        // Header lengths past the end of the file, in both field widths (no allocation happens).
        let mut lying = ok.clone();
        lying[8..10].copy_from_slice(&[0xff, 0xff]);
        assert!(matches!(
            parse_err(&lying),
            NpyError::HeaderPastEnd { declared: 65535, available } if available == ok.len() - 10
        ));
        let mut lying = raw(2, "{}", &[]);
        lying[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(parse_err(&lying), NpyError::HeaderPastEnd { .. }));
        let latin1 = [MAGIC, &[1, 0, 2, 0], &[0xe9, b'\n']].concat();
        assert!(matches!(parse_err(&latin1), NpyError::HeaderNotText));
    }

    #[test]
    fn rejects_malformed_headers() {
        let reason = |header: &str| match header_err(header) {
            NpyError::Header { reason, .. } => reason,
            other => panic!("{header}: unexpected {other:?}"),
        };
        // Whole headers, and what the complaint says.
        let dicts = [
            ("not a dict", "expected '{'"),
            ("{'descr': '<f4', 'shape': (4,), }", "no 'fortran_order' key"),
            ("{'fortran_order': False, 'shape': (4,), }", "no 'descr' key"),
            ("{'descr': '<f4', 'fortran_order': False}", "no 'shape' key"),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False}",
                "twice",
            ),
            ("{'descr': '<f4', 'x': 1}", "unexpected key 'x'"),
            ("{'descr': '<f4, 'fortran_order': False}", "expected '}'"),
            ("{'descr': \"<f4', 'fortran_order': False}", "unterminated"),
            ("{'descr' '<f4', 'fortran_order': False}", "expected ':'"),
            ("{'descr': '<f4' 'fortran_order': False}", "expected '}'"),
            (
                "{'descr': '<f4',, 'fortran_order': False}",
                "expected a quoted string",
            ),
            ("{'descr': 'a\\b', 'fortran_order': False}", "escapes"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} junk",
                "after the dict",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)",
                "expected '}' at the end",
            ),
        ];
        for (header, part) in dicts {
            let reason = reason(header);
            assert!(reason.contains(part), "{header}: `{reason}` lacks `{part}`");
        }
        // Values, in an otherwise valid header.
        let values = [
            ("'fortran_order': No", "True or False"),
            ("'fortran_order': Falsey", "True or False"),
            ("'descr': 4", "expected a quoted string"),
            ("'shape': (4)", "trailing comma"),
            ("'shape': (,)", "non-negative integer"),
            ("'shape': (1,,2)", "non-negative integer"),
            ("'shape': (-4,)", "non-negative integer"),
            ("'shape': (2 2)", "expected ','"),
            ("'shape': [4]", "expected '('"),
            ("'shape': (99999999999999999999999,)", "does not fit"),
        ];
        for (entry, part) in values {
            let key = &entry[..entry.find(':').unwrap()];
            let mut entries = vec!["'descr': '<f4'", "'fortran_order': False", "'shape': (4,)"];
            entries.retain(|e| !e.starts_with(key));
            entries.push(entry);
            let header = format!("{{{}}}", entries.join(", "));
            let reason = reason(&header);
            assert!(reason.contains(part), "{header}: `{reason}` lacks `{part}`");
        }
        // A long malformed header is quoted only in part, keeping the message one short line.
        let long = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}x), }}",
            "1, ".repeat(5000)
        );
        let message = header_err(&long).to_string();
        assert!(
            message.contains("expected a non-negative integer at \"x), }\""),
            "{message}"
        );
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn rejects_unsupported_arrays() {
        let header = |descr: &str, fortran: &str| {
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': (4,), }}")
        };
        assert!(matches!(header_err(&header("<f8", "False")), NpyError::UnsupportedDtype(d) if d == "<f8"));
        assert!(matches!(
            header_err(&header("<u2", "False")),
            NpyError::UnsupportedDtype(_)
        ));
        assert!(matches!(
            header_err(&header("<c8", "False")),
            NpyError::UnsupportedDtype(_)
        ));
        assert!(matches!(header_err(&header(">f4", "False")), NpyError::BigEndian(d) if d == ">f4"));
        assert!(matches!(
            header_err(&header(">f2", "False")),
            NpyError::BigEndian(_)
        ));
        assert!(matches!(
            header_err(&header("<f4", "True")),
            NpyError::FortranOrder
        ));
        assert!(header_err(&header("<f8", "False")).to_string().contains("<f8"));
    }

    #[test]
    fn rejects_sizes_that_disagree_with_the_file() {
        // The product overflows: refused before any allocation.
        let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000000000), }";
        assert!(matches!(header_err(huge), NpyError::TooLarge { .. }));
        // The product fits but the byte count does not.
        let bytes_overflow = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
            usize::MAX / 2
        );
        assert!(matches!(header_err(&bytes_overflow), NpyError::TooLarge { .. }));
        // 4 GB declared, 16 bytes present.
        let big = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }";
        assert!(matches!(
            header_err(big),
            NpyError::TruncatedData {
                expected: 4_000_000_000,
                actual: 16,
                ..
            }
        ));
        let ok = encode_npy(&[2, 2], &NpyData::F32(vec![1.0; 4])).unwrap();
        assert!(matches!(
            parse_err(&ok[..ok.len() - 1]),
            NpyError::TruncatedData {
                expected: 16,
                actual: 15,
                ..
            }
        ));
        let longer = [ok.clone(), vec![0; 4]].concat();
        assert!(matches!(
            parse_err(&longer),
            NpyError::TrailingData {
                expected: 16,
                extra: 4,
                ..
            }
        ));
        assert_eq!(
            parse_err(&longer).to_string(),
            "4 bytes after the declared 2x2 float32 data (16 bytes): not a single .npy array"
        );
    }

    #[test]
    fn messages_stay_short_whatever_the_file_holds() {
        // Each of these once quoted its whole offending text, however long.
        let long = "x".repeat(100_000);
        let cases = [
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }} {long}"),
            format!("{{'descr': '<f4', '{long}': 1}}"),
            format!("{{'descr': '<{long}', 'fortran_order': False, 'shape': (4,), }}"),
            format!("{{'descr': '>{long}', 'fortran_order': False, 'shape': (4,), }}"),
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
                "9".repeat(100_000)
            ),
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
                "1, ".repeat(15_000)
            ),
        ];
        for header in &cases {
            let message = header_err(header).to_string();
            assert_eq!(message.lines().count(), 1);
            assert!(
                message.len() < 400,
                "{} bytes: {}",
                message.len(),
                &message[..400]
            );
        }
        assert_eq!(NpyShape(vec![1; 10]).to_string(), "1x1x1x1x1x1x1x1x... (10 dims)");
        assert_eq!(NpyShape(vec![2, 8, 512, 64]).to_string(), "2x8x512x64");
        assert_eq!(NpyShape(vec![]).to_string(), "scalar");
        assert_eq!(abbreviate("short"), "short");
        // Newlines in a descr or a key once made the one-line error two lines.
        for header in [
            "{'descr': '<f\n4', 'fortran_order': False, 'shape': (4,), }",
            "{'descr': '>f\r\n4', 'fortran_order': False, 'shape': (4,), }",
            "{'descr': '<f4', 'sha\npe': (4,), }",
        ] {
            let message = header_err(header).to_string();
            assert_eq!(message.lines().count(), 1, "{message}");
        }
        assert!(
            header_err("{'descr': '<f\n4', 'fortran_order': False, 'shape': (4,), }")
                .to_string()
                .contains("`<f\\n4`")
        );
    }

    #[test]
    fn encode_checks_the_shape() {
        assert!(matches!(
            encode_npy(&[3], &NpyData::F32(vec![0.0; 2])),
            Err(NpyError::ShapeMismatch {
                expected: 3,
                actual: 2,
                ..
            })
        ));
        assert!(matches!(
            encode_npy(&[], &NpyData::F16(vec![])),
            Err(NpyError::ShapeMismatch {
                expected: 1,
                actual: 0,
                ..
            })
        ));
        assert!(matches!(
            encode_npy(&[usize::MAX, 2], &NpyData::F16(vec![])),
            Err(NpyError::TooLarge { .. })
        ));
    }

    #[test]
    fn file_errors_name_the_file_in_one_line() {
        let err = read_npy(Path::new("/nonexistent/q.npy")).unwrap_err().to_string();
        assert!(err.starts_with("/nonexistent/q.npy: "), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.npy");
        let data = NpyData::F16(vec![f16::ZERO; 2 * 8 * 512 * 64]);
        write_npy(&path, &[2, 8, 512, 64], &data).unwrap();
        assert_eq!(
            read_npy(&path).unwrap(),
            NpyArray {
                shape: vec![2, 8, 512, 64],
                data
            }
        );

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..128 + 1000]).unwrap();
        let err = read_npy(&path).unwrap_err().to_string();
        let expected = "q.npy: truncated: header declares 2x8x512x64 float16 (1048576 bytes of data) \
                        but the file holds 1000";
        assert!(err.ends_with(expected), "{err}");
        assert_eq!(err.lines().count(), 1);

        let missing_dir = dir.path().join("no/such/dir/out.npy");
        let err = write_npy(&missing_dir, &[1], &NpyData::F32(vec![0.0])).unwrap_err();
        assert!(matches!(err, NpyError::Io { .. }));
        assert!(err.to_string().contains("out.npy"));
    }
}

/// Property tests: the reader on arbitrary and damaged bytes, and write/read round trips.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A preamble of either header-length width, in front of `header` and `payload`.
    fn framed(version: u8, header: &str, payload: &[u8]) -> Vec<u8> {
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

    /// Header-like text: the pieces a `.npy` header is made of, in any order and number.
    fn header_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just("(".to_string()),
            Just(")".to_string()),
            Just(",".to_string()),
            Just(":".to_string()),
            Just(" ".to_string()),
            Just("'descr'".to_string()),
            Just("'fortran_order'".to_string()),
            Just("'shape'".to_string()),
            Just("'<f2'".to_string()),
            Just("'<f4'".to_string()),
            Just("'<f8'".to_string()),
            Just("'>f4'".to_string()),
            Just("'<i4'".to_string()),
            Just("\"".to_string()),
            Just("'".to_string()),
            Just("True".to_string()),
            Just("False".to_string()),
            Just("\n".to_string()),
            (0usize..10).prop_map(|n| n.to_string()),
            any::<usize>().prop_map(|n| n.to_string()),
            "[0-9]{18,30}",
            "\\PC{0,3}",
            // Long runs, for the length of messages.
            (0usize..5000).prop_map(|n| "x".repeat(n)),
            (0usize..2000).prop_map(|n| "1, ".repeat(n)),
        ];
        vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    /// A well-formed header for `shape` (as numpy writes it), with pieces of it possibly
    /// replaced; the data that follows may be short, long or exact.
    fn shaped_header() -> impl Strategy<Value = (String, Vec<u8>)> {
        (
            vec(prop_oneof![0usize..5, any::<usize>()], 0..5),
            prop::sample::select(vec!["<f2", "<f4", "<f8", ">f2", "|u1", ""]),
            any::<bool>(),
            0usize..200,
        )
            .prop_map(|(shape, descr, fortran, data_len)| {
                let dims = match shape.as_slice() {
                    [one] => format!("({one},)"),
                    _ => format!(
                        "({})",
                        shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                };
                let fortran = if fortran { "True" } else { "False" };
                let header =
                    format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {dims}, }}\n");
                (header, vec![0x3c; data_len])
            })
    }

    /// What a successful parse must satisfy: the element count is the shape's product.
    fn consistent(array: &NpyArray) -> bool {
        element_count(&array.shape) == Some(array.len())
    }

    proptest! {
        #[test]
        fn any_bytes_read_or_err_without_panicking(bytes in vec(any::<u8>(), 0..600)) {
            if let Ok(array) = parse_npy(&bytes) {
                prop_assert!(consistent(&array));
            }
        }

        #[test]
        fn any_bytes_after_the_magic_read_or_err_without_panicking(
            version in prop_oneof![Just(1u8), Just(2), Just(3), any::<u8>()],
            minor in prop_oneof![Just(0u8), any::<u8>()],
            rest in vec(any::<u8>(), 0..300),
        ) {
            // Past the magic, where random bytes almost never get.
            let bytes = [MAGIC, &[version, minor], &rest].concat();
            if let Ok(array) = parse_npy(&bytes) {
                prop_assert!(consistent(&array));
            }
        }

        #[test]
        fn any_header_text_reads_or_errs_without_panicking(
            version in prop_oneof![Just(1u8), Just(2), Just(3)],
            header in header_text(),
            payload in vec(any::<u8>(), 0..64),
        ) {
            let bytes = framed(version, &header, &payload);
            match parse_npy(&bytes) {
                Ok(array) => prop_assert!(consistent(&array)),
                // Every error, however hostile the header, is one line of bounded length.
                Err(e) => {
                    let message = e.to_string();
                    prop_assert_eq!(message.lines().count(), 1, "{}", message);
                    prop_assert!(message.chars().count() < 2000, "{}", message);
                }
            }
        }

        #[test]
        fn declared_sizes_are_checked_against_the_data(
            version in prop_oneof![Just(1u8), Just(2), Just(3)],
            (header, payload) in shaped_header(),
        ) {
            let bytes = framed(version, &header, &payload);
            if let Ok(array) = parse_npy(&bytes) {
                prop_assert!(consistent(&array));
                let size = match array.data {
                    NpyData::U8(_) => 1,
                    NpyData::F16(_) => 2,
                    NpyData::F32(_) | NpyData::I32(_) => 4,
                };
                prop_assert_eq!(array.len() * size, payload.len());
            }
        }

        #[test]
        fn damaged_files_read_or_err_without_panicking(
            flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = encode_npy(&[2, 3, 4], &NpyData::F32((0..24).map(|i| i as f32).collect())).unwrap();
            for (at, byte) in flips {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            let keep = cut.index(bytes.len() + 1);
            bytes.truncate(keep);
            if let Ok(array) = parse_npy(&bytes) {
                prop_assert!(consistent(&array));
            }
        }

        #[test]
        fn truncated_files_are_errors(
            shape in vec(1usize..5, 0..4), f16_data in any::<bool>(), cut in any::<prop::sample::Index>(),
        ) {
            let n: usize = shape.iter().product();
            let data = if f16_data {
                NpyData::F16(vec![f16::ONE; n])
            } else {
                NpyData::F32(vec![1.0; n])
            };
            let bytes = encode_npy(&shape, &data).unwrap();
            // Any proper prefix, down to nothing, is refused (every array here has data).
            let keep = cut.index(bytes.len());
            prop_assert!(parse_npy(&bytes[..keep]).is_err());
        }

        #[test]
        fn f32_arrays_round_trip(shape in vec(0usize..6, 0..5), bits in vec(any::<u32>(), 1..8)) {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| f32::from_bits(bits[i % bits.len()].rotate_left(i as u32))).collect();
            let bytes = encode_npy(&shape, &NpyData::F32(data.clone())).unwrap();
            prop_assert_eq!(bytes.len() % ALIGN, (n * 4) % ALIGN);
            let array = parse_npy(&bytes).unwrap();
            prop_assert_eq!(&array.shape, &shape);
            // Compare bits: NaN payloads and signed zeros must survive too.
            let NpyData::F32(back) = array.data else { panic!("dtype changed") };
            prop_assert_eq!(back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }

        #[test]
        fn f16_arrays_round_trip(shape in vec(0usize..6, 0..5), bits in any::<u16>()) {
            let n: usize = shape.iter().product();
            let data: Vec<f16> = (0..n).map(|i| f16::from_bits(bits.wrapping_mul(i as u16 + 1))).collect();
            let bytes = encode_npy(&shape, &NpyData::F16(data.clone())).unwrap();
            prop_assert_eq!(bytes.len() % ALIGN, (n * 2) % ALIGN);
            let array = parse_npy(&bytes).unwrap();
            prop_assert_eq!(&array.shape, &shape);
            let NpyData::F16(back) = array.data else { panic!("dtype changed") };
            prop_assert_eq!(back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }

        #[test]
        fn the_writer_refuses_data_that_does_not_match_the_shape(
            shape in vec(prop_oneof![0usize..6, any::<usize>()], 0..4), len in 0usize..40,
        ) {
            let result = encode_npy(&shape, &NpyData::F32(vec![0.0; len]));
            prop_assert_eq!(result.is_ok(), element_count(&shape) == Some(len));
        }
    }

    proptest! {
        // Through real files (fewer cases: each touches the disk).
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn files_round_trip(shape in vec(1usize..9, 1..5), f16_data in any::<bool>(), seed in any::<u16>()) {
            let n: usize = shape.iter().product();
            let data = if f16_data {
                NpyData::F16((0..n).map(|i| f16::from_f32(i as f32 * 0.5 - f32::from(seed % 100))).collect())
            } else {
                NpyData::F32((0..n).map(|i| i as f32 * 0.25 - seed as f32).collect())
            };
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("a.npy");
            write_npy(&path, &shape, &data).unwrap();
            prop_assert_eq!(read_npy(&path).unwrap(), NpyArray { shape, data });
        }
    }
}
