//! The event handlers: how each [`ClusterUpdate`] from the adapter changes
//! the cache, the gang state, the nominations and the queue, as upstream's
//! `eventhandlers.go`. [`Scheduler::handle_update`] is the entry point; one
//! function per kind of pod update (added, updated, deleted) follows it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use convoy_api::{ActionType, ClusterEvent, ClusterUpdate, EventObject, EventResource, PodInfo};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::scheduler::Scheduler;

impl Scheduler {
    /// Applies one cluster update to the cache and the queue, as upstream's
    /// event handlers do.
    pub fn handle_update(&self, update: ClusterUpdate) {
        match update {
            ClusterUpdate::NodeAdded(node) => {
                self.cache.add_node(node.clone());
                self.move_all(
                    EventResource::Node,
                    ActionType::ADD,
                    None,
                    Some(EventObject::Node(node)),
                );
            }
            ClusterUpdate::NodeUpdated { old, new } => {
                let action = node_update_action(&old, &new);
                let name = new.metadata.name.as_deref().unwrap_or("");
                let shrunk = action.0 & ActionType::UPDATE_NODE_ALLOCATABLE.0 != 0;
                let before = shrunk.then(|| self.cache.node_info(name)).flatten();
                self.cache.update_node(self.holds.cache_view(new.clone()));
                if shrunk && self.leading.load(Ordering::Acquire) {
                    self.check_shortfall(before, name);
                    self.check_device_views(name);
                }
                if action.0 != 0 {
                    self.move_all(
                        EventResource::Node,
                        action,
                        Some(EventObject::Node(old)),
                        Some(EventObject::Node(new)),
                    );
                }
            }
            ClusterUpdate::NodeDeleted(node) => {
                self.holds.node_deleted(node.metadata.name.as_deref().unwrap_or(""));
                log_cache_error(
                    self.cache.remove_node(node.metadata.name.as_deref().unwrap_or("")),
                );
            }
            ClusterUpdate::PodAdded(pod) => self.pod_added(pod),
            ClusterUpdate::PodUpdated { old, new } => self.pod_updated(old, new),
            ClusterUpdate::PodDeleted(pod) => self.pod_deleted(pod),
            ClusterUpdate::PodGroupApplied(pg) => {
                let quorum = self.gang.apply_group(pg);
                self.queue.activate(&quorum);
            }
            ClusterUpdate::PodGroupDeleted(key) => self.gang.delete_group(&key),
            ClusterUpdate::ObjectApplied(obj) => {
                let old = self.objects.apply(&obj);
                self.slice_changed(&obj);
                // The volume kinds can make pods the volume plugins
                // rejected schedulable (a claim created or bound, a CSINode
                // limit raised); deletions cannot, as upstream.
                if let Some(resource) = EventResource::of_object(&obj) {
                    let action = if old.is_some() { ActionType::UPDATE } else { ActionType::ADD };
                    self.move_all(
                        resource,
                        action,
                        old.map(EventObject::Object),
                        Some(EventObject::Object(obj)),
                    );
                }
            }
            ClusterUpdate::ObjectDeleted(obj) => {
                self.objects.delete(&obj);
                self.slice_changed(&obj);
                // A DeviceTaintRule gone takes its taints off devices
                // (upstream hears of it as an update of the slices it
                // patched).
                if matches!(obj, convoy_api::ClusterObject::DeviceTaintRule(_)) {
                    self.move_all(
                        EventResource::DeviceTaintRule,
                        ActionType::DELETE,
                        Some(EventObject::Object(obj)),
                        None,
                    );
                }
            }
            ClusterUpdate::CustomApplied(obj) => {
                let old = self.objects.custom().apply(obj.clone());
                let action = if old.is_some() { ActionType::UPDATE } else { ActionType::ADD };
                self.move_all(
                    EventResource::Custom(obj.api),
                    action,
                    old.map(EventObject::Custom),
                    Some(EventObject::Custom(obj)),
                );
            }
            ClusterUpdate::CustomDeleted(obj) => {
                if let Some(old) = self.objects.custom().delete(&obj) {
                    self.move_all(
                        EventResource::Custom(obj.api),
                        ActionType::DELETE,
                        Some(EventObject::Custom(old)),
                        None,
                    );
                }
            }
            ClusterUpdate::ApisServed(served) => {
                // A pod refused for an API the server did not serve may be
                // placeable now (a CRD installed, the server upgraded); such
                // changes are rare, so every pending pod is tried again.
                if self.objects.set_served_apis(served) {
                    self.move_all(EventResource::WildCard, ActionType::ALL, None, None);
                }
            }
            ClusterUpdate::Synced => {
                if !self.synced.swap(true, Ordering::AcqRel) {
                    tracing::info!(
                        nodes = self.cache.node_count(),
                        pods = self.cache.pod_count(),
                        "initial lists synced: scheduling may start"
                    );
                }
            }
        }
    }

    /// A group whose pods name different schedulers is rejected (its
    /// members stay gated, see GangScheduling's PreEnqueue); say so once,
    /// as a group decision (the PodGroup's Event), on behalf of the first
    /// of those schedulers that is one of our profiles.
    fn report_mixed_schedulers(&self, pod: &PodInfo) {
        let Some(key) = &pod.group else { return };
        let Some(names) = self.gang.mixed_schedulers_to_report(key) else { return };
        let Some(profile) = names.iter().find(|n| self.gang_args.contains_key(&***n)) else {
            return;
        };
        let Some(st) = self.gang.status(key) else { return };
        let list: Vec<&str> = names.iter().map(|n| &**n).collect();
        self.sink.record_group(&crate::decision::GroupDecision {
            group: key.clone(),
            uid: st.spec.as_ref().map(|s| s.uid.clone()).filter(|u| !u.is_empty()),
            profile: profile.clone(),
            outcome: crate::decision::GroupOutcome::Unschedulable {
                message: format!(
                    "pod group {key} is rejected: its pods name different schedulers ({})",
                    list.join(", ")
                ),
            },
            placed: 0,
            members: st.members,
            placed_before: st.placed(),
            min_member: st.min_member(),
            nodes: Default::default(),
            failures_before: st.failures,
            barrier: false,
            latency: std::time::Duration::ZERO,
        });
    }

    /// A pod left (deleted or finished): its group forgets it, and each
    /// group whose reservation plan waited for it last is tried at once (its members' backoff would otherwise delay it).
    fn gang_pod_left(&self, pod: &PodInfo) {
        self.gang.pod_removed(pod);
        for group in self.gang.waited_pod_left(&pod.key) {
            tracing::debug!(%group, "the pods its reservation plan waited for are gone: trying the group");
            let members = self.gang.pending_members(&group);
            self.queue.activate(&members);
        }
    }

    fn move_all(
        &self,
        resource: EventResource,
        action: ActionType,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        self.queue.move_all_to_active_or_backoff(
            ClusterEvent::new(resource, action),
            old.as_ref(),
            new.as_ref(),
        );
    }

    fn pod_info(&self, pod: Arc<Pod>) -> Option<Arc<PodInfo>> {
        match PodInfo::new(pod) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a pod the scheduler cannot read");
                None
            }
        }
    }

    /// A pending pod of ours that cannot be read (the API server would
    /// have refused it, or a newer client wrote what this version cannot
    /// evaluate): it stays pending with the field named (decision, Event,
    /// condition) and a warning, and blocks nothing.
    fn refuse(&self, e: &convoy_api::InvalidPod) {
        tracing::warn!(pod = %e.pod, error = %e.message, "refusing a pod the scheduler cannot read");
        self.sink.record(&crate::decision::invalid_pod_decision(e));
    }

    fn pod_added(&self, pod: Arc<Pod>) {
        let assigned =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        // Another scheduler's pod counts as that scheduler at work, except
        // one the initial lists find already bound: that binding is old
        // news, and counting the whole cluster's pods would make every
        // binding of the first 10 s read its node from the API server.
        let listed_bound = assigned && !self.synced.load(Ordering::Acquire);
        if !self.is_ours(&pod)
            && !is_terminal(&pod)
            && !listed_bound
            && let Some(uid) = pod.metadata.uid.as_deref()
        {
            self.foreign_pod_seen(&Arc::from(uid), !assigned);
        }
        if assigned {
            let Some(info) = self.pod_info(pod.clone()) else { return };
            if info.is_terminal() {
                self.gang_pod_left(&info);
                return;
            }
            // A bound member may complete its group's quorum: the pending
            // members PreEnqueue held (they were listed before it) go.
            let quorum = self.gang.pod_upsert(&info);
            log_cache_error(self.cache.add_pod(info));
            if !quorum.is_empty() {
                self.queue.activate(&quorum);
            }
            self.move_all(
                EventResource::AssignedPod,
                ActionType::ADD,
                None,
                Some(EventObject::Pod(pod)),
            );
        } else if !self.is_ours(&pod) {
            // Another scheduler's pending pod still counts in its group
            // (a group whose pods name different schedulers is rejected),
            // and its nomination keeps room free as ours do.
            let member = !is_terminal(&pod) && convoy_api::pod_group::group_key_of(&pod).is_some();
            let nominated = !is_terminal(&pod) && nomination(&pod).is_some();
            if let Some(info) = (member || nominated).then(|| self.pod_info(pod)).flatten() {
                if nominated {
                    self.queue.nominator().pod_added(&info);
                }
                if member {
                    self.gang.pod_upsert(&info);
                    self.report_mixed_schedulers(&info);
                }
            }
        } else if !is_terminal(&pod) {
            match PodInfo::new(pod) {
                Ok(info) => {
                    let info = Arc::new(info);
                    // Members join their group first, so PreEnqueue counts them.
                    let quorum = self.gang.pod_upsert(&info);
                    self.report_mixed_schedulers(&info);
                    self.queue.add_and_activate(info, &quorum);
                }
                Err(e) => self.refuse(&e),
            }
        }
    }

    fn pod_updated(&self, old: Arc<Pod>, new: Arc<Pod>) {
        let was_assigned =
            old.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        let assigned =
            new.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        match (was_assigned, assigned) {
            (false, true) => {
                // Bound (by us or another scheduler): no longer pending.
                if let Some(info) = self.pod_info(old.clone()) {
                    self.queue.delete(&info);
                }
                self.pod_added(new);
            }
            (true, true) => {
                let (Some(o), Some(n)) = (self.pod_info(old.clone()), self.pod_info(new.clone()))
                else {
                    return;
                };
                if n.is_terminal() {
                    self.gang_pod_left(&n);
                } else {
                    self.gang.pod_upsert(&n);
                }
                if let Some((reason, message)) = crate::conflicts::rejection_of(&old, &new)
                    && self.is_ours(&new)
                {
                    self.kubelet_rejected(
                        &n,
                        reason,
                        message,
                        self.leading.load(Ordering::Acquire),
                    );
                }
                let terminating = new.metadata.deletion_timestamp.is_some().then(|| n.uid.clone());
                log_cache_error(self.cache.update_pod(&o, n));
                // After the cache: `spawn_preemption` reads it (see there).
                if let Some(uid) = terminating {
                    self.victim_observed(&uid);
                }
                self.move_all(
                    EventResource::AssignedPod,
                    ActionType::UPDATE,
                    Some(EventObject::Pod(old)),
                    Some(EventObject::Pod(new)),
                );
            }
            _ => {
                if !self.is_ours(&new) {
                    self.others_nomination(&old, new);
                    return;
                }
                let o = PodInfo::new(old).ok().map(Arc::new);
                let n = match PodInfo::new(new.clone()) {
                    Ok(n) => Arc::new(n),
                    Err(e) => {
                        // Refused when it was added or became unreadable;
                        // its later updates (its refusal's own condition
                        // among them) change nothing.
                        if let Some(o) = o {
                            self.gang_pod_left(&o);
                            self.queue.delete(&o);
                            self.refuse(&e);
                        }
                        return;
                    }
                };
                let Some(o) = o else {
                    // Readable now: as if just created.
                    self.pod_added(new);
                    return;
                };
                if n.is_terminal() {
                    self.gang_pod_left(&n);
                    self.queue.delete(&o);
                } else {
                    let quorum = self.gang.pod_upsert(&n);
                    self.queue.update_and_activate(n, &quorum);
                }
            }
        }
    }

    /// A ResourceSlice of a node changed: its device views are compared.
    fn slice_changed(&self, obj: &convoy_api::ClusterObject) {
        if let convoy_api::ClusterObject::ResourceSlice(s) = obj
            && let Some(node) = s.spec.node_name.as_deref()
            && self.leading.load(Ordering::Acquire)
        {
            self.check_device_views(node);
        }
    }

    /// Another scheduler's pending pod changed: its nomination (set,
    /// moved, cleared, or ended with the pod) follows.
    fn others_nomination(&self, old: &Pod, new: Arc<Pod>) {
        if nomination(old).is_none() && nomination(&new).is_none() {
            return;
        }
        let Some(info) = self.pod_info(new.clone()) else { return };
        if info.is_terminal() {
            self.queue.nominator().delete(&info);
        } else {
            self.queue.nominator().pod_updated(&info);
        }
        if nomination(old).is_some() && nomination(old) != nomination(&new) {
            self.nomination_released(old);
        }
    }

    /// A pod's nomination ended without the pod taking the room (it was
    /// deleted, or its nomination cleared or moved): the pods that room
    /// turned away are told, as upstream tells them of a nominated pod's
    /// deletion (an assigned pod's deletion).
    fn nomination_released(&self, pod: &Pod) {
        self.move_all(
            EventResource::AssignedPod,
            ActionType::DELETE,
            Some(EventObject::Pod(Arc::new(pod.clone()))),
            None,
        );
    }

    /// A pod seen terminating or gone: if it was the last victim a
    /// preemption waited for, its preemptors are released.
    fn victim_observed(&self, uid: &str) {
        let ready = self.running_preemptions.observed(uid);
        if !ready.is_empty() {
            self.queue.activate(ready.iter());
        }
    }

    fn pod_deleted(&self, pod: Arc<Pod>) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.foreign_pod_gone(uid);
        }
        let Some(info) = self.pod_info(pod.clone()) else { return };
        self.gang_pod_left(&info);
        let assigned = info.node_name().is_some();
        if !assigned {
            self.queue.delete(&info);
            let waiting =
                convoy_api::WaitingPods::reject(&*self.waiting_pods, &info.uid, "", "pod deleted");
            if !waiting && nomination(&pod).is_some() {
                self.nomination_released(&pod);
            }
        }
        // An assigned pod, or one deleted while its binding was in flight
        // (assumed): give back what it holds, and tell the pods it blocked.
        if assigned || self.cache.is_assumed(&info.uid) {
            log_cache_error(self.cache.remove_pod(&info));
            // After the cache: `spawn_preemption` reads it (see there).
            self.victim_observed(&info.uid);
            self.move_all(
                EventResource::AssignedPod,
                ActionType::DELETE,
                Some(EventObject::Pod(pod)),
                None,
            );
        }
    }
}

/// Cache errors on the event path mean the event stream and the cache
/// disagree (a relist, a missed event): log and go on, never crash.
fn log_cache_error(r: convoy_cache::Result<()>) {
    if let Err(e) = r {
        tracing::warn!(error = %e, "cache update");
    }
}

/// A pod's `status.nominatedNodeName`, when set.
pub(crate) fn nomination(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.nominated_node_name.as_deref().filter(|n| !n.is_empty())
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Which node-update actions a change carries (upstream `nodeSchedulingPropertiesChange`).
pub fn node_update_action(old: &Node, new: &Node) -> ActionType {
    let mut a = ActionType(0);
    let alloc = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    if alloc(old) != alloc(new) {
        a |= ActionType::UPDATE_NODE_ALLOCATABLE;
    }
    if old.metadata.labels != new.metadata.labels {
        a |= ActionType::UPDATE_NODE_LABEL;
    }
    let taints =
        |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable)).unwrap_or_default();
    if taints(old) != taints(new) {
        a |= ActionType::UPDATE_NODE_TAINT;
    }
    let conds = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect::<Vec<_>>())
    };
    if conds(old) != conds(new) {
        a |= ActionType::UPDATE_NODE_CONDITION;
    }
    if old.metadata.annotations != new.metadata.annotations {
        a |= ActionType::UPDATE_NODE_ANNOTATION;
    }
    a
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use convoy_api::{ClusterUpdate, FakeClock};
    use convoy_embedded::{EmbeddedCluster, Objects};

    use crate::decision::LogSink;
    use crate::scheduler::{Scheduler, SchedulerOptions};

    fn scheduler() -> Arc<Scheduler> {
        let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
        Scheduler::new(SchedulerOptions::embedded(
            crate::load_config(None).unwrap(),
            &cluster,
            Arc::new(FakeClock::new()),
            Arc::new(LogSink),
        ))
        .unwrap()
    }

    fn foreign(name: &str, node: Option<&str>) -> ClusterUpdate {
        let pod = PodBuilder::new(name).uid(name).scheduler("default-scheduler").cpu("1");
        let pod = match node {
            Some(n) => pod.node(n),
            None => pod,
        };
        ClusterUpdate::PodAdded(Arc::new(pod.build()))
    }

    /// The initial lists' bound pods of other schedulers are old bindings,
    /// not a scheduler at work: counting them made every binding of the
    /// first 10 s after a cold start read its node's pods from the API
    /// server (at 100,000 pods, seconds of slow bindings). A pending one
    /// listed, or a pod bound once the lists are synced, still counts.
    #[test]
    fn bound_pods_of_the_initial_lists_are_not_another_scheduler_at_work() {
        let s = scheduler();
        s.handle_update(ClusterUpdate::NodeAdded(Arc::new(NodeBuilder::new("n1").build())));
        s.handle_update(foreign("old", Some("n1")));
        assert!(!s.contended(), "a listed, bound pod is not activity");
        s.handle_update(ClusterUpdate::Synced);
        assert!(!s.contended());
        s.handle_update(foreign("new", Some("n1")));
        assert!(s.contended(), "a pod bound after the lists is activity");

        let s = scheduler();
        s.handle_update(foreign("waiting", None));
        assert!(s.contended(), "another scheduler's listed pending pod is activity");
    }
}
