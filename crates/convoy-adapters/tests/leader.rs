//! Leader election against a real API server (one control plane for this
//! binary; each test has its own namespace). Durations are short (lease
//! 2 s, renew deadline 1.5 s, retry 0.3 s) and bounds generous: the machine
//! may be loaded, so the tests assert order and coarse bounds, chosen so
//! that judging expiry by the holder's `renewTime`, or campaigning again
//! after a loss, fails them.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::forwarder::{Forwarder, Mode};
use convoy_adapters::leader::{self, LeaderElection};
use convoy_testenv::TestEnv;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchParams};
use tokio::sync::watch;
use tokio::time::Instant;

const LEASE: &str = "convoy-scheduler";

fn election(ns: &str, identity: &str) -> LeaderElection {
    LeaderElection {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(300),
        ..LeaderElection::new(ns, LEASE, identity)
    }
}

async fn wait_leader(
    rx: &mut watch::Receiver<bool>,
    want: bool,
    timeout: Duration,
) -> Result<Duration> {
    let t0 = Instant::now();
    tokio::time::timeout(timeout, rx.wait_for(|v| *v == want))
        .await
        .with_context(|| format!("leader={want} not reached within {timeout:?}"))??;
    Ok(t0.elapsed())
}

async fn lease_spec(leases: &Api<Lease>) -> Result<LeaseSpec> {
    leases.get(LEASE).await?.spec.context("lease spec")
}

/// A Lease held by `holder`, "renewed" at `renew_time` by its clock.
async fn create_lease(leases: &Api<Lease>, holder: &str, renew_time: Timestamp) -> Result<()> {
    let lease = Lease {
        metadata: ObjectMeta { name: Some(LEASE.into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(2),
            acquire_time: Some(MicroTime(renew_time)),
            renew_time: Some(MicroTime(renew_time)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &lease).await?;
    Ok(())
}

/// Waits until the lease's resourceVersion differs from `since` (a write
/// happened) and returns the new one and when it was seen.
async fn next_write(leases: &Api<Lease>, since: &str) -> Result<(String, Instant)> {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let rv = leases.get(LEASE).await?.metadata.resource_version.unwrap_or_default();
            if rv != since {
                return Ok((rv, Instant::now()));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .context("no write to the lease within 10 s")?
}

/// Asserts that nobody writes the lease for `period`.
async fn assert_untouched(leases: &Api<Lease>, period: Duration) -> Result<()> {
    let before = leases.get(LEASE).await?;
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = leases.get(LEASE).await?;
        ensure!(
            now.metadata.resource_version == before.metadata.resource_version,
            "the lease was written: {:?} became {:?}",
            before.spec,
            now.spec
        );
    }
    Ok(())
}

#[tokio::test]
async fn hands_over_on_release_and_after_an_unchanged_lease_duration() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-handover").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let (mut a_rx, a) = leader::start(client.clone(), election(&ns, "a"))?;
    wait_leader(&mut a_rx, true, Duration::from_secs(5)).await?;
    let (mut b_rx, b) = leader::start(client.clone(), election(&ns, "b"))?;
    // Several renewals later, still exactly one leader.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(*a_rx.borrow() && !*b_rx.borrow(), "a leads, b waits");
    }
    let spec = lease_spec(&leases).await?;
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(2));

    // Release: b takes over at its next retry, well within the lease duration.
    a.release().await;
    assert!(!*a_rx.borrow());
    assert!(a_rx.has_changed().is_err(), "the election is over for a");
    let took = wait_leader(&mut b_rx, true, Duration::from_secs(2)).await?;
    assert!(took < Duration::from_secs(2), "handover took {took:?}");

    // b stops renewing (dropped without release): c takes over once it has
    // seen the lease unchanged for a lease duration.
    let (mut c_rx, c) = leader::start(client.clone(), election(&ns, "c"))?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!*c_rx.borrow(), "c waits while b renews");
    drop(b);
    wait_leader(&mut b_rx, false, Duration::from_secs(1)).await?;
    let took = wait_leader(&mut c_rx, true, Duration::from_secs(6)).await?;
    assert!(took > Duration::from_millis(1000), "c waited for expiry ({took:?})");
    let spec = lease_spec(&leases).await?;
    assert_eq!(spec.holder_identity.as_deref(), Some("c"));
    assert_eq!(spec.lease_transitions, Some(2));
    c.release().await;
    Ok(())
}

/// Under the holder's clock this lease expired an hour ago; a candidate
/// must still wait a lease duration of its own observation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_long_ago_by_the_holders_clock_is_taken_only_after_a_lease_duration()
-> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-past").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let hour_ago = Timestamp::now().checked_sub(SignedDuration::from_hours(1))?;
    create_lease(&leases, "other", hour_ago).await?;

    let t0 = Instant::now();
    let (mut rx, handle) = leader::start(client.clone(), election(&ns, "a"))?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!*rx.borrow(), "taken before a lease duration was observed");
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("other"));
    wait_leader(&mut rx, true, Duration::from_secs(8)).await?;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1900), "took over after {took:?}, before 2 s");
    let spec = lease_spec(&leases).await?;
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(1));
    handle.release().await;
    Ok(())
}

/// Under the holder's clock this lease is valid for another hour; it is
/// taken all the same once it has not changed for a lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_in_the_future_by_the_holders_clock_is_taken_after_a_lease_duration()
-> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-future").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let in_an_hour = Timestamp::now().checked_add(SignedDuration::from_hours(1))?;
    create_lease(&leases, "other", in_an_hour).await?;

    let t0 = Instant::now();
    let (mut rx, handle) = leader::start(client.clone(), election(&ns, "a"))?;
    wait_leader(&mut rx, true, Duration::from_secs(8)).await?;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1900), "took over after {took:?}, before 2 s");
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("a"));
    handle.release().await;
    Ok(())
}

/// A holder that keeps renewing keeps its lease, whatever its clock says
/// (here: a year 2000 clock); once it stops, the candidate takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_keeps_changing_is_never_taken() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-renewing").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let y2k: Timestamp = "2000-01-01T00:00:00Z".parse()?;
    create_lease(&leases, "other", y2k).await?;

    let renewer = {
        let leases = leases.clone();
        tokio::spawn(async move {
            for i in 1i64.. {
                tokio::time::sleep(Duration::from_millis(400)).await;
                let Ok(mut lease) = leases.get(LEASE).await else { continue };
                if let Some(spec) = lease.spec.as_mut() {
                    let t = y2k.checked_add(SignedDuration::from_millis(i)).expect("in range");
                    spec.renew_time = Some(MicroTime(t));
                }
                let _ = leases.replace(LEASE, &PostParams::default(), &lease).await;
            }
        })
    };
    let (mut rx, handle) = leader::start(client.clone(), election(&ns, "a"))?;
    // Three lease durations of renewals: never taken.
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        assert!(!*rx.borrow(), "took a lease that was being renewed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("other"));

    renewer.abort();
    let _ = renewer.await;
    let took = wait_leader(&mut rx, true, Duration::from_secs(8)).await?;
    assert!(took >= Duration::from_millis(1400), "waited a lease duration ({took:?})");
    handle.release().await;
    Ok(())
}

/// Someone else takes the lease (an operator, or a peer): the leader
/// reports the loss at its next renewal and never writes the lease again,
/// even after the intruder's lease has long expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_losing_the_lease_the_elector_never_writes_it_again() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-lost").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let (mut rx, handle) = leader::start(client.clone(), election(&ns, "a"))?;
    wait_leader(&mut rx, true, Duration::from_secs(5)).await?;

    let mut lease = leases.get(LEASE).await?;
    let spec = lease.spec.as_mut().context("lease spec")?;
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(1);
    leases.replace(LEASE, &PostParams::default(), &lease).await?;

    let took = wait_leader(&mut rx, false, Duration::from_secs(3)).await?;
    assert!(took < Duration::from_millis(1500), "noticed at the next renewal ({took:?})");
    // The elector reports `false` and then drops its sender: wait for the
    // close rather than racing it.
    let closed = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
    assert!(matches!(closed, Ok(Err(_))), "the election is over");
    // The intruder's 1 s lease expires many times over; a stays away.
    assert_untouched(&leases, Duration::from_secs(5)).await?;
    assert!(!handle.is_leader());
    // Releasing after a loss writes nothing either.
    handle.release().await;
    assert_untouched(&leases, Duration::from_millis(500)).await?;
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("intruder"));
    Ok(())
}

/// The leader's API server becomes unreachable (connections refused): it
/// reports the loss within the renew deadline, before a standby may take
/// over, and the standby then does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_ends_leading_within_the_renew_deadline() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-unreachable").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let forwarder = Forwarder::start(env).await?;
    let cfg = election(&ns, "a");
    let (mut a_rx, _a) = leader::start(forwarder.client(env).await?, cfg.clone())?;
    wait_leader(&mut a_rx, true, Duration::from_secs(5)).await?;
    let (mut b_rx, _b) = leader::start(client.clone(), election(&ns, "b"))?;

    // Cut right after a renewal: the last successful renewal started
    // before `renewed_seen`.
    let rv = leases.get(LEASE).await?.metadata.resource_version.unwrap_or_default();
    let (_, renewed_seen) = next_write(&leases, &rv).await?;
    forwarder.set(Mode::Refuse);
    let cut = Instant::now();

    wait_leader(&mut a_rx, false, cfg.renew_deadline + Duration::from_secs(2)).await?;
    let lost = Instant::now();
    let b_led_first = *b_rx.borrow();
    assert!(!b_led_first, "the standby took over before the leader stopped");
    assert!(
        lost - cut <= cfg.renew_deadline + Duration::from_millis(700),
        "loss reported {:?} after the cut (renew deadline {:?})",
        lost - cut,
        cfg.renew_deadline
    );
    assert!(
        lost < renewed_seen + cfg.lease_duration,
        "loss reported {:?} after the last renewal was seen (lease {:?})",
        lost - renewed_seen,
        cfg.lease_duration
    );
    wait_leader(&mut b_rx, true, Duration::from_secs(6)).await?;
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("b"));
    Ok(())
}

/// The leader's requests hang (a black hole, not a refusal): the same
/// deadline holds; and once the network is back, the replica that lost
/// never writes the lease again, though it still names it as holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_api_server_ends_leading_and_the_loser_stays_away() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-hanging").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let forwarder = Forwarder::start(env).await?;
    let cfg = election(&ns, "a");
    let (mut rx, handle) = leader::start(forwarder.client(env).await?, cfg.clone())?;
    wait_leader(&mut rx, true, Duration::from_secs(5)).await?;

    let rv = leases.get(LEASE).await?.metadata.resource_version.unwrap_or_default();
    let (_, renewed_seen) = next_write(&leases, &rv).await?;
    forwarder.set(Mode::BlackHole);
    let cut = Instant::now();
    wait_leader(&mut rx, false, cfg.renew_deadline + Duration::from_secs(2)).await?;
    let lost = Instant::now();
    assert!(lost - cut <= cfg.renew_deadline + Duration::from_millis(700), "{:?}", lost - cut);
    assert!(lost < renewed_seen + cfg.lease_duration, "{:?}", lost - renewed_seen);

    // Network back. The lease still names "a" as holder: a candidate that
    // campaigned again would take it as its own at once.
    forwarder.set(Mode::Forward);
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("a"));
    assert_untouched(&leases, Duration::from_secs(4)).await?;
    handle.release().await;
    assert_untouched(&leases, Duration::from_millis(500)).await?;
    Ok(())
}

/// An outage shorter than the renew deadline costs nothing: no loss, and
/// the leader renews once the API server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_renew_deadline_costs_nothing() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-blip").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let forwarder = Forwarder::start(env).await?;
    // More room than the other tests: a 1 s outage against a 3 s deadline.
    let cfg = LeaderElection {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
        ..LeaderElection::new(&ns, LEASE, "a")
    };
    let (mut rx, handle) = leader::start(forwarder.client(env).await?, cfg)?;
    wait_leader(&mut rx, true, Duration::from_secs(5)).await?;
    let (b_rx, _b) = leader::start(client.clone(), election(&ns, "b"))?;

    let rv = leases.get(LEASE).await?.metadata.resource_version.unwrap_or_default();
    let (rv, _) = next_write(&leases, &rv).await?;
    forwarder.set(Mode::Refuse);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = leases.get(LEASE).await?.metadata.resource_version.unwrap_or_default();
    assert_eq!(during, rv, "no renewal got through the outage");
    forwarder.set(Mode::Forward);

    let (_, back) = next_write(&leases, &rv).await?;
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("a"));
    // Leading throughout, and for a while after.
    while back.elapsed() < Duration::from_secs(3) {
        assert!(*rx.borrow() && !rx.has_changed()?, "a stopped leading");
        assert!(!*b_rx.borrow(), "b took over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.release().await;
    Ok(())
}

/// A standby watches the Lease: it takes over a lease duration after the
/// holder's last write, not a retry period or two later, and at once when
/// the holder releases it. Its retry period (2 s, up to 4.4 s with
/// jitter) is longer than the margins here, so a standby that only polled
/// would fail both bounds most of the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_lease_duration_after_the_last_write_and_at_once_on_release()
-> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-watch").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    create_lease(&leases, "other", Timestamp::now()).await?;
    let cfg = LeaderElection {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_millis(2500),
        retry_period: Duration::from_secs(2),
        ..LeaderElection::new(&ns, LEASE, "b")
    };
    // The holder renews every 250 ms for 3 s, then stops (a SIGKILL).
    let renew = |leases: Api<Lease>| async move {
        let mut last = Instant::now();
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let mut lease = leases.get(LEASE).await?;
            let spec = lease.spec.as_mut().context("lease spec")?;
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            leases.replace(LEASE, &PostParams::default(), &lease).await?;
            last = Instant::now();
        }
        anyhow::Ok(last)
    };
    let (mut rx, handle) = leader::start(client.clone(), cfg.clone())?;
    let last = renew(leases.clone()).await?;
    assert!(!*rx.borrow(), "took a lease that was being renewed");
    // The record says 2 s (`create_lease`): expiry is judged by it.
    wait_leader(&mut rx, true, Duration::from_secs(8)).await?;
    let took = last.elapsed();
    assert!(took >= Duration::from_millis(1900), "took over {took:?} after the last write");
    assert!(
        took <= Duration::from_millis(3000),
        "took over {took:?} after the last write, more than the 2 s lease plus 1 s"
    );
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("b"));

    // b releases with c waiting: c leads well within its retry period.
    let (mut c_rx, c) =
        leader::start(client.clone(), LeaderElection { identity: "c".into(), ..cfg })?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!*c_rx.borrow(), "c waits while b leads");
    let released = Instant::now();
    handle.release().await;
    wait_leader(&mut c_rx, true, Duration::from_secs(5)).await?;
    let took = released.elapsed();
    assert!(took <= Duration::from_millis(1000), "c led {took:?} after the release");
    c.release().await;
    Ok(())
}

/// A candidate allowed only `get`, `create` and `update` on Leases
/// (kube-scheduler's own RBAC has no `watch`): the refused watch does not
/// block the election; it polls, takes the lease once it expires and keeps
/// renewing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_may_not_watch_leases_still_takes_over_by_polling() -> Result<()> {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "leader-no-watch").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let user = "convoy-leader-no-watch";
    let meta = ObjectMeta { name: Some(user.into()), ..Default::default() };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: vec!["get".into(), "create".into(), "update".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(client.clone(), &ns).create(&PostParams::default(), &role).await?;
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: user.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.into(),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    let limited = kube::Client::try_from(config)?;
    let refused = Api::<Lease>::namespaced(limited.clone(), &ns).list(&Default::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "the test user may list leases: {refused:?}"
    );

    create_lease(&leases, "other", Timestamp::now()).await?;
    let t0 = Instant::now();
    let (mut rx, handle) = leader::start(limited, election(&ns, "a"))?;
    wait_leader(&mut rx, true, Duration::from_secs(8)).await?;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1900), "took over after {took:?}, before 2 s");
    let (rv, _) = next_write(&leases, "").await?;
    next_write(&leases, &rv).await.context("a stopped renewing")?;
    assert!(*rx.borrow(), "a leads");
    assert_eq!(lease_spec(&leases).await?.holder_identity.as_deref(), Some("a"));
    handle.release().await;
    Ok(())
}

/// The chart's Role lets a replica watch its own Lease (the standby's
/// watch: a `fieldSelector` on the name) and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_role_lets_a_standby_watch_its_own_lease_only() -> Result<()> {
    let (name, namespace) = ("convoy-lease", "leader-chart");
    let client = common::chart_client(TestEnv::shared(), name, namespace).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let own = ListParams::default().fields(&format!("metadata.name={name}"));
    leases.list(&own).await.context("the chart's Role does not let a replica list its Lease")?;
    // The request is refused (403) or accepted before the first event.
    let _accepted = leases
        .watch(&WatchParams::default().fields(&format!("metadata.name={name}")), "0")
        .await
        .context("the chart's Role does not let a replica watch its Lease")?;
    let other = leases.list(&ListParams::default()).await;
    assert!(
        matches!(&other, Err(kube::Error::Api(s)) if s.code == 403),
        "the chart's Role lets a replica list every Lease: {other:?}"
    );
    Ok(())
}

#[tokio::test]
async fn start_rejects_invalid_timing_naming_the_field() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let cfg = LeaderElection {
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_secs(2),
        ..LeaderElection::new("default", LEASE, "a")
    };
    let err = leader::start(client, cfg).err().context("accepted an invalid configuration")?;
    assert_eq!(
        err.to_string(),
        "leaderElection.renewDeadline: must be greater than retryPeriod*JitterFactor (1.2)"
    );
    Ok(())
}
