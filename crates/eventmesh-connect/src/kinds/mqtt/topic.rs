//! MQTT topic syntax: the topic filters a source may subscribe to, the
//! topic names a sink may publish to, and the sink's topic template.

/// Why a topic filter is invalid (MQTT 3.1.1 section 4.7).
pub(super) fn filter_fault(f: &str) -> Option<&'static str> {
    if f.is_empty() || f.len() > 65535 || f.contains('\0') {
        return Some("must be 1 to 65535 bytes without NUL");
    }
    let levels: Vec<&str> = f.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return Some("has a '#' that is not the whole last level");
        }
        if level.contains('+') && *level != "+" {
            return Some("has a '+' that is not a whole level");
        }
    }
    None
}

/// Why a topic name cannot be published to.
pub(super) fn topic_fault(t: &str) -> Option<&'static str> {
    if t.is_empty() || t.len() > 65535 || t.contains('\0') {
        Some("must be 1 to 65535 bytes without NUL")
    } else if t.contains(['+', '#']) {
        Some("must not contain the wildcards '+' or '#'")
    } else {
        None
    }
}

/// `template` with `{subject}` and `{type}` replaced, in one pass.
pub(super) fn fill(template: &str, subject: Option<&str>, ty: &str) -> String {
    let clean = |v: Option<&str>| match v {
        Some(v) if !v.is_empty() => v.replace(['+', '#', '\0'], "_"),
        _ => "_".to_string(),
    };
    let (mut out, mut rest) = (String::new(), template);
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("{subject}") {
            (out, rest) = (out + &clean(subject), r);
        } else if let Some(r) = rest.strip_prefix("{type}") {
            (out, rest) = (out + &clean(Some(ty)), r);
        } else {
            (out, rest) = (out + "{", &rest[1..]);
        }
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_filters_and_templates() {
        for ok in [
            "a",
            "a/b",
            "+",
            "#",
            "a/+/c",
            "a/#",
            "/",
            "$share/g/a/#",
            "+/+",
        ] {
            assert_eq!(filter_fault(ok), None, "{ok}");
        }
        for bad in ["", "a#", "a/#/b", "a+", "a/b+/c", "#/a", "a\0"] {
            assert!(filter_fault(bad).is_some(), "{bad:?}");
        }
        assert_eq!(
            (topic_fault("a/b"), topic_fault("a/+").is_some()),
            (None, true)
        );
        assert_eq!(
            fill("ev/{type}/{subject}", Some("o/1"), "t.x"),
            "ev/t.x/o/1"
        );
        assert_eq!(fill("ev/{subject}", None, "t"), "ev/_");
        assert_eq!(fill("ev/{subject}", Some("a+#\0"), "t"), "ev/a___");
        assert_eq!(fill("{subject}/{x}/{", Some("{type}"), "t"), "{type}/{x}/{");
    }
}
