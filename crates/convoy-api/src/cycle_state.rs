//! Typed per-cycle state shared between a plugin's extension points.

use std::any::{Any, TypeId};
use std::sync::Arc;

/// Data a plugin stores in the [`CycleState`] (written in PreFilter or
/// PreScore, read in Filter or Score).
pub trait StateData: Any + Send + Sync {}

impl<T: Any + Send + Sync> StateData for T {}

/// State for one scheduling cycle of one pod, keyed by type: each plugin
/// stores its own type, so reads never fail on a downcast and two plugins
/// cannot collide. Values are behind `Arc`, so cloning the state (for
/// preemption what-ifs) is cheap.
///
/// Entries are few (one per plugin that keeps state) and read once per
/// node per plugin, so they sit in a small vector scanned by `TypeId`:
/// faster than hashing on that path.
#[derive(Clone, Default)]
pub struct CycleState {
    data: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
    /// Whether per-plugin timings are recorded for this cycle (sampled).
    pub record_plugin_metrics: bool,
    /// Plugins whose PreFilter returned Skip: their Filter is not called.
    pub skip_filter_plugins: Vec<&'static str>,
    /// Plugins whose PreScore returned Skip: their Score is not called.
    pub skip_score_plugins: Vec<&'static str>,
    /// No PostFilter (preemption) for this pod in this cycle: set by the
    /// group cycle, which places members one by one and preempts nothing
    /// for them (upstream's pod-group cycle skips per-pod PostFilter).
    pub skip_post_filter: bool,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState").field("entries", &self.data.len()).finish()
    }
}

impl CycleState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a value, replacing one of the same type.
    pub fn write<T: StateData>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        let value: Arc<dyn Any + Send + Sync> = Arc::new(value);
        match self.data.iter_mut().find(|(k, _)| *k == id) {
            Some(slot) => slot.1 = value,
            None => self.data.push((id, value)),
        }
    }

    /// Reads the value of type `T`, if one was written.
    pub fn read<T: StateData>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.data.iter().find(|(k, _)| *k == id).and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// Removes the value of type `T`.
    pub fn delete<T: StateData>(&mut self) {
        let id = TypeId::of::<T>();
        self.data.retain(|(k, _)| *k != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct A(u32);
    #[derive(Debug, PartialEq)]
    struct B(&'static str);

    #[test]
    fn typed_reads() {
        let mut s = CycleState::new();
        s.write(A(1));
        s.write(B("x"));
        assert_eq!(s.read::<A>(), Some(&A(1)));
        let c = s.clone();
        s.write(A(2));
        assert_eq!(c.read::<A>(), Some(&A(1)), "clone is independent");
        s.delete::<B>();
        assert_eq!(s.read::<B>(), None);
    }
}
