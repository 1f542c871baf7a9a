//! The command line on bad input: one clear line on stderr, a non-zero exit, never a panic.
//! These run anywhere; where no GPU is present they also check the "no GPU" message.

use std::path::Path;
use std::process::{Command, Output};

use flashrs_lab::npy::{encode_npy, NpyData};

fn host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_host"))
        .args(args)
        .output()
        .expect("run host")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_clean_failure(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

fn gpu_present() -> bool {
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn write(dir: &Path, name: &str, shape: &[usize], data: NpyData) -> String {
    let path = dir.join(name);
    std::fs::write(&path, encode_npy(shape, &data).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn help_explains_every_subcommand() {
    for sub in [
        "verify", "bench", "attend", "list", "micro", "tune", "profile", "plot",
    ] {
        let out = host(&[sub, "--help"]);
        assert!(out.status.success(), "{sub} --help failed");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
    }
}

#[test]
fn bad_arguments_are_one_line_errors() {
    assert_clean_failure(&host(&["bench", "--shape", "1,2,3"]), 2, "expected 4 numbers");
    assert_clean_failure(
        &host(&["bench", "--shape", "1,x,3,64"]),
        2,
        "not a non-negative integer",
    );
    assert_clean_failure(
        &host(&["bench", "--shapes", "huge"]),
        2,
        "unknown shape set `huge`",
    );
    assert_clean_failure(&host(&["bench", "--kernel", "nope"]), 2, "unknown kernel `nope`");
    assert_clean_failure(
        &host(&["bench", "--shape", "1,8,128,100"]),
        2,
        "unsupported head dim 100",
    );
    assert_clean_failure(&host(&["bench", "--shape", "0,8,128,64"]), 2, "at least 1");
    assert_clean_failure(&host(&["bench", "--iters", "0"]), 2, "iters");
    assert_clean_failure(&host(&["verify", "--scale=-1"]), 2, "scale must be a positive");
    assert_clean_failure(&host(&["list", "--arch", "75"]), 2, "no PTX for sm_75");
}

#[test]
fn list_works_without_a_gpu() {
    let out = host(&["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("flash_mma_m64_n64_w4_s2_light") && text.contains("naive"),
        "{text}"
    );
}

#[test]
fn attend_rejects_bad_files_before_touching_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "q.npy", &[1, 2, 8, 64], NpyData::F32(vec![0.5; 1024]));
    let rank3 = write(d, "r3.npy", &[2, 8, 64], NpyData::F32(vec![0.5; 1024]));
    let other_d = write(d, "d128.npy", &[1, 2, 4, 128], NpyData::F32(vec![0.5; 1024]));
    let as_f16 = write(
        d,
        "h.npy",
        &[1, 2, 8, 64],
        NpyData::F16(vec![half::f16::ONE; 1024]),
    );
    let mut truncated = encode_npy(&[1, 2, 8, 64], &NpyData::F32(vec![0.5; 1024])).unwrap();
    truncated.truncate(truncated.len() - 7);
    let cut = d.join("cut.npy");
    std::fs::write(&cut, truncated).unwrap();
    let f64_file = d.join("f64.npy");
    let mut bytes = encode_npy(&[4], &NpyData::F32(vec![0.0; 4])).unwrap();
    let pos = bytes.windows(3).position(|w| w == b"<f4").unwrap();
    bytes[pos + 2] = b'8';
    bytes.extend_from_slice(&[0; 16]);
    std::fs::write(&f64_file, bytes).unwrap();
    let out = d.join("o.npy").display().to_string();
    let attend = |q: &str, k: &str, v: &str| host(&["attend", "--q", q, "--k", k, "--v", v, "--out", &out]);

    assert_clean_failure(&attend("/missing.npy", &good, &good), 2, "/missing.npy");
    assert_clean_failure(&attend(&rank3, &good, &good), 2, "expected a 4-D");
    assert_clean_failure(&attend(&good, &other_d, &other_d), 2, "must agree in B and D");
    assert_clean_failure(&attend(&good, &good, &other_d), 2, "must have the same shape");
    assert_clean_failure(&attend(&good, &as_f16, &good), 2, "must share a dtype");
    assert_clean_failure(&attend(&cut.display().to_string(), &good, &good), 2, "truncated");
    assert_clean_failure(&attend(&f64_file.display().to_string(), &good, &good), 2, "<f8");
    // A header declaring ~10^20 elements over a few bytes of data: refused, nothing allocated.
    let mut huge = encode_npy(&[1, 2, 8, 64], &NpyData::F32(vec![0.5; 1024])).unwrap();
    let at = huge.windows(13).position(|w| w == b"(1, 2, 8, 64)").unwrap();
    huge.splice(at..at + 13, b"(100000, 100000, 100000, 99999)".iter().copied());
    let huge_file = d.join("huge.npy");
    std::fs::write(&huge_file, huge).unwrap();
    let out_err = attend(&huge_file.display().to_string(), &good, &good);
    assert_eq!(out_err.status.code(), Some(2), "{}", stderr(&out_err));
    assert!(!stderr(&out_err).contains("panicked") && stderr(&out_err).lines().count() == 1);
    // A zero-sized dimension is not a problem to run.
    let empty = write(d, "empty.npy", &[1, 0, 8, 64], NpyData::F32(vec![]));
    let out_err = attend(&empty, &empty, &empty);
    assert_eq!(out_err.status.code(), Some(2), "{}", stderr(&out_err));
    assert!(!stderr(&out_err).contains("panicked"), "{}", stderr(&out_err));
    // [B,S,H,D] files read as such: q [1,8,2,64] with k [1,8,2,64] is fine shape-wise, but a
    // layout that makes k's heads not divide q's is refused.
    let k_bshd = write(d, "kb.npy", &[1, 8, 3, 64], NpyData::F32(vec![0.5; 1536]));
    let q_bshd = write(d, "qb.npy", &[1, 8, 2, 64], NpyData::F32(vec![0.5; 1024]));
    assert_clean_failure(
        &host(&[
            "attend", "--q", &q_bshd, "--k", &k_bshd, "--v", &k_bshd, "--out", &out, "--layout", "bshd",
        ]),
        2,
        "heads must divide",
    );
    assert_clean_failure(
        &host(&[
            "attend", "--q", &good, "--k", &good, "--v", &good, "--out", &out, "--layout", "bsdh",
        ]),
        2,
        "unknown layout",
    );
    let unknown = host(&[
        "attend", "--q", &good, "--k", &good, "--v", &good, "--out", &out, "--kernel", "x",
    ]);
    assert_clean_failure(&unknown, 2, "unknown kernel `x`");
}

#[test]
fn without_a_gpu_the_gpu_commands_say_so() {
    if gpu_present() {
        println!("a CUDA driver is present: this check is for machines without one");
        return;
    }
    for args in [&["verify"][..], &["bench"][..]] {
        assert_clean_failure(&host(args), 2, "no CUDA driver found");
    }
}

/// Exit code 2 and exactly one line on stderr, `error: ...`, naming `needle`; no panic. clap's
/// own errors add a blank line and a `--help` hint, which do not count as lines of the error.
fn assert_one_line_failure(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information, try '--help'"))
        .collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "expected `{needle}` in: {err}");
    assert!(
        lines[0].len() < 400,
        "an error line of {} bytes: {err}",
        lines[0].len()
    );
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A `.npy` file with this header dict (padded as numpy pads it) and these data bytes, written
/// by hand so that it can say anything.
fn npy_bytes(dict: &str, payload: &[u8]) -> Vec<u8> {
    let padded = (10 + dict.len() + 1).div_ceil(64) * 64 - 10;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(padded).unwrap().to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(10 + padded - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(payload);
    out
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

/// Files in a temporary directory, and `attend` on them.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn bytes(&self, name: &str, bytes: &[u8]) -> String {
        std::fs::write(self.dir.path().join(name), bytes).unwrap();
        self.path(name)
    }

    /// A float32 (or float16) array of this shape.
    fn f32(&self, name: &str, shape: &[usize]) -> String {
        let n = shape.iter().product();
        write(self.dir.path(), name, shape, NpyData::F32(vec![0.25; n]))
    }

    fn f16(&self, name: &str, shape: &[usize]) -> String {
        let n = shape.iter().product();
        write(
            self.dir.path(),
            name,
            shape,
            NpyData::F16(vec![half::f16::ONE; n]),
        )
    }

    /// An int32 array of this shape holding `values`.
    fn i32(&self, name: &str, shape: &[usize], values: &[i32]) -> String {
        write(self.dir.path(), name, shape, NpyData::I32(values.to_vec()))
    }

    fn attend(&self, q: &str, k: &str, v: &str, extra: &[&str]) -> Output {
        let out = self.path("out.npy");
        let mut args = vec!["attend", "--q", q, "--k", k, "--v", v, "--out", &out];
        args.extend_from_slice(extra);
        let output = host(&args);
        assert!(!self.dir.path().join("out.npy").exists(), "an output was written");
        output
    }
}

#[test]
fn attend_refuses_wrong_ranks() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let cases = [
        (f.f32("r3.npy", &[2, 8, 64]), "q"),
        (f.f32("r5.npy", &[1, 1, 2, 8, 64]), "k"),
        (f.f32("r1.npy", &[64]), "v"),
        (f.f32("r0.npy", &[]), "q"),
    ];
    for (bad, role) in &cases {
        let (q, k, v) = match *role {
            "q" => (bad, &good, &good),
            "k" => (&good, bad, &good),
            _ => (&good, &good, bad),
        };
        let out = f.attend(q, k, v, &[]);
        assert_one_line_failure(&out, "expected a 4-D [B,H,S,D] tensor");
        assert_one_line_failure(&out, bad);
    }
    // With --layout bshd the message names that layout.
    let out = f.attend(&cases[0].0, &good, &good, &["--layout", "bshd"]);
    assert_one_line_failure(&out, "expected a 4-D [B,S,H,D] tensor");
}

#[test]
fn attend_refuses_shapes_that_disagree() {
    let f = Files::new();
    let q = f.f32("q.npy", &[1, 4, 8, 64]);
    let b2 = f.f32("b2.npy", &[2, 4, 8, 64]);
    let d128 = f.f32("d128.npy", &[1, 4, 8, 128]);
    let h3 = f.f32("h3.npy", &[1, 3, 8, 64]);
    let s16 = f.f32("s16.npy", &[1, 4, 16, 64]);
    let q16 = f.f16("q16.npy", &[1, 4, 8, 64]);
    let cases = [
        (&q, &b2, &b2, "must agree in B and D"),
        (&q, &d128, &d128, "must agree in B and D"),
        (&q, &h3, &h3, "k's heads must divide q's"),
        (&q, &q, &s16, "must have the same shape"),
        (&q, &b2, &q, "must have the same shape"),
        (&q, &q, &q16, "must share a dtype, got float32, float32, float16"),
        (&q16, &q, &q, "must share a dtype"),
    ];
    for (q, k, v, needle) in cases {
        assert_one_line_failure(&f.attend(q, k, v, &[]), needle);
    }
    // Different sequence lengths for q and k/v are fine: such a call gets as far as the GPU.
    if !gpu_present() {
        assert_one_line_failure(&f.attend(&q, &s16, &s16, &[]), "no CUDA driver found");
    }
}

#[test]
fn attend_refuses_unsupported_dtypes() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let n = 2 * 8 * 64;
    let cases = [
        // int32 is read (block tables, prefix sums) but is no tensor of attention.
        ("<i4", 4, "int32 data: q, k and v must be float16 or float32"),
        ("<f8", 8, "unsupported dtype `<f8`"),
        ("<i8", 8, "unsupported dtype `<i8`"),
        ("|u1", 1, "uint8 data: q, k and v must be float16 or float32 (uint8 e4m3 bytes go with --dtype e4m3 --descale)"),
        ("<u2", 2, "unsupported dtype `<u2`"),
        ("|b1", 1, "unsupported dtype `|b1`"),
        ("<c8", 8, "unsupported dtype `<c8`"),
        (">f4", 4, "big-endian data (`>f4`)"),
        (">f2", 2, "big-endian data (`>f2`)"),
    ];
    for (descr, size, needle) in cases {
        let file = f.bytes(
            &format!("{}.npy", descr.replace(['<', '>', '|'], "_")),
            &npy_bytes(&dict(descr, "(1, 2, 8, 64)"), &vec![0; n * size]),
        );
        assert_one_line_failure(&f.attend(&file, &good, &good, &[]), needle);
        assert_one_line_failure(&f.attend(&good, &good, &file, &[]), needle);
    }
    let fortran = f.bytes(
        "fortran.npy",
        &npy_bytes(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 8, 64), }",
            &vec![0; n * 4],
        ),
    );
    assert_one_line_failure(&f.attend(&good, &fortran, &good, &[]), "Fortran-ordered");
    // --dtype names the compute precision, f16 or bf16 only.
    assert_one_line_failure(
        &f.attend(&good, &good, &good, &["--dtype", "f32"]),
        "unknown dtype `f32`",
    );
}

#[test]
fn attend_refuses_damaged_files() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let whole = std::fs::read(&good).unwrap();
    let header_end = whole.len() - 2 * 8 * 64 * 4;
    let cases = [
        (f.bytes("empty.npy", &[]), "too short for a .npy preamble"),
        (f.bytes("magic.npy", &whole[..5]), "too short for a .npy preamble"),
        (f.bytes("pre.npy", &whole[..9]), "too short for a .npy preamble"),
        (f.bytes("head.npy", &whole[..40]), "the header length field says"),
        (
            f.bytes("data.npy", &whole[..header_end + 100]),
            "but the file holds 100",
        ),
        (
            f.bytes("last.npy", &whole[..whole.len() - 1]),
            "truncated: header declares",
        ),
        (
            f.bytes("trail.npy", &[whole.as_slice(), &[0; 8]].concat()),
            "8 bytes after the declared",
        ),
        (f.bytes("text.npy", b"1,2,3\n4,5,6\n"), "not a .npy file"),
        (
            f.bytes("zip.npy", b"PK\x03\x04\x14\x00\x00\x00"),
            "not a .npy file",
        ),
        (
            f.bytes("version.npy", &[&whole[..6], &[9, 0], &whole[8..]].concat()),
            "unsupported .npy format version 9.0",
        ),
        (
            f.bytes(
                "dict.npy",
                &npy_bytes("{'descr': '<f4', 'shape': (1, 2, 8, 64)}", &[]),
            ),
            "malformed header",
        ),
        (
            f.bytes("tuple.npy", &npy_bytes(&dict("<f4", "(1, 2, 8, 64"), &[])),
            "malformed header",
        ),
        (
            f.bytes("latin1.npy", &[&whole[..8], &[2, 0, 0xe9, b'\n']].concat()),
            "not ASCII/UTF-8",
        ),
    ];
    for (file, needle) in &cases {
        assert_one_line_failure(&f.attend(file, &good, &good, &[]), needle);
        assert_one_line_failure(&f.attend(&good, file, &good, &[]), file);
    }
}

#[test]
fn attend_refuses_huge_declared_sizes_without_allocating() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let started = std::time::Instant::now();
    let cases = [
        // ~10^20 elements: the product itself overflows.
        (
            dict("<f4", "(100000, 100000, 100000, 99999)"),
            "more bytes than this machine can address",
        ),
        // The element count fits, the byte count does not.
        (
            dict("<f4", &format!("(1, 1, {}, 64)", usize::MAX / 64)),
            "more bytes than",
        ),
        // 256 GB declared over 16 bytes of data: refused before anything is allocated.
        (
            dict("<f4", "(1000, 1000, 1000, 64)"),
            "256000000000 bytes of data",
        ),
        (dict("<f2", "(1, 65536, 65536, 64)"), "truncated: header declares"),
        (
            dict("<f4", "(99999999999999999999999, 1, 1, 64)"),
            "does not fit in 64 bits",
        ),
        // Tens of thousands of dimensions: the message stays one short line.
        (
            dict("<f4", &format!("({})", "1, ".repeat(20_000))),
            "(20000 dims)",
        ),
    ];
    for (i, (header, needle)) in cases.iter().enumerate() {
        let file = f.bytes(&format!("huge{i}.npy"), &npy_bytes(header, &[0; 16]));
        assert_one_line_failure(&f.attend(&file, &good, &good, &[]), needle);
    }
    // A header length field far beyond the file.
    let mut lying = std::fs::read(&good).unwrap();
    lying[8..10].copy_from_slice(&[0xff, 0xff]);
    let lying = f.bytes("lying.npy", &lying);
    assert_one_line_failure(&f.attend(&good, &good, &lying, &[]), "says 65535 bytes");
    let mut lying = npy_bytes(&dict("<f4", "(1,)"), &[0; 4]);
    lying[6] = 2;
    lying.splice(8..10, u32::MAX.to_le_bytes());
    let lying = f.bytes("lying2.npy", &lying);
    assert_one_line_failure(&f.attend(&lying, &good, &good, &[]), "says 4294967295 bytes");
    assert!(started.elapsed().as_secs() < 20, "took {:?}", started.elapsed());
}

#[test]
fn attend_refuses_zero_sized_dimensions() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let b0 = f.f32("b0.npy", &[0, 2, 8, 64]);
    let s0 = f.f32("s0.npy", &[1, 2, 0, 64]);
    let h0 = f.f32("h0.npy", &[1, 0, 8, 64]);
    let d0 = f.f32("d0.npy", &[1, 2, 8, 0]);
    assert_one_line_failure(
        &f.attend(&b0, &b0, &b0, &[]),
        "every dimension must be at least 1",
    );
    assert_one_line_failure(
        &f.attend(&s0, &good, &good, &[]),
        "every dimension must be at least 1",
    );
    assert_one_line_failure(
        &f.attend(&good, &s0, &s0, &[]),
        "every dimension must be at least 1",
    );
    assert_one_line_failure(&f.attend(&h0, &h0, &h0, &[]), "k's heads must divide q's");
    assert_one_line_failure(
        &f.attend(&h0, &good, &good, &[]),
        "every dimension must be at least 1",
    );
    assert_one_line_failure(&f.attend(&d0, &d0, &d0, &[]), "unsupported head dim 0");
    assert_one_line_failure(&f.attend(&good, &b0, &b0, &[]), "must agree in B and D");
}

#[test]
fn attend_refuses_missing_files_and_directories() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let missing = f.path("missing.npy");
    for (q, k, v) in [
        (&missing, &good, &good),
        (&good, &missing, &good),
        (&good, &good, &missing),
    ] {
        let out = f.attend(q, k, v, &[]);
        assert_one_line_failure(&out, &format!("{missing}: No such file"));
    }
    let dir = f.dir.path().display().to_string();
    assert_one_line_failure(&f.attend(&dir, &good, &good, &[]), &dir);
    // An output (or log-sum-exp) path in a directory that does not exist is refused up front.
    let nowhere = f.path("no/such/dir/out.npy");
    let args = [
        "attend", "--q", &good, "--k", &good, "--v", &good, "--out", &nowhere,
    ];
    assert_one_line_failure(&host(&args), "does not exist");
    let lse = f.path("no/lse.npy");
    assert_one_line_failure(&f.attend(&good, &good, &good, &["--lse", &lse]), "does not exist");
}

#[test]
fn attend_refuses_bad_options_before_touching_a_gpu() {
    let f = Files::new();
    let good = f.f32("q.npy", &[1, 2, 8, 64]);
    let lse = f.path("lse.npy");
    let cases: [(&[&str], &str); 7] = [
        (&["--scale=-1"], "scale must be a positive finite number"),
        (&["--scale", "NaN"], "scale must be a positive finite number"),
        (&["--scale", "inf"], "scale must be a positive finite number"),
        (
            &["--kernel", "cublas", "--layout", "bshd"],
            "the cublas path takes [B,H,S,D] tensors, not bshd",
        ),
        (
            &["--kernel", "cublas", "--lse", &lse],
            "the cublas path writes no log-sum-exp",
        ),
        (
            &["--kernel", "cutensor", "--lse", &lse],
            "the cutensor path writes no log-sum-exp",
        ),
        (&["--kernel", "flash_nope"], "unknown kernel `flash_nope`"),
    ];
    for (extra, needle) in cases {
        assert_one_line_failure(&f.attend(&good, &good, &good, extra), needle);
    }
    // Bad options are named even when the files are bad too.
    assert_one_line_failure(
        &f.attend(&f.path("missing.npy"), &good, &good, &["--scale=0"]),
        "scale must be",
    );
}

#[test]
fn attend_on_good_inputs_fails_only_for_want_of_a_gpu() {
    if gpu_present() {
        println!("a CUDA driver is present: this check is for machines without one");
        return;
    }
    // Every check above passes on these, so the GPU is the only thing missing.
    let f = Files::new();
    let q = f.f32("q.npy", &[2, 8, 5, 64]);
    let kv = f.f32("kv.npy", &[2, 2, 7, 64]);
    let q16 = f.f16("q16.npy", &[1, 3, 4, 128]);
    assert_one_line_failure(&f.attend(&q, &kv, &kv, &["--causal"]), "no CUDA driver found");
    assert_one_line_failure(
        &f.attend(&q16, &q16, &q16, &["--dtype", "bf16"]),
        "no CUDA driver found",
    );
    let lse = f.path("lse.npy");
    assert_one_line_failure(
        &f.attend(&q, &q, &q, &["--lse", &lse, "--layout", "bshd"]),
        "no CUDA driver found",
    );
}

#[test]
fn shape_strings_are_refused_before_touching_a_gpu() {
    let cases = [
        ("", "not a non-negative integer"),
        ("1,2,3", "expected 4 numbers"),
        ("1,2,3,4,5,6", "expected 4 numbers"),
        ("1,2,,64", "not a non-negative integer"),
        ("1,-2,3,64", "`-2` is not a non-negative integer"),
        ("1,2,3,64.0", "not a non-negative integer"),
        ("1;2;3;64", "not a non-negative integer"),
        ("99999999999999999999999,1,1,64", "not a non-negative integer"),
        ("0,8,128,64", "every dimension must be at least 1"),
        ("1,8,0,64", "every dimension must be at least 1"),
        ("1,8,128,0,64", "every dimension must be at least 1"),
        ("1,8,128,100", "unsupported head dim 100"),
        ("1,8,128,0", "unsupported head dim 0"),
        ("65536,65536,1,64", "batch * heads"),
        ("1,1,4294967295,64", "sequence length too large"),
        ("18446744073709551615,18446744073709551615,1,64", "batch * heads"),
    ];
    for sub in ["verify", "bench"] {
        for (shape, needle) in cases {
            let out = host(&[sub, "--shape", shape]);
            assert_one_line_failure(&out, needle);
        }
        assert_one_line_failure(
            &host(&[sub, "--shapes", "small,huge"]),
            "unknown shape set `huge`",
        );
        assert_one_line_failure(&host(&[sub, "--shapes", "small,,odd"]), "unknown shape set");
    }
    // Grouped-query heads must divide every shape's heads.
    assert_one_line_failure(
        &host(&["verify", "--shapes", "small", "--heads-kv", "3"]),
        "must divide query heads",
    );
    assert_one_line_failure(
        &host(&["verify", "--shape", "1,8,128,64", "--heads-kv", "0"]),
        "must divide",
    );
    assert_one_line_failure(
        &host(&["verify", "--logit-scale", "0"]),
        "--logit-scale must be a positive",
    );
    assert_one_line_failure(&host(&["verify", "--dtype", "f16,int8"]), "unknown dtype `int8`");
}

#[test]
fn unknown_peers_fail_fast_and_known_ones_reach_the_gpu() {
    for peers in ["nope", "torch,nope", "fa2"] {
        let started = std::time::Instant::now();
        let out = host(&["bench", "--peers", peers, "--shapes", "std"]);
        assert_one_line_failure(&out, "unknown peer");
        assert!(started.elapsed().as_secs() < 5, "took {:?}", started.elapsed());
    }
    assert_one_line_failure(&host(&["verify", "--peer", "fa3"]), "unknown peer `fa3`");
    // A head dim no kernel takes (not a multiple of 8, or past 256) is refused, peers or not.
    assert_one_line_failure(
        &host(&["bench", "--shape", "2,16,4096,100"]),
        "unsupported head dim 100",
    );
    assert_one_line_failure(
        &host(&["bench", "--shape", "2,16,4096,512", "--peers", "fa3"]),
        "unsupported head dim 512",
    );
    assert_one_line_failure(
        &host(&["bench", "--shape", "0,16,4096,256", "--peers", "fa3"]),
        "at least 1",
    );
    if gpu_present() {
        return;
    }
    for peers in ["torch", "fa3", "torch,fa3", "fa3,torch,fa3"] {
        let args = [
            "bench",
            "--shapes",
            "std",
            "--shape",
            "2,16,4096,256",
            "--peers",
            peers,
        ];
        assert_one_line_failure(&host(&args), "no CUDA driver found");
    }
}

/// Refused in one line before any GPU is opened: on a machine without one, the line is the
/// input's error, not the missing driver.
fn refused(args: &[&str], needle: &str) {
    let out = host(args);
    assert_one_line_failure(&out, needle);
    assert!(
        !stderr(&out).contains("CUDA driver"),
        "{args:?}: {}",
        stderr(&out)
    );
}

#[test]
fn clap_errors_are_one_line_without_the_usage_block() {
    for (args, needle) in [
        (&["verify", "--bogus"][..], "unexpected argument '--bogus'"),
        (&["attend", "--q", "q.npy"], "--k <K>"),
        (&["tune", "--iters", "5"], "--iters"),
        (&["verify", "--quick", "--shapes", "long"], "--shapes"),
        (&["verify", "--quick", "--dtype", "bf16"], "--dtype"),
        (&["verify", "--quick", "--random", "3"], "--random"),
        (&["tune", "--splits", "--budget", "10"], "--budget"),
        (&["tune", "--split-counts", "8"], "--splits"),
        (
            &["trace", "--kernel", "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"],
            "--shape",
        ),
        (
            &[
                "trace",
                "--kernel",
                "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
                "--varlen",
                "--shape",
                "1,2,128,64",
            ],
            "cannot be used with",
        ),
    ] {
        let out = host(args);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            !err.contains("Usage") && !err.contains("--help"),
            "{args:?}: {err}"
        );
        refused(args, needle);
    }
}

#[test]
fn checks_that_need_no_gpu_come_before_it() {
    refused(&["micro", "--shape", "1,2,128,100"], "unsupported head dim 100");
    refused(&["micro", "--top", "0"], "--top");
    refused(
        &["trace", "--kernel", "naive", "--varlen"],
        "only flash_ws kernels",
    );
    refused(
        &[
            "trace",
            "--kernel",
            "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            "--varlen",
        ],
        "no varlen entry point at head dim 128",
    );
    refused(
        &[
            "trace",
            "--kernel",
            "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
            "--shape",
            "1,2,128,64",
            "--varlen-seed",
            "3",
        ],
        "add --varlen",
    );
    refused(&["micro", "--csv", "-"], "stdout");
    refused(&["tune", "--peers", "fa9"], "unknown peer `fa9`");
    refused(&["verify", "--json", "/no/such/dir/v.json"], "/no/such/dir");
    refused(&["bench", "--json", "/no/such/dir/b.json"], "/no/such/dir");
    refused(&["bench", "--plot", "/no/such/dir/b.svg"], "/no/such/dir");
    refused(&["micro", "--csv", "/no/such/dir/m.csv"], "/no/such/dir");
    refused(&["tune", "--json", "/no/such/dir/t.json"], "/no/such/dir");
    refused(
        &["tune", "--save", "--table", "/no/such/dir/t.json"],
        "/no/such/dir",
    );
    refused(&["list", "--json", "/no/such/dir/l.json"], "/no/such/dir");
    refused(&["tune", "--splits"], "4096 query rows per KV head");
    refused(
        &[
            "tune",
            "--shape",
            "1,32,1,32768,128",
            "--splits",
            "--split-counts",
            "0",
        ],
        "outside 1 to 128",
    );
    refused(
        &["profile", "--kernel", "naive", "--out", "/no/such/dir/p.json"],
        "/no/such/dir",
    );
    refused(
        &["plot", "--json", "/no/such/bench.json", "--out", "p.svg"],
        "/no/such/bench.json",
    );
}

#[test]
fn library_paths_refuse_what_they_cannot_run_before_the_gpu() {
    refused(&["verify", "--kernel", "cublas", "--layout", "bshd"], "[B,H,S,D]");
    refused(&["verify", "--kernel", "cutensor", "--lse"], "log-sum-exp");
    refused(
        &[
            "verify",
            "--kernel",
            "cublas",
            "--shapes",
            "small",
            "--heads-kv",
            "2",
        ],
        "grouped-query",
    );
    refused(&["verify", "--kernel", "cutensor", "--random", "4"], "--random");
    refused(
        &[
            "bench",
            "--kernel",
            "cublas",
            "--shapes",
            "small",
            "--heads-kv",
            "2",
        ],
        "grouped-query",
    );
    if gpu_present() {
        return;
    }
    // What cutensor can run reaches the GPU (and, here, its absence).
    for args in [
        &[
            "verify",
            "--kernel",
            "cutensor",
            "--shapes",
            "small",
            "--heads-kv",
            "2",
            "--layout",
            "bshd",
        ][..],
        &[
            "bench",
            "--kernel",
            "cutensor",
            "--shapes",
            "small",
            "--heads-kv",
            "2",
        ],
    ] {
        assert_one_line_failure(&host(args), "no CUDA driver found");
    }
}

#[test]
fn list_json_to_stdout_is_the_json_alone_and_only_this_arch() {
    let out = host(&["list", "--arch", "80", "--json", "-"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let entries: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout holds the JSON and nothing else");
    let entries = entries.as_array().expect("a list");
    assert!(!entries.is_empty());
    for entry in entries {
        let name = entry["kernel"].as_str().unwrap_or_default();
        let variant = flashrs::VariantSpec::by_name(name).expect("a compiled variant");
        assert!(variant.min_arch <= 80, "{name} is not in the sm_80 PTX");
    }
    // The table went to stderr.
    assert!(stderr(&out).contains("variant"), "{}", stderr(&out));
}

#[test]
fn attend_refuses_bad_varlen_inputs_before_touching_a_gpu() {
    let f = Files::new();
    // Three sequences: 3, 0 and 7 queries (10 packed rows), 5, 1 and 0 keys (6 rows).
    let q = f.f32("q.npy", &[10, 8, 64]);
    let kv = f.f32("kv.npy", &[6, 2, 64]);
    let cu_q = f.i32("cu_q.npy", &[4], &[0, 3, 3, 10]);
    let cu_k = f.i32("cu_k.npy", &[4], &[0, 5, 6, 6]);
    let varlen = |q: &str, kv: &str, cu_q: &str, cu_k: &str, extra: &[&str]| {
        let mut args = vec!["--cu-seqlens-q", cu_q, "--cu-seqlens-k", cu_k];
        args.extend_from_slice(extra);
        f.attend(q, kv, kv, &args)
    };
    let decreasing = f.i32("dec.npy", &[4], &[0, 4, 3, 10]);
    let longer = f.i32("long.npy", &[5], &[0, 5, 6, 6, 6]);
    let short_total = f.i32("short.npy", &[4], &[0, 3, 3, 9]);
    let not_zero = f.i32("nz.npy", &[4], &[1, 3, 3, 10]);
    let matrix = f.i32("m.npy", &[2, 2], &[0, 3, 3, 10]);
    let floats = f.f32("cu_f.npy", &[4]);
    let q_int = f.i32("q_int.npy", &[10, 8, 64], &[1; 10 * 8 * 64]);
    let kv7 = f.f32("kv7.npy", &[7, 2, 64]);
    let kv_h3 = f.f32("kv_h3.npy", &[6, 3, 64]);
    let q4 = f.f32("q4.npy", &[1, 10, 8, 64]);
    let cases = [
        (&q, &kv, &decreasing, &cu_k, "cu_seqlens_q decreases at entry 2"),
        (&q, &kv, &cu_q, &longer, "both must be B + 1"),
        (
            &q,
            &kv,
            &short_total,
            &cu_k,
            "q has 10 packed rows, but cu_seqlens_q ends at 9",
        ),
        (&q, &kv, &not_zero, &cu_k, "cu_seqlens_q[0] = 1"),
        (
            &q,
            &kv7,
            &cu_q,
            &cu_k,
            "k and v have 7 packed rows, but cu_seqlens_k ends at 6",
        ),
        (
            &q,
            &kv,
            &matrix,
            &cu_k,
            "--cu-seqlens-q must be a 1-D [B + 1] array",
        ),
        (
            &q,
            &kv,
            &cu_q,
            &floats,
            "--cu-seqlens-k must be int32 (<i4), got float32",
        ),
        (&q_int, &kv, &cu_q, &cu_k, "must be float16 or float32"),
        (&q, &kv_h3, &cu_q, &cu_k, "must divide q's 8"),
        (
            &q4,
            &kv,
            &cu_q,
            &cu_k,
            "expected a 3-D [total_q,H,D] (packed) tensor",
        ),
    ];
    for (q, kv, cu_q, cu_k, needle) in cases {
        assert_one_line_failure(&varlen(q, kv, cu_q, cu_k, &[]), needle);
    }
    let options: [(&[&str], &str); 4] = [
        (&["--layout", "bshd"], "no other layout"),
        (&["--kernel", "cublas"], "dense tensors only"),
        (
            &["--kernel", "flash_mma_m128_n64_w4_s2_light"],
            "no variable-length entry point",
        ),
        (
            &["--kernel", "flash_ws_m128_n80_s2_ov_mbarrier"],
            "head dims [256], not 64",
        ),
    ];
    for (extra, needle) in options {
        assert_one_line_failure(&varlen(&q, &kv, &cu_q, &cu_k, extra), needle);
    }
    let alone = f.attend(&q, &kv, &kv, &["--cu-seqlens-q", &cu_q]);
    assert_one_line_failure(&alone, "--cu-seqlens-k");
    if !gpu_present() {
        let lse = f.path("lse.npy");
        assert_one_line_failure(
            &varlen(&q, &kv, &cu_q, &cu_k, &["--causal", "--lse", &lse]),
            "no CUDA driver found",
        );
    }
}

#[test]
fn attend_refuses_bad_paged_inputs_before_touching_a_gpu() {
    let f = Files::new();
    // Two sequences of 20 and 1 keys in a cache of 4 pages of 16: pages 3, 1 and 0.
    let q = f.f32("q.npy", &[2, 8, 1, 64]);
    let cache = f.f32("cache.npy", &[4, 16, 2, 64]);
    let table = f.i32("table.npy", &[2, 2], &[3, 1, 0, -1]);
    let lens = f.i32("lens.npy", &[2], &[20, 1]);
    let paged = |q: &str, k: &str, v: &str, table: &str, lens: &str, extra: &[&str]| {
        let mut args = vec!["--block-table", table, "--seqlens-k", lens];
        args.extend_from_slice(extra);
        f.attend(q, k, v, &args)
    };
    let outside = f.i32("outside.npy", &[2, 2], &[3, 4, 0, -1]);
    let negative = f.i32("negative.npy", &[2, 2], &[3, 1, -1, -1]);
    let too_long = f.i32("too_long.npy", &[2], &[33, 1]);
    let three = f.i32("three.npy", &[3], &[20, 1, 1]);
    let flat = f.i32("flat.npy", &[4], &[3, 1, 0, -1]);
    let float_lens = f.f32("lens_f.npy", &[2]);
    let block_8 = f.f32("block8.npy", &[8, 8, 2, 64]);
    let other_v = f.f32("other_v.npy", &[4, 16, 2, 128]);
    let q_b3 = f.f32("q_b3.npy", &[3, 8, 1, 64]);
    let q_d128 = f.f32("q_d128.npy", &[2, 8, 1, 128]);
    let cache3 = f.f32("cache3.npy", &[4, 16, 2]);
    let cases = [
        (
            &q,
            &cache,
            &cache,
            &outside,
            &lens,
            "block_table[0, 1] = 4 is outside the cache's 4 pages",
        ),
        (&q, &cache, &cache, &negative, &lens, "block_table[1, 0] = -1"),
        (
            &q,
            &cache,
            &cache,
            &table,
            &too_long,
            "seqlens_k[0] = 33 is outside 0..=32",
        ),
        (
            &q,
            &cache,
            &cache,
            &table,
            &three,
            "--block-table has 2 rows and --seqlens-k 3 entries",
        ),
        (
            &q,
            &cache,
            &cache,
            &flat,
            &lens,
            "--block-table must be a 2-D [B,max_blocks] array",
        ),
        (
            &q,
            &cache,
            &cache,
            &table,
            &float_lens,
            "--seqlens-k must be int32 (<i4), got float32",
        ),
        (
            &q,
            &block_8,
            &block_8,
            &table,
            &lens,
            "block size 8 is not a power of two from 16",
        ),
        (&q, &cache, &other_v, &table, &lens, "they need the same dims"),
        (
            &q_b3,
            &cache,
            &cache,
            &table,
            &lens,
            "q has batch 3, seqlens_k has 2 sequences",
        ),
        (&q_d128, &cache, &cache, &table, &lens, "need the same head dim"),
        (
            &q,
            &cache3,
            &cache3,
            &table,
            &lens,
            "expected a 4-D [num_blocks,block_size,H_kv,D] (paged)",
        ),
    ];
    for (q, k, v, table, lens, needle) in cases {
        assert_one_line_failure(&paged(q, k, v, table, lens, &[]), needle);
    }
    let options: [(&[&str], &str); 2] = [
        (&["--kernel", "cutensor"], "dense tensors only"),
        (
            &["--kernel", "flash_ws_m128_n128_s2_mbarrier"],
            "only flash_decode variants",
        ),
    ];
    for (extra, needle) in options {
        assert_one_line_failure(&paged(&q, &cache, &cache, &table, &lens, extra), needle);
    }
    let both = ["--cu-seqlens-q", &lens, "--cu-seqlens-k", &lens];
    assert_one_line_failure(
        &paged(&q, &cache, &cache, &table, &lens, &both),
        "cannot be used with",
    );
    if !gpu_present() {
        let q_bshd = f.f32("q_bshd.npy", &[2, 1, 8, 64]);
        assert_one_line_failure(
            &paged(
                &q_bshd,
                &cache,
                &cache,
                &table,
                &lens,
                &["--layout", "bshd", "--causal"],
            ),
            "no CUDA driver found",
        );
    }
}

/// `--dtype e4m3` (FP8 inputs): what the FP8 paths refuse, before any GPU is opened.
#[test]
fn fp8_options_are_checked_before_the_gpu() {
    // Head dim 64 has no FP8 kernel: a one-line usage error, as other bad shapes are.
    for sub in ["verify", "bench"] {
        let out = host(&[sub, "--dtype", "e4m3", "--shape", "1,8,128,64"]);
        assert_clean_failure(&out, 2, "head dim 64 has no FP8 kernel");
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    assert_clean_failure(&host(&["verify", "--dtype", "e4m3,f16"]), 2, "give it alone");
    assert_clean_failure(&host(&["verify", "--dtype", "e5m2"]), 2, "unknown dtype `e5m2`");
    assert_clean_failure(&host(&["verify", "--rmse"]), 2, "go with --dtype e4m3");
    assert_clean_failure(
        &host(&["verify", "--out-dtype", "bf16"]),
        2,
        "go with --dtype e4m3",
    );
    assert_clean_failure(
        &host(&["verify", "--dtype", "e4m3", "--random", "5"]),
        2,
        "--random is not available with --dtype e4m3",
    );
    assert_clean_failure(
        &host(&["verify", "--dtype", "e4m3", "--kernel", "naive"]),
        2,
        "not an FP8 variant",
    );
    assert_clean_failure(
        &host(&["bench", "--dtype", "e4m3", "--peers", "torch"]),
        2,
        "--peers",
    );
    assert_clean_failure(&host(&["bench", "--out-dtype", "f16"]), 2, "--dtype e4m3");
    let dir = tempfile::tempdir().unwrap();
    let q = write(
        dir.path(),
        "q.npy",
        &[1, 2, 8, 128],
        NpyData::F32(vec![0.5; 2048]),
    );
    let out = dir.path().join("o.npy").display().to_string();
    // `attend` on these q, k, v files with these flags.
    let attend_files = |q: &str, k: &str, v: &str, extra: &[&str]| {
        let mut argv = vec!["attend", "--q", q, "--k", k, "--v", v, "--out", &out];
        argv.extend_from_slice(extra);
        host(&argv)
    };
    let attend = |extra: &[&str]| attend_files(&q, &q, &q, &[&["--dtype", "e4m3"], extra].concat());
    assert_clean_failure(&attend(&[]), 2, "needs --quantize");
    assert_clean_failure(&attend(&["--descale", &q]), 2, "--descale goes with e4m3 bytes");
    assert_clean_failure(
        &attend(&["--quantize", "--kernel", "naive"]),
        2,
        "not an FP8 variant",
    );
    let q64 = write(
        dir.path(),
        "q64.npy",
        &[1, 2, 8, 64],
        NpyData::F32(vec![0.5; 1024]),
    );
    assert_clean_failure(
        &attend_files(&q64, &q64, &q64, &["--dtype", "e4m3", "--quantize"]),
        2,
        "head dim 64 has no FP8 kernel",
    );
    // e4m3 bytes (uint8 files) with their descale factors: 3 x B x H_kv float32 values.
    let bytes = write(
        dir.path(),
        "q8.npy",
        &[1, 2, 8, 128],
        NpyData::U8(vec![0x38; 2048]),
    );
    let factors =
        |name: &str, shape: &[usize], values: Vec<f32>| write(dir.path(), name, shape, NpyData::F32(values));
    let good = factors("d.npy", &[3, 1, 2], vec![0.5; 6]);
    let raw = |extra: &[&str]| attend_files(&bytes, &bytes, &bytes, &[&["--dtype", "e4m3"], extra].concat());
    assert_clean_failure(&raw(&[]), 2, "needs --descale");
    assert_clean_failure(
        &raw(&["--descale", &good, "--quantize"]),
        2,
        "cannot be used with",
    );
    let short = factors("short.npy", &[5], vec![0.5; 5]);
    assert_clean_failure(&raw(&["--descale", &short]), 2, "descale");
    let swapped = factors("swapped.npy", &[3, 2, 1], vec![0.5; 6]);
    assert_clean_failure(&raw(&["--descale", &swapped]), 2, "expected [3, 1, 2]");
    let zero = factors("zero.npy", &[6], vec![0.5, 0.5, 0.0, 0.5, 0.5, 0.5]);
    assert_clean_failure(&raw(&["--descale", &zero]), 2, "finite and positive");
    let wrong_type = write(dir.path(), "d16.npy", &[6], NpyData::I32(vec![1; 6]));
    assert_clean_failure(&raw(&["--descale", &wrong_type]), 2, "must be float32");
    assert_clean_failure(
        &attend_files(&bytes, &bytes, &q, &["--dtype", "e4m3", "--descale", &good]),
        2,
        "must share a dtype",
    );
    if !gpu_present() {
        assert_clean_failure(&raw(&["--descale", &good]), 2, "no CUDA driver found");
    }
    // The FP8 flags without --dtype e4m3.
    for flags in [&["--descale", good.as_str()][..], &["--quantize"]] {
        assert_clean_failure(&attend_files(&q, &q, &q, flags), 2, "--dtype e4m3");
    }
}
