//! The outage proxy itself: it forwards, cuts every open connection and refuses new ones, and
//! forwards again once restored.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::time::Duration;

use switchyard_testkit::proxy::{TcpProxy, url_addr, url_via};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::timeout,
};

async fn echo(text: &[u8], stream: &mut TcpStream) -> Vec<u8> {
    stream.write_all(text).await.unwrap();
    let mut reply = vec![0; text.len()];
    timeout(Duration::from_secs(5), stream.read_exact(&mut reply)).await.expect("echo timed out").unwrap();
    reply
}

/// A cut connection reads end-of-stream (or a reset) promptly.
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0; 16];
    let read = timeout(Duration::from_secs(5), stream.read(&mut buf)).await.expect("the connection stayed open");
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?} from a cut connection");
}

#[tokio::test]
async fn proxy_forwards_cuts_and_restores() {
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = server.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = server.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            });
        }
    });
    let proxy = TcpProxy::start(upstream).await;

    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(echo(b"ping", &mut open).await, b"ping");

    proxy.cut();
    assert_closed(&mut open).await;
    let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_closed(&mut refused).await;

    proxy.restore();
    let mut restored = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(echo(b"pong", &mut restored).await, b"pong");
}

#[test]
fn urls_are_pointed_at_the_proxy_keeping_everything_else() {
    let addr = "127.0.0.1:40000".parse().unwrap();
    assert_eq!(url_addr("postgres://postgres@127.0.0.1:5433/test", 5432), "127.0.0.1:5433".parse().unwrap());
    assert_eq!(url_addr("postgres://postgres@127.0.0.1/test", 5432), "127.0.0.1:5432".parse().unwrap());
    assert_eq!(url_addr("redis://127.0.0.1", 6379), "127.0.0.1:6379".parse().unwrap());
    assert_eq!(
        url_via("postgres://user:secret@127.0.0.1:5432/test?sslmode=disable", addr),
        "postgres://user:secret@127.0.0.1:40000/test?sslmode=disable"
    );
    assert_eq!(url_via("redis://127.0.0.1:6379/2", addr), "redis://127.0.0.1:40000/2");
    assert_eq!(url_via("redis://127.0.0.1:6379", addr), "redis://127.0.0.1:40000");
}
