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
