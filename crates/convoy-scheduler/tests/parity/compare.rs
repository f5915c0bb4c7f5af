//! Comparing one pod's attempt in both clusters: the outcome, the FitError
//! text, the feasible set, each plugin's weighted score on each node, the
//! totals, and the choice (Convoy's node must be among upstream's best).

use std::collections::{BTreeMap, BTreeSet};

use super::logs::{Attempt, Ending};

/// One difference between upstream and Convoy on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What differs, for grouping: `outcome`, `message`, `feasible`,
    /// `skipped <plugin>`, `score <plugin>`, `total`, `choice`.
    pub kind: String,
    /// The difference, naming the plugin, node and both values.
    pub text: String,
    /// The nodes it is about (their specs go into the report).
    pub nodes: Vec<String>,
}

/// The comparison of one pod.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// What differs (empty: in parity).
    pub findings: Vec<Finding>,
    /// Per plugin: (node scores equal, node scores compared).
    pub agreement: BTreeMap<String, (usize, usize)>,
    /// Upstream's best nodes (highest total); several on a tie.
    pub upstream_best: BTreeSet<String>,
}

/// The nodes that passed Filter: those scored, or the one node bound
/// without scoring (a single feasible node is not scored).
pub fn feasible(a: &Attempt) -> BTreeSet<String> {
    match &a.ending {
        _ if !a.cycle.totals.is_empty() => a.cycle.totals.keys().cloned().collect(),
        Ending::Bound(n) => BTreeSet::from([n.clone()]),
        _ => BTreeSet::new(),
    }
}

fn best(a: &Attempt) -> BTreeSet<String> {
    let Some(max) = a.cycle.totals.values().max() else { return feasible(a) };
    a.cycle.totals.iter().filter(|(_, s)| *s == max).map(|(n, _)| n.clone()).collect()
}

fn list(nodes: &BTreeSet<String>) -> String {
    format!("[{}]", nodes.iter().map(String::as_str).collect::<Vec<_>>().join(" "))
}

/// Compares upstream's attempt `up` with Convoy's `ours`.
pub fn compare(up: &Attempt, ours: &Attempt) -> Comparison {
    let mut c = Comparison { upstream_best: best(up), ..Default::default() };
    let mut find = |kind: &str, text: String, nodes: Vec<String>| {
        c.findings.push(Finding { kind: kind.to_string(), text, nodes });
    };
    let (up_node, our_node) = match (&up.ending, &ours.ending) {
        (Ending::Unschedulable(a), Ending::Unschedulable(b)) => {
            if a != b {
                find("message", format!("FitError upstream {a:?}\n      convoy   {b:?}"), vec![]);
            }
            return c;
        }
        (Ending::Bound(u), Ending::Bound(o)) => (u.clone(), o.clone()),
        (u, o) => {
            // The node one of them bound the pod to is the one to look at.
            let nodes = [u, o]
                .into_iter()
                .filter_map(|e| match e {
                    Ending::Bound(n) => Some(n.clone()),
                    _ => None,
                })
                .collect();
            find("outcome", format!("upstream {u}; convoy {o}"), nodes);
            return c;
        }
    };

    let (f_up, f_ours) = (feasible(up), feasible(ours));
    if f_up != f_ours {
        let only_up: BTreeSet<String> = f_up.difference(&f_ours).cloned().collect();
        let only_ours: BTreeSet<String> = f_ours.difference(&f_up).cloned().collect();
        find(
            "feasible",
            format!(
                "feasible nodes differ: upstream only {}, convoy only {} ({} in common)",
                list(&only_up),
                list(&only_ours),
                f_up.intersection(&f_ours).count()
            ),
            only_up.union(&only_ours).cloned().collect(),
        );
    }

    // Per plugin, node by node: a different score, or a plugin one side
    // skipped (at PreScore: absent from its log) and the other scored above
    // 0. A skipped plugin adds 0 to every node, so "skipped" and "0
    // everywhere" are the same opinion: upstream's ImageLocality has no
    // PreScore and logs 0 where Convoy's skips a pod whose images no node has.
    let empty = BTreeMap::new();
    let mut skipped: BTreeMap<(String, &str), Vec<String>> = BTreeMap::new();
    let mut agreement: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for node in f_up.intersection(&f_ours) {
        let su = up.cycle.scores.get(node).unwrap_or(&empty);
        let so = ours.cycle.scores.get(node).unwrap_or(&empty);
        let plugins: BTreeSet<&String> = su.keys().chain(so.keys()).collect();
        for plugin in plugins {
            let e = agreement.entry(plugin.clone()).or_default();
            e.1 += 1;
            match (su.get(plugin), so.get(plugin)) {
                (Some(a), Some(b)) if a == b => e.0 += 1,
                (Some(a), Some(b)) => find(
                    &format!("score {plugin}"),
                    format!("{plugin} on {node}: upstream {a}, convoy {b}"),
                    vec![node.clone()],
                ),
                (Some(0), None) | (None, Some(0)) => e.0 += 1,
                (Some(_), None) => {
                    skipped.entry((plugin.clone(), "upstream")).or_default().push(node.clone())
                }
                (None, Some(_)) => {
                    skipped.entry((plugin.clone(), "convoy")).or_default().push(node.clone())
                }
                (None, None) => unreachable!(),
            }
        }
    }
    for ((plugin, side), nodes) in skipped {
        let other = if side == "upstream" { "convoy" } else { "upstream" };
        find(
            &format!("skipped {plugin}"),
            format!(
                "{plugin} scored above 0 by {side} only ({other} skipped it) on {} node(s): {}",
                nodes.len(),
                nodes.join(" ")
            ),
            nodes.into_iter().take(1).collect(),
        );
    }
    c.agreement = agreement;

    // A total that differs although every plugin's score agrees (the
    // others are explained by the plugin findings above).
    for node in f_up.intersection(&f_ours) {
        let same_scores = up.cycle.scores.get(node) == ours.cycle.scores.get(node);
        if let (Some(a), Some(b)) = (up.cycle.totals.get(node), ours.cycle.totals.get(node))
            && a != b
            && same_scores
        {
            find(
                "total",
                format!("total on {node}: upstream {a}, convoy {b}, with the same plugin scores"),
                vec![],
            );
        }
    }

    let best = c.upstream_best.clone();
    if !best.contains(&up_node) {
        find(
            "harness",
            format!(
                "upstream bound to {up_node}, not among its best {} (log misread?)",
                list(&best)
            ),
            vec![],
        );
    }
    if !best.contains(&our_node) {
        let total = |a: &Attempt, n: &str| match a.cycle.totals.get(n) {
            Some(s) => s.to_string(),
            None if feasible(a).contains(n) => "not scored: the only feasible node".into(),
            None => "none: infeasible".into(),
        };
        find(
            "choice",
            format!(
                "convoy chose {our_node} (upstream total {}, convoy total {}); upstream's best {} \
                 (upstream total {}, convoy total {}), upstream chose {up_node}",
                total(up, &our_node),
                total(ours, &our_node),
                list(&best),
                best.first().map_or("-".into(), |n| total(up, n)),
                best.first().map_or("-".into(), |n| total(ours, n)),
            ),
            std::iter::once(our_node).chain(best.first().cloned()).collect(),
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::logs::Cycle;
    use super::*;

    fn attempt(scores: &[(&str, &str, i64)], bound: &str) -> Attempt {
        let mut cycle = Cycle::default();
        for (node, plugin, s) in scores {
            cycle.scores.entry(node.to_string()).or_default().insert(plugin.to_string(), *s);
            *cycle.totals.entry(node.to_string()).or_default() += s;
        }
        Attempt { cycle, ending: Ending::Bound(bound.into()) }
    }

    fn kinds(c: &Comparison) -> Vec<&str> {
        c.findings.iter().map(|f| f.kind.as_str()).collect()
    }

    #[test]
    fn equal_scores_and_a_pick_within_the_tie_agree() {
        let up = attempt(&[("a", "P", 10), ("b", "P", 10), ("c", "P", 5)], "a");
        let ours = attempt(&[("a", "P", 10), ("b", "P", 10), ("c", "P", 5)], "b");
        let c = compare(&up, &ours);
        assert!(c.findings.is_empty(), "{:?}", c.findings);
        assert_eq!(c.upstream_best, BTreeSet::from(["a".to_string(), "b".to_string()]));
        assert_eq!(c.agreement["P"], (3, 3));
    }

    #[test]
    fn a_different_score_total_and_choice_are_each_reported() {
        let up = attempt(&[("a", "P", 65), ("a", "Q", 1), ("b", "P", 60), ("b", "Q", 1)], "a");
        let ours = attempt(&[("a", "P", 81), ("a", "Q", 1), ("b", "P", 90), ("b", "Q", 1)], "b");
        let c = compare(&up, &ours);
        assert_eq!(kinds(&c), ["score P", "score P", "choice"]);
        assert_eq!(c.findings[0].text, "P on a: upstream 65, convoy 81");
        assert_eq!(c.agreement["Q"], (2, 2));
        assert_eq!(c.agreement["P"], (0, 2));

        // A total that is not the sum of the same plugin scores.
        let plain = attempt(&[("a", "P", 1)], "a");
        let mut odd = plain.clone();
        odd.cycle.totals.insert("a".into(), 2);
        assert_eq!(kinds(&compare(&plain, &odd)), ["total"]);
    }

    #[test]
    fn feasible_sets_skipped_plugins_and_outcomes() {
        let up = attempt(&[("a", "P", 1), ("b", "P", 2)], "b");
        let ours = attempt(&[("b", "P", 2), ("b", "Q", 5), ("c", "P", 0)], "b");
        let c = compare(&up, &ours);
        assert_eq!(kinds(&c), ["feasible", "skipped Q"]);
        // A plugin skipped on one side and 0 on the other agrees.
        let zero = attempt(&[("a", "P", 1), ("b", "P", 2), ("b", "Q", 0)], "b");
        let z = compare(&up, &zero);
        assert!(z.findings.is_empty(), "{:?}", z.findings);
        assert_eq!(z.agreement["Q"], (1, 1));
        assert_eq!(
            c.findings[0].text,
            "feasible nodes differ: upstream only [a], convoy only [c] (1 in common)"
        );

        // One feasible node: no scores on either side, same node.
        let single = Attempt { cycle: Cycle::default(), ending: Ending::Bound("a".into()) };
        assert!(compare(&single, &single).findings.is_empty());

        let unfit =
            |m: &str| Attempt { cycle: Cycle::default(), ending: Ending::Unschedulable(m.into()) };
        assert!(compare(&unfit("0/1 x."), &unfit("0/1 x.")).findings.is_empty());
        assert_eq!(kinds(&compare(&unfit("0/1 x."), &unfit("0/1 y."))), ["message"]);
        assert_eq!(kinds(&compare(&single, &unfit("0/1 y."))), ["outcome"]);
    }
}
