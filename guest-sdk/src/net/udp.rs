//! A connected UDP socket over `wasi:sockets/udp`, for devices that speak datagrams.

use std::io::{self, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use wasip2::sockets::network::ErrorCode;
use wasip2::sockets::udp::{
    IncomingDatagramStream, OutgoingDatagram, OutgoingDatagramStream, UdpSocket as WasiUdp,
};
use wasip2::sockets::{instance_network, udp_create_socket};

use super::{one_address, socket_error, to_wasi, wait};

/// A UDP socket that exchanges datagrams with one peer.
///
/// The host lets a module reach only peers its manifest grants under
/// `capabilities.endpoints`, for sending and for receiving; others fail with
/// [`PermissionDenied`](ErrorKind::PermissionDenied).
///
/// ```no_run
/// use std::time::Duration;
/// use wedge_guest::net::UdpSocket;
///
/// let socket = UdpSocket::connect("10.0.0.9:47808")?;
/// socket.send(b"\x81\x0b\x00\x0c", Duration::from_millis(200))?;
/// let reply = socket.recv(1500, Duration::from_millis(500))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UdpSocket {
    // Field order is drop order: the streams are children of the socket and must go first.
    incoming: IncomingDatagramStream,
    outgoing: OutgoingDatagramStream,
    _socket: WasiUdp,
    peer: SocketAddr,
}

impl UdpSocket {
    /// A socket bound to an ephemeral port and connected to `addr` (`"ip:port"` or
    /// `"host:port"`, a name looked up with [`resolve`](super::resolve)).
    pub fn connect(addr: &str) -> io::Result<UdpSocket> {
        let peer = one_address(addr)?;
        let what = || format!("udp to {peer}");
        let (family, remote) = to_wasi(peer);
        let any = match peer {
            SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        };
        let network = instance_network::instance_network();
        let socket =
            udp_create_socket::create_udp_socket(family).map_err(|e| socket_error(e, &what()))?;
        socket
            .start_bind(&network, to_wasi(any).1)
            .map_err(|e| socket_error(e, &what()))?;
        let ready = socket.subscribe();
        loop {
            match socket.finish_bind() {
                Ok(()) => break,
                Err(ErrorCode::WouldBlock) => ready.block(),
                Err(e) => return Err(socket_error(e, &what())),
            }
        }
        drop(ready);
        let (incoming, outgoing) = socket
            .stream(Some(remote))
            .map_err(|e| socket_error(e, &what()))?;
        Ok(UdpSocket {
            incoming,
            outgoing,
            _socket: socket,
            peer,
        })
    }

    /// The peer it exchanges datagrams with.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sends one datagram, waiting at most `timeout` for room to send it.
    pub fn send(&self, data: &[u8], timeout: Duration) -> io::Result<()> {
        let what = || format!("send to {}", self.peer);
        let deadline = Instant::now().checked_add(timeout);
        let ready = self.outgoing.subscribe();
        loop {
            match self.outgoing.check_send() {
                Ok(0) => {
                    if !wait(&ready, deadline) {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("{}: timed out after {timeout:?}", what()),
                        ));
                    }
                }
                Ok(_) => break,
                Err(e) => return Err(socket_error(e, &what())),
            }
        }
        let datagram = OutgoingDatagram {
            data: data.to_vec(),
            remote_address: None,
        };
        match self.outgoing.send(&[datagram]) {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::Error::new(
                ErrorKind::WouldBlock,
                format!("{}: the datagram was not taken", what()),
            )),
            Err(e) => Err(socket_error(e, &what())),
        }
    }

    /// Receives one datagram of at most `max` bytes (longer ones are cut), waiting at most
    /// `timeout`; [`TimedOut`](ErrorKind::TimedOut) when none came.
    pub fn recv(&self, max: usize, timeout: Duration) -> io::Result<Vec<u8>> {
        let what = || format!("receive from {}", self.peer);
        let deadline = Instant::now().checked_add(timeout);
        let ready = self.incoming.subscribe();
        loop {
            match self.incoming.receive(1) {
                Ok(mut datagrams) if !datagrams.is_empty() => {
                    let mut data = datagrams.swap_remove(0).data;
                    data.truncate(max);
                    return Ok(data);
                }
                Ok(_) => {
                    if !wait(&ready, deadline) {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("{}: nothing within {timeout:?}", what()),
                        ));
                    }
                }
                Err(e) => return Err(socket_error(e, &what())),
            }
        }
    }
}
