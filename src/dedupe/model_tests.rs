use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::keys::format_uuid;
use super::*;
use crate::event::ResourceVersion;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Published {
    version: u64,
    name: String,
    namespace: Option<String>,
    mark: u64,
}

type Model = BTreeMap<String, Published>;

#[derive(Debug, Clone)]
enum Op {
    Event {
        uid: u8,
        version: u64,
        kind: u8,
        mark: u64,
    },
    /// Objects listed: known ones at a version, new ones under a name, maybe one a
    /// vanished object held.
    Relist(Vec<(u8, u64, u8, u64)>),
    Freeze,
    Restore,
}

fn op() -> impl Strategy<Value = Op> {
    let listed = (0u8..60, 1u64..12, 0u8..40, 0u64..3);
    prop_oneof![
        6 => (0u8..60, 1u64..12, 0u8..3, 0u64..3).prop_map(|(uid, version, kind, mark)| {
            Op::Event { uid, version, kind, mark }
        }),
        1 => proptest::collection::vec(listed, 0..50).prop_map(Op::Relist),
        1 => Just(Op::Freeze),
        1 => Just(Op::Restore),
    ]
}

fn uid(i: u8) -> String {
    // Some uids are UUIDs (the dense store), some not (the side map).
    if i % 5 == 4 {
        format!("custom-{i}")
    } else {
        format!("{i:08x}-0000-4000-8000-000000000000")
    }
}

/// Names of every length: some long, so that forgetting them compacts the names.
fn name(i: u8) -> String {
    if i.is_multiple_of(3) {
        format!("{}-{i}", "long".repeat(500))
    } else {
        format!("n{i}")
    }
}

fn namespace(i: u8) -> Option<String> {
    (!i.is_multiple_of(4)).then(|| format!("ns{}", i % 4))
}

fn meta_of(uid: &str, version: u64, p: &Published) -> ObjectMeta {
    ObjectMeta {
        uid: uid.into(),
        resource_version: ResourceVersion::new(version.to_string()),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        generation: None,
    }
}

fn saved(frozen: Frozen) -> (Model, Vec<String>) {
    let mut objects = Model::new();
    let mut tombstones = Vec::new();
    let text = |uid: SavedUid<'_>| match uid {
        SavedUid::Uuid(bytes) => format_uuid(&bytes),
        SavedUid::Text(text) => text.to_owned(),
    };
    frozen.for_each(|saved| match saved {
        Saved::Object(o) => {
            let SavedVersion::Number(version) = o.version else {
                panic!("only integer versions here");
            };
            let p = Published {
                version,
                name: o.name.to_owned(),
                namespace: o.namespace.map(str::to_owned),
                mark: o.mark,
            };
            assert!(objects.insert(text(o.uid), p).is_none(), "saved twice");
        }
        Saved::Tombstone(uid) => tombstones.push(text(uid)),
    });
    (objects, tombstones)
}

/// Whether another tracked object holds the name: names are unique at any instant, so
/// such an event is not generated.
fn name_taken(model: &Model, uid: &str, p: &Published) -> bool {
    model
        .iter()
        .any(|(u, q)| u != uid && q.name == p.name && q.namespace == p.namespace)
}

fn run(ops: Vec<Op>) {
    let mut d = Dedupe::new();
    let mut model = Model::new();
    let mut tombstones: Vec<String> = Vec::new();
    let mut frozen: Vec<(Frozen, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Event {
                uid: i,
                version,
                kind,
                mark,
            } => {
                let u = uid(i);
                let event_type =
                    [EventType::Added, EventType::Modified, EventType::Deleted][kind as usize];
                let p = model.get(&u).cloned().unwrap_or(Published {
                    version,
                    name: name(i),
                    namespace: namespace(i),
                    mark,
                });
                if name_taken(&model, &u, &p) {
                    continue;
                }
                let expected = if tombstones.contains(&u) {
                    if event_type == EventType::Deleted {
                        Verdict::Duplicate
                    } else {
                        Verdict::Stale
                    }
                } else {
                    match model.get(&u) {
                        Some(t) if version < t.version => Verdict::Stale,
                        Some(t) if event_type != EventType::Deleted && version == t.version => {
                            Verdict::Duplicate
                        }
                        Some(t)
                            if event_type == EventType::Modified && mark != 0 && mark == t.mark =>
                        {
                            Verdict::Unchanged
                        }
                        _ => Verdict::Publish,
                    }
                };
                let got = d.observe(&meta_of(&u, version, &p), event_type, mark);
                assert_eq!(got, expected, "{event_type:?} {u} at {version}");
                match (expected, event_type) {
                    (Verdict::Publish, EventType::Deleted) => {
                        model.remove(&u);
                        tombstones.push(u);
                    }
                    (Verdict::Publish | Verdict::Unchanged, _) => {
                        model.insert(u, Published { version, mark, ..p });
                    }
                    _ => {}
                }
            }
            Op::Relist(items) => {
                d.begin_list();
                let mut seen_uids = BTreeSet::new();
                let mut seen_names = BTreeSet::new();
                for (i, version, n, mark) in items {
                    let u = uid(i);
                    let p = model.get(&u).cloned().unwrap_or(Published {
                        version,
                        name: name(n),
                        namespace: namespace(n),
                        mark,
                    });
                    if tombstones.contains(&u)
                        || !seen_uids.insert(u.clone())
                        || !seen_names.insert((p.namespace.clone(), p.name.clone()))
                    {
                        continue;
                    }
                    let meta = meta_of(&u, version, &p);
                    let holder = model
                        .iter()
                        .find(|(h, q)| **h != u && q.name == p.name && q.namespace == p.namespace)
                        .map(|(h, q)| (h.clone(), q.version));
                    let gone = d.superseded(&meta).map(|v| v.meta);
                    assert_eq!(
                        gone.as_ref()
                            .map(|m| (m.uid.clone(), m.resource_version.as_u64())),
                        holder.as_ref().map(|(h, v)| (h.clone(), Some(*v)))
                    );
                    if let Some((h, _)) = holder {
                        model.remove(&h);
                        tombstones.push(h);
                    }
                    let expected = match model.get(&u) {
                        None => Listed::New,
                        Some(t) if t.version == version => Listed::Unchanged,
                        Some(t) if version < t.version => Listed::Stale,
                        Some(t) if mark != 0 && mark == t.mark => Listed::SameMark,
                        Some(_) => Listed::Changed,
                    };
                    assert_eq!(d.listed(&meta, mark), expected, "{u} at {version}");
                    if !matches!(expected, Listed::Unchanged | Listed::Stale) {
                        model.insert(u, Published { version, mark, ..p });
                    }
                }
                let mut expected: Vec<(Option<String>, String, String)> = model
                    .iter()
                    .filter(|(u, _)| !seen_uids.contains(*u))
                    .map(|(u, p)| (p.namespace.clone(), p.name.clone(), u.clone()))
                    .collect();
                expected.sort();
                let vanished: Vec<_> = d
                    .end_list()
                    .into_iter()
                    .map(|v| (v.meta.namespace, v.meta.name, v.meta.uid))
                    .collect();
                assert_eq!(vanished, expected);
                for (_, _, u) in expected {
                    model.remove(&u);
                    tombstones.push(u);
                }
            }
            Op::Freeze => frozen.push((d.freeze(), model.clone())),
            Op::Restore => {
                let mut restored = Dedupe::new();
                d.for_each_saved(|o| restored.restore_saved(o, false));
                d = restored;
            }
        }
        assert_eq!(d.len(), model.len());
    }
    for (frozen, then) in frozen {
        assert_eq!(
            saved(frozen).0,
            then,
            "a checkpoint sees the state as it was"
        );
    }
    let (now, saved_tombstones) = saved(d.freeze());
    assert_eq!(now, model);
    // A relist's vanished are remembered in no particular order.
    let set = |t: Vec<String>| t.into_iter().collect::<BTreeSet<_>>();
    assert_eq!(set(saved_tombstones), set(tombstones));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn the_state_behaves_as_a_map_of_what_was_published(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        run(ops);
    }
}
