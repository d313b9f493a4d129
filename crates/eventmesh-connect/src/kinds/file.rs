//! `file-source` and `file-sink`: JSON lines on the local disk.
//!
//! **Source.** Follows a file of JSON lines as `tail -F` would: each complete
//! line (ended by `\n`) becomes one event, its `data` the line (JSON kept as
//! JSON, anything else as text), its `id` `<inode>-<offset of the line>`.
//! The position is `{"file": <inode>, "offset": <byte after the last line
//! published>}`. Rotation is followed: when the path names a new file, the
//! old one is read to its end first (a last line without `\n` included),
//! then the new one from its start; a file truncated in place
//! (`copytruncate`) is read again from its start. Reopened from a position
//! whose file has been rotated away, the source looks for that inode among
//! the path's siblings (`app.log.1`) and finishes it before the new file, so
//! a crash during a rotation loses nothing. A partial last line is left
//! until its `\n` comes.
//!
//! **Sink.** Appends one line per event: the whole CloudEvent in its JSON
//! format (`format: "event"`, the default) or its `data` alone (`"data"`).
//! With `fsync: "batch"` (the default) each write is `fdatasync`ed before it
//! counts, so an acknowledged event is on disk; `"none"` leaves it to the
//! operating system. Delivery is at least once: a write retried after a
//! crash appends its lines again (consumers deduplicate by `source` + `id`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_core::event::Data;
use eventmesh_core::CloudEvent;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::sdk::{
    data_of, event, ConnectorError, Position, Record, Sink, SinkContext, SinkKind, Source,
    SourceContext, SourceKind,
};

/// Where a source starts the first time (no position yet).
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// Every line already in the file.
    #[default]
    Beginning,
    /// Only lines written after the connector starts.
    End,
}

fn default_line_type() -> String {
    "file.line".to_string()
}
fn default_poll_ms() -> u64 {
    200
}
fn default_batch() -> usize {
    500
}

/// The `config` of a `file-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// The JSON-lines file to follow (it may not exist yet).
    pub path: String,
    /// The `type` of the events.
    #[serde(default = "default_line_type", rename = "type")]
    pub ty: String,
    /// Where to start the first time: `beginning` or `end`.
    #[serde(default)]
    pub start: Start,
    /// How often to look for new lines, in milliseconds.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// The most lines published at once.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path must not be empty".into());
    }
    if !Path::new(path).is_absolute() {
        return Err(format!("path {path:?} must be absolute"));
    }
    Ok(())
}

/// The kind.
pub struct FileSource;

#[async_trait]
impl SourceKind for FileSource {
    type Config = FileSourceConfig;
    const NAME: &'static str = "file-source";
    const DESCRIPTION: &'static str =
        "Follows a JSON-lines file (rotation and truncation included); one event per line";

    fn check(config: &Self::Config) -> Result<(), String> {
        check_path(&config.path)?;
        if config.poll_ms == 0 || config.poll_ms > 60_000 {
            return Err(format!("poll_ms {} must be 1..=60000", config.poll_ms));
        }
        if config.batch == 0 || config.batch > 10_000 {
            return Err(format!("batch {} must be 1..=10000", config.batch));
        }
        Ok(())
    }

    async fn open(
        config: Self::Config,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        let path = PathBuf::from(&config.path);
        if path.is_dir() {
            return Err(ConnectorError::config(format!(
                "{} is a directory",
                path.display()
            )));
        }
        let mut source = Tail {
            connector: ctx.connector,
            path,
            config,
            reading: None,
            draining: false,
            fresh: ctx.position.is_none(),
        };
        if let Some(pos) = ctx.position {
            let at = parse_position(&pos).ok_or_else(|| {
                ConnectorError::config(format!("position {pos} is not a file position"))
            })?;
            source.resume(at).await?;
        }
        Ok(Box::new(source))
    }
}

/// A place in a file: its inode and a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct At {
    file: u64,
    offset: u64,
}

fn parse_position(p: &Position) -> Option<At> {
    Some(At {
        file: p.get("file")?.as_u64()?,
        offset: p.get("offset")?.as_u64()?,
    })
}

fn position(at: At) -> Position {
    json!({"file": at.file, "offset": at.offset})
}

/// Adds the record of one line, read at `start` and ending at `end`
/// (blank lines make none).
fn line_record(out: &mut Vec<Record>, connector: &str, ty: &str, line: &[u8], start: At, end: u64) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    out.push(Record {
        event: event(
            connector,
            format!("{}-{}", start.file, start.offset),
            ty,
            data_of(line),
        ),
        position: position(At {
            file: start.file,
            offset: end,
        }),
        topic: None,
    });
}

/// The file being read.
struct Reading {
    file: tokio::fs::File,
    at: At,
    /// Bytes read after `at` that do not end a line yet.
    partial: Vec<u8>,
}

struct Tail {
    connector: String,
    path: PathBuf,
    config: FileSourceConfig,
    reading: Option<Reading>,
    /// `reading` is a rotated-away file: read to its end, then the path.
    draining: bool,
    /// No position yet: `start` decides where the first file is read from.
    fresh: bool,
}

fn unavailable(path: &Path, e: std::io::Error) -> ConnectorError {
    ConnectorError::unavailable(format!("{}: {e}", path.display()))
}

async fn open_at(path: &Path, offset: u64) -> Result<Option<Reading>, ConnectorError> {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unavailable(path, e)),
    };
    let meta = file.metadata().await.map_err(|e| unavailable(path, e))?;
    // A file shorter than the offset was truncated: read it from its start.
    let offset = if meta.len() < offset { 0 } else { offset };
    file.seek(std::io::SeekFrom::Start(offset))
        .await
        .map_err(|e| unavailable(path, e))?;
    Ok(Some(Reading {
        file,
        at: At {
            file: meta.ino(),
            offset,
        },
        partial: Vec::new(),
    }))
}

/// A sibling of `path` (same directory, a name starting with its name) with
/// inode `ino`: where a rotated file went.
fn rotated_sibling(path: &Path, ino: u64) -> Option<PathBuf> {
    let dir = path.parent()?;
    let name = path.file_name()?.to_str()?;
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(name)))
        .find(|e| e.metadata().is_ok_and(|m| m.ino() == ino))
        .map(|e| e.path())
}

impl Tail {
    /// Opens the file a position names: the path, or the sibling it was
    /// rotated to (finished first), or else the path from its start.
    async fn resume(&mut self, at: At) -> Result<(), ConnectorError> {
        let current = std::fs::metadata(&self.path).ok().map(|m| m.ino());
        if current == Some(at.file) {
            self.reading = open_at(&self.path, at.offset).await?;
            return Ok(());
        }
        if let Some(old) = rotated_sibling(&self.path, at.file) {
            if let Some(r) = open_at(&old, at.offset).await? {
                self.reading = Some(r);
                self.draining = true;
                return Ok(());
            }
        }
        tracing::warn!(
            connector = %self.connector,
            path = %self.path.display(),
            "the file of the last position is gone; reading the current file from its start"
        );
        self.reading = open_at(&self.path, 0).await?;
        Ok(())
    }

    /// Lines read from the current file, up to the batch size; at a
    /// rotated file's end its unterminated last line too.
    async fn read_lines(&mut self, at_end: bool) -> Result<Vec<Record>, ConnectorError> {
        let Some(r) = self.reading.as_mut() else {
            return Ok(Vec::new());
        };
        let r_path = self.path.clone();
        let (connector, ty, batch) = (&self.connector, &self.config.ty, self.config.batch);
        let emit = |out: &mut Vec<Record>, line: &[u8], file, start, end| {
            line_record(
                out,
                connector,
                ty,
                line,
                At {
                    file,
                    offset: start,
                },
                end,
            )
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        loop {
            let n = r
                .file
                .read(&mut buf)
                .await
                .map_err(|e| unavailable(&r_path, e))?;
            r.partial.extend_from_slice(&buf[..n]);
            // Complete lines out of `partial`.
            let mut consumed = 0;
            while out.len() < batch {
                let Some(nl) = r.partial[consumed..].iter().position(|&b| b == b'\n') else {
                    break;
                };
                let line = &r.partial[consumed..consumed + nl];
                let start = r.at.offset + consumed as u64;
                consumed += nl + 1;
                emit(
                    &mut out,
                    line,
                    r.at.file,
                    start,
                    r.at.offset + consumed as u64,
                );
            }
            if n == 0 && at_end && consumed < r.partial.len() && out.len() < batch {
                let line = r.partial[consumed..].to_vec();
                let start = r.at.offset + consumed as u64;
                consumed = r.partial.len();
                emit(
                    &mut out,
                    &line,
                    r.at.file,
                    start,
                    r.at.offset + consumed as u64,
                );
            }
            r.partial.drain(..consumed);
            r.at.offset += consumed as u64;
            if n == 0 || out.len() >= batch {
                // Unused read bytes stay in `partial`, after `at`.
                return Ok(out);
            }
        }
    }

    /// Switches files when the path names another one (rotation) or the
    /// file got shorter (truncation). True when something changed.
    async fn follow_path(&mut self) -> Result<bool, ConnectorError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(unavailable(&self.path, e)),
        };
        match (&self.reading, meta) {
            (None, Some(meta)) => {
                let from = if self.fresh && self.config.start == Start::End {
                    meta.len()
                } else {
                    0
                };
                self.reading = open_at(&self.path, from).await?;
                self.fresh = false;
                Ok(self.reading.is_some())
            }
            (Some(r), Some(meta)) if meta.ino() != r.at.file || self.draining => {
                // Rotated: the old file was read to its end (with its last
                // unterminated line) before this is called.
                self.draining = false;
                self.reading = open_at(&self.path, 0).await?;
                Ok(true)
            }
            (Some(r), Some(meta)) if meta.len() < r.at.offset => {
                tracing::info!(path = %self.path.display(), "file truncated; reading it from its start");
                self.reading = open_at(&self.path, 0).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Whether the file being read is no longer the one at the path.
    fn rotated(&self) -> bool {
        let Some(r) = &self.reading else {
            return false;
        };
        self.draining || std::fs::metadata(&self.path).is_ok_and(|m| m.ino() != r.at.file)
    }
}

#[async_trait]
impl Source for Tail {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            if self.reading.is_none() {
                self.follow_path().await?;
            }
            let rotated = self.rotated();
            let lines = self.read_lines(rotated).await?;
            if !lines.is_empty() {
                return Ok(lines);
            }
            if self.follow_path().await? {
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            tokio::time::sleep(Duration::from_millis(self.config.poll_ms)).await;
        }
    }

    async fn lag(&mut self) -> Option<u64> {
        let r = self.reading.as_ref()?;
        let len = std::fs::metadata(&self.path).ok()?.len();
        Some(len.saturating_sub(r.at.offset))
    }
}

/// What a sink's line holds.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LineFormat {
    /// The whole CloudEvent in its JSON format.
    #[default]
    Event,
    /// The event's `data`: JSON as is, text and bytes as JSON strings
    /// (bytes in base64).
    Data,
}

/// When a sink's writes reach the disk.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// `fdatasync` after each write, before the events are acknowledged.
    #[default]
    Batch,
    /// Left to the operating system (a power cut may lose acknowledged lines).
    None,
}

/// The `config` of a `file-sink`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The file lines are appended to (created if missing; its directory
    /// must exist).
    pub path: String,
    /// `event` (the whole CloudEvent) or `data` (its payload).
    #[serde(default)]
    pub format: LineFormat,
    /// `batch` or `none`.
    #[serde(default)]
    pub fsync: Fsync,
}

/// The kind.
pub struct FileSink;

#[async_trait]
impl SinkKind for FileSink {
    type Config = FileSinkConfig;
    const NAME: &'static str = "file-sink";
    const DESCRIPTION: &'static str =
        "Appends one JSON line per event (the CloudEvent or its data), fsynced per batch";

    fn check(config: &Self::Config) -> Result<(), String> {
        check_path(&config.path)
    }

    async fn open(
        config: Self::Config,
        _ctx: SinkContext,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        let path = PathBuf::from(&config.path);
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound
                | std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::IsADirectory => {
                    ConnectorError::config(format!("cannot open {}: {e}", path.display()))
                }
                _ => unavailable(&path, e),
            })?;
        Ok(Box::new(Append { path, config, file }))
    }
}

struct Append {
    path: PathBuf,
    config: FileSinkConfig,
    file: tokio::fs::File,
}

/// A sink line for `ev` (without its `\n`).
pub fn line_of(ev: &CloudEvent, format: LineFormat) -> Vec<u8> {
    match format {
        LineFormat::Event => ev.to_json(),
        LineFormat::Data => match &ev.data {
            Data::Json(b) => b.to_vec(),
            Data::None => b"null".to_vec(),
            Data::Text(t) => serde_json::to_vec(t).unwrap_or_default(),
            Data::Binary(b) => {
                use base64::Engine as _;
                serde_json::to_vec(&base64::engine::general_purpose::STANDARD.encode(b))
                    .unwrap_or_default()
            }
        },
    }
}

#[async_trait]
impl Sink for Append {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        let mut buf = Vec::new();
        for ev in events {
            let mut line = line_of(ev, self.config.format);
            // JSON never holds a raw newline, but a line must stay one.
            line.retain(|&b| b != b'\n');
            buf.extend_from_slice(&line);
            buf.push(b'\n');
        }
        self.file
            .write_all(&buf)
            .await
            .map_err(|e| unavailable(&self.path, e))?;
        if self.config.fsync == Fsync::Batch {
            self.file
                .sync_data()
                .await
                .map_err(|e| unavailable(&self.path, e))?;
        } else {
            self.file
                .flush()
                .await
                .map_err(|e| unavailable(&self.path, e))?;
        }
        Ok(())
    }
}
