//! A blocking MQTT 3.1.1 test client (rumqttc) that records every message it receives, so a
//! test can wait for a message on one topic and later look at what else arrived.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rumqttc::{Client, Event, MqttOptions, Packet, QoS, TlsConfiguration, Transport};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What the connection thread reports.
enum Note {
    Connected,
    /// A SUBACK: whether each filter was granted.
    Subscribed(Vec<bool>),
    Message(String, String),
    Failed(String),
}

/// A connected client.
pub struct MqttClient {
    client: Client,
    notes: Receiver<Note>,
    /// Messages received but not yet taken.
    backlog: Vec<(String, String)>,
}

impl MqttClient {
    /// Connects to `127.0.0.1:port` with a clean session as `id`, waiting for the CONNACK.
    pub fn connect(port: u16, id: &str) -> Result<MqttClient> {
        MqttClient::connect_with(port, id, None, None)
    }

    /// Like [`MqttClient::connect`], logging in as `login` (user, password) and leaving a will
    /// `(topic, payload)`; a refused CONNECT is an error naming the CONNACK code.
    pub fn connect_with(
        port: u16,
        id: &str,
        login: Option<(&str, &str)>,
        will: Option<(&str, &str)>,
    ) -> Result<MqttClient> {
        MqttClient::connect_over(port, id, login, will, None)
    }

    /// Like [`MqttClient::connect_with`] over TLS (see [`tls_client_config`]).
    pub fn connect_tls(
        port: u16,
        id: &str,
        login: Option<(&str, &str)>,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<MqttClient> {
        MqttClient::connect_over(port, id, login, None, Some(tls))
    }

    fn connect_over(
        port: u16,
        id: &str,
        login: Option<(&str, &str)>,
        will: Option<(&str, &str)>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<MqttClient> {
        let mut options = MqttOptions::new(id, "127.0.0.1", port);
        if let Some(config) = tls {
            options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(config)));
        }
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(4 * 1024 * 1024, 4 * 1024 * 1024);
        if let Some((user, password)) = login {
            options.set_credentials(user, password);
        }
        if let Some((topic, payload)) = will {
            options.set_last_will(rumqttc::LastWill::new(
                topic,
                payload.as_bytes().to_vec(),
                QoS::AtLeastOnce,
                false,
            ));
        }
        let (client, mut connection) = Client::new(options, 1024);
        let (tx, notes) = mpsc::channel();
        std::thread::spawn(move || {
            for event in connection.iter() {
                let note = match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => Note::Connected,
                    Ok(Event::Incoming(Packet::SubAck(ack))) => Note::Subscribed(
                        ack.return_codes
                            .iter()
                            .map(|c| !matches!(c, rumqttc::SubscribeReasonCode::Failure))
                            .collect(),
                    ),
                    Ok(Event::Incoming(Packet::Publish(p))) => Note::Message(
                        p.topic.clone(),
                        String::from_utf8_lossy(&p.payload).into_owned(),
                    ),
                    Ok(_) => continue,
                    Err(e) => {
                        let _ = tx.send(Note::Failed(e.to_string()));
                        return;
                    }
                };
                if tx.send(note).is_err() {
                    return;
                }
            }
        });
        let mut c = MqttClient {
            client,
            notes,
            backlog: Vec::new(),
        };
        c.wait_for(|n| matches!(n, Note::Connected), "CONNACK")?;
        Ok(c)
    }

    fn wait_for(&mut self, want: impl Fn(&Note) -> bool, what: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.notes.recv_timeout(left) {
                Ok(note) if want(&note) => return Ok(()),
                Ok(Note::Message(t, p)) => self.backlog.push((t, p)),
                Ok(Note::Failed(e)) => bail!("MQTT connection failed waiting for {what}: {e}"),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => bail!("no {what} within 10 s"),
                Err(RecvTimeoutError::Disconnected) => bail!("MQTT connection closed"),
            }
        }
    }

    /// Subscribes with QoS 1 and waits for the SUBACK; a refused filter is an error.
    pub fn subscribe(&mut self, filter: &str) -> Result<()> {
        if !self.try_subscribe(filter)? {
            bail!("the broker refused the subscription to {filter}");
        }
        Ok(())
    }

    /// Subscribes with QoS 1 and says whether the broker granted it.
    pub fn try_subscribe(&mut self, filter: &str) -> Result<bool> {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .context("subscribe")?;
        let granted = std::cell::Cell::new(false);
        self.wait_for(
            |n| match n {
                Note::Subscribed(codes) => {
                    granted.set(codes.iter().all(|ok| *ok));
                    true
                }
                _ => false,
            },
            "SUBACK",
        )?;
        Ok(granted.get())
    }

    /// Publishes `payload` on `topic` with QoS 1.
    pub fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>) -> Result<()> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload)
            .context("publish")
    }

    /// The next message on `topic` (earlier messages on other topics are kept), or an error
    /// after `timeout`.
    pub fn expect(&mut self, topic: &str, timeout: Duration) -> Result<String> {
        if let Some(i) = self.backlog.iter().position(|(t, _)| t == topic) {
            return Ok(self.backlog.remove(i).1);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.notes.recv_timeout(left) {
                Ok(Note::Message(t, p)) if t == topic => return Ok(p),
                Ok(Note::Message(t, p)) => self.backlog.push((t, p)),
                Ok(Note::Failed(e)) => bail!("MQTT connection failed waiting on {topic}: {e}"),
                Ok(_) => {}
                Err(_) => bail!(
                    "nothing on {topic} within {timeout:?}; other messages: {:?}",
                    self.backlog
                ),
            }
        }
    }

    /// Every message received within `window`, including those kept earlier, in order.
    pub fn drain(&mut self, window: Duration) -> Vec<(String, String)> {
        let deadline = Instant::now() + window;
        let mut all = std::mem::take(&mut self.backlog);
        while let Ok(note) = self
            .notes
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if let Note::Message(t, p) = note {
                all.push((t, p));
            }
        }
        all
    }
}

/// A TLS client configuration trusting `ca_der` and, with `identity` (certificate DER, PKCS#8
/// key DER), presenting that certificate.
pub fn tls_client_config(
    ca_der: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca_der.to_vec()))?;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(
            vec![CertificateDer::from(cert.to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec())),
        )?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
