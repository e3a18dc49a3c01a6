//! Query strings as kubelet reads them: decoded, booleans as Go's `strconv.ParseBool` takes
//! them.

/// The decoded `key=value` pairs of a query string, in order.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Decodes `raw` (the part after `?`).
    pub(crate) fn parse(raw: &str) -> Query {
        Query(
            form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key` as a boolean: absent is `false`; a value Go does not read as one is an error
    /// naming the key.
    pub(crate) fn flag(&self, key: &str) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("" | "0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(format!("{key}={other:?} is not a boolean")),
        }
    }

    /// `key` as a number, if present.
    pub(crate) fn number(&self, key: &str) -> Result<Option<i64>, String> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("{key}={v:?} is not a number")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode() {
        let q = Query::parse("command=sh&command=echo%20hi+there&tty=1&x=maybe");
        assert_eq!(q.get("command"), Some("sh"));
        assert_eq!(q.flag("tty"), Ok(true));
        assert_eq!(q.flag("stdin"), Ok(false));
        assert!(q.flag("x").unwrap_err().contains("x=\"maybe\""));
        assert_eq!(Query::parse("tailLines=5").number("tailLines"), Ok(Some(5)));
        assert!(Query::parse("tailLines=a").number("tailLines").is_err());
    }
}
