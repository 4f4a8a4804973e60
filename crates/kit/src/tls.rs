//! The TLS crypto provider. rustls needs exactly one process-wide provider when several crates
//! (reqwest for MCP over HTTPS, sqlx, OTLP) each enable a different one; every binary installs
//! ring here once, before any client is built.

/// Installs ring as the process's rustls provider; later calls (and a provider installed by
/// someone else first) are fine.
pub fn install_crypto_provider() {
    // `Err` means a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
