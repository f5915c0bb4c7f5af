//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics (`tools/leaderelection`, v0.37.2).
//!
//! Hand-rolled rather than `kube-lease-manager` 0.13: that crate writes the
//! lease with server-side apply and models a duration plus grace period,
//! not client-go's three knobs. kube-scheduler's operators know
//! `leaseDuration`, `renewDeadline` and `retryPeriod` and their guarantee,
//! and this module keeps exactly that.
//!
//! # The guarantee
//!
//! At most one candidate acts as leader at a time, with no assumption about
//! clocks agreeing across machines; only each machine's clock *rate* must
//! be roughly right (the margin is `leaseDuration - renewDeadline`).
//!
//! - **Expiry is judged locally, never by the holder's timestamps.** A
//!   candidate remembers the last lease record it saw and when it saw it
//!   (client-go's `observedRecord` and `observedTime`, on the local
//!   monotonic clock). Whenever the record it reads differs from the one it
//!   remembers, it restarts that clock. It takes a lease held by someone
//!   else only once the record has stayed unchanged for the record's
//!   `leaseDurationSeconds` (ours when the record has none). `renewTime`
//!   and `acquireTime` are written for humans and never read, so a holder
//!   whose clock is hours ahead or behind changes nothing.
//! - **A leader gives up before anyone may take over.** The leader renews
//!   every `retryPeriod`. When no renewal has succeeded within
//!   `renewDeadline` of the *start* of the last successful one, or the
//!   lease turns out to be held by someone else, it reports the loss (the
//!   receiver reads `false`) and the election ends. A standby observes a
//!   renewal no earlier than its request was sent, so it cannot take over
//!   before `leaseDuration` after that point, which is later than the
//!   leader's deadline because `renewDeadline < leaseDuration`. A failing
//!   renewal is retried every `retryPeriod` until the deadline: an API
//!   outage shorter than that costs nothing.
//! - **Loss is final.** After losing, the elector never writes the lease
//!   again, not even to release it; the receiver stays `false`. The process
//!   is expected to exit, as kube-scheduler does (`OnStoppedLeading` exits),
//!   and start over as a new candidate with a fresh identity.
//! - **Every write carries the `resourceVersion` just read**, so of two
//!   candidates racing for a free lease exactly one wins (409 for the
//!   other).
//! - [`LeaderHandle::release`] (client-go's `ReleaseOnCancel`) clears
//!   `holderIdentity` while still leading, so a standby takes over at its
//!   next retry instead of waiting a lease duration.
//!
//! # Failover time
//!
//! client-go's candidate only polls, every `retryPeriod` stretched by up
//! to 120 % jitter (2 to 4.4 s with kube-scheduler's defaults): it sees
//! the holder's last renewal up to one poll late, and tries again up to
//! one poll after the lease has expired, so a failover takes the lease
//! duration plus up to two polls. A Convoy candidate also watches its
//! Lease (a `fieldSelector` on its name, which a `resourceNames` rule
//! authorizes): it sees each renewal as it is written, wakes at the moment
//! the record seen last expires, and tries at once when the lease is
//! released or deleted. The rules above are unchanged (expiry is still
//! counted from the local moment a changed record is seen, and seeing it
//! sooner only makes the count start after the renewal was written), so
//! failover takes the lease duration after the holder's last renewal,
//! plus one request. Where the watch is refused (RBAC without `list` and
//! `watch` on the Lease), the candidate polls as client-go does.
//!
//! Leases are not fencing tokens: a renewal request already on the wire
//! when the deadline passes may still land (delaying a standby by at most
//! one more lease duration), and bindings in flight at the moment of loss
//! still complete. Binding's UID precondition and `spec.nodeName` being set
//! once are what make such a brief overlap harmless.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{AdapterError, Result};

/// client-go's `JitterFactor`: a candidate waits between `retryPeriod` and
/// `retryPeriod * (1 + JITTER_FACTOR)` between attempts, and `renewDeadline`
/// must exceed `retryPeriod * JITTER_FACTOR`.
pub const JITTER_FACTOR: f64 = 1.2;

/// Where the lease lives, who we are, and the timing (client-go's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (usually the pod name; must be unique).
    pub identity: String,
    /// How long a standby waits without seeing the lease record change
    /// before it takes the lease over (written to `leaseDurationSeconds`,
    /// rounded up to whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew, counted from the start of
    /// its last successful renewal, before it gives up leading.
    pub renew_deadline: Duration,
    /// How often to try to acquire (with jitter) or renew.
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

    /// Checks what client-go's `NewLeaderElector` checks: positive
    /// durations, `leaseDuration > renewDeadline`, `renewDeadline >
    /// retryPeriod * JitterFactor`, and a namespace, name and identity.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field: &'static str, message: &str| {
            Err(AdapterError::InvalidLeaderElection { field, message: message.to_string() })
        };
        for (field, value) in [
            ("leaseDuration", self.lease_duration),
            ("renewDeadline", self.renew_deadline),
            ("retryPeriod", self.retry_period),
        ] {
            if value.is_zero() {
                return invalid(field, "must be greater than zero");
            }
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("leaseDuration", "must be greater than renewDeadline");
        }
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * JITTER_FACTOR {
            return invalid("renewDeadline", "must be greater than retryPeriod*JitterFactor (1.2)");
        }
        for (field, value) in [
            ("resourceNamespace", &self.namespace),
            ("resourceName", &self.name),
            ("identity", &self.identity),
        ] {
            if value.is_empty() {
                return invalid(field, "must not be empty");
            }
        }
        Ok(())
    }

    /// How long one attempt (a get and a write) may take: client-go gives
    /// its leader-election client a timeout of `renewDeadline / 2`, at
    /// least 1 s, so one hung request cannot use up the whole deadline.
    fn attempt_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX).max(1)
    }
}

/// Stops the election. Dropping it stops the elector without releasing
/// the lease (a standby takes over after a lease duration);
/// [`LeaderHandle::release`] hands it over immediately.
#[derive(Debug)]
pub struct LeaderHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    state: watch::Receiver<bool>,
}

impl LeaderHandle {
    /// Whether this candidate currently leads.
    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Ends the election (client-go's `ReleaseOnCancel`): if still leading,
    /// clears the lease's holder so a standby can take over at once. After a
    /// loss the elector has already ended and nothing is written. The
    /// receivers read `false` and are closed after.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LeaderHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The elector's end of the leadership channel: however the elector ends
/// (lost, released, aborted), receivers read `false` and see the channel
/// closed.
struct Report(watch::Sender<bool>);

impl Drop for Report {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Validates `cfg` and starts campaigning in a background task. The
/// receiver is `true` while this candidate leads; the caller acts only
/// then. When the election ends (the lease is lost, or the handle is
/// released or dropped) it reads `false` and is closed: `changed()` returns
/// an error. A loss is final: the elector has ended, will never write the
/// lease again, and the caller should stop and exit.
pub fn start(
    client: kube::Client,
    cfg: LeaderElection,
) -> Result<(watch::Receiver<bool>, LeaderHandle)> {
    cfg.validate()?;
    let (state, rx) = watch::channel(false);
    let (stop_tx, stop_rx) = oneshot::channel();
    let elector = Elector {
        api: Api::namespaced(client, &cfg.namespace),
        cfg,
        observed: Observed::default(),
    };
    let task = tokio::spawn(elector.run(Report(state), stop_rx));
    Ok((rx.clone(), LeaderHandle { stop: Some(stop_tx), task: Some(task), state: rx }))
}

/// The last lease record seen and when, on the local monotonic clock
/// (client-go's `observedRecord` and `observedTime`).
#[derive(Debug, Default)]
struct Observed {
    record: Option<(LeaseSpec, Instant)>,
}

impl Observed {
    /// Remembers `spec`; the clock restarts only when it differs from the
    /// record seen last.
    fn observe(&mut self, spec: &LeaseSpec, now: Instant) {
        if self.record.as_ref().is_none_or(|(seen, _)| seen != spec) {
            self.record = Some((spec.clone(), now));
        }
    }

    /// Whether the record seen last is still valid at `now`: observed less
    /// than its `leaseDurationSeconds` ago (`default` when it has none).
    fn valid(&self, now: Instant, default: Duration) -> bool {
        self.expiry(default).is_some_and(|expiry| expiry > now)
    }

    /// When the record seen last stops being valid: its `leaseDurationSeconds`
    /// (`default` when it has none) after it was first seen. `None` when
    /// nothing was seen yet.
    fn expiry(&self, default: Duration) -> Option<Instant> {
        let (spec, at) = self.record.as_ref()?;
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(default, Duration::from_secs);
        Some(*at + duration)
    }
}

/// Result of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Someone else holds a lease we must not take yet.
    Other,
}

/// Why leading ended.
enum Ended {
    /// Asked to stop: release the lease.
    Stopped,
    /// Lost: write nothing more.
    Lost(&'static str),
}

struct Elector {
    api: Api<Lease>,
    cfg: LeaderElection,
    observed: Observed,
}

impl Elector {
    async fn run(mut self, state: Report, mut stop: oneshot::Receiver<()>) {
        let Some(acquired) = self.acquire(&mut stop).await else {
            return;
        };
        tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "became leader");
        state.0.send_replace(true);
        match self.lead(acquired, &mut stop).await {
            Ended::Stopped => {
                // Leading until the lease is released: in-flight work was
                // the caller's to finish before stopping us.
                self.release().await;
                drop(state);
            }
            Ended::Lost(why) => {
                // Report first, log after: the caller stops at once.
                drop(state);
                tracing::error!(lease = %self.cfg.name, identity = %self.cfg.identity, why, "leaderelection lost");
            }
        }
    }

    /// Tries every `retry_period` (jittered) until we hold the lease.
    /// Returns when the successful attempt started, or `None` when stopped.
    ///
    /// Between attempts it also watches the Lease (see the module docs,
    /// "Failover time"): a renewal seen on the watch restarts the expiry
    /// clock as soon as it is written, a release or a deletion brings the
    /// next attempt forward to now, and no wait runs past the moment the
    /// record seen last expires. If the watch is refused (no `watch`
    /// verb on the Lease), polling alone still elects, only later.
    async fn acquire(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<Instant> {
        let mut changes = self.watch_lease();
        let mut refused = false;
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = &mut *stop => return None,
                r = tokio::time::timeout(self.cfg.attempt_timeout(), self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(Attempt::Held)) => return Some(started),
                Ok(Ok(Attempt::Other)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(lease = %self.cfg.name, error = %e, "acquiring the lease failed")
                }
                Err(_) => tracing::debug!(lease = %self.cfg.name, "acquiring the lease timed out"),
            }
            let now = Instant::now();
            let poll = now + jittered(self.cfg.retry_period);
            loop {
                // An expiry already past (the attempt failed) waits for the
                // poll: failing attempts are never retried in a tight loop.
                let next = match self.observed.expiry(self.cfg.lease_duration) {
                    Some(expiry) if expiry > now => expiry.min(poll),
                    _ => poll,
                };
                tokio::select! {
                    _ = &mut *stop => return None,
                    () = tokio::time::sleep_until(next) => break,
                    change = changes.next() => match change {
                        Some(Ok(Some(spec))) => {
                            self.observed.observe(&spec, Instant::now());
                            if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
                                break;
                            }
                        }
                        Some(Ok(None)) => break,
                        Some(Err(e)) => {
                            if !std::mem::replace(&mut refused, true) {
                                tracing::info!(lease = %self.cfg.name, error = %e, "watching the lease failed; trying it every retryPeriod only");
                            }
                        }
                        None => changes = futures::stream::pending().boxed(),
                    },
                }
            }
        }
    }

    /// The Lease's record as each change is seen: `Some(spec)` when it is
    /// written, `None` when it is deleted. Errors are the watch's own
    /// (retried with [`crate::backoff`]); the stream does not end.
    fn watch_lease(&self) -> BoxStream<'static, Result<Option<LeaseSpec>, watcher::Error>> {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", self.cfg.name));
        watcher::watcher(self.api.clone(), cfg)
            .backoff(crate::backoff::watch_backoff())
            .filter_map(|event| async move {
                match event {
                    Ok(Event::Apply(lease) | Event::InitApply(lease)) => {
                        Some(Ok(Some(lease.spec.unwrap_or_default())))
                    }
                    Ok(Event::Delete(_)) => Some(Ok(None)),
                    Ok(Event::Init | Event::InitDone) => None,
                    Err(e) => Some(Err(e)),
                }
            })
            .boxed()
    }

    /// Renews every `retry_period` until stopped or until no renewal
    /// succeeds within `renew_deadline` of the start of the last good one.
    async fn lead(&mut self, mut renewed: Instant, stop: &mut oneshot::Receiver<()>) -> Ended {
        loop {
            let deadline = renewed + self.cfg.renew_deadline;
            tokio::select! {
                _ = &mut *stop => return Ended::Stopped,
                () = tokio::time::sleep(self.cfg.retry_period) => {}
            }
            loop {
                let started = Instant::now();
                if started >= deadline {
                    return Ended::Lost("renew deadline passed");
                }
                let give_up = deadline.min(started + self.cfg.attempt_timeout());
                let attempt = tokio::select! {
                    _ = &mut *stop => return Ended::Stopped,
                    r = tokio::time::timeout_at(give_up, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(Ok(Attempt::Held)) => {
                        renewed = started;
                        break;
                    }
                    Ok(Ok(Attempt::Other)) => {
                        return Ended::Lost("lease held by another candidate");
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %self.cfg.name, error = %e, "renewing the lease failed; retrying until the renew deadline");
                    }
                    Err(_) if give_up >= deadline => return Ended::Lost("renew deadline passed"),
                    Err(_) => {
                        tracing::warn!(lease = %self.cfg.name, "renewing the lease timed out; retrying until the renew deadline");
                    }
                }
                tokio::select! {
                    _ = &mut *stop => return Ended::Stopped,
                    () = tokio::time::sleep_until((Instant::now() + self.cfg.retry_period).min(deadline)) => {}
                }
            }
        }
    }

    /// One get-then-write round, as client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.cfg.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(self.cfg.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed.observe(&created.spec.unwrap_or_default(), Instant::now());
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Other),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        self.observed.observe(spec, Instant::now());
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.cfg.identity.as_str());
        if !mine {
            if holder.is_some() && self.observed.valid(Instant::now(), self.cfg.lease_duration) {
                return Ok(Attempt::Other);
            }
            spec.holder_identity = Some(self.cfg.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.cfg.lease_seconds());
        // `lease` still carries the resourceVersion read above: a concurrent
        // writer makes this a 409.
        let written = self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await?;
        self.observed.observe(&written.spec.unwrap_or_default(), Instant::now());
        Ok(Attempt::Held)
    }

    /// Clears the holder if it is still us (client-go's `release`), retrying
    /// on conflict, for at most `renew_deadline`.
    async fn release(&self) {
        let result = tokio::time::timeout(self.cfg.renew_deadline, async {
            loop {
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
                match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    other => return other.map(|_| ()),
                }
            }
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

/// `period` stretched by a random factor in `[0, JITTER_FACTOR)`, as
/// client-go's `wait.Jitter`, so candidates started together spread out.
fn jittered(period: Duration) -> Duration {
    use std::hash::BuildHasher;
    // A fresh RandomState has fresh keys: good enough randomness for jitter.
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    let fraction = (bits >> 11) as f64 / (1u64 << 53) as f64;
    period + period.mul_f64(JITTER_FACTOR * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, seconds: Option<i32>, renew: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: seconds,
            renew_time: Some(MicroTime(renew.parse().expect("timestamp"))),
            ..Default::default()
        }
    }

    #[test]
    fn expiry_counts_from_the_last_change_seen_not_from_renew_time() {
        let t0 = Instant::now();
        let default = Duration::from_secs(15);
        let mut observed = Observed::default();
        assert!(!observed.valid(t0, default), "nothing seen: free");

        // Renewed "a year ago" by the holder's clock: still valid for 10 s
        // from the moment we first saw it.
        let old = spec("a", Some(10), "2025-01-01T00:00:00Z");
        observed.observe(&old, t0);
        assert!(observed.valid(t0 + Duration::from_secs(9), default));
        // Seeing the same record again does not restart the clock.
        observed.observe(&old, t0 + Duration::from_secs(9));
        assert!(!observed.valid(t0 + Duration::from_secs(11), default));

        // A renewal (renewTime moves, even backwards) restarts it.
        let renewed = spec("a", Some(10), "2024-01-01T00:00:00Z");
        observed.observe(&renewed, t0 + Duration::from_secs(11));
        assert!(observed.valid(t0 + Duration::from_secs(20), default));
        assert!(!observed.valid(t0 + Duration::from_secs(22), default));

        // "Renewed next year" expires just the same.
        let future = spec("a", Some(10), "2099-01-01T00:00:00Z");
        observed.observe(&future, t0 + Duration::from_secs(30));
        assert!(observed.valid(t0 + Duration::from_secs(39), default));
        assert!(!observed.valid(t0 + Duration::from_secs(41), default));
    }

    #[test]
    fn a_record_without_duration_uses_ours() {
        let t0 = Instant::now();
        for seconds in [None, Some(0), Some(-5)] {
            let mut observed = Observed::default();
            observed.observe(&spec("a", seconds, "2025-01-01T00:00:00Z"), t0);
            assert!(observed.valid(t0 + Duration::from_secs(14), Duration::from_secs(15)));
            assert!(!observed.valid(t0 + Duration::from_secs(16), Duration::from_secs(15)));
        }
    }

    #[test]
    fn validate_names_the_field() {
        let ok = LeaderElection::new("kube-system", "convoy", "me");
        assert!(ok.validate().is_ok(), "defaults are valid");
        type Change = fn(&mut LeaderElection);
        let cases: [(Change, &str); 7] = [
            (
                |c| c.lease_duration = Duration::ZERO,
                "leaderElection.leaseDuration: must be greater than zero",
            ),
            (
                |c| c.retry_period = Duration::ZERO,
                "leaderElection.retryPeriod: must be greater than zero",
            ),
            (
                |c| c.renew_deadline = c.lease_duration,
                "leaderElection.leaseDuration: must be greater than renewDeadline",
            ),
            (
                |c| c.retry_period = Duration::from_millis(8400),
                "leaderElection.renewDeadline: must be greater than retryPeriod*JitterFactor (1.2)",
            ),
            (|c| c.identity.clear(), "leaderElection.identity: must not be empty"),
            (|c| c.name.clear(), "leaderElection.resourceName: must not be empty"),
            (|c| c.namespace.clear(), "leaderElection.resourceNamespace: must not be empty"),
        ];
        for (change, want) in cases {
            let mut cfg = ok.clone();
            change(&mut cfg);
            let err = cfg.validate().expect_err(want);
            assert_eq!(err.to_string(), want);
        }
        let mut edge = ok.clone();
        edge.retry_period = Duration::from_millis(8300);
        assert!(edge.validate().is_ok(), "10 s > 8.3 s * 1.2");
    }

    #[test]
    fn jitter_stays_within_the_factor() {
        let period = Duration::from_secs(2);
        let waits: Vec<Duration> = (0..200).map(|_| jittered(period)).collect();
        assert!(waits.iter().all(|w| *w >= period && *w < period.mul_f64(1.0 + JITTER_FACTOR)));
        assert!(waits.iter().any(|w| *w != waits[0]), "not constant");
    }
}
