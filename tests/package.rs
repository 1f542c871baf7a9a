//! The published crate must hold what its build reads: `cargo package --list` (offline, no
//! build) is checked against the files `build.rs` and the library's `include!`s name.

use std::process::Command;

/// The files of `cargo package --list -p flashrs`.
fn package_list() -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args(["package", "--list", "--allow-dirty", "--offline", "-p", "flashrs"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo package --list failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("file names are UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn package_holds_the_build_inputs_and_licenses() {
    let files = package_list();
    for needed in [
        "build.rs",
        "kernels.toml",
        "src/spec.rs",
        "src/lib.rs",
        "tuned/h100.json",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        assert!(
            files.iter().any(|f| f == needed),
            "{needed} is not packaged: {files:?}"
        );
    }
    // Nothing of the host CLI, the lab crate, the Python package, the evidence or build outputs.
    for prefix in [
        "host/",
        "lab/",
        "python/",
        "evidence/",
        "target/",
        "tools/",
        "fuzz/",
    ] {
        assert!(
            !files.iter().any(|f| f.starts_with(prefix)),
            "{prefix} is packaged"
        );
    }
}

/// Cargo never packages a folder that holds its own `Cargo.toml`, whatever `include` says: the
/// device crate's manifest is `kernels-rs/manifest.toml` (build.rs writes it out as Cargo.toml
/// into its OUT_DIR), so that the published crate can build its PTX.
#[test]
fn package_holds_the_device_crate() {
    let files = package_list();
    for needed in [
        "kernels-rs/src/lib.rs",
        "kernels-rs/src/launch.rs",
        "kernels-rs/manifest.toml",
        "kernels-rs/Cargo.lock",
    ] {
        assert!(files.iter().any(|f| f == needed), "{needed} is not packaged");
    }
}
