//! The content fingerprint of an object: a 64-bit hash of its JSON value without the ignored
//! paths, so `changes = "content"` can tell a change subscribers care about from a heartbeat.
//!
//! It hashes the value, not the bytes: member order and whitespace do not count (a listed object
//! gets `apiVersion` and `kind` added in another place than a watched one has them), string
//! escapes are decoded; numbers count as written (the API server writes a value the same way
//! each time). Each object member is hashed with its key and the members are summed, so their
//! order does not matter; array elements are chained, so theirs does.
//!
//! XXH3 (a stable, specified hash) keeps fingerprints valid across versions of kube2nats, which
//! the durable state needs. A change is lost only if the new content hashes to exactly the value
//! of the last published one: 1 in 2^64 per change (at 100,000 changes a second, once in 5
//! million years). It is not a cryptographic hash: someone who can write an object could craft a
//! change that hides from subscribers, so do not use `content` as an audit trail.
//!
//! The walk is iterative (an explicit stack), so deep nesting costs no call stack.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::json::{Cursor, Result};
use super::PathSet;

// Domain tags, one seed per kind of input, so that e.g. the string "1" and the number 1, or an
// empty object and an empty array, never hash alike.
const STRING: u64 = 1;
const SCALAR: u64 = 2;
const KEY: u64 = 3;
const MEMBER: u64 = 4;
const OBJECT: u64 = 5;
const ELEMENT: u64 = 6;
const ARRAY: u64 = 7;

fn pair(a: u64, b: u64, seed: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&a.to_le_bytes());
    buf[8..].copy_from_slice(&b.to_le_bytes());
    xxh3_64_with_seed(&buf, seed)
}

/// An open container on the walk's stack.
enum Frame {
    Object {
        /// Sum of the member hashes so far.
        sum: u64,
        members: u64,
        /// The hash of the key whose value is being read.
        key: u64,
        /// Which paths are still being followed here, and how many segments they matched.
        active: u64,
        depth: usize,
    },
    Array {
        chain: u64,
        elements: u64,
    },
}

/// Where the next value sits: which paths reach it and at what depth.
#[derive(Clone, Copy)]
struct Place {
    active: u64,
    depth: usize,
}

/// The fingerprint of `object` without the members `ignore` names.
pub(super) fn fingerprint(object: &[u8], ignore: &PathSet) -> Result<u64> {
    let mut c = Cursor::new(object);
    let mut stack: Vec<Frame> = Vec::new();
    let mut place = Place {
        active: ignore.all(),
        depth: 0,
    };
    loop {
        // Read one value; a container opens a frame and its first member or element is next.
        c.ws();
        let mut hash = match c.peek() {
            Some(b'{') => {
                c.i += 1;
                match next_key(&mut c, ignore, place.active, place.depth, true)? {
                    Some((key, child)) => {
                        stack.push(Frame::Object {
                            sum: 0,
                            members: 0,
                            key,
                            active: place.active,
                            depth: place.depth,
                        });
                        place = child;
                        continue;
                    }
                    None => pair(0, 0, OBJECT),
                }
            }
            Some(b'[') => {
                c.i += 1;
                c.ws();
                if c.peek() == Some(b']') {
                    c.i += 1;
                    pair(ARRAY, 0, ARRAY)
                } else {
                    stack.push(Frame::Array {
                        chain: ARRAY,
                        elements: 0,
                    });
                    place = Place {
                        active: 0,
                        depth: 0,
                    };
                    continue;
                }
            }
            Some(b'"') => xxh3_64_with_seed(c.string()?.as_bytes(), STRING),
            _ => xxh3_64_with_seed(c.scalar()?, SCALAR),
        };
        // A value is complete: fold it into its container, closing the containers it completes.
        loop {
            match stack.last_mut() {
                None => return Ok(hash),
                Some(Frame::Object {
                    sum,
                    members,
                    key,
                    active,
                    depth,
                }) => {
                    *sum = sum.wrapping_add(pair(*key, hash, MEMBER));
                    *members += 1;
                    c.ws();
                    let more = match c.peek() {
                        Some(b',') => {
                            c.i += 1;
                            true
                        }
                        _ => false,
                    };
                    match next_key(&mut c, ignore, *active, *depth, !more)? {
                        Some((next, child)) => {
                            *key = next;
                            place = child;
                            break;
                        }
                        None => {
                            hash = pair(*sum, *members, OBJECT);
                            stack.pop();
                        }
                    }
                }
                Some(Frame::Array { chain, elements }) => {
                    *chain = pair(*chain, hash, ELEMENT);
                    *elements += 1;
                    c.ws();
                    match c.peek() {
                        Some(b',') => {
                            c.i += 1;
                            place = Place {
                                active: 0,
                                depth: 0,
                            };
                            break;
                        }
                        _ => {
                            c.eat(b']')?;
                            hash = pair(*chain, *elements, ARRAY);
                            stack.pop();
                        }
                    }
                }
            }
        }
    }
}

/// Reads the next member's key (after `{` or `,`), skipping ignored members whole. Returns the
/// key's hash and where its value sits, or `None` once the object's `}` is consumed. `may_close`
/// is whether a `}` may come here (not right after a comma).
fn next_key(
    c: &mut Cursor<'_>,
    ignore: &PathSet,
    active: u64,
    depth: usize,
    may_close: bool,
) -> Result<Option<(u64, Place)>> {
    let mut may_close = may_close;
    loop {
        c.ws();
        if may_close && c.peek() == Some(b'}') {
            c.i += 1;
            return Ok(None);
        }
        let key = c.string()?;
        c.eat(b':')?;
        let step = ignore.step(active, depth, &key);
        if !step.matched {
            let child = Place {
                active: step.child,
                depth: depth + 1,
            };
            return Ok(Some((xxh3_64_with_seed(key.as_bytes(), KEY), child)));
        }
        c.skip_value()?;
        c.ws();
        if c.peek() == Some(b',') {
            c.i += 1;
            may_close = false;
        } else {
            c.eat(b'}')?;
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_path::JsonPath;

    fn paths(list: &[&str]) -> PathSet {
        PathSet::new(list.iter().map(|p| JsonPath::parse(p).unwrap()).collect())
    }

    fn fp(doc: &str, ignore: &[&str]) -> u64 {
        fingerprint(doc.as_bytes(), &paths(ignore)).unwrap()
    }

    #[test]
    fn member_order_whitespace_and_escapes_do_not_count() {
        let a = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","labels":{"x":"1","y":"2"}},"spec":[1,2]}"#;
        let b = r#"{ "apiVersion" : "v1", "kind":"Pod", "metadata":{"labels":{"y":"2","x":"\u0031"},"name":"a"},"spec":[ 1 , 2 ] }"#;
        assert_eq!(fp(a, &[]), fp(b, &[]));
    }

    #[test]
    fn values_types_and_array_order_count() {
        let base = fp(r#"{"a":[1,2],"b":"x"}"#, &[]);
        for other in [
            r#"{"a":[2,1],"b":"x"}"#,
            r#"{"a":[1,2],"b":"y"}"#,
            r#"{"a":[1,2],"b":"x","c":null}"#,
            r#"{"a":[1,2,null],"b":"x"}"#,
            r#"{"a":["1",2],"b":"x"}"#,
            r#"{"a":[[1,2]],"b":"x"}"#,
            r#"{"a":{"0":1,"1":2},"b":"x"}"#,
            r#"{"b":[1,2],"a":"x"}"#,
            r#"{"a":[1,2],"b":{}}"#,
            r#"{"a":[1,2],"b":[]}"#,
        ] {
            assert_ne!(base, fp(other, &[]), "{other}");
        }
    }

    #[test]
    fn ignored_paths_do_not_count_wherever_they_are() {
        let ignore = &[
            "metadata.resourceVersion",
            "status",
            r#"metadata.annotations."example.com/beat""#,
        ];
        let a = r#"{"metadata":{"name":"a","resourceVersion":"1","annotations":{"example.com/beat":"1","keep":"k"}},"spec":{"x":1},"status":{"phase":"A"}}"#;
        let b = r#"{"status":{"phase":"B"},"metadata":{"annotations":{"keep":"k","example.com/beat":"2"},"resourceVersion":"2","name":"a"},"spec":{"x":1}}"#;
        let c = r#"{"metadata":{"name":"a","annotations":{"keep":"k"}},"spec":{"x":1}}"#;
        assert_eq!(fp(a, ignore), fp(b, ignore));
        assert_eq!(fp(a, ignore), fp(c, ignore));
        let changed = r#"{"metadata":{"name":"a","annotations":{"keep":"K"}},"spec":{"x":1}}"#;
        assert_ne!(fp(a, ignore), fp(changed, ignore));
        // A path names a member of an object: not the same key deeper down or inside an array.
        let nested =
            r#"{"metadata":{"name":"a","annotations":{"keep":"k"}},"spec":{"x":1,"status":1}}"#;
        assert_ne!(fp(c, ignore), fp(nested, ignore));
        let in_array = r#"{"metadata":{"name":"a","annotations":{"keep":"k"}},"spec":{"x":1},"list":[{"status":1}]}"#;
        assert_ne!(fp(in_array, ignore), fp(c, ignore));
    }

    #[test]
    fn first_last_and_only_members_can_be_ignored() {
        let ignore = &["a", "c"];
        assert_eq!(
            fp(r#"{"a":1,"b":2,"c":3}"#, ignore),
            fp(r#"{"b":2}"#, ignore)
        );
        assert_eq!(fp(r#"{"a":1}"#, ignore), fp(r#"{}"#, ignore));
        assert_eq!(fp(r#"{"a":1,"c":[{}]}"#, ignore), fp("{ }", ignore));
    }

    #[test]
    fn deep_nesting_costs_no_stack() {
        let doc = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert!(fingerprint(doc.as_bytes(), &paths(&[])).is_ok());
        let doc = format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
        assert!(fingerprint(doc.as_bytes(), &paths(&["a.a.b"])).is_ok());
    }

    #[test]
    fn malformed_input_is_an_error() {
        for doc in ["", "{", "{\"a\"", "{\"a\":1", "[1", "{\"a\":1,}", "{]"] {
            assert!(
                fingerprint(doc.as_bytes(), &paths(&["x"])).is_err(),
                "{doc}"
            );
        }
    }
}
