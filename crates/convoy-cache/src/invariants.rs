//! [`Cache::check_invariants`](crate::Cache::check_invariants): what must hold
//! between any two operations.

use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::Resource;

use crate::state::{Phase, State, pod_key};

impl State {
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        fn norm(r: &Resource) -> Resource {
            let mut r = r.clone();
            r.scalar.retain(|_, v| *v != 0);
            r
        }
        let mut seen: HashMap<Arc<str>, &str> = HashMap::new();
        let mut real = 0;
        for (name, e) in &self.nodes {
            let n = &e.info;
            if n.name() != &**name {
                return Err(format!("node {name} holds a NodeInfo named {}", n.name()));
            }
            if e.zone.is_some() != n.node().is_some() {
                return Err(format!(
                    "node {name}: zone {:?} but node object {}",
                    e.zone,
                    n.node().is_some()
                ));
            }
            if e.zone.is_some() {
                real += 1;
            } else if n.pods.is_empty() {
                return Err(format!("empty placeholder for node {name} was not removed"));
            }
            let mut sum = Resource::default();
            let (mut nz_cpu, mut nz_mem, mut ports) = (0, 0, 0);
            for p in &n.pods {
                sum.add(&p.requests.requests);
                nz_cpu += p.requests.non_zero_milli_cpu;
                nz_mem += p.requests.non_zero_memory;
                ports += p.host_ports.len();
                let key = pod_key(p);
                if let Some(other) = seen.insert(key.clone(), name) {
                    return Err(format!("pod {} is on nodes {other} and {name}", p.key));
                }
                match self.pods.get(&key) {
                    None => return Err(format!("pod {} on node {name} has no state", p.key)),
                    Some(s) if *s.node != **name => {
                        return Err(format!(
                            "pod {} is on node {name} but its state says {}",
                            p.key, s.node
                        ));
                    }
                    Some(s) if !Arc::ptr_eq(&s.pod, p) => {
                        return Err(format!(
                            "pod {} on node {name} is not the pod its state holds",
                            p.key
                        ));
                    }
                    Some(_) => {}
                }
            }
            if norm(&sum) != norm(&n.requested) {
                return Err(format!(
                    "node {name}: requested {:?} but its pods sum to {:?}",
                    n.requested, sum
                ));
            }
            if nz_cpu != n.non_zero_requested.milli_cpu || nz_mem != n.non_zero_requested.memory {
                return Err(format!("node {name}: non-zero requests do not match its pods"));
            }
            if ports != n.used_ports.len() {
                return Err(format!("node {name}: used ports do not match its pods"));
            }
            let mut claims = convoy_api::ClaimVolumes::default();
            n.pods.iter().for_each(|p| claims.add(p.claim_volumes));
            if claims != n.claim_volumes {
                return Err(format!("node {name}: claim volumes do not match its pods"));
            }
        }
        let images = convoy_api::ImageStates::of(
            self.nodes.values().filter(|e| e.zone.is_some()).map(|e| &e.info.images()[..]),
        );
        if !same_counts(&images, &self.images, &self.nodes) {
            return Err("image counts do not match the real nodes' images".to_string());
        }
        if real != self.tree.len() {
            return Err(format!("{real} real nodes but the zone tree holds {}", self.tree.len()));
        }
        for (key, s) in &self.pods {
            let on_node = self
                .nodes
                .get(&*s.node)
                .is_some_and(|e| e.info.pods.iter().any(|p| Arc::ptr_eq(p, &s.pod)));
            if !on_node {
                return Err(format!(
                    "pod {} ({}) is not on its node {}",
                    s.pod.key,
                    s.phase.name(),
                    s.node
                ));
            }
            if matches!(s.phase, Phase::Assumed { .. }) != self.assumed.contains(key) {
                return Err(format!(
                    "pod {} is {} but the assumed set disagrees",
                    s.pod.key,
                    s.phase.name()
                ));
            }
        }
        for key in &self.assumed {
            if !self.pods.contains_key(key) {
                return Err(format!("assumed pod {key} is not in the cache"));
            }
        }
        Ok(())
    }
}

/// Whether two image maps count the same nodes per name (sizes may differ:
/// a name keeps the size of the first node that reported it, which a recount
/// in another order does not reproduce).
fn same_counts(
    a: &convoy_api::ImageStates,
    b: &convoy_api::ImageStates,
    nodes: &HashMap<Arc<str>, crate::state::NodeEntry>,
) -> bool {
    a.len() == b.len()
        && nodes
            .values()
            .flat_map(|e| e.info.images().iter())
            .all(|i| a.get(&i.name).map(|s| s.num_nodes) == b.get(&i.name).map(|s| s.num_nodes))
}
