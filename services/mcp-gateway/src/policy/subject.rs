//! Who is asking, as policies see it: the tenant and user of the request's identity, and the
//! role, groups and scopes its credential (or, in open mode, the headers of whatever is in
//! front) gave.

use switchyard_kit::{FieldError, Identity, RoleId, TenantId, UserId, identity::SessionKey};

/// The request header (and gRPC metadata key) naming the caller's user groups, comma-separated,
/// as the API gateway in front set them.
pub const GROUPS_HEADER: &str = "x-switchyard-groups";
/// The request header (and gRPC metadata key) naming the caller's role (one role id).
pub const ROLE_HEADER: &str = "x-switchyard-role";
/// Most groups one caller may name.
pub const MAX_GROUPS: usize = 64;
const MAX_GROUP_LEN: usize = 64;

/// Who is asking: what policies look at (tenant, role, groups, scopes), and the user, for the
/// audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subject {
    pub tenant: TenantId,
    /// Not looked at by policies (they name no users); recorded in the audit trail.
    pub user: Option<UserId>,
    pub role: Option<RoleId>,
    /// Sorted, each once.
    pub groups: Vec<String>,
    /// OAuth scopes of the caller's token (`--auth oauth`; see [`crate::auth`]). Sorted, each
    /// once.
    pub scopes: Vec<String>,
}

impl Subject {
    /// The subject of a request that named only its tenant (or nothing: the default tenant).
    pub fn tenant_of(key: Option<&SessionKey>) -> Self {
        Self { tenant: key.map(|k| k.tenant.clone()).unwrap_or_default(), ..Self::default() }
    }

    /// The caller of a request: its identity, plus the role and groups headers.
    pub fn from_headers(identity: &Identity, headers: &http::HeaderMap) -> Result<Self, FieldError> {
        let text = |name: &str| {
            headers
                .get(name)
                .map(|value| value.to_str().map_err(|_| FieldError::new(name, "must be visible ASCII")))
                .transpose()
        };
        Self::parse(identity, text(ROLE_HEADER)?, text(GROUPS_HEADER)?)
    }

    /// The caller of an MCP HTTP request: its identity and role and groups headers (set from
    /// the credential when one is required, see [`crate::auth`]), and its token's scopes.
    pub fn from_parts(identity: &Identity, parts: &http::request::Parts) -> Result<Self, FieldError> {
        let mut subject = Self::from_headers(identity, &parts.headers)?;
        if let Some(granted) = parts.extensions.get::<crate::auth::GrantedScopes>() {
            subject.scopes = granted.0.clone();
        }
        Ok(subject)
    }

    /// Sets the groups (a token's claim): each checked, sorted, once, at most [`MAX_GROUPS`].
    pub fn set_groups(&mut self, groups: Vec<String>) -> Result<(), String> {
        let mut groups = groups;
        for group in &groups {
            check_group(group)?;
        }
        groups.sort();
        groups.dedup();
        if groups.len() > MAX_GROUPS {
            return Err(format!("names {} groups, over the limit of {MAX_GROUPS}", groups.len()));
        }
        self.groups = groups;
        Ok(())
    }

    /// The caller of a gRPC request: its identity, plus the role and groups metadata.
    pub fn from_metadata(identity: &Identity, metadata: &tonic::metadata::MetadataMap) -> Result<Self, FieldError> {
        let text = |name: &str| {
            metadata
                .get(name)
                .map(|value| value.to_str().map_err(|_| FieldError::new(name, "must be visible ASCII")))
                .transpose()
        };
        Self::parse(identity, text(ROLE_HEADER)?, text(GROUPS_HEADER)?)
    }

    fn parse(identity: &Identity, role: Option<&str>, groups: Option<&str>) -> Result<Self, FieldError> {
        let role = role
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(|r| RoleId::parse(r).map_err(|why| FieldError::new(ROLE_HEADER, why)))
            .transpose()?;
        let mut parsed: Vec<String> = Vec::new();
        for group in groups.unwrap_or_default().split(',').map(str::trim).filter(|g| !g.is_empty()) {
            check_group(group).map_err(|why| FieldError::new(GROUPS_HEADER, why))?;
            parsed.push(group.to_owned());
        }
        parsed.sort();
        parsed.dedup();
        if parsed.len() > MAX_GROUPS {
            return Err(FieldError::new(
                GROUPS_HEADER,
                format!("names {} groups, over the limit of {MAX_GROUPS}", parsed.len()),
            ));
        }
        Ok(Self {
            tenant: identity.tenant.clone(),
            user: identity.user.clone(),
            role,
            groups: parsed,
            scopes: Vec::new(),
        })
    }

    /// What policies decide on: subjects equal in it get the same access.
    pub(super) fn policy_key(&self) -> PolicyKey {
        (self.tenant.clone(), self.role.clone(), self.groups.clone(), self.scopes.clone())
    }
}

pub(super) type PolicyKey = (TenantId, Option<RoleId>, Vec<String>, Vec<String>);

pub(super) fn check_group(group: &str) -> Result<(), String> {
    if group.len() > MAX_GROUP_LEN
        || !group.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '/'))
    {
        return Err(format!("group `{group}` must be 1 to {MAX_GROUP_LEN} characters of [A-Za-z0-9._:@/-]"));
    }
    Ok(())
}
