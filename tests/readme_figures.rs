//! Every figure in the README's prose — a number with a unit: s, ms, MB, MiB, %, ×, B, bytes,
//! events per CPU-second, minutes, GB … — sits in a paragraph, bullet or table row that links a
//! page under docs/, and the number appears in one of the pages it links. The docs hold the
//! measurements with their method; the README quotes them and cannot drift from them.

use std::path::Path;

/// Units that make a number a figure (a measurement), not a count or a name.
const UNITS: &[&str] = &[
    "s", "ms", "µs", "min", "minute", "minutes", "h", "B", "bytes", "KB", "KiB", "MB", "MiB", "GB",
    "GiB", "%", "×", "events", "CPU-s",
];

/// A figure found in the README: its number as written and the unit after it.
#[derive(Debug, PartialEq)]
struct Figure {
    number: String,
    unit: String,
}

/// The README's prose in blocks: paragraphs, bullets and table rows, without fenced code or
/// inline code spans (code shows syntax and defaults, not measurements).
fn prose_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current = String::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            flush(&mut current, &mut blocks);
            continue;
        }
        if in_fence {
            continue;
        }
        let starts_block = line.trim().is_empty()
            || line.starts_with("- ")
            || line.starts_with('|')
            || line.starts_with('#');
        if starts_block {
            flush(&mut current, &mut blocks);
        }
        current.push_str(&without_code_spans(line));
        current.push('\n');
        if line.starts_with('|') || line.starts_with('#') {
            flush(&mut current, &mut blocks);
        }
    }
    flush(&mut current, &mut blocks);
    blocks
}

fn flush(current: &mut String, blocks: &mut Vec<String>) {
    if !current.trim().is_empty() {
        blocks.push(std::mem::take(current));
    }
    current.clear();
}

fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The figures of `text`: a number (digits, thousands commas, a decimal point), an optional
/// space, then one of [`UNITS`].
fn figures(text: &str) -> Vec<Figure> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
        if !starts_number {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_digit()
                || ((chars[i] == ',' || chars[i] == '.')
                    && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
        {
            i += 1;
        }
        let number: String = chars[start..i].iter().collect();
        let mut j = i;
        if chars.get(j) == Some(&' ') {
            j += 1;
        }
        let unit_start = j;
        while j < chars.len() && is_unit_char(&chars, j) {
            j += 1;
            if matches!(chars[j - 1], '%' | '×') {
                break;
            }
        }
        let unit: String = chars[unit_start..j].iter().collect();
        if UNITS.contains(&unit.as_str()) {
            out.push(Figure { number, unit });
        }
    }
    out
}

/// Whether `chars[j]` continues a unit: a letter, µ, % or ×, or a hyphen between letters
/// (`CPU-s`).
fn is_unit_char(chars: &[char], j: usize) -> bool {
    match chars[j] {
        '%' | '×' | 'µ' => true,
        '-' => chars.get(j + 1).is_some_and(|c| c.is_alphabetic()),
        c => c.is_alphabetic(),
    }
}

/// The docs/ pages a block links (`](docs/replicas.md)`, `](docs/performance.md#scale)`).
fn linked_docs(block: &str) -> Vec<String> {
    block
        .split("](docs/")
        .skip(1)
        .filter_map(|rest| {
            let end = rest.find([')', '#'])?;
            Some(format!("docs/{}", &rest[..end]))
        })
        .collect()
}

/// Whether `number` appears in `text` as a whole number (not inside a longer one).
fn contains_number(text: &str, number: &str) -> bool {
    text.match_indices(number).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after: Vec<char> = text[at + number.len()..].chars().take(2).collect();
        let joined_before = before.is_some_and(|c| c.is_ascii_digit() || c == '.' || c == ',');
        let joined_after = match after.as_slice() {
            [c, ..] if c.is_ascii_digit() => true,
            ['.' | ',', d, ..] if d.is_ascii_digit() => true,
            _ => false,
        };
        !joined_before && !joined_after
    })
}

/// Every problem with the figures of `readme`, whose links are read by `read_doc`.
fn problems(readme: &str, read_doc: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for block in prose_blocks(readme) {
        let found = figures(&block);
        if found.is_empty() {
            continue;
        }
        let docs = linked_docs(&block);
        let first_line = block.lines().next().unwrap_or_default().trim();
        if docs.is_empty() {
            problems.push(format!(
                "{found:?} in a block that links no page under docs/: {first_line:?}"
            ));
            continue;
        }
        let texts: Vec<(String, Option<String>)> =
            docs.iter().map(|d| (d.clone(), read_doc(d))).collect();
        for (doc, text) in &texts {
            if text.is_none() {
                problems.push(format!("{doc} (linked from {first_line:?}) does not exist"));
            }
        }
        for figure in found {
            let cited = texts.iter().any(|(_, text)| {
                text.as_deref()
                    .is_some_and(|t| contains_number(t, &figure.number))
            });
            if !cited {
                problems.push(format!(
                    "{} {} is in none of {docs:?} (the block starting {first_line:?})",
                    figure.number, figure.unit
                ));
            }
        }
    }
    problems
}

#[test]
fn every_figure_in_the_readme_is_in_the_doc_it_cites() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let problems = problems(&readme, |doc| std::fs::read_to_string(root.join(doc)).ok());
    assert!(
        problems.is_empty(),
        "README figures that no doc backs (quote the doc's figure, or link the doc that has it):\n{}",
        problems.join("\n")
    );
    // The check sees the README's figures at all.
    assert!(
        prose_blocks(&readme)
            .iter()
            .map(|b| figures(b).len())
            .sum::<usize>()
            >= 5,
        "fewer than five figures found in README.md: is the figure pattern broken?"
    );
}

#[test]
fn a_figure_that_its_doc_does_not_hold_is_reported() {
    let doc = |path: &str| {
        (path == "docs/replicas.md").then(|| {
            "| kill -9 | 10 | 4.0 s | 4.5 s |\n| SIGTERM | 20 | 0.57 s | 0.88 s |".to_owned()
        })
    };
    let good =
        "- **Replicas** take over in 4.0 s (max 4.5 s): [docs/replicas.md](docs/replicas.md).\n";
    assert_eq!(problems(good, doc), Vec::<String>::new());
    let wrong =
        "- **Replicas** take over in 3.6 s (max 4.5 s): [docs/replicas.md](docs/replicas.md).\n";
    let found = problems(wrong, doc);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("3.6 s is in none of"), "{found:?}");
    // A number inside a longer one does not count: 4.5 is not 14.5 or 4.55.
    let inside = "Takes 4.5 s ([r](docs/replicas.md)).\n";
    assert_eq!(
        problems(inside, |_| Some("14.5 s, 4.55 s".to_owned())).len(),
        1
    );
    let unlinked = "About 13 MB, small.\n";
    assert_eq!(problems(unlinked, doc).len(), 1);
    let missing_doc = "About 13 MB ([d](docs/nowhere.md)).\n";
    assert_eq!(problems(missing_doc, doc).len(), 2);
}

#[test]
fn figures_are_numbers_with_units() {
    let found = figures("median 4.0 s, ~140,700 events per CPU-second, 12.3 MB, +4.2%, 4.59× less, port 9090, 2 replicas, v2.10");
    let as_text: Vec<String> = found
        .iter()
        .map(|f| format!("{} {}", f.number, f.unit))
        .collect();
    assert_eq!(
        as_text,
        ["4.0 s", "140,700 events", "12.3 MB", "4.2 %", "4.59 ×"]
    );
}
