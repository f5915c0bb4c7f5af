//! `convoy-scheduler --config FILE [--kubeconfig FILE]`: Convoy as a real
//! second scheduler against an API server.
//!
//! Start-up: connect (with the configured client rate limits), start the
//! status writer (Events and pod conditions, off the hot path), the HTTP
//! endpoints (`/metrics`, `/healthz`, `/readyz`, on the secure port and the
//! deprecated plain one), leader election, and the
//! watches. The cache fills from the watches while the replica waits for the
//! lease; it schedules only while it is the leader and the initial lists are
//! synced (the initial lists include the PodGroups of each API the server
//! serves). Losing the lease stops scheduling at once and ends the process
//! within about a second, without touching the lease again (as upstream:
//! the Deployment restarts it as a standby). SIGTERM stops
//! taking pods, lets in-flight bindings finish (bounded by a grace period),
//! flushes Events and releases the lease.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use convoy_adapters::{
    ApiActuator, ApiBinder, Fence, GroupReport, GroupReportOutcome, LeaderElection, StatusWriter,
    StatusWriterOptions, WatchOptions,
};
use convoy_api::pod_group::group_key_of;
use convoy_api::{ClusterUpdate, PodGroupApi, RealClock};
use convoy_config::SchedulerConfig;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::decision::{
    Decision, DecisionSink, Fanout, GroupDecision, GroupOutcome, LogSink, Outcome,
};
use crate::metrics::Metrics;
use crate::run::Exit;
use crate::scheduler::{Scheduler, SchedulerOptions};

/// How long SIGTERM waits for in-flight bindings and queued Events.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a replica that lost its lease spends at most flushing queued
/// Events before it exits (and no more than half of `leaseDuration -
/// renewDeadline`).
pub const LOST_LEASE_FLUSH: Duration = Duration::from_secs(1);
/// Bindings in flight at once.
pub const MAX_BINDS_IN_FLIGHT: usize = 256;
/// How long an encoded `/metrics` body is reused: scrapers, however many,
/// take the queue's lock at most once per second.
pub const METRICS_REUSE: Duration = Duration::from_secs(1);
/// The TokenReview and SubjectAccessReview clients' rate limits
/// (upstream's delegating authentication and authorization: 200 qps, 400
/// burst).
pub const REVIEW_QPS: f32 = 200.0;
/// See [`REVIEW_QPS`].
pub const REVIEW_BURST: u32 = 400;

/// What `serve` needs besides the configuration.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The plugins (Convoy's, [`crate::registry`], and any of a binary of
    /// your own) and the custom kinds they read.
    pub registry: convoy_api::Registry,
    /// Kubeconfig file; `None`: `clientConnection.kubeconfig`, else in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Where `/metrics`, `/healthz`, `/livez`, `/readyz` are served.
    pub serving: crate::options::Serving,
    /// Leader-election identity (default: hostname and pid).
    pub identity: String,
    /// Use streaming lists (WatchList) for the initial lists.
    pub streaming_lists: bool,
}

/// Writes Events and the `PodScheduled` condition for each decision, and
/// for each group attempt the group's aggregated Event and status. A group
/// member that did not fit gets its condition but no Event of its own.
struct ApiStatusSink(StatusWriter);

impl DecisionSink for ApiStatusSink {
    fn record(&self, d: &Decision) {
        let uid = d.uid.as_deref().unwrap_or("");
        match &d.outcome {
            Outcome::Scheduled { node, .. } => {
                self.0.scheduled(&d.pod, uid, node);
            }
            Outcome::Unschedulable { message } if d.group.is_some() => {
                self.0.unschedulable_condition(&d.pod, uid, message);
            }
            Outcome::Unschedulable { message } | Outcome::Error { message } => {
                self.0.unschedulable(&d.pod, uid, message);
            }
        }
    }

    fn record_rejection(&self, r: &crate::decision::KubeletRejection) {
        let node = Some((&*r.node, r.node_uid.as_deref()));
        self.0.pod_warning(&r.pod, &r.uid, node, "RejectedByKubelet", r.pod_note());
        let pod = Some((&r.pod, &*r.uid));
        self.0.node_warning(
            &r.node,
            r.node_uid.as_deref(),
            pod,
            "SchedulingConflict",
            r.node_note(),
        );
    }

    fn record_shortfall(&self, s: &crate::decision::ResourceShortfall) {
        self.0.node_warning(&s.node, s.node_uid.as_deref(), None, "ResourceShortfall", s.note());
    }

    fn record_device_mismatch(&self, m: &crate::decision::DeviceViewMismatch) {
        self.0.node_warning(&m.node, m.node_uid.as_deref(), None, "DeviceViewMismatch", m.note());
    }

    fn record_group(&self, d: &GroupDecision) {
        let outcome = match &d.outcome {
            GroupOutcome::Placed => GroupReportOutcome::Placed {
                placed: d.placed_before + d.placed,
                members: d.placed_before + d.members,
                min_member: d.min_member,
                nodes: d.nodes.len(),
                waiting: d.barrier,
            },
            GroupOutcome::Unschedulable { message } => {
                GroupReportOutcome::Unschedulable { message: message.clone() }
            }
        };
        self.0.group(GroupReport {
            key: d.group.clone(),
            uid: d.uid.as_deref().unwrap_or("").to_string(),
            outcome,
        });
    }
}

/// For scheduler-plugins groups, whose `status` counts running, succeeded
/// and failed members: the group of a pod of ours whose phase changed or
/// that went away, so its status is recounted.
fn member_changed(update: &ClusterUpdate, profiles: &[String]) -> Option<convoy_api::GroupKey> {
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let pod = match update {
        ClusterUpdate::PodUpdated { old, new } if phase(old) != phase(new) => new,
        ClusterUpdate::PodDeleted(pod) => pod,
        _ => return None,
    };
    let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
    let ours = profiles.iter().any(|p| Some(p.as_str()) == scheduler);
    group_key_of(pod).filter(|k| ours && k.api == PodGroupApi::XK8s)
}

/// Runs Convoy against an API server until SIGTERM or a lost lease.
pub async fn serve(config: SchedulerConfig, opts: ServeOptions) -> anyhow::Result<Exit> {
    // A bad certificate is a bad flag: refused before anything connects.
    let tls = match &opts.serving.secure {
        Some(secure) => Some(crate::tls::load(&secure.cert)?),
        None => None,
    };
    let cc = &config.client_connection;
    let kubeconfig = opts
        .kubeconfig
        .clone()
        .or_else(|| (!cc.kubeconfig.is_empty()).then(|| PathBuf::from(&cc.kubeconfig)));
    // Every write that moves or removes a pod (bindings, victims, claims,
    // nominations) goes through this client; the fence cuts it off the
    // moment the lease is lost (convoy_adapters::fence).
    let fence = Fence::new();
    let client =
        convoy_adapters::connect_fenced(kubeconfig.as_deref(), cc.qps, cc.burst, Some(&fence))
            .await
            .context("connecting to the API server")?;
    // As kube-scheduler: leader election and Events have clients of their
    // own, each with its own token bucket (the same qps and burst), so that
    // a burst of bindings never delays a lease renewal past its deadline,
    // nor the Events that explain pending pods.
    let election_client = convoy_adapters::connect(kubeconfig.as_deref(), cc.qps, cc.burst)
        .await
        .context("connecting to the API server (leader election)")?;
    let events_client = convoy_adapters::connect(kubeconfig.as_deref(), cc.qps, cc.burst)
        .await
        .context("connecting to the API server (events)")?;

    let (status, status_task) = StatusWriter::new(
        events_client,
        // Limited as the Events client itself (kube-scheduler's status
        // patches and Events are limited by their clients alone).
        StatusWriterOptions {
            qps: cc.qps,
            burst: cc.burst,
            instance: Some(opts.identity.clone()),
            ..Default::default()
        },
    );
    let metrics = Arc::new(Metrics::new());
    let sink: Arc<dyn DecisionSink> = Arc::new(Fanout(vec![
        Arc::new(LogSink),
        metrics.clone(),
        Arc::new(ApiStatusSink(status.clone())),
    ]));
    let le = config.leader_election.clone();
    let profiles: Vec<String> = config.profiles.iter().map(|p| p.scheduler_name.clone()).collect();
    let binder = ApiBinder::new(client.clone(), MAX_BINDS_IN_FLIGHT).with_identity(&opts.identity);
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: opts.registry.clone(),
        binder: Arc::new(binder.clone()),
        actuator: Arc::new(ApiActuator::new(client.clone(), Some(status.clone()))),
        clock: Arc::new(RealClock),
        sink,
        seed: None,
        framework_metrics: Some(metrics.clone()),
    })?;

    let refresh = {
        let s = scheduler.clone();
        let m = metrics.clone();
        let w = status.clone();
        move || {
            m.sync_queue(s.queue().pending_counts(), &s.queue().incoming());
            m.sync_status_writes_dropped(w.dropped());
            m.sync_dra(s.dra_stats());
        }
    };
    let state = crate::http::HttpState::new(metrics.clone(), scheduler.synced().clone())
        .with_refresh(refresh)
        .reusing_metrics_for(METRICS_REUSE);
    let _servers = start_http(&opts.serving, tls, state, kubeconfig.as_deref()).await?;

    // Without leader election this replica always leads: the sender lives
    // until `serve` returns, so the receiver never reports a lost lease.
    let (_always_leader, always_leader_rx) = watch::channel(true);
    let (leader, lease) = if le.leader_elect {
        let (rx, handle) = convoy_adapters::leader::start(
            election_client,
            LeaderElection {
                namespace: le.resource_namespace.clone(),
                name: le.resource_name.clone(),
                identity: opts.identity.clone(),
                lease_duration: le.lease_duration,
                renew_deadline: le.renew_deadline,
                retry_period: le.retry_period,
            },
        )?;
        // leader_election_master_status{name=<the Lease>}, as client-go's.
        tokio::spawn(metrics.clone().follow_leader(le.resource_name.clone(), rx.clone()));
        (rx, Some(handle))
    } else {
        (always_leader_rx, None)
    };
    // Raised when leading ends, however it ends (lost, released, or never
    // won): from then on the scheduling client sends nothing and abandons
    // what it was sending, on every path out of here (SIGTERM's wait for
    // bindings included).
    tokio::spawn({
        let mut leading = leader.clone();
        let fence = fence.clone();
        async move {
            if leading.wait_for(|l| *l).await.is_ok() {
                let _ = leading.wait_for(|l| !*l).await;
            }
            fence.raise();
            tracing::info!("not leading: API writes fenced");
        }
    });

    let refresh_groups = status.clone();
    let updates = convoy_adapters::cluster_updates_reporting(
        client.clone(),
        WatchOptions {
            streaming_lists: opts.streaming_lists,
            custom_kinds: opts.registry.kinds().to_vec(),
            ..Default::default()
        },
        Some(status.clone()),
    )
    .inspect(move |u| {
        // Claims are written in the version discovery found.
        if let ClusterUpdate::ApisServed(served) = u {
            binder.follow(served);
        }
        if let Some(key) = member_changed(u, &profiles) {
            refresh_groups.refresh_group(&key);
        }
    });
    let exit = scheduler.clone().run_leader(updates, leader, shutdown_signal()).await;
    tracing::info!(?exit, "stopping");

    let margin = le.lease_duration.saturating_sub(le.renew_deadline);
    let lost_lease_flush = LOST_LEASE_FLUSH.min(margin / 2);
    if exit == Exit::LostLease {
        // As kube-scheduler's OnStoppedLeading: scheduling has stopped, the
        // elector has ended and will not write the lease again; return at
        // once so the process exits and restarts as a new candidate.
        // Waiting here for bindings or Events could only delay that.
        // Events and conditions explain decisions already taken; they get
        // at most half the lease's margin, so that they end before a
        // standby may take over.
        let _ = status.flush(lost_lease_flush).await;
        drop(lease);
        return Ok(exit);
    }
    // Let bindings in flight finish while the elector keeps renewing, then
    // flush Events and release the lease. Should the lease be lost
    // meanwhile, the fence has cut the bindings: stop waiting, and flush
    // only as long as after any loss.
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    while (scheduler.binds_in_flight() > 0 || scheduler.preemptions_in_flight() > 0)
        && tokio::time::Instant::now() < deadline
        && !fence.is_raised()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flush = if fence.is_raised() { lost_lease_flush } else { SHUTDOWN_GRACE };
    status.flush(flush).await;
    drop(status_task);
    if let Some(lease) = lease {
        lease.release().await;
    }
    Ok(exit)
}

/// Starts the servers `serving` asks for: the plain one of the deprecated
/// `--http-addr`, and the secure port with its certificate (`tls`, from
/// [`crate::tls::load`], or loaded here) and its TokenReview and
/// SubjectAccessReview clients (their kubeconfigs, else
/// `kubeconfig`, the scheduler's own). Returns the servers' tasks: they
/// serve until aborted or until the runtime ends.
pub async fn start_http(
    serving: &crate::options::Serving,
    tls: Option<(crate::tls::Pair, String)>,
    state: crate::http::HttpState,
    kubeconfig: Option<&std::path::Path>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    if let Some(addr) = serving.plain {
        let (_, task) = crate::http::start(addr, state.clone())
            .await
            .with_context(|| format!("--http-addr {addr}: serving HTTP"))?;
        tasks.push(task);
    }
    if let Some(secure) = &serving.secure {
        let (pair, from) = match tls {
            Some(loaded) => loaded,
            None => crate::tls::load(&secure.cert)?,
        };
        let tls = crate::tls::server_config(pair)?;
        let reviewer = crate::auth::ApiReviewer {
            authentication: review_client(
                "--authentication-kubeconfig",
                secure.authentication_kubeconfig.as_deref(),
                kubeconfig,
            )
            .await?,
            authorization: review_client(
                "--authorization-kubeconfig",
                secure.authorization_kubeconfig.as_deref(),
                kubeconfig,
            )
            .await?,
        };
        let gate = Arc::new(crate::auth::Gate::new(reviewer, secure.always_allow_paths.clone()));
        let (bound, task) =
            crate::http::start_secure(secure.addr, state, tls, gate).await.with_context(|| {
                format!("--bind-address and --secure-port {}: serving HTTPS", secure.addr)
            })?;
        tracing::info!(addr = %bound, certificate = %from, always_allowed = ?secure.always_allow_paths,
            "secure port: bearer tokens reviewed by the API server (TokenReview, SubjectAccessReview)");
        tasks.push(task);
    }
    if tasks.is_empty() {
        tracing::warn!(
            "--secure-port=0 and no --http-addr: /metrics, /healthz, /readyz are not served"
        );
    }
    Ok(tasks)
}

/// A client of its own for reviews: `own`'s kubeconfig (the file of
/// `flag`), else the scheduler's.
async fn review_client(
    flag: &str,
    own: Option<&std::path::Path>,
    scheduler: Option<&std::path::Path>,
) -> anyhow::Result<kube::Client> {
    convoy_adapters::connect(own.or(scheduler), REVIEW_QPS, REVIEW_BURST).await.with_context(|| {
        match own {
            Some(p) => format!("{flag} {}", p.display()),
            None => format!("connecting to the API server for reviews ({flag} not given)"),
        }
    })
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// The default leader-election identity: hostname and pid.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "convoy".to_string());
    format!("{host}_{}", std::process::id())
}
