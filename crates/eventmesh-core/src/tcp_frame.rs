//! The length-prefixed binary frame protocol of the legacy TCP port.
//!
//! Every frame is laid out as follows, all integers big-endian:
//!
//! | field         | size          | meaning                                              |
//! |---------------|---------------|------------------------------------------------------|
//! | `length`      | 4 (`u32`)     | number of bytes after this field: `10 + payload`     |
//! | `version`     | 1 (`u8`)      | always [`VERSION`] (1)                               |
//! | `type`        | 1 (`u8`)      | a [`FrameType`]                                      |
//! | `correlation` | 8 (`u64`)     | chosen by the requester, echoed by the reply; 0 for unsolicited frames |
//! | `payload`     | `length - 10` | depends on the type                                  |
//!
//! This module only converts between bytes and [`Frame`]s; it does no I/O.
//! [`decode`] checks every length against the bytes present and against a
//! caller-chosen maximum, so malformed input yields a [`FrameError`], never a
//! panic, and an oversized frame is rejected from its 4 length bytes without
//! being buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

mod payload;
pub use payload::{
    encode_push, parse_publish, parse_push, parse_request, publish_payload, push_payload,
    request_payload,
};

/// The protocol version carried by every frame.
pub const VERSION: u8 = 1;

/// Size of the fixed header counted by `length`: version (1), type (1) and
/// correlation (8).
pub const HEADER_LEN: usize = 10;

/// A correlation with this bit set asks for no answer to an `ACK`, `NACK`,
/// `REPLY` or `REPLY_ACK` that succeeds; one that fails is answered with
/// an `ERROR` of that correlation, as always. The server's own
/// correlations never set it.
pub const QUIET: u64 = 1 << 63;

/// Size of the `length` field that precedes the header.
const LENGTH_LEN: usize = 4;

/// The largest `length` accepted by default: 1 MiB of payload plus 64 KiB
/// of room for the header, topic and event attributes.
pub const DEFAULT_MAX_FRAME: usize = 1_114_112;

/// The kind of a frame, the `type` byte of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Client to server, the first frame of a connection. Payload: JSON
    /// `{"clientId": "...", "token": "..."}`, `token` optional.
    Hello = 0x01,
    /// Server to client, answers `Hello`. Payload: JSON `{"heartbeatMs": N}`.
    HelloOk = 0x02,
    /// Client to server. Payload: `u16` topic length, the topic in UTF-8,
    /// then a structured CloudEvent in JSON (see [`publish_payload`]).
    Publish = 0x03,
    /// Server to client, answers `Publish`. Payload: JSON
    /// `{"id", "topic", "partition", "offset"}`.
    PublishAck = 0x04,
    /// Client to server. Payload: JSON `{"topic", "group", "mode", "from"}`,
    /// all but `topic` optional.
    Subscribe = 0x05,
    /// Server to client, answers `Subscribe`. Payload: JSON
    /// `{"subscriptionId": "..."}`.
    SubscribeOk = 0x06,
    /// Server to client, one delivery, correlation 0. Payload: `u16` delivery
    /// id length, the delivery id in UTF-8, then a structured CloudEvent in
    /// JSON (see [`push_payload`]).
    Push = 0x07,
    /// Client to server, acknowledges a delivery. Payload: the delivery id in UTF-8.
    Ack = 0x08,
    /// Client to server, gives a delivery back. Payload: the delivery id in UTF-8.
    Nack = 0x09,
    /// Either side; answered with a `Heartbeat` carrying the same correlation.
    Heartbeat = 0x0A,
    /// Either side, announces an orderly close. Empty payload.
    Goodbye = 0x0B,
    /// Server to client, generic success. Payload empty or JSON.
    Ok = 0x0C,
    /// A failure. Payload: JSON `{"error": code, "message": text}`.
    Error = 0x0D,
    /// Client to server. Payload: JSON `{"topic": ...}`, or `{}` for every
    /// subscription of the connection.
    Unsubscribe = 0x0E,
    /// Client to server, the answer to a request-reply request. Payload: a
    /// structured CloudEvent in JSON.
    Reply = 0x0F,
    /// Client to server, a request-reply request. Payload: `u32` wait in
    /// milliseconds (0: the server's default), then a `Publish` payload (see
    /// [`request_payload`]). Answered by `Response` or `Error`.
    Request = 0x10,
    /// Server to client, answers `Request`. Payload: the reply, a
    /// structured CloudEvent in JSON.
    Response = 0x11,
    /// Client to server: answers a request-reply request and acknowledges
    /// the delivery that brought it, in one frame. Payload: laid out like a
    /// `Push` payload (see [`push_payload`]): the request's delivery id,
    /// then the reply event. Answered by `Ok` or `Error`.
    ReplyAck = 0x12,
}

impl FrameType {
    /// The frame type for a `type` byte, or `None` for an unassigned value.
    pub fn from_u8(value: u8) -> Option<FrameType> {
        Some(match value {
            0x01 => FrameType::Hello,
            0x02 => FrameType::HelloOk,
            0x03 => FrameType::Publish,
            0x04 => FrameType::PublishAck,
            0x05 => FrameType::Subscribe,
            0x06 => FrameType::SubscribeOk,
            0x07 => FrameType::Push,
            0x08 => FrameType::Ack,
            0x09 => FrameType::Nack,
            0x0A => FrameType::Heartbeat,
            0x0B => FrameType::Goodbye,
            0x0C => FrameType::Ok,
            0x0D => FrameType::Error,
            0x0E => FrameType::Unsubscribe,
            0x0F => FrameType::Reply,
            0x10 => FrameType::Request,
            0x11 => FrameType::Response,
            0x12 => FrameType::ReplyAck,
            _ => return None,
        })
    }

    /// The name used in logs and documentation, e.g. `PUBLISH_ACK`.
    pub fn name(self) -> &'static str {
        match self {
            FrameType::Hello => "HELLO",
            FrameType::HelloOk => "HELLO_OK",
            FrameType::Publish => "PUBLISH",
            FrameType::PublishAck => "PUBLISH_ACK",
            FrameType::Subscribe => "SUBSCRIBE",
            FrameType::SubscribeOk => "SUBSCRIBE_OK",
            FrameType::Push => "PUSH",
            FrameType::Ack => "ACK",
            FrameType::Nack => "NACK",
            FrameType::Heartbeat => "HEARTBEAT",
            FrameType::Goodbye => "GOODBYE",
            FrameType::Ok => "OK",
            FrameType::Error => "ERROR",
            FrameType::Unsubscribe => "UNSUBSCRIBE",
            FrameType::Reply => "REPLY",
            FrameType::Request => "REQUEST",
            FrameType::Response => "RESPONSE",
            FrameType::ReplyAck => "REPLY_ACK",
        }
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameType,
    /// Chosen by the requester and echoed by the reply; 0 for unsolicited
    /// frames (`Push`, an `Error` about the connection itself).
    pub correlation: u64,
    pub payload: Bytes,
}

impl Frame {
    /// A frame with the given payload.
    pub fn new(kind: FrameType, correlation: u64, payload: impl Into<Bytes>) -> Self {
        Frame {
            kind,
            correlation,
            payload: payload.into(),
        }
    }

    /// A frame whose payload is `value` serialized as JSON.
    ///
    /// Serialization fails only for values JSON cannot represent (a map with
    /// non-string keys, a `Serialize` implementation that reports an error);
    /// the result is then an `Error` frame with code `internal_error` and the
    /// same correlation, so that the peer still gets an answer.
    pub fn json(kind: FrameType, correlation: u64, value: &impl serde::Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(payload) => Frame::new(kind, correlation, payload),
            Err(e) => Frame::error(
                correlation,
                "internal_error",
                &format!("cannot serialize the {} payload: {e}", kind.name()),
            ),
        }
    }

    /// An `Error` frame with payload `{"error": code, "message": message}`.
    pub fn error(correlation: u64, code: &str, message: &str) -> Self {
        let value = serde_json::json!({ "error": code, "message": message });
        // A `Value` with string keys always serializes.
        let payload = serde_json::to_vec(&value).unwrap_or_default();
        Frame::new(FrameType::Error, correlation, payload)
    }

    /// Appends the wire form of the frame to `out`.
    ///
    /// A payload too large for the `u32` length field (over 4 GiB, far beyond
    /// any frame limit) cannot be framed; an `Error` frame with code
    /// `frame_too_large` and the same correlation is written in its place, so
    /// the stream stays well-formed.
    pub fn encode(&self, out: &mut BytesMut) {
        let Some(length) = HEADER_LEN
            .checked_add(self.payload.len())
            .and_then(|l| u32::try_from(l).ok())
        else {
            let replacement = Frame::error(
                self.correlation,
                "frame_too_large",
                &format!(
                    "a {} payload of {} bytes does not fit in one frame",
                    self.kind.name(),
                    self.payload.len()
                ),
            );
            replacement.encode(out);
            return;
        };
        put_header(out, length, self.kind, self.correlation);
        out.extend_from_slice(&self.payload);
    }

    /// The wire form of the frame in a fresh buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(LENGTH_LEN + HEADER_LEN + self.payload.len());
        self.encode(&mut out);
        out.freeze()
    }
}

/// Reserves room for a frame of `length` bytes after its length field
/// and writes that field and the header.
fn put_header(out: &mut BytesMut, length: u32, kind: FrameType, correlation: u64) {
    out.reserve(LENGTH_LEN + length as usize);
    out.put_u32(length);
    out.put_u8(VERSION);
    out.put_u8(kind as u8);
    out.put_u64(correlation);
}

/// Input that is not a valid frame or payload. After any of these the byte
/// stream cannot be resynchronized: the connection answers with an `Error`
/// frame carrying [`FrameError::code`] and is closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The `length` field exceeds the configured maximum.
    #[error("frame length {length} exceeds the limit of {max} bytes")]
    Oversized { length: usize, max: usize },
    /// The `length` field is smaller than the 10-byte header.
    #[error("frame length {length} is shorter than the {HEADER_LEN}-byte header")]
    TooShort { length: usize },
    /// The version byte is not [`VERSION`].
    #[error("unsupported protocol version {0}; this server speaks version {VERSION}")]
    BadVersion(u8),
    /// The type byte is not a [`FrameType`].
    #[error("unknown frame type 0x{0:02x}")]
    UnknownType(u8),
    /// The payload does not have the layout its frame type requires.
    #[error("{0}")]
    BadPayload(String),
}

impl FrameError {
    /// The machine-readable code sent in the `error` field of an `Error` frame.
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::Oversized { .. } => "frame_too_large",
            FrameError::TooShort { .. } => "frame_too_short",
            FrameError::BadVersion(_) => "bad_version",
            FrameError::UnknownType(_) => "unknown_frame_type",
            FrameError::BadPayload(_) => "bad_payload",
        }
    }
}

/// Takes one complete frame off the front of `buf`; `Ok(None)` when more
/// bytes are needed.
///
/// `max` bounds the `length` field. The checks run as soon as the bytes they
/// need are present: once the 4 length bytes are readable, a length over
/// `max` is [`FrameError::Oversized`] (so an oversized frame is never
/// buffered) and a length under [`HEADER_LEN`] is [`FrameError::TooShort`];
/// once the version byte is readable, a version other than [`VERSION`] is
/// [`FrameError::BadVersion`]; once the type byte is readable, an unassigned
/// type is [`FrameError::UnknownType`]. On error `buf` is left untouched.
/// Payloads are not inspected here; see [`parse_publish`] and [`parse_push`].
pub fn decode(buf: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    let Some(len_bytes) = buf.get(..LENGTH_LEN) else {
        return Ok(None);
    };
    let mut be = [0u8; LENGTH_LEN];
    be.copy_from_slice(len_bytes);
    // A u32 always fits in usize on the platforms this runtime supports
    // (32 and 64 bits).
    let length = u32::from_be_bytes(be) as usize;
    if length > max {
        return Err(FrameError::Oversized { length, max });
    }
    if length < HEADER_LEN {
        return Err(FrameError::TooShort { length });
    }
    if let Some(&version) = buf.get(LENGTH_LEN) {
        if version != VERSION {
            return Err(FrameError::BadVersion(version));
        }
    }
    let kind = match buf.get(LENGTH_LEN + 1) {
        None => return Ok(None),
        Some(&ty) => FrameType::from_u8(ty).ok_or(FrameError::UnknownType(ty))?,
    };
    let total = LENGTH_LEN + length;
    if buf.len() < total {
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    // Length, version and type were checked above.
    frame.advance(LENGTH_LEN + 2);
    let correlation = frame.get_u64();
    Ok(Some(Frame {
        kind,
        correlation,
        payload: frame.freeze(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_types() -> Vec<FrameType> {
        (0..=u8::MAX).filter_map(FrameType::from_u8).collect()
    }

    fn sample_payload(kind: FrameType) -> Bytes {
        let event = br#"{"specversion":"1.0","id":"e1","source":"/s","type":"t"}"#;
        match kind {
            FrameType::Hello => Bytes::from_static(br#"{"clientId":"c1","token":"s3cret"}"#),
            FrameType::HelloOk => Bytes::from_static(br#"{"heartbeatMs":15000}"#),
            FrameType::Publish => publish_payload("orders", event).unwrap(),
            FrameType::PublishAck => {
                Bytes::from_static(br#"{"id":"e1","topic":"orders","partition":2,"offset":17}"#)
            }
            FrameType::Subscribe => Bytes::from_static(
                br#"{"topic":"orders","group":"billing","mode":"BROADCAST","from":"earliest"}"#,
            ),
            FrameType::SubscribeOk => Bytes::from_static(br#"{"subscriptionId":"s1"}"#),
            FrameType::Push | FrameType::ReplyAck => push_payload("0193-1-2a", event),
            FrameType::Ack | FrameType::Nack => Bytes::from_static(b"0193-1-2a"),
            FrameType::Heartbeat | FrameType::Goodbye => Bytes::new(),
            FrameType::Ok => Bytes::from_static(br#"{"status":"acked"}"#),
            FrameType::Error => Frame::error(0, "bad_payload", "x").payload,
            FrameType::Unsubscribe => Bytes::from_static(b"{}"),
            FrameType::Reply | FrameType::Response => Bytes::copy_from_slice(event),
            FrameType::Request => request_payload(2500, "asks", event).unwrap(),
        }
    }

    #[test]
    fn tcp_frame_type_codes_are_stable() {
        let types = all_types();
        assert_eq!(types.len(), 18);
        for (i, t) in types.iter().enumerate() {
            assert_eq!(*t as u8, i as u8 + 1);
            assert_eq!(FrameType::from_u8(*t as u8), Some(*t));
            assert!(!t.name().is_empty());
        }
        assert_eq!(FrameType::from_u8(0), None);
        assert_eq!(FrameType::from_u8(0x13), None);
        assert_eq!(FrameType::from_u8(0xFF), None);
        assert_eq!(FrameType::PublishAck.name(), "PUBLISH_ACK");
    }

    #[test]
    fn tcp_frame_round_trip_every_type() {
        for (i, kind) in all_types().into_iter().enumerate() {
            let frame = Frame::new(kind, 0x0102_0304_0506_0700 + i as u64, sample_payload(kind));
            let wire = frame.to_bytes();
            assert_eq!(wire.len(), 4 + HEADER_LEN + frame.payload.len());
            assert_eq!(
                &wire[..4],
                &((HEADER_LEN + frame.payload.len()) as u32).to_be_bytes()
            );
            assert_eq!(wire[4], VERSION);
            assert_eq!(wire[5], kind as u8);
            let mut buf = BytesMut::from(&wire[..]);
            assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(frame)));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn tcp_frame_heartbeat_wire_bytes() {
        let wire = Frame::new(FrameType::Heartbeat, 42, Bytes::new()).to_bytes();
        assert_eq!(
            &wire[..],
            &[0, 0, 0, 10, 1, 0x0A, 0, 0, 0, 0, 0, 0, 0, 42][..]
        );
    }

    #[test]
    fn tcp_frame_publish_wire_bytes() {
        let payload = publish_payload("orders", b"{}").unwrap();
        let wire = Frame::new(FrameType::Publish, 7, payload).to_bytes();
        let mut expected = vec![0, 0, 0, 20, 1, 0x03, 0, 0, 0, 0, 0, 0, 0, 7, 0, 6];
        expected.extend_from_slice(b"orders{}");
        assert_eq!(&wire[..], &expected[..]);
    }

    #[test]
    fn tcp_frame_documented_publish_example() {
        // The worked example of docs/tcp-protocol.md.
        let event = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t"}"#;
        let payload = publish_payload("orders", event).unwrap();
        let wire = Frame::new(FrameType::Publish, 7, payload).to_bytes();
        assert_eq!(wire.len(), 77);
        assert_eq!(
            &wire[..16],
            &[0, 0, 0, 0x49, 1, 3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 6][..]
        );
        assert_eq!(&wire[16..22], b"orders");
        assert_eq!(&wire[22..], &event[..]);
    }

    #[test]
    fn tcp_frame_encode_appends() {
        let mut out = BytesMut::from(&b"xy"[..]);
        Frame::new(FrameType::Goodbye, 1, Bytes::new()).encode(&mut out);
        assert_eq!(&out[..2], b"xy");
        assert_eq!(out.len(), 2 + 4 + HEADER_LEN);
    }

    #[test]
    fn tcp_frame_json_and_error_helpers() {
        let f = Frame::json(
            FrameType::HelloOk,
            3,
            &serde_json::json!({"heartbeatMs": 15000}),
        );
        assert_eq!(f.kind, FrameType::HelloOk);
        assert_eq!(f.correlation, 3);
        assert_eq!(&f.payload[..], br#"{"heartbeatMs":15000}"#);

        let e = Frame::error(9, "unauthorized", "bad \"token\"");
        assert_eq!(e.kind, FrameType::Error);
        assert_eq!(e.correlation, 9);
        let v: serde_json::Value = serde_json::from_slice(&e.payload).unwrap();
        assert_eq!(v["error"], "unauthorized");
        assert_eq!(v["message"], "bad \"token\"");

        // A map with non-string keys cannot be JSON: the result is an Error frame.
        let mut bad = std::collections::BTreeMap::new();
        bad.insert((1, 2), 3);
        let f = Frame::json(FrameType::Ok, 5, &bad);
        assert_eq!(f.kind, FrameType::Error);
        assert_eq!(f.correlation, 5);
        let v: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
        assert_eq!(v["error"], "internal_error");
    }

    #[test]
    fn tcp_frame_incremental_decode_one_byte_at_a_time() {
        let frames: Vec<Frame> = all_types()
            .into_iter()
            .map(|k| Frame::new(k, k as u64 * 1000, sample_payload(k)))
            .collect();
        let mut wire = BytesMut::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in wire.iter() {
            buf.put_u8(b);
            if let Some(f) = decode(&mut buf, DEFAULT_MAX_FRAME).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
        assert!(buf.is_empty());
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));
    }

    #[test]
    fn tcp_frame_two_frames_in_one_buffer() {
        let a = Frame::new(FrameType::Ack, 1, Bytes::from_static(b"d1"));
        let b = Frame::new(FrameType::Heartbeat, 2, Bytes::new());
        let mut buf = BytesMut::new();
        a.encode(&mut buf);
        b.encode(&mut buf);
        buf.extend_from_slice(&[0, 0]); // start of a third frame
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(a)));
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(b)));
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));
        assert_eq!(&buf[..], &[0, 0]);
    }

    #[test]
    fn tcp_frame_empty_and_partial_length_need_more() {
        for n in 0..4 {
            let mut buf = BytesMut::from(&[0u8, 0, 0, 10][..n]);
            assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));
            assert_eq!(buf.len(), n);
        }
    }

    #[test]
    fn tcp_frame_oversized_rejected_from_length_alone() {
        let mut buf = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
        assert_eq!(
            decode(&mut buf, DEFAULT_MAX_FRAME),
            Err(FrameError::Oversized {
                length: u32::MAX as usize,
                max: DEFAULT_MAX_FRAME
            })
        );
        assert_eq!(buf.len(), 4, "the buffer is left untouched");

        let just_over = (DEFAULT_MAX_FRAME + 1) as u32;
        let mut buf = BytesMut::from(&just_over.to_be_bytes()[..]);
        let err = decode(&mut buf, DEFAULT_MAX_FRAME).unwrap_err();
        assert_eq!(err.code(), "frame_too_large");

        // Exactly at the limit is allowed (and waits for the rest).
        let mut buf = BytesMut::from(&(DEFAULT_MAX_FRAME as u32).to_be_bytes()[..]);
        buf.extend_from_slice(&[VERSION, FrameType::Publish as u8]);
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));

        // A small limit applies to a complete frame too.
        let wire = Frame::new(FrameType::Reply, 1, vec![b'x'; 100]).to_bytes();
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(
            decode(&mut buf, 64),
            Err(FrameError::Oversized {
                length: 110,
                max: 64
            })
        );
    }

    #[test]
    fn tcp_frame_too_short_length() {
        for length in 0..HEADER_LEN as u32 {
            let mut buf = BytesMut::from(&length.to_be_bytes()[..]);
            let err = decode(&mut buf, DEFAULT_MAX_FRAME).unwrap_err();
            assert_eq!(
                err,
                FrameError::TooShort {
                    length: length as usize
                }
            );
            assert_eq!(err.code(), "frame_too_short");
        }
    }

    #[test]
    fn tcp_frame_bad_version() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 10, 2][..]);
        let err = decode(&mut buf, DEFAULT_MAX_FRAME).unwrap_err();
        assert_eq!(err, FrameError::BadVersion(2));
        assert_eq!(err.code(), "bad_version");
        let mut buf = BytesMut::from(&[0u8, 0, 0, 10, 0, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        assert_eq!(
            decode(&mut buf, DEFAULT_MAX_FRAME),
            Err(FrameError::BadVersion(0))
        );
    }

    #[test]
    fn tcp_frame_unknown_type() {
        for ty in [0x00u8, 0x13, 0x7F, 0xFF] {
            let mut buf = BytesMut::from(&[0u8, 0, 0, 10, VERSION, ty][..]);
            let err = decode(&mut buf, DEFAULT_MAX_FRAME).unwrap_err();
            assert_eq!(err, FrameError::UnknownType(ty));
            assert_eq!(err.code(), "unknown_frame_type");
        }
    }

    #[test]
    fn tcp_frame_error_messages() {
        assert_eq!(
            FrameError::UnknownType(0x2a).to_string(),
            "unknown frame type 0x2a"
        );
        assert_eq!(
            FrameError::TooShort { length: 3 }.to_string(),
            "frame length 3 is shorter than the 10-byte header"
        );
        assert_eq!(
            FrameError::Oversized { length: 9, max: 8 }.code(),
            "frame_too_large"
        );
    }

    #[test]
    fn tcp_frame_decode_never_panics_on_short_garbage() {
        // Every 0..=6-byte prefix built from a few interesting bytes.
        let alphabet = [0u8, 1, 9, 10, 11, 0x0F, 0x10, 0xFF];
        let mut stack = vec![Vec::new()];
        while let Some(input) = stack.pop() {
            for max in [0, 10, 64, DEFAULT_MAX_FRAME, usize::MAX] {
                let mut buf = BytesMut::from(&input[..]);
                while let Ok(Some(_)) = decode(&mut buf, max) {}
            }
            if input.len() < 6 {
                for &b in &alphabet {
                    let mut next = input.clone();
                    next.push(b);
                    stack.push(next);
                }
            }
        }
    }
}
