//! The Go-template subset that upstream's node and pod templates use.
//!
//! Upstream renders every template file with Go's `text/template` before
//! decoding it as YAML, with `.Index`, `.Count` and the op's
//! `templateParams` as data and the functions `AddInt`, `AddFloat`,
//! `SubtractInt`, `SubtractFloat`, `MultiplyInt`, `MultiplyFloat`,
//! `DivideInt`, `DivideFloat` and `Mod`. This module evaluates exactly that:
//! `{{ ... }}` actions holding a field (`.Index`), a literal, a function
//! call with arguments (which may be parenthesised calls) and pipelines
//! (`{{ .Index | AddInt 1 }}`), plus `{{- ... -}}` whitespace trimming and
//! `{{/* comments */}}`; and, as the preemption configs use them,
//! `{{if}}` / `{{else if}}` / `{{else}}` / `{{end}}` with Go's truth (false,
//! 0, "" and a field the data lacks are false: `{{if .priority}}` tests
//! whether the op passed `priority`) and Go's `eq`, `ne`, `lt`, `le`, `gt`,
//! `ge`, `not`, `and`, `or`. Other control structures (`range`, `with`,
//! ...), other functions and variables are refused with an error naming
//! them, and so is printing a missing field (Go prints `<no value>`; a
//! benchmark is better off failing).

use std::collections::BTreeMap;
use std::fmt;

/// A template value.
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
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl Value {
    /// Converts a YAML/JSON scalar; `None` for lists, maps and null.
    pub fn from_json(v: &serde_json::Value) -> Option<Value> {
        match v {
            serde_json::Value::Bool(b) => Some(Value::Bool(*b)),
            serde_json::Value::Number(n) => {
                Some(n.as_i64().map(Value::Int).unwrap_or(Value::Float(n.as_f64()?)))
            }
            serde_json::Value::String(s) => Some(Value::Str(s.clone())),
            _ => None,
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

/// A piece of a template: text, an action printing a pipeline, or an
/// `if` with its branches.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    /// The action's text, without braces and trim markers.
    Print(String),
    If {
        /// `(condition, body)` of `if` and each `else if`.
        branches: Vec<(String, Vec<Node>)>,
        /// The `else` body (empty without one).
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
            ("else", rest) => {
                return match keyword(rest) {
                    ("", "") => Ok((nodes, Stop::Else(None))),
                    ("if", cond) if !cond.is_empty() => Ok((nodes, Stop::Else(Some(cond)))),
                    _ => Err(err("only {{else}} and {{else if ...}} are supported".into())),
                };
            }
            ("end", "") => return Ok((nodes, Stop::End)),
            (w, _) if CONTROL.contains(&w) => {
                return Err(err(format!("{w:?} actions are not supported (only if/else/end)")));
            }
            _ => nodes.push(Node::Print(body.to_string())),
        }
    }
    Ok((nodes, Stop::Eof))
}

fn execute(nodes: &[Node], env: &Env, out: &mut String) -> Result<(), TemplateError> {
    for node in nodes {
        let err =
            |action: &str, message: String| TemplateError { action: action.to_string(), message };
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(action) => {
                let v = eval_action(action, env).map_err(|m| err(action, m))?;
                out.push_str(&v.to_string());
            }
            Node::If { branches, otherwise } => {
                let mut taken = None;
                for (cond, body) in branches {
                    if eval_condition(cond, env).map_err(|m| err(&format!("if {cond}"), m))? {
                        taken = Some(body);
                        break;
                    }
                }
                execute(taken.unwrap_or(otherwise), env, out)?;
            }
        }
    }
    Ok(())
}

/// Renders `text` with `env`.
pub fn render(text: &str, env: &Env) -> Result<String, TemplateError> {
    let mut items = lex(text)?.into_iter();
    let nodes = match parse(&mut items)? {
        (nodes, Stop::Eof) => nodes,
        (_, Stop::Else(_)) => {
            return Err(TemplateError {
                action: "else".into(),
                message: "{{else}} outside an {{if}}".into(),
            });
        }
        (_, Stop::End) => {
            return Err(TemplateError {
                action: "end".into(),
                message: "{{end}} outside an {{if}}".into(),
            });
        }
    };
    let mut out = String::with_capacity(text.len());
    execute(&nodes, env, &mut out)?;
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Field(String),
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
                    return Err("\".\" (the whole data) is not supported; name a field".into());
                }
                tokens.push(Token::Field(chars[i + 1..end].iter().collect()));
                i = end;
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
                    _ => Token::Ident(word),
                });
                i = end;
            }
            '$' => return Err("template variables ($x) are not supported".into()),
            other => return Err(format!("unexpected character {other:?}")),
        }
    }
    Ok(tokens)
}

/// Keywords of Go templates that open or close blocks: `if`, `else` and
/// `end` are evaluated, the others refused.
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
    /// Go's truth (`text/template` `isTrue`): false, 0, "" and no value
    /// are false.
    fn truth(&self) -> bool {
        match self {
            Arg::Val(Value::Bool(b)) => *b,
            Arg::Val(Value::Int(i)) => *i != 0,
            Arg::Val(Value::Float(x)) => *x != 0.0,
            Arg::Val(Value::Str(s)) => !s.is_empty(),
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

fn eval_pipeline(s: &str, env: &Env) -> Result<Arg, String> {
    let tokens = tokenize(s)?;
    let mut pos = 0;
    let v = pipeline(&tokens, &mut pos, env)?;
    if pos != tokens.len() {
        return Err("unexpected \")\"".into());
    }
    Ok(v)
}

/// An action that prints: a missing field is an error (Go prints
/// `<no value>`; a benchmark is better off failing).
fn eval_action(s: &str, env: &Env) -> Result<Value, String> {
    eval_pipeline(s, env)?.value(env)
}

/// The condition of an `if`: Go's truth of the pipeline's value.
fn eval_condition(s: &str, env: &Env) -> Result<bool, String> {
    eval_pipeline(s, env).map(|a| a.truth())
}

fn pipeline(tokens: &[Token], pos: &mut usize, env: &Env) -> Result<Arg, String> {
    let mut value = command(tokens, pos, env, None)?;
    while tokens.get(*pos) == Some(&Token::Pipe) {
        *pos += 1;
        value = command(tokens, pos, env, Some(value))?;
    }
    Ok(value)
}

/// One command: a function call (with `piped` as its last argument) or a
/// single operand.
fn command(
    tokens: &[Token],
    pos: &mut usize,
    env: &Env,
    piped: Option<Arg>,
) -> Result<Arg, String> {
    match tokens.get(*pos) {
        Some(Token::Ident(name)) => {
            *pos += 1;
            let mut args = Vec::new();
            while let Some(t) = tokens.get(*pos) {
                if matches!(t, Token::Pipe | Token::Close) {
                    break;
                }
                args.push(operand(tokens, pos, env)?);
            }
            args.extend(piped);
            call(name, args, env)
        }
        Some(_) => {
            let v = operand(tokens, pos, env)?;
            match (piped, tokens.get(*pos)) {
                (Some(_), _) => Err("only a function can follow \"|\"".into()),
                (None, Some(Token::Pipe | Token::Close) | None) => Ok(v),
                (None, Some(_)) => Err("a value cannot take arguments".into()),
            }
        }
        None => Err("empty command".into()),
    }
}

fn operand(tokens: &[Token], pos: &mut usize, env: &Env) -> Result<Arg, String> {
    let t = tokens.get(*pos).ok_or("missing operand")?;
    *pos += 1;
    match t {
        Token::Field(name) => {
            Ok(env.get(name).cloned().map_or_else(|| Arg::Missing(name.clone()), Arg::Val))
        }
        Token::Lit(v) => Ok(Arg::Val(v.clone())),
        Token::Open => {
            let v = pipeline(tokens, pos, env)?;
            if tokens.get(*pos) != Some(&Token::Close) {
                return Err("missing \")\"".into());
            }
            *pos += 1;
            Ok(v)
        }
        Token::Ident(name) => call(name, Vec::new(), env),
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

/// The functions upstream registers (`scheduler_perf/util.go`).
pub const FUNCTIONS: [&str; 9] = [
    "AddInt",
    "AddFloat",
    "SubtractInt",
    "SubtractFloat",
    "MultiplyInt",
    "MultiplyFloat",
    "DivideInt",
    "DivideFloat",
    "Mod",
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
            ("{{range .Index}}x{{end}}", "\"range\" actions are not supported"),
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
}
