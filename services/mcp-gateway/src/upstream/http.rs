//! The streamable HTTP transport: the server runs elsewhere, reached at its URL with the
//! credentials its configuration gives (headers, an OAuth token: see `credentials`), read again
//! for every connection.

use std::sync::Arc;

use rmcp::{
    ServiceExt,
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};

use super::{
    client::{Running, UpstreamClient},
    credentials::{AuthorizedClient, Credentials},
    relay::Tapped,
};

/// Opens an MCP session with the server and runs the initialize handshake.
pub(super) async fn connect(
    client: UpstreamClient,
    url: &str,
    credentials: Arc<Credentials>,
) -> Result<Running, String> {
    credentials.reread()?;
    let config = StreamableHttpClientTransportConfig::with_uri(url);
    let transport = StreamableHttpClientTransport::with_client(AuthorizedClient::new(credentials), config);
    let transport = Tapped::new(transport, &client.server, client.relay.clone());
    client.serve(transport).await.map_err(|err| format!("initialize failed: {err}"))
}
