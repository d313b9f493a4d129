//! Why a list of subscription filters was rejected, and where.

use crate::cesql::ParseError;

/// A rejected filter: the path of the JSON value at fault (for example
/// `filters[1].all[0].sql` or `filters[0].exact.type`) and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FilterError {
    pub path: String,
    pub problem: FilterProblem,
}

impl FilterError {
    pub(crate) fn new(path: &str, problem: FilterProblem) -> Self {
        FilterError {
            path: path.to_owned(),
            problem,
        }
    }

    /// For a CESQL syntax error, the character offset in the expression.
    pub fn position(&self) -> Option<usize> {
        match &self.problem {
            FilterProblem::Sql(e) => Some(e.position),
            _ => None,
        }
    }

    /// A machine-readable code for error answers.
    pub fn code(&self) -> &'static str {
        "invalid_filter"
    }
}

/// What is wrong with one filter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterProblem {
    #[error("a filter must be a JSON object")]
    NotAnObject,
    #[error("a filter object needs one dialect key: exact, prefix, suffix, all, any, not or sql")]
    NoDialect,
    #[error("a filter object holds exactly one dialect, this one has {}: {}", .0.len(), .0.join(", "))]
    SeveralDialects(Vec<String>),
    #[error("unknown filter dialect {0:?}; the dialects are exact, prefix, suffix, all, any, not and sql")]
    UnknownDialect(String),
    #[error("{dialect} takes an object of attribute names to strings")]
    NotAnAttributeMap { dialect: &'static str },
    #[error("{dialect} needs at least one attribute")]
    NoAttributes { dialect: &'static str },
    #[error("{0:?} is not a CloudEvents attribute name (lower-case letters and digits)")]
    BadAttributeName(String),
    #[error("the value must be a string")]
    NotAString,
    #[error("the value must not be empty")]
    EmptyValue,
    #[error("{dialect} takes an array of filters")]
    NotAnArray { dialect: &'static str },
    #[error("{dialect} needs at least one filter")]
    EmptyArray { dialect: &'static str },
    #[error("sql takes a CESQL expression as a string")]
    SqlNotAString,
    #[error("invalid CESQL expression {0}")]
    Sql(ParseError),
    #[error("filters are nested deeper than {0} levels")]
    TooDeep(usize),
}
