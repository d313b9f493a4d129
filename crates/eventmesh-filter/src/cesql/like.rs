//! `LIKE` patterns (CESQL 1.0 §3.4.3).
//!
//! In a pattern `%` matches any run of characters (including none), `_`
//! matches exactly one character, and every other character matches
//! itself, case-sensitively. A backslash makes the next `%`, `_` or `\`
//! literal; a backslash before any other character (or at the end) is
//! itself a literal backslash, so `'ab\c' LIKE 'ab\c'` holds.
//!
//! Patterns are classified when compiled: without `_`, a pattern is an
//! equality, a prefix, a suffix or a substring test, or matches everything;
//! only the rest go through the general matcher, which backtracks to the
//! last `%` only and so runs in O(pattern × text) at worst. Characters are
//! Unicode scalar values; matching allocates nothing.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    Char(char),
    One,
    Many,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LikePattern {
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    Contains(Box<str>),
    /// `%` alone (or several): every string.
    Everything,
    General(Box<[Elem]>),
}

fn elements(pattern: &str) -> Vec<Elem> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let elem = match c {
            '\\' => match chars.peek() {
                Some(&n @ ('%' | '_' | '\\')) => {
                    chars.next();
                    Elem::Char(n)
                }
                _ => Elem::Char('\\'),
            },
            '%' => Elem::Many,
            '_' => Elem::One,
            c => Elem::Char(c),
        };
        // Consecutive `%` match what one does.
        if !(elem == Elem::Many && out.last() == Some(&Elem::Many)) {
            out.push(elem);
        }
    }
    out
}

fn text(elems: &[Elem]) -> Option<Box<str>> {
    elems
        .iter()
        .map(|e| match e {
            Elem::Char(c) => Some(*c),
            _ => None,
        })
        .collect::<Option<String>>()
        .map(String::into_boxed_str)
}

impl LikePattern {
    pub(crate) fn compile(pattern: &str) -> Self {
        let elems = elements(pattern);
        let starts = elems.first() == Some(&Elem::Many);
        let ends = elems.len() > 1 && elems.last() == Some(&Elem::Many);
        let inner = &elems[usize::from(starts)..elems.len() - usize::from(ends)];
        match (starts, ends, text(inner)) {
            (true, _, Some(t)) if t.is_empty() => LikePattern::Everything,
            (false, false, Some(t)) => LikePattern::Exact(t),
            (false, true, Some(t)) => LikePattern::Prefix(t),
            (true, false, Some(t)) => LikePattern::Suffix(t),
            (true, true, Some(t)) => LikePattern::Contains(t),
            (_, _, None) => LikePattern::General(elems.into()),
        }
    }

    pub(crate) fn matches(&self, s: &str) -> bool {
        match self {
            LikePattern::Exact(t) => s == &**t,
            LikePattern::Prefix(t) => s.starts_with(&**t),
            LikePattern::Suffix(t) => s.ends_with(&**t),
            LikePattern::Contains(t) => s.contains(&**t),
            LikePattern::Everything => true,
            LikePattern::General(elems) => general(elems, s),
        }
    }
}

fn general(pattern: &[Elem], s: &str) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume after the last `%`: pattern index past it, and the
    // text offset it has swallowed up to.
    let mut resume: Option<(usize, usize)> = None;
    loop {
        let next = s[t..].chars().next();
        let step = match (pattern.get(p), next) {
            (Some(Elem::Many), _) => {
                resume = Some((p + 1, t));
                p += 1;
                continue;
            }
            (Some(Elem::One), Some(c)) => Some(c.len_utf8()),
            (Some(Elem::Char(pc)), Some(c)) if *pc == c => Some(c.len_utf8()),
            (None, None) => return true,
            _ => None,
        };
        match step {
            Some(n) => {
                p += 1;
                t += n;
            }
            None => {
                // Let the last `%` swallow one more character and retry.
                let Some((rp, rt)) = resume else {
                    return false;
                };
                let Some(c) = s[rt..].chars().next() else {
                    return false;
                };
                let rt = rt + c.len_utf8();
                resume = Some((rp, rt));
                p = rp;
                t = rt;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(s: &str, p: &str) -> bool {
        LikePattern::compile(p).matches(s)
    }

    #[test]
    fn patterns_are_classified() {
        assert_eq!(
            LikePattern::compile("abc"),
            LikePattern::Exact("abc".into())
        );
        assert_eq!(
            LikePattern::compile("ab%"),
            LikePattern::Prefix("ab".into())
        );
        assert_eq!(
            LikePattern::compile("%ab"),
            LikePattern::Suffix("ab".into())
        );
        assert_eq!(
            LikePattern::compile("%ab%"),
            LikePattern::Contains("ab".into())
        );
        assert_eq!(LikePattern::compile("%%"), LikePattern::Everything);
        assert_eq!(LikePattern::compile("%"), LikePattern::Everything);
        assert_eq!(LikePattern::compile(""), LikePattern::Exact("".into()));
        assert_eq!(
            LikePattern::compile(r"a\%"),
            LikePattern::Exact("a%".into())
        );
        assert_eq!(
            LikePattern::compile("a_"),
            LikePattern::General([Elem::Char('a'), Elem::One].into())
        );
    }

    #[test]
    fn wildcards_and_escapes() {
        assert!(like("abc", "a%b%c"));
        assert!(like("azzzbzzzc", "a%b%c"));
        assert!(!like("ac", "a%b%c"));
        assert!(like("a_b_c", r"a\_b\_c"));
        assert!(!like("azbzc", r"a\_b\_c"));
        assert!(like(r"ab\c", r"ab\c"));
        assert!(like(r"a\", r"a\\"));
        assert!(like(r"a\", r"a\"));
        assert!(like("", "%"));
        assert!(!like("", "_"));
        assert!(like(".ab.cde.", ".%.%."));
        assert!(!like("ab.cde", ".%.%."));
        assert!(like("abab", "%ab"));
        assert!(like("aaab", "%a_b"));
        assert!(!like("aBc", "_b%"));
        assert!(like("abcd1", "_b%"));
    }

    #[test]
    fn characters_are_unicode_scalars() {
        assert!(like("héllo", "h_llo"));
        assert!(like("日本語", "__語"));
        assert!(!like("日本語", "_語"));
        assert!(like("naïve café", "%ï%é"));
    }
}
