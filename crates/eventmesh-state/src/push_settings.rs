//! How a webhook subscription's events are pushed: the CloudEvents HTTP
//! content mode the receiver chose (binary, structured or batched), the
//! batch bounds, and whether the CloudEvents webhook validation handshake
//! runs before the first push to its origin.
//!
//! Stored inside the subscription (flattened, camelCase: `contentMode`,
//! `batchSize`, `batchLingerMs`, `webhookHandshake`), each key only when it
//! is not the default, so subscriptions stored before these settings
//! existed load as binary-mode pushes with the runtime's default handshake.
//!
//! Invariant: [`PushSettings::check`] is the one validation, whatever the
//! transport; its errors name the field (in its camelCase name) and value.

use serde::{Deserialize, Serialize};

/// Most events in one batched push.
pub const MAX_BATCH_SIZE: u32 = 1000;
/// Events in one batched push when the subscription does not say.
pub const DEFAULT_BATCH_SIZE: u32 = 100;
/// Longest wait for more events before a partial batch goes out, in ms.
pub const MAX_BATCH_LINGER_MS: u64 = 10_000;
/// The wait for more events when the subscription does not say, in ms.
pub const DEFAULT_BATCH_LINGER_MS: u64 = 10;

/// The CloudEvents HTTP content mode of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    /// One event per POST, attributes as `ce-*` headers, data as the body.
    #[default]
    Binary,
    /// One event per POST as `application/cloudevents+json`.
    Structured,
    /// Up to `batchSize` events per POST as
    /// `application/cloudevents-batch+json`.
    Batch,
}

impl ContentMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ContentMode::Binary => "binary",
            ContentMode::Structured => "structured",
            ContentMode::Batch => "batch",
        }
    }

    /// `binary`, `structured` or `batch` (case-insensitive); the reason
    /// otherwise.
    pub fn parse(v: &str) -> Result<ContentMode, String> {
        match v.to_ascii_lowercase().as_str() {
            "binary" => Ok(ContentMode::Binary),
            "structured" => Ok(ContentMode::Structured),
            "batch" => Ok(ContentMode::Batch),
            _ => Err(format!(
                "{v:?} is not a content mode (binary, structured or batch)"
            )),
        }
    }

    fn is_binary(&self) -> bool {
        *self == ContentMode::Binary
    }
}

/// A subscription's push settings as asked for (`None`: the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushSettings {
    #[serde(default, skip_serializing_if = "ContentMode::is_binary")]
    pub content_mode: ContentMode,
    /// Batch mode: most events per POST (1 to [`MAX_BATCH_SIZE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Batch mode: how long to wait for more events before sending a
    /// partial batch (0 to [`MAX_BATCH_LINGER_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_linger_ms: Option<u64>,
    /// Whether the validation handshake runs; `None`: the runtime's
    /// default (`eventmesh.webhook.handshake.enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_handshake: Option<bool>,
}

/// A push setting refused: the field (camelCase) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSettingError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for PushSettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl PushSettings {
    pub fn is_default(&self) -> bool {
        *self == PushSettings::default()
    }

    /// Events per batched POST.
    pub fn batch_size(&self) -> u32 {
        self.batch_size.unwrap_or(DEFAULT_BATCH_SIZE)
    }

    /// The wait for more events before a partial batch goes out, in ms.
    pub fn batch_linger_ms(&self) -> u64 {
        self.batch_linger_ms.unwrap_or(DEFAULT_BATCH_LINGER_MS)
    }

    /// Checks the settings of a subscription; `webhook`: it has a URL
    /// (the settings are about pushes, a pulling subscription takes none).
    pub fn check(&self, webhook: bool) -> Result<(), PushSettingError> {
        let err = |field, message: String| Err(PushSettingError { field, message });
        if !webhook && !self.is_default() {
            let field = if !self.content_mode.is_binary() {
                "contentMode"
            } else if self.batch_size.is_some() {
                "batchSize"
            } else if self.batch_linger_ms.is_some() {
                "batchLingerMs"
            } else {
                "webhookHandshake"
            };
            return err(
                field,
                "applies to webhook subscriptions only (give a url)".into(),
            );
        }
        if self.content_mode != ContentMode::Batch {
            if let Some(n) = self.batch_size {
                return err(
                    "batchSize",
                    format!(
                        "{n} is given, but the content mode is {} (it applies to batch only)",
                        self.content_mode.as_str()
                    ),
                );
            }
            if let Some(ms) = self.batch_linger_ms {
                return err(
                    "batchLingerMs",
                    format!(
                        "{ms} is given, but the content mode is {} (it applies to batch only)",
                        self.content_mode.as_str()
                    ),
                );
            }
        }
        if let Some(n) = self.batch_size {
            if !(1..=MAX_BATCH_SIZE).contains(&n) {
                return err(
                    "batchSize",
                    format!("{n} is out of range: 1 to {MAX_BATCH_SIZE} events per push"),
                );
            }
        }
        if let Some(ms) = self.batch_linger_ms {
            if ms > MAX_BATCH_LINGER_MS {
                return err(
                    "batchLingerMs",
                    format!("{ms} is out of range: 0 to {MAX_BATCH_LINGER_MS} milliseconds"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_left_out_and_old_records_load() {
        let d = PushSettings::default();
        assert_eq!(serde_json::to_value(d).unwrap(), serde_json::json!({}));
        let back: PushSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(back, d);
        assert_eq!((d.batch_size(), d.batch_linger_ms()), (100, 10));
        let b = PushSettings {
            content_mode: ContentMode::Batch,
            batch_size: Some(5),
            batch_linger_ms: Some(0),
            webhook_handshake: Some(false),
        };
        let v = serde_json::to_value(b).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"contentMode": "batch", "batchSize": 5, "batchLingerMs": 0, "webhookHandshake": false})
        );
        assert_eq!(serde_json::from_value::<PushSettings>(v).unwrap(), b);
    }

    #[test]
    fn checks_name_the_field_and_value() {
        let batch = |size, linger| PushSettings {
            content_mode: ContentMode::Batch,
            batch_size: size,
            batch_linger_ms: linger,
            webhook_handshake: None,
        };
        assert_eq!(batch(Some(1), Some(0)).check(true), Ok(()));
        assert_eq!(batch(Some(1000), Some(10_000)).check(true), Ok(()));
        let e = batch(Some(0), None).check(true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "batchSize: 0 is out of range: 1 to 1000 events per push"
        );
        let e = batch(Some(1001), None).check(true).unwrap_err();
        assert_eq!(e.field, "batchSize");
        let e = batch(None, Some(10_001)).check(true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "batchLingerMs: 10001 is out of range: 0 to 10000 milliseconds"
        );
        let e = PushSettings {
            batch_size: Some(3),
            ..Default::default()
        }
        .check(true)
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "batchSize: 3 is given, but the content mode is binary (it applies to batch only)"
        );
        let e = batch(None, None).check(false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "contentMode: applies to webhook subscriptions only (give a url)"
        );
        assert_eq!(PushSettings::default().check(false), Ok(()));
        assert_eq!(
            ContentMode::parse("Structured"),
            Ok(ContentMode::Structured)
        );
        assert_eq!(
            ContentMode::parse("json").unwrap_err(),
            "\"json\" is not a content mode (binary, structured or batch)"
        );
    }
}
