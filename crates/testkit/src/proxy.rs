//! A TCP proxy that can cut its connections, to test what a store does during an outage of a
//! real backend.
//!
//! To send a client through it, start it on the backend's address and rewrite the host:port of
//! the URL to the proxy's (`postgres::database_addr` and `postgres::database_url_via` do both
//! for `DATABASE_URL`, the `redis` module's twins for `REDIS_URL`; user, password, database and
//! query stay as they were):
//!
//! ```ignore
//! let proxy = TcpProxy::start(postgres::database_addr()).await;
//! // postgres://postgres@127.0.0.1:5432/test -> postgres://postgres@127.0.0.1:<proxy port>/test
//! let store = PostgresStore::connect(&postgres::database_url_via(proxy.addr()), &schema).await?;
//! proxy.cut(); // every open connection drops, new ones are closed at once
//! proxy.restore(); // new connections reach the backend again
//! ```

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::{AbortHandle, JoinHandle},
};

pub struct TcpProxy {
    addr: SocketAddr,
    links: Arc<Mutex<Links>>,
    accept_loop: JoinHandle<()>,
}

/// Whether the proxy forwards, and the tasks forwarding each open connection. One lock covers
/// both, so a connection accepted while `cut` runs is either refused or aborted, never missed.
struct Links {
    open: bool,
    connections: Vec<AbortHandle>,
}

impl TcpProxy {
    /// Listens on 127.0.0.1:0 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await.expect("bind the proxy")
    }

    /// Listens on `listen` (the benchmarks' fault proxy takes a fixed port) and forwards every
    /// connection to `upstream`.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let links = Arc::new(Mutex::new(Links { open: true, connections: Vec::new() }));
        let accept_loop = tokio::spawn(accept(listener, upstream, links.clone()));
        Ok(TcpProxy { addr, links, accept_loop })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every open connection (both directions) and closes new ones as soon as they are
    /// accepted, until [`restore`](Self::restore).
    pub fn cut(&self) {
        let mut links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        links.open = false;
        for connection in links.connections.drain(..) {
            connection.abort();
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.links.lock().unwrap_or_else(PoisonError::into_inner).open = true;
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        self.cut();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, links: Arc<Mutex<Links>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors, say; do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let mut links = links.lock().unwrap_or_else(PoisonError::into_inner);
        if !links.open {
            drop(client);
            continue;
        }
        links.connections.retain(|connection| !connection.is_finished());
        let forward = tokio::spawn(forward(client, upstream));
        links.connections.push(forward.abort_handle());
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// `host:port` of a URL such as `postgres://user@host:5432/db` (`default_port` when absent).
pub fn url_addr(url: &str, default_port: u16) -> SocketAddr {
    use std::net::ToSocketAddrs;
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host_part = after_scheme.rsplit_once('@').map_or(after_scheme, |(_, rest)| rest);
    let host_port = host_part.split(['/', '?']).next().unwrap_or(host_part);
    let host_port = if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:{default_port}") };
    host_port.to_socket_addrs().expect("resolvable URL host").next().expect("an address")
}

/// The same URL with its `host:port` replaced by `addr` (user, database and query kept).
pub fn url_via(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, host_and_path) = rest.rsplit_once('@').map_or(("", rest), |(u, h)| (u, h));
    let path = host_and_path.find(['/', '?']).map_or("", |at| &host_and_path[at..]);
    let user = if user.is_empty() { String::new() } else { format!("{user}@") };
    format!("{scheme}://{user}{addr}{path}")
}
