//! Redaction of secrets inside values that are shown: passwords and tokens
//! in URLs (`scheme://user:password@host`, `scheme://:password@host`,
//! `scheme://token@host`, `?password=…&token=…`), in libpq-style
//! connection strings (`host=db password='…'`), in lists of them and in
//! free text such as an error message; and in JSON configs, where the value
//! of a secret-named key is hidden whole.
//!
//! Every place that shows a configured value, a log line or an error that
//! may carry one goes through this module, and the same scanner finds the
//! secret spots in a shown value again, so that a value shown redacted and
//! given back ([`restore`], [`restore_json`]) keeps the secret it stands
//! for.
//!
//! Invariants:
//! - A redacted string has [`PLACEHOLDER`] where each secret was, and
//!   everything else as it was.
//! - [`restore`] of a redacted string against the original gives the
//!   original back; a placeholder it cannot match to a stored secret is an
//!   error naming where it is, never kept as a value.

use serde_json::Value;

/// What a hidden secret is shown as.
pub const PLACEHOLDER: &str = "***";

/// Whether a JSON key, query parameter or connection-string keyword names a
/// secret.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "password"
            | "passwd"
            | "pwd"
            | "pass"
            | "secret"
            | "token"
            | "credentials"
            | "creds"
            | "apikey"
            | "api_key"
            | "api-key"
    ) || ["password", "_secret", "_token", "-secret", "-token"]
        .iter()
        .any(|s| n.ends_with(s))
}

/// Where a secret sits in a string, told apart so that the same spot can
/// be found in another spelling of the string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spot {
    /// The password (or token) of the n-th URL.
    Userinfo(usize),
    /// The n-th value of a secret-named `key=value` (lower-case key).
    Param(String, usize),
}

#[derive(Debug)]
struct Site {
    start: usize,
    end: usize,
    spot: Spot,
}

fn scheme_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+.-".contains(&b)
}

/// Characters that end a URL part in free text.
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"'<>`".contains(&b)
}

/// Every secret spot of `s`, in order.
fn sites(s: &str) -> Vec<Site> {
    let b = s.as_bytes();
    // Each URL: (start of its scheme, end of "://").
    let mut urls = Vec::new();
    let mut from = 0;
    while let Some(i) = s[from..].find("://").map(|i| i + from) {
        let mut start = i;
        while start > 0 && scheme_char(b[start - 1]) {
            start -= 1;
        }
        urls.push((start, i + 3));
        from = i + 3;
    }
    let mut out = Vec::new();
    for (n, &(_, after)) in urls.iter().enumerate() {
        // The URL runs to the next URL's scheme (minus a separating comma)
        // or to what ends a URL in text.
        let mut limit = urls.get(n + 1).map_or(b.len(), |u| u.0);
        if let Some(p) = b[after..limit].iter().position(|&c| ends_url(c)) {
            limit = after + p;
        }
        let authority_end = b[after..limit]
            .iter()
            .position(|c| b"/?#".contains(c))
            .map_or(limit, |p| after + p);
        let authority = &s[after..authority_end];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) if colon + 1 < userinfo.len() => out.push(Site {
                    start: after + colon + 1,
                    end: after + at,
                    spot: Spot::Userinfo(n),
                }),
                Some(_) => {}
                None if !userinfo.is_empty() => out.push(Site {
                    start: after,
                    end: after + at,
                    spot: Spot::Userinfo(n),
                }),
                None => {}
            }
        }
        // Query parameters.
        if let Some(q) = b[authority_end..limit].iter().position(|&c| c == b'?') {
            let q = authority_end + q + 1;
            let end = b[q..limit]
                .iter()
                .position(|&c| c == b'#')
                .map_or(limit, |p| q + p);
            let mut at = q;
            for pair in s[q..end].split('&') {
                if let Some((k, v)) = pair.split_once('=') {
                    let mut v_end = at + k.len() + 1 + v.len();
                    // A comma before the next URL of a list is not the value's.
                    if v_end == end && end == limit && b.get(limit - 1) == Some(&b',') {
                        v_end -= 1;
                    }
                    let v_start = at + k.len() + 1;
                    if is_secret_name(k) && v_end > v_start {
                        out.push(Site {
                            start: v_start,
                            end: v_end,
                            spot: Spot::Param(k.to_ascii_lowercase(), 0),
                        });
                    }
                }
                at += pair.len() + 1;
            }
        }
    }
    // `key=value` outside URLs: connection strings (`password='a b'`).
    let in_url = |i: usize| {
        urls.iter().any(|&(start, after)| {
            i >= start && {
                let rest = &b[after..];
                let len = rest.iter().position(|&c| ends_url(c)).unwrap_or(rest.len());
                i < after + len
            }
        })
    };
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b"_-".contains(&b[i - 1]));
        if !(word_start && b[i].is_ascii_alphabetic()) || in_url(i) {
            i += 1;
            continue;
        }
        let mut k = i;
        while k < b.len() && (b[k].is_ascii_alphanumeric() || b"_-".contains(&b[k])) {
            k += 1;
        }
        let key = &s[i..k];
        let mut e = k;
        while e < b.len() && b[e] == b' ' {
            e += 1;
        }
        if e >= b.len() || b[e] != b'=' || !is_secret_name(key) {
            i = k.max(i + 1);
            continue;
        }
        let mut v = e + 1;
        while v < b.len() && b[v] == b' ' {
            v += 1;
        }
        let v_end = if b.get(v) == Some(&b'\'') {
            // Quoted: to the closing quote, `\'` and `\\` escaped.
            let mut j = v + 1;
            while j < b.len() && b[j] != b'\'' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(b.len())
        } else {
            let rest = &b[v..];
            v + rest
                .iter()
                .position(|c| c.is_ascii_whitespace())
                .unwrap_or(rest.len())
        };
        if v_end > v {
            out.push(Site {
                start: v,
                end: v_end,
                spot: Spot::Param(key.to_ascii_lowercase(), 0),
            });
        }
        i = v_end.max(k);
    }
    out.sort_by_key(|s| s.start);
    // Spots that overlap (a pair inside a URL's user-info) become one.
    let mut merged: Vec<Site> = Vec::with_capacity(out.len());
    for site in out {
        match merged.last_mut() {
            Some(last) if site.start < last.end => last.end = last.end.max(site.end),
            _ => merged.push(site),
        }
    }
    let mut out = merged;
    // Number repeated keys in order, so that each is told apart.
    let mut seen: Vec<String> = Vec::new();
    for site in &mut out {
        if let Spot::Param(k, n) = &mut site.spot {
            *n = seen.iter().filter(|s| *s == k).count();
            seen.push(k.clone());
        }
    }
    out
}

/// `s` with every secret spot replaced by [`PLACEHOLDER`]: passwords and
/// tokens of URLs (one, a list, or any inside free text), secret query
/// parameters and secret `key=value` pairs of connection strings.
pub fn text(s: &str) -> String {
    let sites = sites(s);
    if sites.is_empty() {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for site in sites {
        out.push_str(&s[at..site.start]);
        out.push_str(PLACEHOLDER);
        at = site.end;
    }
    out.push_str(&s[at..]);
    out
}

/// A URL or a comma-separated list of URLs, redacted (see [`text`]).
pub fn url(s: &str) -> String {
    text(s)
}

/// A libpq-style connection string (`host=db password=secret`, values
/// possibly single-quoted), or a connection URL, redacted (see [`text`]).
pub fn conninfo(s: &str) -> String {
    text(s)
}

/// A list of URLs joined by commas, redacted.
pub fn urls<S: AsRef<str>>(list: &[S]) -> String {
    let joined: Vec<&str> = list.iter().map(AsRef::as_ref).collect();
    text(&joined.join(","))
}

/// `new`, a string as shown possibly with placeholders, with each
/// placeholder put back from the same spot of `old`, the stored string.
/// `None` when a placeholder has no stored secret at its spot.
pub fn restore(new: &str, old: Option<&str>) -> Option<String> {
    if !new.contains(PLACEHOLDER) {
        return Some(new.to_string());
    }
    if new == PLACEHOLDER {
        return old.map(str::to_string);
    }
    if let Some(old) = old {
        if text(old) == new {
            return Some(old.to_string());
        }
    }
    let old_sites = old.map(|o| (o, sites(o)));
    let mut out = String::with_capacity(new.len());
    let mut at = 0;
    for site in sites(new) {
        if &new[site.start..site.end] != PLACEHOLDER {
            continue;
        }
        let (o, list) = old_sites.as_ref()?;
        let stored = list.iter().find(|s| s.spot == site.spot)?;
        out.push_str(&new[at..site.start]);
        out.push_str(&o[stored.start..stored.end]);
        at = site.end;
    }
    out.push_str(&new[at..]);
    Some(out)
}

/// A JSON config as shown: the value of each secret-named key (see
/// [`is_secret_name`]) replaced by `"***"` unless null, and every string
/// redacted as [`text`] does, at any depth.
pub fn json(config: &Value) -> Value {
    match config {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_name(k) && !v.is_null() {
                        Value::String(PLACEHOLDER.into())
                    } else {
                        json(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        Value::String(s) => Value::String(text(s)),
        other => other.clone(),
    }
}

/// Puts the stored secrets back into `new`, a config given back after it
/// was shown redacted: a placeholder (a whole value, or one spot of a
/// string) is replaced by what `old` holds at the same JSON path. `Err`
/// names the path (`signature.secret`, `servers[1]`) of a placeholder with
/// nothing stored there.
pub fn restore_json(new: &mut Value, old: Option<&Value>) -> Result<(), String> {
    restore_at(new, old, &mut String::new())
}

fn restore_at(new: &mut Value, old: Option<&Value>, path: &mut String) -> Result<(), String> {
    let len = path.len();
    let result = match new {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                let stored = old.and_then(|o| o.get(k.as_str()));
                if v.as_str() == Some(PLACEHOLDER) && is_secret_name(k) {
                    match stored {
                        Some(s) if !s.is_null() => *v = s.clone(),
                        _ => return Err(path.clone()),
                    }
                } else {
                    restore_at(v, stored, path)?;
                }
                path.truncate(len);
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                path.push_str(&format!("[{i}]"));
                restore_at(v, old.and_then(|o| o.get(i)), path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::String(s) => match restore(s, old.and_then(Value::as_str)) {
            Some(r) => {
                *s = r;
                Ok(())
            }
            None => Err(path.clone()),
        },
        _ => Ok(()),
    };
    path.truncate(len);
    result
}

/// The secrets a JSON config holds: values of secret-named keys and the
/// secret spots of its strings, each also percent-decoded when that
/// differs. For hiding them in messages that may echo them
/// ([`message`]).
pub fn secrets_of(config: &Value) -> Vec<String> {
    fn walk(v: &Value, secret: bool, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    walk(v, is_secret_name(k), out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, secret, out)),
            Value::String(s) if secret => out.push(s.clone()),
            Value::String(s) => {
                for site in sites(s) {
                    let raw = s[site.start..site.end].trim_matches('\'');
                    out.push(raw.to_string());
                    if let Some(decoded) = percent_decoded(raw) {
                        out.push(decoded);
                    }
                }
            }
            Value::Number(n) if secret => out.push(n.to_string()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(config, false, &mut out);
    out.retain(|s| !s.is_empty() && s != PLACEHOLDER);
    // Longest first, so that a secret containing another goes whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// A message (an error, a status) redacted as [`text`] does, with any of
/// `secrets` it still holds verbatim replaced too: anywhere when the
/// secret is 8 bytes or longer, else only where it stands as a word of its
/// own (so that a short secret does not garble the words that contain it).
pub fn message(msg: &str, secrets: &[String]) -> String {
    let mut out = text(msg);
    for s in secrets {
        out = replace_secret(&out, s);
    }
    out
}

fn replace_secret(text: &str, secret: &str) -> String {
    // An empty secret hides nothing (and would match everywhere).
    if secret.is_empty() {
        return text.to_string();
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(i) = text[at..].find(secret).map(|i| i + at) {
        let end = i + secret.len();
        let whole = secret.len() >= 8
            || !(word(text[..i].chars().next_back()) || word(text[end..].chars().next()));
        if whole {
            out.push_str(&text[at..i]);
            out.push_str(PLACEHOLDER);
        } else {
            out.push_str(&text[at..end]);
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

fn percent_decoded(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn url_passwords_and_tokens_are_hidden_in_every_spelling() {
        for (given, shown) in [
            ("nats://user:pass@host:4222", "nats://user:***@host:4222"),
            ("redis://:pw@r:6379/0", "redis://:***@r:6379/0"),
            ("nats://s3cr3tT0ken@host:4222", "nats://***@host:4222"),
            // Percent-encoded, and an unencoded @ inside the password.
            (
                "postgres://app:p%40ss%3A@db:5432/x",
                "postgres://app:***@db:5432/x",
            ),
            (
                "postgres://app:p@ss@db:5432/x",
                "postgres://app:***@db:5432/x",
            ),
            // IPv6 hosts.
            ("nats://u:p@[::1]:4222", "nats://u:***@[::1]:4222"),
            (
                "http://[fe80::1%25eth0]:2379",
                "http://[fe80::1%25eth0]:2379",
            ),
            // Nothing to hide.
            ("http://127.0.0.1:2379", "http://127.0.0.1:2379"),
            ("nats://u:@h:4222", "nats://u:@h:4222"),
            ("/var/lib/eventmesh", "/var/lib/eventmesh"),
            ("", ""),
            // Query strings.
            (
                "postgres://db/x?sslmode=disable&password=pw&user=a",
                "postgres://db/x?sslmode=disable&password=***&user=a",
            ),
            (
                "https://c:4318/v1?token=abc#frag",
                "https://c:4318/v1?token=***#frag",
            ),
            (
                "http://h/?access_token=abc&x=1",
                "http://h/?access_token=***&x=1",
            ),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
    }

    #[test]
    fn lists_and_free_text_are_scanned_url_by_url() {
        assert_eq!(
            url("nats://a:1@n1:4222,nats://n2:4222,tls://tok@n3:4222?token=t,nats://n4"),
            "nats://a:***@n1:4222,nats://n2:4222,tls://***@n3:4222?token=***,nats://n4"
        );
        assert_eq!(
            urls(&["http://u:p@e1:2379", "http://e2:2379"]),
            "http://u:***@e1:2379,http://e2:2379"
        );
        assert_eq!(
            text("cannot connect to etcd at http://root:pw@e1:2379,http://e2:2379: refused (user@example.com)"),
            "cannot connect to etcd at http://root:***@e1:2379,http://e2:2379: refused (user@example.com)"
        );
        assert_eq!(
            text("error: \"postgres://a:b@h/db\" failed"),
            "error: \"postgres://a:***@h/db\" failed"
        );
    }

    #[test]
    fn connection_strings_hide_their_password_quoted_or_not() {
        for (given, shown) in [
            (
                "host=db user=app password=hunter2 dbname=x",
                "host=db user=app password=*** dbname=x",
            ),
            (
                "host=db password = 'a b\\'c' port=5432",
                "host=db password = *** port=5432",
            ),
            ("password=x", "password=***"),
            ("host=db sslpassword=k", "host=db sslpassword=***"),
            ("host=db user=app", "host=db user=app"),
            ("mypassword is not a pair", "mypassword is not a pair"),
        ] {
            assert_eq!(conninfo(given), shown, "{given}");
        }
    }

    #[test]
    fn a_redacted_string_restores_to_the_stored_one() {
        for old in [
            "nats://user:pass@host:4222",
            "nats://tok@h1,nats://u:p@h2?token=t",
            "host=db password='a b' sslpassword=k",
            "postgres://app:p@ss@db/x?password=q",
        ] {
            assert_eq!(
                restore(&text(old), Some(old)),
                Some(old.to_string()),
                "{old}"
            );
        }
        // The host changed, the password kept: spliced in.
        assert_eq!(
            restore(
                "nats://user:***@other:4222",
                Some("nats://user:pass@host:4222")
            ),
            Some("nats://user:pass@other:4222".into())
        );
        assert_eq!(
            restore("host=new password=***", Some("host=db password='a b'")),
            Some("host=new password='a b'".into())
        );
        // Nothing stored at that spot.
        assert_eq!(restore("nats://u:***@h", Some("nats://h")), None);
        assert_eq!(restore("***", None), None);
        assert_eq!(restore("plain", None), Some("plain".into()));
    }

    #[test]
    fn json_configs_hide_secret_keys_and_url_passwords_and_give_them_back() {
        let stored = json!({
            "url": "postgres://app:hunter2@db:5432/x?sslmode=disable",
            "signature": {"secret": "s", "header": "x-sig"},
            "servers": ["nats://n1:4222", "nats://u:p@n2:4222"],
            "password": null,
            "token": 42,
            "conn": "host=db password=pw",
        });
        let shown = json(&stored);
        assert_eq!(
            shown,
            json!({
                "url": "postgres://app:***@db:5432/x?sslmode=disable",
                "signature": {"secret": "***", "header": "x-sig"},
                "servers": ["nats://n1:4222", "nats://u:***@n2:4222"],
                "password": null,
                "token": "***",
                "conn": "host=db password=***",
            })
        );
        let mut back = shown.clone();
        assert_eq!(restore_json(&mut back, Some(&stored)), Ok(()));
        assert_eq!(back, stored);
        // A placeholder where nothing is stored names its path.
        let mut bad = json!({"servers": ["nats://n1:4222", "nats://u:***@n3"]});
        let old = json!({"servers": ["nats://n1:4222"]});
        assert_eq!(restore_json(&mut bad, Some(&old)), Err("servers[1]".into()));
        let mut bad = json!({"signature": {"secret": "***"}});
        assert_eq!(restore_json(&mut bad, None), Err("signature.secret".into()));
    }

    #[test]
    fn any_mix_of_fragments_is_scanned_without_panicking() {
        let parts = [
            "nats://",
            "u:p",
            "@",
            "é",
            ":",
            "/",
            "?",
            "password=",
            "'",
            "\\",
            " ",
            ",",
            "tok",
            "&",
            "#",
            "[::1]",
            "=",
            "€x",
        ];
        for a in parts {
            for b in parts {
                for c in parts {
                    for d in parts {
                        let s = format!("{a}{b}{c}{d}");
                        let shown = text(&s);
                        assert_eq!(restore(&shown, Some(&s)).as_deref(), Some(s.as_str()));
                        let _ = message(&s, &secrets_of(&json!({ "u": s, "token": "p" })));
                    }
                }
            }
        }
    }

    #[test]
    fn messages_lose_the_secrets_they_echo() {
        let config = json!({"url": "postgres://app:p%40ss@db/x", "token": "t0k"});
        let secrets = secrets_of(&config);
        assert_eq!(
            message(
                "auth failed for p@ss with t0k at postgres://app:p%40ss@db/x",
                &secrets
            ),
            "auth failed for *** with *** at postgres://app:***@db/x"
        );
        // A short secret goes only where it is a word of its own.
        let secrets = secrets_of(&json!({"secret": "s", "password": "longer-secret"}));
        assert_eq!(
            message("s is the signature; xlonger-secretx", &secrets),
            "*** is the signature; x***x"
        );
        // An empty secret (a config value left blank) hides nothing.
        assert_eq!(message("", &[String::new()]), "");
        assert_eq!(message("no secret", &[String::new()]), "no secret");
    }
}
