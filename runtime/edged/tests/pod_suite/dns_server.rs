//! A DNS server for one name, on port 53 of an address of this host: what a node's
//! `clusterDNS` points at, so a test sees a pod resolve a Service name through it.
//!
//! It answers an `A` query for its name with its address, any other query for its name with
//! no records, and every other name with NXDOMAIN, and keeps the names it was asked.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server; stopped when dropped.
pub struct DnsServer {
    /// Where it listens (port 53).
    pub ip: IpAddr,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DnsServer {
    /// Serves `name` (without the trailing dot) as `address` on `ip`, port 53.
    pub fn start(ip: IpAddr, name: &str, address: Ipv4Addr) -> DnsServer {
        let socket = UdpSocket::bind(SocketAddr::new(ip, 53)).unwrap_or_else(|e| {
            panic!("the DNS test needs UDP port 53 on {ip} (as root, nothing else on it): {e}")
        });
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (name, log, stopped) = (name.to_owned(), asked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((len, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                if let Some((asked_for, reply)) = answer(&buf[..len], &name, address) {
                    log.lock().unwrap().push(asked_for);
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        DnsServer {
            ip,
            asked,
            stop,
            thread: Some(thread),
        }
    }

    /// The names asked so far, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The name asked in `query` and the reply to it; `None` for what is not a one-question
/// query.
fn answer(query: &[u8], name: &str, address: Ipv4Addr) -> Option<(String, Vec<u8>)> {
    if query.len() < 12 || query[4..6] != [0, 1] {
        return None;
    }
    // The question: labels up to a zero byte, then type and class.
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(at)?);
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at + 1..at + 1 + len)?).to_lowercase());
        at += 1 + len;
    }
    let question_end = at + 5;
    let kind = u16::from_be_bytes([*query.get(at + 1)?, *query.get(at + 2)?]);
    let question = query.get(12..question_end)?;
    let asked = labels.join(".");
    let known = asked == name;
    let a_record = known && kind == 1;
    let mut reply = Vec::with_capacity(question_end + 16);
    reply.extend_from_slice(&query[0..2]);
    // Response, recursion desired and available; NXDOMAIN for an unknown name.
    reply.extend_from_slice(&[0x81, if known { 0x80 } else { 0x83 }]);
    reply.extend_from_slice(&[0, 1, 0, u8::from(a_record), 0, 0, 0, 0]);
    reply.extend_from_slice(question);
    if a_record {
        // The question's name (a pointer to offset 12), A, IN, TTL 30, 4 bytes.
        reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
        reply.extend_from_slice(&address.octets());
    }
    Some((asked, reply))
}
