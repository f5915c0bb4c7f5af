//! Test support: a real Kubernetes control plane (etcd + kube-apiserver v1.37,
//! built from source by `testenv/testenv`) for Convoy's end-to-end tests.
//!
//! [`TestEnv::start`] starts a private control plane in a temporary directory
//! and stops it when the value is dropped, also when the test panics.
//! [`TestEnv::shared`] starts one control plane per test binary; since statics
//! are never dropped, `testenv` runs a watchdog that tears it down as soon as
//! the test process exits, however it exits. No process outlives the suite.
//!
//! Both give the API server alone. [`TestEnv::start_with`] with
//! [`Options::controllers`] (or [`TestEnv::shared_with_controllers`]) also
//! runs kube-controller-manager and KWOK, so that the control plane behaves
//! like a cluster: Deployments create pods, PodDisruptionBudgets get a
//! status, and nodes annotated [`KWOK_NODE_ANNOTATION`] get a simulated
//! kubelet (Ready, a Lease, bound pods Running, graceful deletion). The
//! controllers and KWOK stages are listed in `docs/testing.md`.
//!
//! Tests that share a control plane isolate themselves with a namespace of
//! their own ([`TestEnv::create_namespace`]); cluster-scoped objects (nodes)
//! should carry a per-test name prefix.
//!
//! [`TestProvisioner`] plays a CSI external-provisioner for StorageClasses
//! whose provisioner is [`TEST_PROVISIONER`] (or [`TEST_CSI_PROVISIONER`],
//! a name a CSIDriver object can carry), so that WaitForFirstConsumer
//! claims are provisioned on the node the scheduler chose.
//!
//! [`chart`] renders the Helm chart with testenv's `helm` and installs its
//! RBAC, with a kubeconfig holding its ServiceAccount's token.
//!
//! This crate may depend on `kube`. It is a dev-dependency everywhere except
//! in `convoy-bench`, whose `compare` starts a control plane per scheduler.

pub mod chart;
mod etcd;
pub mod invariants;
mod provisioner;
pub mod proxy;

pub use invariants::{InvariantChecker, Violation};
pub use provisioner::{TEST_CSI_PROVISIONER, TEST_PROVISIONER, TestProvisioner, volume_for};
pub use proxy::FaultProxy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Namespace, Node};
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
    /// The chart's output or a token could not be used.
    #[error("chart: {0}")]
    Chart(String),
    /// A request to etcd's HTTP gateway failed.
    #[error("etcd {request}: {detail}")]
    Etcd {
        /// The gateway path (`/v3/kv/compaction`, ...).
        request: String,
        /// What went wrong.
        detail: String,
    },
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
    // The subcommand, after a leading `--version V`.
    let command = if args.first() == Some(&"--version") { args.get(2) } else { args.first() };
    let command = command.copied().unwrap_or("");
    let out = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Command { command: command.to_string(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: command.to_string(),
            detail: format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds the testenv binaries if needed and returns their directory (of
/// `$TESTENV_VERSION`, else the newest version).
pub fn bin_dir() -> Result<PathBuf> {
    run(&["build"]).map(PathBuf::from)
}

/// Builds the binaries of a Kubernetes release (`v1.34`) if needed and
/// returns their directory.
pub fn bin_dir_of(version: &str) -> Result<PathBuf> {
    run(&["--version", version, "build"]).map(PathBuf::from)
}

/// The Kubernetes releases testenv builds, newest first (`v1.37.2`, ...).
pub fn versions() -> Result<Vec<String>> {
    Ok(run(&["versions"])?.lines().map(str::to_string).collect())
}

/// The release the tests of this process use: `$TESTENV_VERSION` (a
/// minor, `v1.34`, or its patch), else the newest. End-to-end tests meant
/// to run on every supported version read it.
pub fn selected_version() -> Option<String> {
    std::env::var("TESTENV_VERSION").ok().filter(|v| !v.is_empty())
}

/// The annotation (key, value) that hands a Node to KWOK's simulated
/// kubelet when the control plane runs [`Options::controllers`]. Nodes
/// without it are left exactly as the test wrote them.
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Pod annotation: with the value `"true"`, KWOK never finishes the pod's
/// graceful deletion, so it stays Terminating (as on a node that stopped
/// answering) until it is deleted with grace period 0.
pub const NEVER_TERMINATE_ANNOTATION: &str = "testenv.convoy.dev/never-terminate";

/// A Node managed by KWOK (annotated [`KWOK_NODE_ANNOTATION`]) with no
/// status: KWOK makes it Ready with 32 CPUs, 256Gi and 110 pods unless the
/// caller sets `status.capacity`/`status.allocatable` before creating it.
pub fn kwok_node(name: &str) -> Node {
    let (key, value) = KWOK_NODE_ANNOTATION;
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some([(key.to_string(), value.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What a [`TestEnv`] runs besides etcd and kube-apiserver.
///
/// The default is the API server alone, like upstream `scheduler_perf`:
/// objects stay exactly as tests write them, bound pods stay Pending, and
/// nothing else writes to the API. Tests of the scheduler alone and the
/// benchmarks want that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The Kubernetes release (`v1.35` or `v1.35.4`): one of
    /// [`versions`]. `None`: `$TESTENV_VERSION` if set, else the newest.
    pub version: Option<&'static str>,
    /// Extra kube-apiserver flags, kept across
    /// [`TestEnv::restart_apiserver`]
    /// (`--runtime-config=resource.k8s.io/v1=false`).
    pub apiserver_args: &'static [&'static str],
    /// Also run kube-controller-manager (disruption, garbage collector,
    /// ReplicaSet, Deployment, StatefulSet, Job, namespace, PV binder,
    /// ResourceClaim and service-account controllers; no node lifecycle)
    /// and KWOK as the kubelet of nodes annotated [`KWOK_NODE_ANNOTATION`].
    /// Adds half a
    /// second to the start and two processes (about 95 and 60 MiB). Owner
    /// references are then enforced: the garbage collector deletes objects
    /// whose owner does not exist, and ReplicaSets, StatefulSets and Jobs
    /// create their pods.
    pub controllers: bool,
}

impl Options {
    /// etcd and kube-apiserver only (`testenv up --api-only`).
    pub const API_ONLY: Options =
        Options { version: None, apiserver_args: &[], controllers: false };
    /// With kube-controller-manager and KWOK (`testenv up`).
    pub const WITH_CONTROLLERS: Options =
        Options { version: None, apiserver_args: &[], controllers: true };

    /// These options on the given Kubernetes release.
    pub const fn on(self, version: &'static str) -> Options {
        Options { version: Some(version), ..self }
    }

    /// These options with extra kube-apiserver flags.
    pub const fn with_apiserver_args(self, args: &'static [&'static str]) -> Options {
        Options { apiserver_args: args, ..self }
    }
}

/// A running control plane: etcd and kube-apiserver on free loopback ports,
/// and with [`Options::controllers`] kube-controller-manager and KWOK.
#[derive(Debug)]
pub struct TestEnv {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    options: Options,
}

impl TestEnv {
    /// Starts a private control plane with the API server alone
    /// ([`Options::API_ONLY`]), building the binaries first if they are
    /// missing, and waits until the API server is ready.
    pub fn start() -> Result<Self> {
        Self::start_with(Options::API_ONLY)
    }

    /// Starts a private control plane running what `options` asks for and
    /// waits until every process is ready.
    pub fn start_with(options: Options) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("convoy-testenv-").tempdir()?;
        let dir_str = dir.path().to_string_lossy().to_string();
        let pid = std::process::id().to_string();
        let mut args: Vec<&str> = Vec::new();
        if let Some(v) = options.version {
            args.extend(["--version", v]);
        }
        args.extend(["up", "--dir", &dir_str, "--owner-pid", &pid, "--remove-dir"]);
        if !options.controllers {
            args.push("--api-only");
        }
        for a in options.apiserver_args {
            args.extend(["--apiserver-arg", a]);
        }
        let kubeconfig = run(&args).inspect_err(|_| {
            // `up` may have started etcd before failing.
            let _ = run(&["down", "--dir", &dir_str]);
        })?;
        Ok(Self { dir, kubeconfig: PathBuf::from(kubeconfig), options })
    }

    /// One control plane for the whole test binary, the API server alone,
    /// started on first use.
    ///
    /// # Panics
    /// Panics when the control plane cannot be started: every test using it
    /// would fail anyway, and the message says why.
    pub fn shared() -> &'static TestEnv {
        static SHARED: OnceLock<TestEnv> = OnceLock::new();
        Self::shared_in(&SHARED, Options::API_ONLY)
    }

    /// One control plane with controllers and KWOK
    /// ([`Options::WITH_CONTROLLERS`]) for the whole test binary, started on
    /// first use. Independent of [`shared`](Self::shared).
    ///
    /// # Panics
    /// As [`shared`](Self::shared).
    pub fn shared_with_controllers() -> &'static TestEnv {
        static SHARED: OnceLock<TestEnv> = OnceLock::new();
        Self::shared_in(&SHARED, Options::WITH_CONTROLLERS)
    }

    fn shared_in(cell: &'static OnceLock<TestEnv>, options: Options) -> &'static TestEnv {
        cell.get_or_init(|| match TestEnv::start_with(options) {
            Ok(env) => env,
            Err(e) => panic!("cannot start testenv: {e}"),
        })
    }

    /// What this control plane runs.
    pub fn options(&self) -> Options {
        self.options
    }

    /// The Kubernetes release this control plane runs (`v1.36.3`).
    pub fn version(&self) -> String {
        std::fs::read_to_string(self.dir().join("k8s-version"))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    }

    /// Its minor version (36 for `v1.36.3`).
    pub fn minor(&self) -> u32 {
        self.version().split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0)
    }

    /// The state directory (logs, pid files, certificates). Each process
    /// logs to `<name>.log` there: `etcd`, `kube-apiserver`,
    /// `kube-controller-manager`, `kwok`.
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

    /// Where the output of the kube-scheduler started by
    /// [`start_kube_scheduler`](Self::start_kube_scheduler) goes.
    pub fn kube_scheduler_log(&self) -> PathBuf {
        self.dir().join("kube-scheduler.log")
    }

    /// Stops and restarts kube-apiserver with the same data and port.
    pub fn restart_apiserver(&self) -> Result<()> {
        run(&["restart-apiserver", "--dir", &self.dir.path().to_string_lossy()]).map(|_| ())
    }

    /// The loopback address kube-apiserver listens on (it keeps it across
    /// [`restart_apiserver`](Self::restart_apiserver)).
    pub fn apiserver_addr(&self) -> Result<std::net::SocketAddr> {
        let port = std::fs::read_to_string(self.dir().join("apiserver.port"))?;
        let port: u16 = port.trim().parse().map_err(|e| {
            Error::Kubeconfig(format!("apiserver.port holds {:?}: {e}", port.trim()))
        })?;
        Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Writes a copy of the admin kubeconfig whose server is `addr` (a
    /// [`FaultProxy`] in front of the API server) and returns its path. The
    /// serving certificate is for 127.0.0.1, so `addr` must be on loopback.
    pub fn kubeconfig_via(&self, addr: std::net::SocketAddr) -> Result<PathBuf> {
        let original = std::fs::read_to_string(&self.kubeconfig)?;
        let server = format!("server: https://{}", self.apiserver_addr()?);
        if !original.contains(&server) {
            return Err(Error::Kubeconfig(format!(
                "{} has no `{server}`",
                self.kubeconfig.display()
            )));
        }
        let via = original.replace(&server, &format!("server: https://{addr}"));
        let path = self.dir().join(format!("kubeconfig-via-{}", addr.port()));
        std::fs::write(&path, via)?;
        Ok(path)
    }

    /// Compacts etcd's history up to its current revision (physically), so
    /// that a watch resuming from an older resource version can only be
    /// answered `410 Gone`; returns the revision. The API server's watch
    /// cache still serves what it holds: combine with
    /// [`restart_apiserver`](Self::restart_apiserver) to expire the watches
    /// of its clients.
    pub async fn compact_etcd(&self) -> Result<i64> {
        let url = std::fs::read_to_string(self.dir().join("etcd.url"))?;
        etcd::compact(url.trim()).await
    }

    /// Writes `<dir>/<name>.yaml`, a `KubeSchedulerConfiguration` for
    /// upstream kube-scheduler on this control plane: its kubeconfig, client
    /// qps and burst 5000 (as Convoy's in the tests), then `rest` (top-level
    /// fields: `leaderElection`, `profiles`, ...). Returns its path.
    pub fn kube_scheduler_config(&self, name: &str, rest: &str) -> Result<PathBuf> {
        let path = self.dir().join(format!("{name}.yaml"));
        let text = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\n{rest}",
            self.kubeconfig().display()
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Starts upstream kube-scheduler (from the same build) against this
    /// control plane with the given `KubeSchedulerConfiguration` file. The
    /// scheduler stops when the returned handle is dropped.
    pub fn start_kube_scheduler(&self, config: &Path) -> Result<KubeScheduler> {
        self.start_kube_scheduler_with_args(config, &[])
    }

    /// Starts `count` hollow nodes named `<prefix>0`, `<prefix>1`, ...:
    /// kubemark's hollow kubelet, the real kubelet with a fake container
    /// runtime, which admits or rejects pods as a real node does (phase
    /// `Failed`, reason `OutOfcpu`, `OutOf<extended resource>`,
    /// `NodeAffinity`, `PodOSNotSupported`, ...). Each node has kubemark's
    /// fixed fake machine, 1 CPU and 3.75 GiB (3840Mi allocatable), no
    /// ephemeral storage, and the extended resources of `extra` flags
    /// (`--extended-resources=nvidia.com/gpu=8`; also `--node-labels`,
    /// `--register-with-taints`, `--max-pods`). They stop with the control
    /// plane. Returns the names; the nodes register within a few seconds.
    pub fn start_hollow_nodes(
        &self,
        count: usize,
        prefix: &str,
        extra: &[&str],
    ) -> Result<Vec<String>> {
        let dir = self.dir.path().to_string_lossy().to_string();
        let count = count.to_string();
        let mut args = vec!["hollow-nodes", "--dir", &dir, "--count", &count, "--prefix", prefix];
        args.extend_from_slice(extra);
        Ok(run(&args)?.lines().map(str::to_string).collect())
    }

    /// Kueue's controller manager beside this control plane (`testenv
    /// kueue`): its CRDs, its webhooks (on 127.0.0.1, with a CA of their
    /// own), and the manager managing `frameworks` (`batch/job`), with
    /// Topology-Aware Scheduling on. Returns once Kueue is ready and its
    /// webhooks are registered; it stops with the control plane. Its log is
    /// the returned path.
    pub fn start_kueue(&self, frameworks: &str) -> Result<PathBuf> {
        let dir = self.dir.path().to_string_lossy().to_string();
        Ok(PathBuf::from(run(&["kueue", "--dir", &dir, "--frameworks", frameworks])?.trim()))
    }

    /// A second (third, ...) upstream kube-scheduler on this control plane:
    /// [`start_kube_scheduler_with_args`](Self::start_kube_scheduler_with_args)
    /// under its own `name`, logging to `<dir>/<name>.log`.
    pub fn start_named_kube_scheduler(
        &self,
        name: &str,
        config: &Path,
        args: &[&str],
    ) -> Result<KubeScheduler> {
        let log = std::fs::File::create(self.dir().join(format!("{name}.log")))?;
        let child = Command::new(script())
            .args(["kube-scheduler", "--dir"])
            .arg(self.dir())
            .arg("--name")
            .arg(name)
            .arg("--config")
            .arg(config)
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(KubeScheduler { child, pid_file: self.dir().join(format!("{name}.pid")) })
    }

    /// [`start_kube_scheduler`](Self::start_kube_scheduler) with extra
    /// kube-scheduler flags (`-v=2`, `--feature-gates=...`). Its output goes
    /// to [`kube_scheduler_log`](Self::kube_scheduler_log).
    pub fn start_kube_scheduler_with_args(
        &self,
        config: &Path,
        args: &[&str],
    ) -> Result<KubeScheduler> {
        self.start_named_kube_scheduler("kube-scheduler", config, args)
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
            let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}
