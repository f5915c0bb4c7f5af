//! Watching PodGroups of both APIs (`scheduling.x-k8s.io/v1alpha1`, a CRD
//! that may not be installed, and `scheduling.k8s.io/v1beta1`, which the
//! server may not serve) through kube's dynamic API.
//!
//! Each API has a stream of its own ([`group_stream`]) that first asks
//! whether the API is served (a one-item LIST). When it is not (404), the
//! stream says so once at info level, reports [`GroupItem::NotServed`] so
//! that start-up does not wait for it, and asks again every
//! [`WatchOptions::pod_group_discovery_interval`]. Once served, the
//! watcher runs until the API goes away (404 again: every known group is
//! forgotten and discovery resumes).
//!
//! Objects become [`ClusterUpdate::PodGroupApplied`] through
//! [`PodGroup::from_json`]. An invalid PodGroup is logged with the error
//! naming the field (once per resourceVersion), reported as a Warning
//! Event on it when a [`StatusWriter`] is given, and treated as absent:
//! its pods wait, as they would for a missing group. Changes that do not
//! change the normalised group (status writes, labels) produce nothing, so
//! Convoy's own status writes do not wake the group's pods.
//!
//! [`WatchOptions::pod_group_discovery_interval`]: crate::WatchOptions::pod_group_discovery_interval

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use convoy_api::{ClusterUpdate, GroupKey, PodGroup, PodGroupApi};
use futures::stream::{self, BoxStream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, TypeMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::status::StatusWriter;
use crate::watch::Watched;

/// The `ApiResource` of an API's PodGroup (plural `podgroups`).
pub fn api_resource(api: PodGroupApi) -> ApiResource {
    let (group, version) = api.api_version().split_once('/').expect("group/version");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, "PodGroup"),
        "podgroups",
    )
}

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

/// What one API's PodGroup stream reports.
#[allow(clippy::large_enum_variant, reason = "the watcher's own events are this size")]
pub(crate) enum GroupItem {
    /// A watcher event (objects carry `apiVersion` and `kind`).
    Event(watcher::Result<Event<DynamicObject>>),
    /// The API is not served (or could not be asked): nothing to wait for.
    NotServed,
    /// The API stopped being served: forget its groups.
    Gone,
}

enum State {
    Probe { delay: Option<Duration>, announced: Option<u16> },
    Watching(BoxStream<'static, watcher::Result<Event<DynamicObject>>>),
}

fn not_found(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => 0,
    };
    code == 404
}

/// One API's PodGroups: discovery, then the watcher; see the module docs.
pub(crate) fn group_stream(
    client: kube::Client,
    api: PodGroupApi,
    cfg: watcher::Config,
    interval: Duration,
    reporter: Option<StatusWriter>,
) -> BoxStream<'static, (PodGroupApi, GroupItem)> {
    let ar = api_resource(api);
    let types = TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() };
    let objects: Api<DynamicObject> = Api::all_with(client, &ar);
    let state = State::Probe { delay: None, announced: None };
    let mut reported: HashSet<(String, String)> = HashSet::new();
    stream::unfold(state, move |state| {
        let objects = objects.clone();
        let cfg = cfg.clone();
        async move {
            match state {
                State::Probe { delay, announced } => {
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    match objects.list(&ListParams::default().limit(1)).await {
                        Ok(_) => {
                            tracing::info!(api = api.api_version(), "watching PodGroups");
                            let w = watcher::watcher(objects, cfg).backoff(crate::backoff::watch_backoff()).boxed();
                            Some((None, State::Watching(w)))
                        }
                        Err(e) => {
                            let code = match &e {
                                kube::Error::Api(s) => s.code,
                                _ => 0,
                            };
                            if announced != Some(code) {
                                if code == 404 {
                                    tracing::info!(
                                        api = api.api_version(),
                                        retry_s = interval.as_secs(),
                                        "PodGroup API not served (CRD not installed?); \
                                         gang scheduling of its groups waits, asking again periodically"
                                    );
                                } else {
                                    tracing::warn!(
                                        api = api.api_version(), error = %e,
                                        retry_s = interval.as_secs(),
                                        "cannot list PodGroups; asking again periodically"
                                    );
                                }
                            }
                            let next = State::Probe { delay: Some(interval), announced: Some(code) };
                            Some((Some(GroupItem::NotServed), next))
                        }
                    }
                }
                State::Watching(mut w) => match w.next().await? {
                    Err(e) if not_found(&e) => {
                        tracing::info!(
                            api = api.api_version(),
                            "PodGroup API no longer served; forgetting its groups"
                        );
                        let next = State::Probe { delay: Some(interval), announced: Some(404) };
                        Some((Some(GroupItem::Gone), next))
                    }
                    event => Some((Some(GroupItem::Event(event)), State::Watching(w))),
                },
            }
        }
    })
    .filter_map(|item| async move { item })
    .map(move |mut item| {
        if let GroupItem::Event(Ok(event)) = &mut item {
            let (obj, deleted) = match event {
                Event::Apply(o) | Event::InitApply(o) => (Some(o), false),
                Event::Delete(o) => (Some(o), true),
                Event::Init | Event::InitDone => (None, false),
            };
            if let Some(obj) = obj {
                // LIST items may come without apiVersion and kind.
                obj.types = Some(types.clone());
                if !deleted {
                    report_invalid(obj, &mut reported, reporter.as_ref());
                }
            }
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

    #[test]
    fn not_found_is_recognised() {
        let status = |code| Box::new(kube::core::Status { code, ..Default::default() });
        assert!(not_found(&watcher::Error::InitialListFailed(kube::Error::Api(status(404)))));
        assert!(!not_found(&watcher::Error::InitialListFailed(kube::Error::Api(status(403)))));
        assert!(not_found(&watcher::Error::WatchError(status(404))));
    }
}
