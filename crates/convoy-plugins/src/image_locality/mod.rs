//! ImageLocality (Score; upstream `plugins/imagelocality/image_locality.go`,
//! v1.37.2): favours nodes that already have the pod's container images,
//! weighting each image by its size and by how far it has spread over the
//! cluster, so that pods do not all pile onto the few nodes that pulled an
//! image first.
//!
//! Score, as v1.37.2: for each image of the pod (init containers, then
//! containers, then image volumes; a name without a tag gets `:latest`),
//! if the node has it, `int64(float64(size) * (numNodes / totalNumNodes))`,
//! where `numNodes` is the number of nodes with the image and
//! `totalNumNodes` the number of nodes in the snapshot; the sum is clamped
//! to `[23 MiB, 1000 MiB * images]` and mapped linearly onto 0..=100
//! (integer division). No normalization.
//!
//! Where the counts come from: upstream's cache keeps image name → nodes
//! (`imageStates`) and copies `NumNodes` into each node's snapshot. Convoy's
//! cache keeps the same counts incrementally ([`convoy_api::ImageStates`],
//! updated on node add, update and removal) and shares them with each
//! cycle's snapshot in O(1); plugins read them through
//! [`NodeInfoLister::image_state`]. PreScore looks up the pod's few images
//! once per cycle, so Score costs one binary search per pod image in the
//! node's sorted image names ([`NodeInfo::image`]), whatever the cluster
//! size. One difference: upstream copies `NumNodes` into a node's snapshot
//! only when that node changes, so a node untouched since another node
//! pulled the image scores with the older count; Convoy always reads the
//! current count.
//!
//! Image volumes count as each server version counts them (the version
//! discovery read, [`convoy_api::ServedApis::server_at_least`]): 1.37 adds
//! their images to the sum and to the image count; 1.36 to the sum only
//! (the thresholds scale with the containers alone); 1.34 and 1.35 not at
//! all. The score parity test checks each against kube-scheduler of the
//! same version.

use std::sync::Arc;

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo,
    PreScorePlugin, ScorePlugin, Status, names,
};

const MB: i64 = 1024 * 1024;
/// Upstream `minThreshold`: image sums below 23 MiB score 0.
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Upstream `maxContainerThreshold`: per image, sums from 1000 MiB score 100.
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The ImageLocality plugin.
#[derive(Debug, Default, Clone)]
pub struct ImageLocality {
    /// Where the server's version is read (1.37's behaviour without it).
    objects: Option<Arc<dyn ObjectLister>>,
}

impl ImageLocality {
    /// Counts image volumes as the server's version does, read from
    /// `objects` ([`ObjectLister::served_apis`]) once per cycle.
    pub fn following(objects: Arc<dyn ObjectLister>) -> Self {
        Self { objects: Some(objects) }
    }

    /// How the server's version counts image volumes.
    fn volumes(&self) -> VolumeImages {
        let Some(served) = self.objects.as_ref().map(|o| o.served_apis()) else {
            return VolumeImages::Counted;
        };
        if served.server_at_least(37) {
            VolumeImages::Counted
        } else if served.server_at_least(36) {
            VolumeImages::Summed
        } else {
            VolumeImages::Ignored
        }
    }
}

/// What a version does with the images of a pod's image volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VolumeImages {
    /// In the sum and in the image count (1.37).
    Counted,
    /// In the sum; the count is the containers' (1.36).
    Summed,
    /// Left out (1.34, 1.35).
    Ignored,
}

/// PreScore state: each of the pod's images some node has, with its spread
/// score (node-independent), and the pod's image count.
struct PreScoreState {
    present: Vec<(Box<str>, i64)>,
    image_count: i64,
}

/// Upstream `normalizedImageName`: `:latest` appended to a name whose last
/// `:` is not after its last `/` (no tag, no digest).
pub fn normalized_image_name(name: &str) -> String {
    let last = |c: char| name.rfind(c).map_or(-1, |i| i as isize);
    if last(':') <= last('/') { format!("{name}:latest") } else { name.to_string() }
}

/// The pod's image references in upstream's order: init containers,
/// containers, image volumes (normalized), each with whether it is a
/// container's.
fn pod_images(pod: &PodInfo) -> impl Iterator<Item = (String, bool)> + '_ {
    let spec = pod.spec();
    let containers = spec.init_containers.iter().flatten().chain(&spec.containers);
    let volumes = spec.volumes.iter().flatten().filter_map(|v| v.image.as_ref());
    containers
        .map(|c| (c.image.as_deref().unwrap_or(""), true))
        .chain(volumes.map(|i| (i.reference.as_deref().unwrap_or(""), false)))
        .map(|(name, container)| (normalized_image_name(name), container))
}

/// Upstream `scaledImageScore`: the size scaled by the share of nodes that
/// have the image, in Go's float64 arithmetic.
pub fn scaled_image_score(size: i64, num_nodes: usize, total_num_nodes: usize) -> i64 {
    let spread = num_nodes as f64 / total_num_nodes as f64;
    (size as f64 * spread) as i64
}

/// Upstream `calculatePriority`: the summed image scores clamped to
/// `[MIN_THRESHOLD, MAX_CONTAINER_THRESHOLD * image_count]`, mapped onto
/// 0..=100.
pub fn calculate_priority(sum_scores: i64, image_count: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * image_count;
    let sum = if sum_scores < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum_scores > max_threshold {
        max_threshold
    } else {
        sum_scores
    };
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        names::IMAGE_LOCALITY
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    /// Looks up the pod's images in the cluster-wide counts. Skip when no
    /// node has any of them (every node would score 0).
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[&NodeInfo],
        all: &dyn NodeInfoLister,
    ) -> Status {
        let total_num_nodes = all.list().len();
        let volumes = self.volumes();
        let mut image_count = 0;
        let mut present = Vec::new();
        for (name, container) in pod_images(pod) {
            if !container && volumes == VolumeImages::Ignored {
                continue;
            }
            if container || volumes == VolumeImages::Counted {
                image_count += 1;
            }
            if let Some(s) = all.image_state(&name) {
                let score = scaled_image_score(s.size, s.num_nodes, total_num_nodes);
                present.push((name.into_boxed_str(), score));
            }
        }
        if present.is_empty() {
            return Status::skip();
        }
        state.write(PreScoreState { present, image_count });
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    /// 0..=100. Error when PreScore did not run (ImageLocality is then
    /// enabled at `score` but not at `preScore`; `multiPoint` enables both):
    /// the cluster-wide image counts are read there.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>() else {
            return Err(Status::error(
                "ImageLocality: no PreScore state; enable the plugin at preScore too (multiPoint enables both)",
            ));
        };
        let sum: i64 =
            s.present.iter().filter(|(name, _)| node.image(name).is_some()).map(|(_, v)| v).sum();
        Ok(calculate_priority(sum, s.image_count))
    }
}

#[cfg(test)]
mod tests;
