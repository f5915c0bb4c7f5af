//! Loading whole files: defaults, merging, arguments, and the messages users see.

use std::time::Duration;

use convoy_config::{
    ConfigError, DefaultPreemptionArgs, DefaultingType, InterPodAffinityArgs, KnownPlugins,
    PluginArgs, PluginRef, PodTopologySpreadArgs, ResourceSpec, SchedulerConfig,
    ScoringStrategyType, default_multi_point, load_file, names, parse_str,
};

fn known() -> KnownPlugins {
    let mut names: Vec<String> = default_multi_point().into_iter().map(|p| p.name).collect();
    names.push("Coscheduling".to_owned());
    KnownPlugins::new(names)
}

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn parse(body: &str) -> Result<SchedulerConfig, ConfigError> {
    parse_str(&format!("{HEADER}{body}"), "config.yaml", &known())
}

fn ok(body: &str) -> SchedulerConfig {
    parse(body).unwrap_or_else(|e| panic!("should load:\n{e}"))
}

fn err(body: &str) -> String {
    match parse(body) {
        Ok(config) => panic!("should fail, got:\n{}", config.summary()),
        Err(e) => e.to_string(),
    }
}

fn enabled(set: &convoy_config::PluginSet) -> Vec<String> {
    set.enabled
        .iter()
        .map(|p| match p.weight {
            Some(w) => format!("{}:{w}", p.name),
            None => p.name.clone(),
        })
        .collect()
}

const DEFAULT_MULTI_POINT: [&str; 20] = [
    "SchedulingGates",
    "PrioritySort",
    "GangScheduling",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration:3",
    "NodeAffinity:2",
    "NodePorts",
    "NodeResourcesFit:1",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread:2",
    "InterPodAffinity:2",
    "DynamicResources:2",
    "DefaultPreemption",
    "NodeResourcesBalancedAllocation:1",
    "ImageLocality:1",
    "DefaultBinder",
];

#[test]
fn upstream_full_example_loads() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream_full.yaml");
    let config = load_file(&path, &known()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.parallelism, 16);
    assert_eq!(config.percentage_of_nodes_to_score, Some(0));
    assert!(!config.delay_cache_until_active);
    assert_eq!(config.client_connection.content_type, "application/json");
    assert_eq!(config.leader_election.resource_name, "rust-scheduler");
    assert_eq!(config.leader_election.lease_duration, Duration::from_secs(15));
    assert_eq!(config.profiles.len(), 2);

    let first = &config.profiles[0];
    assert_eq!(first.scheduler_name, "rust-scheduler");
    assert_eq!(first.percentage_of_nodes_to_score, Some(20));
    let mut want: Vec<String> = DEFAULT_MULTI_POINT.iter().map(|s| s.to_string()).collect();
    want.retain(|p| p != "PrioritySort" && p != "GangScheduling");
    want.push("Coscheduling".to_owned());
    assert_eq!(enabled(&first.plugins.multi_point), want);
    assert_eq!(first.plugins.multi_point.disabled, vec![PluginRef::new("PrioritySort")]);
    assert_eq!(enabled(&first.plugins.score), ["NodeResourcesFit:5"]);
    // Disabled upstream defaults are kept, implemented by Convoy or not (the
    // framework reads them: see convoy_api::pod_fields).
    assert_eq!(first.plugins.score.disabled, vec![PluginRef::new("ImageLocality")]);
    match &first.plugin_args["NodeResourcesFit"] {
        PluginArgs::NodeResourcesFit(args) => {
            assert_eq!(args.ignored_resource_groups, ["example.com"]);
            assert_eq!(args.scoring_strategy.type_, ScoringStrategyType::LeastAllocated);
        }
        other => panic!("{other:?}"),
    }
    match &first.plugin_args["Coscheduling"] {
        PluginArgs::Other(value) => assert_eq!(value["permitWaitingTimeSeconds"], 60),
        other => panic!("{other:?}"),
    }
    assert!(matches!(first.plugin_args["InterPodAffinity"], PluginArgs::InterPodAffinity(_)));
    // NodeAffinity is enabled by default and has typed args: defaults are filled in.
    assert!(matches!(first.plugin_args["NodeAffinity"], PluginArgs::NodeAffinity(_)));

    let second = &config.profiles[1];
    match &second.plugin_args["NodeResourcesFit"] {
        PluginArgs::NodeResourcesFit(args) => {
            let strategy = &args.scoring_strategy;
            assert_eq!(strategy.type_, ScoringStrategyType::RequestedToCapacityRatio);
            assert_eq!(strategy.resources[2], ResourceSpec::new("nvidia.com/gpu", 5));
            assert_eq!(strategy.requested_to_capacity_ratio.as_ref().unwrap().shape.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    let summary = config.summary();
    assert!(summary.contains("profile \"rust-scheduler-binpack\":"), "{summary}");
    assert!(summary.contains("score: NodeResourcesFit(5)"), "{summary}");
}

#[test]
fn minimal_upstream_config_gets_defaults() {
    let config = ok("profiles: [{schedulerName: default-scheduler}]\n");
    assert_eq!(config.parallelism, 16);
    assert_eq!(config.percentage_of_nodes_to_score, None);
    assert_eq!((config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds), (1, 10));
    let le = &config.leader_election;
    assert!(le.leader_elect);
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
    );
    assert_eq!(
        (le.resource_lock.as_str(), le.resource_name.as_str(), le.resource_namespace.as_str()),
        ("leases", "convoy-scheduler", "kube-system")
    );
    assert_eq!((config.client_connection.qps, config.client_connection.burst), (50.0, 100));
    assert_eq!(config.profiles.len(), 1);
    let profile = &config.profiles[0];
    assert_eq!(profile.scheduler_name, "default-scheduler");
    assert_eq!(enabled(&profile.plugins.multi_point), DEFAULT_MULTI_POINT);
    assert_eq!(
        profile.plugin_args.keys().collect::<Vec<_>>(),
        [
            names::DEFAULT_PREEMPTION,
            names::DYNAMIC_RESOURCES,
            names::INTER_POD_AFFINITY,
            names::NODE_AFFINITY,
            names::NODE_RESOURCES_BALANCED_ALLOCATION,
            names::NODE_RESOURCES_FIT,
            names::POD_TOPOLOGY_SPREAD,
            names::VOLUME_BINDING
        ]
    );
}

#[test]
fn empty_config_gets_one_convoy_profile() {
    let config = ok("");
    assert_eq!(config.profiles.len(), 1);
    assert_eq!(config.profiles[0].scheduler_name, "convoy-scheduler");
    let config = ok("profiles: [{}]\n");
    assert_eq!(config.profiles[0].scheduler_name, "convoy-scheduler");
}

#[test]
fn merges_plugins_with_defaults() {
    // (name, profile plugins YAML, point, expected enabled at that point)
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "disable all at score, enable one",
            "score: {disabled: [{name: '*'}], enabled: [{name: NodeResourcesFit, weight: 4}]}",
            "score",
            &["NodeResourcesFit:4"],
        ),
        (
            "change a weight at multiPoint in place",
            "multiPoint: {enabled: [{name: TaintToleration, weight: 7}]}",
            "multiPoint",
            &[
                "SchedulingGates",
                "PrioritySort",
                "GangScheduling",
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration:7",
                "NodeAffinity:2",
                "NodePorts",
                "NodeResourcesFit:1",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread:2",
                "InterPodAffinity:2",
                "DynamicResources:2",
                "DefaultPreemption",
                "NodeResourcesBalancedAllocation:1",
                "ImageLocality:1",
                "DefaultBinder",
            ],
        ),
        (
            "disable upstream plugins Convoy lacks",
            "multiPoint: {disabled: [{name: NodeDeclaredFeatures}]}",
            "multiPoint",
            &DEFAULT_MULTI_POINT,
        ),
        (
            "disable PodTopologySpread",
            "multiPoint: {disabled: [{name: PodTopologySpread}]}",
            "multiPoint",
            &[
                "SchedulingGates",
                "PrioritySort",
                "GangScheduling",
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration:3",
                "NodeAffinity:2",
                "NodePorts",
                "NodeResourcesFit:1",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "InterPodAffinity:2",
                "DynamicResources:2",
                "DefaultPreemption",
                "NodeResourcesBalancedAllocation:1",
                "ImageLocality:1",
                "DefaultBinder",
            ],
        ),
        (
            "disable all multiPoint defaults, keep binder",
            "multiPoint: {disabled: [{name: '*'}], enabled: [{name: DefaultBinder}, {name: Coscheduling}]}",
            "multiPoint",
            &["DefaultBinder", "Coscheduling"],
        ),
        (
            "Coscheduling (scheduler-plugins' name) replaces the default GangScheduling",
            "multiPoint: {enabled: [{name: Coscheduling}]}",
            "multiPoint",
            &[
                "SchedulingGates",
                "PrioritySort",
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration:3",
                "NodeAffinity:2",
                "NodePorts",
                "NodeResourcesFit:1",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread:2",
                "InterPodAffinity:2",
                "DynamicResources:2",
                "DefaultPreemption",
                "NodeResourcesBalancedAllocation:1",
                "ImageLocality:1",
                "DefaultBinder",
                "Coscheduling",
            ],
        ),
    ];
    for (name, plugins, point, want) in cases {
        let config = ok(&format!("profiles:\n- schedulerName: s\n  plugins: {{{plugins}}}\n"));
        let profile = &config.profiles[0];
        let set = profile.plugins.points().into_iter().find(|(p, _)| p == point).unwrap().1;
        assert_eq!(enabled(set), *want, "{name}");
    }
}

#[test]
fn args_default_and_decode() {
    let config = ok("profiles:
- schedulerName: s
  pluginConfig:
  - name: NodeResourcesFit
    args:
      kind: NodeResourcesFitArgs
      apiVersion: kubescheduler.config.k8s.io/v1
      scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 0}]}
  - args: {resources: [{name: cpu}]}
    name: NodeResourcesBalancedAllocation
");
    let args = &config.profiles[0].plugin_args;
    let PluginArgs::NodeResourcesFit(fit) = &args["NodeResourcesFit"] else { panic!() };
    assert_eq!(fit.scoring_strategy.type_, ScoringStrategyType::MostAllocated);
    assert_eq!(fit.scoring_strategy.resources, [ResourceSpec::new("cpu", 1)]);
    let PluginArgs::NodeResourcesBalancedAllocation(bal) = &args["NodeResourcesBalancedAllocation"]
    else {
        panic!()
    };
    assert_eq!(bal.resources, [ResourceSpec::new("cpu", 1)]);
    // InterPodAffinity is a default with typed args: defaults filled in.
    let PluginArgs::InterPodAffinity(ipa) = &args["InterPodAffinity"] else { panic!() };
    assert_eq!(*ipa, InterPodAffinityArgs::default());
    assert_eq!(ipa.hard_pod_affinity_weight, 1);
    assert!(!ipa.ignore_preferred_terms_of_existing_pods);
}

/// Upstream's `DefaultPreemptionArgs`: defaults 10 % / 100, and
/// `ValidateDefaultPreemptionArgs` with the field named.
#[test]
fn default_preemption_args() {
    let args = |yaml: &str| {
        format!("profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n    args: {yaml}\n")
    };
    let decode = |yaml: &str| match &ok(&args(yaml)).profiles[0].plugin_args["DefaultPreemption"] {
        PluginArgs::DefaultPreemption(a) => a.clone(),
        other => panic!("{other:?}"),
    };
    let want = |pct, abs| DefaultPreemptionArgs {
        min_candidate_nodes_percentage: pct,
        min_candidate_nodes_absolute: abs,
        replacement_preemption_delay_seconds: 0,
    };
    assert_eq!(decode("{}"), want(10, 100));
    assert_eq!(
        decode("{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 5}"),
        want(0, 5)
    );
    assert_eq!(
        decode("{kind: DefaultPreemptionArgs, apiVersion: kubescheduler.config.k8s.io/v1}"),
        want(10, 100)
    );
    let cases = [
        (
            "{minCandidateNodesPercentage: 120}",
            vec![
                "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: 120 not in valid range [0, 100]",
            ],
        ),
        (
            "{minCandidateNodesAbsolute: -1}",
            vec![
                "profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute: -1 not in valid range [0, inf)",
            ],
        ),
        (
            "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}",
            vec![
                "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: cannot be zero at the same time as minCandidateNodesAbsolute",
                "profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute: cannot be zero at the same time as minCandidateNodesPercentage",
            ],
        ),
        (
            "{minCandidateNodes: 3}",
            vec![
                "profiles[0].pluginConfig[0].args.minCandidateNodes: unknown field `minCandidateNodes`",
            ],
        ),
    ];
    for (yaml, wants) in cases {
        let e = err(&args(yaml));
        for w in wants {
            assert!(e.contains(w), "{yaml}: {e}");
        }
    }
}

/// Upstream's `VolumeBindingArgs` (v1.37.2, StorageCapacityScoring on):
/// defaults 600 s and the shape {0 → 10, 100 → 0}, and
/// `ValidateVolumeBindingArgs` with the field named.
#[test]
fn volume_binding_args() {
    let args = |yaml: &str| {
        format!("profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args: {yaml}\n")
    };
    let decode = |yaml: &str| match &ok(&args(yaml)).profiles[0].plugin_args["VolumeBinding"] {
        PluginArgs::VolumeBinding(a) => a.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(decode("{}"), convoy_config::VolumeBindingArgs::default());
    let a = decode(
        "{kind: VolumeBindingArgs, bindTimeoutSeconds: 30, shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}",
    );
    assert_eq!(a.bind_timeout_seconds, 30);
    assert_eq!((a.shape[1].utilization, a.shape[1].score), (100, 10));
    let cases = [
        (
            "{bindTimeoutSeconds: -1}",
            "profiles[0].pluginConfig[0].args.bindTimeoutSeconds: -1: invalid BindTimeoutSeconds, should not be a negative value",
        ),
        (
            "{shape: [{utilization: 50, score: 1}, {utilization: 10, score: 2}]}",
            "profiles[0].pluginConfig[0].args.shape[1].utilization: utilization values must be sorted in strictly increasing order",
        ),
        ("{shape: [{utilization: 0, score: 11}]}", "score"),
        ("{timeout: 3}", "unknown field `timeout`"),
    ];
    for (yaml, want) in cases {
        let e = err(&args(yaml));
        assert!(e.contains(want), "{yaml}: {e}");
    }
}

#[test]
fn inter_pod_affinity_args() {
    let decode = |args: &str| {
        let config = ok(&format!(
            "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {args}\n"
        ));
        match &config.profiles[0].plugin_args["InterPodAffinity"] {
            PluginArgs::InterPodAffinity(a) => a.clone(),
            other => panic!("{other:?}"),
        }
    };
    let cases = [
        ("{}", 1, false),
        ("null", 1, false),
        ("{hardPodAffinityWeight: null}", 1, false),
        ("{hardPodAffinityWeight: 0}", 0, false),
        ("{hardPodAffinityWeight: 100, ignorePreferredTermsOfExistingPods: true}", 100, true),
        (
            "{kind: InterPodAffinityArgs, apiVersion: kubescheduler.config.k8s.io/v1, hardPodAffinityWeight: 7}",
            7,
            false,
        ),
    ];
    for (args, weight, ignore) in cases {
        let want = InterPodAffinityArgs {
            hard_pod_affinity_weight: weight,
            ignore_preferred_terms_of_existing_pods: ignore,
        };
        assert_eq!(decode(args), want, "{args}");
    }
}

#[test]
fn pod_topology_spread_args_decode() {
    let config = ok("profiles:
- schedulerName: s
  pluginConfig:
  - name: PodTopologySpread
    args:
      kind: PodTopologySpreadArgs
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
      - maxSkew: 2
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        minDomains: 3
        nodeTaintsPolicy: Honor
        matchLabelKeys: [app]
");
    let PluginArgs::PodTopologySpread(args) = &config.profiles[0].plugin_args["PodTopologySpread"]
    else {
        panic!()
    };
    assert_eq!(args.defaulting_type, DefaultingType::List);
    assert_eq!(args.default_constraints.len(), 2);
    let c = &args.default_constraints[1];
    assert_eq!((c.max_skew, c.min_domains), (2, Some(3)));
    assert_eq!(c.node_taints_policy.as_deref(), Some("Honor"));
    assert_eq!(c.match_label_keys, ["app"]);
    // Defaults: System, no constraints; an empty defaultingType is System too.
    let config =
        ok("profiles:\n- pluginConfig: [{name: PodTopologySpread, args: {defaultingType: ''}}]\n");
    assert_eq!(
        config.profiles[0].plugin_args["PodTopologySpread"],
        PluginArgs::PodTopologySpread(PodTopologySpreadArgs::default())
    );
}

#[test]
fn errors_name_file_position_and_field() {
    // (case, body, fragments the message must contain)
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "typo in scoring strategy type",
            "profiles:
- schedulerName: s
  pluginConfig:
  - name: NodeResourcesBalancedAllocation
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAlocated
",
            &[
                r#"config.yaml:10:15: profiles[0].pluginConfig[1].args.scoringStrategy.type: unknown variant "MostAlocated", expected one of "LeastAllocated", "MostAllocated", "RequestedToCapacityRatio""#,
            ],
        ),
        (
            "typo in scoring strategy type, args before name",
            "profiles:
- pluginConfig:
  - args: {scoringStrategy: {type: MostAlocated}}
    name: NodeResourcesFit
",
            &[
                r#"config.yaml: profiles[0].pluginConfig[0].args.scoringStrategy.type: unknown variant "MostAlocated""#,
            ],
        ),
        (
            "unknown top-level field",
            "parallelizm: 4\n",
            &["config.yaml:3:1: parallelizm: unknown field `parallelizm`"],
        ),
        (
            "unknown field in args",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {ignoredResource: [x]}\n",
            &[
                "config.yaml:6:12: profiles[0].pluginConfig[0].args.ignoredResource: unknown field `ignoredResource`",
            ],
        ),
        (
            "hardPodAffinityWeight out of range",
            "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodAffinityWeight: 101}\n",
            &[
                "config.yaml:6:35: profiles[0].pluginConfig[0].args.hardPodAffinityWeight: 101 not in valid range [0, 100]",
            ],
        ),
        (
            "negative hardPodAffinityWeight",
            "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodAffinityWeight: -1}\n",
            &[
                "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: -1 not in valid range [0, 100]",
            ],
        ),
        (
            "unknown field in InterPodAffinity args",
            "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodAffinityWieght: 2}\n",
            &[
                "profiles[0].pluginConfig[0].args.hardPodAffinityWieght: unknown field `hardPodAffinityWieght`",
            ],
        ),
        (
            "wrong kind of InterPodAffinity args",
            "profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args: {kind: NodeAffinityArgs}\n",
            &[r#"args.kind: kind must be "InterPodAffinityArgs", got "NodeAffinityArgs""#],
        ),
        (
            "unknown field in plugin set",
            "profiles:\n- plugins:\n    score: {enable: []}\n",
            &["config.yaml:5:13: profiles[0].plugins.score.enable: unknown field `enable`"],
        ),
        (
            "unknown plugin enabled",
            "profiles:\n- plugins:\n    score:\n      enabled: [{name: NodeResourcesFit}, {name: X}, {name: Foo}]\n",
            &[
                r#"config.yaml:6:61: profiles[0].plugins.score.enabled[2]: unknown plugin "Foo"; known plugins: Coscheduling, DefaultBinder, DefaultPreemption, DynamicResources, GangScheduling, ImageLocality, InterPodAffinity, NodeAffinity, NodeName, NodePorts, NodeResourcesBalancedAllocation, NodeResourcesFit, NodeUnschedulable, NodeVolumeLimits, PodTopologySpread, PrioritySort, SchedulingGates, TaintToleration, VolumeBinding, VolumeRestrictions, VolumeZone"#,
                r#"profiles[0].plugins.score.enabled[1]: unknown plugin "X""#,
            ],
        ),
        (
            "upstream plugin Convoy lacks enabled",
            "profiles:\n- plugins: {preFilter: {enabled: [{name: NodeDeclaredFeatures}]}}\n",
            &[
                r#"profiles[0].plugins.preFilter.enabled[0]: unknown plugin "NodeDeclaredFeatures"; known plugins: Coscheduling"#,
            ],
        ),
        (
            "unknown plugin disabled",
            "profiles:\n- plugins: {score: {disabled: [{name: NodeResourceFit}]}}\n",
            &[
                r#"profiles[0].plugins.score.disabled[0]: unknown plugin "NodeResourceFit"; known plugins:"#,
                "(cannot disable it)",
            ],
        ),
        (
            "args for unknown plugin",
            "profiles:\n- pluginConfig: [{name: NodeDeclaredFeatures, args: {}}]\n",
            &[
                r#"config.yaml:4:25: profiles[0].pluginConfig[0].name: unknown plugin "NodeDeclaredFeatures"; known plugins:"#,
            ],
        ),
        (
            "duplicate pluginConfig",
            "profiles:\n- pluginConfig: [{name: NodeAffinity}, {name: NodeAffinity}]\n",
            &[
                r#"profiles[0].pluginConfig[1].name: duplicate pluginConfig for plugin "NodeAffinity""#,
            ],
        ),
        (
            "duplicate schedulerName",
            "profiles:\n- schedulerName: a\n- schedulerName: b\n- schedulerName: a\n",
            &[
                r#"config.yaml:6:18: profiles[2].schedulerName: duplicate scheduler name "a" (also used by profiles[0])"#,
            ],
        ),
        (
            "empty schedulerName",
            "profiles:\n- schedulerName: ''\n",
            &["profiles[0].schedulerName: must not be empty"],
        ),
        (
            "missing schedulerName with two profiles",
            "profiles:\n- schedulerName: a\n- {}\n",
            &[
                "config.yaml: profiles[1].schedulerName: required when there is more than one profile",
            ],
        ),
        (
            "negative plugin weight",
            "profiles:\n- plugins: {score: {enabled: [{name: NodeResourcesFit, weight: -2}]}}\n",
            &[
                "config.yaml:4:64: profiles[0].plugins.score.enabled[0].weight: weight must be at least 1 (0 means the default, 1), got -2",
            ],
        ),
        (
            "resource weight out of range",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {resources: [{name: cpu, weight: 101}]}}\n",
            &[
                "config.yaml:6:62: profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight: resource weight 101 not in valid range [0, 100]",
            ],
        ),
        (
            "balanced allocation weight must be 1",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesBalancedAllocation\n    args: {resources: [{name: cpu, weight: 2}, {name: cpu}]}\n",
            &[
                "profiles[0].pluginConfig[0].args.resources[0].weight: must be 1, got 2",
                r#"profiles[0].pluginConfig[0].args.resources[1].name: duplicate resource "cpu""#,
            ],
        ),
        (
            "shape not increasing",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio:\n          shape: [{utilization: 50, score: 1}, {utilization: 50, score: 2}]\n",
            &[
                "config.yaml: profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization: utilization values must be sorted in strictly increasing order",
            ],
        ),
        (
            "shape score out of range",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio:\n          shape: [{utilization: 0, score: 11}]\n",
            &[
                "config.yaml:10:43: profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[0].score: score 11 not in valid range [0, 10]",
            ],
        ),
        (
            "shape missing",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: RequestedToCapacityRatio}}\n",
            &[
                "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio: required when type is RequestedToCapacityRatio",
            ],
        ),
        (
            "empty shape",
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: []}}}\n",
            &[
                "args.scoringStrategy.requestedToCapacityRatio.shape: at least one point must be specified",
            ],
        ),
        (
            "max backoff past what the queue's clock can hold",
            "podMaxBackoffSeconds: 100000000000\n",
            &[
                "podMaxBackoffSeconds: 100000000000 is more than Convoy accepts (31536000 seconds, a year)",
            ],
        ),
        (
            "initial backoff past a year",
            "podInitialBackoffSeconds: 31536001\n",
            &[
                "podInitialBackoffSeconds: 31536001 is more than Convoy accepts (31536000 seconds, a year)",
            ],
        ),
        (
            "max backoff below initial",
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 3\n",
            &[
                "config.yaml:4:23: podMaxBackoffSeconds: 3 is less than podInitialBackoffSeconds (5)",
            ],
        ),
        (
            "zero parallelism",
            "parallelism: 0\n",
            &["config.yaml:3:14: parallelism: must be greater than 0"],
        ),
        (
            "percentage out of range",
            "profiles:\n- percentageOfNodesToScore: 120\n",
            &[
                "config.yaml:4:29: profiles[0].percentageOfNodesToScore: 120 not in valid range [0, 100]",
            ],
        ),
        (
            "queue sort differs across profiles",
            "profiles:\n- schedulerName: a\n  plugins: {queueSort: {enabled: [{name: Coscheduling}]}}\n- schedulerName: b\n",
            &[
                r#"profiles[1].plugins.queueSort.enabled[0]: queue sort plugin (the default) must be the same for all profiles (profiles[0] uses "Coscheduling")"#,
            ],
        ),
        (
            "plugin enabled twice",
            "profiles:\n- plugins: {filter: {enabled: [{name: NodePorts}, {name: NodePorts}]}}\n",
            &[
                r#"profiles[0].plugins.filter.enabled: plugin "NodePorts" is enabled more than once"#,
            ],
        ),
        (
            "bad duration",
            "leaderElection: {leaseDuration: 15}\n",
            &["leaderElection.leaseDuration: invalid duration \"15\": missing unit"],
        ),
        (
            "lease not longer than renew deadline",
            "leaderElection: {leaseDuration: 10s, renewDeadline: 10s}\n",
            &["config.yaml: leaderElection.leaseDuration: must be greater than renewDeadline"],
        ),
        (
            "renew deadline within a jittered retry period",
            "leaderElection: {renewDeadline: 5s, retryPeriod: 5s}\n",
            &[
                "config.yaml: leaderElection.renewDeadline: must be greater than retryPeriod*JitterFactor (1.2)",
            ],
        ),
        (
            "wrong kind in args",
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n    args: {kind: NodeResourcesFitArgs}\n",
            &[
                r#"profiles[0].pluginConfig[0].args.kind: kind must be "NodeAffinityArgs", got "NodeResourcesFitArgs""#,
            ],
        ),
        (
            "extenders",
            "extenders: [{urlPrefix: 'http://x'}]\n",
            &["extenders: scheduler extenders are not supported by Convoy"],
        ),
        (
            "unsupported defaultingType",
            "profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: Lists}\n",
            &[
                r#"config.yaml:6:28: profiles[0].pluginConfig[0].args.defaultingType: Unsupported value: "Lists": supported values: "System", "List""#,
            ],
        ),
        (
            "System defaulting with constraints",
            "profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n",
            &[
                r#"profiles[0].pluginConfig[0].args.defaultingType: Invalid value: "System": when .defaultConstraints are not empty"#,
            ],
        ),
        (
            "default constraints as upstream validates them",
            "profiles:
- pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}
      - {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}
",
            &[
                "profiles[0].pluginConfig[0].args.defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
                "profiles[0].pluginConfig[0].args.defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod",
                r#"profiles[0].pluginConfig[0].args.defaultConstraints[1]: Duplicate value: "{zone, DoNotSchedule}""#,
            ],
        ),
        (
            "unknown field in a default constraint",
            "profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKeys: zone}]}\n",
            &[
                "profiles[0].pluginConfig[0].args.defaultConstraints[0].topologyKeys: unknown field `topologyKeys`",
            ],
        ),
        ("YAML syntax", "profiles: [\n", &["config.yaml:3:"]),
    ];
    let mut failures = Vec::new();
    for (case, body, fragments) in cases {
        let message = err(body);
        for fragment in *fragments {
            if !message.contains(fragment) {
                failures.push(format!("{case}:\n  message: {message}\n  missing: {fragment}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn wrong_version_or_kind_is_named() {
    let cases: &[(&str, &str)] = &[
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\nprofiles: []\n",
            r#"config.yaml:1:13: apiVersion: unsupported apiVersion "kubescheduler.config.k8s.io/v1beta3"; Convoy reads only "kubescheduler.config.k8s.io/v1""#,
        ),
        (
            "kind: KubeSchedulerConfiguration\n",
            r#"config.yaml: apiVersion: required; expected "kubescheduler.config.k8s.io/v1""#,
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: Pod\n",
            r#"config.yaml:2:7: kind: unsupported kind "Pod"; expected "KubeSchedulerConfiguration""#,
        ),
    ];
    for (text, want) in cases {
        let message = parse_str(text, "config.yaml", &known()).unwrap_err().to_string();
        assert!(message.contains(want), "message: {message}\nwant: {want}");
    }
}

#[test]
fn reports_every_semantic_problem() {
    let e = parse("podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 3\nprofiles:\n- plugins: {score: {enabled: [{name: Foo}]}}\n").unwrap_err();
    assert_eq!(e.problems().len(), 2, "{e}");
    assert_eq!(e.problems()[1].field, "profiles[0].plugins.score.enabled[0]");
}

#[test]
fn missing_file_is_named() {
    let e = load_file(std::path::Path::new("/nonexistent/convoy.yaml"), &known()).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/convoy.yaml: cannot read"), "{e}");
}

#[test]
#[ignore = "prints the summary of the upstream example"]
fn print_summary() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream_full.yaml");
    println!("{}", load_file(&path, &known()).unwrap().summary());
}

/// Disabling an upstream default Convoy lacks is kept, and read back as
/// "upstream would not run it": at multiPoint, or at both preFilter and
/// filter (by name or `*`).
#[test]
fn disabled_upstream_plugins_are_kept() {
    let cases: &[(&str, &[&str])] = &[
        ("{}", &[]),
        ("{multiPoint: {disabled: [{name: NodeDeclaredFeatures}]}}", &["NodeDeclaredFeatures"]),
        ("{filter: {disabled: [{name: NodeDeclaredFeatures}]}}", &[]),
        (
            "{preFilter: {disabled: [{name: NodeDeclaredFeatures}]}, filter: {disabled: [{name: '*'}]}}",
            &["NodeDeclaredFeatures"],
        ),
        (
            "{multiPoint: {disabled: [{name: '*'}], enabled: [{name: DefaultBinder}, {name: PrioritySort}]}}",
            convoy_config::UPSTREAM_ONLY_DEFAULTS,
        ),
    ];
    for (plugins, want) in cases {
        let config = ok(&format!("profiles: [{{plugins: {plugins}}}]\n"));
        let p = &config.profiles[0];
        let got: Vec<&str> = convoy_config::UPSTREAM_ONLY_DEFAULTS
            .iter()
            .copied()
            .filter(|name| p.disables_upstream(name))
            .collect();
        assert_eq!(got, *want, "{plugins}");
    }
}

/// `DynamicResourcesArgs` decode with upstream's defaults, durations in Go
/// syntax, and upstream's validation.
#[test]
fn dynamic_resources_args_decode() {
    use convoy_config::{DynamicResourcesArgs, PluginArgs};
    use std::time::Duration;
    let args = |body: &str| {
        let config =
            ok(&format!("profiles:\n- pluginConfig: [{{name: DynamicResources, args: {body}}}]\n"));
        match config.profiles[0].plugin_args.get(names::DYNAMIC_RESOURCES) {
            Some(PluginArgs::DynamicResources(a)) => a.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(args("{}"), DynamicResourcesArgs::default());
    assert_eq!(DynamicResourcesArgs::default().filter_timeout, Duration::from_secs(10));
    let a = args("{filterTimeout: 0s, bindingTimeout: 2m}");
    assert_eq!((a.filter_timeout, a.binding_timeout), (Duration::ZERO, Duration::from_secs(120)));
    let e = err(
        "profiles:\n- pluginConfig: [{name: DynamicResources, args: {bindingTimeout: 500ms}}]\n",
    );
    assert!(e.contains("bindingTimeout") && e.contains("must be at least 1 second"), "{e}");
    let e =
        err("profiles:\n- pluginConfig: [{name: DynamicResources, args: {filterTimeout: -1s}}]\n");
    assert!(e.contains("must not be negative"), "{e}");
    let e = err("profiles:\n- pluginConfig: [{name: DynamicResources, args: {timeout: 1s}}]\n");
    assert!(e.contains("unknown field `timeout`"), "{e}");
}

/// Go durations (parsed by `kube_core::Duration`): the forms upstream files use load; a
/// negative or malformed one is refused with its field and position.
#[test]
fn go_durations_in_fields() {
    let lease = |value: &str| {
        parse(&format!(
            "leaderElection: {{leaseDuration: {value}, renewDeadline: 40ms, retryPeriod: 10ms}}\n"
        ))
        .map(|c| c.leader_election.lease_duration)
    };
    let cases: &[(&str, Duration)] = &[
        ("100ms", Duration::from_millis(100)),
        ("1h2m", Duration::from_secs(3720)),
        ("1.5s", Duration::from_millis(1500)),
        ("\"1m30s\"", Duration::from_secs(90)),
    ];
    for (value, want) in cases {
        assert_eq!(lease(value).unwrap_or_else(|e| panic!("{value}: {e}")), *want, "{value}");
    }
    let refused: &[(&str, &str)] = &[
        (
            "-1s",
            "config.yaml:3:33: leaderElection.leaseDuration: invalid duration \"-1s\": must not be negative",
        ),
        ("abc", "config.yaml:3:33: leaderElection.leaseDuration: invalid duration \"abc\""),
    ];
    for (value, want) in refused {
        let message = lease(value).unwrap_err().to_string();
        assert!(message.contains(want), "{value}: {message}\nwant: {want}");
    }
    let e =
        err("profiles:\n- pluginConfig: [{name: DynamicResources, args: {filterTimeout: -1s}}]\n");
    assert!(
        e.contains("profiles[0].pluginConfig[0].args.filterTimeout: invalid duration \"-1s\": must not be negative"),
        "{e}"
    );
}

/// `enableProfiling` and `enableContentionProfiling`: Convoy serves no profiling endpoints.
/// Absent loads (upstream defaults enableProfiling to true, and upstream files omit it), so
/// does false; an explicit true is refused with the field and its position.
#[test]
fn profiling_is_refused_only_when_asked_for() {
    ok("");
    ok("enableProfiling: false\nenableContentionProfiling: false\n");
    let cases: &[(&str, &str)] = &[
        (
            "enableProfiling: true\n",
            "config.yaml:3:18: enableProfiling: profiling endpoints are not supported by Convoy",
        ),
        (
            "enableContentionProfiling: true\n",
            "config.yaml:3:28: enableContentionProfiling: profiling endpoints are not supported by Convoy",
        ),
    ];
    for (body, want) in cases {
        let message = err(body);
        assert!(message.contains(want), "{body}: {message}\nwant: {want}");
    }
    let e = parse("enableProfiling: true\nenableContentionProfiling: true\n").unwrap_err();
    assert_eq!(e.problems().len(), 2, "{e}");
}

/// `delayCacheUntilActive` loads (false by default); the scheduler acts on it.
#[test]
fn delay_cache_until_active_loads() {
    assert!(!ok("").delay_cache_until_active);
    assert!(ok("delayCacheUntilActive: true\n").delay_cache_until_active);
}

/// `GpuPlacementArgs` decode like every other plugin's args: serde, unknown fields and wrong
/// types refused with the field and its position, defaults filled in.
#[test]
fn gpu_placement_args_decode() {
    use convoy_config::{CpuOnlyPods, GpuPlacementArgs};
    let mut plugins: Vec<String> = default_multi_point().into_iter().map(|p| p.name).collect();
    plugins.push(names::GPU_PLACEMENT.to_owned());
    let known = KnownPlugins::new(plugins);
    let load = |args: &str| {
        let text = format!(
            "{HEADER}profiles:\n- plugins: {{multiPoint: {{enabled: [{{name: GpuPlacement}}]}}}}\n  pluginConfig:\n  - name: GpuPlacement\n    args: {args}\n"
        );
        parse_str(&text, "config.yaml", &known).map(|c| {
            match c.profiles[0].plugin_args.get(names::GPU_PLACEMENT) {
                Some(PluginArgs::GpuPlacement(a)) => a.clone(),
                other => panic!("{other:?}"),
            }
        })
    };
    assert_eq!(load("{}").unwrap(), GpuPlacementArgs::default());
    assert_eq!(load("").unwrap(), GpuPlacementArgs::default());
    let a = load(
        "{cpuOnlyPods: Neutral, requestSizePrior: [{gpus: 2, cpu: 8, memory: 16Gi, weight: 1}]}",
    )
    .unwrap();
    assert_eq!(a.cpu_only_pods, CpuOnlyPods::Neutral);
    assert_eq!(a.request_size_prior[0].cpu.as_deref(), Some("8"));
    assert_eq!(a.request_size_prior[0].memory.as_deref(), Some("16Gi"));
    assert_eq!(a.half_life_pods, 500);

    let refused: &[(&str, &str)] = &[
        (
            "{resourceName: [nvidia.com/gpu]}",
            "config.yaml:7:12: profiles[0].pluginConfig[0].args.resourceName: unknown field `resourceName`",
        ),
        (
            "{requestSizePrior: [{gpus: 1, weight: 1, size: 3}]}",
            "config.yaml:7:52: profiles[0].pluginConfig[0].args.requestSizePrior[0].size: unknown field `size`",
        ),
        (
            "{halfLifePods: many}",
            "config.yaml:7:26: profiles[0].pluginConfig[0].args.halfLifePods: invalid",
        ),
        (
            "{topologyWeight: 101}",
            "config.yaml:7:28: profiles[0].pluginConfig[0].args.topologyWeight: 101 is out of range 0..=100",
        ),
        (
            "{fragmentationWeight: 0, topologyWeight: 0}",
            "config.yaml: profiles[0].pluginConfig[0].args.fragmentationWeight: fragmentationWeight, topologyWeight and gpuMemoryWeight are all 0",
        ),
        (
            "{kind: NodeResourcesFitArgs}",
            "profiles[0].pluginConfig[0].args.kind: kind must be \"GpuPlacementArgs\"",
        ),
    ];
    let mut failures = Vec::new();
    for (args, want) in refused {
        match load(args) {
            Err(e) if e.to_string().contains(want) => {}
            other => failures.push(format!("{args}: {other:?}\n  want: {want}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
