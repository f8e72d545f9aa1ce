//! The rest of a string that holds escapes, 64 bytes at a time: a structural index of the
//! string (quote and backslash masks, the characters escaped, the first quote not escaped)
//! in place of one step per escape.

use wide::{i8x16, u8x16};

/// Scans the string from the backslash at `start` towards its closing quote a block at a time:
/// the quote and backslash masks give the escaped characters, and the first quote not escaped
/// ends the string. Each escape is checked to be one JSON allows and, where `utf8` is set, the
/// non-ASCII bytes to be UTF-8. Returns where the scan stopped: the closing quote, or a
/// position the byte-wise scan goes on from, outside any escape sequence with every byte before
/// it valid: the start of a block with a control character or an invalid escape, the first
/// byte of invalid UTF-8, or the start of the line's last 63 bytes. A stop for an error leaves
/// the byte-wise scan, which reports it, less than a block before it.
pub(super) fn escaped_run(b: &[u8], start: usize, utf8: bool) -> usize {
    let mut pos = start;
    // Set when the byte at `pos` is escaped by the backslash before it.
    let mut carry = 0;
    // The string's first non-ASCII byte from `start`, where `utf8` asks for a check.
    let mut first_high = None;
    let stop = loop {
        let Some(block) = b.get(pos..).and_then(<[u8]>::first_chunk::<64>) else {
            break pos - carry as usize;
        };
        let block_start = pos - carry as usize;
        let masks = Masks::of(block);
        let escaped = escaped_bits(masks.backslash, &mut carry);
        let closing = masks.quote & !escaped;
        // The block's bytes before its first closing quote, or all of them.
        let inside = closing.wrapping_sub(1) & !closing;
        if masks.control & inside != 0 || !valid_escapes(b, pos, escaped & inside) {
            break block_start;
        }
        if utf8 && first_high.is_none() && masks.high & inside != 0 {
            first_high = Some(pos + (masks.high & inside).trailing_zeros() as usize);
        }
        if closing != 0 {
            break pos + closing.trailing_zeros() as usize;
        }
        pos += 64;
    };
    let unchecked = |from| b.get(from..stop).unwrap_or_default();
    match first_high.map(|from| (from, std::str::from_utf8(unchecked(from)))) {
        Some((from, Err(e))) => from + e.valid_up_to(),
        _ => stop,
    }
}

/// Whether the characters at the bits of `escapes` (from `pos`) are ones a backslash may
/// escape: `"\/bfnrt`, or `u` and four hex digits.
fn valid_escapes(b: &[u8], pos: usize, mut escapes: u64) -> bool {
    while escapes != 0 {
        let at = pos + escapes.trailing_zeros() as usize;
        escapes &= escapes - 1;
        let valid = match b[at] {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => true,
            b'u' => b
                .get(at + 1..at + 5)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)),
            _ => false,
        };
        if !valid {
            return false;
        }
    }
    true
}

/// The bits of the characters the backslashes of a block escape (simdjson's branchless method:
/// a run of backslashes escapes every second one, and the byte after an odd-length run). `carry`
/// comes in set when the previous block's last byte escapes this block's first, and goes out
/// set when this block's last byte escapes the next block's first.
fn escaped_bits(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (even_starts << 1)) & follows_escape
}

/// The bytes of a block that matter inside a string, a bit each (bit k for byte k).
struct Masks {
    quote: u64,
    backslash: u64,
    /// Below 0x20.
    control: u64,
    /// Above 0x7f.
    high: u64,
}

impl Masks {
    fn of(block: &[u8; 64]) -> Masks {
        let (mut quote, mut backslash, mut low, mut high) = (0, 0, 0, 0);
        for (k, part) in block.chunks_exact(16).enumerate() {
            let mut bytes = [0; 16];
            bytes.copy_from_slice(part);
            let v = u8x16::new(bytes);
            let bits = |m: u8x16| u64::from(m.to_bitmask()) << (16 * k);
            quote |= bits(v.simd_eq(u8x16::splat(b'"')));
            backslash |= bits(v.simd_eq(u8x16::splat(b'\\')));
            // As signed bytes, the non-ASCII ones are negative: "below 0x20" takes them too.
            low |= bits(v.cast_signed().simd_lt(i8x16::splat(0x20)).cast_unsigned());
            high |= bits(v);
        }
        Masks {
            quote,
            backslash,
            control: low & !high,
            high,
        }
    }
}
