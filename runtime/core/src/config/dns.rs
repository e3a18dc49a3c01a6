//! DNS-1123 name checks, as Kubernetes applies them to node names and
//! namespaces. A name the API server would reject must be caught here,
//! before the node tries to register.

/// What a DNS-1123 label may look like, for error messages.
pub(crate) const LABEL_RULE: &str = "must be a DNS-1123 label: 1-63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit";

/// What a DNS-1123 subdomain may look like, for error messages.
pub(crate) const SUBDOMAIN_RULE: &str = "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most 253 characters, each '.'-separated label 1-63 characters starting and ending with a letter or digit";

/// Checks a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, <= 63 chars).
/// `Err` says which part is wrong.
pub(crate) fn check_label(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.len() > 63 {
        return Err(format!("it is {} characters long", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!("it contains {c:?}"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("it starts or ends with '-'".to_owned());
    }
    Ok(())
}

/// Checks a DNS-1123 subdomain: dot-separated labels, <= 253 chars total.
pub(crate) fn check_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!("it is {} characters long", name.len()));
    }
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    for label in name.split('.') {
        check_label(label).map_err(|why| {
            if label.is_empty() {
                "it has an empty label (leading, trailing or double '.')".to_owned()
            } else {
                format!("in label {label:?}, {why}")
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "default", "kube-system", "a1", "0", &"x".repeat(63)] {
            assert!(check_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert!(check_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        for ok in ["node-1", "edge.example.com", "a.b.c", "1.2.3.4"] {
            assert!(check_subdomain(ok).is_ok(), "{ok}");
        }
        let long_label = format!("{}.com", "x".repeat(64));
        let max = ["a"; 127].join(".");
        assert_eq!(max.len(), 253);
        assert!(check_subdomain(&max).is_ok());
        let too_long = format!("{max}.b");
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "Node",
            "my_host",
            "-a.b",
            "a-.b",
            &long_label,
            &too_long,
        ] {
            assert!(check_subdomain(bad).is_err(), "{bad}");
        }
        assert!(check_subdomain("a.B").unwrap_err().contains("'B'"));
    }
}
