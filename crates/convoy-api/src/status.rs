//! Status codes returned by plugins, and what the framework does with each.

use std::borrow::Cow;
use std::fmt;

/// The verdict of a plugin at one extension point.
///
/// The variants carry upstream's names and meaning; the doc on each says how
/// the framework and the queue react.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The plugin ran and the pod may proceed.
    Success,
    /// An internal error (not a verdict on the pod): the attempt is aborted
    /// and the pod goes to the backoff queue.
    Error,
    /// The pod does not fit now, but preemption (PostFilter) or a cluster
    /// change may help: the pod waits for an event its rejecting plugins
    /// registered.
    Unschedulable,
    /// The pod does not fit this node and preemption cannot change that
    /// (e.g. a node selector): the node is skipped by preemption.
    UnschedulableAndUnresolvable,
    /// Permit only: the pod waits (up to a timeout) before binding.
    Wait,
    /// The plugin has nothing to do for this pod (PreFilter/PreScore): the
    /// matching Filter/Score calls are skipped for this cycle.
    Skip,
    /// The pod waits for something other than cluster resources (e.g. its
    /// gang is incomplete); it is requeued by the event that resolves it.
    Pending,
}

impl Code {
    /// Upstream's name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

/// A reason: static strings (the common case) cost no allocation.
pub type Reason = Cow<'static, str>;

/// The reasons of a status: none (every Success), one static string (the
/// common rejection, no allocation), or several. Dropping the first two
/// costs nothing, which matters on the Filter path (once per plugin per node).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reasons {
    None,
    One(Reason),
    Many(Vec<Reason>),
}

/// The result of a plugin call: a code, the reasons for it and the plugin
/// that gave it (set by the runtime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: Reasons,
    plugin: &'static str,
}

impl Default for Status {
    fn default() -> Self {
        Self::success()
    }
}

impl Status {
    /// A status with a code and no reason.
    pub const fn new(code: Code) -> Self {
        Self { code, reasons: Reasons::None, plugin: "" }
    }

    /// Success.
    pub const fn success() -> Self {
        Self::new(Code::Success)
    }

    /// Skip (PreFilter/PreScore: nothing to do for this pod).
    pub const fn skip() -> Self {
        Self::new(Code::Skip)
    }

    /// A status with one reason.
    pub fn with_reason(code: Code, reason: impl Into<Reason>) -> Self {
        Self { code, reasons: Reasons::One(reason.into()), plugin: "" }
    }

    /// Unschedulable with one reason (no allocation for a static string).
    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Self::with_reason(Code::Unschedulable, reason)
    }

    /// UnschedulableAndUnresolvable with one reason.
    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Self::with_reason(Code::UnschedulableAndUnresolvable, reason)
    }

    /// An internal error.
    pub fn error(reason: impl Into<Reason>) -> Self {
        Self::with_reason(Code::Error, reason)
    }

    /// Pending with one reason.
    pub fn pending(reason: impl Into<Reason>) -> Self {
        Self::with_reason(Code::Pending, reason)
    }

    /// Adds a reason.
    pub fn push_reason(&mut self, reason: impl Into<Reason>) {
        let reason = reason.into();
        self.reasons = match std::mem::replace(&mut self.reasons, Reasons::None) {
            Reasons::None => Reasons::One(reason),
            Reasons::One(first) => Reasons::Many(vec![first, reason]),
            Reasons::Many(mut v) => {
                v.push(reason);
                Reasons::Many(v)
            }
        };
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, in the order given.
    pub fn reasons(&self) -> &[Reason] {
        match &self.reasons {
            Reasons::None => &[],
            Reasons::One(r) => std::slice::from_ref(r),
            Reasons::Many(v) => v,
        }
    }

    /// The plugin that returned this status ("" when not set).
    pub fn plugin(&self) -> &'static str {
        self.plugin
    }

    /// Records which plugin returned this status (done by the runtime).
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// Whether the code is Success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Whether the code is Skip.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Whether the pod was rejected (Unschedulable, UnschedulableAndUnresolvable
    /// or Pending).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    /// The reasons joined with ", " (for messages).
    pub fn message(&self) -> String {
        self.reasons().join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code.as_str())?;
        if !self.plugin.is_empty() {
            write!(f, " from {}", self.plugin)?;
        }
        if !self.reasons().is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_code_plugin_and_reasons() {
        let mut s = Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit");
        s.push_reason("Insufficient memory");
        assert_eq!(
            s.to_string(),
            "Unschedulable from NodeResourcesFit: Insufficient cpu, Insufficient memory"
        );
        assert!(s.is_rejected());
        assert!(!Status::success().is_rejected());
    }
}
