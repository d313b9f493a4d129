//! Topic patterns: what a wildcard subscription names instead of one topic.
//!
//! NATS semantics over topic names split at `.` into tokens: `*` stands
//! for exactly one token (any token, an empty one included), `>` for one
//! or more trailing tokens. `orders.*.created` matches `orders.eu.created`
//! but not `orders.created` or `orders.eu.x.created`; `orders.>` matches
//! `orders.eu` and `orders.eu.created` but not `orders`.
//!
//! Invariants: a pattern has at least one wildcard token; each `*` and
//! `>` is a whole token and `>` is only ever the last one; no token of a
//! pattern is empty; every other character is one a topic name may hold
//! (so no topic name is ever taken for a pattern: none holds `*` or `>`).

use crate::topic::MAX_TOPIC_LEN;
use crate::CoreError;

/// One token of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// `*`: exactly one token.
    One,
    /// `>`: one or more trailing tokens.
    Rest,
}

/// A parsed, valid topic pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPattern {
    text: String,
    tokens: Vec<Token>,
}

/// Whether `topic` is meant as a pattern: it holds a `*` or a `>`, which
/// no topic name may.
pub fn is_pattern(topic: &str) -> bool {
    topic.contains(['*', '>'])
}

/// Checks what a subscription names: `Ok(None)` for a valid topic name,
/// `Ok(Some(pattern))` for a valid pattern, and the error naming what is
/// wrong otherwise (`invalid_topic` or `invalid_pattern`).
pub fn parse_subscription_topic(topic: &str) -> Result<Option<TopicPattern>, CoreError> {
    if is_pattern(topic) {
        TopicPattern::parse(topic).map(Some)
    } else {
        crate::topic::validate_topic(topic).map(|()| None)
    }
}

fn bad(message: String) -> CoreError {
    CoreError::InvalidPattern(message)
}

impl TopicPattern {
    /// Parses a pattern; the error names the token at fault.
    pub fn parse(text: &str) -> Result<TopicPattern, CoreError> {
        if text.len() > MAX_TOPIC_LEN {
            return Err(bad(format!(
                "topic pattern is {} bytes long; the limit is {MAX_TOPIC_LEN}",
                text.len()
            )));
        }
        if let Some(c) = text.chars().find(|c| {
            !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-' | '*' | '>'))
        }) {
            return Err(bad(format!(
                "topic pattern {text:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ / - and the wildcard tokens * and >"
            )));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mut tokens = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let n = i + 1;
            let token = match *part {
                "" => {
                    return Err(bad(format!(
                        "topic pattern {text:?} has an empty token (token {n}); tokens are separated by single dots"
                    )))
                }
                "*" => Token::One,
                ">" if n == parts.len() => Token::Rest,
                ">" => {
                    return Err(bad(format!(
                        "in topic pattern {text:?}, `>` is token {n} of {}; it may only be the last token",
                        parts.len()
                    )))
                }
                p if is_pattern(p) => {
                    return Err(bad(format!(
                        "in topic pattern {text:?}, token {n} ({p:?}) mixes a wildcard with other characters; `*` and `>` must each be a whole token"
                    )))
                }
                p => Token::Literal(p.to_string()),
            };
            tokens.push(token);
        }
        if !tokens.iter().any(|t| !matches!(t, Token::Literal(_))) {
            return Err(bad(format!("{text:?} has no wildcard token")));
        }
        Ok(TopicPattern {
            text: text.to_string(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the topic name `topic` is one this pattern stands for.
    pub fn matches(&self, topic: &str) -> bool {
        let names: Vec<&str> = topic.split('.').collect();
        matches_from(&self.tokens, &names)
    }

    /// Whether some topic name matches both this pattern and `other`, a
    /// pattern or (when it has no wildcard) one topic name.
    pub fn overlaps(&self, other: &str) -> bool {
        let theirs = tokens_of(other);
        overlap(&self.tokens, &theirs)
    }
}

/// Whether some topic name is named by both `a` and `b`, each a pattern
/// or a topic name.
pub fn overlap_of(a: &str, b: &str) -> bool {
    overlap(&tokens_of(a), &tokens_of(b))
}

/// The tokens of a pattern or of a topic name (all literal).
fn tokens_of(text: &str) -> Vec<Token> {
    text.split('.')
        .map(|t| match t {
            "*" => Token::One,
            ">" => Token::Rest,
            t => Token::Literal(t.to_string()),
        })
        .collect()
}

fn matches_from(pattern: &[Token], names: &[&str]) -> bool {
    match (pattern.split_first(), names.split_first()) {
        (None, None) => true,
        (Some((Token::Rest, _)), Some(_)) => true,
        (Some((Token::One, p)), Some((_, n))) => matches_from(p, n),
        (Some((Token::Literal(l), p)), Some((name, n))) => l == name && matches_from(p, n),
        _ => false,
    }
}

fn overlap(a: &[Token], b: &[Token]) -> bool {
    match (a.split_first(), b.split_first()) {
        (None, None) => true,
        (Some((Token::Rest, _)), Some(_)) | (Some(_), Some((Token::Rest, _))) => true,
        (Some((x, a)), Some((y, b))) => {
            let compatible = match (x, y) {
                (Token::Literal(l), Token::Literal(r)) => l == r,
                _ => true,
            };
            compatible && overlap(a, b)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> TopicPattern {
        TopicPattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn one_token_wildcard_matches_exactly_one_token() {
        let created = p("orders.*.created");
        assert!(created.matches("orders.eu.created"));
        assert!(created.matches("orders.us-east.created"));
        assert!(!created.matches("orders.created"));
        assert!(!created.matches("orders.eu.x.created"));
        assert!(!created.matches("orders.eu.created.v2"));
        assert!(!created.matches("payments.eu.created"));
        let any = p("*");
        assert!(any.matches("orders"));
        assert!(!any.matches("orders.eu"));
        // An empty token of a topic name is a token.
        assert!(p("a.*.b").matches("a..b"));
    }

    #[test]
    fn trailing_wildcard_matches_one_or_more_tokens() {
        let all = p("orders.>");
        assert!(all.matches("orders.eu"));
        assert!(all.matches("orders.eu.created"));
        assert!(!all.matches("orders"));
        assert!(!all.matches("ordersx.eu"));
        assert!(!all.matches("payments.eu"));
        let everything = p(">");
        assert!(everything.matches("x"));
        assert!(everything.matches("x.y.z"));
        let mixed = p("*.eu.>");
        assert!(mixed.matches("orders.eu.created"));
        assert!(!mixed.matches("orders.eu"));
        // `/` is an ordinary character, not a separator.
        assert!(p("team/a.*").matches("team/a.orders"));
        assert!(TopicPattern::parse("team/*.x").is_err());
    }

    #[test]
    fn malformed_patterns_are_refused_naming_the_token() {
        let cases = [
            ("orders.*x", "token 2 (\"*x\") mixes a wildcard"),
            ("ord*", "token 1 (\"ord*\") mixes a wildcard"),
            ("orders.>.created", "`>` is token 2 of 3"),
            ("orders..*", "empty token (token 2)"),
            ("*.", "empty token (token 2)"),
            (".>", "empty token (token 1)"),
            ("orders.* x", "contains ' '"),
            ("a>b", "token 1 (\"a>b\")"),
        ];
        for (text, says) in cases {
            let e = TopicPattern::parse(text).unwrap_err();
            assert_eq!(e.code(), "invalid_pattern", "{text}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        let long = format!("{}.*", "x".repeat(MAX_TOPIC_LEN));
        assert!(TopicPattern::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("the limit is 255"));
        assert_eq!(
            TopicPattern::parse("orders.eu").unwrap_err().code(),
            "invalid_pattern"
        );
    }

    #[test]
    fn a_subscription_topic_is_a_name_or_a_pattern() {
        assert_eq!(parse_subscription_topic("orders.eu").unwrap(), None);
        assert_eq!(
            parse_subscription_topic("orders.*").unwrap(),
            Some(p("orders.*"))
        );
        assert_eq!(
            parse_subscription_topic("orders created")
                .unwrap_err()
                .code(),
            "invalid_topic"
        );
        assert_eq!(
            parse_subscription_topic("orders.>.x").unwrap_err().code(),
            "invalid_pattern"
        );
    }

    #[test]
    fn overlaps_say_whether_one_topic_can_match_both() {
        let yes = [
            ("orders.*", "orders.eu"),
            ("orders.*", "*.eu"),
            ("orders.>", "orders.*.created"),
            ("orders.>", ">"),
            ("*.*", "a.>"),
            ("orders.*.created", "orders.eu.*"),
        ];
        for (a, b) in yes {
            assert!(overlap_of(a, b), "{a} / {b}");
            assert!(overlap_of(b, a), "{b} / {a}");
        }
        let no = [
            ("orders.*", "orders"),
            ("orders.*", "orders.eu.created"),
            ("orders.>", "orders"),
            ("orders.*", "payments.*"),
            ("*.*", "a.b.>"),
            ("a.b", "a.c"),
        ];
        for (a, b) in no {
            assert!(!overlap_of(a, b), "{a} / {b}");
            assert!(!overlap_of(b, a), "{b} / {a}");
        }
        assert!(overlap_of("a.b", "a.b"));
        assert!(p("orders.*").overlaps("orders.eu"));
    }
}
