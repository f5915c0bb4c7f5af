//! The watch of one optional API ([`convoy_api::apis::ApiInfo`]) in the
//! version discovery picks ([`crate::discovery`]).
//!
//! [`kind_stream`] waits for the first discovery, then watches the API in
//! the newest version Convoy reads that the server serves. Objects of a
//! version other than the Rust type's own (`resource.k8s.io/v1beta2`
//! ResourceClaims, `v1alpha3` DeviceTaintRules) are read through the
//! dynamic API and converted ([`typed_watch`]): the same schema under
//! another `apiVersion`, with [`Watched::read_version`] for what differs.
//!
//! When discovery changes, the stream follows: another version served is
//! watched instead (its first list replaces what the old one listed, as a
//! relist does); an API no longer served, or never served, yields
//! [`KindItem::Unavailable`]: what was known is forgotten, and nothing is
//! waited for. A watch that meets `404 Not Found`, and every relist after
//! the first list, asks discovery to look again.

use convoy_api::apis::{ApiInfo, Serving};
use futures::stream::{self, BoxStream, StreamExt};
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};

use crate::discovery::DiscoveryHandle;
use crate::translator::Watched;

/// What the watch of one optional API yields.
#[allow(clippy::large_enum_variant, reason = "the watcher's own events are this size")]
pub(crate) enum KindItem<K> {
    /// A watcher event, objects converted to the Rust type's version.
    Event(watcher::Result<Event<K>>),
    /// The API is not served in a version Convoy reads (at start, or no
    /// longer): forget its objects; nothing to wait for.
    Unavailable,
}

/// Starts the watcher of an API in a version.
pub(crate) type WatchFn<K> = fn(
    &kube::Client,
    &ApiInfo,
    &'static str,
    &watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>;

/// The `ApiResource` of an API in a version.
pub(crate) fn api_resource(api: &ApiInfo, version: &str) -> ApiResource {
    ApiResource {
        group: api.group.to_string(),
        version: version.to_string(),
        api_version: api.api_version(version),
        kind: api.kind.to_string(),
        plural: api.resource.to_string(),
    }
}

struct State<K> {
    client: kube::Client,
    api: ApiInfo,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
    watch: WatchFn<K>,
    /// The version watched and its watcher.
    current: Option<(&'static str, BoxStream<'static, watcher::Result<Event<K>>>)>,
    /// What was last said about the API (logged once per change).
    announced: Option<Serving>,
    /// The first list of some version is complete.
    listed: bool,
}

/// Watches `api` as discovery says; see the module docs.
pub(crate) fn kind_stream<K: Send + 'static>(
    client: kube::Client,
    api: ApiInfo,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
    watch: WatchFn<K>,
) -> BoxStream<'static, KindItem<K>> {
    let state =
        State { client, api, cfg, discovery, watch, current: None, announced: None, listed: false };
    stream::unfold(state, |mut s| async move {
        loop {
            let Some(found) = s.discovery.current() else {
                s.discovery.changed().await;
                continue;
            };
            let serving = found.serving(&s.api);
            match serving {
                Serving::Served(version) => {
                    if s.current.as_ref().map(|c| c.0) != Some(version) {
                        tracing::info!(api = %s.api, version, "watching");
                        let w = (s.watch)(&s.client, &s.api, version, &s.cfg);
                        s.current = Some((version, w));
                        s.announced = Some(Serving::Served(version));
                    }
                    let (_, w) = s.current.as_mut().expect("set above");
                    tokio::select! {
                        event = w.next() => {
                            let Some(event) = event else {
                                // Watchers do not end; start again if one does.
                                s.current = None;
                                continue;
                            };
                            match &event {
                                Err(e) if not_found(e) => s.discovery.refresh(),
                                Ok(Event::Init) if s.listed => s.discovery.refresh(),
                                Ok(Event::InitDone) => s.listed = true,
                                _ => {}
                            }
                            return Some((KindItem::Event(event), s));
                        }
                        _ = s.discovery.changed() => continue,
                    }
                }
                other => {
                    let was_watching = s.current.take().is_some();
                    if was_watching || s.announced.as_ref() != Some(&other) {
                        announce_unavailable(&s.api, &other, was_watching);
                        s.announced = Some(other);
                        return Some((KindItem::Unavailable, s));
                    }
                    s.discovery.changed().await;
                }
            }
        }
    })
    .boxed()
}

fn announce_unavailable(api: &ApiInfo, serving: &Serving, was_watching: bool) {
    let what = if was_watching { "no longer" } else { "not" };
    match serving {
        Serving::Unreadable(versions) => tracing::warn!(
            api = %api, served = %versions.join(","), readable = %api.readable.join(","),
            "served only in versions this scheduler does not read: treated as not served; \
             pods that need it stay pending with a message naming it"
        ),
        _ => tracing::info!(
            api = %api,
            "{what} served by this API server: an empty set; pods that need it stay pending \
             with a message naming it"
        ),
    }
}

/// Whether a watcher error is `404 Not Found` (the API went away).
pub(crate) fn not_found(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => 0,
    };
    code == 404
}

/// A [`WatchFn`] for a Rust type of `k8s-openapi`: its own version is
/// watched as it is; another version through the dynamic API, each object
/// converted ([`convert`]; one that cannot be read is logged and left out).
pub(crate) fn typed_watch<K>(
    client: &kube::Client,
    api: &ApiInfo,
    version: &'static str,
    cfg: &watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    K: Watched + Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    if K::group(&()) == api.group && K::version(&()) == version {
        return crate::initial_list::watch(Api::<K>::all(client.clone()), cfg);
    }
    let ar = api_resource(api, version);
    crate::initial_list::watch(Api::<DynamicObject>::all_with(client.clone(), &ar), cfg)
        .filter_map(move |event| {
            futures::future::ready(match event {
                Err(e) => Some(Err(e)),
                Ok(event) => convert_event::<K>(event, version).map(Ok),
            })
        })
        .boxed()
}

fn convert_event<K: Watched + Resource<DynamicType = ()> + serde::de::DeserializeOwned>(
    event: Event<DynamicObject>,
    version: &str,
) -> Option<Event<K>> {
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(o) => Event::InitApply(convert(o, version)?),
        Event::Apply(o) => Event::Apply(convert(o, version)?),
        Event::Delete(o) => Event::Delete(convert(o, version)?),
    })
}

/// Reads an object of another version of `K`'s API as `K`: its JSON under
/// `K`'s `apiVersion`, after [`Watched::read_version`]. `None` (logged)
/// when it cannot be read.
pub(crate) fn convert<K: Watched + Resource<DynamicType = ()> + serde::de::DeserializeOwned>(
    obj: DynamicObject,
    version: &str,
) -> Option<K> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let read = || -> Result<K, String> {
        let mut value = serde_json::to_value(&obj).map_err(|e| e.to_string())?;
        let map = value.as_object_mut().ok_or("not an object")?;
        map.insert("apiVersion".into(), K::api_version(&()).into());
        map.insert("kind".into(), K::kind(&()).into());
        K::read_version(&mut value, version);
        serde_json::from_value(value).map_err(|e| e.to_string())
    };
    match read() {
        Ok(k) => Some(k),
        Err(error) => {
            tracing::warn!(
                kind = K::KIND, name, version, %error,
                "cannot read an object of this version: left out"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::Discovered;
    use convoy_api::apis::RESOURCE_CLAIMS;
    use k8s_openapi::api::resource::v1::ResourceClaim;
    use serde_json::json;

    #[test]
    fn converts_another_version_of_the_same_schema() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}
        }))
        .unwrap();
        let claim: ResourceClaim = convert(obj, "v1beta2").unwrap();
        let req = &claim.spec.unwrap().devices.unwrap().requests.unwrap()[0];
        assert_eq!(req.exactly.as_ref().unwrap().device_class_name, "gpu.example.com");
        // A field of the wrong shape: left out, not a panic.
        let bad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
            "metadata": {"name": "c"}, "spec": {"devices": {"requests": "x"}}
        }))
        .unwrap();
        assert!(convert::<ResourceClaim>(bad, "v1beta2").is_none());
    }

    fn never(
        _: &kube::Client,
        _: &ApiInfo,
        _: &'static str,
        _: &watcher::Config,
    ) -> BoxStream<'static, watcher::Result<Event<ResourceClaim>>> {
        stream::pending().boxed()
    }

    #[tokio::test]
    async fn an_api_not_served_is_unavailable_once_until_it_changes() {
        // A client that is never called: no API is served.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (handle, tx) = DiscoveryHandle::fixed(Discovered::default());
        let mut s = kind_stream(client, RESOURCE_CLAIMS, watcher::Config::default(), handle, never);
        assert!(matches!(s.next().await, Some(KindItem::Unavailable)));
        // Nothing more until discovery changes.
        let more = tokio::time::timeout(std::time::Duration::from_millis(50), s.next()).await;
        assert!(more.is_err(), "quiet while nothing changes");
        let mut served = Discovered::default();
        served.insert("resource.k8s.io", "v1beta1", "resourceclaims");
        tx.send_replace(Some(std::sync::Arc::new(served)));
        // Unreadable: said once more (a new state), still unavailable.
        assert!(matches!(s.next().await, Some(KindItem::Unavailable)));
    }
}
