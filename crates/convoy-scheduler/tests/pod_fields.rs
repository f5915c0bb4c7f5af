//! The pod-field table (`convoy_api::pod_fields::FIELDS`) against the
//! PodSpec a real kube-apiserver v1.37.2 serves: every field is classified,
//! and the table names no field that does not exist. A field added to
//! PodSpec (or to Container, Volume, ...) fails here until the table says
//! what Convoy does with it.

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use convoy_api::pod_fields::{FIELDS, FieldRule, covers};
use convoy_testenv::TestEnv;
use kube::api::GetParams;
use serde_json::Value;

const POD_SPEC: &str = "io.k8s.api.core.v1.PodSpec";
/// Deep enough for every PodSpec field (affinity terms reach 7 levels); a
/// deeper one counts as a leaf and must be covered by a row.
const MAX_DEPTH: usize = 12;

/// The schema a property refers to (`$ref`, or `allOf: [{$ref}]`).
fn referenced<'a>(schemas: &'a Value, property: &Value) -> Option<(&'a str, &'a Value)> {
    let reference = property
        .get("$ref")
        .or_else(|| property.get("allOf")?.as_array()?.iter().find_map(|s| s.get("$ref")))?
        .as_str()?;
    let name = reference.rsplit('/').next()?;
    let (name, schema) = schemas.as_object()?.get_key_value(name)?;
    Some((name.as_str(), schema))
}

/// Every field path below `path`, with whether it is a leaf: a list is
/// `spec.volumes`, its items' fields `spec.volumes[].name`; a map is a leaf.
fn walk(
    schemas: &Value,
    schema: &Value,
    path: &str,
    stack: &mut Vec<String>,
    out: &mut BTreeMap<String, bool>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    for (name, property) in properties {
        let field = format!("{path}.{name}");
        let (below, items) = match property.get("type").and_then(Value::as_str) {
            Some("array") => (format!("{field}[]"), &property["items"]),
            _ => (field.clone(), property),
        };
        let child = referenced(schemas, items)
            .filter(|(_, s)| s.get("properties").is_some_and(Value::is_object))
            .filter(|(t, _)| stack.len() < MAX_DEPTH && !stack.iter().any(|s| s == t));
        out.insert(field, child.is_none());
        if let Some((type_name, s)) = child {
            stack.push(type_name.to_string());
            walk(schemas, s, &below, stack, out);
            stack.pop();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_spec_field_is_classified() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let request = kube::core::Request::new("/openapi/v3/api").get("v1", &GetParams::default())?;
    let text = client.request_text(request).await.context("GET /openapi/v3/api/v1")?;
    let doc: Value = serde_json::from_str(&text)?;
    let schemas = &doc["components"]["schemas"];
    let pod_spec = schemas.get(POD_SPEC).context("no PodSpec in core/v1")?;

    let mut fields = BTreeMap::new();
    walk(schemas, pod_spec, "spec", &mut vec![POD_SPEC.to_string()], &mut fields);
    ensure!(fields.len() > 500, "only {} fields walked: is the schema complete?", fields.len());

    let rows: Vec<(String, &FieldRule)> =
        FIELDS.iter().flat_map(|r| r.paths().into_iter().map(move |p| (p, r))).collect();
    let unclassified: Vec<&str> = fields
        .iter()
        .filter(|(path, leaf)| **leaf && !rows.iter().any(|(r, _)| covers(r, path)))
        .map(|(path, _)| path.as_str())
        .collect();
    let unknown: Vec<&str> =
        rows.iter().filter(|(r, _)| !fields.contains_key(r)).map(|(r, _)| r.as_str()).collect();
    ensure!(
        unclassified.is_empty(),
        "PodSpec fields missing from convoy_api::pod_fields::FIELDS (decide whether Convoy \
         evaluates, refuses or may ignore each, as upstream's default plugins do):\n  {}",
        unclassified.join("\n  ")
    );
    ensure!(
        unknown.is_empty(),
        "rows of convoy_api::pod_fields::FIELDS naming no field of kube-apiserver v1.37.2's \
         PodSpec:\n  {}",
        unknown.join("\n  ")
    );
    println!("{} PodSpec field paths, {} table paths: all classified", fields.len(), rows.len());
    Ok(())
}
