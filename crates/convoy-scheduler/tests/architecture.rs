//! The crate-dependency statements of docs/architecture.md, checked against
//! `cargo metadata`: the tree at the top of the page (the scheduler depends
//! on every crate listed under it, `convoy-api` on `convoy-config`) and the
//! paragraphs below it (who depends on `convoy-api`, who reads
//! `convoy-config`, who depends on `kube`'s client). A change to a crate's
//! dependencies that the page does not follow fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each workspace package's normal (not dev, not build) dependencies.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let root = convoy_testenv::repo_root();
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("name").to_string())
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

fn convoy(deps: &BTreeSet<String>) -> BTreeSet<&str> {
    deps.iter().map(String::as_str).filter(|d| d.starts_with("convoy-")).collect()
}

fn set<'a>(items: &[&'a str]) -> BTreeSet<&'a str> {
    items.iter().copied().collect()
}

#[test]
fn architecture_md_states_the_crate_dependencies_as_they_are() {
    let deps = normal_dependencies();
    let doc = std::fs::read_to_string(convoy_testenv::repo_root().join("docs/architecture.md"))
        .expect("docs/architecture.md");

    // The tree: every crate drawn under convoy-scheduler is its dependency.
    let tree: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("├── ").or(l.trim_start().strip_prefix("└── ")))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(tree.len() >= 7, "the tree of docs/architecture.md lists {tree:?}");
    for name in &tree {
        assert!(
            deps["convoy-scheduler"].contains(*name),
            "the tree draws convoy-scheduler on {name}"
        );
    }
    assert_eq!(
        convoy(&deps["convoy-api"]),
        set(&["convoy-config"]),
        "convoy-api is on convoy-config"
    );

    // "Every crate of the tree but convoy-config and convoy-testenv depends on convoy-api."
    assert!(
        doc.contains("Every crate of the tree but `convoy-config` and `convoy-testenv` depends")
    );
    for (name, d) in &deps {
        let exempt = name == "convoy-config" || name == "convoy-testenv" || name == "convoy-api";
        assert!(exempt || d.contains("convoy-api"), "{name} does not depend on convoy-api");
    }
    // "The queue, the cache, the object store, the embedded cluster and the adapters use
    // nothing else of Convoy's."
    for name in
        ["convoy-queue", "convoy-cache", "convoy-objects", "convoy-embedded", "convoy-adapters"]
    {
        assert_eq!(convoy(&deps[name]), set(&["convoy-api"]), "{name}");
    }
    // "The framework, the plugins, the gang crate and the binary also read convoy-config."
    for name in ["convoy-framework", "convoy-plugins", "convoy-gang", "convoy-scheduler"] {
        assert!(deps[name].contains("convoy-config"), "{name} does not read convoy-config");
    }
    // "convoy-config depends on no other Convoy crate; it uses kube-core."
    assert!(convoy(&deps["convoy-config"]).is_empty());
    assert!(deps["convoy-config"].contains("kube-core"));
    // Who depends on kube's client.
    let kube: BTreeSet<&str> =
        deps.iter().filter(|(_, d)| d.contains("kube")).map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        kube,
        set(&["convoy-adapters", "convoy-bench", "convoy-scheduler", "convoy-testenv"]),
        "the crates docs/architecture.md says depend on kube's client"
    );
    assert!(!deps["convoy-api"].contains("kube"), "convoy-api depends on no Kubernetes client");
}
