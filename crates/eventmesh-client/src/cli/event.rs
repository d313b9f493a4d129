//! The event `publish` and `request` send, from their flags: the payload
//! (`--data`, `--data @FILE`, `--data @-`, `--file`), the context
//! attributes (`--type`, `--source`, `--id`, `--subject`,
//! `--datacontenttype`) and the extensions (`--ext`, `--partition-key`).
//!
//! Invariants: every event built here has passed the same validating
//! parser the server runs, so a bad value is reported before anything is
//! sent; an extension name is checked where it is parsed, and the message
//! names the value at fault.

use std::io::Read;
use std::path::PathBuf;

use eventmesh_core::event::{is_json_media_type, valid_extension_name, PARTITION_KEY};
use eventmesh_core::{CloudEvent, Data, ExtValue};
use serde_json::Value;

use crate::error::Error;

/// The event to send.
#[derive(Debug, Clone, clap::Args)]
pub struct EventArgs {
    /// Payload: JSON (sent as JSON data, application/json) or else text
    /// (text/plain). @PATH reads it from a file, @- from standard input;
    /// a payload that itself starts with @ is written @@...
    #[arg(long, value_name = "DATA", conflicts_with = "file")]
    pub data: Option<String>,
    /// Read the payload from a file (same rules as --data; bytes that are
    /// not UTF-8 go as application/octet-stream).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// The event's type attribute.
    #[arg(long = "type", value_name = "TYPE", default_value = "eventmesh.cli")]
    pub ty: String,
    /// The event's source attribute.
    #[arg(long, value_name = "SRC", default_value = "/eventmesh/cli")]
    pub source: String,
    /// The event's id attribute (default: a new UUID).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// The event's subject attribute.
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// The event's datacontenttype, instead of the one the payload
    /// suggests: a JSON type (application/json, text/json, */*+json) needs
    /// a JSON payload; any other type sends the payload as text (as bytes,
    /// data_base64, when it is not UTF-8).
    #[arg(long, value_name = "MEDIA-TYPE")]
    pub datacontenttype: Option<String>,
    /// An extension attribute (repeatable). NAME=VALUE sends VALUE as a
    /// string; NAME:=VALUE sends a JSON integer or boolean (priority:=5,
    /// urgent:=true). NAME is lower-case letters and digits (CloudEvents
    /// recommends 20 at most).
    #[arg(long = "ext", value_name = "NAME=VALUE", value_parser = parse_ext)]
    pub ext: Vec<(String, ExtValue)>,
    /// The partitionkey extension: events with the same key go to the same
    /// partition, in order.
    #[arg(long, value_name = "KEY")]
    pub partition_key: Option<String>,
}

/// The attributes CloudEvents names: set with their own flags, never as
/// extensions.
const CONTEXT_ATTRIBUTES: [(&str, &str); 9] = [
    ("specversion", "it is always 1.0"),
    ("id", "use --id"),
    ("source", "use --source"),
    ("type", "use --type"),
    ("datacontenttype", "use --datacontenttype"),
    ("dataschema", "it is not an extension"),
    ("subject", "use --subject"),
    ("time", "it is not an extension"),
    ("data", "use --data"),
];

/// The length CloudEvents recommends an extension name stays within.
pub const RECOMMENDED_NAME_LEN: usize = 20;

/// `--ext NAME=VALUE` (a string) or `--ext NAME:=VALUE` (a JSON integer
/// or boolean).
pub fn parse_ext(arg: &str) -> Result<(String, ExtValue), String> {
    let (name, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not NAME=VALUE (or NAME:=VALUE)"))?;
    let (name, typed) = match name.strip_suffix(':') {
        Some(n) => (n, true),
        None => (name, false),
    };
    if !valid_extension_name(name) {
        return Err(format!(
            "{name:?} is not an extension name: CloudEvents allows lower-case letters a-z and \
             digits 0-9 only, 1 to 64 of them (20 at most recommended)"
        ));
    }
    if let Some((_, hint)) = CONTEXT_ATTRIBUTES.iter().find(|(n, _)| *n == name) {
        return Err(format!(
            "{name:?} is a CloudEvents context attribute, not an extension ({hint})"
        ));
    }
    if !typed {
        return Ok((name.to_string(), ExtValue::Str(value.to_string())));
    }
    match serde_json::from_str::<Value>(value) {
        Ok(Value::Bool(b)) => Ok((name.to_string(), ExtValue::Bool(b))),
        Ok(Value::Number(n)) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => {
            Ok((name.to_string(), ExtValue::Int(n.as_i64().unwrap_or(0))))
        }
        _ => Err(format!(
            "{value:?} (of {name}:=) is not a 32-bit integer, true or false; \
             write {name}={value} for a string"
        )),
    }
}

/// The `data` of an event from `--data`/`--file` bytes: JSON when they
/// parse as JSON, else text, else binary. Returns the data and its
/// `datacontenttype`.
pub fn event_data(raw: Vec<u8>) -> (Data, &'static str) {
    if let Ok(v) = serde_json::from_slice::<Value>(&raw) {
        let compact = serde_json::to_vec(&v).unwrap_or(raw);
        return (Data::Json(compact.into()), "application/json");
    }
    match String::from_utf8(raw) {
        Ok(s) => (Data::Text(s), "text/plain"),
        Err(e) => (
            Data::Binary(e.into_bytes().into()),
            "application/octet-stream",
        ),
    }
}

/// The data of `raw` sent as `content_type` says: JSON for a JSON type
/// (refused when it is not JSON), else text, or bytes when not UTF-8.
fn data_of_type(raw: Vec<u8>, content_type: &str) -> Result<Data, Error> {
    if is_json_media_type(content_type) {
        let v: Value = serde_json::from_slice(&raw).map_err(|e| {
            Error::InvalidArgument(format!(
                "the payload is not JSON, which --datacontenttype {content_type} says it is: {e}"
            ))
        })?;
        let compact = serde_json::to_vec(&v).unwrap_or(raw);
        return Ok(Data::Json(compact.into()));
    }
    Ok(match String::from_utf8(raw) {
        Ok(s) => Data::Text(s),
        Err(e) => Data::Binary(e.into_bytes().into()),
    })
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|e| Error::InvalidArgument(format!("cannot read {}: {e}", path.display())))
}

/// The payload `--data` or `--file` gives, if any.
fn payload(args: &EventArgs) -> Result<Option<Vec<u8>>, Error> {
    Ok(match (&args.data, &args.file) {
        (Some(d), _) if d == "@-" => {
            let mut raw = Vec::new();
            std::io::stdin()
                .read_to_end(&mut raw)
                .map_err(|e| Error::InvalidArgument(format!("cannot read standard input: {e}")))?;
            Some(raw)
        }
        (Some(d), _) if d.starts_with("@@") => Some(d.as_bytes()[1..].to_vec()),
        (Some(d), _) if d.starts_with('@') => Some(read_file(std::path::Path::new(&d[1..]))?),
        (Some(d), _) => Some(d.clone().into_bytes()),
        (None, Some(path)) => Some(read_file(path)?),
        (None, None) => None,
    })
}

/// The CloudEvent the event flags describe, validated. Bad values are
/// [`Error::InvalidArgument`].
pub fn build_event(args: &EventArgs) -> Result<CloudEvent, Error> {
    let mut event = CloudEvent {
        id: args
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        source: args.source.clone(),
        ty: args.ty.clone(),
        subject: args.subject.clone(),
        datacontenttype: args.datacontenttype.clone(),
        ..CloudEvent::default()
    };
    if let Some(raw) = payload(args)? {
        match &args.datacontenttype {
            Some(ct) => event.data = data_of_type(raw, ct)?,
            None => {
                let (data, content_type) = event_data(raw);
                event.data = data;
                event.datacontenttype = Some(content_type.to_string());
            }
        }
    }
    for (name, value) in &args.ext {
        if event.extension(name).is_some() {
            return Err(Error::InvalidArgument(format!(
                "--ext {name} is given twice"
            )));
        }
        event.set_extension(name, value.clone());
    }
    if let Some(key) = &args.partition_key {
        if event.extension(PARTITION_KEY).is_some() {
            return Err(Error::InvalidArgument(
                "the partition key is given twice (--partition-key and --ext partitionkey=)".into(),
            ));
        }
        event.set_extension(PARTITION_KEY, ExtValue::Str(key.clone()));
    }
    for (name, _) in &event.extensions {
        if name.len() > RECOMMENDED_NAME_LEN {
            eprintln!(
                "warning: the extension name {name:?} is longer than the {RECOMMENDED_NAME_LEN} \
                 characters CloudEvents recommends; some systems may refuse it"
            );
        }
    }
    // Round-trip through the validating parser: a bad --source, --type or
    // --datacontenttype is reported here, before anything is sent.
    CloudEvent::from_json_slice(&event.to_json()).map_err(|e| Error::InvalidArgument(e.to_string()))
}
