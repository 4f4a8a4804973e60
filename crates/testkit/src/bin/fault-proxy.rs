//! `switchyard-fault-proxy`: the test kit's outage proxy as a process, for the soak benchmark
//! (scripts/bench-soak.sh): forwards TCP from LISTEN to UPSTREAM; SIGUSR1 cuts every open
//! connection and refuses new ones (the backend unreachable), SIGUSR2 forwards again.
//!
//! Usage: switchyard-fault-proxy LISTEN UPSTREAM   (e.g. 127.0.0.1:55432 127.0.0.1:5432)

use std::net::SocketAddr;

use switchyard_testkit::proxy::TcpProxy;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: switchyard-fault-proxy LISTEN UPSTREAM";
    let listen: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let upstream: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let proxy = TcpProxy::start_on(listen, upstream).await?;
    println!("switchyard-fault-proxy listening on {} for {upstream}", proxy.addr());
    let mut cut = signal(SignalKind::user_defined1())?;
    let mut restore = signal(SignalKind::user_defined2())?;
    loop {
        tokio::select! {
            _ = cut.recv() => proxy.cut(),
            _ = restore.recv() => proxy.restore(),
        }
    }
}
