//! The shipped documentation keeps up with the configuration keys.

#[test]
fn configuration_doc_lists_every_key() {
    let doc = include_str!("../../../docs/configuration.md");
    for spec in eventmesh_core::config::KNOWN_KEYS {
        assert!(
            doc.contains(&format!("`{}`", spec.key)),
            "docs/configuration.md misses {}",
            spec.key
        );
    }
}
