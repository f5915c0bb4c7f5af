use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use convoy_api::NodeList;

use super::*;
use convoy_objects::ClusterObjects;

/// Upstream `makeImageNode`: a node whose status lists these images
/// (names, size in MiB).
fn image_node(name: &str, images: &[(&[&str], i64)]) -> NodeInfo {
    let images: Vec<Value> =
        images.iter().map(|(names, mb)| json!({"names": names, "sizeBytes": mb * MB})).collect();
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"images": images}}))
            .unwrap();
    NodeInfo::new(Arc::new(node))
}

fn pod(spec: Value) -> PodInfo {
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
    PodInfo::new(Arc::new(pod)).unwrap()
}

fn containers(images: &[&str]) -> Value {
    images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect()
}

fn scores(pod: &PodInfo, nodes: Vec<NodeInfo>) -> Vec<i64> {
    let list = NodeList::of(nodes);
    let mut state = CycleState::new();
    let s = ImageLocality::default().pre_score(
        &mut state,
        pod,
        &convoy_api::borrowed(list.list()),
        &list,
    );
    if s.is_skip() {
        return vec![0; list.list().len()];
    }
    assert!(s.is_success(), "{s}");
    list.list().iter().map(|n| ImageLocality::default().score(&state, pod, n).unwrap()).collect()
}

/// Upstream `TestImageLocalityPriority` (`imagelocality/image_locality_test.go`,
/// v1.37.2), case by case.
#[test]
fn image_locality_priority() {
    let node403002000: &[(&[&str], i64)] = &[
        (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
        (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
        (&["gcr.io/2000:latest"], 2000),
    ];
    let node25010: &[(&[&str], i64)] =
        &[(&["gcr.io/250:latest"], 250), (&["gcr.io/10:latest", "gcr.io/10:v1"], 10)];
    let node60040900: &[(&[&str], i64)] = &[
        (&["gcr.io/600:latest"], 600),
        (&["gcr.io/40:latest"], 40),
        (&["gcr.io/900:latest"], 900),
    ];
    let node300600900: &[(&[&str], i64)] = &[
        (&["gcr.io/300:latest"], 300),
        (&["gcr.io/600:latest"], 600),
        (&["gcr.io/900:latest"], 900),
    ];
    let node400030: &[(&[&str], i64)] =
        &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)];
    let node203040: &[(&[&str], i64)] =
        &[(&["gcr.io/20:latest"], 20), (&["gcr.io/30:latest"], 30), (&["gcr.io/40:latest"], 40)];
    let no_images: &[(&[&str], i64)] = &[];

    let test40250 = json!({"containers": containers(&["gcr.io/40", "gcr.io/250"])});
    let test40300 = json!({"containers": containers(&["gcr.io/40", "gcr.io/300"])});
    let test_min_max = json!({"containers": containers(&["gcr.io/10", "gcr.io/4000"])});
    let test300600900 =
        json!({"containers": containers(&["gcr.io/300", "gcr.io/600", "gcr.io/900"])});
    let test3040 = json!({"containers": containers(&["gcr.io/30", "gcr.io/40"])});
    let test_image_volume = json!({
        "containers": containers(&["gcr.io/30"]),
        "volumes": [{"name": "imageVolume", "image": {"reference": "gcr.io/300"}}]
    });
    let test30300 = json!({"containers": containers(&["gcr.io/30", "gcr.io/300"])});
    let test30_init300 = json!({
        "containers": containers(&["gcr.io/30"]),
        "initContainers": [{"name": "i", "image": "gcr.io/300"}]
    });

    type Case<'a> = (&'a str, Value, Vec<(&'a str, &'a [(&'a [&'a str], i64)])>, Vec<i64>);
    let cases: Vec<Case> = vec![
        (
            "two images spread on two nodes, prefer the larger image one",
            test40250,
            vec![("node1", node403002000), ("node2", node25010)],
            vec![0, 5],
        ),
        (
            "two images on one node, prefer this node",
            test40300,
            vec![("node1", node403002000), ("node2", node25010)],
            vec![7, 0],
        ),
        (
            "if exceed limit, use limit",
            test_min_max.clone(),
            vec![("node1", node400030), ("node2", node25010)],
            vec![100, 0],
        ),
        (
            "if exceed limit, use limit (with node which has no images present)",
            test_min_max,
            vec![("node1", node400030), ("node2", node25010), ("node3", no_images)],
            vec![66, 0, 0],
        ),
        (
            "pod with multiple large images, node2 is preferred",
            test300600900,
            vec![("node1", node60040900), ("node2", node300600900), ("node3", no_images)],
            vec![32, 36, 0],
        ),
        (
            "pod with multiple small images",
            test3040,
            vec![("node1", node203040), ("node2", node400030)],
            vec![1, 0],
        ),
        (
            "pod with ImageVolume",
            test_image_volume,
            vec![("node1", node300600900), ("node2", node400030)],
            vec![6, 0],
        ),
        (
            "same images as ImageVolume pod but as regular container images",
            test30300,
            vec![("node1", node300600900), ("node2", node400030)],
            vec![6, 0],
        ),
        (
            "include InitContainers: two images spread on two nodes, prefer the larger image one",
            test30_init300,
            vec![("node1", node403002000), ("node2", node203040)],
            vec![6, 0],
        ),
    ];
    for (name, spec, nodes, want) in cases {
        let nodes = nodes.into_iter().map(|(n, images)| image_node(n, images)).collect();
        assert_eq!(scores(&pod(spec), nodes), want, "{name}");
    }
}

/// Upstream `TestNormalizedImageName`.
#[test]
fn normalized_image_names() {
    let digest = "sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2";
    let digested = format!("root@{digest}");
    let cases = [
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        (digested.as_str(), digested.as_str()),
    ];
    for (input, want) in cases {
        assert_eq!(normalized_image_name(input), want, "{input}");
    }
}

#[test]
fn skips_when_no_node_has_the_images_and_needs_pre_score() {
    let list = NodeList::of([image_node("n", &[(&["other:latest"], 300)])]);
    let p = pod(json!({"containers": containers(&["mine"])}));
    let s = ImageLocality::default().pre_score(
        &mut CycleState::new(),
        &p,
        &convoy_api::borrowed(list.list()),
        &list,
    );
    assert!(s.is_skip());
    let err = ImageLocality::default().score(&CycleState::new(), &p, &list.list()[0]).unwrap_err();
    assert_eq!(err.code(), convoy_api::Code::Error);
}

#[test]
fn spread_counts_the_whole_cluster() {
    // 12 nodes, a 600 MiB image on 3 of them: 600 * 3/12 = 150 MiB;
    // 100 * (150 - 23) / (1000 - 23) = 12 on the nodes that have it.
    let nodes: Vec<NodeInfo> = (0..12)
        .map(|i| {
            let images: &[(&[&str], i64)] =
                if i < 3 { &[(&["app:1"], 600)] } else { &[(&["base:1"], 100)] };
            image_node(&format!("n{i}"), images)
        })
        .collect();
    let p = pod(json!({"containers": containers(&["app:1"])}));
    let got = scores(&p, nodes);
    assert_eq!(&got[..4], [12, 12, 12, 0]);
}

/// Image volumes count as each version counts them: a container image of
/// 300 MiB and an image volume of 500 MiB, both on the only node.
#[test]
fn image_volumes_follow_the_server_version() {
    let objects = Arc::new(ClusterObjects::new());
    let plugin = ImageLocality::following(objects.clone());
    let p = pod(json!({
        "containers": containers(&["gcr.io/300"]),
        "volumes": [{"name": "model", "image": {"reference": "gcr.io/500"}}],
    }));
    let list = NodeList::of(vec![image_node(
        "n",
        &[(&["gcr.io/300:latest"], 300), (&["gcr.io/500:latest"], 500)],
    )]);
    let score = |plugin: &ImageLocality| {
        let mut state = CycleState::new();
        let nodes = convoy_api::borrowed(list.list());
        assert!(plugin.pre_score(&mut state, &p, &nodes, &list).is_success());
        plugin.score(&state, &p, &list.list()[0]).unwrap()
    };
    // 1.37 (and an unknown version): 800 MiB of at most 2 x 1000.
    assert_eq!(score(&plugin), 100 * 777 / 1977);
    for (version, want) in [
        ("v1.36.3", 100 * 777 / 977), // 800 MiB, thresholds of one container
        ("v1.35.4", 100 * 277 / 977), // the container's 300 MiB alone
        ("v1.34.4", 100 * 277 / 977),
        ("v1.37.2", 100 * 777 / 1977),
    ] {
        let mut served = convoy_api::ServedApis::all();
        served.server_version = Some(version.into());
        objects.set_served_apis(Arc::new(served));
        assert_eq!(score(&plugin), want, "{version}");
    }
}
