//! The REST surface, read from the descriptor set: every RPC with a `google.api.http` option
//! becomes a route. Nothing here names an endpoint by hand (beyond which upstream serves a
//! package, which RPCs need an administrator, and the one response the requirements shape
//! their own way: docs/requirements.md#router-response), so the REST API cannot drift from
//! the protos.

use std::sync::Arc;

use http::Method;
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MethodDescriptor, Value};
use switchyard_proto::google::api::{HttpRule, http_rule::Pattern};

use super::template::{Binding, PathTemplate};

/// The service that serves an RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Upstream {
    Router,
    Sessions,
    Triggers,
    McpGateway,
}

impl Upstream {
    fn for_package(package: &str) -> Option<Self> {
        match package {
            "switchyard.router.v1" => Some(Self::Router),
            "switchyard.sessions.v1" => Some(Self::Sessions),
            "switchyard.triggers.v1" => Some(Self::Triggers),
            "switchyard.mcp.v1" => Some(Self::McpGateway),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Router => "router",
            Self::Sessions => "sessions",
            Self::Triggers => "triggers",
            Self::McpGateway => "mcp-gateway",
        }
    }
}

/// RPCs that change a tenant's roles or the trigger registry, or set and read budgets: callers
/// need an administrator credential.
const ADMIN_RPCS: &[&str] = &[
    "switchyard.router.v1.RouterService.SetBudget",
    "switchyard.router.v1.RouterService.ListBudgets",
    "switchyard.router.v1.RouterService.DeleteBudget",
    "switchyard.sessions.v1.RoleService.CreateRole",
    "switchyard.sessions.v1.RoleService.UpdateRole",
    "switchyard.sessions.v1.RoleService.DeleteRole",
    "switchyard.triggers.v1.TriggerService.RegisterRoleTriggers",
    "switchyard.triggers.v1.TriggerService.UnregisterRole",
];

/// RPCs on the trigger registry itself, which holds every tenant's roles (their ids and
/// patterns) and decides for all of them: only an administrator of the `default` tenant (the
/// operator's; open mode is one) may call them. Tenants reach detection through their sessions.
/// Budgets are the operator's to set, too (a tenant's administrator may read its own).
const OPERATOR_RPCS: &[&str] = &[
    "switchyard.router.v1.RouterService.SetBudget",
    "switchyard.router.v1.RouterService.DeleteBudget",
    "switchyard.triggers.v1.TriggerService.RegisterRoleTriggers",
    "switchyard.triggers.v1.TriggerService.UnregisterRole",
    "switchyard.triggers.v1.TriggerService.ListRoleTriggers",
    "switchyard.triggers.v1.TriggerService.DetectTriggers",
    "switchyard.triggers.v1.TriggerService.GetBestRole",
];

/// How a response becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseShape {
    /// The response message in proto3 JSON.
    Proto,
    /// The required `chat.completion` object (`choices`, `usage`, `_metadata`;
    /// docs/requirements.md#router-response).
    ChatCompletion,
}

/// One RPC the edge can call.
#[derive(Debug)]
pub struct Rpc {
    pub method: MethodDescriptor,
    /// `/package.Service/Method`, the gRPC request path.
    pub grpc_path: http::uri::PathAndQuery,
    pub upstream: Upstream,
    pub admin_only: bool,
    /// Needs an administrator of the `default` tenant (see [`OPERATOR_RPCS`]).
    pub operator_only: bool,
}

impl Rpc {
    pub fn full_name(&self) -> &str {
        self.method.full_name()
    }
}

/// Where the request body goes.
#[derive(Debug, Clone)]
pub enum BodyRule {
    /// No body: every field not in the path comes from the query string.
    None,
    /// `body: "*"`: the whole request message.
    All,
    /// `body: "role"`: one message field.
    Field(FieldDescriptor),
}

#[derive(Debug, Clone)]
pub struct HttpRoute {
    pub method: Method,
    pub template: PathTemplate,
    pub body: BodyRule,
    pub rpc: Arc<Rpc>,
    pub shape: ResponseShape,
}

/// What a request's method and path found.
pub enum Lookup<'a> {
    Found(&'a HttpRoute, Vec<Binding>),
    /// The path exists, with other methods.
    MethodNotAllowed(Vec<Method>),
    NotFound,
}

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("the descriptor set does not decode: {0}")]
    Descriptors(#[from] prost_reflect::DescriptorError),
    #[error("`{rpc}`: {reason}")]
    Rule { rpc: String, reason: String },
}

/// Every HTTP route of the descriptor set.
#[derive(Debug)]
pub struct RouteTable {
    pool: DescriptorPool,
    routes: Vec<HttpRoute>,
}

impl RouteTable {
    /// The routes of Switchyard's own protos.
    pub fn switchyard() -> Result<Self, RulesError> {
        Self::from_descriptor_set(switchyard_proto::FILE_DESCRIPTOR_SET)
    }

    pub fn from_descriptor_set(bytes: &[u8]) -> Result<Self, RulesError> {
        let pool = DescriptorPool::decode(bytes)?;
        let extension = pool.get_extension_by_name("google.api.http");
        let mut routes = Vec::new();
        for service in pool.services() {
            let Some(upstream) = Upstream::for_package(service.package_name()) else { continue };
            for method in service.methods() {
                let options = method.options();
                let Some(extension) = &extension else { continue };
                if !options.has_extension(extension) {
                    continue;
                }
                let rule_error = |reason: String| RulesError::Rule { rpc: method.full_name().to_owned(), reason };
                let Value::Message(rule) = options.get_extension(extension).into_owned() else {
                    return Err(rule_error("google.api.http is not a message".into()));
                };
                let rule: HttpRule = rule.transcode_to().map_err(|e| rule_error(e.to_string()))?;
                let rpc = Arc::new(Rpc {
                    grpc_path: format!("/{}/{}", service.full_name(), method.name())
                        .parse()
                        .map_err(|e: http::uri::InvalidUri| rule_error(e.to_string()))?,
                    upstream,
                    admin_only: ADMIN_RPCS.contains(&method.full_name()),
                    operator_only: OPERATOR_RPCS.contains(&method.full_name()),
                    method: method.clone(),
                });
                let shape = if method.full_name() == "switchyard.router.v1.RouterService.Chat" {
                    ResponseShape::ChatCompletion
                } else {
                    ResponseShape::Proto
                };
                for binding in std::iter::once(&rule).chain(&rule.additional_bindings) {
                    routes.push(route(binding, &rpc, shape).map_err(rule_error)?);
                }
            }
        }
        // More literal segments first: `/a/b/{x}` wins over `/a/{y}/{x}`.
        routes.sort_by_key(|route| std::cmp::Reverse(route.template.literal_prefix_len()));
        Ok(Self { pool, routes })
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    pub fn routes(&self) -> &[HttpRoute] {
        &self.routes
    }

    pub fn find(&self, method: &Method, path: &str) -> Lookup<'_> {
        let mut allowed = Vec::new();
        for route in &self.routes {
            if let Some(bindings) = route.template.matches(path) {
                if route.method == method {
                    return Lookup::Found(route, bindings);
                }
                allowed.push(route.method.clone());
            }
        }
        if allowed.is_empty() { Lookup::NotFound } else { Lookup::MethodNotAllowed(allowed) }
    }

    /// The RPC named `package.Service.Method`, whether or not it has an HTTP rule.
    pub fn rpc(&self, full_name: &str) -> Option<Arc<Rpc>> {
        self.routes.iter().find(|route| route.rpc.full_name() == full_name).map(|route| route.rpc.clone())
    }
}

fn route(rule: &HttpRule, rpc: &Arc<Rpc>, shape: ResponseShape) -> Result<HttpRoute, String> {
    let (method, path) = match &rule.pattern {
        Some(Pattern::Get(path)) => (Method::GET, path),
        Some(Pattern::Put(path)) => (Method::PUT, path),
        Some(Pattern::Post(path)) => (Method::POST, path),
        Some(Pattern::Delete(path)) => (Method::DELETE, path),
        Some(Pattern::Patch(path)) => (Method::PATCH, path),
        Some(Pattern::Custom(custom)) => {
            (Method::from_bytes(custom.kind.as_bytes()).map_err(|e| e.to_string())?, &custom.path)
        }
        None => return Err("google.api.http has no pattern".into()),
    };
    let template = PathTemplate::parse(path).map_err(|e| e.to_string())?;
    let input = rpc.method.input();
    for variable in template.variables() {
        field_at(&input, variable).ok_or_else(|| format!("path variable `{}` is not a field", variable.join(".")))?;
    }
    let body = match rule.body.as_str() {
        "" => BodyRule::None,
        "*" => BodyRule::All,
        name => {
            let field = input.get_field_by_name(name).ok_or_else(|| format!("body field `{name}` is not a field"))?;
            if !matches!(field.kind(), Kind::Message(_)) || field.is_list() {
                return Err(format!("body field `{name}` must be a singular message"));
            }
            BodyRule::Field(field)
        }
    };
    Ok(HttpRoute { method, template, body, rpc: rpc.clone(), shape })
}

/// The field at a path of proto names under `message`, through singular message fields.
pub fn field_at(message: &prost_reflect::MessageDescriptor, path: &[String]) -> Option<FieldDescriptor> {
    let (last, parents) = path.split_last()?;
    let mut current = message.clone();
    for name in parents {
        let field = current.get_field_by_name(name)?;
        match field.kind() {
            Kind::Message(inner) if !field.is_list() => current = inner,
            _ => return None,
        }
    }
    current.get_field_by_name(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        RouteTable::switchyard().expect("the protos' rules load")
    }

    #[test]
    fn every_annotated_rpc_is_routed() {
        let table = table();
        let names: Vec<&str> = table.routes().iter().map(|r| r.rpc.full_name()).collect();
        // The required endpoints (docs/requirements.md#sessions-endpoints, #router-endpoint)
        // and the rest of the annotated RPCs.
        for rpc in [
            "switchyard.sessions.v1.SessionService.CreateSession",
            "switchyard.sessions.v1.SessionService.ProcessQuery",
            "switchyard.sessions.v1.SessionService.SwitchContext",
            "switchyard.sessions.v1.SessionService.GetSession",
            "switchyard.sessions.v1.SessionService.GetHistory",
            "switchyard.sessions.v1.SessionService.CloseSession",
            "switchyard.router.v1.RouterService.Chat",
            "switchyard.router.v1.RouterService.ChatStream",
            "switchyard.mcp.v1.McpGatewayService.CallTool",
            "switchyard.triggers.v1.TriggerService.DetectTriggers",
            "switchyard.sessions.v1.RoleService.UpdateRole",
        ] {
            assert!(names.contains(&rpc), "{rpc} has no route");
        }
        let annotated = table
            .pool()
            .services()
            .flat_map(|s| s.methods().collect::<Vec<_>>())
            .filter(|m| m.input().package_name().starts_with("switchyard."))
            .count();
        assert_eq!(table.routes().len(), annotated, "every switchyard RPC carries exactly one HTTP rule");
    }

    #[test]
    fn lookups_find_routes_bindings_and_allowed_methods() {
        let table = table();
        let Lookup::Found(route, bindings) = table.find(&Method::GET, "/api/context/sessions/s-1/history") else {
            panic!("history route not found");
        };
        assert_eq!(route.rpc.full_name(), "switchyard.sessions.v1.SessionService.GetHistory");
        assert_eq!(bindings[0].value, "s-1");

        let Lookup::Found(route, bindings) = table.find(&Method::PATCH, "/api/context/roles/tech-expert") else {
            panic!("role update route not found");
        };
        assert!(matches!(&route.body, BodyRule::Field(field) if field.name() == "role"));
        assert_eq!(bindings[0].field_path, ["role", "id"]);
        assert!(route.rpc.admin_only && !route.rpc.operator_only, "a tenant's administrator changes its roles");
        let Lookup::Found(route, _) = table.find(&Method::PUT, "/api/triggers/roles/tech-expert") else {
            panic!("trigger registration route not found");
        };
        assert!(route.rpc.operator_only, "the shared trigger registry is the operator's");

        match table.find(&Method::PUT, "/api/context/sessions") {
            Lookup::MethodNotAllowed(allowed) => assert_eq!(allowed, [Method::POST]),
            _ => panic!("PUT on the sessions collection should be 405"),
        }
        assert!(matches!(table.find(&Method::GET, "/api/nothing"), Lookup::NotFound));
        let Lookup::Found(route, _) = table.find(&Method::POST, "/api/v1/chat") else { panic!("chat not found") };
        assert_eq!(route.shape, ResponseShape::ChatCompletion);
        assert_eq!(route.rpc.grpc_path.as_str(), "/switchyard.router.v1.RouterService/Chat");
    }
}
