//! A gRPC hop in front of the real MCP gateway that counts the calls the router makes to it,
//! by method, and passes each one on with its metadata (tenant, user, deadline) unchanged.

use std::sync::{Arc, Mutex};

use switchyard_proto::mcp::v1::{
    self as pb,
    mcp_gateway_service_client::McpGatewayServiceClient,
    mcp_gateway_service_server::{McpGatewayService, McpGatewayServiceServer},
};
use switchyard_testkit::Served;
use tonic::{Request, Response, Status, transport::Channel};

#[derive(Clone, Default)]
pub struct GatewayCalls(Arc<Mutex<Vec<&'static str>>>);

impl GatewayCalls {
    /// The methods called so far, in order.
    pub fn methods(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }

    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    fn push(&self, method: &'static str) {
        self.0.lock().unwrap().push(method);
    }
}

struct Counting {
    gateway: McpGatewayServiceClient<Channel>,
    calls: GatewayCalls,
}

/// The request as received, to be sent on: the caller's metadata, a fresh set of extensions.
fn onward<T>(request: Request<T>) -> Request<T> {
    let (metadata, _, message) = request.into_parts();
    Request::from_parts(metadata, tonic::Extensions::default(), message)
}

macro_rules! forward {
    ($($method:ident($request:ty) -> $response:ty, $name:literal;)*) => {
        #[tonic::async_trait]
        impl McpGatewayService for Counting {
            $(
                async fn $method(&self, request: Request<$request>) -> Result<Response<$response>, Status> {
                    self.calls.push($name);
                    self.gateway.clone().$method(onward(request)).await
                }
            )*
        }
    };
}

forward! {
    set_context(pb::SetContextRequest) -> pb::SetContextResponse, "SetContext";
    list_tools(pb::ListToolsRequest) -> pb::ListToolsResponse, "ListTools";
    call_tool(pb::CallToolRequest) -> pb::CallToolResponse, "CallTool";
    list_servers(pb::ListServersRequest) -> pb::ListServersResponse, "ListServers";
    list_policies(pb::ListPoliciesRequest) -> pb::ListPoliciesResponse, "ListPolicies";
    list_tool_calls(pb::ListToolCallsRequest) -> pb::ListToolCallsResponse, "ListToolCalls";
}

/// Serves the counting hop on loopback in front of the gateway at `gateway_url` (without
/// awaiting anything, so a stack's router configuration can start it).
pub fn serve(gateway_url: &str) -> (Served, GatewayCalls) {
    let gateway =
        McpGatewayServiceClient::new(Channel::from_shared(gateway_url.to_owned()).expect("gateway url").connect_lazy());
    let calls = GatewayCalls::default();
    let listener = std::net::TcpListener::bind(super::loopback()).expect("bind the counting hop");
    listener.set_nonblocking(true).expect("non-blocking listener");
    let listener = tokio::net::TcpListener::from_std(listener).expect("listener on the runtime");
    let addr = listener.local_addr().expect("addr");
    let service = McpGatewayServiceServer::new(Counting { gateway, calls: calls.clone() });
    let served = Served::spawn(addr, |stop| async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), stop)
            .await?;
        Ok(())
    });
    (served, calls)
}
