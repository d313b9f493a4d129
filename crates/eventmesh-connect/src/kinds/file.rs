//! file kinds (being written).
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::sdk::*;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct FileConfig {
    pub path: String,
}

pub struct FileSource;
pub struct FileSink;

#[async_trait]
impl SourceKind for FileSource {
    type Config = FileConfig;
    const NAME: &'static str = "file-source";
    const DESCRIPTION: &'static str = "";
    async fn open(_c: Self::Config, _x: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        Err(ConnectorError::config("todo"))
    }
}

#[async_trait]
impl SinkKind for FileSink {
    type Config = FileConfig;
    const NAME: &'static str = "file-sink";
    const DESCRIPTION: &'static str = "";
    async fn open(_c: Self::Config, _x: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        Err(ConnectorError::config("todo"))
    }
}
