//! The streamable HTTP transport: the server runs elsewhere, reached at its URL with the
//! headers its configuration gives (a header that is not valid HTTP is left out).

use std::collections::BTreeMap;

use rmcp::{
    ServiceExt,
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};

use super::{
    client::{Running, UpstreamClient},
    relay::Tapped,
};

/// Opens an MCP session with the server and runs the initialize handshake.
pub(super) async fn connect(
    client: UpstreamClient,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<Running, String> {
    let headers = headers
        .iter()
        .filter_map(|(k, v)| {
            Some((http::HeaderName::try_from(k.as_str()).ok()?, http::HeaderValue::try_from(v.as_str()).ok()?))
        })
        .collect();
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    let transport = StreamableHttpClientTransport::from_config(config);
    let transport = Tapped::new(transport, &client.server, client.relay.clone());
    client.serve(transport).await.map_err(|err| format!("initialize failed: {err}"))
}
