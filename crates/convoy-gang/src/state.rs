//! What the scheduler knows about each PodGroup: its spec, its members and
//! where they are (pending, assumed, bound), and its failed attempts.
//!
//! One [`GangState`] is shared by the scheduler (which feeds it cluster
//! updates and the results of group cycles) and the `GangScheduling`
//! plugin of every profile (which reads it). Every method takes one short
//! lock; the hot path for pods without a group is a single atomic load.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use convoy_api::{GroupKey, PodGroup, PodInfo, PodKey};
use parking_lot::Mutex;

/// Where a member pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not yet assigned.
    Pending,
    /// Assumed on a node by this scheduler (binding in flight or waiting
    /// at Permit).
    Assumed,
    /// Bound (`spec.nodeName` set), by any scheduler.
    Bound,
}

#[derive(Debug, Clone)]
struct Member {
    uid: Arc<str>,
    priority: i32,
    scheduler: Arc<str>,
    place: Place,
}

#[derive(Debug, Default)]
struct Group {
    spec: Option<Arc<PodGroup>>,
    /// Only through `put`, `take` and `move_to`, which keep the tallies.
    members: HashMap<PodKey, Member>,
    /// Members per place (`Place as usize`).
    places: [usize; 3],
    /// Members per `schedulerName`.
    schedulers: BTreeMap<Arc<str>, usize>,
    /// Members per priority.
    priorities: BTreeMap<i32, usize>,
    /// Failed group attempts since the last success.
    failures: u32,
    /// When the group first failed since its last success.
    waiting_since: Option<Instant>,
    /// Whether its pods naming different schedulers was reported.
    mixed_reported: bool,
}

/// Adds `by` (1 or -1) to `key`'s count, dropping it at 0.
fn tally<K: Ord>(counts: &mut BTreeMap<K, usize>, key: K, by: isize) {
    let n = counts.entry(key).or_insert(0);
    *n = n.saturating_add_signed(by);
    counts.retain(|_, n| *n > 0);
}

impl Group {
    /// Counts (`by` = 1) or uncounts (-1) a member in the tallies, so that
    /// a group's status costs the same for 8 members as for 8,000.
    fn count_member(&mut self, m: &Member, by: isize) {
        let place = &mut self.places[m.place as usize];
        *place = place.saturating_add_signed(by);
        tally(&mut self.schedulers, m.scheduler.clone(), by);
        tally(&mut self.priorities, m.priority, by);
    }

    fn put(&mut self, key: PodKey, m: Member) {
        self.count_member(&m, 1);
        if let Some(old) = self.members.insert(key, m) {
            self.count_member(&old, -1);
        }
    }

    fn take(&mut self, key: &PodKey) {
        if let Some(old) = self.members.remove(key) {
            self.count_member(&old, -1);
        }
    }

    fn move_to(&mut self, key: &PodKey, place: Place) {
        let Some(m) = self.members.get_mut(key) else { return };
        let from = std::mem::replace(&mut m.place, place);
        self.places[from as usize] -= 1;
        self.places[place as usize] += 1;
    }

    fn count(&self, place: Place) -> usize {
        self.places[place as usize]
    }

    /// The group's own `spec.priority` when it has one (upstream's API),
    /// else the highest among its members.
    fn priority(&self) -> i32 {
        let members = || self.priorities.last_key_value().map_or(0, |(p, _)| *p);
        self.spec.as_ref().and_then(|s| s.priority).unwrap_or_else(members)
    }

    /// The distinct `schedulerName`s, sorted.
    fn scheduler_names(&self) -> Vec<Arc<str>> {
        self.schedulers.keys().cloned().collect()
    }

    fn has_quorum(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| self.members.len() >= s.min_member as usize)
    }
}

/// A snapshot of one group's state.
#[derive(Debug, Clone)]
pub struct GroupStatus {
    /// The PodGroup object, `None` while it does not exist (yet).
    pub spec: Option<Arc<PodGroup>>,
    /// Member pods that exist and are not finished.
    pub members: usize,
    /// Members not yet assigned.
    pub pending: usize,
    /// Members assumed by this scheduler.
    pub assumed: usize,
    /// Members bound.
    pub bound: usize,
    /// Distinct `schedulerName`s among the members (a group must name one).
    pub schedulers: Vec<Arc<str>>,
    /// The group's priority: its `spec.priority`, else the highest among its members.
    pub priority: i32,
    /// Failed group attempts since the last success.
    pub failures: u32,
    /// When the group first failed since its last success.
    pub waiting_since: Option<Instant>,
}

impl GroupStatus {
    /// Members assumed or bound.
    pub fn placed(&self) -> usize {
        self.assumed + self.bound
    }

    /// `minMember` (1 when the PodGroup does not exist yet).
    pub fn min_member(&self) -> usize {
        self.spec.as_ref().map_or(1, |s| s.min_member as usize)
    }

    /// Whether all-or-nothing applies (the PodGroup exists with a gang
    /// policy).
    pub fn is_gang(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.gang)
    }

    /// Whether at least `minMember` members are placed: later members are
    /// scheduled one by one.
    pub fn satisfied(&self) -> bool {
        self.placed() >= self.min_member()
    }
}

/// The group that is starving: it has waited past the threshold, and pods
/// of lower or equal priority are held back until it is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Starving {
    /// The group.
    pub key: GroupKey,
    /// Its priority.
    pub priority: i32,
    /// How long it has waited since its first failed attempt.
    pub waited: Duration,
}

/// Tunables of the starvation guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StarvationPolicy {
    /// A group that has failed and waited this long has its reservation
    /// plan's nodes held from pods of lower or equal priority.
    pub threshold: Duration,
    /// For at most this long (then the guard lets go, so a group that can
    /// never fit does not stop the cluster).
    pub max_hold: Duration,
    /// Backfill: a pod of lower or equal priority may still use a held
    /// node if its `activeDeadlineSeconds`, plus this allowance for its
    /// start, ends before every pod the plan waits for must be gone
    /// ([`crate::plan::Plan::ready_by`]).
    pub backfill_start: Duration,
}

impl Default for StarvationPolicy {
    fn default() -> Self {
        Self {
            threshold: Duration::from_secs(5),
            max_hold: Duration::from_secs(300),
            backfill_start: Duration::from_secs(2),
        }
    }
}

/// PodGroups and their members, shared between the scheduler and the
/// `GangScheduling` plugin.
#[derive(Debug, Default)]
pub struct GangState {
    groups: Mutex<HashMap<GroupKey, Group>>,
    /// Groups with a failed attempt outstanding (the starvation guard's
    /// fast path reads it without the lock).
    waiting: AtomicUsize,
    /// The starvation guard's tunables (one for the whole scheduler: the
    /// capacity a starving group needs is the cluster's).
    policy: Mutex<StarvationPolicy>,
    /// Pods the starvation guard turned away, to activate when it lets go.
    held: Mutex<Vec<PodKey>>,
    /// Each waiting group's reservation plan, if one could be made. Only
    /// the starving group's is in force; each group keeps its own, so
    /// another group's failed attempt never replaces the starving group's
    /// plan, and a plan changes only when its own group's attempt must.
    reservations: Mutex<HashMap<GroupKey, Reservation>>,
}

/// The nodes held for a starving gang, and the pods it waits for there
/// (see [`crate::plan`]).
#[derive(Debug, Clone)]
pub struct Reservation {
    /// The nodes held: no pod of the group's priority or lower outside it
    /// may take them while the group starves.
    pub nodes: Arc<HashSet<Arc<str>>>,
    /// The pods on them the group waits for; when the last leaves, the
    /// group is tried at once. Pods let onto the held nodes (backfill)
    /// join them.
    pub waits: HashSet<PodKey>,
    /// By when the pods waited for, other than the backfilled ones, are
    /// gone by what they declare ([`crate::plan::Plan::ready_by`]): what
    /// backfill is measured against. Backfilled pods do not count, so one
    /// that started late (and may end after it) does not let the next ones
    /// in later still, which could hold the group off for ever.
    pub ready_by: Option<i128>,
    /// The pods let onto these nodes by backfill, kept while the plan
    /// keeps its nodes.
    pub backfilled: HashSet<PodKey>,
}

/// The hold in force: the starving group's nodes, and by when the pods it
/// waits for there are gone by what they declare.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The nodes held.
    pub nodes: Arc<HashSet<Arc<str>>>,
    /// [`crate::plan::Plan::ready_by`].
    pub ready_by: Option<i128>,
}

impl GangState {
    /// An empty state.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Sets the starvation guard's tunables.
    pub fn set_policy(&self, policy: StarvationPolicy) {
        *self.policy.lock() = policy;
    }

    /// The starvation guard's tunables.
    pub fn policy(&self) -> StarvationPolicy {
        *self.policy.lock()
    }

    /// Sets (or, with `None` for `group`, clears) `group`'s reservation
    /// plan.
    pub fn set_reservation(&self, group: &GroupKey, plan: Option<crate::plan::Plan>) {
        let mut r = self.reservations.lock();
        match plan {
            Some(plan) => {
                let nodes: HashSet<Arc<str>> = plan.nodes.iter().cloned().collect();
                let waits: HashSet<PodKey> = plan.waits.iter().cloned().collect();
                let backfilled: HashSet<PodKey> = match r.get(group) {
                    Some(old) if *old.nodes == nodes => {
                        old.backfilled.iter().filter(|p| waits.contains(*p)).cloned().collect()
                    }
                    _ => HashSet::new(),
                };
                let ready_by = plan.ready_by(&backfilled);
                r.insert(
                    group.clone(),
                    Reservation { nodes: Arc::new(nodes), waits, ready_by, backfilled },
                );
            }
            None => {
                r.remove(group);
            }
        }
    }

    /// The nodes of `group`'s reservation plan (empty if it has none).
    pub fn reserved_for(&self, group: &GroupKey) -> Arc<HashSet<Arc<str>>> {
        self.reservations.lock().get(group).map(|r| r.nodes.clone()).unwrap_or_default()
    }

    /// The reservation in force now: the starving group's plan, if it has
    /// one, with the group's priority and wait.
    pub fn reservation_in_force(&self, now: Instant) -> Option<(Starving, Hold)> {
        let s = self.starving(now)?;
        let hold = self
            .reservations
            .lock()
            .get(&s.key)
            .map(|r| Hold { nodes: r.nodes.clone(), ready_by: r.ready_by })?;
        Some((s, hold))
    }

    /// A pod was let onto a node held for `group` (backfill): the group
    /// waits for it too, so that its leaving, if it is the last, tries the
    /// group at once.
    pub fn backfilled(&self, group: &GroupKey, pod: &PodKey) {
        if let Some(r) = self.reservations.lock().get_mut(group) {
            r.waits.insert(pod.clone());
            r.backfilled.insert(pod.clone());
        }
    }

    /// A backfilled pod's placement was undone (Unreserve).
    pub fn backfill_undone(&self, group: &GroupKey, pod: &PodKey) {
        if let Some(r) = self.reservations.lock().get_mut(group) {
            r.waits.remove(pod);
            r.backfilled.remove(pod);
        }
    }

    /// A pod left (deleted or finished): the groups whose plans waited for
    /// it last, if this was the last, to try at once.
    pub fn waited_pod_left(&self, pod: &PodKey) -> Vec<GroupKey> {
        let mut r = self.reservations.lock();
        r.iter_mut()
            .filter_map(|(group, r)| {
                r.backfilled.remove(pod);
                (r.waits.remove(pod) && r.waits.is_empty()).then(|| group.clone())
            })
            .collect()
    }

    /// Remembers a pod the starvation guard turned away.
    pub fn hold(&self, pod: &PodKey) {
        self.held.lock().push(pod.clone());
    }

    /// The pods turned away, if the guard has let go (no group is starving
    /// now): the caller activates them. Empty otherwise.
    pub fn release_held(&self, now: Instant) -> Vec<PodKey> {
        if self.held.lock().is_empty() || self.starving(now).is_some() {
            return Vec::new();
        }
        std::mem::take(&mut *self.held.lock())
    }

    /// A PodGroup appeared or changed. Returns the pending members to
    /// activate when the group now has its quorum.
    pub fn apply_group(&self, pg: Arc<PodGroup>) -> Vec<PodKey> {
        let mut groups = self.groups.lock();
        let g = groups.entry(pg.key.clone()).or_default();
        g.spec = Some(pg);
        if g.has_quorum() { pending_keys(g) } else { Vec::new() }
    }

    /// A PodGroup was deleted; its members stay known (they wait for it to
    /// come back, as upstream).
    pub fn delete_group(&self, key: &GroupKey) {
        self.set_reservation(key, None);
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get_mut(key) {
            g.spec = None;
            if g.waiting_since.take().is_some() {
                self.waiting.fetch_sub(1, Ordering::AcqRel);
            }
            if g.members.is_empty() {
                groups.remove(key);
            }
        }
    }

    /// A pod of a group was added or changed (assigned or not). Returns the
    /// group's pending members to activate when this pod completed the
    /// quorum; nothing for pods without a group.
    pub fn pod_upsert(&self, pod: &PodInfo) -> Vec<PodKey> {
        let Some(key) = &pod.group else { return Vec::new() };
        let mut groups = self.groups.lock();
        let g = groups.entry(key.clone()).or_default();
        let had_quorum = g.has_quorum();
        let place = if pod.node_name().is_some() {
            Place::Bound
        } else {
            match g.members.get(&pod.key) {
                Some(m) if m.place == Place::Assumed => Place::Assumed,
                _ => Place::Pending,
            }
        };
        g.put(
            pod.key.clone(),
            Member {
                uid: pod.uid.clone(),
                priority: pod.priority,
                scheduler: Arc::from(pod.scheduler_name()),
                place,
            },
        );
        if !had_quorum && g.has_quorum() { pending_keys(g) } else { Vec::new() }
    }

    /// A pod of a group was deleted or finished.
    pub fn pod_removed(&self, pod: &PodInfo) {
        let Some(key) = &pod.group else { return };
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get_mut(key) {
            g.take(&pod.key);
            if g.members.is_empty() && g.spec.is_none() {
                groups.remove(key);
            }
        }
    }

    /// The scheduler assumed (`true`) or forgot (`false`) a member.
    pub fn set_assumed(&self, pod: &PodInfo, assumed: bool) {
        let Some(key) = &pod.group else { return };
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(key) else { return };
        let Some(m) = g.members.get(&pod.key) else { return };
        match (m.place, assumed) {
            (Place::Pending, true) => g.move_to(&pod.key, Place::Assumed),
            (Place::Assumed, false) => g.move_to(&pod.key, Place::Pending),
            _ => {}
        }
    }

    /// The state of one group (`None` if nothing is known of it).
    pub fn status(&self, key: &GroupKey) -> Option<GroupStatus> {
        let groups = self.groups.lock();
        let g = groups.get(key)?;
        let schedulers = g.scheduler_names();
        Some(GroupStatus {
            spec: g.spec.clone(),
            members: g.members.len(),
            pending: g.count(Place::Pending),
            assumed: g.count(Place::Assumed),
            bound: g.count(Place::Bound),
            schedulers,
            priority: g.priority(),
            failures: g.failures,
            waiting_since: g.waiting_since,
        })
    }

    /// The gang group's priority (its `spec.priority`, else the highest among its members), if `key`
    /// names a gang group; see [`convoy_api::PreemptionGroups`].
    pub fn gang_priority(&self, key: &GroupKey) -> Option<i32> {
        let groups = self.groups.lock();
        let g = groups.get(key)?;
        g.spec.as_ref().is_some_and(|s| s.gang).then(|| g.priority())
    }

    /// The distinct `schedulerName`s of the group's pods, once, the first
    /// time there is more than one (the group is then rejected and this
    /// is reported); `None` otherwise.
    pub fn mixed_schedulers_to_report(&self, key: &GroupKey) -> Option<Vec<Arc<str>>> {
        let mut groups = self.groups.lock();
        let g = groups.get_mut(key)?;
        if g.schedulers.len() < 2 {
            g.mixed_reported = false;
            return None;
        }
        if std::mem::replace(&mut g.mixed_reported, true) {
            return None;
        }
        Some(g.scheduler_names())
    }

    /// The group's members not yet assigned, sorted by name.
    pub fn pending_members(&self, key: &GroupKey) -> Vec<PodKey> {
        self.groups.lock().get(key).map(pending_keys).unwrap_or_default()
    }

    /// UIDs of the group's assumed members (those that may be waiting at
    /// Permit).
    pub fn assumed_uids(&self, key: &GroupKey) -> Vec<Arc<str>> {
        let groups = self.groups.lock();
        let Some(g) = groups.get(key) else { return Vec::new() };
        g.members.values().filter(|m| m.place == Place::Assumed).map(|m| m.uid.clone()).collect()
    }

    /// Records the result of a group attempt; returns the failures so far
    /// (0 after a success). A failed group starts waiting for the
    /// starvation guard only if `may_starve` (it could fit an otherwise
    /// empty cluster).
    pub fn record_attempt(
        &self,
        key: &GroupKey,
        placed: bool,
        may_starve: bool,
        now: Instant,
    ) -> u32 {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(key) else { return 0 };
        let was_waiting = g.waiting_since.is_some();
        let failures = if placed {
            g.failures = 0;
            g.waiting_since = None;
            self.set_reservation(key, None);
            0
        } else {
            g.failures += 1;
            if may_starve {
                g.waiting_since.get_or_insert(now);
            } else {
                g.waiting_since = None;
            }
            g.failures
        };
        match (was_waiting, g.waiting_since.is_some()) {
            (false, true) => _ = self.waiting.fetch_add(1, Ordering::AcqRel),
            (true, false) => _ = self.waiting.fetch_sub(1, Ordering::AcqRel),
            _ => {}
        }
        failures
    }

    /// The group that holds back other pods now, if any: among gang groups
    /// not yet placed, with pods pending, whose first failure is at least the policy's
    /// `threshold` ago and less than `threshold + max_hold` ago, the one of highest priority,
    /// then the one waiting longest, then by key.
    pub fn starving(&self, now: Instant) -> Option<Starving> {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        let policy = self.policy();
        let groups = self.groups.lock();
        let mut best: Option<(i32, Duration, &GroupKey)> = None;
        for (key, g) in groups.iter() {
            let Some(since) = g.waiting_since else { continue };
            let waited = now.saturating_duration_since(since);
            if waited < policy.threshold || waited >= policy.threshold + policy.max_hold {
                continue;
            }
            if !g.spec.as_ref().is_some_and(|s| s.gang) {
                continue;
            }
            let placed = g.count(Place::Assumed) + g.count(Place::Bound);
            if g.spec.as_ref().is_some_and(|s| placed >= s.min_member as usize) {
                continue;
            }
            // A group whose pending pods are all gone (deleted, its
            // PodGroup left behind) waits for nothing.
            if g.count(Place::Pending) == 0 {
                continue;
            }
            let cand = (g.priority(), waited, key);
            let better = match &best {
                None => true,
                Some(b) => {
                    (cand.0, cand.1, std::cmp::Reverse(cand.2)) > (b.0, b.1, std::cmp::Reverse(b.2))
                }
            };
            if better {
                best = Some(cand);
            }
        }
        best.map(|(priority, waited, key)| Starving { key: key.clone(), priority, waited })
    }

    /// Number of groups known.
    pub fn len(&self) -> usize {
        self.groups.lock().len()
    }

    /// Whether no group is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn pending_keys(g: &Group) -> Vec<PodKey> {
    let mut keys: Vec<PodKey> = g
        .members
        .iter()
        .filter(|(_, m)| m.place == Place::Pending)
        .map(|(k, _)| k.clone())
        .collect();
    keys.sort();
    keys
}

impl convoy_api::PreemptionGroups for GangState {
    fn gang_priority(&self, key: &GroupKey) -> Option<i32> {
        GangState::gang_priority(self, key)
    }
}
