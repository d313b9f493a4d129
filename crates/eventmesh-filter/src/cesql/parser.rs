//! CESQL syntax: tokens to a syntax tree, by precedence climbing.
//!
//! Precedence, tightest first (CESQL 1.0 §3.6); operators of equal
//! precedence group left to right:
//!
//! | level | operators                              |
//! | ----- | -------------------------------------- |
//! | 8     | function invocation                    |
//! | 7     | unary `NOT`, unary `-`                 |
//! | 6     | `LIKE`, `NOT LIKE` (postfix)           |
//! | 5     | `EXISTS` (prefix, takes an identifier) |
//! | 4     | `IN`, `NOT IN` (postfix)               |
//! | 3     | `*` `/` `%`                            |
//! | 2     | `+` `-`                                |
//! | 1     | `=` `!=` `<>` `<` `<=` `>` `>=`        |
//! | 0     | `AND` `OR` `XOR` (one level)           |
//!
//! So `NOT a = b` is `(NOT a) = b` and `a OR b AND c` is `(a OR b) AND c`,
//! as the specification's table says; parentheses make the intent plain.
//!
//! A `-` or `+` directly in front of an integer literal is the literal's
//! sign (the grammar's `integer-literal ::= ('+'|'-')? digit+`), which is
//! how `-2147483648` is written. Integer literals outside the 32-bit range,
//! a `LIKE` pattern that is not a string literal and an empty `IN` set are
//! parse errors. The tree's height is bounded by [`MAX_DEPTH`] so that
//! evaluation, which recurses, cannot exhaust the stack.

use super::lexer::{tokenize, Tok, Token};
use super::ParseError;

/// The deepest expression tree (and the deepest nesting of parentheses and
/// prefix operators) the parser accepts.
pub const MAX_DEPTH: u32 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    And,
    Or,
    Xor,
    Eq,
    NotEq,
    Less,
    LessEq,
    Greater,
    GreaterEq,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ast {
    Int(i32),
    Str(String),
    Bool(bool),
    /// A value identifier, lower-cased.
    Ident(String),
    /// `EXISTS identifier`, lower-cased.
    Exists(String),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Like {
        operand: Box<Expr>,
        pattern: String,
        negated: bool,
    },
    In {
        operand: Box<Expr>,
        set: Vec<Expr>,
        negated: bool,
    },
    /// A function invocation; the name is upper-cased.
    Call {
        name: String,
        args: Vec<Expr>,
    },
}

/// A syntax tree node, where it starts in the source, and its height.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expr {
    pub ast: Ast,
    pub pos: usize,
    pub height: u32,
}

const LOGIC: u8 = 1;
const COMPARE: u8 = 2;
const ADDITIVE: u8 = 3;
const MULTIPLICATIVE: u8 = 4;
const IN: u8 = 5;
const LIKE: u8 = 6;
const UNARY: u8 = 7;

/// Parses a whole expression.
pub(crate) fn parse(src: &str) -> Result<Expr, ParseError> {
    let tokens = tokenize(src)?;
    let mut p = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let expr = p.expression(LOGIC)?;
    let next = p.peek();
    if next.tok != Tok::End {
        return Err(ParseError::new(
            next.pos,
            format!(
                "unexpected {} after a complete expression",
                next.tok.describe()
            ),
        ));
    }
    Ok(expr)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: u32,
}

/// Builds a node over children whose tallest is `below` high.
fn node(ast: Ast, pos: usize, below: u32) -> Result<Expr, ParseError> {
    let height = 1 + below;
    if height > MAX_DEPTH {
        return Err(ParseError::new(
            pos,
            format!("expression is nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    Ok(Expr { ast, pos, height })
}

fn binary_op(tok: &Tok) -> Option<(BinOp, u8)> {
    Some(match tok {
        Tok::And => (BinOp::And, LOGIC),
        Tok::Or => (BinOp::Or, LOGIC),
        Tok::Xor => (BinOp::Xor, LOGIC),
        Tok::Eq => (BinOp::Eq, COMPARE),
        Tok::NotEq => (BinOp::NotEq, COMPARE),
        Tok::Less => (BinOp::Less, COMPARE),
        Tok::LessEq => (BinOp::LessEq, COMPARE),
        Tok::Greater => (BinOp::Greater, COMPARE),
        Tok::GreaterEq => (BinOp::GreaterEq, COMPARE),
        Tok::Plus => (BinOp::Add, ADDITIVE),
        Tok::Minus => (BinOp::Sub, ADDITIVE),
        Tok::Star => (BinOp::Mul, MULTIPLICATIVE),
        Tok::Slash => (BinOp::Div, MULTIPLICATIVE),
        Tok::Percent => (BinOp::Mod, MULTIPLICATIVE),
        _ => return None,
    })
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at]
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        let i = (self.at + ahead).min(self.tokens.len() - 1);
        &self.tokens[i].tok
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    fn expect(&mut self, tok: Tok, what: &str) -> Result<Token, ParseError> {
        let next = self.peek();
        if next.tok == tok {
            Ok(self.bump())
        } else {
            Err(ParseError::new(
                next.pos,
                format!("expected {what}, found {}", next.tok.describe()),
            ))
        }
    }

    fn enter(&mut self, pos: usize) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::new(
                pos,
                format!("expression is nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    /// Parses operators binding at least as tightly as `min`.
    fn expression(&mut self, min: u8) -> Result<Expr, ParseError> {
        let pos = self.peek().pos;
        self.enter(pos)?;
        let mut lhs = self.prefix()?;
        loop {
            let next = self.peek().clone();
            match &next.tok {
                Tok::Like if LIKE >= min => lhs = self.like(lhs, false)?,
                Tok::In if IN >= min => lhs = self.in_set(lhs, false)?,
                Tok::Not => {
                    let level = match self.peek_at(1) {
                        Tok::Like => LIKE,
                        Tok::In => IN,
                        other => {
                            return Err(ParseError::new(
                                next.pos,
                                format!(
                                    "expected LIKE or IN after NOT, found {}",
                                    other.describe()
                                ),
                            ))
                        }
                    };
                    if level < min {
                        break;
                    }
                    self.bump();
                    lhs = if level == LIKE {
                        self.like(lhs, true)?
                    } else {
                        self.in_set(lhs, true)?
                    };
                }
                tok => match binary_op(tok) {
                    Some((op, level)) if level >= min => {
                        self.bump();
                        let rhs = self.expression(level + 1)?;
                        let (pos, below) = (lhs.pos, lhs.height.max(rhs.height));
                        lhs = node(Ast::Binary(op, Box::new(lhs), Box::new(rhs)), pos, below)?;
                    }
                    _ => break,
                },
            }
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn like(&mut self, operand: Expr, negated: bool) -> Result<Expr, ParseError> {
        self.bump(); // LIKE
        let next = self.bump();
        let Tok::Str(pattern) = next.tok else {
            return Err(ParseError::new(
                next.pos,
                format!(
                    "the pattern of LIKE must be a string literal, found {}",
                    next.tok.describe()
                ),
            ));
        };
        let (pos, below) = (operand.pos, operand.height);
        let like = Ast::Like {
            operand: Box::new(operand),
            pattern,
            negated,
        };
        node(like, pos, below)
    }

    fn in_set(&mut self, operand: Expr, negated: bool) -> Result<Expr, ParseError> {
        self.bump(); // IN
        let open = self.expect(Tok::LParen, "'(' to open the IN set")?;
        if self.peek().tok == Tok::RParen {
            return Err(ParseError::new(
                self.peek().pos,
                "an IN set needs at least one element",
            ));
        }
        let set = self.list(open.pos, "IN set")?;
        let pos = operand.pos;
        let below = set.iter().map(|e| e.height).fold(operand.height, u32::max);
        let in_set = Ast::In {
            operand: Box::new(operand),
            set,
            negated,
        };
        node(in_set, pos, below)
    }

    /// Parses `expr (, expr)* )` after an opening parenthesis.
    fn list(&mut self, open: usize, what: &str) -> Result<Vec<Expr>, ParseError> {
        let mut items = Vec::new();
        loop {
            items.push(self.expression(LOGIC)?);
            let next = self.bump();
            match next.tok {
                Tok::Comma => continue,
                Tok::RParen => return Ok(items),
                other => {
                    return Err(ParseError::new(
                        next.pos,
                        format!(
                            "expected ',' or ')' in the {what} opened at {open}, found {}",
                            other.describe()
                        ),
                    ))
                }
            }
        }
    }

    fn int_literal(digits: &str, negative: bool, pos: usize) -> Result<i32, ParseError> {
        let magnitude: Option<i64> = if digits.len() > 11 {
            None
        } else {
            digits.parse::<i64>().ok()
        };
        let value = magnitude.map(|m| if negative { -m } else { m });
        value.and_then(|v| i32::try_from(v).ok()).ok_or_else(|| {
            let sign = if negative { "-" } else { "" };
            ParseError::new(
                pos,
                format!(
                    "integer literal {sign}{digits} is outside the 32-bit range \
                         -2147483648..=2147483647"
                ),
            )
        })
    }

    fn prefix(&mut self) -> Result<Expr, ParseError> {
        let Token { tok, pos } = self.bump();
        match tok {
            Tok::Int(d) => node(Ast::Int(Self::int_literal(&d, false, pos)?), pos, 0),
            Tok::Str(s) => node(Ast::Str(s), pos, 0),
            Tok::True => node(Ast::Bool(true), pos, 0),
            Tok::False => node(Ast::Bool(false), pos, 0),
            Tok::Plus | Tok::Minus => {
                let negative = tok == Tok::Minus;
                if let Tok::Int(d) = self.peek().tok.clone() {
                    self.bump();
                    return node(Ast::Int(Self::int_literal(&d, negative, pos)?), pos, 0);
                }
                if !negative {
                    return Err(ParseError::new(
                        pos,
                        "'+' is only allowed as the sign of an integer literal",
                    ));
                }
                let operand = self.expression(UNARY)?;
                let below = operand.height;
                node(Ast::Neg(Box::new(operand)), pos, below)
            }
            Tok::Not => {
                let operand = self.expression(UNARY)?;
                let below = operand.height;
                node(Ast::Not(Box::new(operand)), pos, below)
            }
            Tok::Exists => {
                let next = self.bump();
                match next.tok {
                    Tok::Word(w) => node(Ast::Exists(value_identifier(&w, next.pos)?), pos, 0),
                    other => Err(ParseError::new(
                        next.pos,
                        format!(
                            "EXISTS must be followed by an attribute name, found {}",
                            other.describe()
                        ),
                    )),
                }
            }
            Tok::LParen => {
                let inner = self.expression(LOGIC)?;
                let close = self.peek().clone();
                if close.tok != Tok::RParen {
                    return Err(ParseError::new(
                        close.pos,
                        format!(
                            "expected ')' to close the '(' at {pos}, found {}",
                            close.tok.describe()
                        ),
                    ));
                }
                self.bump();
                Ok(inner)
            }
            Tok::Word(w) => {
                if self.peek().tok == Tok::LParen {
                    let name = function_identifier(&w, pos)?;
                    self.bump();
                    let args = if self.peek().tok == Tok::RParen {
                        self.bump();
                        Vec::new()
                    } else {
                        self.list(pos, "argument list")?
                    };
                    let below = args.iter().map(|e| e.height).max().unwrap_or(0);
                    node(Ast::Call { name, args }, pos, below)
                } else {
                    node(Ast::Ident(value_identifier(&w, pos)?), pos, 0)
                }
            }
            other => Err(ParseError::new(
                pos,
                format!("expected an expression, found {}", other.describe()),
            )),
        }
    }
}

/// `value-identifier ::= (lowercase-char | digit)+`, read case-insensitively.
fn value_identifier(word: &str, pos: usize) -> Result<String, ParseError> {
    if word.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(word.to_ascii_lowercase())
    } else {
        Err(ParseError::new(
            pos,
            format!("{word} is not an attribute name: names are letters and digits only"),
        ))
    }
}

/// `function-identifier ::= char ('_' | char)*`, read case-insensitively.
fn function_identifier(word: &str, pos: usize) -> Result<String, ParseError> {
    let ok = word.starts_with(|c: char| c.is_ascii_alphabetic())
        && word.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_');
    if ok {
        Ok(word.to_ascii_uppercase())
    } else {
        Err(ParseError::new(
            pos,
            format!("{word} is not a function name: names are letters and '_' only"),
        ))
    }
}
