//! Which PodSpec fields decide where a pod goes, and what Convoy does with
//! each: never a silent wrong answer.
//!
//! [`FIELDS`] classifies every field of `PodSpec` that upstream
//! kube-scheduler v1.37's default plugins read (and the ones they do not):
//! Convoy evaluates it, refuses the pods that use it, or ignores it as
//! upstream does. It is the source of the table in `docs/configuration.md`
//! (a test keeps the two equal), and an end-to-end test walks the PodSpec
//! schema of a real kube-apiserver so that a field added later cannot go
//! unclassified.
//!
//! [`unevaluated_fields`] finds, once per pod (in [`PodInfo::new`](crate::PodInfo::new)), the uses
//! of the fields Convoy does not evaluate yet, each with its path and index
//! (`spec.volumes[0].awsElasticBlockStore`) and the upstream plugins that
//! would evaluate it. The framework refuses such a pod at the start of its
//! cycle, unless the profile disabled every one of those plugins (upstream
//! then ignores the field too).

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

use crate::names::*;

/// The name under which the framework records a refusal (in the pod's
/// unschedulable plugins, for the queue): not a plugin, no plugin can make
/// such a pod schedulable. Its only registered event is an update of the
/// pod itself that changes what it uses (see [`unevaluated_fields_hint`](crate::events::unevaluated_fields_hint)).
pub const UNEVALUATED_FIELDS: &str = "UnevaluatedFields";

/// An annotation the API adapter sets, in memory only (it is never
/// written), on a pod that sets a field of an older Kubernetes version
/// which Convoy's object types do not have, so that the field is refused by
/// name rather than lost: a comma-separated list of paths. Today one field:
/// Kubernetes 1.35's `spec.workloadRef` (its alpha Workload API, gang
/// scheduling that Convoy does not read).
pub const UNREAD_FIELDS_ANNOTATION: &str = "convoy.dev/unread-fields";

/// The fields of older Kubernetes versions that [`UNREAD_FIELDS_ANNOTATION`]
/// may name, with the plugins that read them there.
const UNREAD_FIELDS: [(&str, &[&str]); 1] = [("spec.workloadRef", &[GANG_SCHEDULING])];

/// Prefix of the implicit extended resource of a DeviceClass
/// (`deviceclass.resource.kubernetes.io/<class>`), always allocated through
/// DynamicResources.
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// What Convoy does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Evaluated as upstream's plugins do.
    Evaluated,
    /// A pod that sets it is refused: it stays pending with a message naming
    /// the field.
    Refused,
    /// Refused in the case given; otherwise as the note says.
    RefusedWhen(&'static str),
    /// Upstream's default plugins do not read it to place a pod either.
    Ignored,
}

impl Support {
    /// The wording of the docs table.
    pub fn describe(&self) -> String {
        match self {
            Support::Evaluated => "evaluated".to_string(),
            Support::Refused => "**refused**".to_string(),
            Support::RefusedWhen(when) => format!("**refused** when {when}"),
            Support::Ignored => "ignored".to_string(),
        }
    }

    /// Whether some pods using the field are refused.
    pub fn refuses(&self) -> bool {
        matches!(self, Support::Refused | Support::RefusedWhen(_))
    }
}

/// One row of the table: a field (or several, as `{a,b}` alternatives) and
/// every field below it.
#[derive(Debug, Clone, Copy)]
pub struct FieldRule {
    /// The path from `spec`, lists as `[]`; `{a,b}` stands for each
    /// alternative (`spec.{containers,initContainers}[].image`).
    pub path: &'static str,
    /// What Convoy does with it.
    pub support: Support,
    /// The upstream plugins (v1.37 defaults) that read it.
    pub plugins: &'static [&'static str],
    /// More detail, for the docs.
    pub note: &'static str,
}

impl FieldRule {
    /// The concrete paths of the row (its `{a,b}` alternatives expanded).
    pub fn paths(&self) -> Vec<String> {
        expand(self.path)
    }
}

/// Expands every `{a,b,...}` group of a path into the paths it stands for.
fn expand(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else { return vec![pattern.to_string()] };
    let close = open + pattern[open..].find('}').expect("an open brace is closed");
    let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
    let tails = expand(tail);
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| tails.iter().map(move |t| format!("{head}{alt}{t}")))
        .collect()
}

use Support::*;

const FIT: &[&str] = &[NODE_RESOURCES_FIT, NODE_RESOURCES_BALANCED_ALLOCATION];
const FIT_DRA: &[&str] =
    &[NODE_RESOURCES_FIT, NODE_RESOURCES_BALANCED_ALLOCATION, DYNAMIC_RESOURCES];
const DRA: &[&str] = &[DYNAMIC_RESOURCES];
const NDF: &[&str] = &[NODE_DECLARED_FEATURES];
const PVC: &[&str] = &[VOLUME_BINDING, VOLUME_RESTRICTIONS, VOLUME_ZONE, NODE_VOLUME_LIMITS];
const EPHEMERAL: &[&str] = &[VOLUME_BINDING, NODE_VOLUME_LIMITS];
const DISK: &[&str] = &[VOLUME_RESTRICTIONS, NODE_VOLUME_LIMITS];
const RESTRICTIONS: &[&str] = &[VOLUME_RESTRICTIONS];
const LIMITS: &[&str] = &[NODE_VOLUME_LIMITS];
const NONE: &[&str] = &[];

const fn rule(
    path: &'static str,
    support: Support,
    plugins: &'static [&'static str],
    note: &'static str,
) -> FieldRule {
    FieldRule { path, support, plugins, note }
}

/// Every PodSpec field, classified (upstream kube-scheduler v1.37.2, default
/// plugins and feature gates). Each row covers the fields below it; no row
/// is below another.
pub const FIELDS: &[FieldRule] = &[
    // Resources.
    rule(
        "spec.{containers,initContainers}[].resources.requests",
        RefusedWhen("a name starts with `deviceclass.resource.kubernetes.io/`"),
        FIT_DRA,
        "Otherwise evaluated as upstream's `PodRequests` (init containers, sidecars). An extended \
         resource a DeviceClass provides (`extendedResourceName`) is fitted against node \
         allocatable only: a node without it rejects the pod (`Insufficient <name>`) where \
         upstream would allocate a device. Not yet: a running pod being resized in place counts \
         its spec, where upstream counts the most of spec, allocated and actual (pod status).",
    ),
    rule(
        "spec.{containers,initContainers}[].resources.limits",
        Ignored,
        NONE,
        "API defaulting copies a limit into an unset request. Checked, as every amount of \
         the pod's resource lists: a negative or unreadable one refuses the pod.",
    ),
    rule(
        "spec.{containers,initContainers}[].resources.claims",
        Ignored,
        NONE,
        "Names entries of `spec.resourceClaims` for the kubelet; placement reads the claims.",
    ),
    rule(
        "spec.initContainers[].restartPolicy",
        Evaluated,
        &[NODE_RESOURCES_FIT, NODE_RESOURCES_BALANCED_ALLOCATION, NODE_PORTS],
        "`Always` makes a sidecar: its requests add to the app containers', its host ports count.",
    ),
    rule("spec.containers[].restartPolicy", Ignored, NONE, ""),
    rule("spec.overhead", Evaluated, FIT, "Added to the requests (set by RuntimeClass admission)."),
    rule(
        "spec.resources.requests",
        Evaluated,
        FIT,
        "Pod-level resources (beta, on by default): `cpu`, `memory` and `hugepages-*` replace \
         the containers' sum.",
    ),
    rule(
        "spec.resources.limits",
        Ignored,
        NONE,
        "Checked: a negative or unreadable amount refuses the pod.",
    ),
    rule(
        "spec.resources.claims",
        Ignored,
        NONE,
        "Names entries of `spec.resourceClaims` for the kubelet; placement reads the claims.",
    ),
    rule(
        "spec.resourceClaims",
        Evaluated,
        DRA,
        "ResourceClaims by name or from a ResourceClaimTemplate; devices allocated with \
         structured parameters (docs/dra.md).",
    ),
    rule(
        "spec.runtimeClassName",
        Ignored,
        NONE,
        "RuntimeClass admission copies the class's overhead, nodeSelector and tolerations into \
         the pod, where they are evaluated.",
    ),
    // Nodes.
    rule("spec.nodeName", Evaluated, &[NODE_NAME], ""),
    rule("spec.nodeSelector", Evaluated, &[NODE_AFFINITY], ""),
    rule("spec.affinity.nodeAffinity", Evaluated, &[NODE_AFFINITY], ""),
    rule("spec.tolerations", Evaluated, &[TAINT_TOLERATION, NODE_UNSCHEDULABLE], ""),
    rule(
        "spec.{containers,initContainers}[].ports",
        Evaluated,
        &[NODE_PORTS],
        "`hostPort` with `hostIP` and `protocol`; an init container's only if it is a sidecar.",
    ),
    rule(
        "spec.hostNetwork",
        RefusedWhen("`true` with `hostUsers: false`"),
        NDF,
        "That pair requires nodes declaring the UserNamespacesHostNetwork feature. Otherwise \
         nothing to evaluate: API defaulting copies each `containerPort` into `hostPort`.",
    ),
    rule("spec.hostUsers", RefusedWhen("`false` with `hostNetwork: true`"), NDF, ""),
    rule(
        "spec.{containers,initContainers}[].restartPolicyRules",
        RefusedWhen("a rule's action is `RestartAllContainers`"),
        NDF,
        "Requires nodes declaring the RestartAllContainers feature.",
    ),
    rule(
        "spec.{containers,initContainers,ephemeralContainers}[].volumeMounts[].bindMountOptions",
        Refused,
        NDF,
        "Requires nodes declaring the VolumeBindMountOptions feature.",
    ),
    rule("spec.{containers,initContainers}[].image", Evaluated, &[IMAGE_LOCALITY], "Score only."),
    // Other pods.
    rule("spec.affinity.{podAffinity,podAntiAffinity}", Evaluated, &[INTER_POD_AFFINITY], ""),
    rule("spec.topologySpreadConstraints", Evaluated, &[POD_TOPOLOGY_SPREAD], ""),
    // Queue, profile, gang.
    rule(
        "spec.schedulerName",
        Evaluated,
        NONE,
        "Selects the profile; pods of other schedulers are left alone.",
    ),
    rule("spec.schedulingGates", Evaluated, &[SCHEDULING_GATES], ""),
    rule(
        "spec.schedulingGroup",
        Evaluated,
        &[GANG_SCHEDULING],
        "Workload API PodGroups (upstream: GenericWorkload, off by default); see gang.md.",
    ),
    rule(
        "spec.priority",
        Evaluated,
        &[PRIORITY_SORT, DEFAULT_PREEMPTION],
        "Queue order, and preemption: a pod that fits nowhere may preempt pods of lower \
         priority (see preemption.md).",
    ),
    rule(
        "spec.preemptionPolicy",
        Evaluated,
        &[DEFAULT_PREEMPTION],
        "`Never`: the pod preempts nobody.",
    ),
    rule(
        "spec.priorityClassName",
        Ignored,
        NONE,
        "The Priority admission plugin resolves it into `priority` (the embedded cluster and \
         `simulate` do the same).",
    ),
    // Volumes.
    rule(
        "spec.volumes[].persistentVolumeClaim",
        Evaluated,
        PVC,
        "The claim must exist (not lost, not being deleted) and be bound (unbound with an \
         immediate class: `pod has unbound immediate PersistentVolumeClaims`) or have a \
         `WaitForFirstConsumer` class, whose claims VolumeBinding binds on the chosen node (a \
         matching PV, or one provisioned there, within the CSIStorageCapacity the driver \
         publishes); the bound PV's node \
         affinity and zone labels filter nodes; ReadWriteOncePod claims in use; CSI attach \
         limits. See [Volumes](#volumes).",
    ),
    rule(
        "spec.volumes[].ephemeral",
        Evaluated,
        EPHEMERAL,
        "The claim `<pod>-<volume>` the ephemeral volume controller creates: until it exists the \
         pod waits; it must be owned by the pod; then as a `persistentVolumeClaim`.",
    ),
    rule(
        "spec.volumes[].{awsElasticBlockStore,gcePersistentDisk}",
        Refused,
        DISK,
        "VolumeRestrictions evaluates the disk conflicts between pods on a node; refused because \
         NodeVolumeLimits does not count them against the CSI driver's attach limit (CSI \
         migration) yet.",
    ),
    rule(
        "spec.volumes[].{iscsi,rbd}",
        Evaluated,
        RESTRICTIONS,
        "Disk conflicts between pods on a node.",
    ),
    rule(
        "spec.volumes[].{azureDisk,azureFile,cinder,portworxVolume,vsphereVolume}",
        Refused,
        LIMITS,
        "Counted against the CSI driver's attach limit (CSI migration).",
    ),
    rule(
        "spec.volumes[].{cephfs,configMap,csi,downwardAPI,emptyDir,fc,flexVolume,flocker,gitRepo,\
         glusterfs,hostPath,image,name,nfs,photonPersistentDisk,projected,quobyte,scaleIO,secret,\
         storageos}",
        Ignored,
        NONE,
        "Inline `csi` volumes are not counted against attach limits either.",
    ),
    // Everything else in containers.
    rule(
        "spec.{containers,initContainers,ephemeralContainers}[].{args,command,env,envFrom,\
         imagePullPolicy,lifecycle,livenessProbe,name,readinessProbe,resizePolicy,securityContext,\
         startupProbe,stdin,stdinOnce,terminationMessagePath,terminationMessagePolicy,tty,\
         volumeDevices,workingDir}",
        Ignored,
        NONE,
        "",
    ),
    rule(
        "spec.{containers,initContainers,ephemeralContainers}[].volumeMounts[].{mountPath,\
         mountPropagation,name,readOnly,recursiveReadOnly,subPath,subPathExpr}",
        Ignored,
        NONE,
        "",
    ),
    rule(
        "spec.ephemeralContainers[].{image,ports,resources,restartPolicy,restartPolicyRules,\
         targetContainerName}",
        Ignored,
        NONE,
        "Ephemeral containers join running pods; they take no resources or ports.",
    ),
    // Everything else in the pod.
    rule(
        "spec.{activeDeadlineSeconds,automountServiceAccountToken,dnsConfig,dnsPolicy,\
         enableServiceLinks,evictionResponders,hostAliases,hostIPC,hostPID,hostname,\
         hostnameOverride,imagePullSecrets,readinessGates,restartPolicy,securityContext,\
         serviceAccount,serviceAccountName,setHostnameAsFQDN,shareProcessNamespace,subdomain,\
         terminationGracePeriodSeconds}",
        Ignored,
        NONE,
        "",
    ),
    rule(
        "spec.os",
        Ignored,
        NONE,
        "Nodes are matched on `kubernetes.io/os` only through nodeSelector or node affinity.",
    ),
];

/// The rule that classifies a concrete path (indexes as `[3]` or `[]`), if
/// any: the row whose path is the path or one of its ancestors.
pub fn rule_for(path: &str) -> Option<&'static FieldRule> {
    let path = strip_indexes(path);
    FIELDS.iter().find(|r| r.paths().iter().any(|p| covers(p, &path)))
}

/// Whether the row path `row` covers the concrete path `path` (equal, or an
/// ancestor).
pub fn covers(row: &str, path: &str) -> bool {
    path.strip_prefix(row).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// `spec.volumes[0].x[cpu]` → `spec.volumes[].x`: indexes and map keys
/// become `[]`, and a trailing one goes.
pub fn strip_indexes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[]");
                }
                depth += 1;
            }
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.strip_suffix("[]").map(str::to_string).unwrap_or(out)
}

/// The docs table (markdown), generated from [`FIELDS`].
pub fn markdown_table() -> String {
    let mut out =
        String::from("| field | Convoy | upstream plugins | notes |\n|---|---|---|---|\n");
    for r in FIELDS {
        let plugins = if r.plugins.is_empty() { "—".to_string() } else { r.plugins.join(", ") };
        let path = r.path.replace(',', ", ");
        out.push_str(&format!(
            "| `{path}` | {} | {plugins} | {} |\n",
            r.support.describe(),
            r.note
        ));
    }
    out
}

/// One use, in one pod, of a field Convoy does not evaluate yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnevaluatedField {
    /// The field, with its indexes: `spec.volumes[0].awsElasticBlockStore`.
    pub path: String,
    /// The upstream plugins that would evaluate it: if the profile disables
    /// all of them, upstream ignores the field as well.
    pub plugins: &'static [&'static str],
}

/// The volume source of `v` Convoy does not evaluate, if it has one, and
/// who would (the plugins whose part is missing: disabling them is what
/// makes upstream ignore the source). [`unevaluated_fields`] reports it as
/// `spec.volumes[i].<source>`.
pub fn unevaluated_volume(v: &Volume) -> Option<(&'static str, &'static [&'static str])> {
    // In-tree disks: VolumeRestrictions evaluates them, only the attach
    // limits (NodeVolumeLimits) are missing.
    let sources: [(&'static str, bool, &'static [&'static str]); 7] = [
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some(), LIMITS),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some(), LIMITS),
        ("azureDisk", v.azure_disk.is_some(), LIMITS),
        ("azureFile", v.azure_file.is_some(), LIMITS),
        ("cinder", v.cinder.is_some(), LIMITS),
        ("portworxVolume", v.portworx_volume.is_some(), LIMITS),
        ("vsphereVolume", v.vsphere_volume.is_some(), LIMITS),
    ];
    sources.into_iter().find(|(_, set, _)| *set).map(|(name, _, plugins)| (name, plugins))
}

fn container_uses(kind: &str, i: usize, c: &Container, out: &mut Vec<UnevaluatedField>) {
    let at = |field: String| format!("spec.{kind}[{i}].{field}");
    if let Some(r) = &c.resources {
        for name in r.requests.iter().flat_map(|m| m.keys()) {
            if name.starts_with(DEVICE_CLASS_RESOURCE_PREFIX) {
                out.push(UnevaluatedField {
                    path: at(format!("resources.requests[{name}]")),
                    plugins: DRA,
                });
            }
        }
    }
    for (j, rule) in c.restart_policy_rules.iter().flatten().enumerate() {
        if rule.action == "RestartAllContainers" {
            out.push(UnevaluatedField {
                path: at(format!("restartPolicyRules[{j}]")),
                plugins: NDF,
            });
        }
    }
    bind_mount_options(kind, i, c.volume_mounts.as_deref(), out);
}

fn bind_mount_options(
    kind: &str,
    i: usize,
    mounts: Option<&[k8s_openapi::api::core::v1::VolumeMount]>,
    out: &mut Vec<UnevaluatedField>,
) {
    for (j, m) in mounts.into_iter().flatten().enumerate() {
        if m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()) {
            out.push(UnevaluatedField {
                path: format!("spec.{kind}[{i}].volumeMounts[{j}].bindMountOptions"),
                plugins: NDF,
            });
        }
    }
}

/// The uses of the fields Convoy does not evaluate yet (the
/// [refused](Support::refuses) rows of [`FIELDS`]), in field order. Empty
/// for most pods, without allocating.
pub fn unevaluated_fields(spec: &PodSpec) -> Vec<UnevaluatedField> {
    let mut out = Vec::new();
    unevaluated_fields_into(spec, &mut out);
    out
}

/// [`unevaluated_fields`] of the pod's spec, and the fields of older
/// versions the API adapter found ([`UNREAD_FIELDS_ANNOTATION`]).
pub fn unevaluated_pod_fields(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<UnevaluatedField> {
    let mut out = Vec::new();
    let annotations = pod.metadata.annotations.as_ref();
    if let Some(unread) = annotations.and_then(|a| a.get(UNREAD_FIELDS_ANNOTATION)) {
        for path in unread.split(',').map(str::trim) {
            let plugins = UNREAD_FIELDS.iter().find(|(p, _)| *p == path).map_or(&[][..], |r| r.1);
            out.push(UnevaluatedField { path: path.to_string(), plugins });
        }
    }
    if let Some(spec) = pod.spec.as_ref() {
        unevaluated_fields_into(spec, &mut out);
    }
    out
}

fn unevaluated_fields_into(spec: &PodSpec, out: &mut Vec<UnevaluatedField>) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some((source, plugins)) = unevaluated_volume(v) {
            out.push(UnevaluatedField { path: format!("spec.volumes[{i}].{source}"), plugins });
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        container_uses("containers", i, c, out);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        container_uses("initContainers", i, c, out);
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        bind_mount_options("ephemeralContainers", i, c.volume_mounts.as_deref(), out);
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        out.push(UnevaluatedField { path: "spec.hostUsers".into(), plugins: NDF });
    }
}

/// The plugins named by the refused rows of [`FIELDS`], once each: those a
/// profile may disable to have Convoy ignore the fields only they read.
pub fn refusing_plugins() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = FIELDS
        .iter()
        .filter(|r| r.support.refuses())
        .flat_map(|r| r.plugins.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The refusal message: `pod uses spec.volumes[0].awsElasticBlockStore,
/// which this scheduler does not evaluate yet` (up to three fields named,
/// then a count).
pub fn refusal_message<'a>(paths: impl IntoIterator<Item = &'a str>) -> String {
    const NAMED: usize = 3;
    let paths: Vec<&str> = paths.into_iter().collect();
    let list = match paths.len() {
        0 => String::new(),
        1 => paths[0].to_string(),
        n if n <= NAMED => format!("{} and {}", paths[..n - 1].join(", "), paths[n - 1]),
        n => format!("{} and {} more", paths[..NAMED].join(", "), n - NAMED),
    };
    format!("pod uses {list}, which this scheduler does not evaluate yet")
}

#[cfg(test)]
mod tests;
