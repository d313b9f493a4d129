//! Delivery ids: what a client quotes to acknowledge or give back one
//! delivery.
//!
//! Form: `<boot>-<dispatcher>-<partition>-<offset>-<generation>-<nonce>`,
//! lower-case hex, the nonce always 16 digits. The boot id is new at every
//! start, so an id from an earlier run matches nothing; partition and
//! offset name the event (the dispatcher's in-flight entry and ledger
//! entry are keyed by them); the generation counts the event's hand-outs
//! in this run, so each one has its own id; the nonce is 64 bits from the
//! operating system's random source, so an id cannot be guessed from
//! others: one with the right event and generation but a wrong nonce is
//! as unknown as any. Parsing never panics: anything not of this exact
//! form is `None`.

use std::hash::{BuildHasher, RandomState};

/// Names one event of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    pub partition: u32,
    pub offset: u64,
}

/// Which hand-out of an event an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub generation: u32,
    pub nonce: u64,
}

/// A parsed delivery id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryId {
    boot: String,
    dispatcher: u32,
    slot: Slot,
    ticket: Ticket,
}

impl DeliveryId {
    /// The boot id of the run that made it.
    pub fn boot(&self) -> &str {
        &self.boot
    }

    /// The dispatcher that made it.
    pub fn dispatcher(&self) -> u32 {
        self.dispatcher
    }

    pub(crate) fn slot(&self) -> Slot {
        self.slot
    }

    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket
    }
}

/// Builds the delivery id of one hand-out.
pub(crate) fn format_delivery_id(
    boot: &str,
    dispatcher: u32,
    slot: Slot,
    ticket: Ticket,
) -> String {
    // Written by hand: this runs for every delivery, and `format!` cost
    // more than the rest of building the id.
    let mut id = String::with_capacity(boot.len() + 64);
    id.push_str(boot);
    for v in [
        u64::from(dispatcher),
        u64::from(slot.partition),
        slot.offset,
        u64::from(ticket.generation),
    ] {
        id.push('-');
        push_hex(&mut id, v, 1);
    }
    id.push('-');
    push_hex(&mut id, ticket.nonce, 16);
    id
}

/// Appends `v` in lower-case hex, at least `width` digits (zero-padded).
fn push_hex(out: &mut String, v: u64, width: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (64 - v.leading_zeros() as usize).div_ceil(4).max(width);
    for i in (0..digits).rev() {
        out.push(DIGITS[((v >> (4 * i)) & 0xf) as usize] as char);
    }
}

/// Lower-case hex of 1 to `max` digits, nothing else (no sign, no prefix).
fn hex<T: TryFrom<u64>>(s: &str, max: usize) -> Option<T> {
    if s.is_empty() || s.len() > max || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    T::try_from(u64::from_str_radix(s, 16).ok()?).ok()
}

/// Parses a delivery id; `None` for anything not of the exact form.
pub fn parse_delivery_id(id: &str) -> Option<DeliveryId> {
    let mut parts = id.split('-');
    let boot = parts.next()?;
    if boot.is_empty() || boot.len() > 64 || !boot.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let dispatcher = hex(parts.next()?, 8)?;
    let partition = hex(parts.next()?, 8)?;
    let offset = hex(parts.next()?, 16)?;
    let generation = hex(parts.next()?, 8)?;
    let nonce = parts.next()?;
    if nonce.len() != 16 || parts.next().is_some() {
        return None;
    }
    Some(DeliveryId {
        boot: boot.to_string(),
        dispatcher,
        slot: Slot { partition, offset },
        ticket: Ticket {
            generation,
            nonce: hex(nonce, 16)?,
        },
    })
}

/// Random nonces, read from the operating system's source a block at a
/// time (one system call per block, not per delivery).
pub(crate) struct Nonces {
    block: [u64; BLOCK],
    used: usize,
    /// Only when the system source fails: a randomly keyed hash of a counter.
    fallback: Option<(RandomState, u64)>,
}

const BLOCK: usize = 128;

impl Default for Nonces {
    fn default() -> Self {
        Nonces {
            block: [0; BLOCK],
            used: BLOCK,
            fallback: None,
        }
    }
}

impl Nonces {
    pub(crate) fn next(&mut self) -> u64 {
        if self.used == BLOCK {
            self.refill();
        }
        if let Some((keys, n)) = &mut self.fallback {
            *n += 1;
            return keys.hash_one(*n);
        }
        let v = self.block[self.used];
        self.used += 1;
        v
    }

    fn refill(&mut self) {
        let mut bytes = [0u8; BLOCK * 8];
        match getrandom::fill(&mut bytes) {
            Ok(()) => {
                for (v, chunk) in self.block.iter_mut().zip(bytes.chunks_exact(8)) {
                    *v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                }
                self.used = 0;
                self.fallback = None;
            }
            Err(e) => {
                if self.fallback.is_none() {
                    tracing::error!(error = %e, "the system random source failed; delivery id nonces come from a randomly keyed hash");
                    self.fallback = Some((RandomState::new(), 0));
                }
                self.used = BLOCK;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "0190abcdef0123456789abcdef012345";

    #[test]
    fn ids_are_written_as_format_would_write_them() {
        let values = [
            0,
            1,
            9,
            10,
            15,
            16,
            255,
            256,
            0xdead_beef,
            u64::from(u32::MAX),
            u64::MAX,
        ];
        for &v in &values {
            for &w in &values {
                let (dispatcher, generation) = (v as u32, w as u32);
                let slot = Slot {
                    partition: w as u32,
                    offset: v,
                };
                let ticket = Ticket {
                    generation,
                    nonce: w,
                };
                assert_eq!(
                    format_delivery_id(BOOT, dispatcher, slot, ticket),
                    format!(
                        "{BOOT}-{dispatcher:x}-{:x}-{v:x}-{generation:x}-{w:016x}",
                        w as u32
                    )
                );
            }
        }
    }

    #[test]
    fn ids_round_trip() {
        let slot = Slot {
            partition: 3,
            offset: 300,
        };
        let ticket = Ticket {
            generation: 2,
            nonce: 0x00ab_cdef_0123_4567,
        };
        let id = format_delivery_id(BOOT, 7, slot, ticket);
        assert_eq!(id, format!("{BOOT}-7-3-12c-2-00abcdef01234567"));
        let parsed = parse_delivery_id(&id).unwrap();
        assert_eq!(parsed.boot(), BOOT);
        assert_eq!(parsed.dispatcher(), 7);
        assert_eq!(parsed.slot(), slot);
        assert_eq!(parsed.ticket(), ticket);
    }

    #[test]
    fn anything_else_is_rejected() {
        let good = format!("{BOOT}-7-3-12c-2-00abcdef01234567");
        assert!(parse_delivery_id(&good).is_some());
        for bad in [
            String::new(),
            "nonsense".to_string(),
            // The earlier form, without event or nonce.
            format!("{BOOT}-1-2a"),
            format!("{BOOT}-7-3-12c-2"),
            format!("{BOOT}-7-3-12c-2-00abcdef01234567-9"),
            format!("{BOOT}-7-3-12c-2-abcdef01234567"),
            format!("{BOOT}-7-3-12c-2-00ABCDEF01234567"),
            format!("{BOOT}-+7-3-12c-2-00abcdef01234567"),
            format!("{BOOT}-zz-3-12c-2-00abcdef01234567"),
            format!("{BOOT}-7-3--2-00abcdef01234567"),
            format!("{BOOT}-7-100000000-12c-2-00abcdef01234567"),
            format!("{BOOT}-7-3-10000000000000000-2-00abcdef01234567"),
            "-7-3-12c-2-00abcdef01234567".to_string(),
            "b%t-7-3-12c-2-00abcdef01234567".to_string(),
            format!("{BOOT}-7-3-12c-2-00abcdef0123456é"),
        ] {
            assert_eq!(parse_delivery_id(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn nonces_differ() {
        let mut n = Nonces::default();
        let drawn: std::collections::HashSet<u64> = (0..1000).map(|_| n.next()).collect();
        // 1000 draws of 64 random bits: a repeat would be a broken source.
        assert_eq!(drawn.len(), 1000);
        let mut other = Nonces::default();
        assert!(!drawn.contains(&other.next()));
    }
}
