//! Table-driven tests of DefaultPreemption, with NodeResourcesFit as the
//! only Filter (what most preemptions are about) and, where a test needs
//! it, InterPodAffinity's PreFilter extensions.

use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ClusterObject, CycleState, FilterPlugin, FilterRunner, NodeInfo, NodeList, NodeToStatus,
    PodInfo, PostFilterContext, PostFilterPlugin, PreFilterPlugin, Status,
};
use convoy_config::{DefaultPreemptionArgs, PluginArgs};
use serde_json::json;

use super::*;
use crate::Fit;
use crate::helper::testing::{handle, handle_on};
use convoy_objects::ClusterObjects;

/// The framework's part, for one pod: Fit's PreFilter and Filter, and the
/// pods nominated to each node.
struct Runner {
    fit: Arc<Fit>,
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    nominated_node: Option<Arc<str>>,
}

impl FilterRunner for Runner {
    fn run_pre_filter_extension_add_pod(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        Status::success()
    }
    fn run_pre_filter_extension_remove_pod(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        Status::success()
    }
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let ge: Vec<_> = self
            .nominated
            .get(node.name())
            .into_iter()
            .flatten()
            .filter(|p| p.priority >= pod.priority && p.uid != pod.uid)
            .collect();
        if !ge.is_empty() {
            let mut with = node.clone();
            for p in ge {
                with.add_pod(p.clone());
            }
            let s = self.fit.filter(state, pod, &with);
            if !s.is_success() {
                return s;
            }
        }
        self.fit.filter(state, pod, node)
    }
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.nominated.get(node).cloned().unwrap_or_default()
    }
    fn nominated_node(&self, _: &PodInfo) -> Option<Arc<str>> {
        self.nominated_node.clone()
    }
    fn parallelize(&self, n: usize, work: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(work)
    }
}

/// The chosen node and victims, or the message.
type Outcome = Result<(String, Vec<String>), String>;

/// A preemption scenario: nodes (with their pods), the preemptor,
/// PodDisruptionBudgets, and what is nominated where.
struct Case {
    nodes: Vec<NodeInfo>,
    pod: Arc<PodInfo>,
    pdbs: Vec<serde_json::Value>,
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    nominated_node: Option<&'static str>,
    /// Nodes the Filter rejects as unresolvable (as a node selector would).
    unresolvable: Vec<&'static str>,
    random: u64,
    args: DefaultPreemptionArgs,
}

impl Case {
    fn new(pod: PodBuilder, nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Self {
        let mut infos: Vec<NodeInfo> = nodes.into_iter().map(NodeBuilder::info).collect();
        for p in pods {
            let p = p.info();
            let n = p.node_name().expect("an assigned pod").to_string();
            infos.iter_mut().find(|i| i.name() == n).expect("its node").add_pod(p);
        }
        Self {
            nodes: infos,
            pod: pod.info(),
            pdbs: Vec::new(),
            nominated: HashMap::new(),
            nominated_node: None,
            unresolvable: Vec::new(),
            random: 0,
            args: DefaultPreemptionArgs::default(),
        }
    }

    fn run(&self) -> (Option<PostFilterResult>, Status) {
        let store = Arc::new(ClusterObjects::new());
        for (i, pdb) in self.pdbs.iter().enumerate() {
            let mut v = pdb.clone();
            v["metadata"]["name"] = json!(format!("pdb-{i}"));
            v["metadata"]["namespace"] = json!("default");
            store.apply(&ClusterObject::PodDisruptionBudget(Arc::new(
                serde_json::from_value(v).unwrap(),
            )));
        }
        let h = handle_on(store);
        let args = PluginArgs::DefaultPreemption(self.args.clone());
        let plugin = DefaultPreemption::new(Some(&args), &h).unwrap();
        let fit = Arc::new(Fit::new(None).unwrap());
        let lister = NodeList::of(self.nodes.clone());
        let mut state = CycleState::new();
        let (_, s) = fit.pre_filter(&mut state, &self.pod, &lister);
        assert!(s.is_success(), "{s:?}");
        let mut statuses = NodeToStatus::default();
        for n in &self.nodes {
            let s = if self.unresolvable.contains(&n.name()) {
                Status::unresolvable("node(s) didn't match Pod's node affinity/selector")
            } else {
                fit.filter(&state, &self.pod, n)
            };
            assert!(!s.is_success(), "the pod must fit nowhere; it fits {}", n.name());
            statuses.map.insert(n.name_arc().clone(), s);
        }
        let runner = Runner {
            fit,
            nominated: self.nominated.clone(),
            nominated_node: self.nominated_node.map(Arc::from),
        };
        let ctx = PostFilterContext { nodes: &lister, runner: &runner, random: self.random };
        plugin.post_filter(&state, &self.pod, &statuses, &ctx)
    }

    /// The chosen node and victims, or the message.
    fn outcome(&self) -> Outcome {
        match self.run() {
            (Some(r), s) if s.is_success() => Ok((
                r.nominated_node_name.unwrap().to_string(),
                r.victims.iter().map(|v| v.key.name.to_string()).collect(),
            )),
            (_, s) => Err(s.message()),
        }
    }
}

fn node(name: &str) -> NodeBuilder {
    NodeBuilder::new(name).cpu("4").memory("32Gi").pods("110")
}

fn pod(name: &str, node: &str, cpu: &str, priority: i32) -> PodBuilder {
    PodBuilder::new(name).node(node).cpu(cpu).priority(priority)
}

fn preemptor(cpu: &str) -> PodBuilder {
    PodBuilder::new("high").cpu(cpu).priority(1000)
}

fn ok(node: &str, victims: &[&str]) -> Outcome {
    Ok((node.to_string(), victims.iter().map(|v| v.to_string()).collect()))
}

#[test]
fn chooses_victims_and_nodes_as_upstream() {
    let cases: Vec<(&str, Case, Outcome)> = vec![
        (
            "the two low-priority pods go",
            Case::new(
                preemptor("3"),
                vec![node("n1")],
                vec![pod("a", "n1", "2", 0), pod("b", "n1", "2", 0)],
            ),
            ok("n1", &["a", "b"]),
        ),
        (
            "fewest victims: one pod on n2 instead of two on n1",
            Case::new(
                preemptor("3"),
                vec![node("n1"), node("n2")],
                vec![pod("a", "n1", "2", 0), pod("b", "n1", "2", 0), pod("c", "n2", "4", 0)],
            ),
            ok("n2", &["c"]),
        ),
        (
            "lowest highest-priority victim wins over fewer victims",
            Case::new(
                preemptor("3"),
                vec![node("n1"), node("n2")],
                vec![pod("a", "n1", "2", 1), pod("b", "n1", "2", 1), pod("c", "n2", "4", 5)],
            ),
            ok("n1", &["a", "b"]),
        ),
        (
            "smallest priority sum when the highest victims tie",
            Case::new(
                preemptor("4"),
                vec![node("n1"), node("n2")],
                vec![
                    pod("a", "n1", "2", 5),
                    pod("b", "n1", "2", 5),
                    pod("c", "n2", "2", 5),
                    pod("d", "n2", "2", -3),
                ],
            ),
            ok("n2", &["c", "d"]),
        ),
        (
            "latest start of the most important victims breaks a full tie",
            Case::new(
                preemptor("4"),
                vec![node("n1"), node("n2")],
                vec![pod("a", "n1", "4", 0).started(10), pod("b", "n2", "4", 0).started(20)],
            ),
            ok("n2", &["b"]),
        ),
        (
            "reprieve: the most important pods stay, the lowest goes",
            Case::new(
                preemptor("2"),
                vec![node("n1")],
                vec![pod("p10", "n1", "1", 10), pod("p5", "n1", "1", 5), pod("p1", "n1", "2", 1)],
            ),
            ok("n1", &["p1"]),
        ),
        (
            "reprieve at equal priority: the older pod stays",
            Case::new(
                preemptor("2"),
                vec![node("n1")],
                vec![pod("old", "n1", "2", 0).started(1), pod("new", "n1", "2", 0).started(100)],
            ),
            ok("n1", &["new"]),
        ),
        (
            "equal priority is never a victim",
            Case::new(preemptor("2"), vec![node("n1")], vec![pod("same", "n1", "4", 1000)]),
            Err("preemption: 0/1 nodes are available: 1 No preemption victims found for \
                 incoming pod."
                .to_string()),
        ),
        (
            "the pod does not fit even without the lower-priority pods",
            Case::new(
                preemptor("3"),
                vec![node("n1")],
                vec![pod("a", "n1", "1", 0), pod("big", "n1", "3", 2000)],
            ),
            Err("preemption: 0/1 nodes are available: 1 Insufficient cpu.".to_string()),
        ),
        (
            "a request above the node's allocatable: not helpful",
            Case::new(preemptor("8"), vec![node("n1")], vec![pod("a", "n1", "1", 0)]),
            Err("preemption: 0/1 nodes are available: 1 Preemption is not helpful for \
                 scheduling."
                .to_string()),
        ),
        (
            "unresolvable nodes are never tried",
            Case {
                unresolvable: vec!["n1", "n2"],
                ..Case::new(
                    preemptor("3"),
                    vec![node("n1"), node("n2")],
                    vec![pod("a", "n1", "4", 0), pod("b", "n2", "4", 0)],
                )
            },
            Err("preemption: 0/2 nodes are available: 2 Preemption is not helpful for \
                 scheduling."
                .to_string()),
        ),
        (
            "preemptionPolicy Never preempts nobody",
            Case::new(
                preemptor("3").preemption_policy("Never"),
                vec![node("n1")],
                vec![pod("a", "n1", "4", 0)],
            ),
            Err("preemption: not eligible due to preemptionPolicy=Never.".to_string()),
        ),
        (
            "victims of an earlier preemption still terminating on the nominated node",
            Case {
                nominated_node: Some("n1"),
                ..Case::new(
                    preemptor("3"),
                    vec![node("n1"), node("n2")],
                    vec![
                        pod("a", "n1", "4", 0).terminating_by_preemption(),
                        pod("b", "n2", "4", 0),
                    ],
                )
            },
            Err("preemption: not eligible due to a terminating pod on the nominated node."
                .to_string()),
        ),
        (
            "the nominated node became unresolvable: preempt again elsewhere",
            Case {
                nominated_node: Some("n1"),
                unresolvable: vec!["n1"],
                ..Case::new(
                    preemptor("3"),
                    vec![node("n1"), node("n2")],
                    vec![
                        pod("a", "n1", "4", 0).terminating_by_preemption(),
                        pod("b", "n2", "4", 0),
                    ],
                )
            },
            ok("n2", &["b"]),
        ),
        (
            "a pod nominated to the node with higher priority keeps its room",
            Case {
                nominated: HashMap::from([(
                    "n1".to_string(),
                    vec![PodBuilder::new("other").cpu("2").priority(2000).info()],
                )]),
                ..Case::new(
                    preemptor("3"),
                    vec![node("n1"), node("n2")],
                    vec![pod("a", "n1", "4", 0), pod("b", "n2", "4", 0)],
                )
            },
            ok("n2", &["b"]),
        ),
    ];
    for (name, case, want) in cases {
        assert_eq!(case.outcome(), want, "{name}");
    }
}

fn pdb(allowed: i32, app: &str) -> serde_json::Value {
    json!({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": app}}},
           "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                      "expectedPods": 1}})
}

#[test]
fn prefers_nodes_whose_victims_no_budget_protects() {
    let cases: Vec<(&str, Vec<serde_json::Value>, Outcome)> = vec![
        ("no budget: fewest victims", vec![], ok("n1", &["a"])),
        (
            "a's budget allows no disruption: n2's two pods go",
            vec![pdb(0, "a")],
            ok("n2", &["b1", "b2"]),
        ),
        ("a's budget allows one", vec![pdb(1, "a")], ok("n1", &["a"])),
        (
            "every victim protected: fewest violations",
            vec![pdb(0, "a"), pdb(0, "b")],
            ok("n1", &["a"]),
        ),
    ];
    for (name, pdbs, want) in cases {
        let case = Case {
            pdbs,
            ..Case::new(
                preemptor("3"),
                vec![node("n1"), node("n2")],
                vec![
                    pod("a", "n1", "4", 0).label("app", "a"),
                    pod("b1", "n2", "2", 0).label("app", "b"),
                    pod("b2", "n2", "2", 0).label("app", "b"),
                ],
            )
        };
        assert_eq!(case.outcome(), want, "{name}");
    }
}

#[test]
fn reprieves_budget_violating_pods_first() {
    // Either pod frees enough room; the one a budget protects is kept.
    let case = Case {
        pdbs: vec![pdb(0, "protected")],
        ..Case::new(
            preemptor("2"),
            vec![node("n1")],
            vec![
                pod("protected", "n1", "2", 0).label("app", "protected").started(100),
                pod("free", "n1", "2", 0).label("app", "free").started(1),
            ],
        )
    };
    assert_eq!(case.outcome(), ok("n1", &["free"]));
}

#[test]
fn splits_victims_by_budget_in_importance_order() {
    let pods: Vec<Arc<PodInfo>> =
        ["a", "b", "c"].iter().map(|n| PodBuilder::new(n).label("app", "x").info()).collect();
    let budget = |allowed: i32, disrupted: &[&str]| {
        let mut v = pdb(allowed, "x");
        v["metadata"] = json!({"name": "p", "namespace": "default"});
        v["status"]["disruptedPods"] =
            disrupted.iter().map(|d| (d.to_string(), json!("2026-01-01T00:00:00Z"))).collect();
        Arc::new(convoy_api::objects::DisruptionBudget::of(&serde_json::from_value(v).unwrap()))
    };
    let names = |v: Vec<Arc<PodInfo>>| v.iter().map(|p| p.key.name.to_string()).collect::<Vec<_>>();
    let (violating, ok) = victims::split_by_pdb(&pods, &[budget(1, &[])]);
    assert_eq!((names(violating), names(ok)), (vec!["b".into(), "c".into()], vec!["a".into()]));
    // A pod the API server already counted does not spend the budget.
    let (violating, ok) = victims::split_by_pdb(&pods, &[budget(1, &["a"])]);
    assert_eq!((names(violating), names(ok)), (vec!["c".into()], vec!["a".into(), "b".into()]));
}

#[test]
fn candidate_count_and_offset_as_upstream() {
    let h = handle();
    let plugin = |pct: i32, abs: i32| {
        let args = PluginArgs::DefaultPreemption(DefaultPreemptionArgs {
            min_candidate_nodes_percentage: pct,
            min_candidate_nodes_absolute: abs,
            replacement_preemption_delay_seconds: 0,
        });
        DefaultPreemption::new(Some(&args), &h).unwrap()
    };
    let cases = [(10, 100, 50, 50), (10, 100, 5000, 500), (10, 1, 5, 1), (0, 3, 10, 3)];
    for (pct, abs, nodes, want) in cases {
        assert_eq!(plugin(pct, abs).num_candidates(nodes), want, "{pct}% / {abs} of {nodes}");
    }
    // With one candidate wanted, the dry run stops at the first node it
    // tries: the random offset decides which.
    let case = |random: u64| Case {
        random,
        args: DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 0,
            min_candidate_nodes_absolute: 1,
            replacement_preemption_delay_seconds: 0,
        },
        ..Case::new(
            preemptor("3"),
            vec![node("n1"), node("n2"), node("n3")],
            vec![pod("a", "n1", "4", 0), pod("b", "n2", "4", 0), pod("c", "n3", "4", 0)],
        )
    };
    assert_eq!(case(0).outcome(), ok("n1", &["a"]));
    assert_eq!(case(4).outcome(), ok("n2", &["b"]));
    assert_eq!(case(2).outcome(), ok("n3", &["c"]));
}

#[test]
fn pick_keeps_the_first_of_full_ties() {
    let c = |node: &str| Candidate {
        node: Arc::from(node),
        victims: vec![PodBuilder::new("v").info()],
        num_pdb_violations: 0,
    };
    assert_eq!(&*pick_one_node(vec![c("x"), c("y")]).node, "x");
}

#[test]
fn fit_error_message_counts_the_nodes_not_tried() {
    let failed = vec![(Arc::from("a"), Status::unschedulable("Insufficient cpu"))];
    assert_eq!(
        fit_error_message(3, &failed),
        "0/3 nodes are available: 1 Insufficient cpu, 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn victim_units_order_and_budgets_as_upstream() {
    use victims::{Victim, more_important_victim, split_units_by_pdb};
    let at: Arc<str> = Arc::from("n1");
    let unit = |names: &[&str], priority: i32, group: bool| Victim {
        pods: names.iter().map(|n| PodBuilder::new(n).label("app", "x").info()).collect(),
        nodes: names.iter().map(|_| at.clone()).collect(),
        priority,
        group: group.then(|| convoy_api::GroupKey::new(convoy_api::PodGroupApi::XK8s, "d", "g")),
    };
    // Priority first; at equal priority a group before a pod, the larger
    // group before the smaller.
    let mut units = vec![
        unit(&["single"], 5, false),
        unit(&["g2a", "g2b"], 5, true),
        unit(&["g3a", "g3b", "g3c"], 5, true),
        unit(&["top"], 9, false),
    ];
    units.sort_by(more_important_victim);
    let first: Vec<_> = units.iter().map(|u| u.pods[0].key.name.to_string()).collect();
    assert_eq!(first, ["top", "g3a", "g2a", "single"]);
    // A unit violates when any of its pods does, counting each.
    let mut v = pdb(2, "x");
    v["metadata"] = json!({"name": "p", "namespace": "default"});
    let budget =
        Arc::new(convoy_api::objects::DisruptionBudget::of(&serde_json::from_value(v).unwrap()));
    let (violating, ok) = split_units_by_pdb(&units, &[budget]);
    let counts: Vec<_> = violating.iter().map(|(u, n)| (u.pods.len(), *n)).collect();
    assert_eq!(counts, [(3, 2), (2, 2), (1, 1)]);
    assert_eq!(ok.len(), 1);
}
