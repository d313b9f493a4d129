//! A subscription being read, whatever the transport: what `subscribe`
//! prints and `reply` answers. Acknowledgements and replies go back the
//! way the delivery came (over HTTP for SSE and polling).

use std::collections::VecDeque;
use std::time::Duration;

use eventmesh_core::CloudEvent;

use super::SubscribeTransport;
use crate::client::EventMeshClient;
use crate::error::Error;
use crate::sse::SseStream;
use crate::tcp::TcpClient;
use crate::types::{Delivery, SubscribeOptions};
use crate::ws::WsSession;

/// A subscription being read, whatever the transport.
pub(super) enum Source {
    Sse(SseStream),
    Ws(WsSession),
    Tcp(TcpClient),
    Poll {
        client_id: String,
        buffered: VecDeque<Delivery>,
    },
}

impl Source {
    /// Subscribes with `sub` over `transport` and opens the stream.
    pub(super) async fn open(
        client: &EventMeshClient,
        sub: SubscribeOptions,
        transport: SubscribeTransport,
    ) -> Result<Source, Error> {
        let client_id = sub.client_id.clone();
        Ok(match transport {
            SubscribeTransport::Sse => Source::Sse(client.sse(sub.into()).await?),
            SubscribeTransport::Ws => Source::Ws(client.websocket(sub.into()).await?),
            SubscribeTransport::Tcp => {
                let tcp = client.tcp(&client_id).await?;
                tcp.subscribe(sub).await?;
                Source::Tcp(tcp)
            }
            SubscribeTransport::Poll => {
                client.subscribe(sub).await?;
                Source::Poll {
                    client_id,
                    buffered: VecDeque::new(),
                }
            }
        })
    }

    /// The next delivery; `want` bounds how many a poll asks for.
    pub(super) async fn next(
        &mut self,
        client: &EventMeshClient,
        want: u64,
    ) -> Option<Result<Delivery, Error>> {
        match self {
            Source::Sse(s) => s.next().await,
            Source::Ws(s) => s.next().await,
            Source::Tcp(s) => s.next().await,
            Source::Poll {
                client_id,
                buffered,
            } => loop {
                if let Some(d) = buffered.pop_front() {
                    return Some(Ok(d));
                }
                let max = usize::try_from(want.clamp(1, 100)).unwrap_or(100);
                match client.poll(client_id, Duration::from_secs(30), max).await {
                    Ok(got) => buffered.extend(got),
                    Err(e) => return Some(Err(e)),
                }
            },
        }
    }

    pub(super) async fn ack(
        &self,
        client: &EventMeshClient,
        delivery_id: &str,
    ) -> Result<(), Error> {
        match self {
            Source::Ws(s) => s.ack(delivery_id),
            Source::Tcp(s) => s.ack(delivery_id).await,
            Source::Sse(_) | Source::Poll { .. } => client.ack(delivery_id).await,
        }
    }

    /// Answers the request `request` with `event` on the same transport
    /// (over HTTP for SSE and polling). Whether that acknowledged the
    /// request's delivery too (over TCP, one `REPLY_ACK` frame does both
    /// once the reply is taken).
    pub(super) async fn reply_to(
        &self,
        client: &EventMeshClient,
        request: &Delivery,
        event: &CloudEvent,
    ) -> Result<bool, Error> {
        match self {
            Source::Ws(s) => s.reply_to(request, event).await.map(|()| false),
            Source::Tcp(s) => s.reply_and_ack(request, event).await.map(|()| true),
            Source::Sse(_) | Source::Poll { .. } => {
                client.reply_to(request, event).await.map(|()| false)
            }
        }
    }

    /// Closes the connection; with `forget`, removes the subscription too.
    pub(super) async fn close(
        self,
        client: &EventMeshClient,
        client_id: &str,
        topic: &str,
        forget: bool,
    ) {
        let quick = client.clone().with_request_timeout(Duration::from_secs(3));
        match self {
            Source::Tcp(tcp) => {
                if forget {
                    let _ = tcp.unsubscribe(Some(topic)).await;
                }
                let _ = tcp.goodbye().await;
            }
            Source::Ws(ws) => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
                ws.close().await;
            }
            Source::Sse(sse) => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
                sse.close();
            }
            Source::Poll { .. } => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
            }
        }
    }
}
