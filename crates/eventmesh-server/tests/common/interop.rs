//! The third-party clients of the interop tests, installed by
//! `scripts/interop.sh` (which `scripts/test.sh` runs, exporting
//! `EVENTMESH_INTEROP_PYTHON` and `EVENTMESH_INTEROP_NODE`): Python with
//! the CloudEvents SDK, `prometheus_client` and `opentelemetry-proto`, and
//! a Node directory with the JavaScript CloudEvents SDK.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::output_within;

/// The Python that has the interop clients.
pub fn python() -> String {
    let py = std::env::var("EVENTMESH_INTEROP_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/interop-venv/bin/python".to_string());
    assert!(
        std::path::Path::new(&py).exists(),
        "no Python with the interop clients at {py}: run scripts/interop.sh \
         (scripts/test.sh does) or set EVENTMESH_INTEROP_PYTHON"
    );
    py
}

/// The directory whose node_modules holds the JavaScript CloudEvents SDK.
pub fn node_dir() -> String {
    let dir = std::env::var("EVENTMESH_INTEROP_NODE")
        .unwrap_or_else(|_| "/var/tmp/interop-js".to_string());
    assert!(
        std::path::Path::new(&dir)
            .join("node_modules/cloudevents/package.json")
            .exists(),
        "no JavaScript CloudEvents SDK under {dir}: run scripts/interop.sh \
         (scripts/test.sh does) or set EVENTMESH_INTEROP_NODE"
    );
    dir
}

/// Runs `program script args…` to completion (within 120 s, on a blocking
/// thread so the test's own tasks go on), with `NODE_PATH` pointing at the
/// JavaScript SDK; fails the test with its output unless it succeeded.
/// Each line it printed, parsed as JSON.
pub async fn run(program: String, script: &str, args: Vec<String>) -> Vec<Value> {
    let script = script.to_string();
    let shown = format!("{program} {script} {}", args.join(" "));
    let (status, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(program);
        cmd.arg(&script)
            .args(&args)
            .env("NODE_PATH", format!("{}/node_modules", node_dir()));
        output_within(&mut cmd, Duration::from_secs(120))
    })
    .await
    .unwrap();
    assert!(status.success(), "{shown} failed:\n{out}\n{err}");
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Runs a Python script of the interop tests (`tests/interop/NAME`).
pub async fn python_script(name: &str, args: Vec<String>) -> Vec<Value> {
    let script = format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"));
    run(python(), &script, args).await
}

/// Runs a Node script of the interop tests (`tests/interop/NAME`): a
/// CommonJS script (`.cjs`) that `require`s the SDK through `NODE_PATH`.
pub async fn node_script(name: &str, args: Vec<String>) -> Vec<Value> {
    let script = format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"));
    run("node".to_string(), &script, args).await
}
