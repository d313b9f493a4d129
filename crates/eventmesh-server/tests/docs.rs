//! The shipped documentation keeps up with the configuration keys: the table
//! in docs/configuration.md is exactly the one the key declarations give.

use eventmesh_core::config::{markdown_table, KNOWN_KEYS};

const DOC: &str = include_str!("../../../docs/configuration.md");
const BEGIN: &str = "<!-- keys:begin -->\n";
const END: &str = "<!-- keys:end -->";

/// The text between the markers, or why there is none.
fn documented_table(doc: &str) -> Result<&str, String> {
    let start = doc
        .find(BEGIN)
        .ok_or_else(|| format!("no {BEGIN:?} marker"))?
        + BEGIN.len();
    let len = doc[start..]
        .find(END)
        .ok_or_else(|| format!("no {END:?} marker after {BEGIN:?}"))?;
    if doc[start + len..].contains(BEGIN) {
        return Err("more than one key table".to_string());
    }
    Ok(&doc[start..start + len])
}

#[test]
fn configuration_doc_table_matches_the_declarations() {
    let documented = documented_table(DOC).unwrap_or_else(|e| panic!("docs/configuration.md: {e}"));
    let expected = markdown_table();
    if documented != expected {
        let first_difference = documented
            .lines()
            .zip(expected.lines())
            .find(|(d, e)| d != e)
            .map_or_else(
                || "one table has more rows".to_string(),
                |(d, e)| format!("documented: {d}\ndeclared:   {e}"),
            );
        panic!(
            "docs/configuration.md's key table differs from the declarations in \
             crates/eventmesh-core/src/config/keys.rs\n{first_difference}\n\n\
             The table the declarations give:\n{expected}"
        );
    }
}

#[test]
fn configuration_doc_lists_every_key() {
    for spec in KNOWN_KEYS {
        assert!(
            DOC.contains(&format!("`{}`", spec.key)),
            "docs/configuration.md misses {}",
            spec.key
        );
    }
}

#[test]
fn the_table_is_found_between_its_markers_only() {
    let expected = markdown_table();
    let doc = format!("intro\n{BEGIN}{expected}{END}\nrest\n");
    assert_eq!(documented_table(&doc), Ok(expected.as_str()));
    assert!(documented_table("no markers").is_err());
    assert!(documented_table(&format!("{BEGIN}| a |\n")).is_err());
    assert!(documented_table(&format!("{doc}{BEGIN}{expected}{END}")).is_err());
}
