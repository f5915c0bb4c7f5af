//! The Go-template subset that upstream's node and pod templates use.
//!
//! Upstream renders every template file with Go's `html/template` before
//! decoding it as YAML, with `.Index`, `.Count` and the op's
//! `templateParams` as data and the functions `AddInt`, `AddFloat`,
//! `SubtractInt`, `SubtractFloat`, `MultiplyInt`, `MultiplyFloat`,
//! `DivideInt`, `DivideFloat` and `Mod`. This module evaluates exactly that:
//! `{{ ... }}` actions holding a field (`.Index`), a literal, a function
//! call with arguments (which may be parenthesised calls) and pipelines
//! (`{{ .Index | AddInt 1 }}`), plus `{{- ... -}}` whitespace trimming and
//! `{{/* comments */}}`. Control structures (`if`, `range`, ...) are
//! refused with an error naming them, and so is a missing field (Go prints
//! `<no value>`; a benchmark is better off failing).

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

/// Renders `text` with `env`.
pub fn render(text: &str, env: &Env) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let mut before = &rest[..open];
        let after_open = &rest[open + 2..];
        let (trim_left, body_start) = match after_open.strip_prefix("- ") {
            Some(b) => (true, b),
            None => (false, after_open),
        };
        if trim_left {
            before = before.trim_end();
        }
        out.push_str(before);
        let Some(close) = body_start.find("}}") else {
            return Err(TemplateError {
                action: body_start.chars().take(40).collect(),
                message: "unclosed action (missing \"}}\")".into(),
            });
        };
        let mut body = &body_start[..close];
        let mut after = &body_start[close + 2..];
        if let Some(b) = body.strip_suffix(" -") {
            body = b;
            after = after.trim_start();
        }
        let err = |message: String| TemplateError { action: body.trim().to_string(), message };
        let trimmed = body.trim();
        if !(trimmed.starts_with("/*") && trimmed.ends_with("*/")) {
            let value = eval_action(trimmed, env).map_err(err)?;
            out.push_str(&value.to_string());
        }
        rest = after;
    }
    out.push_str(rest);
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

/// Keywords of Go templates this evaluator does not implement.
const CONTROL: [&str; 10] =
    ["if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"];

fn eval_action(s: &str, env: &Env) -> Result<Value, String> {
    let tokens = tokenize(s)?;
    if let Some(Token::Ident(w)) = tokens.first()
        && CONTROL.contains(&w.as_str())
    {
        return Err(format!("{w:?} actions are not supported (only expressions)"));
    }
    let mut pos = 0;
    let v = pipeline(&tokens, &mut pos, env)?;
    if pos != tokens.len() {
        return Err("unexpected \")\"".into());
    }
    Ok(v)
}

fn pipeline(tokens: &[Token], pos: &mut usize, env: &Env) -> Result<Value, String> {
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
    piped: Option<Value>,
) -> Result<Value, String> {
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
            call(name, &args)
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

fn operand(tokens: &[Token], pos: &mut usize, env: &Env) -> Result<Value, String> {
    let t = tokens.get(*pos).ok_or("missing operand")?;
    *pos += 1;
    match t {
        Token::Field(name) => env.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = env.keys().map(String::as_str).collect();
            format!("no field .{name} (the data has {})", known.join(", "))
        }),
        Token::Lit(v) => Ok(v.clone()),
        Token::Open => {
            let v = pipeline(tokens, pos, env)?;
            if tokens.get(*pos) != Some(&Token::Close) {
                return Err("missing \")\"".into());
            }
            *pos += 1;
            Ok(v)
        }
        Token::Ident(name) => call(name, &[]),
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

fn call(name: &str, args: &[Value]) -> Result<Value, String> {
    if !FUNCTIONS.contains(&name) {
        return Err(format!("unknown function {name:?} (known: {})", FUNCTIONS.join(", ")));
    }
    let [a, b] = args else {
        return Err(format!("{name} takes 2 arguments, got {}", args.len()));
    };
    let ints = || Ok::<_, String>((int(name, a)?, int(name, b)?));
    let floats = || Ok::<_, String>((float(name, a)?, float(name, b)?));
    Ok(match name {
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
    })
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
            ("{{if .Index}}x{{end}}", "\"if\" actions are not supported"),
            ("{{AddInt .zone 1}}", "expected an integer"),
            ("{{.Index", "unclosed action"),
        ];
        for (text, want) in cases {
            let e = render(text, &env()).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
