//! Which streams a session has, from the request's query (kubelet's `remotecommand.NewOptions`).

use crate::RemoteCommandError;

/// The streams a client asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The client sends stdin.
    pub stdin: bool,
    /// The client wants stdout.
    pub stdout: bool,
    /// The client wants stderr (always false with `tty`: a terminal merges it into stdout).
    pub stderr: bool,
    /// The command runs in a terminal.
    pub tty: bool,
}

impl StreamOptions {
    /// Reads the options from a URL query string (without the `?`).
    ///
    /// Kubelet's parameter names are `input`, `output`, `error` and `tty` (that is what the
    /// apiserver sends to a kubelet), true when the value is `1`; the `PodExecOptions` names
    /// `stdin`, `stdout`, `stderr` and the value `true` are accepted as well. `tty` with stderr
    /// drops stderr (kubelet does the same). At least one of stdin, stdout, stderr is required.
    pub fn from_query(query: &str) -> Result<StreamOptions, RemoteCommandError> {
        let pairs = form_pairs(query);
        let flag = |names: &[&str]| {
            names.iter().any(|name| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .is_some_and(|(_, v)| v == "1" || v.eq_ignore_ascii_case("true"))
            })
        };
        StreamOptions {
            stdin: flag(&["input", "stdin"]),
            stdout: flag(&["output", "stdout"]),
            stderr: flag(&["error", "stderr"]),
            tty: flag(&["tty"]),
        }
        .validated()
    }

    /// Applies kubelet's rules: tty implies no stderr; at least one stream is required.
    pub fn validated(mut self) -> Result<StreamOptions, RemoteCommandError> {
        if self.tty && self.stderr {
            tracing::debug!("exec/attach with tty and stderr: stderr is not used");
            self.stderr = false;
        }
        if !self.stdin && !self.stdout && !self.stderr {
            return Err(RemoteCommandError::NoStreamsRequested);
        }
        Ok(self)
    }
}

/// The `command` parameters of an exec query, in order (`?command=sh&command=-c&command=...`).
pub fn command_from_query(query: &str) -> Vec<String> {
    form_pairs(query)
        .into_iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v)
        .collect()
}

/// `application/x-www-form-urlencoded` pairs; pairs that do not decode are skipped (as Go's
/// `url.ParseQuery` does).
fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((form_decode(k)?, form_decode(v)?))
        })
        .collect()
}

fn form_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_query_for_kubectl_exec_it() {
        let o = StreamOptions::from_query("command=sh&input=1&output=1&tty=1").expect("ok");
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true
            }
        );
    }

    #[test]
    fn tty_drops_stderr_and_alternative_names_work() {
        let o =
            StreamOptions::from_query("stdin=true&stdout=true&stderr=true&tty=true").expect("ok");
        assert!(o.stdin && o.stdout && o.tty && !o.stderr);
        let o = StreamOptions::from_query("output=1&error=1").expect("ok");
        assert!(!o.stdin && o.stdout && o.stderr && !o.tty);
    }

    #[test]
    fn at_least_one_stream_is_required() {
        for q in ["", "tty=1", "input=0&output=false", "error=1&tty=1"] {
            assert!(
                matches!(
                    StreamOptions::from_query(q),
                    Err(RemoteCommandError::NoStreamsRequested)
                ),
                "{q}"
            );
        }
    }

    #[test]
    fn commands_are_decoded_in_order() {
        assert_eq!(
            command_from_query(
                "command=sh&command=-c&command=echo+hi%20there%21&input=1&command=%zz"
            ),
            ["sh", "-c", "echo hi there!"]
        );
    }
}
