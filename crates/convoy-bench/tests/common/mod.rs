//! Helpers shared by the API-target test binaries.

use std::path::PathBuf;
use std::process::Command;

/// Builds `convoy-scheduler` into this test's target directory and
/// returns its path.
pub fn convoy_scheduler() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test>
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("profile directory");
    let mut build = Command::new(env!("CARGO"));
    // With convoy-bench selected too, features resolve as for this test's
    // own build, so neither build invalidates the other's artifacts.
    build.args(["build", "-p", "convoy-bench", "-p", "convoy-scheduler"]);
    build.args(["--bin", "convoy-scheduler"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("running cargo build");
    assert!(status.success(), "cargo build -p convoy-scheduler failed");
    let bin = profile_dir.join("convoy-scheduler");
    assert!(bin.is_file(), "{} missing after the build", bin.display());
    bin
}
