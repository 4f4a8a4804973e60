//! `switchyard serve`: the real binary runs every service in one process from the environment
//! variables of each service's own binary, on the real stores (Postgres and Redis) with the
//! edge closed to callers without a key. A key made by `switchyard keys create` is accepted, a
//! chat turn through the edge reaches the scripted vendor and leaves its records in Postgres and
//! its live session in Redis, and SIGTERM stops the process cleanly: callers first, so a turn in
//! flight still reaches the services it needs and is recorded whole. A malformed variable stops
//! it at start with the variable's name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::BufRead,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use switchyard_testkit::{
    KeyPrefix, Schema, database_url, eventually,
    llm::{Reply, ScriptedLlm},
    redis_url,
};

/// The repository root, where the binary finds its models as a deployment would in its folder.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Where the served suite keeps its state: a Postgres schema per service, one Redis prefix.
struct Stores {
    triggers: Schema,
    sessions: Schema,
    gateway: Schema,
    router: Schema,
    edge: Schema,
    keys: KeyPrefix,
}

impl Stores {
    fn new() -> Self {
        Self {
            triggers: Schema::new("serve_triggers"),
            sessions: Schema::new("serve_sessions"),
            gateway: Schema::new("serve_gateway"),
            router: Schema::new("serve_router"),
            edge: Schema::new("serve_edge"),
            keys: KeyPrefix::new("serve"),
        }
    }

    /// The variables a deployment would set, every listener on a free port of loopback.
    fn environment(&self, llm: &ScriptedLlm) -> Vec<(&'static str, String)> {
        let loopback = "127.0.0.1:0".to_owned();
        vec![
            ("DATABASE_URL", database_url()),
            ("REDIS_URL", redis_url()),
            ("TRIGGERS_DB_SCHEMA", self.triggers.to_string()),
            ("SESSIONS_DB_SCHEMA", self.sessions.to_string()),
            ("MCP_GATEWAY_DB_SCHEMA", self.gateway.to_string()),
            ("ROUTER_DB_SCHEMA", self.router.to_string()),
            ("EDGE_DB_SCHEMA", self.edge.to_string()),
            ("SESSIONS_REDIS_PREFIX", format!("{}:sessions", self.keys)),
            ("MCP_GATEWAY_REDIS_PREFIX", format!("{}:gateway", self.keys)),
            ("ROUTER_REDIS_PREFIX", format!("{}:router", self.keys)),
            ("EDGE_REDIS_PREFIX", format!("{}:edge", self.keys)),
            ("TRIGGERS_LISTEN", loopback.clone()),
            ("SESSIONS_LISTEN", loopback.clone()),
            ("MCP_GATEWAY_LISTEN", loopback.clone()),
            ("MCP_GATEWAY_MCP_LISTEN", loopback.clone()),
            ("ROUTER_LISTEN", loopback.clone()),
            ("EDGE_LISTEN", loopback),
            ("OPENAI_BASE_URL", llm.openai_base_url()),
            ("OPENAI_API_KEY", "sk-test-serve".to_owned()),
            ("UNIFIED_CHAT_DEFAULT_MODEL", "openai/gpt-4o-mini".to_owned()),
            // Addresses the services must not use: in one process they call each other in
            // process, whatever these say.
            ("TRIGGERS_URL", "http://127.0.0.1:9".to_owned()),
            ("SESSIONS_URL", "http://127.0.0.1:9".to_owned()),
            ("ROUTER_URL", "http://127.0.0.1:9".to_owned()),
            ("MCP_GATEWAY_URL", "http://127.0.0.1:9".to_owned()),
        ]
    }
}

/// `switchyard` with only `environment` (and what finds programs and caches) set.
fn switchyard(environment: &[(&'static str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    command.current_dir(ROOT).env_clear().envs(environment.iter().map(|(k, v)| (*k, v)));
    for kept in ["PATH", "HOME", "RUST_LOG"] {
        if let Some(value) = std::env::var_os(kept) {
            command.env(kept, value);
        }
    }
    command
}

/// A `switchyard serve` process, killed if still running when dropped.
struct Served {
    child: Child,
    edge: String,
}

impl Served {
    /// Starts it and reads the edge's address from what it prints.
    fn start(environment: &[(&'static str, String)]) -> Self {
        let mut child = switchyard(environment)
            .arg("serve")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start switchyard serve");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        for line in lines.by_ref() {
            let line = line.expect("read switchyard serve's output");
            if let Some(url) = line.trim().strip_prefix("edge") {
                let edge = url.trim().trim_end_matches('/').to_owned();
                // Keep reading: with its stdout closed, the next line it prints would end it.
                std::thread::spawn(move || lines.for_each(drop));
                return Self { child, edge };
            }
        }
        let status = child.wait().expect("wait for switchyard serve");
        panic!("switchyard serve exited ({status}) without printing the edge's address");
    }

    /// Sends SIGTERM and waits for the process to end, as Kubernetes stops a pod.
    async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll switchyard serve") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "switchyard serve did not stop within 60 s of SIGTERM");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn count(pool: &sqlx::PgPool, sql: String, session: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(session).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn serve_runs_the_suite_on_the_real_stores_behind_keys() {
    switchyard_kit::tls::install_crypto_provider();
    let llm = ScriptedLlm::start(|request| {
        let reply = Reply::text("Paris is the capital of France.").usage(12, 7);
        // The turn in flight when SIGTERM comes.
        if request.last_user_text().unwrap_or_default().contains("slowly") {
            reply.delay(Duration::from_millis(1500))
        } else {
            reply
        }
    })
    .await;
    let stores = Stores::new();
    let environment = stores.environment(&llm);

    // A key, made as an operator would, in the edge's schema.
    let created = switchyard(&environment).args(["keys", "create", "--tenant", "acme"]).output().unwrap();
    assert!(created.status.success(), "keys create: {}", String::from_utf8_lossy(&created.stderr));
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();

    let served = Served::start(&environment);
    let http = reqwest::Client::new();
    let chat = format!("{}/api/v1/chat", served.edge);
    let body = json!({"message": "What is the capital of France?", "session_id": "trip-1"});

    // The edge is closed: a production edge answers only callers with a credential.
    let anonymous = http.post(&chat).json(&body).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401, "no key: {}", anonymous.text().await.unwrap());

    let created = http
        .post(format!("{}/api/context/sessions", served.edge))
        .bearer_auth(&key)
        .json(&json!({"session_id": "trip-1", "initial_role_id": "general-assistant"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 200, "create the session: {}", created.text().await.unwrap());

    let answer = http.post(&chat).bearer_auth(&key).json(&body).send().await.unwrap();
    let status = answer.status().as_u16();
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "Paris is the capital of France.", "{answer}");
    assert_eq!(llm.answered(), 1, "the turn reached the vendor once");

    // The live session is in Redis, under the sessions service's prefix.
    let mut redis = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let live: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}:sessions*", stores.keys)).query_async(&mut redis).await.unwrap();
    assert!(!live.is_empty(), "no live session under {}:sessions", stores.keys);

    // Its records are in Postgres: the two messages, the turn, the routing decision.
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    let (sessions, router) = (stores.sessions.name(), stores.router.name());
    eventually(Duration::from_secs(20), "the turn's records in Postgres", || async {
        let found = [
            count(
                &pool,
                format!("SELECT count(*) FROM \"{sessions}\".session_messages WHERE session_id = $1"),
                "trip-1",
            )
            .await,
            count(
                &pool,
                format!("SELECT count(*) FROM \"{router}\".routing_decisions WHERE session_id = $1"),
                "trip-1",
            )
            .await,
        ];
        if found == [2, 1] { Ok(()) } else { Err(format!("messages, decisions: {found:?}")) }
    })
    .await;

    // SIGTERM during a turn: the edge drains it while the router and sessions still answer, so
    // it is answered and recorded whole before the process exits.
    let slow = json!({"message": "Tell me slowly: what is the capital of France?", "session_id": "trip-1"});
    let in_flight = tokio::spawn(http.post(&chat).bearer_auth(&key).json(&slow).send());
    eventually(Duration::from_secs(10), "the slow turn at the vendor", || async {
        if llm.requests().len() >= 2 { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    let status = served.terminate().await;
    assert!(status.success(), "switchyard serve after SIGTERM: {status}");
    let answer = in_flight.await.unwrap().expect("the turn in flight is answered");
    assert_eq!(answer.status().as_u16(), 200, "the turn in flight");
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Paris is the capital of France.", "{answer}");
    let found = [
        count(&pool, format!("SELECT count(*) FROM \"{sessions}\".session_messages WHERE session_id = $1"), "trip-1")
            .await,
        count(&pool, format!("SELECT count(*) FROM \"{router}\".routing_decisions WHERE session_id = $1"), "trip-1")
            .await,
    ];
    assert_eq!(found, [4, 2], "messages and decisions after the process stopped");
}

#[test]
fn serve_names_a_malformed_variable_and_does_not_start() {
    let environment = vec![("ROUTER_LISTEN", "nowhere".to_owned()), ("DATABASE_URL", database_url())];
    let output = switchyard(&environment).arg("serve").stdout(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started with ROUTER_LISTEN=nowhere");
    assert!(stderr.contains("switchyard-router's setting ROUTER_LISTEN"), "the error does not name it: {stderr}");
    assert!(stderr.contains("nowhere"), "the error does not quote the value: {stderr}");
}

#[test]
fn serve_without_a_database_says_which_variables_to_set() {
    let output = switchyard(&[]).arg("serve").stdout(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started without DATABASE_URL");
    // The first service started names both ways out: a database, or its own in-memory variable.
    assert!(stderr.contains("DATABASE_URL"), "{stderr}");
    assert!(stderr.contains("TRIGGERS_IN_MEMORY=true"), "{stderr}");
}
