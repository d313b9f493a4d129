//! `eventmesh admin links ...` against two real clusters on loopback: a
//! link created from the command line comes up and is listed as a table
//! row with the remote's name, shown as JSON with its token hidden,
//! paused, resumed and deleted; what the server refuses (an unknown link,
//! a second link of the same name, a bad hop limit) is said on stderr with
//! a non-zero exit.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::links::Site;
use common::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// Runs `eventmesh admin links <args>` against `s` with the test token:
/// (exit code, stdout, stderr).
fn links(s: &Server, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(["admin", "links"])
        .args(args)
        .env("EVENTMESH_ADMIN_SERVER", s.admin_url(""))
        .env("EVENTMESH_ADMIN_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(30));
    (status.code().unwrap_or(-1), out, err)
}

/// What a command that must succeed printed.
fn ok(s: &Server, args: &[&str]) -> String {
    let (code, out, err) = links(s, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// `links get NAME`, parsed.
fn get(s: &Server, name: &str) -> Value {
    let out = ok(s, &["get", name]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Waits until the link's state is `state`; its view.
fn reaching(s: &Server, name: &str, state: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = get(s, name);
        if v["status"]["state"] == state {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} is not {state}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The exact `links list` table of the link `to-b` up to cluster `b`,
/// exporting `orders` and `eu.>`, with nothing waiting (numbers and `-`
/// right-aligned).
const UP_TABLE: &str = concat!(
    "NAME  STATE  REMOTE  EXPORTS      LAG  EVENTS/S  INSTANCE  LAST ERROR\n",
    "to-b  UP     b       orders,eu.>    0       0.0  local              -\n",
);

/// The same link paused: it runs nowhere, so its remote is its URL.
fn paused_table(url: &str) -> String {
    format!(
        "NAME  STATE   {:<w$}  EXPORTS      LAG  EVENTS/S  INSTANCE  LAST ERROR\n\
         to-b  PAUSED  {url}  orders,eu.>    0       0.0         -           -\n",
        "REMOTE",
        w = url.len()
    )
}

#[test]
fn a_link_is_created_listed_paused_resumed_and_deleted_from_the_command_line() {
    let a = Site::start("a", &[]);
    let b = Site::start("b", &[]);
    let url = b.server.traffic.clone();
    assert_eq!(
        ok(&a.server, &["list"]),
        "NAME  STATE  REMOTE  EXPORTS  LAG  EVENTS/S  INSTANCE  LAST ERROR\n"
    );
    assert_eq!(
        ok(
            &a.server,
            &[
                "create",
                "to-b",
                "--url",
                &url,
                "--export",
                "orders",
                "--export",
                "eu.>",
                "--cluster",
                "b",
                "--token",
                "t-link",
                "--no-target-guard",
            ],
        ),
        format!("created link to-b to {url}\n")
    );
    let v = reaching(&a.server, "to-b", "UP");
    assert_eq!(
        v["remote"],
        json!({"url": url, "cluster": "b", "token": "***"})
    );
    assert_eq!(
        v["exports"],
        json!([{"topic": "orders"}, {"topic": "eu.>"}])
    );
    assert_eq!(
        (v["principal"].as_str(), v["maxHops"].as_u64()),
        (Some("link:to-b"), Some(8))
    );
    assert_eq!(v["status"]["remoteCluster"], "b");
    assert_eq!(ok(&a.server, &["list"]), UP_TABLE);
    let all: Value = serde_json::from_str(&ok(&a.server, &["list", "--json"])).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{all}");
    assert_eq!(all[0]["name"], "to-b");

    assert_eq!(ok(&a.server, &["pause", "to-b"]), "paused link to-b\n");
    assert_eq!(get(&a.server, "to-b")["paused"], true);
    reaching(&a.server, "to-b", "PAUSED");
    assert_eq!(ok(&a.server, &["list"]), paused_table(&url));
    let v: Value = serde_json::from_str(&ok(&a.server, &["resume", "to-b", "--json"])).unwrap();
    assert_eq!(
        (v["name"].as_str(), v["paused"].as_bool()),
        (Some("to-b"), Some(false))
    );
    reaching(&a.server, "to-b", "UP");

    // What the server refuses: its message, exit status 1.
    for (args, message) in [
        (vec!["get", "x"], "404 unknown_link: no link named x"),
        (vec!["pause", "x"], "404 unknown_link: no link named x"),
        (vec!["delete", "x"], "404 unknown_link: no link named x"),
        (
            vec!["create", "to-b", "--url", &url, "--export", "orders"],
            "409 link_exists: a link or connector named to-b exists",
        ),
        (
            vec![
                "create",
                "far",
                "--url",
                &url,
                "--export",
                "orders",
                "--max-hops",
                "0",
            ],
            "400 invalid_link: maxHops must be 1 to 64",
        ),
    ] {
        let (code, out, err) = links(&a.server, &args);
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert_eq!(err, format!("error: {message}\n"), "{args:?}");
    }
    // A command line that does not parse: status 2, nothing sent.
    let (code, _, err) = links(&a.server, &["create", "far", "--url", &url]);
    assert_eq!(code, 2, "{err}");

    assert_eq!(ok(&a.server, &["delete", "to-b"]), "deleted link to-b\n");
    assert_eq!(ok(&a.server, &["list", "--json"]), "[]\n");
}
