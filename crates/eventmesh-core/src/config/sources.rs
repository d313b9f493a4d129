//! Where configuration text comes from and how the sources are layered:
//! built-in defaults < properties file < environment < `-D key=value`
//! overrides, later wins. The result is the raw text of every key that some
//! source set, plus a warning for every `eventmesh.*` key and `EVENTMESH_*`
//! variable that names no declared key. Nothing here interprets a value.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::keys::{known, KNOWN_KEYS};
use super::properties::parse_properties_from;
use super::ConfigError;

/// Variables read by the client commands (`eventmesh publish`, ...), not
/// by the runtime: never reported as unknown.
const CLIENT_ENV: [&str; 3] = [
    "EVENTMESH_SERVER",
    "EVENTMESH_TCP_SERVER",
    "EVENTMESH_TOKEN",
];

/// The environment variable consulted for `key`: upper case, dots to underscores.
pub fn env_var_name(key: &str) -> String {
    key.to_ascii_uppercase().replace('.', "_")
}

/// A source of environment variables.
pub trait EnvSource {
    fn get(&self, name: &str) -> Option<String>;
    fn names(&self) -> Vec<String>;
}

/// The real process environment; variables whose name or value is not UTF-8 are skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn names(&self) -> Vec<String> {
        std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .collect()
    }
}

/// A fixed environment, for tests.
#[derive(Debug, Clone, Default)]
pub struct MapEnv(pub HashMap<String, String>);

impl EnvSource for MapEnv {
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

/// Where configuration comes from, besides the built-in defaults.
pub struct ConfigSources<'a> {
    /// Properties file; if `None`, nothing is read from a file.
    pub file: Option<PathBuf>,
    /// True when the file was named explicitly: a missing file is then an error.
    pub file_required: bool,
    pub env: &'a dyn EnvSource,
    /// `-D key=value` overrides, in command-line order.
    pub overrides: Vec<(String, String)>,
}

/// Splits a `-D` argument `key=value` into its trimmed key and value.
pub fn parse_override(arg: &str) -> Result<(String, String), ConfigError> {
    let malformed = |reason: &str| ConfigError::MalformedOverride {
        arg: arg.to_string(),
        reason: reason.to_string(),
    };
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| malformed("expected key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(malformed("the key before '=' is empty"));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

/// The text every source gave, later sources having replaced earlier ones.
pub(crate) struct Layered {
    /// Raw (untrimmed) text by declared key; a key no source set is absent.
    pub values: HashMap<&'static str, String>,
    /// One line per unknown key or variable, in source order.
    pub warnings: Vec<String>,
}

impl Layered {
    fn apply(&mut self, key: &str, value: &str, origin: &str) {
        if let Some(spec) = known(key) {
            self.values.insert(spec.key, value.to_string());
        } else if key.starts_with("eventmesh.") {
            self.warnings.push(format!(
                "unknown configuration key {key} (from {origin}); ignored"
            ));
        }
    }
}

/// Reads the file, the environment and the overrides, in that order.
pub(crate) fn layer(sources: &ConfigSources) -> Result<Layered, ConfigError> {
    let mut layered = Layered {
        values: HashMap::new(),
        warnings: Vec::new(),
    };
    if let Some(path) = &sources.file {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let origin = path.display().to_string();
                for (key, value) in parse_properties_from(&text, &origin)? {
                    layered.apply(&key, &value, &origin);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !sources.file_required => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::FileNotFound { path: path.clone() })
            }
            Err(source) => {
                return Err(ConfigError::Io {
                    path: path.clone(),
                    source,
                })
            }
        }
    }

    let known_env: HashSet<String> = KNOWN_KEYS.iter().map(|s| s.env_var()).collect();
    for spec in KNOWN_KEYS {
        let name = spec.env_var();
        if let Some(value) = sources.env.get(&name) {
            layered.apply(spec.key, &value, &format!("environment {name}"));
        }
    }
    let mut env_names = sources.env.names();
    env_names.sort();
    for name in env_names {
        if name.starts_with("EVENTMESH_")
            && !known_env.contains(&name)
            && !CLIENT_ENV.contains(&name.as_str())
        {
            layered.warnings.push(format!(
                "unknown environment variable {name}: it matches no configuration key; ignored"
            ));
        }
    }

    for (key, value) in &sources.overrides {
        layered.apply(key.trim(), value, "-D override");
    }
    Ok(layered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_has(text: &str, parts: &[&str]) {
        for part in parts {
            assert!(text.contains(part), "{text:?} should contain {part:?}");
        }
    }

    #[test]
    fn override_parsing() {
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(parse_override(" a.b = c=d ").unwrap(), pair("a.b", "c=d"));
        assert_eq!(parse_override("a=").unwrap(), pair("a", ""));
        let message = |arg: &str| parse_override(arg).unwrap_err().to_string();
        assert_has(&message("novalue"), &["\"novalue\""]);
        assert_has(&message(" =x"), &["\" =x\""]);
    }
}
