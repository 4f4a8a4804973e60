//! A server a test started on its own task: stopped gracefully (and its outcome checked) on
//! `stop`, aborted when dropped — so a failing test never leaves it serving.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{sync::oneshot, task::JoinHandle};

pub struct Served {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

/// Completes when the test stops the server (or drops it).
pub struct Shutdown(oneshot::Receiver<()>);

impl Future for Shutdown {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

impl Served {
    /// Spawns `serve`, given the signal on which the server shuts down gracefully.
    pub fn spawn<F>(addr: SocketAddr, serve: impl FnOnce(Shutdown) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Self { addr, stop: Some(stop), task: tokio::spawn(serve(Shutdown(stopped))) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Shuts the server down and fails the test unless it served cleanly.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.expect("server task").expect("server ran cleanly");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}
