//! Sets what `--version` and `convoy_build_info` report:
//!
//! - `CONVOY_GIT_COMMIT`: the environment's `CONVOY_GIT_COMMIT` when set
//!   (the image build, whose context has no `.git`), else
//!   `git rev-parse --short=12 HEAD`, else `unknown`;
//! - `CONVOY_RUSTC_VERSION`: `rustc --version` of the compiler building
//!   this crate, else `unknown`.
//!
//! It reruns when that variable, `.git/HEAD`, the branch HEAD names or
//! `packed-refs` change, not on every build.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CONVOY_GIT_COMMIT");

    let commit = match std::env::var("CONVOY_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            watch_git_head();
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=CONVOY_GIT_COMMIT={commit}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rustc_version = output(Command::new(rustc).arg("--version"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=CONVOY_RUSTC_VERSION={rustc_version}");
}

/// Reruns this script when HEAD moves: `HEAD` itself (a checkout), the
/// branch it names (a commit) and `packed-refs` (a branch packed by `git
/// gc`). `--git-path` finds them in a linked worktree too. Only files that
/// exist are named: Cargo reruns a script on every build for a missing one.
fn watch_git_head() {
    let mut paths = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    for p in paths {
        if let Some(file) = git(&["rev-parse", "--path-format=absolute", "--git-path", &p])
            && std::path::Path::new(&file).exists()
        {
            println!("cargo:rerun-if-changed={file}");
        }
    }
}

/// `git ARGS` run from this crate's directory: its trimmed output, if it
/// succeeded.
fn git(args: &[&str]) -> Option<String> {
    output(Command::new("git").args(args))
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
