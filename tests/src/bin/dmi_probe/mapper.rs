//! The probe's gRPC side: a client of the node's `DeviceManagerService` over its unix socket,
//! a `DeviceMapperService` of our own (so `MapperRegister` has an address that answers), and a
//! reader of the `config_data` the node hands a registered mapper.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};
use wedge_dmi::pb;
use wedge_dmi::pb::device_mapper_service_server::{DeviceMapperService, DeviceMapperServiceServer};

pub use wedge_tests::dmi_client::NodeClient;

/// Largest message the probe sends or accepts (the oversized report is 8 MiB).
const MAX_MESSAGE: usize = 64 << 20;

/// One HTTP/2 connection to the node's DMI socket (clones multiplex on it).
pub async fn connect(socket: &Path) -> Result<NodeClient> {
    wedge_tests::dmi_client::connect(socket, Some(MAX_MESSAGE)).await
}

/// A gRPC status as one line: code and message (cut to 200 characters).
pub fn status_text(status: &Status) -> String {
    format!("{:?}: {}", status.code(), cut(status.message(), 200))
}

/// `text` cut to `max` characters, `…` marking a cut.
pub fn cut(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Counts the node's calls to our mapper, by method, and answers each with success.
struct Answerer {
    calls: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Answerer {
    fn count(&self, method: &'static str) {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        *calls.entry(method).or_default() += 1;
    }
}

#[tonic::async_trait]
impl DeviceMapperService for Answerer {
    async fn register_device(
        &self,
        request: Request<pb::RegisterDeviceRequest>,
    ) -> Result<Response<pb::RegisterDeviceResponse>, Status> {
        self.count("RegisterDevice");
        let device = request.into_inner().device.unwrap_or_default();
        Ok(Response::new(pb::RegisterDeviceResponse {
            device_name: device.name,
            device_namespace: device.namespace,
        }))
    }

    async fn remove_device(
        &self,
        _: Request<pb::RemoveDeviceRequest>,
    ) -> Result<Response<pb::RemoveDeviceResponse>, Status> {
        self.count("RemoveDevice");
        Ok(Response::new(pb::RemoveDeviceResponse {}))
    }

    async fn update_device(
        &self,
        _: Request<pb::UpdateDeviceRequest>,
    ) -> Result<Response<pb::UpdateDeviceResponse>, Status> {
        self.count("UpdateDevice");
        Ok(Response::new(pb::UpdateDeviceResponse {}))
    }

    async fn create_device_model(
        &self,
        request: Request<pb::CreateDeviceModelRequest>,
    ) -> Result<Response<pb::CreateDeviceModelResponse>, Status> {
        self.count("CreateDeviceModel");
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
        self.count("RemoveDeviceModel");
        Ok(Response::new(pb::RemoveDeviceModelResponse {}))
    }

    async fn update_device_model(
        &self,
        _: Request<pb::UpdateDeviceModelRequest>,
    ) -> Result<Response<pb::UpdateDeviceModelResponse>, Status> {
        self.count("UpdateDeviceModel");
        Ok(Response::new(pb::UpdateDeviceModelResponse {}))
    }

    async fn get_device(
        &self,
        _: Request<pb::GetDeviceRequest>,
    ) -> Result<Response<pb::GetDeviceResponse>, Status> {
        self.count("GetDevice");
        Err(Status::unimplemented("dmi-probe does not answer GetDevice"))
    }
}

/// Our `DeviceMapperService` on a unix socket; stops serving when dropped.
pub struct MapperServer {
    /// Its socket (the `address` we register with).
    pub socket: PathBuf,
    calls: Arc<Mutex<BTreeMap<&'static str, usize>>>,
    _stop: oneshot::Sender<()>,
}

impl MapperServer {
    /// Serves on `socket` (which must not exist yet).
    pub fn serve(socket: &Path) -> Result<MapperServer> {
        let listener = tokio::net::UnixListener::bind(socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        let incoming = futures_util::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let calls = Arc::new(Mutex::new(BTreeMap::new()));
        let (stop, stopped) = oneshot::channel::<()>();
        let service = DeviceMapperServiceServer::new(Answerer {
            calls: calls.clone(),
        });
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                eprintln!("dmi-probe: our mapper service ended: {e}");
            }
        });
        Ok(MapperServer {
            socket: socket.to_owned(),
            calls,
            _stop: stop,
        })
    }

    /// The node's calls so far, as `Method×n, …` (`none` when there were none).
    pub fn calls(&self) -> String {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.is_empty() {
            return "none".to_owned();
        }
        calls
            .iter()
            .map(|(method, n)| format!("{method}×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The `MapperRegister` request for `protocol` with our socket as the address.
    pub fn register_request(&self, protocol: &str) -> Result<pb::MapperRegisterRequest> {
        let address = self
            .socket
            .to_str()
            .context("our mapper socket path is not UTF-8")?
            .as_bytes()
            .to_vec();
        Ok(pb::MapperRegisterRequest {
            with_data: true,
            mapper: Some(pb::MapperInfo {
                name: "dmi-probe".to_owned(),
                version: "v1.23.1".to_owned(),
                api_version: "v1.0.0".to_owned(),
                protocol: protocol.to_owned(),
                address,
                state: "ok".to_owned(),
            }),
        })
    }
}

/// Every non-empty `config_data` entry of `devices` (the device's protocol and its properties'
/// visitors), as `<ns>/<name>[.<property>] <key>=<value>`.
pub fn config_entries(devices: &[pb::Device]) -> Vec<String> {
    let mut found = Vec::new();
    for device in devices {
        let id = format!("{}/{}", device.namespace, device.name);
        let Some(spec) = &device.spec else { continue };
        if let Some(config) = spec.protocol.as_ref().and_then(|p| p.config_data.as_ref()) {
            for (key, any) in &config.data {
                found.push(format!(
                    "{id} {key}={}",
                    any_value(&any.type_url, &any.value)
                ));
            }
        }
        for property in &spec.properties {
            let config = property
                .visitors
                .as_ref()
                .and_then(|v| v.config_data.as_ref());
            for (key, any) in config.map(|c| &c.data).into_iter().flatten() {
                found.push(format!(
                    "{id}.{} {key}={}",
                    property.name,
                    any_value(&any.type_url, &any.value)
                ));
            }
        }
    }
    found
}

/// A `google.protobuf` wrapper value (`StringValue`, `Int64Value`, `DoubleValue`, …) packed in
/// an `Any`, as text; bytes it cannot read are shown as lossy UTF-8.
fn any_value(type_url: &str, value: &[u8]) -> String {
    let kind = type_url.rsplit('/').next().unwrap_or(type_url);
    if value.is_empty() {
        return format!("<{kind} default>");
    }
    let lossy = || String::from_utf8_lossy(value).into_owned();
    let Some((tag, rest)) = varint(value) else {
        return lossy();
    };
    match tag & 7 {
        0 => match varint(rest) {
            Some((v, _)) if kind.ends_with("BoolValue") => (v != 0).to_string(),
            // Int64/UInt64/Int32 wrappers: two's complement in a varint.
            Some((v, _)) => (v as i64).to_string(),
            None => lossy(),
        },
        1 => rest
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or_else(lossy, |b| f64::from_le_bytes(b).to_string()),
        5 => rest
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or_else(lossy, |b| f32::from_le_bytes(b).to_string()),
        2 => varint(rest)
            .and_then(|(len, rest)| rest.get(..usize::try_from(len).ok()?))
            .map_or_else(lossy, |b| format!("{:?}", String::from_utf8_lossy(b))),
        _ => lossy(),
    }
}

/// A protobuf varint at the start of `bytes`, and what follows it.
fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}
