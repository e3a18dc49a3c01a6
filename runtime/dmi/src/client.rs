//! gRPC to a mapper's own DMI socket (`MapperInfo.address`).

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::pb::device_mapper_service_client::DeviceMapperServiceClient;
use crate::peer::Peer;
use crate::state::{DeviceCall, ModelCall, Step};

/// How long one call to a mapper may take (mapper-framework answers at once; a device restart
/// it does in the background).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one mapper. The connection is made on first use and remade after it breaks,
/// so a mapper that restarts on the same socket is reached again without a new registration.
/// Every connection is checked to be served by `owner_uid`, the user that registered the
/// mapper: devices (with their protocol secrets) never go to a socket another user put at
/// the mapper's path.
pub(crate) fn connect(socket: PathBuf, owner_uid: u32) -> DeviceMapperServiceClient<Channel> {
    // The URI is required by the API and unused: every connection goes to `socket`.
    let endpoint = Endpoint::from_static("http://dmi.mapper")
        .connect_timeout(Duration::from_secs(5))
        .timeout(CALL_TIMEOUT);
    let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
        let socket = socket.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(&socket).await?;
            let server = Peer::of(&stream)?;
            if server.uid != owner_uid {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is served by uid {}, not by uid {owner_uid} that registered the mapper",
                        socket.display(),
                        server.uid
                    ),
                ));
            }
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }));
    DeviceMapperServiceClient::new(channel)
}

/// Makes the calls of `step`: the model first when it needs one.
pub(crate) async fn call(
    client: &mut DeviceMapperServiceClient<Channel>,
    step: &Step,
) -> Result<(), tonic::Status> {
    use crate::pb;
    if let Some((_, model)) = &step.model {
        match model.clone() {
            ModelCall::Create(model) => {
                client
                    .create_device_model(pb::CreateDeviceModelRequest { model: Some(model) })
                    .await?;
            }
            ModelCall::Update(model) => {
                client
                    .update_device_model(pb::UpdateDeviceModelRequest { model: Some(model) })
                    .await?;
            }
        }
    }
    match step.call.clone() {
        DeviceCall::Register(device) => {
            client
                .register_device(pb::RegisterDeviceRequest {
                    device: Some(device),
                })
                .await?;
        }
        DeviceCall::Update(device) => {
            client
                .update_device(pb::UpdateDeviceRequest {
                    device: Some(device),
                })
                .await?;
        }
        DeviceCall::Remove { namespace, name } => {
            client
                .remove_device(pb::RemoveDeviceRequest {
                    device_name: name,
                    device_namespace: namespace,
                })
                .await?;
        }
    }
    Ok(())
}
