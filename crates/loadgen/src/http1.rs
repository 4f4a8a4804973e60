//! HTTP/1.1 keep-alive connections for the HTTP scenarios, as an SDK holds them: at most a
//! fixed number open to one server, each carrying one request at a time and reused for the
//! next, with `TCP_NODELAY` set (as the OpenAI and Anthropic SDKs' HTTP clients set it).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

pub type Sender = SendRequest<Full<Bytes>>;

/// Up to `count` keep-alive connections to one server. A request takes an idle one (or opens
/// one when a connection broke or was closed by the server) and gives it back once its
/// response has been read to the end; when all are busy it waits for one.
pub struct Pool {
    /// `host:port`, as connected to and sent in the `Host` header.
    authority: String,
    idle: Mutex<Vec<Sender>>,
    slots: Arc<Semaphore>,
    connect_timeout: Duration,
}

/// One connection, lent to one request; back in the pool when dropped.
pub struct Lease {
    pool: Arc<Pool>,
    sender: Option<Sender>,
    _slot: OwnedSemaphorePermit,
}

impl Pool {
    /// A pool for `target` (`http://host:port`, any path ignored); nothing is connected yet.
    pub fn new(target: &str, count: usize) -> anyhow::Result<Arc<Self>> {
        let uri: Uri = target.parse().with_context(|| format!("invalid target URL `{target}`"))?;
        if uri.scheme_str() != Some("http") {
            bail!("target `{target}` must be an http:// URL (TLS is not measured)");
        }
        let authority = match (uri.host(), uri.port_u16()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => format!("{host}:80"),
            _ => bail!("target `{target}` has no host"),
        };
        Ok(Arc::new(Self {
            authority,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(count.max(1))),
            connect_timeout: Duration::from_secs(5),
        }))
    }

    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Opens every connection the pool may hold, so that a run measures requests on open
    /// keep-alive connections rather than connection set-up.
    pub async fn open_all(self: &Arc<Self>) -> anyhow::Result<()> {
        let count = self.slots.available_permits();
        let mut opened = Vec::with_capacity(count);
        for index in 0..count {
            let sender = self
                .connect()
                .await
                .map_err(|status| anyhow::anyhow!("{}", status.message()))
                .with_context(|| format!("opening connection {} of {count}", index + 1))?;
            opened.push(sender);
        }
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).extend(opened);
        Ok(())
    }

    /// A connection ready for a request: an idle one, or a new one in place of one that closed.
    pub async fn lease(self: &Arc<Self>) -> Result<Lease, Status> {
        let slot = self.slots.clone().acquire_owned().await.map_err(|_| Status::cancelled("the pool is closed"))?;
        loop {
            let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let mut sender = match idle {
                Some(sender) if !sender.is_closed() => sender,
                Some(_closed) => continue,
                None => self.connect().await?,
            };
            // Ready once the previous exchange on it is over; an error means it closed.
            if sender.ready().await.is_ok() {
                return Ok(Lease { pool: self.clone(), sender: Some(sender), _slot: slot });
            }
        }
    }

    async fn connect(&self) -> Result<Sender, Status> {
        let unavailable =
            |what: &str, err: &dyn std::fmt::Display| Status::unavailable(format!("{what} {}: {err}", self.authority));
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.authority))
            .await
            .map_err(|elapsed| unavailable("connecting to", &elapsed))?
            .map_err(|err| unavailable("connecting to", &err))?;
        stream.set_nodelay(true).map_err(|err| unavailable("setting TCP_NODELAY towards", &err))?;
        let (sender, connection) =
            http1::handshake(TokioIo::new(stream)).await.map_err(|err| unavailable("HTTP/1.1 handshake with", &err))?;
        // Drives the connection until it closes; its errors surface on the request.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

impl Lease {
    pub fn sender(&mut self) -> &mut Sender {
        // Only taken in `drop`.
        self.sender.as_mut().expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take()
            && !sender.is_closed()
        {
            self.pool.idle.lock().unwrap_or_else(PoisonError::into_inner).push(sender);
        }
    }
}
