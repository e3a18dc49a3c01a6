//! Small blocking TCP and UDP clients over `wasi:sockets`, for device I/O.
//!
//! Rust's `std::net` does not work inside Wedge guests; [`TcpStream`] and [`UdpSocket`] are
//! the replacements, and [`resolve`] looks host names up. The host only lets a module reach what its manifest grants
//! under `capabilities.endpoints` (addresses, networks like `10.0.0.0/8:502`, host names like
//! `plc-1.lan:502`, port ranges); anything else fails with an error of kind
//! [`PermissionDenied`](std::io::ErrorKind::PermissionDenied), never a trap. Name lookups work
//! only for a module granted some host name.
//!
//! ```no_run
//! use std::time::Duration;
//! use wedge_guest::net::TcpStream;
//!
//! let mut s = TcpStream::connect("127.0.0.1:1502", Duration::from_secs(1))?;
//! s.set_read_timeout(Some(Duration::from_millis(500)))?;
//! s.write_all(b"ping")?;
//! let mut reply = [0u8; 4];
//! s.read_exact(&mut reply)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use wasip2::clocks::monotonic_clock;
use wasip2::io::poll::{self, Pollable};
use wasip2::io::streams::{self, InputStream, OutputStream, StreamError};
use wasip2::sockets::network::{
    ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
};
use wasip2::sockets::tcp::{ShutdownType, TcpSocket};
use wasip2::sockets::{instance_network, tcp_create_socket};

mod udp;
pub use udp::UdpSocket;

/// A connected TCP stream with blocking reads and writes and optional timeouts.
///
/// Addresses are `ip:port` (`"192.0.2.7:502"`, `"[::1]:502"`) or `host:port`
/// (`"plc-1.lan:502"`, looked up with [`resolve`]). It implements [`Read`] and [`Write`]; the
/// inherent [`read`](Self::read),
/// [`read_exact`](Self::read_exact) and [`write_all`](Self::write_all) work without importing
/// those traits.
///
/// ```no_run
/// use std::time::Duration;
/// use wedge_guest::net::TcpStream;
///
/// match TcpStream::connect("127.0.0.1:9", Duration::from_millis(200)) {
///     Ok(_) => println!("connected"),
///     Err(e) => println!("refused: {e} ({:?})", e.kind()),
/// }
/// ```
pub struct TcpStream {
    // Field order is drop order: the streams are children of the socket and must go first.
    input: InputStream,
    output: OutputStream,
    socket: TcpSocket,
    peer: SocketAddr,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl TcpStream {
    /// Connects to `addr` (`"ip:port"` or `"host:port"`), waiting at most `timeout` in all
    /// (name lookup included); a name's addresses are tried in turn.
    ///
    /// Errors: [`InvalidInput`](ErrorKind::InvalidInput) for an address without a port or a
    /// zero timeout; [`NotFound`](ErrorKind::NotFound) for a name that resolves to nothing;
    /// [`PermissionDenied`](ErrorKind::PermissionDenied) when the manifest does not grant the
    /// endpoint (or any host name, for a lookup); [`TimedOut`](ErrorKind::TimedOut);
    /// [`ConnectionRefused`](ErrorKind::ConnectionRefused) and the like from the network.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let s = wedge_guest::net::TcpStream::connect("10.0.0.5:502", Duration::from_secs(2))?;
    /// let t = wedge_guest::net::TcpStream::connect("plc-1.lan:502", Duration::from_secs(2))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
        let addr = addr.trim();
        if let Ok(peer) = addr.parse::<SocketAddr>() {
            return TcpStream::connect_addr(peer, timeout);
        }
        let invalid = || {
            io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "invalid endpoint {addr:?}: expected an address or host name and a port, like 127.0.0.1:502 or plc-1.lan:502"
                ),
            )
        };
        let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
        let port: u16 = port.parse().map_err(|_| invalid())?;
        if host.is_empty() || timeout.is_zero() {
            return Err(invalid());
        }
        let started = Instant::now();
        let mut last = None;
        for ip in resolve(host)? {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_addr(SocketAddr::new(ip, port), left) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                ErrorKind::TimedOut,
                format!("connect to {addr}: timed out after {timeout:?}"),
            )
        }))
    }

    /// Connects to `peer`, waiting at most `timeout`; as [`connect`](Self::connect).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let addr = "127.0.0.1:502".parse().unwrap();
    /// let s = wedge_guest::net::TcpStream::connect_addr(addr, Duration::from_secs(1))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect_addr(peer: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "connect timeout must not be zero",
            ));
        }
        let deadline = Instant::now().checked_add(timeout);
        let (family, remote) = to_wasi(peer);
        let what = || format!("connect to {peer}");

        let network = instance_network::instance_network();
        let socket =
            tcp_create_socket::create_tcp_socket(family).map_err(|e| socket_error(e, &what()))?;
        socket
            .start_connect(&network, remote)
            .map_err(|e| socket_error(e, &what()))?;
        let ready = socket.subscribe();
        let (input, output) = loop {
            match socket.finish_connect() {
                Ok(streams) => break streams,
                Err(ErrorCode::WouldBlock) => {
                    if !wait(&ready, deadline) {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("{}: timed out after {timeout:?}", what()),
                        ));
                    }
                }
                Err(e) => return Err(socket_error(e, &what())),
            }
        };
        drop(ready);
        drop(network);
        Ok(TcpStream {
            input,
            output,
            socket,
            peer,
            read_timeout: None,
            write_timeout: None,
        })
    }

    /// The address this stream is connected to.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// assert_eq!(s.peer_addr().port(), 502);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sets how long a read waits for data; `None` (the default) waits forever. A read that
    /// times out fails with [`TimedOut`](ErrorKind::TimedOut). A zero duration is refused, as
    /// `std::net::TcpStream` does.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// s.set_read_timeout(Some(Duration::from_millis(300)))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout = checked_timeout(timeout)?;
        Ok(())
    }

    /// Sets how long a write (or flush) waits for room in the send buffer; `None` (the default)
    /// waits forever. A zero duration is refused.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// s.set_write_timeout(Some(Duration::from_millis(300)))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout = checked_timeout(timeout)?;
        Ok(())
    }

    /// The read timeout set by [`set_read_timeout`](Self::set_read_timeout).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// assert_eq!(s.read_timeout(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// Reads what is available (at least one byte, waiting for it up to the read timeout) into
    /// `buf`; `Ok(0)` means the peer closed the connection.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// let mut buf = [0u8; 256];
    /// let n = s.read(&mut buf)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self
            .read_timeout
            .and_then(|t| Instant::now().checked_add(t));
        loop {
            match self.input.read(buf.len() as u64) {
                Ok(data) if data.is_empty() => {
                    let ready = self.input.subscribe();
                    if !wait(&ready, deadline) {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("read from {} timed out", self.peer),
                        ));
                    }
                }
                Ok(data) => {
                    buf[..data.len()].copy_from_slice(&data);
                    return Ok(data.len());
                }
                Err(StreamError::Closed) => return Ok(0),
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(stream_error(e, &format!("read from {}", self.peer)));
                }
            }
        }
    }

    /// Reads exactly `buf.len()` bytes; the read timeout applies to each wait for data.
    /// Fails with [`UnexpectedEof`](ErrorKind::UnexpectedEof) when the peer closes first.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// let mut header = [0u8; 7];
    /// s.read_exact(&mut header)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        Read::read_exact(self, buf)
    }

    /// Writes what fits in the send buffer now (at least one byte, waiting for room up to the
    /// write timeout) and returns how much it took.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// let n = s.write(b"hello")?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self
            .write_timeout
            .and_then(|t| Instant::now().checked_add(t));
        let room = self.writable(deadline)?;
        let n = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.output
            .write(&buf[..n])
            .map_err(|e| self.write_error(e))?;
        Ok(n)
    }

    /// Writes all of `buf` and then [flushes](Self::flush), so that the bytes have been handed
    /// to the network when it returns (what a request/response protocol wants).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// s.write_all(&[0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x00, 0x00, 0x01])?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)?;
        self.flush()
    }

    /// Waits until everything written so far has been handed to the network, up to the write
    /// timeout.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let mut s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// s.write(b"x")?;
    /// s.flush()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn flush(&mut self) -> io::Result<()> {
        let deadline = self
            .write_timeout
            .and_then(|t| Instant::now().checked_add(t));
        self.output.flush().map_err(|e| self.write_error(e))?;
        // After a flush, `check-write` reports room only once the flush has completed.
        self.writable(deadline).map(|_| ())
    }

    /// Shuts down the read side, the write side or both.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let s = wedge_guest::net::TcpStream::connect("127.0.0.1:502", Duration::from_secs(1))?;
    /// s.shutdown(std::net::Shutdown::Write)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let how = match how {
            Shutdown::Read => ShutdownType::Receive,
            Shutdown::Write => ShutdownType::Send,
            Shutdown::Both => ShutdownType::Both,
        };
        self.socket
            .shutdown(how)
            .map_err(|e| socket_error(e, &format!("shutdown of {}", self.peer)))
    }

    /// Waits until the output stream takes at least one byte; returns how many it takes.
    fn writable(&self, deadline: Option<Instant>) -> io::Result<u64> {
        loop {
            match self.output.check_write() {
                Ok(0) => {
                    let ready = self.output.subscribe();
                    if !wait(&ready, deadline) {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("write to {} timed out", self.peer),
                        ));
                    }
                }
                Ok(n) => return Ok(n),
                Err(e) => return Err(self.write_error(e)),
            }
        }
    }

    fn write_error(&self, e: StreamError) -> io::Error {
        match e {
            StreamError::Closed => io::Error::new(
                ErrorKind::BrokenPipe,
                format!("write to {}: connection closed", self.peer),
            ),
            StreamError::LastOperationFailed(e) => {
                stream_error(e, &format!("write to {}", self.peer))
            }
        }
    }
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStream")
            .field("peer", &self.peer)
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish_non_exhaustive()
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        TcpStream::read(self, buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        TcpStream::write(self, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        TcpStream::flush(self)
    }
}

/// `addr` as WASI sees it, with its address family.
pub(crate) fn to_wasi(addr: SocketAddr) -> (IpAddressFamily, IpSocketAddress) {
    match addr {
        SocketAddr::V4(a) => {
            let [b0, b1, b2, b3] = a.ip().octets();
            (
                IpAddressFamily::Ipv4,
                IpSocketAddress::Ipv4(Ipv4SocketAddress {
                    port: a.port(),
                    address: (b0, b1, b2, b3),
                }),
            )
        }
        SocketAddr::V6(a) => {
            let s = a.ip().segments();
            (
                IpAddressFamily::Ipv6,
                IpSocketAddress::Ipv6(Ipv6SocketAddress {
                    port: a.port(),
                    flow_info: a.flowinfo(),
                    address: (s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
                    scope_id: a.scope_id(),
                }),
            )
        }
    }
}

/// `host:port` or `ip:port` to one address (the first a name resolves to).
pub(crate) fn one_address(addr: &str) -> io::Result<SocketAddr> {
    let addr = addr.trim();
    if let Ok(peer) = addr.parse::<SocketAddr>() {
        return Ok(peer);
    }
    let invalid = || {
        io::Error::new(
            ErrorKind::InvalidInput,
            format!(
                "invalid endpoint {addr:?}: expected an address or host name and a port, like 127.0.0.1:502 or plc-1.lan:502"
            ),
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
    let port: u16 = port.parse().map_err(|_| invalid())?;
    if host.is_empty() {
        return Err(invalid());
    }
    let ip = resolve(host)?.into_iter().next().ok_or_else(invalid)?;
    Ok(SocketAddr::new(ip, port))
}

fn checked_timeout(timeout: Option<Duration>) -> io::Result<Option<Duration>> {
    match timeout {
        Some(t) if t.is_zero() => Err(io::Error::new(
            ErrorKind::InvalidInput,
            "timeout must not be zero",
        )),
        t => Ok(t),
    }
}

/// Blocks until `ready` fires or `deadline` passes; `false` on timeout.
pub(crate) fn wait(ready: &Pollable, deadline: Option<Instant>) -> bool {
    let Some(deadline) = deadline else {
        ready.block();
        return true;
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return ready.ready();
    }
    let nanos = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
    let timer = monotonic_clock::subscribe_duration(nanos);
    let fired = poll::poll(&[ready, &timer]);
    fired.contains(&0)
}

pub(crate) fn socket_error(code: ErrorCode, what: &str) -> io::Error {
    let kind = match code {
        ErrorCode::AccessDenied => ErrorKind::PermissionDenied,
        ErrorCode::NotSupported => ErrorKind::Unsupported,
        ErrorCode::InvalidArgument => ErrorKind::InvalidInput,
        ErrorCode::OutOfMemory => ErrorKind::OutOfMemory,
        ErrorCode::Timeout => ErrorKind::TimedOut,
        ErrorCode::WouldBlock => ErrorKind::WouldBlock,
        ErrorCode::AddressNotBindable => ErrorKind::AddrNotAvailable,
        ErrorCode::AddressInUse => ErrorKind::AddrInUse,
        ErrorCode::RemoteUnreachable => ErrorKind::HostUnreachable,
        ErrorCode::ConnectionRefused => ErrorKind::ConnectionRefused,
        ErrorCode::ConnectionReset => ErrorKind::ConnectionReset,
        ErrorCode::ConnectionAborted => ErrorKind::ConnectionAborted,
        ErrorCode::NameUnresolvable => ErrorKind::NotFound,
        _ => ErrorKind::Other,
    };
    let text = match code {
        ErrorCode::AccessDenied => {
            "access denied by the host (is the endpoint, or for a name lookup a host name, granted in the manifest's capabilities.endpoints?)"
                .to_string()
        }
        _ => format!("{} ({})", code.message().trim_end_matches('.'), code.name()),
    };
    io::Error::new(kind, format!("{what}: {text}"))
}

fn stream_error(e: streams::Error, what: &str) -> io::Error {
    let text = e.to_debug_string();
    let lower = text.to_ascii_lowercase();
    let kind = if lower.contains("reset") {
        ErrorKind::ConnectionReset
    } else if lower.contains("abort") {
        ErrorKind::ConnectionAborted
    } else if lower.contains("broken pipe") {
        ErrorKind::BrokenPipe
    } else {
        ErrorKind::Other
    };
    io::Error::new(kind, format!("{what}: {text}"))
}

/// The addresses `host` resolves to, in the resolver's order.
///
/// Errors: [`PermissionDenied`](ErrorKind::PermissionDenied) when the module's manifest grants
/// no host name; [`NotFound`](ErrorKind::NotFound) when the name resolves to nothing.
///
/// ```no_run
/// let addrs = wedge_guest::net::resolve("plc-1.lan")?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn resolve(host: &str) -> io::Result<Vec<std::net::IpAddr>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use wasip2::sockets::ip_name_lookup::resolve_addresses;
    use wasip2::sockets::network::IpAddress;
    let what = || format!("look up {host}");
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let network = instance_network::instance_network();
    let stream = resolve_addresses(&network, host).map_err(|e| socket_error(e, &what()))?;
    let ready = stream.subscribe();
    let mut found = Vec::new();
    loop {
        match stream.resolve_next_address() {
            Ok(Some(IpAddress::Ipv4((a, b, c, d)))) => {
                found.push(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
            }
            Ok(Some(IpAddress::Ipv6((a, b, c, d, e, f, g, h)))) => {
                found.push(IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)));
            }
            Ok(None) => break,
            Err(ErrorCode::WouldBlock) => ready.block(),
            Err(e) => return Err(socket_error(e, &what())),
        }
    }
    if found.is_empty() {
        return Err(io::Error::new(
            ErrorKind::NotFound,
            format!("{}: no addresses", what()),
        ));
    }
    Ok(found)
}
