//! The real Redis the tests use (`REDIS_URL`), the shared Redis Cluster and a cluster of a
//! test's own, and a key prefix per test, whose keys are
//! deleted when its guard goes out of scope. Keys are found with SCAN, never KEYS, which
//! would block a Redis shared with other tests.

use std::{fmt, net::SocketAddr, ops::Deref, time::Duration};

use crate::proxy;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// The three-primary Redis Cluster `scripts/ensure-services.sh` starts
/// (`REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003`, which
/// `scripts/test` exports). A test that needs it fails, naming the variable, when it is unset.
pub fn redis_cluster_url() -> String {
    std::env::var("REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_CLUSTER_URL is not set: run scripts/ensure-services.sh and set \
             REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 (scripts/test does)"
        )
    })
}

/// `host:port` of the Redis in `REDIS_URL`.
pub fn redis_addr() -> SocketAddr {
    proxy::url_addr(&redis_url(), 6379)
}

/// `REDIS_URL` pointed at `addr` instead (a proxy in front of the same Redis).
pub fn redis_url_via(addr: SocketAddr) -> String {
    proxy::url_via(&redis_url(), addr)
}

/// A key prefix no other test uses; every key under it is deleted when the guard is dropped.
pub struct KeyPrefix {
    prefix: String,
}

impl KeyPrefix {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: crate::unique(prefix) }
    }

    pub fn as_str(&self) -> &str {
        &self.prefix
    }
}

impl Deref for KeyPrefix {
    type Target = str;
    fn deref(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)
    }
}

impl Drop for KeyPrefix {
    fn drop(&mut self) {
        // The blocking client needs no runtime, so this works while a panic unwinds too.
        if let Err(err) = delete_keys(&self.prefix) {
            crate::cleanup_failed(&format!("deleting test keys under {}: {err}", self.prefix));
        }
    }
}

/// Deletes every key under `prefix` (what an eviction or FLUSHDB does to a session) and says
/// how many there were.
pub async fn delete_redis_keys(prefix: &str) -> usize {
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || delete_keys(&prefix))
        .await
        .expect("the key deletion task")
        .unwrap_or_else(|err| panic!("deleting test keys in redis at {} (set REDIS_URL): {err}", redis_url()))
}

fn delete_keys(prefix: &str) -> redis::RedisResult<usize> {
    let client = redis::Client::open(redis_url())?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
    let mut cursor = 0u64;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)?;
        if !keys.is_empty() {
            let removed: usize = redis::cmd("DEL").arg(&keys).query(&mut conn)?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// A key prefix no other test uses on a Redis Cluster: every key holding it is deleted from
/// every primary when the guard is dropped, the test passing, failing or panicking. The keys of
/// one prefix are spread over the slots (or sit behind a hash tag that puts the prefix inside
/// the key), so each primary is scanned for keys containing it, and each key deleted alone:
/// keys of different slots cannot share a `DEL`.
pub struct ClusterKeyPrefix {
    prefix: String,
    nodes: Vec<String>,
}

impl ClusterKeyPrefix {
    /// On the shared cluster (`REDIS_CLUSTER_URL`).
    pub fn new(prefix: &str) -> Self {
        Self::on(&redis_cluster_url(), prefix)
    }

    /// On the cluster of `url` (`redis+cluster://HOST:PORT[,HOST:PORT…]`), one of the test's
    /// own for instance.
    pub fn on(url: &str, prefix: &str) -> Self {
        Self { prefix: crate::unique(prefix), nodes: cluster_nodes(url) }
    }

    pub fn as_str(&self) -> &str {
        &self.prefix
    }
}

impl Deref for ClusterKeyPrefix {
    type Target = str;
    fn deref(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for ClusterKeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)
    }
}

impl Drop for ClusterKeyPrefix {
    fn drop(&mut self) {
        for node in &self.nodes {
            if let Err(err) = delete_keys_containing(node, &self.prefix) {
                crate::cleanup_failed(&format!("deleting test keys holding {} on {node}: {err}", self.prefix));
            }
        }
    }
}

/// `redis://HOST:PORT` of each node a `redis+cluster://` URL names.
pub fn cluster_nodes(url: &str) -> Vec<String> {
    let nodes = url.strip_prefix("redis+cluster://").unwrap_or_else(|| panic!("not a redis+cluster:// URL: {url}"));
    nodes.split(',').map(|node| format!("redis://{node}")).collect()
}

fn delete_keys_containing(node: &str, prefix: &str) -> redis::RedisResult<usize> {
    let client = redis::Client::open(node)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
    let mut cursor = 0u64;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)?;
        for key in keys {
            let removed: usize = redis::cmd("DEL").arg(&key).query(&mut conn)?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// A three-primary Redis Cluster of the test's own (Debian's `redis-server` in cluster mode, no
/// replicas, no persistence), for tests that kill and restart a node: the shared cluster on
/// 7001-7003 is never restarted. Each node keeps its `nodes.conf` in the cluster's temporary
/// directory, so a node killed and started again comes back empty with its node id and slots,
/// and rejoins. Every node is killed and the directory removed when it is dropped.
pub struct OwnCluster {
    dir: std::path::PathBuf,
    nodes: Vec<ClusterNode>,
}

struct ClusterNode {
    port: u16,
    /// The cluster bus port, chosen free like the client port (the default, port + 10000,
    /// may not exist or be taken).
    bus_port: u16,
    process: Option<std::process::Child>,
}

/// How long a node may be unreachable before the others mark it failed. Short, so the
/// cluster notices a killed node, and forgives it once back, within a test's seconds.
const NODE_TIMEOUT_MS: u32 = 1000;

impl OwnCluster {
    /// Starts three nodes on free loopback ports and makes them one cluster
    /// (`redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`), every slot served.
    pub async fn start() -> Self {
        let dir = std::env::temp_dir().join(crate::unique("switchyard-redis-cluster"));
        std::fs::create_dir_all(&dir).expect("the cluster's temporary directory");
        let nodes = (0..3)
            .map(|_| ClusterNode { port: crate::free_port(), bus_port: crate::free_port(), process: None })
            .collect();
        let mut cluster = Self { dir, nodes };
        for node in 0..3 {
            cluster.spawn(node);
        }
        for node in 0..3 {
            cluster.wait_answering(node).await;
        }
        let addrs: Vec<String> = cluster.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        let created = tokio::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .unwrap_or_else(|err| panic!("redis-cli (Debian's redis-tools package) must be installed: {err}"));
        assert!(
            created.status.success(),
            "redis-cli --cluster create {addrs:?}: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        );
        cluster.wait_healthy().await;
        cluster
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`, the form the services take.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis://127.0.0.1:PORT` of one node.
    pub fn node_url(&self, node: usize) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[node].port)
    }

    /// How many keys holding `prefix` each node has (a SCAN per node), to pick a node whose
    /// loss a test's data feels.
    pub async fn keys_per_node(&self, prefix: &str) -> Vec<usize> {
        let mut counts = Vec::new();
        for node in 0..self.nodes.len() {
            let client = redis::Client::open(self.node_url(node)).expect("a node URL");
            let mut conn = client.get_multiplexed_async_connection().await.expect("the node answers");
            let (mut cursor, mut count) = (0u64, 0);
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("*{prefix}*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .expect("SCAN");
                count += keys.len();
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            counts.push(count);
        }
        counts
    }

    /// SIGKILL to one node: no shutdown, nothing saved (its `nodes.conf` stays on disk).
    pub fn kill(&mut self, node: usize) {
        if let Some(mut process) = self.nodes[node].process.take() {
            process.kill().expect("kill a cluster node");
            process.wait().expect("the killed node reaped");
        }
    }

    /// Starts a killed node again, empty, on its port with its `nodes.conf`; returns once it
    /// has rejoined and the cluster serves every slot again.
    pub async fn restart(&mut self, node: usize) {
        assert!(self.nodes[node].process.is_none(), "node {node} is still running");
        self.spawn(node);
        self.wait_answering(node).await;
        self.wait_healthy().await;
    }

    fn spawn(&mut self, node: usize) {
        let dir = self.dir.join(node.to_string());
        std::fs::create_dir_all(&dir).expect("a node's directory");
        let ClusterNode { port, bus_port, .. } = self.nodes[node];
        let process = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--cluster-port", &bus_port.to_string()])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("redis-server (Debian's redis-server package) must be installed: {err}"));
        self.nodes[node].process = Some(process);
    }

    async fn wait_answering(&self, node: usize) {
        let url = self.node_url(node);
        let what = format!("the cluster node at {url} answering");
        crate::eventually(Duration::from_secs(10), &what, || {
            let url = url.clone();
            async move {
                let client = redis::Client::open(url).map_err(|err| err.to_string())?;
                let mut conn = client.get_multiplexed_async_connection().await.map_err(|err| err.to_string())?;
                redis::cmd("PING").query_async::<String>(&mut conn).await.map_err(|err| err.to_string())
            }
        })
        .await;
    }

    /// Every node says the cluster is ok, all 16384 slots assigned, three nodes known.
    async fn wait_healthy(&self) {
        let urls: Vec<String> = (0..self.nodes.len()).map(|node| self.node_url(node)).collect();
        crate::eventually(Duration::from_secs(30), "the test's Redis Cluster healthy on every node", || {
            let urls = urls.clone();
            async move {
                for url in urls {
                    let client = redis::Client::open(url.as_str()).map_err(|err| err.to_string())?;
                    let mut conn =
                        client.get_multiplexed_async_connection().await.map_err(|err| format!("{url}: {err}"))?;
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async(&mut conn)
                        .await
                        .map_err(|err| err.to_string())?;
                    let healthy = ["cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3"]
                        .iter()
                        .all(|field| info.contains(field));
                    if !healthy {
                        return Err(format!("{url}: {info}"));
                    }
                }
                Ok(())
            }
        })
        .await;
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                let _ = process.kill();
                let _ = process.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
