//! A randomized sequence of operations checked against a simple model of the
//! cache after every step (deterministic: fixed seeds, own PRNG).

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::Snapshot;

use convoy_api::testing::TestRng as Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Assumed { deadline_ms: Option<u64> },
    Added,
}

#[derive(Debug, Clone)]
struct MPod {
    node: String,
    phase: Phase,
}

#[derive(Default)]
struct Model {
    /// Zones in insertion order, each with its real nodes in insertion order.
    zones: Vec<(String, Vec<String>)>,
    pods: BTreeMap<String, MPod>,
    now_ms: u64,
}

const TTL_MS: u64 = 10_000;

fn milli(pod: &str) -> i64 {
    pod[1..].parse::<i64>().unwrap() * 10 + 10
}

fn cpu_of(pod: &str) -> String {
    format!("{}m", milli(pod))
}

impl Model {
    fn zone_of(&self, node: &str) -> Option<usize> {
        self.zones.iter().position(|(_, ns)| ns.iter().any(|n| n == node))
    }
    fn remove_node(&mut self, node: &str) -> bool {
        let Some(zi) = self.zone_of(node) else { return false };
        self.zones[zi].1.retain(|n| n != node);
        if self.zones[zi].1.is_empty() {
            self.zones.remove(zi);
        }
        true
    }
    fn upsert_node(&mut self, node: &str, zone: &str) {
        if let Some(zi) = self.zone_of(node) {
            if self.zones[zi].0 == zone {
                return;
            }
            self.remove_node(node);
        }
        match self.zones.iter_mut().find(|(z, _)| z == zone) {
            Some((_, ns)) => ns.push(node.to_string()),
            None => self.zones.push((zone.to_string(), vec![node.to_string()])),
        }
    }
    fn order(&self) -> Vec<String> {
        let rounds = self.zones.iter().map(|(_, ns)| ns.len()).max().unwrap_or(0);
        (0..rounds)
            .flat_map(|i| self.zones.iter().filter_map(move |(_, ns)| ns.get(i).cloned()))
            .collect()
    }
    /// Expected (node, millicores, pods) for every node the cache should hold.
    fn dump(&self) -> BTreeMap<String, (i64, usize)> {
        let mut d: BTreeMap<String, (i64, usize)> = BTreeMap::new();
        for (_, ns) in &self.zones {
            for n in ns {
                d.insert(n.clone(), (0, 0));
            }
        }
        for (name, p) in &self.pods {
            let e = d.entry(p.node.clone()).or_default();
            e.0 += milli(name);
            e.1 += 1;
        }
        d
    }
}

fn check(cache: &Cache, model: &Model, step: usize, op: usize) {
    if let Err(e) = cache.check_invariants() {
        panic!("step {step} (op {op}): {e}");
    }
    assert_eq!(cache.pod_count(), model.pods.len(), "step {step} (op {op})");
    let got: BTreeMap<String, (i64, usize)> =
        cache.dump().into_iter().map(|(n, r, p)| (n, (r.milli_cpu, p))).collect();
    assert_eq!(got, model.dump(), "step {step} (op {op})");
    for (name, p) in &model.pods {
        assert_eq!(
            cache.is_assumed(name),
            matches!(p.phase, Phase::Assumed { .. }),
            "step {step}: {name}"
        );
    }
}

fn check_snapshot(cache: &Cache, model: &Model, snap: &Snapshot, step: usize) {
    let names: Vec<String> = snap.nodes().iter().map(|n| n.name().to_string()).collect();
    assert_eq!(names, model.order(), "step {step}");
    let want = model.dump();
    for n in snap.nodes() {
        assert!(
            Arc::ptr_eq(n, &cache.node_info(n.name()).unwrap()),
            "step {step}: {} is stale",
            n.name()
        );
        assert_eq!(n.requested.milli_cpu, want[n.name()].0, "step {step}: {}", n.name());
        assert!(std::ptr::eq(snap.get(n.name()).unwrap(), n));
    }
    use convoy_api::NodeInfoLister;
    let generations: Vec<u64> = snap.nodes().iter().map(|n| n.generation).collect();
    assert_eq!(snap.generations(), &generations[..], "step {step}: generations");
    let (aff, anti) = convoy_api::lister::affinity_lists(snap.nodes());
    let names = |v: &[Arc<convoy_api::NodeInfo>]| {
        v.iter().map(|n| n.name().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names(snap.have_pods_with_affinity_list()), names(&aff), "step {step}");
    assert_eq!(
        names(snap.have_pods_with_required_anti_affinity_list()),
        names(&anti),
        "step {step}"
    );
    // The lists hold the snapshot's node infos, not older ones.
    let lists = snap.have_pods_with_affinity_list().iter();
    for n in lists.chain(snap.have_pods_with_required_anti_affinity_list()) {
        assert!(Arc::ptr_eq(n, snap.get(n.name()).unwrap()), "step {step}: {} stale", n.name());
    }
}

fn run(seed: u64, steps: usize) {
    let (cache, clock) = new_cache();
    let cache = cache.with_ttl(Duration::from_millis(TTL_MS));
    let mut rng = Rng(seed);
    let mut m = Model::default();
    let mut snap = Snapshot::new();
    for step in 0..steps {
        let node = format!("n{}", rng.below(10)); // n9 is never added: placeholders only
        let p = format!("p{}", rng.below(30));
        let op = rng.below(10);
        match op {
            0 if node != "n9" => {
                let zone = format!("z{}", rng.below(3));
                // A random subset of four images (the invariants recount them).
                let images = rng.below(16);
                let mut n = (*zoned(&node, &zone)).clone();
                n.status.get_or_insert_with(Default::default).images = Some(
                    (0..4)
                        .filter(|i| images & (1 << i) != 0)
                        .map(|i| convoy_api::k8s_openapi::api::core::v1::ContainerImage {
                            names: Some(vec![format!("img{i}:1")]),
                            size_bytes: Some(i as i64),
                        })
                        .collect(),
                );
                cache.update_node(Arc::new(n));
                m.upsert_node(&node, &zone);
            }
            1 => {
                let r = cache.remove_node(&node);
                assert_eq!(
                    r.is_ok(),
                    m.remove_node(&node),
                    "step {step}: remove_node {node}: {r:?}"
                );
            }
            2 => {
                let r = cache.assume_pod(pod(&p, &cpu_of(&p)), &node);
                let want = !m.pods.contains_key(&p);
                assert_eq!(r.is_ok(), want, "step {step}: assume {p}: {r:?}");
                if want {
                    m.pods.insert(p, MPod { node, phase: Phase::Assumed { deadline_ms: None } });
                }
            }
            3 => {
                cache.finish_binding(&pod(&p, &cpu_of(&p)));
                if let Some(mp) = m.pods.get_mut(&p)
                    && let Phase::Assumed { .. } = mp.phase
                {
                    mp.phase = Phase::Assumed { deadline_ms: Some(m.now_ms + TTL_MS) };
                }
            }
            4 => {
                let target = match m.pods.get(&p) {
                    Some(mp) if rng.below(2) == 0 => mp.node.clone(),
                    _ => node,
                };
                let r = cache.add_pod(bound(&p, &cpu_of(&p), &target));
                let want = !matches!(m.pods.get(&p), Some(MPod { phase: Phase::Added, .. }));
                assert_eq!(r.is_ok(), want, "step {step}: add {p}: {r:?}");
                if want {
                    m.pods.insert(p, MPod { node: target, phase: Phase::Added });
                }
            }
            5 => {
                let r = cache.forget_pod(&pod(&p, &cpu_of(&p)));
                let want =
                    matches!(m.pods.get(&p), Some(MPod { phase: Phase::Assumed { .. }, .. }));
                assert_eq!(r.is_ok(), want, "step {step}: forget {p}: {r:?}");
                if want {
                    m.pods.remove(&p);
                }
            }
            6 => {
                let on = m.pods.get(&p).map_or(node, |mp| mp.node.clone());
                let r = cache.remove_pod(&bound(&p, &cpu_of(&p), &on));
                assert_eq!(
                    r.is_ok(),
                    m.pods.remove(&p).is_some(),
                    "step {step}: remove {p}: {r:?}"
                );
            }
            7 => {
                let on = m.pods.get(&p).map_or(node, |mp| mp.node.clone());
                let old = bound(&p, &cpu_of(&p), &on);
                let r = cache.update_pod(&old, finished(&p, &cpu_of(&p), &on, "Succeeded"));
                assert!(r.is_ok(), "step {step}: update {p} to terminal: {r:?}");
                m.pods.remove(&p);
            }
            8 => {
                let ms = rng.below(8_000) as u64;
                clock.advance(Duration::from_millis(ms));
                m.now_ms += ms;
                let mut got: Vec<String> = cache
                    .cleanup_expired_assumed_pods()
                    .iter()
                    .map(|e| e.pod.key.name.to_string())
                    .collect();
                got.sort();
                let now = m.now_ms;
                let want: Vec<String> = m
                    .pods
                    .iter()
                    .filter(|(_, mp)| matches!(mp.phase, Phase::Assumed { deadline_ms: Some(d) } if now > d))
                    .map(|(k, _)| k.clone())
                    .collect();
                assert_eq!(got, want, "step {step}: expired");
                for k in &want {
                    m.pods.remove(k);
                }
            }
            _ => {
                cache.update_snapshot(&mut snap);
                check_snapshot(&cache, &m, &snap, step);
            }
        }
        check(&cache, &m, step, op);
    }
    cache.update_snapshot(&mut snap);
    check_snapshot(&cache, &m, &snap, steps);
}

#[test]
fn random_operations_keep_invariants_and_match_the_model() {
    for seed in [1, 2, 3, 0xc0ffee] {
        run(seed, 5_000);
    }
}
