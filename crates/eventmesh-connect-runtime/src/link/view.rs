//! The admin face of mesh links (`/admin/links`): a link's body made into
//! the `mesh-link` connector definition that runs it, and its view made
//! from the connector's. Every operation is the connector operation of the
//! same name, so a link is checked, stored, fenced and shown exactly like
//! any connector; this module only names things as a link's user does.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{pull, KIND};
use crate::def::{DefinitionBody, Export};
use crate::{ConnectorView, Connectors};
use eventmesh_api::ApiError;

/// The remote of a link, as the admin API takes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Remote {
    pub url: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub ca_file: Option<String>,
    #[serde(default)]
    pub cert_file: Option<String>,
    #[serde(default)]
    pub key_file: Option<String>,
    #[serde(default)]
    pub cluster: Option<String>,
}

/// A create (`POST /admin/links`) or update (`PUT /admin/links/{name}`)
/// body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LinkBody {
    #[serde(default)]
    pub name: Option<String>,
    /// `push` (the default): this cluster sends its exports to the remote;
    /// `pull`: this cluster brings the remote's topics (`exports` named at
    /// the remote) home.
    #[serde(default)]
    pub direction: Direction,
    pub remote: Remote,
    pub exports: Vec<Export>,
    #[serde(default)]
    pub rename_prefix: Option<String>,
    #[serde(default)]
    pub max_hops: Option<u32>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Who the link reads this cluster's log as (default `link:<name>`).
    #[serde(default)]
    pub principal: Option<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub paused: bool,
    #[serde(default = "crate::def::yes")]
    pub target_guard: bool,
}

/// Which way a link carries events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Push,
    Pull,
}

/// A link as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkView {
    pub name: String,
    pub direction: Direction,
    /// Secrets shown as `***`.
    pub remote: Value,
    pub exports: Vec<Export>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rename_prefix: Option<String>,
    pub max_hops: u32,
    pub principal: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub paused: bool,
    pub generation: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub status: LinkStatus,
}

/// Where a link runs and how it does.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkStatus {
    /// `UP` (sending), `DOWN` (the remote cannot be reached or refuses the
    /// link; the events wait), `CONNECTING`, `FAILED` (its definition
    /// cannot work), `PAUSED` or `UNASSIGNED`.
    pub state: &'static str,
    /// The remote's cluster name, once the link reached it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_cluster: Option<String>,
    /// Events waiting for the link.
    pub lag_events: u64,
    pub lag_seconds: f64,
    pub events_per_second: f64,
    /// Events this copy sent.
    pub events: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<u64>,
    /// The instance it runs on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Its claim's fencing token (cluster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_link", message)
}

/// A connector refusal, named as a link's fields are: `config: url …`
/// becomes `remote.url …`, `exports[0]…` stays.
fn as_link_error(mut e: ApiError) -> ApiError {
    if e.code != "invalid_connector" {
        return e;
    }
    let message = e.message.strip_prefix("config: ").unwrap_or(&e.message);
    let remote = ["url", "token", "caFile", "certFile", "keyFile", "cluster"];
    e.message = if remote
        .iter()
        .any(|f| message.starts_with(&format!("{f} ")) || message.starts_with(&format!("{f}:")))
        || message.starts_with("certFile and keyFile")
    {
        format!("remote.{message}")
    } else {
        message.to_string()
    };
    e.code = "invalid_link";
    e
}

/// Whether a connector kind is a link's.
fn is_link(kind: &str) -> bool {
    kind == KIND || kind == pull::KIND
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found("unknown_link", format!("no link named {name}"))
}

impl LinkBody {
    /// The connector definition body that runs this link.
    fn into_connector(self, name: &str) -> Result<DefinitionBody, ApiError> {
        if self.name.as_deref().is_some_and(|n| n != name) {
            return Err(invalid("name: a link cannot be renamed"));
        }
        let r = self.remote;
        let mut config = super::Config {
            url: r.url,
            token: r.token,
            ca_file: r.ca_file,
            cert_file: r.cert_file,
            key_file: r.key_file,
            cluster: r.cluster,
            rename_prefix: self.rename_prefix.clone(),
            max_hops: self.max_hops,
            timeout_ms: self.timeout_ms,
            imports: Vec::new(),
        };
        let (kind, topic, group, exports) = match self.direction {
            Direction::Push => (KIND, None, Some(format!("link.{name}")), Some(self.exports)),
            Direction::Pull => {
                // The remote's topics: the config's imports; the first, as
                // named here, the definition's topic.
                config.imports = crate::def::check_exports(self.exports)?;
                let first = format!(
                    "{}{}",
                    self.rename_prefix.as_deref().unwrap_or(""),
                    config.imports[0].topic
                );
                (pull::KIND, Some(first), None, None)
            }
        };
        Ok(DefinitionBody {
            name: Some(name.to_string()),
            kind: kind.to_string(),
            config: Some(serde_json::to_value(&config).unwrap_or_default()),
            topic,
            group,
            subscription: None,
            filters: None,
            exports,
            principal: Some(self.principal.unwrap_or_else(|| format!("link:{name}"))),
            tenant: self.tenant,
            paused: self.paused,
            target_guard: self.target_guard,
        })
    }
}

impl LinkView {
    fn of(c: ConnectorView) -> LinkView {
        let d = c.def;
        let cfg = &d.config;
        let mut remote = Map::new();
        for k in ["url", "token", "caFile", "certFile", "keyFile", "cluster"] {
            if let Some(v) = cfg.get(k) {
                remote.insert(k.to_string(), v.clone());
            }
        }
        let s = c.status;
        let state = match s.status.state.as_str() {
            "running" => "UP",
            "retrying" => "DOWN",
            "starting" => "CONNECTING",
            "failed" => "FAILED",
            "paused" => "PAUSED",
            _ => "UNASSIGNED",
        };
        let (direction, exports) = match d.kind.as_str() {
            pull::KIND => (
                Direction::Pull,
                cfg.get("imports")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default(),
            ),
            _ => (Direction::Push, d.exports),
        };
        LinkView {
            name: d.name,
            direction,
            remote: Value::Object(remote),
            exports,
            rename_prefix: cfg
                .get("renamePrefix")
                .and_then(Value::as_str)
                .map(str::to_string),
            max_hops: cfg
                .get("maxHops")
                .and_then(Value::as_u64)
                .map_or(8, |h| h as u32),
            principal: d.principal,
            tenant: d.tenant,
            paused: d.paused,
            generation: d.generation,
            created_ms: d.created_ms,
            updated_ms: d.updated_ms,
            status: LinkStatus {
                state,
                remote_cluster: s.status.remote,
                lag_events: s.status.lag.unwrap_or(0),
                lag_seconds: s.status.lag_seconds.unwrap_or(0.0),
                events_per_second: s.events_per_second,
                events: s.status.events,
                last_error: s.status.last_error,
                last_error_ms: s.status.last_error_ms,
                instance: s.instance,
                token: s.token,
                since_ms: s.status.since_ms,
            },
        }
    }
}

impl Connectors {
    /// `POST /admin/links`.
    pub async fn create_link(&self, body: LinkBody) -> Result<LinkView, ApiError> {
        let name = body.name.clone().ok_or_else(|| invalid("name: missing"))?;
        let def = body.into_connector(&name)?;
        match self.create(def).await {
            Ok(v) => Ok(LinkView::of(v)),
            Err(e) if e.code == "connector_exists" => Err(ApiError::new(
                e.status,
                "link_exists",
                format!("a link or connector named {name} exists"),
            )),
            Err(e) => Err(as_link_error(e)),
        }
    }

    /// `PUT /admin/links/{name}`.
    pub async fn update_link(&self, name: &str, body: LinkBody) -> Result<LinkView, ApiError> {
        self.link_definition(name).await?;
        let def = body.into_connector(name)?;
        self.update(name, def)
            .await
            .map(LinkView::of)
            .map_err(as_link_error)
    }

    /// `GET /admin/links`.
    pub async fn links(&self) -> Result<Vec<LinkView>, ApiError> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .filter(|c| is_link(&c.def.kind))
            .map(LinkView::of)
            .collect())
    }

    /// `GET /admin/links/{name}`.
    pub async fn link(&self, name: &str) -> Result<LinkView, ApiError> {
        self.link_definition(name).await?;
        Ok(LinkView::of(self.get(name).await?))
    }

    /// `DELETE /admin/links/{name}`.
    pub async fn delete_link(&self, name: &str) -> Result<(), ApiError> {
        self.link_definition(name).await?;
        self.delete(name).await
    }

    /// Pause or resume a link.
    pub async fn pause_link(&self, name: &str, paused: bool) -> Result<LinkView, ApiError> {
        self.link_definition(name).await?;
        Ok(LinkView::of(self.set_paused(name, paused).await?))
    }

    /// Refuses a name that is no link.
    async fn link_definition(&self, name: &str) -> Result<(), ApiError> {
        match self.definition(name).await? {
            Some(d) if is_link(&d.kind) => Ok(()),
            _ => Err(not_found(name)),
        }
    }
}
