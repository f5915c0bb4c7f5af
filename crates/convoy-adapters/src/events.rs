//! Writing `events.k8s.io/v1` Events, aggregated as client-go's
//! `EventCorrelator` does (`tools/record/events_cache.go`, v0.37.2), so that
//! a new message is never hidden behind an older one.
//!
//! - An Event identical to one written in the last [`SERIES_TTL`] (same
//!   object, type, reason, action, related object **and note**) is not
//!   written again: the first one's `series.count` goes up. As client-go's
//!   `tools/events` broadcaster, the first repeat is written at once
//!   (`count: 2`); later ones are counted in memory and written at most
//!   once per [`SERIES_REFRESH`] (the writer flushes what is pending on
//!   that period), so a pod retried thousands of times costs a few writes,
//!   not one per attempt.
//! - An Event with a new note is a new Event object, so `kubectl events`
//!   and `kubectl describe` show the latest message. (kube-runtime's
//!   `Recorder`, which Convoy used before, keys its series without the note:
//!   a later `FailedScheduling` with another message only bumped the count
//!   of the first one, whose note stayed the old message.)
//! - Spam protection, as upstream's `EventAggregator`: once one object has
//!   had [`MAX_SIMILAR`] different notes for the same type, reason and
//!   action within [`SIMILAR_INTERVAL`], further ones are combined into one
//!   Event whose note is `(combined from similar events): <message>` and
//!   whose count goes up. An Event's note cannot change (the API server
//!   refuses it for `events.k8s.io/v1`), so that Event keeps the message
//!   that opened it; for a pod, the `PodScheduled` condition always carries
//!   the latest message.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;

/// How long an Event stays open for repeats (kube-runtime's and client-go
/// `tools/events`' 6 minutes, under the API server's 1-hour Event TTL).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// How often a series' count is written at most after its first repeat
/// (client-go writes later counts every 30 minutes; a count this fresh
/// keeps `kubectl describe` close to the truth).
pub const SERIES_REFRESH: Duration = Duration::from_secs(30);
/// Different notes per object, type, reason and action after which they
/// are combined (upstream `defaultAggregateMaxEvents`).
pub const MAX_SIMILAR: usize = 10;
/// The window of [`MAX_SIMILAR`] (upstream
/// `defaultAggregateIntervalInSeconds`, 10 minutes).
pub const SIMILAR_INTERVAL: Duration = Duration::from_secs(600);
/// The prefix of a combined Event's note (upstream's wording).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";
/// Entries kept at most in each cache (upstream `maxLruCacheEntries`);
/// past it, the oldest half goes.
const MAX_ENTRIES: usize = 4096;

/// An object as an Event refers to it: kind, namespace, name and UID.
type ObjectKey = (Option<String>, Option<String>, Option<String>, Option<String>);

/// What makes two Events similar: everything but the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SimilarKey {
    type_: &'static str,
    reason: String,
    action: String,
    regarding: ObjectKey,
    related: Option<ObjectKey>,
}

/// An Event's series key: similar, and the same note (`None` for the
/// combined Event of a similar key).
type SeriesKey = (SimilarKey, Option<String>);

/// An Event written: its object's name and namespace, and its series.
#[derive(Debug, Clone)]
struct Written {
    name: String,
    namespace: String,
    /// Occurrences seen.
    count: i32,
    /// The count the API server has.
    stored: i32,
    /// The last occurrence.
    last: Timestamp,
    /// When the series was last written.
    stored_at: Timestamp,
}

/// The different notes seen for a similar key.
#[derive(Debug, Default)]
struct Similar {
    notes: HashSet<String>,
    last: Option<Timestamp>,
}

/// What [`Aggregator::observe`] decides for an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Create a new Event with this note.
    Create {
        /// The note to write.
        note: String,
    },
    /// Patch the series of an Event written before.
    Series {
        /// The Event's name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The new `series.count`.
        count: i32,
    },
    /// A repeat counted in memory, written later (see [`SERIES_REFRESH`]).
    Counted,
}

/// A series whose count is ahead of what the API server has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingSeries {
    key: SeriesKey,
    name: String,
    namespace: String,
    count: i32,
}

impl PendingSeries {
    /// The Event's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The Event's namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// The client-side state of the correlation, without IO (tested alone).
#[derive(Debug, Default)]
pub(crate) struct Aggregator {
    series: HashMap<SeriesKey, Written>,
    similar: HashMap<SimilarKey, Similar>,
}

fn reference(r: &ObjectReference) -> ObjectKey {
    (r.kind.clone(), r.namespace.clone(), r.name.clone(), r.uid.clone())
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

fn older_than(t: Timestamp, now: Timestamp, d: Duration) -> bool {
    now.duration_since(t).unsigned_abs() > d
}

impl Aggregator {
    /// Decides how to write `ev` about `regarding` at `now`: its series key
    /// and what to write. Call [`Aggregator::written`] once written.
    fn observe(
        &mut self,
        ev: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> (SeriesKey, Write) {
        self.expire(now);
        let similar = SimilarKey {
            type_: type_name(ev.type_),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            regarding: reference(regarding),
            related: ev.secondary.as_ref().map(reference),
        };
        let note = ev.note.clone().unwrap_or_default();
        let record = self.similar.entry(similar.clone()).or_default();
        if record.last.is_some_and(|t| older_than(t, now, SIMILAR_INTERVAL)) {
            record.notes.clear();
        }
        record.last = Some(now);
        let combined = if record.notes.contains(&note) || record.notes.len() < MAX_SIMILAR - 1 {
            record.notes.insert(note.clone());
            false
        } else {
            true
        };
        let (key, note) = if combined {
            ((similar, None), format!("{COMBINED_PREFIX}{note}"))
        } else {
            ((similar, Some(note.clone())), note)
        };
        let write = match self.series.get_mut(&key) {
            Some(w) if w.stored > 1 && !older_than(w.stored_at, now, SERIES_REFRESH) => {
                w.count += 1;
                w.last = now;
                Write::Counted
            }
            Some(w) => Write::Series {
                name: w.name.clone(),
                namespace: w.namespace.clone(),
                count: w.count + 1,
            },
            None => Write::Create { note },
        };
        (key, write)
    }

    /// The series whose counts the API server does not have yet.
    pub(crate) fn pending(&self) -> Vec<PendingSeries> {
        let pending = self.series.iter().filter(|(_, w)| w.count > w.stored);
        pending
            .map(|(key, w)| PendingSeries {
                key: key.clone(),
                name: w.name.clone(),
                namespace: w.namespace.clone(),
                count: w.count,
            })
            .collect()
    }

    /// Records that the Event of `key` was written (created as `name` in
    /// `namespace`, or its series patched to `count`).
    fn written(
        &mut self,
        key: SeriesKey,
        name: String,
        namespace: String,
        count: i32,
        now: Timestamp,
    ) {
        let stored = count;
        let last = self.series.get(&key).map_or(now, |w| w.last.max(now));
        let count = self.series.get(&key).map_or(count, |w| w.count.max(count));
        self.series.insert(key, Written { name, namespace, count, stored, last, stored_at: now });
    }

    /// Forgets a series (its Event is gone): the next repeat creates one.
    fn forget(&mut self, key: &SeriesKey) {
        self.series.remove(key);
    }

    fn expire(&mut self, now: Timestamp) {
        self.series.retain(|_, w| !older_than(w.last, now, SERIES_TTL));
        self.similar.retain(|_, s| s.last.is_some_and(|t| !older_than(t, now, SIMILAR_INTERVAL)));
        if self.series.len() > MAX_ENTRIES {
            let mut lasts: Vec<Timestamp> = self.series.values().map(|w| w.last).collect();
            lasts.sort_unstable();
            let cut = lasts[lasts.len() / 2];
            self.series.retain(|_, w| w.last > cut);
        }
        if self.similar.len() > MAX_ENTRIES {
            let mut lasts: Vec<Timestamp> = self.similar.values().filter_map(|s| s.last).collect();
            lasts.sort_unstable();
            let cut = lasts[lasts.len() / 2];
            self.similar.retain(|_, s| s.last.is_some_and(|t| t > cut));
        }
    }
}

/// Writes Events as the module docs say. Not shared: one writer task owns it.
pub(crate) struct EventRecorder {
    client: kube::Client,
    reporter: Reporter,
    state: Aggregator,
}

impl EventRecorder {
    /// A recorder writing as `reporter`.
    pub(crate) fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self { client, reporter, state: Aggregator::default() }
    }

    /// Writes `ev` about `regarding`: a new Event, or a repeat's series.
    pub(crate) async fn publish(
        &mut self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let (key, write) = self.state.observe(ev, regarding, now);
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let note = match write {
            Write::Series { name, namespace, count } => {
                let series = EventSeries { count, last_observed_time: MicroTime(now) };
                let patch = json!({ "series": series });
                let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
                match events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => {
                        self.state.written(key, name, namespace, count, now);
                        return Ok(());
                    }
                    // Deleted meanwhile (its TTL, or by hand): start anew.
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        self.state.forget(&key);
                        let (_, again) = self.state.observe(ev, regarding, now);
                        match again {
                            Write::Create { note } => note,
                            Write::Series { .. } | Write::Counted => {
                                unreachable!("the series was forgotten")
                            }
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            Write::Create { note } => note,
            Write::Counted => return Ok(()),
        };
        let event = self.event(ev, regarding, &namespace, note, now);
        let created = events.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.state.written(key, name, namespace, 1, now);
        Ok(())
    }

    /// The series whose counts are not written yet.
    pub(crate) fn pending(&self) -> Vec<PendingSeries> {
        self.state.pending()
    }

    /// Writes a pending series' count (a series whose Event is gone is
    /// forgotten: its next repeat creates a new one).
    pub(crate) async fn write_pending(&mut self, p: PendingSeries) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let series = EventSeries { count: p.count, last_observed_time: MicroTime(now) };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &p.namespace);
        let patch = json!({ "series": series });
        match events.patch(&p.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                self.state.written(p.key, p.name, p.namespace, p.count, now);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.state.forget(&p.key);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn event(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        namespace: &str,
        note: String,
        now: Timestamp,
    ) -> K8sEvent {
        let object = regarding.name.as_deref().unwrap_or(&self.reporter.controller);
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            note: Some(note),
            metadata: ObjectMeta {
                namespace: Some(namespace.to_string()),
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter.instance.clone().unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(type_name(ev.type_).to_string()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            note: Some(note.into()),
            action: "Scheduling".into(),
            secondary: None,
        }
    }

    fn pod(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    /// Observes and "writes" (as the recorder does on success); returns
    /// the decision.
    fn record(a: &mut Aggregator, ev: &Event, r: &ObjectReference, now: Timestamp) -> Write {
        let (key, write) = a.observe(ev, r, now);
        let (name, count) = match &write {
            Write::Create { note } => (format!("{}-{note}", r.name.as_deref().unwrap()), 1),
            Write::Series { name, count, .. } => (name.clone(), *count),
            Write::Counted => return write,
        };
        a.written(key, name, "ns".into(), count, now);
        write
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn a_new_note_is_a_new_event_and_a_repeat_a_series() {
        let mut a = Aggregator::default();
        let p = pod("p");
        let first = record(&mut a, &failed("0/3 nodes: 3 Insufficient cpu."), &p, at(0));
        assert_eq!(first, Write::Create { note: "0/3 nodes: 3 Insufficient cpu.".into() });
        let second = record(&mut a, &failed("0/4 nodes: 4 Insufficient cpu."), &p, at(1));
        assert_eq!(second, Write::Create { note: "0/4 nodes: 4 Insufficient cpu.".into() });
        let repeat = record(&mut a, &failed("0/4 nodes: 4 Insufficient cpu."), &p, at(2));
        assert_eq!(
            repeat,
            Write::Series {
                name: "p-0/4 nodes: 4 Insufficient cpu.".into(),
                namespace: "ns".into(),
                count: 2
            }
        );
        let again = record(&mut a, &failed("0/3 nodes: 3 Insufficient cpu."), &p, at(3));
        assert!(matches!(again, Write::Series { count: 2, .. }), "{again:?}");
        // Another pod, another reason: their own Events.
        let other = record(&mut a, &failed("0/3 nodes: 3 Insufficient cpu."), &pod("q"), at(4));
        assert!(matches!(other, Write::Create { .. }));
        let mut scheduled = failed("Successfully assigned ns/p to n");
        (scheduled.type_, scheduled.reason) = (EventType::Normal, "Scheduled".into());
        assert!(matches!(record(&mut a, &scheduled, &p, at(5)), Write::Create { .. }));
    }

    #[test]
    fn a_series_ends_after_its_ttl() {
        let mut a = Aggregator::default();
        let p = pod("p");
        record(&mut a, &failed("m"), &p, at(0));
        let late = at(SERIES_TTL.as_secs() as i64 + 1);
        assert!(matches!(record(&mut a, &failed("m"), &p, late), Write::Create { .. }));
    }

    #[test]
    fn many_different_notes_are_combined_as_upstream() {
        let mut a = Aggregator::default();
        let p = pod("p");
        for i in 0..MAX_SIMILAR - 1 {
            let w = record(&mut a, &failed(&format!("message {i}")), &p, at(i as i64));
            assert!(matches!(w, Write::Create { ref note } if *note == format!("message {i}")));
        }
        // The tenth different note opens the combined Event...
        let w = record(&mut a, &failed("message 9"), &p, at(20));
        assert_eq!(w, Write::Create { note: format!("{COMBINED_PREFIX}message 9") });
        // ...which counts the next different ones.
        let w = record(&mut a, &failed("message 10"), &p, at(21));
        assert!(matches!(w, Write::Series { count: 2, .. }), "{w:?}");
        // A note seen before still has its own series.
        let w = record(&mut a, &failed("message 0"), &p, at(22));
        assert!(matches!(w, Write::Series { ref name, count: 2, .. } if name == "p-message 0"));
        // After a quiet interval, new notes get their own Events again.
        let quiet = at(22 + SIMILAR_INTERVAL.as_secs() as i64 + 1);
        let w = record(&mut a, &failed("message 11"), &p, quiet);
        assert_eq!(w, Write::Create { note: "message 11".into() });
    }

    /// After the first repeat (written at once, as client-go), repeats
    /// are counted in memory; the count is written once pending, or with
    /// the next repeat after [`SERIES_REFRESH`].
    #[test]
    fn later_repeats_are_counted_and_written_once_per_refresh() {
        let mut a = Aggregator::default();
        let p = pod("p");
        record(&mut a, &failed("m"), &p, at(0));
        assert!(matches!(record(&mut a, &failed("m"), &p, at(1)), Write::Series { count: 2, .. }));
        assert!(a.pending().is_empty(), "the first repeat is written");
        for t in 2..10 {
            assert_eq!(record(&mut a, &failed("m"), &p, at(t)), Write::Counted);
        }
        let pending = a.pending();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].name(), pending[0].count), ("p-m", 10));
        // Written by the writer's refresh: nothing pending any more.
        let PendingSeries { key, name, namespace, count } = pending[0].clone();
        a.written(key, name, namespace, count, at(10));
        assert!(a.pending().is_empty());
        assert_eq!(record(&mut a, &failed("m"), &p, at(11)), Write::Counted);
        // A repeat a refresh period after the last write is written itself.
        let later = at(11 + SERIES_REFRESH.as_secs() as i64);
        let w = record(&mut a, &failed("m"), &p, later);
        assert!(matches!(w, Write::Series { count: 12, .. }), "{w:?}");
        assert!(a.pending().is_empty());
    }
}
