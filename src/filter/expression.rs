//! A watch's `filter`, compiled once at start: a CEL expression over `object`.
//!
//! What is found here, at start (exit 2 naming `watches[i].filter`): syntax errors, with their
//! line and column, and variables other than `object` (CEL binds no other, and the variables of
//! comprehensions such as `all(c, …)` are bound by them). Unknown functions, calls with the wrong
//! argument types and missing fields are only found per object, at run time: the crate does not
//! type-check ahead of time (docs/filters.md, "Errors").

use std::fmt;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr};
use cel::{IdedExpr, Program};

/// The one variable a filter sees.
pub(crate) const OBJECT: &str = "object";

/// Names an expression may use without binding them: CEL's type names (`type(x) == string`).
const TYPE_NAMES: [&str; 13] = [
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// A compiled filter and its source. Compares by source: two configurations with the same
/// expression have the same filter.
#[derive(Clone)]
pub(crate) struct FilterExpr {
    source: Arc<str>,
    program: Arc<Program>,
    /// The top-level members of `object` the expression reads (`object.status…` reads
    /// `status`); `None` when it uses `object` whole.
    members: Option<Arc<[String]>>,
}

impl FilterExpr {
    /// Compiles `source`; the error says what is wrong and where (line:column).
    pub(crate) fn compile(source: &str) -> Result<FilterExpr, String> {
        let program = Program::compile(source).map_err(|errors| {
            let first = errors.errors.first();
            match first {
                Some(e) => format!(
                    "invalid CEL expression {source:?}: at {}:{}: {}",
                    e.pos.0, e.pos.1, e.msg
                ),
                None => format!("invalid CEL expression {source:?}"),
            }
        })?;
        if let Some((name, id)) = unbound_variable(program.expression(), &mut Vec::new()) {
            let at = program
                .source_info()
                .offset_for(id)
                .map(|(start, _)| line_column(source, start as usize))
                .unwrap_or((1, 1));
            return Err(format!(
                "invalid CEL expression {source:?}: at {}:{}: undeclared reference to {name:?} (the object is `{OBJECT}`)",
                at.0, at.1
            ));
        }
        let mut members = Some(Vec::new());
        read_members(program.expression(), &mut members);
        Ok(FilterExpr {
            source: source.into(),
            members: members.map(Into::into),
            program: Arc::new(program),
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    /// The top-level members of the object the expression can read; `None`: any.
    pub(crate) fn members(&self) -> Option<&[String]> {
        self.members.as_deref()
    }
}

impl PartialEq for FilterExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for FilterExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FilterExpr").field(&self.source).finish()
    }
}

/// The first identifier of `expr` that is neither `object`, a type name, nor bound by an
/// enclosing comprehension (`bound`), with its node id.
fn unbound_variable<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>) -> Option<(&'e str, u64)> {
    match &expr.expr {
        Expr::Ident(name) => {
            let free = name != OBJECT
                && !name.starts_with('@')
                && !TYPE_NAMES.contains(&name.as_str())
                && !bound.contains(&name.as_str());
            free.then_some((name.as_str(), expr.id))
        }
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .find_map(|e| unbound_variable(e, bound)),
        Expr::Comprehension(c) => {
            if let Some(found) = unbound_variable(&c.iter_range, bound) {
                return Some(found);
            }
            let depth = bound.len();
            bound.push(&c.iter_var);
            bound.extend(c.iter_var2.as_deref());
            bound.push(&c.accu_var);
            let found = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .find_map(|e| unbound_variable(e, bound));
            bound.truncate(depth);
            found
        }
        Expr::List(list) => list
            .elements
            .iter()
            .find_map(|e| unbound_variable(e, bound)),
        Expr::Map(map) => map.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                unbound_variable(&e.key, bound).or_else(|| unbound_variable(&e.value, bound))
            }
            EntryExpr::StructField(f) => unbound_variable(&f.value, bound),
        }),
        Expr::Select(select) => unbound_variable(&select.operand, bound),
        Expr::Struct(s) => s.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                unbound_variable(&e.key, bound).or_else(|| unbound_variable(&e.value, bound))
            }
            EntryExpr::StructField(f) => unbound_variable(&f.value, bound),
        }),
        Expr::Literal(_) | Expr::Unspecified => None,
    }
}

/// Adds to `members` the top-level members of `object` that `expr` selects; sets it to `None`
/// where `object` is used otherwise (passed whole, indexed with `[]`, compared).
fn read_members(expr: &IdedExpr, members: &mut Option<Vec<String>>) {
    let mut each = |e: &IdedExpr| read_members(e, members);
    match &expr.expr {
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(name) if name == OBJECT => {
                if let Some(members) = members {
                    if !members.contains(&select.field) {
                        members.push(select.field.clone());
                    }
                }
            }
            _ => each(&select.operand),
        },
        Expr::Ident(name) if name == OBJECT => *members = None,
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .for_each(each),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .for_each(each),
        Expr::List(list) => list.elements.iter().for_each(each),
        Expr::Map(map) => map.entries.iter().for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                each(&e.key);
                each(&e.value);
            }
            EntryExpr::StructField(f) => each(&f.value),
        }),
        Expr::Struct(s) => s.entries.iter().for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                each(&e.key);
                each(&e.value);
            }
            EntryExpr::StructField(f) => each(&f.value),
        }),
    }
}

/// The 1-based line and column of byte `offset` of `source`.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(source.len());
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    let before = &source[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The set of variables a compiled filter reads, for tests.
#[cfg(test)]
fn variables(expr: &FilterExpr) -> std::collections::HashSet<String> {
    expr.program
        .references()
        .variables()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_what_kubernetes_users_write() {
        for source in [
            "object.status.phase == 'Failed'",
            "has(object.metadata.labels.team) && object.metadata.labels.team in ['a','b']",
            "object.spec.replicas > 3",
            "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
            "object.spec.containers.exists(c, has(c.resources.limits))",
            "object.metadata.name.matches('^web-[0-9]+$')",
            "type(object.spec) == map",
            "object.spec.ports.map(p, p.port).exists(p, p == 443)",
        ] {
            let expr = FilterExpr::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(variables(&expr).contains(OBJECT), "{source}");
        }
    }

    #[test]
    fn a_syntax_error_names_the_position() {
        let err = FilterExpr::compile("object.status.phase == ").unwrap_err();
        assert!(err.starts_with("invalid CEL expression"), "{err}");
        assert!(err.contains("at 1:"), "{err}");
        let err = FilterExpr::compile("object.spec.replicas >> 3").unwrap_err();
        assert!(err.contains("at 1:"), "{err}");
    }

    #[test]
    fn a_variable_other_than_object_is_refused_at_start() {
        let err = FilterExpr::compile("obj.status.phase == 'Failed'").unwrap_err();
        assert!(
            err.contains("at 1:1: undeclared reference to \"obj\""),
            "{err}"
        );
        let err = FilterExpr::compile("object.spec.replicas > 3 &&\n  replicas > 1").unwrap_err();
        assert!(
            err.contains("at 2:3: undeclared reference to \"replicas\""),
            "{err}"
        );
        // The variable of a comprehension is bound inside it, not after it.
        let err =
            FilterExpr::compile("object.spec.containers.all(c, c.ready) && c.ready").unwrap_err();
        assert!(err.contains("undeclared reference to \"c\""), "{err}");
    }

    #[test]
    fn knows_which_members_it_reads() {
        let members = |source: &str| {
            FilterExpr::compile(source)
                .unwrap()
                .members()
                .map(<[String]>::to_vec)
        };
        assert_eq!(
            members("object.status.phase == 'Failed' && has(object.metadata.labels)"),
            Some(vec!["status".to_owned(), "metadata".to_owned()])
        );
        assert_eq!(
            members("object.spec.containers.all(c, c.image != object.metadata.name)"),
            Some(vec!["spec".to_owned(), "metadata".to_owned()])
        );
        assert_eq!(members("size(object) > 2"), None);
        assert_eq!(members("object['status'].phase == 'x'"), None);
        assert_eq!(members("1 == 1"), Some(vec![]));
    }

    #[test]
    fn compares_by_source() {
        let a = FilterExpr::compile("object.spec.replicas > 3").unwrap();
        let b = FilterExpr::compile("object.spec.replicas > 3").unwrap();
        let c = FilterExpr::compile("object.spec.replicas > 4").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.as_str(), "object.spec.replicas > 3");
    }
}
