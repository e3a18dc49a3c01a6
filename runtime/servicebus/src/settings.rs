//! The servicebus's settings, from `modules.serviceBus`.

use std::time::Duration;

/// Where the servicebus listens and how long it waits for the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceBusSettings {
    /// `server:port` of the HTTP server edge apps call.
    pub listen: String,
    /// How long an edge app's request waits for the cloud's answer (`timeout`, seconds).
    pub timeout: Duration,
    /// How long an app on the node may take to answer a cloud call (edgecore's fixed 10 s).
    pub app_timeout: Duration,
}

impl ServiceBusSettings {
    /// The settings `modules.serviceBus` asks for (validated at start: the port is 1..=65535).
    pub fn from_config(config: &wedge_core::config::ServiceBus) -> ServiceBusSettings {
        let port = u16::try_from(config.port).unwrap_or(9060);
        ServiceBusSettings {
            listen: crate::server::address(&config.server, port),
            timeout: Duration::from_secs(u64::try_from(config.timeout.max(1)).unwrap_or(60)),
            app_timeout: crate::app_call::APP_TIMEOUT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edgecores_defaults() {
        let s = ServiceBusSettings::from_config(&wedge_core::config::ServiceBus::default());
        assert_eq!(s.listen, "127.0.0.1:9060");
        assert_eq!(s.timeout, Duration::from_secs(60));
    }
}
