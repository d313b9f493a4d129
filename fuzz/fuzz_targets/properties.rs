//! Fuzzes the configuration: the input is read as a properties file, and
//! whatever entries it yields are loaded as the configuration (as `-D`
//! overrides, through every key's validation and the checks of key
//! combinations). Both steps must answer `Ok` or an error, never panic;
//! an accepted configuration must list every key with a value.

#![no_main]

use std::collections::HashMap;

use eventmesh_core::config::{parse_properties, Config, ConfigSources, MapEnv, KNOWN_KEYS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(entries) = parse_properties(text) else {
        return;
    };
    let env = MapEnv(HashMap::new());
    let loaded = Config::load(&ConfigSources {
        file: None,
        file_required: false,
        env: &env,
        overrides: entries,
    });
    if let Ok(loaded) = loaded {
        assert_eq!(loaded.config.redacted_entries().len(), KNOWN_KEYS.len());
    }
});
