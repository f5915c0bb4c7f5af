//! The pods of a node, in a list that is cheap to copy.
//!
//! A [`NodeInfo`](crate::NodeInfo) is shared between the cache and the
//! snapshot a cycle reads, and copied on the cache's next write to it. A
//! plain `Vec<Arc<PodInfo>>` makes that copy touch every pod's reference
//! count: on a node with 30,000 pods (upstream's SchedulingDaemonset case)
//! each placement copied 30,000. [`PodList`] holds the pods in shared chunks
//! of [`CHUNK`]: a copy shares them all, and a write copies one or two
//! chunks.

use std::sync::Arc;

use crate::pod_info::PodInfo;

/// Pods per chunk: a copy costs `len / CHUNK` reference counts, a write at
/// most two chunks of `CHUNK` pointers.
pub const CHUNK: usize = 64;

type Chunk = Arc<Vec<Arc<PodInfo>>>;

/// A list of pods (unordered: removal moves the last pod into the gap, as
/// `Vec::swap_remove`). Every chunk but the last is full.
#[derive(Debug, Clone, Default)]
pub struct PodList {
    chunks: Vec<Chunk>,
    len: usize,
}

impl PodList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of pods.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pods.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<PodInfo>> + Clone + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Appends a pod.
    pub fn push(&mut self, pod: Arc<PodInfo>) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(pod),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(pod);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }

    /// Removes the last pod (in list order) for which `matches` holds, and
    /// returns it; the list's last pod takes its place.
    pub fn remove_last_where(
        &mut self,
        mut matches: impl FnMut(&Arc<PodInfo>) -> bool,
    ) -> Option<Arc<PodInfo>> {
        let (c, i) = self
            .chunks
            .iter()
            .enumerate()
            .rev()
            .find_map(|(c, chunk)| chunk.iter().rposition(&mut matches).map(|i| (c, i)))?;
        let last = self.chunks.len() - 1;
        let tail = Arc::make_mut(&mut self.chunks[last]).pop().expect("chunks are never empty");
        if self.chunks[last].is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if (c, i) == (last, self.chunks.get(last).map_or(0, |l| l.len())) {
            // The pod was the list's last.
            return Some(tail);
        }
        Some(std::mem::replace(&mut Arc::make_mut(&mut self.chunks[c])[i], tail))
    }
}

/// The pod at a position of [`PodList::iter`]'s order (every chunk but the
/// last is full, so this is one division). Panics when out of range.
impl std::ops::Index<usize> for PodList {
    type Output = Arc<PodInfo>;

    fn index(&self, i: usize) -> &Arc<PodInfo> {
        assert!(i < self.len, "pod {i} of a list of {}", self.len);
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<'a> IntoIterator for &'a PodList {
    type Item = &'a Arc<PodInfo>;
    type IntoIter = std::iter::FlatMap<
        std::slice::Iter<'a, Chunk>,
        std::slice::Iter<'a, Arc<PodInfo>>,
        fn(&'a Chunk) -> std::slice::Iter<'a, Arc<PodInfo>>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl FromIterator<Arc<PodInfo>> for PodList {
    fn from_iter<I: IntoIterator<Item = Arc<PodInfo>>>(iter: I) -> Self {
        let mut list = Self::new();
        iter.into_iter().for_each(|p| list.push(p));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    fn names(l: &PodList) -> Vec<String> {
        let mut v: Vec<String> = l.iter().map(|p| p.key.name.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn push_remove_and_copies_share_chunks() {
        let pods: Vec<Arc<PodInfo>> =
            (0..200).map(|i| PodBuilder::new(&format!("p{i:03}")).info()).collect();
        let mut list: PodList = pods.iter().cloned().collect();
        assert_eq!((list.len(), list.chunks.len()), (200, 4));
        assert!((0..200).all(|i| Arc::ptr_eq(&list[i], &pods[i])));
        let copy = list.clone();
        // Removing from the first chunk copies it and the last, not the rest.
        let gone = list.remove_last_where(|p| Arc::ptr_eq(p, &pods[5])).unwrap();
        assert!(Arc::ptr_eq(&gone, &pods[5]));
        assert!(Arc::ptr_eq(&list.chunks[1], &copy.chunks[1]));
        assert!(!Arc::ptr_eq(&list.chunks[0], &copy.chunks[0]));
        assert_eq!(list.len(), 199);
        assert_eq!(copy.len(), 200, "the copy is unchanged");
        let mut want: Vec<String> = (0..200).map(|i| format!("p{i:03}")).collect();
        want.retain(|n| n != "p005");
        assert_eq!(names(&list), want);
        // Removing the last pod, and everything, keeps the chunks full.
        let last = list.iter().next_back().unwrap().clone();
        assert!(Arc::ptr_eq(&list.remove_last_where(|p| Arc::ptr_eq(p, &last)).unwrap(), &last));
        while !list.is_empty() {
            let p = list.iter().next().cloned().unwrap();
            list.remove_last_where(|q| Arc::ptr_eq(q, &p)).unwrap();
            assert!(list.chunks.iter().rev().skip(1).all(|c| c.len() == CHUNK));
            assert_eq!(list.iter().count(), list.len());
        }
        assert!(list.is_empty() && list.chunks.is_empty());
        assert!(list.remove_last_where(|_| true).is_none());
    }
}
