//! The in-process transport under a generated client (the health service's): a server stream
//! works and is dropped on the serving side when the caller drops it; the caller's deadline ends
//! a call the way tonic's network channel ends it; a draining service refuses new calls with
//! UNAVAILABLE, a stopped one ends its streams in flight with UNAVAILABLE, and once stopped its
//! callers go to its address over the network (closed here: UNAVAILABLE too).

use std::{convert::Infallible, time::Duration};

use futures::StreamExt;
use switchyard_kit::{client::connect_lazy, in_process};
use switchyard_testkit::closed_port;
use tokio::sync::oneshot;
use tonic::{Code, body::Body};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
use tower::util::BoxCloneSyncService;

/// One gRPC message: HealthCheckResponse { status: SERVING }, framed.
const SERVING_FRAME: [u8; 7] = [0, 0, 0, 0, 2, 0x08, 0x01];

/// Sends on drop: the serving side's stream was dropped.
struct DroppedSignal(Option<oneshot::Sender<()>>);

impl Drop for DroppedSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// A health server whose `Watch` sends SERVING then waits forever (signalling when its stream
/// is dropped), and whose `Check` never answers.
fn server(dropped: oneshot::Sender<()>) -> in_process::ServerStack {
    let dropped = std::sync::Arc::new(std::sync::Mutex::new(Some(dropped)));
    BoxCloneSyncService::new(tower::service_fn(move |request: http::Request<Body>| {
        let dropped = dropped.clone();
        async move {
            assert_eq!(request.headers().get("content-type").map(|v| v.as_bytes()), Some(&b"application/grpc"[..]));
            if request.uri().path() == "/grpc.health.v1.Health/Check" {
                std::future::pending::<()>().await;
            }
            let guard = DroppedSignal(dropped.lock().expect("not poisoned").take());
            let frames = futures::stream::iter([Ok::<_, Infallible>(bytes_of(&SERVING_FRAME))])
                .chain(futures::stream::pending())
                .map(move |frame| {
                    let _ = &guard;
                    frame
                });
            let body = Body::new(axum::body::Body::from_stream(frames));
            Ok::<_, Infallible>(
                http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(body)
                    .expect("a valid response"),
            )
        }
    }))
}

fn bytes_of(frame: &[u8]) -> axum::body::Bytes {
    axum::body::Bytes::copy_from_slice(frame)
}

fn watch() -> HealthCheckRequest {
    HealthCheckRequest { service: String::new() }
}

#[tokio::test]
async fn a_stream_in_process_works_and_is_dropped_with_its_caller() {
    let port = closed_port();
    let addr = port.addr();
    let (dropped, was_dropped) = oneshot::channel();
    let _registration = in_process::Registration::register(addr, server(dropped));
    assert!(in_process::is_served_here(addr));
    let mut client = HealthClient::new(connect_lazy(&format!("http://{addr}")).expect("url"));

    let mut stream = client.watch(watch()).await.expect("watch").into_inner();
    let first = stream.message().await.expect("a message").expect("not the end");
    assert_eq!(first.status(), ServingStatus::Serving);
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), was_dropped)
        .await
        .expect("the server's stream is dropped when its caller drops it")
        .expect("signal");
}

#[tokio::test]
async fn an_expired_deadline_ends_the_call_as_over_the_network() {
    let port = closed_port();
    let addr = port.addr();
    let (dropped, _) = oneshot::channel();
    let _registration = in_process::Registration::register(addr, server(dropped));
    let mut client = HealthClient::new(connect_lazy(&format!("http://{addr}")).expect("url"));
    let mut request = tonic::Request::new(watch());
    request.set_timeout(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let status = client.check(request).await.expect_err("the server never answers");
    // tonic's channel ends a call past its deadline with CANCELLED "Timeout expired".
    assert_eq!((status.code(), status.message()), (Code::Cancelled, "Timeout expired"), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_draining_or_stopped_service_answers_unavailable() {
    let port = closed_port();
    let addr = port.addr();
    let (dropped, _) = oneshot::channel();
    let registration = in_process::Registration::register(addr, server(dropped));
    let mut client = HealthClient::new(connect_lazy(&format!("http://{addr}")).expect("url"));
    let mut in_flight = client.watch(watch()).await.expect("watch").into_inner();
    in_flight.message().await.expect("a message").expect("not the end");

    registration.drain_switch().drain();
    assert!(!in_process::is_served_here(addr), "a draining service takes no new calls");
    let refused = client.watch(watch()).await.expect_err("draining");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    drop(registration);
    let cut = tokio::time::timeout(Duration::from_secs(5), in_flight.message())
        .await
        .expect("the stream in flight ends when its server stops")
        .expect_err("with an error");
    assert_eq!((cut.code(), cut.message()), (Code::Unavailable, in_process::SERVICE_STOPPING), "{cut:?}");

    // Stopped: the call goes to the address, where nothing listens.
    let mut request = tonic::Request::new(watch());
    request.set_timeout(Duration::from_secs(10));
    let refused = client.check(request).await.expect_err("nothing listens");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
}
