//! The two exposition formats and how a scrape picks one.
//!
//! The registry encodes OpenMetrics 1.0.0. Prometheus' text format 0.0.4 (what `promtool check
//! metrics` and older scrapers read) differs in a few lines: a counter's `# HELP` and `# TYPE`
//! name the sample (`x_total`, not `x`; `x_info` for an info), there is no `# UNIT` and no `# EOF`, and the types
//! `info`, `stateset`, `gaugehistogram` and `unknown` are `gauge`, `gauge`, `histogram` and
//! `untyped`. [`to_text_004`] rewrites exactly those.

/// A Prometheus exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`.
    Text004,
}

impl Exposition {
    /// The `Content-Type` of an answer in this format.
    #[must_use]
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it ranks
    /// `application/openmetrics-text` at least as high as `text/plain` (Prometheus' own scrapes
    /// do), else text 0.0.4, which is also the answer to no header, `*/*` or anything else.
    #[must_use]
    pub fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Text004;
        };
        let mut openmetrics = None::<f32>;
        let mut text = None::<f32>;
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut quality = 1.0_f32;
            let mut version = None;
            for parameter in parts {
                if let Some((key, value)) = parameter.split_once('=') {
                    match key.trim().to_ascii_lowercase().as_str() {
                        "q" => quality = value.trim().parse().unwrap_or(0.0),
                        "version" => version = Some(value.trim().to_owned()),
                        _ => {}
                    }
                }
            }
            let slot = match media.as_str() {
                // OpenMetrics 0.0.1 is the same text as 1.0.0 for what the server emits.
                "application/openmetrics-text" => &mut openmetrics,
                "text/plain" if version.as_deref().is_none_or(|v| v == "0.0.4") => &mut text,
                _ => continue,
            };
            *slot = Some(slot.map_or(quality, |q| q.max(quality)));
        }
        match (openmetrics, text) {
            (Some(om), text) if om > 0.0 && om >= text.unwrap_or(0.0) => Self::OpenMetrics,
            _ => Self::Text004,
        }
    }
}

/// Rewrites an OpenMetrics exposition (as the registry encodes it) into text format 0.0.4.
#[must_use]
pub fn to_text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "# EOF" || line.starts_with("# UNIT ") {
            i += 1;
            continue;
        }
        // A family starts with `# HELP name …` followed by `# TYPE name type`.
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix("# TYPE "))
                .and_then(|t| t.split_once(' '))
                .filter(|(n, _)| *n == name)
                .map(|(_, kind)| kind);
            if let Some(kind) = kind {
                let (name, kind) = match kind {
                    "counter" => (format!("{name}_total"), "counter"),
                    "info" => (format!("{name}_info"), "gauge"),
                    "stateset" => (name.to_owned(), "gauge"),
                    "gaugehistogram" => (name.to_owned(), "histogram"),
                    "unknown" => (name.to_owned(), "untyped"),
                    other => (name.to_owned(), other),
                };
                out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
                i += 2;
                continue;
            }
        }
        // Exemplars (` # {…} v`) do not exist in 0.0.4.
        match line.find(" # {") {
            Some(at) if !line.starts_with('#') => out.push_str(&line[..at]),
            _ => out.push_str(line),
        }
        out.push('\n');
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_scrapes_get_openmetrics_and_everything_else_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            Exposition::negotiate(Some(prometheus)),
            Exposition::OpenMetrics
        );
        assert_eq!(
            Exposition::negotiate(Some("application/openmetrics-text")),
            Exposition::OpenMetrics
        );
        for text in [
            None,
            Some("text/plain;version=0.0.4"),
            Some("text/plain"),
            Some("*/*"),
            Some("application/json"),
            Some("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5"),
            Some("application/openmetrics-text;q=0"),
        ] {
            assert_eq!(Exposition::negotiate(text), Exposition::Text004, "{text:?}");
        }
    }

    #[test]
    fn counters_are_named_by_their_sample_and_unit_and_eof_lines_go() {
        let om = "# HELP troupe_x Things.\n# TYPE troupe_x counter\ntroupe_x_total{a=\"b\"} 1\n\
                  # HELP troupe_d_seconds Time.\n# TYPE troupe_d_seconds histogram\n# UNIT troupe_d_seconds seconds\n\
                  troupe_d_seconds_sum 0.0\ntroupe_d_seconds_count 0\ntroupe_d_seconds_bucket{le=\"+Inf\"} 0\n\
                  # HELP troupe_i Info.\n# TYPE troupe_i info\ntroupe_i_info{v=\"1\"} 1\n\
                  troupe_e_total 2 # {id=\"1\"} 1.0\n# EOF\n";
        assert_eq!(
            to_text_004(om),
            "# HELP troupe_x_total Things.\n# TYPE troupe_x_total counter\ntroupe_x_total{a=\"b\"} 1\n\
             # HELP troupe_d_seconds Time.\n# TYPE troupe_d_seconds histogram\n\
             troupe_d_seconds_sum 0.0\ntroupe_d_seconds_count 0\ntroupe_d_seconds_bucket{le=\"+Inf\"} 0\n\
             # HELP troupe_i_info Info.\n# TYPE troupe_i_info gauge\ntroupe_i_info{v=\"1\"} 1\n\
             troupe_e_total 2\n"
        );
    }
}
