//! Code stays short enough to read: no function of the device crate (`kernels-rs/src`), each
//! family's kernel body included, is longer than `MAX_LINES`, and none of the library (`src/`,
//! tests included) longer than `MAX_LIBRARY_LINES`, counted from its `fn` line to its closing
//! brace; no file of the device crate is longer than `MAX_FILE_LINES`. A kernel body that grows
//! past it moves a coherent piece (prologue, epilogue, merge) into an `#[inline(always)]` helper,
//! ideally a shared one (`attention/fragment.rs`, `pipeline.rs`, `warp_mma.rs`), with the ptxas
//! gate showing that the move costs nothing. Runs on the CPU: it reads the sources as text.

use std::path::{Path, PathBuf};

/// The longest a function of the device crate may be, in lines.
const MAX_LINES: usize = 150;
/// The longest a function of the library may be, in lines.
const MAX_LIBRARY_LINES: usize = 100;
/// The longest a file of the device crate may be, in lines.
const MAX_FILE_LINES: usize = 800;

/// One function of the device crate: where it is and how long.
#[derive(Debug)]
struct Function {
    file: PathBuf,
    name: String,
    first_line: usize,
    lines: usize,
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The line with string and character literals emptied and a trailing `//` comment cut, so
/// that only the code's own braces and semicolons are left to count.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            // A character literal ('{', '\'') and not a lifetime ('a): its closing quote
            // comes after one character or one escape.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let mut it = rest.chars();
                match (it.next(), it.next(), it.next()) {
                    (Some('\\'), Some(_), Some('\'')) => {
                        chars.nth(2);
                    }
                    (Some(_), Some('\''), _) => {
                        chars.nth(1);
                    }
                    _ => {}
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// The name of the function a line starts (`pub unsafe fn name<..>(..`), if it does.
fn fn_name(code: &str) -> Option<String> {
    let words: Vec<&str> = code.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    // Only qualifiers may stand before `fn` (visibility, const, unsafe, extern "ABI").
    let qualifier =
        |w: &&str| w.starts_with("pub") || matches!(*w, "const" | "unsafe" | "extern" | "async" | "\"\"");
    if !words[..at].iter().all(qualifier) {
        return None;
    }
    let name: String = words
        .get(at + 1)?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Every function with a body in `file`, its length from the `fn` line to the brace closing it.
fn functions(file: &Path) -> Vec<Function> {
    let text = std::fs::read_to_string(file).expect("readable source file");
    let code: Vec<String> = text.lines().map(code_of).collect();
    let mut out = Vec::new();
    for (start, line) in code.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let mut depth = 0usize;
        let mut opened = false;
        let mut end = None;
        'scan: for (offset, line) in code[start..].iter().enumerate() {
            for c in line.chars() {
                match c {
                    // A declaration without a body (a trait's method).
                    ';' if !opened => break 'scan,
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            end = Some(start + offset);
                            break 'scan;
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(end) = end {
            out.push(Function {
                file: file.to_path_buf(),
                name,
                first_line: start + 1,
                lines: end - start + 1,
            });
        }
    }
    out
}

/// Every function of the `.rs` files below `dir` (relative to the repository).
fn functions_under(dir: &str) -> Vec<Function> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files.iter().flat_map(|f| functions(f)).collect()
}

fn device_functions() -> Vec<Function> {
    functions_under("kernels-rs/src")
}

#[test]
fn no_library_function_is_longer_than_its_limit() {
    let functions = functions_under("src");
    let too_long: Vec<String> = functions
        .iter()
        .filter(|f| f.lines > MAX_LIBRARY_LINES)
        .map(|f| {
            format!(
                "{}:{} {} ({} lines)",
                f.file.display(),
                f.first_line,
                f.name,
                f.lines
            )
        })
        .collect();
    assert!(
        too_long.is_empty(),
        "longer than {MAX_LIBRARY_LINES} lines: {too_long:?}"
    );
    assert!(
        functions.len() > 500,
        "only {} library functions found",
        functions.len()
    );
}

#[test]
fn no_device_file_is_longer_than_its_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels-rs/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let too_long: Vec<String> = files
        .iter()
        .map(|f| {
            (
                f,
                std::fs::read_to_string(f)
                    .expect("readable source file")
                    .lines()
                    .count(),
            )
        })
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(f, lines)| format!("{} ({lines} lines)", f.display()))
        .collect();
    assert!(
        too_long.is_empty(),
        "longer than {MAX_FILE_LINES} lines: {too_long:?}"
    );
}

#[test]
fn no_device_function_is_longer_than_the_limit() {
    let functions = device_functions();
    let too_long: Vec<String> = functions
        .iter()
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| {
            format!(
                "{}:{} {} ({} lines)",
                f.file.display(),
                f.first_line,
                f.name,
                f.lines
            )
        })
        .collect();
    assert!(too_long.is_empty(), "longer than {MAX_LINES} lines: {too_long:?}");
    let longest = functions.iter().max_by_key(|f| f.lines).expect("functions found");
    println!(
        "{} device functions, the longest {} ({} lines)",
        functions.len(),
        longest.name,
        longest.lines
    );
}

/// The limit is only worth something if the kernel bodies are among what was measured: every
/// family of the variant table has its body, a function named as the family (the e4m3 family's
/// is `flash_ws`, on another operand type).
#[test]
fn every_family_body_is_measured() {
    let functions = device_functions();
    for variant in flashrs::VARIANTS
        .iter()
        .chain(flashrs::FP8_VARIANTS)
        .chain(flashrs::variants::EXPERIMENTAL_VARIANTS)
    {
        let family = if variant.family.fp8() {
            "flash_ws"
        } else {
            variant.family.name()
        };
        let body = functions.iter().find(|f| f.name == family);
        let body = body.unwrap_or_else(|| panic!("no function `{family}` found in kernels-rs/src"));
        assert!(body.lines > 20, "{family}: {body:?} is not a kernel body");
    }
}

#[test]
fn the_measure_counts_from_fn_to_its_closing_brace() {
    let dir = std::env::temp_dir().join(format!("flashrs-kernel-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sample.rs");
    let source = "trait T {\n    unsafe fn declared(&self);\n}\n\
        /// Doc.\n#[inline(always)]\npub unsafe fn body<const N: usize>(x: u32) -> u32 {\n\
        \x20   let s = \"}}\"; // }\n    let c = '{';\n    if x > 0 {\n        x\n    } else {\n\
        \x20       0\n    }\n}\nfn one() {}\n";
    std::fs::write(&file, source).unwrap();
    let found = functions(&file);
    std::fs::remove_dir_all(&dir).unwrap();
    let summary: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.first_line, f.lines))
        .collect();
    assert_eq!(summary, [("body", 6, 9), ("one", 15, 1)]);
}
