//! The kit's gRPC server (every service's) against many connections that say nothing and a
//! process out of file descriptors, over real TCP: 10,000 silent connections, held by a
//! process of their own, are held while a fresh caller is answered at once; with the
//! descriptor table full, the accept loop waits instead of spinning a core, and silent
//! connections closed at the handshake timeout free descriptors for the ones waiting.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a panic in a test is the failure report")]

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use switchyard_kit::{GrpcServer, ServerArgs};
use switchyard_testkit::{
    eventually,
    idle_clients::{IdleClients, resident_set_bytes},
};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const IDLE: usize = 10_000;
/// A fresh caller's answer while the idle connections are open.
const PROMPT: Duration = Duration::from_secs(2);
/// Resident memory the server may grow by while holding the idle connections (measured: 52 to
/// 138 MiB, 5 to 14 KiB a connection: its HTTP/2 state and buffers are set up on accepting it).
const RSS_BOUND: u64 = 256 * 1024 * 1024;

async fn serve(args: ServerArgs) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let server = GrpcServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), args).await.unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap()
}

/// A health check (liveness) on a new connection, and how long it took, connecting included.
async fn fresh_check(addr: SocketAddr) -> Duration {
    let started = Instant::now();
    let mut health = HealthClient::new(channel(addr).await);
    tokio::time::timeout(Duration::from_secs(30), health.check(HealthCheckRequest { service: String::new() }))
        .await
        .expect("a health check within 30 s")
        .expect("a health check answered");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_silent_connections_are_held_while_a_fresh_caller_is_answered_at_once() {
    // With the handshake timeout off, all 10,000 are open at once however long opening them
    // takes on a loaded machine (a debug build accepts a few hundred a second); closing silent
    // ones at the timeout is the next test's.
    let (addr, _stop) = serve(ServerArgs { handshake_timeout: Duration::ZERO, ..ServerArgs::default() }).await;
    fresh_check(addr).await;
    let rss_before = resident_set_bytes();
    let opening = Instant::now();
    let idle = IdleClients::open(addr, IDLE, b"").await;
    let opened_in = opening.elapsed();
    let fresh = fresh_check(addr).await;
    let rss_growth = resident_set_bytes().saturating_sub(rss_before);
    let closed_early = idle.closed_by_server().await;
    eprintln!(
        "{IDLE} silent connections opened in {opened_in:?}; a fresh health check took {fresh:?}; \
         resident set grew {} KiB",
        rss_growth / 1024
    );
    assert_eq!(closed_early, 0, "connections closed with the handshake timeout off");
    assert!(fresh < PROMPT, "a fresh caller waited {fresh:?} with {IDLE} idle connections open");
    assert!(rss_growth < RSS_BOUND, "the resident set grew {rss_growth} bytes holding {IDLE} idle connections");
}

/// CPU time this process has used, user and system (`/proc/self/stat`, in the kernel's
/// 100 ticks a second), read through `stat` opened beforehand: with no descriptor free,
/// opening it again would fail.
fn cpu_time(stat: &mut std::fs::File) -> Duration {
    use std::io::{Read, Seek};
    let mut text = String::new();
    stat.rewind().unwrap();
    stat.read_to_string(&mut text).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = text.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields; the state (the 3rd) is fields[0].
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Sets this process's soft limit of open files (with util-linux's `prlimit`: the workspace
/// forbids `unsafe`, which a direct `setrlimit` needs).
fn set_open_files_limit(soft: u64) {
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={soft}:")])
        .status()
        .unwrap_or_else(|err| panic!("prlimit (util-linux) did not run: {err}"));
    assert!(status.success(), "prlimit --nofile={soft}: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_accept_loop_waits_and_serves_again_once_some_are_free() {
    // nextest runs each test in a process of its own: the lowered limit is this test's alone.
    let handshake = Duration::from_secs(2);
    let (addr, _stop) = serve(ServerArgs { handshake_timeout: handshake, ..ServerArgs::default() }).await;
    fresh_check(addr).await;
    let mut stat = std::fs::File::open("/proc/self/stat").unwrap();
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    // Room for the holder's pipes and a few dozen accepted connections, then EMFILE.
    set_open_files_limit(open_now + 40);
    let idle = IdleClients::open(addr, 100, b"").await;

    // The listener now fails with EMFILE while connections wait. Accepting again at once would
    // spin a core (about a second of CPU a second); the loop waits a second between tries.
    let (cpu_before, window) = (cpu_time(&mut stat), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = cpu_time(&mut stat) - cpu_before;
    let window = window.elapsed();
    eprintln!("CPU used over {window:?} out of file descriptors: {cpu:?}");
    assert!(cpu < window / 3, "the process used {cpu:?} of CPU in {window:?}: the accept loop spins");

    // The accepted ones are closed at the handshake timeout, which frees descriptors for the
    // ones still waiting, a few at a time, until every one was accepted and closed.
    eventually(Duration::from_secs(60), "every waiting connection accepted and closed", || async {
        let closed = idle.closed_by_server().await;
        if closed == idle.count() { Ok(()) } else { Err(format!("{closed} of {} closed", idle.count())) }
    })
    .await;
    drop(idle);
    set_open_files_limit(open_now + 1024);
    assert!(fresh_check(addr).await < PROMPT, "the server answers promptly once descriptors are free");
}
