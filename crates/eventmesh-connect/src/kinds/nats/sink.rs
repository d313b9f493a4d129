//! `nats-sink`: events out to NATS, each published, in order, as one
//! message in the binding's `format` (see `binding`).
//!
//! The subject is `subject` with `{subject}` and `{type}` replaced by the
//! event's (dots stay token separators; whitespace, wildcards and empty
//! tokens become `_`; no subject gives `_`). The template may hold no
//! other placeholder and must render to a subject without wildcards.
//!
//! Core mode answers once the messages are flushed into the connection:
//! at most once (a server dying then loses them), and a retried write may
//! publish some twice. JetStream mode sets `Nats-Msg-Id: <source>/<id>`
//! and answers once every message is acknowledged as stored, so a retried
//! write is stored once within the stream's duplicate window (2 minutes by
//! default). Either way a write fails at once while the connection is
//! down, and waits at most `timeout_ms` for each flush or acknowledgement.

use std::future::IntoFuture;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::Client;
use async_trait::async_trait;
use eventmesh_core::CloudEvent;

use super::binding::encode;
use super::{
    check_connection, check_subject, connect, unavailable, within, Format, Mode, NatsSinkConfig,
};
use crate::sdk::{ConnectorError, Sink, SinkContext, SinkKind};

/// The kind `nats-sink`.
pub struct NatsSink;

#[async_trait]
impl SinkKind for NatsSink {
    type Config = NatsSinkConfig;
    const NAME: &'static str = "nats-sink";
    const DESCRIPTION: &'static str = "Publishes events to a NATS subject as CloudEvents \
        (binary or structured); in JetStream mode deduplicated by Nats-Msg-Id and acknowledged";

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        super::targets_of(&c.servers)
    }

    fn check(c: &Self::Config) -> Result<(), String> {
        check_connection(&c.servers, &c.user, &c.password, &c.token)?;
        check_template(&c.subject)?;
        if c.timeout_ms == 0 {
            return Err("timeout_ms must be positive".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        let client = connect(&ctx.connector, &c.servers, &c.user, &c.password, &c.token).await?;
        let timeout = Duration::from_millis(c.timeout_ms);
        let js = (c.mode == Mode::Jetstream).then(|| {
            jetstream::ContextBuilder::new()
                .timeout(timeout)
                .build(client.clone())
        });
        let (subject, format) = (c.subject, c.format);
        Ok(Box::new(NatsSinkWriter {
            client,
            js,
            subject,
            format,
            timeout,
        }))
    }
}

struct NatsSinkWriter {
    client: Client,
    js: Option<jetstream::Context>,
    subject: String,
    format: Format,
    timeout: Duration,
}

#[async_trait]
impl Sink for NatsSinkWriter {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        if self.client.connection_state() != State::Connected {
            return Err(ConnectorError::unavailable("not connected to NATS"));
        }
        let mut acks = Vec::new();
        for ev in events {
            let subject = render_subject(&self.subject, ev.subject.as_deref(), &ev.ty);
            let what = format!("publish to {subject}");
            let (headers, body) = encode(ev, self.format, self.js.is_some())
                .map_err(|e| unavailable(&format!("event {}", ev.id), e))?;
            let Some(js) = &self.js else {
                let sent = self
                    .client
                    .publish_with_headers(subject, headers, body)
                    .await;
                sent.map_err(|e| unavailable(&what, e))?;
                continue;
            };
            let message = PublishMessage::build().headers(headers).payload(body);
            let ack = js.send_publish(subject, message).await;
            acks.push((what.clone(), ack.map_err(|e| unavailable(&what, e))?));
        }
        if self.js.is_none() {
            return within("flush to NATS", self.timeout, self.client.flush()).await;
        }
        for (what, ack) in acks {
            within(&what, self.timeout, ack.into_future()).await?;
        }
        Ok(())
    }
}

/// A sink's subject for one event: `{subject}` and `{type}` replaced, any
/// other text kept.
fn render_subject(template: &str, subject: Option<&str>, ty: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let at = &rest[i..];
        if let Some(r) = at.strip_prefix("{subject}") {
            out.push_str(&token_safe(subject.unwrap_or("")));
            rest = r;
        } else if let Some(r) = at.strip_prefix("{type}") {
            out.push_str(&token_safe(ty));
            rest = r;
        } else {
            out.push('{');
            rest = &at[1..];
        }
    }
    out.push_str(rest);
    out
}

/// An attribute value fit for a subject: dots stay separators, empty
/// tokens, whitespace and wildcards become `_`.
fn token_safe(v: &str) -> String {
    let token = |t: &str| -> String {
        if t.is_empty() {
            return "_".into();
        }
        let bad = |c: char| c.is_whitespace() || c.is_control() || c == '*' || c == '>';
        t.chars().map(|c| if bad(c) { '_' } else { c }).collect()
    };
    v.split('.').map(token).collect::<Vec<_>>().join(".")
}

fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let at = &rest[i..];
        let end = at.find('}').map_or(at.len(), |e| e + 1);
        if !matches!(&at[..end], "{subject}" | "{type}") {
            return Err(format!(
                "subject: unknown placeholder {:?}; use {{subject}} or {{type}}",
                &at[..end]
            ));
        }
        rest = &at[end..];
    }
    check_subject(&render_subject(template, Some("x"), "x"), false)
        .map_err(|e| format!("subject: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_subjects_are_rendered_from_the_event() {
        let t = "events.{type}.{subject}";
        assert_eq!(
            render_subject(t, Some("eu/1"), "order.created"),
            "events.order.created.eu/1"
        );
        assert_eq!(render_subject(t, None, "a b"), "events.a_b._");
        assert_eq!(
            render_subject(t, Some(".x..y."), "*>"),
            "events.__._.x._.y._"
        );
        // A placeholder inside a value is not expanded again.
        assert_eq!(render_subject(t, Some("{type}"), "t"), "events.t.{type}");
        assert_eq!(render_subject("plain", None, "t"), "plain");
        assert_eq!(check_template(t), Ok(()));
        let unknown = "subject: unknown placeholder \"{id}\"; use {subject} or {type}";
        assert_eq!(check_template("a.{id}"), Err(unknown.into()));
        assert_eq!(
            check_template("a.*"),
            Err("subject: \"a.*\" contains a wildcard".into())
        );
        assert_eq!(check_template(""), Err("subject: must not be empty".into()));
    }
}
