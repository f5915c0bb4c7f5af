//! The watches of the custom resource kinds plugins declared
//! (`convoy_api::Registry::watch_kind`): each follows discovery as every
//! optional API does ([`crate::versioned`]), through the dynamic API, and
//! its objects become [`ClusterUpdate::CustomApplied`] and
//! [`ClusterUpdate::CustomDeleted`]. A kind the server does not serve (its
//! CRD not installed) is an empty set, never a wait.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use convoy_api::apis::ApiInfo;
use convoy_api::{ClusterUpdate, CustomObject};
use futures::stream::{BoxStream, StreamExt};
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::watcher::{self, Event};

use crate::discovery::DiscoveryHandle;
use crate::translator::Watched;
use crate::versioned::{KindItem, api_resource, kind_stream};

/// A watched custom resource and the kind it was registered as.
#[derive(Debug, Clone)]
pub(crate) struct CustomResource {
    api: ApiInfo,
    obj: DynamicObject,
}

impl CustomResource {
    fn to_object(&self) -> Arc<CustomObject> {
        let value = serde_json::to_value(&self.obj).unwrap_or(serde_json::Value::Null);
        Arc::new(CustomObject::new(self.api, value))
    }
}

impl Resource for CustomResource {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.obj.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.obj.metadata
    }
}

impl Watched for CustomResource {
    const KIND: &'static str = "custom resource";

    fn trim(&mut self) {
        self.obj.metadata.managed_fields = None;
    }
    fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::CustomApplied(obj.to_object()));
    }
    fn updated(_old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::CustomApplied(new.to_object()));
    }
    fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::CustomDeleted(obj.to_object()));
    }
}

/// Watches one version of a custom kind (objects carry `apiVersion` and
/// `kind`: LIST items may come without them).
fn custom_watch(
    client: &kube::Client,
    api: &ApiInfo,
    version: &'static str,
    cfg: &watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<CustomResource>>> {
    let ar = api_resource(api, version);
    let types = TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() };
    let api = *api;
    let wrap = move |mut obj: DynamicObject| {
        obj.types = Some(types.clone());
        CustomResource { api, obj }
    };
    crate::initial_list::watch(Api::<DynamicObject>::all_with(client.clone(), &ar), cfg)
        .map(move |event| {
            event.map(|e| match e {
                Event::Init => Event::Init,
                Event::InitApply(o) => Event::InitApply(wrap(o)),
                Event::InitDone => Event::InitDone,
                Event::Apply(o) => Event::Apply(wrap(o)),
                Event::Delete(o) => Event::Delete(wrap(o)),
            })
        })
        .boxed()
}

/// One custom kind's objects as discovery says.
pub(crate) fn custom_stream(
    client: kube::Client,
    api: ApiInfo,
    cfg: watcher::Config,
    discovery: DiscoveryHandle,
) -> BoxStream<'static, KindItem<CustomResource>> {
    kind_stream(client, api, cfg, discovery, custom_watch)
}
