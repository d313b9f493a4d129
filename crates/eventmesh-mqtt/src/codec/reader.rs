//! Reading the fields of a packet body: every read checks the bytes are
//! there and the field is well-formed.

use bytes::{Buf, Bytes};

use super::DecodeError;

type Result<T> = std::result::Result<T, DecodeError>;

/// A variable byte integer at the front of some bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Varint {
    /// The bytes end before the integer does.
    Incomplete,
    /// A fourth byte with its continuation bit set.
    TooLong,
    /// A last byte of zero after the first: not the shortest form.
    NotMinimal,
    Value {
        value: u32,
        len: usize,
    },
}

pub(super) fn varint(bytes: &[u8]) -> Varint {
    let mut value: u32 = 0;
    for (i, &b) in bytes.iter().take(4).enumerate() {
        value |= u32::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Varint::NotMinimal;
            }
            return Varint::Value { value, len: i + 1 };
        }
    }
    if bytes.len() >= 4 {
        Varint::TooLong
    } else {
        Varint::Incomplete
    }
}

/// Reads the fields of one packet body from the front; every read checks
/// that the bytes are there.
pub(super) struct Reader {
    buf: Bytes,
    pub packet: &'static str,
}

impl Reader {
    pub fn new(buf: Bytes, packet: &'static str) -> Self {
        Reader { buf, packet }
    }

    fn truncated(&self, field: &'static str) -> DecodeError {
        DecodeError::Truncated {
            packet: self.packet,
            field,
        }
    }

    fn need(&self, n: usize, field: &'static str) -> Result<()> {
        if self.buf.len() < n {
            Err(self.truncated(field))
        } else {
            Ok(())
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8> {
        self.need(1, field)?;
        Ok(self.buf.get_u8())
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16> {
        self.need(2, field)?;
        Ok(self.buf.get_u16())
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32> {
        self.need(4, field)?;
        Ok(self.buf.get_u32())
    }

    pub fn varint(&mut self, field: &'static str) -> Result<u32> {
        match varint(&self.buf) {
            Varint::Incomplete => Err(self.truncated(field)),
            Varint::TooLong => Err(DecodeError::VarintTooLong { field }),
            Varint::NotMinimal => Err(DecodeError::VarintNotMinimal { field }),
            Varint::Value { value, len } => {
                self.buf.advance(len);
                Ok(value)
            }
        }
    }

    /// The next `n` bytes, zero-copy.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<Bytes> {
        self.need(n, field)?;
        Ok(self.buf.split_to(n))
    }

    /// The next `n` bytes as a reader of their own.
    pub fn sub(&mut self, n: usize, field: &'static str) -> Result<Reader> {
        let buf = self.take(n, field)?;
        Ok(Reader::new(buf, self.packet))
    }

    /// Length-prefixed binary data, zero-copy.
    pub fn binary(&mut self, field: &'static str) -> Result<Bytes> {
        let n = self.u16(field)?;
        self.take(usize::from(n), field)
    }

    /// A length-prefixed UTF-8 string without U+0000.
    pub fn string(&mut self, field: &'static str) -> Result<String> {
        let bytes = self.binary(field)?;
        let s = std::str::from_utf8(&bytes).map_err(|_| DecodeError::InvalidUtf8 {
            packet: self.packet,
            field,
        })?;
        if s.contains('\0') {
            return Err(DecodeError::NulInString {
                packet: self.packet,
                field,
            });
        }
        Ok(s.to_owned())
    }

    /// Everything left, zero-copy.
    pub fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.buf)
    }

    /// Checks the body has been used up exactly.
    pub fn finish(&self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                packet: self.packet,
                extra: self.buf.len(),
            })
        }
    }
}
