//! The grid's node list as configured: "host:port[:weight],...".

/// One memcached node as configured. `host` is kept as written: ketama hashes
/// the configured name (as libmemcached does), not the resolved address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeSpec {
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

/// A node list that cannot be read; each names the offending item.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("the node list has an empty item (two commas in a row, or a comma at an end)")]
    EmptyItem,
    #[error("node '{item}' has an unclosed '[' (expected [ipv6]:port)")]
    UnclosedBracket { item: String },
    #[error("node '{item}' has no port (expected [ipv6]:port)")]
    NoIpv6Port { item: String },
    #[error(
        "node '{item}' has too many ':' (expected host:port or host:port:weight; write an IPv6 host as [addr]:port)"
    )]
    TooManyColons { item: String },
    #[error("node '{item}' has too many ':' (expected [ipv6]:port or [ipv6]:port:weight)")]
    TooManyIpv6Colons { item: String },
    #[error("node '{item}' has no port (expected host:port)")]
    NoPort { item: String },
    #[error("node '{item}' has no host (expected host:port)")]
    NoHost { item: String },
    #[error("node '{item}' has a space or control character in its host")]
    SpaceInHost { item: String },
    #[error("node '{item}' has an invalid port '{port}' (expected 1..=65535)")]
    BadPort { item: String, port: String },
    #[error("node '{item}' has an invalid weight '{weight}' (expected a whole number >= 1)")]
    BadWeight { item: String, weight: String },
}

impl NodeSpec {
    /// Parses "host:port" or "host:port:weight" items separated by commas, e.g.
    /// "127.0.0.1:11211,10.0.0.2:11211:2". An IPv6 host is written in brackets:
    /// "[::1]:11211". Spaces around items are ignored. An empty (or all-space)
    /// string is an empty list. Errors name the offending item.
    pub fn parse_list(s: &str) -> Result<Vec<NodeSpec>, SpecError> {
        if s.trim().is_empty() {
            return Ok(Vec::new());
        }
        s.split(',').map(|item| parse_one(item.trim())).collect()
    }

    /// "host:port" ("[host]:port" for an IPv6 address).
    pub fn label(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn parse_one(item: &str) -> Result<NodeSpec, SpecError> {
    let item_owned = || item.to_string();
    if item.is_empty() {
        return Err(SpecError::EmptyItem);
    }
    let (host, rest) = if let Some(bracketed) = item.strip_prefix('[') {
        let Some(close) = bracketed.find(']') else {
            return Err(SpecError::UnclosedBracket { item: item_owned() });
        };
        let rest = &bracketed[close + 1..];
        let Some(rest) = rest.strip_prefix(':') else {
            return Err(SpecError::NoIpv6Port { item: item_owned() });
        };
        (&bracketed[..close], rest)
    } else if item.matches(':').count() > 2 {
        return Err(SpecError::TooManyColons { item: item_owned() });
    } else {
        match item.split_once(':') {
            Some((host, rest)) => (host, rest),
            None => return Err(SpecError::NoPort { item: item_owned() }),
        }
    };
    if host.is_empty() {
        return Err(SpecError::NoHost { item: item_owned() });
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SpecError::SpaceInHost { item: item_owned() });
    }
    let (port_text, weight_text) = match rest.split_once(':') {
        Some((port, weight)) => (port, Some(weight)),
        None => (rest, None),
    };
    let port = match port_text.parse::<u16>() {
        Ok(port) if port >= 1 => port,
        _ if port_text.is_empty() => {
            return Err(SpecError::NoPort { item: item_owned() });
        }
        _ => {
            return Err(SpecError::BadPort { item: item_owned(), port: port_text.to_string() });
        }
    };
    let weight = match weight_text {
        None => 1,
        Some(text) if text.contains(':') => {
            return Err(SpecError::TooManyIpv6Colons { item: item_owned() });
        }
        Some(text) => match text.parse::<u32>() {
            Ok(weight) if weight >= 1 => weight,
            _ => {
                return Err(SpecError::BadWeight { item: item_owned(), weight: text.to_string() });
            }
        },
    };
    Ok(NodeSpec { host: host.to_string(), port, weight })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(host: &str, port: u16, weight: u32) -> NodeSpec {
        NodeSpec { host: host.into(), port, weight }
    }

    #[test]
    fn parses_lists() {
        assert_eq!(NodeSpec::parse_list("").unwrap(), vec![]);
        assert_eq!(NodeSpec::parse_list("  ").unwrap(), vec![]);
        assert_eq!(
            NodeSpec::parse_list("127.0.0.1:11211,10.0.0.2:11211:2").unwrap(),
            vec![spec("127.0.0.1", 11211, 1), spec("10.0.0.2", 11211, 2)]
        );
        assert_eq!(
            NodeSpec::parse_list(" cache-a:1 , [::1]:65535:7 ").unwrap(),
            vec![spec("cache-a", 1, 1), spec("::1", 65535, 7)]
        );
    }

    #[test]
    fn labels() {
        assert_eq!(spec("10.0.0.2", 11211, 2).label(), "10.0.0.2:11211");
        assert_eq!(spec("::1", 5, 1).label(), "[::1]:5");
    }

    #[test]
    fn errors_name_the_item() {
        let err = |s: &str| NodeSpec::parse_list(s).unwrap_err().to_string();
        assert_eq!(err("foo"), "node 'foo' has no port (expected host:port)");
        assert_eq!(err("a:1,foo"), "node 'foo' has no port (expected host:port)");
        assert_eq!(err("foo:"), "node 'foo:' has no port (expected host:port)");
        assert_eq!(err(":11211"), "node ':11211' has no host (expected host:port)");
        assert_eq!(err("h:0"), "node 'h:0' has an invalid port '0' (expected 1..=65535)");
        assert_eq!(err("h:65536"), "node 'h:65536' has an invalid port '65536' (expected 1..=65535)");
        assert_eq!(err("h:abc"), "node 'h:abc' has an invalid port 'abc' (expected 1..=65535)");
        assert_eq!(err("h:1:0"), "node 'h:1:0' has an invalid weight '0' (expected a whole number >= 1)");
        assert_eq!(err("h:1:-2"), "node 'h:1:-2' has an invalid weight '-2' (expected a whole number >= 1)");
        assert_eq!(err("h:1:"), "node 'h:1:' has an invalid weight '' (expected a whole number >= 1)");
        assert!(err("::1:11211").contains("too many ':'"));
        assert!(err(":1:2").contains("has no host"));
        assert!(err("[::1]:1:2:3").contains("too many ':'"));
        assert!(err("fe80::1:11211:2").contains("too many ':'"));
        assert!(err("[::1:11211").contains("unclosed"));
        assert!(err("[::1]").contains("no port"));
        assert!(err("a:1,,b:2").contains("empty item"));
        assert!(err("a:1,").contains("empty item"));
        assert!(err("a b:1").contains("space"));
        assert_eq!(
            NodeSpec::parse_list("h:1:0"),
            Err(SpecError::BadWeight { item: "h:1:0".into(), weight: "0".into() })
        );
    }
}
