//! `convoy-scheduler`: parses flags, sets up logging, calls the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc: the scheduler allocates many small, short-lived objects per
/// cycle (node lists, statuses, pod copies); glibc malloc cost ~10% of a
/// cycle in profiles (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Convoy, a Kubernetes scheduler for GPU clusters.
#[derive(Parser)]
#[command(name = "convoy-scheduler", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Kubeconfig for running against an API server (default: clientConnection.kubeconfig, else in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:10251")]
    http_addr: std::net::SocketAddr,
    /// Leader-election identity (default: hostname_pid).
    #[arg(long, env = "CONVOY_IDENTITY")]
    identity: Option<String>,
    /// Use streaming lists (WatchList, `sendInitialEvents`) for the initial lists.
    #[arg(long)]
    streaming_lists: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Schedule the pending pods of a YAML cluster on the embedded cluster and print each decision.
    Simulate {
        /// Nodes, Pods, PodGroups, Namespaces, Services and workload controllers: one object,
        /// several documents, or a `kind: List` such as a `kubectl get ... -A -o yaml` dump (other
        /// kinds in it are skipped, one note per kind).
        #[arg(long)]
        cluster: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        /// Also write the decision log (one line per attempt) to stderr.
        #[arg(long)]
        log_decisions: bool,
    },
    /// Validate a configuration file and print the effective profiles.
    CheckConfig,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to standard output; a reader that went away (`simulate |
/// head -1`) ends the output quietly, as other Unix tools do, instead of
/// `print!`'s panic.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::CheckConfig) => {
            init_logging(cli.log_format, "warn");
            let config = convoy_scheduler::load_config(cli.config.as_deref())?;
            // Building the frameworks checks what the config alone cannot
            // (which extension points each plugin implements).
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let pipeline = rt.block_on(async { convoy_scheduler::simulate::check(&config) })?;
            write_stdout(&format!("{}{pipeline}", config.summary()))
        }
        Some(Command::Simulate { cluster, output, log_decisions }) => {
            init_logging(cli.log_format, if log_decisions { "info" } else { "warn" });
            let config = convoy_scheduler::load_config(cli.config.as_deref())?;
            let objects = convoy_embedded::load_file(&cluster)?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report =
                rt.block_on(convoy_scheduler::simulate::simulate(config, objects, log_decisions))?;
            match output {
                Output::Text => write_stdout(&report.to_text()),
                Output::Json => {
                    write_stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))
                }
            }
        }
        None => {
            init_logging(cli.log_format, "info");
            let config = convoy_scheduler::load_config(cli.config.as_deref())?;
            let opts = convoy_scheduler::serve::ServeOptions {
                kubeconfig: cli.kubeconfig,
                http_addr: cli.http_addr,
                identity: cli.identity.unwrap_or_else(convoy_scheduler::serve::default_identity),
                streaming_lists: cli.streaming_lists,
            };
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let exit = rt.block_on(convoy_scheduler::serve::serve(config, opts));
            // Tasks still running (watches, HTTP, bindings) get a moment, not
            // a say: a replica that lost its lease must exit promptly.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            match exit? {
                convoy_scheduler::run::Exit::Shutdown => Ok(()),
                convoy_scheduler::run::Exit::LostLease => anyhow::bail!("leaderelection lost"),
                convoy_scheduler::run::Exit::WatchEnded => anyhow::bail!("the watches ended"),
            }
        }
    }
}
