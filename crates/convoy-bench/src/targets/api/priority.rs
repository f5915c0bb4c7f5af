//! Pod and PodGroup priorities on an API server that runs the `Priority`
//! admission plugin.
//!
//! Upstream's scheduler_perf starts its API server with
//! `--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority`
//! (`util.go`, v1.37.2), so its templates set `spec.priority` directly
//! (`priority: 9999999`) and no PriorityClass exists. An API server that runs
//! the plugin refuses such objects unless a class gives that value ("the
//! integer value of priority (10) must not be provided in pod spec; priority
//! admission controller computed 0 from the given PriorityClass name"; for a
//! PodGroup: "priority set in the pod group (1000) must match the priority
//! computed (0)"). testenv runs it on purpose (so that `priorityClassName`
//! resolves as on a real cluster).
//!
//! On such a server the API target gives each priority value a
//! PriorityClass, `convoy-bench-priority-<value>` (`-never` appended for
//! `preemptionPolicy: Never`), and the object names that class instead of
//! carrying `spec.priority`: the admission plugin then writes the same
//! `spec.priority` back, and `preemptionPolicy: PreemptLowerPriority`, which
//! is what a scheduler assumes when it is unset. Objects that already name a
//! class are left alone. A new class is waited for until a dry-run pod
//! naming it is admitted (the plugin reads classes from an informer). Whether the server runs the plugin is probed once
//! per workload, when the first object with a priority is about to be
//! created, by a dry-run create of a pod with `spec.priority: 1`; a server
//! that accepts it gets every object as written, as upstream's does.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ObjectMeta, PostParams};
use parking_lot::Mutex;
use serde_json::Value;

/// Prefix of the classes convoy-bench creates.
pub const CLASS_PREFIX: &str = "convoy-bench-priority-";

/// The class an object's priority is given as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// `spec.priority`.
    pub value: i32,
    /// `spec.preemptionPolicy: Never`.
    pub never: bool,
}

impl ClassKey {
    /// `convoy-bench-priority-<value>` (`m<n>` for a negative value), with
    /// `-never` for `preemptionPolicy: Never`.
    pub fn name(&self) -> String {
        let v = if self.value < 0 {
            format!("m{}", self.value.unsigned_abs())
        } else {
            self.value.to_string()
        };
        format!("{CLASS_PREFIX}{v}{}", if self.never { "-never" } else { "" })
    }

    /// The PriorityClass (not the global default).
    pub fn class(&self) -> PriorityClass {
        PriorityClass {
            metadata: ObjectMeta { name: Some(self.name()), ..Default::default() },
            value: Some(self.value),
            global_default: Some(false),
            preemption_policy: Some(
                if self.never { "Never" } else { "PreemptLowerPriority" }.to_string(),
            ),
            description: Some(
                "convoy-bench: spec.priority of upstream scheduler_perf templates on an API \
                 server that runs the Priority admission plugin"
                    .into(),
            ),
        }
    }
}

/// Replaces a Pod's or PodGroup's `spec.priority` by `spec.priorityClassName`
/// (see the module doc); returns the class it now names. Other kinds,
/// objects without a priority and objects that name a class are unchanged
/// (`None`).
pub fn rewrite_value(v: &mut Value) -> Result<Option<ClassKey>, String> {
    let kind = v.get("kind").and_then(Value::as_str);
    if !matches!(kind, Some("Pod" | "PodGroup")) {
        return Ok(None);
    }
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(None);
    };
    let named =
        spec.get("priorityClassName").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    let Some(p) = spec.get("priority").filter(|p| !p.is_null()) else {
        return Ok(None);
    };
    if named {
        return Ok(None);
    }
    let value = p
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| format!("spec.priority: expected a 32-bit integer, got {p}"))?;
    let never = spec.get("preemptionPolicy").and_then(Value::as_str) == Some("Never");
    let key = ClassKey { value, never };
    spec.remove("priority");
    spec.insert("priorityClassName".into(), Value::String(key.name()));
    Ok(Some(key))
}

/// [`rewrite_value`] for a typed pod.
pub fn rewrite_pod(pod: &mut Pod) -> Option<ClassKey> {
    let spec = pod.spec.as_mut()?;
    let value = spec.priority?;
    if spec.priority_class_name.as_deref().is_some_and(|s| !s.is_empty()) {
        return None;
    }
    let key = ClassKey { value, never: spec.preemption_policy.as_deref() == Some("Never") };
    spec.priority = None;
    spec.priority_class_name = Some(key.name());
    Some(key)
}

/// Whether objects need classes on this API server, and the classes made.
#[derive(Debug, Default)]
pub(crate) struct PriorityBridge {
    /// `None` until probed; then whether the server runs the plugin.
    admission: tokio::sync::OnceCell<bool>,
    made: Mutex<HashSet<ClassKey>>,
}

impl PriorityBridge {
    /// Whether the server runs the Priority admission plugin (probed once,
    /// in `namespace`, which exists).
    async fn admission(&self, client: &kube::Client, namespace: &str) -> bool {
        *self.admission.get_or_init(|| probe(client.clone(), namespace.to_string())).await
    }

    /// Makes `keys`' classes (once each; one that exists is fine) and
    /// waits until the admission plugin sees them (it reads classes from an
    /// informer: a pod naming a class created a moment ago is refused with
    /// "no PriorityClass with name ... was found").
    async fn ensure(
        &self,
        client: &kube::Client,
        namespace: &str,
        keys: &[ClassKey],
    ) -> Result<(), String> {
        let api: Api<PriorityClass> = Api::all(client.clone());
        for key in keys {
            if self.made.lock().contains(key) {
                continue;
            }
            match api.create(&PostParams::default(), &key.class()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(format!("creating PriorityClass {}: {e}", key.name())),
            }
            wait_visible(client, namespace, key).await?;
            tracing::info!(
                class = %key.name(),
                "the API server runs the Priority admission plugin (upstream's scheduler_perf \
                 disables it): spec.priority {} is given through this PriorityClass",
                key.value
            );
            self.made.lock().insert(*key);
        }
        Ok(())
    }

    /// Prepares typed pods of `namespace` (which exists) for creation (see
    /// the module doc).
    pub(crate) async fn pods(
        &self,
        client: &kube::Client,
        namespace: &str,
        pods: &mut [Pod],
    ) -> Result<(), String> {
        if !pods.iter().any(|p| p.spec.as_ref().is_some_and(|s| s.priority.is_some())) {
            return Ok(());
        }
        if !self.admission(client, namespace).await {
            return Ok(());
        }
        let keys: HashSet<ClassKey> = pods.iter_mut().filter_map(rewrite_pod).collect();
        self.ensure(client, namespace, &keys.into_iter().collect::<Vec<_>>()).await
    }

    /// Prepares objects of any kind for creation in `namespace` (which
    /// exists; Pods and PodGroups are changed, see the module doc).
    pub(crate) async fn values(
        &self,
        client: &kube::Client,
        namespace: Option<&str>,
        vs: &mut [Value],
    ) -> Result<(), String> {
        let has = |v: &Value| {
            matches!(v.get("kind").and_then(Value::as_str), Some("Pod" | "PodGroup"))
                && v.pointer("/spec/priority").is_some_and(|p| !p.is_null())
        };
        if !vs.iter().any(has) {
            return Ok(());
        }
        let namespace = namespace.unwrap_or("default");
        if !self.admission(client, namespace).await {
            return Ok(());
        }
        let mut keys = HashSet::new();
        for v in vs.iter_mut() {
            keys.extend(rewrite_value(v)?);
        }
        self.ensure(client, namespace, &keys.into_iter().collect::<Vec<_>>()).await
    }
}

/// How long a new class may take to reach the admission plugin.
const VISIBLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until a dry-run pod naming `key`'s class is admitted.
async fn wait_visible(
    client: &kube::Client,
    namespace: &str,
    key: &ClassKey,
) -> Result<(), String> {
    let mut pod = probe_pod();
    let spec = pod.spec.as_mut().expect("probe_pod has a spec");
    spec.priority = None;
    spec.priority_class_name = Some(key.name());
    spec.preemption_policy = key.never.then(|| "Never".to_string());
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pp = PostParams { dry_run: true, ..Default::default() };
    let start = std::time::Instant::now();
    loop {
        match api.create(&pp, &pod).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s))
                if s.code == 403
                    && s.message.contains("no PriorityClass")
                    && start.elapsed() < VISIBLE_TIMEOUT =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => {
                return Err(format!(
                    "PriorityClass {} not usable by the admission plugin: {e}",
                    key.name()
                ));
            }
        }
    }
}

/// The pod of the dry runs: `spec.priority: 1`, one pause container.
fn probe_pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            generate_name: Some("convoy-bench-priority-probe-".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "probe".into(),
                image: Some("registry.k8s.io/pause:3.10.1".into()),
                ..Default::default()
            }],
            priority: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A dry-run create of a pod with `spec.priority: 1` in `namespace`:
/// refused (403, naming the priority) when the Priority admission plugin
/// runs.
async fn probe(client: kube::Client, namespace: String) -> bool {
    let pod = probe_pod();
    let pp = PostParams { dry_run: true, ..Default::default() };
    match Api::<Pod>::namespaced(client, &namespace).create(&pp, &pod).await {
        Ok(_) => false,
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("priority") => true,
        Err(e) => {
            tracing::warn!(
                "probing for the Priority admission plugin (a dry-run pod with spec.priority): \
                 {e}; objects are created with spec.priority as written"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_name_a_class_instead_of_a_priority() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "spec": {"priority": 9999999, "containers": []}});
        let key = rewrite_value(&mut pod).unwrap().unwrap();
        assert_eq!(key, ClassKey { value: 9999999, never: false });
        assert_eq!(
            pod["spec"],
            json!({"priorityClassName": "convoy-bench-priority-9999999",
            "containers": []})
        );
        let class = key.class();
        assert_eq!(class.value, Some(9999999));
        assert_eq!(class.global_default, Some(false));
        assert_eq!(class.preemption_policy.as_deref(), Some("PreemptLowerPriority"));

        let mut pg = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "spec": {"priority": -5, "preemptionPolicy": "Never"}});
        let key = rewrite_value(&mut pg).unwrap().unwrap();
        assert_eq!(key.name(), "convoy-bench-priority-m5-never");
        assert_eq!(key.class().preemption_policy.as_deref(), Some("Never"));
        assert!(pg["spec"].get("priority").is_none());

        // Unchanged: other kinds, no priority, a class already named.
        for v in [
            json!({"apiVersion": "v1", "kind": "Node", "spec": {"priority": 1}}),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                "spec": {"priority": 1, "priorityClassName": "high"}}),
        ] {
            let mut w = v.clone();
            assert_eq!(rewrite_value(&mut w).unwrap(), None);
            assert_eq!(w, v);
        }
        let mut big = json!({"kind": "Pod", "spec": {"priority": 1u64 << 40}});
        assert!(rewrite_value(&mut big).unwrap_err().contains("32-bit"));

        let mut typed: Pod = serde_json::from_value(json!({"spec": {"priority": 0,
            "containers": []}}))
        .unwrap();
        assert_eq!(
            rewrite_pod(&mut typed).map(|k| k.name()).as_deref(),
            Some("convoy-bench-priority-0")
        );
        let spec = typed.spec.unwrap();
        assert_eq!(spec.priority, None);
        assert_eq!(spec.priority_class_name.as_deref(), Some("convoy-bench-priority-0"));
    }
}
