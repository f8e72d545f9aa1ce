//! An object's JSON read straight into a CEL value: one pass over the bytes, no intermediate
//! `serde_json::Value`.
//!
//! Numbers as Kubernetes' CEL sees them: an integer is an `int` (a `uint` only beyond `i64`,
//! which no Kubernetes field reaches), anything else a `double`; so `object.spec.replicas > 3`
//! compares two ints.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::Value;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Reads `object` (JSON) as a CEL value.
pub(crate) fn object_value(object: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<CelJson>(object).map(|v| v.0)
}

struct CelJson(Value);

impl<'de> Deserialize<'de> for CelJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CelVisitor).map(CelJson)
    }
}

struct CelVisitor;

impl<'de> Visitor<'de> for CelVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::UInt(v), Value::Int))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(Arc::new(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(Arc::new(v)))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(CelJson(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::List(Arc::new(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = HashMap::with_capacity(access.size_hint().unwrap_or(0));
        while let Some((key, CelJson(value))) = access.next_entry::<String, CelJson>()? {
            map.insert(Key::String(Arc::new(key)), value);
        }
        Ok(Value::Map(Map { map: Arc::new(map) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_as_cel_sees_it() {
        let v = object_value(br#"{"a":1,"b":-2,"c":1.5,"d":"x","e":[true,null],"f":{}}"#).unwrap();
        let Value::Map(m) = v else {
            panic!("not a map")
        };
        assert_eq!(m.get(&Key::from("a")), Some(&Value::Int(1)));
        assert_eq!(m.get(&Key::from("b")), Some(&Value::Int(-2)));
        assert_eq!(m.get(&Key::from("c")), Some(&Value::Float(1.5)));
        assert_eq!(m.get(&Key::from("d")), Some(&Value::from("x")));
        assert_eq!(
            m.get(&Key::from("e")),
            Some(&Value::List(Arc::new(vec![Value::Bool(true), Value::Null])))
        );
        assert!(matches!(m.get(&Key::from("f")), Some(Value::Map(_))));
        assert_eq!(
            object_value(b"18446744073709551615").unwrap(),
            Value::UInt(u64::MAX)
        );
        assert!(object_value(b"{\"a\":").is_err());
    }
}
