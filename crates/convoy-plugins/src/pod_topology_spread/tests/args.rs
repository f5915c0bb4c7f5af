//! Building the plugin from its args.

use convoy_api::{CycleState, NodeInfoLister, PreScorePlugin};
use convoy_config::DefaultingType;

use super::super::scoring::PreScoreState;
use super::*;

#[test]
fn system_defaulting_by_default() {
    let pl = plugin();
    assert!(pl.inner.system_defaulted);
    let keys: Vec<(&str, i32, &str)> = pl
        .inner
        .default_constraints
        .iter()
        .map(|c| (c.topology_key.as_str(), c.max_skew, c.when_unsatisfiable.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("kubernetes.io/hostname", 3, "ScheduleAnyway"),
            ("topology.kubernetes.io/zone", 5, "ScheduleAnyway")
        ]
    );
}

#[test]
fn list_defaulting_keeps_every_field() {
    let json = serde_json::json!({
        "maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway",
        "minDomains": 3, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor",
        "matchLabelKeys": ["app"]
    });
    let args = PodTopologySpreadArgs {
        defaulting_type: DefaultingType::List,
        default_constraints: vec![serde_json::from_value(json).unwrap()],
    };
    let pl = plugin_args(args, &[service("s", &[("app", "x")])]);
    assert!(!pl.inner.system_defaulted);
    let p = pod(&[("app", "x")]).info();
    let all = cluster(vec![node("n", &[("rack", "r1")])], &[]);
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(all.list()), &all).is_success());
    let c = &state.read::<PreScoreState>().unwrap().constraints[0];
    assert_eq!((c.max_skew, c.min_domains), (2, 3));
    assert!(!c.honor_node_affinity && c.honor_node_taints);
    // The default selector replaces the (matchLabelKeys-merged) one.
    assert_eq!(c.selector.to_string(), "app=x");
}

#[test]
fn wrong_args_type_is_an_error() {
    let other = PluginArgs::Other(serde_json::Value::Null);
    let e = PodTopologySpread::new(Some(&other), &handle()).err().unwrap();
    assert!(e.starts_with("want args to be of type PodTopologySpreadArgs"), "{e}");
}
