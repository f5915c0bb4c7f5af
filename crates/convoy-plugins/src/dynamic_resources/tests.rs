//! The plugin's phases against a store of claims, slices and classes and a
//! binder that writes claims back into the store (as the API server and
//! the watch would), after upstream `dynamicresources_test.go` (v1.37.2):
//! the messages, the in-flight allocations, PreBind's writes, Unreserve and
//! PostFilter's deallocation.

use std::sync::Mutex as StdMutex;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{BindError, ClusterObject, Code, NodeList};
use k8s_openapi::api::core::v1::PodResourceClaim;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::{Value, json};

use super::*;
use convoy_objects::ClusterObjects;

const DRIVER: &str = "gpu.example.com";
const CLASS: &str = "gpu";
const NS: &str = "ns";

fn obj<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn class() -> ClusterObject {
    ClusterObject::DeviceClass(obj(json!({
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}
    })))
}

/// A node-local slice of `devices` devices.
fn slice(node: &str, devices: usize) -> ClusterObject {
    let devices: Vec<Value> = (0..devices).map(|i| json!({"name": format!("gpu-{i}")})).collect();
    ClusterObject::ResourceSlice(obj(json!({
        "metadata": {"name": format!("{node}-slice")},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    })))
}

/// A claim for `count` devices of the class; `owner`: the UID of the pod
/// that controls it (a template's claim).
fn claim(name: &str, count: i64, owner: Option<&str>) -> Value {
    let mut v = json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": [
            {"name": "req-0", "exactly": {"deviceClassName": CLASS, "count": count}}
        ]}}
    });
    if let Some(uid) = owner {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": "p", "uid": uid, "controller": true}]);
    }
    v
}

fn claim_obj(v: Value) -> ClusterObject {
    ClusterObject::ResourceClaim(obj(v))
}

fn node(name: &str) -> Arc<NodeInfo> {
    Arc::new(NodeInfo::new(Arc::new(NodeBuilder::new(name).cpu("8").build())))
}

/// A pod using the claim `name` by name.
fn pod(name: &str, uid: &str, claim: &str) -> Arc<PodInfo> {
    let entry = PodResourceClaim {
        name: "gpu".into(),
        resource_claim_name: Some(claim.into()),
        ..Default::default()
    };
    PodBuilder::new(name)
        .namespace(NS)
        .uid(uid)
        .with_spec(|s| s.resource_claims = Some(vec![entry]))
        .info()
}

/// A pod whose entry comes from a template, with the generated claim's
/// name in its status (`None`: not created yet).
fn template_pod(uid: &str, generated: Option<&str>) -> Arc<PodInfo> {
    let entry = PodResourceClaim {
        name: "gpu".into(),
        resource_claim_template_name: Some("t".into()),
        ..Default::default()
    };
    let status = generated.map(|c| k8s_openapi::api::core::v1::PodResourceClaimStatus {
        name: "gpu".into(),
        resource_claim_name: Some(c.into()),
    });
    PodBuilder::new("p")
        .namespace(NS)
        .uid(uid)
        .with_spec(|s| s.resource_claims = Some(vec![entry]))
        .with_status(|s| s.resource_claim_statuses = status.map(|s| vec![s]))
        .info()
}

/// A binder that applies claim writes to the store at once (the API
/// server and the watch in one), with upstream's refusals.
struct StoreBinder {
    objects: Arc<ClusterObjects>,
    writes: StdMutex<Vec<String>>,
}

impl Binder for StoreBinder {
    fn bind(&self, _: Arc<PodInfo>, _: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn write_claim(
        &self,
        write: ClaimWrite,
    ) -> BoxFuture<'static, Result<Arc<ResourceClaim>, BindError>> {
        let key = write.claim_key();
        let (ns, name) = key.split_once('/').unwrap();
        let current = self.objects.resource_claim(ns, name);
        let result = match (write, current) {
            (_, None) => Err(BindError::Failed(format!("claim {key} got deleted in the meantime"))),
            (ClaimWrite::Reserve { allocation, pod_name, pod_uid, .. }, Some(c)) => {
                let mut c = (*c).clone();
                let status = c.status.get_or_insert_with(Default::default);
                if allocation.is_some() && status.allocation.is_some() {
                    return Box::pin(std::future::ready(Err(BindError::Failed(format!(
                        "claim {key} got allocated elsewhere in the meantime"
                    )))));
                }
                if let Some(a) = allocation {
                    status.allocation = Some(a);
                }
                status.reserved_for.get_or_insert_with(Vec::new).push(
                    k8s_openapi::api::resource::v1::ResourceClaimConsumerReference {
                        resource: "pods".into(),
                        name: pod_name.clone(),
                        uid: pod_uid,
                        api_group: None,
                    },
                );
                self.writes.lock().unwrap().push(format!("reserve {key} for {pod_name}"));
                Ok(c)
            }
            (ClaimWrite::Unreserve { pod_uid, .. }, Some(c)) => {
                let mut c = (*c).clone();
                if let Some(r) = c.status.as_mut().and_then(|s| s.reserved_for.as_mut()) {
                    r.retain(|r| r.uid != pod_uid);
                }
                self.writes.lock().unwrap().push(format!("unreserve {key}"));
                Ok(c)
            }
            (ClaimWrite::Deallocate { .. }, Some(c)) => {
                let mut c = (*c).clone();
                c.status = None;
                self.writes.lock().unwrap().push(format!("deallocate {key}"));
                Ok(c)
            }
        };
        let result = result.map(|c| {
            let c = Arc::new(c);
            self.objects.apply(&ClusterObject::ResourceClaim(c.clone()));
            c
        });
        Box::pin(std::future::ready(result))
    }
}

struct Fixture {
    objects: Arc<ClusterObjects>,
    binder: Arc<StoreBinder>,
    plugin: DynamicResources,
    nodes: Vec<Arc<NodeInfo>>,
}

/// Nodes `n0` (4 devices) and `n1` (2 devices) and the class; `claims`
/// in the store.
fn fixture(claims: Vec<Value>) -> Fixture {
    let objects = Arc::new(ClusterObjects::new());
    for o in [class(), slice("n0", 4), slice("n1", 2)] {
        objects.apply(&o);
    }
    for c in claims {
        objects.apply(&claim_obj(c));
    }
    let binder = Arc::new(StoreBinder { objects: objects.clone(), writes: StdMutex::default() });
    let plugin =
        DynamicResources::new(None, objects.clone(), binder.clone() as Arc<dyn Binder>).unwrap();
    Fixture { objects, binder, plugin, nodes: vec![node("n0"), node("n1")] }
}

impl Fixture {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo) -> Status {
        self.plugin
            .pre_filter(state, pod, &NodeList::of(self.nodes.iter().map(|n| (**n).clone())))
            .1
    }

    /// Filter's verdict per node, as `name: message` ("ok" for success).
    fn filter(&self, state: &CycleState, pod: &PodInfo) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let s = self.plugin.filter(state, pod, n);
                let verdict = if s.is_success() { "ok".to_string() } else { s.message() };
                format!("{}: {verdict}", n.name())
            })
            .collect()
    }

    fn run_pre_bind(&self, state: CycleState, pod: Arc<PodInfo>, node: &str) -> Status {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(self.plugin.pre_bind(Arc::new(state), pod, Arc::from(node)))
    }
}

fn results_of(c: &ResourceClaim) -> Vec<String> {
    let alloc = allocation_of(c).expect("allocated");
    alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| format!("{}/{}/{}", r.pool, r.device, r.request))
        .collect()
}

#[test]
fn pre_enqueue_waits_for_the_pods_claims() {
    let f =
        fixture(vec![claim("mine", 1, Some("uid-p")), claim("theirs", 1, Some("uid-other")), {
            let mut c = claim("going", 1, None);
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            c
        }]);
    let check = |pod: &PodInfo| {
        let s = f.plugin.pre_enqueue(pod);
        if s.is_success() { "ok".to_string() } else { s.message() }
    };
    assert_eq!(check(&template_pod("uid-p", None)), "pod \"ns/p\": ResourceClaim not created yet");
    assert_eq!(check(&template_pod("uid-p", Some("mine"))), "ok");
    assert_eq!(
        check(&template_pod("uid-p", Some("theirs"))),
        "ResourceClaim ns/theirs was not created for Pod ns/p (Pod is not owner)"
    );
    assert_eq!(check(&pod("q", "uid-q", "going")), "resourceclaim \"going\" is being deleted");
    assert_eq!(
        check(&pod("q", "uid-q", "absent")),
        "resourceclaim.resource.k8s.io \"absent\" not found"
    );
    assert_eq!(check(&PodBuilder::new("plain").info()), "ok");
}

#[test]
fn pre_filter_checks_classes_and_skips_pods_without_claims() {
    let mut bad = claim("c", 1, None);
    bad["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = json!("missing");
    let f = fixture(vec![bad]);
    let mut state = CycleState::new();
    let s = f.pre_filter(&mut state, &pod("p", "uid-p", "c"));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "request req-0: device class missing does not exist");
    let s = f.pre_filter(&mut CycleState::new(), &PodBuilder::new("plain").info());
    assert!(s.is_skip());
}

#[test]
fn allocates_reserves_binds_and_counts_the_devices_as_taken() {
    let f = fixture(vec![claim("big", 3, None), claim("small", 2, None), claim("more", 2, None)]);
    // Three devices fit n0 only.
    let p = pod("p", "uid-p", "big");
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    assert_eq!(f.filter(&state, &p), ["n0: ok", "n1: cannot allocate all claims"]);
    assert!(f.plugin.reserve(&mut state, &p, "n0").is_success());
    assert_eq!(f.plugin.in_flight().len(), 1);

    // In flight, n0 has one device left for the next pod.
    let q = pod("q", "uid-q", "small");
    let mut q_state = CycleState::new();
    assert!(f.pre_filter(&mut q_state, &q).is_success());
    assert_eq!(f.filter(&q_state, &q), ["n0: cannot allocate all claims", "n1: ok"]);

    // PreBind writes the allocation; the in-flight entry goes once the
    // store holds it, and the devices stay taken.
    assert!(f.run_pre_bind(state, p.clone(), "n0").is_success());
    assert!(f.plugin.in_flight().is_empty());
    assert_eq!(*f.binder.writes.lock().unwrap(), ["reserve ns/big for p"]);
    let big = f.objects.resource_claim(NS, "big").unwrap();
    assert_eq!(results_of(&big).len(), 3);
    assert!(results_of(&big).iter().all(|r| r.starts_with("n0/")));
    assert!(is_reserved_for(&big, "uid-p"));
    let selector = allocation_of(&big).unwrap().node_selector.clone().expect("node-local");
    assert_eq!(
        serde_json::to_value(selector).unwrap()["nodeSelectorTerms"][0]["matchFields"][0],
        json!({"key": "metadata.name", "operator": "In", "values": ["n0"]})
    );
    let r = pod("r", "uid-r", "more");
    let mut r_state = CycleState::new();
    assert!(f.pre_filter(&mut r_state, &r).is_success());
    assert_eq!(f.filter(&r_state, &r), ["n0: cannot allocate all claims", "n1: ok"]);
}

#[test]
fn a_shared_claim_waits_while_in_flight_then_follows_its_allocation() {
    let f = fixture(vec![claim("shared", 1, None)]);
    let (p, q) = (pod("p", "uid-p", "shared"), pod("q", "uid-q", "shared"));
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    assert_eq!(f.filter(&state, &p), ["n0: ok", "n1: ok"]);
    assert!(f.plugin.reserve(&mut state, &p, "n1").is_success());
    let s = f.pre_filter(&mut CycleState::new(), &q);
    assert_eq!(s.message(), "resource claim ns/shared is in the process of being allocated");
    assert!(f.run_pre_bind(state, p, "n1").is_success());

    let mut q_state = CycleState::new();
    assert!(f.pre_filter(&mut q_state, &q).is_success());
    assert_eq!(f.filter(&q_state, &q), ["n0: resourceclaim not available on the node", "n1: ok"]);
    assert!(f.plugin.reserve(&mut q_state, &q, "n1").is_success());
    assert!(f.run_pre_bind(q_state, q, "n1").is_success());
    let shared = f.objects.resource_claim(NS, "shared").unwrap();
    assert_eq!(reserved_count(&shared), 2);
    assert_eq!(results_of(&shared).len(), 1, "allocated once");
}

#[test]
fn unreserve_releases_the_devices_and_the_written_reservation() {
    let f = fixture(vec![claim("c", 4, None)]);
    let p = pod("p", "uid-p", "c");
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    assert_eq!(f.filter(&state, &p), ["n0: ok", "n1: cannot allocate all claims"]);
    assert!(f.plugin.reserve(&mut state, &p, "n0").is_success());
    f.plugin.unreserve(&mut state, &p, "n0");
    assert!(f.plugin.in_flight().is_empty());
    assert!(f.binder.writes.lock().unwrap().is_empty(), "nothing was written");

    // After PreBind, Unreserve removes the reservation it wrote.
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    f.filter(&state, &p);
    assert!(f.plugin.reserve(&mut state, &p, "n0").is_success());
    let state = Arc::new(state);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let s = rt.block_on(f.plugin.pre_bind(state.clone(), p.clone(), Arc::from("n0")));
    assert!(s.is_success());
    let mut state = Arc::try_unwrap(state).unwrap_or_else(|s| (*s).clone());
    rt.block_on(async {
        f.plugin.unreserve(&mut state, &p, "n0");
        tokio::task::yield_now().await;
    });
    assert_eq!(*f.binder.writes.lock().unwrap(), ["reserve ns/c for p", "unreserve ns/c"]);
    assert!(!is_reserved_for(&f.objects.resource_claim(NS, "c").unwrap(), "uid-p"));
}

/// DynamicResources' PostFilter runs no what-ifs.
struct NoRunner;

impl convoy_api::FilterRunner for NoRunner {
    fn run_pre_filter_extension_add_pod(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        unreachable!()
    }
    fn run_pre_filter_extension_remove_pod(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        unreachable!()
    }
    fn run_filter_plugins_with_nominated_pods(
        &self,
        _: &CycleState,
        _: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        unreachable!()
    }
    fn nominated_pods_for_node(&self, _: &str) -> Vec<Arc<PodInfo>> {
        Vec::new()
    }
    fn nominated_node(&self, _: &PodInfo) -> Option<Arc<str>> {
        None
    }
    fn parallelize(&self, n: usize, work: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(work)
    }
}

#[test]
fn post_filter_deallocates_a_claim_allocated_where_the_pod_does_not_fit() {
    let mut c = claim("c", 1, None);
    c["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "req-0", "driver": DRIVER, "pool": "n9",
                                 "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}
    }});
    let f = fixture(vec![c]);
    let p = pod("p", "uid-p", "c");
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    assert_eq!(
        f.filter(&state, &p),
        [
            "n0: resourceclaim not available on the node",
            "n1: resourceclaim not available on the node"
        ]
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let snapshot = NodeList::of(f.nodes.iter().map(|n| (**n).clone()));
    let ctx = PostFilterContext { nodes: &snapshot, runner: &NoRunner, random: 0 };
    let (_, s) = rt.block_on(async {
        let r = f.plugin.post_filter(&state, &p, &NodeToStatus::default(), &ctx);
        tokio::task::yield_now().await;
        r
    });
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(s.message(), MSG_DEALLOCATED);
    assert_eq!(*f.binder.writes.lock().unwrap(), ["deallocate ns/c"]);
    assert!(allocation_of(&f.objects.resource_claim(NS, "c").unwrap()).is_none());
}

#[test]
fn earlier_first_available_subrequests_score_higher() {
    let first_available = |name: &str| {
        json!({
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
            "spec": {"devices": {"requests": [{"name": "req-0", "firstAvailable": [
                {"name": "four", "deviceClassName": CLASS, "count": 4},
                {"name": "two", "deviceClassName": CLASS, "count": 2}
            ]}]}}
        })
    };
    let f = fixture(vec![first_available("c")]);
    let p = pod("p", "uid-p", "c");
    let mut state = CycleState::new();
    assert!(f.pre_filter(&mut state, &p).is_success());
    assert_eq!(f.filter(&state, &p), ["n0: ok", "n1: ok"]);
    let mut scores: Vec<i64> = crate::helper::testing::score_each(&f.plugin, &state, &p, &f.nodes);
    assert_eq!(scores, [8, 7], "n0 takes the first subrequest, n1 the second");
    assert!(f.plugin.normalize_score(&state, &p, &mut scores).is_success());
    assert_eq!(scores, [100, 87]);
}

#[test]
fn hints_queue_on_deallocation_and_on_the_pods_own_claims() {
    let p = pod("p", "uid-p", "mine");
    let ev = |c: Value| EventObject::Object(claim_obj(c));
    let mut allocated = claim("other", 1, None);
    allocated["status"] = json!({"allocation": {"devices": {"results": []}}});
    let hint = |old: Option<Value>, new: Option<Value>| {
        is_schedulable_after_claim_change(&p, old.map(ev).as_ref(), new.map(ev).as_ref())
    };
    assert_eq!(hint(Some(allocated.clone()), Some(claim("other", 1, None))), QueueingHint::Queue);
    assert_eq!(hint(None, Some(claim("other", 1, None))), QueueingHint::Skip, "unrelated");
    assert_eq!(hint(None, Some(claim("mine", 1, None))), QueueingHint::Queue, "created");
    assert_eq!(
        hint(Some(claim("mine", 1, None)), Some(claim("mine", 1, None))),
        QueueingHint::Skip,
        "status unchanged"
    );
    assert_eq!(hint(Some(allocated), None), QueueingHint::Queue, "an allocated claim deleted");
    assert_eq!(hint(Some(claim("other", 1, None)), None), QueueingHint::Skip);

    let waiting = template_pod("uid-p", None);
    let updated = template_pod("uid-p", Some("gen"));
    let e = EventObject::Pod(updated.pod.clone());
    assert_eq!(
        is_schedulable_after_target_pod_update(&waiting, None, Some(&e)),
        QueueingHint::Queue
    );
    let other = EventObject::Pod(template_pod("uid-x", Some("gen")).pod.clone());
    assert_eq!(
        is_schedulable_after_target_pod_update(&waiting, None, Some(&other)),
        QueueingHint::Skip
    );
}

fn taint_rule(name: &str, selector: Value, effect: &str) -> ClusterObject {
    ClusterObject::DeviceTaintRule(obj(json!({
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector,
                 "taint": {"key": "example.com/broken", "value": "yes", "effect": effect}}
    })))
}

/// DeviceTaintRules are applied to the slices (upstream
/// `ListWithDeviceTaintRules`): a rule's NoSchedule taint makes the
/// allocator skip the device unless the request tolerates it, and the
/// device is free again once the rule is gone.
#[test]
fn device_taint_rules_taint_the_devices_they_select() {
    let mut tolerant = claim("tolerant", 2, None);
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] =
        json!([{"key": "example.com/broken", "operator": "Exists", "effect": "NoSchedule"}]);
    let f = fixture(vec![claim("plain", 2, None), tolerant]);
    let verdicts = |claim: &str| {
        let p = pod("p", "uid-p", claim);
        let mut state = CycleState::new();
        assert!(f.pre_filter(&mut state, &p).is_success());
        f.filter(&state, &p)
    };
    assert_eq!(verdicts("plain"), ["n0: ok", "n1: ok"]);

    // n1 has two devices; the rule takes one of them away.
    let rule = taint_rule(
        "one-device",
        json!({"driver": DRIVER, "pool": "n1", "device": "gpu-0"}),
        "NoSchedule",
    );
    f.objects.apply(&rule);
    assert_eq!(verdicts("plain"), ["n0: ok", "n1: cannot allocate all claims"]);
    assert_eq!(verdicts("tolerant"), ["n0: ok", "n1: ok"]);

    // Effect None, a rule with no selector and one for another driver
    // take nothing away.
    f.objects.delete(&rule);
    for r in [
        taint_rule("none", json!({"pool": "n1"}), "None"),
        ClusterObject::DeviceTaintRule(obj(json!({
            "metadata": {"name": "no-selector"},
            "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}
        }))),
        taint_rule("other-driver", json!({"driver": "other.example.com"}), "NoExecute"),
    ] {
        f.objects.apply(&r);
    }
    assert_eq!(verdicts("plain"), ["n0: ok", "n1: ok"]);

    // A pool-wide NoExecute rule: n1 is out for the plain claim, and a
    // NoSchedule toleration does not cover NoExecute.
    f.objects.apply(&taint_rule("pool", json!({"pool": "n1"}), "NoExecute"));
    assert_eq!(verdicts("plain"), ["n0: ok", "n1: cannot allocate all claims"]);
    assert_eq!(verdicts("tolerant"), ["n0: ok", "n1: cannot allocate all claims"]);
}

#[test]
fn taint_rules_clone_only_the_slices_they_touch() {
    let slices: Vec<Arc<ResourceSlice>> = ["n0", "n1"]
        .iter()
        .map(|n| match slice(n, 2) {
            ClusterObject::ResourceSlice(s) => s,
            _ => unreachable!(),
        })
        .collect();
    let rule: Arc<k8s_openapi::api::resource::v1::DeviceTaintRule> = obj(json!({
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"pool": "n1", "device": "gpu-1"},
                 "taint": {"key": "k", "effect": "NoSchedule"}}
    }));
    let patched = pools::with_taint_rules(slices.clone(), &[rule.clone(), rule]);
    assert!(Arc::ptr_eq(&patched[0], &slices[0]), "n0 untouched, shared");
    let devices = patched[1].spec.devices.as_ref().unwrap();
    assert!(devices[0].taints.is_none());
    let taints = devices[1].taints.as_ref().unwrap();
    assert_eq!(taints.len(), 2, "each matching rule appends its taint");
    assert_eq!(taints[0].key, "k");
    assert!(slices[1].spec.devices.as_ref().unwrap()[1].taints.is_none(), "the store's slice");
}

#[test]
fn a_server_without_the_dra_apis_refuses_pods_with_claims_by_name() {
    use convoy_api::apis::{RESOURCE_CLAIMS, RESOURCE_SLICES};
    use convoy_api::{ServedApis, Serving};
    let f = fixture(vec![claim("c", 1, None)]);
    let p = pod("p", "uid-p", "absent");
    assert!(!f.plugin.pre_enqueue(&p).is_success(), "waits for its claim while DRA is served");
    let mut served = ServedApis::all();
    served.set(RESOURCE_CLAIMS, Serving::NotServed);
    assert!(f.objects.set_served_apis(Arc::new(served.clone())));
    // Not held unseen at PreEnqueue: PreFilter refuses it, naming the field
    // and the API, and the refusal reaches the pod's status and Events.
    assert!(f.plugin.pre_enqueue(&p).is_success());
    let s = f.pre_filter(&mut CycleState::new(), &p);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "pod uses spec.resourceClaims, which needs resourceclaims.resource.k8s.io (v1 or \
         v1beta2); this API server does not serve it"
    );
    served.set(RESOURCE_CLAIMS, Serving::Served("v1beta2"));
    served.set(RESOURCE_SLICES, Serving::Unreadable(vec!["v1beta1".into()]));
    f.objects.set_served_apis(Arc::new(served));
    let s = f.pre_filter(&mut CycleState::new(), &pod("q", "uid-q", "c"));
    assert_eq!(
        s.message(),
        "pod uses spec.resourceClaims, which needs resourceslices.resource.k8s.io (v1 or \
         v1beta2); this API server serves it only as resource.k8s.io/v1beta1, which this \
         scheduler does not read"
    );
    // Pods without claims are not concerned.
    assert!(f.pre_filter(&mut CycleState::new(), &PodBuilder::new("plain").info()).is_skip());
}
