//! The `convoy-bench` binary: parses flags and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use convoy_bench::config::parse_duration;
use convoy_bench::labels::LabelFilter;
use convoy_bench::measure::throughput::SampleInterval;
use convoy_bench::targets::api::{ApiOptions, SchedulerKind};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file};

/// The allocator `convoy-scheduler` runs with: the embedded target runs the
/// scheduler in this process, so it is measured as it is deployed (with
/// glibc malloc, malloc and free were 8 % of a SchedulingBasic profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "convoy-bench",
    version,
    about = "Runs scheduler_perf-format benchmarks against Convoy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum HistoryCommand {
    /// Files a results directory's DataItems under a release, one file per
    /// workload.
    Add {
        /// The history directory.
        #[arg(long, default_value = "benches/history")]
        history: PathBuf,
        /// The release (`v0.1.0`).
        #[arg(long)]
        release: String,
        /// The results directory (`convoy-bench run` or `compare` output).
        #[arg(long)]
        results: PathBuf,
    },
    /// Writes the trend page across releases (one chart per workload).
    Report {
        /// The history directory.
        #[arg(long, default_value = "benches/history")]
        history: PathBuf,
        /// The HTML file to write.
        #[arg(long, default_value = "history.html")]
        out: PathBuf,
    },
    /// Fails when a workload's throughput fell below the newest release's
    /// by more than the noise band.
    Check {
        /// The history directory.
        #[arg(long, default_value = "benches/history")]
        history: PathBuf,
        /// The new run's results directory.
        #[arg(long)]
        results: PathBuf,
        /// The noise band, a fraction (0.15: a drop of up to 15 % passes).
        #[arg(long, default_value_t = 0.15)]
        band: f64,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Runs the selected workloads of a config and writes DataItems.
    Run(RunArgs),
    /// Runs workloads with several schedulers, each on a fresh testenv
    /// control plane, and prints Convoy's throughput ratios.
    Compare(CompareArgs),
    /// Lists the workloads of a config with their labels (and checks it).
    List {
        /// The config file.
        config: PathBuf,
    },
    /// Writes a static HTML trend report of a results directory, or with
    /// --history of the per-release history (one point per release).
    Report {
        /// The directory of DataItems files (and their `.details.json`).
        #[arg(long, default_value = "bench-results")]
        results: PathBuf,
        /// A history directory (benches/history): the trend across
        /// releases instead (as `history report`).
        #[arg(long)]
        history: Option<PathBuf>,
        /// The HTML file to write.
        #[arg(long, default_value = "report.html")]
        out: PathBuf,
        /// Also writes SVG bar charts of the results (or of the history)
        /// into this directory: throughput-by-nodes.svg (embedded target)
        /// and throughput-by-scheduler.svg (comparisons).
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Draws the SVG bar chart of every data file (`<name>.json`) of a
    /// directory into `<name>.svg` (the docs' plots, docs/benchmarks.md).
    Plot {
        /// The directory of data files.
        #[arg(long, default_value = "benches/plots")]
        data: PathBuf,
        /// The directory to write the SVG files to.
        #[arg(long, default_value = "docs/img")]
        out: PathBuf,
    },
    /// The instruction-count regression gate (see scripts/bench-gate.sh).
    #[command(subcommand)]
    Gate(GateCommand),
    /// The per-release benchmark history kept in the repository
    /// (benches/history/<release>/, docs/benchmarks.md).
    #[command(subcommand)]
    History(HistoryCommand),
    /// The GPU fragmentation comparison (docs/benchmarks.md, GPU section).
    Gpu(convoy_bench::gpu_compare::GpuArgs),
}

#[derive(Subcommand)]
enum GateCommand {
    /// Runs only the fixed workload (to be run under callgrind).
    Workload {
        /// Nodes.
        #[arg(long, default_value_t = convoy_bench::gate::Shape::default().nodes)]
        nodes: usize,
        /// Pods.
        #[arg(long, default_value_t = convoy_bench::gate::Shape::default().pods)]
        pods: usize,
    },
    /// Prints the total instruction count of a callgrind output file.
    Measure {
        /// The file of `--callgrind-out-file`.
        callgrind_out: PathBuf,
    },
    /// Compares a count with the baseline; fails when above the threshold.
    Check {
        /// The baseline file.
        #[arg(long, default_value = "benches/baseline/gate.json")]
        baseline: PathBuf,
        /// The measured instruction count.
        #[arg(long)]
        measured: u64,
    },
    /// Records a count as the new baseline.
    Update {
        /// The baseline file.
        #[arg(long, default_value = "benches/baseline/gate.json")]
        baseline: PathBuf,
        /// The measured instruction count.
        #[arg(long)]
        measured: u64,
        /// Allowed increase, in percent.
        #[arg(long, default_value_t = 10.0)]
        threshold_percent: f64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// Convoy's scheduler on the in-memory embedded cluster.
    Embedded,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The config file (upstream's performance-config.yaml format).
    config: PathBuf,
    /// TESTCASE[/WORKLOAD]: each part an unanchored match (^ and $ anchor).
    #[arg(long)]
    filter: Option<String>,
    /// Workload label filter: `a,+b,-c` (default `performance`, or none
    /// when --filter is given).
    #[arg(long)]
    label: Option<String>,
    /// Where the DataItems file goes.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// What runs the workloads.
    #[arg(long, value_enum, default_value = "embedded")]
    target: Target,
    /// Names the output file and selects per-topic thresholds.
    #[arg(long, default_value = "convoy")]
    topic: String,
    /// Throughput sampling interval (a Go duration such as `10ms`), or
    /// `auto`: 10ms, finer when a window would give fewer than 10 samples.
    #[arg(long, default_value = "auto")]
    sample_interval: String,
    /// Longest wait for pods to be scheduled (upstream: 10m).
    #[arg(long, default_value = "10m")]
    timeout: String,
    /// Worker threads of the embedded target's runtime.
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
    /// Run against this API server instead of the embedded target (its
    /// state should be fresh for each workload).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: convoy, kube-scheduler or null (an in-process
    /// binder with no logic, the API server's ceiling).
    #[arg(long, default_value = "convoy")]
    scheduler: String,
    /// Manifests (CRDs or any objects; YAML, `---`-separated) applied
    /// before each workload runs, as upstream's WithPrepareFn. Repeatable.
    /// On the embedded target CRDs are ignored and other objects are
    /// created as createAny creates them.
    #[arg(long = "prepare", value_name = "FILE.yaml")]
    prepare: Vec<PathBuf>,
    /// Print a live progress line on stderr (elapsed, bound, rate,
    /// pending) about once a second; on by default when stderr is a
    /// terminal.
    #[arg(long)]
    progress: bool,
    #[command(flatten)]
    binaries: Binaries,
}

#[derive(clap::Args)]
struct Binaries {
    /// The convoy-scheduler binary (default: beside convoy-bench).
    #[arg(long)]
    convoy_binary: Option<PathBuf>,
    /// The kube-scheduler binary (default: testenv's build).
    #[arg(long)]
    kube_scheduler_binary: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The config file.
    config: PathBuf,
    /// TESTCASE[/WORKLOAD], as for `run`.
    #[arg(long)]
    filter: String,
    /// Workload label filter (default: none).
    #[arg(long, default_value = "")]
    label: String,
    /// Comma-separated schedulers, run in this order.
    #[arg(long, default_value = "convoy,kube-scheduler,null")]
    schedulers: String,
    /// Where the DataItems file goes.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Names the output file.
    #[arg(long, default_value = "compare")]
    topic: String,
    /// Throughput sampling interval (upstream: 1s).
    #[arg(long, default_value = "1s")]
    sample_interval: String,
    /// Longest wait for pods to be scheduled.
    #[arg(long, default_value = "10m")]
    timeout: String,
    /// Manifests applied before each workload, as for `run` (a CRD is
    /// created on each fresh control plane).
    #[arg(long = "prepare", value_name = "FILE.yaml")]
    prepare: Vec<PathBuf>,
    /// Also run kube-controller-manager and KWOK in each control plane
    /// (default: the API server alone, as upstream scheduler_perf).
    #[arg(long)]
    controllers: bool,
    #[command(flatten)]
    binaries: Binaries,
}

fn history(cmd: HistoryCommand) -> ExitCode {
    use convoy_bench::history;
    let outcome = match cmd {
        HistoryCommand::Add { history: dir, release, results } => {
            history::add(&dir, &release, &results).map(|files| {
                for f in files {
                    println!("{}", f.display());
                }
            })
        }
        HistoryCommand::Report { history: dir, out } => {
            history::report(&dir, &out).map(|n| println!("{}: {n} releases", out.display()))
        }
        HistoryCommand::Check { history: dir, results, band } => {
            match history::check(&dir, &results, band) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    Ok(())
                }
                Err(e) => {
                    eprintln!("regressions:\n{e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `report --svg DIR`: the SVG charts of the results directory (or of the
/// history's releases) written into `dir`.
fn report_svg(
    results: &std::path::Path,
    history: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> Result<(), String> {
    let files = match history {
        Some(h) => convoy_bench::history::load(h)?,
        None => convoy_bench::report::load_results(results)?,
    };
    let charts = convoy_bench::plot::results_charts(&files);
    if charts.is_empty() {
        return Err("no SchedulingThroughput to chart".to_string());
    }
    for f in convoy_bench::plot::write_charts(&charts, dir)? {
        println!("{}", f.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,convoy_bench=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Run(args) => run(args),
        Command::Compare(args) => compare(args),
        Command::Report { results, history, out, svg } => {
            let written = match &history {
                Some(dir) => convoy_bench::history::report(dir, &out),
                None => convoy_bench::report::write_report(&results, &out),
            };
            let written = written.and_then(|n| match &svg {
                Some(dir) => report_svg(&results, history.as_deref(), dir).map(|()| n),
                None => Ok(n),
            });
            match written {
                Ok(n) => {
                    let what = if history.is_some() { "releases" } else { "result files" };
                    println!("{}: {n} {what}", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Plot { data, out } => match convoy_bench::plot::write_data_dir(&data, &out) {
            Ok(files) => {
                for f in files {
                    println!("{}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Gate(cmd) => gate(cmd),
        Command::History(cmd) => history(cmd),
        Command::Gpu(args) => convoy_bench::gpu_compare::main(args),
        // A workload that does not plan is listed with its error (it fails
        // only when selected, as upstream's).
        Command::List { config } => match load_file(&config).map_err(|e| e.to_string()) {
            Ok(c) => {
                for tc in &c.test_cases {
                    for w in &tc.workloads {
                        let labels = tc.labels_of(w).join(",");
                        match convoy_bench::plan::plan(&c, tc, w) {
                            Ok(_) => println!("{}/{}\t[{labels}]", tc.name, w.name),
                            Err(e) => {
                                println!("{}/{}\t[{labels}]\tdoes not plan: {e}", tc.name, w.name)
                            }
                        }
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
    }
}

fn run(args: RunArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let Target::Embedded = args.target;
    let sample_interval = match args.sample_interval.as_str() {
        "auto" => SampleInterval::Auto,
        s => match parse_duration(s) {
            Ok(d) if !d.is_zero() => SampleInterval::Fixed(d),
            Ok(_) => return fail("--sample-interval must be positive".into()),
            Err(e) => return fail(format!("--sample-interval: {e}")),
        },
    };
    let timeout: Duration = match parse_duration(&args.timeout) {
        Ok(d) => d,
        Err(e) => return fail(format!("--timeout: {e}")),
    };
    let config = match load_file(&args.config) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let mut prepare = Vec::new();
    for path in &args.prepare {
        match convoy_bench::any::load_manifests(path) {
            Ok(m) => prepare.extend(m),
            Err(e) => return fail(format!("--prepare: {e}")),
        }
    }
    let progress = args.progress || std::io::IsTerminal::is_terminal(&std::io::stderr());
    let label = args.label.unwrap_or_else(|| {
        if args.filter.is_some() { String::new() } else { "performance".into() }
    });
    let opts = RunOptions {
        filter: args.filter,
        labels: LabelFilter::parse(&label),
        topic: args.topic,
        embedded: EmbeddedOptions {
            sample_interval,
            timeout,
            worker_threads: args.worker_threads,
            progress,
            prepare: prepare.clone(),
            registry: None,
        },
    };
    if convoy_bench::run::select(&config, &opts).is_empty() {
        return fail(format!("no workload matches --filter/--label {label:?}"));
    }
    let report = match &args.kubeconfig {
        Some(kubeconfig) => {
            let scheduler = match args.scheduler.parse() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            let mut api = ApiOptions::new(kubeconfig.clone(), scheduler);
            api.convoy_binary = args.binaries.convoy_binary;
            api.kube_scheduler_binary = args.binaries.kube_scheduler_binary;
            api.timeout = timeout;
            api.progress = progress;
            api.prepare = prepare;
            if let SampleInterval::Fixed(_) = sample_interval {
                api.sample_interval = sample_interval;
            }
            convoy_bench::run::run_api(&config, &opts, &api)
        }
        None => convoy_bench::run(&config, &opts),
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    print!("{}", report.table());
    print!("{}", report.group_table());
    match report.write(&args.out, &opts.topic) {
        Ok(path) => println!("DataItems: {}", path.display()),
        Err(e) => return fail(format!("writing results to {}: {e}", args.out.display())),
    }
    if report.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn gate(cmd: GateCommand) -> ExitCode {
    use convoy_bench::gate::{Baseline, Shape, compare, parse_callgrind_total};
    let result = (|| -> anyhow::Result<ExitCode> {
        match cmd {
            GateCommand::Workload { nodes, pods } => {
                let bound = convoy_bench::gate::workload(Shape { nodes, pods })?;
                println!("{} bound {bound}", Shape { nodes, pods }.describe());
                anyhow::ensure!(bound == pods, "only {bound} of {pods} pods bound");
            }
            GateCommand::Measure { callgrind_out } => {
                let text = std::fs::read_to_string(&callgrind_out)?;
                let n = parse_callgrind_total(&text).ok_or_else(|| {
                    anyhow::anyhow!("no totals:/summary: line in {}", callgrind_out.display())
                })?;
                println!("{n}");
            }
            GateCommand::Check { baseline, measured } => {
                let b = Baseline::load(&baseline)?;
                let v = compare(b.instructions, measured, b.threshold_percent);
                println!("{}", v.message);
                if !v.pass {
                    return Ok(ExitCode::FAILURE);
                }
            }
            GateCommand::Update { baseline, measured, threshold_percent } => {
                let b = Baseline {
                    instructions: measured,
                    threshold_percent,
                    workload: Shape::default().describe(),
                    recorded: convoy_bench::dataitems::utc_now(),
                };
                b.save(&baseline)?;
                println!("recorded {measured} instructions in {}", baseline.display());
            }
        }
        Ok(ExitCode::SUCCESS)
    })();
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(2)
    })
}

fn compare(args: CompareArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let parsed = (|| -> Result<_, String> {
        let interval = parse_duration(&args.sample_interval)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or("--sample-interval must be a positive duration")?;
        let timeout = parse_duration(&args.timeout).map_err(|e| format!("--timeout: {e}"))?;
        let schedulers = args
            .schedulers
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<SchedulerKind>, _>>()?;
        let config = load_file(&args.config).map_err(|e| e.to_string())?;
        let mut prepare = Vec::new();
        for path in &args.prepare {
            prepare.extend(
                convoy_bench::any::load_manifests(path).map_err(|e| format!("--prepare: {e}"))?,
            );
        }
        Ok((interval, timeout, schedulers, config, prepare))
    })();
    let (interval, timeout, schedulers, config, prepare) = match parsed {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let opts = RunOptions {
        filter: Some(args.filter),
        labels: LabelFilter::parse(&args.label),
        topic: args.topic,
        embedded: EmbeddedOptions::default(),
    };
    if convoy_bench::run::select(&config, &opts).is_empty() {
        return fail("no workload matches --filter/--label".into());
    }
    let mut api = ApiOptions::new(PathBuf::new(), SchedulerKind::Convoy);
    api.convoy_binary = args.binaries.convoy_binary;
    api.kube_scheduler_binary = args.binaries.kube_scheduler_binary;
    api.sample_interval = SampleInterval::Fixed(interval);
    api.timeout = timeout;
    api.prepare = prepare;
    let testenv = convoy_testenv::Options { controllers: args.controllers, ..Default::default() };
    let comparison =
        match convoy_bench::compare::compare(&config, &opts, &api, &schedulers, testenv) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
    print!("{}", comparison.table());
    print!("{}", comparison.group_table());
    match comparison.write(&args.out, &opts.topic) {
        Ok(path) => println!("DataItems: {}", path.display()),
        Err(e) => return fail(format!("writing results to {}: {e}", args.out.display())),
    }
    if comparison.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
