//! The Go-template subset that upstream's node, pod and object templates
//! use.
//!
//! Upstream renders every template file with Go's `text/template` before
//! decoding it as YAML, with `.Index`, `.Count` and the op's
//! `templateParams` as data and the functions `AddInt`, `AddFloat`,
//! `SubtractInt`, `SubtractFloat`, `MultiplyInt`, `MultiplyFloat`,
//! `DivideInt`, `DivideFloat`, `Mod`, `Int` and `JSON`
//! (`scheduler_perf/operations.go`). This module evaluates exactly that:
//! `{{ ... }}` actions holding a field (`.Index`), a literal, `nil`, a
//! function call with arguments (which may be parenthesised calls) and
//! pipelines (`{{ .Index | AddInt 1 }}`), plus `{{- ... -}}` whitespace
//! trimming and `{{/* comments */}}`; as the preemption configs use them,
//! `{{if}}` / `{{else if}}` / `{{else}}` / `{{end}}` with Go's truth
//! (false, 0, "", nil, an empty list or map and a field the data lacks are
//! false: `{{if .priority}}` tests whether the op passed `priority`) and
//! Go's `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `not`, `and`, `or`; and, as the
//! DRA templates use them, variables (`{{$n := or .numDevices 10}}`,
//! `{{$n = ...}}`, `{{$n}}`, scoped as Go's: to the end of the enclosing
//! `if` or `range`) and `{{range PIPELINE}}...{{else}}...{{end}}` over an
//! integer (Go 1.22's range over int: `.` is 0, 1, ...), a list or a map
//! (its values in key order), with `{{range $e := ...}}` or
//! `{{range $i, $e := ...}}` declaring the element (and index or key).
//! Other control structures (`with`, `define`, `break`, ...), `$`
//! (the root data), other functions and printing a list, a map or nil are
//! refused with an error naming them, and so is printing a missing field
//! (Go prints `<no value>`; a benchmark is better off failing).

mod expr;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use expr::{CONTROL, eval_action, eval_condition};

/// A template value: a YAML scalar, list or map (`templateParams` such as
/// DRA `selectors` and `constraints` are lists of maps).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An integer (`.Index`, `.Count`, integer params).
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// `nil` (a YAML null, Go's `nil`).
    Null,
    /// A list.
    List(Vec<Value>),
    /// A map (keys sorted, as Go's `text/template` and JSON encoder visit them).
    Map(BTreeMap<String, Value>),
}

impl fmt::Display for Value {
    /// Scalars as Go prints them; nil, lists and maps as JSON (never
    /// printed by a template: see [`render`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Null | Value::List(_) | Value::Map(_) => write!(f, "{}", self.to_json()),
        }
    }
}

impl Value {
    /// Converts a YAML/JSON value.
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => Value::List(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(m) => {
                Value::Map(m.iter().map(|(k, v)| (k.clone(), Value::from_json(v))).collect())
            }
        }
    }

    /// The value as JSON (a non-finite float becomes null).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(i) => (*i).into(),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Str(s) => s.clone().into(),
            Value::Bool(b) => (*b).into(),
            Value::Null => serde_json::Value::Null,
            Value::List(l) => l.iter().map(Value::to_json).collect(),
            Value::Map(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }

    /// Go's truth (`text/template` `isTrue`): false, 0, "", nil and an
    /// empty list or map are false.
    fn truth(&self) -> bool {
        match self {
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(x) => *x != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::Null => false,
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
        }
    }
}

/// The data a template is rendered with: `Index`, `Count` and the op's
/// template params.
pub type Env = BTreeMap<String, Value>;

/// A template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template action {action:?}: {message}")]
pub struct TemplateError {
    /// The action's text, without the braces.
    pub action: String,
    /// What is wrong.
    pub message: String,
}

/// A piece of a template: text, an action printing a pipeline, a
/// variable declaration or assignment, an `if` with its branches, a
/// `range`.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    /// The action's text, without braces and trim markers.
    Print(String),
    /// `{{$name := pipeline}}` (`declare`) or `{{$name = pipeline}}`.
    Set {
        /// The action's text (for errors).
        action: String,
        /// The variable, without `$`.
        name: String,
        /// The pipeline.
        pipeline: String,
        /// `:=` rather than `=`.
        declare: bool,
    },
    If {
        /// `(condition, body)` of `if` and each `else if`.
        branches: Vec<(String, Vec<Node>)>,
        /// The `else` body (empty without one).
        otherwise: Vec<Node>,
    },
    Range {
        /// `$e` of `range $e := ...` or `$i, $e` of `range $i, $e := ...`
        /// (without `$`).
        names: Vec<String>,
        /// The pipeline ranged over.
        pipeline: String,
        /// The body, run with `.` set to each element.
        body: Vec<Node>,
        /// The `else` body, run when there is no element.
        otherwise: Vec<Node>,
    },
}

/// What the lexer yields: text (trim markers applied) and action bodies.
#[derive(Debug)]
enum Item<'a> {
    Text(&'a str),
    Action(&'a str),
}

fn lex(text: &str) -> Result<Vec<Item<'_>>, TemplateError> {
    let mut items = Vec::new();
    let mut rest = text;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut before = &rest[..open];
        if trim_next {
            before = before.trim_start();
        }
        let after_open = &rest[open + 2..];
        let (trim_left, body_start) = match after_open.strip_prefix("- ") {
            Some(b) => (true, b),
            None => (false, after_open),
        };
        if trim_left {
            before = before.trim_end();
        }
        items.push(Item::Text(before));
        let Some(close) = body_start.find("}}") else {
            return Err(TemplateError {
                action: body_start.chars().take(40).collect(),
                message: "unclosed action (missing \"}}\")".into(),
            });
        };
        let mut body = &body_start[..close];
        trim_next = false;
        if let Some(b) = body.strip_suffix(" -") {
            body = b;
            trim_next = true;
        }
        let body = body.trim();
        if !(body.starts_with("/*") && body.ends_with("*/")) {
            items.push(Item::Action(body));
        }
        rest = &body_start[close + 2..];
    }
    items.push(Item::Text(if trim_next { rest.trim_start() } else { rest }));
    Ok(items)
}

/// What ended a list of nodes.
enum Stop<'a> {
    /// The end of the text.
    Eof,
    /// `{{else}}` or `{{else if ...}}` (the condition, if any).
    Else(Option<&'a str>),
    /// `{{end}}`.
    End,
}

/// The first word of an action and the rest.
fn keyword(body: &str) -> (&str, &str) {
    let end = body.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(body.len());
    (&body[..end], body[end..].trim_start())
}

/// `$name := rest` or `$name = rest`: the name, the rest and whether it
/// declares.
fn assignment(body: &str) -> Option<(&str, &str, bool)> {
    let after = body.strip_prefix('$')?;
    let end = after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(after.len());
    let (name, rest) = (&after[..end], after[end..].trim_start());
    if let Some(p) = rest.strip_prefix(":=") {
        Some((name, p.trim_start(), true))
    } else if let Some(p) = rest.strip_prefix('=').filter(|p| !p.starts_with('=')) {
        Some((name, p.trim_start(), false))
    } else {
        None
    }
}

/// The variables a `range` declares and its pipeline: `$e := p` (the
/// element) or `$i, $e := p` (index or key, element), else none.
fn range_variables(s: &str) -> Result<(Vec<String>, &str), String> {
    if !s.starts_with('$') {
        return Ok((Vec::new(), s));
    }
    let Some((decl, pipeline)) = s.split_once(":=") else {
        return Ok((Vec::new(), s));
    };
    let names: Vec<String> =
        decl.split(',').map(|v| v.trim().strip_prefix('$').unwrap_or("").to_string()).collect();
    if names.len() > 2
        || names.iter().any(|n| n.is_empty() || !n.chars().all(|c| c.is_alphanumeric() || c == '_'))
    {
        return Err(format!("invalid range variables {:?}", decl.trim()));
    }
    Ok((names, pipeline.trim_start()))
}

/// Parses nodes until `{{else}}`, `{{end}}` or the end of the text.
fn parse<'a>(
    items: &mut std::vec::IntoIter<Item<'a>>,
) -> Result<(Vec<Node>, Stop<'a>), TemplateError> {
    let mut nodes = Vec::new();
    while let Some(item) = items.next() {
        let body = match item {
            Item::Text(t) => {
                if !t.is_empty() {
                    nodes.push(Node::Text(t.to_string()));
                }
                continue;
            }
            Item::Action(body) => body,
        };
        let err = |message: String| TemplateError { action: body.to_string(), message };
        if let Some((name, pipeline, declare)) = assignment(body) {
            if name.is_empty() {
                return Err(err("assigning to $ (the root data) is not supported".into()));
            }
            if pipeline.is_empty() {
                return Err(err("missing value".into()));
            }
            nodes.push(Node::Set {
                action: body.to_string(),
                name: name.to_string(),
                pipeline: pipeline.to_string(),
                declare,
            });
            continue;
        }
        match keyword(body) {
            ("if", cond) => {
                if cond.is_empty() {
                    return Err(err("missing condition".into()));
                }
                let mut branches = Vec::new();
                let mut cond = cond.to_string();
                let otherwise = loop {
                    let (then, end) = parse(items)?;
                    branches.push((cond, then));
                    match end {
                        Stop::Else(Some(c)) => cond = c.to_string(),
                        Stop::Else(None) => match parse(items)? {
                            (otherwise, Stop::End) => break otherwise,
                            _ => return Err(err("missing {{end}} after {{else}}".into())),
                        },
                        Stop::End => break Vec::new(),
                        Stop::Eof => return Err(err("missing {{end}}".into())),
                    }
                };
                nodes.push(Node::If { branches, otherwise });
            }
            ("range", pipeline) => {
                if pipeline.is_empty() {
                    return Err(err("missing pipeline".into()));
                }
                let (names, pipeline) = range_variables(pipeline).map_err(err)?;
                let (body, otherwise) = match parse(items)? {
                    (body, Stop::End) => (body, Vec::new()),
                    (body, Stop::Else(None)) => match parse(items)? {
                        (otherwise, Stop::End) => (body, otherwise),
                        _ => return Err(err("missing {{end}} after {{else}}".into())),
                    },
                    (_, Stop::Else(Some(_))) => {
                        return Err(err("{{else if}} in a {{range}} is not supported".into()));
                    }
                    (_, Stop::Eof) => return Err(err("missing {{end}}".into())),
                };
                nodes.push(Node::Range { names, pipeline: pipeline.to_string(), body, otherwise });
            }
            ("else", rest) => {
                return match keyword(rest) {
                    ("", "") => Ok((nodes, Stop::Else(None))),
                    ("if", cond) if !cond.is_empty() => Ok((nodes, Stop::Else(Some(cond)))),
                    _ => Err(err("only {{else}} and {{else if ...}} are supported".into())),
                };
            }
            ("end", "") => return Ok((nodes, Stop::End)),
            (w, _) if CONTROL.contains(&w) => {
                return Err(err(format!(
                    "{w:?} actions are not supported (only if/else/range/end)"
                )));
            }
            _ => nodes.push(Node::Print(body.to_string())),
        }
    }
    Ok((nodes, Stop::Eof))
}

/// What an action is evaluated against: the data (`$`), the value of `.`
/// (`None`: the data itself, outside any `range`) and the variables in
/// scope, innermost last.
struct Cx<'a> {
    env: &'a Env,
    dot: Option<&'a Value>,
    vars: &'a [(String, Value)],
}

fn execute(
    nodes: &[Node],
    env: &Env,
    dot: Option<&Value>,
    vars: &mut Vec<(String, Value)>,
    out: &mut String,
) -> Result<(), TemplateError> {
    // Variables declared here end with this list of nodes (Go: at the
    // `end` of the enclosing control structure).
    let scope = vars.len();
    let result = execute_in(nodes, env, dot, vars, out);
    vars.truncate(scope);
    result
}

fn execute_in(
    nodes: &[Node],
    env: &Env,
    dot: Option<&Value>,
    vars: &mut Vec<(String, Value)>,
    out: &mut String,
) -> Result<(), TemplateError> {
    for node in nodes {
        let err =
            |action: &str, message: String| TemplateError { action: action.to_string(), message };
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(action) => {
                let cx = Cx { env, dot, vars };
                let v = eval_action(action, &cx).map_err(|m| err(action, m))?;
                match v {
                    Value::Null | Value::List(_) | Value::Map(_) => {
                        return Err(err(
                            action,
                            format!(
                                "printing {} is not supported (Go prints it in its own syntax); \
                                 pipe it to JSON",
                                kind(&v)
                            ),
                        ));
                    }
                    v => out.push_str(&v.to_string()),
                }
            }
            Node::Set { action, name, pipeline, declare } => {
                let cx = Cx { env, dot, vars };
                let v = eval_action(pipeline, &cx).map_err(|m| err(action, m))?;
                if *declare {
                    vars.push((name.clone(), v));
                } else {
                    match vars.iter_mut().rev().find(|(n, _)| n == name) {
                        Some(slot) => slot.1 = v,
                        None => return Err(err(action, format!("undefined variable ${name}"))),
                    }
                }
            }
            Node::If { branches, otherwise } => {
                let mut taken = None;
                for (cond, body) in branches {
                    let cx = Cx { env, dot, vars };
                    if eval_condition(cond, &cx).map_err(|m| err(&format!("if {cond}"), m))? {
                        taken = Some(body);
                        break;
                    }
                }
                execute(taken.unwrap_or(otherwise), env, dot, vars, out)?;
            }
            Node::Range { names, pipeline, body, otherwise } => {
                let action = format!("range {pipeline}");
                let cx = Cx { env, dot, vars };
                let value = eval_action(pipeline, &cx).map_err(|m| err(&action, m))?;
                if matches!(value, Value::Int(_)) && names.len() == 2 {
                    return Err(err(
                        &action,
                        "can't use $i, $e with a range over an integer".into(),
                    ));
                }
                // (index or key, element).
                let items: Vec<(Value, Value)> = match value {
                    Value::Int(n) => {
                        (0..n.max(0)).map(|i| (Value::Int(i), Value::Int(i))).collect()
                    }
                    Value::List(l) => {
                        l.into_iter().enumerate().map(|(i, v)| (Value::Int(i as i64), v)).collect()
                    }
                    Value::Map(m) => m.into_iter().map(|(k, v)| (Value::Str(k), v)).collect(),
                    Value::Null => Vec::new(),
                    other => {
                        return Err(err(
                            &action,
                            format!("range over {} is not supported", kind(&other)),
                        ));
                    }
                };
                if items.is_empty() {
                    execute(otherwise, env, dot, vars, out)?;
                }
                for (key, item) in &items {
                    let scope = vars.len();
                    match names.as_slice() {
                        [e] => vars.push((e.clone(), item.clone())),
                        [i, e] => {
                            vars.push((i.clone(), key.clone()));
                            vars.push((e.clone(), item.clone()));
                        }
                        _ => {}
                    }
                    let result = execute(body, env, Some(item), vars, out);
                    vars.truncate(scope);
                    result?;
                }
            }
        }
    }
    Ok(())
}

/// A value's kind, for errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Str(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Null => "nil",
        Value::List(_) => "a list",
        Value::Map(_) => "a map",
    }
}

/// Renders `text` with `env`.
pub fn render(text: &str, env: &Env) -> Result<String, TemplateError> {
    let mut items = lex(text)?.into_iter();
    let nodes = match parse(&mut items)? {
        (nodes, Stop::Eof) => nodes,
        (_, Stop::Else(_)) => {
            return Err(TemplateError {
                action: "else".into(),
                message: "{{else}} outside an {{if}} or {{range}}".into(),
            });
        }
        (_, Stop::End) => {
            return Err(TemplateError {
                action: "end".into(),
                message: "{{end}} outside an {{if}} or {{range}}".into(),
            });
        }
    };
    let mut out = String::with_capacity(text.len());
    execute(&nodes, env, None, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// Where an object template comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateSource {
    /// Upstream's built-in node or pod.
    Builtin,
    /// A template file and its text.
    File {
        /// The file.
        path: PathBuf,
        /// Its contents.
        text: Arc<str>,
    },
}

/// The template data of object `index` of `count`.
pub fn env_for(params: &Env, index: usize, count: usize) -> Env {
    let mut env = params.clone();
    env.insert("Index".into(), Value::Int(index as i64));
    env.insert("Count".into(), Value::Int(count as i64));
    env
}

#[cfg(test)]
mod tests;
