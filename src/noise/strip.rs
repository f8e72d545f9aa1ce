//! `strip_paths`: members removed from the published object.
//!
//! The walk follows only the members a path leads into and skips everything else, so finding
//! that an object holds none of the paths costs one quick pass; such an object is published as
//! the bytes received (zero copy). An object that holds one is copied once, without the removed
//! members (and one comma each), so the result is valid JSON with every other byte unchanged.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use super::json::{Cursor, Result};
use super::PathSet;

/// `object` without the members `strip` names, or `None` when it holds none of them.
pub(super) fn strip(object: &Bytes, strip: &PathSet) -> Result<Option<Bytes>> {
    let mut c = Cursor::new(object);
    let mut cuts = Vec::new();
    c.ws();
    if c.peek() != Some(b'{') {
        return Ok(None);
    }
    members(&mut c, strip, strip.all(), 0, &mut cuts)?;
    if cuts.is_empty() {
        return Ok(None);
    }
    let removed: usize = cuts.iter().map(|r| r.len()).sum();
    let mut out = BytesMut::with_capacity(object.len() - removed);
    let mut at = 0;
    for cut in cuts {
        out.put_slice(&object[at..cut.start]);
        at = cut.end;
    }
    out.put_slice(&object[at..]);
    Ok(Some(out.freeze()))
}

/// The object at the cursor: records the byte ranges to cut, in order. Recurses only into members
/// a path continues through, so the depth is at most a path's length.
fn members(
    c: &mut Cursor<'_>,
    paths: &PathSet,
    active: u64,
    depth: usize,
    cuts: &mut Vec<Range<usize>>,
) -> Result<()> {
    c.eat(b'{')?;
    c.ws();
    if c.peek() == Some(b'}') {
        c.i += 1;
        return Ok(());
    }
    // Whether a member before this one is kept: a cut then takes the comma before the member;
    // otherwise it takes the comma after it (`dangling` marks where that cut starts).
    let mut kept = false;
    let mut dangling: Option<usize> = None;
    let mut previous_end = c.i;
    loop {
        c.ws();
        let key_start = c.i;
        let key = c.string()?;
        c.eat(b':')?;
        if let Some(start) = dangling.take() {
            cuts.push(start..key_start);
        }
        let step = paths.step(active, depth, &key);
        c.ws();
        if step.matched {
            c.skip_value()?;
            if kept {
                cuts.push(previous_end..c.i);
            } else {
                cuts.push(key_start..c.i);
                dangling = Some(c.i);
            }
        } else {
            if step.child != 0 && c.peek() == Some(b'{') {
                members(c, paths, step.child, depth + 1, cuts)?;
            } else {
                c.skip_value()?;
            }
            kept = true;
        }
        previous_end = c.i;
        c.ws();
        match c.peek() {
            Some(b',') => c.i += 1,
            _ => return c.eat(b'}'),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_path::JsonPath;

    fn run(doc: &str, list: &[&str]) -> Option<String> {
        let paths = PathSet::new(list.iter().map(|p| JsonPath::parse(p).unwrap()).collect());
        strip(&Bytes::copy_from_slice(doc.as_bytes()), &paths)
            .unwrap()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
    }

    #[test]
    fn members_are_cut_with_one_comma_anywhere() {
        let cases = [
            (r#"{"a":1,"b":2,"c":3}"#, &["a"][..], r#"{"b":2,"c":3}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["b"], r#"{"a":1,"c":3}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["c"], r#"{"a":1,"b":2}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["a", "b"], r#"{"c":3}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["b", "c"], r#"{"a":1}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["a", "c"], r#"{"b":2}"#),
            (r#"{"a":1,"b":2,"c":3}"#, &["a", "b", "c"], r#"{}"#),
            (
                r#"{ "a" : [1,{"x":2}] , "b" : 2 }"#,
                &["a"],
                r#"{ "b" : 2 }"#,
            ),
            (
                r#"{"metadata":{"name":"n","annotations":{"k.io/x":"big","keep":"1"},"managedFields":[{}]},"spec":{}}"#,
                &[r#"metadata.annotations."k.io/x""#, "metadata.managedFields"],
                r#"{"metadata":{"name":"n","annotations":{"keep":"1"}},"spec":{}}"#,
            ),
        ];
        for (doc, paths, want) in cases {
            let got = run(doc, paths).unwrap();
            assert_eq!(got, want, "{doc} without {paths:?}");
            serde_json::from_str::<serde_json::Value>(&got).unwrap();
        }
    }

    #[test]
    fn untouched_objects_are_not_copied() {
        assert_eq!(
            run(r#"{"a":{"b":1},"c":[{"a":1}]}"#, &["a.x", "b", "c.a"]),
            None
        );
        assert_eq!(run(r#"{"a":1}"#, &["a.b"]), None, "a path through a scalar");
        assert_eq!(run("[1]", &["a"]), None);
    }

    #[test]
    fn escaped_keys_match_their_text() {
        assert_eq!(
            run(r#"{"k\u002eio":1,"b":2}"#, &[r#""k.io""#]).unwrap(),
            r#"{"b":2}"#
        );
    }
}
