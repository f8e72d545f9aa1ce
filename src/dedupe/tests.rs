use super::keys::{format_uuid, hex_value, parse_uuid};
use super::tombstones::TOMBSTONES;
use super::*;
use crate::event::ResourceVersion;

fn meta(uid: &str, rv: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        uid: uid.into(),
        resource_version: ResourceVersion::new(rv),
        name: name.into(),
        namespace: Some("default".into()),
        generation: None,
    }
}

const A: &str = "0b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b";
const B: &str = "not-a-uuid";

/// `observe_tracked` says whether the object was tracked before, as `tracks` did, for
/// UUIDs and other uids, through additions, modifications, deletions and their repeats.
#[test]
fn observe_tracked_reports_what_tracks_said_before() {
    let mut d = Dedupe::new();
    let steps = [
        (A, "1", EventType::Added),
        (A, "2", EventType::Modified),
        (B, "3", EventType::Modified),
        (A, "2", EventType::Modified),
        (A, "4", EventType::Deleted),
        (A, "5", EventType::Added),
        (B, "6", EventType::Deleted),
        (B, "6", EventType::Deleted),
    ];
    for (uid, rv, event_type) in steps {
        let before = d.tracks(uid);
        let m = meta(uid, rv, "web");
        let (verdict, tracked) = d.observe_tracked(&m, event_type, 0);
        assert_eq!(tracked, before, "{uid} {rv} {event_type}: {verdict:?}");
    }
    assert!(!d.tracks(A) && !d.tracks(B));
}

/// A relist that finds a tracked name under a new uid: the old uid is returned (to be
/// announced first) and forgotten, so the end of the list does not announce it again; a
/// name under its own uid, and a name never seen, supersede nothing.
#[test]
fn a_recreated_name_supersedes_the_old_uid_during_a_list() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "5", "web"), EventType::Added, 0);
    d.observe(&meta(B, "6", "db"), EventType::Added, 0);
    d.begin_list();
    let new_web = meta("1b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b", "9", "web");
    let gone = d.superseded(&new_web).expect("web's old uid");
    assert_eq!(gone.meta.uid, A);
    assert_eq!(gone.meta.resource_version.as_str(), "5");
    assert_eq!(d.listed(&new_web, 0), Listed::New);
    assert_eq!(d.superseded(&meta(B, "6", "db")), None);
    assert_eq!(d.listed(&meta(B, "6", "db"), 0), Listed::Unchanged);
    assert_eq!(d.superseded(&meta("other", "7", "new")), None);
    assert!(d.end_list().is_empty(), "nothing vanished twice");
    assert_eq!(d.len(), 2);
}

/// Under `changes = generation | content`: a MODIFIED with the published mark is not news,
/// but its version is recorded (a replay of it is a duplicate; a relist at that version or a
/// later one with the same mark announces nothing); ADDED and DELETED are always news; mark
/// 0 compares with nothing.
#[test]
fn a_modified_with_the_published_mark_is_unchanged() {
    let mut d = Dedupe::new();
    assert_eq!(
        d.observe(&meta(A, "1", "a"), EventType::Added, 7),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(A, "2", "a"), EventType::Modified, 7),
        Verdict::Unchanged
    );
    assert_eq!(
        d.observe(&meta(A, "2", "a"), EventType::Modified, 7),
        Verdict::Duplicate
    );
    assert_eq!(
        d.observe(&meta(A, "1", "a"), EventType::Modified, 9),
        Verdict::Stale
    );
    assert_eq!(
        d.observe(&meta(A, "3", "a"), EventType::Modified, 8),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(A, "4", "a"), EventType::Modified, 8),
        Verdict::Unchanged
    );
    assert_eq!(
        d.observe(&meta(A, "5", "a"), EventType::Modified, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(A, "6", "a"), EventType::Modified, 0),
        Verdict::Publish
    );
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "6", "a"), 0), Listed::Unchanged);
    assert!(d.end_list().is_empty());
    assert_eq!(
        d.observe(&meta(A, "7", "a"), EventType::Modified, 5),
        Verdict::Publish
    );
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "9", "a"), 5), Listed::SameMark);
    assert!(d.end_list().is_empty());
    assert_eq!(
        d.observe(&meta(A, "9", "a"), EventType::Modified, 5),
        Verdict::Duplicate
    );
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "10", "a"), 6), Listed::Changed);
    d.end_list();
    assert_eq!(
        d.observe(&meta(A, "11", "a"), EventType::Deleted, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "1", "b"), EventType::Added, 1),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "2", "b"), EventType::Added, 1),
        Verdict::Publish
    );
}

#[test]
fn marks_survive_save_and_restore() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "1", "a"), EventType::Added, 42);
    d.observe(&meta(B, "1", "b"), EventType::Added, 0);
    let mut restored = Dedupe::new();
    d.for_each_saved(|o| restored.restore_saved(o, false));
    assert_eq!(
        restored.observe(&meta(A, "2", "a"), EventType::Modified, 42),
        Verdict::Unchanged
    );
    assert_eq!(
        restored.observe(&meta(B, "2", "b"), EventType::Modified, 0),
        Verdict::Publish
    );
}

#[test]
fn uuid_round_trip() {
    assert_eq!(format_uuid(&parse_uuid(A).unwrap()), A);
    assert_eq!(parse_uuid("0B8E6C3A-1F2D-4E5F-9A0B-1C2D3E4F5A6B"), None);
}

/// The hex digits in the order they appear, dashes skipped: what `parse_uuid` must read.
fn parse_uuid_reference(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let mut out = [0u8; 16];
    let mut hex = b.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        *byte = hex_value(*hex.next()?)? << 4 | hex_value(*hex.next()?)?;
    }
    Some(out)
}

proptest::proptest! {
    /// UUID-shaped strings, some with a character changed (upper case, a dash, a space, a
    /// multi-byte character): read as the reference reads them.
    #[test]
    fn parse_uuid_agrees_with_the_reference(
        digits in proptest::collection::vec(proptest::sample::select(b"0123456789abcdef".to_vec()), 32),
        edit in proptest::option::of((0usize..36, proptest::sample::select(vec!["A", "-", " ", "g", "é", "0"]))),
    ) {
        let mut s = String::new();
        for (i, d) in digits.iter().enumerate() {
            if matches!(i, 8 | 12 | 16 | 20) {
                s.push('-');
            }
            s.push(char::from(*d));
        }
        if let Some((at, with)) = edit {
            s.replace_range(at..at + 1, with);
        }
        proptest::prop_assert_eq!(parse_uuid(&s), parse_uuid_reference(&s), "{}", s);
    }
}

#[test]
fn repeats_and_older_versions_are_dropped() {
    let mut d = Dedupe::new();
    assert_eq!(
        d.observe(&meta(A, "10", "a"), EventType::Added, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(A, "10", "a"), EventType::Added, 0),
        Verdict::Duplicate
    );
    assert_eq!(
        d.observe(&meta(A, "12", "a"), EventType::Modified, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(A, "11", "a"), EventType::Modified, 0),
        Verdict::Stale
    );
    assert_eq!(
        d.observe(&meta(A, "13", "a"), EventType::Deleted, 0),
        Verdict::Publish
    );
    assert!(d.is_empty());
}

#[test]
fn events_of_a_deleted_object_replayed_are_dropped() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "10", "a"), EventType::Added, 0);
    d.observe(&meta(A, "11", "a"), EventType::Deleted, 0);
    assert_eq!(
        d.observe(&meta(A, "10", "a"), EventType::Added, 0),
        Verdict::Stale
    );
    assert_eq!(
        d.observe(&meta(A, "11", "a"), EventType::Deleted, 0),
        Verdict::Duplicate
    );
    assert!(d.is_empty(), "a replay does not bring the object back");
    // Vanished in a relist: its real DELETED, replayed later, is not news either.
    d.observe(&meta(B, "20", "b"), EventType::Added, 0);
    d.begin_list();
    assert_eq!(d.end_list().len(), 1);
    assert_eq!(
        d.observe(&meta(B, "25", "b"), EventType::Deleted, 0),
        Verdict::Duplicate
    );
}

#[test]
fn tombstones_are_bounded() {
    let mut d = Dedupe::new();
    let uid = |i: usize| format!("{i:08x}-0000-4000-8000-000000000000");
    for i in 0..TOMBSTONES + 10 {
        d.observe(&meta(&uid(i), "1", "x"), EventType::Deleted, 0);
    }
    assert_eq!(d.tombstones.order.len(), TOMBSTONES);
    assert_eq!(d.tombstones.uids.len(), TOMBSTONES);
    assert_eq!(
        d.observe(&meta(&uid(0), "1", "x"), EventType::Deleted, 0),
        Verdict::Publish,
        "the oldest is forgotten"
    );
}

#[test]
fn opaque_versions_compare_for_equality_only() {
    let mut d = Dedupe::new();
    assert_eq!(
        d.observe(&meta(B, "abc", "b"), EventType::Added, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "abc", "b"), EventType::Modified, 0),
        Verdict::Duplicate
    );
    assert_eq!(
        d.observe(&meta(B, "abb", "b"), EventType::Modified, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "0042", "b"), EventType::Modified, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "0042", "b"), EventType::Modified, 0),
        Verdict::Duplicate
    );
}

#[test]
fn relist_diff_added_changed_unchanged_vanished() {
    let mut d = Dedupe::new();
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "5", "a"), 0), Listed::New);
    assert_eq!(
        d.listed(
            &meta("11111111-2222-3333-4444-555555555555", "6", "gone"),
            0
        ),
        Listed::New
    );
    assert_eq!(d.listed(&meta(B, "7", "same"), 0), Listed::New);
    assert!(d.end_list().is_empty());

    d.begin_list();
    assert_eq!(d.listed(&meta(A, "9", "a"), 0), Listed::Changed);
    assert_eq!(d.listed(&meta(B, "7", "same"), 0), Listed::Unchanged);
    assert_eq!(
        d.listed(&meta("99999999-2222-3333-4444-555555555555", "8", "new"), 0),
        Listed::New
    );
    let vanished = d.end_list();
    assert_eq!(
        vanished,
        vec![Vanished {
            meta: meta("11111111-2222-3333-4444-555555555555", "6", "gone"),
            announced: false,
        }]
    );
    assert_eq!(d.len(), 3);
}

#[test]
fn a_relist_of_many_objects_sized_ahead_finds_exactly_the_unlisted_ones_while_names_recur() {
    // Hundreds of objects span several words of the list's seen bits; recreations (same
    // name, new uid) remove objects during the list, moving the last into the hole.
    let mut d = Dedupe::new();
    d.size_for(300);
    let name = |i: u64| format!("pod-{i}");
    for i in 0..300 {
        d.observe(&meta(&uuid_of(i), "5", &name(i)), EventType::Added, 0);
    }
    d.begin_list();
    d.size_for(u64::MAX);
    let mut expected_gone = Vec::new();
    for i in 0..300u64 {
        match i % 5 {
            // Not listed: vanished at the end.
            0 => expected_gone.push(name(i)),
            // Recreated under a new uid: announced at once, the new uid is new.
            1 => {
                let recreated = meta(&uuid_of(1000 + i), "9", &name(i));
                let gone = d.superseded(&recreated).expect("the old uid held the name");
                assert_eq!(gone.meta.uid, uuid_of(i));
                assert_eq!(d.listed(&recreated, 0), Listed::New);
            }
            _ => assert_eq!(
                d.listed(&meta(&uuid_of(i), "5", &name(i)), 0),
                Listed::Unchanged
            ),
        }
    }
    let mut gone: Vec<String> = d.end_list().into_iter().map(|v| v.meta.name).collect();
    gone.sort();
    expected_gone.sort();
    assert_eq!(gone, expected_gone);
    assert_eq!(d.len(), 240);
    assert!(
        d.end_list().is_empty(),
        "no list under way: nothing vanishes"
    );
}

#[test]
fn relist_from_a_lagging_server_is_stale_not_a_change() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "20", "a"), EventType::Added, 0);
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "15", "a"), 0), Listed::Stale);
    assert!(
        d.end_list().is_empty(),
        "a stale listing still proves the object exists"
    );
    assert_eq!(
        d.observe(&meta(A, "20", "a"), EventType::Modified, 0),
        Verdict::Duplicate
    );
}

#[test]
fn deleted_and_recreated_name_is_two_objects() {
    let mut d = Dedupe::new();
    d.begin_list();
    d.listed(&meta(A, "5", "web"), 0);
    d.end_list();
    d.begin_list();
    let new_uid = "22222222-2222-3333-4444-555555555555";
    assert_eq!(d.listed(&meta(new_uid, "9", "web"), 0), Listed::New);
    let vanished = d.end_list();
    assert_eq!(vanished.len(), 1);
    assert_eq!(vanished[0].meta.uid, A);
    assert_eq!(vanished[0].meta.name, "web");
}

fn uuid_of(i: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i >> 16, i)
}

#[test]
fn names_survive_compaction_and_namespaces_are_released() {
    let mut d = Dedupe::new();
    d.begin_list();
    for i in 0..20_000 {
        let mut m = meta(&uuid_of(i), "5", &format!("pod-with-a-longish-name-{i}"));
        m.namespace = Some(format!("ns-{}", i % 3));
        d.listed(&m, 0);
    }
    d.end_list();
    // Delete most of them: the names' text is compacted on the way.
    for i in 0..19_000 {
        let m = meta(&uuid_of(i), "6", "ignored");
        assert_eq!(d.observe(&m, EventType::Deleted, 0), Verdict::Publish);
    }
    assert!(d.names.bytes() < 100_000, "{}", d.names.bytes());
    d.begin_list();
    let vanished = d.end_list();
    assert_eq!(vanished.len(), 1000);
    assert_eq!(vanished[0].meta.namespace.as_deref(), Some("ns-0"));
    assert!(vanished
        .iter()
        .all(|v| v.meta.name.starts_with("pod-with-a-longish-name-")));
    let mut names: Vec<_> = vanished.iter().map(|v| v.meta.name.clone()).collect();
    names.dedup();
    assert_eq!(names.len(), 1000);
    assert!(d.is_empty());
    assert!(d.namespaces.index.is_empty());
}

#[test]
fn opaque_and_numeric_versions_round_trip_through_a_relist() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "abc", "a"), EventType::Added, 0);
    d.observe(&meta(B, "18446744073709551615", "b"), EventType::Added, 0);
    d.observe(&meta("c", "17", "c"), EventType::Added, 0);
    d.begin_list();
    let mut vanished: Vec<_> = d.end_list().into_iter().map(|v| v.meta).collect();
    vanished.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(
        vanished,
        vec![
            meta(A, "abc", "a"),
            meta(B, "18446744073709551615", "b"),
            meta("c", "17", "c")
        ]
    );
    assert!(d.opaque_versions.is_empty());
}

#[test]
fn saved_objects_restore_the_same_memory() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "abc", "a"), EventType::Added, 0);
    d.observe(&meta(B, "17", "b"), EventType::Added, 0);
    let mut cluster = meta(&uuid_of(3), "18", "c");
    cluster.namespace = None;
    d.observe(&cluster, EventType::Added, 0);
    d.observe(&meta(&uuid_of(4), "19", "gone"), EventType::Added, 0);
    d.observe(&meta(&uuid_of(4), "20", "gone"), EventType::Deleted, 0);
    let mut restored = Dedupe::new();
    d.for_each_saved(|o| restored.restore_saved(o, false));
    assert_eq!(restored.len(), 3);
    assert_eq!(restored.tombstones(), 1);
    assert_eq!(
        restored.observe(&meta(&uuid_of(4), "19", "gone"), EventType::Added, 0),
        Verdict::Stale,
        "a replayed event of an object deleted before the save"
    );
    assert_eq!(
        restored.observe(&meta(A, "abc", "a"), EventType::Modified, 0),
        Verdict::Duplicate
    );
    assert_eq!(
        restored.observe(&meta(B, "16", "b"), EventType::Modified, 0),
        Verdict::Stale
    );
    restored.begin_list();
    let mut vanished: Vec<_> = restored.end_list().into_iter().map(|v| v.meta).collect();
    vanished.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(
        vanished,
        vec![meta(A, "abc", "a"), meta(B, "17", "b"), cluster]
    );
}

/// Objects restored from the journal may never have been announced: their next event or
/// listing is published even at the journaled version, once; their absence from a relist
/// is a deletion; and the mark survives a save.
#[test]
fn journaled_objects_are_published_again_once() {
    let journaled =
        |d: &mut Dedupe, m: &ObjectMeta| d.restore_saved(Saved::Object(SavedObject::of(m)), true);
    let mut d = Dedupe::new();
    d.observe(&meta(A, "5", "a"), EventType::Added, 0);
    journaled(&mut d, &meta(A, "4", "a"));
    assert_eq!(d.unconfirmed(), 0, "an older journaled version is ignored");
    journaled(&mut d, &meta(B, "7", "b"));
    journaled(&mut d, &meta(&uuid_of(3), "8", "c"));
    journaled(&mut d, &meta(&uuid_of(4), "10", "d"));
    assert_eq!((d.len(), d.unconfirmed()), (4, 3));

    let mut saved = Dedupe::new();
    d.for_each_saved(|o| saved.restore_saved(o, false));
    assert_eq!(saved.unconfirmed(), 3, "the mark is saved");

    assert_eq!(
        d.observe(&meta(B, "7", "b"), EventType::Added, 0),
        Verdict::Publish
    );
    assert_eq!(
        d.observe(&meta(B, "7", "b"), EventType::Added, 0),
        Verdict::Duplicate
    );
    d.begin_list();
    assert_eq!(d.listed(&meta(A, "5", "a"), 0), Listed::Unchanged);
    assert_eq!(d.listed(&meta(B, "7", "b"), 0), Listed::Unchanged);
    assert_eq!(
        d.listed(&meta(&uuid_of(3), "8", "c"), 0),
        Listed::Unconfirmed
    );
    let vanished: Vec<_> = d.end_list().into_iter().map(|v| v.meta).collect();
    assert_eq!(vanished, vec![meta(&uuid_of(4), "10", "d")]);
    assert_eq!(d.unconfirmed(), 0);
    d.begin_list();
    assert_eq!(d.listed(&meta(&uuid_of(3), "8", "c"), 0), Listed::Unchanged);
}

/// A deletion the journal recorded and nothing confirmed keeps its mark through a save (a
/// checkpoint taken before a relist resolved it): after a later crash the relist announces it
/// again at the recorded version, the same message (`Nats-Msg-Id`), not as a new deletion.
#[test]
fn a_journaled_deletion_survives_a_save() {
    let mut d = Dedupe::new();
    d.observe(&meta(A, "5", "a"), EventType::Added, 0);
    d.observe(&meta(B, "6", "b"), EventType::Added, 0);
    d.restore_journaled(SavedObject::of(&meta(A, "9", "a")), true);
    d.restore_journaled(SavedObject::of(&meta(B, "7", "b")), false);
    let mut saved = Dedupe::new();
    d.for_each_saved(|o| saved.restore_saved(o, false));
    saved.begin_list();
    let mut vanished = saved.end_list();
    vanished.sort_by(|x, y| x.meta.name.cmp(&y.meta.name));
    assert_eq!(
        vanished,
        vec![
            Vanished {
                meta: meta(A, "9", "a"),
                announced: true
            },
            Vanished {
                meta: meta(B, "7", "b"),
                announced: false
            },
        ]
    );
}
