//! The `lf.a2a.v1.A2AService`: each RPC turns its request message into
//! the ProtoJSON params of the binding-neutral call layer
//! (`eventmesh_a2a_gateway::call`), which runs the gate and the
//! operation, and turns the answer back into the response message; the
//! two streaming RPCs send each event of the call's stream, the last one
//! included, then end.
//!
//! What the binding itself decides:
//! - The agent: the request's `tenant` field names it (the agent's card
//!   lists this listener's URL with `tenant` set to the agent id, and the
//!   A2A SDKs copy it into every request). Without one the call is
//!   gateway-wide, as on the JSON-RPC endpoint `/a2a`: a task method
//!   finds the task's agent, a send needs `metadata.agentId`.
//! - The caller: metadata `authorization: Bearer <token>` and, over mutual
//!   TLS, the verified client certificate of the connection.
//! - The version: metadata `a2a-version`. This service is A2A 1.0; absent,
//!   it is taken as 1.0 (the proto says which version the messages are),
//!   and any other version is refused with `VERSION_NOT_SUPPORTED`.
//! - The URL cards name as the JSON-RPC endpoint (the extended card):
//!   `eventmesh.a2a.public.url`, else the host the client reached with
//!   the traffic port.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use eventmesh_a2a::rpc::{RpcError, VERSION_NOT_SUPPORTED};
use eventmesh_a2a_gateway::call::{self, Answer, Method, Streaming, Version};
use eventmesh_a2a_gateway::Gateway;
use eventmesh_api::Caller;
use eventmesh_security::{Identity, Transport};
use futures::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use crate::json;
use crate::pb;
use crate::status;

/// Where the traffic port is reached, for the URLs cards name.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `eventmesh.a2a.public.url`, when set.
    pub public_url: Option<String>,
    /// The traffic HTTP port.
    pub traffic_port: u16,
    /// The traffic port serves TLS.
    pub traffic_tls: bool,
}

/// The connection a request came over; the server puts it into every
/// request's extensions.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The identity of the connection's verified client certificate.
    pub certificate: Option<Arc<Identity>>,
}

/// The `:authority` (host and port) the client addressed; the server
/// puts it into every request's extensions.
#[derive(Debug, Clone)]
pub struct Authority(pub String);

/// The A2A service over the gateway.
pub struct A2a {
    gw: Arc<Gateway>,
    settings: Settings,
}

impl A2a {
    pub fn new(gw: Arc<Gateway>, settings: Settings) -> A2a {
        A2a { gw, settings }
    }
}

/// A stream of `StreamResponse`s.
pub type Events = Pin<Box<dyn Stream<Item = Result<pb::StreamResponse, Status>> + Send>>;

/// What every call takes from its request besides the message.
struct Context {
    caller: Caller,
    base: String,
}

/// The bearer credential of `authorization: Bearer <token>` (the scheme in
/// any case).
fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    let value = metadata.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// The version `a2a-version` asks for: 1.0 when absent or any 1.x.
fn version(metadata: &tonic::metadata::MetadataMap) -> Result<Version, Status> {
    let Some(raw) = metadata.get("a2a-version") else {
        return Ok(Version::V1);
    };
    let text = raw.to_str().unwrap_or("").trim();
    match eventmesh_a2a::rpc::version_from_header(Some(text)) {
        Ok(Version::V1) => Ok(Version::V1),
        Ok(_) | Err(_) => Err(status::a2a(&RpcError::new(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A version {text:?} is not supported by lf.a2a.v1.A2AService, which speaks 1.0 \
                 (0.3 clients use the JSON-RPC binding)"
            ),
        ))),
    }
}

/// The host of an authority (`[::1]:50051` → `[::1]`, `mesh:443` → `mesh`).
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

impl A2a {
    fn context<T>(&self, req: &Request<T>) -> Result<Context, Status> {
        let peer = req.extensions().get::<Peer>();
        let mut caller = Caller::new(
            Transport::Grpc,
            bearer(req.metadata()),
            peer.map(|p| p.addr),
        );
        caller.certificate = peer.and_then(|p| p.certificate.clone());
        let base = match &self.settings.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => {
                let host = req
                    .extensions()
                    .get::<Authority>()
                    .map_or("127.0.0.1", |a| host_of(&a.0));
                let scheme = if self.settings.traffic_tls {
                    "https"
                } else {
                    "http"
                };
                format!("{scheme}://{host}:{}", self.settings.traffic_port)
            }
        };
        Ok(Context { caller, base })
    }

    /// Runs one call with the request's message as params.
    async fn call<T>(&self, method: Method, req: Request<T>) -> Result<Answer, Status>
    where
        T: prost::Message + Serialize,
    {
        let version = version(req.metadata())?;
        let ctx = self.context(&req)?;
        let message = req.into_inner();
        let raw = message.encode_to_vec();
        let (params, tenant) = json::request_params(&message).map_err(status::invalid)?;
        let request = call::Request {
            method,
            version,
            params,
            scope: tenant.as_deref(),
            base: &ctx.base,
            raw: &raw,
        };
        call::call(&self.gw, &ctx.caller, request)
            .await
            .map_err(status::refused)
    }

    /// A call answered with one message.
    async fn unary<T, R>(&self, method: Method, req: Request<T>) -> Result<Response<R>, Status>
    where
        T: prost::Message + Serialize,
        R: DeserializeOwned,
    {
        match self.call(method, req).await? {
            Answer::Value(v) => json::from_json(v)
                .map(Response::new)
                .map_err(|e| status::internal(format!("the answer does not fit the proto: {e}"))),
            Answer::Stream(_) => Err(status::internal("a stream where one answer was due")),
        }
    }

    /// A call answered with a stream of events.
    async fn streaming<T>(
        &self,
        method: Method,
        req: Request<T>,
    ) -> Result<Response<Events>, Status>
    where
        T: prost::Message + Serialize,
    {
        match self.call(method, req).await? {
            Answer::Stream(s) => Ok(Response::new(events(s))),
            Answer::Value(_) => Err(status::internal("one answer where a stream was due")),
        }
    }
}

/// The call's events as `StreamResponse`s, ending after the last one (or
/// after an event that does not fit the proto, sent as an error).
pub fn events(stream: Streaming) -> Events {
    Box::pin(futures::stream::unfold(Some(stream), |stream| async move {
        let mut stream = stream?;
        let (event, last) = stream.next().await?;
        let item = json::convert::<_, pb::StreamResponse>(&event)
            .map_err(|e| status::internal(format!("an event does not fit the proto: {e}")));
        let more = !last && item.is_ok();
        Some((item, more.then_some(stream)))
    }))
}

#[tonic::async_trait]
impl pb::a2a_service_server::A2aService for A2a {
    async fn send_message(
        &self,
        req: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        self.unary(Method::SendMessage, req).await
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        req: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streaming(Method::SendStreamingMessage, req).await
    }

    async fn get_task(
        &self,
        req: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        self.unary(Method::GetTask, req).await
    }

    async fn list_tasks(
        &self,
        req: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.unary(Method::ListTasks, req).await
    }

    async fn cancel_task(
        &self,
        req: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        self.unary(Method::CancelTask, req).await
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        req: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streaming(Method::SubscribeToTask, req).await
    }

    async fn create_task_push_notification_config(
        &self,
        req: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(Method::CreateTaskPushNotificationConfig, req)
            .await
    }

    async fn get_task_push_notification_config(
        &self,
        req: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(Method::GetTaskPushNotificationConfig, req).await
    }

    async fn list_task_push_notification_configs(
        &self,
        req: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        self.unary(Method::ListTaskPushNotificationConfigs, req)
            .await
    }

    async fn get_extended_agent_card(
        &self,
        req: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        self.unary(Method::GetExtendedAgentCard, req).await
    }

    async fn delete_task_push_notification_config(
        &self,
        req: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pbjson_types::Empty>, Status> {
        self.unary(Method::DeleteTaskPushNotificationConfig, req)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataMap;

    fn meta(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer(&meta(&[])), None);
        let got = bearer(&meta(&[("authorization", "Bearer abc ")]));
        assert_eq!(got.as_deref(), Some("abc"));
        let got = bearer(&meta(&[("authorization", "bearer  abc")]));
        assert_eq!(got.as_deref(), Some("abc"));
        assert_eq!(bearer(&meta(&[("authorization", "Basic abc")])), None);
    }

    #[test]
    fn versions() {
        assert_eq!(version(&meta(&[])).unwrap(), Version::V1);
        for v in ["1.0", "1", "1.1.2"] {
            assert_eq!(version(&meta(&[("a2a-version", v)])).unwrap(), Version::V1);
        }
        for v in ["0.3", "2.0", "x"] {
            let s = version(&meta(&[("a2a-version", v)])).unwrap_err();
            assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{v}");
            assert!(s
                .message()
                .starts_with(&format!("A2A version {v:?} is not supported")));
        }
    }

    #[test]
    fn hosts() {
        assert_eq!(host_of("mesh.example.com:50051"), "mesh.example.com");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_of("[::1]:50051"), "[::1]");
        assert_eq!(host_of("mesh"), "mesh");
    }
}
