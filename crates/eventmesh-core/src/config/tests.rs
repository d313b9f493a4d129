//! Loading as a whole: precedence of the sources, validation messages,
//! cross-key checks, redaction, and the shipped properties file.

use super::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

const ADMIN_TOKEN_KEY: &str = "eventmesh.admin.token";
const JWT_SECRET_KEY: &str = "eventmesh.security.gate.jwt.hs256.secret";

/// `conf/eventmesh.properties`, found from the crate's directory as
/// cargo gives it when the test runs (a test binary built from another
/// checkout of the same sources would point into that one).
fn shipped() -> std::path::PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    );
    crate_dir.join("../../conf/eventmesh.properties")
}
const PORT: &str = "eventmesh.server.http.port";
const TOPOLOGY: &str = "eventmesh.delivery.topology";
const CLUSTER: &str = "eventmesh.cluster.enabled";
const META: &str = "eventmesh.meta.type";
type Pairs<'a> = &'a [(&'a str, &'a str)];

fn owned(pairs: Pairs) -> Vec<(String, String)> {
    let own = |(k, v): &(&str, &str)| (k.to_string(), v.to_string());
    pairs.iter().map(own).collect()
}

fn sources<'e>(file: Option<PathBuf>, env: &'e MapEnv, ovr: Pairs) -> ConfigSources<'e> {
    let overrides = owned(ovr);
    ConfigSources {
        file,
        file_required: true,
        env,
        overrides,
    }
}

/// Loads from `file`, `vars` and `ovr`; the storage type comes from the
/// environment unless `vars` sets it.
fn load_with(file: Option<&PathBuf>, vars: Pairs, ovr: Pairs) -> Result<Loaded, ConfigError> {
    let mut env = MapEnv(owned(vars).into_iter().collect());
    let storage = env.0.entry("EVENTMESH_STORAGE_TYPE".into());
    storage.or_insert_with(|| "standalone".into());
    Config::load(&sources(file.cloned(), &env, ovr))
}

fn cfg(ovr: Pairs) -> Config {
    load_with(None, &[], ovr).expect("valid").config
}

fn err(ovr: Pairs) -> String {
    load_with(None, &[], ovr).expect_err("invalid").to_string()
}

/// Asserts that loading with `ovr` fails with a message containing `parts`.
fn fails(ovr: Pairs, parts: &[&str]) {
    assert_has(&err(ovr), parts);
}

fn assert_has(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{text:?} should contain {part:?}");
    }
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let name = format!("eventmesh-config-{}-{name}.properties", std::process::id());
    let path = std::env::temp_dir().join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

#[test]
fn precedence_default_file_env_override() {
    assert_eq!(cfg(&[]).server.http.port, 10105);
    let file = temp_file("precedence", &format!("{PORT}=1111\n"));
    let port = |vars: Pairs, ovr: Pairs| {
        load_with(Some(&file), vars, ovr)
            .unwrap()
            .config
            .server
            .http
            .port
    };
    let vars = [("EVENTMESH_SERVER_HTTP_PORT", "2222")];
    assert_eq!(port(&[], &[]), 1111);
    assert_eq!(port(&vars, &[]), 2222);
    assert_eq!(port(&vars, &[(PORT, "3333"), (PORT, "4444")]), 4444);
    std::fs::remove_file(file).ok();
}

#[test]
fn env_name_mapping() {
    assert_eq!(env_var_name(TOPOLOGY), "EVENTMESH_DELIVERY_TOPOLOGY");
    let camel = env_var_name("eventmesh.some.camelCase");
    assert_eq!(camel, "EVENTMESH_SOME_CAMELCASE");
    let inflight = ("EVENTMESH_DELIVERY_MAX_INFLIGHT", "7");
    let loaded = load_with(
        None,
        &[inflight, ("EVENTMESH_ADMIN_TOKEN", "s3-0123456789abcdef")],
        &[],
    );
    let loaded = loaded.unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.delivery.max_inflight, 7);
    assert_eq!(
        loaded.config.server.admin.token.as_deref(),
        Some("s3-0123456789abcdef")
    );
}

#[test]
fn blank_topology_is_local_sticky_pull() {
    let c = cfg(&[(TOPOLOGY, "  ")]);
    assert_eq!(c.delivery.topology, DeliveryTopology::LocalStickyPull);
    assert_eq!(c.delivery.topology.as_str(), "LOCAL_STICKY_PULL");
    assert_eq!(c.delivery.webhook_timeout, Duration::from_millis(5000));
}

#[test]
fn bad_topology_names_value_and_valid_values() {
    let names = ["LOCAL_STICKY_PULL", "PARTITION_OWNED_PULL"];
    fails(
        &[(TOPOLOGY, "PARTITION_OWNER")],
        &["\"PARTITION_OWNER\"", names[0], names[1]],
    );
    fails(
        &[(TOPOLOGY, "local_sticky_pull")],
        &["\"local_sticky_pull\""],
    );
}

#[test]
fn partition_owned_requires_cluster_etcd_and_jetstream_each_named() {
    let owned_pull = (TOPOLOGY, "PARTITION_OWNED_PULL");
    let e = err(&[owned_pull]);
    assert_eq!(
        e,
        "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.enabled=true \
         (partition owners are instances of one cluster); currently false"
    );
    let e = err(&[owned_pull, (CLUSTER, "true"), (META, "embedded")]);
    assert_eq!(
        e,
        "delivery topology PARTITION_OWNED_PULL requires eventmesh.meta.type=etcd \
         (claims and offsets live in a meta store every instance shares); currently embedded"
    );
    fails(
        &[(CLUSTER, "TRUE")],
        &["cluster.enabled=true", "eventmesh.meta.type=etcd"],
    );
    let c = cfg(&[(META, "etcd"), (CLUSTER, "true")]);
    assert_eq!(
        c.meta.etcd.endpoints,
        vec!["http://127.0.0.1:2379".to_string()]
    );
    let e = err(&[owned_pull, (CLUSTER, "true"), (META, "etcd")]);
    assert_eq!(
        e,
        "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.secret \
         (instances forward deliveries and acknowledgements to each other over a \
         channel authenticated with it)"
    );
    let secret = ("eventmesh.cluster.secret", "s3cret-0123456789abcdef");
    let e = err(&[owned_pull, (CLUSTER, "true"), (META, "etcd"), secret]);
    assert_eq!(
        e,
        "delivery topology PARTITION_OWNED_PULL requires eventmesh.storage.type=jetstream \
         (with a log of its own on each instance there is no partition to share); \
         currently standalone"
    );
    let c = cfg(&[
        owned_pull,
        (CLUSTER, "true"),
        (META, "etcd"),
        secret,
        ("eventmesh.storage.type", "jetstream"),
    ]);
    assert_eq!(c.delivery.topology, DeliveryTopology::PartitionOwnedPull);
    assert_eq!(c.cluster.lease, Duration::from_secs(10));
    assert_eq!(c.cluster.handover_grace, Duration::from_secs(5));
    assert_eq!(c.cluster.instance_id, None);
    assert_eq!(c.cluster.advertise, None);
    // Peers call the advertised address: never a wildcard.
    let owned = [
        owned_pull,
        (CLUSTER, "true"),
        (META, "etcd"),
        secret,
        ("eventmesh.storage.type", "jetstream"),
    ];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut all = owned.to_vec();
        all.extend_from_slice(more);
        all
    };
    let advertise = "eventmesh.cluster.advertise.address";
    assert_eq!(
        err(&with(&[("eventmesh.server.host", "0.0.0.0")])),
        "delivery topology PARTITION_OWNED_PULL needs eventmesh.cluster.advertise.address \
         (host:port the other instances reach this one at) when eventmesh.server.host is \
         the wildcard \"0.0.0.0\""
    );
    let c = cfg(&with(&[
        ("eventmesh.server.host", "::"),
        (advertise, "[fd00::7]:10105"),
    ]));
    assert_eq!(c.cluster.advertise.as_deref(), Some("[fd00::7]:10105"));
    for (bad, why) in [
        ("node-7", "is not host:port"),
        (":10105", "has no host"),
        ("node-7:0", "has no port from 1 to 65535"),
        ("node-7:http", "has no port from 1 to 65535"),
        ("[::]:10105", "names a wildcard host"),
    ] {
        let e = err(&with(&[(advertise, bad)]));
        assert!(e.starts_with(&format!("{advertise} {bad:?} {why}")), "{e}");
    }
    fails(
        &[("eventmesh.cluster.instance.id", "a b")],
        &["eventmesh.cluster.instance.id", "a b", "letters"],
    );
    fails(
        &[("eventmesh.cluster.lease.ms", "999")],
        &["eventmesh.cluster.lease.ms", "999"],
    );
    fails(
        &[
            (META, "etcd"),
            ("eventmesh.meta.etcd.endpoints", "127.0.0.1:2379"),
        ],
        &["eventmesh.meta.etcd.endpoints", "127.0.0.1:2379"],
    );
    fails(
        &[(META, "etcd"), ("eventmesh.meta.etcd.user", "root")],
        &["eventmesh.meta.etcd.password"],
    );
}

#[test]
fn jetstream_settings_are_checked() {
    let c = cfg(&[
        ("eventmesh.storage.type", "jetstream"),
        (
            "eventmesh.storage.jetstream.servers",
            "nats://a:4222, tls://b:4222",
        ),
    ]);
    assert_eq!(c.storage.backend, StorageType::Jetstream);
    assert_eq!(
        c.storage.jetstream.servers,
        ["nats://a:4222", "tls://b:4222"]
    );
    assert_eq!(c.storage.jetstream.replicas, 1);
    assert_eq!(c.storage.jetstream.prefix, "EVENTMESH");
    fails(
        &[("eventmesh.storage.jetstream.servers", "http://a:4222")],
        &[
            "eventmesh.storage.jetstream.servers",
            "http://a:4222",
            "nats:// or tls://",
        ],
    );
    fails(
        &[("eventmesh.storage.jetstream.stream.prefix", "a.b")],
        &["eventmesh.storage.jetstream.stream.prefix", "a.b"],
    );
    fails(
        &[("eventmesh.storage.jetstream.replicas", "6")],
        &["eventmesh.storage.jetstream.replicas", "1 to 5"],
    );
    fails(
        &[("eventmesh.storage.jetstream.user", "mesh")],
        &["eventmesh.storage.jetstream.password", "together"],
    );
    fails(
        &[
            ("eventmesh.storage.jetstream.token", "t"),
            ("eventmesh.storage.jetstream.creds.file", "/x.creds"),
        ],
        &["one NATS credential at most"],
    );
}

#[test]
fn storage_type_required() {
    let env = MapEnv(HashMap::new());
    let msg = Config::load(&sources(None, &env, &[]))
        .unwrap_err()
        .to_string();
    let want =
        "eventmesh.storage.type is not set; supported storage backends: standalone, jetstream";
    assert_eq!(msg, want);
    fails(
        &[("eventmesh.storage.type", "rocks")],
        &["\"rocks\"", "standalone"],
    );
}

#[test]
fn malformed_values_name_key_and_value() {
    let expected = "invalid value \"abc\" for eventmesh.server.http.port: \
                    expected a port number 0-65535";
    assert_eq!(err(&[(PORT, "abc")]), expected);
    fails(
        &[(PORT, "70000")],
        &["\"70000\" for eventmesh.server.http.port"],
    );
    let size = "eventmesh.http.max.body.bytes";
    fails(
        &[(size, "-5")],
        &["\"-5\" for eventmesh.http.max.body.bytes"],
    );
    fails(
        &[("eventmesh.delivery.max.inflight", "0")],
        &["\"0\" for", "1000000"],
    );
    fails(
        &[("eventmesh.topic.default.partitions", "1025")],
        &["1 to 1024"],
    );
    assert_eq!(
        err(&[("eventmesh.server.worker.threads", "1025")]),
        "invalid value \"1025\" for eventmesh.server.worker.threads: \
         expected a thread count from 0 to 1024"
    );
    fails(
        &[("eventmesh.storage.block.cache.bytes", "1000")],
        &["\"1000\" for eventmesh.storage.block.cache.bytes", "1 MiB"],
    );
    fails(
        &[("eventmesh.storage.sync", "yes")],
        &["\"yes\"", "true or false"],
    );
    let initial = ("eventmesh.delivery.backoff.initial.ms", "500");
    let max = ("eventmesh.delivery.backoff.max.ms", "100");
    fails(
        &[initial, max],
        &["backoff.max.ms (100)", "backoff.initial.ms (500)"],
    );
    assert_eq!(cfg(&[(PORT, " 0 ")]).server.http.port, 0);
}

#[test]
fn unknown_keys_and_env_vars_warn() {
    let typo = "eventmesh.delivery.topolgy";
    let file = temp_file(
        "unknown",
        &format!("{typo}=LOCAL_STICKY_PULL\nother.key=1\n"),
    );
    let vars = [("EVENTMESH_DELIVERY_TOPOLGY", "x"), ("PATH", "/bin")];
    let ovr = [("eventmesh.bogus", "1"), ("java.home", "/x")];
    let w = load_with(Some(&file), &vars, &ovr).unwrap().warnings;
    assert_eq!(w.len(), 3, "{w:?}");
    let from = file.display();
    assert_eq!(
        w[0],
        format!("unknown configuration key {typo} (from {from}); ignored")
    );
    assert_has(&w[1], &["EVENTMESH_DELIVERY_TOPOLGY"]);
    assert_has(&w[2], &["eventmesh.bogus", "-D"]);
    std::fs::remove_file(file).ok();
}

#[test]
fn file_presence_and_parse_errors() {
    let missing = std::env::temp_dir().join("eventmesh-config-does-not-exist.properties");
    let env = MapEnv(
        owned(&[("EVENTMESH_STORAGE_TYPE", "standalone")])
            .into_iter()
            .collect(),
    );
    let mut sources = sources(Some(missing), &env, &[]);
    let loaded = Config::load(&sources);
    assert!(
        matches!(loaded, Err(ConfigError::FileNotFound { .. })),
        "{loaded:?}"
    );
    sources.file_required = false;
    assert!(Config::load(&sources).is_ok());
    let bad = temp_file("bad", "# fine\n=nokey\n");
    let msg = load_with(Some(&bad), &[], &[]).unwrap_err().to_string();
    assert_has(&msg, &[&bad.display().to_string(), "line 2"]);
    std::fs::remove_file(bad).ok();
}

#[test]
fn admin_token_is_redacted() {
    let token = |c: &Config| {
        let entries = c.redacted_entries();
        entries
            .into_iter()
            .find(|(k, _)| k == ADMIN_TOKEN_KEY)
            .map(|(_, v)| v)
    };
    let c = cfg(&[(ADMIN_TOKEN_KEY, "hunter2-hunter2-hunter2")]);
    assert_eq!(token(&c).as_deref(), Some("******"));
    assert!(!format!("{c:?}").contains("hunter2"));
    let c = cfg(&[(ADMIN_TOKEN_KEY, " ")]);
    assert_eq!(c.server.admin.token, None);
    assert_eq!(token(&c).as_deref(), Some(""));
}

#[test]
fn gate_keys_are_typed_and_the_jwt_secret_redacted() {
    let c = cfg(&[
        (JWT_SECRET_KEY, "jwt-hunter2"),
        ("eventmesh.security.gate.quota.publish.rate", "100"),
        ("eventmesh.security.gate.acl.file", "/etc/em/acl"),
        ("eventmesh.webhook.denied.cidrs", "10.0.0.0/8, fd00::/8"),
    ]);
    assert!(c.gate.any_configured());
    assert_eq!(c.gate.publish_rate, 100);
    let nets: Vec<ipnet::IpNet> = ["10.0.0.0/8", "fd00::/8"]
        .map(|n| n.parse().unwrap())
        .into();
    assert_eq!(c.webhook.denied_cidrs, nets);
    let entries = c.redacted_entries();
    let value = |k: &str| entries.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(value(JWT_SECRET_KEY), "******");
    assert_eq!(value("eventmesh.security.gate.acl.file"), "/etc/em/acl");
    assert!(!format!("{c:?}").contains("jwt-hunter2"));
    assert!(!cfg(&[]).gate.any_configured());
    for (key, bad) in [
        ("eventmesh.webhook.denied.cidrs", "10.0.0.0"),
        ("eventmesh.webhook.denied.cidrs", "10.0.0.0/33"),
        ("eventmesh.security.gate.quota.publish.rate", "-1"),
        ("eventmesh.security.gate.failClosed", "yes"),
    ] {
        fails(&[(key, bad)], &[key, bad]);
    }
}

#[test]
fn a_blank_tenant_claim_means_none_not_the_default() {
    let key = "eventmesh.security.gate.jwt.tenant.claim";
    assert_eq!(cfg(&[]).gate.jwt_tenant_claim, "tenant");
    assert_eq!(cfg(&[(key, "org")]).gate.jwt_tenant_claim, "org");
    assert_eq!(cfg(&[(key, "")]).gate.jwt_tenant_claim, "");
    // Every other key keeps "blank means the default".
    let c = cfg(&[("eventmesh.security.gate.jwt.principal.claim", "")]);
    assert_eq!(c.gate.jwt_principal_claim, "sub");
}

#[test]
fn shipped_properties_file() {
    let text = std::fs::read_to_string(shipped()).expect("read conf/eventmesh.properties");
    let entries = parse_properties(&text).expect("shipped file parses");
    assert_eq!(entries, owned(&[("eventmesh.storage.type", "standalone")]));
    for spec in KNOWN_KEYS {
        let commented = format!("#{}={}", spec.key, spec.default);
        let set = format!("{}=", spec.key);
        let listed = text.lines().any(|l| l == commented || l.starts_with(&set));
        assert!(listed, "{} missing (expected `{commented}`)", spec.key);
    }
    // The file lists the keys in declaration order, as the docs table does.
    let line_of = |key: &str| {
        let (commented, set) = (format!("#{key}="), format!("{key}="));
        let hit = |l: &&str| l.starts_with(&commented) || l.starts_with(&set);
        text.lines().position(|l| hit(&l)).unwrap()
    };
    let lines: Vec<usize> = KNOWN_KEYS.iter().map(|s| line_of(s.key)).collect();
    assert!(
        lines.is_sorted(),
        "conf/eventmesh.properties is out of order"
    );
    let env = MapEnv(HashMap::new());
    let loaded = Config::load(&sources(Some(shipped()), &env, &[])).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.storage.backend, StorageType::Standalone);
    let entries = loaded.config.redacted_entries();
    assert_eq!(entries.len(), KNOWN_KEYS.len());
    for ((key, value), spec) in entries.iter().zip(KNOWN_KEYS) {
        let storage = spec.key == "eventmesh.storage.type";
        let default = if storage { "standalone" } else { spec.default };
        assert_eq!((key.as_str(), value.as_str()), (spec.key, default));
    }
}

/// Every key at its default (the storage type, which has none, standalone),
/// set key by key without the cross-key checks.
fn declared_defaults() -> Config {
    let mut c = Config::unset();
    for spec in KNOWN_KEYS {
        let raw = (spec.key == "eventmesh.storage.type").then_some("standalone");
        spec.apply(&mut c, raw).expect(spec.key);
    }
    c
}

#[test]
fn declarations_are_well_formed() {
    let mut seen = std::collections::HashSet::new();
    for spec in KNOWN_KEYS {
        assert!(seen.insert(spec.key), "{} declared twice", spec.key);
        assert!(spec.key.starts_with("eventmesh."), "{}", spec.key);
        let d = spec.description;
        assert!(
            !d.is_empty() && !d.contains('\n') && d.ends_with('.'),
            "{d:?}"
        );
        assert_eq!(d.trim(), d, "{}", spec.key);
    }
    // Each default is valid and renders back to itself.
    let c = declared_defaults();
    for ((key, value), spec) in c.redacted_entries().iter().zip(KNOWN_KEYS) {
        let want = match spec.key {
            "eventmesh.storage.type" => "standalone",
            _ => spec.default,
        };
        assert_eq!((key.as_str(), value.as_str()), (spec.key, want));
    }
}

#[test]
fn each_key_sets_its_own_field() {
    // A valid value other than the default, for every key but the storage
    // type (its one value is already set; its field is the only one of its
    // type).
    let samples: HashMap<&str, &str> = [
        ("eventmesh.server.host", "0.0.0.0"),
        ("eventmesh.server.http.port", "8080"),
        ("eventmesh.server.admin.port", "8081"),
        ("eventmesh.server.admin.host", "127.0.0.1"),
        ("eventmesh.server.tcp.port", "off"),
        ("eventmesh.server.tcp.host", "10.0.0.7"),
        ("eventmesh.server.worker.threads", "1"),
        ("eventmesh.server.tcp.threads", "3"),
        ("eventmesh.server.tcp.token", "tcp-s3cret"),
        ("eventmesh.server.tcp.max.frame.bytes", "2048"),
        ("eventmesh.server.tcp.heartbeat.ms", "500"),
        ("eventmesh.server.tcp.hello.timeout.ms", "700"),
        ("eventmesh.server.http.header.timeout.ms", "800"),
        ("eventmesh.server.http.idle.timeout.ms", "900"),
        ("eventmesh.server.http.body.timeout.ms", "1100"),
        ("eventmesh.server.connections.max", "5000"),
        ("eventmesh.server.connections.per.address.max", "50"),
        ("eventmesh.server.admin.connections.max", "40"),
        ("eventmesh.server.tls.cert.file", "/etc/em/server.pem"),
        ("eventmesh.server.tls.key.file", "/etc/em/server-key.pem"),
        ("eventmesh.server.tls.client.ca.file", "/etc/em/ca.pem"),
        ("eventmesh.server.tls.client.auth", "optional"),
        ("eventmesh.server.tls.handshake.timeout.ms", "1200"),
        ("eventmesh.server.tls.watch.ms", "250"),
        ("eventmesh.server.http.tls.enabled", "false"),
        ("eventmesh.server.admin.tls.enabled", "false"),
        ("eventmesh.server.tcp.tls.enabled", "false"),
        ("eventmesh.cluster.tls.ca.file", "/etc/em/cluster-ca.pem"),
        ("eventmesh.http.max.body.bytes", "4096"),
        ("eventmesh.data.dir", "/var/lib/em"),
        ("eventmesh.storage.sync", "false"),
        ("eventmesh.storage.write.buffer.bytes", "1048576"),
        ("eventmesh.storage.block.cache.bytes", "2097152"),
        ("eventmesh.storage.wal.reuse.files", "0"),
        ("eventmesh.storage.retention.ms", "86400000"),
        ("eventmesh.storage.retention.bytes", "1073741824"),
        ("eventmesh.storage.retention.check.ms", "1000"),
        (
            "eventmesh.storage.jetstream.servers",
            "nats://a:4222,tls://b:4222",
        ),
        ("eventmesh.storage.jetstream.replicas", "3"),
        ("eventmesh.publish.dedup.window.ms", "0"),
        ("eventmesh.storage.jetstream.stream.prefix", "MESH_1"),
        ("eventmesh.storage.jetstream.timeout.ms", "750"),
        ("eventmesh.storage.jetstream.read.cache.bytes", "1048576"),
        ("eventmesh.storage.jetstream.user", "mesh"),
        ("eventmesh.storage.jetstream.password", "s3cret"),
        ("eventmesh.storage.jetstream.token", "s3cret-token"),
        (
            "eventmesh.storage.jetstream.creds.file",
            "/etc/em/nats.creds",
        ),
        ("eventmesh.storage.jetstream.tls.ca.file", "/etc/em/ca.pem"),
        (
            "eventmesh.storage.jetstream.tls.cert.file",
            "/etc/em/nats.pem",
        ),
        (
            "eventmesh.storage.jetstream.tls.key.file",
            "/etc/em/nats-key.pem",
        ),
        ("eventmesh.topic.default.partitions", "8"),
        ("eventmesh.topic.pattern.rescan.ms", "2500"),
        ("eventmesh.offset.flush.interval.ms", "250"),
        ("eventmesh.shutdown.grace.ms", "0"),
        ("eventmesh.log.format", "json"),
        ("eventmesh.tracing.otlp.endpoint", "http://collector:4318"),
        ("eventmesh.tracing.service.name", "mesh-eu"),
        ("eventmesh.tracing.sample.ratio", "0.25"),
        ("eventmesh.server.grpc.port", "50051"),
        ("eventmesh.server.grpc.host", "0.0.0.0"),
        ("eventmesh.server.grpc.tls.enabled", "false"),
        ("eventmesh.server.grpc.max.message.bytes", "65536"),
        ("eventmesh.server.grpc.keepalive.ms", "5000"),
        ("eventmesh.server.mqtt.port", "1883"),
        ("eventmesh.server.mqtt.host", "0.0.0.0"),
        ("eventmesh.server.mqtt.tls.enabled", "false"),
        ("eventmesh.server.mqtt.max.packet.bytes", "65536"),
        ("eventmesh.server.mqtt.connect.timeout.ms", "5000"),
        ("eventmesh.server.mqtt.keepalive.max.ms", "120000"),
        ("eventmesh.server.mqtt.session.expiry.max.ms", "3600000"),
        ("eventmesh.server.mqtt.receive.maximum", "32"),
        ("eventmesh.server.mqtt.inflight.max", "16"),
        ("eventmesh.server.mqtt.topic.alias.max", "8"),
        ("eventmesh.a2a.enabled", "false"),
        ("eventmesh.a2a.public.url", "https://mesh.example.com"),
        ("eventmesh.a2a.history.max", "7"),
        ("eventmesh.a2a.task.timeout.ms", "1500"),
        ("eventmesh.a2a.agent.ttl.ms", "2500"),
        ("eventmesh.a2a.task.retention.ms", "0"),
        ("eventmesh.a2a.push.enabled", "false"),
        ("eventmesh.a2a.grpc.public.url", "grpc.example.com:443"),
        ("eventmesh.mcp.enabled", "false"),
        ("eventmesh.mcp.sessions.max", "5"),
        ("eventmesh.mcp.session.idle.ms", "2500"),
        ("eventmesh.connector.offset.store", "meta"),
        ("eventmesh.delivery.topology", "PARTITION_OWNED_PULL"),
        ("eventmesh.delivery.after.sync", "false"),
        ("eventmesh.delivery.max.attempts", "3"),
        ("eventmesh.delivery.max.inflight", "10"),
        ("eventmesh.delivery.max.inflight.per.client", "5"),
        ("eventmesh.delivery.ack.timeout.ms", "1500"),
        ("eventmesh.delivery.member.timeout.ms", "2500"),
        ("eventmesh.delivery.backoff.initial.ms", "2000"),
        ("eventmesh.delivery.backoff.max.ms", "20000"),
        ("eventmesh.delivery.backoff.jitter", "0.5"),
        ("eventmesh.webhook.timeout.ms", "100"),
        ("eventmesh.webhook.denied.cidrs", "10.0.0.0/8,::1/128"),
        ("eventmesh.webhook.ca.file", "/etc/em/hooks-ca.pem"),
        ("eventmesh.webhook.tls.cert.file", "/etc/em/hooks.pem"),
        ("eventmesh.webhook.tls.key.file", "/etc/em/hooks-key.pem"),
        ("eventmesh.webhook.handshake.enabled", "false"),
        ("eventmesh.webhook.handshake.origin", "events.example.com"),
        ("eventmesh.webhook.handshake.request.rate", "120"),
        ("eventmesh.webhook.handshake.retry.max.ms", "5000"),
        ("eventmesh.cluster.enabled", "true"),
        ("eventmesh.cluster.instance.id", "node-1"),
        ("eventmesh.cluster.name", "eu-west"),
        ("eventmesh.cluster.lease.ms", "4000"),
        ("eventmesh.cluster.handover.grace.ms", "250"),
        ("eventmesh.cluster.secret", "cluster-s3cret-0123456789"),
        ("eventmesh.cluster.advertise.address", "node-1:10105"),
        ("eventmesh.meta.type", "etcd"),
        (
            "eventmesh.meta.etcd.endpoints",
            "https://a:2379,http://b:2379",
        ),
        ("eventmesh.meta.etcd.timeout.ms", "100"),
        ("eventmesh.meta.etcd.user", "root"),
        ("eventmesh.meta.etcd.password", "etcd-s3cret"),
        ("eventmesh.meta.etcd.tls.ca.file", "/etc/em/etcd-ca.pem"),
        ("eventmesh.meta.etcd.tls.cert.file", "/etc/em/etcd.pem"),
        ("eventmesh.meta.etcd.tls.key.file", "/etc/em/etcd-key.pem"),
        ("eventmesh.admin.token", "admin-s3cret-0123456789"),
        ("eventmesh.auth.failures.burst", "3"),
        ("eventmesh.auth.failures.interval.ms", "60000"),
        ("eventmesh.security.gate.failClosed", "true"),
        ("eventmesh.security.gate.token.file", "/etc/em/tokens"),
        ("eventmesh.security.gate.jwt.hs256.secret", "jwt-s3cret"),
        (
            "eventmesh.security.gate.jwt.public.key.file",
            "/etc/em/jwt.pem",
        ),
        ("eventmesh.security.gate.jwt.issuer", "issuer"),
        ("eventmesh.security.gate.jwt.audience", "audience"),
        ("eventmesh.security.gate.jwt.tenant.claim", "org"),
        ("eventmesh.security.gate.jwt.principal.claim", "email"),
        (
            "eventmesh.security.gate.signature.secrets.file",
            "/etc/em/hmac",
        ),
        ("eventmesh.security.gate.signature.tolerance.s", "60"),
        ("eventmesh.security.gate.acl.file", "/etc/em/acl"),
        ("eventmesh.security.gate.quota.publish.rate", "10"),
        ("eventmesh.security.gate.quota.publish.burst", "20"),
        ("eventmesh.security.gate.quota.subscriptions.max", "3"),
        ("eventmesh.security.gate.quota.connections.max", "4"),
        ("eventmesh.security.gate.audit.file", "/var/log/em-audit"),
    ]
    .into_iter()
    .collect();
    let base = declared_defaults().redacted_entries();
    for spec in KNOWN_KEYS {
        if spec.key == "eventmesh.storage.type" {
            continue;
        }
        let sample = samples.get(spec.key).expect("every key has a sample");
        let mut c = declared_defaults();
        spec.apply(&mut c, Some(sample)).expect(spec.key);
        let shown = if spec.secret { REDACTED } else { sample };
        for ((key, value), (_, before)) in c.redacted_entries().iter().zip(&base) {
            let want = if key == spec.key { shown } else { before };
            assert_eq!(value, want, "setting {} changed {key}", spec.key);
        }
        assert!(!format!("{c:?}").contains("s3cret"), "{}", spec.key);
    }
    assert_eq!(samples.len(), KNOWN_KEYS.len() - 1);
}

#[test]
fn sections_hide_secrets_in_debug() {
    let c = cfg(&[
        ("eventmesh.server.tcp.token", "tcp-s3cret"),
        (ADMIN_TOKEN_KEY, "admin-s3cret-0123456789"),
        (META, "etcd"),
        ("eventmesh.meta.etcd.user", "root"),
        ("eventmesh.meta.etcd.password", "etcd-s3cret"),
    ]);
    assert_eq!(c.server.tcp.token.as_deref(), Some("tcp-s3cret"));
    assert_eq!(c.meta.etcd.password.as_deref(), Some("etcd-s3cret"));
    for shown in [
        format!("{:?}", c.server),
        format!("{:?}", c.meta),
        format!("{c:?}"),
    ] {
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("******"), "{shown}");
    }
    assert!(format!("{:?}", c.meta).contains("root"));
}

#[test]
fn sections_hold_the_typed_values() {
    let c = cfg(&[
        ("eventmesh.server.tcp.port", "off"),
        ("eventmesh.offset.flush.interval.ms", "250"),
        ("eventmesh.shutdown.grace.ms", "0"),
        ("eventmesh.security.gate.signature.tolerance.s", "60"),
    ]);
    assert_eq!(c.server.tcp.port, None);
    assert_eq!(c.server.tcp.max_frame_bytes, 1_114_112);
    assert_eq!(c.server.tcp.heartbeat, Duration::from_millis(15_000));
    assert_eq!(c.delivery.flush_interval, Duration::from_millis(250));
    assert_eq!(c.shutdown.grace, Duration::ZERO);
    assert_eq!(c.gate.signature_tolerance, Duration::from_secs(60));
    assert_eq!(c.storage.data_dir, PathBuf::from("./data"));
    assert_eq!(c.topic.default_partitions, 4);
    assert_eq!(c.meta.etcd.timeout, Duration::from_millis(3000));
    let default_denied: Vec<String> = c
        .webhook
        .denied_cidrs
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(
        default_denied,
        [
            "169.254.0.0/16",
            "fe80::/10",
            "fd00:ec2::254/128",
            "100.100.100.200/32"
        ]
    );
    assert_eq!(c.server.auth_failures.burst, 5);
    assert_eq!(c.server.auth_failures.interval, Duration::from_secs(30));
    assert_eq!(cfg(&[]).server.tcp.port, Some(10000));
    let ephemeral = cfg(&[("eventmesh.server.tcp.port", "0")]);
    assert_eq!(ephemeral.server.tcp.port, Some(0));
}

#[test]
fn markdown_table_has_a_row_per_key() {
    let table = markdown_table();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), KNOWN_KEYS.len() + 2);
    assert_eq!(rows[0], "| key | default | secret | meaning |");
    let row = |key: &str| {
        *rows
            .iter()
            .find(|r| r.starts_with(&format!("| `{key}` |")))
            .unwrap()
    };
    assert_eq!(
        row(ADMIN_TOKEN_KEY),
        "| `eventmesh.admin.token` | none | yes | Bearer token of the admin routes, at \
         least 16 bytes; without one they answer `503 admin_locked`. |"
    );
    assert!(row(PORT).starts_with("| `eventmesh.server.http.port` | `10105` |  | "));
    // A `|` inside a cell is escaped so the row keeps its four cells.
    let acl = row("eventmesh.security.gate.acl.file");
    assert!(acl.contains("<allow\\|deny>"), "{acl}");
    assert_eq!(acl.matches(" | ").count(), 3, "{acl}");
}

mod listeners;
mod tls;
mod tracing;
mod webhook;
