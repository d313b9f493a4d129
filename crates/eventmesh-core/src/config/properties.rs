//! The Java `.properties` syntax the configuration file is written in:
//! comments, the three separators, line continuations and escapes. It only
//! turns text into ordered `(key, value)` pairs; which keys exist and what
//! their values mean is decided elsewhere. A syntax error names its origin
//! and line.

use super::ConfigError;

/// Parses Java `.properties` text: `#`/`!` comments, blank lines, `key=value`,
/// `key:value` or `key value`, backslash line continuation and the escapes
/// `\t \n \r \f \\ \uXXXX` (any other escaped character stands for itself).
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    parse_properties_from(text, "properties text")
}

pub(crate) fn parse_properties_from(
    text: &str,
    origin: &str,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut entries = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, first)) = lines.next() {
        let first = first.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = first.to_string();
        while ends_with_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let entry = split_entry(&logical).map_err(|message| ConfigError::Parse {
            origin: origin.to_string(),
            line: index + 1,
            message,
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

fn ends_with_continuation(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

fn split_entry(line: &str) -> Result<(String, String), String> {
    let mut chars = line.chars().peekable();
    let mut key = String::new();
    let mut separated = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => key.push(unescape(&mut chars)?),
            '=' | ':' => {
                separated = true;
                break;
            }
            c if c.is_whitespace() => break,
            c => key.push(c),
        }
    }
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
    if !separated && chars.next_if(|&c| c == '=' || c == ':').is_some() {
        separated = true;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    }
    if key.is_empty() {
        return Err("missing key before the separator".to_string());
    }
    if !separated && chars.peek().is_none() {
        return Err(format!(
            "expected key=value but found only the key \"{key}\""
        ));
    }
    // Trailing whitespace is trimmed unless it was written as an escape.
    let mut value = String::new();
    let mut keep = 0;
    while let Some(c) = chars.next() {
        if c == '\\' {
            value.push(unescape(&mut chars)?);
            keep = value.len();
        } else {
            value.push(c);
            if !c.is_whitespace() {
                keep = value.len();
            }
        }
    }
    value.truncate(keep);
    Ok((key, value))
}

fn unescape(chars: &mut impl Iterator<Item = char>) -> Result<char, String> {
    match chars.next() {
        Some('t') => Ok('\t'),
        Some('n') => Ok('\n'),
        Some('r') => Ok('\r'),
        Some('f') => Ok('\u{c}'),
        Some('u') => {
            let hex: String = chars.take(4).collect();
            let code = (hex.len() == 4 && hex.chars().all(|c| c.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(&hex, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    format!("malformed \\u escape \"\\u{hex}\": expected 4 hex digits")
                })?;
            char::from_u32(code).ok_or_else(|| format!("\\u{hex} is not a valid character"))
        }
        Some(other) => Ok(other),
        None => Err("dangling backslash at end of line".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        let own = |(k, v): &(&str, &str)| (k.to_string(), v.to_string());
        pairs.iter().map(own).collect()
    }

    #[test]
    fn properties_syntax() {
        let text = "# comment\n  ! other comment\n\na=1\nb : two \nc   three words\n\
                    long = first \\\n     second \\\n third\n\
                    esc=tab\\there\\nnl\\\\back\\u00e9\\u0041\n\
                    key\\ with\\=sep = v\nempty=\ntrail=x\\ \r\ncolon:=v\n";
        let want = owned(&[
            ("a", "1"),
            ("b", "two"),
            ("c", "three words"),
            ("long", "first second third"),
            ("esc", "tab\there\nnl\\backéA"),
            ("key with=sep", "v"),
            ("empty", ""),
            ("trail", "x "),
            ("colon", "=v"),
        ]);
        assert_eq!(parse_properties(text).unwrap(), want);
        let e = parse_properties("a=1\n\nlonely\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { line: 3, .. }), "{e}");
        let message = e.to_string();
        for part in ["line 3", "lonely"] {
            assert!(
                message.contains(part),
                "{message:?} should contain {part:?}"
            );
        }
        let e = parse_properties("a=1\nb=\\u12G4\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { line: 2, .. }), "{e}");
    }
}
