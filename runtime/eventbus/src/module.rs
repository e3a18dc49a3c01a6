//! The `eventbus` module: starts the broker(s), forwards MQTT onto the bus, and carries out the
//! bus messages sent to it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rumqttc::QoS;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use wedge_core::message::{group, module};
use wedge_core::metrics::{MetricsSource, PromWriter};
use wedge_core::{Message, Module, ModuleContext, ModuleError, Store};

use crate::broker::{BrokerOptions, EmbeddedBroker, LocalLink, connection_limit};
use crate::external::ExternalLink;
use crate::outbound::{Action, action};
use crate::settings::EventBusSettings;
use crate::stats::{DropReason, Stats};
use crate::topics::DEFAULT_TOPICS;
use crate::{inbound, sub_topics};

/// Deliveries from the brokers waiting to be put on the bus.
const INBOUND_QUEUE: usize = 1024;

/// The eventbus module (`eventbus`, group `bus`).
pub struct EventBus {
    store: Store,
    settings: EventBusSettings,
    stats: Arc<Stats>,
}

/// The brokers bus messages are published to.
struct Sinks {
    internal: Option<LocalLink>,
    external: Option<ExternalLink>,
}

impl EventBus {
    /// An eventbus over `store`, whose `sub_topics` table must exist (apply
    /// [`crate::MIGRATIONS`] with `Store::migrate("eventbus", MIGRATIONS)` first).
    pub fn new(store: Store, settings: EventBusSettings) -> EventBus {
        EventBus {
            store,
            settings,
            stats: Arc::default(),
        }
    }

    /// The module's counters (also written by [`MetricsSource::write_metrics`]).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    async fn handle(&self, sinks: &Sinks, msg: Message) {
        match action(&msg, &self.settings.node_name) {
            Action::Publish { topic, payload } => {
                if let Some(link) = &sinks.internal {
                    link.publish(
                        &topic,
                        payload.clone(),
                        qos(self.settings.qos),
                        self.settings.retain,
                    );
                    self.stats
                        .published_internal
                        .fetch_add(1, Ordering::Relaxed);
                }
                if let Some(link) = &sinks.external {
                    link.publish(&topic, payload);
                }
            }
            Action::Subscribe(filter) => {
                if let Err(e) = sub_topics::insert(&self.store, &filter).await {
                    tracing::error!(
                        filter,
                        "subscription not stored; it will not survive a restart: {e}"
                    );
                }
                if let Some(link) = &sinks.internal {
                    link.subscribe(&filter);
                }
                if let Some(link) = &sinks.external {
                    link.subscribe(&filter);
                }
                tracing::info!(filter, "subscribed");
            }
            Action::Unsubscribe(filter) => {
                if let Err(e) = sub_topics::delete(&self.store, &filter).await {
                    tracing::error!(filter, "subscription not removed from the store: {e}");
                }
                if let Some(link) = &sinks.internal {
                    link.unsubscribe(&filter);
                }
                if let Some(link) = &sinks.external {
                    link.unsubscribe(&filter);
                }
                tracing::info!(filter, "unsubscribed");
            }
            Action::LinkState => {}
            Action::Ignore(why) => {
                tracing::warn!(
                    source = %msg.route.source,
                    operation = %msg.route.operation,
                    resource = %msg.route.resource,
                    "message not published: {why}"
                );
                self.stats.count_drop(DropReason::Unpublishable);
            }
        }
    }
}

fn qos(level: u8) -> QoS {
    match level {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

impl MetricsSource for EventBus {
    /// Writes message, drop and connection metrics.
    fn write_metrics(&self, w: &mut PromWriter) {
        self.stats.write_metrics(w);
    }
}

impl Module for EventBus {
    fn name(&self) -> &'static str {
        module::EVENTBUS
    }

    fn group(&self) -> &'static str {
        group::BUS
    }

    async fn run(self: Arc<Self>, mut ctx: ModuleContext) -> Result<(), ModuleError> {
        let settings = &self.settings;
        // Everything started below stops with this token, however `run` ends.
        let token = ctx.token().child_token();
        let _stop = token.clone().drop_guard();
        let tasks = TaskTracker::new();

        let mut topics: Vec<String> = DEFAULT_TOPICS.iter().map(|t| (*t).to_owned()).collect();
        for topic in sub_topics::all(&self.store).await? {
            if !topics.contains(&topic) {
                topics.push(topic);
            }
        }
        let (deliveries, inbound_rx) = mpsc::channel(INBOUND_QUEUE);

        let mut broker = None;
        let mut sinks = Sinks {
            internal: None,
            external: None,
        };
        if settings.mode.uses_internal() {
            let access = crate::access::AccessPolicy::build(
                settings.credentials.as_ref(),
                settings.users_file.as_deref(),
            )?;
            let limits = &settings.broker;
            let tls = if limits.tls.enabled() {
                let path = |p: &str| (!p.is_empty()).then(|| std::path::PathBuf::from(p));
                let t = &limits.tls;
                let mut listener = crate::broker::TlsListener::from_files(
                    &t.address,
                    std::path::Path::new(&t.cert_file),
                    std::path::Path::new(&t.key_file),
                    path(&t.client_ca_file).as_deref(),
                )?;
                listener.max_packet =
                    (t.max_packet_bytes != 0).then_some(t.max_packet_bytes as usize);
                Some(listener)
            } else {
                None
            };
            let options = BrokerOptions {
                access,
                queue: settings.session_queue_size,
                max_packet: limits.max_packet_bytes as usize,
                max_pending_bytes: usize::try_from(limits.max_pending_bytes).unwrap_or(usize::MAX),
                packet_timeout: Duration::from_millis(limits.packet_timeout_ms.into()),
                max_connections: connection_limit(limits.max_connections),
                max_filters: limits.max_filters_per_client as usize,
                max_retained: limits.max_retained_topics as usize,
                max_retained_bytes: limits.max_retained_bytes,
                connect_timeout: Duration::from_millis(limits.connect_timeout_ms.into()),
                idle_timeout: Duration::from_secs(limits.idle_timeout_seconds.into()),
                tls,
                ..BrokerOptions::default()
            };
            let started =
                EmbeddedBroker::start(&settings.internal, options, self.stats.clone(), &token)
                    .await?;
            let link = started.local_link(deliveries.clone());
            for topic in &topics {
                link.subscribe(topic);
            }
            sinks.internal = Some(link);
            broker = Some(started);
        }
        if settings.mode.uses_external() {
            sinks.external = Some(ExternalLink::start(
                settings,
                topics.iter().cloned(),
                deliveries.clone(),
                self.stats.clone(),
                &tasks,
                &token,
            )?);
        }
        drop(deliveries);
        tasks.spawn(inbound::forward(
            inbound_rx,
            ctx.bus().clone(),
            self.stats.clone(),
            settings.max_payload,
            token.clone(),
        ));
        // The embedded broker listens by now; the external one is dialled in the background and
        // its state is the `wedge_eventbus_external_connected` gauge.
        ctx.ready();

        while let Some(msg) = ctx.recv().await {
            self.handle(&sinks, msg).await;
        }

        token.cancel();
        drop(sinks);
        tasks.close();
        tasks.wait().await;
        if let Some(broker) = broker {
            broker.stop().await;
        }
        Ok(())
    }
}
