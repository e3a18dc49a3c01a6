//! The generator's DMI side, as a KubeEdge mapper has it: a gRPC client of the node's
//! `DeviceManagerService` over its unix socket, and a `DeviceMapperService` of its own on
//! another unix socket, registered with `MapperRegister`, that timestamps every call the node
//! makes to it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};
use wedge_dmi::pb;
use wedge_dmi::pb::device_mapper_service_server::{DeviceMapperService, DeviceMapperServiceServer};

pub use wedge_tests::dmi_client::NodeClient;

/// One HTTP/2 connection to the node's DMI socket (each call of a clone multiplexes on it).
pub async fn connect(socket: &Path) -> Result<NodeClient> {
    wedge_tests::dmi_client::connect(socket, None).await
}

/// An `UpdateDevice` (or `RegisterDevice`) the node made, as the mapper saw it.
#[derive(Debug)]
pub struct DeviceCall {
    /// When the call reached the mapper's handler.
    pub at: Instant,
    /// `<namespace>/<name>`.
    pub device: String,
    /// `(property, desired value)` of every property of the Device sent.
    pub desired: Vec<(String, String)>,
}

struct Recorder {
    calls: mpsc::UnboundedSender<DeviceCall>,
}

impl Recorder {
    fn record(&self, device: Option<pb::Device>) {
        let at = Instant::now();
        let Some(device) = device else { return };
        let desired = device
            .spec
            .map(|s| s.properties)
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name, p.desired.map(|d| d.value).unwrap_or_default()))
            .collect();
        let _ = self.calls.send(DeviceCall {
            at,
            device: format!("{}/{}", device.namespace, device.name),
            desired,
        });
    }
}

#[tonic::async_trait]
impl DeviceMapperService for Recorder {
    async fn register_device(
        &self,
        request: Request<pb::RegisterDeviceRequest>,
    ) -> Result<Response<pb::RegisterDeviceResponse>, Status> {
        let device = request.into_inner().device;
        let (name, namespace) = device
            .as_ref()
            .map(|d| (d.name.clone(), d.namespace.clone()))
            .unwrap_or_default();
        self.record(device);
        Ok(Response::new(pb::RegisterDeviceResponse {
            device_name: name,
            device_namespace: namespace,
        }))
    }

    async fn remove_device(
        &self,
        _: Request<pb::RemoveDeviceRequest>,
    ) -> Result<Response<pb::RemoveDeviceResponse>, Status> {
        Ok(Response::new(pb::RemoveDeviceResponse {}))
    }

    async fn update_device(
        &self,
        request: Request<pb::UpdateDeviceRequest>,
    ) -> Result<Response<pb::UpdateDeviceResponse>, Status> {
        self.record(request.into_inner().device);
        Ok(Response::new(pb::UpdateDeviceResponse {}))
    }

    async fn create_device_model(
        &self,
        request: Request<pb::CreateDeviceModelRequest>,
    ) -> Result<Response<pb::CreateDeviceModelResponse>, Status> {
        let model = request.into_inner().model.unwrap_or_default();
        Ok(Response::new(pb::CreateDeviceModelResponse {
            device_model_name: model.name,
            device_model_namespace: model.namespace,
        }))
    }

    async fn remove_device_model(
        &self,
        _: Request<pb::RemoveDeviceModelRequest>,
    ) -> Result<Response<pb::RemoveDeviceModelResponse>, Status> {
        Ok(Response::new(pb::RemoveDeviceModelResponse {}))
    }

    async fn update_device_model(
        &self,
        _: Request<pb::UpdateDeviceModelRequest>,
    ) -> Result<Response<pb::UpdateDeviceModelResponse>, Status> {
        Ok(Response::new(pb::UpdateDeviceModelResponse {}))
    }

    async fn get_device(
        &self,
        _: Request<pb::GetDeviceRequest>,
    ) -> Result<Response<pb::GetDeviceResponse>, Status> {
        Err(Status::unimplemented(
            "device-bench does not answer GetDevice",
        ))
    }
}

/// The generator's own mapper service; stops serving when dropped.
pub struct MapperServer {
    /// Its socket (the `address` it registers with).
    pub socket: PathBuf,
    /// The node's calls, in arrival order.
    pub calls: mpsc::UnboundedReceiver<DeviceCall>,
    _stop: oneshot::Sender<()>,
}

impl MapperServer {
    /// Serves `DeviceMapperService` on `socket`.
    pub fn serve(socket: &Path) -> Result<MapperServer> {
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        let incoming = futures_util::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let (tx, calls) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = DeviceMapperServiceServer::new(Recorder { calls: tx });
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                eprintln!("device-bench: the mapper service ended: {e}");
            }
        });
        Ok(MapperServer {
            socket: socket.to_owned(),
            calls,
            _stop: stop,
        })
    }

    /// Registers with the node as the mapper of `protocol` (`withData: true`, as
    /// mapper-framework mappers do); returns the devices the node handed over.
    pub async fn register(&self, client: &mut NodeClient, protocol: &str) -> Result<Vec<String>> {
        let address = self
            .socket
            .to_str()
            .context("the mapper socket path is not UTF-8")?
            .as_bytes()
            .to_vec();
        let answer = client
            .mapper_register(pb::MapperRegisterRequest {
                with_data: true,
                mapper: Some(pb::MapperInfo {
                    name: "device-bench".to_owned(),
                    version: "v1.23.1".to_owned(),
                    api_version: "v1.0.0".to_owned(),
                    protocol: protocol.to_owned(),
                    address,
                    state: "ok".to_owned(),
                }),
            })
            .await
            .map_err(|s| anyhow::anyhow!("MapperRegister refused: {:?} {}", s.code(), s.message()))?
            .into_inner();
        if answer.device_list.is_empty() {
            bail!("MapperRegister answered no device of protocol {protocol:?}");
        }
        Ok(answer
            .device_list
            .iter()
            .map(|d| format!("{}/{}", d.namespace, d.name))
            .collect())
    }
}

/// A `ReportDeviceStatus` setting `property` of `namespace/name` to `value`, as
/// mapper-framework sends it (with the desired value it holds).
pub fn report(
    namespace: &str,
    name: &str,
    property: &str,
    value: String,
) -> pb::ReportDeviceStatusRequest {
    wedge_tests::dmi_client::report(namespace, name, property, value, true)
}
