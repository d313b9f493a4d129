//! The two exposition formats of `/metrics` and the choice between them.
//!
//! The registry renders OpenMetrics 1.0.0; the classic Prometheus text
//! format 0.0.4 is derived from it line by line. Both yield the same
//! samples, under the same names and with the same values; they differ in
//! the metadata:
//!
//! - a counter's family is `x` in OpenMetrics (sample `x_total`) and
//!   `x_total` in the text format, whose parsers attach a sample to the
//!   family of its exact name (a family `x` there would leave `x_total` an
//!   untyped family of its own);
//! - OpenMetrics has `# UNIT` lines and ends with `# EOF`; the text format
//!   has neither.
//!
//! Invariant: every HELP text is plain (no backslash, quote or line
//! break), so it reads the same in both formats without escaping.

/// An exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The classic Prometheus text format 0.0.4: the default.
    Text,
    /// OpenMetrics 1.0.0, for a scraper that asks for it.
    OpenMetrics,
}

/// How well one media range of an `Accept` header matches a format.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Match {
    q: f32,
    /// 2: `type/subtype`, 1: `type/*`, 0: `*/*`.
    specificity: u8,
    /// The range's place in the header (earlier wins a tie).
    position: usize,
}

impl Format {
    pub const TEXT_CONTENT_TYPE: &'static str = "text/plain; version=0.0.4; charset=utf-8";
    pub const OPENMETRICS_CONTENT_TYPE: &'static str =
        "application/openmetrics-text; version=1.0.0; charset=utf-8";

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => Self::TEXT_CONTENT_TYPE,
            Format::OpenMetrics => Self::OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// The format an `Accept` header asks for. Each format takes the
    /// quality of the most specific range that names it
    /// (`application/openmetrics-text` or `text/plain` of any version,
    /// then `application/*` or `text/*`, then `*/*`); the higher quality
    /// wins, then the more specific range, then the range listed first.
    /// The text format when no header, when nothing acceptable matches
    /// (as Prometheus's own client libraries do) and on a tie between
    /// the two through one range (`*/*`).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let best = |format: Format| -> Option<Match> {
            let mut best: Option<Match> = None;
            for (position, range) in accept.split(',').enumerate() {
                let Some((specificity, q)) = format.matches(range) else {
                    continue;
                };
                if best.is_none_or(|b| specificity > b.specificity) {
                    best = Some(Match {
                        q,
                        specificity,
                        position,
                    });
                }
            }
            best.filter(|b| b.q > 0.0)
        };
        match (best(Format::OpenMetrics), best(Format::Text)) {
            (Some(open), Some(text)) => {
                let open_first = (open.q, open.specificity, std::cmp::Reverse(open.position))
                    > (text.q, text.specificity, std::cmp::Reverse(text.position));
                if open_first {
                    Format::OpenMetrics
                } else {
                    Format::Text
                }
            }
            (Some(_), None) => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// How specifically a media range (`type/subtype; params`) names this
    /// format, and its quality; `None` when it does not name it (or its
    /// `q` is unreadable).
    fn matches(self, range: &str) -> Option<(u8, f32)> {
        let mut parts = range.split(';');
        let media = parts.next()?.trim().to_ascii_lowercase();
        let mut q = 1.0f32;
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            if key.trim().eq_ignore_ascii_case("q") {
                q = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|q| (0.0..=1.0).contains(q))?;
            }
        }
        let (kind, subtype) = media.split_once('/')?;
        let (own_kind, own_subtype) = match self {
            Format::Text => ("text", "plain"),
            Format::OpenMetrics => ("application", "openmetrics-text"),
        };
        let specificity = match (kind, subtype) {
            ("*", "*") => 0,
            (k, "*") if k == own_kind => 1,
            (k, s) if k == own_kind && s == own_subtype => 2,
            _ => return None,
        };
        Some((specificity, q))
    }
}

/// The text format 0.0.4 of an OpenMetrics exposition (as the registry
/// renders it): a counter family takes its sample's name (`x_total`), an
/// `info` family becomes the gauge `x_info`, `unknown` and the types the
/// text format lacks become `untyped`; `# UNIT`, `# EOF`, exemplars and
/// timestamps (seconds in OpenMetrics, milliseconds here) are left out.
pub fn to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + 1024);
    // The HELP line waits for its TYPE, which names the family.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (family, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                _ => (name.to_string(), "untyped"),
            };
            if let Some((_, text)) = help.take().filter(|(of, _)| *of == name) {
                out.push_str(&format!("# HELP {family} {}\n", escape_help(text)));
            }
            out.push_str(&format!("# TYPE {family} {kind}\n"));
        } else if line.starts_with('#') || line.trim().is_empty() {
            // `# UNIT`, `# EOF`: OpenMetrics only.
        } else {
            out.push_str(sample_without_extras(line));
            out.push('\n');
        }
    }
    out
}

/// HELP text escaped for the text format (backslash and line feed).
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample line cut after its value: no timestamp, no exemplar. Label
/// values may hold spaces, braces, `#` and escaped quotes.
fn sample_without_extras(line: &str) -> &str {
    let mut labels_end = line.find([' ', '{']).unwrap_or(line.len());
    if line[labels_end..].starts_with('{') {
        let (mut quoted, mut escaped) = (false, false);
        for (i, ch) in line.char_indices().skip(labels_end + 1) {
            match ch {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    labels_end = i + 1;
                    break;
                }
                _ => {}
            }
        }
    }
    let rest = &line[labels_end..];
    let value_start = rest.len() - rest.trim_start().len();
    let value_len = rest[value_start..]
        .find(char::is_whitespace)
        .unwrap_or(rest.len() - value_start);
    &line[..labels_end + value_start + value_len]
}

#[cfg(test)]
mod tests {
    use super::{to_text, Format};

    const PROMETHEUS: &str = "application/openmetrics-text;version=1.0.0,\
        application/openmetrics-text;version=0.0.1;q=0.75,\
        text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn negotiates_by_quality_then_specificity_then_order() {
        for (accept, want) in [
            (None, Format::Text),
            (Some(""), Format::Text),
            (Some("*/*"), Format::Text),
            (Some("text/plain"), Format::Text),
            (Some("text/plain; version=0.0.4"), Format::Text),
            (Some("application/json"), Format::Text),
            (Some(PROMETHEUS), Format::OpenMetrics),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("Application/OpenMetrics-Text; Version=1.0.0; Charset=UTF-8"),
                Format::OpenMetrics,
            ),
            (
                Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.8"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.5,application/openmetrics-text;version=1.0.0"),
                Format::OpenMetrics,
            ),
            // Equal quality: the more specific range, then the first.
            (
                Some("*/*,application/openmetrics-text"),
                Format::OpenMetrics,
            ),
            (Some("application/*,text/plain"), Format::Text),
            (
                Some("application/openmetrics-text,text/plain"),
                Format::OpenMetrics,
            ),
            (
                Some("text/plain,application/openmetrics-text"),
                Format::Text,
            ),
            // q=0 refuses a format; an unreadable q drops its range.
            (Some("text/plain;q=0,*/*;q=0.1"), Format::OpenMetrics),
            (Some("application/openmetrics-text;q=0,*/*"), Format::Text),
            (Some("application/openmetrics-text;q=x"), Format::Text),
            (
                Some("application/openmetrics-text;q=0.2,text/*;q=0.1"),
                Format::OpenMetrics,
            ),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn text_format_names_counters_after_their_samples() {
        let open = concat!(
            "# HELP em_acks Deliveries acknowledged.\n",
            "# TYPE em_acks counter\n",
            "em_acks_total 3\n",
            "# HELP em_size_bytes Size.\n",
            "# TYPE em_size_bytes gauge\n",
            "# UNIT em_size_bytes bytes\n",
            "em_size_bytes{kind=\"a} # \\\"b\"} 7 1700000000.5\n",
            "# HELP em_build Build.\n",
            "# TYPE em_build info\n",
            "em_build_info{version=\"1\"} 1\n",
            "# HELP em_lat Latency.\n",
            "# TYPE em_lat histogram\n",
            "em_lat_bucket{le=\"+Inf\"} 2 # {trace=\"x\"} 0.5\n",
            "em_lat_sum 0.75\n",
            "em_lat_count 2\n",
            "# HELP em_x Odd \\ one.\n",
            "# TYPE em_x unknown\n",
            "em_x 1\n",
            "# EOF\n",
        );
        assert_eq!(
            to_text(open),
            concat!(
                "# HELP em_acks_total Deliveries acknowledged.\n",
                "# TYPE em_acks_total counter\n",
                "em_acks_total 3\n",
                "# HELP em_size_bytes Size.\n",
                "# TYPE em_size_bytes gauge\n",
                "em_size_bytes{kind=\"a} # \\\"b\"} 7\n",
                "# HELP em_build_info Build.\n",
                "# TYPE em_build_info gauge\n",
                "em_build_info{version=\"1\"} 1\n",
                "# HELP em_lat Latency.\n",
                "# TYPE em_lat histogram\n",
                "em_lat_bucket{le=\"+Inf\"} 2\n",
                "em_lat_sum 0.75\n",
                "em_lat_count 2\n",
                "# HELP em_x Odd \\\\ one.\n",
                "# TYPE em_x untyped\n",
                "em_x 1\n",
            )
        );
    }
}
