//! Waiting on real gRPC servers: a service's readiness over `grpc.health.v1`, and a loopback
//! address nothing listens on (a dependency that is down).

use std::{net::SocketAddr, time::Duration};

use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

use crate::eventually;

/// Waits (up to 30 s) until the server at `url` reports `service` as SERVING.
pub async fn wait_serving(url: &str, service: &str) {
    let channel = tonic::transport::Channel::from_shared(url.to_owned()).expect("url").connect_lazy();
    eventually(Duration::from_secs(30), &format!("{service} serving"), || {
        let mut health = HealthClient::new(channel.clone());
        async move {
            let status =
                health.check(HealthCheckRequest { service: service.to_owned() }).await.map(|r| r.into_inner().status());
            if matches!(status, Ok(ServingStatus::Serving)) { Ok(()) } else { Err(format!("{status:?}")) }
        }
    })
    .await;
}

/// A loopback address that was free a moment ago: calls to it fail as a real outage does.
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}
