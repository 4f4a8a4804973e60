//! Thousands of client connections that say nothing (or only their first bytes) and stay open,
//! held by a child process: its file descriptors are its own, so a test can open as many as the
//! server may hold without the two ends sharing one process's limit, and the test process's
//! resident memory is the server's alone. The holder is a small Python script (`python3` is a
//! test peer already); its absence fails the test.

use std::{net::SocketAddr, process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
    sync::Mutex,
};

/// Opens the connections a few hundred at a time (each waits for the server's kernel to accept
/// it), sends the first bytes given (a few dozen: one send), reports `open N`, then answers `closed` with how many the
/// server has closed (end of stream or reset; bytes the server sends before are read and
/// dropped), until `exit` or the end of its input.
const HOLDER: &str = r#"
import errno, resource, select, socket, sys, time
host, port, count, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < count + 64:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
by_fd = {}
# A few hundred connecting at once: quick, and within the server's listen backlog.
BATCH = 256
for start in range(0, count, BATCH):
    pending = {}
    for i in range(start, min(start + BATCH, count)):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        code = s.connect_ex((host, port))
        if code not in (0, errno.EINPROGRESS):
            print(f"error connection {i}: {errno.errorcode.get(code, code)}", flush=True)
            sys.exit(1)
        pending[s.fileno()] = s
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + 30
    while pending:
        if time.monotonic() > deadline:
            print(f"error {len(pending)} connections not established within 30 s", flush=True)
            sys.exit(1)
        for fd, _ in poller.poll(1000):
            s = pending.pop(fd)
            poller.unregister(fd)
            code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                print(f"error connecting: {errno.errorcode.get(code, code)}", flush=True)
                sys.exit(1)
            if first:
                s.send(first)
            by_fd[fd] = s
print(f"open {len(by_fd)}", flush=True)
poller = select.poll()
for fd in by_fd:
    poller.register(fd, select.POLLIN)
closed = 0
for line in sys.stdin:
    if line.strip() != "closed":
        break
    for fd, _ in poller.poll(0):
        s = by_fd[fd]
        while True:
            try:
                data = s.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                closed += 1
                poller.unregister(fd)
                break
    print(f"closed {closed}", flush=True)
"#;

/// The connections, open until this is dropped (the holder is killed with it).
pub struct IdleClients {
    _child: Child,
    /// The holder's input and output, one question and answer at a time.
    talk: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    count: usize,
}

impl IdleClients {
    /// Opens `count` connections to `addr`, each sending `first` (nothing when empty) and then
    /// nothing more; returns once all are established (accepted by the server's kernel). Panics
    /// when one cannot be, or when `python3` is missing.
    pub async fn open(addr: SocketAddr, count: usize, first: &[u8]) -> Self {
        let hex: String = first.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut child = Command::new("python3")
            .args(["-c", HOLDER, &addr.ip().to_string(), &addr.port().to_string(), &count.to_string(), &hex])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("python3, which holds the idle connections, did not start: {err}"));
        let stdin = child.stdin.take().expect("holder stdin");
        let lines = BufReader::new(child.stdout.take().expect("holder stdout")).lines();
        let clients = Self { _child: child, talk: Mutex::new((stdin, lines)), count };
        let line = next_line(&mut clients.talk.lock().await.1, Duration::from_secs(240)).await;
        assert_eq!(line, format!("open {count}"), "opening {count} connections to {addr}");
        clients
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// How many of the connections the server has closed so far.
    pub async fn closed_by_server(&self) -> usize {
        let mut talk = self.talk.lock().await;
        let (stdin, lines) = &mut *talk;
        stdin.write_all(b"closed\n").await.expect("asking the holder");
        stdin.flush().await.expect("asking the holder");
        let line = next_line(lines, Duration::from_secs(60)).await;
        line.strip_prefix("closed ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the holder answered {line:?}"))
    }
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, within: Duration) -> String {
    match tokio::time::timeout(within, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => panic!("the connection holder exited"),
        Ok(Err(err)) => panic!("reading the connection holder: {err}"),
        Err(_) => panic!("the connection holder said nothing within {within:?}"),
    }
}

/// This process's resident set (`VmRSS` in `/proc/self/status`), in bytes.
pub fn resident_set_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

/// How many file descriptors this process has open (`/proc/self/fd`): a server in the test
/// process holds one per connection it accepted and has not closed.
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}
