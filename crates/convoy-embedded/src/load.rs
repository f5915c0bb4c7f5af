//! Loading a cluster from YAML or JSON text: nodes, pods, PodGroups, and
//! the Namespaces, Services, ReplicationControllers, ReplicaSets,
//! StatefulSets, PodDisruptionBudgets, PriorityClasses,
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities plugins read, and the Dynamic Resource
//! Allocation kinds (`resource.k8s.io/v1` only: DeviceClasses,
//! ResourceSlices, ResourceClaims, DeviceTaintRules, and the
//! ResourceClaimTemplates the embedded cluster makes pods' claims from). A StorageClass without `volumeBindingMode` gets
//! `Immediate`, as API defaulting gives it.
//! Pods without `spec.priority` get it from their PriorityClass, as the
//! Priority admission plugin gives it (an unknown class is an error).
//!
//! Accepts what people have at hand: a single object, a multi-document YAML
//! stream (`---`), a `kind: List` as `kubectl get
//! namespaces,nodes,pods,services,replicasets,... -A -o yaml` prints it
//! (also typed lists such as `NodeList` or `PodList`, as the API returns
//! them), and JSON (one object, a list, or several concatenated objects).
//! So a dump of a real cluster loads as it is: assigned pods are the
//! existing load, and objects of the kinds Convoy does not use
//! (ConfigMaps, Deployments, Secrets, CRDs, ...) are skipped and counted
//! ([`Objects::notes`]: `skipped 12 ConfigMap: not used for scheduling`).
//!
//! Every object of a kind Convoy uses is checked here, once, so that a
//! simulation fails at load time with a message naming the file, the
//! document, the object and the field, rather than misbehaving later:
//!
//! ```text
//! cluster.yaml: document 3 (Pod default/web-1): spec.containers[0].resources.requests[cpu]: invalid quantity "lots": unknown suffix
//! cluster.yaml: document 1, items[4] (ReplicaSet prod/web-7d4b9): spec.selector.matchLabels: invalid type: string "web", expected a map
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use convoy_api::objects::ObjectKind;
use convoy_api::resource::Resource;
use convoy_api::{ApiInfo, ClusterObject, CustomObject, PodInfo, PodKey};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use serde_json::Value;

/// The API versions of the PodGroup kinds Convoy understands (the
/// scheduler-plugins coscheduling CRD and the upstream gang-scheduling API).
pub const POD_GROUP_API_VERSIONS: [&str; 2] =
    ["scheduling.x-k8s.io/v1alpha1", "scheduling.k8s.io/v1beta1"];

/// The API version the Dynamic Resource Allocation kinds are read in
/// (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate,
/// DeviceTaintRule);
/// the beta versions are refused, naming `apiVersion`.
pub const RESOURCE_API_VERSION: &str = "resource.k8s.io/v1";

/// The namespace of a namespaced object that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The objects of one or more files, in the order they appeared.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// Nodes (names unique, UIDs set).
    pub nodes: Vec<Node>,
    /// Pods (namespace/name unique, namespace and UID set, quantities valid).
    pub pods: Vec<Pod>,
    /// PodGroups, kept as raw JSON until the gang plugins read them.
    pub pod_groups: Vec<PodGroupObject>,
    /// The [`ClusterObject`]s (namespaces, controllers, claims, ...), trimmed to what
    /// scheduling reads ([`ObjectKind::trim`]).
    pub others: Vec<ClusterObject>,
    /// ResourceClaimTemplates (namespace set), which only the embedded
    /// cluster's resourceclaim controller reads.
    pub resource_claim_templates: Vec<ResourceClaimTemplate>,
    /// Custom resources of the kinds plugins declared
    /// ([`parse_objects_with`]).
    pub custom: Vec<CustomObject>,
    /// How many objects of each kind Convoy does not use were skipped.
    pub skipped: BTreeMap<String, usize>,
}

impl Objects {
    /// Whether no object was loaded (skipped ones aside).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
            && self.pods.is_empty()
            && self.pod_groups.is_empty()
            && self.others.is_empty()
            && self.resource_claim_templates.is_empty()
            && self.custom.is_empty()
    }

    /// One line per kind skipped, by kind: `skipped 12 ConfigMap: not
    /// used for scheduling`.
    pub fn notes(&self) -> Vec<String> {
        skipped_notes(&self.skipped)
    }
}

/// The lines of [`Objects::notes`] for a count of skipped objects by kind.
pub fn skipped_notes(skipped: &BTreeMap<String, usize>) -> Vec<String> {
    skipped.iter().map(|(kind, n)| format!("skipped {n} {kind}: not used for scheduling")).collect()
}

/// A PodGroup object (either supported API version), not yet interpreted.
#[derive(Debug, Clone, PartialEq)]
pub struct PodGroupObject {
    /// `apiVersion`, one of [`POD_GROUP_API_VERSIONS`].
    pub api_version: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (`default` when absent).
    pub namespace: String,
    /// The whole object as written.
    pub object: Value,
}

/// Why a file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON, or an object in it is invalid.
    #[error("{0}")]
    Invalid(Box<InvalidObject>),
}

/// Where in a file an invalid object is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidObject {
    /// The file (or whatever `source` the text was given with).
    pub source: String,
    /// The 1-based document in a `---` stream (or concatenated JSON).
    pub document: usize,
    /// The 0-based index in a List's `items`, when the object is in a List.
    pub item: Option<usize>,
    /// The object, as `Kind namespace/name` or `Kind name`, when known.
    pub object: Option<String>,
    /// What is wrong, starting with the field path when there is one.
    pub message: String,
}

impl fmt::Display for InvalidObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.source, self.document)?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        if let Some(o) = &self.object {
            write!(f, " ({o})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl LoadError {
    /// The invalid object, unless the file could not be read.
    pub fn invalid(&self) -> Option<&InvalidObject> {
        match self {
            LoadError::Invalid(i) => Some(i),
            LoadError::Io { .. } => None,
        }
    }
}

/// Reads and parses a file (see [`parse_objects`]); errors name the file.
pub fn load_file(path: &Path) -> Result<Objects, LoadError> {
    load_file_with(path, &[])
}

/// [`load_file`], also reading the custom resources of `kinds` (the kinds
/// plugins declared, `convoy_api::Registry::kinds`).
pub fn load_file_with(path: &Path, kinds: &[ApiInfo]) -> Result<Objects, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    parse_objects_with(&text, &path.display().to_string(), kinds)
}

/// Parses nodes, pods, PodGroups, Namespaces, Services, workload
/// controllers, PodDisruptionBudgets, PriorityClasses,
/// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
/// CSIDrivers, CSIStorageCapacities, DeviceClasses, ResourceSlices,
/// ResourceClaims, DeviceTaintRules and ResourceClaimTemplates from YAML or JSON text. `source` names the text in error
/// messages (usually the file name).
///
/// Empty documents are skipped, and so are objects of other kinds (counted
/// in [`Objects::skipped`]). Namespaced objects without a namespace get
/// `default`; objects without `metadata.uid` get a generated one
/// (`sim-<ns>-<name>` for pods, `sim-node-<name>` for nodes). Duplicate
/// names are errors, as are missing names, unsupported API versions and
/// invalid fields of the kinds Convoy uses.
pub fn parse_objects(text: &str, source: &str) -> Result<Objects, LoadError> {
    parse_objects_with(text, source, &[])
}

/// [`parse_objects`], also reading the custom resources of `kinds` (the
/// kinds plugins declared): an object whose `apiVersion` is one of a kind's
/// readable versions and whose `kind` is the kind's goes to
/// [`Objects::custom`] (its `metadata.name` required); other custom
/// resources are skipped and counted, as every kind Convoy does not use.
pub fn parse_objects_with(
    text: &str,
    source: &str,
    kinds: &[ApiInfo],
) -> Result<Objects, LoadError> {
    let mut loader = Loader { source, kinds, objects: Objects::default(), seen: HashMap::new() };
    if let Some(values) = parse_json_stream(text) {
        for (i, value) in values.into_iter().enumerate() {
            loader.document(value, i + 1)?;
        }
    } else {
        for doc in split_documents(text) {
            if !doc.has_content {
                continue;
            }
            let value =
                doc.parse().map_err(|message| loader.err(doc.number, None, None, message))?;
            loader.document(value, doc.number)?;
        }
    }
    loader.admit_priorities()?;
    Ok(loader.objects)
}

/// Parses text that looks like JSON (starts with `{` or `[`) as a stream of
/// JSON values; `None` when it is not JSON, so the YAML parser (which also
/// reads JSON, and reports errors with a location) takes over.
fn parse_json_stream(text: &str) -> Option<Vec<Value>> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if !trimmed.starts_with(['{', '[']) {
        return None;
    }
    serde_json::Deserializer::from_str(trimmed)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

fn parse_yaml(text: &str) -> Result<Value, String> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options::<Value>(text, options)
        .map_err(|e| e.to_string().replace(", set DuplicateKeyPolicy in Options if acceptable", ""))
}

/// One document of a YAML stream.
#[derive(Debug)]
struct Document {
    /// 1-based.
    number: usize,
    /// 0-based line of the file the document starts on.
    start_line: usize,
    /// The document's lines.
    text: String,
    /// Whether it has anything but blank lines, comments and markers.
    has_content: bool,
}

impl Document {
    fn new(number: usize, start_line: usize) -> Self {
        Self { number, start_line, text: String::new(), has_content: false }
    }

    fn parse(&self) -> Result<Value, String> {
        parse_yaml(&self.text).map_err(|_| {
            // Parse again, preceded by blank lines, so that the error names
            // the line of the file (only on this rare path: it costs memory
            // proportional to the file).
            let padded = format!("{}{}", "\n".repeat(self.start_line), self.text);
            match parse_yaml(&padded) {
                Err(e) => e,
                Ok(_) => "invalid YAML".to_string(),
            }
        })
    }
}

/// Splits a YAML stream at its document markers. A `---` or `...` at the
/// start of a line is a marker wherever it appears (YAML forbids it inside
/// scalars), so splitting by lines is exact; a leading `---` does not start
/// a second document.
fn split_documents(text: &str) -> Vec<Document> {
    let mut docs = Vec::new();
    let mut cur = Document::new(1, 0);
    // Whether `cur` was opened by a `---` (so another `---` ends it even if
    // it is empty) rather than implicitly.
    let mut explicit = false;
    for (i, line) in text.split('\n').enumerate() {
        let marker = |m: &str| {
            line.strip_prefix(m)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
        };
        if marker("---") {
            if cur.has_content || explicit {
                let next = Document::new(cur.number + 1, i);
                docs.push(std::mem::replace(&mut cur, next));
            }
            explicit = true;
            let rest = line[3..].trim();
            cur.has_content |= !rest.is_empty() && !rest.starts_with('#');
        } else if marker("...") {
            cur.text.push_str(line);
            let next = Document::new(cur.number + 1, i + 1);
            docs.push(std::mem::replace(&mut cur, next));
            explicit = false;
            continue;
        } else {
            let t = line.trim();
            cur.has_content |= !t.is_empty() && !t.starts_with('#') && !line.starts_with('%');
        }
        if cur.text.is_empty() {
            cur.start_line = i;
        }
        cur.text.push_str(line);
        cur.text.push('\n');
    }
    docs.push(cur);
    docs
}

/// Kinds of objects, for duplicate detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Node,
    Pod,
    PodGroup,
    Uid,
    /// A [`ClusterObject`] kind.
    Object(&'static str),
}

/// The API version each kind Convoy reads is accepted in, and whether it
/// is namespaced.
fn api_version_of(kind: &str) -> Option<(&'static str, bool)> {
    Some(match kind {
        "Node" => ("v1", false),
        "Namespace" => ("v1", false),
        "Pod" | "Service" | "ReplicationController" => ("v1", true),
        "ReplicaSet" | "StatefulSet" => ("apps/v1", true),
        "PodDisruptionBudget" => ("policy/v1", true),
        "PriorityClass" => ("scheduling.k8s.io/v1", false),
        "PersistentVolumeClaim" => ("v1", true),
        "PersistentVolume" => ("v1", false),
        "StorageClass" | "CSINode" | "CSIDriver" => ("storage.k8s.io/v1", false),
        "CSIStorageCapacity" => ("storage.k8s.io/v1", true),
        "DeviceClass" | "ResourceSlice" | "DeviceTaintRule" => (RESOURCE_API_VERSION, false),
        "ResourceClaim" | "ResourceClaimTemplate" => (RESOURCE_API_VERSION, true),
        _ => return None,
    })
}

struct Loader<'a> {
    source: &'a str,
    /// The custom resource kinds plugins declared.
    kinds: &'a [ApiInfo],
    objects: Objects,
    /// Where each node, pod, PodGroup and pod UID was first seen.
    seen: HashMap<(Kind, String), (usize, Option<usize>)>,
}

impl Loader<'_> {
    fn err(
        &self,
        document: usize,
        item: Option<usize>,
        object: Option<String>,
        message: String,
    ) -> LoadError {
        LoadError::Invalid(Box::new(InvalidObject {
            source: self.source.to_string(),
            document,
            item,
            object,
            message,
        }))
    }

    fn document(&mut self, value: Value, number: usize) -> Result<(), LoadError> {
        if value.is_null() {
            return Ok(());
        }
        self.object(value, number, None)
    }

    fn object(
        &mut self,
        mut value: Value,
        doc: usize,
        item: Option<usize>,
    ) -> Result<(), LoadError> {
        let Some(map) = value.as_object() else {
            let msg =
                format!("expected an object with apiVersion and kind, found {}", describe(&value));
            return Err(self.err(doc, item, None, msg));
        };
        let kind = match map.get("kind") {
            Some(Value::String(k)) => k.clone(),
            Some(other) => {
                return Err(self.err(
                    doc,
                    item,
                    None,
                    format!("kind: expected a string, found {}", describe(other)),
                ));
            }
            None => return Err(self.err(doc, item, None, "missing field `kind`".to_string())),
        };
        let api_version = map.get("apiVersion").and_then(Value::as_str).map(str::to_string);
        let name = value.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string);
        let namespace =
            value.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
        let custom = self.kinds.iter().find(|api| {
            api.kind == kind
                && api_version.as_deref().and_then(|v| v.split_once('/')).is_some_and(
                    |(group, version)| group == api.group && api.readable.contains(&version),
                )
        });
        if let Some(api) = custom {
            return match value.pointer("/metadata/name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => {
                    self.objects.custom.push(CustomObject::new(*api, value));
                    Ok(())
                }
                _ => Err(self.err(doc, item, Some(kind), "metadata.name: required".into())),
            };
        }
        let read = api_version_of(&kind);
        let namespaced = kind == "PodGroup" || read.is_some_and(|(_, ns)| ns);
        let label = match &name {
            _ if read.is_none() && kind != "PodGroup" => None,
            Some(n) if namespaced => Some(format!(
                "{kind} {}/{n}",
                namespace.as_deref().filter(|ns| !ns.is_empty()).unwrap_or(DEFAULT_NAMESPACE)
            )),
            Some(n) => Some(format!("{kind} {n}")),
            None => Some(kind.clone()),
        };
        let fail = |this: &Self, message: String| this.err(doc, item, label.clone(), message);

        if let Some((want, _)) = read
            && api_version.as_deref().is_some_and(|v| v != want)
        {
            let v = api_version.unwrap_or_default();
            return Err(fail(
                self,
                format!("apiVersion: unsupported {v:?} for {kind} (expected {want:?})"),
            ));
        }
        if read.is_some() || kind == "PodGroup" {
            match value.pointer("/metadata/name") {
                None | Some(Value::Null) => {
                    return Err(fail(self, "metadata.name: required".to_string()));
                }
                Some(Value::String(n)) if n.is_empty() => {
                    return Err(fail(self, "metadata.name: required".to_string()));
                }
                Some(Value::String(_)) => {}
                Some(other) => {
                    let msg =
                        format!("metadata.name: expected a string, found {}", describe(other));
                    return Err(fail(self, msg));
                }
            }
            check_labels(&value).map_err(|m| fail(self, m))?;
        }
        match kind.as_str() {
            "Node" => {
                let node = convert::<Node>(value).map_err(|m| fail(self, m))?;
                self.add_node(node, doc, item).map_err(|m| fail(self, m))
            }
            "Pod" => {
                let pod = convert::<Pod>(value).map_err(|m| fail(self, m))?;
                self.add_pod(pod, doc, item).map_err(|m| fail(self, m))
            }
            "Namespace" => {
                self.add_object::<Namespace>(value, doc, item).map_err(|m| fail(self, m))
            }
            "Service" => self.add_object::<Service>(value, doc, item).map_err(|m| fail(self, m)),
            "ReplicationController" => self
                .add_object::<ReplicationController>(value, doc, item)
                .map_err(|m| fail(self, m)),
            "ReplicaSet" => {
                self.add_object::<ReplicaSet>(value, doc, item).map_err(|m| fail(self, m))
            }
            "StatefulSet" => {
                self.add_object::<StatefulSet>(value, doc, item).map_err(|m| fail(self, m))
            }
            "PodDisruptionBudget" => {
                self.add_object::<PodDisruptionBudget>(value, doc, item).map_err(|m| fail(self, m))
            }
            "PriorityClass" => {
                self.add_object::<PriorityClass>(value, doc, item).map_err(|m| fail(self, m))
            }
            "PersistentVolumeClaim" => self
                .add_object::<PersistentVolumeClaim>(value, doc, item)
                .map_err(|m| fail(self, m)),
            "PersistentVolume" => {
                self.add_object::<PersistentVolume>(value, doc, item).map_err(|m| fail(self, m))
            }
            "StorageClass" => {
                let mut value = value;
                if let Some(o) = value.as_object_mut() {
                    o.entry("volumeBindingMode").or_insert_with(|| Value::from("Immediate"));
                }
                self.add_object::<StorageClass>(value, doc, item).map_err(|m| fail(self, m))
            }
            "CSINode" => self.add_object::<CSINode>(value, doc, item).map_err(|m| fail(self, m)),
            "CSIDriver" => {
                self.add_object::<CSIDriver>(value, doc, item).map_err(|m| fail(self, m))
            }
            "CSIStorageCapacity" => {
                self.add_object::<CSIStorageCapacity>(value, doc, item).map_err(|m| fail(self, m))
            }
            "DeviceClass" => {
                self.add_object::<DeviceClass>(value, doc, item).map_err(|m| fail(self, m))
            }
            "ResourceSlice" => {
                self.add_object::<ResourceSlice>(value, doc, item).map_err(|m| fail(self, m))
            }
            "ResourceClaim" => {
                self.add_object::<ResourceClaim>(value, doc, item).map_err(|m| fail(self, m))
            }
            "DeviceTaintRule" => {
                self.add_object::<DeviceTaintRule>(value, doc, item).map_err(|m| fail(self, m))
            }
            "ResourceClaimTemplate" => {
                self.add_template(value, doc, item).map_err(|m| fail(self, m))
            }
            "PodGroup" => {
                let api_version = api_version.unwrap_or_default();
                if !POD_GROUP_API_VERSIONS.contains(&api_version.as_str()) {
                    let msg = format!(
                        "apiVersion: unsupported {api_version:?} for PodGroup (expected {})",
                        POD_GROUP_API_VERSIONS.join(" or ")
                    );
                    return Err(fail(self, msg));
                }
                // Read (and refused, naming the field) once its priority is
                // resolved, in `admit_priorities`.
                let pg = PodGroupObject {
                    api_version,
                    name: name.unwrap_or_default(),
                    namespace: namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
                    object: value,
                };
                let key = format!("{}/{}", pg.namespace, pg.name);
                self.first_seen(Kind::PodGroup, key, doc, item).map_err(|m| fail(self, m))?;
                self.objects.pod_groups.push(pg);
                Ok(())
            }
            list if list.ends_with("List") => {
                if item.is_some() {
                    return Err(fail(self, format!("a {kind} inside a List is not supported")));
                }
                let items = match value.as_object_mut().and_then(|m| m.remove("items")) {
                    Some(Value::Array(items)) => items,
                    None | Some(Value::Null) => Vec::new(),
                    Some(other) => {
                        return Err(fail(
                            self,
                            format!("items: expected a list, found {}", describe(&other)),
                        ));
                    }
                };
                // Items of a typed list (as the API returns them) may omit
                // their kind and apiVersion: take them from the list.
                let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
                for (i, mut it) in items.into_iter().enumerate() {
                    if let (Some(k), Some(m)) = (item_kind, it.as_object_mut()) {
                        m.entry("kind").or_insert_with(|| Value::String(k.to_string()));
                        if let Some(v) = &api_version {
                            m.entry("apiVersion").or_insert_with(|| Value::String(v.clone()));
                        }
                    }
                    self.object(it, doc, Some(i))?;
                }
                Ok(())
            }
            other => {
                *self.objects.skipped.entry(other.to_string()).or_default() += 1;
                Ok(())
            }
        }
    }

    /// A [`ClusterObject`] kind: checked as its type,
    /// namespace defaulted, trimmed.
    fn add_object<K>(
        &mut self,
        mut value: Value,
        doc: usize,
        item: Option<usize>,
    ) -> Result<(), String>
    where
        K: ObjectKind + serde::de::DeserializeOwned,
    {
        let namespaced = api_version_of(K::KIND).is_some_and(|(_, ns)| ns);
        if namespaced && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
            if ns.is_empty() {
                meta.insert("namespace".into(), Value::String(DEFAULT_NAMESPACE.into()));
            }
        }
        let obj = ClusterObject::trimmed(convert::<K>(value)?);
        self.first_seen(Kind::Object(K::KIND), obj.key(), doc, item)?;
        self.objects.others.push(obj);
        Ok(())
    }

    /// A ResourceClaimTemplate: checked, namespace defaulted, kept whole
    /// for the embedded cluster's resourceclaim controller.
    fn add_template(
        &mut self,
        value: Value,
        doc: usize,
        item: Option<usize>,
    ) -> Result<(), String> {
        let mut t = convert::<ResourceClaimTemplate>(value)?;
        let ns = t.metadata.namespace.get_or_insert_with(String::new);
        if ns.is_empty() {
            *ns = DEFAULT_NAMESPACE.to_string();
        }
        if t.spec.as_ref().and_then(|s| s.spec.as_ref()).is_none() {
            return Err("spec.spec: required".to_string());
        }
        let key = format!(
            "{}/{}",
            t.metadata.namespace.as_deref().unwrap_or(""),
            t.metadata.name.as_deref().unwrap_or("")
        );
        self.first_seen(Kind::Object("ResourceClaimTemplate"), key, doc, item)?;
        self.objects.resource_claim_templates.push(t);
        Ok(())
    }

    /// Records where an object was first seen; a second one is an error
    /// pointing at the first.
    fn first_seen(
        &mut self,
        kind: Kind,
        key: String,
        doc: usize,
        item: Option<usize>,
    ) -> Result<(), String> {
        match self.seen.entry((kind, key)) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let (first_doc, first_item) = *e.get();
                let what = match kind {
                    Kind::Node => "node",
                    Kind::Pod => "pod",
                    Kind::PodGroup => "PodGroup",
                    Kind::Uid => "metadata.uid: duplicate uid, also used by the pod",
                    Kind::Object(kind) => kind,
                };
                let at = match first_item {
                    Some(i) => format!("document {first_doc}, items[{i}]"),
                    None => format!("document {first_doc}"),
                };
                if kind == Kind::Uid {
                    Err(format!("{what} {:?} in {at}", e.key().1))
                } else {
                    Err(format!("duplicate {what} {} (first in {at})", e.key().1))
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((doc, item));
                Ok(())
            }
        }
    }

    /// Resolves the priority of every pod and upstream PodGroup that has
    /// none from its PriorityClass, then reads each PodGroup (refusing it,
    /// naming the field, as [`convoy_api::PodGroup::from_json`] does) (once all the file's classes are known), as the
    /// Priority admission plugin does; an unknown class is an error naming
    /// the pod and the field. Pods that set `spec.priority` (a dump of a
    /// real cluster) keep it.
    fn admit_priorities(&mut self) -> Result<(), LoadError> {
        let classes: Vec<convoy_api::objects::PriorityClassInfo> = self
            .objects
            .others
            .iter()
            .filter_map(|o| match o {
                ClusterObject::PriorityClass(pc) => {
                    Some(convoy_api::objects::PriorityClassInfo::of(pc))
                }
                _ => None,
            })
            .collect();
        for i in 0..self.objects.pod_groups.len() {
            let pg = &mut self.objects.pod_groups[i];
            let key = format!("{}/{}", pg.namespace, pg.name);
            let admitted = crate::admission::admit_pod_group_priority(&mut pg.object, &classes)
                .and_then(|()| {
                    convoy_api::PodGroup::from_json(&pg.object).map(drop).map_err(|e| e.message)
                });
            if let Err(message) = admitted {
                let (doc, item) =
                    self.seen.get(&(Kind::PodGroup, key.clone())).copied().unwrap_or((0, None));
                return Err(self.err(doc, item, Some(format!("PodGroup {key}")), message));
            }
        }
        for i in 0..self.objects.pods.len() {
            let pod = &mut self.objects.pods[i];
            let Some(spec) = pod.spec.as_mut() else { continue };
            if let Err(message) = crate::admission::admit_priority(spec, &classes) {
                let key = PodKey::of(pod).to_string();
                let (doc, item) =
                    self.seen.get(&(Kind::Pod, key.clone())).copied().unwrap_or((0, None));
                return Err(self.err(doc, item, Some(format!("Pod {key}")), message));
            }
        }
        Ok(())
    }

    fn add_node(&mut self, mut node: Node, doc: usize, item: Option<usize>) -> Result<(), String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(status) = &node.status {
            for (field, list) in
                [("allocatable", &status.allocatable), ("capacity", &status.capacity)]
            {
                if let Some(list) = list {
                    Resource::from_list(list)
                        .map_err(|(r, e)| format!("status.{field}[{r}]: {e}"))?;
                }
            }
        }
        self.first_seen(Kind::Node, name.clone(), doc, item)?;
        if node.metadata.uid.as_deref().is_none_or(str::is_empty) {
            node.metadata.uid = Some(format!("sim-node-{name}"));
        }
        self.objects.nodes.push(node);
        Ok(())
    }

    fn add_pod(&mut self, mut pod: Pod, doc: usize, item: Option<usize>) -> Result<(), String> {
        // The creation-time mutations wait for the cluster
        // (`EmbeddedCluster::new`); only the defaults are needed here.
        default_pod(&mut pod);
        let pod = Arc::new(pod);
        let info = PodInfo::new(Arc::clone(&pod)).map_err(|e| e.message)?;
        // k8s-openapi defaults missing required fields; the API server
        // would reject a pod without containers.
        if info.spec().containers.is_empty() {
            return Err("missing field `containers` at spec".to_string());
        }
        let key = info.key.to_string();
        drop(info);
        self.first_seen(Kind::Pod, key.clone(), doc, item)?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Err(m) = self.first_seen(Kind::Uid, uid, doc, item) {
            // Keep the pod's name free for a corrected retry of the same set.
            self.seen.remove(&(Kind::Pod, key));
            return Err(m);
        }
        self.objects.pods.push(Arc::unwrap_or_clone(pod));
        Ok(())
    }
}

/// Refuses `metadata.labels` the API server would refuse (upstream
/// `ValidateLabels`): a key that is not a qualified name, a value that is
/// not a label value, or a value that is not a string.
fn check_labels(object: &Value) -> Result<(), String> {
    // Not a map: the conversion to the typed object says so.
    let Some(labels) = object.pointer("/metadata/labels").and_then(Value::as_object) else {
        return Ok(());
    };
    // The checks' messages start with the selector field they were written
    // for (`key: `, `values[k]: `); here the field is the label.
    let invalid = |key: &str, e: String| {
        let why = e.split_once(": ").map_or(e.as_str(), |(_, why)| why).to_string();
        format!("metadata.labels[{key}]: {why}")
    };
    for (key, value) in labels {
        convoy_api::labels::validate_key(key).map_err(|e| invalid(key, e))?;
        let Value::String(value) = value else {
            return Err(format!(
                "metadata.labels[{key}]: expected a string, found {}",
                describe(value)
            ));
        };
        convoy_api::labels::validate_value(key, value).map_err(|e| invalid(key, e))?;
    }
    Ok(())
}

/// Sets what the API server would default and the simulation needs: the
/// namespace (`default`) and a UID (`sim-<namespace>-<name>`).
pub fn default_pod(pod: &mut Pod) {
    let ns = pod.metadata.namespace.get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    if ns.is_empty() {
        *ns = DEFAULT_NAMESPACE.to_string();
    }
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        let name = pod.metadata.name.as_deref().unwrap_or("");
        pod.metadata.uid =
            Some(format!("sim-{}-{name}", pod.metadata.namespace.as_deref().unwrap_or("")));
    }
}

/// What the API server does to a new pod's topology spread constraints
/// (upstream `pkg/registry/core/pod/strategy.go`, `mutateTopologySpreadConstraints`,
/// v1.37.2; gates MatchLabelKeysInPodTopologySpread and
/// MatchLabelKeysInPodTopologySpreadSelectorMerge, both on by default): for
/// each constraint with `matchLabelKeys` and a `labelSelector`, `key In
/// (value)` is appended to the selector's `matchExpressions` for every key
/// the pod has a label for. Applied once, when the pod is created (not on
/// updates, as upstream's `PrepareForCreate`).
pub fn merge_spread_match_label_keys(pod: &mut Pod) {
    let labels = pod.metadata.labels.as_ref();
    let Some(constraints) = pod.spec.as_mut().and_then(|s| s.topology_spread_constraints.as_mut())
    else {
        return;
    };
    for c in constraints {
        let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
        let Some(selector) = c.label_selector.as_mut() else { continue };
        for key in keys {
            if let Some(value) = labels.and_then(|l| l.get(key)) {
                selector.match_expressions.get_or_insert_with(Vec::new).push(
                    LabelSelectorRequirement {
                        key: key.clone(),
                        operator: "In".to_string(),
                        values: Some(vec![value.clone()]),
                    },
                );
            }
        }
    }
}

/// Converts a JSON value into a typed object; the error names the field.
fn convert<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            inner
        } else if inner.starts_with("missing field") {
            format!("{inner} at {path}")
        } else {
            format!("{path}: {inner}")
        }
    })
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
