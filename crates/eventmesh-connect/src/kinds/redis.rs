//! redis source and sink (to be written).

use crate::kind::Kind;

/// This file's kinds.
pub fn kinds() -> Vec<Kind> {
    Vec::new()
}
