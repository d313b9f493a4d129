//! MQTT topic names and filters on the mesh's topics.
//!
//! MQTT separates levels with `/`; the mesh's topic patterns separate
//! tokens with `.`. The two characters trade places, so one MQTT name is
//! one mesh topic and back, with nothing lost: `sensors/room1/temp` is the
//! mesh topic `sensors.room1.temp`, and the mesh topic `orders.eu/west`
//! is the MQTT name `orders/eu.west`. A topic filter's `+` is the
//! pattern token `*` and its `#` is `>`; `#` also matches the level
//! before it (`a/#` matches `a`), so `a/#` becomes two mesh
//! subscriptions, the topic `a` and the pattern `a.>`.
//!
//! What the mesh cannot name is refused: characters outside `A-Z a-z 0-9
//! . _ / -`, empty levels (`a//b`, `/a`, `a/`: the patterns have no empty
//! tokens), names over 255 bytes, and names starting with `$` (no mesh
//! topic does, so `$SYS/...` matches nothing).

use std::fmt;

/// Longest mesh topic name, in bytes.
const MAX_LEN: usize = 255;

/// Why a name or filter cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicError(pub String);

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TopicError {}

fn swap(c: char) -> char {
    match c {
        '/' => '.',
        '.' => '/',
        c => c,
    }
}

fn check_levels(what: &str, text: &str) -> Result<(), TopicError> {
    if text.is_empty() {
        return Err(TopicError(format!("the {what} is empty")));
    }
    if text.len() > MAX_LEN {
        return Err(TopicError(format!(
            "the {what} is {} bytes long; the limit is {MAX_LEN}",
            text.len()
        )));
    }
    if text.starts_with('$') {
        return Err(TopicError(format!(
            "the {what} {text:?} starts with '$'; no mesh topic does"
        )));
    }
    if text.split('/').any(str::is_empty) {
        return Err(TopicError(format!(
            "the {what} {text:?} has an empty level"
        )));
    }
    Ok(())
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-')
}

/// The mesh topic of an MQTT topic name.
pub fn to_mesh(name: &str) -> Result<String, TopicError> {
    check_levels("topic name", name)?;
    if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        return Err(TopicError(format!(
            "the topic name {name:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ / -"
        )));
    }
    Ok(name.chars().map(swap).collect())
}

/// The MQTT topic name of a mesh topic.
pub fn from_mesh(topic: &str) -> String {
    topic.chars().map(swap).collect()
}

/// The mesh subscriptions (topics and patterns) a topic filter makes.
pub fn filter_to_mesh(filter: &str) -> Result<Vec<String>, TopicError> {
    check_levels("topic filter", filter).or_else(|e| {
        // `#` alone is a filter, not an empty level.
        if filter == "#" {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    let levels: Vec<&str> = filter.split('/').collect();
    let last = levels.len() - 1;
    let mut tokens = Vec::with_capacity(levels.len());
    for (i, level) in levels.iter().enumerate() {
        match *level {
            "+" => tokens.push("*".to_string()),
            "#" if i == last => tokens.push(">".to_string()),
            "#" => {
                return Err(TopicError(format!(
                    "in the topic filter {filter:?}, '#' is not the last level"
                )))
            }
            level if level.contains(['+', '#']) => {
                return Err(TopicError(format!(
                    "in the topic filter {filter:?}, the level {level:?} mixes a wildcard with other characters"
                )))
            }
            level => {
                if let Some(c) = level.chars().find(|c| !allowed(*c)) {
                    return Err(TopicError(format!(
                        "the topic filter {filter:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ / - and the wildcards + and #"
                    )));
                }
                tokens.push(level.chars().map(swap).collect());
            }
        }
    }
    let whole = tokens.join(".");
    if tokens.len() > 1 && tokens[last] == ">" {
        // `a/#` also matches `a`.
        let parent = tokens[..last].join(".");
        return Ok(vec![parent, whole]);
    }
    Ok(vec![whole])
}

/// The prefix of a shared subscription's filter (MQTT 5).
pub const SHARE_PREFIX: &str = "$share/";
/// Longest share name.
const MAX_SHARE_NAME: usize = 100;

/// A filter's share name and its own filter: `Some` for a shared
/// subscription (`$share/<name>/<filter>`), `None` for any other filter,
/// an error for a malformed shared one. Share names are consumer group
/// names: A-Z a-z 0-9 . _ -, at most 100 characters.
pub fn parse_shared(filter: &str) -> Result<Option<(&str, &str)>, TopicError> {
    let Some(rest) = filter.strip_prefix(SHARE_PREFIX) else {
        return Ok(None);
    };
    let Some((name, inner)) = rest.split_once('/') else {
        return Err(TopicError(format!(
            "the shared subscription {filter:?} has no topic filter after its share name"
        )));
    };
    if name.is_empty() || name.len() > MAX_SHARE_NAME {
        return Err(TopicError(format!(
            "the share name of {filter:?} must be 1 to {MAX_SHARE_NAME} characters long"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(TopicError(format!(
            "the share name of {filter:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ -"
        )));
    }
    if inner.is_empty() {
        return Err(TopicError(format!(
            "the shared subscription {filter:?} has an empty topic filter"
        )));
    }
    Ok(Some((name, inner)))
}

/// The filter a subscription matches names with: a shared subscription's
/// own filter, any other filter itself.
pub fn matching_filter(filter: &str) -> &str {
    match parse_shared(filter) {
        Ok(Some((_, inner))) => inner,
        _ => filter,
    }
}

/// Whether an MQTT topic filter matches an MQTT topic name.
pub fn matches(filter: &str, name: &str) -> bool {
    if name.starts_with('$') {
        return false;
    }
    let mut f = filter.split('/');
    let mut n = name.split('/');
    loop {
        match (f.next(), n.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The part of a filter before its first wildcard level: every topic it
/// matches starts with it.
pub fn literal_prefix(filter: &str) -> &str {
    let end = filter
        .split('/')
        .take_while(|l| *l != "+" && *l != "#")
        .map(|l| l.len() + 1)
        .sum::<usize>();
    &filter[..end.min(filter.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_subscriptions_name_their_share_and_filter() {
        assert_eq!(parse_shared("a/#").unwrap(), None);
        assert_eq!(
            parse_shared("$share/workers/jobs/#").unwrap(),
            Some(("workers", "jobs/#"))
        );
        assert_eq!(matching_filter("$share/w-1/a/+"), "a/+");
        assert_eq!(matching_filter("a/+"), "a/+");
        for (bad, why) in [
            ("$share/workers", "no topic filter"),
            ("$share//a", "1 to 100"),
            ("$share/w/", "empty topic filter"),
            ("$share/w+x/a", "contains '+'"),
            ("$share/w x/a", "contains ' '"),
        ] {
            let e = parse_shared(bad).unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn names_and_topics_trade_slash_and_dot() {
        assert_eq!(to_mesh("sensors/room1/temp").unwrap(), "sensors.room1.temp");
        assert_eq!(to_mesh("orders/eu.west").unwrap(), "orders.eu/west");
        assert_eq!(from_mesh("orders.eu/west"), "orders/eu.west");
        for name in ["a", "a/b-c/d_e", "x.y/z"] {
            assert_eq!(from_mesh(&to_mesh(name).unwrap()), name);
        }
    }

    #[test]
    fn names_the_mesh_cannot_hold_are_refused_with_the_reason() {
        for (name, says) in [
            ("", "empty"),
            ("a//b", "empty level"),
            ("/a", "empty level"),
            ("a/", "empty level"),
            ("$SYS/x", "'$'"),
            ("a b", "' '"),
            ("caf\u{e9}", "'\u{e9}'"),
        ] {
            let e = to_mesh(name).unwrap_err();
            assert!(e.0.contains(says), "{name:?}: {e}");
        }
        assert!(to_mesh(&"a".repeat(256))
            .unwrap_err()
            .0
            .contains("256 bytes"));
        assert!(to_mesh(&"a".repeat(255)).is_ok());
    }

    #[test]
    fn filters_become_topics_and_patterns() {
        let cases: [(&str, &[&str]); 7] = [
            ("a/b", &["a.b"]),
            ("a/+/c", &["a.*.c"]),
            ("a/#", &["a", "a.>"]),
            ("a/+/#", &["a.*", "a.*.>"]),
            ("#", &[">"]),
            ("+", &["*"]),
            ("x.y/+", &["x/y.*"]),
        ];
        for (filter, mesh) in cases {
            assert_eq!(filter_to_mesh(filter).unwrap(), mesh, "{filter}");
        }
        for bad in ["a/#/b", "a+/b", "a/b#", "", "a//+", "$SYS/#", "a/\u{e9}"] {
            assert!(filter_to_mesh(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn matching_follows_the_mqtt_rules() {
        for (filter, name, want) in [
            ("a/b", "a/b", true),
            ("a/b", "a/c", false),
            ("a/+", "a/b", true),
            ("a/+", "a/b/c", false),
            ("a/+", "a", false),
            ("a/#", "a", true),
            ("a/#", "a/b/c", true),
            ("#", "a/b", true),
            ("+/+", "a/b", true),
            ("#", "$SYS/x", false),
            ("a/b/c", "a/b", false),
        ] {
            assert_eq!(matches(filter, name), want, "{filter} vs {name}");
        }
    }

    #[test]
    fn the_literal_prefix_ends_before_the_first_wildcard() {
        assert_eq!(literal_prefix("a/b/+/c"), "a/b/");
        assert_eq!(literal_prefix("#"), "");
        assert_eq!(literal_prefix("a/b"), "a/b");
        assert_eq!(literal_prefix("a/#"), "a/");
    }
}
