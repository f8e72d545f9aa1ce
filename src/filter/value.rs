//! An object's JSON read straight into CEL values: one pass over the bytes, strings without
//! escapes borrowed from them, no intermediate tree, and at the top level only the members the
//! expression reads (`object.status.phase` reads `status` alone).
//!
//! Numbers as Kubernetes' CEL sees them: an integer is an `int` (a `uint` only beyond `i64`,
//! which no Kubernetes field reaches), anything else a `double`; so `object.spec.replicas > 3`
//! compares two ints.

use std::collections::HashMap;
use std::fmt;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One CEL value borrowing from the JSON it was read from.
pub(crate) type Object<'de> = Box<dyn Val + 'de>;

/// Reads `object` (JSON) as a CEL value; `members`: the top-level members to keep (`None`: all).
pub(crate) fn object_value<'de>(
    object: &'de [u8],
    members: Option<&[String]>,
) -> Result<Object<'de>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(object);
    let value = CelSeed { members }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Reads one value; `members` applies to this value's own members only.
#[derive(Clone, Copy)]
struct CelSeed<'m> {
    members: Option<&'m [String]>,
}

impl<'de> DeserializeSeed<'de> for CelSeed<'_> {
    type Value = Object<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Object<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

const ALL: CelSeed<'static> = CelSeed { members: None };

impl<'de> Visitor<'de> for CelSeed<'_> {
    type Value = Object<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Object<'de>, E> {
        Ok(Box::new(CelBool::from(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Object<'de>, E> {
        Ok(Box::new(CelInt::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Object<'de>, E> {
        Ok(match i64::try_from(v) {
            Ok(v) => Box::new(CelInt::from(v)),
            Err(_) => Box::new(CelUInt::from(v)),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Object<'de>, E> {
        Ok(Box::new(CelDouble::from(v)))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Object<'de>, E> {
        Ok(Box::new(CelString::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Object<'de>, E> {
        Ok(Box::new(CelString::from(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Object<'de>, E> {
        Ok(Box::new(CelString::from(v)))
    }

    fn visit_unit<E>(self) -> Result<Object<'de>, E> {
        Ok(Box::new(CelNull))
    }

    fn visit_none<E>(self) -> Result<Object<'de>, E> {
        Ok(Box::new(CelNull))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Object<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(ALL)? {
            items.push(item);
        }
        Ok(Box::new(CelList::from(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Object<'de>, A::Error> {
        let mut map = HashMap::with_capacity(access.size_hint().unwrap_or(0));
        while let Some(key) = access.next_key_seed(KeySeed)? {
            let wanted = self
                .members
                .is_none_or(|members| members.iter().any(|m| *m == *key.as_str()));
            if wanted {
                let value = access.next_value_seed(ALL)?;
                map.insert(key.into_key(), value);
            } else {
                access.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Box::new(CelMap::from(map)))
    }
}

/// A member name, borrowed from the JSON where it holds no escape.
enum Name<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl<'de> Name<'de> {
    fn as_str(&self) -> &str {
        match self {
            Name::Borrowed(s) => s,
            Name::Owned(s) => s,
        }
    }

    fn into_key(self) -> CelMapKey<'de> {
        match self {
            Name::Borrowed(s) => CelMapKey::from(s),
            Name::Owned(s) => CelMapKey::from(s),
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Name<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Name<'de>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Name<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
        Ok(Name::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
        Ok(Name::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
        Ok(Name::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Evaluates `source` with `object` read from `json` (keeping `members`).
    fn eval(json: &str, members: Option<&[String]>, source: &str) -> Result<cel::Value, String> {
        let object = object_value(json.as_bytes(), members).map_err(|e| e.to_string())?;
        let env = Arc::new(cel::Env::stdlib());
        let mut context = cel::Context::with_env(env.clone());
        context.add_variable_as_val("object", object);
        let program = env.compile(source).map_err(|e| e.to_string())?;
        program.execute(&context).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_json_as_cel_sees_it() {
        let json = r#"{"a":1,"b":-2,"c":1.5,"d":"x\"y","e":[true,null],"f":{},"big":18446744073709551615}"#;
        for (source, want) in [
            ("object.a == 1 && type(object.a) == int", true),
            ("object.b == -2", true),
            ("object.c == 1.5 && type(object.c) == double", true),
            ("object.d == 'x\"y'", true),
            (
                "object.e[0] && object.e[1] == null && size(object.e) == 2",
                true,
            ),
            ("size(object.f) == 0", true),
            ("type(object.big) == uint", true),
        ] {
            assert_eq!(
                eval(json, None, source),
                Ok(cel::Value::Bool(want)),
                "{source}"
            );
        }
        assert!(object_value(b"{\"a\":", None).is_err());
        assert!(object_value(b"{} x", None).is_err());
    }

    #[test]
    fn keeps_only_the_members_asked_for() {
        let json = r#"{"status":{"phase":"Failed"},"spec":{"replicas":3}}"#;
        let members = ["status".to_owned()];
        assert_eq!(
            eval(json, Some(&members), "object.status.phase == 'Failed'"),
            Ok(cel::Value::Bool(true))
        );
        assert_eq!(
            eval(json, Some(&members), "has(object.spec)"),
            Ok(cel::Value::Bool(false))
        );
    }
}
