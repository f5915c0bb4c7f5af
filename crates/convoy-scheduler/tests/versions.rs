//! One end-to-end suite for every supported Kubernetes version: the same
//! assertions on each version's own API server (`testenv up --version`).
//! `make test` runs it on the newest and the oldest supported version,
//! `make test-versions` on all of them (`TESTENV_VERSION=v1.35 cargo test
//! -p convoy-scheduler --test versions` for one).
//!
//! - placement with pod affinity, anti-affinity and topology spread;
//! - preemption that spares the pods a PodDisruptionBudget protects;
//! - a gang through each PodGroup API the server serves (the other refused
//!   by name while not served);
//! - a WaitForFirstConsumer volume;
//! - a DRA claim, where `resource.k8s.io` is served;
//! - leader failover;
//! - on 1.35 and 1.36 with their alpha gang APIs on, a pod in such a gang
//!   refused by name (1.35's `spec.workloadRef`, 1.36's `v1alpha2` PodGroups).
//!
//! Every test also checks that Convoy read the server's version and never
//! watched an API the server does not serve (no `404` in its log). What an
//! older server lacks is skipped with a printed reason.

mod common;
#[path = "common/dra.rs"]
mod dra;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_adapters::pod_groups::api_resource;
use convoy_api::PodGroupApi;
use convoy_api::apis::Serving;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

/// Checks what every test checks of the scheduler's log: the server's
/// version announced, and no watch of an API the server does not serve.
fn check_log(cp: &ControlPlane, sched: &Scheduler) -> Result<()> {
    let version = cp.env.version();
    println!("Kubernetes {version}");
    let log = sched.log();
    ensure!(
        log.lines().any(|l| l.contains("API server version") && l.contains(&version)),
        "no `API server version` line naming {version}{}",
        sched.tail()
    );
    let not_found: Vec<&str> =
        log.lines().filter(|l| l.contains("watch failed") && l.contains("404")).collect();
    ensure!(not_found.is_empty(), "watches of APIs not served: {not_found:?}");
    Ok(())
}

/// What this server does with an optional API (asked as Convoy asks).
async fn serving(cp: &ControlPlane, api: &convoy_api::ApiInfo) -> Result<Serving> {
    Ok(convoy_adapters::discovery::discover(&cp.client).await?.serving(api))
}

/// A ready node (4 CPUs) in `zone`, labelled with its hostname.
fn zoned(name: &str, zone: &str) -> Node {
    let mut n = node(name, "4", "8Gi", "110");
    n.metadata.labels = Some(
        [
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            ("topology.kubernetes.io/zone".to_string(), zone.to_string()),
        ]
        .into(),
    );
    n
}

fn labelled(mut p: Pod, app: &str) -> Pod {
    p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    p
}

fn zone_of(nodes: &BTreeMap<&str, &str>, p: &Pod) -> String {
    node_of(p).and_then(|n| nodes.get(n)).map(|z| z.to_string()).unwrap_or_default()
}

/// Four spread pods land two per zone; a pod with required affinity to
/// `app=web` lands in web's zone; one with anti-affinity to it on the other
/// node of that zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_with_pod_affinity_and_topology_spread() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("place").await?;
    let zones: BTreeMap<&str, &str> =
        [("a-0", "a"), ("a-1", "a"), ("b-0", "b"), ("b-1", "b")].into();
    create_nodes(&cp.client, zones.iter().map(|(n, z)| zoned(n, z)).collect()).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    // web runs on b-1 already.
    let mut web = labelled(pod("web", CONVOY, "100m", "100Mi"), "web");
    web.spec.as_mut().expect("spec").node_name = Some("b-1".into());
    let mut batch = vec![web];
    for i in 0..4 {
        let mut p = labelled(pod(&format!("spread-{i}"), CONVOY, "100m", "100Mi"), "spread");
        p.spec.as_mut().expect("spec").topology_spread_constraints =
            Some(vec![serde_json::from_value(
                json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                   "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"app": "spread"}}}),
            )?]);
        batch.push(p);
    }
    let term =
        |key: &str| json!({"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": key});
    let mut near = pod("near", CONVOY, "100m", "100Mi");
    near.spec.as_mut().expect("spec").affinity = Some(serde_json::from_value(json!({
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("topology.kubernetes.io/zone")]}
    }))?);
    let mut apart = pod("apart", CONVOY, "100m", "100Mi");
    let spec = apart.spec.as_mut().expect("spec");
    spec.node_selector =
        Some([("topology.kubernetes.io/zone".to_string(), "b".to_string())].into());
    spec.affinity = Some(serde_json::from_value(json!({
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("kubernetes.io/hostname")]}
    }))?);
    batch.extend([near, apart]);
    create_pods(&pods, batch).await?;

    let names: Vec<String> = ["near", "apart"]
        .into_iter()
        .map(String::from)
        .chain((0..4).map(|i| format!("spread-{i}")))
        .collect();
    let all =
        wait_bound(&pods, &names, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..4 {
        *per_zone.entry(zone_of(&zones, &all[&format!("spread-{i}")])).or_default() += 1;
    }
    ensure!(per_zone == [("a".into(), 2), ("b".into(), 2)].into(), "spread: {per_zone:?}");
    ensure!(zone_of(&zones, &all["near"]) == "b", "near on {:?}", node_of(&all["near"]));
    ensure!(node_of(&all["apart"]) == Some("b-0"), "apart on {:?}", node_of(&all["apart"]));
    check_log(&cp, &sched)
}

/// Both nodes are full of priority-0 pods; those on `n1` are covered by a
/// PodDisruptionBudget that allows no disruption (counted by the
/// disruption controller). A pod of high priority preempts the pods on
/// `n2` only, and binds there once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_respects_a_pod_disruption_budget() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let ns = "preempt";
    let pods = cp.namespace(ns).await?;
    let kwok = |name: &str| {
        let mut n = convoy_testenv::kwok_node(name);
        n.status = node(name, "4", "4Gi", "110").status;
        n
    };
    create_nodes(&cp.client, vec![kwok("n1"), kwok("n2")]).await?;
    let class: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 1_000_000}))?;
    Api::<PriorityClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    let mut victims = Vec::new();
    for (name, node, app) in [
        ("safe-0", "n1", "safe"),
        ("safe-1", "n1", "safe"),
        ("free-0", "n2", "free"),
        ("free-1", "n2", "free"),
    ] {
        let mut p = labelled(pod(name, CONVOY, "2", "100Mi"), app);
        let spec = p.spec.as_mut().expect("spec");
        spec.node_name = Some(node.into());
        spec.termination_grace_period_seconds = Some(0);
        victims.push(p);
    }
    for p in &victims {
        create_retrying(&pods, p).await?;
    }
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "safe"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "safe"}}}
    }))?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cp.client.clone(), ns);
    pdbs.create(&PostParams::default(), &pdb).await?;
    let counted = eventually(Duration::from_secs(30), || async {
        let s = pdbs.get("safe").await.ok()?.status?;
        (s.current_healthy == Some(2) && s.disruptions_allowed == Some(0)).then_some(())
    })
    .await;
    ensure!(counted.is_some(), "PDB status not computed: {:?}", pdbs.get("safe").await?.status);

    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut high = pod("high", CONVOY, "3", "100Mi");
    high.spec.as_mut().expect("spec").priority_class_name = Some("urgent".into());
    create_retrying(&pods, &high).await?;
    let all = wait_bound(&pods, &["high".to_string()], Duration::from_secs(40))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["high"]) == Some("n2"), "high on {:?}", node_of(&all["high"]));
    for name in ["free-0", "free-1"] {
        ensure!(!all.contains_key(name), "{name} was not preempted");
    }
    for name in ["safe-0", "safe-1"] {
        let p = all.get(name).with_context(|| format!("{name} is gone"))?;
        ensure!(p.metadata.deletion_timestamp.is_none(), "{name} is being deleted");
    }
    check_log(&cp, &sched)
}

/// A gang of three (`minMember` 3) binds whole through each PodGroup API
/// the server serves. scheduler-plugins' API is a CRD: before it is
/// installed, a member is refused by name; once it is, discovery finds it
/// and the gang binds. Upstream's `scheduling.k8s.io/v1beta1` is served by
/// Kubernetes 1.37 with `GenericWorkload` on (testenv turns it on there);
/// on older servers that part is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_through_each_served_pod_group_api() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "gangs";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, (0..3).map(|i| node(&format!("n{i}"), "4", "8Gi", "110")).collect())
        .await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let member = |api: PodGroupApi, group: &str, i: usize| {
        let mut p = pod(&format!("{group}-{i}"), CONVOY, "3", "100Mi");
        match api {
            PodGroupApi::XK8s => {
                p.metadata.labels = Some(
                    [(convoy_api::pod_group::POD_GROUP_LABEL.to_string(), group.to_string())]
                        .into(),
                );
            }
            PodGroupApi::Upstream => {
                p.spec.as_mut().expect("spec").scheduling_group =
                    Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
                        pod_group_name: Some(group.to_string()),
                    });
            }
        }
        p
    };
    let group = |api: PodGroupApi, name: &str| -> Result<DynamicObject> {
        let spec = match api {
            PodGroupApi::XK8s => json!({"minMember": 3}),
            PodGroupApi::Upstream => json!({"schedulingPolicy": {"gang": {"minCount": 3}}}),
        };
        Ok(serde_json::from_value(json!({
            "apiVersion": api.api_version(), "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        }))?)
    };

    // scheduler-plugins' API, not installed yet: refused by name.
    create_pods(&pods, vec![member(PodGroupApi::XK8s, "x", 0)]).await?;
    let want = "podgroups.scheduling.x-k8s.io (v1alpha1); this API server does not serve it";
    let refused = eventually(Duration::from_secs(20), || async {
        let p = pods.get("x-0").await.ok()?;
        scheduled_message(&p).contains(want).then_some(())
    })
    .await;
    ensure!(
        refused.is_some(),
        "x-0: PodScheduled {:?}{}",
        scheduled_message(&pods.get("x-0").await?),
        sched.tail()
    );
    install_crd(&cp)?;
    Api::<DynamicObject>::namespaced_with(cp.client.clone(), ns, &api_resource(PodGroupApi::XK8s))
        .create(&PostParams::default(), &group(PodGroupApi::XK8s, "x")?)
        .await?;
    create_pods(&pods, (1..3).map(|i| member(PodGroupApi::XK8s, "x", i)).collect()).await?;
    let names: Vec<String> = (0..3).map(|i| format!("x-{i}")).collect();
    wait_bound(&pods, &names, Duration::from_secs(40)).await.with_context(|| sched.tail())?;

    match serving(&cp, &PodGroupApi::Upstream.api()).await? {
        Serving::Served(_) => {
            Api::<DynamicObject>::namespaced_with(
                cp.client.clone(),
                ns,
                &api_resource(PodGroupApi::Upstream),
            )
            .create(&PostParams::default(), &group(PodGroupApi::Upstream, "up")?)
            .await?;
            // Room for the second gang: the first one's nodes are full.
            create_nodes(
                &cp.client,
                (3..6).map(|i| node(&format!("n{i}"), "4", "8Gi", "110")).collect(),
            )
            .await?;
            create_pods(&pods, (0..3).map(|i| member(PodGroupApi::Upstream, "up", i)).collect())
                .await?;
            let names: Vec<String> = (0..3).map(|i| format!("up-{i}")).collect();
            wait_bound(&pods, &names, Duration::from_secs(30))
                .await
                .with_context(|| sched.tail())?;
        }
        other => println!(
            "skipped: upstream's PodGroup (scheduling.k8s.io/v1beta1) is {} on Kubernetes {}",
            other.describe(),
            cp.env.version()
        ),
    }
    check_log(&cp, &sched)
}

/// A claim of a WaitForFirstConsumer class: Convoy picks the node, the
/// test provisioner provisions in its zone, the PV binder binds, the pod
/// binds and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_volume() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let ns = "wfc";
    let pods = cp.namespace(ns).await?;
    let kwok = |name: &str, zone: &str| {
        let mut n = convoy_testenv::kwok_node(name);
        n.metadata.labels = zoned(name, zone).metadata.labels;
        n.status = node(name, "4", "8Gi", "110").status;
        n
    };
    create_nodes(&cp.client, vec![kwok("a-0", "a"), kwok("b-0", "b")]).await?;
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "wfc"}, "provisioner": convoy_testenv::TEST_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))?;
    Api::<StorageClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    let _provisioner = convoy_testenv::TestProvisioner::spawn(cp.client.clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"storageClassName": "wfc", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), ns);
    claims.create(&PostParams::default(), &claim).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut p = pod("user", CONVOY, "100m", "100Mi");
    p.spec.as_mut().expect("spec").volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
    )?]);
    create_retrying(&pods, &p).await?;

    let running = eventually(Duration::from_secs(60), || async {
        let p = pods.get("user").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let Some(user) = running else {
        anyhow::bail!(
            "user not Running: {}; claim {:?}{}",
            scheduled_message(&pods.get("user").await?),
            claims.get("data").await?.status,
            sched.tail()
        );
    };
    let node = node_of(&user).context("bound")?.to_string();
    let volume =
        claims.get("data").await?.spec.and_then(|s| s.volume_name).context("bound claim")?;
    let pv = Api::<PersistentVolume>::all(cp.client.clone()).get(&volume).await?;
    let term = &pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .context("volume node affinity")?
        .node_selector_terms[0];
    let value =
        term.match_expressions.as_ref().and_then(|e| e[0].values.as_ref()).and_then(|v| v.first());
    let zone = &node[..1];
    ensure!(value.map(String::as_str) == Some(zone), "volume in {value:?}, pod on {node}");
    check_log(&cp, &sched)
}

/// A ResourceClaim for one GPU of a node's ResourceSlice: allocated on
/// that node, reserved for the pod, the pod bound there. Skipped where the
/// server does not serve `resource.k8s.io` in a version Convoy reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_claim_where_served() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "dra";
    cp.namespace(ns).await?;
    let claims_api = serving(&cp, &convoy_api::apis::RESOURCE_CLAIMS).await?;
    let Serving::Served(version) = claims_api else {
        println!(
            "skipped: resource.k8s.io ResourceClaims are {} on Kubernetes {}",
            claims_api.describe(),
            cp.env.version()
        );
        return Ok(());
    };
    ensure!(version == "v1", "ResourceClaims served as {version} by default");
    create_nodes(
        &cp.client,
        vec![node("plain", "8", "8Gi", "110"), node("gpu-0", "8", "8Gi", "110")],
    )
    .await?;
    dra::create(&cp.client, &dra::device_class()).await?;
    dra::create(&cp.client, &dra::slice("gpu-0", dra::A100_40, "clique-a", 2)).await?;
    dra::create(&cp.client, &dra::claim(ns, "one", vec![dra::request("gpu", 1, &[])])).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut p = dra::pod(ns, "user", &[dra::Uses::Claim("one")]);
    p["spec"]["schedulerName"] = json!(CONVOY);
    dra::create(&cp.client, &p).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let all = wait_bound(&pods, &["user".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["user"]) == Some("gpu-0"), "user on {:?}", node_of(&all["user"]));
    let claim = Api::<ResourceClaim>::namespaced(cp.client.clone(), ns).get("one").await?;
    let alloc = dra::allocated(&claim).context("claim allocated")?;
    ensure!(alloc.nodes == ["gpu-0"], "allocated for {:?}", alloc.nodes);
    let uid = all["user"].metadata.uid.clone().unwrap_or_default();
    ensure!(alloc.reserved_for == [uid], "reserved for {:?}", alloc.reserved_for);
    check_log(&cp, &sched)
}

/// Two replicas on one Lease: the leader binds; after it is killed, the
/// standby takes over once the lease expires and binds the next pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "ha";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, (0..2).map(|i| node(&format!("n{i}"), "8", "16Gi", "110")).collect())
        .await?;
    let lease = "convoy-versions";
    let mut a = Scheduler::start(&cp.env, "convoy-a", Lease::Named(lease))?;
    let mut b = Scheduler::start(&cp.env, "convoy-b", Lease::Named(lease))?;
    a.wait_ready(Duration::from_secs(30)).await?;
    b.wait_ready(Duration::from_secs(30)).await?;
    let batch = |prefix: &str| -> Vec<Pod> {
        (0..10).map(|i| pod(&format!("{prefix}-{i}"), CONVOY, "100m", "100Mi")).collect()
    };
    let names =
        |prefix: &str| -> Vec<String> { (0..10).map(|i| format!("{prefix}-{i}")).collect() };
    create_pods(&pods, batch("one")).await?;
    wait_bound(&pods, &names("one"), Duration::from_secs(30))
        .await
        .with_context(|| format!("{}{}", a.tail(), b.tail()))?;
    const LEADING: &str = "leading: scheduling starts";
    let (leader, standby) = if a.count(LEADING) == 1 { (&mut a, &mut b) } else { (&mut b, &mut a) };
    ensure!(standby.count(LEADING) == 0, "both lead{}", standby.tail());
    leader.kill();
    let killed = Instant::now();
    create_pods(&pods, batch("two")).await?;
    wait_bound(&pods, &names("two"), Duration::from_secs(20))
        .await
        .with_context(|| standby.tail())?;
    println!(
        "the standby bound the next pods {:?} after the leader was killed (lease 3 s)",
        killed.elapsed()
    );
    wait_decisions(standby, ns, 10).await;
    ensure!(placements(&standby.log(), ns).len() == 10, "standby decisions{}", standby.tail());
    check_log(&cp, standby)
}

/// Kubernetes 1.35 and 1.36 with their alpha gang APIs on (gate
/// `GenericWorkload`): a pod in such a gang is refused by name, never placed
/// alone; a pod outside any gang binds. On 1.35 the pod names its gang with
/// `spec.workloadRef`, a field later versions replaced and Convoy's types
/// do not have; on 1.36 with `spec.schedulingGroup`, naming a
/// `scheduling.k8s.io/v1alpha2` PodGroup, a version Convoy does not read.
/// Other versions have neither: skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpha_gang_apis_of_1_35_and_1_36_are_refused_by_name() -> Result<()> {
    let probe = ControlPlane::start().await?;
    let version = probe.env.version();
    drop(probe);
    let (runtime_config, field, want) = if version.starts_with("v1.35.") {
        (
            "--runtime-config=scheduling.k8s.io/v1alpha1=true",
            json!({"workloadRef": {"name": "job", "podGroup": "workers"}}),
            "pod uses spec.workloadRef, which this scheduler does not evaluate yet".to_string(),
        )
    } else if version.starts_with("v1.36.") {
        (
            "--runtime-config=scheduling.k8s.io/v1alpha2=true",
            json!({"schedulingGroup": {"podGroupName": "workers"}}),
            "pod uses spec.schedulingGroup.podGroupName, which needs \
             podgroups.scheduling.k8s.io (v1beta1); this API server serves it only as \
             scheduling.k8s.io/v1alpha2, which this scheduler does not read"
                .to_string(),
        )
    } else {
        println!("skipped: the alpha gang APIs are those of 1.35 and 1.36, this is {version}");
        return Ok(());
    };
    let args: &'static [&'static str] =
        Box::leak(vec!["--feature-gates=GenericWorkload=true", runtime_config].into_boxed_slice());
    let options = convoy_testenv::Options::API_ONLY.with_apiserver_args(args);
    let env = tokio::task::spawn_blocking(move || convoy_testenv::TestEnv::start_with(options))
        .await?
        .context("starting testenv")?;
    let cp = ControlPlane::adopt(env).await?;
    let ns = "workloads";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, vec![node("n0", "4", "8Gi", "110")]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let ar = kube::api::ApiResource::erase::<Pod>(&());
    let mut spec = json!({"schedulerName": CONVOY,
                          "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]});
    for (k, v) in field.as_object().context("fields")? {
        spec[k] = v.clone();
    }
    let member: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "member", "namespace": ns}, "spec": spec
    }))?;
    Api::<DynamicObject>::namespaced_with(cp.client.clone(), ns, &ar)
        .create(&PostParams::default(), &member)
        .await?;
    create_pods(&pods, vec![pod("alone", CONVOY, "100m", "100Mi")]).await?;
    wait_bound(&pods, &["alone".to_string()], Duration::from_secs(20))
        .await
        .with_context(|| sched.tail())?;
    let refused = eventually(Duration::from_secs(20), || async {
        let p = pods.get("member").await.ok()?;
        scheduled_message(&p).contains(&want).then_some(())
    })
    .await;
    let member = pods.get("member").await?;
    ensure!(
        refused.is_some() && node_of(&member).is_none(),
        "member on {:?}: {}{}",
        node_of(&member),
        scheduled_message(&member),
        sched.tail()
    );
    check_log(&cp, &sched)
}
