//! What each scheduler says about a pod, read from its log as it is
//! written: upstream's klog text lines (`-v=2 --vmodule=schedule_one=10`)
//! and Convoy's JSON lines (`--log-format json`,
//! `RUST_LOG=info,convoy::scores=trace`).
//!
//! The lines read, upstream (`schedule_one.go`, v1.37.2) and in Convoy:
//! - `"Plugin scored node for pod" pod plugin node score`: one plugin's
//!   normalized, weighted score of one node (plugins skipped at PreScore are
//!   absent; a cycle with one feasible node has none);
//! - `"Calculated node's final score for pod" pod node score`: the total;
//! - the end of the attempt: upstream's `"Successfully bound pod to node"
//!   pod node`, `"Unable to schedule pod; no fit; waiting" pod err` and
//!   `"Error scheduling pod; retrying" pod err`; Convoy's decision line
//!   (target `convoy::decision`, `result` = `scheduled` with `node`,
//!   `unschedulable` or `error` with the message).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use serde_json::Value;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Bound to the node.
    Bound(String),
    /// No node fits: upstream's FitError text (`0/N nodes are available: ...`).
    Unschedulable(String),
    /// Any other failure (retried by the scheduler).
    Error(String),
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ending::Bound(n) => write!(f, "bound to {n}"),
            Ending::Unschedulable(m) => write!(f, "unschedulable: {m}"),
            Ending::Error(m) => write!(f, "error: {m}"),
        }
    }
}

/// One line that matters, for one pod (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A plugin's weighted score of a node.
    Score { pod: String, plugin: String, node: String, score: i64 },
    /// A node's total.
    Total { pod: String, node: String, score: i64 },
    /// The attempt ended.
    End { pod: String, ending: Ending },
}

/// The scores of one scheduling cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cycle {
    /// Node → plugin → weighted score.
    pub scores: BTreeMap<String, BTreeMap<String, i64>>,
    /// Node → total.
    pub totals: BTreeMap<String, i64>,
}

/// One finished attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its scores (empty when nothing was scored).
    pub cycle: Cycle,
    /// How it ended.
    pub ending: Ending,
}

/// A log file read incrementally, its lines grouped into attempts per pod.
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    parse: fn(&str) -> Option<Event>,
    open: BTreeMap<String, Cycle>,
    done: BTreeMap<String, Vec<Attempt>>,
}

impl LogTail {
    /// A tail of `path` (which may not exist yet) read with `parse`.
    pub fn new(path: PathBuf, parse: fn(&str) -> Option<Event>) -> LogTail {
        LogTail {
            path,
            offset: 0,
            partial: Vec::new(),
            parse,
            open: BTreeMap::new(),
            done: BTreeMap::new(),
        }
    }

    /// Reads what was written since the last call.
    pub fn poll(&mut self) -> std::io::Result<()> {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return Ok(()) };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return Ok(()) };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        for line in String::from_utf8_lossy(&complete).lines() {
            if let Some(e) = (self.parse)(line) {
                self.apply(e);
            }
        }
        Ok(())
    }

    fn apply(&mut self, e: Event) {
        match e {
            Event::Score { pod, plugin, node, score } => {
                self.open
                    .entry(pod)
                    .or_default()
                    .scores
                    .entry(node)
                    .or_default()
                    .insert(plugin, score);
            }
            Event::Total { pod, node, score } => {
                self.open.entry(pod).or_default().totals.insert(node, score);
            }
            Event::End { pod, ending } => {
                let cycle = self.open.remove(&pod).unwrap_or_default();
                self.done.entry(pod).or_default().push(Attempt { cycle, ending });
            }
        }
    }

    /// The finished attempts of `pod`, oldest first.
    pub fn attempts(&self, pod: &str) -> &[Attempt] {
        self.done.get(pod).map_or(&[], Vec::as_slice)
    }
}

/// A klog text line of upstream kube-scheduler, e.g.
/// `I0601 10:00:00.123456 1 schedule_one.go:984] "Plugin scored node for pod" pod="ns/p" plugin="X" node="n" score=200`.
pub fn parse_klog(line: &str) -> Option<Event> {
    let (_, rest) = line.split_once("] ")?;
    let (message, mut rest) = take_value(rest)?;
    let mut kv = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        let Some((key, after)) = rest.split_once('=') else { break };
        let (value, after) = take_value(after)?;
        kv.entry(key.to_string()).or_insert(value);
        rest = after;
    }
    let field = |k: &str| kv.get(k).cloned();
    let pod = field("pod")?;
    let event = match message.as_str() {
        "Plugin scored node for pod" => Event::Score {
            pod,
            plugin: field("plugin")?,
            node: field("node")?,
            score: field("score")?.parse().ok()?,
        },
        "Calculated node's final score for pod" => {
            Event::Total { pod, node: field("node")?, score: field("score")?.parse().ok()? }
        }
        "Successfully bound pod to node" => {
            Event::End { pod, ending: Ending::Bound(field("node")?) }
        }
        "Unable to schedule pod; no fit; waiting" => {
            Event::End { pod, ending: Ending::Unschedulable(field("err")?) }
        }
        "Error scheduling pod; retrying" => {
            Event::End { pod, ending: Ending::Error(field("err").unwrap_or_default()) }
        }
        _ => return None,
    };
    Some(event)
}

/// A klog value at the start of `s`: a Go-quoted string, or a bare word.
/// Returns it and the rest.
fn take_value(s: &str) -> Option<(String, &str)> {
    let Some(body) = s.strip_prefix('"') else {
        let end = s.find(' ').unwrap_or(s.len());
        return Some((s[..end].to_string(), &s[end..]));
    };
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'u' => {
                    let hex: String = (0..4).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// A JSON line of Convoy (`--log-format json`): score events of target
/// `convoy::scores` and decision lines of target `convoy::decision`.
pub fn parse_convoy(line: &str) -> Option<Event> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let pod = s("pod")?;
    let message = s("message")?;
    match v["target"].as_str()? {
        "convoy::scores" => match message.as_str() {
            "Plugin scored node for pod" => Some(Event::Score {
                pod,
                plugin: s("plugin")?,
                node: s("node")?,
                score: v["score"].as_i64()?,
            }),
            "Calculated node's final score for pod" => {
                Some(Event::Total { pod, node: s("node")?, score: v["score"].as_i64()? })
            }
            _ => None,
        },
        "convoy::decision" => {
            let after = |sep: &str| message.split_once(sep).map(|(_, m)| m.to_string());
            let ending = match s("result")?.as_str() {
                "scheduled" => Ending::Bound(s("node")?),
                "unschedulable" => Ending::Unschedulable(after(" is unschedulable: ")?),
                _ => Ending::Error(after(" failed to schedule: ").unwrap_or(message.clone())),
            };
            Some(Event::End { pod, ending })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_lines() {
        let score = r#"I1130 19:30:48.354452    2669 schedule_one.go:984] "Plugin scored node for pod" pod="default/p1" plugin="TaintToleration" node="n1" score=300"#;
        assert_eq!(
            parse_klog(score),
            Some(Event::Score {
                pod: "default/p1".into(),
                plugin: "TaintToleration".into(),
                node: "n1".into(),
                score: 300
            })
        );
        let total = r#"I1130 19:30:48.354509    2669 schedule_one.go:1052] "Calculated node's final score for pod" pod="default/p1" node="n1" score=450"#;
        assert_eq!(
            parse_klog(total),
            Some(Event::Total { pod: "default/p1".into(), node: "n1".into(), score: 450 })
        );
        let bound = r#"I1130 19:30:48.387491    2669 schedule_one.go:483] "Successfully bound pod to node" pod="default/p1" node="n1" evaluatedNodes=3 feasibleNodes=3"#;
        assert_eq!(
            parse_klog(bound),
            Some(Event::End { pod: "default/p1".into(), ending: Ending::Bound("n1".into()) })
        );
        let unfit = r#"I1130 19:30:48.618718    2669 schedule_one.go:1194] "Unable to schedule pod; no fit; waiting" pod="default/p2" err="0/3 nodes are available: 1 node(s) had untolerated taint {a: \"b\"}, 2 Insufficient cpu.""#;
        assert_eq!(
            parse_klog(unfit),
            Some(Event::End {
                pod: "default/p2".into(),
                ending: Ending::Unschedulable(
                    "0/3 nodes are available: 1 node(s) had untolerated taint {a: \"b\"}, 2 Insufficient cpu."
                        .into()
                )
            })
        );
        let other = r#"I1130 19:30:48.354135    2669 schedule_one.go:117] "Attempting to schedule pod" pod="default/p1""#;
        assert_eq!(parse_klog(other), None);
        assert_eq!(parse_klog("W1130 garbage"), None);
    }

    #[test]
    fn convoy_lines() {
        let score = r#"{"timestamp":"t","level":"TRACE","message":"Plugin scored node for pod","pod":"ns/p","plugin":"NodeAffinity","node":"n1","score":200,"target":"convoy::scores"}"#;
        assert_eq!(
            parse_convoy(score),
            Some(Event::Score {
                pod: "ns/p".into(),
                plugin: "NodeAffinity".into(),
                node: "n1".into(),
                score: 200
            })
        );
        let unfit = r#"{"level":"INFO","message":"ns/p is unschedulable: 0/2 nodes are available: 2 Insufficient cpu.","pod":"ns/p","result":"unschedulable","target":"convoy::decision"}"#;
        assert_eq!(
            parse_convoy(unfit),
            Some(Event::End {
                pod: "ns/p".into(),
                ending: Ending::Unschedulable(
                    "0/2 nodes are available: 2 Insufficient cpu.".into()
                )
            })
        );
        let bound = r#"{"level":"INFO","message":"scheduled ns/p on n1","pod":"ns/p","result":"scheduled","node":"n1","target":"convoy::decision"}"#;
        assert_eq!(
            parse_convoy(bound),
            Some(Event::End { pod: "ns/p".into(), ending: Ending::Bound("n1".into()) })
        );
        assert_eq!(parse_convoy("not json"), None);
    }

    #[test]
    fn tail_groups_lines_into_attempts_as_they_are_written() {
        let path = std::env::temp_dir().join(format!("convoy-parity-tail-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut tail = LogTail::new(path.clone(), parse_klog);
        tail.poll().unwrap(); // no file yet
        let line = |m: &str| format!("I0 1 schedule_one.go:1] {m}\n");
        let mut text =
            line(r#""Plugin scored node for pod" pod="ns/p" plugin="A" node="n1" score=1"#);
        text += &line(r#""Calculated node's final score for pod" pod="ns/p" node="n1" score=1"#);
        // Half a line: not read until complete.
        text += r#"I0 1 schedule_one.go:1] "Successfully bound pod to node" pod="ns/p""#;
        std::fs::write(&path, &text).unwrap();
        tail.poll().unwrap();
        assert!(tail.attempts("ns/p").is_empty());
        text += " node=\"n1\"\n";
        std::fs::write(&path, &text).unwrap();
        tail.poll().unwrap();
        let a = tail.attempts("ns/p");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].ending, Ending::Bound("n1".into()));
        assert_eq!(a[0].cycle.scores["n1"]["A"], 1);
        assert_eq!(a[0].cycle.totals["n1"], 1);
        std::fs::remove_file(&path).unwrap();
    }
}
