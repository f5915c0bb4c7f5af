//! A pod's inter-pod affinity and anti-affinity terms, parsed once when the
//! pod enters the scheduler (upstream `framework.AffinityTerm` and the
//! precomputed terms of `framework.PodInfo`, kube-scheduler v1.37).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, WeightedPodAffinityTerm};

use crate::labels::{Labels, Selector};

/// A parsed `PodAffinityTerm`.
#[derive(Debug, Clone, PartialEq)]
pub struct AffinityTerm {
    /// Namespaces a matching pod may be in: `namespaces` as written, or the
    /// owning pod's own namespace when both `namespaces` and
    /// `namespaceSelector` are unset.
    pub namespaces: Box<[Arc<str>]>,
    /// `namespaceSelector` (nil selects no namespace, `{}` every namespace).
    pub namespace_selector: Selector,
    /// `labelSelector` (nil selects no pod, `{}` every pod).
    pub selector: Selector,
    /// `topologyKey`.
    pub topology_key: Arc<str>,
}

impl AffinityTerm {
    /// Parses a term of a pod in namespace `pod_namespace`.
    pub fn new(pod_namespace: &str, term: &PodAffinityTerm) -> Result<Self, String> {
        let selector = Selector::from_label_selector(term.label_selector.as_ref())?;
        let namespace_selector = Selector::from_label_selector(term.namespace_selector.as_ref())?;
        let listed = term.namespaces.as_deref().unwrap_or(&[]);
        let namespaces: Box<[Arc<str>]> = if listed.is_empty() && term.namespace_selector.is_none()
        {
            Box::new([Arc::from(pod_namespace)])
        } else {
            let mut v: Vec<Arc<str>> = listed.iter().map(|n| Arc::from(n.as_str())).collect();
            v.sort();
            v.dedup();
            v.into_boxed_slice()
        };
        Ok(Self {
            namespaces,
            namespace_selector,
            selector,
            topology_key: Arc::from(term.topology_key.as_str()),
        })
    }

    /// Upstream `AffinityTerm.Matches`: the pod is in one of the namespaces
    /// (or its namespace's labels match the namespace selector) and its
    /// labels match the selector.
    pub fn matches(&self, namespace: &str, labels: &Labels, namespace_labels: &Labels) -> bool {
        (self.namespaces.iter().any(|n| &**n == namespace)
            || self.namespace_selector.matches(namespace_labels))
            && self.selector.matches(labels)
    }

    /// Whether `namespace` is listed (not through the selector).
    pub fn lists_namespace(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| &**n == namespace)
    }
}

/// A parsed `WeightedPodAffinityTerm`.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// `weight` (1-100).
    pub weight: i32,
}

/// A pod's parsed `spec.affinity.podAffinity` and `podAntiAffinity`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodAffinity {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_affinity: Vec<AffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// Why a list of terms could not be parsed (that list is left empty,
    /// as upstream's `NewPodInfo` leaves it): the pod itself cannot be
    /// scheduled (`parsing pod: ...`); as an existing pod it counts with the
    /// terms that parsed.
    pub parse_error: Option<String>,
}

impl PodAffinity {
    /// The parsed terms of a pod with `spec.affinity.podAffinity` or
    /// `podAntiAffinity` set; `None` when it has neither (upstream's
    /// `podWithAffinity` is false).
    pub fn of(namespace: &str, affinity: Option<&Affinity>) -> Option<Self> {
        let a = affinity?;
        if a.pod_affinity.is_none() && a.pod_anti_affinity.is_none() {
            return None;
        }
        let mut errors = Vec::new();
        let required =
            |terms: Option<&Vec<PodAffinityTerm>>, what: &str, errors: &mut Vec<String>| {
                terms
                    .map(|ts| {
                        ts.iter()
                            .map(|t| AffinityTerm::new(namespace, t))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()
                    .unwrap_or_else(|e| {
                        errors.push(format!("{what}: {e}"));
                        None
                    })
                    .unwrap_or_default()
            };
        let preferred =
            |terms: Option<&Vec<WeightedPodAffinityTerm>>, what: &str, errors: &mut Vec<String>| {
                terms
                    .map(|ts| {
                        ts.iter()
                            .map(|t| {
                                AffinityTerm::new(namespace, &t.pod_affinity_term)
                                    .map(|term| WeightedAffinityTerm { term, weight: t.weight })
                            })
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()
                    .unwrap_or_else(|e| {
                        errors.push(format!("{what}: {e}"));
                        None
                    })
                    .unwrap_or_default()
            };
        let aff = a.pod_affinity.as_ref();
        let anti = a.pod_anti_affinity.as_ref();
        let parsed = PodAffinity {
            required_affinity: required(
                aff.and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref()),
                "requiredAffinityTerms",
                &mut errors,
            ),
            required_anti_affinity: required(
                anti.and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref()),
                "requiredAntiAffinityTerms",
                &mut errors,
            ),
            preferred_affinity: preferred(
                aff.and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref()),
                "preferredAffinityTerms",
                &mut errors,
            ),
            preferred_anti_affinity: preferred(
                anti.and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref()),
                "preferredAntiAffinityTerms",
                &mut errors,
            ),
            parse_error: (!errors.is_empty()).then(|| errors.join(", ")),
        };
        Some(parsed)
    }

    /// Whether the pod has required anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        !self.required_anti_affinity.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn affinity(v: serde_json::Value) -> Affinity {
        serde_json::from_value(v).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn namespaces_default_to_the_pods_own() {
        let a = affinity(
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"},
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaces": ["b", "a"]},
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaceSelector": {}},
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "x"}}}
            ]}}),
        );
        let p = PodAffinity::of("own", Some(&a)).unwrap();
        assert!(p.parse_error.is_none());
        let t = &p.required_affinity;
        let db = labels(&[("app", "db")]);
        let none = Labels::new();
        let team = labels(&[("team", "x")]);
        assert!(t[0].matches("own", &db, &none) && !t[0].matches("other", &db, &team));
        assert!(t[1].matches("a", &db, &none) && !t[1].matches("own", &db, &none));
        assert!(t[2].matches("anything", &db, &none), "{{}} selects every namespace");
        assert!(t[3].matches("other", &db, &team) && !t[3].matches("own", &db, &none));
        assert!(!t[0].matches("own", &labels(&[("app", "web")]), &none));
    }

    #[test]
    fn no_pod_affinity_is_none_and_errors_keep_other_lists() {
        assert!(PodAffinity::of("ns", None).is_none());
        assert!(PodAffinity::of("ns", Some(&affinity(json!({"nodeAffinity": {}})))).is_none());
        let a = affinity(json!({
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}, "topologyKey": "zone"}
            ]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}
            ]}
        }));
        let p = PodAffinity::of("ns", Some(&a)).unwrap();
        assert!(p.required_affinity.is_empty());
        assert_eq!(p.preferred_anti_affinity.len(), 1);
        assert_eq!(p.preferred_anti_affinity[0].weight, 5);
        assert!(p.parse_error.unwrap().starts_with("requiredAffinityTerms: a: for 'in'"));
    }
}
