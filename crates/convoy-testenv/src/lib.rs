//! Test support: a real Kubernetes control plane (etcd + kube-apiserver v1.37,
//! built from source by `testenv/testenv`) for Convoy's end-to-end tests.
//!
//! [`TestEnv::start`] starts a private control plane in a temporary directory
//! and stops it when the value is dropped, also when the test panics.
//! [`TestEnv::shared`] starts one control plane per test binary; since statics
//! are never dropped, `testenv` runs a watchdog that tears it down as soon as
//! the test process exits, however it exits. No process outlives the suite.
//!
//! Tests that share a control plane isolate themselves with a namespace of
//! their own ([`TestEnv::create_namespace`]); cluster-scoped objects (nodes)
//! should carry a per-test name prefix.
//!
//! This crate may depend on `kube`. It is a dev-dependency everywhere except
//! in `convoy-bench`, whose `compare` starts a control plane per scheduler.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Errors starting or talking to a testenv.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Running `testenv/testenv` failed.
    #[error("testenv {command} failed: {detail}")]
    Command {
        /// The subcommand (`up`, `down`, ...).
        command: String,
        /// What it printed, or the spawn error.
        detail: String,
    },
    /// File system error around the state directory.
    #[error("testenv state directory: {0}")]
    Io(#[from] std::io::Error),
    /// The kubeconfig written by `up` could not be loaded.
    #[error("loading the testenv kubeconfig: {0}")]
    Kubeconfig(String),
    /// An API call made by the helper failed.
    #[error("API call: {0}")]
    Kube(#[from] kube::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The repository root (this crate lives in `crates/convoy-testenv`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// Path of the `testenv/testenv` launcher script.
pub fn script() -> PathBuf {
    repo_root().join("testenv/testenv")
}

fn run(args: &[&str]) -> Result<String> {
    let out = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Command { command: args[0].to_string(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: args[0].to_string(),
            detail: format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds the testenv binaries if needed and returns their directory.
pub fn bin_dir() -> Result<PathBuf> {
    run(&["build"]).map(PathBuf::from)
}

/// A running control plane: etcd and kube-apiserver on free loopback ports.
#[derive(Debug)]
pub struct TestEnv {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl TestEnv {
    /// Starts a private control plane (building the binaries first if they
    /// are missing) and waits until the API server is ready.
    pub fn start() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("convoy-testenv-").tempdir()?;
        let dir_str = dir.path().to_string_lossy().to_string();
        let pid = std::process::id().to_string();
        let kubeconfig = run(&["up", "--dir", &dir_str, "--owner-pid", &pid, "--remove-dir"])
            .inspect_err(|_| {
                // `up` may have started etcd before failing.
                let _ = run(&["down", "--dir", &dir_str]);
            })?;
        Ok(Self { dir, kubeconfig: PathBuf::from(kubeconfig) })
    }

    /// One control plane for the whole test binary, started on first use.
    ///
    /// # Panics
    /// Panics when the control plane cannot be started: every test using it
    /// would fail anyway, and the message says why.
    pub fn shared() -> &'static TestEnv {
        static SHARED: OnceLock<TestEnv> = OnceLock::new();
        SHARED.get_or_init(|| match TestEnv::start() {
            Ok(env) => env,
            Err(e) => panic!("cannot start testenv: {e}"),
        })
    }

    /// The state directory (logs, pid files, certificates).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new client for the current tokio runtime (clients must not be
    /// shared across the runtimes of different `#[tokio::test]`s).
    pub async fn client(&self) -> Result<kube::Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Creates a namespace and returns its name.
    pub async fn create_namespace(&self, client: &kube::Client, name: &str) -> Result<String> {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
        Ok(name.to_string())
    }

    /// Stops and restarts kube-apiserver with the same data and port.
    pub fn restart_apiserver(&self) -> Result<()> {
        run(&["restart-apiserver", "--dir", &self.dir.path().to_string_lossy()]).map(|_| ())
    }

    /// Starts upstream kube-scheduler (from the same build) against this
    /// control plane with the given `KubeSchedulerConfiguration` file. The
    /// scheduler stops when the returned handle is dropped.
    pub fn start_kube_scheduler(&self, config: &Path) -> Result<KubeScheduler> {
        self.start_kube_scheduler_with_flags(config, &[])
    }

    /// As [`TestEnv::start_kube_scheduler`], with extra kube-scheduler
    /// command-line flags (`-v=10` logs every plugin's score of every node).
    /// The log is `<dir>/kube-scheduler.log`.
    pub fn start_kube_scheduler_with_flags(
        &self,
        config: &Path,
        flags: &[&str],
    ) -> Result<KubeScheduler> {
        let log = std::fs::File::create(self.dir().join("kube-scheduler.log"))?;
        let mut cmd = Command::new(script());
        cmd.args(["kube-scheduler", "--dir"]).arg(self.dir()).arg("--config").arg(config);
        if !flags.is_empty() {
            cmd.arg("--").args(flags);
        }
        let child = cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn()?;
        Ok(KubeScheduler { child, pid_file: self.dir().join("kube-scheduler.pid") })
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.dir.path().exists() {
            let _ = run(&["down", "--dir", &self.dir.path().to_string_lossy()]);
        }
    }
}

/// A running upstream kube-scheduler, stopped on drop.
#[derive(Debug)]
pub struct KubeScheduler {
    child: Child,
    pid_file: PathBuf,
}

impl KubeScheduler {
    /// Operating-system pid of the kube-scheduler process, once it started.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file).ok()?.trim().parse().ok()
    }
}

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}
