//! The `switchyard` binary's flags parse: every service's settings flattened into `dev` without
//! a clash (clap refuses two arguments of one name only when the command is built, at run time),
//! and the dev edge takes its rate limit from them.

#[test]
fn dev_help_lists_every_services_settings() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args(["dev", "--help"]).output();
    let output = output.expect("run switchyard dev --help");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "dev --help fails: {}", String::from_utf8_lossy(&output.stderr));
    for flag in
        ["--router-port", "--mcp-server", "--openai-base-url", "UNIFIED_CHAT_DEFAULT_MODEL", "--edge-rate-limit"]
    {
        assert!(help.contains(flag), "dev --help does not mention {flag}:\n{help}");
    }
}

/// A `switchyard dev` process, killed when dropped; `edge` is the edge's address it printed.
struct Dev {
    child: std::process::Child,
    edge: String,
}

impl Dev {
    /// Starts `switchyard dev` on free ports with `extra` flags, from the repository root (where
    /// its models are), and reads the edge's address from what it prints.
    fn start(extra: &[&str]) -> Self {
        use std::io::BufRead;
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let ports = ["--triggers-port", "--sessions-port", "--mcp-gateway-port", "--mcp-port", "--router-port"];
        let mut args = vec!["dev", "--edge-port", "0"];
        for port in ports {
            args.extend([port, "0"]);
        }
        args.extend(extra);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .current_dir(root)
            .args(&args)
            .env_remove("EDGE_RATE_LIMIT")
            .env_remove("EDGE_RATE_BURST")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start switchyard dev");
        let stdout = child.stdout.take().expect("stdout");
        let mut dev = Self { child, edge: String::new() };
        let mut lines = std::io::BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let line = line.expect("read switchyard dev's output");
            if let Some(url) = line.trim().strip_prefix("console") {
                dev.edge = url.trim().trim_end_matches('/').to_owned();
                // Keep reading: with its stdout closed, the next line it prints would end it.
                std::thread::spawn(move || lines.for_each(drop));
                return dev;
            }
        }
        panic!("switchyard dev exited without printing the edge's address");
    }

    /// The statuses of `count` requests for the model list, all sent at once, in order.
    async fn statuses(&self, count: usize) -> Vec<u16> {
        switchyard_kit::tls::install_crypto_provider();
        let client = reqwest::Client::new();
        let url = format!("{}/v1/models", self.edge);
        let calls: Vec<_> = (0..count)
            .map(|_| {
                let request = client.get(&url).send();
                tokio::spawn(async move { request.await.expect("edge answers").status().as_u16() })
            })
            .collect();
        let mut statuses = Vec::with_capacity(count);
        for call in calls {
            statuses.push(call.await.expect("request task"));
        }
        statuses.sort_unstable();
        statuses
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The dev edge is open, so every caller shares one allowance: `--edge-rate-limit` and
/// `--edge-rate-burst` set it (a load test raises it; 0 lifts it).
#[tokio::test]
async fn dev_edge_rate_limit_flags_reach_the_edge() {
    let limited = Dev::start(&["--edge-rate-limit", "1", "--edge-rate-burst", "2"]);
    let statuses = limited.statuses(5).await;
    assert_eq!(statuses, [200, 200, 429, 429, 429], "a burst of 2 at 1 request a second");
    drop(limited);

    // Above the default burst (40), none refused.
    let unlimited = Dev::start(&["--edge-rate-limit", "0"]);
    let statuses = unlimited.statuses(60).await;
    assert!(statuses.iter().all(|&s| s == 200), "no limit: {statuses:?}");
}
