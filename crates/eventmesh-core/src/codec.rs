//! The compact binary form in which events are stored in the log.
//!
//! Layout (version 1): a version byte, the ingest time in milliseconds since
//! the Unix epoch (varint), `id`, `source`, `type` (length-prefixed UTF-8), a
//! presence byte for the four optional attributes followed by those present,
//! the extension count and each extension (name, tag, value), then the data
//! kind and the length-prefixed payload. Lengths and integers are LEB128
//! varints; signed integers are zig-zag encoded. Decoding checks every length
//! against the remaining input, so a damaged record yields an error, never a
//! panic.

use bytes::Bytes;

use crate::event::{CloudEvent, Data, ExtValue};
use crate::CoreError;

const VERSION: u8 = 1;

/// An event read back from the log with the time it was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub ingest_ms: u64,
    pub event: CloudEvent,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Bytes [`put_varint`] writes for `v`.
fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes [`put_bytes`] writes for `b`.
fn bytes_len(b: &[u8]) -> usize {
    varint_len(b.len() as u64) + b.len()
}

/// An extension's zig-zag encoded integer.
fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

/// The optional attributes, in the order of the presence byte's bits.
fn optional_attributes(event: &CloudEvent) -> [&Option<String>; 4] {
    [
        &event.datacontenttype,
        &event.dataschema,
        &event.subject,
        &event.time,
    ]
}

/// The length of [`encode`]'s output, exactly: the record is allocated
/// once, at its size. (An estimate that fell short, for an event with
/// extensions, grew the vector and copied the event on every encode; one
/// that was long made `Bytes` allocate a header of its own.)
fn encoded_len(event: &CloudEvent, ingest_ms: u64) -> usize {
    let mut n = 1 + varint_len(ingest_ms);
    n += bytes_len(event.id.as_bytes())
        + bytes_len(event.source.as_bytes())
        + bytes_len(event.ty.as_bytes());
    n += 1 + optional_attributes(event)
        .iter()
        .copied()
        .flatten()
        .map(|o| bytes_len(o.as_bytes()))
        .sum::<usize>();
    n += varint_len(event.extensions.len() as u64);
    for (name, v) in &event.extensions {
        n += bytes_len(name.as_bytes())
            + match v {
                ExtValue::Str(s) => 1 + bytes_len(s.as_bytes()),
                ExtValue::Bool(_) => 2,
                ExtValue::Int(i) => 1 + varint_len(zigzag(*i)),
            };
    }
    n + 1
        + match event.data {
            Data::None => 0,
            _ => bytes_len(event.data.as_bytes()),
        }
}

/// Encodes an event with its ingest time.
pub fn encode(event: &CloudEvent, ingest_ms: u64) -> Vec<u8> {
    let data = event.data.as_bytes();
    let mut out = Vec::with_capacity(encoded_len(event, ingest_ms));
    out.push(VERSION);
    put_varint(&mut out, ingest_ms);
    put_bytes(&mut out, event.id.as_bytes());
    put_bytes(&mut out, event.source.as_bytes());
    put_bytes(&mut out, event.ty.as_bytes());
    let optional = optional_attributes(event);
    let mut presence = 0u8;
    for (i, o) in optional.iter().enumerate() {
        if o.is_some() {
            presence |= 1 << i;
        }
    }
    out.push(presence);
    for o in optional.iter().copied().flatten() {
        put_bytes(&mut out, o.as_bytes());
    }
    put_varint(&mut out, event.extensions.len() as u64);
    for (name, v) in &event.extensions {
        put_bytes(&mut out, name.as_bytes());
        match v {
            ExtValue::Str(s) => {
                out.push(0);
                put_bytes(&mut out, s.as_bytes());
            }
            ExtValue::Bool(b) => {
                out.push(1);
                out.push(u8::from(*b));
            }
            ExtValue::Int(i) => {
                out.push(2);
                put_varint(&mut out, zigzag(*i));
            }
        }
    }
    let kind = match event.data {
        Data::None => 0,
        Data::Json(_) => 1,
        Data::Text(_) => 2,
        Data::Binary(_) => 3,
    };
    out.push(kind);
    if kind != 0 {
        put_bytes(&mut out, data);
    }
    out
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

fn corrupt(what: &str) -> CoreError {
    CoreError::Corrupt(what.to_string())
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, CoreError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated record"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, CoreError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(corrupt("varint too long"))
    }

    fn bytes(&mut self) -> Result<Bytes, CoreError> {
        let len = usize::try_from(self.varint()?).map_err(|_| corrupt("length overflow"))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| corrupt("length past end of record"))?;
        let b = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(b)
    }

    fn string(&mut self) -> Result<String, CoreError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| corrupt("invalid UTF-8"))
    }
}

/// The ingest time of a stored record, read from its header alone (no
/// decoding of the rest): how the log finds where a time falls.
pub fn ingest_ms(buf: &Bytes) -> Option<u64> {
    let mut r = Reader { buf, pos: 0 };
    (r.byte().ok()? == VERSION).then_some(())?;
    r.varint().ok()
}

/// Decodes a stored record. Payload bytes share `buf` without copying.
pub fn decode(buf: &Bytes) -> Result<StoredEvent, CoreError> {
    let mut r = Reader { buf, pos: 0 };
    let version = r.byte()?;
    if version != VERSION {
        return Err(corrupt(&format!("unknown record version {version}")));
    }
    let ingest_ms = r.varint()?;
    let id = r.string()?;
    let source = r.string()?;
    let ty = r.string()?;
    let presence = r.byte()?;
    let mut opt = [None, None, None, None];
    for (i, slot) in opt.iter_mut().enumerate() {
        if presence & (1 << i) != 0 {
            *slot = Some(r.string()?);
        }
    }
    let [datacontenttype, dataschema, subject, time] = opt;
    let n = r.varint()?;
    let mut extensions = Vec::with_capacity(n.min(64) as usize);
    for _ in 0..n {
        let name = r.string()?;
        let v = match r.byte()? {
            0 => ExtValue::Str(r.string()?),
            1 => ExtValue::Bool(r.byte()? != 0),
            2 => {
                let z = r.varint()?;
                ExtValue::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            t => return Err(corrupt(&format!("unknown extension tag {t}"))),
        };
        extensions.push((name, v));
    }
    let data = match r.byte()? {
        0 => Data::None,
        1 => Data::Json(r.bytes()?),
        2 => Data::Text(r.string()?),
        3 => Data::Binary(r.bytes()?),
        k => return Err(corrupt(&format!("unknown data kind {k}"))),
    };
    if r.pos != buf.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(StoredEvent {
        ingest_ms,
        event: CloudEvent {
            id,
            source,
            ty,
            datacontenttype,
            dataschema,
            subject,
            time,
            extensions,
            data,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CloudEvent {
        CloudEvent {
            id: "id-1".into(),
            source: "/src".into(),
            ty: "com.example.t".into(),
            datacontenttype: Some("application/json".into()),
            dataschema: None,
            subject: Some("orders".into()),
            time: Some("2020-01-01T00:00:00Z".into()),
            extensions: vec![
                ("a".into(), ExtValue::Int(-5)),
                ("b".into(), ExtValue::Bool(true)),
                ("c".into(), ExtValue::Str("x".into())),
                ("d".into(), ExtValue::Int(i64::from(i32::MIN))),
            ],
            data: Data::Json(Bytes::from_static(b"{\"k\":1}")),
        }
    }

    #[test]
    fn round_trips_every_shape() {
        let mut e = sample();
        for data in [
            Data::None,
            Data::Text("héllo".into()),
            Data::Binary(Bytes::from_static(&[0, 255, 7])),
            Data::Json(Bytes::from_static(b"[1,2]")),
        ] {
            e.data = data;
            let enc = Bytes::from(encode(&e, 1_700_000_000_123));
            let d = decode(&enc).unwrap();
            assert_eq!(d.event, e);
            assert_eq!(d.ingest_ms, 1_700_000_000_123);
            assert_eq!(ingest_ms(&enc), Some(1_700_000_000_123));
            assert_eq!(
                ingest_ms(&Bytes::from_static(&[9, 1])),
                None,
                "another version"
            );
        }
    }

    /// Every shape is allocated at exactly its size: lengths and integers
    /// on both sides of each varint byte boundary, every attribute absent
    /// and present, every kind of data.
    #[test]
    fn a_record_is_allocated_at_its_size() {
        let long = |n: usize| "x".repeat(n);
        let mut shapes = vec![CloudEvent {
            datacontenttype: None,
            subject: None,
            time: None,
            extensions: Vec::new(),
            data: Data::None,
            ..sample()
        }];
        for n in [0, 127, 128, 16_383, 16_384] {
            let mut e = sample();
            e.id = long(n.max(1));
            e.dataschema = Some(long(n));
            e.extensions.push(("e".into(), ExtValue::Str(long(n))));
            e.extensions.push(("i".into(), ExtValue::Int(n as i64)));
            e.extensions.push(("j".into(), ExtValue::Int(-(n as i64))));
            e.extensions
                .push(("k".into(), ExtValue::Int(i64::from(i32::MAX))));
            e.data = Data::Text(long(n));
            shapes.push(e);
        }
        for (i, e) in shapes.iter().enumerate() {
            for ingest in [0, 127, 128, 1_700_000_000_123, u64::MAX] {
                let enc = encode(e, ingest);
                assert_eq!(enc.capacity(), enc.len(), "shape {i}, ingest {ingest}");
                assert_eq!(decode(&Bytes::from(enc)).unwrap().event, *e);
            }
        }
        for (v, n) in [
            (0, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint_len(v), n, "{v}");
        }
    }

    #[test]
    fn damaged_records_are_errors() {
        let enc = encode(&sample(), 1);
        for cut in 0..enc.len() {
            assert!(
                decode(&Bytes::copy_from_slice(&enc[..cut])).is_err(),
                "{cut}"
            );
        }
        let mut bad = enc.clone();
        bad[0] = 9;
        assert!(decode(&Bytes::from(bad)).is_err());
        let mut long = enc;
        long.push(0);
        assert!(decode(&Bytes::from(long)).is_err());
    }
}
