//! Lowering a syntax tree to the tree the evaluator walks.
//!
//! What is decided here, once, so evaluation need not:
//! - attribute names become [`AttrKey`]s (lower-cased, context attributes
//!   resolved);
//! - comparisons against a literal keep the literal in the node
//!   (`EqConst`, `CompareConst`), already cast where the cast is known to
//!   succeed;
//! - `LIKE` patterns are compiled ([`LikePattern`]);
//! - an `IN` set made only of literals keeps each literal cast to every
//!   type ([`ConstCasts`]), and a large one a sorted copy of the string
//!   forms for binary search;
//! - functions are bound by name and arity ([`Builtin`]); an unresolved
//!   call becomes `MissingFunction` (or, in strict mode, a compile error).

use crate::attributes::AttrKey;

use super::cast;
use super::functions::Builtin;
use super::like::LikePattern;
use super::parser::{Ast, BinOp, Expr};
use super::ParseError;

/// A literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Const {
    Bool(bool),
    Int(i32),
    Str(Box<str>),
}

/// The static type of an expression, where it is known before evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    Bool,
    Int,
    Str,
}

impl Type {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Type::Bool => "a boolean",
            Type::Int => "an integer",
            Type::Str => "a string",
        }
    }
}

/// A literal of an `IN` set, cast ahead of time to each type the left
/// operand may have. `None` marks a cast that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConstCasts {
    pub text: Box<str>,
    pub int: Option<i32>,
    pub boolean: Option<bool>,
}

#[derive(Debug, Clone)]
pub(crate) enum InSet {
    Consts {
        items: Box<[ConstCasts]>,
        /// The string forms, sorted, when the set is large enough for a
        /// binary search to pay off.
        sorted: Option<Box<[Box<str>]>>,
    },
    Exprs(Box<[Node]>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Less,
    LessEq,
    Greater,
    GreaterEq,
}

impl CmpOp {
    pub(crate) fn apply(self, a: i32, b: i32) -> bool {
        match self {
            CmpOp::Less => a < b,
            CmpOp::LessEq => a <= b,
            CmpOp::Greater => a > b,
            CmpOp::GreaterEq => a >= b,
        }
    }

    fn flip(self) -> Self {
        match self {
            CmpOp::Less => CmpOp::Greater,
            CmpOp::LessEq => CmpOp::GreaterEq,
            CmpOp::Greater => CmpOp::Less,
            CmpOp::GreaterEq => CmpOp::LessEq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Const(Const),
    Attr(AttrKey),
    Exists(AttrKey),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Xor(Box<Node>, Box<Node>),
    /// `left = right` (or `!=`), the left cast to the right's runtime type.
    Eq {
        left: Box<Node>,
        right: Box<Node>,
        negated: bool,
    },
    /// `left = literal` (or `!=`).
    EqConst {
        left: Box<Node>,
        right: Const,
        negated: bool,
    },
    Compare {
        op: CmpOp,
        left: Box<Node>,
        right: Box<Node>,
    },
    /// An integer comparison with a literal that casts to an integer.
    CompareConst {
        op: CmpOp,
        left: Box<Node>,
        right: i32,
    },
    Arith {
        op: ArithOp,
        left: Box<Node>,
        right: Box<Node>,
    },
    Like {
        operand: Box<Node>,
        pattern: LikePattern,
        negated: bool,
    },
    In {
        operand: Box<Node>,
        set: InSet,
        negated: bool,
    },
    Call {
        func: Builtin,
        args: Box<[Node]>,
    },
    MissingFunction {
        name: Box<str>,
        arity: usize,
    },
}

/// `IN` sets at least this large get a sorted copy for binary search.
const SORTED_SET_MIN: usize = 16;

pub(crate) fn compile(expr: &Expr, strict: bool) -> Result<Node, ParseError> {
    let node = lower(expr, strict)?;
    if strict {
        if let Some(ty @ (Type::Int | Type::Str)) = node.static_type() {
            return Err(ParseError::new(
                expr.pos,
                format!(
                    "the expression always yields {}; a filter needs a boolean",
                    ty.name()
                ),
            ));
        }
    }
    Ok(node)
}

fn boxed(expr: &Expr, strict: bool) -> Result<Box<Node>, ParseError> {
    lower(expr, strict).map(Box::new)
}

fn lower(expr: &Expr, strict: bool) -> Result<Node, ParseError> {
    Ok(match &expr.ast {
        Ast::Int(i) => Node::Const(Const::Int(*i)),
        Ast::Str(s) => Node::Const(Const::Str(s.as_str().into())),
        Ast::Bool(b) => Node::Const(Const::Bool(*b)),
        Ast::Ident(name) => Node::Attr(AttrKey::new(name)),
        Ast::Exists(name) => Node::Exists(AttrKey::new(name)),
        Ast::Not(e) => Node::Not(boxed(e, strict)?),
        Ast::Neg(e) => Node::Neg(boxed(e, strict)?),
        Ast::Binary(op, l, r) => binary(*op, l, r, strict)?,
        Ast::Like {
            operand,
            pattern,
            negated,
        } => Node::Like {
            operand: boxed(operand, strict)?,
            pattern: LikePattern::compile(pattern),
            negated: *negated,
        },
        Ast::In {
            operand,
            set,
            negated,
        } => Node::In {
            operand: boxed(operand, strict)?,
            set: in_set(set, strict)?,
            negated: *negated,
        },
        Ast::Call { name, args } => {
            let lowered = args
                .iter()
                .map(|a| lower(a, strict))
                .collect::<Result<Box<[Node]>, _>>()?;
            match Builtin::resolve(name, args.len()) {
                Some(func) => Node::Call {
                    func,
                    args: lowered,
                },
                None if strict => {
                    return Err(ParseError::new(
                        expr.pos,
                        format!(
                            "there is no function {name} taking {} argument{}",
                            args.len(),
                            if args.len() == 1 { "" } else { "s" }
                        ),
                    ))
                }
                None => Node::MissingFunction {
                    name: name.as_str().into(),
                    arity: args.len(),
                },
            }
        }
    })
}

fn binary(op: BinOp, l: &Expr, r: &Expr, strict: bool) -> Result<Node, ParseError> {
    let left = boxed(l, strict)?;
    let right = boxed(r, strict)?;
    Ok(match op {
        BinOp::And => Node::And(left, right),
        BinOp::Or => Node::Or(left, right),
        BinOp::Xor => Node::Xor(left, right),
        BinOp::Eq | BinOp::NotEq => {
            let negated = op == BinOp::NotEq;
            match *right {
                Node::Const(c) => Node::EqConst {
                    left,
                    right: c,
                    negated,
                },
                right => Node::Eq {
                    left,
                    right: Box::new(right),
                    negated,
                },
            }
        }
        BinOp::Less => compare(CmpOp::Less, left, right),
        BinOp::LessEq => compare(CmpOp::LessEq, left, right),
        BinOp::Greater => compare(CmpOp::Greater, left, right),
        BinOp::GreaterEq => compare(CmpOp::GreaterEq, left, right),
        BinOp::Add => arith(ArithOp::Add, left, right),
        BinOp::Sub => arith(ArithOp::Sub, left, right),
        BinOp::Mul => arith(ArithOp::Mul, left, right),
        BinOp::Div => arith(ArithOp::Div, left, right),
        BinOp::Mod => arith(ArithOp::Mod, left, right),
    })
}

fn arith(op: ArithOp, left: Box<Node>, right: Box<Node>) -> Node {
    Node::Arith { op, left, right }
}

/// A literal's integer value when casting it cannot fail.
fn const_int(node: &Node) -> Option<i32> {
    match node {
        Node::Const(c) => cast::const_to_int(c),
        _ => None,
    }
}

fn compare(op: CmpOp, left: Box<Node>, right: Box<Node>) -> Node {
    if let Some(r) = const_int(&right) {
        return Node::CompareConst { op, left, right: r };
    }
    if let Some(l) = const_int(&left) {
        // A literal operand raises no error, so swapping the operands
        // changes nothing observable.
        return Node::CompareConst {
            op: op.flip(),
            left: right,
            right: l,
        };
    }
    Node::Compare { op, left, right }
}

fn in_set(set: &[Expr], strict: bool) -> Result<InSet, ParseError> {
    let nodes = set
        .iter()
        .map(|e| lower(e, strict))
        .collect::<Result<Vec<Node>, _>>()?;
    if !nodes.iter().all(|n| matches!(n, Node::Const(_))) {
        return Ok(InSet::Exprs(nodes.into()));
    }
    let items: Box<[ConstCasts]> = nodes
        .iter()
        .filter_map(|n| match n {
            Node::Const(c) => Some(cast::const_casts(c)),
            _ => None,
        })
        .collect();
    let sorted = (items.len() >= SORTED_SET_MIN).then(|| {
        let mut v: Vec<Box<str>> = items.iter().map(|c| c.text.clone()).collect();
        v.sort_unstable();
        v.dedup();
        v.into_boxed_slice()
    });
    Ok(InSet::Consts { items, sorted })
}

impl Node {
    /// The type every evaluation yields, or `None` when it depends on the
    /// event (a bare attribute reference).
    pub(crate) fn static_type(&self) -> Option<Type> {
        Some(match self {
            Node::Const(Const::Bool(_)) => Type::Bool,
            Node::Const(Const::Int(_)) => Type::Int,
            Node::Const(Const::Str(_)) => Type::Str,
            Node::Attr(_) => return None,
            Node::Neg(_) | Node::Arith { .. } => Type::Int,
            Node::Call { func, .. } => func.return_type(),
            Node::Exists(_)
            | Node::Not(_)
            | Node::And(..)
            | Node::Or(..)
            | Node::Xor(..)
            | Node::Eq { .. }
            | Node::EqConst { .. }
            | Node::Compare { .. }
            | Node::CompareConst { .. }
            | Node::Like { .. }
            | Node::In { .. }
            | Node::MissingFunction { .. } => Type::Bool,
        })
    }

    pub(crate) fn exact_requirements<'a>(&'a self, out: &mut Vec<(&'a str, &'a str)>) {
        match self {
            Node::And(l, r) => {
                l.exact_requirements(out);
                r.exact_requirements(out);
            }
            Node::EqConst {
                left,
                right: Const::Str(lit),
                negated: false,
            } => {
                if let Node::Attr(key) = &**left {
                    out.push((key.name(), lit));
                }
            }
            Node::Eq {
                left,
                right,
                negated: false,
            } => {
                if let (Node::Const(Const::Str(lit)), Node::Attr(key)) = (&**left, &**right) {
                    // The literal is cast to the attribute's type, so only
                    // attributes that are always strings give a plain
                    // string equality.
                    if key.context().is_some() {
                        out.push((key.name(), lit));
                    }
                }
            }
            _ => {}
        }
    }

    pub(crate) fn attributes<'a>(&'a self, out: &mut Vec<&'a AttrKey>) {
        match self {
            Node::Attr(k) | Node::Exists(k) => {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
            Node::Const(_) | Node::MissingFunction { .. } => {}
            Node::Not(e) | Node::Neg(e) => e.attributes(out),
            Node::EqConst { left, .. } | Node::CompareConst { left, .. } => left.attributes(out),
            Node::Like { operand, .. } => operand.attributes(out),
            Node::And(l, r) | Node::Or(l, r) | Node::Xor(l, r) => {
                l.attributes(out);
                r.attributes(out);
            }
            Node::Eq { left, right, .. }
            | Node::Compare { left, right, .. }
            | Node::Arith { left, right, .. } => {
                left.attributes(out);
                right.attributes(out);
            }
            Node::In { operand, set, .. } => {
                operand.attributes(out);
                if let InSet::Exprs(items) = set {
                    items.iter().for_each(|n| n.attributes(out));
                }
            }
            Node::Call { args, .. } => args.iter().for_each(|n| n.attributes(out)),
        }
    }
}
