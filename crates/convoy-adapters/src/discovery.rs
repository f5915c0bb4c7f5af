//! Discovery: which of the optional APIs ([`convoy_api::apis::OPTIONAL_APIS`])
//! the API server serves, and in which versions.
//!
//! [`discover`] reads the server's aggregated discovery document
//! (`/apis` as `apidiscovery.k8s.io/v2`, one request; Kubernetes 1.30+),
//! falling back to the legacy per-group-version documents, and the
//! server's `/version`. [`discovery_stream`] does so at start, then every
//! interval and whenever a watch asks for it (an API gone, a relist): the
//! watches of the optional kinds ([`crate::versioned`]) follow what it
//! publishes, each in the newest version Convoy reads, and the merged
//! stream reports it to the scheduler as `ClusterUpdate::ApisServed`.
//!
//! A failed discovery is not "not served": it is retried with backoff and
//! the last answer stands (before the first one, nothing is watched and
//! readiness waits).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use convoy_api::apis::{
    ApiInfo, OPTIONAL_APIS, ServedApis, Serving, is_supported, supported_range,
};
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::{Notify, watch};

/// What one discovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// The versions serving each (group, resource), in the server's order
    /// of preference.
    served: BTreeMap<(String, String), Vec<String>>,
    /// The server's `gitVersion` (`v1.36.3`).
    pub server_version: Option<String>,
}

impl Discovered {
    /// Records that `group/version` serves `resource`.
    pub fn insert(&mut self, group: &str, version: &str, resource: &str) {
        let versions = self.served.entry((group.to_string(), resource.to_string())).or_default();
        if !versions.iter().any(|v| v == version) {
            versions.push(version.to_string());
        }
    }

    /// From the aggregated discovery document of `/apis`.
    pub fn from_aggregated(list: &kube::core::discovery::v2::APIGroupDiscoveryList) -> Self {
        let mut d = Discovered::default();
        for group in &list.items {
            let Some(name) = group.metadata.as_ref().and_then(|m| m.name.as_deref()) else {
                continue;
            };
            for version in &group.versions {
                let Some(v) = version.version.as_deref() else { continue };
                for r in &version.resources {
                    if let Some(resource) = r.resource.as_deref() {
                        d.insert(name, v, resource);
                    }
                }
            }
        }
        d
    }

    /// What the server does with `api`.
    pub fn serving(&self, api: &ApiInfo) -> Serving {
        let key = (api.group.to_string(), api.resource.to_string());
        match self.served.get(&key) {
            None => Serving::NotServed,
            Some(versions) => match api.pick(versions) {
                Some(v) => Serving::Served(v),
                None => Serving::Unreadable(versions.clone()),
            },
        }
    }

    /// The versions of `group` serving `resource`, in the server's order.
    pub fn versions_of(&self, group: &str, resource: &str) -> &[String] {
        self.served.get(&(group.to_string(), resource.to_string())).map_or(&[], Vec::as_slice)
    }

    /// Whether any version of `group` serves `resource`.
    pub fn serves(&self, group: &str, resource: &str) -> bool {
        self.served.contains_key(&(group.to_string(), resource.to_string()))
    }

    /// What the server does with every optional API and with `custom`
    /// (the custom kinds plugins declared).
    pub fn served_apis(&self, custom: &[ApiInfo]) -> ServedApis {
        let mut s = ServedApis::all();
        for api in OPTIONAL_APIS.iter().chain(custom) {
            s.set(*api, self.serving(api));
        }
        s.server_version = self.server_version.clone();
        s
    }
}

/// Asks the server what it serves (aggregated discovery, else the legacy
/// documents of the groups Convoy reads) and its version.
pub async fn discover(client: &kube::Client) -> kube::Result<Discovered> {
    let aggregated = client.list_api_groups_aggregated().await?;
    let mut d = Discovered::from_aggregated(&aggregated);
    // A server without aggregated discovery answers with a plain
    // APIGroupList, which reads as no groups (every server has some).
    if d.served.is_empty() {
        d = discover_legacy(client).await?;
    }
    d.server_version = Some(client.apiserver_version().await?.git_version);
    Ok(d)
}

async fn discover_legacy(client: &kube::Client) -> kube::Result<Discovered> {
    let mut d = Discovered::default();
    let groups = client.list_api_groups().await?;
    for group in &groups.groups {
        if !OPTIONAL_APIS.iter().any(|a| a.group == group.name) {
            continue;
        }
        for gv in &group.versions {
            match client.list_api_group_resources(&gv.group_version).await {
                Ok(list) => {
                    for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
                        d.insert(&group.name, &gv.version, &r.name);
                    }
                }
                // Gone between the two requests.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(d)
}

/// What the watches of the optional kinds hold to follow discovery.
#[derive(Debug, Clone)]
pub(crate) struct DiscoveryHandle {
    rx: watch::Receiver<Option<Arc<Discovered>>>,
    refresh: Arc<Notify>,
}

impl DiscoveryHandle {
    /// The last discovery, `None` before the first one succeeded; marks it
    /// seen for [`changed`](Self::changed).
    pub(crate) fn current(&mut self) -> Option<Arc<Discovered>> {
        self.rx.borrow_and_update().clone()
    }

    /// Waits until a discovery publishes a change (forever once the
    /// discovery stream is gone).
    pub(crate) async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Asks for a discovery soon (a watch found its API gone, or relists).
    pub(crate) fn refresh(&self) {
        self.refresh.notify_one();
    }

    /// A handle with a fixed answer (tests).
    #[cfg(test)]
    pub(crate) fn fixed(d: Discovered) -> (Self, watch::Sender<Option<Arc<Discovered>>>) {
        let (tx, rx) = watch::channel(Some(Arc::new(d)));
        (Self { rx, refresh: Arc::new(Notify::new()) }, tx)
    }
}

/// The shortest time between two discoveries asked for by watches.
const MIN_SPACING: Duration = Duration::from_secs(1);
/// Backoff after a failed discovery: from 1 s, doubling, to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

struct Loop {
    client: kube::Client,
    interval: Duration,
    tx: watch::Sender<Option<Arc<Discovered>>>,
    refresh: Arc<Notify>,
    first: bool,
    backoff: Duration,
}

/// Discovers at once, then every `interval` and whenever a
/// [`DiscoveryHandle`] asks; publishes each change to the handles and
/// yields it. Never ends.
pub(crate) fn discovery_stream(
    client: kube::Client,
    interval: Duration,
) -> (BoxStream<'static, Arc<Discovered>>, DiscoveryHandle) {
    let (tx, rx) = watch::channel(None);
    let refresh = Arc::new(Notify::new());
    let handle = DiscoveryHandle { rx, refresh: refresh.clone() };
    let state =
        Loop { client, interval, tx, refresh, first: true, backoff: Duration::from_secs(1) };
    let s = stream::unfold(state, |mut s| async move {
        loop {
            if !s.first {
                tokio::select! {
                    _ = tokio::time::sleep(s.interval) => {}
                    _ = s.refresh.notified() => tokio::time::sleep(MIN_SPACING).await,
                }
            }
            match discover(&s.client).await {
                Ok(d) => {
                    if s.first {
                        announce_version(d.server_version.as_deref());
                    }
                    s.first = false;
                    s.backoff = Duration::from_secs(1);
                    if s.tx.borrow().as_deref() != Some(&d) {
                        let d = Arc::new(d);
                        s.tx.send_replace(Some(d.clone()));
                        return Some((d, s));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        error = %e, retry_s = s.backoff.as_secs(),
                        "API discovery failed; asking again (the last answer stands)"
                    );
                    tokio::time::sleep(s.backoff).await;
                    s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                    // Try again at once after the backoff.
                    if !s.first {
                        s.refresh.notify_one();
                    }
                }
            }
        }
    });
    (s.boxed(), handle)
}

/// One line at start: the server's version, and whether it is in the
/// supported range.
fn announce_version(version: Option<&str>) {
    let range = supported_range();
    match version {
        Some(v) if is_supported(v) => {
            tracing::info!(server = v, supported = %range, "API server version");
        }
        Some(v) => tracing::warn!(
            server = v,
            supported = %range,
            "the API server's Kubernetes version is outside the versions this scheduler \
             supports ({range}); APIs it reads may be missing or differ"
        ),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::apis::{DEVICE_TAINT_RULES, POD_GROUPS_UPSTREAM, RESOURCE_CLAIMS};

    fn aggregated(json: serde_json::Value) -> kube::core::discovery::v2::APIGroupDiscoveryList {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn reads_aggregated_discovery() {
        let list = aggregated(serde_json::json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "items": [
                {"metadata": {"name": "resource.k8s.io"}, "versions": [
                    {"version": "v1", "resources": [
                        {"resource": "resourceclaims", "verbs": ["list"]},
                        {"resource": "deviceclasses", "verbs": ["list"]}]},
                    {"version": "v1beta2", "resources": [
                        {"resource": "devicetaintrules", "verbs": ["list"]}]},
                    {"version": "v1alpha3", "resources": [
                        {"resource": "devicetaintrules", "verbs": ["list"]}]}]},
                {"metadata": {"name": "scheduling.k8s.io"}, "versions": [
                    {"version": "v1alpha2", "resources": [
                        {"resource": "podgroups", "verbs": ["list"]}]}]}
            ]
        }));
        let d = Discovered::from_aggregated(&list);
        assert_eq!(d.serving(&RESOURCE_CLAIMS), Serving::Served("v1"));
        assert_eq!(d.serving(&DEVICE_TAINT_RULES), Serving::Served("v1beta2"));
        assert_eq!(
            d.serving(&POD_GROUPS_UPSTREAM),
            Serving::Unreadable(vec!["v1alpha2".to_string()])
        );
        let apis = d.served_apis(&[]);
        assert!(!apis.is_served(&convoy_api::apis::RESOURCE_SLICES));
        assert!(apis.is_served(&RESOURCE_CLAIMS));
        assert!(d.serves("scheduling.k8s.io", "podgroups"));
    }
}
