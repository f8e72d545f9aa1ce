//! Subject templates and the token escaping rule.

/// A parsed subject template such as `{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectTemplate {}
