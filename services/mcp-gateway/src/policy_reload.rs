//! Following the servers file: its `[[policies]]` apply as soon as the file changes. A file
//! that no longer reads or validates is logged (naming the entry at fault) and the policies
//! last loaded stay in force; changes to `servers` are noted, and wait for a restart.

use std::{path::PathBuf, sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::{Gateway, upstream::config};

pub async fn watch(gateway: Arc<Gateway>, path: PathBuf, every: Duration, shutdown: CancellationToken) {
    let mut last = std::fs::read(&path).ok();
    let mut servers = config::load_contents(&path).ok().map(|c| c.servers);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = std::fs::read(&path).ok();
        if now == last {
            continue;
        }
        last = now;
        match config::load_contents(&path) {
            Ok(contents) => {
                if servers.as_ref().is_some_and(|s| *s != contents.servers) {
                    tracing::warn!(config = %path.display(), "the servers file's servers changed: restart the gateway to apply");
                }
                servers = Some(contents.servers);
                if *gateway.policies() != contents.policies {
                    tracing::info!(config = %path.display(), policies = contents.policies.policies.len(), "tool policies reloaded");
                    gateway.set_policies(contents.policies);
                }
            }
            Err(err) => {
                tracing::error!(config = %path.display(), error = %err, "the servers file does not validate; the policies last loaded stay in force");
            }
        }
    }
}
