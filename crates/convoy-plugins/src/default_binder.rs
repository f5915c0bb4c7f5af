//! DefaultBinder (Bind): binds through the scheduler's [`Binder`] (upstream
//! `plugins/defaultbinder`).

use std::sync::Arc;

use futures::future::BoxFuture;

use convoy_api::{BindError, BindPlugin, Binder, CycleState, Plugin, PodInfo, Status, names};

/// Binds pods with the scheduler's binder.
#[derive(Clone)]
pub struct DefaultBinder {
    binder: Arc<dyn Binder>,
}

impl std::fmt::Debug for DefaultBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultBinder").finish_non_exhaustive()
    }
}

impl DefaultBinder {
    /// A binder plugin over `binder`.
    pub fn new(binder: Arc<dyn Binder>) -> Self {
        Self { binder }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        names::DEFAULT_BINDER
    }
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {
    /// Success when bound (or already bound to this node); Error with the
    /// binder's message otherwise.
    fn bind(
        &self,
        _state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Status> {
        let fut = self.binder.bind(pod, node);
        Box::pin(async move {
            match fut.await {
                Ok(()) | Err(BindError::AlreadyBound) => Status::success(),
                Err(e) => Status::error(e.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use convoy_api::Code;
    use convoy_api::testing::PodBuilder;

    use super::*;
    use crate::helper::testing::FixedBinder;

    #[test]
    fn bind_results() {
        let cases = [
            ("bound", Ok(()), Code::Success, ""),
            ("already bound", Err(BindError::AlreadyBound), Code::Success, ""),
            (
                "pod gone",
                Err(BindError::PodGone("uid changed".into())),
                Code::Error,
                "pod is gone: uid changed",
            ),
            (
                "failed",
                Err(BindError::Failed("connection refused".into())),
                Code::Error,
                "connection refused",
            ),
        ];
        for (name, result, code, msg) in cases {
            let plugin = DefaultBinder::new(Arc::new(FixedBinder(result)));
            let s = futures::executor::block_on(plugin.bind(
                Arc::new(CycleState::new()),
                PodBuilder::new("p").info(),
                Arc::from("n"),
            ));
            assert_eq!(s.code(), code, "{name}");
            assert_eq!(s.message(), msg, "{name}");
        }
    }
}
