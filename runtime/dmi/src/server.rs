//! The node's DeviceManagerService: what KubeEdge mappers call.
//!
//! Every call arrives with the kernel's credentials of its connection (`peer.rs`) and is
//! admitted or refused by `admit.rs` before it changes anything; an admitted registration is
//! recorded with its registrant.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tonic::{Request, Response, Status};
use wedge_core::message::{group, module, operation};
use wedge_core::{Content, Message};

use crate::admit::caller;
use crate::module::Shared;
use crate::pb;
use crate::pb::device_manager_service_server::DeviceManagerService;
use crate::peer::Gate;
use crate::state::MapperLink;

/// The service over the module's shared state.
pub(crate) struct Manager {
    pub shared: Arc<Shared>,
    /// The peer check of this run (who is trusted to take over a gone mapper's protocol).
    pub gate: Arc<Gate>,
}

/// `<namespace>/<name>` of a report, both required.
fn device_id(namespace: &str, name: &str) -> Result<String, Status> {
    let valid = |s: &str| !s.is_empty() && !s.contains('/');
    if !valid(namespace) || !valid(name) {
        return Err(Status::invalid_argument(format!(
            "deviceNamespace {namespace:?} and deviceName {name:?} must both be set, without '/'"
        )));
    }
    Ok(format!("{namespace}/{name}"))
}

impl Manager {
    /// Hands devicetwin what an MQTT mapper would publish on `$hw/events/device/<id>/<suffix>`:
    /// DMI reports take the path of every other report (checks, handlers, versions, cloud).
    fn to_twin(&self, id: &str, suffix: &str, payload: serde_json::Value) -> Result<(), Status> {
        let topic = format!("$hw/events/device/{id}/{suffix}");
        let msg = Message::build(
            module::DMI,
            group::TWIN,
            operation::UPDATE,
            &topic,
            Content::string(payload.to_string()),
        );
        let stats = &self.shared.stats;
        let Some(bus) = self.shared.bus() else {
            return Err(Status::unavailable("the node is restarting its DMI module"));
        };
        match bus.try_send(module::TWIN, msg) {
            Ok(()) => {
                stats.reports.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                // The mapper reports again next cycle; the refusal is counted, not hidden.
                stats.reports_refused.fetch_add(1, Ordering::Relaxed);
                Err(Status::resource_exhausted(format!(
                    "devicetwin did not take the report ({e}); report again"
                )))
            }
        }
    }
}

#[tonic::async_trait]
impl DeviceManagerService for Manager {
    async fn mapper_register(
        &self,
        request: Request<pb::MapperRegisterRequest>,
    ) -> Result<Response<pb::MapperRegisterResponse>, Status> {
        let peer = caller(&request)?;
        self.admit_registration(&peer)?;
        let request = request.into_inner();
        let Some(info) = request.mapper else {
            return Err(Status::invalid_argument("MapperRegister without mapper"));
        };
        if info.protocol.is_empty() {
            return Err(Status::invalid_argument(format!(
                "mapper {:?} registered without a protocol",
                info.name
            )));
        }
        if info.address.is_empty() {
            return Err(Status::invalid_argument(format!(
                "mapper {:?} registered without the address of its DMI socket",
                info.name
            )));
        }
        let owner = self
            .shared
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(module) = owner.and_then(|owner| owner(&info.protocol)) {
            tracing::warn!(mapper = %info.name, protocol = %info.protocol, "DMI mapper refused: the Wasm mapper {module} drives the protocol");
            return Err(Status::failed_precondition(format!(
                "protocol {:?} is driven by the Wasm mapper {module:?} on this node; remove it \
                 (wedge module remove {module}) or give this mapper another protocol",
                info.protocol
            )));
        }
        // One registration at a time: the holder checked is the one replaced.
        let _serial = self.shared.register_lock.lock().await;
        self.admit_holder(&peer, &info).await?;
        let stored = info.clone();
        self.shared
            .store
            .write(move |conn| crate::store::put(conn, &stored, &peer))
            .await
            .map_err(|e| Status::unavailable(format!("cannot store the mapper: {e}")))?;
        let (answer, generation) = {
            let mut state = self.shared.lock();
            state.generation += 1;
            let generation = state.generation;
            let answer = state.register_answer(&info.protocol);
            let rate = self.shared.settings.limits.reports;
            let mut link = MapperLink::new(info.clone(), peer, rate, generation, false);
            if request.with_data {
                // The mapper starts every device of the answer: it holds them now.
                for device in &answer.device_list {
                    link.devices.insert(
                        format!("{}/{}", device.namespace, device.name),
                        device.clone(),
                    );
                }
                for model in &answer.model_list {
                    link.models
                        .insert(format!("{}/{}", model.namespace, model.name), model.clone());
                }
            } else {
                for device in &answer.device_list {
                    link.dirty
                        .insert(format!("{}/{}", device.namespace, device.name));
                }
            }
            state.mappers.insert(info.protocol.clone(), link);
            (answer, generation)
        };
        tracing::info!(
            mapper = %info.name,
            protocol = %info.protocol,
            address = %String::from_utf8_lossy(&info.address),
            peer = %peer,
            devices = answer.device_list.len(),
            "DMI mapper registered"
        );
        self.shared.start_worker(info, peer.uid, generation);
        if request.with_data {
            Ok(Response::new(answer))
        } else {
            Ok(Response::new(pb::MapperRegisterResponse::default()))
        }
    }

    async fn report_device_status(
        &self,
        request: Request<pb::ReportDeviceStatusRequest>,
    ) -> Result<Response<pb::ReportDeviceStatusResponse>, Status> {
        let peer = caller(&request)?;
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        self.admit_report(&peer, &id)?;
        let twins = request.reported_device.map(|d| d.twins).unwrap_or_default();
        if twins.is_empty() {
            return Err(Status::invalid_argument(format!(
                "ReportDeviceStatus of {id} without twins"
            )));
        }
        let mut twin = serde_json::Map::new();
        for reported in twins {
            let Some(value) = reported.reported else {
                continue;
            };
            // The reported side only: the desired side belongs to the Device and the cloud,
            // and a mapper that has not applied a new desired value yet would otherwise undo
            // it (observedDesired is the value the mapper holds, not a request).
            twin.insert(
                reported.property_name,
                serde_json::json!({ "actual": { "value": value.value } }),
            );
        }
        if twin.is_empty() {
            return Err(Status::invalid_argument(format!(
                "ReportDeviceStatus of {id} without reported values"
            )));
        }
        let payload = serde_json::json!({
            "event_id": "",
            "timestamp": wedge_core::time::now_ms(),
            "twin": twin,
        });
        self.to_twin(&id, "twin/update", payload)?;
        Ok(Response::new(pb::ReportDeviceStatusResponse {}))
    }

    async fn report_device_states(
        &self,
        request: Request<pb::ReportDeviceStatesRequest>,
    ) -> Result<Response<pb::ReportDeviceStatesResponse>, Status> {
        let peer = caller(&request)?;
        let request = request.into_inner();
        let id = device_id(&request.device_namespace, &request.device_name)?;
        self.admit_report(&peer, &id)?;
        let payload = serde_json::json!({
            "event_id": "",
            "timestamp": wedge_core::time::now_ms(),
            "state": request.state,
        });
        self.to_twin(&id, "state/update", payload)?;
        Ok(Response::new(pb::ReportDeviceStatesResponse {}))
    }
}

/// Where the node serves DMI for `dmiSockPath`, as edgecore v1.23.1 reads it: a path ending
/// in `.sock` names a file whose directory is used; the socket is `dmi.sock` in that
/// directory.
pub fn socket_path(dmi_sock_path: &str) -> PathBuf {
    let path = PathBuf::from(dmi_sock_path);
    let dir = if dmi_sock_path.ends_with(".sock") {
        path.parent().map(PathBuf::from).unwrap_or_default()
    } else {
        path
    };
    dir.join("dmi.sock")
}

#[cfg(test)]
mod tests {
    use super::socket_path;
    use std::path::Path;

    #[test]
    fn socket_path_as_edgecore_reads_it() {
        assert_eq!(socket_path("/tmp/x/dmi.sock"), Path::new("/tmp/x/dmi.sock"));
        assert_eq!(
            socket_path("/tmp/x/other.sock"),
            Path::new("/tmp/x/dmi.sock")
        );
        assert_eq!(
            socket_path("/etc/kubeedge"),
            Path::new("/etc/kubeedge/dmi.sock")
        );
    }
}
