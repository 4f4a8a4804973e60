//! The HTTP/2 connections a run shares between its workers.

use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};

/// Open connections to one target; never empty. Workers are dealt over them round-robin so
/// that each connection carries the same share of the load.
#[derive(Debug, Clone)]
pub struct Connections {
    channels: Vec<Channel>,
}

impl Connections {
    /// Opens `count` (at least one) separate connections to `target`, e.g.
    /// `http://127.0.0.1:50051`. Connecting eagerly makes an unreachable target fail the setup
    /// instead of showing up as a run full of UNAVAILABLE.
    pub async fn open(target: &str, count: usize) -> anyhow::Result<Self> {
        let endpoint = Endpoint::from_shared(target.to_owned())
            .with_context(|| format!("invalid target URL `{target}`"))?
            .connect_timeout(Duration::from_secs(5))
            // Requests are small and latency is what is measured: do not let Nagle hold them.
            .tcp_nodelay(true);
        let mut channels = Vec::with_capacity(count.max(1));
        for index in 0..count.max(1) {
            // Each `connect` opens its own TCP connection; a clone would share one.
            let channel = endpoint
                .connect()
                .await
                .with_context(|| format!("opening connection {} of {count} to {target}", index + 1))?;
            channels.push(channel);
        }
        Ok(Self { channels })
    }

    /// The connection that `worker` sends on.
    pub fn for_worker(&self, worker: usize) -> Channel {
        // In bounds: `open` never leaves `channels` empty.
        self.channels[worker % self.channels.len()].clone()
    }
}
