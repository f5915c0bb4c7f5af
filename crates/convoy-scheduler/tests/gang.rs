//! Gang scheduling on the embedded cluster: the whole scheduler, both
//! PodGroup APIs, pods created before and after their group.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{Clock, FakeClock, GroupKey, PodGroupApi};
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::{Decision, DecisionSink, GroupDecision, GroupOutcome, LogSink};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// Records group decisions (and logs everything).
#[derive(Default)]
struct Groups(Mutex<Vec<GroupDecision>>);

impl DecisionSink for Groups {
    fn record(&self, d: &Decision) {
        LogSink.record(d);
    }
    fn record_group(&self, d: &GroupDecision) {
        LogSink.record_group(d);
        self.0.lock().unwrap().push(d.clone());
    }
}

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: convoy-scheduler
  pluginConfig:
  - name: GangScheduling
    args: {starvationThresholdSeconds: 5, starvationMaxHoldSeconds: 600, podGroupBackoffJitterMilliseconds: 0}
";

fn scheduler_on(cluster: &Arc<EmbeddedCluster>, sink: Arc<Groups>) -> (Arc<Scheduler>, FakeClock) {
    let clock = FakeClock::new();
    let known = convoy_config::KnownPlugins::new(convoy_scheduler::registry().names());
    let config = convoy_config::parse_str(CONFIG, "gang.yaml", &known).unwrap();
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink,
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap();
    (scheduler, clock)
}

fn group_json(api: PodGroupApi, name: &str, min: u32) -> serde_json::Value {
    match api {
        PodGroupApi::XK8s => json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": min}
        }),
        PodGroupApi::Upstream => json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}
        }),
    }
}

fn member(api: PodGroupApi, group: &str, name: &str, cpu: &str) -> Pod {
    let b = PodBuilder::new(name).cpu(cpu);
    match api {
        PodGroupApi::XK8s => b.pod_group(group),
        PodGroupApi::Upstream => b.scheduling_group(group),
    }
    .build()
}

fn bound_in(cluster: &EmbeddedCluster, prefix: &str) -> usize {
    cluster
        .pods()
        .iter()
        .filter(|p| p.metadata.name.as_deref().unwrap_or("").starts_with(prefix))
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

fn assert_invariant(cluster: &EmbeddedCluster) {
    let partial = convoy_gang::invariant::partial_groups(&cluster.pods(), &cluster.pod_groups());
    assert!(partial.is_empty(), "groups bound below minMember: {partial:?}");
}

const APIS: [PodGroupApi; 2] = [PodGroupApi::XK8s, PodGroupApi::Upstream];

/// 8 pods of minMember 8 where only 7 fit: nothing is bound, one group
/// decision explains it; a new node: all 8 bind together.
#[tokio::test]
async fn all_or_nothing_then_all_after_node_added() {
    for api in APIS {
        for group_first in [true, false] {
            let nodes =
                (0..7).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
            let (cluster, mut updates) =
                EmbeddedCluster::new(Objects { nodes, ..Default::default() });
            let sink = Arc::new(Groups::default());
            let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
            let pods: Vec<Pod> =
                (0..8).map(|i| member(api, "train", &format!("w{i}"), "800m")).collect();
            if group_first {
                cluster.apply_pod_group(&group_json(api, "train", 8)).unwrap();
            }
            for p in pods {
                cluster.add_pod(p).unwrap();
            }
            scheduler.run_until_idle(&mut updates, &clock).await;
            if !group_first {
                // Without the PodGroup the pods wait (gated), never bind alone.
                assert_eq!(cluster.bound_count(), 0);
                assert_eq!(scheduler.queue().pending_counts().gated, 8, "{api:?}");
                cluster.apply_pod_group(&group_json(api, "train", 8)).unwrap();
                scheduler.run_until_idle(&mut updates, &clock).await;
            }
            assert_eq!(cluster.bound_count(), 0, "{api:?} group_first={group_first}");
            assert_invariant(&cluster);
            {
                let groups = sink.0.lock().unwrap();
                let last = groups.last().expect("a group decision");
                let GroupOutcome::Unschedulable { message } = &last.outcome else { panic!() };
                assert!(message.starts_with("7/8 pods fit (minMember 8): default/w"), "{message}");
                assert!(
                    message.contains("0/7 nodes are available: 7 Insufficient cpu."),
                    "{message}"
                );
            }
            // Nothing stays reserved or assumed.
            assert_eq!(scheduler.cache().pod_count(), 0);

            cluster.add_node(NodeBuilder::new("n7").cpu("1").build()).unwrap();
            clock.advance(Duration::from_secs(20));
            scheduler.run_until_idle(&mut updates, &clock).await;
            assert_eq!(bound_in(&cluster, "w"), 8, "{api:?} group_first={group_first}");
            assert_invariant(&cluster);
            scheduler.cache().check_invariants().unwrap();
        }
    }
}

/// Two groups that each need 60 % of the cluster: exactly one is placed;
/// once its pods are gone the other one is placed whole.
#[tokio::test]
async fn two_competing_groups_never_deadlock() {
    for api in APIS {
        let nodes = (0..10).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
        let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
        let sink = Arc::new(Groups::default());
        let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
        cluster.apply_pod_group(&group_json(api, "a", 6)).unwrap();
        cluster.apply_pod_group(&group_json(api, "b", 6)).unwrap();
        // Interleaved creation: the queue sees a and b members alternately.
        for i in 0..6 {
            cluster.add_pod(member(api, "a", &format!("a{i}"), "800m")).unwrap();
            cluster.add_pod(member(api, "b", &format!("b{i}"), "800m")).unwrap();
        }
        scheduler.run_until_idle(&mut updates, &clock).await;
        let (a, b) = (bound_in(&cluster, "a"), bound_in(&cluster, "b"));
        assert!((a, b) == (6, 0) || (a, b) == (0, 6), "{api:?}: a={a} b={b}");
        assert_invariant(&cluster);
        let (winner, loser) = if a == 6 { ("a", "b") } else { ("b", "a") };
        for i in 0..6 {
            cluster.delete_pod("default", &format!("{winner}{i}")).unwrap();
        }
        clock.advance(Duration::from_secs(20));
        scheduler.run_until_idle(&mut updates, &clock).await;
        assert_eq!(bound_in(&cluster, loser), 6, "{api:?}");
        assert_invariant(&cluster);
    }
}

/// Members beyond minMember: the group is placed with those that fit, the
/// rest are scheduled one by one later; a late member binds alone.
#[tokio::test]
async fn late_members_are_scheduled_alone() {
    let nodes = (0..3).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    cluster.apply_pod_group(&group_json(PodGroupApi::XK8s, "g", 2)).unwrap();
    for i in 0..4 {
        cluster.add_pod(member(PodGroupApi::XK8s, "g", &format!("m{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "m"), 3);
    cluster.add_node(NodeBuilder::new("n3").cpu("1").build()).unwrap();
    clock.advance(Duration::from_secs(20));
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "m"), 4);
    let placed: Vec<_> = sink.0.lock().unwrap().iter().map(|d| d.outcome.clone()).collect();
    assert_eq!(placed, vec![GroupOutcome::Placed], "one group attempt, then late members alone");
}

/// A member bound before the scheduler saw it (a restarted scheduler lists
/// the pending members of a group before its bound one) completes the
/// quorum: the pending members PreEnqueue held are placed. Found by the
/// gang chaos test: without it the group stayed 1/4 bound.
#[tokio::test]
async fn a_bound_member_seen_last_completes_the_quorum() {
    let nodes = (0..4).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    cluster.apply_pod_group(&group_json(PodGroupApi::XK8s, "g", 4)).unwrap();
    for i in 0..3 {
        cluster.add_pod(member(PodGroupApi::XK8s, "g", &format!("m{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(scheduler.queue().pending_counts().gated, 3, "3/4 members: held");
    let bound = PodBuilder::new("m3").cpu("800m").pod_group("g").node("n3").build();
    cluster.add_pod(bound).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "m"), 4);
    assert_invariant(&cluster);
}

/// A group whose pods name different schedulers is rejected with a clear
/// reason and never placed.
#[tokio::test]
async fn mixed_schedulers_are_rejected() {
    let nodes = vec![NodeBuilder::new("n").cpu("8").build()];
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    cluster.apply_pod_group(&group_json(PodGroupApi::Upstream, "g", 2)).unwrap();
    cluster.add_pod(member(PodGroupApi::Upstream, "g", "p0", "100m")).unwrap();
    let mut other = member(PodGroupApi::Upstream, "g", "p1", "100m");
    other.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
    cluster.add_pod(other).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 0);
    let key = GroupKey::new(PodGroupApi::Upstream, "default", "g");
    let st = scheduler.gang().status(&key).unwrap();
    assert_eq!(st.schedulers.len(), 2);
    // Reported once, as the group's decision (its Event on an API server).
    let messages: Vec<String> = sink
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|d| match &d.outcome {
            GroupOutcome::Unschedulable { message } => message.clone(),
            GroupOutcome::Placed => "placed".into(),
        })
        .collect();
    assert_eq!(
        messages,
        [
            "pod group default/g is rejected: its pods name different schedulers (convoy-scheduler, default-scheduler)"
        ]
    );
}

/// Starvation: a 4-pod group behind a stream of single pods that take every
/// freed slot. Once it has waited past the threshold, the guard holds the
/// singles back and the group is placed within a bounded number of rounds.
#[tokio::test]
async fn starving_group_is_placed_within_bound() {
    let nodes = (0..4).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    // The cluster is full of singles.
    for i in 0..4 {
        cluster.add_pod(PodBuilder::new(&format!("s{i}")).cpu("800m").build()).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 4);
    cluster.apply_pod_group(&group_json(PodGroupApi::XK8s, "big", 4)).unwrap();
    for i in 0..4 {
        cluster.add_pod(member(PodGroupApi::XK8s, "big", &format!("g{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    // Each round one single finishes and a new one arrives.
    let mut next = 4;
    let mut rounds = 0;
    let mut running: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    while bound_in(&cluster, "g") < 4 {
        rounds += 1;
        assert!(rounds <= 12, "the group was not placed within 12 rounds");
        if let Some(done) = running.iter().position(|n| {
            cluster.pod("default", n).is_some_and(|p| p.spec.as_ref().unwrap().node_name.is_some())
        }) {
            let name = running.remove(done);
            cluster.delete_pod("default", &name).unwrap();
        }
        let name = format!("s{next}");
        next += 1;
        cluster.add_pod(PodBuilder::new(&name).cpu("800m").build()).unwrap();
        running.push(name);
        clock.advance(Duration::from_secs(2));
        scheduler.run_until_idle(&mut updates, &clock).await;
        assert_invariant(&cluster);
    }
    // Threshold 5 s at 2 s per round: the guard starts by round 3; four
    // singles must then finish: placed by round 3 + 4.
    assert!(rounds <= 8, "placed after {rounds} rounds");
    // The held singles run again once the group is placed.
    let pending_singles = running.iter().filter(|n| {
        cluster.pod("default", n).is_some_and(|p| p.spec.as_ref().unwrap().node_name.is_none())
    });
    assert!(pending_singles.count() >= 1);
    scheduler.cache().check_invariants().unwrap();
}

/// What [`gang_in_a_stream`] saw.
struct StreamRun {
    /// Seconds from the gang's creation to its last member bound.
    waited: u64,
    /// Single pods bound while the gang waited.
    bound_while_waiting: usize,
    /// ... of them, on the nodes held for it (backfill on held nodes).
    bound_on_held: usize,
    /// Mean GPU utilization after the first 10 s.
    utilization: f64,
}

/// The setting of docs/gang.md: 16 nodes of 8 GPUs kept full by a stream
/// of 1-GPU pods (each lives 4 to 12 s once bound, demand 10 % above
/// capacity), and a gang of 4 pods of 8 GPUs (upstream PodGroup, minCount
/// 4) at the same priority, arriving at 20 s. One round per simulated
/// second. With `deadlines`, each single declares its lifetime as
/// `activeDeadlineSeconds` and gets `status.startTime` the second it is
/// bound (as a kubelet would), so the ones that end before the gang can
/// land may use its held nodes.
async fn gang_in_a_stream(deadlines: bool) -> StreamRun {
    let nodes = (0..16)
        .map(|i| {
            NodeBuilder::new(&format!("n{i}")).cpu("64").allocatable("nvidia.com/gpu", "8").build()
        })
        .collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    let mut rng = convoy_api::testing::TestRng(7);
    let single = |name: &str, life: u64| {
        let b = PodBuilder::new(name).cpu("100m").resource("nvidia.com/gpu", "1");
        if deadlines { b.active_deadline(life as i64).build() } else { b.build() }
    };
    let gang = GroupKey::new(PodGroupApi::Upstream, "default", "big");
    // name -> (lifetime, round bound)
    let mut singles: std::collections::BTreeMap<String, (u64, Option<u64>)> = Default::default();
    let mut next = 0;
    let mut utilization = Vec::new();
    let (mut gang_at, mut placed_at) = (None, None);
    let (mut bound_while_waiting, mut bound_on_held) = (0, 0);
    for round in 0..80u64 {
        // Finished singles go; the stream tops demand up to 141 (128 GPUs + 10 %).
        let done: Vec<String> = singles
            .iter()
            .filter(|(_, (life, at))| at.is_some_and(|at| round >= at + life))
            .map(|(n, _)| n.clone())
            .collect();
        for name in done {
            cluster.delete_pod("default", &name).unwrap();
            singles.remove(&name);
        }
        while singles.len() < 141 {
            let name = format!("s{next}");
            next += 1;
            let life = 4 + rng.below(9) as u64;
            cluster.add_pod(single(&name, life)).unwrap();
            singles.insert(name, (life, None));
        }
        if round == 20 {
            cluster.apply_pod_group(&group_json(PodGroupApi::Upstream, "big", 4)).unwrap();
            for i in 0..4 {
                let mut m = member(PodGroupApi::Upstream, "big", &format!("g{i}"), "1");
                let c = &mut m.spec.as_mut().unwrap().containers[0];
                c.resources.as_mut().unwrap().requests.as_mut().unwrap().insert(
                    "nvidia.com/gpu".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".into()),
                );
                cluster.add_pod(m).unwrap();
            }
            gang_at = Some(round);
        }
        // The nodes held this round (once the gang starves).
        let held = match scheduler.gang().reservation_in_force(clock.now()) {
            Some((starving, hold)) if starving.key == gang => hold.nodes,
            _ => Default::default(),
        };
        scheduler.run_until_idle(&mut updates, &clock).await;
        assert_invariant(&cluster);
        for (name, (_, at)) in singles.iter_mut() {
            let Some(pod) = cluster.pod("default", name) else { continue };
            let Some(node) = pod.spec.as_ref().unwrap().node_name.clone() else { continue };
            if at.is_some() {
                continue;
            }
            *at = Some(round);
            if gang_at.is_some() && placed_at.is_none() {
                bound_while_waiting += 1;
                bound_on_held += usize::from(held.contains(node.as_str()));
            }
            if deadlines {
                let mut started = (*pod).clone();
                let now = k8s_openapi::jiff::Timestamp::from_nanosecond(clock.wall()).unwrap();
                started.status.get_or_insert_with(Default::default).start_time =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
                cluster.update_pod(started).unwrap();
            }
        }
        let gpus: usize =
            singles.values().filter(|(_, at)| at.is_some()).count() + 8 * bound_in(&cluster, "g");
        utilization.push(gpus as f64 / 128.0);
        if placed_at.is_none() && bound_in(&cluster, "g") == 4 {
            placed_at = Some(round);
        }
        clock.advance(Duration::from_secs(1));
    }
    scheduler.cache().check_invariants().unwrap();
    let (gang_at, placed_at) = (gang_at.unwrap(), placed_at.expect("the gang was never placed"));
    let utilization = utilization[10..].iter().sum::<f64>() / (utilization.len() - 10) as f64;
    let run =
        StreamRun { waited: placed_at - gang_at, bound_while_waiting, bound_on_held, utilization };
    eprintln!(
        "deadlines {deadlines}: gang placed {} s after its creation; {} singles bound meanwhile, {} on its held nodes; mean GPU utilization {:.1} %",
        run.waited,
        run.bound_while_waiting,
        run.bound_on_held,
        100.0 * run.utilization
    );
    run
}

/// Reservation and backfill (docs/gang.md): the gang must be bound, whole,
/// within the stated bound (threshold + the longest lifetime of a pod it
/// waits for + one round: 5 + 12 + 1 s), and the stream must keep being
/// placed on the other nodes meanwhile. Without deadlines nothing may use
/// the held nodes.
#[tokio::test]
async fn a_starving_gang_lands_within_its_bound_while_the_rest_backfills() {
    let run = gang_in_a_stream(false).await;
    assert!(run.waited <= 5 + 12 + 1, "the gang waited {} s, over its bound of 18 s", run.waited);
    assert!(run.bound_while_waiting > 0, "nothing was backfilled while the gang waited");
    assert_eq!(run.bound_on_held, 0, "a pod with no declared end used a held node");
}

/// The same stream with declared deadlines: pods that end before the gang
/// can land use its held nodes, the gang still lands within the same
/// bound, and the GPUs are busier than without the deadlines.
#[tokio::test]
async fn pods_that_end_in_time_backfill_the_held_nodes_within_the_same_bound() {
    let with = gang_in_a_stream(true).await;
    let without = gang_in_a_stream(false).await;
    assert!(with.waited <= 5 + 12 + 1, "the gang waited {} s, over its bound of 18 s", with.waited);
    assert!(with.bound_on_held > 0, "no pod backfilled a held node");
    assert!(
        with.utilization > without.utilization,
        "utilization {:.3} with deadlines, {:.3} without",
        with.utilization,
        without.utilization
    );
}

/// Multi-level topology: a group requires one block (upstream's
/// `schedulingConstraints.topology`, or the annotation for
/// scheduler-plugins' API) and prefers one rack, then one NVLink domain
/// (`convoy.dev/preferred-topology`). Two blocks of two racks of two NVLink
/// domains of two nodes (one member per node). It lands in the narrowest
/// level that holds it whole: two members in one NVLink domain, three in
/// one rack, and five, which no rack holds, anywhere in one block.
#[tokio::test]
async fn a_group_lands_in_the_narrowest_preferred_domain_that_holds_it() {
    for api in APIS {
        let mut nodes = Vec::new();
        for i in 0..16 {
            nodes.push(
                NodeBuilder::new(&format!("n{i:02}"))
                    .cpu("1")
                    .label("block", &format!("b{}", i / 8))
                    .label("rack", &format!("r{}", i / 4))
                    .label("nvlink", &format!("d{}", i / 2))
                    .build(),
            );
        }
        let labels: std::collections::BTreeMap<String, (String, String, String)> = (0..16)
            .map(|i| {
                (
                    format!("n{i:02}"),
                    (format!("b{}", i / 8), format!("r{}", i / 4), format!("d{}", i / 2)),
                )
            })
            .collect();
        let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
        let sink = Arc::new(Groups::default());
        let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
        for (group, size) in [("two", 2), ("three", 3), ("five", 5)] {
            let mut g = group_json(api, group, size);
            g["metadata"]["annotations"] = json!({"convoy.dev/preferred-topology": "rack,nvlink"});
            match api {
                PodGroupApi::XK8s => {
                    g["metadata"]["annotations"]["convoy.dev/required-topology"] = json!("block");
                }
                PodGroupApi::Upstream => {
                    g["spec"]["schedulingConstraints"] = json!({"topology": [{"key": "block"}]});
                }
            }
            cluster.apply_pod_group(&g).unwrap();
            for i in 0..size {
                cluster.add_pod(member(api, group, &format!("{group}-{i}"), "800m")).unwrap();
            }
            scheduler.run_until_idle(&mut updates, &clock).await;
            let on: Vec<&(String, String, String)> = cluster
                .pods()
                .iter()
                .filter(|p| p.metadata.name.as_deref().unwrap().starts_with(&format!("{group}-")))
                .filter_map(|p| p.spec.as_ref().unwrap().node_name.clone())
                .map(|n| &labels[&n])
                .collect();
            assert_eq!(on.len(), size as usize, "{api:?} {group}: not all bound");
            let distinct = |f: fn(&(String, String, String)) -> &String| {
                on.iter().map(|l| f(l)).collect::<std::collections::BTreeSet<_>>().len()
            };
            assert_eq!(distinct(|l| &l.0), 1, "{api:?} {group}: blocks {on:?}");
            match size {
                2 => assert_eq!(distinct(|l| &l.2), 1, "{api:?} {group}: NVLink domains {on:?}"),
                3 => assert_eq!(distinct(|l| &l.1), 1, "{api:?} {group}: racks {on:?}"),
                _ => {}
            }
        }
        assert_invariant(&cluster);
    }
}

/// A group that requires one topology domain (annotation
/// `convoy.dev/required-topology`) is placed inside one domain or not at
/// all, even when the cluster as a whole has room.
#[tokio::test]
async fn required_topology_domain() {
    let node = |name: &str, zone: &str| {
        NodeBuilder::new(name).cpu("1").label("topology.kubernetes.io/zone", zone).build()
    };
    let nodes =
        vec![node("a0", "a"), node("a1", "a"), node("b0", "b"), node("b1", "b"), node("b2", "b")];
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    let mut g = group_json(PodGroupApi::XK8s, "three", 3);
    g["metadata"]["annotations"] =
        json!({"convoy.dev/required-topology": "topology.kubernetes.io/zone"});
    cluster.apply_pod_group(&g).unwrap();
    for i in 0..3 {
        cluster.add_pod(member(PodGroupApi::XK8s, "three", &format!("t{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    let nodes: Vec<String> =
        cluster.pods().iter().filter_map(|p| p.spec.as_ref().unwrap().node_name.clone()).collect();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n.starts_with('b')), "{nodes:?}");

    // Zone a still has two free nodes: a group of two goes there.
    let mut g = group_json(PodGroupApi::XK8s, "four", 2);
    g["metadata"]["annotations"] =
        json!({"convoy.dev/required-topology": "topology.kubernetes.io/zone"});
    cluster.apply_pod_group(&g).unwrap();
    cluster.add_node(node("c0", "c")).unwrap();
    for i in 0..2 {
        cluster.add_pod(member(PodGroupApi::XK8s, "four", &format!("f{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    let bound: Vec<String> = cluster
        .pods()
        .iter()
        .filter(|p| p.metadata.name.as_deref().unwrap().starts_with('f'))
        .filter_map(|p| p.spec.as_ref().unwrap().node_name.clone())
        .collect();
    assert_eq!(bound.len(), 2);
    assert!(bound.iter().all(|n| n.starts_with('a')), "zone a has room for both: {bound:?}");

    // Zones a and b are full; a2 (zone a) and c0 (zone c) are free: two
    // free nodes in the cluster, but not in one zone.
    let mut g = group_json(PodGroupApi::XK8s, "late", 2);
    g["metadata"]["annotations"] =
        json!({"convoy.dev/required-topology": "topology.kubernetes.io/zone"});
    cluster.apply_pod_group(&g).unwrap();
    cluster.add_node(node("a2", "a")).unwrap();
    for i in 0..2 {
        cluster.add_pod(member(PodGroupApi::XK8s, "late", &format!("l{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "l"), 0, "a2 and c0 are free but in different zones");
    let last = sink.0.lock().unwrap().last().cloned().unwrap();
    let GroupOutcome::Unschedulable { message } = last.outcome else { panic!() };
    assert!(
        message.contains("no single topology.kubernetes.io/zone domain fits the group"),
        "{message}"
    );
    assert_invariant(&cluster);
}

/// Fewer members exist than the group needs (one is held by a scheduling
/// gate): the present ones are reserved and wait at the Permit barrier;
/// when the PodGroup's timeout expires they are all rejected and their
/// reservations released. Once the gate is removed, the whole group binds.
#[tokio::test(start_paused = true)]
async fn permit_barrier_times_out_then_the_group_binds() {
    let nodes = (0..3).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    let mut g = group_json(PodGroupApi::XK8s, "g", 3);
    g["spec"]["scheduleTimeoutSeconds"] = json!(30);
    cluster.apply_pod_group(&g).unwrap();
    cluster.add_pod(member(PodGroupApi::XK8s, "g", "m0", "800m")).unwrap();
    cluster.add_pod(member(PodGroupApi::XK8s, "g", "m1", "800m")).unwrap();
    let gated = PodBuilder::new("m2").cpu("800m").pod_group("g").gate("example.com/wait");
    cluster.add_pod(gated.build()).unwrap();
    // Runs until the barrier's 30 s timeout (tokio's paused clock jumps there).
    scheduler.run_until_idle(&mut updates, &clock).await;
    {
        let groups = sink.0.lock().unwrap();
        assert_eq!(groups[0].outcome, GroupOutcome::Placed);
        assert!(groups[0].barrier, "two present members of three wait at Permit");
    }
    assert_eq!(cluster.bound_count(), 0, "nobody bound while the group was incomplete");
    assert_eq!(scheduler.cache().pod_count(), 0, "reservations released at the timeout");

    // The gate goes: the whole group is placed and binds.
    cluster.update_pod(member(PodGroupApi::XK8s, "g", "m2", "800m")).unwrap();
    clock.advance(Duration::from_secs(20));
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "m"), 3);
    assert_invariant(&cluster);
}

/// A group too big for the whole cluster can never be placed by waiting:
/// the starvation guard ignores it, so it never holds other pods back.
#[tokio::test]
async fn hopeless_group_does_not_hold_the_cluster() {
    let nodes = (0..2).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let (scheduler, clock) = scheduler_on(&cluster, Arc::new(Groups::default()));
    cluster.apply_pod_group(&group_json(PodGroupApi::XK8s, "huge", 3)).unwrap();
    for i in 0..3 {
        cluster.add_pod(member(PodGroupApi::XK8s, "huge", &format!("h{i}"), "800m")).unwrap();
    }
    scheduler.run_until_idle(&mut updates, &clock).await;
    clock.advance(Duration::from_secs(60));
    cluster.add_pod(PodBuilder::new("single").cpu("800m").build()).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "single"), 1, "not held back by a group that can never fit");
    assert_eq!(bound_in(&cluster, "h"), 0);
}

/// The group cycle refuses a member that uses a field Convoy does not
/// evaluate (here an in-tree AWS EBS volume), as the single-pod cycle does: the group is not
/// placed, and its message names the member and the field.
#[tokio::test]
async fn a_member_with_an_unevaluated_field_fails_its_group() {
    let nodes = (0..2).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("1").build()).collect();
    let (cluster, mut updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
    let sink = Arc::new(Groups::default());
    let (scheduler, clock) = scheduler_on(&cluster, sink.clone());
    cluster.apply_pod_group(&group_json(PodGroupApi::Upstream, "db", 2)).unwrap();
    let pvc =
        serde_json::from_value(json!({"name": "d", "awsElasticBlockStore": {"volumeID": "d"}}));
    let mut m1 = member(PodGroupApi::Upstream, "db", "m1", "100m");
    m1.spec.as_mut().unwrap().volumes = Some(vec![pvc.unwrap()]);
    cluster.add_pod(member(PodGroupApi::Upstream, "db", "m0", "100m")).unwrap();
    cluster.add_pod(m1).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(bound_in(&cluster, "m"), 0);
    assert_eq!(scheduler.cache().pod_count(), 0, "nothing stays assumed");
    let groups = sink.0.lock().unwrap();
    let GroupOutcome::Unschedulable { message } = &groups.last().expect("a group decision").outcome
    else {
        panic!("the group was placed")
    };
    assert_eq!(
        message,
        "1/2 pods fit (minMember 2): default/m1: 0/2 nodes are available: pod uses \
         spec.volumes[0].awsElasticBlockStore, which this scheduler does not evaluate yet."
    );
}
