//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics (`tools/leaderelection`).
//!
//! Hand-rolled (~200 lines) rather than `kube-lease-manager` 0.13: that
//! crate works with kube 5, but it writes the lease with server-side apply
//! and models a duration plus grace period, not client-go's three knobs.
//! kube-scheduler's operators know `leaseDuration`, `renewDeadline` and
//! `retryPeriod` and their guarantee (a leader stops before its lease can
//! expire), and this is all the code it takes to keep exactly that.
//!
//! - A candidate acquires the lease when it does not exist, has no holder,
//!   or has expired (`renewTime + leaseDurationSeconds` has passed; this
//!   reads the holder's clock, so clocks must be roughly in sync).
//! - The leader renews every `retry_period`. When no renewal has succeeded
//!   for `renew_deadline`, or the lease turns out to be held by someone
//!   else, it reports `false` at once and becomes a candidate again. With
//!   `renew_deadline < lease_duration` it stops before anyone else may
//!   take over. Leases are not fencing: binding's UID precondition and
//!   `spec.nodeName` being set once are what make a brief overlap harmless.
//! - Every write is a replace carrying the `resourceVersion` just read, so
//!   of two candidates racing for a free lease exactly one wins (409 for
//!   the other).
//! - [`LeaderHandle::release`] clears `holderIdentity` so a standby takes
//!   over at its next retry instead of waiting for expiry.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where the lease lives, who we are, and the timing (client-go's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (usually the pod name; must be unique).
    pub identity: String,
    /// How long a lease is valid after its last renewal, for standbys
    /// (written to `leaseDurationSeconds`, rounded up to whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderElection {
    /// kube-scheduler's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX).max(1)
    }
}

/// Stops the election. Dropping it stops renewing at once without
/// releasing the lease (a standby takes over when it expires);
/// [`LeaderHandle::release`] hands it over immediately.
#[derive(Debug)]
pub struct LeaderHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    state: Arc<watch::Sender<bool>>,
}

impl LeaderHandle {
    /// Whether this candidate currently leads.
    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Stops the election and, if leading, clears the lease's holder so a
    /// standby can take over at once. The receiver reads `false` after.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.state.send_replace(false);
    }
}

impl Drop for LeaderHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.state.send_replace(false);
    }
}

/// Starts campaigning in a background task. The receiver is `true` while
/// this candidate leads; the caller schedules only then. After losing the
/// lease the task keeps campaigning, so the value may become `true` again.
pub fn start(client: kube::Client, cfg: LeaderElection) -> (watch::Receiver<bool>, LeaderHandle) {
    let (state, rx) = watch::channel(false);
    let state = Arc::new(state);
    let (stop_tx, stop_rx) = oneshot::channel();
    let elector = Elector { api: Api::namespaced(client, &cfg.namespace), cfg };
    let task = tokio::spawn(elector.run(Arc::clone(&state), stop_rx));
    (rx, LeaderHandle { stop: Some(stop_tx), task: Some(task), state })
}

/// Result of one attempt.
enum Attempt {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Someone else holds a valid lease.
    Other,
}

struct Elector {
    api: Api<Lease>,
    cfg: LeaderElection,
}

impl Elector {
    async fn run(self, state: Arc<watch::Sender<bool>>, mut stop: oneshot::Receiver<()>) {
        let id = self.cfg.identity.as_str();
        loop {
            // Candidate: try every retry period until we hold the lease.
            loop {
                let held = tokio::select! {
                    _ = &mut stop => return,
                    r = self.try_acquire_or_renew() => matches!(r, Ok(Attempt::Held)),
                };
                if held {
                    break;
                }
                tokio::select! {
                    _ = &mut stop => return,
                    () = tokio::time::sleep(self.cfg.retry_period) => {}
                }
            }
            tracing::info!(lease = %self.cfg.name, identity = id, "became leader");
            state.send_replace(true);

            // Leader: renew every retry period until the deadline passes.
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    _ = &mut stop => {
                        self.release().await;
                        state.send_replace(false);
                        return;
                    }
                    () = tokio::time::sleep(self.cfg.retry_period) => {}
                }
                let deadline = renewed + self.cfg.renew_deadline;
                let attempt = tokio::select! {
                    _ = &mut stop => {
                        self.release().await;
                        state.send_replace(false);
                        return;
                    }
                    r = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(Ok(Attempt::Held)) => renewed = Instant::now(),
                    Ok(Ok(Attempt::Other)) => {
                        tracing::warn!(lease = %self.cfg.name, identity = id, "lease taken by another candidate");
                        break;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %self.cfg.name, error = %e, "renewing the lease failed");
                        if Instant::now() >= deadline {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            tracing::warn!(lease = %self.cfg.name, identity = id, "leadership lost");
            state.send_replace(false);
        }
    }

    /// One get-then-write round, as client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.cfg.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(self.cfg.lease_seconds()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Other),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.cfg.identity.as_str());
        if !mine {
            if holder.is_some() && !self.expired(spec, now) {
                return Ok(Attempt::Other);
            }
            spec.holder_identity = Some(self.cfg.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.cfg.lease_seconds());
        // `lease` still carries the resourceVersion read above: a concurrent
        // writer makes this a 409.
        self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await?;
        Ok(Attempt::Held)
    }

    fn expired(&self, spec: &LeaseSpec, now: Timestamp) -> bool {
        let Some(MicroTime(renewed)) = spec.renew_time else {
            return true;
        };
        let seconds = spec.lease_duration_seconds.unwrap_or_else(|| self.cfg.lease_seconds());
        renewed + SignedDuration::from_secs(i64::from(seconds)) < now
    }

    /// Clears the holder if it is still us (client-go's `release`).
    async fn release(&self) {
        let result = tokio::time::timeout(self.cfg.renew_deadline, async {
            let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
                return Ok(());
            }
            let now = MicroTime(Timestamp::now());
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await.map(|_| ())
        })
        .await;
        match result {
            Ok(Ok(())) => tracing::info!(lease = %self.cfg.name, "released the lease"),
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.cfg.name, error = %e, "releasing the lease failed")
            }
            Err(_) => tracing::warn!(lease = %self.cfg.name, "releasing the lease timed out"),
        }
    }
}
