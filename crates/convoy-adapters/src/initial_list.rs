//! Every watch of this crate starts here: `kube::runtime::watcher` with
//! [`crate::backoff`]'s retries, and streaming lists with a fallback.
//!
//! With streaming lists (`--streaming-lists`, KEP-3157's watch-list: one
//! watch with `sendInitialEvents=true` instead of LIST then WATCH), an API
//! server whose `WatchList` feature is off refuses the watch with `422
//! Invalid` ("sendInitialEvents is forbidden for watch unless the WatchList
//! feature gate is enabled"). Such a watch would retry the same request
//! forever and the scheduler would never become ready; instead it is
//! started again with a paginated LIST and WATCH, once, with a warning.

use std::fmt::Debug;

use futures::stream::{self, BoxStream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, InitialListStrategy};
use serde::de::DeserializeOwned;

/// Watches `api` with `cfg` (retrying as [`crate::backoff`] says); with
/// streaming lists, falls back to LIST and WATCH if the server refuses them.
pub(crate) fn watch<K>(
    api: Api<K>,
    cfg: &watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let start = |api: Api<K>, cfg: watcher::Config| {
        watcher::watcher(api, cfg).backoff(crate::backoff::watch_backoff()).boxed()
    };
    if cfg.initial_list_strategy != InitialListStrategy::StreamingList {
        return start(api, cfg.clone());
    }
    let first = start(api.clone(), cfg.clone());
    let listing =
        watcher::Config { initial_list_strategy: InitialListStrategy::ListWatch, ..cfg.clone() };
    stream::unfold((first, Some((api, listing))), move |(mut current, mut fallback)| async move {
        loop {
            let item = current.next().await?;
            if let Err(e) = &item
                && refuses_streaming_lists(e)
                && let Some((api, listing)) = fallback.take()
            {
                tracing::warn!(
                    resource = api.resource_url(),
                    error = %e,
                    "the API server refuses streaming lists (its WatchList feature is off): \
                     listing and watching instead"
                );
                current = start(api, listing);
                continue;
            }
            return Some((item, (current, fallback)));
        }
    })
    .boxed()
}

/// Whether `e` is the server's refusal of `sendInitialEvents`.
fn refuses_streaming_lists(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return false,
    };
    matches!(status.code, 400 | 422) && status.message.contains("sendInitialEvents")
}
