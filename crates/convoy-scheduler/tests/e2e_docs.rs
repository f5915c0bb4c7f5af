//! End to end, the commands of `docs/operating.md`: each fenced ```` ```sh ````
//! block preceded by `<!-- e2e: NAME -->` is taken from the page as it is
//! and run with bash (`-e -o pipefail`: any failing command fails the
//! block) against testenv, from a directory holding the repository's
//! `charts/` and `examples/`, with `kubectl`, `helm` and
//! `convoy-scheduler` on the PATH and `KUBECONFIG` set. Nothing in a block
//! is substituted; the placeholder files the page names (`my-values.yaml`,
//! `my-pods.yaml`) are written by the test, and the pod the page asks
//! about is `default/my-pod`.
//!
//! - `install`: `helm install` of the chart; its Deployment and ConfigMap
//!   must exist in the namespace the page says.
//! - `leader`, `logs`, `logs-json`: the chart's image cannot run here, so
//!   two replicas of the binary run locally with the installed ConfigMap's
//!   configuration (the chart's Lease) and pod-like names as identities,
//!   as the chart sets them. `leader` must print the Lease's holder. Only
//!   `kubectl logs` is answered by a shim: for `-n <the chart's
//!   namespace> logs <replica name>` it prints that replica's log, and it
//!   refuses anything else (a Deployment, another namespace), so the
//!   blocks must name the leader; only the leader's log has the pod's
//!   decision lines, which `grep`/`jq` must find.
//! - `pod`: `kubectl describe`/`get` of the pending pod and its
//!   `FailedScheduling` Events.
//! - `check-values`: `helm template` with `examples/gpu-values.yaml` as
//!   `my-values.yaml`, then `convoy-scheduler check-config`.
//! - `simulate`: the dump command on a cluster holding an object of every
//!   kind `simulate` reads (volumes, DRA, PriorityClasses, PDBs, PodGroups
//!   of both APIs, ...), then `simulate`; the dump must hold each kind, and
//!   pods that need them must be placed where only they allow.
//!
//! Every marked block must be run by a test here (`every_marked_block_is_run`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use serde_json::Value;

/// The page whose commands are run.
const PAGE: &str = "docs/operating.md";
/// Where the page installs the chart.
const NAMESPACE: &str = "convoy-system";
const RELEASE: &str = "convoy";
/// The blocks the tests below run.
const RUN: [&str; 7] =
    ["install", "leader", "logs", "logs-json", "pod", "check-values", "simulate"];

/// The page's runnable blocks by name.
fn blocks() -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(convoy_testenv::repo_root().join(PAGE))?;
    let mut out = BTreeMap::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(name) = line.trim().strip_prefix("<!-- e2e:").and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let name = name.trim().to_string();
        let fence = lines.by_ref().map(|(_, l)| l).find(|l| !l.trim().is_empty());
        ensure!(
            fence.map(str::trim) == Some("```sh"),
            "{PAGE}:{}: `<!-- e2e: {name} -->` is not followed by a ```sh block",
            n + 1
        );
        let mut script = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            script.push_str(l);
            script.push('\n');
        }
        ensure!(out.insert(name.clone(), script).is_none(), "{PAGE}: two blocks named {name}");
    }
    Ok(out)
}

fn block(name: &str) -> Result<String> {
    blocks()?.remove(name).with_context(|| format!("{PAGE} has no block `<!-- e2e: {name} -->`"))
}

/// `kubectl` as the blocks see it: the real one, except `logs`, answered
/// from the log of the local replica it names in the chart's namespace.
const KUBECTL_SHIM: &str = r#"#!/bin/bash
for a in "$@"; do
  if [ "$a" = logs ]; then
    ns=; pod=; seen=; prev=
    for b in "$@"; do
      case "$prev" in -n|--namespace) ns=$b; prev=; continue;; esac
      case "$b" in
        -n|--namespace) prev=$b;;
        --namespace=*) ns=${b#--namespace=};;
        logs) seen=1;;
        -*) ;;
        *) if [ -n "$seen" ] && [ -z "$pod" ]; then pod=$b; fi;;
      esac
    done
    if [ "$ns" != "$REPLICA_NAMESPACE" ]; then
      echo "kubectl shim: logs in namespace '$ns'; the replicas run in $REPLICA_NAMESPACE" >&2; exit 1
    fi
    if [ -z "$pod" ] || [ ! -f "$REPLICA_LOGS/$pod.log" ]; then
      echo "Error from server (NotFound): pods \"$pod\" not found (a replica's pod name is expected)" >&2; exit 1
    fi
    exec cat "$REPLICA_LOGS/$pod.log"
  fi
done
exec "$REAL_KUBECTL" "$@"
"#;

/// A directory to run the blocks from: `charts/` and `examples/` of the
/// repository, `bin/` with kubectl (the shim), helm and convoy-scheduler.
struct Shell {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Shell {
    fn new(kubeconfig: Option<&Path>, replica_logs: Option<&Path>) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("convoy-docs-").tempdir()?;
        let root = convoy_testenv::repo_root();
        for d in ["charts", "examples"] {
            std::os::unix::fs::symlink(root.join(d), dir.path().join(d))?;
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin)?;
        std::fs::create_dir_all(dir.path().join("home"))?;
        let testenv_bin = convoy_testenv::bin_dir()?;
        std::os::unix::fs::symlink(testenv_bin.join("helm"), bin.join("helm"))?;
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_convoy-scheduler"),
            bin.join("convoy-scheduler"),
        )?;
        std::fs::write(bin.join("kubectl"), KUBECTL_SHIM)?;
        std::fs::set_permissions(bin.join("kubectl"), std::fs::Permissions::from_mode(0o755))?;
        let s = |p: &Path| p.to_string_lossy().to_string();
        let mut env = vec![
            ("PATH".to_string(), format!("{}:/usr/local/bin:/usr/bin:/bin", s(&bin))),
            ("HOME".to_string(), s(&dir.path().join("home"))),
            ("HELM_CONFIG_HOME".to_string(), s(&dir.path().join("home/helm-config"))),
            ("HELM_CACHE_HOME".to_string(), s(&dir.path().join("home/helm-cache"))),
            ("HELM_DATA_HOME".to_string(), s(&dir.path().join("home/helm-data"))),
            ("REAL_KUBECTL".to_string(), s(&testenv_bin.join("kubectl"))),
            ("REPLICA_NAMESPACE".to_string(), NAMESPACE.to_string()),
        ];
        if let Some(k) = kubeconfig {
            env.push(("KUBECONFIG".to_string(), s(k)));
        }
        if let Some(l) = replica_logs {
            env.push(("REPLICA_LOGS".to_string(), s(l)));
        }
        Ok(Self { dir, env })
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// Runs block `name` of the page; its standard output.
    fn run(&self, name: &str) -> Result<String> {
        let script = block(name)?;
        let out = Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", &script])
            .current_dir(self.dir.path())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .context("running bash")?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            bail!(
                "{PAGE}, block `{name}` failed ({}):\n{script}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }
}

#[test]
fn every_marked_block_is_run() -> Result<()> {
    let names: BTreeSet<String> = blocks()?.into_keys().collect();
    let run: BTreeSet<String> = RUN.iter().map(|s| s.to_string()).collect();
    ensure!(names == run, "{PAGE} marks blocks {names:?}; the tests run {run:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_leader_logs_and_events_as_the_docs_say() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let shell = Shell::new(Some(cp.env.kubeconfig()), Some(cp.env.dir()))?;

    shell.run("install")?;
    Api::<Deployment>::namespaced(cp.client.clone(), NAMESPACE)
        .get(RELEASE)
        .await
        .context("the chart's Deployment")?;
    let cm = Api::<ConfigMap>::namespaced(cp.client.clone(), NAMESPACE)
        .get(&format!("{RELEASE}-config"))
        .await
        .context("the chart's ConfigMap")?;
    let config = cm.data.as_ref().and_then(|d| d.get("config.yaml")).context("no config.yaml")?;

    // Two replicas as the Deployment runs them, named as its pods would be.
    let names = ["convoy-5d8f7c6b9-4xk2p", "convoy-5d8f7c6b9-m7q9z"];
    let mut first =
        Scheduler::start_with_options(&cp.env, names[0], config, &["--log-format=json"], "info")?;
    first.wait_ready(Duration::from_secs(60)).await?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), NAMESPACE);
    let holder = eventually(Duration::from_secs(30), || async {
        leases.get(RELEASE).await.ok()?.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await
    .with_context(|| format!("nobody holds the Lease{}", first.tail()))?;
    let mut second =
        Scheduler::start_with_options(&cp.env, names[1], config, &["--log-format=json"], "info")?;
    second.wait_ready(Duration::from_secs(60)).await?;

    let leader = shell.run("leader")?;
    ensure!(
        leader.trim() == holder,
        "the `leader` block printed {leader:?}, the Lease holder is {holder}"
    );
    ensure!(names.contains(&holder.as_str()), "the Lease is held by {holder}");

    // A pod that fits nowhere.
    create_nodes(&cp.client, vec![node("n1", "4", "16Gi", "110")]).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("my-pod", CONVOY, "100", "1Gi")).await?;
    let leading = if holder == names[0] { &first } else { &second };
    let reported = eventually(Duration::from_secs(30), || async {
        let decided = leading.log().contains("default/my-pod is unschedulable");
        let events = events(&cp.client, "default", "FailedScheduling").await.ok()?;
        (decided && !events.is_empty()).then_some(())
    })
    .await;
    ensure!(reported.is_some(), "my-pod not reported unschedulable{}", leading.tail());

    let lines = shell.run("logs")?;
    ensure!(
        lines.contains("default/my-pod is unschedulable"),
        "the `logs` block found no decision:\n{lines}"
    );
    let json = shell.run("logs-json")?;
    let objects: Vec<Value> =
        json.lines().map(serde_json::from_str).collect::<Result<_, _>>().with_context(|| {
            format!("the `logs-json` block printed lines that are not JSON:\n{json}")
        })?;
    ensure!(
        !objects.is_empty() && objects.iter().all(|o| o["pod"] == "default/my-pod"),
        "the `logs-json` block printed {json}"
    );

    let described = shell.run("pod")?;
    for want in
        ["FailedScheduling", "0/1 nodes are available: 1 Insufficient cpu", "\"PodScheduled\""]
    {
        ensure!(described.contains(want), "the `pod` block does not print {want:?}:\n{described}");
    }
    ensure!(
        first.running() && second.running(),
        "a replica exited{}{}",
        first.tail(),
        second.tail()
    );
    Ok(())
}

#[test]
fn check_values_as_the_docs_say() -> Result<()> {
    let shell = Shell::new(None, None)?;
    std::fs::copy(
        convoy_testenv::repo_root().join("examples/gpu-values.yaml"),
        shell.path("my-values.yaml"),
    )?;
    let summary = shell.run("check-values")?;
    for want in [
        "leader election: leases convoy-system/convoy",
        "profile \"convoy-scheduler\":",
        "profile \"convoy-gpu\":",
    ] {
        ensure!(summary.contains(want), "check-config does not print {want:?}:\n{summary}");
    }
    Ok(())
}

/// An object of (nearly) every kind `simulate` reads, in namespace `prod`.
const CLUSTER: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: prod, labels: {team: prod}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 1000000
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: prod}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: disk}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/disk}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [disk-node]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: prod}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local
  resources: {requests: {storage: 1Gi}}
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.example.com}
spec: {attachRequired: false}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: gpu-node-gpu.example.com}
spec:
  driver: gpu.example.com
  nodeName: gpu-node
  pool: {name: gpu-node, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-0}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: gpu, namespace: prod}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: any-gpu, namespace: prod}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: trio, namespace: prod}
spec: {minMember: 2}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: duo, namespace: prod}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
"#;

/// The pods to place: each needs objects of the dump to land where it must
/// (`None`: anywhere).
const MY_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: volume-user, namespace: prod}
spec:
  schedulerName: convoy-scheduler
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Pod
metadata: {name: claim-user, namespace: prod}
spec:
  schedulerName: convoy-scheduler
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}, claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimName: gpu}]
---
apiVersion: v1
kind: Pod
metadata: {name: urgent-0, namespace: prod}
spec:
  schedulerName: convoy-scheduler
  priorityClassName: urgent
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: trio-0, namespace: prod, labels: {scheduling.x-k8s.io/pod-group: trio}}
spec:
  schedulerName: convoy-scheduler
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: trio-1, namespace: prod, labels: {scheduling.x-k8s.io/pod-group: trio}}
spec:
  schedulerName: convoy-scheduler
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: duo-0, namespace: prod}
spec:
  schedulerName: convoy-scheduler
  schedulingGroup: {podGroupName: duo}
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: duo-1, namespace: prod}
spec:
  schedulerName: convoy-scheduler
  schedulingGroup: {podGroupName: duo}
  containers: [{name: c, image: app, resources: {requests: {cpu: 100m}}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_on_a_dump_as_the_docs_say() -> Result<()> {
    let cp = ControlPlane::start().await?;
    install_crd(&cp)?;
    let mut nodes = Vec::new();
    for name in ["plain", "disk-node", "gpu-node"] {
        let mut n = node(name, "8", "32Gi", "110");
        n.metadata.labels = Some([("kubernetes.io/hostname".to_string(), name.to_string())].into());
        nodes.push(n);
    }
    create_nodes(&cp.client, nodes).await?;
    let shell = Shell::new(Some(cp.env.kubeconfig()), None)?;
    let cluster = shell.path("cluster.yaml");
    std::fs::write(&cluster, CLUSTER)?;
    cp.env.kubectl(&["apply", "-f", &cluster.to_string_lossy()])?;
    // What the PV controller (not running here) would write.
    cp.env.kubectl(&[
        "patch",
        "pv",
        "disk",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Available"}}"#,
    ])?;
    // A pod already running: load the dump must carry.
    let mut running = pod("running", "default-scheduler", "1", "1Gi");
    running.spec.as_mut().expect("spec").node_name = Some("plain".into());
    Api::<Pod>::namespaced(cp.client.clone(), "prod")
        .create(&PostParams::default(), &running)
        .await?;
    std::fs::write(shell.path("my-pods.yaml"), MY_PODS)?;

    let out = shell.run("simulate")?;

    // The dump holds every kind created above.
    let dump = std::fs::read_to_string(shell.path("what-if.yaml"))?;
    let (cluster_part, _) = dump.split_once("\n---\n").context("no `---` in what-if.yaml")?;
    let list: Value = serde_saphyr::from_str(cluster_part)?;
    let kinds: BTreeSet<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            format!(
                "{} {}",
                o["apiVersion"].as_str().unwrap_or(""),
                o["kind"].as_str().unwrap_or("")
            )
        })
        .collect();
    for want in [
        "v1 Namespace",
        "v1 Node",
        "v1 Pod",
        "v1 Service",
        "scheduling.k8s.io/v1 PriorityClass",
        "policy/v1 PodDisruptionBudget",
        "storage.k8s.io/v1 StorageClass",
        "storage.k8s.io/v1 CSIDriver",
        "v1 PersistentVolume",
        "v1 PersistentVolumeClaim",
        "resource.k8s.io/v1 DeviceClass",
        "resource.k8s.io/v1 ResourceSlice",
        "resource.k8s.io/v1 ResourceClaim",
        "resource.k8s.io/v1 ResourceClaimTemplate",
        "scheduling.x-k8s.io/v1alpha1 PodGroup",
        "scheduling.k8s.io/v1beta1 PodGroup",
    ] {
        ensure!(kinds.contains(want), "the dump holds no {want}; it holds {kinds:?}");
    }

    // Where simulate put the pods: `prod/NAME -> NODE`.
    let placed: BTreeMap<&str, &str> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (pod, arrow, node) = (w.next()?, w.next()?, w.next()?);
            (arrow == "->").then_some((pod.strip_prefix("prod/")?, node))
        })
        .collect();
    let expect: [(&str, Option<&str>); 7] = [
        ("volume-user", Some("disk-node")),
        ("claim-user", Some("gpu-node")),
        ("urgent-0", None),
        ("trio-0", None),
        ("trio-1", None),
        ("duo-0", None),
        ("duo-1", None),
    ];
    for (name, node) in expect {
        let got = placed.get(name).copied();
        ensure!(
            got.is_some() && (node.is_none() || got == node),
            "simulate put prod/{name} on {got:?}, expected {}:\n{out}",
            node.unwrap_or("a node")
        );
    }
    ensure!(
        out.contains("7 bound, 0 pending") && !out.contains("pending:"),
        "simulate left pods pending:\n{out}"
    );
    Ok(())
}
