//! Convoy's scheduling queue, with upstream kube-scheduler's semantics
//! (`pkg/scheduler/backend/queue/scheduling_queue.go`).
//!
//! A pending pod is in exactly one place:
//! - **activeQ**: ready, ordered by the QueueSort plugin; [`SchedulingQueue::pop`]
//!   takes the first.
//! - **backoffQ**: failed an attempt and waits out its backoff
//!   (`initial * 2^(attempts-1)`, capped at `max`, from its last failure);
//!   [`SchedulingQueue::flush_backoff_completed`] moves it to activeQ.
//!   When activeQ is empty, `pop` takes the pod whose backoff ends first
//!   at once (upstream's `SchedulerPopFromBackoffQ`, on by default since
//!   v1.33), unless its last attempt failed with an error.
//! - **the unschedulable pool**: rejected, waiting for a cluster event one of
//!   its rejecting plugins registered (and whose hint says Queue), or gated
//!   by a PreEnqueue plugin; the periodic
//!   [`SchedulingQueue::flush_unschedulable_leftover`] retries forgotten pods.
//! - **in flight**: popped and being scheduled. Events that arrive meanwhile
//!   are remembered, so a pod that then fails goes to backoffQ instead of
//!   waiting in the pool for an event that already went by.
//!
//! The queue never imports plugins: it is given the QueueSort and
//! PreEnqueue plugins as trait objects and, per profile, each plugin's
//! registered events with hint functions. Time comes from an injected
//! [`Clock`](convoy_api::Clock).
//!
//! Costs: add and pop are O(log n) with no allocation beyond the pod's own
//! entry; an event first computes which plugins registered for it and skips
//! the pool when no pooled pod was rejected by one of them, so events nobody
//! waits for cost no per-pod work.
//!
//! The queue also keeps the [`Nominator`]: the pods nominated to nodes by
//! preemption, which Filter counts so that the room freed for a preemptor
//! is not taken by pods of lower priority.
//!
//! May depend on: `convoy-api`, `tokio` (sync only), `parking_lot`.

mod active;
mod backoff;
mod config;
mod heap;
mod in_flight;
mod metrics;
mod nominator;
mod profiles;
mod queue;
mod state;
mod store;
mod unschedulable;

pub use config::{
    DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_MAX_IN_UNSCHEDULABLE, QueueConfig,
};
pub use metrics::{IncomingCount, IncomingEvent, PendingCounts, QueueKind};
pub use nominator::Nominator;
pub use profiles::ProfileQueueing;
pub use queue::SchedulingQueue;
pub use state::Failure;
