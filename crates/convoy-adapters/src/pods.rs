//! The watch of all Pods, and the one pod field of an older Kubernetes
//! version that Convoy's object types (Kubernetes 1.37's) do not have.
//!
//! Kubernetes 1.35's alpha Workload API (`scheduling.k8s.io/v1alpha1`
//! Workloads, gate `GenericWorkload`) puts pods in gangs with
//! `spec.workloadRef`, a field 1.36 replaced. Read as a 1.37 pod, such a
//! pod would silently lose it and be placed alone. So on a server that
//! serves those Workloads, pods are read through [`PodReadingOlderFields`],
//! which notes the field in the pod's in-memory annotation
//! [`UNREAD_FIELDS_ANNOTATION`]; the framework then refuses the pod by
//! name (`pod uses spec.workloadRef, ...`). Elsewhere pods are read as they
//! are, at no extra cost. The stream follows discovery: when the Workload
//! API appears or goes, the watch restarts in the other mode (a relist).

use std::borrow::Cow;

use convoy_api::pod_fields::UNREAD_FIELDS_ANNOTATION;
use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;

use crate::discovery::{Discovered, DiscoveryHandle};

/// Whether the server serves Kubernetes 1.35's Workload API, whose pods
/// carry `spec.workloadRef`.
fn serves_1_35_workloads(d: &Discovered) -> bool {
    d.versions_of("scheduling.k8s.io", "workloads").iter().any(|v| v == "v1alpha1")
}

/// A pod read with the fields of older versions it sets noted in
/// [`UNREAD_FIELDS_ANNOTATION`] (see the module docs).
#[derive(Debug, Clone)]
pub struct PodReadingOlderFields(pub Pod);

impl<'de> Deserialize<'de> for PodReadingOlderFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut value = serde_json::Value::deserialize(d)?;
        let uses = value.pointer("/spec/workloadRef").is_some_and(|r| !r.is_null());
        if uses {
            let meta = value
                .as_object_mut()
                .ok_or_else(|| serde::de::Error::custom("a pod is an object"))?
                .entry("metadata")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(meta) = meta.as_object_mut() {
                let annotations =
                    meta.entry("annotations").or_insert_with(|| serde_json::json!({}));
                if let Some(a) = annotations.as_object_mut() {
                    a.insert(UNREAD_FIELDS_ANNOTATION.into(), "spec.workloadRef".into());
                }
            }
        }
        Pod::deserialize(value).map(PodReadingOlderFields).map_err(serde::de::Error::custom)
    }
}

impl Resource for PodReadingOlderFields {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

type PodWatch = BoxStream<'static, watcher::Result<Event<Pod>>>;

fn watch(client: &kube::Client, cfg: &watcher::Config, older_fields: bool) -> PodWatch {
    if !older_fields {
        return crate::initial_list::watch(Api::<Pod>::all(client.clone()), cfg);
    }
    tracing::warn!(
        "this API server serves Kubernetes 1.35's alpha Workload API (scheduling.k8s.io/v1alpha1): \
         pods that set spec.workloadRef are refused by name (this scheduler does not read it; \
         use scheduler-plugins' PodGroups for gangs)"
    );
    crate::initial_list::watch(Api::<PodReadingOlderFields>::all(client.clone()), cfg)
        .map(|event| {
            event.map(|e| match e {
                Event::Init => Event::Init,
                Event::InitApply(p) => Event::InitApply(p.0),
                Event::InitDone => Event::InitDone,
                Event::Apply(p) => Event::Apply(p.0),
                Event::Delete(p) => Event::Delete(p.0),
            })
        })
        .boxed()
}

struct State {
    client: kube::Client,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
    /// The watch and whether it reads older fields.
    current: Option<(bool, PodWatch)>,
}

/// Every pod, read as the server's version needs (see the module docs);
/// starts once discovery has answered.
pub(crate) fn pod_stream(
    client: kube::Client,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
) -> PodWatch {
    let state = State { client, cfg, discovery, current: None };
    stream::unfold(state, |mut s| async move {
        loop {
            let Some(found) = s.discovery.current() else {
                s.discovery.changed().await;
                continue;
            };
            let older = serves_1_35_workloads(&found);
            if s.current.as_ref().map(|c| c.0) != Some(older) {
                s.current = Some((older, watch(&s.client, &s.cfg, older)));
            }
            let (_, w) = s.current.as_mut().expect("set above");
            tokio::select! {
                event = w.next() => match event {
                    Some(event) => return Some((event, s)),
                    None => s.current = None,
                },
                _ = s.discovery.changed() => {}
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::PodInfo;
    use serde_json::json;

    #[test]
    fn a_1_35_workload_ref_is_refused_by_name() {
        let with = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}],
                     "workloadRef": {"name": "job", "podGroup": "workers"}}
        });
        let pod: PodReadingOlderFields = serde_json::from_value(with).unwrap();
        let info = PodInfo::new(std::sync::Arc::new(pod.0)).unwrap();
        let paths: Vec<&str> = info.unevaluated.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["spec.workloadRef"]);
        assert_eq!(info.unevaluated[0].plugins, ["GangScheduling"]);

        let without = json!({
            "metadata": {"name": "q", "namespace": "ns", "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "c"}]}
        });
        let pod: PodReadingOlderFields = serde_json::from_value(without).unwrap();
        assert_eq!(pod.0.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
        assert!(PodInfo::new(std::sync::Arc::new(pod.0)).unwrap().unevaluated.is_empty());
    }

    #[test]
    fn only_1_35_workloads_turn_it_on() {
        let mut d = Discovered::default();
        assert!(!serves_1_35_workloads(&d));
        d.insert("scheduling.k8s.io", "v1beta1", "workloads");
        assert!(!serves_1_35_workloads(&d));
        d.insert("scheduling.k8s.io", "v1alpha1", "workloads");
        assert!(serves_1_35_workloads(&d));
    }
}
