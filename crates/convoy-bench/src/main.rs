//! The `convoy-bench` binary: parses flags and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use convoy_bench::config::parse_duration;
use convoy_bench::embedded::EmbeddedOptions;
use convoy_bench::labels::LabelFilter;
use convoy_bench::throughput::SampleInterval;
use convoy_bench::{RunOptions, load_file};

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
enum Command {
    /// Runs the selected workloads of a config and writes DataItems.
    Run(RunArgs),
    /// Lists the workloads of a config with their labels (and checks it).
    List {
        /// The config file.
        config: PathBuf,
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
        Command::List { config } => match load_file(&config)
            .map_err(|e| e.to_string())
            .and_then(|c| convoy_bench::run::plan_all(&c).map(|_| c))
        {
            Ok(c) => {
                for tc in &c.test_cases {
                    for w in &tc.workloads {
                        println!("{}/{}\t[{}]", tc.name, w.name, tc.labels_of(w).join(","));
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
    let label = args.label.unwrap_or_else(|| {
        if args.filter.is_some() { String::new() } else { "performance".into() }
    });
    let opts = RunOptions {
        filter: args.filter,
        labels: LabelFilter::parse(&label),
        topic: args.topic,
        embedded: EmbeddedOptions { sample_interval, timeout, worker_threads: args.worker_threads },
    };
    if convoy_bench::run::select(&config, &opts).is_empty() {
        return fail(format!("no workload matches --filter/--label {label:?}"));
    }
    let report = match convoy_bench::run(&config, &opts) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    print!("{}", report.table());
    match report.write(&args.out, &opts.topic) {
        Ok(path) => println!("DataItems: {}", path.display()),
        Err(e) => return fail(format!("writing results to {}: {e}", args.out.display())),
    }
    if report.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
