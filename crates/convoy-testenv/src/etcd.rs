//! Just enough of etcd's JSON gateway (`/v3/...` over plain HTTP on the
//! testenv's loopback client URL) to compact its history.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Error, Result};

/// Compacts etcd at `url` (`http://127.0.0.1:PORT`) up to its current
/// revision and returns that revision.
pub(crate) async fn compact(url: &str) -> Result<i64> {
    // Any range answers with the store's current revision in its header.
    let range = post(url, "/v3/kv/range", &json!({ "key": "AA==", "limit": 1 })).await?;
    let revision = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse::<i64>().ok())
        .ok_or_else(|| Error::Etcd {
            request: "/v3/kv/range".into(),
            detail: format!("no header.revision in {range}"),
        })?;
    post(url, "/v3/kv/compaction", &json!({ "revision": revision.to_string(), "physical": true }))
        .await?;
    Ok(revision)
}

/// One `POST` with a JSON body; the JSON answer of a 200.
async fn post(url: &str, path: &str, body: &Value) -> Result<Value> {
    let err = |detail: String| Error::Etcd { request: path.to_string(), detail };
    let host = url.strip_prefix("http://").ok_or_else(|| err(format!("not an http URL: {url}")))?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, payload) =
        raw.split_once("\r\n\r\n").ok_or_else(|| err(format!("no HTTP header in {raw:?}")))?;
    if head.split(' ').nth(1) != Some("200") {
        return Err(err(format!("{head}\n{payload}")));
    }
    let payload = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(payload)
    } else {
        payload.to_string()
    };
    serde_json::from_str(&payload).map_err(|e| err(format!("{e} in {payload:?}")))
}

/// The body of a chunked HTTP/1.1 response.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn dechunks_a_body() {
        assert_eq!(dechunk("4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"), "{\"a\":1}");
    }
}
