//! The Helm chart, rendered: `helm lint --strict` and `helm template` of
//! `charts/convoy` with testenv's `helm` (a failing lint or render fails
//! the test), the rendered objects checked field by field, the rendered
//! KubeSchedulerConfiguration checked by `convoy-scheduler check-config`,
//! and values the schema or the templates must refuse. No API server: the
//! chart on a cluster is `tests/e2e_chart.rs`.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use convoy_testenv::chart::{self, Rendered};
use serde_json::{Value, json};

const RELEASE: &str = "convoy";
const NAMESPACE: &str = "convoy-system";

/// The rendered `config.yaml` of the ConfigMap.
fn config_of(r: &Rendered) -> Result<String> {
    let cm = r.get("ConfigMap", "convoy-config").context("no ConfigMap convoy-config")?;
    Ok(cm["data"]["config.yaml"].as_str().context("no config.yaml in the ConfigMap")?.to_string())
}

/// `convoy-scheduler check-config` of `yaml`: its output, or an error
/// with what it printed.
fn check_config(yaml: &str) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, yaml)?;
    let out = Command::new(env!("CARGO_BIN_EXE_convoy-scheduler"))
        .arg("check-config")
        .arg("--config")
        .arg(&file)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "check-config refused the chart's configuration:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The Deployment's one container.
fn container<'a>(r: &'a Rendered, release: &'a str) -> Result<&'a Value> {
    let d = r.get("Deployment", release).context("no Deployment")?;
    let containers =
        d["spec"]["template"]["spec"]["containers"].as_array().context("containers")?;
    ensure!(containers.len() == 1, "one container: {containers:?}");
    Ok(&containers[0])
}

#[test]
fn chart_lints_and_renders_a_hardened_deployment_with_its_config() -> Result<()> {
    chart::lint("")?;
    let r = chart::render(RELEASE, NAMESPACE, "")?;
    let kinds: Vec<&str> = r.objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ] {
        ensure!(kinds.contains(&kind), "no {kind} among {kinds:?}");
    }
    let crd = r.get("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io");
    ensure!(crd.is_some(), "the PodGroup CRD is not rendered");

    let d = r.get("Deployment", RELEASE).context("no Deployment")?;
    let pod = &d["spec"]["template"]["spec"];
    let selector = &d["spec"]["selector"]["matchLabels"];
    ensure!(d["spec"]["replicas"] == 2, "replicas {}", d["spec"]["replicas"]);
    ensure!(
        pod["serviceAccountName"] == RELEASE,
        "serviceAccountName {}",
        pod["serviceAccountName"]
    );
    ensure!(
        pod["terminationGracePeriodSeconds"] == 30,
        "terminationGracePeriodSeconds {}",
        pod["terminationGracePeriodSeconds"]
    );
    ensure!(
        pod["securityContext"]
            == json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                      "seccompProfile": {"type": "RuntimeDefault"}}),
        "pod securityContext {}",
        pod["securityContext"]
    );
    let term = &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    ensure!(
        term["topologyKey"] == "kubernetes.io/hostname"
            && term["labelSelector"]["matchLabels"] == *selector,
        "anti-affinity between replicas: {}",
        pod["affinity"]
    );

    let c = container(&r, RELEASE)?;
    ensure!(
        c["securityContext"]
            == json!({"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                      "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                      "seccompProfile": {"type": "RuntimeDefault"}}),
        "container securityContext {}",
        c["securityContext"]
    );
    ensure!(
        c["image"] == "ghcr.io/convoy-scheduler/convoy-scheduler:0.2.0",
        "image {}",
        c["image"]
    );
    let args: Vec<&str> =
        c["args"].as_array().context("args")?.iter().filter_map(Value::as_str).collect();
    ensure!(
        args == [
            "--config=/etc/convoy/config.yaml",
            "--logging-format=json",
            "--bind-address=0.0.0.0",
            "--secure-port=10259"
        ],
        "args {args:?}"
    );
    ensure!(
        c["ports"] == json!([{"name": "https", "containerPort": 10259, "protocol": "TCP"}]),
        "ports {}",
        c["ports"]
    );
    // The binary's routes (src/http.rs), on the secure port, named https.
    ensure!(
        c["livenessProbe"]["httpGet"]
            == json!({"path": "/healthz", "port": "https", "scheme": "HTTPS"}),
        "{}",
        c["livenessProbe"]
    );
    ensure!(
        c["readinessProbe"]["httpGet"]
            == json!({"path": "/readyz", "port": "https", "scheme": "HTTPS"}),
        "{}",
        c["readinessProbe"]
    );
    ensure!(c["resources"]["requests"]["cpu"] == "500m", "resources {}", c["resources"]);
    let env = &c["env"];
    ensure!(
        env[0]
            == json!({"name": "CONVOY_IDENTITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
            && env[1] == json!({"name": "RUST_LOG", "value": "info"}),
        "env {env}"
    );
    ensure!(
        c["volumeMounts"]
            == json!([{"name": "config", "mountPath": "/etc/convoy", "readOnly": true}])
            && pod["volumes"]
                == json!([{"name": "config", "configMap": {"name": "convoy-config"}}]),
        "config volume {} {}",
        c["volumeMounts"],
        pod["volumes"]
    );

    let pdb = r.get("PodDisruptionBudget", RELEASE).context("no PodDisruptionBudget")?;
    ensure!(
        pdb["spec"] == json!({"maxUnavailable": 1, "selector": {"matchLabels": selector}}),
        "PodDisruptionBudget {}",
        pdb["spec"]
    );
    let svc = r.get("Service", "convoy-metrics").context("no metrics Service")?;
    ensure!(
        svc["spec"]["selector"] == *selector
            && svc["spec"]["ports"]
                == json!([{"name": "https", "port": 10259, "targetPort": "https", "protocol": "TCP"}]),
        "metrics Service {}",
        svc["spec"]
    );

    // The configuration the Deployment mounts is one Convoy accepts, with
    // the lease where the Role lets it write.
    let summary = check_config(&config_of(&r)?)?;
    for line in [
        "leader election: leases convoy-system/convoy (lease 15s, renew 10s, retry 2s)",
        "client: kubeconfig (in-cluster), qps 50, burst 100",
        "profile \"convoy-scheduler\":",
    ] {
        ensure!(summary.contains(line), "check-config does not print {line:?}:\n{summary}");
    }
    let role = r.get("Role", "convoy-lease").context("no lease Role")?;
    ensure!(role["rules"][1]["resourceNames"] == json!([RELEASE]), "lease Role {}", role["rules"]);
    Ok(())
}

#[test]
fn chart_values_reach_the_deployment_and_the_config() -> Result<()> {
    let values = r#"
image: {repository: registry.example/convoy, tag: "1.2.3", pullPolicy: Always}
replicas: 1
leaderElection: {enabled: false}
profiles:
- schedulerName: convoy-scheduler
- schedulerName: convoy-gpu
  plugins:
    multiPoint:
      enabled: [{name: GpuPlacement, weight: 5}]
logFormat: text
logLevel: info,convoy_adapters=debug
httpPort: 9090
metricsService: {enabled: false}
podDisruptionBudget: {enabled: false}
podAntiAffinity: hard
rbac:
  extraRules:
  - {apiGroups: [example.com], resources: [gpuhealths], verbs: [list, watch]}
"#;
    chart::lint(values)?;
    let r = chart::render("edge", "sched", values)?;
    let role = r.get("ClusterRole", "edge").context("no ClusterRole")?;
    let rules = role["rules"].as_array().context("rules")?;
    ensure!(
        rules.last()
            == Some(&serde_json::json!(
                {"apiGroups": ["example.com"], "resources": ["gpuhealths"], "verbs": ["list", "watch"]}
            )),
        "rbac.extraRules not the ClusterRole's last rule: {rules:?}"
    );
    ensure!(r.get("Role", "edge-lease").is_none(), "a lease Role without leader election");
    ensure!(r.of_kind("Service").next().is_none(), "a Service with metricsService.enabled false");
    ensure!(
        r.of_kind("PodDisruptionBudget").next().is_none(),
        "a PDB with podDisruptionBudget.enabled false"
    );
    let d = r.get("Deployment", "edge").context("no Deployment")?;
    let required = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        [0];
    ensure!(required["topologyKey"] == "kubernetes.io/hostname", "hard anti-affinity {}", required);
    let c = container(&r, "edge")?;
    ensure!(
        c["image"] == "registry.example/convoy:1.2.3" && c["imagePullPolicy"] == "Always",
        "{c}"
    );
    ensure!(
        c["args"][1] == "--logging-format=text" && c["args"][3] == "--secure-port=9090",
        "{}",
        c["args"]
    );
    ensure!(c["ports"][0]["containerPort"] == 9090, "{}", c["ports"]);
    ensure!(c["env"][1]["value"] == "info,convoy_adapters=debug", "{}", c["env"]);

    let cm = r.get("ConfigMap", "edge-config").context("no ConfigMap")?;
    let summary = check_config(cm["data"]["config.yaml"].as_str().context("config.yaml")?)?;
    for line in [
        "leader election: off",
        "profile \"convoy-scheduler\":",
        "profile \"convoy-gpu\":",
        "GpuPlacement(5)",
    ] {
        ensure!(summary.contains(line), "check-config does not print {line:?}:\n{summary}");
    }
    Ok(())
}

#[test]
fn chart_refuses_bad_values_naming_the_field() -> Result<()> {
    for (values, want) in [
        ("bogus: 1", "additional properties 'bogus' not allowed"),
        ("logFormat: xml", "/logFormat"),
        ("replicas: 0", "/replicas"),
        ("leaderElection: {enabled: true, leaseDuration: 15}", "/leaderElection/leaseDuration"),
        ("profiles: []", "/profiles"),
        ("profiles: [{plugins: {}}]", "schedulerName"),
        ("httpPort: 70000", "/httpPort"),
        ("podAntiAffinity: sometimes", "/podAntiAffinity"),
        ("leaderElection: {enabled: false}", "/leaderElection/enabled"),
    ] {
        chart::refused(RELEASE, NAMESPACE, values, want).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}
