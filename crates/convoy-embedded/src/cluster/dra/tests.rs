use convoy_api::testing::{NodeBuilder, PodBuilder};
use futures::FutureExt;
use k8s_openapi::api::resource::v1::AllocationResult;
use serde_json::json;
use tokio::sync::mpsc;

use super::*;
use crate::cluster::EmbeddedBinder;
use crate::load::Objects;
use convoy_api::{Binder, PodInfo};

fn template(name: &str) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
            ]}}
        }
    }))
    .unwrap()
}

/// A pod in `ns` whose entry `gpu` uses template `t`.
fn pod(name: &str) -> Pod {
    PodBuilder::new(name)
        .namespace("ns")
        .with_spec(|s| {
            s.resource_claims = Some(vec![PodResourceClaim {
                name: "gpu".into(),
                resource_claim_template_name: Some("t".into()),
                ..Default::default()
            }]);
        })
        .build()
}

fn allocation(device: &str) -> AllocationResult {
    serde_json::from_value(json!({"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": device}
    ]}}))
    .unwrap()
}

fn cluster() -> (Arc<EmbeddedCluster>, mpsc::UnboundedReceiver<ClusterUpdate>) {
    EmbeddedCluster::new(Objects {
        nodes: vec![NodeBuilder::new("n1").build()],
        resource_claim_templates: vec![template("t")],
        ..Objects::default()
    })
}

fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterUpdate>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(u) = rx.try_recv() {
        out.push(match u {
            ClusterUpdate::PodAdded(p) => format!("PodAdded {}", p.metadata.name.clone().unwrap()),
            ClusterUpdate::PodUpdated { new, .. } => {
                format!("PodUpdated {}", new.metadata.name.clone().unwrap())
            }
            ClusterUpdate::PodDeleted(p) => {
                format!("PodDeleted {}", p.metadata.name.clone().unwrap())
            }
            ClusterUpdate::ObjectApplied(o) => format!("{}Applied", o.kind()),
            ClusterUpdate::ObjectDeleted(o) => format!("{}Deleted {}", o.kind(), o.key()),
            other => format!("{other:?}").split([' ', '(']).next().unwrap().to_string(),
        });
    }
    out
}

/// The claim generated for pod `name`'s entry, from its status.
fn generated(c: &EmbeddedCluster, name: &str) -> Arc<ResourceClaim> {
    let p = c.pod("ns", name).unwrap();
    let statuses = p.status.as_ref().unwrap().resource_claim_statuses.as_ref().unwrap();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].name, "gpu");
    c.resource_claim("ns", statuses[0].resource_claim_name.as_deref().unwrap()).unwrap()
}

fn reserve(claim: &ResourceClaim, alloc: Option<&str>, pod: &str) -> ClaimWrite {
    ClaimWrite::Reserve {
        namespace: "ns".into(),
        name: claim.metadata.name.clone().unwrap(),
        uid: claim.metadata.uid.clone().unwrap(),
        allocation: alloc.map(allocation),
        pod_name: pod.into(),
        pod_uid: pod.to_string(),
    }
}

fn reserved_uids(c: &ResourceClaim) -> Vec<&str> {
    reserved_for(c).iter().map(|r| r.uid.as_str()).collect()
}

#[test]
fn a_pod_with_a_template_entry_gets_a_claim_and_its_status() {
    let (c, mut rx) = cluster();
    drain(&mut rx);
    c.add_pod(pod("p")).unwrap();
    assert_eq!(drain(&mut rx), ["PodAdded p", "ResourceClaimApplied", "PodUpdated p"]);
    let claim = generated(&c, "p");
    let name = claim.metadata.name.as_deref().unwrap();
    let suffix = name.strip_prefix("p-gpu-").unwrap();
    assert_eq!(suffix.len(), 5, "{name}");
    assert!(suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)), "{name}");
    assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[..];
    assert_eq!(owner.len(), 1);
    assert_eq!(
        (owner[0].api_version.as_str(), owner[0].kind.as_str(), owner[0].name.as_str()),
        ("v1", "Pod", "p")
    );
    assert_eq!((owner[0].uid.as_str(), owner[0].controller), ("p", Some(true)));
    let annotations = claim.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANN_POD_CLAIM_NAME], "gpu");
    assert_eq!(annotations["note"], "x", "the template's annotations");
    assert_eq!(claim.metadata.labels.as_ref().unwrap()["team"], "a");
    assert_eq!(claim.spec, template("t").spec.unwrap().spec);
    assert!(claim.metadata.uid.is_some() && claim.metadata.resource_version.is_some());

    // A second pod's claim has another name; an update of the pod makes
    // no new claim.
    c.add_pod(pod("q")).unwrap();
    assert_ne!(generated(&c, "q").metadata.name, claim.metadata.name);
    let p = Pod::clone(&c.pod("ns", "p").unwrap());
    c.update_pod(p).unwrap();
    assert_eq!(drain(&mut rx).iter().filter(|u| *u == "ResourceClaimApplied").count(), 1);
    assert_eq!(generated(&c, "p").metadata.name, claim.metadata.name);
}

#[test]
fn without_its_template_the_pod_waits_until_it_is_applied() {
    let (c, mut rx) = EmbeddedCluster::new(Objects::default());
    drain(&mut rx);
    c.add_pod(pod("p")).unwrap();
    assert_eq!(drain(&mut rx), ["PodAdded p"]);
    assert!(
        c.pod("ns", "p")
            .unwrap()
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .is_none()
    );
    c.apply_resource_claim_template(template("t")).unwrap();
    assert_eq!(drain(&mut rx), ["ResourceClaimApplied", "PodUpdated p"]);
    generated(&c, "p");
    assert_eq!(c.resource_claim_templates().len(), 1);
    c.delete_resource_claim_template("ns", "t").unwrap();
    assert!(c.delete_resource_claim_template("ns", "t").is_err());
}

#[test]
fn pods_loaded_with_the_cluster_get_their_claims_too() {
    let (c, _rx) = EmbeddedCluster::new(Objects {
        pods: vec![pod("p")],
        resource_claim_templates: vec![template("t")],
        ..Objects::default()
    });
    generated(&c, "p");
}

#[test]
fn reserve_writes_allocation_finalizer_and_reservation() {
    let (c, mut rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    drain(&mut rx);
    let written = c.write_claim_now(reserve(&claim, Some("gpu-0"), "p")).unwrap();
    assert_eq!(drain(&mut rx), ["ResourceClaimApplied"]);
    assert_eq!(written.status.as_ref().unwrap().allocation, Some(allocation("gpu-0")));
    assert_eq!(written.metadata.finalizers.as_deref(), Some(&[CLAIM_FINALIZER.to_string()][..]));
    assert_eq!(reserved_uids(&written), ["p"]);
    let r = &reserved_for(&written)[0];
    assert_eq!((r.resource.as_str(), r.name.as_str(), r.api_group.as_deref()), ("pods", "p", None));
    let v =
        |c: &ResourceClaim| c.metadata.resource_version.clone().unwrap().parse::<u64>().unwrap();
    assert!(v(&written) > v(&claim));
    assert_eq!(
        c.resource_claim("ns", claim.metadata.name.as_deref().unwrap()),
        Some(written.clone())
    );

    // Allocated meanwhile.
    let key = format!("ns/{}", claim.metadata.name.as_deref().unwrap());
    let err = c.write_claim_now(reserve(&claim, Some("gpu-1"), "q")).unwrap_err();
    assert_eq!(err.to_string(), format!("claim {key} got allocated elsewhere in the meantime"));
    // Already allocated: the reservation alone is added.
    let both = c.write_claim_now(reserve(&claim, None, "q")).unwrap();
    assert_eq!(reserved_uids(&both), ["p", "q"]);
    let twice = c.write_claim_now(reserve(&claim, None, "q")).unwrap_err().to_string();
    assert!(twice.contains("Duplicate value"), "{twice}");
    // Another claim under that name.
    let mut other = ResourceClaim::clone(&claim);
    other.metadata.uid = Some("other".into());
    let err = c.write_claim_now(reserve(&other, None, "r")).unwrap_err();
    assert_eq!(err.to_string(), format!("claim {key} got deleted in the meantime"));
    assert!(drain(&mut rx).len() == 1, "refusals write nothing");
}

#[test]
fn a_reservation_needs_an_allocation() {
    let (c, _rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    let err = c.write_claim_now(reserve(&claim, None, "p")).unwrap_err().to_string();
    assert!(err.contains("status.reservedFor: Forbidden"), "{err}");
    assert!(reserved_for(&generated(&c, "p")).is_empty());
}

#[test]
fn unreserve_and_deallocate() {
    let (c, mut rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    let name = claim.metadata.name.clone().unwrap();
    c.write_claim_now(reserve(&claim, Some("gpu-0"), "p")).unwrap();
    drain(&mut rx);
    let unreserve =
        ClaimWrite::Unreserve { namespace: "ns".into(), name: name.clone(), pod_uid: "p".into() };
    let written = c.write_claim_now(unreserve.clone()).unwrap();
    assert!(reserved_for(&written).is_empty());
    assert!(is_allocated(&written), "unreserving leaves the allocation");
    assert_eq!(drain(&mut rx), ["ResourceClaimApplied"]);
    // Nothing left to remove: nothing written.
    assert_eq!(c.write_claim_now(unreserve).unwrap(), written);
    assert!(drain(&mut rx).is_empty());

    let dealloc = |uid: &str| ClaimWrite::Deallocate {
        namespace: "ns".into(),
        name: name.clone(),
        uid: uid.into(),
    };
    assert!(c.write_claim_now(dealloc("other")).is_err());
    let written = c.write_claim_now(dealloc(claim.metadata.uid.as_deref().unwrap())).unwrap();
    let status = written.status.as_ref().unwrap();
    assert!(status.allocation.is_none() && status.reserved_for.is_none());
    assert_eq!(drain(&mut rx), ["ResourceClaimApplied"]);
    let missing =
        ClaimWrite::Deallocate { namespace: "ns".into(), name: "nope".into(), uid: String::new() };
    assert!(c.write_claim_now(missing).unwrap_err().to_string().contains("not found"));
}

#[test]
fn a_deleted_pod_releases_and_deallocates_its_claims_and_its_generated_claim_goes() {
    let (c, mut rx) = cluster();
    // A claim two pods share, created by the user.
    let shared: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "shared", "namespace": "ns"},
        "spec": {"devices": {"requests": []}}
    }))
    .unwrap();
    c.apply_object(ClusterObject::ResourceClaim(Arc::new(shared))).unwrap();
    let with_shared = |name: &str| {
        let mut p = pod(name);
        p.spec.as_mut().unwrap().resource_claims.as_mut().unwrap().push(PodResourceClaim {
            name: "shared".into(),
            resource_claim_name: Some("shared".into()),
            ..Default::default()
        });
        p
    };
    c.add_pod(with_shared("p")).unwrap();
    c.add_pod(with_shared("q")).unwrap();
    let own = generated_of(&c, "p");
    let shared = c.resource_claim("ns", "shared").unwrap();
    assert_eq!(shared.metadata.uid.as_deref(), Some("sim-claim-ns-shared"));
    c.write_claim_now(reserve(&own, Some("gpu-0"), "p")).unwrap();
    c.write_claim_now(reserve(&shared, Some("gpu-1"), "p")).unwrap();
    c.write_claim_now(reserve(&shared, None, "q")).unwrap();
    c.bind_now(&PodInfo::new(c.pod("ns", "p").unwrap()).unwrap(), "n1").unwrap();
    drain(&mut rx);

    c.delete_pod("ns", "p").unwrap();
    let own_key = format!("ns/{}", own.metadata.name.as_deref().unwrap());
    assert_eq!(
        drain(&mut rx),
        [
            "PodDeleted p".to_string(),
            "ResourceClaimApplied".into(),
            format!("ResourceClaimDeleted {own_key}"),
            "ResourceClaimApplied".into(),
        ]
    );
    assert!(c.resource_claim("ns", own.metadata.name.as_deref().unwrap()).is_none());
    let shared = c.resource_claim("ns", "shared").unwrap();
    assert_eq!(reserved_uids(&shared), ["q"]);
    assert!(is_allocated(&shared) && has_finalizer(&shared), "q still uses it");

    c.delete_pod("ns", "q").unwrap();
    let shared = c.resource_claim("ns", "shared").unwrap();
    assert!(reserved_for(&shared).is_empty());
    assert!(!is_allocated(&shared), "the last user gone: deallocated");
    assert!(!has_finalizer(&shared));
}

/// The claim generated for pod `name`'s `gpu` entry when it has others.
fn generated_of(c: &EmbeddedCluster, name: &str) -> Arc<ResourceClaim> {
    let p = c.pod("ns", name).unwrap();
    let statuses = p.status.as_ref().unwrap().resource_claim_statuses.as_ref().unwrap();
    let s = statuses.iter().find(|s| s.name == "gpu").unwrap();
    c.resource_claim("ns", s.resource_claim_name.as_deref().unwrap()).unwrap()
}

#[test]
fn a_terminal_pod_releases_its_claim_which_is_deleted() {
    let (c, _rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    c.write_claim_now(reserve(&claim, Some("gpu-0"), "p")).unwrap();
    let mut p = Pod::clone(&c.pod("ns", "p").unwrap());
    p.status.as_mut().unwrap().phase = Some("Succeeded".into());
    c.update_pod(p).unwrap();
    assert!(c.resource_claim("ns", claim.metadata.name.as_deref().unwrap()).is_none());
}

#[test]
fn a_claim_deleted_while_reserved_goes_when_its_pod_does() {
    let (c, mut rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    let name = claim.metadata.name.clone().unwrap();
    c.write_claim_now(reserve(&claim, Some("gpu-0"), "p")).unwrap();
    drain(&mut rx);
    c.delete_object("ResourceClaim", &format!("ns/{name}")).unwrap();
    assert_eq!(drain(&mut rx), ["ResourceClaimApplied"]);
    let marked = c.resource_claim("ns", &name).unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    let err = c.write_claim_now(reserve(&marked, None, "q")).unwrap_err().to_string();
    assert!(err.ends_with("got deleted in the meantime"), "{err}");
    let unreserve =
        ClaimWrite::Unreserve { namespace: "ns".into(), name: name.clone(), pod_uid: "p".into() };
    c.write_claim_now(unreserve).unwrap();
    assert!(c.resource_claim("ns", &name).is_none(), "unused: gone");
}

#[test]
fn a_bound_pod_gets_its_allocated_claims_reserved() {
    let (c, _rx) = cluster();
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "finalizers": [CLAIM_FINALIZER]},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": serde_json::to_value(allocation("gpu-0")).unwrap()}
    }))
    .unwrap();
    c.apply_object(ClusterObject::ResourceClaim(Arc::new(claim))).unwrap();
    let p = PodBuilder::new("b")
        .namespace("ns")
        .node("n1")
        .with_spec(|s| {
            s.resource_claims = Some(vec![PodResourceClaim {
                name: "x".into(),
                resource_claim_name: Some("c".into()),
                ..Default::default()
            }]);
        })
        .build();
    c.add_pod(p).unwrap();
    assert_eq!(reserved_uids(&c.resource_claim("ns", "c").unwrap()), ["b"]);
}

#[test]
fn generated_names_are_cut_as_upstream() {
    assert_eq!(generate_name_base("p", "gpu"), "p-gpu-");
    let pod = "p".repeat(60);
    let base = generate_name_base(&pod, "claim");
    // 67 characters: both parts cut to 57/67 of their length.
    assert_eq!(base, format!("{}-{}", "p".repeat(60 * 57 / 67), "clai"));
}

#[test]
fn the_binders_write_claims() {
    let (c, _rx) = cluster();
    c.add_pod(pod("p")).unwrap();
    let claim = generated(&c, "p");
    let binder = EmbeddedBinder(c.clone());
    let written = binder.write_claim(reserve(&claim, Some("gpu-0"), "p")).now_or_never().unwrap();
    assert!(is_allocated(&written.unwrap()));
    let again = Binder::write_claim(&*c, reserve(&claim, Some("gpu-1"), "q")).now_or_never();
    assert!(again.unwrap().is_err());
}

fn claim_count(c: &EmbeddedCluster) -> usize {
    c.objects().iter().filter(|o| matches!(o, ClusterObject::ResourceClaim(_))).count()
}

/// A pod with two template entries, the second template missing: the
/// first claim is made but not recorded (upstream's sync fails at the
/// second); it is found again, not made twice, once the template comes,
/// and deleted with the pod if the pod goes first.
#[test]
fn claims_made_before_a_missing_template_are_found_again_or_deleted_with_the_pod() {
    let two = |name: &str| {
        let mut p = pod(name);
        p.spec.as_mut().unwrap().resource_claims.as_mut().unwrap().push(PodResourceClaim {
            name: "later".into(),
            resource_claim_template_name: Some("later".into()),
            ..Default::default()
        });
        p
    };
    let (c, _rx) = cluster();
    c.add_pod(two("p")).unwrap();
    assert_eq!(claim_count(&c), 1);
    assert!(
        c.pod("ns", "p")
            .unwrap()
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .is_none()
    );
    c.apply_resource_claim_template(template("later")).unwrap();
    assert_eq!(claim_count(&c), 2, "the first claim is reused");
    let p = c.pod("ns", "p").unwrap();
    let statuses = p.status.as_ref().unwrap().resource_claim_statuses.as_ref().unwrap();
    assert_eq!(statuses.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["gpu", "later"]);

    let (c, _rx) = cluster();
    c.add_pod(two("p")).unwrap();
    assert_eq!(claim_count(&c), 1);
    c.delete_pod("ns", "p").unwrap();
    assert_eq!(claim_count(&c), 0);
}
