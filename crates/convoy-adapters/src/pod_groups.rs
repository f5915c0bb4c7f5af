//! Watching PodGroups of both APIs (`scheduling.x-k8s.io/v1alpha1`, a CRD
//! that may not be installed, and `scheduling.k8s.io/v1beta1`, which the
//! server may not serve) through kube's dynamic API.
//!
//! Each API has a stream of its own (`group_stream`), which follows
//! discovery as every optional API does ([`crate::versioned`]): while the
//! API is not served (the CRD not installed, `GenericWorkload` off) it is
//! an empty set that start-up does not wait for; once discovery finds it
//! (asked again every [`WatchOptions::discovery_interval`]) it is watched,
//! until it goes away (every known group is then forgotten).
//!
//! Objects become [`ClusterUpdate::PodGroupApplied`] through
//! [`PodGroup::from_json`]. An invalid PodGroup is logged with the error
//! naming the field (once per resourceVersion), reported as a Warning
//! Event on it when a [`StatusWriter`] is given, and treated as absent:
//! its pods wait, as they would for a missing group. Changes that do not
//! change the normalised group (status writes, labels) produce nothing, so
//! Convoy's own status writes do not wake the group's pods.
//!
//! [`WatchOptions::discovery_interval`]: crate::WatchOptions::discovery_interval

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use convoy_api::apis::ApiInfo;
use convoy_api::{ClusterUpdate, GroupKey, PodGroup, PodGroupApi};
use futures::stream::{BoxStream, StreamExt};
use kube::api::{Api, DynamicObject, TypeMeta};
use kube::runtime::watcher::{self, Event};

use crate::discovery::DiscoveryHandle;
use crate::status::StatusWriter;
use crate::translator::Watched;
use crate::versioned::{KindItem, kind_stream};

/// Where an API's PodGroups live; defined in [`crate::group_status`], which the
/// status writer shares, and kept at this path for callers.
pub use crate::group_status::api_resource;

/// The API of a PodGroup object, from its `apiVersion`.
fn api_of(obj: &DynamicObject) -> Option<PodGroupApi> {
    PodGroupApi::from_api_version(&obj.types.as_ref()?.api_version)
}

/// The group's key from its metadata alone (valid or not).
fn key_of(obj: &DynamicObject) -> Option<GroupKey> {
    let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
    Some(GroupKey::new(api_of(obj)?, ns, obj.metadata.name.as_deref()?))
}

/// Reads the object, or says why it cannot be read.
pub(crate) fn normalise(obj: &DynamicObject) -> Result<PodGroup, String> {
    let value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    PodGroup::from_json(&value).map_err(|e| e.to_string())
}

/// Equal apart from the resourceVersion.
fn same_group(a: &PodGroup, b: &PodGroup) -> bool {
    a.key == b.key
        && a.uid == b.uid
        && a.gang == b.gang
        && a.min_member == b.min_member
        && a.min_resources == b.min_resources
        && a.schedule_timeout == b.schedule_timeout
        && a.required_topology == b.required_topology
        && a.priority == b.priority
        && a.never_preempts == b.never_preempts
}

impl Watched for DynamicObject {
    const KIND: &'static str = "PodGroup";

    /// Keeps metadata and spec: status is what Convoy itself writes.
    fn trim(&mut self) {
        self.metadata.managed_fields = None;
        if let Some(data) = self.data.as_object_mut() {
            data.remove("status");
        }
    }

    fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        if let Ok(pg) = normalise(&obj) {
            out.push_back(ClusterUpdate::PodGroupApplied(Arc::new(pg)));
        }
    }

    fn updated(old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        match (normalise(&old), normalise(&new)) {
            (Ok(old), Ok(new)) if same_group(&old, &new) => {}
            (_, Ok(new)) => out.push_back(ClusterUpdate::PodGroupApplied(Arc::new(new))),
            (Ok(old), Err(_)) => out.push_back(ClusterUpdate::PodGroupDeleted(old.key)),
            (Err(_), Err(_)) => {}
        }
    }

    fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        if let Some(key) = key_of(&obj) {
            out.push_back(ClusterUpdate::PodGroupDeleted(key));
        }
    }
}

/// Watches one version of a PodGroup API (objects carry `apiVersion` and
/// `kind`: LIST items may come without them).
fn group_watch(
    client: &kube::Client,
    api: &ApiInfo,
    version: &'static str,
    cfg: &watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<DynamicObject>>> {
    let ar = crate::versioned::api_resource(api, version);
    let types = TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() };
    crate::initial_list::watch(Api::<DynamicObject>::all_with(client.clone(), &ar), cfg)
        .map(move |mut event| {
            if let Ok(Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) = &mut event {
                o.types = Some(types.clone());
            }
            event
        })
        .boxed()
}

/// One API's PodGroups as discovery says; see the module docs. Invalid
/// groups are reported as they arrive.
pub(crate) fn group_stream(
    client: kube::Client,
    api: PodGroupApi,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
    reporter: Option<StatusWriter>,
) -> BoxStream<'static, (PodGroupApi, KindItem<DynamicObject>)> {
    let mut reported: HashSet<(String, String)> = HashSet::new();
    kind_stream(client, api.api(), cfg, discovery, group_watch)
        .map(move |item| {
            if let KindItem::Event(Ok(Event::Apply(obj) | Event::InitApply(obj))) = &item {
                report_invalid(obj, &mut reported, reporter.as_ref());
            }
            (api, item)
        })
        .boxed()
}

/// Logs (and reports in an Event) a PodGroup that cannot be read, once per
/// resourceVersion.
fn report_invalid(
    obj: &DynamicObject,
    reported: &mut HashSet<(String, String)>,
    reporter: Option<&StatusWriter>,
) {
    let Err(message) = normalise(obj) else { return };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let rv = obj.metadata.resource_version.clone().unwrap_or_default();
    if !reported.insert((uid.clone(), rv)) {
        return;
    }
    if reported.len() > 10_000 {
        reported.clear();
    }
    tracing::warn!(error = %message, "ignoring an invalid PodGroup; its pods wait until it is fixed");
    if let (Some(writer), Some(key)) = (reporter, key_of(obj)) {
        writer.invalid_pod_group(&key, &uid, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api: PodGroupApi, rv: &str, spec: serde_json::Value) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api.api_version(), "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
            "spec": spec, "status": {"phase": "Pending"}
        }))
        .unwrap();
        o.trim();
        o
    }

    fn describe(out: &mut VecDeque<ClusterUpdate>) -> Vec<String> {
        out.drain(..)
            .map(|u| match u {
                ClusterUpdate::PodGroupApplied(g) => {
                    format!("apply {} min {}", g.key, g.min_member)
                }
                ClusterUpdate::PodGroupDeleted(k) => format!("delete {k}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn api_resources_name_both_apis() {
        let x = api_resource(PodGroupApi::XK8s);
        assert_eq!(
            (x.group.as_str(), x.version.as_str(), x.plural.as_str()),
            ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
        );
        let u = api_resource(PodGroupApi::Upstream);
        assert_eq!(u.api_version, "scheduling.k8s.io/v1beta1");
    }

    #[test]
    fn valid_invalid_unchanged_and_deleted() {
        let x = PodGroupApi::XK8s;
        let mut out = VecDeque::new();
        let a = Arc::new(obj(x, "1", json!({"minMember": 2})));
        assert!(a.data.get("status").is_none(), "status trimmed");
        DynamicObject::added(a.clone(), &mut out);
        // A status write: same group, new resourceVersion: nothing.
        let b = Arc::new(obj(x, "2", json!({"minMember": 2})));
        DynamicObject::updated(a, b.clone(), &mut out);
        let c = Arc::new(obj(x, "3", json!({"minMember": 3})));
        DynamicObject::updated(b, c.clone(), &mut out);
        // Broken: treated as deleted; still broken: nothing; fixed: applied.
        let d = Arc::new(obj(x, "4", json!({"minMember": 0})));
        DynamicObject::updated(c, d.clone(), &mut out);
        let e = Arc::new(obj(x, "5", json!({"minMember": "x"})));
        DynamicObject::updated(d, e.clone(), &mut out);
        let f = Arc::new(obj(x, "6", json!({"minMember": 4})));
        DynamicObject::updated(e, f.clone(), &mut out);
        DynamicObject::deleted(f, &mut out);
        DynamicObject::added(Arc::new(obj(x, "7", json!({}))), &mut out);
        assert_eq!(
            describe(&mut out),
            [
                "apply ns/g min 2",
                "apply ns/g min 3",
                "delete ns/g",
                "apply ns/g min 4",
                "delete ns/g"
            ]
        );
        let u =
            obj(PodGroupApi::Upstream, "1", json!({"schedulingPolicy": {"gang": {"minCount": 5}}}));
        DynamicObject::added(Arc::new(u), &mut out);
        assert_eq!(describe(&mut out), ["apply ns/g min 5"]);
    }
}
