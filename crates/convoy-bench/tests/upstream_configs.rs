//! Upstream's own scheduler_perf configs, v1.37.2, copied verbatim into
//! `tests/fixtures/upstream/` (see its README): the copies still equal the
//! Go module cache's files; convoy-bench loads and plans every workload of
//! `affinity/`, `misc/`, `topology_spreading/`, `default_preemption/` and
//! `workload_preemption/` and `volumes/` unchanged and runs the `integration-test`
//! workloads of the first three on the embedded target with Convoy (the
//! preemption cases: `preemption_configs.rs`, the volume cases:
//! `volume_configs.rs`); and
//! every other `performance-config.yaml` (`dra/`: `dra_config.rs`) of that release either loads or
//! is refused naming the opcode or field convoy-bench lacks, and the files
//! refused are exactly those of `NOT_LOADED`.
//! SchedulingWithNodeInclusionPolicy's pods carry a hostname spread
//! constraint with `nodeTaintsPolicy: Honor`: the tainted node is left out of
//! the spread (and filtered by its taint), so the four pods land one per
//! untainted node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use convoy_bench::config::{Config, UNSUPPORTED_OPCODES};
use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::Step;
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file, run};

/// The upstream release the fixtures are copies of.
const MODULE: &str = "k8s.io/kubernetes@v1.37.2";
/// The topics whose integration workloads run here.
const TOPICS: [&str; 3] = ["affinity", "misc", "topology_spreading"];
/// Every topic copied: each must load unchanged.
const LOADED: [&str; 6] = [
    "affinity",
    "misc",
    "topology_spreading",
    "default_preemption",
    "workload_preemption",
    "volumes",
];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream")
}

fn fixture(topic: &str) -> PathBuf {
    fixtures().join(topic).join("performance-config.yaml")
}

/// `scheduler_perf/` of the Go module cache (`go env GOMODCACHE`, else
/// `$GOMODCACHE`, else `~/go/pkg/mod`), when it holds the release.
fn upstream_dir() -> Option<PathBuf> {
    let from_go = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty());
    let cache = from_go
        .or_else(|| std::env::var("GOMODCACHE").ok())
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/go/pkg/mod")))?;
    let dir = Path::new(&cache).join(MODULE).join("test/integration/scheduler_perf");
    dir.is_dir().then_some(dir)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn fixtures_are_upstreams_files_byte_for_byte() {
    let Some(upstream) = upstream_dir() else {
        eprintln!(
            "note: {MODULE} is not in the Go module cache (`go env GOMODCACHE`); the fixtures \
             were not compared with upstream's files"
        );
        return;
    };
    let mut files = Vec::new();
    files_under(&fixtures(), &mut files);
    let mut compared = 0;
    for f in files {
        let rel = f.strip_prefix(fixtures()).unwrap();
        if rel == Path::new("README.md") {
            continue;
        }
        let theirs = std::fs::read(upstream.join(rel))
            .unwrap_or_else(|e| panic!("{}: no such upstream file: {e}", rel.display()));
        assert!(std::fs::read(&f).unwrap() == theirs, "{} differs from upstream's", rel.display());
        compared += 1;
    }
    // The six configs, the templates of misc (2), default_preemption (2)
    // and workload_preemption (5), dra/ and the 7 templates it uses, and the
    // shared templates they reference.
    assert!(compared >= 6 + 2 + 2 + 5 + 1 + 7 + 35, "only {compared} files compared");
}

/// Every template file a plan reads, relative to the fixtures.
fn templates_of(config: &Config) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for plan in convoy_bench::run::plan_all(config).unwrap().values() {
        for step in &plan.steps {
            let sources: Vec<&convoy_bench::plan::TemplateSource> = match step {
                Step::CreateNodes(s) => vec![&s.template],
                Step::CreatePods(s) => vec![&s.template],
                Step::CreateAny(s) | Step::CreatePodGroups(s) => vec![&s.template],
                Step::Churn(s) => s.templates.iter().collect(),
                _ => Vec::new(),
            };
            for t in sources {
                if let convoy_bench::plan::TemplateSource::File { path, .. } = t {
                    out.push(path.clone());
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn upstream_configs_load_and_plan_unchanged() {
    // Test cases and workloads per config, as upstream's v1.37.2 files have.
    let want = [
        ("affinity", 12, 45),
        ("misc", 6, 22),
        ("topology_spreading", 4, 15),
        ("default_preemption", 4, 24),
        ("workload_preemption", 3, 9),
        ("volumes", 5, 18),
    ];
    for (topic, cases, workloads) in want {
        let config = load_file(&fixture(topic)).unwrap_or_else(|e| panic!("{topic}: {e}"));
        assert_eq!(config.test_cases.len(), cases, "{topic}");
        let plans = convoy_bench::run::plan_all(&config).unwrap_or_else(|e| panic!("{topic}: {e}"));
        assert_eq!(plans.len(), workloads, "{topic}: {:?}", plans.keys());
        for t in templates_of(&config) {
            assert!(t.is_file(), "{topic}: {}", t.display());
        }
    }
}

/// The measured pods of each `integration-test` workload of the three
/// configs: every one of them can be placed, with or without the
/// inter-pod constraints taken into account, so each workload must end
/// with all of them bound.
const INTEGRATION: [(&str, &str, usize); 23] = [
    ("affinity", "SchedulingPodAntiAffinity/5Nodes", 4),
    ("affinity", "SchedulingPodMatchingAntiAffinity/5Nodes", 4),
    ("affinity", "SchedulingPodAffinity/5Nodes", 10),
    ("affinity", "SchedulingPreferredPodAffinity/5Nodes", 10),
    ("affinity", "SchedulingPreferredPodAntiAffinity/5Nodes", 10),
    ("affinity", "SchedulingNodeAffinity/5Nodes", 10),
    ("affinity", "MixedSchedulingBasePod/5Nodes", 10),
    ("affinity", "SchedulingRequiredPodAntiAffinityWithNSSelector/10Nodes", 6),
    ("affinity", "SchedulingPreferredAntiAffinityWithNSSelector/10Nodes", 10),
    ("affinity", "SchedulingRequiredPodAffinityWithNSSelector/10Nodes", 10),
    ("affinity", "SchedulingPreferredAffinityWithNSSelector/10Nodes", 10),
    ("affinity", "SchedulingGatedPodsWithPodAffinityImpactForThroughput/1Node_10GatedPods", 10),
    ("misc", "SchedulingBasic/5Nodes", 10),
    ("misc", "SchedulingBasic/5Nodes_AsyncAPICallsEnabled", 10),
    ("misc", "SchedulingDaemonset/5Nodes", 10),
    ("misc", "SchedulingWithMixedChurn/10Nodes", 100),
    ("misc", "SchedulingWhileGated/1Node_10GatedPods", 10),
    ("misc", "SchedulingDeletedPodsWithFinalizers/10Node_100DeletingPods", 10),
    ("misc", "SchedulingWithExtendedResource/fast_DRAExtendedResourceEnabled", 10),
    ("topology_spreading", "TopologySpreading/5Nodes", 10),
    ("topology_spreading", "PreferredTopologySpreading/5Nodes", 10),
    ("topology_spreading", "DefaultTopologySpreading/5Nodes", 10),
    ("topology_spreading", "SchedulingWithNodeInclusionPolicy/5Nodes", 4),
];

#[test]
fn integration_workloads_run_on_the_embedded_target() {
    let mut want: BTreeMap<&str, usize> = INTEGRATION.iter().map(|(_, n, p)| (*n, *p)).collect();
    for topic in TOPICS {
        let config = load_file(&fixture(topic)).unwrap();
        let opts = RunOptions {
            filter: None,
            labels: LabelFilter::parse("integration-test"),
            topic: topic.into(),
            embedded: EmbeddedOptions { timeout: Duration::from_secs(30), ..Default::default() },
        };
        let report = run(&config, &opts).unwrap();
        let expected = INTEGRATION.iter().filter(|(t, _, _)| *t == topic).count();
        assert_eq!(report.results.len(), expected, "{topic}");
        for r in &report.results {
            let pods = want.remove(r.name.as_str()).unwrap_or_else(|| panic!("{}", r.name));
            assert_eq!(r.error, None, "{}", r.name);
            assert_eq!(r.windows.len(), 1, "{}", r.name);
            assert_eq!(r.windows[0].pods, pods, "{}", r.name);
        }
    }
    assert!(want.is_empty(), "not run: {want:?}");
}

/// Upstream's `event_handling` config, read from the Go module cache (it
/// is not copied into the fixtures): its `integration-test` workloads
/// (`updateAny` of nodes and pods, with the `resize` subresource, among
/// them) run on the embedded target, every measured pod bound.
#[test]
fn event_handling_runs_on_the_embedded_target() {
    let Some(upstream) = upstream_dir() else {
        eprintln!("note: {MODULE} is not in the Go module cache; event_handling not run");
        return;
    };
    let config = load_file(&upstream.join("event_handling/performance-config.yaml")).unwrap();
    let opts = RunOptions {
        filter: None,
        labels: LabelFilter::parse("integration-test"),
        topic: "event_handling".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
    };
    let report = run(&config, &opts).unwrap();
    let got: BTreeMap<&str, usize> = report
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.error, None, "{}", r.name);
            assert_eq!(r.windows.len(), 1, "{}", r.name);
            (r.name.as_str(), r.windows[0].pods)
        })
        .collect();
    let want: BTreeMap<&str, usize> = [
        ("EventHandlingNodeAdd/2Nodes_20Pods", 120),
        ("EventHandlingNodeUpdate/2Nodes_20Pods", 120),
        ("EventHandlingPodAdd/10Pods", 20),
        ("EventHandlingPodDelete/2Nodes_20Pods", 110),
        ("EventHandlingPodUpdate/1Node_10Pods", 60),
    ]
    .into();
    assert_eq!(got, want);
}

#[test]
fn upstream_labels_select_as_upstream() {
    let config = load_file(&fixture("misc")).unwrap();
    let select = |filter: &str| {
        let opts = RunOptions {
            filter: Some("SchedulingBasic".into()),
            labels: LabelFilter::parse(filter),
            topic: "misc".into(),
            embedded: EmbeddedOptions::default(),
        };
        convoy_bench::run::select(&config, &opts)
            .iter()
            .map(|(_, w)| w.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        select("performance"),
        [
            "5000Nodes_10000Pods",
            "5000Nodes_50000Pods",
            "5000Nodes_50000Pods_AsyncAPICallsEnabled",
            "5000Nodes_50000Pods_NodeDeclaredFeaturesDisabled"
        ]
    );
    assert!(select("performance,short").is_empty());
    assert_eq!(select("integration-test,-performance"), ["5Nodes", "5Nodes_AsyncAPICallsEnabled"]);
}

/// What convoy-bench says about one upstream config: `Ok` when every
/// workload plans and the first object of every template renders.
fn check(path: &Path) -> Result<(), String> {
    let config = load_file(path).map_err(|e| e.to_string())?;
    let plans = convoy_bench::run::plan_all(&config)?;
    for plan in plans.values() {
        convoy_bench::objects::render_first(plan).map_err(|e| format!("{}: {e}", plan.name))?;
    }
    Ok(())
}

/// How convoy-bench words a refusal of something upstream has: by name
/// (an opcode, a field, a template construct), never as an unknown field.
fn names_what_is_refused(message: &str) -> bool {
    message.contains("does not support yet")
        || message.contains("is not supported yet")
        || message.contains("are not supported")
        || UNSUPPORTED_OPCODES.iter().any(|o| message.contains(&format!("opcode {o:?}")))
}

/// Parameters upstream's Go test files read themselves (`Workload.GetParam`
/// in a `WithPrepareFn` hook): no YAML op uses them, so upstream's own
/// unused-parameter check would fail without the hook, and so does
/// convoy-bench's, naming the parameter.
const GO_HOOK_PARAMS: [(&str, &str); 1] = [(
    "nodedeclaredfeatures/performance-config.yaml",
    "parameters defined but unused: numNodeDeclaredFeatures",
)];

/// Workloads upstream's own executor cannot plan either: dra/'s
/// `SchedulingWithResourceClaimTemplate/empty_100nodes` and `empty_200nodes`
/// pass no `measurePods` (unlabelled, so upstream's CI never runs them; see
/// `dra_config.rs`).
const UPSTREAM_UNPLANNABLE: [(&str, &str); 1] =
    [("dra/performance-config.yaml", "parameter measurePods is undefined")];

/// The upstream files convoy-bench does not load, and what in each it
/// refuses (docs/benchmarks-archive.md lists them with the reason). Every
/// other `performance-config.yaml` of the release must load: the test
/// fails when a file starts being refused, and when one listed here loads
/// (so the list stays true).
const NOT_LOADED: [(&str, &str); 3] = [
    ("starvation/performance-config.yaml", "metricsCollectorConfig is not supported yet"),
    GO_HOOK_PARAMS[0],
    UPSTREAM_UNPLANNABLE[0],
];

#[test]
fn every_upstream_config_loads_or_names_what_is_refused() {
    let Some(upstream) = upstream_dir() else {
        eprintln!("note: {MODULE} is not in the Go module cache; upstream's configs not checked");
        return;
    };
    let mut files = Vec::new();
    files_under(&upstream, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n == "performance-config.yaml"));
    assert!(files.len() > 20, "{files:?}");
    let mut refused = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&upstream).unwrap().display().to_string();
        match check(f) {
            Ok(()) => eprintln!("loads:   {rel}"),
            Err(e) => {
                eprintln!("refused: {rel}: {e}");
                refused.push((rel, e));
            }
        }
    }
    for topic in LOADED {
        let rel = format!("{topic}/performance-config.yaml");
        assert!(!refused.iter().any(|(r, _)| *r == rel), "{rel} must load: {refused:?}");
    }
    let unnamed: Vec<_> = refused
        .iter()
        .filter(|(rel, e)| {
            !names_what_is_refused(e)
                && !GO_HOOK_PARAMS
                    .iter()
                    .chain(&UPSTREAM_UNPLANNABLE)
                    .any(|(f, m)| rel == f && e.contains(m))
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "refused without naming an unsupported opcode or field: {unnamed:#?}"
    );
    let unlisted: Vec<_> = refused
        .iter()
        .filter(|(rel, e)| !NOT_LOADED.iter().any(|(f, m)| rel == f && e.contains(m)))
        .collect();
    assert!(unlisted.is_empty(), "refused but not in NOT_LOADED: {unlisted:#?}");
    let loading: Vec<_> =
        NOT_LOADED.iter().filter(|(f, _)| !refused.iter().any(|(rel, _)| rel == f)).collect();
    assert!(loading.is_empty(), "in NOT_LOADED but loads now: {loading:?}");
}
