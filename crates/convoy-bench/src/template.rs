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

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

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

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Field(String),
    /// `.` alone.
    Dot,
    /// `$name`.
    Var(String),
    Ident(String),
    Lit(Value),
    Open,
    Close,
    Pipe,
}

fn tokenize(s: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let word_end = |mut j: usize| {
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            j
        };
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            '|' => {
                tokens.push(Token::Pipe);
                i += 1;
            }
            '.' => {
                let end = word_end(i + 1);
                if end == i + 1 {
                    tokens.push(Token::Dot);
                } else {
                    tokens.push(Token::Field(chars[i + 1..end].iter().collect()));
                }
                i = end.max(i + 1);
            }
            '"' | '`' => {
                let mut j = i + 1;
                let mut lit = String::new();
                while j < chars.len() && chars[j] != c {
                    if c == '"' && chars[j] == '\\' && j + 1 < chars.len() {
                        j += 1;
                        lit.push(match chars[j] {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                    } else {
                        lit.push(chars[j]);
                    }
                    j += 1;
                }
                if j == chars.len() {
                    return Err("unterminated string".into());
                }
                tokens.push(Token::Lit(Value::Str(lit)));
                i = j + 1;
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' => {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '.') {
                    j += 1;
                }
                let text: String = chars[i..j].iter().collect();
                let lit = text
                    .parse::<i64>()
                    .map(Value::Int)
                    .or_else(|_| text.parse::<f64>().map(Value::Float))
                    .map_err(|_| format!("invalid number {text:?}"))?;
                tokens.push(Token::Lit(lit));
                i = j;
            }
            c if c.is_alphabetic() || c == '_' => {
                let end = word_end(i);
                let word: String = chars[i..end].iter().collect();
                tokens.push(match word.as_str() {
                    "true" => Token::Lit(Value::Bool(true)),
                    "false" => Token::Lit(Value::Bool(false)),
                    "nil" => Token::Lit(Value::Null),
                    _ => Token::Ident(word),
                });
                i = end;
            }
            '$' => {
                let end = word_end(i + 1);
                if end == i + 1 {
                    return Err("$ (the root data) is not supported; name a field".into());
                }
                if chars.get(end) == Some(&'.') {
                    return Err("fields of variables ($x.y) are not supported".into());
                }
                tokens.push(Token::Var(chars[i + 1..end].iter().collect()));
                i = end;
            }
            other => return Err(format!("unexpected character {other:?}")),
        }
    }
    Ok(tokens)
}

/// Keywords of Go templates that open or close blocks: `if`, `else`,
/// `range` and `end` are evaluated, the others refused.
const CONTROL: [&str; 10] =
    ["if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"];

/// An operand: a value, or a field the data does not have (Go's "no
/// value": false in a condition, an error anywhere else).
#[derive(Debug, Clone, PartialEq)]
enum Arg {
    Val(Value),
    Missing(String),
}

impl Arg {
    /// Go's truth; no value is false.
    fn truth(&self) -> bool {
        match self {
            Arg::Val(v) => v.truth(),
            Arg::Missing(_) => false,
        }
    }

    /// The value; for a missing field, an error naming it and the fields
    /// the data has.
    fn value(self, env: &Env) -> Result<Value, String> {
        match self {
            Arg::Val(v) => Ok(v),
            Arg::Missing(name) => {
                let known: Vec<&str> = env.keys().map(String::as_str).collect();
                Err(format!("no field .{name} (the data has {})", known.join(", ")))
            }
        }
    }
}

fn eval_pipeline(s: &str, cx: &Cx) -> Result<Arg, String> {
    let tokens = tokenize(s)?;
    let mut pos = 0;
    let v = pipeline(&tokens, &mut pos, cx)?;
    if pos != tokens.len() {
        return Err("unexpected \")\"".into());
    }
    Ok(v)
}

/// An action that prints: a missing field is an error (Go prints
/// `<no value>`; a benchmark is better off failing).
fn eval_action(s: &str, cx: &Cx) -> Result<Value, String> {
    eval_pipeline(s, cx)?.value(cx.env)
}

/// The condition of an `if`: Go's truth of the pipeline's value.
fn eval_condition(s: &str, cx: &Cx) -> Result<bool, String> {
    eval_pipeline(s, cx).map(|a| a.truth())
}

fn pipeline(tokens: &[Token], pos: &mut usize, cx: &Cx) -> Result<Arg, String> {
    let mut value = command(tokens, pos, cx, None)?;
    while tokens.get(*pos) == Some(&Token::Pipe) {
        *pos += 1;
        value = command(tokens, pos, cx, Some(value))?;
    }
    Ok(value)
}

/// One command: a function call (with `piped` as its last argument) or a
/// single operand.
fn command(tokens: &[Token], pos: &mut usize, cx: &Cx, piped: Option<Arg>) -> Result<Arg, String> {
    match tokens.get(*pos) {
        Some(Token::Ident(name)) => {
            *pos += 1;
            let mut args = Vec::new();
            while let Some(t) = tokens.get(*pos) {
                if matches!(t, Token::Pipe | Token::Close) {
                    break;
                }
                args.push(operand(tokens, pos, cx)?);
            }
            args.extend(piped);
            call(name, args, cx.env)
        }
        Some(_) => {
            let v = operand(tokens, pos, cx)?;
            match (piped, tokens.get(*pos)) {
                (Some(_), _) => Err("only a function can follow \"|\"".into()),
                (None, Some(Token::Pipe | Token::Close) | None) => Ok(v),
                (None, Some(_)) => Err("a value cannot take arguments".into()),
            }
        }
        None => Err("empty command".into()),
    }
}

fn operand(tokens: &[Token], pos: &mut usize, cx: &Cx) -> Result<Arg, String> {
    let t = tokens.get(*pos).ok_or("missing operand")?;
    *pos += 1;
    match t {
        Token::Field(name) => match cx.dot {
            None => {
                Ok(cx.env.get(name).cloned().map_or_else(|| Arg::Missing(name.clone()), Arg::Val))
            }
            Some(Value::Map(m)) => {
                Ok(m.get(name).cloned().map_or(Arg::Missing(name.clone()), Arg::Val))
            }
            Some(other) => {
                Err(format!("can't evaluate field {name} in {} (\".\" inside range)", kind(other)))
            }
        },
        Token::Dot => match cx.dot {
            Some(v) => Ok(Arg::Val(v.clone())),
            None => {
                Err("\".\" (the whole data) is not supported outside range; name a field".into())
            }
        },
        Token::Var(name) => cx
            .vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| Arg::Val(v.clone()))
            .ok_or_else(|| format!("undefined variable ${name}")),
        Token::Lit(v) => Ok(Arg::Val(v.clone())),
        Token::Open => {
            let v = pipeline(tokens, pos, cx)?;
            if tokens.get(*pos) != Some(&Token::Close) {
                return Err("missing \")\"".into());
            }
            *pos += 1;
            Ok(v)
        }
        Token::Ident(name) => call(name, Vec::new(), cx.env),
        Token::Close => Err("unexpected \")\"".into()),
        Token::Pipe => Err("unexpected \"|\"".into()),
    }
}

fn int(f: &str, v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(*x as i64),
        other => Err(format!("{f}: expected an integer, got {other:?}")),
    }
}

fn float(f: &str, v: &Value) -> Result<f64, String> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        Value::Float(x) => Ok(*x),
        other => Err(format!("{f}: expected a number, got {other:?}")),
    }
}

/// The functions upstream registers (`scheduler_perf/operations.go`
/// `getTemplateFuncs`).
pub const FUNCTIONS: [&str; 11] = [
    "AddInt",
    "AddFloat",
    "SubtractInt",
    "SubtractFloat",
    "MultiplyInt",
    "MultiplyFloat",
    "DivideInt",
    "DivideFloat",
    "Mod",
    "Int",
    "JSON",
];

/// Go's predefined functions that are evaluated (the others, such as
/// `len`, `index` or `printf`, are refused by name).
pub const BUILTINS: [&str; 9] = ["eq", "ne", "lt", "le", "gt", "ge", "not", "and", "or"];

fn call(name: &str, args: Vec<Arg>, env: &Env) -> Result<Arg, String> {
    if BUILTINS.contains(&name) {
        return builtin(name, args, env);
    }
    if !FUNCTIONS.contains(&name) {
        return Err(format!(
            "unknown function {name:?} (known: {}, {})",
            FUNCTIONS.join(", "),
            BUILTINS.join(", ")
        ));
    }
    let args = args.into_iter().map(|a| a.value(env)).collect::<Result<Vec<_>, _>>()?;
    if matches!(name, "Int" | "JSON") {
        let [a] = args.as_slice() else {
            return Err(format!("{name} takes 1 argument, got {}", args.len()));
        };
        return Ok(Arg::Val(match name {
            "Int" => Value::Int(to_int(a)?),
            _ => Value::Str(a.to_json().to_string()),
        }));
    }
    let [a, b] = args.as_slice() else {
        return Err(format!("{name} takes 2 arguments, got {}", args.len()));
    };
    let ints = || Ok::<_, String>((int(name, a)?, int(name, b)?));
    let floats = || Ok::<_, String>((float(name, a)?, float(name, b)?));
    Ok(Arg::Val(match name {
        "AddInt" => ints().map(|(a, b)| Value::Int(a.wrapping_add(b)))?,
        "SubtractInt" => ints().map(|(a, b)| Value::Int(a.wrapping_sub(b)))?,
        "MultiplyInt" => ints().map(|(a, b)| Value::Int(a.wrapping_mul(b)))?,
        "DivideInt" | "Mod" => {
            let (a, b) = ints()?;
            if b == 0 {
                return Err(format!("{name}: division by zero"));
            }
            Value::Int(if name == "Mod" { a % b } else { a / b })
        }
        "AddFloat" => floats().map(|(a, b)| Value::Float(a + b))?,
        "SubtractFloat" => floats().map(|(a, b)| Value::Float(a - b))?,
        "MultiplyFloat" => floats().map(|(a, b)| Value::Float(a * b))?,
        "DivideFloat" => floats().map(|(a, b)| Value::Float(a / b))?,
        _ => unreachable!("checked against FUNCTIONS"),
    }))
}

/// Upstream's `toInt`: a number truncated toward zero, or a string in
/// decimal.
fn to_int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(x) if x.is_finite() => Ok(x.trunc() as i64),
        Value::Str(s) => s.parse().map_err(|_| format!("Int: cannot convert {s:?} to an integer")),
        other => Err(format!("Int: cannot convert {} to an integer", kind(other))),
    }
}

/// Go's `not`, `and`, `or` (on truth; `and`/`or` return an argument, as
/// Go's) and comparisons (`eq` against any of its further arguments;
/// values of the same kind only, as Go refuses an integer against a float
/// or a string).
fn builtin(name: &str, args: Vec<Arg>, env: &Env) -> Result<Arg, String> {
    let n = args.len();
    match name {
        "not" => match <[Arg; 1]>::try_from(args) {
            Ok([a]) => Ok(Arg::Val(Value::Bool(!a.truth()))),
            Err(_) => Err(format!("not takes 1 argument, got {n}")),
        },
        "and" | "or" => {
            if n == 0 {
                return Err(format!("{name} takes at least 1 argument"));
            }
            let stop = |a: &Arg| if name == "and" { !a.truth() } else { a.truth() };
            let last = args.last().cloned().expect("n > 0");
            Ok(args.into_iter().find(|a| stop(a)).unwrap_or(last))
        }
        _ => {
            let arity = if name == "eq" { n >= 2 } else { n == 2 };
            if !arity {
                let want = if name == "eq" { "at least 2 arguments" } else { "2 arguments" };
                return Err(format!("{name} takes {want}, got {n}"));
            }
            let values = args.into_iter().map(|a| a.value(env)).collect::<Result<Vec<_>, _>>()?;
            let (first, rest) = values.split_first().expect("n >= 2");
            let mut result = false;
            for other in rest {
                let ord = compare(name, first, other)?;
                result |= match name {
                    "eq" => ord.is_eq(),
                    "ne" => ord.is_ne(),
                    "lt" => ord.is_lt(),
                    "le" => ord.is_le(),
                    "gt" => ord.is_gt(),
                    "ge" => ord.is_ge(),
                    _ => unreachable!("checked against BUILTINS"),
                };
            }
            Ok(Arg::Val(Value::Bool(result)))
        }
    }
}

fn compare(name: &str, a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => {
            x.partial_cmp(y).ok_or_else(|| format!("{name}: cannot compare NaN"))
        }
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) if matches!(name, "eq" | "ne") => {
            Ok(if x == y { Ordering::Equal } else { Ordering::Less })
        }
        _ => Err(format!("{name}: incompatible types for comparison: {a:?} and {b:?}")),
    }
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
mod tests {
    use super::*;

    fn env() -> Env {
        let mut e = Env::new();
        e.insert("Index".into(), Value::Int(7));
        e.insert("Count".into(), Value::Int(100));
        e.insert("podsPerGroup".into(), Value::Int(3));
        e.insert("zone".into(), Value::Str("moon".into()));
        e.insert("ratio".into(), Value::Float(0.5));
        e
    }

    #[test]
    fn renders_fields_functions_and_pipelines() {
        let cases = [
            ("name: pod-{{.Index}}", "name: pod-7"),
            ("n: {{ .Count }}", "n: 100"),
            ("g: gang-{{DivideInt .Index .podsPerGroup}}", "g: gang-2"),
            ("r: rack-{{ Mod .Index 3 }}", "r: rack-1"),
            ("x: {{AddInt (MultiplyInt .Index 2) 1}}", "x: 15"),
            ("x: {{SubtractInt .Count .Index}}", "x: 93"),
            ("x: {{ .Index | AddInt 1 }}", "x: 8"),
            ("x: {{MultiplyFloat .ratio 3}}", "x: 1.5"),
            ("x: {{DivideFloat 1 4}}", "x: 0.25"),
            ("z: {{.zone}}-{{.Index}}", "z: moon-7"),
            ("a: 1\n{{- /* comment */ -}}\nb", "a: 1b"),
            ("s: {{\"lit\"}}", "s: lit"),
            ("no actions at all", "no actions at all"),
        ];
        for (text, want) in cases {
            assert_eq!(render(text, &env()).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let cases = [
            ("{{.Missing}}", "no field .Missing"),
            ("{{Frobnicate 1 2}}", "unknown function \"Frobnicate\""),
            ("{{DivideInt .Index 0}}", "division by zero"),
            ("{{AddInt .Index}}", "takes 2 arguments"),
            ("{{range $i, $e := .Index}}x{{end}}", "can't use $i, $e with a range over an integer"),
            ("{{with .Index}}x{{end}}", "\"with\" actions are not supported"),
            ("{{if .Index}}x", "missing {{end}}"),
            ("{{if}}x{{end}}", "missing condition"),
            ("x{{end}}", "{{end}} outside an {{if}}"),
            ("x{{else}}y", "{{else}} outside an {{if}}"),
            ("{{if .Index}}a{{else}}b{{else}}c{{end}}", "missing {{end}} after {{else}}"),
            ("{{if .Index}}a{{else with .x}}b{{end}}", "only {{else}} and {{else if ...}}"),
            ("{{if eq .Index \"7\"}}x{{end}}", "incompatible types for comparison"),
            ("{{if eq .Missing 1}}x{{end}}", "no field .Missing"),
            ("{{if lt .Index 1 2}}x{{end}}", "lt takes 2 arguments, got 3"),
            ("{{if eq .Index}}x{{end}}", "eq takes at least 2 arguments, got 1"),
            ("{{len .zone}}", "unknown function \"len\""),
            ("{{if .Index}}{{.Missing}}{{end}}", "no field .Missing"),
            ("{{AddInt .zone 1}}", "expected an integer"),
            ("{{.Index", "unclosed action"),
        ];
        for (text, want) in cases {
            let e = render(text, &env()).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn if_else_end_as_go() {
        let mut e = env();
        e.insert("empty".into(), Value::Str(String::new()));
        e.insert("mode".into(), Value::Str("single".into()));
        e.insert("zero".into(), Value::Int(0));
        e.insert("no".into(), Value::Bool(false));
        let cases = [
            // A field the data lacks is false (no error), as Go's missing map key.
            ("p: {{if .priority}}{{AddInt 0 .priority}}{{else}}1000{{end}}", "p: 1000"),
            ("p: {{if .Index}}{{AddInt 0 .Index}}{{else}}1000{{end}}", "p: 7"),
            ("{{if .empty}}a{{else}}b{{end}}", "b"),
            ("{{if .zero}}a{{else}}b{{end}}", "b"),
            ("{{if .no}}a{{end}}", ""),
            ("{{if .ratio}}a{{end}}", "a"),
            ("{{if not .priority}}a{{end}}", "a"),
            ("{{if and .Index .priority}}a{{else}}b{{end}}", "b"),
            ("{{if or .priority .Index}}a{{else}}b{{end}}", "a"),
            ("{{if eq .mode \"single\"}}single: {}{{else}}all: {}{{end}}", "single: {}"),
            ("{{if eq .mode \"all\" \"single\"}}x{{end}}", "x"),
            ("{{if ne .mode \"all\"}}x{{end}}", "x"),
            ("{{if lt .Index 8}}x{{end}}{{if ge .Index 8}}y{{end}}", "x"),
            ("{{if gt .ratio 0.25}}x{{end}}", "x"),
            ("{{if eq .Index 1}}a{{else if eq .Index 7}}b{{else}}c{{end}}", "b"),
            ("{{if eq .Index 1}}a{{else if eq .Index 2}}b{{else}}c{{end}}", "c"),
            ("{{if .zone}}{{if .empty}}x{{else}}{{.zone}}{{end}}{{end}}", "moon"),
            ("a\n{{- if .zone -}}\n  b\n{{- end}}\nc", "ab\nc"),
            // The branch not taken is not evaluated (its missing field is no error).
            ("{{if .priority}}{{.priority}}{{else}}none{{end}}", "none"),
        ];
        for (text, want) in cases {
            assert_eq!(render(text, &e).unwrap(), want, "{text}");
        }
        // Upstream's templates/podgroup.yaml (v1.37.2), its shape.
        let podgroup = "spec:\n  priority: {{if .priority}}{{AddInt 0 .priority}}{{else}}1000{{end}}\n\
                        {{if .mode}}\n  disruptionMode:\n    {{if eq .mode \"single\"}}single: {}\
                        {{else}}all: {}{{end}}\n{{end}}\n  x: 1\n";
        assert_eq!(
            render(podgroup, &e).unwrap(),
            "spec:\n  priority: 1000\n\n  disruptionMode:\n    single: {}\n\n  x: 1\n"
        );
        e.insert("mode".into(), Value::Str(String::new()));
        assert_eq!(render(podgroup, &e).unwrap(), "spec:\n  priority: 1000\n\n  x: 1\n");
    }

    #[test]
    fn variables_range_and_dra_functions_as_go() {
        let mut e = env();
        e.insert(
            "sel".into(),
            Value::List(vec![Value::Map(
                [(
                    "cel".into(),
                    Value::Map([("expression".into(), Value::Str("a < b".into()))].into()),
                )]
                .into(),
            )]),
        );
        e.insert("none".into(), Value::Null);
        e.insert(
            "m".into(),
            Value::Map([("b".into(), Value::Int(2)), ("a".into(), Value::Int(1))].into()),
        );
        e.insert("s".into(), Value::Str("12".into()));
        let cases = [
            ("{{$n := or .numDevices 3}}{{$n}}", "3"),
            ("{{$n := or .Index 3}}{{$n}}", "7"),
            ("{{$n := (or .x 2) | Int}}{{range $n}}[{{.}}]{{end}}", "[0][1]"),
            ("{{range (.s | Int) }}{{end}}x", "x"),
            ("{{range 4}}{{Mod . 2}}{{end}}", "0101"),
            ("{{$r := 3}}{{range 2}}{{Mod . $r}}{{$r}}{{end}}", "0313"),
            ("{{range 0}}a{{else}}none{{end}}", "none"),
            ("{{range .sel}}{{.cel | JSON}}{{end}}", r#"{"expression":"a < b"}"#),
            ("{{$x := 1}}{{if .Index}}{{$x = 2}}{{$y := 5}}{{$y}}{{end}}{{$x}}", "52"),
            ("{{(or .sel nil) | JSON}}", r#"[{"cel":{"expression":"a < b"}}]"#),
            ("{{(or .selectors nil) | JSON}}", "null"),
            ("{{JSON .none}}", "null"),
            ("{{JSON .zone}} {{JSON .Index}} {{JSON .ratio}}", r#""moon" 7 0.5"#),
            ("{{Int .ratio}} {{Int .s}} {{Int 3}}", "0 12 3"),
            ("{{if .none}}a{{else}}b{{end}}", "b"),
            ("{{if .sel}}a{{end}}", "a"),
            ("{{range $d := 3}}{{$d}}{{.}}{{end}}", "001122"),
            (
                "{{range $i, $e := .sel}}{{$i}}{{JSON $e}}{{end}}",
                r#"0{"cel":{"expression":"a < b"}}"#,
            ),
            ("{{range $i, $e := .m}}{{$i}}={{$e}};{{end}}", "a=1;b=2;"),
        ];
        for (text, want) in cases {
            assert_eq!(render(text, &e).unwrap(), want, "{text}");
        }
        let errors = [
            ("{{$y}}", "undefined variable $y"),
            ("{{$y = 1}}", "undefined variable $y"),
            ("{{if .Index}}{{$y := 1}}{{end}}{{$y}}", "undefined variable $y"),
            ("{{range 2}}{{.Index}}{{end}}", "can't evaluate field Index in an integer"),
            ("{{.}}", "the whole data"),
            ("{{$}}", "$ (the root data) is not supported"),
            ("{{range .zone}}x{{end}}", "range over a string is not supported"),
            ("{{range 2}}x", "missing {{end}}"),
            ("{{range 2}}x{{else if .x}}y{{end}}", "{{else if}} in a {{range}}"),
            ("{{range $a, $b, $c := .sel}}x{{end}}", "invalid range variables"),
            ("{{range 1}}{{$e := 1}}{{end}}{{$e}}", "undefined variable $e"),
            ("{{.sel}}", "printing a list is not supported"),
            ("{{nil}}", "printing nil is not supported"),
            ("{{Int .zone}}", "cannot convert \"moon\""),
            ("{{JSON 1 2}}", "JSON takes 1 argument"),
            ("{{JSON .missing}}", "no field .missing"),
            ("{{break}}", "\"break\" actions are not supported"),
        ];
        for (text, want) in errors {
            let err = render(text, &e).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    /// Renders one of upstream's DRA templates (v1.37.2, the verbatim copies
    /// in `tests/fixtures/upstream/dra/templates/`) and decodes it as `T`.
    fn dra<T: serde::de::DeserializeOwned>(text: &str, params: &[(&str, Value)]) -> T {
        let mut e = Env::new();
        e.insert("Index".into(), Value::Int(3));
        e.insert("Count".into(), Value::Int(5));
        for (k, v) in params {
            e.insert(k.to_string(), v.clone());
        }
        let out = render(text, &e).unwrap_or_else(|err| panic!("{params:?}: {err}"));
        let v: serde_json::Value =
            serde_saphyr::from_str(&out).unwrap_or_else(|err| panic!("{out}: {err}"));
        serde_json::from_value(v).unwrap_or_else(|err| panic!("{out}: {err}"))
    }

    #[test]
    fn upstreams_dra_templates_render_into_their_types() {
        use k8s_openapi::api::resource::v1::{
            DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
        };
        const DIR: &str = "tests/fixtures/upstream/dra/templates";
        let read = |f: &str| {
            std::fs::read_to_string(format!("{}/{DIR}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        // resourceslice-basic-devices.yaml: as PublishResourceSlices (no
        // params), SchedulingWithResourceClaimTemplate (numPCIRoots 2 by
        // default, 10 devices) and SchedulingWithResourceClaim (2 devices).
        let slice = read("resourceslice-basic-devices.yaml");
        for (params, devices) in [
            (vec![], 10),
            (vec![("numPCIRoots", Value::Int(2)), ("numDevices", Value::Int(10))], 10),
            (vec![("numDevices", Value::Int(2))], 2),
        ] {
            let s: ResourceSlice = dra(&slice, &params);
            assert_eq!(s.metadata.name.as_deref(), Some("resourceslice-3"));
            assert_eq!(s.spec.node_name.as_deref(), Some("scheduler-perf-dra-3"));
            assert_eq!(s.spec.pool.name, "resourceslice-3");
            let d = s.spec.devices.unwrap();
            assert_eq!(d.len(), devices);
            assert_eq!(d[1].name, "basic-device-1");
            let attrs = d[1].attributes.as_ref().unwrap();
            assert_eq!(
                attrs["resource.kubernetes.io/pciRoot"].string.as_deref(),
                Some("pci0000:01")
            );
            assert_eq!(attrs["driverVersion"].version.as_deref(), Some("1.2.3"));
            assert_eq!(d[1].capacity.as_ref().unwrap()["memory"].value.0, "24480Mi");
        }
        let c: DeviceClass = dra(&read("deviceclass.yaml"), &[]);
        assert_eq!(c.metadata.name.as_deref(), Some("test-class"));
        let c: ResourceClaim = dra(&read("resourceclaim.yaml"), &[]);
        assert_eq!(c.metadata.name.as_deref(), Some("test-claim-3"));
        assert_eq!(
            c.spec.unwrap().devices.unwrap().requests.unwrap()[0]
                .exactly
                .as_ref()
                .unwrap()
                .device_class_name,
            "test-class"
        );
        // resourceclaimtemplate.yaml with the params its workloads pass:
        // `numRequests: $numRequests|1`, `selectors: $selectors|`,
        // `constraints: $constraints|` (nil by default).
        let template = read("resourceclaimtemplate.yaml");
        let selectors = Value::List(vec![Value::Map(
            [(
                "cel".into(),
                Value::Map(
                    [("expression".into(), Value::Str("device.driver != \"\"".into()))].into(),
                ),
            )]
            .into(),
        )]);
        let constraints = Value::List(vec![Value::Map(
            [("matchAttribute".into(), Value::Str("resource.kubernetes.io/pciRoot".into()))].into(),
        )]);
        for (params, requests, with_selector, with_constraint) in [
            (
                vec![
                    ("numRequests", Value::Int(1)),
                    ("selectors", Value::Null),
                    ("constraints", Value::Null),
                ],
                1,
                false,
                false,
            ),
            (
                vec![
                    ("numRequests", Value::Int(1)),
                    ("selectors", selectors),
                    ("constraints", Value::Null),
                ],
                1,
                true,
                false,
            ),
            (
                vec![
                    ("numRequests", Value::Int(5)),
                    ("selectors", Value::Null),
                    ("constraints", constraints),
                ],
                5,
                false,
                true,
            ),
            (vec![], 1, false, false),
        ] {
            let t: ResourceClaimTemplate = dra(&template, &params);
            assert_eq!(t.metadata.name.as_deref(), Some("test-claim-template"));
            let devices = t.spec.unwrap().spec.unwrap().devices.unwrap();
            let reqs = devices.requests.unwrap();
            assert_eq!(reqs.len(), requests, "{params:?}");
            assert_eq!(reqs[requests - 1].name, format!("req-{}", requests - 1));
            let exactly = reqs[0].exactly.as_ref().unwrap();
            assert_eq!(exactly.device_class_name, "test-class");
            assert_eq!(exactly.selectors.as_ref().is_some_and(|s| !s.is_empty()), with_selector);
            let c = devices.constraints.unwrap_or_default();
            assert_eq!(c.len(), usize::from(with_constraint), "{params:?}");
            if with_constraint {
                assert_eq!(c[0].match_attribute.as_deref(), Some("resource.kubernetes.io/pciRoot"));
            }
        }
    }
}
