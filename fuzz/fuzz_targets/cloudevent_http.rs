//! Fuzzes the CloudEvents parsing behind the HTTP publish routes.
//!
//! The input is parsed three ways:
//! - structured mode: the whole input as one event (`from_json_slice`);
//! - batch mode: the whole input as a JSON array of events
//!   (`batch_from_json_slice`);
//! - binary mode: the input up to the first blank line (`\n\n`) is a header
//!   block of `name: value` lines (`content-type` is the content type, every
//!   other line a header); the rest is the body (`from_binary_mode`).
//!
//! Every accepted event must survive a round trip: its structured JSON form
//! (`write_json`) must parse again, to an event with the same attributes and
//! extensions and the same data. JSON data is compared by kind only:
//! binary-mode JSON `null` data becomes no data once written out.

#![no_main]

use bytes::Bytes;
use eventmesh_core::{CloudEvent, Data};
use libfuzzer_sys::fuzz_target;

fn round_trip(event: &CloudEvent) {
    let mut json = Vec::new();
    event.write_json(&mut json);
    let again = match CloudEvent::from_json_slice(&json) {
        Ok(e) => e,
        Err(e) => panic!(
            "write_json produced an event that does not parse: {e}\nevent: {event:?}\njson: {}",
            String::from_utf8_lossy(&json)
        ),
    };
    assert_eq!(again.id, event.id);
    assert_eq!(again.source, event.source);
    assert_eq!(again.ty, event.ty);
    assert_eq!(again.datacontenttype, event.datacontenttype);
    assert_eq!(again.dataschema, event.dataschema);
    assert_eq!(again.subject, event.subject);
    assert_eq!(again.time, event.time);
    assert_eq!(again.extensions, event.extensions);
    match (&event.data, &again.data) {
        (Data::Json(_), Data::Json(_) | Data::None) => {}
        (before, after) => assert_eq!(before, after, "data changed in the round trip"),
    }
}

/// Splits the input into binary-mode headers, content type and body.
fn binary_parts(data: &[u8]) -> (String, Bytes) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (
            String::from_utf8_lossy(&data[..i]).into_owned(),
            Bytes::copy_from_slice(&data[i + 2..]),
        ),
        None => (String::from_utf8_lossy(data).into_owned(), Bytes::new()),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = CloudEvent::from_json_slice(data) {
        round_trip(&event);
    }
    if let Ok(events) = CloudEvent::batch_from_json_slice(data) {
        for event in &events {
            round_trip(event);
        }
    }

    let (head, body) = binary_parts(data);
    let mut headers = Vec::new();
    let mut content_type = None;
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim_start_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value);
        } else {
            headers.push((name, value));
        }
    }
    if let Ok(event) = CloudEvent::from_binary_mode(headers, content_type, body) {
        round_trip(&event);
    }
});
