//! What DynamicResources hands GpuPlacement: the devices of a node around
//! the allocation DynamicResources' Filter found there for the pod
//! ([`DeviceRoom`]). DynamicResources builds it (in Filter, kept in its
//! `CycleState`, read back with `dynamic_resources::device_room`);
//! GpuPlacement measures fragmentation on it for a pod with claims.

/// A node's own devices (those of its node-local pools, of the drivers the
/// pod's allocation uses) around the allocation Filter found there: what
/// GpuPlacement measures fragmentation on for a pod with claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceRoom {
    /// Devices on the node.
    pub capacity: i64,
    /// Devices no allocated or in-flight claim holds.
    pub free: i64,
    /// Devices the pod's allocation takes.
    pub requested: i64,
}
