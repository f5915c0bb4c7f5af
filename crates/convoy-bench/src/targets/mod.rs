//! The targets the runner drives, each an implementation of
//! the runner's `Target` trait with what only it does:
//!
//! - [`embedded`]: Convoy's live loop on an in-memory cluster, no API
//!   server;
//! - [`api`]: a real kube-apiserver (testenv), with Convoy, kube-scheduler or
//!   the null binder as the scheduler.
//!
//! A target may import the runner (its trait, the pod tracker, steady
//! states and churn) and everything below it; never the results.

pub mod api;
pub mod embedded;
