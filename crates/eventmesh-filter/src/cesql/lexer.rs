//! CESQL tokens.
//!
//! The lexer works on the whole source at once and hands the parser a
//! vector of tokens, each with the character offset where it starts (the
//! position parse errors report).
//!
//! Lexical rules (CESQL 1.0 §2):
//! - Whitespace is space, tab, carriage return and line feed.
//! - Keywords (`AND OR XOR NOT LIKE IN EXISTS TRUE FALSE`) are
//!   case-insensitive.
//! - A word is a run of ASCII letters, digits and `_`. A word of digits only
//!   is an integer literal (its sign, if any, is folded in by the parser);
//!   any other word is a value or function identifier, which the parser
//!   tells apart by a following `(`.
//! - String literals are delimited by `'` or `"`. Inside, a backslash
//!   followed by the delimiting quote stands for that quote; a backslash
//!   followed by any other character is kept as it is, together with that
//!   character (so `LIKE` patterns keep their `\%` and `\_` escapes, and a
//!   `\\` never escapes the closing quote).

use super::ParseError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// Digits only, not yet range-checked.
    Int(String),
    Str(String),
    Word(String),
    And,
    Or,
    Xor,
    Not,
    Like,
    In,
    Exists,
    True,
    False,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Eq,
    NotEq,
    Less,
    LessEq,
    Greater,
    GreaterEq,
    End,
}

impl Tok {
    /// How the token reads in an error message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Int(d) => format!("integer {d}"),
            Tok::Str(s) => format!("string '{s}'"),
            Tok::Word(w) => format!("identifier {w}"),
            Tok::And => "AND".into(),
            Tok::Or => "OR".into(),
            Tok::Xor => "XOR".into(),
            Tok::Not => "NOT".into(),
            Tok::Like => "LIKE".into(),
            Tok::In => "IN".into(),
            Tok::Exists => "EXISTS".into(),
            Tok::True => "TRUE".into(),
            Tok::False => "FALSE".into(),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::Plus => "'+'".into(),
            Tok::Minus => "'-'".into(),
            Tok::Star => "'*'".into(),
            Tok::Slash => "'/'".into(),
            Tok::Percent => "'%'".into(),
            Tok::Eq => "'='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Less => "'<'".into(),
            Tok::LessEq => "'<='".into(),
            Tok::Greater => "'>'".into(),
            Tok::GreaterEq => "'>='".into(),
            Tok::End => "end of input".into(),
        }
    }
}

/// A token and the character offset where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub pos: usize,
}

fn keyword(word: &str) -> Option<Tok> {
    const KEYWORDS: [(&str, Tok); 9] = [
        ("AND", Tok::And),
        ("OR", Tok::Or),
        ("XOR", Tok::Xor),
        ("NOT", Tok::Not),
        ("LIKE", Tok::Like),
        ("IN", Tok::In),
        ("EXISTS", Tok::Exists),
        ("TRUE", Tok::True),
        ("FALSE", Tok::False),
    ];
    KEYWORDS
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(word))
        .map(|(_, t)| t.clone())
}

/// Splits `src` into tokens; the last one is always [`Tok::End`].
pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let single = |tok| Token { tok, pos: start };
        match c {
            ' ' | '\t' | '\r' | '\n' => i += 1,
            '(' | ')' | ',' | '+' | '-' | '*' | '/' | '%' | '=' => {
                out.push(single(match c {
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    ',' => Tok::Comma,
                    '+' => Tok::Plus,
                    '-' => Tok::Minus,
                    '*' => Tok::Star,
                    '/' => Tok::Slash,
                    '%' => Tok::Percent,
                    _ => Tok::Eq,
                }));
                i += 1;
            }
            '!' => {
                if chars.get(i + 1) == Some(&'=') {
                    out.push(single(Tok::NotEq));
                    i += 2;
                } else {
                    return Err(ParseError::new(start, "'!' must be followed by '='"));
                }
            }
            '<' => {
                let (tok, len) = match chars.get(i + 1) {
                    Some('=') => (Tok::LessEq, 2),
                    Some('>') => (Tok::NotEq, 2),
                    _ => (Tok::Less, 1),
                };
                out.push(single(tok));
                i += len;
            }
            '>' => {
                let (tok, len) = match chars.get(i + 1) {
                    Some('=') => (Tok::GreaterEq, 2),
                    _ => (Tok::Greater, 1),
                };
                out.push(single(tok));
                i += len;
            }
            '\'' | '"' => {
                let (text, next) = string_literal(&chars, i)?;
                out.push(single(Tok::Str(text)));
                i = next;
            }
            c if c.is_ascii_alphanumeric() || c == '_' => {
                let mut end = i;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_')
                {
                    end += 1;
                }
                let word: String = chars[i..end].iter().collect();
                let tok = if word.bytes().all(|b| b.is_ascii_digit()) {
                    Tok::Int(word)
                } else {
                    keyword(&word).unwrap_or(Tok::Word(word))
                };
                out.push(single(tok));
                i = end;
            }
            other => {
                return Err(ParseError::new(
                    start,
                    format!("unexpected character {other:?}"),
                ))
            }
        }
    }
    out.push(Token {
        tok: Tok::End,
        pos: chars.len(),
    });
    Ok(out)
}

/// Reads the string literal opening at `chars[open]`; returns its text and
/// the index just past the closing quote.
fn string_literal(chars: &[char], open: usize) -> Result<(String, usize), ParseError> {
    let quote = chars[open];
    let mut text = String::new();
    let mut i = open + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(ParseError::new(
                    open,
                    format!("string literal opened with {quote} is not closed"),
                ))
            }
            Some(&c) if c == quote => return Ok((text, i + 1)),
            Some('\\') => match chars.get(i + 1) {
                Some(&c) if c == quote => {
                    text.push(quote);
                    i += 2;
                }
                Some(&c) => {
                    text.push('\\');
                    text.push(c);
                    i += 2;
                }
                None => {
                    text.push('\\');
                    i += 1;
                }
            },
            Some(&c) => {
                text.push(c);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn operators_and_keywords() {
        assert_eq!(
            toks("a<>b != c <= >= < > and Or xOr nOt like IN exists"),
            vec![
                Tok::Word("a".into()),
                Tok::NotEq,
                Tok::Word("b".into()),
                Tok::NotEq,
                Tok::Word("c".into()),
                Tok::LessEq,
                Tok::GreaterEq,
                Tok::Less,
                Tok::Greater,
                Tok::And,
                Tok::Or,
                Tok::Xor,
                Tok::Not,
                Tok::Like,
                Tok::In,
                Tok::Exists,
                Tok::End,
            ]
        );
    }

    #[test]
    fn string_escapes() {
        assert_eq!(toks(r#"'a"b\'c'"#)[0], Tok::Str("a\"b'c".into()));
        assert_eq!(toks(r#""a'b\"c""#)[0], Tok::Str("a'b\"c".into()));
        assert_eq!(toks(r"'a\_b\%'")[0], Tok::Str(r"a\_b\%".into()));
        assert_eq!(toks(r"'a\\' ")[0], Tok::Str(r"a\\".into()));
        assert_eq!(toks("'é ✓'")[0], Tok::Str("é ✓".into()));
    }

    #[test]
    fn positions_are_character_offsets() {
        let t = tokenize("'é' = x").unwrap();
        assert_eq!(t[1].pos, 4);
        assert_eq!(t[2].pos, 6);
        assert_eq!(
            t[3],
            Token {
                tok: Tok::End,
                pos: 7
            }
        );
    }

    #[test]
    fn lexical_errors_have_positions() {
        let e = tokenize("a = 'open").unwrap_err();
        assert_eq!(e.position, 4);
        assert_eq!(e.message, "string literal opened with ' is not closed");
        let e = tokenize("a ! b").unwrap_err();
        assert_eq!(e.position, 2);
        let e = tokenize("a = #").unwrap_err();
        assert_eq!(e.position, 4);
        assert_eq!(e.message, "unexpected character '#'");
    }
}
