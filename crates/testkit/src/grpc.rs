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

/// A loopback port that refuses connections, as a dependency that is down does. The port is
/// bound but never listened on, and stays bound while this value lives: a port that was merely
/// free a moment ago can be taken by another test's server in the meantime (nextest runs tests
/// as parallel processes), which then answers in the outage's place.
pub struct ClosedPort {
    addr: SocketAddr,
    _reserved: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

pub fn closed_port() -> ClosedPort {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind a loopback port");
    let addr = socket.local_addr().expect("addr");
    ClosedPort { addr, _reserved: socket }
}
