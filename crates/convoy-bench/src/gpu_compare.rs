//! `convoy-bench gpu`: one GPU workload with several schedulers and
//! profiles, the same seed for each: on the embedded target Convoy's GPU
//! profile, its default profile, and upstream's `MostAllocated`
//! configuration loaded unchanged (a quick stand-in for kube-scheduler's);
//! on a fresh testenv control plane each, Convoy's two profiles plus
//! upstream kube-scheduler with its default configuration and with
//! NodeResourcesFit `MostAllocated` weighting GPUs. Workloads with GPUs as
//! DRA devices (`gpusAs: draDevices`) skip the two MostAllocated variants
//! (they weight `nvidia.com/gpu`, which devices do not use) and run their
//! testenv variants with kube-controller-manager (the resourceclaim
//! controller).
//! Prints the fragmentation table and the targets with a verdict,
//! and writes the DataItems and the per-wave samples.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use convoy_testenv::{Options, TestEnv};
use serde::Serialize;

use crate::dataitems::{DataItem, DataItems};
use crate::gpu::Outcome;
use crate::labels::LabelFilter;
use crate::measure::throughput::{SampleInterval, Summary as Throughput};
use crate::run::{RunOptions, data_item, plan_all, select};
use crate::targets::api::{ApiOptions, SchedulerKind};
use crate::targets::embedded::EmbeddedOptions;

/// Where a variant runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Where {
    /// The embedded cluster (Convoy only).
    Embedded,
    /// A fresh testenv control plane with this scheduler.
    Testenv(#[serde(serialize_with = "kind_name")] SchedulerKind),
}

fn kind_name<S: serde::Serializer>(k: &SchedulerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

/// One scheduler and configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    /// Short name (`embedded/convoy-gpu`, ...).
    pub label: String,
    /// Where it runs.
    #[serde(rename = "where")]
    pub at: Where,
    /// Its scheduler configuration (`None`: the scheduler's default).
    pub config: Option<PathBuf>,
    /// Whether the configuration is about the extended resource only
    /// (NodeResourcesFit `MostAllocated` weighting `nvidia.com/gpu`): it
    /// does not apply to GPUs offered as DRA devices, and is skipped for
    /// those workloads.
    pub extended_resource_only: bool,
}

/// kube-scheduler's gate for upstream's PodGroup topology constraint
/// (`spec.schedulingConstraints.topology`); a workload that sets it gets
/// it on testenv's API server too.
const TOPOLOGY_GATE: &str = "TopologyAwareWorkloadScheduling";
/// The API server flag of [`TOPOLOGY_GATE`] (merged with testenv's own
/// `--feature-gates=GenericWorkload=true`).
const TOPOLOGY_APISERVER_ARGS: &[&str] = &["--feature-gates=TopologyAwareWorkloadScheduling=true"];

/// Why a variant is not run on a workload with DRA devices.
pub const SKIPPED_FOR_DRA: &str = "skipped: MostAllocated weights nvidia.com/gpu, which DRA \
                                   devices do not use";

/// The variants, by label: the six of the issue plus Convoy with
/// upstream's MostAllocated configuration on the embedded target.
pub fn variants(gpu_config: PathBuf, most_allocated: PathBuf) -> Vec<Variant> {
    let v = |label: &str, at, config: Option<&PathBuf>| Variant {
        label: label.into(),
        at,
        config: config.cloned(),
        extended_resource_only: config == Some(&most_allocated),
    };
    let (c, k) = (SchedulerKind::Convoy, SchedulerKind::KubeScheduler);
    vec![
        v("embedded/convoy-gpu", Where::Embedded, Some(&gpu_config)),
        v("embedded/convoy-default", Where::Embedded, None),
        v("embedded/convoy-mostallocated", Where::Embedded, Some(&most_allocated)),
        v("testenv/convoy-gpu", Where::Testenv(c), Some(&gpu_config)),
        v("testenv/convoy-default", Where::Testenv(c), None),
        v("testenv/kube-scheduler", Where::Testenv(k), None),
        v("testenv/kube-scheduler-mostallocated", Where::Testenv(k), Some(&most_allocated)),
    ]
}

/// One variant's run of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct VariantRun {
    /// The variant.
    pub variant: Variant,
    /// `<test case>/<workload>`.
    pub workload: String,
    /// Average throughput of the op's window, pods/s.
    pub throughput: Option<f64>,
    /// The GPU outcomes (one per `createGpuJobs`).
    pub outcomes: Vec<Outcome>,
    /// Why it failed.
    pub error: Option<String>,
    /// Why it was not run.
    pub skipped: Option<String>,
    /// Bound pods removed by others during the op's window (see
    /// [`crate::measure::evictions`]).
    pub evictions: usize,
    /// Its DataItems.
    #[serde(skip)]
    pub items: Vec<DataItem>,
}

/// Runs every selected workload with every variant.
pub fn run(
    config: &crate::Config,
    opts: &RunOptions,
    variants: &[Variant],
    api: &ApiOptions,
) -> Result<Vec<VariantRun>, String> {
    let plans = plan_all(config)?;
    let mut out = Vec::new();
    for (tc, w) in select(config, opts) {
        let base = &plans[&format!("{}/{}", tc.name, w.name)];
        let dra = base.steps.iter().any(|s| {
            matches!(s, crate::plan::Step::CreateGpuJobs(s) if s.gpus_as == crate::gpu::GpusAs::DraDevices)
        });
        for v in variants {
            tracing::info!(workload = %base.name, variant = %v.label, "running");
            let mut plan = base.clone();
            plan.scheduler_config = v.config.clone();
            let mut run = VariantRun {
                variant: v.clone(),
                workload: plan.name.clone(),
                throughput: None,
                outcomes: Vec::new(),
                error: None,
                skipped: None,
                evictions: 0,
                items: Vec::new(),
            };
            if dra && v.extended_resource_only {
                tracing::info!(workload = %base.name, variant = %v.label, "{SKIPPED_FOR_DRA}");
                run.skipped = Some(SKIPPED_FOR_DRA.into());
                out.push(run);
                continue;
            }
            let windows = match v.at {
                Where::Embedded => crate::targets::embedded::run(&plan, &opts.embedded)
                    .map(|o| o.windows)
                    .map_err(|e| e.to_string()),
                Where::Testenv(kind) => {
                    // DRA needs kube-controller-manager's resourceclaim
                    // controller (pods' claims made from templates, and
                    // deleted with their pods).
                    let mut options =
                        if dra { Options::WITH_CONTROLLERS } else { Options::API_ONLY };
                    // Upstream's gang topology constraint is a PodGroup
                    // field the API server keeps only with the gate on.
                    if plan.feature_gates.get(TOPOLOGY_GATE) == Some(&true) {
                        options.apiserver_args = TOPOLOGY_APISERVER_ARGS;
                    }
                    let env = TestEnv::start_with(options);
                    env.map_err(|e| format!("starting testenv: {e}")).and_then(|env| {
                        // Before the scheduler starts, so that it finds the
                        // PodGroup API when it starts watching.
                        install(env.kubeconfig(), &api.prepare)?;
                        let api = ApiOptions {
                            kubeconfig: env.kubeconfig().to_path_buf(),
                            scheduler: kind,
                            ..api.clone()
                        };
                        let r = crate::targets::api::run(&plan, &api).map_err(|e| e.to_string());
                        drop(env);
                        r.map(|o| o.windows)
                    })
                }
            };
            let labels: BTreeMap<String, String> =
                [("Scheduler".to_string(), v.label.clone())].into();
            match windows {
                Ok(windows) => {
                    run.evictions = windows.iter().map(|w| w.evictions).sum();
                    for win in &windows {
                        let mut i = data_item(&plan.name, win);
                        i.labels.extend(labels.clone());
                        run.items.push(i);
                    }
                    run.throughput = windows
                        .first()
                        .and_then(|w| Throughput::of(&w.sampled.samples))
                        .map(|s| s.average);
                }
                Err(e) => run.error = Some(e),
            }
            run.outcomes = plan.take_gpu_outcomes();
            run.items.extend(crate::gpu::outcomes_items(&plan.name, &run.outcomes, &labels));
            out.push(run);
        }
    }
    Ok(out)
}

/// Applies manifests (CRDs waited for until `Established`) to a fresh
/// API server.
fn install(kubeconfig: &std::path::Path, manifests: &[serde_json::Value]) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(async {
        let client = convoy_adapters::connect(Some(kubeconfig), 50.0, 100)
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let dynamic = crate::targets::api::dynamic::Dynamic::new(client);
        for m in manifests {
            dynamic.prepare(m).await?;
        }
        Ok(())
    })
}

/// The table of the runs, one row per variant and workload.
pub fn table(runs: &[VariantRun]) -> String {
    let header = [
        "WORKLOAD",
        "VARIANT",
        "PODS/S",
        "1ST 8-GPU FAIL",
        "STRANDED AVG",
        "MAX",
        "ALLOC% SAT",
        "UNALLOC SAT",
        "FREE NODES MIN",
        "AVG",
        "REJECTED",
        "GANG NODES AVG/MAX",
        "DOMAINS AVG/MAX",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in runs {
        let mut row = vec![r.workload.clone(), r.variant.label.clone()];
        row.push(r.throughput.map_or("-".into(), |t| format!("{t:.1}")));
        match r.outcomes.first() {
            Some(o) => {
                let s = &o.summary;
                let pct = |g: i64| 100.0 * g as f64 / s.total_gpus.max(1) as f64;
                row.push(match s.first_full_node_failure {
                    Some((g, _)) => format!("{g} ({:.1}%)", pct(g)),
                    None => "never".into(),
                });
                row.push(s.stranded_avg.map_or("-".into(), |v| format!("{v:.1}")));
                row.push(s.stranded_max.map_or("-".into(), |v| v.to_string()));
                row.push(s.allocated_pct_at_saturation.map_or("-".into(), |v| format!("{v:.1}")));
                row.push(s.unallocated_at_saturation.map_or("-".into(), |v| format!("{v:.1}")));
                row.push(s.free_nodes_min.to_string());
                row.push(format!("{:.1}", s.free_nodes_avg));
                row.push(format!("{}/{}", s.rejected_jobs, o.accepted_jobs + s.rejected_jobs));
                let am =
                    |v: Option<(f64, usize)>| v.map_or("-".into(), |(a, m)| format!("{a:.2}/{m}"));
                row.push(am(s.gang_nodes));
                row.push(am(s.gang_domains));
            }
            None => row.extend(std::iter::repeat_n("-".to_string(), header.len() - 3)),
        }
        if r.skipped.is_some() {
            row[2] = "skipped".into();
        }
        rows.push(row);
    }
    let mut out = crate::table::format(&rows, 2);
    for r in runs {
        if let Some(e) = &r.error {
            writeln!(out, "{} {}: {e}", r.workload, r.variant.label).unwrap();
        }
        if let Some(why) = &r.skipped {
            writeln!(out, "{} {}: {why}", r.workload, r.variant.label).unwrap();
        }
    }
    out
}

/// The gang contention table (`backlog: true` workloads), one row per
/// variant and workload; empty when no run has contention metrics.
pub fn contention_table(runs: &[VariantRun]) -> String {
    let header = [
        "WORKLOAD",
        "VARIANT",
        "GANGS PLACED",
        "CREATED->BOUND P50 S",
        "P99 S",
        "UTIL% MEAN",
        "UTIL% SAT",
        "PARTIAL",
        "DEADLOCKED",
        "UNPLACED",
        "EVICTIONS",
        "DOMAINS AVG/MAX",
        "ONE DOMAIN WHEN ONE FITTED",
        "BACKFILLED",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in runs {
        let Some(c) = r.outcomes.first().and_then(|o| o.contention.as_ref()) else { continue };
        let s = |v: Option<f64>| v.map_or("-".into(), |ms| format!("{:.1}", ms / 1e3));
        rows.push(vec![
            r.workload.clone(),
            r.variant.label.clone(),
            format!("{}/{}", c.gangs_placed, c.gangs),
            s(c.latency_p50_ms),
            s(c.latency_p99_ms),
            format!("{:.1}", c.utilization_mean_pct),
            c.utilization_saturated_pct.map_or("-".into(), |v| format!("{v:.1}")),
            c.partial_gangs.to_string(),
            c.deadlocked_gangs.to_string(),
            c.unplaced_jobs.to_string(),
            r.evictions.to_string(),
            match (c.domains_avg(), c.gang_domains.iter().max()) {
                (Some(a), Some(m)) => format!("{a:.2}/{m}"),
                _ => "-".into(),
            },
            format!("{}/{}", c.one_domain_when_fitted, c.one_domain_fitted),
            c.backfilled.to_string(),
        ]);
    }
    if rows.len() == 1 {
        return String::new();
    }
    crate::table::format(&rows, 2)
}

/// One target of the issue and whether it was met.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// What is compared.
    pub target: String,
    /// The measured reduction or ratio.
    pub measured: String,
    /// Met, missed, or not measured.
    pub met: Option<bool>,
}

/// The targets for `workload`: stranded GPUs of `testenv/convoy-gpu`
/// at least 30 % below kube-scheduler's default and 10 % below its
/// MostAllocated configuration; throughput of the GPU profile within 10 %
/// of Convoy's default profile (on each target).
pub fn verdicts(runs: &[VariantRun], workload: &str) -> Vec<Verdict> {
    let find = |label: &str| {
        runs.iter()
            .find(|r| r.workload == workload && r.variant.label == label && r.error.is_none())
    };
    let stranded = |label: &str| find(label).and_then(|r| r.outcomes.first()?.summary.stranded_avg);
    let tput = |label: &str| find(label).and_then(|r| r.throughput);
    let mut out = Vec::new();
    for (other, want) in
        [("testenv/kube-scheduler", 30.0), ("testenv/kube-scheduler-mostallocated", 10.0)]
    {
        let (m, met) = match (stranded("testenv/convoy-gpu"), stranded(other)) {
            (Some(c), Some(o)) if o > 0.0 => {
                let cut = 100.0 * (o - c) / o;
                (format!("{c:.1} vs {o:.1} stranded GPUs: {cut:.0}% fewer"), Some(cut >= want))
            }
            (Some(c), Some(o)) => (format!("{c:.1} vs {o:.1} stranded GPUs"), Some(c <= o)),
            _ => ("not measured".into(), None),
        };
        out.push(Verdict {
            target: format!("stranded GPUs >= {want:.0}% fewer than {other}"),
            measured: m,
            met,
        });
    }
    for at in ["embedded", "testenv"] {
        let (g, d) = (tput(&format!("{at}/convoy-gpu")), tput(&format!("{at}/convoy-default")));
        let (m, met) = match (g, d) {
            (Some(g), Some(d)) if d > 0.0 => {
                (format!("{g:.1} vs {d:.1} pods/s ({:.2}x)", g / d), Some(g >= 0.9 * d))
            }
            _ => ("not measured".into(), None),
        };
        out.push(Verdict {
            target: format!("{at}: convoy-gpu throughput within 10% of convoy-default"),
            measured: m,
            met,
        });
    }
    out
}

/// A page with, per workload, the per-wave series of every variant: fully
/// free nodes, stranded GPUs and allocated GPUs over the stream.
pub fn charts_page(runs: &[VariantRun]) -> String {
    use crate::report::{Series, series_chart};
    type Get = fn(&crate::gpu::WaveSample) -> f64;
    let charts: [(&str, &str, Get); 3] = [
        ("fully free nodes", "nodes", |w| w.fully_free_nodes as f64),
        ("stranded GPUs", "GPUs", |w| w.stranded_gpus as f64),
        ("allocated GPUs", "GPUs", |w| w.allocated_gpus as f64),
    ];
    let mut workloads: Vec<&str> = runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    let mut body = String::new();
    for w in workloads {
        writeln!(body, "<h2>{}</h2>", crate::report::escape(w)).unwrap();
        let mine: Vec<&VariantRun> =
            runs.iter().filter(|r| r.workload == w && !r.outcomes.is_empty()).collect();
        for (title, unit, get) in charts {
            let series: Vec<Series> = mine
                .iter()
                .map(|r| Series {
                    label: &r.variant.label,
                    points: r.outcomes[0].samples.iter().map(|s| (s.wave as f64, get(s))).collect(),
                })
                .collect();
            series_chart(&mut body, &format!("{w}: {title}"), "wave", unit, &series);
        }
    }
    crate::report::page("convoy-bench gpu: fragmentation over the stream", &body)
}

/// `convoy-bench gpu`'s flags.
#[derive(Debug, clap::Args)]
pub struct GpuArgs {
    /// The config file (benches/config/gpu-fragmentation.yaml).
    pub config: PathBuf,
    /// TESTCASE[/WORKLOAD], as for `run`.
    #[arg(long)]
    pub filter: String,
    /// Comma-separated variant labels (default: all seven).
    #[arg(long)]
    pub variants: Option<String>,
    /// Convoy's GPU profile.
    #[arg(long, default_value = "config/gpu-cluster.yaml")]
    pub gpu_config: PathBuf,
    /// kube-scheduler with NodeResourcesFit MostAllocated on GPUs.
    #[arg(long, default_value = "benches/config/kube-scheduler-gpu-mostallocated.yaml")]
    pub most_allocated_config: PathBuf,
    /// Manifests applied on each fresh control plane (the PodGroup CRD
    /// the gangs need).
    #[arg(long, default_value = "charts/convoy/crds/scheduling.x-k8s.io_podgroups.yaml")]
    pub prepare: Vec<PathBuf>,
    /// Where the DataItems and samples go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Throughput sampling interval on testenv (upstream: 1s; the embedded
    /// target picks its own).
    #[arg(long, default_value = "1s")]
    pub sample_interval: String,
    /// The convoy-scheduler binary (default: beside convoy-bench).
    #[arg(long)]
    pub convoy_binary: Option<PathBuf>,
}

/// What the runs wrote.
#[derive(Serialize)]
struct SamplesFile<'a> {
    runs: &'a [VariantRun],
    verdicts: BTreeMap<String, Vec<Verdict>>,
}

/// Runs `convoy-bench gpu`.
pub fn main(args: GpuArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let config = match crate::load_file(&args.config) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let mut all = variants(args.gpu_config.clone(), args.most_allocated_config.clone());
    if let Some(list) = &args.variants {
        let want: Vec<&str> = list.split(',').collect();
        if let Some(bad) = want.iter().find(|w| !all.iter().any(|v| v.label == **w)) {
            let known: Vec<&str> = all.iter().map(|v| v.label.as_str()).collect();
            return fail(format!("unknown variant {bad:?} (known: {})", known.join(", ")));
        }
        all.retain(|v| want.contains(&v.label.as_str()));
    }
    let mut api = ApiOptions::new(PathBuf::new(), SchedulerKind::Convoy);
    api.convoy_binary = args.convoy_binary.clone();
    match crate::config::parse_duration(&args.sample_interval) {
        Ok(d) if !d.is_zero() => api.sample_interval = SampleInterval::Fixed(d),
        _ => return fail("--sample-interval must be a positive duration".into()),
    }
    for p in &args.prepare {
        match crate::any::load_manifests(p) {
            Ok(m) => api.prepare.extend(m),
            Err(e) => return fail(format!("--prepare: {e}")),
        }
    }
    let opts = RunOptions {
        filter: Some(args.filter.clone()),
        labels: LabelFilter::parse(""),
        topic: "gpu".into(),
        embedded: EmbeddedOptions::default(),
    };
    if select(&config, &opts).is_empty() {
        return fail("no workload matches --filter".into());
    }
    let runs = match run(&config, &opts, &all, &api) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    print!("{}", table(&runs));
    let contention = contention_table(&runs);
    if !contention.is_empty() {
        print!("\ngang contention:\n{contention}");
    }
    let mut verdicts = BTreeMap::new();
    for (tc, w) in select(&config, &opts) {
        let name = format!("{}/{}", tc.name, w.name);
        let gangs_only = runs
            .iter()
            .any(|r| r.workload == name && r.outcomes.iter().any(|o| o.contention.is_some()));
        if gangs_only {
            // The fragmentation targets are not this workload's.
            continue;
        }
        let v = self::verdicts(&runs, &name);
        for x in &v {
            let word = match x.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measured",
            };
            println!("{name}: {}: {} -> {word}", x.target, x.measured);
        }
        verdicts.insert(name, v);
    }
    let items = DataItems::new(runs.iter().flat_map(|r| r.items.iter().cloned()).collect());
    let path = match items.write(&args.out, "gpu") {
        Ok(p) => p,
        Err(e) => return fail(format!("writing {}: {e}", args.out.display())),
    };
    let samples = path.with_extension("samples.json");
    let json =
        serde_json::to_string_pretty(&SamplesFile { runs: &runs, verdicts }).unwrap_or_default();
    if let Err(e) = std::fs::write(&samples, json + "\n") {
        return fail(format!("writing {}: {e}", samples.display()));
    }
    let charts = path.with_extension("html");
    if let Err(e) = std::fs::write(&charts, charts_page(&runs)) {
        return fail(format!("writing {}: {e}", charts.display()));
    }
    println!(
        "DataItems: {}\nsamples: {}\ncharts: {}",
        path.display(),
        samples.display(),
        charts.display()
    );
    if runs.iter().any(|r| r.error.is_some()) { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
