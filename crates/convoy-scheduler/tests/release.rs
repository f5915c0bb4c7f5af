//! What a release promises, checked on every test run: one version
//! everywhere (the workspace, every crate, both lock files, the chart's
//! `version` and `appVersion`, the top CHANGELOG.md entry, the install
//! commands of the docs), `--version` naming it and the commit, the release
//! workflow publishing the image the chart runs by default, and the metrics
//! table of docs/operating.md listing exactly the metrics the scheduler
//! registers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use convoy_scheduler::metrics::{Metrics, PROCESS_METRICS};
use serde_json::Value;

/// The workspace's root directory.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(root().join(path)).with_context(|| format!("reading {path}"))
}

fn yaml(path: &str) -> Result<Value> {
    serde_saphyr::from_str(&read(path)?).with_context(|| format!("parsing {path}"))
}

/// The lines of `[section]` of a TOML file, up to the next section.
fn toml_section<'a>(text: &'a str, section: &str) -> Vec<&'a str> {
    let head = format!("[{section}]");
    text.lines()
        .skip_while(|l| l.trim() != head)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect()
}

/// `key = "value"` in `lines`.
fn toml_string(lines: &[&str], key: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// `version` of `[workspace.package]` in the root Cargo.toml.
fn workspace_version() -> Result<String> {
    let cargo = read("Cargo.toml")?;
    toml_string(&toml_section(&cargo, "workspace.package"), "version")
        .context("no version in [workspace.package] of Cargo.toml")
}

/// The version of the first released entry of a Keep a Changelog file
/// (`## [0.2.0] - 2026-12-06`; `## [Unreleased]` is skipped) and its text.
fn top_changelog_entry(changelog: &str) -> Result<(String, String)> {
    let mut lines = changelog
        .lines()
        .skip_while(|l| !l.starts_with("## [") || l.starts_with("## [Unreleased]"));
    let head = lines.next().context("CHANGELOG.md has no released entry (## [x.y.z] - date)")?;
    let (version, date) = head["## [".len()..]
        .split_once("] - ")
        .with_context(|| format!("CHANGELOG.md: {head:?} is not `## [x.y.z] - YYYY-MM-DD`"))?;
    ensure!(
        date.len() == 10 && date.chars().filter(|c| *c == '-').count() == 2,
        "CHANGELOG.md: {head:?}: the date is not YYYY-MM-DD"
    );
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("## ")).collect();
    Ok((version.to_string(), body.join("\n")))
}

/// Each `name = "convoy…"` package's version in a Cargo.lock.
fn locked_convoy_versions(lock: &str) -> Vec<(String, String)> {
    lock.split("[[package]]")
        .filter_map(|p| {
            let lines: Vec<&str> = p.lines().collect();
            let name = toml_string(&lines, "name")?;
            // Path packages have no `source`; convoy-fuzz is fuzz/'s own.
            let ours = name.starts_with("convoy-")
                && name != "convoy-fuzz"
                && toml_string(&lines, "source").is_none();
            if !ours {
                return None;
            }
            Some((name, toml_string(&lines, "version")?))
        })
        .collect()
}

#[test]
fn one_version_everywhere() -> Result<()> {
    let version = workspace_version()?;
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "this crate does not take the workspace's");

    // Every crate takes the workspace's version.
    let mut manifests = Vec::new();
    for dir in ["crates", "examples/out-of-tree"] {
        for entry in std::fs::read_dir(root().join(dir))? {
            let path = entry?.path().join("Cargo.toml");
            if path.exists() {
                manifests.push(path);
            }
        }
    }
    ensure!(manifests.len() >= 10, "found only {manifests:?}");
    for m in &manifests {
        let text = std::fs::read_to_string(m)?;
        let package = toml_section(&text, "package");
        ensure!(
            package.iter().any(|l| l.trim() == "version.workspace = true"),
            "{}: [package] must say `version.workspace = true`",
            m.strip_prefix(root()).unwrap_or(m).display()
        );
    }

    for lock in ["Cargo.lock", "fuzz/Cargo.lock"] {
        let locked = locked_convoy_versions(&read(lock)?);
        ensure!(!locked.is_empty(), "{lock}: no convoy packages");
        for (name, v) in locked {
            ensure!(v == version, "{lock}: {name} is {v}, the workspace's version is {version}");
        }
    }

    let chart = yaml("charts/convoy/Chart.yaml")?;
    for key in ["version", "appVersion"] {
        ensure!(
            chart[key].as_str() == Some(version.as_str()),
            "charts/convoy/Chart.yaml: {key} is {}, the workspace's version is {version}",
            chart[key]
        );
    }

    let (top, body) = top_changelog_entry(&read("CHANGELOG.md")?)?;
    ensure!(top == version, "CHANGELOG.md: the top entry is {top}, the version is {version}");
    ensure!(body.contains("### "), "CHANGELOG.md: the entry for {top} is empty");
    Ok(())
}

/// The install and upgrade commands name the current release.
#[test]
fn install_commands_name_this_release() -> Result<()> {
    let version = workspace_version()?;
    let changelog = read("CHANGELOG.md")?;
    let upgrading = changelog
        .split("\n## Upgrading\n")
        .nth(1)
        .context("CHANGELOG.md has no `## Upgrading` section")?;
    for (file, text) in
        [("docs/install.md", read("docs/install.md")?), ("CHANGELOG.md", upgrading.to_string())]
    {
        let mut named = 0;
        for marker in ["--version ", "convoy-scheduler:", "image.tag="] {
            for (i, _) in text.match_indices(marker) {
                let rest = &text[i + marker.len()..];
                let v: String =
                    rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                if !v.is_empty() {
                    ensure!(v == version, "{file}: `{marker}{v}`, the version is {version}");
                    named += 1;
                }
            }
        }
        ensure!(named > 0, "{file} names no version to install");
    }
    Ok(())
}

#[test]
fn version_flag_prints_the_version_and_the_commit() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_convoy-scheduler")).arg("--version").output()?;
    ensure!(out.status.success(), "{out:?}");
    let commit = env!("CONVOY_GIT_COMMIT");
    assert_eq!(
        String::from_utf8(out.stdout)?,
        format!("convoy-scheduler {} (commit {commit})\n", workspace_version()?)
    );
    // Built from this checkout (no CONVOY_GIT_COMMIT given): its HEAD.
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    if let Ok(head) = head
        && head.status.success()
        && std::env::var_os("CONVOY_GIT_COMMIT").is_none()
    {
        assert_eq!(commit, String::from_utf8(head.stdout)?.trim());
    }
    Ok(())
}

/// The step of `workflow` that `uses` an action whose name starts with
/// `action`.
fn step<'a>(workflow: &'a Value, action: &str) -> Result<&'a Value> {
    let steps = workflow["jobs"]["release"]["steps"].as_array().context("jobs.release.steps")?;
    steps
        .iter()
        .find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with(action)))
        .with_context(|| format!("no step uses {action}"))
}

#[test]
fn release_workflow_publishes_the_charts_default_image() -> Result<()> {
    let workflow = yaml(".github/workflows/release.yml")?;
    let tags = &workflow["on"]["push"]["tags"];
    ensure!(tags.as_array().is_some_and(|t| t.contains(&"v*".into())), "on.push.tags: {tags}");

    // The owner the chart's defaults are written for: the repository's.
    let cargo = read("Cargo.toml")?;
    let repository = toml_string(&toml_section(&cargo, "workspace.package"), "repository")
        .context("no repository in [workspace.package]")?;
    let owner = repository
        .strip_prefix("https://github.com/")
        .and_then(|r| r.split('/').next())
        .with_context(|| format!("repository {repository} is not on GitHub"))?;
    let expand = |key: &str| -> Result<String> {
        let v = workflow["env"][key].as_str().with_context(|| format!("no env.{key}"))?;
        Ok(v.replace("${{ github.repository_owner }}", owner))
    };

    let values = yaml("charts/convoy/values.yaml")?;
    let repo = values["image"]["repository"].as_str().context("image.repository")?;
    assert_eq!(expand("IMAGE")?, repo, "the workflow's image is not the chart's default");
    assert_eq!(values["image"]["tag"], "", "the tag must default to the chart's appVersion");
    let helpers = read("charts/convoy/templates/_helpers.tpl")?;
    ensure!(
        helpers.contains(".Values.image.tag | default .Chart.AppVersion"),
        "the chart's image line no longer defaults the tag to appVersion"
    );
    assert_eq!(expand("CHARTS")?, format!("oci://ghcr.io/{owner}/charts"));

    for action in ["docker/setup-qemu-action", "docker/setup-buildx-action"] {
        step(&workflow, action)?;
    }
    let build = &step(&workflow, "docker/build-push-action")?["with"];
    let platforms = build["platforms"].as_str().context("platforms")?;
    for p in ["linux/amd64", "linux/arm64"] {
        ensure!(platforms.split(',').any(|x| x.trim() == p), "platforms {platforms} lacks {p}");
    }
    assert_eq!(build["push"], true);
    assert_eq!(
        build["tags"],
        "${{ steps.version.outputs.image }}:${{ steps.version.outputs.version }}"
    );
    let args = build["build-args"].as_str().context("build-args")?;
    ensure!(args.contains("CONVOY_GIT_COMMIT=${{ steps.version.outputs.commit }}"), "{args}");
    ensure!(
        read("Dockerfile")?.lines().any(|l| l.trim().starts_with("ARG CONVOY_GIT_COMMIT")),
        "the Dockerfile does not take the CONVOY_GIT_COMMIT build argument"
    );

    let sbom = &step(&workflow, "anchore/sbom-action")?["with"];
    assert_eq!(sbom["format"], "spdx-json");

    let script = |name: &str| -> Result<String> {
        let steps = workflow["jobs"]["release"]["steps"].as_array().context("steps")?;
        let s = steps
            .iter()
            .find(|s| s["name"] == name)
            .with_context(|| format!("no step {name:?}"))?;
        Ok(s["run"].as_str().context("run")?.to_string())
    };
    let check = script("The tag names the workspace's version")?;
    ensure!(check.contains("\"$GITHUB_REF_NAME\" != \"v$version\""), "{check}");
    let chart = script("Package and push the chart")?;
    ensure!(chart.contains("helm package charts/convoy"), "{chart}");
    ensure!(
        chart.contains("helm push") && chart.contains("steps.version.outputs.charts"),
        "{chart}"
    );
    let release = script("The GitHub release")?;
    ensure!(release.contains("--notes-file release-notes.md") && release.contains(".spdx.json"));
    Ok(())
}

/// The backticked names of the first column of the first table under
/// `## Metrics` in docs/operating.md.
fn documented_metrics(doc: &str) -> Result<BTreeSet<String>> {
    let section = doc.split("\n## Metrics\n").nth(1).context("no `## Metrics` section")?;
    let table =
        section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    let mut names = BTreeSet::new();
    for row in table {
        let first = row.split('|').nth(1).unwrap_or("");
        for (i, part) in first.split('`').enumerate() {
            if i % 2 == 1 && !names.insert(part.to_string()) {
                bail!("docs/operating.md lists {part} twice");
            }
        }
    }
    Ok(names)
}

#[test]
fn metrics_table_lists_exactly_the_registered_metrics() -> Result<()> {
    // Every metric declared, whether or not it has a series yet (an
    // encoding shows a family only once it has one).
    let registered: BTreeSet<String> = Metrics::new().names().iter().cloned().collect();
    for name in ["scheduler_schedule_attempts_total", "leader_election_master_status"]
        .into_iter()
        .chain(PROCESS_METRICS)
    {
        ensure!(registered.contains(name), "{name} not in {registered:?}");
    }
    let documented = documented_metrics(&read("docs/operating.md")?)?;
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    ensure!(
        undocumented.is_empty() && unregistered.is_empty(),
        "docs/operating.md#metrics: missing from the table: {undocumented:?}; in the table but \
         not registered: {unregistered:?}"
    );
    Ok(())
}

#[test]
fn the_table_parsers_see_what_they_should() -> Result<()> {
    let doc = "# Ops\n\n## Metrics\n\ntext\n\n| metric | labels | |\n|---|---|---|\n\
               | `a_total` | `x` | |\n| `b` | | `c` in prose |\n\nafter\n\n| `d` | |\n";
    assert_eq!(documented_metrics(doc)?, BTreeSet::from(["a_total".into(), "b".into()]));
    let (v, body) = top_changelog_entry(
        "# C\n## [Unreleased]\n## [1.2.3] - 2026-01-02\n### Added\n- x\n## [1.2.2] - 2025-01-01\n- y\n",
    )?;
    assert_eq!((v.as_str(), body.as_str()), ("1.2.3", "### Added\n- x"));
    let lock = "[[package]]\nname = \"convoy-api\"\nversion = \"0.2.0\"\n\n[[package]]\nname = \"convoy-x\"\nversion = \"9.0.0\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n";
    assert_eq!(locked_convoy_versions(lock), vec![("convoy-api".to_string(), "0.2.0".to_string())]);
    Ok(())
}
