//! The metrics and health server over a real socket on 127.0.0.1, with a
//! minimal HTTP/1.1 client.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use convoy_api::PodKey;
use convoy_queue::{IncomingCount, IncomingEvent, PendingCounts, QueueKind};
use convoy_scheduler::decision::{Decision, DecisionSink, Outcome};
use convoy_scheduler::http::{self, HttpState, NOT_READY_BODY};
use convoy_scheduler::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Reply {
    status: u16,
    headers: String,
    body: String,
}

/// One `GET` on a fresh connection (`Connection: close`), bounded in time.
async fn get(addr: SocketAddr, path: &str) -> Reply {
    let fetch = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        String::from_utf8(raw).unwrap()
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), fetch).await.expect("no reply in 10 s");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    let headers = head.to_ascii_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Reply { status, headers, body }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size");
        let n = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if n == 0 {
            return out;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
}

fn decision(outcome: Outcome, latency: Duration) -> Decision {
    Decision {
        pod: PodKey::new("default", "p"),
        uid: None,
        profile: Arc::from("convoy-scheduler"),
        outcome,
        evaluated: 3,
        feasible: 1,
        total: 3,
        rejected: BTreeMap::new(),
        attempt: 1,
        latency,
        since_first_attempt: None,
        group: None,
    }
}

async fn server(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> SocketAddr {
    let (addr, _task) =
        http::start("127.0.0.1:0".parse().unwrap(), HttpState::new(metrics, ready)).await.unwrap();
    addr
}

#[tokio::test]
async fn readyz_follows_the_synced_flag_and_healthz_is_always_ok() {
    let ready = Arc::new(AtomicBool::new(false));
    let addr = server(Arc::new(Metrics::new()), ready.clone()).await;
    assert_ne!(addr.port(), 0);

    let r = get(addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, NOT_READY_BODY);
    assert!(r.body.contains("not synced"));
    for path in ["/healthz", "/livez"] {
        let r = get(addr, path).await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{path}");
    }

    ready.store(true, Ordering::Release);
    let r = get(addr, "/readyz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));

    assert_eq!(get(addr, "/nope").await.status, 404);
}

#[tokio::test]
async fn metrics_exports_decisions_and_queue_state() {
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(true));

    // The refresh hook stands in for the scheduler's queue: it syncs the
    // gauges and counters at each scrape.
    let scrapes = Arc::new(AtomicUsize::new(0));
    let state = {
        let (m, scrapes) = (metrics.clone(), scrapes.clone());
        HttpState::new(metrics.clone(), ready).with_refresh(move || {
            let n = scrapes.fetch_add(1, Ordering::Relaxed) as u64 + 1;
            m.sync_queue(
                PendingCounts { active: 4, backoff: 3, unschedulable: 2, gated: 1 },
                &[IncomingCount {
                    queue: QueueKind::Active,
                    event: IncomingEvent::PodAdd,
                    count: 10 * n,
                }],
            );
        })
    };
    let (addr, task) = http::start("127.0.0.1:0".parse().unwrap(), state).await.unwrap();

    let scheduled = Outcome::Scheduled { node: Arc::from("n1"), score: 0 };
    metrics.record(&decision(scheduled, Duration::from_micros(1500)));
    metrics.record(&decision(
        Outcome::Unschedulable { message: "0/3 nodes are available".into() },
        Duration::from_millis(20),
    ));

    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers.contains(&format!("content-type: {OPENMETRICS_CONTENT_TYPE}")),
        "{}",
        r.headers
    );
    assert_eq!(scrapes.load(Ordering::Relaxed), 1);
    let body = &r.body;
    for line in [
        "# TYPE scheduler_schedule_attempts counter",
        "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"convoy-scheduler\"} 1",
        "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"convoy-scheduler\"} 1",
        "# TYPE scheduler_pending_pods gauge",
        "scheduler_pending_pods{queue=\"active\"} 4",
        "scheduler_pending_pods{queue=\"backoff\"} 3",
        "scheduler_pending_pods{queue=\"unschedulable\"} 2",
        "scheduler_pending_pods{queue=\"gated\"} 1",
        "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"PodAdd\"} 10",
        "# TYPE scheduler_scheduling_attempt_duration_seconds histogram",
        // 1.5 ms: not in le=0.001, in le=0.002 and above.
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.001\",result=\"scheduled\",profile=\"convoy-scheduler\"} 0",
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.002\",result=\"scheduled\",profile=\"convoy-scheduler\"} 1",
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"16.384\",result=\"scheduled\",profile=\"convoy-scheduler\"} 1",
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"+Inf\",result=\"scheduled\",profile=\"convoy-scheduler\"} 1",
        "scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"convoy-scheduler\"} 1",
        "scheduler_scheduling_attempt_duration_seconds_sum{result=\"scheduled\",profile=\"convoy-scheduler\"} 0.0015",
        // 20 ms: first in le=0.032.
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.016\",result=\"unschedulable\",profile=\"convoy-scheduler\"} 0",
        "scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.032\",result=\"unschedulable\",profile=\"convoy-scheduler\"} 1",
        "convoy_status_writes_dropped_total 0",
        "# EOF",
    ] {
        assert!(body.lines().any(|l| l == line), "missing {line:?} in\n{body}");
    }
    // Fifteen finite buckets, 0.001 × 2^i, and +Inf.
    let buckets: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("scheduler_scheduling_attempt_duration_seconds_bucket{"))
        .filter(|l| l.contains("result=\"scheduled\""))
        .collect();
    assert_eq!(buckets.len(), 16, "{buckets:#?}");

    // The next scrape syncs again: the counter follows the queue's
    // cumulative count (20), the decision counter is unchanged.
    let body = get(addr, "/metrics").await.body;
    assert!(
        body.contains(
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"PodAdd\"} 20\n"
        )
    );
    assert!(body.contains(
        "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"convoy-scheduler\"} 1\n"
    ));
    task.abort();
}

#[tokio::test]
async fn serve_stops_on_shutdown() {
    // Reserve a free port, release it, then serve on it.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let state = HttpState::new(Arc::new(Metrics::new()), Arc::new(AtomicBool::new(false)));
    let server = tokio::spawn(http::serve(addr, state, async {
        let _ = stop_rx.await;
    }));

    let mut tries = 0;
    let r = loop {
        match TcpStream::connect(addr).await {
            Ok(_) => break get(addr, "/healthz").await,
            Err(_) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("server never listened: {e}"),
        }
    };
    assert_eq!(r.status, 200);

    stop_tx.send(()).unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), server).await.expect("stops in time");
    res.unwrap().unwrap();
}
