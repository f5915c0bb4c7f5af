//! Nodes and pods from templates, as upstream creates them: the template is
//! rendered per object (`.Index`, `.Count`, template params), decoded, and
//! given a name (`generateName` plus a counter, as the API server would add
//! a random suffix) and what the op's strategy adds.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::any::{name_object, typed};
use crate::plan::{AnyStep, NodeStrategy, NodesStep, PodsStep, TemplateSource, env_for};
use crate::template::render;

/// Upstream's `makeBaseNode`: 4 CPUs, 32Gi, 110 pods, Ready.
pub const BUILTIN_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  generateName: node-
status:
  capacity: {pods: "110", cpu: "4", memory: 32Gi}
  allocatable: {pods: "110", cpu: "4", memory: 32Gi}
  phase: Running
  conditions:
  - {type: Ready, status: "True"}
"#;

/// Upstream's `templates/pod-default.yaml` (and built-in pod): one pause
/// container requesting (and limited to) 100m CPU and 500Mi.
pub const BUILTIN_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  generateName: pod-
spec:
  containers:
  - image: registry.k8s.io/pause:3.10.1
    name: pause
    ports:
    - containerPort: 80
    resources:
      limits: {cpu: 100m, memory: 500Mi}
      requests: {cpu: 100m, memory: 500Mi}
"#;

/// Renders and decodes templates, re-decoding only when the rendered text
/// changes (most templates do not use `.Index`).
#[derive(Debug, Default)]
struct Decoder {
    last: Option<(String, Value)>,
}

impl Decoder {
    fn decode(&mut self, text: &str, env: &crate::template::Env) -> Result<Value, String> {
        let rendered = if text.contains("{{") {
            render(text, env).map_err(|e| e.to_string())?
        } else {
            text.to_string()
        };
        if let Some((t, v)) = &self.last
            && *t == rendered
        {
            return Ok(v.clone());
        }
        let v: Value = serde_saphyr::from_str(&rendered).map_err(|e| e.to_string())?;
        if !v.is_object() {
            return Err(format!("a template must produce one object, got {v}"));
        }
        self.last = Some((rendered, v.clone()));
        Ok(v)
    }
}

fn text_of(t: &TemplateSource, builtin: &'static str) -> (Arc<str>, String) {
    match t {
        TemplateSource::Builtin => (Arc::from(builtin), "<built-in>".into()),
        TemplateSource::File { path, text } => (text.clone(), path.display().to_string()),
    }
}

/// A random version-4 UUID (for `uniqueNodeLabelStrategy`).
fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        (b[8] & 0x3) | 0x8,
        &h[17..20],
        &h[20..32]
    )
}

/// Builds the nodes of a `createNodes` step; `serial` numbers generated
/// names across the workload.
pub fn build_nodes(step: &NodesStep, serial: &mut u64) -> Result<Vec<Node>, String> {
    let (text, source) = text_of(&step.template, BUILTIN_NODE);
    let prefix = format!("node-{}-", step.op_index);
    let mut decoder = Decoder::default();
    let mut nodes = Vec::with_capacity(step.count);
    for i in 0..step.count {
        let err = |e: String| format!("node template {source} (index {i}): {e}");
        let mut v = decoder.decode(&text, &env_for(&step.params, i, step.count)).map_err(err)?;
        if matches!(step.template, TemplateSource::Builtin) {
            v["metadata"]["generateName"] = json!(prefix);
        }
        *serial += 1;
        let name = name_object(&mut v, &prefix, *serial);
        let mut node: Node = typed(v).map_err(err)?;
        // Upstream's `IntegrationTestNodePreparer` creates every node "with
        // the usual kubernetes.io/hostname label" (node_util.go, v1.37.2),
        // before the op's strategy patches it.
        node.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("kubernetes.io/hostname".to_string(), name);
        let status = node.status.get_or_insert_with(Default::default);
        // The API server does not default allocatable; the kubelet would
        // report it equal to capacity, and nodes here have no kubelet.
        if status.allocatable.is_none() {
            status.allocatable.clone_from(&status.capacity);
        }
        match &step.strategy {
            None => {}
            Some(NodeStrategy::Allocatable(res)) => {
                use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
                let alloc = status.allocatable.get_or_insert_with(BTreeMap::new);
                for (k, q) in res {
                    alloc.insert(k.clone(), Quantity(q.clone()));
                }
                let cap = status.capacity.get_or_insert_with(BTreeMap::new);
                for (k, q) in res {
                    cap.entry(k.clone()).or_insert_with(|| Quantity(q.clone()));
                }
            }
            Some(NodeStrategy::Label { key, values }) => {
                let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.insert(key.clone(), values[i % values.len()].clone());
            }
            Some(NodeStrategy::UniqueLabel { key }) => {
                let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.insert(key.clone(), uuid());
            }
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// Renders the pods of a `createPods` step one at a time (a steady state
/// keeps asking for more).
#[derive(Debug)]
pub struct PodFactory {
    text: Arc<str>,
    source: String,
    params: crate::template::Env,
    namespace: String,
    count: usize,
    scheduler_name: String,
    decoder: Decoder,
    checked: bool,
    claims: bool,
    signature_batch: Option<usize>,
}

impl PodFactory {
    /// The factory of `step`'s pods. Pods that name no scheduler go to
    /// `scheduler_name` (the scheduler under test, as upstream's pods go to
    /// `default-scheduler`, the one it runs).
    pub fn new(step: &PodsStep, scheduler_name: &str) -> Self {
        let (text, source) = text_of(&step.template, BUILTIN_POD);
        Self {
            text,
            source,
            params: step.params.clone(),
            namespace: step.namespace.clone(),
            count: step.count,
            scheduler_name: scheduler_name.to_string(),
            decoder: Decoder::default(),
            checked: false,
            claims: step.volumes.is_some(),
            signature_batch: step.signature_batch,
        }
    }

    /// Pod `index` (`.Index` of the template; `.Count` is the op's count),
    /// named with `serial` unless the template names it; its only volume
    /// is the claim `pvc-<index>` when the op has volume templates. A pod
    /// from a template file gets upstream's label `signature:
    /// signature-label-<index / signatureBatchSize>`.
    pub fn build(&mut self, index: usize, serial: u64) -> Result<Pod, String> {
        let err = |e: String| format!("pod template {} (index {index}): {e}", self.source);
        let mut v = self
            .decoder
            .decode(&self.text, &env_for(&self.params, index, self.count))
            .map_err(err)?;
        name_object(&mut v, "pod-", serial);
        v["metadata"]["namespace"] = json!(self.namespace);
        if let Some(batch) = self.signature_batch {
            let labels = &mut v["metadata"]["labels"];
            if !labels.is_object() {
                *labels = json!({});
            }
            labels["signature"] = json!(format!("signature-label-{}", index / batch));
        }
        let mut pod: Pod = typed(v).map_err(err)?;
        let spec = pod.spec.get_or_insert_with(Default::default);
        if spec.scheduler_name.as_deref().is_none_or(str::is_empty) {
            spec.scheduler_name = Some(self.scheduler_name.clone());
        }
        if self.claims {
            crate::volumes::attach_claim(&mut pod, index);
        }
        if !self.checked {
            self.checked = true;
            let pod = Arc::new(pod.clone());
            convoy_api::PodInfo::new(pod).map_err(|e| err(e.to_string()))?;
        }
        Ok(pod)
    }
}

/// Builds the pods of a `createPods` step (see [`PodFactory`]); `serial`
/// numbers generated names across the workload.
pub fn build_pods(
    step: &PodsStep,
    scheduler_name: &str,
    serial: &mut u64,
) -> Result<Vec<Pod>, String> {
    let mut factory = PodFactory::new(step, scheduler_name);
    (0..step.count)
        .map(|i| {
            *serial += 1;
            factory.build(i, *serial)
        })
        .collect()
}

/// Renders the objects of a `createAny` / `createPodGroups` step: each a
/// JSON object with `apiVersion` and `kind` (not named yet).
pub fn render_objects(step: &AnyStep) -> Result<Vec<Value>, String> {
    let (text, source) = text_of(&step.template, "");
    let mut decoder = Decoder::default();
    (0..step.count)
        .map(|i| {
            let err = |e: String| format!("template {source} (index {i}): {e}");
            let v = decoder.decode(&text, &env_for(&step.params, i, step.count)).map_err(err)?;
            crate::any::type_of(&v).map_err(err)?;
            Ok(v)
        })
        .collect()
}

/// Decodes a template used as written (`churn`'s, as upstream), checking
/// that it is one object with `apiVersion` and `kind`.
pub fn literal_object(t: &TemplateSource) -> Result<Value, String> {
    let (text, source) = text_of(t, "");
    let err = |e: String| format!("template {source}: {e}");
    let v: Value = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
    crate::any::type_of(&v).map_err(err)?;
    Ok(v)
}

/// Renders and decodes the first object of each template `plan` uses
/// (node, pod, `createAny` object; `churn`'s as written): a template
/// convoy-bench cannot render or decode is found without running anything.
pub fn render_first(plan: &crate::plan::Plan) -> Result<(), String> {
    use crate::plan::Step;
    for step in &plan.steps {
        match step {
            Step::CreateNodes(s) if s.count > 0 => {
                build_nodes(&NodesStep { count: 1, ..s.clone() }, &mut 0)?;
            }
            Step::CreatePods(s) if s.count > 0 => {
                PodFactory::new(s, "default-scheduler").build(0, 0)?;
                if let Some(v) = &s.volumes {
                    crate::volumes::PodVolumes::new(v)?;
                }
            }
            Step::CreateAny(s) | Step::CreatePodGroups(s) if s.count > 0 => {
                render_objects(&AnyStep { count: 1, ..s.clone() })?;
            }
            Step::Churn(s) => {
                for t in &s.templates {
                    literal_object(t)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{Env, Value as TValue};

    fn file(text: &str) -> TemplateSource {
        TemplateSource::File { path: "t.yaml".into(), text: Arc::from(text) }
    }

    #[test]
    fn builtin_node_and_label_strategy() {
        let step = NodesStep {
            op_index: 0,
            count: 4,
            template: TemplateSource::Builtin,
            params: Env::new(),
            strategy: Some(NodeStrategy::Label {
                key: "zone".into(),
                values: vec!["a".into(), "b".into(), "c".into()],
            }),
            csi_node: None,
        };
        let mut serial = 0;
        let nodes = build_nodes(&step, &mut serial).unwrap();
        let names: Vec<_> = nodes.iter().map(|n| n.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["node-0-1", "node-0-2", "node-0-3", "node-0-4"]);
        let zones: Vec<_> =
            nodes.iter().map(|n| n.metadata.labels.as_ref().unwrap()["zone"].clone()).collect();
        assert_eq!(zones, ["a", "b", "c", "a"]);
        let alloc = nodes[0].status.as_ref().unwrap().allocatable.as_ref().unwrap();
        assert_eq!(alloc["cpu"].0, "4");
        assert_eq!(alloc["pods"].0, "110");
    }

    #[test]
    fn template_node_gets_allocatable_from_capacity_and_index() {
        let step = NodesStep {
            op_index: 1,
            count: 2,
            template: file(
                "metadata:\n  name: rack-{{DivideInt .Index .perRack}}-n{{.Index}}\n\
                 status:\n  capacity: {cpu: \"8\"}\n",
            ),
            params: [("perRack".to_string(), TValue::Int(1))].into(),
            strategy: Some(NodeStrategy::UniqueLabel { key: "u".into() }),
            csi_node: None,
        };
        let nodes = build_nodes(&step, &mut 0).unwrap();
        assert_eq!(nodes[1].metadata.name.as_deref(), Some("rack-1-n1"));
        let st = nodes[0].status.as_ref().unwrap();
        assert_eq!(st.allocatable.as_ref().unwrap()["cpu"].0, "8");
        let u0 = &nodes[0].metadata.labels.as_ref().unwrap()["u"];
        assert_eq!(u0.len(), 36);
        assert_ne!(u0, &nodes[1].metadata.labels.as_ref().unwrap()["u"]);
    }

    #[test]
    fn pods_get_namespace_name_and_scheduler() {
        let step = PodsStep {
            op_index: 2,
            count: 3,
            namespace: "namespace-2".into(),
            template: TemplateSource::Builtin,
            params: Env::new(),
            collect_metrics: true,
            skip_wait: false,
            steady: None,
            volumes: None,
            signature_batch: None,
        };
        let mut serial = 10;
        let pods = build_pods(&step, "convoy-scheduler", &mut serial).unwrap();
        assert_eq!(pods.len(), 3);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("pod-11"));
        assert_eq!(pods[2].metadata.namespace.as_deref(), Some("namespace-2"));
        let spec = pods[0].spec.as_ref().unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("convoy-scheduler"));
        let req = spec.containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(req["cpu"].0, "100m");
    }

    #[test]
    fn invalid_template_is_an_error_naming_it() {
        let step = PodsStep {
            op_index: 0,
            count: 1,
            namespace: "ns".into(),
            template: file("spec:\n  containers: 3\n"),
            params: Env::new(),
            collect_metrics: false,
            skip_wait: false,
            steady: None,
            volumes: None,
            signature_batch: None,
        };
        let e = build_pods(&step, "s", &mut 0).unwrap_err();
        assert!(e.contains("t.yaml") && e.contains("spec.containers"), "{e}");
    }

    /// Upstream v1.37.2's `podTemplateWithParams`: pods from a template
    /// file get `signature: signature-label-<index / signatureBatchSize>`
    /// beside their own labels.
    #[test]
    fn template_pods_get_upstreams_signature_label() {
        let step = PodsStep {
            op_index: 0,
            count: 5,
            namespace: "ns".into(),
            template: file(
                "metadata:\n  labels: {app: a}\nspec:\n  containers: [{name: c, image: i}]\n",
            ),
            params: Env::new(),
            collect_metrics: false,
            skip_wait: false,
            steady: None,
            volumes: None,
            signature_batch: Some(2),
        };
        let pods = build_pods(&step, "s", &mut 0).unwrap();
        let label = |i: usize| {
            let labels = pods[i].metadata.labels.as_ref().unwrap();
            assert_eq!(labels["app"], "a");
            labels["signature"].clone()
        };
        let got: Vec<String> = (0..5).map(label).collect();
        assert_eq!(
            got,
            [
                "signature-label-0",
                "signature-label-0",
                "signature-label-1",
                "signature-label-1",
                "signature-label-2"
            ]
        );
    }
}
