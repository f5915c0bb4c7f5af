//! The harness of the chaos tests (`tests/chaos.rs`, `docs/reliability.md`):
//! a private control plane, a [`FaultProxy`] in front of its API server,
//! `convoy-scheduler` replicas that reach the API server only through the
//! proxy, an [`InvariantChecker`] that watches the API server directly, and
//! a supervisor that restarts a replica that exited, as a Deployment would,
//! and counts it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use convoy_adapters::pod_groups::api_resource;
use convoy_api::pod_group::{POD_GROUP_LABEL, X_K8S_API_VERSION};
use convoy_api::{PodGroup, PodGroupApi};
use convoy_gang::invariant::partial_groups;
use convoy_testenv::{FaultProxy, InvariantChecker, TestEnv};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, TypeMeta};

use crate::common::{ControlPlane, pod};

/// The profile (`schedulerName`) of every chaos pod.
pub const CONVOY: &str = "convoy-scheduler";
/// The namespace of the Lease the replicas race for.
pub const LEASE_NAMESPACE: &str = "default";
/// The replicas' client and lease settings.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `clientConnection.qps` (each of the replica's clients).
    pub qps: u32,
    /// `clientConnection.burst`.
    pub burst: u32,
    /// `leaderElection.leaseDuration`.
    pub lease: Duration,
    /// `leaderElection.renewDeadline`.
    pub renew: Duration,
    /// `leaderElection.retryPeriod`.
    pub retry: Duration,
    /// The pod's `terminationGracePeriodSeconds`: SIGKILL this long after
    /// SIGTERM ([`Replicas::terminate`]). The chart's 30 s in both.
    pub grace: Duration,
}

/// The settings of this run: fast ones by default (qps 5000, lease 3 s,
/// renew deadline 2 s, retry 500 ms); the Helm chart's own with
/// `CONVOY_CHAOS_SETTINGS=chart` (qps 50, burst 100, lease 15 s, renew
/// deadline 10 s, retry 2 s; `make chaos-chart`).
pub fn settings() -> Settings {
    match std::env::var("CONVOY_CHAOS_SETTINGS").as_deref() {
        Ok("chart") => Settings {
            qps: 50,
            burst: 100,
            lease: Duration::from_secs(15),
            renew: Duration::from_secs(10),
            retry: Duration::from_secs(2),
            grace: Duration::from_secs(30),
        },
        Ok("fast") | Err(_) => Settings {
            qps: 5000,
            burst: 5000,
            lease: Duration::from_secs(3),
            renew: Duration::from_secs(2),
            retry: Duration::from_millis(500),
            grace: Duration::from_secs(30),
        },
        Ok(other) => panic!("CONVOY_CHAOS_SETTINGS={other}: expected `fast` or `chart`"),
    }
}

/// The lease duration of this run's replicas ([`settings`]).
pub fn lease_duration() -> Duration {
    settings().lease
}

/// One replica: a name (its leader-election identity, kept across
/// restarts, as a Deployment's pod keeps its name across container
/// restarts) and its process, if running.
struct Member {
    name: String,
    /// Its kubeconfig: through its own proxy, then the shared one.
    kubeconfig: PathBuf,
    child: Option<Child>,
    /// Killed by the test and not to be restarted until released.
    held: bool,
    /// When the supervisor may start it again.
    restart_at: Option<Instant>,
    /// Exits the supervisor saw (not counting kills by the test).
    exits: u32,
    /// Kills by the test.
    kills: u32,
    /// Exit statuses seen, for the report.
    statuses: Vec<String>,
    /// After a SIGTERM: when the supervisor SIGKILLs the replica if it is
    /// still running (the kubelet's end of the grace period).
    kill_at: Option<Instant>,
    /// SIGKILLs at the end of a grace period.
    grace_kills: u32,
}

/// The replicas of one test and how to start them.
pub struct Replicas {
    exe: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    members: Vec<Member>,
}

impl Replicas {
    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    fn spawn(&self, name: &str, kubeconfig: &Path) -> Result<Child> {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(name))?;
        let http = free_port()?;
        // PDEATHSIG: should the test process die without unwinding, the
        // replica dies with it.
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL"]).arg(&self.exe);
            c
        } else {
            Command::new(&self.exe)
        };
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--http-addr")
            .arg(http.to_string())
            .arg("--identity")
            .arg(name)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawning convoy-scheduler")
    }

    /// Restarts members that exited (after a 1 s pause, a short
    /// CrashLoopBackOff) unless held.
    fn supervise(&mut self) {
        let now = Instant::now();
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            if let (Some(child), Some(at)) = (&mut m.child, m.kill_at)
                && now >= at
                && matches!(child.try_wait(), Ok(None))
            {
                let _ = child.kill();
                m.grace_kills += 1;
            }
            if let Some(child) = &mut m.child
                && let Ok(Some(status)) = child.try_wait()
            {
                m.exits += 1;
                m.statuses.push(status.to_string());
                m.child = None;
                m.kill_at = None;
                m.restart_at = Some(now + Duration::from_secs(1));
            }
            let m = &self.members[i];
            if m.child.is_none() && !m.held && m.restart_at.is_none_or(|at| now >= at) {
                match self.spawn(&m.name, &m.kubeconfig) {
                    Ok(child) => {
                        let m = &mut self.members[i];
                        m.child = Some(child);
                        m.restart_at = None;
                    }
                    Err(e) => eprintln!("restarting {}: {e:#}", m.name),
                }
            }
        }
    }

    fn member(&mut self, name: &str) -> &mut Member {
        self.members.iter_mut().find(|m| m.name == name).expect("a replica of this test")
    }

    /// SIGKILL (no lease release); the replica stays down until
    /// [`release`](Self::release).
    pub fn kill(&mut self, name: &str) {
        let m = self.member(name);
        if let Some(mut child) = m.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        m.kills += 1;
        m.held = true;
    }

    /// SIGTERM, as a Deployment's rollout sends, and SIGKILL from the
    /// supervisor if the replica still runs after `grace` (the pod's
    /// `terminationGracePeriodSeconds`, as the kubelet enforces it); the
    /// replica stays down once it exits, until [`release`](Self::release).
    pub fn terminate(&mut self, name: &str, grace: Duration) -> Result<()> {
        let m = self.member(name);
        m.held = true;
        let pid = m.child.as_ref().context("the replica is not running")?.id();
        m.kill_at = Some(Instant::now() + grace);
        let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
        ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }

    /// Replicas SIGKILLed at the end of their grace period after a SIGTERM.
    pub fn grace_kills(&self) -> u32 {
        self.members.iter().map(|m| m.grace_kills).sum()
    }

    /// Whether the replica's process runs (as of the supervisor's last
    /// look, every 200 ms).
    pub fn is_running(&self, name: &str) -> bool {
        self.members.iter().any(|m| m.name == name && m.child.is_some())
    }

    /// Lets the supervisor start a killed replica again.
    pub fn release(&mut self, name: &str) {
        self.member(name).held = false;
    }

    /// Exits of replicas the supervisor restarted (kills not counted).
    pub fn exits(&self) -> u32 {
        self.members.iter().map(|m| m.exits).sum()
    }

    /// Replicas that never exited and were never killed: those whose
    /// watches ran through every fault.
    pub fn survivors(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.exits == 0 && m.kills == 0)
            .map(|m| m.name.clone())
            .collect()
    }

    /// Per replica: name, exits, kills and exit statuses.
    pub fn summary(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "{}: {} exits {:?}, {} kills, {} killed at the end of the grace period",
                    m.name, m.exits, m.statuses, m.kills, m.grace_kills
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The whole log of a replica (all its runs).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// The last 30 lines of every replica's log, for failure messages.
    pub fn tails(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            let log = self.log(&m.name);
            let lines: Vec<&str> = log.lines().collect();
            let from = lines.len().saturating_sub(30);
            out += &format!("\n--- last lines of {} ---\n{}", m.name, lines[from..].join("\n"));
        }
        out
    }

    /// Names of the replicas.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            if let Some(dir) = std::env::var_os("CONVOY_E2E_LOG_DIR") {
                let to = PathBuf::from(dir).join(format!("chaos-{}.log", m.name));
                let _ = std::fs::copy(self.dir.join(format!("{}.log", m.name)), to);
            }
        }
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One chaos run: control plane, proxy, checker, supervised replicas.
///
/// Fields drop in order: the replicas (and their logs, kept with
/// `CONVOY_E2E_LOG_DIR`) go before the control plane.
pub struct Chaos {
    replicas: Arc<Mutex<Replicas>>,
    supervisor: tokio::task::JoinHandle<()>,
    /// The invariant checker.
    pub checker: InvariantChecker,
    /// The proxy every replica goes through.
    pub proxy: FaultProxy,
    /// Each replica's own proxy, in front of the shared one: faults of one
    /// replica's network alone.
    pub own: BTreeMap<String, FaultProxy>,
    /// The test's namespace, with a pod API.
    pub pods: Api<Pod>,
    /// The test's namespace.
    pub ns: String,
    /// The Lease the replicas race for.
    pub lease: String,
    /// The control plane (the checker and the test talk to it directly).
    pub cp: ControlPlane,
}

impl Chaos {
    /// Starts a control plane, the proxy and the checker, creates the
    /// namespace `ns` and `nodes`, and starts `replicas` replicas named
    /// `<ns>-0`, `<ns>-1`, ... racing for one Lease.
    pub async fn start(ns: &str, nodes: Vec<Node>, replicas: usize) -> Result<Self> {
        Self::start_with(ns, nodes, replicas, |_| Ok(())).await
    }

    /// [`Chaos::start`], with `setup` run on the control plane before any
    /// replica starts (e.g. installing a CRD the replicas should find).
    pub async fn start_with(
        ns: &str,
        nodes: Vec<Node>,
        replicas: usize,
        setup: impl FnOnce(&ControlPlane) -> Result<()>,
    ) -> Result<Self> {
        Self::start_on(ControlPlane::start().await?, ns, nodes, replicas, setup).await
    }

    /// [`Chaos::start_with`] on a given control plane (e.g.
    /// [`ControlPlane::start_cluster`], with controllers and KWOK).
    pub async fn start_on(
        cp: ControlPlane,
        ns: &str,
        nodes: Vec<Node>,
        replicas: usize,
        setup: impl FnOnce(&ControlPlane) -> Result<()>,
    ) -> Result<Self> {
        setup(&cp)?;
        let proxy = FaultProxy::start(cp.env.apiserver_addr()?).await?;
        let checker = InvariantChecker::start(cp.client.clone());
        let pods = cp.namespace(ns).await?;
        crate::common::create_nodes(&cp.client, nodes).await?;
        ensure!(checker.wait_synced(Duration::from_secs(30)).await, "the checker never synced");
        let lease = format!("convoy-{ns}");
        let config = cp.env.dir().join(format!("{ns}.yaml"));
        std::fs::write(&config, config_yaml(&lease))?;
        let mut own = BTreeMap::new();
        let mut members = Vec::new();
        for i in 0..replicas {
            let name = format!("{ns}-{i}");
            let mine = FaultProxy::start(proxy.addr()).await?;
            members.push(Member {
                name: name.clone(),
                kubeconfig: cp.env.kubeconfig_via(mine.addr())?,
                child: None,
                held: false,
                restart_at: None,
                exits: 0,
                kills: 0,
                statuses: Vec::new(),
                kill_at: None,
                grace_kills: 0,
            });
            own.insert(name, mine);
        }
        let mut set = Replicas {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_convoy-scheduler")),
            config,
            dir: cp.env.dir().to_path_buf(),
            members,
        };
        set.supervise();
        let replicas = Arc::new(Mutex::new(set));
        let supervisor = {
            let replicas = Arc::clone(&replicas);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    replicas.lock().unwrap_or_else(|e| e.into_inner()).supervise();
                }
            })
        };
        Ok(Self { replicas, supervisor, checker, proxy, own, pods, ns: ns.to_string(), lease, cp })
    }

    /// The replicas (kill, release, logs, counts).
    pub fn replicas(&self) -> MutexGuard<'_, Replicas> {
        self.replicas.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Lease's holder, read from the API server directly.
    pub async fn leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.cp.client.clone(), LEASE_NAMESPACE);
        leases.get_opt(&self.lease).await.ok()??.spec?.holder_identity
    }

    /// Waits until some replica holds the Lease and returns its name.
    pub async fn wait_leader(&self, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(holder) = self.leader().await
                && self.replicas().names().contains(&holder)
            {
                return Ok(holder);
            }
            ensure!(
                Instant::now() < deadline,
                "no leader in {timeout:?}{}",
                self.replicas().tails()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates pods `<prefix>-<i>` for `i` in `range`, `rate` per second,
    /// each retried while the API server is away.
    pub async fn create_pods(
        &self,
        prefix: &str,
        range: std::ops::Range<usize>,
        rate: f64,
        cpu: &str,
    ) -> Result<()> {
        let start = Instant::now();
        for (n, i) in range.enumerate() {
            let due = start + Duration::from_secs_f64(n as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
            create_retrying(&self.pods, pod(&format!("{prefix}-{i:03}"), CONVOY, cpu, "64Mi"))
                .await?;
        }
        Ok(())
    }

    /// Deletes a pod at once (grace period 0: no kubelet runs here);
    /// false if it was already gone.
    pub async fn delete_pod(&self, name: &str) -> Result<bool> {
        match self.pods.delete(name, &DeleteParams::default().grace_period(0)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a pod with its own grace period (it stays Terminating until
    /// KWOK ends it, on a control plane with controllers); false if it
    /// was already gone.
    pub async fn delete_pod_gracefully(&self, name: &str) -> Result<bool> {
        match self.pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a node.
    pub async fn delete_node(&self, name: &str) -> Result<()> {
        Api::<Node>::all(self.cp.client.clone()).delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// Restarts kube-apiserver (blocks until it is ready again) and
    /// returns how long that took.
    pub async fn restart_apiserver(&self) -> Result<Duration> {
        let env: Arc<TestEnv> = Arc::clone(&self.cp.env);
        let began = Instant::now();
        tokio::task::spawn_blocking(move || env.restart_apiserver())
            .await?
            .context("restarting kube-apiserver")?;
        Ok(began.elapsed())
    }

    /// The replicas' exits and kills and the tails of their logs, for
    /// failure messages. One lock: two `self.replicas()` in one statement
    /// (a format's arguments) would hold the first guard while waiting for
    /// the second, forever.
    pub fn report(&self) -> String {
        let replicas = self.replicas();
        format!("replicas: {}{}", replicas.summary(), replicas.tails())
    }

    /// Fails with every violation the checker saw, and the replicas' state.
    pub fn assert_no_violations(&self) -> Result<()> {
        let violations = self.checker.violations();
        ensure!(
            violations.is_empty(),
            "{} invariant violations:\n{}\n{}",
            violations.len(),
            violations.iter().map(|v| format!("  {v}")).collect::<Vec<_>>().join("\n"),
            self.report()
        );
        Ok(())
    }

    /// Waits until every live pod of the test is bound; the error names
    /// the pods left.
    pub async fn assert_all_bound(&self, timeout: Duration) -> Result<()> {
        if let Err(pending) = self.checker.wait_all_bound(CONVOY, timeout).await {
            anyhow::bail!(
                "{} pods not bound within {timeout:?}, e.g. {:?}\n{}",
                pending.len(),
                &pending[..pending.len().min(8)],
                self.report()
            );
        }
        Ok(())
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

/// The replicas' configuration ([`settings`]), leader election on `lease`.
fn config_yaml(lease: &str) -> String {
    let s = settings();
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         clientConnection:\n  qps: {}\n  burst: {}\n\
         leaderElection:\n  leaderElect: true\n  resourceName: {lease}\n  \
         resourceNamespace: {LEASE_NAMESPACE}\n  leaseDuration: {}ms\n  renewDeadline: {}ms\n  \
         retryPeriod: {}ms\n",
        s.qps,
        s.burst,
        s.lease.as_millis(),
        s.renew.as_millis(),
        s.retry.as_millis()
    )
}

/// How long [`create_retrying`] keeps trying: longer than a restart of the
/// API server may take on a loaded machine (testenv waits up to 120 s for
/// it to be ready, after stopping the old one), so that a slow restart
/// fails as the restart, with its log, not as a pod that could not be
/// created.
const CREATE_RETRY_FOR: Duration = Duration::from_secs(180);

/// Creates an object (a pod, a PodGroup), retrying for up to
/// [`CREATE_RETRY_FOR`] while the API server is away; a conflict means an
/// earlier attempt succeeded but its answer was lost.
pub async fn create_retrying<K>(api: &Api<K>, obj: K) -> Result<()>
where
    K: Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let deadline = Instant::now() + CREATE_RETRY_FOR;
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("creating an object while the API server is away"),
        }
    }
}

/// scheduler-plugins' PodGroups (`scheduling.x-k8s.io/v1alpha1`) in `ns`.
pub fn pod_groups(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource(PodGroupApi::XK8s))
}

/// A member of the scheduler-plugins PodGroup `group` (by its label),
/// asking for `cpu`.
pub fn gang_member(group: &str, name: &str, cpu: &str) -> Pod {
    let mut p = pod(name, CONVOY, cpu, "64Mi");
    p.metadata.labels = Some([(POD_GROUP_LABEL.to_string(), group.to_string())].into());
    p
}

impl Chaos {
    /// Creates a gang: the PodGroup `name` (scheduler-plugins' API,
    /// `minMember` `min`) and `members` pods `<name>-<i>` of `cpu`, the
    /// group before its pods if `group_first`, after them otherwise; each
    /// retried while the API server is away. The PodGroup CRD must be
    /// installed ([`Chaos::start_with`], `common::install_crd`).
    pub async fn create_gang(
        &self,
        name: &str,
        min: u32,
        members: usize,
        cpu: &str,
        group_first: bool,
    ) -> Result<()> {
        let group: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": X_K8S_API_VERSION, "kind": "PodGroup",
            "metadata": { "name": name, "namespace": self.ns }, "spec": { "minMember": min }
        }))?;
        let groups = pod_groups(&self.cp.client, &self.ns);
        if group_first {
            create_retrying(&groups, group.clone()).await?;
        }
        for i in 0..members {
            create_retrying(&self.pods, gang_member(name, &format!("{name}-{i}"), cpu)).await?;
        }
        if !group_first {
            create_retrying(&groups, group).await?;
        }
        Ok(())
    }

    /// The test namespace's pods and PodGroups, read from the API server.
    pub async fn gangs(&self) -> Result<Gangs> {
        Gangs::read(&self.cp.client, &self.ns).await
    }

    /// Waits for a quiescent moment of the gangs: the number of bound pods
    /// unchanged for `stable` (no binding landed meanwhile) and no group
    /// partially bound (`convoy_gang::invariant::partial_groups` empty).
    /// A group left partially bound after a fault stays so, and fails this
    /// after `timeout` with its name and counts. Returns when the bound
    /// count last changed (or the first read, if it never did) and the pods
    /// bound then.
    pub async fn wait_gangs_quiescent(
        &self,
        stable: Duration,
        timeout: Duration,
    ) -> Result<(Instant, usize)> {
        let deadline = Instant::now() + timeout;
        let mut last: Option<(usize, Instant)> = None;
        loop {
            let gangs = self.gangs().await?;
            let bound = gangs.bound();
            let partial = gangs.partial();
            let now = Instant::now();
            let since = match last {
                Some((n, since)) if n == bound => since,
                _ => now,
            };
            last = Some((bound, since));
            if partial.is_empty() && now - since >= stable {
                return Ok((since, bound));
            }
            ensure!(
                now < deadline,
                "no quiescent moment in {timeout:?}: partially bound groups {partial:?}, {bound} \
                 pods bound (unchanged for {:?})\n{}",
                now - since,
                self.report()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A namespace's pods and PodGroups, as the API server stored them at one
/// moment (two LISTs).
pub struct Gangs {
    /// Every pod of the namespace.
    pub pods: Vec<Arc<Pod>>,
    /// Every scheduler-plugins PodGroup of the namespace.
    pub groups: Vec<Arc<PodGroup>>,
}

impl Gangs {
    /// Lists the pods, then the PodGroups, of `ns`.
    pub async fn read(client: &kube::Client, ns: &str) -> Result<Self> {
        let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await?;
        let groups = pod_groups(client, ns).list(&ListParams::default()).await?;
        let groups = groups
            .items
            .into_iter()
            .map(|mut g| {
                // List items may come without their type.
                g.types.get_or_insert_with(|| TypeMeta {
                    api_version: X_K8S_API_VERSION.to_string(),
                    kind: "PodGroup".to_string(),
                });
                Ok(Arc::new(PodGroup::from_json(&serde_json::to_value(&g)?)?))
            })
            .collect::<Result<_>>()?;
        Ok(Self { pods: pods.items.into_iter().map(Arc::new).collect(), groups })
    }

    /// Pods bound to a node.
    pub fn bound(&self) -> usize {
        self.pods.iter().filter(|p| crate::common::node_of(p).is_some()).count()
    }

    /// `convoy_gang::invariant::partial_groups` over these pods and groups:
    /// `ns/name: k/min bound` for each group with some but fewer than
    /// `minMember` members bound.
    pub fn partial(&self) -> Vec<String> {
        partial_groups(&self.pods, &self.groups)
    }

    /// Per group, `(key, members bound, minMember)`.
    pub fn per_group(&self) -> Vec<(String, usize, u32)> {
        self.groups
            .iter()
            .map(|g| {
                let bound = self
                    .pods
                    .iter()
                    .filter(|p| {
                        convoy_api::pod_group::group_key_of(p).as_ref() == Some(&g.key)
                            && crate::common::node_of(p).is_some()
                    })
                    .count();
                (g.key.to_string(), bound, g.min_member)
            })
            .collect()
    }
}

/// What a [`GangMonitor`] saw.
#[derive(Default)]
struct Windows {
    /// Groups partially bound at the last poll: since when, last message.
    open: BTreeMap<String, (Instant, String)>,
    /// Windows that closed: the group's last message, how long.
    closed: Vec<(String, Duration)>,
    polls: u64,
    failed_polls: u64,
}

impl Windows {
    /// Opens a window for each group newly partial, closes those no longer.
    fn record(&mut self, read: Result<Gangs>, now: Instant) {
        let Ok(gangs) = read else {
            self.failed_polls += 1;
            return;
        };
        self.polls += 1;
        let mut partial = BTreeMap::new();
        for g in &gangs.groups {
            let one = partial_groups(&gangs.pods, std::slice::from_ref(g));
            if let Some(m) = one.into_iter().next() {
                partial.insert(g.key.to_string(), m);
            }
        }
        let closed: Vec<String> =
            self.open.keys().filter(|k| !partial.contains_key(*k)).cloned().collect();
        for k in closed {
            let (since, m) = self.open.remove(&k).expect("open");
            self.closed.push((m, now - since));
        }
        for (k, m) in partial {
            self.open.entry(k).or_insert((now, String::new())).1 = m;
        }
    }
}

/// Polls a namespace's gangs from the API server every 200 ms and records
/// each window in which a group was partially bound (the gang invariant
/// allows one only while bindings are in flight: a SIGKILL or a cut
/// between the binds of a gang's members opens one, until the rest are
/// bound). Stops when dropped.
pub struct GangMonitor {
    windows: Arc<Mutex<Windows>>,
    task: tokio::task::JoinHandle<()>,
}

impl GangMonitor {
    /// Starts polling `ns` with `client` (straight to the API server).
    pub fn start(client: kube::Client, ns: &str) -> Self {
        let windows = Arc::new(Mutex::new(Windows::default()));
        let w = Arc::clone(&windows);
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            loop {
                let read = Gangs::read(&client, &ns).await;
                w.lock().unwrap_or_else(|e| e.into_inner()).record(read, Instant::now());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { windows, task }
    }

    /// Every partial window seen, closed or still open: the group's last
    /// message (`ns/name: k/min bound`) and how long, longest first.
    pub fn windows(&self) -> Vec<(String, Duration)> {
        let w = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut all = w.closed.clone();
        all.extend(w.open.values().map(|(since, m)| (format!("{m} (open)"), now - *since)));
        all.sort_by_key(|w| std::cmp::Reverse(w.1));
        all
    }

    /// Polls done, and polls that failed (the API server away).
    pub fn polls(&self) -> (u64, u64) {
        let w = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        (w.polls, w.failed_polls)
    }
}

impl Drop for GangMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}
