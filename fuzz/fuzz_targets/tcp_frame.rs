//! Fuzzes the TCP frame decoder and the Publish/Push payload parsers.
//!
//! The input is treated as bytes arriving on one connection. It is decoded
//! with the default frame limit and with a 64-byte limit, both in one piece
//! and fed one byte at a time; the two must give the same frames and end in
//! the same state. Every decoded frame must re-encode to bytes that decode to
//! the same frame, and every payload that parses as Publish or Push must
//! re-encode to the same payload.

#![no_main]

use bytes::{BufMut, BytesMut};
use eventmesh_core::tcp_frame::{
    decode, parse_publish, parse_push, publish_payload, push_payload, Frame, FrameError,
    DEFAULT_MAX_FRAME, HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

/// The frames decoded from `data` and how decoding stopped: `Ok(n)` with
/// `n` bytes left over waiting for more input, or the error.
type Outcome = (Vec<Frame>, Result<usize, FrameError>);

fn decode_whole(data: &[u8], max: usize) -> Outcome {
    let mut buf = BytesMut::from(data);
    let mut frames = Vec::new();
    loop {
        match decode(&mut buf, max) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return (frames, Ok(buf.len())),
            Err(e) => return (frames, Err(e)),
        }
    }
}

fn decode_bytewise(data: &[u8], max: usize) -> Outcome {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for &b in data {
        buf.put_u8(b);
        loop {
            match decode(&mut buf, max) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => return (frames, Err(e)),
            }
        }
    }
    (frames, Ok(buf.len()))
}

fn check_frame(frame: &Frame, max: usize) {
    // Re-encoding yields a frame that decodes to the same value, whole.
    let wire = frame.to_bytes();
    assert_eq!(wire.len(), 4 + HEADER_LEN + frame.payload.len());
    let mut buf = BytesMut::from(&wire[..]);
    assert_eq!(decode(&mut buf, max), Ok(Some(frame.clone())));
    assert!(buf.is_empty());

    // Any payload may be offered to the binary payload parsers.
    if let Ok((topic, event)) = parse_publish(&frame.payload) {
        let again = publish_payload(&topic, &event).expect("a parsed topic fits in u16");
        assert_eq!(again, frame.payload);
    }
    if let Ok((id, event)) = parse_push(&frame.payload) {
        assert_eq!(push_payload(&id, &event), frame.payload);
    }
}

fuzz_target!(|data: &[u8]| {
    for max in [DEFAULT_MAX_FRAME, 64] {
        let whole = decode_whole(data, max);
        for frame in &whole.0 {
            assert!(frame.payload.len() + HEADER_LEN <= max);
            check_frame(frame, max);
        }
        let bytewise = decode_bytewise(data, max);
        assert_eq!(
            whole, bytewise,
            "decoding in one piece and byte by byte differ"
        );
    }
});
