//! Objects of any kind on the API target, through kube's dynamic API:
//! the kind's resource and scope come from discovery (cached per kind).
//! As upstream's `createAny`, a create is retried for up to 20 s while the
//! kind is not served yet (a CRD just created), and the namespace must
//! match the kind's scope. CRDs of `--prepare` are waited for until
//! `Established`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{ApiResource, Scope};
use parking_lot::Mutex;
use serde_json::Value;

use crate::any::{is_crd, type_of};
use crate::runner::churn::Churner;

/// How long a create is retried while its kind is not served (upstream).
pub const RETRY_FOR: Duration = Duration::from_secs(20);
/// How long `--prepare` waits for a CRD to be `Established`.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a created object goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement<'a> {
    /// As upstream's `createAny`: `Some` for namespaced kinds, `None` for
    /// cluster-scoped ones; anything else is an error.
    Strict(Option<&'a str>),
    /// A manifest's own `metadata.namespace`, `default` when a namespaced
    /// object names none (`--prepare`).
    FromObject,
}

/// A kind's resource and scope.
#[derive(Debug, Clone)]
pub(crate) struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

/// The dynamic client with its discovery cache.
pub(crate) struct Dynamic {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Kind>>,
}

fn gvk_of(v: &Value) -> Result<GroupVersionKind, String> {
    let (api_version, kind) = type_of(v)?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Ok(GroupVersionKind::gvk(group, version, kind))
}

impl Dynamic {
    /// A dynamic client over `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self { client, kinds: Mutex::default() }
    }

    /// The resource and scope of `v`'s kind, retried for [`RETRY_FOR`]
    /// while discovery does not know it.
    pub(crate) async fn kind_of(&self, v: &Value) -> Result<Kind, String> {
        let gvk = gvk_of(v)?;
        let key = (gvk.api_version(), gvk.kind.clone());
        if let Some(k) = self.kinds.lock().get(&key) {
            return Ok(k.clone());
        }
        let start = Instant::now();
        loop {
            match kube::discovery::pinned_kind(&self.client, &gvk).await {
                Ok((resource, caps)) => {
                    let k = Kind { resource, namespaced: caps.scope == Scope::Namespaced };
                    self.kinds.lock().insert(key, k.clone());
                    return Ok(k);
                }
                Err(e) if start.elapsed() >= RETRY_FOR => {
                    return Err(format!(
                        "kind {} ({}) is not served by the API server after {RETRY_FOR:?}: {e}",
                        key.1, key.0
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            None => Api::all_with(self.client.clone(), &kind.resource),
        }
    }

    /// The namespace `v` goes to, checked against its kind's scope.
    pub(crate) fn namespace_of<'a>(
        kind: &Kind,
        v: &'a Value,
        placement: Placement<'a>,
    ) -> Result<Option<&'a str>, String> {
        let name = &kind.resource.kind;
        match (placement, kind.namespaced) {
            (Placement::Strict(Some(ns)), false) => Err(format!(
                "namespace {ns} was set for an object of kind {name} which is cluster-scoped"
            )),
            (Placement::Strict(None), true) => Err(format!(
                "namespace was not set for an object of kind {name} which is namespaced"
            )),
            (Placement::Strict(ns), _) => Ok(ns),
            (Placement::FromObject, false) => Ok(None),
            (Placement::FromObject, true) => Ok(Some(
                v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default"),
            )),
        }
    }

    /// Creates `v`, retrying for [`RETRY_FOR`] while its kind is not
    /// served; returns the namespace and name it got. With
    /// [`Placement::FromObject`] (`--prepare`), an object that already
    /// exists is kept.
    pub(crate) async fn create(
        &self,
        v: &Value,
        placement: Placement<'_>,
    ) -> Result<(Option<String>, String), String> {
        let kind = self.kind_of(v).await?;
        let namespace = Self::namespace_of(&kind, v, placement)?;
        let mut obj: DynamicObject =
            serde_json::from_value(v.clone()).map_err(|e| format!("decoding the object: {e}"))?;
        obj.metadata.namespace = namespace.map(str::to_string);
        let api = self.api(&kind, namespace);
        let start = Instant::now();
        loop {
            match api.create(&PostParams::default(), &obj).await {
                Ok(o) => {
                    return Ok((
                        namespace.map(str::to_string),
                        o.metadata.name.unwrap_or_default(),
                    ));
                }
                // `--prepare` applies: what a previous workload on the same
                // API server created is kept.
                Err(kube::Error::Api(s)) if s.code == 409 && placement == Placement::FromObject => {
                    return Ok((
                        namespace.map(str::to_string),
                        obj.metadata.name.unwrap_or_default(),
                    ));
                }
                Err(kube::Error::Api(s)) if s.code == 404 && start.elapsed() < RETRY_FOR => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    let what =
                        obj.metadata.name.as_deref().or(obj.metadata.generate_name.as_deref());
                    return Err(format!(
                        "creating {} {}: {e}",
                        kind.resource.kind,
                        what.unwrap_or("<unnamed>")
                    ));
                }
            }
        }
    }

    /// `updateAny`, as upstream's `update.go`: replaces the object `v`
    /// names (an update; no resourceVersion, so unconditional), or with
    /// `subresources` each of those (`resize`, ...) with the same body, then
    /// its `status` with the same body.
    pub(crate) async fn update(
        &self,
        v: &Value,
        namespace: Option<&str>,
        subresources: &[String],
    ) -> Result<(), String> {
        let kind = self.kind_of(v).await?;
        let namespace = Self::namespace_of(&kind, v, Placement::Strict(namespace))?;
        let mut obj: DynamicObject =
            serde_json::from_value(v.clone()).map_err(|e| format!("decoding the object: {e}"))?;
        obj.metadata.namespace = namespace.map(str::to_string);
        let kind_name = &kind.resource.kind;
        let name =
            obj.metadata.name.clone().ok_or_else(|| {
                format!("updating a {kind_name}: the object has no metadata.name")
            })?;
        let api = self.api(&kind, namespace);
        let params = PostParams::default();
        if subresources.is_empty() {
            api.replace(&name, &params, &obj)
                .await
                .map_err(|e| format!("updating {kind_name} {name}: {e}"))?;
        }
        for sub in subresources {
            api.replace_subresource(sub, &name, &params, &obj)
                .await
                .map_err(|e| format!("updating {kind_name} {name}/{sub}: {e}"))?;
        }
        api.replace_status(&name, &params, &obj)
            .await
            .map_err(|e| format!("updating {kind_name} {name}/status: {e}"))?;
        Ok(())
    }

    /// Applies a `--prepare` manifest: a CRD is created (or found) and
    /// waited for until `Established`; anything else is created in its own
    /// namespace.
    pub(crate) async fn prepare(&self, v: &Value) -> Result<(), String> {
        if !is_crd(v) {
            return self.create(v, Placement::FromObject).await.map(drop);
        }
        let kind = self.kind_of(v).await?;
        let api = self.api(&kind, None);
        let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let obj: DynamicObject =
            serde_json::from_value(v.clone()).map_err(|e| format!("decoding CRD {name}: {e}"))?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("creating CRD {name}: {e}")),
        }
        let start = Instant::now();
        loop {
            let crd = api.get(name).await.map_err(|e| format!("reading CRD {name}: {e}"))?;
            let established =
                crd.data.pointer("/status/conditions").and_then(Value::as_array).is_some_and(
                    |cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"),
                );
            if established {
                return Ok(());
            }
            if start.elapsed() > ESTABLISH_TIMEOUT {
                return Err(format!("CRD {name} not Established after {ESTABLISH_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A churner creating `templates` in `namespace` (for namespaced
    /// kinds), with their kinds resolved up front.
    pub(crate) async fn churner(
        self: std::sync::Arc<Self>,
        templates: Vec<Value>,
        namespace: String,
        own_deletes: crate::measure::evictions::OwnDeletes,
    ) -> Result<DynamicChurner, String> {
        let mut apis = Vec::new();
        for t in &templates {
            let kind = self.kind_of(t).await?;
            let ns = kind.namespaced.then_some(namespace.as_str());
            let mut obj: DynamicObject =
                serde_json::from_value(t.clone()).map_err(|e| format!("decoding template: {e}"))?;
            obj.metadata.namespace = ns.map(str::to_string);
            apis.push((self.api(&kind, ns), obj));
        }
        Ok(DynamicChurner { apis, own_deletes })
    }
}

/// `churn` on the API target: any kind.
pub(crate) struct DynamicChurner {
    apis: Vec<(Api<DynamicObject>, DynamicObject)>,
    /// Pods it deletes are not evictions.
    own_deletes: crate::measure::evictions::OwnDeletes,
}

impl Churner for DynamicChurner {
    fn create(&self, template: usize) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            let (api, obj) = &self.apis[template];
            match api.create(&PostParams::default(), obj).await {
                Ok(o) => o.metadata.name,
                Err(e) => {
                    tracing::warn!(
                        "churn: creating {}: {e}",
                        obj.types.as_ref().map_or("", |t| &t.kind)
                    );
                    None
                }
            }
        })
    }

    fn delete(&self, template: usize, name: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (api, obj) = &self.apis[template];
            if obj.types.as_ref().is_some_and(|t| t.kind == "Pod") {
                let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
                self.own_deletes.mark(ns, &name);
            }
            // No kubelet confirms termination: delete at once.
            let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            if let Err(e) = api.delete(&name, &dp).await {
                tracing::warn!("churn: deleting {name}: {e}");
            }
        })
    }
}
