use super::*;

#[test]
fn special_bytes_flags_exactly_the_special_bytes() {
    let plain: [u8; 16] = *b"a ~\x7f#]!z{}[]:,09";
    assert_eq!(special_bytes(&plain), 0);
    for at in 0..16 {
        for byte in 0..=255u8 {
            let mut chunk = plain;
            chunk[at] = byte;
            let expected = u32::from(is_special(byte)) << at;
            assert_eq!(special_bytes(&chunk), expected, "{byte:#04x} at {at}");
        }
    }
}

#[test]
fn strings_end_at_their_quote_wherever_it_falls() {
    let pieces: [&[u8]; 6] = [
        b"a",
        b"\\\"",
        "é".as_bytes(),
        "€".as_bytes(),
        b"/",
        b"\\u00e9",
    ];
    for len in 0..24 {
        let mut body = Vec::new();
        for k in 0..len {
            body.extend_from_slice(pieces[(k * 7 + len) % pieces.len()]);
        }
        let escaped = body.contains(&b'\\');
        for utf8 in [false, true] {
            let closed = [&b"\""[..], &body, b"\" \"after\""].concat();
            let mut s = Scanner::new(&closed);
            s.utf8 = utf8;
            assert_eq!(s.skip_string().ok(), Some(escaped), "{closed:02x?}");
            assert_eq!(s.i, body.len() + 2, "{closed:02x?}");
            let open = [&b"\""[..], &body].concat();
            let mut s = Scanner::new(&open);
            s.utf8 = utf8;
            assert!(s.skip_string().is_err(), "{open:02x?}");
        }
    }
}

#[test]
fn utf8_char_len_agrees_with_std() {
    let tails = [
        0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xff,
    ];
    for lead in 0x80..=0xffu8 {
        for second in 0..=0xffu8 {
            for third in tails {
                for fourth in tails {
                    let bytes = [lead, second, third, fourth];
                    let valid = match std::str::from_utf8(&bytes) {
                        Ok(s) => s,
                        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap(),
                    };
                    let expected = valid.chars().next().map(char::len_utf8);
                    assert_eq!(utf8_char_len(&bytes), expected, "{bytes:02x?}");
                    // Cut short, the character is incomplete.
                    if let Some(len) = expected {
                        assert_eq!(utf8_char_len(&bytes[..len - 1]), None, "{bytes:02x?}");
                    }
                }
            }
        }
    }
}

#[test]
fn skip_value_accepts_json_and_rejects_the_rest() {
    let ok = [
        "0",
        "-0.5e+10",
        "1E5",
        "\"a\\u00e9\\n\"",
        "[]",
        "{}",
        "[1,[2,{\"a\":[true,false,null]}]]",
        "{ \"a\" : { } , \"b\" : [ ] }",
    ];
    for doc in ok {
        let mut s = Scanner::new(doc.as_bytes());
        assert!(s.skip_value().is_ok() && s.end().is_ok(), "{doc}");
    }
    let bad = [
        "",
        "01",
        "1.",
        "1e",
        "-",
        "+1",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\"}",
        "{a:1}",
        "[1 2]",
        "\"\\x\"",
        "\"\\u12g4\"",
        "\"a\u{1}\"",
        "\"open",
        "tru",
        "nul",
        "[",
        "{\"a\":1]",
        "[1}",
    ];
    for doc in bad {
        let mut s = Scanner::new(doc.as_bytes());
        assert!(s.skip_value().and_then(|()| s.end()).is_err(), "{doc}");
    }
}

#[test]
fn deep_nesting_costs_no_stack() {
    let doc = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut s = Scanner::new(doc.as_bytes());
    assert!(s.skip_value().is_ok());
    let doc = format!("{}1{}", "{\"a\":".repeat(70), "}".repeat(70));
    let mut s = Scanner::new(doc.as_bytes());
    assert!(s.skip_value().is_ok() && s.end().is_ok());
    let doc = format!("{}1{}]", "{\"a\":".repeat(70), "}".repeat(69));
    let mut s = Scanner::new(doc.as_bytes());
    assert!(s.skip_value().is_err());
    // Objects and arrays mixed past the 64 levels kept in bits: every closer must match its
    // opener, at every depth.
    let (mut open, mut close) = (String::new(), Vec::new());
    for depth in 0..150 {
        if depth % 3 == 0 {
            open.push('[');
            close.push(b']');
        } else {
            open.push_str("{\"a\":");
            close.push(b'}');
        }
    }
    close.reverse();
    let doc = [open.as_bytes(), b"1", &close].concat();
    let mut s = Scanner::new(&doc);
    assert!(s.skip_value().is_ok() && s.end().is_ok());
    for at in 0..close.len() {
        let mut wrong = close.clone();
        wrong[at] = if wrong[at] == b']' { b'}' } else { b']' };
        let doc = [open.as_bytes(), b"1", &wrong].concat();
        let mut s = Scanner::new(&doc);
        assert!(s.skip_value().is_err(), "closer {at} swapped");
    }
}

/// Where serde_json ends the string at the start of `doc` as a value it skips (escapes and
/// control characters checked), or `None` where it rejects it; with `utf8`, the string's bytes
/// must also be UTF-8, as those of a forwarded object must.
fn serde_string_end(doc: &[u8], utf8: bool) -> Option<usize> {
    let mut values = serde_json::Deserializer::from_slice(doc).into_iter::<serde::de::IgnoredAny>();
    values.next()?.ok()?;
    let end = values.byte_offset();
    (!utf8 || std::str::from_utf8(&doc[..end]).is_ok()).then_some(end)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Strings with escapes of every kind (runs of backslashes, escaped quotes, `\u`), wherever
    /// their 64-byte blocks fall, end where serde_json ends them, or fail where it does: with a
    /// control character, an invalid escape or broken UTF-8 anywhere, unclosed, or near the
    /// end of the line.
    #[test]
    fn escaped_strings_end_where_serde_ends_them(
        pieces in proptest::collection::vec(
            proptest::prop_oneof![
                20 => proptest::sample::select(vec![
                    &b"a"[..], b"plain text ", b"\\\\", b"\\\"", b"\\\\\\\"", b"\\\\\\\\",
                    b"\\/", b"\\n", b"\\t", b"\\u00e9", b"\\uD83D\\uDE00", "é".as_bytes(),
                    "日本".as_bytes(), b"\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\",
                ]),
                1 => proptest::sample::select(vec![
                    &b"\\x"[..], b"\\u12g4", b"\\u12", b"\x01", b"\x1f", b"\xff", b"\xc3", b"\"",
                    b"\\",
                ]),
            ],
            0..60,
        ),
        lead in 0usize..70,
        trail in 0usize..140,
        closed in proptest::bool::weighted(0.95),
        utf8: bool,
    ) {
        let mut doc = b"\"".to_vec();
        doc.extend(std::iter::repeat_n(b'x', lead));
        pieces.iter().for_each(|p| doc.extend_from_slice(p));
        if closed {
            doc.push(b'"');
        }
        doc.extend(std::iter::repeat_n(b',', trail));
        let mut s = Scanner::new(&doc);
        s.utf8 = utf8;
        let ours = s.skip_string().ok().map(|_| s.i);
        proptest::prop_assert_eq!(ours, serde_string_end(&doc, utf8), "{:?}", String::from_utf8_lossy(&doc));
    }
}

#[test]
fn a_long_run_of_backslashes_ends_at_the_quote_after_it() {
    for run in 0..200 {
        // From the first escape on the string goes by blocks: the run starts anywhere in one.
        for lead in [0, 1, 2, 33, 61, 62, 63] {
            let body = [&b"\\n"[..], &vec![b'a'; lead], &vec![b'\\'; run]].concat();
            let doc = [&b"\""[..], &body, b"\"", &[b' '; 80]].concat();
            let mut s = Scanner::new(&doc);
            // An even run is `run / 2` escaped backslashes; an odd one escapes the quote.
            let got = s.skip_string().ok().map(|_| s.i);
            let expected = (run % 2 == 0).then_some(body.len() + 2);
            assert_eq!(got, expected, "lead {lead}, run {run}");
        }
    }
}
