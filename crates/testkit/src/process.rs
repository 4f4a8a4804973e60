//! A service binary run as a real process, for what only a process shows: its signal
//! handling and its exit. The test builds the command (the binary is
//! `env!("CARGO_BIN_EXE_<name>")`, which only the binary's own package's tests have); this
//! starts it, waits for it to serve (failing at once, not at the deadline, if it exits
//! first), sends it a real SIGTERM, and watches its listener close and the process exit.

use std::{
    net::SocketAddr,
    process::{ExitStatus, Stdio},
    time::{Duration, Instant},
};

use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

use crate::eventually;

/// A running service process, killed if the test ends before it exits.
pub struct ServiceProcess {
    name: String,
    addr: SocketAddr,
    child: tokio::process::Child,
}

impl ServiceProcess {
    /// Starts `command`, whose server will listen on `addr`. Its stdout is dropped; its
    /// stderr (the logs) goes to the test's output, shown when the test fails.
    pub fn spawn(mut command: tokio::process::Command, name: &str, addr: SocketAddr) -> Self {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("start {name}: {err}"));
        Self { name: name.to_owned(), addr, child }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_else(|| panic!("{} has already been reaped", self.name))
    }

    /// Waits (up to 60 s) until the gRPC server reports `service` SERVING.
    pub async fn wait_grpc_serving(&mut self, service: &str) {
        let channel = tonic::transport::Channel::from_shared(self.url()).expect("url").connect_lazy();
        let what = format!("{} serving {service}", self.name);
        let (name, child) = (&self.name, &mut self.child);
        eventually(Duration::from_secs(60), &what, || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited before serving: {status}");
            }
            let mut health = HealthClient::new(channel.clone());
            async move {
                let status = health
                    .check(HealthCheckRequest { service: service.to_owned() })
                    .await
                    .map(|answer| answer.into_inner().status());
                if matches!(status, Ok(ServingStatus::Serving)) { Ok(()) } else { Err(format!("{status:?}")) }
            }
        })
        .await;
    }

    /// Waits (up to 60 s) until `GET {url}{path}` answers 200 (an HTTP server's readiness).
    pub async fn wait_http_ok(&mut self, path: &str) {
        let what = format!("{} answering {path}", self.name);
        let (name, child, addr) = (&self.name, &mut self.child, self.addr);
        eventually(Duration::from_secs(60), &what, || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited before serving: {status}");
            }
            async move { http_status(addr, path).await.filter(|status| status.starts_with("HTTP/1.1 200")) }
        })
        .await;
    }

    /// Sends a real SIGTERM (what Kubernetes sends a pod it stops), with kill(1): the
    /// workspace forbids `unsafe`, which libc's kill(2) needs. Returns when it was sent.
    pub fn sigterm(&self) -> Instant {
        let pid = self.pid();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap_or_else(|err| panic!("run kill -TERM {pid}: {err}"));
        assert!(sent.success(), "SIGTERM to {} (pid {pid}): {sent}", self.name);
        Instant::now()
    }

    /// Waits until a new TCP connection to the listener is refused (the listener closed), up
    /// to `within`.
    pub async fn refuses_new_connections(&self, within: Duration) {
        let (addr, what) = (self.addr, format!("{} refusing new connections", self.name));
        eventually(within, &what, || async move {
            match tokio::net::TcpStream::connect(addr).await {
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
                Err(err) => Err(format!("connect: {err}")),
                Ok(_) => Err("a new connection was accepted".to_owned()),
            }
        })
        .await;
    }

    /// Waits for the process to exit, up to `within`; panics naming the wait if it does not.
    pub async fn exits(&mut self, within: Duration) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.unwrap_or_else(|err| panic!("waiting for {}: {err}", self.name)),
            Err(_) => panic!("{} still running {within:?} after it was told to stop", self.name),
        }
    }
}

/// The status line of `GET path` over a fresh HTTP/1.1 connection, if one comes.
async fn http_status(addr: SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).await.ok()?;
    Some(line)
}

/// One call of a [`UnaryLoad`]: when it was started and how it ended.
#[derive(Debug)]
pub struct LoadedCall {
    pub caller: usize,
    pub number: usize,
    pub started: Instant,
    pub result: Result<(), tonic::Status>,
}

/// Callers each calling a service in a loop, one call at a time, from before its SIGTERM
/// until it refuses them: each stops at its first failed call (or when told to).
pub struct UnaryLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    callers: Vec<tokio::task::JoinHandle<Vec<LoadedCall>>>,
}

impl UnaryLoad {
    /// `callers` tasks, each calling `call(caller, number)` in a loop.
    pub fn start<F, Fut>(callers: usize, call: F) -> Self
    where
        F: Fn(usize, usize) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static,
    {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let callers = (0..callers)
            .map(|caller| {
                let (call, stop, answered) = (call.clone(), stop.clone(), answered.clone());
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    for number in 0.. {
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        let started = Instant::now();
                        let result = call(caller, number).await;
                        let failed = result.is_err();
                        if !failed {
                            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        calls.push(LoadedCall { caller, number, started, result });
                        if failed {
                            break;
                        }
                    }
                    calls
                })
            })
            .collect();
        Self { stop, answered, callers }
    }

    /// Waits (up to 30 s) until the callers have had `calls` answered between them: the load
    /// is under way.
    pub async fn under_way(&self, calls: usize) {
        let answered = self.answered.clone();
        eventually(Duration::from_secs(30), &format!("{calls} calls of the load answered"), || {
            let seen = answered.load(std::sync::atomic::Ordering::SeqCst);
            async move { if seen >= calls { Ok(()) } else { Err(format!("{seen} answered")) } }
        })
        .await;
    }

    /// Stops the callers still calling and returns every call made.
    pub async fn finish(self) -> Vec<LoadedCall> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut calls = Vec::new();
        for caller in self.callers {
            calls.extend(caller.await.expect("a load caller"));
        }
        calls
    }
}

/// How long before the signal a call may have been sent and still not reached the server.
const IN_TRANSIT: Duration = Duration::from_millis(50);

/// Checks a load around a SIGTERM sent at `signaled`: every call started `IN_TRANSIT` before it was
/// answered, and every call that failed was refused as a stopping server refuses (see
/// [`refused_by_a_stopping_server`]). Returns how many calls were answered.
pub fn assert_answered_or_refused(service: &str, calls: &[LoadedCall], signaled: Instant) -> usize {
    let mut answered = 0;
    for call in calls {
        match &call.result {
            Ok(()) => answered += 1,
            Err(status) => {
                // A call sent within IN_TRANSIT of the signal may not have reached the server
                // when it stopped taking requests (an HTTP/1.1 request crossing the close of its
                // idle keep-alive connection): it is refused, like a call sent after.
                assert!(
                    call.started + IN_TRANSIT >= signaled,
                    "{service}: call {}/{} started {:?} before the SIGTERM failed: {status:?}",
                    call.caller,
                    call.number,
                    signaled - call.started
                );
                assert!(
                    refused_by_a_stopping_server(status),
                    "{service}: call {}/{} after the SIGTERM failed other than refused: {status:?}",
                    call.caller,
                    call.number
                );
            }
        }
    }
    answered
}

/// How a call is refused by a server that has stopped (or is stopping): UNAVAILABLE (the
/// connection refused, or the server's own status), or the client's report of the connection
/// going away under a call it was sending just then (tonic's INTERNAL for the server's graceful
/// GOAWAY, CANCELLED for a connection closed before the request went out), which carries the
/// transport's error as its source, as no server's answer does.
pub fn refused_by_a_stopping_server(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    let mut source = status.source();
    while let Some(error) = source {
        if error.is::<tonic::transport::Error>() || error.is::<std::io::Error>() {
            return true;
        }
        source = error.source();
    }
    status.code() == tonic::Code::Unavailable
}
