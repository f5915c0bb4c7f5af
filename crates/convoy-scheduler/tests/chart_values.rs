//! The Helm chart's values beyond the basics of `tests/chart.rs`: every
//! KubeSchedulerConfiguration field settable through `config`, rendered
//! into the ConfigMap and accepted by `convoy-scheduler check-config`; the
//! PriorityClass (none by default); the optional ServiceMonitor,
//! PrometheusRule and Grafana dashboard, whose queries may name only
//! metrics Convoy registers; NOTES.txt; and the chart README's table of
//! values. No API server.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use convoy_testenv::chart::{self, Rendered};
use convoy_testenv::repo_root;
use serde_json::{Value, json};

const RELEASE: &str = "convoy";
const NAMESPACE: &str = "convoy-system";

/// The rendered `config.yaml` of release `release`'s ConfigMap.
fn config_of(r: &Rendered, release: &str) -> Result<String> {
    let name = format!("{release}-config");
    let cm = r.get("ConfigMap", &name).with_context(|| format!("no ConfigMap {name}"))?;
    Ok(cm["data"]["config.yaml"].as_str().context("no config.yaml in the ConfigMap")?.to_string())
}

/// `convoy-scheduler check-config` of `yaml`: its output, or an error with
/// what it printed; and the configuration as the binary's loader reads it.
fn check_config(yaml: &str) -> Result<(String, convoy_config::SchedulerConfig)> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, yaml)?;
    let out = Command::new(env!("CARGO_BIN_EXE_convoy-scheduler"))
        .arg("check-config")
        .arg("--config")
        .arg(&file)
        .output()?;
    ensure!(
        out.status.success(),
        "check-config refused the chart's configuration:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = convoy_scheduler::load_config(Some(&file))
        .map_err(|e| anyhow::anyhow!("loading the chart's configuration: {e}"))?;
    Ok((String::from_utf8_lossy(&out.stdout).to_string(), loaded))
}

/// Top-level keys of the rendered configuration, in the order written.
fn top_level_keys(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter(|l| !l.starts_with([' ', '-', '#']) && !l.is_empty())
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_string()))
        .collect()
}

#[test]
fn every_config_field_reaches_the_rendered_configuration() -> Result<()> {
    let values = r#"
clientConnection: {qps: 2500, burst: 3000}
config:
  parallelism: 8
  percentageOfNodesToScore: 30
  podInitialBackoffSeconds: 2
  podMaxBackoffSeconds: 31536000
  delayCacheUntilActive: true
  clientConnection: {contentType: application/json, acceptContentTypes: application/json}
  enableProfiling: false
  enableContentionProfiling: false
  extenders: []
"#;
    chart::lint(values)?;
    let r = chart::render(RELEASE, NAMESPACE, values)?;
    let yaml = config_of(&r, RELEASE)?;
    // Each field once, at the top level: the chart's own fields and
    // `config`'s do not overlap.
    let keys = top_level_keys(&yaml);
    let unique: BTreeSet<&String> = keys.iter().collect();
    ensure!(unique.len() == keys.len(), "a field written twice: {keys:?}\n{yaml}");
    for key in [
        "parallelism",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "delayCacheUntilActive",
        "enableProfiling",
        "enableContentionProfiling",
        "extenders",
        "clientConnection",
        "leaderElection",
        "profiles",
    ] {
        ensure!(keys.iter().any(|k| k == key), "{key} not in the configuration:\n{yaml}");
    }
    // A large number stays an integer (not 3.1536e+07).
    ensure!(yaml.contains("podMaxBackoffSeconds: 31536000\n"), "{yaml}");

    let (summary, loaded) = check_config(&yaml)?;
    for line in [
        "parallelism: 8",
        "percentageOfNodesToScore: 30%",
        "pod backoff: 2s initial, 31536000s max",
        "leader election: leases convoy-system/convoy (lease 15s, renew 10s, retry 2s)",
        "client: kubeconfig (in-cluster), qps 2500, burst 3000",
    ] {
        ensure!(summary.contains(line), "check-config does not print {line:?}:\n{summary}");
    }
    ensure!(loaded.delay_cache_until_active, "delayCacheUntilActive not read: {yaml}");
    ensure!(
        loaded.client_connection.content_type == "application/json"
            && loaded.client_connection.accept_content_types == "application/json",
        "clientConnection content types not read: {:?}",
        loaded.client_connection
    );

    // Unset, `config` adds nothing: Convoy's defaults apply.
    let r = chart::render(RELEASE, NAMESPACE, "")?;
    let yaml = config_of(&r, RELEASE)?;
    let keys = top_level_keys(&yaml);
    ensure!(
        keys == ["apiVersion", "kind", "clientConnection", "leaderElection", "profiles"],
        "{keys:?}"
    );
    let (summary, loaded) = check_config(&yaml)?;
    ensure!(summary.contains("parallelism: 16\n"), "{summary}");
    ensure!(!loaded.delay_cache_until_active, "{yaml}");
    Ok(())
}

/// The fields of the configuration file Convoy reads (`RawConfig` in
/// crates/convoy-config/src/raw.rs), camelCased.
fn config_file_fields() -> Result<Vec<String>> {
    let raw = std::fs::read_to_string(repo_root().join("crates/convoy-config/src/raw.rs"))?;
    let start = raw.find("pub(crate) struct RawConfig {").context("no RawConfig in raw.rs")?;
    let body = &raw[start..];
    let body = &body[..body.find("\n}").context("RawConfig's end")?];
    let fields: Vec<String> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .map(|snake| {
            let mut out = String::new();
            let mut upper = false;
            for c in snake.chars() {
                match c {
                    '_' => upper = true,
                    c if upper => {
                        out.push(c.to_ascii_uppercase());
                        upper = false;
                    }
                    c => out.push(c),
                }
            }
            out
        })
        .collect();
    ensure!(fields.len() >= 10, "too few RawConfig fields read: {fields:?}");
    Ok(fields)
}

/// The chart's values.schema.json.
fn schema() -> Result<Value> {
    let text = std::fs::read_to_string(chart::chart_dir().join("values.schema.json"))?;
    Ok(serde_json::from_str(&text)?)
}

#[test]
fn the_schema_covers_every_field_of_the_configuration_file() -> Result<()> {
    let schema = schema()?;
    let config = &schema["properties"]["config"];
    ensure!(config["additionalProperties"] == false, "config accepts unknown keys: {config}");
    // Set by the chart itself, from values of their own.
    let own = ["apiVersion", "kind", "leaderElection", "profiles"];
    for field in config_file_fields()? {
        ensure!(
            own.contains(&field.as_str()) || config["properties"].get(&field).is_some(),
            "the configuration field {field} has no value in the chart (config.{field} in \
             values.schema.json)"
        );
    }
    Ok(())
}

#[test]
fn the_schema_refuses_typos_and_what_convoy_refuses() -> Result<()> {
    for (values, want) in [
        ("config: {paralelism: 4}", "additional properties 'paralelism' not allowed"),
        ("config: {parallelism: 0}", "/config/parallelism"),
        ("config: {percentageOfNodesToScore: 101}", "/config/percentageOfNodesToScore"),
        ("config: {podMaxBackoffSeconds: 31536001}", "/config/podMaxBackoffSeconds"),
        ("config: {delayCacheUntilActive: yes please}", "/config/delayCacheUntilActive"),
        ("config: {enableProfiling: true}", "/config/enableProfiling"),
        ("config: {extenders: [{urlPrefix: http://x}]}", "/config/extenders"),
        // Values of their own: not twice.
        ("config: {profiles: []}", "additional properties 'profiles' not allowed"),
        ("config: {leaderElection: {leaderElect: false}}", "'leaderElection' not allowed"),
        ("config: {clientConnection: {qps: 5}}", "additional properties 'qps' not allowed"),
        ("config: {clientConnection: {kubeconfig: /x}}", "'kubeconfig' not allowed"),
        ("priorityClassName: 7", "/priorityClassName"),
        ("serviceMonitor: {enabeld: true}", "additional properties 'enabeld' not allowed"),
        ("serviceMonitor: {scheme: ftp}", "/serviceMonitor/scheme"),
        ("serviceMonitor: {interval: 30}", "/serviceMonitor/interval"),
        ("prometheusRule: {pendingPodsThreshold: -1}", "/prometheusRule/pendingPodsThreshold"),
        ("prometheusRule: {threshold: 5}", "additional properties 'threshold' not allowed"),
        ("grafanaDashboard: {label: {}}", "additional properties 'label' not allowed"),
    ] {
        chart::refused(RELEASE, NAMESPACE, values, want).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The Deployment's pod spec.
fn pod_spec<'a>(r: &'a Rendered, release: &str) -> Result<&'a Value> {
    Ok(&r.get("Deployment", release).context("no Deployment")?["spec"]["template"]["spec"])
}

#[test]
fn the_priority_class_is_none_by_default_and_settable() -> Result<()> {
    let r = chart::render(RELEASE, NAMESPACE, "")?;
    let pod = pod_spec(&r, RELEASE)?;
    ensure!(pod.get("priorityClassName").is_none(), "a default PriorityClass: {pod}");

    let values = "priorityClassName: system-cluster-critical";
    chart::lint(values)?;
    let r = chart::render(RELEASE, "kube-system", values)?;
    let pod = pod_spec(&r, RELEASE)?;
    ensure!(pod["priorityClassName"] == "system-cluster-critical", "{pod}");
    Ok(())
}

const MONITORING: &str = r#"
serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}, interval: 15s}
prometheusRule: {enabled: true, pendingPodsThreshold: 7, labels: {role: alerts}, alertLabels: {team: sched}}
grafanaDashboard: {enabled: true, namespace: monitoring, annotations: {grafana_folder: Scheduling}}
"#;

const MONITORING_KINDS: [&str; 2] = ["ServiceMonitor", "PrometheusRule"];

/// The rules of the PrometheusRule, by alert name.
fn alert_rules(r: &Rendered) -> Result<Vec<&Value>> {
    let rule = r.of_kind("PrometheusRule").next().context("no PrometheusRule")?;
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_array().context("groups")? {
        out.extend(group["rules"].as_array().context("rules")?);
    }
    Ok(out)
}

fn alert<'a>(alerts: &[&'a Value], name: &str) -> Result<&'a Value> {
    alerts.iter().copied().find(|a| a["alert"] == name).with_context(|| format!("no alert {name}"))
}

#[test]
fn monitoring_is_off_by_default() -> Result<()> {
    let r = chart::render(RELEASE, NAMESPACE, "")?;
    for kind in MONITORING_KINDS {
        ensure!(r.of_kind(kind).next().is_none(), "a {kind} by default");
    }
    ensure!(r.get("ConfigMap", "convoy-dashboard").is_none(), "a dashboard by default");
    Ok(())
}

#[test]
fn service_monitor_scrapes_the_metrics_service_with_the_pods_token() -> Result<()> {
    chart::lint(MONITORING)?;
    let r = chart::render("edge", "sched", MONITORING)?;
    let sm = r.get("ServiceMonitor", "edge").context("no ServiceMonitor")?;
    ensure!(sm["apiVersion"] == "monitoring.coreos.com/v1", "{sm}");
    ensure!(sm["metadata"]["namespace"] == "sched", "{sm}");
    ensure!(sm["metadata"]["labels"]["release"] == "kube-prometheus-stack", "labels: {sm}");
    ensure!(sm["spec"]["namespaceSelector"] == json!({"matchNames": ["sched"]}), "{sm}");
    let endpoints = sm["spec"]["endpoints"].as_array().context("endpoints")?;
    ensure!(endpoints.len() == 1, "{endpoints:?}");
    let e = &endpoints[0];
    for (field, want) in [
        ("port", json!("https")),
        ("scheme", json!("https")),
        ("path", json!("/metrics")),
        ("bearerTokenFile", json!("/var/run/secrets/kubernetes.io/serviceaccount/token")),
        ("tlsConfig", json!({"insecureSkipVerify": true})),
        ("interval", json!("15s")),
    ] {
        ensure!(e[field] == want, "endpoint {field}: {} (wanted {want})", e[field]);
    }
    ensure!(
        e["relabelings"]
            == json!([{"action": "replace", "targetLabel": "job", "replacement": "edge"}]),
        "the job label the alerts select: {}",
        e["relabelings"]
    );
    // It selects the chart's metrics Service, and names one of its ports.
    let svc = r
        .of_kind("Service")
        .find(|s| {
            let labels = &s["metadata"]["labels"];
            sm["spec"]["selector"]["matchLabels"]
                .as_object()
                .is_some_and(|m| m.iter().all(|(k, v)| labels[k] == *v))
        })
        .context("the ServiceMonitor selects no Service")?;
    let ports: Vec<&Value> = svc["spec"]["ports"].as_array().context("ports")?.iter().collect();
    ensure!(
        ports.iter().any(|p| p["name"] == e["port"]),
        "the ServiceMonitor's port {} is not a port of Service {}: {ports:?}",
        e["port"],
        svc["metadata"]["name"]
    );

    // Verifying the certificate instead, and scraping without a token.
    let verified = r#"
serviceMonitor:
  enabled: true
  bearerTokenFile: ""
  tlsConfig: {insecureSkipVerify: false, serverName: convoy, ca: {configMap: {name: ca, key: ca.crt}}}
"#;
    chart::lint(verified)?;
    let r = chart::render(RELEASE, NAMESPACE, verified)?;
    let e = &r.get("ServiceMonitor", RELEASE).context("no ServiceMonitor")?["spec"]["endpoints"][0];
    ensure!(
        e["tlsConfig"]
            == json!({"insecureSkipVerify": false, "serverName": "convoy",
                      "ca": {"configMap": {"name": "ca", "key": "ca.crt"}}})
            && e.get("bearerTokenFile").is_none(),
        "{e}"
    );

    // Without the Service there is nothing to scrape.
    let err = chart::render(
        RELEASE,
        NAMESPACE,
        "serviceMonitor: {enabled: true}\nmetricsService: {enabled: false}",
    )
    .err()
    .context("a ServiceMonitor without the metrics Service")?;
    ensure!(err.to_string().contains("serviceMonitor.enabled needs"), "{err}");
    Ok(())
}

#[test]
fn prometheus_rule_alerts_on_down_leaderless_pending_and_failing() -> Result<()> {
    let r = chart::render("edge", "sched", MONITORING)?;
    let rule = r.get("PrometheusRule", "edge").context("no PrometheusRule")?;
    ensure!(rule["metadata"]["labels"]["role"] == "alerts", "{}", rule["metadata"]);
    let alerts = alert_rules(&r)?;
    let names: Vec<&str> = alerts.iter().filter_map(|a| a["alert"].as_str()).collect();
    ensure!(
        names
            == [
                "ConvoySchedulerDown",
                "ConvoyNoLeader",
                "ConvoyPendingPods",
                "ConvoySchedulingAttemptsFailing"
            ],
        "{names:?}"
    );
    let sel = r#"job="edge",namespace="sched""#;
    let lease = {
        let (_, loaded) = check_config(&config_of(&r, "edge")?)?;
        loaded.leader_election.resource_name
    };
    ensure!(lease == "edge", "lease {lease}");
    for (name, expr, wait, severity) in [
        (
            "ConvoySchedulerDown",
            format!("absent(up{{{sel}}}) or up{{{sel}}} == 0"),
            "5m",
            "critical",
        ),
        (
            "ConvoyNoLeader",
            format!(r#"max(leader_election_master_status{{{sel},name="{lease}"}}) < 1"#),
            "2m",
            "critical",
        ),
        (
            "ConvoyPendingPods",
            format!(r#"max(scheduler_pending_pods{{{sel},queue="unschedulable"}}) > 7"#),
            "15m",
            "warning",
        ),
        (
            "ConvoySchedulingAttemptsFailing",
            format!(
                r#"sum(rate(scheduler_schedule_attempts_total{{{sel},result="error"}}[5m])) > 0"#
            ),
            "10m",
            "warning",
        ),
    ] {
        let a = alert(&alerts, name)?;
        ensure!(a["expr"] == expr.as_str(), "{name}: {} (wanted {expr})", a["expr"]);
        ensure!(a["for"] == wait, "{name}: for {}", a["for"]);
        ensure!(
            a["labels"] == json!({"severity": severity, "team": "sched"}),
            "{name}: {}",
            a["labels"]
        );
        ensure!(a["annotations"]["summary"].is_string(), "{name}: no summary");
        ensure!(a["annotations"]["description"].is_string(), "{name}: no description");
    }

    // Without leader election there is no Lease to watch; a selector of
    // the user's own replaces the ServiceMonitor's labels.
    let values = "replicas: 1\nleaderElection: {enabled: false}\nprometheusRule: {enabled: true, selector: 'service=\"my-convoy\"'}";
    let r = chart::render(RELEASE, NAMESPACE, values)?;
    let alerts = alert_rules(&r)?;
    ensure!(alert(&alerts, "ConvoyNoLeader").is_err(), "ConvoyNoLeader without leader election");
    let down = alert(&alerts, "ConvoySchedulerDown")?;
    ensure!(
        down["expr"] == r#"absent(up{service="my-convoy"}) or up{service="my-convoy"} == 0"#,
        "{}",
        down["expr"]
    );
    Ok(())
}

/// The dashboard as the chart ships it.
fn dashboard_file() -> Result<String> {
    Ok(std::fs::read_to_string(chart::chart_dir().join("dashboards/convoy.json"))?)
}

#[test]
fn grafana_dashboard_is_a_labelled_config_map_holding_the_json() -> Result<()> {
    let r = chart::render("edge", "sched", MONITORING)?;
    let cm = r.get("ConfigMap", "edge-dashboard").context("no dashboard ConfigMap")?;
    ensure!(cm["metadata"]["namespace"] == "monitoring", "{}", cm["metadata"]);
    ensure!(cm["metadata"]["labels"]["grafana_dashboard"] == "1", "{}", cm["metadata"]);
    ensure!(
        cm["metadata"]["annotations"] == json!({"grafana_folder": "Scheduling"}),
        "{}",
        cm["metadata"]
    );
    let text = cm["data"]["convoy.json"].as_str().context("no convoy.json")?;
    let rendered: Value = serde_json::from_str(text)?;
    let file: Value = serde_json::from_str(&dashboard_file()?)?;
    ensure!(rendered == file, "the ConfigMap's dashboard differs from dashboards/convoy.json");

    let titles: Vec<&str> = file["panels"]
        .as_array()
        .context("panels")?
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for want in [
        "Pods scheduled per second",
        "Scheduling attempts by result",
        "End-to-end scheduling latency",
        "Pending pods by queue",
        "Leader",
        "Binding latency",
        "Memory",
        "CPU",
    ] {
        ensure!(titles.contains(&want), "no panel {want:?} in {titles:?}");
    }
    let r = chart::render("edge", "sched", "grafanaDashboard: {enabled: true}")?;
    let cm = r.get("ConfigMap", "edge-dashboard").context("no dashboard ConfigMap")?;
    ensure!(cm["metadata"]["namespace"] == "sched", "{}", cm["metadata"]);
    Ok(())
}

/// PromQL keywords and aggregation operators: never metric names.
const PROMQL_WORDS: [&str; 22] = [
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "group",
];

/// The metric names a PromQL expression selects: identifiers outside
/// label matchers `{...}`, ranges `[...]` and strings, that are neither
/// a function (followed by `(`), a keyword, an aggregation, nor a label
/// of a `by (...)`, `without (...)`, `on (...)` or `ignoring (...)` list.
fn metric_names(expr: &str) -> Result<Vec<String>> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let skip_to = |from: usize, close: char| -> Result<usize> {
        let mut j = from + 1;
        let mut quote: Option<char> = None;
        while j < chars.len() {
            match (quote, chars[j]) {
                (Some(_), '\\') => j += 1,
                (Some(q), c) if c == q => quote = None,
                (None, '"' | '\'' | '`') => quote = Some(chars[j]),
                (None, c) if c == close => return Ok(j + 1),
                _ => {}
            }
            j += 1;
        }
        bail!("unclosed {close:?} in {expr}")
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip_to(i, '}')?;
        } else if c == '[' {
            i = skip_to(i, ']')?;
        } else if c == '"' || c == '\'' || c == '`' {
            i = skip_to(i, c)?;
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let followed_by_paren = chars.get(next) == Some(&'(');
            if ["by", "without", "on", "ignoring", "group_left", "group_right"]
                .contains(&word.as_str())
                && followed_by_paren
            {
                i = skip_to(next, ')')?;
            } else if !followed_by_paren && !PROMQL_WORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    Ok(names)
}

#[test]
fn metric_names_reads_promql() -> Result<()> {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, result) (rate(a_bucket{x="}[",y=~"$job"}[$__rate_interval]))) or max without (pod) (b) > 3 and on (pod) c{z="1"} unless absent(up)"#,
    )?;
    ensure!(names == ["a_bucket", "b", "c", "up"], "{names:?}");
    ensure!(metric_names("rate(x{a=\"b\"").is_err(), "an unclosed matcher is an error");
    Ok(())
}

/// The metric names Convoy exports: those of the scheduler's registry as
/// `/metrics` encodes it (`# TYPE` lines, with the samples' suffixes), and
/// any name a `register(` call elsewhere in crates/*/src passes as a
/// literal (metrics registered into the registry after it is built).
fn registered_metrics() -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    fn add(names: &mut BTreeSet<String>, name: &str, kind: &str) {
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "gauge" | "unknown" | "info" | "stateset" => &[""],
            _ => &["", "_total", "_bucket", "_sum", "_count"],
        };
        for s in suffixes {
            names.insert(format!("{name}{s}"));
        }
    }
    let text = convoy_scheduler::metrics::Metrics::new().encode();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').context("a TYPE line")?;
            add(&mut names, name, kind);
        }
    }
    ensure!(names.contains("scheduler_pending_pods"), "no registry read from:\n{text}");
    let crates = repo_root().join("crates");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates)? {
        let src = krate?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    for file in files {
        let source = std::fs::read_to_string(&file)?;
        for (at, _) in
            source.match_indices("register(").chain(source.match_indices("register_with_unit("))
        {
            let rest = source[at..].split_once('(').map_or("", |(_, r)| r).trim_start();
            if let Some(literal) = rest.strip_prefix('"') {
                let name = &literal[..literal.find('"').unwrap_or(0)];
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:".contains(c))
                    && name.contains('_')
                {
                    add(&mut names, name, "any");
                }
            }
        }
    }
    Ok(names)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Metrics the queries may use that Convoy does not export: Prometheus'
/// own `up`, one series per target.
const EXTERNAL_METRICS: [&str; 1] = ["up"];

/// Every PromQL expression of the dashboard: the panels' targets and the
/// metric selectors of the `label_values(...)` variables.
fn dashboard_exprs(dashboard: &Value) -> Result<Vec<String>> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().context("panels")? {
        for target in panel["targets"].as_array().context("targets")? {
            exprs.push(target["expr"].as_str().context("a target without expr")?.to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().context("templating")? {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"].as_str().context("a query variable's query")?;
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .with_context(|| format!("variable query {query}"))?;
        let (selector, _label) = inner.rsplit_once(',').context("label_values(metric, label)")?;
        exprs.push(selector.to_string());
    }
    Ok(exprs)
}

#[test]
fn alerts_and_dashboard_use_only_metrics_convoy_exports() -> Result<()> {
    let registered = registered_metrics()?;
    let r = chart::render(RELEASE, NAMESPACE, MONITORING)?;
    let mut used: Vec<(String, String)> = Vec::new();
    for a in alert_rules(&r)? {
        let expr = a["expr"].as_str().context("an alert without expr")?;
        for name in metric_names(expr)? {
            used.push((format!("alert {}", a["alert"]), name));
        }
    }
    let dashboard: Value = serde_json::from_str(&dashboard_file()?)?;
    for expr in dashboard_exprs(&dashboard)? {
        for name in metric_names(&expr)? {
            used.push(("dashboard".into(), name));
        }
    }
    let distinct: BTreeSet<&str> = used.iter().map(|(_, n)| n.as_str()).collect();
    for want in [
        "up",
        "leader_election_master_status",
        "scheduler_pending_pods",
        "scheduler_schedule_attempts_total",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        ensure!(distinct.contains(want), "{want} not read from the queries: {distinct:?}");
    }
    let unknown: Vec<String> = used
        .iter()
        .filter(|(_, n)| !registered.contains(n) && !EXTERNAL_METRICS.contains(&n.as_str()))
        .map(|(at, n)| format!("{n} ({at})"))
        .collect();
    ensure!(
        unknown.is_empty(),
        "metrics Convoy does not register: {unknown:?}\nregistered: {registered:?}"
    );
    Ok(())
}

/// NOTES.txt rendered with `values`: `helm template` renders no NOTES, so
/// a copy of the chart has it as a template's content.
fn notes(release: &str, namespace: &str, values: &str) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let copy = dir.path().join("convoy");
    copy_dir(&chart::chart_dir(), &copy)?;
    let notes = std::fs::read_to_string(copy.join("templates/NOTES.txt"))?;
    std::fs::remove_file(copy.join("templates/NOTES.txt"))?;
    std::fs::write(
        copy.join("templates/_notes_for_test.tpl"),
        format!("{{{{- define \"notes-for-test\" -}}}}\n{notes}{{{{- end -}}}}\n"),
    )?;
    std::fs::write(
        copy.join("templates/notes-for-test.yaml"),
        "notes: {{ include \"notes-for-test\" . | toJson }}\n",
    )?;
    let values_file = dir.path().join("values.yaml");
    std::fs::write(&values_file, values)?;
    let out = Command::new(chart::helm()?)
        .args(["template", release])
        .arg(&copy)
        .args(["--namespace", namespace, "--show-only", "templates/notes-for-test.yaml"])
        .arg("--values")
        .arg(&values_file)
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_DATA_HOME", dir.path().join("data"))
        .stdin(Stdio::null())
        .output()?;
    ensure!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix("notes: ")).context("no notes")?;
    Ok(serde_json::from_str::<String>(line)?)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[test]
fn notes_name_the_namespace_schedulers_leader_and_metrics() -> Result<()> {
    let values = r#"
profiles:
- schedulerName: convoy-scheduler
- schedulerName: convoy-gpu
serviceMonitor: {enabled: true}
"#;
    let text = notes("edge", "sched", values)?;
    let r = chart::render("edge", "sched", values)?;
    let (_, loaded) = check_config(&config_of(&r, "edge")?)?;
    let le = &loaded.leader_election;
    let holder = format!(
        "kubectl -n {} get lease {} -o jsonpath='{{.spec.holderIdentity}}'",
        le.resource_namespace, le.resource_name
    );
    for want in [
        "namespace sched",
        "spec.schedulerName: convoy-scheduler\n",
        "spec.schedulerName: convoy-gpu\n",
        holder.as_str(),
        &format!("kubectl -n sched logs \"$({holder})\""),
        "GET /metrics",
        "Service sched/edge-metrics",
        "ServiceMonitor sched/edge",
        "kubectl apply --server-side -f charts/convoy/crds/",
    ] {
        ensure!(text.contains(want), "NOTES.txt lacks {want:?}:\n{text}");
    }

    let text = notes(RELEASE, NAMESPACE, "replicas: 1\nleaderElection: {enabled: false}")?;
    ensure!(!text.contains("get lease"), "a Lease without leader election:\n{text}");
    ensure!(text.contains("kubectl -n convoy-system logs deployment/convoy"), "{text}");
    Ok(())
}

/// Keys of values.yaml, top level and one level down (`image.tag`), from
/// its text: a key is a line `name:` at column 0 or 2, outside comments.
/// Deeper keys (`resources.requests.cpu`) belong to their parent's row.
fn values_keys() -> Result<Vec<String>> {
    let text = std::fs::read_to_string(chart::chart_dir().join("values.yaml"))?;
    let mut keys = Vec::new();
    let mut parent = String::new();
    for line in text.lines() {
        let key = |l: &str| {
            l.split_once(':').map(|(k, _)| k.to_string()).filter(|k| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        if let Some(k) = key(line) {
            parent = k.clone();
            keys.push(k);
        } else if let Some(k) = line.strip_prefix("  ").and_then(key) {
            keys.push(format!("{parent}.{k}"));
        }
    }
    ensure!(keys.len() > 20, "too few keys read from values.yaml: {keys:?}");
    Ok(keys)
}

#[test]
fn readme_documents_every_value() -> Result<()> {
    let readme = std::fs::read_to_string(chart::chart_dir().join("README.md"))?;
    let mut keys = values_keys()?;
    let schema = schema()?;
    for field in schema["properties"]["config"]["properties"].as_object().context("config")?.keys()
    {
        keys.push(format!("config.{field}"));
    }
    // A key whose children are listed needs no row of its own.
    let leaves: Vec<&String> =
        keys.iter().filter(|k| !keys.iter().any(|o| o.starts_with(&format!("{k}.")))).collect();
    let missing: Vec<&&String> =
        leaves.iter().filter(|k| !readme.contains(&format!("| `{k}` |"))).collect();
    ensure!(
        missing.is_empty(),
        "values without a row `| `name` |` in charts/convoy/README.md: {missing:?}"
    );
    for want in [
        "schedulerName",
        "holderIdentity",
        "kubectl apply --server-side -f charts/convoy/crds/",
        "system-cluster-critical",
    ] {
        ensure!(readme.contains(want), "README.md lacks {want:?}");
    }
    Ok(())
}
