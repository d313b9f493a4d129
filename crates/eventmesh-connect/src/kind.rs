//! The registry of connector kinds: each [`SourceKind`] or [`SinkKind`]
//! erased into a [`Kind`] the runtime can list, check configs against and
//! open by name.
//!
//! Invariant: a kind's `open` is only ever given a config that passed its
//! `check` (the registry checks again before opening, so a definition
//! stored by an older version cannot slip past a stricter check).

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::sdk::{
    ConnectorError, Sink, SinkContext, SinkKind, Source, SourceContext, SourceKind, Target,
};

/// Whether a kind reads into the mesh or writes out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Source,
    Sink,
}

#[async_trait]
trait Erased: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn role(&self) -> Role;
    fn schema(&self) -> Value;
    fn check(&self, config: &Value) -> Result<(), String>;
    fn targets(&self, config: &Value) -> Vec<Target>;
    async fn open_source(
        &self,
        _config: Value,
        _ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        Err(ConnectorError::config(format!(
            "{} is not a source",
            self.name()
        )))
    }
    async fn open_sink(
        &self,
        _config: Value,
        _ctx: SinkContext,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        Err(ConnectorError::config(format!(
            "{} is not a sink",
            self.name()
        )))
    }
}

fn schema_of<C: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(C)).unwrap_or(Value::Null)
}

/// Reads a config, naming the field at fault.
fn parse<C: serde::de::DeserializeOwned>(config: &Value) -> Result<C, String> {
    serde_json::from_value(config.clone()).map_err(|e| format!("config: {e}"))
}

struct SourceOf<K>(std::marker::PhantomData<K>);
struct SinkOf<K>(std::marker::PhantomData<K>);

#[async_trait]
impl<K: SourceKind> Erased for SourceOf<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }
    fn description(&self) -> &'static str {
        K::DESCRIPTION
    }
    fn role(&self) -> Role {
        Role::Source
    }
    fn schema(&self) -> Value {
        schema_of::<K::Config>()
    }
    fn check(&self, config: &Value) -> Result<(), String> {
        K::check(&parse::<K::Config>(config)?).map_err(|e| format!("config: {e}"))
    }
    fn targets(&self, config: &Value) -> Vec<Target> {
        parse::<K::Config>(config).map_or_else(|_| Vec::new(), |c| K::targets(&c))
    }
    async fn open_source(
        &self,
        config: Value,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        let config = parse::<K::Config>(&config).map_err(ConnectorError::Config)?;
        K::check(&config).map_err(ConnectorError::Config)?;
        K::open(config, ctx).await
    }
}

#[async_trait]
impl<K: SinkKind> Erased for SinkOf<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }
    fn description(&self) -> &'static str {
        K::DESCRIPTION
    }
    fn role(&self) -> Role {
        Role::Sink
    }
    fn schema(&self) -> Value {
        schema_of::<K::Config>()
    }
    fn check(&self, config: &Value) -> Result<(), String> {
        K::check(&parse::<K::Config>(config)?).map_err(|e| format!("config: {e}"))
    }
    fn targets(&self, config: &Value) -> Vec<Target> {
        parse::<K::Config>(config).map_or_else(|_| Vec::new(), |c| K::targets(&c))
    }
    async fn open_sink(
        &self,
        config: Value,
        ctx: SinkContext,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        let config = parse::<K::Config>(&config).map_err(ConnectorError::Config)?;
        K::check(&config).map_err(ConnectorError::Config)?;
        K::open(config, ctx).await
    }
}

/// One kind of connector, by name.
#[derive(Clone)]
pub struct Kind(Arc<dyn Erased>);

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kind").field(&self.name()).finish()
    }
}

impl Kind {
    pub fn source<K: SourceKind>() -> Kind {
        Kind(Arc::new(SourceOf::<K>(std::marker::PhantomData)))
    }

    pub fn sink<K: SinkKind>() -> Kind {
        Kind(Arc::new(SinkOf::<K>(std::marker::PhantomData)))
    }

    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    pub fn description(&self) -> &'static str {
        self.0.description()
    }

    pub fn role(&self) -> Role {
        self.0.role()
    }

    /// The JSON Schema of the kind's `config`.
    pub fn schema(&self) -> Value {
        self.0.schema()
    }

    /// Checks a config: `Err` names the field at fault.
    pub fn check(&self, config: &Value) -> Result<(), String> {
        self.0.check(config)
    }

    /// The addresses a config connects out to (empty for a config that
    /// does not pass [`Kind::check`]).
    pub fn targets(&self, config: &Value) -> Vec<Target> {
        self.0.targets(config)
    }

    pub async fn open_source(
        &self,
        config: Value,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        self.0.open_source(config, ctx).await
    }

    pub async fn open_sink(
        &self,
        config: Value,
        ctx: SinkContext,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        self.0.open_sink(config, ctx).await
    }
}

/// Every built-in kind, by name.
pub fn builtin() -> Vec<Kind> {
    crate::kinds::all()
}
