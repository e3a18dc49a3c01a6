//! Network grants of a module: which endpoints `capabilities.endpoints` lets it reach.
//!
//! A device's address lives in its own `protocol-config`, so a new device is a YAML change;
//! the manifest grants *patterns* of endpoints, checked by the host at every connect:
//!
//! | entry | grants |
//! |---|---|
//! | `192.0.2.7:502` | one address and port (also `[2001:db8::7]:502`) |
//! | `10.0.0.0/8:502`, `[fd00::/8]:502` | a network (CIDR) |
//! | `plc-1.factory.lan:502` | a host name: what it resolves to at the time of the connect |
//! | `*:502` | any address |
//! | `...:1-1024`, `...:*` | a port range, any port |
//!
//! TCP connects and UDP datagrams (sent and received) are checked against the same grants
//! (binding to the wildcard address with an ephemeral port, which both need first, is
//! allowed; listening and accepting are not). Name
//! resolution is open to a module that is granted a host name (WASI's lookup carries no name
//! the host could check); the connect to what it resolved is still checked, by resolving the
//! granted names again on the host.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

/// The host part of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Every address.
    Any,
    /// A network: address and prefix length (an address alone is a /32 or /128).
    Net(IpAddr, u8),
    /// A host name (lowercase), resolved when a connection is checked.
    Name(String),
}

/// One entry of `capabilities.endpoints`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointGrant {
    /// Which hosts.
    pub host: HostPattern,
    /// Which ports.
    pub ports: RangeInclusive<u16>,
}

/// Why an entry of `capabilities.endpoints` is not a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{entry:?} is not an endpoint grant ({reason}); write HOST:PORT, where HOST is an IP \
     address, a CIDR network (10.0.0.0/8, [fd00::/8]), a host name or *, and PORT a port, a \
     range (1-1024) or *"
)]
pub struct GrantError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn network(text: &str) -> Option<HostPattern> {
    let (ip, prefix) = match text.split_once('/') {
        Some((ip, prefix)) => (ip.parse::<IpAddr>().ok()?, Some(prefix.parse::<u8>().ok()?)),
        None => (text.parse::<IpAddr>().ok()?, None),
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(max);
    (prefix <= max).then_some(HostPattern::Net(ip, prefix))
}

fn ports(text: &str) -> Option<RangeInclusive<u16>> {
    if text == "*" {
        return Some(0..=u16::MAX);
    }
    match text.split_once('-') {
        Some((lo, hi)) => {
            let (lo, hi) = (lo.parse::<u16>().ok()?, hi.parse::<u16>().ok()?);
            (lo <= hi).then_some(lo..=hi)
        }
        None => text.parse::<u16>().ok().map(|p| p..=p),
    }
}

impl EndpointGrant {
    /// Reads one entry of `capabilities.endpoints`.
    pub fn parse(entry: &str) -> Result<EndpointGrant, GrantError> {
        let fail = |reason| GrantError {
            entry: entry.to_owned(),
            reason,
        };
        let text = entry.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| fail("no closing ']'"))?;
            let port = after.strip_prefix(':').ok_or_else(|| fail("no port"))?;
            (host, port)
        } else {
            text.rsplit_once(':').ok_or_else(|| fail("no port"))?
        };
        let ports = ports(port).ok_or_else(|| fail("the port is not a port, a range or *"))?;
        let host = if host == "*" {
            HostPattern::Any
        } else if let Some(net) = network(host) {
            net
        } else if host.contains(['/', ':']) || host.parse::<IpAddr>().is_ok() {
            return Err(fail(
                "the network is not an address with a valid prefix length",
            ));
        } else if valid_name(host) {
            HostPattern::Name(host.to_ascii_lowercase())
        } else {
            return Err(fail("the host is not an address, a network or a host name"));
        };
        Ok(EndpointGrant { host, ports })
    }

    /// Whether the grant covers `addr`, given what its host name (if any) resolves to now.
    pub fn covers(&self, addr: SocketAddr, resolved: &[IpAddr]) -> bool {
        if !self.ports.contains(&addr.port()) {
            return false;
        }
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Net(net, prefix) => in_network(addr.ip(), *net, *prefix),
            HostPattern::Name(_) => resolved.contains(&addr.ip()),
        }
    }
}

impl fmt::Display for EndpointGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Any => write!(f, "*")?,
            HostPattern::Net(ip @ IpAddr::V4(_), 32)
            | HostPattern::Net(ip @ IpAddr::V6(_), 128) => match ip {
                IpAddr::V4(v4) => write!(f, "{v4}")?,
                IpAddr::V6(v6) => write!(f, "[{v6}]")?,
            },
            HostPattern::Net(IpAddr::V4(ip), prefix) => write!(f, "{ip}/{prefix}")?,
            HostPattern::Net(IpAddr::V6(ip), prefix) => write!(f, "[{ip}/{prefix}]")?,
            HostPattern::Name(name) => write!(f, "{name}")?,
        }
        if self.ports == (0..=u16::MAX) {
            write!(f, ":*")
        } else if self.ports.start() == self.ports.end() {
            write!(f, ":{}", self.ports.start())
        } else {
            write!(f, ":{}-{}", self.ports.start(), self.ports.end())
        }
    }
}

/// Whether `ip` is in `net`/`prefix` (an IPv4-mapped IPv6 address counts as its IPv4 one).
fn in_network(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// A module's grants, checked at every socket use.
#[derive(Debug, Clone, Default)]
pub struct Grants(Vec<EndpointGrant>);

impl Grants {
    /// The grants of `entries` (a manifest's `capabilities.endpoints`); the first bad entry
    /// is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Grants, GrantError> {
        entries
            .iter()
            .map(|e| EndpointGrant::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Grants)
    }

    /// True when nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when some grant names a host (so the module may resolve names).
    pub fn has_names(&self) -> bool {
        self.0
            .iter()
            .any(|g| matches!(g.host, HostPattern::Name(_)))
    }

    /// Whether `use_` of `addr` is allowed; host names of grants whose ports cover `addr` are
    /// resolved now.
    pub async fn allows(
        &self,
        addr: SocketAddr,
        use_: wasmtime_wasi::sockets::SocketAddrUse,
    ) -> bool {
        use wasmtime_wasi::sockets::SocketAddrUse;
        match use_ {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                return addr.ip().is_unspecified() && addr.port() == 0;
            }
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => return false,
            SocketAddrUse::TcpConnect | SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => {}
        }
        for grant in &self.0 {
            let resolved = match &grant.host {
                HostPattern::Name(name) if grant.ports.contains(&addr.port()) => {
                    resolve(name, addr.port()).await
                }
                _ => Vec::new(),
            };
            if grant.covers(addr, &resolved) {
                return true;
            }
        }
        false
    }

    /// The grants, as written back (for messages).
    pub fn describe(&self) -> String {
        let entries: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        entries.join(", ")
    }
}

/// What `name` resolves to now (nothing when it does not).
async fn resolve(name: &str, port: u16) -> Vec<IpAddr> {
    match tokio::net::lookup_host((name, port)).await {
        Ok(addrs) => addrs.map(|a| a.ip()).collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::sockets::SocketAddrUse;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn every_form_parses_and_prints_back() {
        for entry in [
            "192.0.2.7:502",
            "[2001:db8::7]:502",
            "10.0.0.0/8:502",
            "[fd00::/8]:1-1024",
            "plc-1.factory.lan:502",
            "*:*",
        ] {
            let grant = EndpointGrant::parse(entry).unwrap();
            assert_eq!(grant.to_string(), entry);
        }
        assert_eq!(
            EndpointGrant::parse("PLC.Local:502").unwrap().host,
            HostPattern::Name("plc.local".into())
        );
    }

    #[test]
    fn bad_entries_say_why() {
        for (entry, reason) in [
            ("plc.local", "no port"),
            ("10.0.0.0/33:502", "prefix"),
            ("10.0.0.1:70000", "port"),
            ("10.0.0.1:9-1", "port"),
            ("bad_name:502", "host"),
            ("[::1:502", "']'"),
        ] {
            let error = EndpointGrant::parse(entry).unwrap_err().to_string();
            assert!(error.contains(reason), "{entry}: {error}");
            assert!(error.contains("HOST:PORT"), "{error}");
        }
    }

    #[test]
    fn networks_ports_and_names_cover_what_they_say() {
        let net = EndpointGrant::parse("10.1.0.0/16:500-510").unwrap();
        assert!(net.covers(addr("10.1.200.3:502"), &[]));
        assert!(!net.covers(addr("10.2.0.3:502"), &[]));
        assert!(!net.covers(addr("10.1.0.3:511"), &[]));
        assert!(
            net.covers(addr("[::ffff:10.1.0.3]:502"), &[]),
            "IPv4-mapped"
        );
        let v6 = EndpointGrant::parse("[fd00::/8]:502").unwrap();
        assert!(v6.covers(addr("[fd12::1]:502"), &[]));
        assert!(!v6.covers(addr("[fe80::1]:502"), &[]));
        let name = EndpointGrant::parse("plc.lan:502").unwrap();
        let ip: IpAddr = "192.0.2.9".parse().unwrap();
        assert!(name.covers(addr("192.0.2.9:502"), &[ip]));
        assert!(!name.covers(addr("192.0.2.9:502"), &[]));
        assert!(
            EndpointGrant::parse("*:502")
                .unwrap()
                .covers(addr("[::1]:502"), &[])
        );
    }

    #[tokio::test]
    async fn socket_uses_are_checked_and_names_resolved_at_connect() {
        let grants = Grants::parse(&["localhost:1502", "192.0.2.0/24:*"]).unwrap();
        assert!(grants.has_names());
        for use_ in [
            SocketAddrUse::TcpConnect,
            SocketAddrUse::UdpSend,
            SocketAddrUse::UdpReceive,
        ] {
            assert!(
                grants.allows(addr("127.0.0.1:1502"), use_).await,
                "{use_:?}"
            );
            assert!(grants.allows(addr("192.0.2.44:9"), use_).await);
            assert!(!grants.allows(addr("127.0.0.1:1503"), use_).await);
            assert!(!grants.allows(addr("198.51.100.1:1502"), use_).await);
        }
        assert!(
            grants
                .allows(addr("0.0.0.0:0"), SocketAddrUse::TcpBind)
                .await
        );
        assert!(grants.allows(addr("[::]:0"), SocketAddrUse::UdpBind).await);
        assert!(
            !grants
                .allows(addr("0.0.0.0:8080"), SocketAddrUse::TcpBind)
                .await
        );
        assert!(
            !grants
                .allows(addr("127.0.0.1:1502"), SocketAddrUse::TcpListen)
                .await
        );
    }
}
