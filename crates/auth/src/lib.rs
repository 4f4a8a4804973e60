//! Credentials the fronts accept, written once: [`keys`] is the Postgres table of API keys the
//! edge and the MCP gateway both check (and `switchyard keys` manages), [`jwks`] the public
//! keys that verify JWT bearer tokens. What each front derives from a credential (its caller,
//! its claims) stays in the front.

pub mod jwks;
pub mod keys;

pub use jwks::{JwksFile, KeySet};
pub use keys::{ApiKey, KEY_PREFIX, KeyError, KeyHolder, KeyStore, KeyStoreHealth, NewKey};
