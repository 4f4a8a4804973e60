//! The edge's clients of the services behind it: one lazily connecting, trace-propagating HTTP/2
//! channel per service, a codec for dynamic messages so any RPC of the descriptor set can be
//! called without generated code, and the caller's identity put into the metadata — the only
//! place `x-tenant-id`, `x-user-id` and `x-switchyard-admin` are ever set.

use std::{marker::PhantomData, time::Duration};

use bytes::{Buf, Bytes};
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use switchyard_kit::{
    client::{TracedChannel, connect_lazy},
    identity::{ADMIN_HEADER, TENANT_HEADER, USER_HEADER},
};
use tonic::{
    Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    metadata::MetadataValue,
};

use crate::{auth::Caller, transcode::rules::Upstream};

/// The URLs of the services, from the edge's flags.
#[derive(Debug, Clone, Default)]
pub struct UpstreamUrls {
    pub router: String,
    pub sessions: String,
    pub triggers: String,
    pub mcp_gateway: String,
}

/// One channel per service.
#[derive(Debug, Clone)]
pub struct Upstreams {
    router: TracedChannel,
    sessions: TracedChannel,
    triggers: TracedChannel,
    mcp_gateway: TracedChannel,
    max_message_bytes: usize,
}

impl Upstreams {
    pub fn connect(urls: &UpstreamUrls, max_message_bytes: usize) -> anyhow::Result<Self> {
        Ok(Self {
            router: connect_lazy(&urls.router)?,
            sessions: connect_lazy(&urls.sessions)?,
            triggers: connect_lazy(&urls.triggers)?,
            mcp_gateway: connect_lazy(&urls.mcp_gateway)?,
            max_message_bytes,
        })
    }

    pub fn channel(&self, upstream: Upstream) -> TracedChannel {
        match upstream {
            Upstream::Router => self.router.clone(),
            Upstream::Sessions => self.sessions.clone(),
            Upstream::Triggers => self.triggers.clone(),
            Upstream::McpGateway => self.mcp_gateway.clone(),
        }
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// A generated client's view of the router (the OpenAI endpoint and streams use it).
    pub fn router(&self) -> switchyard_proto::router::v1::router_service_client::RouterServiceClient<TracedChannel> {
        switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(self.router.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    /// Calls a unary RPC with a dynamic request; the answer comes as its wire bytes, which the
    /// REST path writes as JSON without decoding a message (`transcode::wire_json`).
    pub async fn unary_wire(
        &self,
        upstream: Upstream,
        path: http::uri::PathAndQuery,
        request: tonic::Request<DynamicMessage>,
    ) -> Result<tonic::Response<Bytes>, Status> {
        let mut grpc = self.grpc(upstream);
        grpc.ready().await.map_err(|err| Status::unavailable(format!("{} unavailable: {err}", upstream.name())))?;
        grpc.unary(request, path, WireCodec).await.map_err(|s| named(upstream, s))
    }

    /// Calls a server-streaming RPC whose answers are read as dynamic messages. The request may
    /// be dynamic or generated: a generated one is encoded as it is, never through a dynamic copy.
    pub async fn server_streaming<M: Message + Send + Sync + 'static>(
        &self,
        upstream: Upstream,
        path: http::uri::PathAndQuery,
        output: MessageDescriptor,
        request: tonic::Request<M>,
    ) -> Result<tonic::Response<tonic::Streaming<DynamicMessage>>, Status> {
        let mut grpc = self.grpc(upstream);
        grpc.ready().await.map_err(|err| Status::unavailable(format!("{} unavailable: {err}", upstream.name())))?;
        grpc.server_streaming(request, path, DynamicCodec::new(output)).await.map_err(|s| named(upstream, s))
    }

    fn grpc(&self, upstream: Upstream) -> tonic::client::Grpc<TracedChannel> {
        tonic::client::Grpc::new(self.channel(upstream))
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }
}

/// A transport failure names the service it could not reach ("tcp connect error" alone tells
/// a caller nothing). A status the service answered (and logged) is passed on as it is.
fn named(upstream: Upstream, status: Status) -> Status {
    if status.code() == tonic::Code::Unavailable
        && !status.message().starts_with(upstream.name())
        && !switchyard_kit::failures::logged_upstream(&status)
    {
        Status::unavailable(format!("{} unavailable: {}", upstream.name(), status.message()))
    } else {
        status
    }
}

/// A request carrying the caller's identity (and a deadline, so an upstream gives up when the
/// edge would).
pub fn request<T>(message: T, caller: &Caller, timeout: Option<Duration>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let metadata = request.metadata_mut();
    // Tenant and user ids are checked ASCII when the credential is read.
    if let Ok(value) = MetadataValue::try_from(caller.tenant.as_str()) {
        metadata.insert(TENANT_HEADER, value);
    }
    if let Some(user) = &caller.user
        && let Ok(value) = MetadataValue::try_from(user.as_str())
    {
        metadata.insert(USER_HEADER, value);
    }
    // The API key's id, for the router's per-key budgets.
    if let Some(key_id) = caller.principal.strip_prefix("key:")
        && let Ok(value) = MetadataValue::try_from(key_id)
    {
        metadata.insert("x-switchyard-key-id", value);
    }
    // Set from the checked credential only: a request built here never carries a client's.
    if caller.admin {
        metadata.insert(ADMIN_HEADER, MetadataValue::from_static("true"));
    }
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

/// Encodes requests (dynamic ones by default) and decodes dynamic messages of one response type.
#[derive(Debug, Clone)]
pub struct DynamicCodec<M = DynamicMessage> {
    output: MessageDescriptor,
    request: PhantomData<fn(M)>,
}

impl<M> DynamicCodec<M> {
    pub fn new(output: MessageDescriptor) -> Self {
        Self { output, request: PhantomData }
    }
}

impl<M: Message + Send + 'static> Codec for DynamicCodec<M> {
    type Encode = M;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder<M>;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        DynamicDecoder(self.output.clone())
    }
}

#[derive(Debug)]
pub struct DynamicEncoder<M = DynamicMessage>(PhantomData<fn(M)>);

impl<M: Message> Encoder for DynamicEncoder<M> {
    type Item = M;
    type Error = Status;

    fn encode(&mut self, item: M, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.encoded_len());
        item.encode(dst).map_err(|err| Status::internal(format!("encoding the request: {err}")))
    }
}

#[derive(Debug)]
pub struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        DynamicMessage::decode(self.0.clone(), bytes)
            .map(Some)
            .map_err(|err| Status::internal(format!("decoding the response: {err}")))
    }
}

/// Encodes dynamic requests and hands back each answer's bytes undecoded.
#[derive(Debug, Clone, Copy)]
pub struct WireCodec;

impl Codec for WireCodec {
    type Encode = DynamicMessage;
    type Decode = Bytes;
    type Encoder = DynamicEncoder;
    type Decoder = WireDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        WireDecoder
    }
}

#[derive(Debug)]
pub struct WireDecoder;

impl Decoder for WireDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use switchyard_kit::TenantId;

    use super::*;

    #[test]
    fn an_api_keys_id_reaches_the_services_and_a_tokens_subject_does_not() {
        let key = Caller {
            tenant: TenantId::parse("acme").expect("tenant"),
            user: None,
            principal: "key:k1abc".to_owned(),
            admin: false,
        };
        let request = request((), &key, None);
        assert_eq!(request.metadata().get("x-switchyard-key-id").and_then(|v| v.to_str().ok()), Some("k1abc"));
        assert_eq!(request.metadata().get(TENANT_HEADER).and_then(|v| v.to_str().ok()), Some("acme"));
        let token = Caller { principal: "jwt:acme:ann".to_owned(), ..key };
        assert!(request_has_no_key(&token));
        assert!(request_has_no_key(&Caller::open()));
    }

    fn request_has_no_key(caller: &Caller) -> bool {
        request((), caller, None).metadata().get("x-switchyard-key-id").is_none()
    }
}
