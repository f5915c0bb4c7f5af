//! End to end, the Helm chart's least privilege: `helm template` renders
//! `charts/convoy`; its CRD, ServiceAccount, ClusterRole, Role and bindings
//! are applied to a real kube-apiserver; a TokenRequest token of the
//! ServiceAccount becomes Convoy's only credential; and Convoy runs the
//! way the chart's container runs it: the rendered ConfigMap's
//! configuration read from a read-only directory, as uid/gid 65532, no
//! capabilities, no new privileges, a read-only root filesystem (a
//! private mount namespace) and an empty environment (no HOME).
//!
//! Convoy then schedules a gang of each PodGroup API, GPU pods on a
//! GpuPlacement profile and a pod that needs preemption, selects the node
//! of a WaitForFirstConsumer claim, and reports an unschedulable pod; the test checks the bindings, Events, pod and
//! PodGroup statuses and the Lease those need, and that Convoy's log
//! holds no `forbidden` answer (every API error is logged with the
//! server's message). `missing_rule_shows_as_forbidden_in_the_log` shows
//! that check catches a rule taken out of the ClusterRole.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_api::PodGroupApi;
use convoy_testenv::chart::{self, RBAC_KINDS, Rendered};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const RELEASE: &str = "convoy";
const NAMESPACE: &str = "convoy-system";
const WORK: &str = "work";
const GPU: &str = "nvidia.com/gpu";

/// The chart's values for the test: short leases, the client limits of the
/// other end-to-end tests, and a GPU profile beside the default one.
const VALUES: &str = r#"
clientConnection: {qps: 5000, burst: 5000}
leaderElection: {enabled: true, leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 500ms}
profiles:
- schedulerName: convoy-scheduler
- schedulerName: convoy-gpu
  plugins:
    multiPoint:
      enabled: [{name: GpuPlacement, weight: 5}]
"#;

/// Renders the chart and installs what a cluster administrator installs
/// before the Deployment: the CRD, the namespace, the ServiceAccount and
/// its RBAC, with `edit` applied to the rendered objects first. Returns
/// the rendered chart and a kubeconfig holding the ServiceAccount's token.
async fn install(
    cp: &ControlPlane,
    edit: impl FnOnce(&mut Rendered),
) -> Result<(Rendered, std::path::PathBuf)> {
    let mut rendered = chart::render(RELEASE, NAMESPACE, VALUES)?;
    edit(&mut rendered);
    cp.env.create_namespace(&cp.client, NAMESPACE).await?;
    cp.env.apply(&rendered.list_of(&["CustomResourceDefinition"]))?;
    cp.env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/podgroups.scheduling.x-k8s.io",
        "--timeout=30s",
    ])?;
    cp.env.apply(&rendered.list_of(&RBAC_KINDS))?;
    let kubeconfig = cp.env.service_account_kubeconfig(&cp.client, NAMESPACE, RELEASE).await?;
    Ok((rendered, kubeconfig))
}

/// Starts Convoy as the chart's container would run: the rendered
/// configuration and the token's kubeconfig (with the CA beside it) in a
/// read-only directory; uid/gid 65532 without capabilities or new
/// privileges (`setpriv`); a read-only root filesystem (`unshare --mount`,
/// then `/` remounted read-only in that namespace alone); no environment
/// but the Deployment's (`RUST_LOG`, `CONVOY_IDENTITY`).
fn start_as_in_the_image(
    cp: &ControlPlane,
    rendered: &Rendered,
    kubeconfig: &Path,
    root: &Path,
) -> Result<Scheduler> {
    let cm = rendered.get("ConfigMap", "convoy-config").context("no ConfigMap")?;
    let config = cm["data"]["config.yaml"].as_str().context("no config.yaml")?;
    std::fs::write(root.join("config.yaml"), config)?;
    let mut kc: Value = serde_json::from_slice(&std::fs::read(kubeconfig)?)?;
    let cluster = &mut kc["clusters"][0]["cluster"];
    let ca = cluster["certificate-authority"].as_str().context("no CA in the kubeconfig")?;
    std::fs::copy(ca, root.join("ca.crt"))?;
    cluster["certificate-authority"] = root.join("ca.crt").to_string_lossy().into();
    std::fs::write(root.join("kubeconfig"), serde_json::to_vec(&kc)?)?;
    for file in ["config.yaml", "kubeconfig", "ca.crt"] {
        std::fs::set_permissions(root.join(file), std::fs::Permissions::from_mode(0o444))?;
    }
    // The binary goes into the image's directory too: uid 65532 may not
    // traverse the checkout's parents (a clone under a 0700 directory such
    // as `mktemp -d` or /root), as it could not outside its image.
    let exe = root.join("convoy-scheduler");
    let built = Path::new(env!("CARGO_BIN_EXE_convoy-scheduler"));
    // A hard link shares the build's mode (0755); a copy gets 0555.
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe)?;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o555))?;
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o555))?;

    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--", "/bin/sh", "-c", "mount -o remount,bind,ro / && exec \"$@\"", "sh"])
        .args(["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--no-new-privs"])
        .args(["--inh-caps=-all", "--bounding-set=-all", "--pdeathsig=KILL", "--"])
        .args(["env", "-i", "RUST_LOG=info", "CONVOY_IDENTITY=convoy-0"])
        .arg(&exe)
        .arg(format!("--config={}", root.join("config.yaml").display()))
        .arg(format!("--kubeconfig={}", root.join("kubeconfig").display()))
        .arg("--log-format=text");
    Scheduler::spawn(&cp.env, "convoy-0", cmd)
}

/// Checks in `/proc` that process `pid` runs as the image's user would:
/// uid and gid 65532, no capabilities, no new privileges, `/` read-only,
/// an environment of the Deployment's two variables.
fn check_confined(pid: u32) -> Result<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("").to_string()
    };
    let ids = |v: String| v.split_whitespace().map(String::from).collect::<Vec<_>>();
    ensure!(ids(field("Uid:")) == ["65532"; 4], "uids {}", field("Uid:"));
    ensure!(ids(field("Gid:")) == ["65532"; 4], "gids {}", field("Gid:"));
    ensure!(field("Groups:").is_empty(), "groups {}", field("Groups:"));
    for caps in ["CapEff:", "CapPrm:", "CapBnd:"] {
        ensure!(field(caps) == "0000000000000000", "{caps} {}", field(caps));
    }
    ensure!(field("NoNewPrivs:") == "1", "NoNewPrivs {}", field("NoNewPrivs:"));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let root = mounts.lines().find(|l| l.split(' ').nth(4) == Some("/")).context("no / mount")?;
    let options = root.split(' ').nth(5).unwrap_or("");
    ensure!(options.split(',').any(|o| o == "ro"), "/ mounted {options}");
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let mut vars: Vec<&[u8]> = environ.split(|b| *b == 0).filter(|v| !v.is_empty()).collect();
    vars.sort();
    ensure!(vars == [&b"CONVOY_IDENTITY=convoy-0"[..], b"RUST_LOG=info"], "environment {vars:?}");
    Ok(())
}

/// A ready node labelled `pool` with `cpu` and, if any, `gpus` GPUs.
fn pool_node(name: &str, pool: &str, cpu: &str, gpus: u32) -> Node {
    let mut n = node(name, cpu, "64Gi", "110");
    n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
    if gpus > 0 {
        let status = n.status.as_mut().expect("status");
        for list in [&mut status.allocatable, &mut status.capacity] {
            list.as_mut().expect("resources").insert(
                GPU.into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(gpus.to_string()),
            );
        }
    }
    n
}

/// A pod of `scheduler` on nodes of `pool`, with `gpus` GPUs if any.
fn pool_pod(name: &str, scheduler: &str, pool: &str, cpu: &str, gpus: u32) -> Pod {
    let mut p = pod(name, scheduler, cpu, "100Mi");
    let spec = p.spec.as_mut().expect("spec");
    spec.node_selector = Some([("pool".to_string(), pool.to_string())].into());
    if gpus > 0 {
        let resources = spec.containers[0].resources.as_mut().expect("resources");
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(gpus.to_string());
        resources.requests.as_mut().expect("requests").insert(GPU.into(), q.clone());
        resources.limits = Some([(GPU.to_string(), q)].into());
    }
    p
}

/// A member of the PodGroup `group` of `api`, 2 cpu, on the `gang` pool.
fn member(api: PodGroupApi, group: &str, name: &str) -> Pod {
    let mut p = pool_pod(name, CONVOY, "gang", "2", 0);
    match api {
        PodGroupApi::XK8s => {
            p.metadata.labels = Some(
                [(convoy_api::pod_group::POD_GROUP_LABEL.to_string(), group.to_string())].into(),
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
}

/// Creates a gang PodGroup of `api` needing `min` members.
async fn create_group(cp: &ControlPlane, api: PodGroupApi, name: &str, min: u32) -> Result<()> {
    let spec = match api {
        PodGroupApi::XK8s => json!({ "minMember": min }),
        PodGroupApi::Upstream => json!({ "schedulingPolicy": { "gang": { "minCount": min } } }),
    };
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api.api_version(), "kind": "PodGroup",
        "metadata": { "name": name, "namespace": WORK }, "spec": spec
    }))?;
    groups(cp, api).create(&PostParams::default(), &obj).await?;
    Ok(())
}

fn groups(cp: &ControlPlane, api: PodGroupApi) -> Api<DynamicObject> {
    let ar = convoy_adapters::pod_groups::api_resource(api);
    Api::namespaced_with(cp.client.clone(), WORK, &ar)
}

/// Lines of Convoy's log that carry a 403 answer.
fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.to_ascii_lowercase().contains("forbidden")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convoy_schedules_with_the_charts_rbac_alone_as_the_image_runs_it() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let (rendered, kubeconfig) = install(&cp, |_| {}).await?;

    // The token is the ServiceAccount's, and grants no more than the chart.
    let sa = chart::client_from(&kubeconfig).await?;
    let review = Api::<SelfSubjectReview>::all(sa.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review.status.and_then(|s| s.user_info).and_then(|u| u.username);
    ensure!(
        user.as_deref() == Some("system:serviceaccount:convoy-system:convoy"),
        "the token authenticates as {user:?}"
    );
    let secrets =
        Api::<Secret>::namespaced(sa.clone(), NAMESPACE).list(&ListParams::default()).await;
    ensure!(
        matches!(&secrets, Err(kube::Error::Api(s)) if s.code == 403),
        "the ServiceAccount lists Secrets: {secrets:?}"
    );

    let pods = cp.namespace(WORK).await?;
    create_nodes(
        &cp.client,
        vec![
            pool_node("gang-0", "gang", "4", 0),
            pool_node("gang-1", "gang", "4", 0),
            pool_node("gpu-0", "gpu", "64", 8),
            pool_node("gpu-1", "gpu", "64", 8),
            pool_node("small", "small", "4", 0),
            pool_node("disk", "disk", "4", 0),
        ],
    )
    .await?;
    let urgent: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 1_000_000}))?;
    Api::<PriorityClass>::all(cp.client.clone()).create(&PostParams::default(), &urgent).await?;
    // Two pods filling `small`, bound by hand (another scheduler's), held
    // by a finalizer once deleted so that preemption can be watched.
    let victims: Vec<Pod> = ["low-0", "low-1"]
        .iter()
        .map(|name| {
            let mut p = pool_pod(name, CONVOY, "small", "2", 0);
            p.metadata.finalizers = Some(vec!["convoy.test/hold".into()]);
            let spec = p.spec.as_mut().expect("spec");
            spec.node_name = Some("small".into());
            spec.termination_grace_period_seconds = Some(0);
            p
        })
        .collect();
    create_pods(&pods, victims).await?;

    let root = tempfile::Builder::new().prefix("convoy-image-").tempdir()?;
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
    let mut sched = start_as_in_the_image(&cp, &rendered, &kubeconfig, root.path())?;
    sched.wait_ready(Duration::from_secs(60)).await?;
    check_confined(sched.pid())?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), NAMESPACE);
    let holder = eventually(Duration::from_secs(30), || async {
        leases.get(RELEASE).await.ok()?.spec?.holder_identity.filter(|h| h == "convoy-0")
    })
    .await;
    ensure!(holder.is_some(), "convoy-0 does not hold the Lease{}", sched.tail());

    // Gangs of both APIs, 2 cpu per member, 4 members over the gang pool.
    create_group(&cp, PodGroupApi::XK8s, "trio", 2).await?;
    create_group(&cp, PodGroupApi::Upstream, "duo", 2).await?;
    let mut work = vec![
        member(PodGroupApi::XK8s, "trio", "trio-0"),
        member(PodGroupApi::XK8s, "trio", "trio-1"),
        member(PodGroupApi::Upstream, "duo", "duo-0"),
        member(PodGroupApi::Upstream, "duo", "duo-1"),
    ];
    // GPU pods on the GpuPlacement profile: 4 + 2 + 2 + 8 GPUs on 16.
    for (i, gpus) in [4, 2, 2, 8].into_iter().enumerate() {
        work.push(pool_pod(&format!("gpu-{i}"), "convoy-gpu", "gpu", "4", gpus));
    }
    create_pods(&pods, work).await?;
    let names: Vec<String> =
        ["trio-0", "trio-1", "duo-0", "duo-1", "gpu-0", "gpu-1", "gpu-2", "gpu-3"]
            .map(String::from)
            .into();
    let bound =
        wait_bound(&pods, &names, Duration::from_secs(60)).await.with_context(|| sched.tail())?;
    for gpu_node in ["gpu-0", "gpu-1"] {
        let used: i64 =
            bound.values().filter(|p| node_of(p) == Some(gpu_node)).map(|p| request(p, GPU)).sum();
        ensure!(used == 8_000, "{gpu_node} holds {} GPUs, not 8", used / 1000);
    }

    // A WaitForFirstConsumer claim: VolumeBinding's PreBind patches the
    // claim's selected node (no provisioner runs here, so the pod then
    // waits for a volume that never comes; the patch is what is checked).
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "wfc"}, "provisioner": convoy_testenv::TEST_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))?;
    Api::<StorageClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "wfc",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), WORK);
    claims.create(&PostParams::default(), &claim).await?;
    let mut disk = pool_pod("disk", CONVOY, "disk", "1", 0);
    disk.spec.as_mut().expect("spec").volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
    )?]);
    pods.create(&PostParams::default(), &disk).await?;
    let selected = eventually(Duration::from_secs(30), || async {
        let c = claims.get("data").await.ok()?;
        c.metadata.annotations?.get("volume.kubernetes.io/selected-node").cloned()
    })
    .await;
    ensure!(
        selected.as_deref() == Some("disk"),
        "claim's selected node {selected:?}{}",
        sched.tail()
    );

    // Too big for any node: reported on the pod and in an Event.
    pods.create(&PostParams::default(), &pool_pod("huge", CONVOY, "gang", "100", 0)).await?;
    // Needs the room of both victims on `small`.
    let mut high = pool_pod("high", CONVOY, "small", "3", 0);
    high.spec.as_mut().expect("spec").priority_class_name = Some("urgent".into());
    pods.create(&PostParams::default(), &high).await?;

    let preempted = eventually(Duration::from_secs(30), || async {
        let all = pods_by_name(&pods).await.ok()?;
        let marked = ["low-0", "low-1"].iter().all(|n| {
            all.get(*n).is_some_and(|p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                    })
            })
        });
        let nominated =
            all.get("high")?.status.as_ref()?.nominated_node_name.as_deref() == Some("small");
        (marked && nominated).then_some(())
    })
    .await;
    ensure!(
        preempted.is_some(),
        "no preemption on small: {:?}{}",
        pods_by_name(&pods).await?,
        sched.tail()
    );
    for name in ["low-0", "low-1"] {
        let patch = json!({"metadata": {"finalizers": null}});
        pods.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    }
    let high = wait_bound(&pods, &["high".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&high["high"]) == Some("small"), "high on {:?}", node_of(&high["high"]));

    // What those writes left: Events, the unschedulable pod's condition,
    // both PodGroups' status.
    // (Events are written off the hot path: they may trail the binding.)
    let all = pods_by_name(&pods).await?;
    let uids: Vec<(String, String)> = names
        .iter()
        .map(String::as_str)
        .chain(["high"])
        .map(|n| (n.to_string(), all[n].metadata.uid.clone().unwrap_or_default()))
        .collect();
    let once_each = eventually(Duration::from_secs(15), || async {
        let scheduled = scheduled_per_uid(&cp.client, WORK).await.ok()?;
        uids.iter().all(|(_, uid)| scheduled.get(uid) == Some(&1)).then_some(())
    })
    .await;
    ensure!(
        once_each.is_some(),
        "Scheduled events per pod {:?} for {uids:?}",
        scheduled_per_uid(&cp.client, WORK).await?
    );
    ensure!(events(&cp.client, WORK, "Preempted").await?.len() == 2, "Preempted events");
    let huge_reported = eventually(Duration::from_secs(15), || async {
        let failed = events(&cp.client, WORK, "FailedScheduling").await.ok()?;
        let event = failed
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("huge"));
        let condition = scheduled_message(&pods.get("huge").await.ok()?);
        (event && condition.starts_with("False/Unschedulable")).then_some(())
    })
    .await;
    ensure!(
        huge_reported.is_some(),
        "huge: {}{}",
        scheduled_message(&pods.get("huge").await?),
        sched.tail()
    );
    let trio = serde_json::to_value(groups(&cp, PodGroupApi::XK8s).get("trio").await?)?;
    ensure!(
        trio["status"]["phase"] == "Scheduling" && trio["status"]["scheduleStartTime"].is_string(),
        "trio status {}",
        trio["status"]
    );
    let duo_done = eventually(Duration::from_secs(15), || async {
        let duo =
            serde_json::to_value(groups(&cp, PodGroupApi::Upstream).get("duo").await.ok()?).ok()?;
        let conditions = duo["status"]["conditions"].as_array()?.clone();
        conditions
            .iter()
            .any(|c| c["type"] == "PodGroupInitiallyScheduled" && c["status"] == "True")
            .then_some(())
    })
    .await;
    ensure!(duo_done.is_some(), "duo has no PodGroupInitiallyScheduled=True{}", sched.tail());

    let log = sched.log();
    ensure!(sched.running(), "convoy-0 exited{}", sched.tail());
    ensure!(
        placements(&log, WORK).len() >= 9,
        "fewer decision lines than bindings{}",
        sched.tail()
    );
    let forbidden = forbidden_lines(&log);
    ensure!(forbidden.is_empty(), "the chart's RBAC refused Convoy:\n{}", forbidden.join("\n"));
    Ok(())
}

/// The check above is not vacuous: without `pods/binding`, the pod stays
/// pending and the log says `forbidden`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_rule_shows_as_forbidden_in_the_log() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let (rendered, kubeconfig) = install(&cp, |r| {
        for role in r.objects.iter_mut().filter(|o| o["kind"] == "ClusterRole") {
            if let Some(rules) = role["rules"].as_array_mut() {
                rules.retain(|rule| rule["resources"] != json!(["pods/binding"]));
            }
        }
    })
    .await?;
    let pods = cp.namespace(WORK).await?;
    create_nodes(&cp.client, vec![pool_node("n", "small", "4", 0)]).await?;
    let root = tempfile::Builder::new().prefix("convoy-image-").tempdir()?;
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
    let mut sched = start_as_in_the_image(&cp, &rendered, &kubeconfig, root.path())?;
    sched.wait_ready(Duration::from_secs(60)).await?;
    pods.create(&PostParams::default(), &pool_pod("p", CONVOY, "small", "1", 0)).await?;
    let refused = eventually(Duration::from_secs(30), || async {
        (!forbidden_lines(&sched.log()).is_empty()).then_some(())
    })
    .await;
    ensure!(refused.is_some(), "no forbidden answer logged{}", sched.tail());
    ensure!(node_of(&pods.get("p").await?).is_none(), "bound without pods/binding");
    Ok(())
}
