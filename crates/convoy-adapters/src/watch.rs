//! The [`ClusterUpdate`] stream from the API server: one watcher on all
//! Nodes, one on all Pods (every namespace), one per PodGroup API
//! ([`crate::pod_groups`]), and one per kind plugins read besides
//! (Namespaces, Services, ReplicationControllers, ReplicaSets,
//! StatefulSets, PodDisruptionBudgets, PriorityClasses, and the volume
//! kinds PersistentVolumeClaims, PersistentVolumes, StorageClasses,
//! CSINodes, CSIDrivers and CSIStorageCapacities, and the DRA kinds
//! DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules;
//! [`crate::objects`]).
//!
//! Every kind but the core `v1` ones is optional: [`crate::discovery`]
//! says which the server serves and in which version, each is watched in
//! the newest version Convoy reads ([`crate::versioned`]), and one not
//! served is an empty set, never a wait. What discovery found is reported
//! as [`ClusterUpdate::ApisServed`] before `Synced` and whenever it
//! changes.
//!
//! Relisting after `410 Gone`, reconnecting and backing off are the
//! watcher's job (`kube::runtime::watcher`, bookmarks on, retrying as
//! [`crate::backoff`] says). This module turns its events into updates with the same
//! semantics as the embedded cluster: `NodeAdded` for every listed node,
//! then `PodAdded` for every listed pod, `PodGroupApplied` for every listed
//! PodGroup and `ObjectApplied` for every listed Namespace, Service and
//! workload controller, then one `Synced`, then changes.
//!
//! To produce `old` in `*Updated` and to find what disappeared during a
//! relist, each [`Translator`](crate::translator::Translator) remembers the last `Arc` of every object by
//! `namespace/name`. These are the very `Arc`s handed to the scheduler's
//! cache, so this is not a second copy of the cluster. Objects are trimmed
//! ([`crate::trim`]) before they are wrapped.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::Arc;

use std::time::Duration;

use convoy_api::{ClusterUpdate, PodGroupApi, ServedApis};
use futures::stream::{self, BoxStream, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};

use crate::custom::{CustomResource, custom_stream};
use crate::discovery::{Discovered, discovery_stream};
use crate::objects::{ObjectEvent, ObjectTranslators, object_streams};
use crate::pod_groups::group_stream;
use crate::pods::pod_stream;
use crate::status::StatusWriter;
use crate::translator::Translator;
use crate::versioned::KindItem;

/// How the initial lists are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// Use streaming lists (`sendInitialEvents`, KEP-3157) instead of
    /// paginated LIST + WATCH. There is no fallback: a server without the
    /// `WatchList` feature refuses the watch, and the watcher keeps retrying.
    pub streaming_lists: bool,
    /// Page size of the initial LIST (ignored with streaming lists);
    /// `None` lists everything in one response.
    pub page_size: Option<u32>,
    /// How often the server is asked again which APIs it serves (a CRD
    /// installed later, an API turned on or off). A watch that finds its
    /// API gone, or relists, asks at once.
    pub discovery_interval: Duration,
    /// Custom resource kinds plugins read (`convoy_api::Registry::kinds`),
    /// watched as discovery finds them ([`crate::custom`]).
    pub custom_kinds: Vec<convoy_api::ApiInfo>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            streaming_lists: false,
            page_size: Some(500),
            discovery_interval: Duration::from_secs(10),
            custom_kinds: Vec::new(),
        }
    }
}

impl WatchOptions {
    fn watcher_config(&self) -> watcher::Config {
        let cfg = watcher::Config { page_size: self.page_size, ..Default::default() };
        if self.streaming_lists { cfg.streaming_lists() } else { cfg }
    }
}

/// Watches all Nodes, all Pods, the PodGroups of both APIs, and all
/// Namespaces, Services, ReplicationControllers, ReplicaSets,
/// StatefulSets, PodDisruptionBudgets, PriorityClasses,
/// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
/// CSIDrivers, CSIStorageCapacities, DeviceClasses, ResourceSlices,
/// ResourceClaims and DeviceTaintRules, and yields their changes as [`ClusterUpdate`]s.
///
/// The node watcher runs alone until its initial list is complete, then the
/// others start, so every listed node comes before any pod. `Synced`
/// follows the first discovery (reported as `ApisServed`), the initial
/// lists of the pods and of every object kind and PodGroup API the server
/// serves (so scheduling never starts with unknown namespaces); a kind that
/// is not served does not delay it (see [`crate::versioned`]). Watch errors
/// are logged and retried with backoff; the stream does not end (a kind the
/// scheduler may not list, for want of RBAC, delays `Synced` until it may).
pub fn cluster_updates(
    client: kube::Client,
    opts: WatchOptions,
) -> impl Stream<Item = ClusterUpdate> + Send + 'static {
    cluster_updates_reporting(client, opts, None)
}

/// [`cluster_updates`], reporting invalid PodGroups as Warning Events on
/// them through `reporter`.
pub fn cluster_updates_reporting(
    client: kube::Client,
    opts: WatchOptions,
    reporter: Option<StatusWriter>,
) -> impl Stream<Item = ClusterUpdate> + Send + 'static {
    let cfg = opts.watcher_config();
    let nodes = crate::initial_list::watch(Api::<Node>::all(client.clone()), &cfg);
    let later = Later {
        client,
        cfg,
        interval: opts.discovery_interval,
        reporter,
        custom_kinds: opts.custom_kinds.clone(),
    };
    let state = Merge {
        phase: Phase::Nodes { nodes, later },
        nodes: Translator::default(),
        pods: Translator::default(),
        groups: [Translator::default(), Translator::default()],
        objects: ObjectTranslators::default(),
        custom: opts
            .custom_kinds
            .iter()
            .map(|api| CustomKind {
                api: *api,
                translator: Translator::default(),
                ready: false,
                listed: false,
            })
            .collect(),
        discovered: None,
        pods_listed: false,
        groups_ready: [false, false],
        apis: None,
        synced: false,
        pending: VecDeque::new(),
    };
    stream::unfold(state, |mut s| async move {
        loop {
            if let Some(update) = s.pending.pop_front() {
                return Some((update, s));
            }
            s.step().await?;
        }
    })
}

type Watch<K> = BoxStream<'static, watcher::Result<Event<K>>>;

/// What is started once the nodes are listed.
struct Later {
    client: kube::Client,
    cfg: watcher::Config,
    interval: Duration,
    reporter: Option<StatusWriter>,
    custom_kinds: Vec<convoy_api::ApiInfo>,
}

#[allow(clippy::large_enum_variant, reason = "one value per stream, replaced once")]
enum Phase {
    /// Only nodes until their first list is complete.
    Nodes { nodes: Watch<Node>, later: Later },
    /// All, merged fairly.
    All(BoxStream<'static, Either>),
}

#[allow(clippy::large_enum_variant, reason = "the watcher's own events are this size")]
enum Either {
    Node(watcher::Result<Event<Node>>),
    Pod(watcher::Result<Event<Pod>>),
    Group(PodGroupApi, KindItem<DynamicObject>),
    Object(ObjectEvent),
    Custom(usize, KindItem<CustomResource>),
    Discovered(Arc<Discovered>),
}

const APIS: [PodGroupApi; 2] = [PodGroupApi::XK8s, PodGroupApi::Upstream];

fn index(api: PodGroupApi) -> usize {
    match api {
        PodGroupApi::XK8s => 0,
        PodGroupApi::Upstream => 1,
    }
}

struct Merge {
    phase: Phase,
    nodes: Translator<Node>,
    pods: Translator<Pod>,
    /// PodGroups by API ([`index`]).
    groups: [Translator<DynamicObject>; 2],
    /// The other kinds plugins read ([`crate::objects`]).
    objects: ObjectTranslators,
    /// The custom kinds plugins declared: each with whether it is ready
    /// (listed once, or not served) and whether its current watch has
    /// listed (what `ApisServed` says of it: `Listing` until then).
    custom: Vec<CustomKind>,
    /// The last discovery.
    discovered: Option<Arc<Discovered>>,
    pods_listed: bool,
    /// Listed once, or not served.
    groups_ready: [bool; 2],
    /// What was last reported as `ApisServed`.
    apis: Option<Arc<ServedApis>>,
    synced: bool,
    pending: VecDeque<ClusterUpdate>,
}

impl Merge {
    /// Handles one watcher event; `None` when the watchers ended.
    async fn step(&mut self) -> Option<()> {
        match &mut self.phase {
            Phase::Nodes { nodes, .. } => {
                let event = nodes.next().await?;
                let listed = self.nodes.handle_result(event, &mut self.pending);
                if listed {
                    let Phase::Nodes { nodes, later } =
                        std::mem::replace(&mut self.phase, Phase::All(stream::empty().boxed()))
                    else {
                        unreachable!("phase checked above")
                    };
                    let (discovered, discovery) =
                        discovery_stream(later.client.clone(), later.interval);
                    let pods =
                        pod_stream(later.client.clone(), later.cfg.clone(), discovery.clone());
                    let mut all = vec![
                        nodes.map(Either::Node).boxed(),
                        pods.map(Either::Pod).boxed(),
                        discovered.map(Either::Discovered).boxed(),
                    ];
                    for api in APIS {
                        let groups = group_stream(
                            later.client.clone(),
                            api,
                            later.cfg.clone(),
                            discovery.clone(),
                            later.reporter.clone(),
                        );
                        all.push(groups.map(|(api, item)| Either::Group(api, item)).boxed());
                    }
                    for objects in object_streams(&later.client, &later.cfg, &discovery) {
                        all.push(objects.map(Either::Object).boxed());
                    }
                    for (i, api) in later.custom_kinds.iter().enumerate() {
                        let s = custom_stream(
                            later.client.clone(),
                            *api,
                            later.cfg.clone(),
                            discovery.clone(),
                        );
                        all.push(s.map(move |item| Either::Custom(i, item)).boxed());
                    }
                    self.phase = Phase::All(stream::select_all(all).boxed());
                }
            }
            Phase::All(all) => match all.next().await? {
                Either::Node(event) => {
                    self.nodes.handle_result(event, &mut self.pending);
                }
                Either::Pod(event) => {
                    if self.pods.handle_result(event, &mut self.pending) {
                        self.pods_listed = true;
                    }
                }
                Either::Group(api, item) => {
                    let i = index(api);
                    match item {
                        KindItem::Event(event) => {
                            if self.groups[i].handle_result(event, &mut self.pending) {
                                self.groups_ready[i] = true;
                            }
                        }
                        KindItem::Unavailable => {
                            self.groups[i].forget_all(&mut self.pending);
                            self.groups_ready[i] = true;
                        }
                    }
                }
                Either::Object(event) => self.objects.handle(event, &mut self.pending),
                Either::Custom(i, item) => {
                    let kind = &mut self.custom[i];
                    let was_listed = kind.listed;
                    match item {
                        KindItem::Event(event) => {
                            // A relist keeps what it knew until it is done:
                            // only the first list makes the kind usable.
                            if let Ok(Event::InitDone) = &event {
                                kind.listed = true;
                            }
                            if kind.translator.handle_result(event, &mut self.pending) {
                                kind.ready = true;
                            }
                        }
                        KindItem::Unavailable => {
                            kind.translator.forget_all(&mut self.pending);
                            kind.ready = true;
                            kind.listed = false;
                        }
                    }
                    if was_listed != self.custom[i].listed {
                        self.report_apis();
                    }
                }
                Either::Discovered(found) => {
                    self.discovered = Some(found);
                    self.report_apis();
                }
            },
        }
        if !self.synced
            && self.apis.is_some()
            && self.pods_listed
            && self.objects.listed()
            && self.groups_ready.iter().all(|r| *r)
            && self.custom.iter().all(|k| k.ready)
        {
            self.synced = true;
            self.pending.push_back(ClusterUpdate::Synced);
        }
        Some(())
    }
}

/// A custom kind a plugin declared, as the merged stream follows it.
struct CustomKind {
    api: convoy_api::ApiInfo,
    translator: Translator<CustomResource>,
    /// Listed once, or not served: `Synced` does not wait for it.
    ready: bool,
    /// Its current watch has completed a list.
    listed: bool,
}

impl Merge {
    /// Pushes `ApisServed` when what it says changed: the last discovery,
    /// a custom kind served but not listed yet reported as `Listing`.
    fn report_apis(&mut self) {
        let Some(found) = &self.discovered else { return };
        let kinds: Vec<convoy_api::ApiInfo> = self.custom.iter().map(|k| k.api).collect();
        let mut served = found.served_apis(&kinds);
        for k in &self.custom {
            if let convoy_api::Serving::Served(v) = served.serving(&k.api)
                && !k.listed
            {
                served.set(k.api, convoy_api::Serving::Listing(v));
            }
        }
        if self.apis.as_deref() != Some(&served) {
            let served = Arc::new(served);
            self.apis = Some(served.clone());
            self.pending.push_back(ClusterUpdate::ApisServed(served));
        }
    }
}
