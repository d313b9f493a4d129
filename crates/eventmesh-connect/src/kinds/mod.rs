//! The built-in connector kinds, one file per system. (The `http-source`
//! is served by the runtime's traffic port, which owns its endpoint; it is
//! listed here for its schema.)

pub mod file;
pub mod http;
pub mod mqtt;
pub mod nats;
pub mod postgres;
pub mod redis;

use crate::kind::Kind;

/// Every built-in kind, sorted by name.
pub fn all() -> Vec<Kind> {
    let mut kinds = vec![
        Kind::source::<file::FileSource>(),
        Kind::sink::<file::FileSink>(),
        Kind::source::<http::HttpSource>(),
    ];
    kinds.extend(mqtt::kinds());
    kinds.extend(nats::kinds());
    kinds.extend(postgres::kinds());
    kinds.extend(redis::kinds());
    kinds.sort_by_key(|k| k.name());
    kinds
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::sdk::Target;

    fn targets(kind: &str, config: serde_json::Value) -> Vec<Target> {
        let kinds = super::all();
        let kind = kinds.iter().find(|k| k.name() == kind).unwrap();
        kind.check(&config).unwrap();
        kind.targets(&config)
    }

    #[test]
    fn every_kind_that_connects_out_names_its_targets() {
        let t = |h: &str, p| Target::new(h, p);
        assert_eq!(
            targets(
                "postgres-sink",
                json!({"url": "postgres://u:p@db.example:6543/x", "table": "t"})
            ),
            [t("db.example", 6543)]
        );
        assert_eq!(
            targets(
                "postgres-source",
                json!({"url": "postgres://u@[::1]/x", "table": "t"})
            ),
            [t("::1", 5432)]
        );
        assert_eq!(
            targets(
                "postgres-sink",
                json!({"url": "host=a,b port=1,2 hostaddr=10.0.0.1,10.0.0.2 user=u", "table": "t"})
            ),
            [t("10.0.0.1", 1), t("10.0.0.2", 2)]
        );
        assert_eq!(
            targets(
                "redis-sink",
                json!({"url": "redis://:pw@169.254.169.254:6380/0", "stream": "s"})
            ),
            [t("169.254.169.254", 6380)]
        );
        assert_eq!(
            targets(
                "nats-sink",
                json!({"servers": ["nats://n1:4223", "tls://[fe80::1]"], "subject": "a.b"})
            ),
            [t("n1", 4223), t("fe80::1", 4222)]
        );
        assert_eq!(
            targets(
                "mqtt-sink",
                json!({"host": "broker", "port": 8883, "topic": "a/b"})
            ),
            [t("broker", 8883)]
        );
        assert_eq!(
            targets("file-sink", json!({"path": "/tmp/x.jsonl"})),
            Vec::<Target>::new()
        );
        assert_eq!(t("fe80::1", 1).to_string(), "[fe80::1]:1");
    }
}
