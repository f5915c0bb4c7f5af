//! A `convoy-scheduler` binary of your own: the same command line (serve,
//! `simulate`, `check-config`), with plugins of your own known to the
//! configuration loader, to `simulate` and to serving. Upstream's
//! equivalent is `app.NewSchedulerCommand(app.WithPlugin(...))`.
//!
//! ```no_run
//! use std::sync::Arc;
//! # use convoy_api::{Plugin, Handle};
//! # #[derive(Default, serde::Deserialize)] struct MyArgs { }
//! # impl convoy_api::PluginArgsType for MyArgs {}
//! # struct MyPlugin;
//! # impl Plugin for MyPlugin { fn name(&self) -> &'static str { "MyPlugin" } }
//! fn main() -> std::process::ExitCode {
//!     convoy_scheduler::App::new()
//!         .with_plugin("MyPlugin", |args: MyArgs, handle: &Handle| Ok(Arc::new(MyPlugin)))
//!         .run()
//! }
//! ```
//!
//! The binary's `main.rs` should also make mimalloc its global allocator,
//! as `convoy-scheduler`'s does (the scheduler allocates many small
//! objects per cycle; glibc's malloc costs about 10 % of a cycle).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::options::{LeaderElectionFlags, LogFormat, LoggingFlags, ServingFlags};
use convoy_api::{ApiInfo, Handle, Plugin, PluginArgsType, Registry};

/// A scheduler binary: Convoy's in-tree plugins and any added here.
pub struct App {
    registry: Registry,
    /// Duplicate plugin names met while adding (reported by `run`).
    errors: Vec<String>,
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}

impl App {
    /// Convoy's own plugins ([`crate::registry`]).
    pub fn new() -> Self {
        Self { registry: crate::registry(), errors: Vec::new() }
    }

    /// Adds a plugin whose args are a type of its own (`()` for none): the
    /// configuration loader checks a profile's args for it (with file,
    /// line and column), and `factory` builds the plugin from them. A name
    /// already known (an in-tree plugin's, say) is an error when the app
    /// runs, as upstream's `WithPlugin`.
    pub fn with_plugin<A, F>(mut self, name: &'static str, factory: F) -> Self
    where
        A: PluginArgsType,
        F: Fn(A, &Handle) -> Result<std::sync::Arc<dyn Plugin>, String> + Send + Sync + 'static,
    {
        let mut one = Registry::new();
        one.register_with_args(name, factory);
        if let Err(e) = self.registry.merge(&one) {
            self.errors.push(e);
        }
        self
    }

    /// Adds every plugin and custom kind of `registry` (names already
    /// known are errors when the app runs).
    pub fn with_registry(mut self, registry: &Registry) -> Self {
        if let Err(e) = self.registry.merge(registry) {
            self.errors.push(e);
        }
        self
    }

    /// Declares a custom resource kind a plugin reads
    /// ([`Registry::watch_kind`]).
    pub fn with_kind(mut self, api: ApiInfo) -> Self {
        self.registry.watch_kind(api);
        self
    }

    /// The registry the app runs with.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Parses the process's arguments and runs; the exit code to return
    /// from `main`.
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// [`run`](Self::run) with the given arguments (the first is the
    /// program's name).
    pub fn run_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::parse_from(args);
        let result = match self.errors.first() {
            Some(e) => Err(anyhow::anyhow!("{e}")),
            None => run(cli, &self.registry),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Convoy, a Kubernetes scheduler for GPU clusters.
#[derive(Parser)]
#[command(
    name = "convoy-scheduler",
    // `convoy-scheduler 0.2.0 (commit 70a754a1b2c3)`: the commit is build.rs's.
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CONVOY_GIT_COMMIT"), ")"),
    about
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(flatten)]
    logging: LoggingFlags,
    /// Kubeconfig for running against an API server (default: clientConnection.kubeconfig, else in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    serving: ServingFlags,
    #[command(flatten)]
    leader_election: LeaderElectionFlags,
    /// Leader-election identity (default: hostname_pid).
    #[arg(long, env = "CONVOY_IDENTITY")]
    identity: Option<String>,
    /// Initial lists through streaming lists (WatchList, `sendInitialEvents`):
    /// on by default; a server with the `WatchList` feature off is listed
    /// and watched instead. `--streaming-lists=false` always lists.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
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

/// Sets up logging from the logging flags (`default_level`: the filter
/// when neither `RUST_LOG` nor `-v` is given), then logs the deprecation
/// line of `--log-format` if it was used.
fn init_logging(flags: &LoggingFlags, default_level: &str) -> anyhow::Result<()> {
    let (format, deprecation) = flags.format().map_err(anyhow::Error::msg)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(flags.filter(default_level)));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    if let Some(line) = deprecation {
        tracing::warn!("{line}");
    }
    Ok(())
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

fn run(cli: Cli, registry: &Registry) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::CheckConfig) => {
            init_logging(&cli.logging, "warn")?;
            let mut config = crate::load_config_with(cli.config.as_deref(), registry)?;
            cli.leader_election.apply(&mut config.leader_election).map_err(anyhow::Error::msg)?;
            // Building the frameworks checks what the config alone cannot
            // (which extension points each plugin implements).
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let pipeline = rt.block_on(async { crate::simulate::check_with(&config, registry) })?;
            write_stdout(&format!("{}{pipeline}", config.summary()))
        }
        Some(Command::Simulate { cluster, output, log_decisions }) => {
            init_logging(&cli.logging, if log_decisions { "info" } else { "warn" })?;
            let config = crate::load_config_with(cli.config.as_deref(), registry)?;
            let objects = convoy_embedded::load_file_with(&cluster, registry.kinds())?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report = rt.block_on(crate::simulate::simulate_with(
                registry,
                config,
                objects,
                log_decisions,
            ))?;
            match output {
                Output::Text => write_stdout(&report.to_text()),
                Output::Json => {
                    write_stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))
                }
            }
        }
        None => {
            init_logging(&cli.logging, "info")?;
            let (serving, deprecations) = cli.serving.resolve().map_err(anyhow::Error::msg)?;
            for line in deprecations {
                tracing::warn!("{line}");
            }
            let mut config = crate::load_config_with(cli.config.as_deref(), registry)?;
            cli.leader_election.apply(&mut config.leader_election).map_err(anyhow::Error::msg)?;
            let opts = crate::serve::ServeOptions {
                registry: registry.clone(),
                kubeconfig: cli.kubeconfig,
                serving,
                identity: cli.identity.unwrap_or_else(crate::serve::default_identity),
                streaming_lists: cli.streaming_lists,
            };
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let exit = rt.block_on(crate::serve::serve(config, opts));
            // Tasks still running (watches, HTTP, bindings) get a moment, not
            // a say: a replica that lost its lease must exit promptly.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            match exit? {
                crate::run::Exit::Shutdown => Ok(()),
                crate::run::Exit::LostLease => anyhow::bail!("leaderelection lost"),
                crate::run::Exit::WatchEnded => anyhow::bail!("the watches ended"),
            }
        }
    }
}

#[cfg(test)]
mod version_tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn version_names_the_release_and_the_commit() {
        for flag in ["--version", "-V"] {
            let err = Cli::try_parse_from(["convoy-scheduler", flag]).err().expect("no version");
            assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
            let shown = err.render().to_string();
            let want = format!(
                "convoy-scheduler {} (commit {})\n",
                env!("CARGO_PKG_VERSION"),
                env!("CONVOY_GIT_COMMIT")
            );
            assert_eq!(shown, want);
            assert!(!env!("CONVOY_GIT_COMMIT").is_empty());
        }
    }
}

#[cfg(test)]
mod flag_tests {
    use clap::Parser;

    use super::Cli;

    fn streaming(args: &[&str]) -> bool {
        let mut argv = vec!["convoy-scheduler"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("flags parse").streaming_lists
    }

    #[test]
    fn streaming_lists_are_on_unless_turned_off() {
        assert!(streaming(&[]));
        assert!(streaming(&["--streaming-lists"]));
        assert!(streaming(&["--streaming-lists=true"]));
        assert!(!streaming(&["--streaming-lists=false"]));
    }
}
