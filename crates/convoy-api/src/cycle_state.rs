//! Typed per-cycle state shared between a plugin's extension points.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// Data a plugin stores in the [`CycleState`] (written in PreFilter or
/// PreScore, read in Filter or Score).
pub trait StateData: Any + Send + Sync {}

impl<T: Any + Send + Sync> StateData for T {}

/// State for one scheduling cycle of one pod, keyed by type: each plugin
/// stores its own type, so reads never fail on a downcast and two plugins
/// cannot collide. Values are behind `Arc`, so cloning the state (for
/// preemption what-ifs) is cheap.
#[derive(Clone, Default)]
pub struct CycleState {
    data: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    /// Whether per-plugin timings are recorded for this cycle (sampled).
    pub record_plugin_metrics: bool,
    /// Plugins whose PreFilter returned Skip: their Filter is not called.
    pub skip_filter_plugins: Vec<&'static str>,
    /// Plugins whose PreScore returned Skip: their Score is not called.
    pub skip_score_plugins: Vec<&'static str>,
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
        self.data.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// Reads the value of type `T`, if one was written.
    pub fn read<T: StateData>(&self) -> Option<&T> {
        self.data.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref::<T>())
    }

    /// Removes the value of type `T`.
    pub fn delete<T: StateData>(&mut self) {
        self.data.remove(&TypeId::of::<T>());
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
