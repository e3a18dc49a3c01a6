//! Where Wedge keeps its state: `wedge.dataDir` and `database.dataSource`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::model::EdgeCoreConfig;
use super::wedge::WedgeSettings;

/// Data directory of a root (system) install, and the fallback when a
/// normal user has neither `$XDG_DATA_HOME` nor `$HOME`.
const SYSTEM_DATA_DIR: &str = "/var/lib/wedge";

/// File name of the metadata database inside the data directory.
const DATABASE_FILE: &str = "edgecore.db";

impl EdgeCoreConfig {
    /// The resolved `wedge.dataDir` for this process (see
    /// [`WedgeSettings::resolve_data_dir`]).
    pub fn data_dir(&self) -> PathBuf {
        self.wedge
            .resolve_data_dir(running_as_root(), |name| std::env::var_os(name))
    }

    /// The SQLite file: `database.dataSource` if set, else
    /// `<data_dir>/edgecore.db`. KubeEdge's `/var/lib/kubeedge/edgecore.db`
    /// is not the default because a normal user cannot write there.
    pub fn database_path(&self) -> PathBuf {
        if self.database.data_source.is_empty() {
            self.data_dir().join(DATABASE_FILE)
        } else {
            PathBuf::from(&self.database.data_source)
        }
    }
}

impl WedgeSettings {
    /// Resolves `dataDir` without touching the process environment, so the
    /// rules are testable: a non-empty `dataDir` is used as written; else
    /// root gets `/var/lib/wedge`; a normal user gets `$XDG_DATA_HOME/wedge`
    /// (only if absolute, as the XDG spec requires), else
    /// `$HOME/.local/share/wedge`, else `/var/lib/wedge`.
    ///
    /// `env` looks up an environment variable (`std::env::var_os` in real use).
    pub fn resolve_data_dir(
        &self,
        is_root: bool,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> PathBuf {
        if !self.data_dir.is_empty() {
            return PathBuf::from(&self.data_dir);
        }
        if is_root {
            return PathBuf::from(SYSTEM_DATA_DIR);
        }
        let non_empty = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(xdg) = non_empty("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
            return xdg.join("wedge");
        }
        if let Some(home) = non_empty("HOME") {
            return home.join(".local/share/wedge");
        }
        PathBuf::from(SYSTEM_DATA_DIR)
    }
}

/// Whether the effective uid is 0, read from `/proc/self/status` to stay
/// libc-free. Unreadable (not Linux) counts as not root.
fn running_as_root() -> bool {
    std::fs::read_to_string(Path::new("/proc/self/status"))
        .ok()
        .and_then(|s| effective_uid(&s))
        == Some(0)
}

/// The effective uid from a `/proc/<pid>/status` text
/// (`Uid:\t<real>\t<effective>\t<saved>\t<fs>`).
fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    const USER_ENV: &[(&str, &str)] = &[("HOME", "/home/ann"), ("XDG_DATA_HOME", "/data/ann")];

    #[test]
    fn explicit_data_dir_wins() {
        let w = WedgeSettings {
            data_dir: "/srv/wedge".into(),
            ..WedgeSettings::default()
        };
        assert_eq!(
            w.resolve_data_dir(true, env(USER_ENV)),
            Path::new("/srv/wedge")
        );
        assert_eq!(
            w.resolve_data_dir(false, env(USER_ENV)),
            Path::new("/srv/wedge")
        );
    }

    #[test]
    fn root_uses_var_lib() {
        let w = WedgeSettings::default();
        assert_eq!(
            w.resolve_data_dir(true, env(USER_ENV)),
            Path::new("/var/lib/wedge")
        );
    }

    #[test]
    fn user_prefers_xdg_then_home() {
        let w = WedgeSettings::default();
        assert_eq!(
            w.resolve_data_dir(false, env(USER_ENV)),
            Path::new("/data/ann/wedge")
        );
        let home_only = [("HOME", "/home/ann")];
        assert_eq!(
            w.resolve_data_dir(false, env(&home_only)),
            Path::new("/home/ann/.local/share/wedge")
        );
        // Relative or empty XDG_DATA_HOME is ignored (XDG spec).
        for xdg in ["rel/dir", ""] {
            let vars = [("HOME", "/home/ann"), ("XDG_DATA_HOME", xdg)];
            assert_eq!(
                w.resolve_data_dir(false, env(&vars)),
                Path::new("/home/ann/.local/share/wedge")
            );
        }
        assert_eq!(
            w.resolve_data_dir(false, env(&[])),
            Path::new("/var/lib/wedge")
        );
    }

    #[test]
    fn database_path_defaults_into_data_dir() {
        let mut c = EdgeCoreConfig::default();
        c.wedge.data_dir = "/srv/wedge".into();
        assert_eq!(c.database_path(), Path::new("/srv/wedge/edgecore.db"));
        c.database.data_source = "/tmp/x.db".into();
        assert_eq!(c.database_path(), Path::new("/tmp/x.db"));
    }

    #[test]
    fn effective_uid_parsing() {
        let status = "Name:\tx\nUid:\t1000\t0\t1000\t1000\nGid:\t1\t1\t1\t1\n";
        assert_eq!(effective_uid(status), Some(0));
        assert_eq!(effective_uid("Name:\tx\n"), None);
        // The real file parses on Linux.
        if let Ok(s) = std::fs::read_to_string("/proc/self/status") {
            assert!(effective_uid(&s).is_some());
        }
    }
}
