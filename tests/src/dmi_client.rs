//! A mapper's gRPC side of DMI for the load generator and the attack probe: a client of a
//! node's `DeviceManagerService` over its unix socket, and the `ReportDeviceStatus` a
//! mapper-framework mapper sends.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};
use wedge_dmi::pb;
use wedge_dmi::pb::device_manager_service_client::DeviceManagerServiceClient;

/// The client of a node's DMI service.
pub type NodeClient = DeviceManagerServiceClient<Channel>;

/// One HTTP/2 connection to the node's DMI socket (each call of a clone multiplexes on it),
/// sending and accepting messages of up to `max_message` bytes (tonic's default: 4 MiB).
pub async fn connect(socket: &Path, max_message: Option<usize>) -> Result<NodeClient> {
    let socket = socket.to_owned();
    let shown = socket.display().to_string();
    // The URI is required by the API and unused: the connector dials the socket.
    let channel = Endpoint::from_static("http://dmi.node")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .with_context(|| format!("cannot connect to the node's DMI socket {shown}"))?;
    let client = DeviceManagerServiceClient::new(channel);
    Ok(match max_message {
        Some(max) => client
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
        None => client,
    })
}

/// A `ReportDeviceStatus` setting `property` of `namespace/name` to `value`, one twin per
/// call, as mapper-framework sends it; with `observed_desired` the desired value the mapper
/// holds (empty) rides along, as mapper-framework always sends it.
pub fn report(
    namespace: &str,
    name: &str,
    property: &str,
    value: String,
    observed_desired: bool,
) -> pb::ReportDeviceStatusRequest {
    let metadata: std::collections::HashMap<String, String> = [
        ("type".to_owned(), "int".to_owned()),
        (
            "timestamp".to_owned(),
            wedge_core::time::now_ms().to_string(),
        ),
    ]
    .into();
    pb::ReportDeviceStatusRequest {
        device_name: name.to_owned(),
        device_namespace: namespace.to_owned(),
        reported_device: Some(pb::DeviceStatus {
            twins: vec![pb::Twin {
                property_name: property.to_owned(),
                observed_desired: observed_desired.then(|| pb::TwinProperty {
                    value: String::new(),
                    metadata: [("type".to_owned(), "int".to_owned())].into(),
                }),
                reported: Some(pb::TwinProperty { value, metadata }),
            }],
            report_to_cloud: true,
            report_cycle: 0,
        }),
    }
}
