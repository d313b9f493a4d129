//! Packaging: the shell completion scripts and the manual page the real
//! binary prints, and the systemd unit in deploy/eventmesh.service.

use std::process::{Command, Output};

use eventmesh_core::config::{env_var_name, KNOWN_KEYS};

const BIN: &str = env!("CARGO_BIN_EXE_eventmesh");
const UNIT: &str = include_str!("../../../deploy/eventmesh.service");

/// The top-level subcommands, as the completion scripts and the manual
/// page must name them.
const SUBCOMMANDS: [&str; 7] = [
    "serve",
    "config",
    "publish",
    "subscribe",
    "request",
    "completions",
    "man",
];

/// Runs the binary to its exit; these commands print and end at once.
fn eventmesh(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
}

/// Stdout of a run that must succeed with nothing on stderr.
fn stdout_of_success(args: &[&str]) -> String {
    let out = eventmesh(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "eventmesh {args:?} exited with {}: {stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "eventmesh {args:?} wrote to stderr: {stderr}"
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

#[test]
fn bash_completion_defines_the_function_and_names_every_subcommand() {
    let script = stdout_of_success(&["completions", "bash"]);
    assert!(script.starts_with("_eventmesh() {\n"), "{script}");
    assert!(
        script.contains("complete -F _eventmesh -o nosort -o bashdefault -o default eventmesh\n"),
        "{script}"
    );
    for sub in SUBCOMMANDS {
        assert!(
            script.contains(&format!("eventmesh,{sub})\n")),
            "no case for {sub}:\n{script}"
        );
    }
    // The value names of `completions` itself are offered.
    assert!(script.contains("bash zsh fish"), "{script}");

    // From a file: the script is longer than one argument may be.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &script).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(file.path())
        .output()
        .expect("run bash -n");
    assert!(
        syntax.status.success(),
        "bash rejects the script: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
}

#[test]
fn bash_completion_completes_a_subcommand_prefix() {
    let script = stdout_of_success(&["completions", "bash"]);
    // What bash does on `eventmesh se<TAB>`: call the function with the
    // command, the word being completed and the word before it.
    let session = format!(
        "{script}\nCOMP_WORDS=(eventmesh se); COMP_CWORD=1\n\
         _eventmesh eventmesh se eventmesh\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &session).unwrap();
    let out = Command::new("bash")
        .args(["--norc", "--noprofile"])
        .arg(file.path())
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "serve\n");
}

#[test]
fn zsh_completion_is_a_compdef_naming_every_subcommand() {
    let script = stdout_of_success(&["completions", "zsh"]);
    assert!(script.starts_with("#compdef eventmesh\n"), "{script}");
    assert!(script.contains("\n_eventmesh() {\n"), "{script}");
    assert!(
        script.contains("'serve:Run the runtime\\: traffic HTTP and admin HTTP servers'"),
        "{script}"
    );
    for sub in SUBCOMMANDS {
        assert!(
            script.contains(&format!("\n'{sub}:")),
            "no entry for {sub}:\n{script}"
        );
    }
}

#[test]
fn fish_completion_offers_every_subcommand() {
    let script = stdout_of_success(&["completions", "fish"]);
    assert!(
        script.contains(
            "complete -c eventmesh -n \"__fish_eventmesh_needs_command\" -f -a \"serve\" \
             -d 'Run the runtime: traffic HTTP and admin HTTP servers'\n"
        ),
        "{script}"
    );
    for sub in SUBCOMMANDS {
        assert!(
            script.contains(&format!("__fish_eventmesh_needs_command\" -f -a \"{sub}\"")),
            "no entry for {sub}:\n{script}"
        );
    }
    for line in script.lines().filter(|l| l.starts_with("complete ")) {
        assert!(line.starts_with("complete -c eventmesh "), "{line}");
    }
}

#[test]
fn an_unknown_shell_is_refused_with_its_name() {
    let out = eventmesh(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'tcsh' for '<SHELL>'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[possible values: bash, zsh, fish]"),
        "{stderr}"
    );
}

#[test]
fn the_man_page_has_the_title_sections_and_every_subcommand() {
    let page = stdout_of_success(&["man"]);
    let version = env!("CARGO_PKG_VERSION");
    let first = page.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(".TH EVENTMESH 1 \"\" \"eventmesh {version}\" \"User Commands\"")
    );
    // Section headings, in order.
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with(".SH ")).collect();
    assert_eq!(
        headings,
        [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH DESCRIPTION",
            ".SH OPTIONS",
            ".SH COMMANDS",
            ".SH VERSION",
        ]
    );
    assert!(
        page.contains("\n.SH NAME\neventmesh \\- Event mesh runtime: "),
        "{page}"
    );
    // One subsection per subcommand, each with its synopsis.
    for sub in SUBCOMMANDS {
        let heading = format!("\n.SS \"eventmesh {sub}\"\n\\fBeventmesh {sub}\\fR");
        assert!(page.contains(&heading), "no section for {sub}:\n{page}");
    }
    // The options of `serve` are documented under it.
    let serve = &page[page.find(".SS \"eventmesh serve\"").unwrap()..];
    let serve = &serve[..serve.find(".SS \"eventmesh config\"").unwrap()];
    assert!(
        serve.contains(".TP\n\\fB\\-\\-config\\fR \\fI<FILE>\\fR\n"),
        "{serve}"
    );
    assert!(
        serve.contains(".TP\n\\fB\\-D\\fR \\fI<KEY=VALUE>\\fR\n"),
        "{serve}"
    );
    // The apostrophe string is defined once, right after the title.
    assert_eq!(page.matches(".ds Aq").count(), 2, "{page}");
    assert!(
        page.ends_with(&format!(".SH VERSION\nv{version}\n")),
        "{page}"
    );
}

/// The unit file as `(section, key, value)` entries in file order; panics
/// on any line that is not a comment, a `[Section]` header or `Key=Value`.
fn parse_unit(text: &str) -> Vec<(String, String, String)> {
    let mut section: Option<String> = None;
    let mut entries = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not Key=Value: {raw}", n + 1));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()),
            "line {}: bad key {key:?}",
            n + 1
        );
        assert!(
            !raw.ends_with('\\'),
            "line {}: no continuation lines expected",
            n + 1
        );
        let section = section
            .clone()
            .unwrap_or_else(|| panic!("line {}: entry before any section", n + 1));
        entries.push((section, key.to_string(), value.trim().to_string()));
    }
    entries
}

/// Every value of `key` in `section`, in file order.
fn values<'a>(entries: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
    entries
        .iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect()
}

/// The one value of `key` in `section`.
fn value<'a>(entries: &'a [(String, String, String)], section: &str, key: &str) -> &'a str {
    match values(entries, section, key).as_slice() {
        [v] => v,
        other => panic!("[{section}] {key}: expected one value, found {other:?}"),
    }
}

fn default_of(key: &str) -> &'static str {
    KNOWN_KEYS
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("{key} is not declared"))
        .default
}

#[test]
fn the_systemd_unit_has_the_expected_settings() {
    let entries = parse_unit(UNIT);
    let mut sections: Vec<&str> = entries.iter().map(|(s, _, _)| s.as_str()).collect();
    sections.dedup();
    assert_eq!(sections, ["Unit", "Service", "Install"]);

    let exec: Vec<&str> = value(&entries, "Service", "ExecStart")
        .split_whitespace()
        .collect();
    assert_eq!(exec, ["/usr/local/bin/eventmesh", "serve"]);
    assert_eq!(value(&entries, "Service", "Type"), "simple");
    assert_eq!(value(&entries, "Service", "Restart"), "on-failure");
    assert_eq!(value(&entries, "Service", "LimitNOFILE"), "65536");
    assert_eq!(value(&entries, "Service", "KillSignal"), "SIGTERM");
    assert_eq!(value(&entries, "Service", "User"), "eventmesh");
    assert_eq!(
        value(&entries, "Service", "EnvironmentFile"),
        "-/etc/eventmesh/eventmesh.env"
    );
    assert_eq!(value(&entries, "Install", "WantedBy"), "multi-user.target");

    // systemd must wait out the shutdown grace, with a little room to
    // stop the servers and flush the store, but not much more.
    let grace_ms: u64 = default_of("eventmesh.shutdown.grace.ms")
        .parse()
        .expect("the grace default is a number of milliseconds");
    let stop_s: u64 = value(&entries, "Service", "TimeoutStopSec")
        .parse()
        .expect("TimeoutStopSec is a whole number of seconds");
    assert!(
        stop_s * 1000 > grace_ms && stop_s * 1000 <= grace_ms + 10_000,
        "TimeoutStopSec={stop_s} for a grace of {grace_ms} ms"
    );
    assert!(
        UNIT.contains("eventmesh.shutdown.grace.ms") && UNIT.contains("raise both together"),
        "the unit explains how TimeoutStopSec relates to the grace"
    );

    // Every variable the unit sets names a configuration key.
    let env: Vec<(&str, &str)> = values(&entries, "Service", "Environment")
        .into_iter()
        .map(|v| v.split_once('=').expect("Environment=NAME=value"))
        .collect();
    for (name, _) in &env {
        assert!(
            KNOWN_KEYS.iter().any(|s| env_var_name(s.key) == *name),
            "{name} names no configuration key"
        );
    }
    assert!(
        env.contains(&(
            env_var_name("eventmesh.data.dir").as_str(),
            "/var/lib/eventmesh/data"
        )),
        "{env:?}"
    );
}

#[test]
fn the_systemd_unit_environment_is_a_valid_configuration() {
    let entries = parse_unit(UNIT);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(BIN);
    cmd.arg("config").current_dir(dir.path());
    // Only what the unit sets: nothing from the test's own environment.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("EVENTMESH_") {
            cmd.env_remove(name);
        }
    }
    for v in values(&entries, "Service", "Environment") {
        let (name, value) = v.split_once('=').expect("Environment=NAME=value");
        cmd.env(name, value);
    }
    let out = cmd.output().expect("run eventmesh config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&"eventmesh.data.dir=/var/lib/eventmesh/data"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"eventmesh.storage.type=standalone"),
        "{stdout}"
    );
}
