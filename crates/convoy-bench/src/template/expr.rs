//! Actions: a pipeline's tokens, its commands and operands, and the
//! functions upstream's templates call (`AddInt` ... `JSON`, Go's
//! comparisons and logic).

use super::{Cx, Env, Value, kind};

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
pub(super) const CONTROL: [&str; 10] =
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
pub(super) fn eval_action(s: &str, cx: &Cx) -> Result<Value, String> {
    eval_pipeline(s, cx)?.value(cx.env)
}

/// The condition of an `if`: Go's truth of the pipeline's value.
pub(super) fn eval_condition(s: &str, cx: &Cx) -> Result<bool, String> {
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
