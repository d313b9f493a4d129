//! Webhook pushes: one delivery as a CloudEvents binary-mode HTTP POST.
//!
//! The delivery id travels in the `eventmesh-delivery-id` header (it stays
//! the same across retries of one delivery, so receivers can deduplicate).
//! A 2xx answer acknowledges; any other status, a timeout or a connection
//! error is a failed attempt.

use std::time::Duration;

use eventmesh_core::CloudEvent;

/// Header carrying the delivery id on webhook pushes.
pub const DELIVERY_ID_HEADER: &str = "eventmesh-delivery-id";

/// Checks a webhook URL: absolute, `http` or `https`, with a host.
/// Host (IPv6 without brackets) and port of a webhook URL.
pub fn host_and_port(url: &str) -> Option<(String, u16)> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_string(), parsed.port_or_known_default()?))
}

pub fn validate_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url {url:?} is not valid: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "url scheme {:?} is not supported; use http or https",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("url {url:?} has no host"));
    }
    Ok(())
}

/// Sends one attempt. `Ok(())` on a 2xx; otherwise the reason it failed.
pub async fn push(
    client: &reqwest::Client,
    url: &str,
    delivery_id: &str,
    event: &CloudEvent,
    timeout: Duration,
) -> Result<(), String> {
    let (headers, content_type) = event.binary_mode_headers();
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header(DELIVERY_ID_HEADER, delivery_id)
        .body(event.data.as_bytes().to_vec());
    for (name, value) in headers {
        req = req.header(name, value);
    }
    if let Some(ct) = content_type {
        req = req.header(reqwest::header::CONTENT_TYPE, ct);
    }
    match req.send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => Err(format!("status {}", resp.status().as_u16())),
        Err(e) if e.is_timeout() => Err(format!("timed out after {} ms", timeout.as_millis())),
        Err(e) => Err(format!("request failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::validate_url;

    #[test]
    fn host_and_port_of_urls() {
        use super::host_and_port as p;
        assert_eq!(p("http://example.com/x"), Some(("example.com".into(), 80)));
        assert_eq!(
            p("https://u:pw@example.com:8443?q"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(p("http://[::1]:9000/hook"), Some(("::1".into(), 9000)));
        assert_eq!(p("http://10.1.2.3"), Some(("10.1.2.3".into(), 80)));
    }

    #[test]
    fn url_rules() {
        assert!(validate_url("http://127.0.0.1:8080/hook").is_ok());
        assert!(validate_url("https://example.com").is_ok());
        assert!(validate_url("ftp://example.com")
            .unwrap_err()
            .contains("ftp"));
        assert!(validate_url("not a url").is_err());
        assert!(validate_url("file:///etc/passwd").is_err());
    }
}
