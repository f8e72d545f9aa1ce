//! docs/design.md is the map a newcomer reads first, so it must not drift from the code: its module
//! table lists exactly the crate's top-level modules, every page it links exists, every source path
//! it names exists, and every test it cites (`tests/FILE.rs::name`) is a function in that file.

use std::collections::BTreeSet;
use std::path::Path;

fn repo(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The first column of the "Module map" table, backticks removed.
fn mapped_modules(design: &str) -> BTreeSet<String> {
    let section = design
        .split("## Module map")
        .nth(1)
        .expect("docs/design.md has a '## Module map' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// The modules `src/lib.rs` declares (`mod x;` or `pub mod x;`), leaving out test-only ones.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    let mut test_only = false;
    let mut out = BTreeSet::new();
    for line in lib.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let decl = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("pub(crate) mod "))
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = decl.and_then(|d| d.strip_suffix(';')) {
            if !test_only {
                out.insert(name.to_owned());
            }
        }
        if !line.starts_with("#[") {
            test_only = false;
        }
    }
    out
}

#[test]
fn the_module_map_lists_exactly_the_crates_modules() {
    let mapped = mapped_modules(&repo("docs/design.md"));
    let declared = declared_modules(&repo("src/lib.rs"));
    assert!(!declared.is_empty(), "no modules found in src/lib.rs");
    let missing: Vec<_> = declared.difference(&mapped).collect();
    let stale: Vec<_> = mapped.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "modules missing from docs/design.md's map: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/design.md maps modules that do not exist: {stale:?}"
    );
}

#[test]
fn every_link_and_source_path_exists() {
    let design = repo("docs/design.md");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for link in design.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        let file = target.split('#').next().unwrap_or_default();
        if file.is_empty() || file.contains("://") {
            continue;
        }
        assert!(
            docs.join(file).exists(),
            "docs/design.md links {target}, which does not exist"
        );
    }
    for quoted in design.split('`').skip(1).step_by(2) {
        let path = quoted.split("::").next().unwrap_or_default();
        if ["src/", "tests/", "docs/"]
            .iter()
            .any(|p| path.starts_with(p))
            || path.ends_with(".toml")
        {
            let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            assert!(
                full.exists(),
                "docs/design.md names {path}, which does not exist"
            );
        }
    }
}

#[test]
fn every_cited_test_exists() {
    let design = repo("docs/design.md");
    let mut cited = 0;
    for quoted in design.split('`').skip(1).step_by(2) {
        let Some((file, name)) = quoted.split_once("::") else {
            continue;
        };
        if !file.starts_with("tests/") && !file.starts_with("src/") {
            continue;
        }
        let source = repo(file);
        let defined =
            source.contains(&format!("fn {name}(")) || source.contains(&format!("fn {name}<"));
        assert!(
            defined,
            "docs/design.md cites {quoted}, but {file} has no fn {name}"
        );
        cited += 1;
    }
    assert!(
        cited >= 10,
        "expected the edge-case table's test references, found {cited}"
    );
}

#[test]
fn the_parsers_see_what_they_should() {
    let lib = "pub mod a;\n#[cfg(test)]\nmod t;\nmod b;\n";
    assert_eq!(
        declared_modules(lib),
        BTreeSet::from(["a".into(), "b".into()])
    );
    let design =
        "## Module map\n| module | x |\n| --- | --- |\n| `a` | y |\n\n## Next\n| `z` | w |\n";
    assert_eq!(mapped_modules(design), BTreeSet::from(["a".to_owned()]));
}
