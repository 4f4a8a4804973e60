//! HTTP/1.1 written by hand over a plain TCP socket, for what an HTTP client library will not
//! do: send a request head a byte at a time (slow loris), connect and say nothing, keep one
//! connection and watch for the server closing it.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

/// One client connection.
pub struct RawConnection {
    stream: TcpStream,
    /// Bytes read and not yet consumed by a response.
    pending: Vec<u8>,
}

/// How a wait for the server to close ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The server closed the connection after this long.
    After(Duration),
    /// Still open when the wait ended.
    StillOpen,
}

impl RawConnection {
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap_or_else(|err| panic!("connect to {addr}: {err}"));
        Self { stream, pending: Vec::new() }
    }

    /// A `GET` with `Host: host`, on this connection (kept alive).
    pub async fn send_get(&mut self, path: &str, host: &str) {
        let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        self.stream.write_all(head.as_bytes()).await.expect("request sent");
    }

    /// Sends `bytes` as they are: a request no HTTP client library would write (a bare CR in
    /// a header value).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("request sent");
    }

    /// The status of the next response, its body read to the end (`Content-Length` or chunked);
    /// `None` when the server closes first or nothing complete arrives within `within`.
    pub async fn response(&mut self, within: Duration) -> Option<(u16, Vec<u8>)> {
        tokio::time::timeout(within, self.read_response()).await.ok().flatten()
    }

    async fn read_response(&mut self) -> Option<(u16, Vec<u8>)> {
        let head_end = loop {
            if let Some(at) = find(&self.pending, b"\r\n\r\n") {
                break at + 4;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.pending[..head_end]).to_string();
        self.pending.drain(..head_end);
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
            })
        };
        let body = if let Some(length) = header("content-length") {
            let length: usize = length.parse().ok()?;
            while self.pending.len() < length {
                self.fill().await?;
            }
            self.pending.drain(..length).collect()
        } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(at) = find(&self.pending, b"\r\n") {
                        break at;
                    }
                    self.fill().await?;
                };
                let size_text = String::from_utf8_lossy(&self.pending[..line_end]).to_string();
                let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
                while self.pending.len() < line_end + 2 + size + 2 {
                    self.fill().await?;
                }
                body.extend_from_slice(&self.pending[line_end + 2..line_end + 2 + size]);
                self.pending.drain(..line_end + 2 + size + 2);
                if size == 0 {
                    break body;
                }
            }
        } else {
            Vec::new()
        };
        Some((status, body))
    }

    /// Reads more; `None` once the server has closed (or reset) the connection.
    async fn fill(&mut self) -> Option<()> {
        let mut chunk = [0_u8; 4096];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                self.pending.extend_from_slice(&chunk[..n]);
                Some(())
            }
        }
    }

    /// Waits up to `within` for the server to close the connection, discarding whatever it
    /// sends meanwhile.
    pub async fn closed_within(&mut self, within: Duration) -> Closed {
        let start = Instant::now();
        match tokio::time::timeout(within, async { while self.fill().await.is_some() {} }).await {
            Ok(()) => Closed::After(start.elapsed()),
            Err(_) => Closed::StillOpen,
        }
    }

    /// Sends `GET <path>` and then a header one byte every `every`, never finishing the head,
    /// until the server closes the connection or `within` passes.
    pub async fn slow_loris(&mut self, path: &str, every: Duration, within: Duration) -> Closed {
        let start = Instant::now();
        let first = format!("GET {path} HTTP/1.1\r\nX-Slow: ");
        if self.stream.write_all(first.as_bytes()).await.is_err() {
            return Closed::After(start.elapsed());
        }
        let mut chunk = [0_u8; 1024];
        loop {
            let left = within.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Closed::StillOpen;
            }
            tokio::select! {
                read = self.stream.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => return Closed::After(start.elapsed()),
                    // A server may answer 408 before it closes; keep reading to the close.
                    Ok(_) => {}
                },
                () = tokio::time::sleep(every.min(left)) => {
                    if self.stream.write_all(b"a").await.is_err() {
                        return Closed::After(start.elapsed());
                    }
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}
