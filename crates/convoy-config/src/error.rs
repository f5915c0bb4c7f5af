//! Errors that name the file, the line and column when known, and the field path.

use std::fmt;
use std::path::PathBuf;

/// What went wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the scheduler configuration: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The YAML is malformed or does not match the schema (unknown field, wrong type, bad
    /// enum value, value out of range). Decoding stops at the first such problem.
    #[error("{0}")]
    Decode(Problem),
    /// The file decoded but breaks a rule across fields (unknown plugin, duplicate profile name,
    /// maxBackoff below initialBackoff, ...). Every problem found is listed, one per line.
    #[error("{}", ProblemList(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The problems this error reports (empty for [`ConfigError::Read`]).
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Read { .. } => &[],
            Self::Decode(problem) => std::slice::from_ref(problem),
            Self::Invalid(problems) => problems,
        }
    }
}

/// One problem at one place in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file name as given to the loader.
    pub file: String,
    /// 1-based line and column, when the YAML parser reported them.
    pub position: Option<(u64, u64)>,
    /// Field path such as `profiles[0].pluginConfig[1].args.scoringStrategy.type`; empty for
    /// the document itself.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.field, self.message)
        }
    }
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// Turns a serde-saphyr error plus the path serde_path_to_error tracked into a [`Problem`].
pub(crate) fn decode_problem(
    file: &str,
    error: &serde_saphyr::Error,
    path: Option<&serde_path_to_error::Path>,
    prefix: &str,
) -> Problem {
    let position = error.location().filter(|l| l.line() > 0).map(|l| (l.line(), l.column()));
    let mut message = error.without_snippet().to_string();
    if let Some((line, column)) = position {
        let suffix = format!(" at line {line}, column {column}");
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_owned();
        }
    }
    Problem { file: file.to_owned(), position, field: join_path(prefix, path), message }
}

/// Renders a serde_path_to_error path as `a.b[0].c`, after `prefix`. Segments that are
/// artefacts of the decoding (`value` inside a span-carrying wrapper, `?` for unknown keys)
/// are dropped.
pub(crate) fn join_path(prefix: &str, path: Option<&serde_path_to_error::Path>) -> String {
    use serde_path_to_error::Segment;
    let mut out = prefix.to_owned();
    for segment in path.into_iter().flat_map(|p| p.iter()) {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if key == "value" {
                    continue;
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Collects semantic problems while validating.
#[derive(Debug)]
pub(crate) struct Problems {
    file: String,
    list: Vec<Problem>,
}

impl Problems {
    pub(crate) fn new(file: &str) -> Self {
        Self { file: file.to_owned(), list: Vec::new() }
    }

    /// Records a problem at `field`, at `location` when the YAML one is known.
    pub(crate) fn push(
        &mut self,
        field: impl Into<String>,
        location: Option<&serde_saphyr::Location>,
        message: impl Into<String>,
    ) {
        self.list.push(Problem {
            file: self.file.clone(),
            position: location.filter(|l| l.line() > 0).map(|l| (l.line(), l.column())),
            field: field.into(),
            message: message.into(),
        });
    }

    pub(crate) fn push_problem(&mut self, problem: Problem) {
        self.list.push(problem);
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn into_result(self) -> Result<(), ConfigError> {
        if self.list.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(self.list)) }
    }
}
