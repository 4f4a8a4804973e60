//! The stdio transport: the server is a child process the gateway starts, with a clean
//! environment, speaking MCP on its stdin/stdout; its stderr becomes our debug log.

use std::{collections::BTreeMap, process::Stdio};

use super::config::ConfigValue;

use rmcp::{ServiceExt, transport::TokioChildProcess};
use tokio::io::AsyncBufReadExt;

use super::{
    Upstream,
    client::{Running, UpstreamClient},
    relay::Tapped,
};

/// The gateway's environment variables a stdio server inherits (everything else must be
/// given in its `env`).
const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"];

/// Starts the server's process and runs the initialize handshake with it.
pub(super) async fn connect(
    upstream: &Upstream,
    client: UpstreamClient,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, ConfigValue>,
    cwd: Option<&str>,
) -> Result<Running, String> {
    // Read again for every start, so a rotated secret file reaches the next process.
    let env = env
        .iter()
        .map(|(name, value)| Ok((name, value.reread(&format!("env.{name}"))?)))
        .collect::<Result<Vec<_>, String>>()?;
    let mut cmd = tokio::process::Command::new(command);
    // A server gets a clean environment plus its own `env`: the gateway's secrets
    // (DATABASE_URL, tokens) are not a tool's business, and some servers expose their
    // environment through a tool.
    cmd.env_clear()
        .envs(std::env::vars().filter(|(name, _)| INHERITED_ENV.contains(&name.as_str())))
        .envs(env)
        .args(args)
        .kill_on_drop(true);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    let (process, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot start `{command}`: {err}"))?;
    let pid = process.id();
    if let Some(stderr) = stderr {
        // A server's own log lines, kept apart from ours but not lost.
        let name = upstream.spec.name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %name, "{line}");
            }
        });
    }
    upstream.update(|s| s.pid = pid);
    let process = Tapped::new(process, &upstream.spec.name, client.relay.clone());
    client.serve(process).await.map_err(|err| format!("initialize failed: {err}"))
}
