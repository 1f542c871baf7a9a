//! The command line on bad input: one clear line on stderr, a non-zero exit, never a panic.
//! These run anywhere; where no GPU is present they also check the "no GPU" message.

use std::path::Path;
use std::process::{Command, Output};

use flashrs::npy::{encode_npy, NpyData};

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
        &host(&["bench", "--shape", "1,8,128,96"]),
        2,
        "unsupported head dim 96",
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
        text.contains("flash_scalar_m32_n64_w4_v8_s2_light") && text.contains("flash_mma"),
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
