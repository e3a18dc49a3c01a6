//! `meta.k8s.io` Table answers, so that `kubectl get` against MetaServer prints what it prints
//! against kube-apiserver.
//!
//! kubectl does not format objects itself: it asks for `application/json;as=Table;v=v1;
//! g=meta.k8s.io` and prints the columns and cells the server chose. kube-apiserver fills them
//! with the printers of `pkg/printers/internalversion/printers.go` (always in wide form; kubectl
//! hides the columns of priority above 0 unless `-o wide`), or with its default two columns
//! (Name, Created At) for a resource without a printer. This module does the same from the
//! objects' JSON. It is pure: the caller passes the clock, and no input makes it panic.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The group version of `meta.k8s.io` a client asked its Table in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableVersion {
    /// `meta.k8s.io/v1`, what kubectl asks for first.
    V1,
    /// `meta.k8s.io/v1beta1`, for older clients.
    V1Beta1,
}

impl TableVersion {
    /// The `apiVersion` of the Table (and of its rows' `PartialObjectMetadata`).
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// Why a Table request was refused (a `400 Bad Request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// `includeObject` is not one of `None`, `Metadata`, `Object`.
    #[error(
        "includeObject: Unsupported value: {0:?}: supported values: \"Metadata\", \"None\", \"Object\""
    )]
    IncludeObject(String),
}

/// The `includeObject` query parameter: how much of each object a Table row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object: only the cells.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (apiserver's default), which is what
    /// kubectl needs for `--show-labels`, `-L` and sorting by name.
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Reads the query parameter (absent or empty means `Metadata`); the values are
    /// case-sensitive, as in kube-apiserver.
    pub fn parse(q: Option<&str>) -> Result<IncludeObject, TableError> {
        match q {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(TableError::IncludeObject(other.to_owned())),
        }
    }
}

/// Whether the `Accept` header asks for a Table, and in which group version.
///
/// The clauses are taken in the client's order of preference (`q`, then as written); the first
/// one MetaServer can answer decides. A Table clause counts when it is JSON with `as=Table`,
/// `g=meta.k8s.io` and `v=v1` or `v=v1beta1`; a plain JSON, YAML or wildcard clause means the
/// client prefers the objects themselves (`None`). Clauses MetaServer cannot answer (protobuf,
/// other conversions, `q=0`) are skipped, as kube-apiserver's negotiation skips them.
pub fn wants_table(accept: &str) -> Option<TableVersion> {
    let mut clauses: Vec<(f32, usize, Option<TableVersion>)> = Vec::new();
    for (index, clause) in accept.split(',').enumerate() {
        let mut parts = clause.split(';');
        let media_type = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut quality = 1.0_f32;
        let (mut kind, mut group, mut version) = (None, None, None);
        for parameter in parts {
            let Some((name, value)) = parameter.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => quality = value.parse().unwrap_or(0.0),
                "as" => kind = Some(value.to_owned()),
                "g" => group = Some(value.to_owned()),
                "v" => version = Some(value.to_owned()),
                _ => {}
            }
        }
        if quality.is_nan() || quality <= 0.0 {
            continue;
        }
        let answer = match kind.as_deref() {
            None => match media_type.as_str() {
                "application/json" | "application/yaml" | "application/*" | "*/*" => None,
                _ => continue,
            },
            Some("Table") if media_type == "application/json" => {
                match (group.as_deref(), version.as_deref()) {
                    (Some("meta.k8s.io"), Some("v1")) => Some(TableVersion::V1),
                    (Some("meta.k8s.io"), Some("v1beta1")) => Some(TableVersion::V1Beta1),
                    _ => continue,
                }
            }
            Some(_) => continue,
        };
        clauses.push((quality, index, answer));
    }
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    clauses.first().and_then(|clause| clause.2)
}

/// The list metadata a Table carries besides its resourceVersion, and apiserver's
/// `TableOptions.NoHeaders` (set for the watch events after the first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableMeta<'a> {
    /// The list's (or the single object's) resourceVersion; omitted when empty.
    pub resource_version: &'a str,
    /// The list's `continue` token, when the list was cut by `limit`.
    pub continue_token: Option<&'a str>,
    /// The list's `remainingItemCount`, when known.
    pub remaining_item_count: Option<i64>,
    /// Leave out the column definitions (a watch sends them with its first event only).
    pub no_headers: bool,
}

/// The Table for `items` of `resource` (plural, e.g. `pods`), with the list's
/// `resource_version`, as kube-apiserver answers a list (or, with one item, a get) asked
/// for a Table. `now` is the clock the Age columns count from.
pub fn table(
    resource: &str,
    items: &[&Value],
    resource_version: &str,
    include: IncludeObject,
    version: TableVersion,
    now: SystemTime,
) -> Value {
    let meta = TableMeta {
        resource_version,
        ..TableMeta::default()
    };
    table_with(resource, items, &meta, include, version, now)
}

/// [`table`] with the rest of the list metadata (continue token, remaining item count) and
/// the choice to leave out the column definitions.
pub fn table_with(
    resource: &str,
    items: &[&Value],
    meta: &TableMeta<'_>,
    include: IncludeObject,
    version: TableVersion,
    now: SystemTime,
) -> Value {
    let now = nanos_since_epoch(now);
    let printer = Printer::for_resource(resource);
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let (cells, conditions) = printer.row(item, now);
            let mut row = Map::new();
            row.insert("cells".to_owned(), Value::Array(cells));
            if let Some(conditions) = conditions {
                row.insert("conditions".to_owned(), conditions);
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    let metadata = match item.get("metadata") {
                        Some(Value::Object(metadata)) => Value::Object(metadata.clone()),
                        _ => json!({}),
                    };
                    row.insert(
                        "object".to_owned(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": version.api_version(),
                            "metadata": metadata,
                        }),
                    );
                }
                IncludeObject::Object => {
                    row.insert("object".to_owned(), (*item).clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    let mut list_meta = Map::new();
    if !meta.resource_version.is_empty() {
        list_meta.insert(
            "resourceVersion".to_owned(),
            Value::String(meta.resource_version.to_owned()),
        );
    }
    if let Some(token) = meta.continue_token.filter(|token| !token.is_empty()) {
        list_meta.insert("continue".to_owned(), Value::String(token.to_owned()));
    }
    if let Some(count) = meta.remaining_item_count {
        list_meta.insert("remainingItemCount".to_owned(), Value::from(count));
    }
    let columns: Vec<Value> = if meta.no_headers {
        Vec::new()
    } else {
        printer.columns().iter().map(Column::to_json).collect()
    };
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

// ------------------------------------------------------------------------------------------
// Columns
// ------------------------------------------------------------------------------------------

/// One `TableColumnDefinition`.
struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i64,
}

impl Column {
    const fn new(name: &'static str, kind: &'static str, description: &'static str) -> Column {
        Column {
            name,
            kind,
            format: "",
            description,
            priority: 0,
        }
    }

    const fn wide(self) -> Column {
        Column {
            priority: 1,
            ..self
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATED_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: NAME_DOC,
    priority: 0,
};
const AGE: Column = Column::new("Age", "string", CREATED_DOC);

const POD_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Ready",
        "string",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    Column::new(
        "Status",
        "string",
        "The aggregate status of the containers in this pod.",
    ),
    Column::new(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    Column::new(
        "IP",
        "string",
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    )
    .wide(),
    Column::new(
        "Node",
        "string",
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.",
    )
    .wide(),
    Column::new(
        "Nominated Node",
        "string",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
    )
    .wide(),
    Column::new(
        "Readiness Gates",
        "string",
        "If specified, all readiness gates will be evaluated for pod readiness.",
    )
    .wide(),
];

const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Data",
        "string",
        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Type",
        "string",
        "Used to facilitate programmatic handling of secret data.",
    ),
    Column::new(
        "Data",
        "string",
        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Type",
        "string",
        "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer.",
    ),
    Column::new(
        "Cluster-IP",
        "string",
        "clusterIP is the IP address of the service and is usually assigned randomly.",
    ),
    Column::new(
        "External-IP",
        "string",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    Column::new(
        "Port(s)",
        "string",
        "The list of ports that are exposed by this service.",
    ),
    AGE,
    Column::new(
        "Selector",
        "string",
        "Route service traffic to pods with label keys and values matching this selector.",
    )
    .wide(),
];

const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Endpoints",
        "string",
        "The set of all endpoints is the union of all subsets.",
    ),
    AGE,
];

const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "AddressType",
        "string",
        "addressType specifies the type of address carried by this EndpointSlice.",
    ),
    Column::new(
        "Ports",
        "string",
        "ports specifies the list of network ports exposed by each endpoint in this slice.",
    ),
    Column::new(
        "Endpoints",
        "string",
        "endpoints is a list of unique endpoints in this slice.",
    ),
    AGE,
];

const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the node"),
    Column::new("Roles", "string", "The roles of the node"),
    AGE,
    Column::new(
        "Version",
        "string",
        "Kubelet Version reported by the node.",
    ),
    Column::new(
        "Internal-IP",
        "string",
        "List of addresses reachable to the node.",
    )
    .wide(),
    Column::new(
        "External-IP",
        "string",
        "List of addresses reachable to the node.",
    )
    .wide(),
    Column::new(
        "OS-Image",
        "string",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    )
    .wide(),
    Column::new(
        "Kernel-Version",
        "string",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    )
    .wide(),
    Column::new(
        "Container-Runtime",
        "string",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    )
    .wide(),
];

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Holder",
        "string",
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the namespace"),
    AGE,
];

const EVENT_COLUMNS: &[Column] = &[
    Column::new(
        "Last Seen",
        "string",
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    Column::new("Type", "string", "Type of this event (Normal, Warning)."),
    Column::new(
        "Reason",
        "string",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    Column::new(
        "Object",
        "string",
        "The object that this event is about.",
    ),
    Column::new(
        "Subobject",
        "string",
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
    )
    .wide(),
    Column::new(
        "Source",
        "string",
        "The component reporting this event. Should be a short machine understandable string.",
    )
    .wide(),
    Column::new(
        "Message",
        "string",
        "A human-readable description of the status of this operation.",
    ),
    Column::new(
        "First Seen",
        "string",
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    )
    .wide(),
    Column::new(
        "Count",
        "string",
        "The number of times this event has occurred.",
    )
    .wide(),
    Column {
        priority: 1,
        ..NAME
    },
];

const DEFAULT_COLUMNS: &[Column] = &[NAME, Column::new("Created At", "date", CREATED_DOC)];

// ------------------------------------------------------------------------------------------
// Printers
// ------------------------------------------------------------------------------------------

/// Which of kube-apiserver's printers a resource gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printer {
    Pod,
    ConfigMap,
    Secret,
    Service,
    Endpoints,
    EndpointSlice,
    Node,
    Lease,
    Namespace,
    Event,
    Default,
}

impl Printer {
    fn for_resource(resource: &str) -> Printer {
        match resource {
            "pods" => Printer::Pod,
            "configmaps" => Printer::ConfigMap,
            "secrets" => Printer::Secret,
            "services" => Printer::Service,
            "endpoints" => Printer::Endpoints,
            "endpointslices" => Printer::EndpointSlice,
            "nodes" => Printer::Node,
            "leases" => Printer::Lease,
            "namespaces" => Printer::Namespace,
            "events" => Printer::Event,
            _ => Printer::Default,
        }
    }

    fn columns(self) -> &'static [Column] {
        match self {
            Printer::Pod => POD_COLUMNS,
            Printer::ConfigMap => CONFIG_MAP_COLUMNS,
            Printer::Secret => SECRET_COLUMNS,
            Printer::Service => SERVICE_COLUMNS,
            Printer::Endpoints => ENDPOINTS_COLUMNS,
            Printer::EndpointSlice => ENDPOINT_SLICE_COLUMNS,
            Printer::Node => NODE_COLUMNS,
            Printer::Lease => LEASE_COLUMNS,
            Printer::Namespace => NAMESPACE_COLUMNS,
            Printer::Event => EVENT_COLUMNS,
            Printer::Default => DEFAULT_COLUMNS,
        }
    }

    /// The cells of one object's row, and the row's conditions when it has any.
    fn row(self, object: &Value, now: i128) -> (Vec<Value>, Option<Value>) {
        let name = Value::String(text(&object["metadata"]["name"]));
        let age = Value::String(age(&object["metadata"]["creationTimestamp"], now));
        match self {
            Printer::Pod => pod_row(object, now),
            Printer::ConfigMap => {
                let count = entries(&object["data"]) + entries(&object["binaryData"]);
                (vec![name, Value::from(count), age], None)
            }
            Printer::Secret => {
                let kind = Value::String(text(&object["type"]));
                (
                    vec![name, kind, Value::from(entries(&object["data"])), age],
                    None,
                )
            }
            Printer::Service => (service_row(object, name, age), None),
            Printer::Endpoints => {
                let endpoints = Value::String(format_endpoints(&object["subsets"]));
                (vec![name, endpoints, age], None)
            }
            Printer::EndpointSlice => {
                let address_type = Value::String(text(&object["addressType"]));
                let ports = Value::String(format_slice_ports(&object["ports"]));
                let endpoints = Value::String(format_slice_endpoints(&object["endpoints"]));
                (vec![name, address_type, ports, endpoints, age], None)
            }
            Printer::Node => (node_row(object, name, age), None),
            Printer::Lease => {
                let holder = Value::String(text(&object["spec"]["holderIdentity"]));
                (vec![name, holder, age], None)
            }
            Printer::Namespace => {
                let phase = Value::String(text(&object["status"]["phase"]));
                (vec![name, phase, age], None)
            }
            Printer::Event => (event_row(object, name, now), None),
            Printer::Default => {
                let created = parse_rfc3339_value(&object["metadata"]["creationTimestamp"])
                    .unwrap_or(GO_ZERO_TIME);
                (vec![name, Value::String(format_rfc3339(created))], None)
            }
        }
    }
}

/// A string field, `""` when absent or not a string.
fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_owned()
}

/// The number of entries of a JSON object (`data`, `binaryData`), 0 when absent.
fn entries(value: &Value) -> i64 {
    value
        .as_object()
        .map_or(0, |map| i64::try_from(map.len()).unwrap_or(i64::MAX))
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// `k=v,k=v` of a string map, keys sorted, `<none>` when empty (apimachinery's
/// `labels.FormatLabels`).
fn format_labels(value: &Value) -> String {
    let Some(map) = value.as_object() else {
        return "<none>".to_owned();
    };
    let mut pairs: Vec<String> = map
        .iter()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".to_owned()
    } else {
        pairs.join(",")
    }
}

/// `host:port`, with an IPv6 host in brackets (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

const POD_SUCCEEDED_CONDITION: &str = "The pod has completed successfully.";
const POD_FAILED_CONDITION: &str = "The pod failed.";

/// kube-apiserver's `printPod`: Ready, the Status reason, Restarts with the time of the last
/// restart, and the wide columns.
fn pod_row(pod: &Value, now: i128) -> (Vec<Value>, Option<Value>) {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let phase = text(&status["phase"]);
    let mut reason = phase.clone();
    if let Some(status_reason) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = status_reason.to_owned();
    }
    let conditions = array(&status["conditions"]);
    for condition in conditions {
        if condition["type"] == "PodScheduled" && condition["reason"] == "SchedulingGated" {
            reason = "SchedulingGated".to_owned();
        }
    }
    let row_conditions = match phase.as_str() {
        "Succeeded" => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Succeeded",
            "message": POD_SUCCEEDED_CONDITION,
        }])),
        "Failed" => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Failed",
            "message": POD_FAILED_CONDITION,
        }])),
        _ => None,
    };

    let init_specs = array(&spec["initContainers"]);
    let restartable = |name: &Value| {
        init_specs
            .iter()
            .any(|c| c["name"] == *name && c["restartPolicy"] == "Always")
    };
    let mut total = array(&spec["containers"]).len() as i64;
    total += init_specs
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count() as i64;
    let mut ready = 0_i64;
    let mut restarts = 0_i64;
    let mut sidecar_restarts = 0_i64;
    let mut last_restart: Option<i128> = None;
    let mut last_sidecar_restart: Option<i128> = None;

    let mut initializing = false;
    for (index, container) in array(&status["initContainerStatuses"]).iter().enumerate() {
        let count = container["restartCount"].as_i64().unwrap_or(0);
        restarts = restarts.saturating_add(count);
        let finished = finished_at(container);
        last_restart = later(last_restart, finished);
        let is_sidecar = restartable(&container["name"]);
        if is_sidecar {
            sidecar_restarts = sidecar_restarts.saturating_add(count);
            last_sidecar_restart = later(last_sidecar_restart, finished);
        }
        let terminated = &container["state"]["terminated"];
        let waiting_reason = container["state"]["waiting"]["reason"]
            .as_str()
            .unwrap_or("");
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if is_sidecar && container["started"].as_bool() == Some(true) {
            if container["ready"].as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        if terminated.is_object() {
            reason = match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(why) => format!("Init:{why}"),
                None => match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(signal) => format!("Init:Signal:{signal}"),
                    None => format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    ),
                },
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{index}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for container in array(&status["containerStatuses"]).iter().rev() {
            restarts = restarts.saturating_add(container["restartCount"].as_i64().unwrap_or(0));
            last_restart = later(last_restart, finished_at(container));
            let state = &container["state"];
            let waiting_reason = state["waiting"]["reason"].as_str().unwrap_or("");
            let terminated = &state["terminated"];
            let terminated_reason = terminated["reason"].as_str().unwrap_or("");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if terminated.is_object() && !terminated_reason.is_empty() {
                reason = terminated_reason.to_owned();
            } else if terminated.is_object() {
                reason = match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(signal) => format!("Signal:{signal}"),
                    None => format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0)),
                };
            } else if container["ready"].as_bool() == Some(true) && state["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }

    let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
    if deleting && status["reason"] == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_owned();
    }

    let restarts_cell = match last_restart {
        Some(when) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now - when)),
        _ => restarts.to_string(),
    };

    let mut ip = array(&status["podIPs"])
        .first()
        .map(|ip| text(&ip["ip"]))
        .unwrap_or_else(|| text(&status["podIP"]));
    if ip.is_empty() {
        ip = "<none>".to_owned();
    }
    let node = or_none(text(&spec["nodeName"]));
    let nominated = or_none(text(&status["nominatedNodeName"]));
    let gates = array(&spec["readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let met = gates
            .iter()
            .filter(|gate| {
                conditions
                    .iter()
                    .find(|c| c["type"] == gate["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };

    let cells = vec![
        Value::String(text(&pod["metadata"]["name"])),
        Value::String(format!("{ready}/{total}")),
        Value::String(reason),
        Value::String(restarts_cell),
        Value::String(age(&pod["metadata"]["creationTimestamp"], now)),
        Value::String(ip),
        Value::String(node),
        Value::String(nominated),
        Value::String(readiness_gates),
    ];
    (cells, row_conditions)
}

/// When a container's previous run ended (`lastState.terminated.finishedAt`), if it did.
fn finished_at(container: &Value) -> Option<i128> {
    parse_rfc3339_value(&container["lastState"]["terminated"]["finishedAt"])
        .filter(|when| *when != GO_ZERO_TIME)
}

fn later(a: Option<i128>, b: Option<i128>) -> Option<i128> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn or_none(value: String) -> String {
    if value.is_empty() {
        "<none>".to_owned()
    } else {
        value
    }
}

/// kube-apiserver's `printService`.
fn service_row(service: &Value, name: Value, age: Value) -> Vec<Value> {
    let spec = &service["spec"];
    // apiserver defaults the type to ClusterIP and ports' protocol to TCP; an object that
    // skipped defaulting prints as the apiserver would have stored it.
    let kind = spec["type"]
        .as_str()
        .filter(|t| !t.is_empty())
        .unwrap_or("ClusterIP");
    let cluster_ip = array(&spec["clusterIPs"])
        .first()
        .map(text)
        .filter(|ip| !ip.is_empty())
        .or_else(|| spec["clusterIP"].as_str().map(str::to_owned))
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| "<none>".to_owned());
    let external_ips: Vec<String> = array(&spec["externalIPs"]).iter().map(text).collect();
    let external = match kind {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_owned()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ingress: Vec<String> = array(&service["status"]["loadBalancer"]["ingress"])
                .iter()
                .filter_map(|entry| {
                    let ip = text(&entry["ip"]);
                    let host = text(&entry["hostname"]);
                    if !ip.is_empty() {
                        Some(ip)
                    } else if !host.is_empty() {
                        Some(host)
                    } else {
                        None
                    }
                })
                .collect();
            ingress.sort();
            ingress.dedup();
            if !external_ips.is_empty() {
                ingress.extend(external_ips);
                ingress.join(",")
            } else if !ingress.is_empty() {
                ingress.join(",")
            } else {
                "<pending>".to_owned()
            }
        }
        "ExternalName" => text(&spec["externalName"]),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = array(&spec["ports"])
        .iter()
        .map(|port| {
            let number = port["port"].as_i64().unwrap_or(0);
            let protocol = port["protocol"]
                .as_str()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            match port["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node_port) => format!("{number}:{node_port}/{protocol}"),
                None => format!("{number}/{protocol}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".to_owned()
    } else {
        ports.join(",")
    };
    vec![
        name,
        Value::String(kind.to_owned()),
        Value::String(cluster_ip),
        Value::String(external),
        Value::String(ports),
        age,
        Value::String(format_labels(&spec["selector"])),
    ]
}

/// kube-apiserver's `formatEndpoints`: up to three `ip:port`, then `+ N more...`.
fn format_endpoints(subsets: &Value) -> String {
    let subsets = array(subsets);
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0_usize;
    for subset in subsets {
        let addresses = array(&subset["addresses"]);
        let ports = array(&subset["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            for address in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(text(&address["ip"]));
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for address in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                let number = port["port"].as_i64().unwrap_or(0);
                list.push(join_host_port(&text(&address["ip"]), number));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count.saturating_sub(MAX))
    } else {
        joined
    }
}

/// `a,b,c + N more...`, or `<unset>` for nothing (kube-apiserver's `listWithMoreString`).
fn list_with_more(items: Vec<String>) -> String {
    const MAX: usize = 3;
    let count = items.len();
    let shown: Vec<String> = items.into_iter().take(MAX).collect();
    let joined = shown.join(",");
    if count > MAX {
        format!("{joined} + {} more...", count - MAX)
    } else if joined.is_empty() {
        "<unset>".to_owned()
    } else {
        joined
    }
}

fn format_slice_ports(ports: &Value) -> String {
    let ports = array(ports)
        .iter()
        .map(
            |port| match (port["port"].as_i64(), port["name"].as_str()) {
                (Some(number), _) => number.to_string(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => "*".to_owned(),
            },
        )
        .collect();
    list_with_more(ports)
}

fn format_slice_endpoints(endpoints: &Value) -> String {
    let addresses = array(endpoints)
        .iter()
        .flat_map(|endpoint| array(&endpoint["addresses"]).iter().map(text))
        .collect();
    list_with_more(addresses)
}

/// kube-apiserver's `printNode`.
fn node_row(node: &Value, name: Value, age: Value) -> Vec<Value> {
    let status = &node["status"];
    let mut states = Vec::new();
    // The last Ready condition wins, as it does in apiserver's condition map.
    if let Some(ready) = array(&status["conditions"])
        .iter()
        .rev()
        .find(|c| c["type"] == "Ready")
    {
        states.push(if ready["status"] == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    }
    if states.is_empty() {
        states.push("Unknown");
    }
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        states.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = node["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            let role = match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) => role,
                None if key == "kubernetes.io/role" => value.as_str().unwrap_or(""),
                None => "",
            };
            if !role.is_empty() {
                roles.push(role.to_owned());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    };
    let info = &status["nodeInfo"];
    let address = |kind: &str| {
        array(&status["addresses"])
            .iter()
            .find(|a| a["type"] == kind)
            .map(|a| text(&a["address"]))
            .unwrap_or_else(|| "<none>".to_owned())
    };
    let unknown = |value: &Value| {
        let value = text(value);
        if value.is_empty() {
            "<unknown>".to_owned()
        } else {
            value
        }
    };
    vec![
        name,
        Value::String(states.join(",")),
        Value::String(roles),
        age,
        Value::String(text(&info["kubeletVersion"])),
        Value::String(address("InternalIP")),
        Value::String(address("ExternalIP")),
        Value::String(unknown(&info["osImage"])),
        Value::String(unknown(&info["kernelVersion"])),
        Value::String(unknown(&info["containerRuntimeVersion"])),
    ]
}

/// kube-apiserver's `printEvent` (wide form).
fn event_row(event: &Value, name: Value, now: i128) -> Vec<Value> {
    let first_seen = if timestamp_is_zero(&event["firstTimestamp"]) {
        age(&event["eventTime"], now)
    } else {
        age(&event["firstTimestamp"], now)
    };
    let mut last_seen = if timestamp_is_zero(&event["lastTimestamp"]) {
        first_seen.clone()
    } else {
        age(&event["lastTimestamp"], now)
    };
    let mut count = event["count"].as_i64().unwrap_or(0);
    let series = &event["series"];
    if series.is_object() {
        last_seen = age(&series["lastObservedTime"], now);
        count = series["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &event["involvedObject"];
    let kind = text(&involved["kind"]).to_lowercase();
    let involved_name = text(&involved["name"]);
    let target = if involved_name.is_empty() {
        kind
    } else {
        format!("{kind}/{involved_name}")
    };
    let component = non_empty_or(
        text(&event["source"]["component"]),
        text(&event["reportingComponent"]),
    );
    let instance = non_empty_or(
        text(&event["source"]["host"]),
        text(&event["reportingInstance"]),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        Value::String(last_seen),
        Value::String(text(&event["type"])),
        Value::String(text(&event["reason"])),
        Value::String(target),
        Value::String(text(&involved["fieldPath"])),
        Value::String(source),
        Value::String(text(&event["message"]).trim().to_owned()),
        Value::String(first_seen),
        Value::from(count),
        name,
    ]
}

fn non_empty_or(first: String, second: String) -> String {
    if first.is_empty() { second } else { first }
}

// ------------------------------------------------------------------------------------------
// Time
// ------------------------------------------------------------------------------------------

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in nanoseconds since the Unix epoch: what an
/// unset `metav1.Time` is, and what apiserver prints for it in RFC 3339.
const GO_ZERO_TIME: i128 = -62_135_596_800 * NANOS_PER_SECOND;

fn nanos_since_epoch(time: SystemTime) -> i128 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX / 2),
        Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX / 2),
    }
}

/// Whether a `metav1.Time` field is unset (absent, null, empty, or Go's zero time).
fn timestamp_is_zero(value: &Value) -> bool {
    parse_rfc3339_value(value).is_none_or(|when| when == GO_ZERO_TIME)
}

/// The age of a timestamp as kube-apiserver's `translateTimestampSince` prints it, or
/// `<unknown>` when unset.
fn age(value: &Value, now: i128) -> String {
    match parse_rfc3339_value(value) {
        Some(when) if when != GO_ZERO_TIME => human_duration(now - when),
        _ => "<unknown>".to_owned(),
    }
}

fn parse_rfc3339_value(value: &Value) -> Option<i128> {
    value.as_str().and_then(parse_rfc3339)
}

/// apimachinery's `duration.HumanDuration`: `45s`, `3m20s`, `15m`, `5h12m`, `9h`, `2d3h`,
/// `30d`, `2y10d`, `9y`; up to a second in the future reads `0s`, further `<invalid>`.
fn human_duration(nanos: i128) -> String {
    let seconds = nanos / NANOS_PER_SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    } else if seconds < 0 {
        return "0s".to_owned();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / (60 * NANOS_PER_SECOND);
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / (3600 * NANOS_PER_SECOND);
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day number since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Nanoseconds since the Unix epoch of an RFC 3339 timestamp (`2024-05-01T10:00:00Z`,
/// `2024-05-01T10:00:00.123456Z`, `2024-05-01T12:00:00+02:00`), as `metav1.Time` and
/// `metav1.MicroTime` are written; `None` for anything else.
fn parse_rfc3339(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let slice = bytes.get(range)?;
        if slice.is_empty() || !slice.iter().all(u8::is_ascii_digit) {
            return None;
        }
        slice.iter().try_fold(0_i64, |n, b| {
            n.checked_mul(10)?.checked_add(i64::from(b - b'0'))
        })
    };
    let separator = |at: usize, allowed: &[u8]| bytes.get(at).is_some_and(|b| allowed.contains(b));
    if !(separator(4, b"-")
        && separator(7, b"-")
        && separator(10, b"Tt ")
        && separator(13, b":")
        && separator(16, b":"))
    {
        return None;
    }
    let year = digits(0..4)?;
    let month = digits(5..7)?;
    let day = digits(8..10)?;
    let hour = digits(11..13)?;
    let minute = digits(14..16)?;
    let second = digits(17..19)?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut at = 19;
    let mut fraction: i128 = 0;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        let places = at - start;
        if places == 0 {
            return None;
        }
        for (i, b) in bytes[start..at].iter().enumerate() {
            if i < 9 {
                fraction = fraction * 10 + i128::from(b - b'0');
            }
        }
        for _ in places..9 {
            fraction *= 10;
        }
    }
    let offset_seconds: i64 = match bytes.get(at) {
        Some(b'Z' | b'z') if at + 1 == bytes.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == bytes.len() && separator(at + 3, b":") => {
            let hours = digits(at + 1..at + 3)?;
            let minutes = digits(at + 4..at + 6)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    Some(i128::from(seconds) * NANOS_PER_SECOND + fraction)
}

/// `2024-05-01T10:00:00Z`: Go's `Time.UTC().Format(time.RFC3339)` of whole seconds.
fn format_rfc3339(nanos: i128) -> String {
    let seconds = nanos.div_euclid(NANOS_PER_SECOND);
    let seconds = i64::try_from(seconds).unwrap_or(0);
    let days = seconds.div_euclid(86_400);
    let in_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        (in_day % 3600) / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// 2024-05-01T12:00:00Z, the clock of every test.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_564_800)
    }

    fn rows(resource: &str, items: &[&Value]) -> Vec<Vec<Value>> {
        let table = table(
            resource,
            items,
            "42",
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        table["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| row["cells"].as_array().expect("cells").clone())
            .collect()
    }

    fn row(resource: &str, item: &Value) -> Vec<Value> {
        rows(resource, &[item]).remove(0)
    }

    fn column_names(resource: &str) -> Vec<(String, i64)> {
        let table = table(
            resource,
            &[],
            "1",
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        table["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().expect("name").to_owned(),
                    c["priority"].as_i64().expect("priority"),
                )
            })
            .collect()
    }

    #[test]
    fn accept_headers() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(kubectl), Some(TableVersion::V1));
        assert_eq!(
            wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json"),
            Some(TableVersion::V1Beta1)
        );
        assert_eq!(wants_table("application/json"), None);
        assert_eq!(wants_table(""), None);
        assert_eq!(wants_table("*/*"), None);
        assert_eq!(
            wants_table("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"),
            None
        );
        assert_eq!(
            wants_table("application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io"),
            Some(TableVersion::V1)
        );
        assert_eq!(
            wants_table("application/json;as=Table;v=v1;g=meta.k8s.io;q=0, application/json"),
            None
        );
        assert_eq!(
            wants_table(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io"
            ),
            Some(TableVersion::V1Beta1)
        );
        assert_eq!(wants_table("application/json;as=Table"), None);
        assert_eq!(
            wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"),
            None
        );
        assert_eq!(
            wants_table("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
            None
        );
        assert_eq!(
            wants_table("Application/JSON; as=Table; v=v1; g=meta.k8s.io"),
            Some(TableVersion::V1)
        );
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("")), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Ok(IncludeObject::Object)
        );
        let error = IncludeObject::parse(Some("object")).expect_err("case-sensitive");
        assert_eq!(
            error.to_string(),
            "includeObject: Unsupported value: \"object\": supported values: \"Metadata\", \"None\", \"Object\""
        );
    }

    fn running_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-7d4b9c-x2x", "namespace": "default", "uid": "9a1",
                "resourceVersion": "1234", "labels": {"app": "web"},
                "creationTimestamp": "2024-05-01T11:59:15Z"
            },
            "spec": {
                "nodeName": "edge-node-1",
                "containers": [{"name": "web", "image": "nginx"}, {"name": "log", "image": "busybox"}]
            },
            "status": {
                "phase": "Running",
                "podIP": "10.244.1.5",
                "podIPs": [{"ip": "10.244.1.5"}],
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {"name": "web", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2024-05-01T11:59:20Z"}}},
                    {"name": "log", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]
            }
        })
    }

    #[test]
    fn table_shape_and_include_object() {
        let pod = running_pod();
        let metadata = table(
            "pods",
            &[&pod],
            "1234",
            IncludeObject::Metadata,
            TableVersion::V1,
            now(),
        );
        assert_eq!(metadata["kind"], "Table");
        assert_eq!(metadata["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(metadata["metadata"], json!({"resourceVersion": "1234"}));
        let first = &metadata["rows"][0];
        assert_eq!(first["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(first["object"]["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(first["object"]["metadata"], pod["metadata"]);
        assert!(first.get("conditions").is_none());
        let column = &metadata["columnDefinitions"][0];
        assert_eq!(column["name"], "Name");
        assert_eq!(column["type"], "string");
        assert_eq!(column["format"], "name");
        assert_eq!(column["priority"], 0);
        assert!(
            column["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty())
        );

        let object = table(
            "pods",
            &[&pod],
            "1234",
            IncludeObject::Object,
            TableVersion::V1Beta1,
            now(),
        );
        assert_eq!(object["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(object["rows"][0]["object"], pod);

        let none = table(
            "pods",
            &[&pod],
            "",
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        assert!(none["rows"][0].get("object").is_none());
        assert_eq!(none["metadata"], json!({}));

        let page = table_with(
            "pods",
            &[],
            &TableMeta {
                resource_version: "9",
                continue_token: Some("abc"),
                remaining_item_count: Some(3),
                no_headers: true,
            },
            IncludeObject::Metadata,
            TableVersion::V1,
            now(),
        );
        assert_eq!(
            page["metadata"],
            json!({"resourceVersion": "9", "continue": "abc", "remainingItemCount": 3})
        );
        assert_eq!(page["columnDefinitions"], json!([]));
        assert_eq!(page["rows"], json!([]));
    }

    #[test]
    fn pod_columns() {
        assert_eq!(
            column_names("pods"),
            [
                ("Name", 0),
                ("Ready", 0),
                ("Status", 0),
                ("Restarts", 0),
                ("Age", 0),
                ("IP", 1),
                ("Node", 1),
                ("Nominated Node", 1),
                ("Readiness Gates", 1)
            ]
            .map(|(n, p)| (n.to_owned(), p))
        );
    }

    #[test]
    fn running_pod_row() {
        let cells = row("pods", &running_pod());
        assert_eq!(
            cells,
            vec![
                json!("web-7d4b9c-x2x"),
                json!("1/2"),
                json!("ContainerCreating"),
                json!("0"),
                json!("45s"),
                json!("10.244.1.5"),
                json!("edge-node-1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn crash_loop_pod() {
        let pod = json!({
            "metadata": {"name": "mqtt-0", "namespace": "iot", "creationTimestamp": "2024-05-01T07:00:00Z"},
            "spec": {"nodeName": "edge-node-1", "containers": [{"name": "mqtt"}],
                     "readinessGates": [{"conditionType": "example.com/ready"}]},
            "status": {
                "phase": "Running",
                "podIPs": [{"ip": "fd00::7"}, {"ip": "10.0.0.7"}],
                "conditions": [{"type": "example.com/ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "mqtt", "ready": false, "restartCount": 5,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2m40s"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                 "finishedAt": "2024-05-01T11:57:00Z"}}
                }]
            }
        });
        let cells = row("pods", &pod);
        assert_eq!(cells[1], "0/1");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "5 (3m ago)");
        assert_eq!(cells[4], "5h");
        assert_eq!(cells[5], "fd00::7");
        assert_eq!(cells[8], "1/1");
    }

    #[test]
    fn terminating_and_node_lost_pods() {
        let mut pod = running_pod();
        pod["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:50Z");
        assert_eq!(row("pods", &pod)[2], "Terminating");
        pod["status"]["reason"] = json!("NodeLost");
        assert_eq!(row("pods", &pod)[2], "Unknown");
        let mut finished = running_pod();
        finished["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:50Z");
        finished["status"]["phase"] = json!("Succeeded");
        finished["status"]["containerStatuses"] = json!([
            {"name": "web", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        ]);
        let table = table(
            "pods",
            &[&finished],
            "1",
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        assert_eq!(table["rows"][0]["cells"][2], "Completed");
        assert_eq!(table["rows"][0]["conditions"][0]["type"], "Completed");
        assert_eq!(table["rows"][0]["conditions"][0]["reason"], "Succeeded");
    }

    fn init_pod(init_statuses: Value, conditions: Value) -> Value {
        json!({
            "metadata": {"name": "app", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "spec": {
                "initContainers": [{"name": "migrate"}, {"name": "seed"}],
                "containers": [{"name": "app"}]
            },
            "status": {
                "phase": "Pending",
                "conditions": conditions,
                "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
                                        "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        })
    }

    #[test]
    fn init_container_pods() {
        let first_done = init_pod(
            json!([
                {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "seed", "restartCount": 0, "state": {"running": {}}}
            ]),
            json!([{"type": "Initialized", "status": "False"}]),
        );
        let cells = row("pods", &first_done);
        assert_eq!(cells[1], "0/1");
        assert_eq!(cells[2], "Init:1/2");
        assert_eq!(cells[4], "60m");

        let failing = init_pod(
            json!([
                {"name": "migrate", "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 2, "finishedAt": "2024-05-01T11:58:30Z"}}},
                {"name": "seed", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
            ]),
            json!([]),
        );
        let cells = row("pods", &failing);
        assert_eq!(cells[2], "Init:CrashLoopBackOff");
        assert_eq!(cells[3], "3 (90s ago)");

        let exited = init_pod(
            json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 7}}}]),
            json!([]),
        );
        assert_eq!(row("pods", &exited)[2], "Init:ExitCode:7");
        let signalled = init_pod(
            json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}]),
            json!([]),
        );
        assert_eq!(row("pods", &signalled)[2], "Init:Signal:9");
        let reasoned = init_pod(
            json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
            json!([]),
        );
        assert_eq!(row("pods", &reasoned)[2], "Init:Error");
        let not_started = init_pod(
            json!([{"name": "migrate", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]),
            json!([]),
        );
        assert_eq!(row("pods", &not_started)[2], "Init:0/2");
    }

    #[test]
    fn sidecar_and_completed_pods() {
        let pod = json!({
            "metadata": {"name": "job", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "spec": {
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "main"}, {"name": "helper"}]
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "False"}],
                "initContainerStatuses": [{"name": "proxy", "ready": true, "started": true, "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-05-01T11:30:00Z"}}}],
                "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "helper", "ready": true, "restartCount": 0, "state": {"running": {}}}
                ]
            }
        });
        let cells = row("pods", &pod);
        assert_eq!(cells[1], "2/3");
        assert_eq!(cells[2], "NotReady");
        assert_eq!(cells[3], "2 (30m ago)");
        let gated = json!({
            "metadata": {"name": "g"},
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "x"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}
        });
        let cells = row("pods", &gated);
        assert_eq!(cells[2], "SchedulingGated");
        assert_eq!(cells[4], "<unknown>");
        assert_eq!(cells[5], "<none>");
        assert_eq!(cells[6], "<none>");
        let exited = json!({
            "metadata": {"name": "e"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}
            ]}
        });
        assert_eq!(row("pods", &exited)[2], "ExitCode:3");
    }

    #[test]
    fn config_maps_and_secrets() {
        assert_eq!(
            column_names("configmaps"),
            [("Name", 0), ("Data", 0), ("Age", 0)].map(|(n, p)| (n.to_owned(), p))
        );
        let config = json!({
            "metadata": {"name": "kube-root-ca.crt", "creationTimestamp": "2024-04-29T09:00:00Z"},
            "data": {"ca.crt": "..."}, "binaryData": {"blob": "AA=="}
        });
        assert_eq!(
            row("configmaps", &config),
            vec![json!("kube-root-ca.crt"), json!(2), json!("2d3h")]
        );
        let secret = json!({
            "metadata": {"name": "tls", "creationTimestamp": "2024-03-01T12:00:00Z"},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}
        });
        assert_eq!(
            row("secrets", &secret),
            vec![
                json!("tls"),
                json!("kubernetes.io/tls"),
                json!(2),
                json!("61d")
            ]
        );
        assert_eq!(column_names("secrets").len(), 4, "Name, Type, Data, Age");
    }

    #[test]
    fn services() {
        let cluster = json!({
            "metadata": {"name": "kube-dns", "creationTimestamp": "2022-05-01T12:00:00Z"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "selector": {"k8s-app": "kube-dns", "a": "b"},
                     "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}, {"port": 9153}]}
        });
        assert_eq!(
            row("services", &cluster),
            vec![
                json!("kube-dns"),
                json!("ClusterIP"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("53/UDP,53/TCP,9153/TCP"),
                json!("2y1d"),
                json!("a=b,k8s-app=kube-dns")
            ]
        );
        let node_port = json!({
            "metadata": {"name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.1.1", "externalIPs": ["192.168.1.10"],
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}
        });
        let cells = row("services", &node_port);
        assert_eq!(cells[3], "192.168.1.10");
        assert_eq!(cells[4], "80:30080/TCP");
        assert_eq!(cells[6], "<none>");
        let balancer = json!({
            "metadata": {"name": "lb"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.2.2", "ports": []},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "a.example.com"}]}}
        });
        let cells = row("services", &balancer);
        assert_eq!(cells[3], "203.0.113.9,a.example.com");
        assert_eq!(cells[4], "<none>");
        let pending = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}});
        assert_eq!(row("services", &pending)[3], "<pending>");
        let headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        let cells = row("services", &headless);
        assert_eq!(cells[1], "ClusterIP");
        assert_eq!(cells[2], "None");
        let external = json!({"metadata": {"name": "x"}, "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        let cells = row("services", &external);
        assert_eq!(cells[2], "<none>");
        assert_eq!(cells[3], "db.example.com");
    }

    #[test]
    fn endpoints_and_slices() {
        let endpoints = json!({
            "metadata": {"name": "web", "creationTimestamp": "2024-05-01T11:50:00Z"},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]},
                {"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 8080}]}
            ]
        });
        assert_eq!(
            row("endpoints", &endpoints),
            vec![
                json!("web"),
                json!("10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more..."),
                json!("10m")
            ]
        );
        let headless =
            json!({"metadata": {"name": "h"}, "subsets": [{"addresses": [{"ip": "10.0.0.3"}]}]});
        assert_eq!(row("endpoints", &headless)[1], "10.0.0.3");
        let ipv6 = json!({"metadata": {"name": "v6"}, "subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]});
        assert_eq!(row("endpoints", &ipv6)[1], "[fd00::1]:80");
        assert_eq!(
            row("endpoints", &json!({"metadata": {"name": "e"}}))[1],
            "<none>"
        );

        let slice = json!({
            "metadata": {"name": "web-abcde", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "named"}, {}, {"port": 9}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}]
        });
        assert_eq!(
            row("endpointslices", &slice),
            vec![
                json!("web-abcde"),
                json!("IPv4"),
                json!("80,named,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3"),
                json!("60m")
            ]
        );
        let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv6"});
        let cells = row("endpointslices", &empty);
        assert_eq!(cells[2], "<unset>");
        assert_eq!(cells[3], "<unset>");
    }

    #[test]
    fn nodes() {
        assert_eq!(column_names("nodes").len(), 10);
        let node = json!({
            "metadata": {
                "name": "edge-node-1", "creationTimestamp": "2024-04-20T12:00:00Z",
                "labels": {"node-role.kubernetes.io/edge": "", "node-role.kubernetes.io/agent": "",
                           "kubernetes.io/role": "worker", "node-role.kubernetes.io/": "x"}
            },
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "edge-node-1"}, {"type": "InternalIP", "address": "192.168.1.20"}],
                "nodeInfo": {"kubeletVersion": "v1.31.0-kubeedge-v1.23.0", "osImage": "Ubuntu 24.04 LTS",
                             "kernelVersion": "6.8.0", "containerRuntimeVersion": "containerd://1.7.2"}
            }
        });
        assert_eq!(
            row("nodes", &node),
            vec![
                json!("edge-node-1"),
                json!("Ready,SchedulingDisabled"),
                json!("agent,edge,worker"),
                json!("11d"),
                json!("v1.31.0-kubeedge-v1.23.0"),
                json!("192.168.1.20"),
                json!("<none>"),
                json!("Ubuntu 24.04 LTS"),
                json!("6.8.0"),
                json!("containerd://1.7.2")
            ]
        );
        let bare = json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        let cells = row("nodes", &bare);
        assert_eq!(cells[1], "NotReady");
        assert_eq!(cells[2], "<none>");
        assert_eq!(cells[7], "<unknown>");
        assert_eq!(
            row("nodes", &json!({"metadata": {"name": "n"}}))[1],
            "Unknown"
        );
    }

    #[test]
    fn leases_namespaces_events() {
        let lease = json!({
            "metadata": {"name": "edge-node-1", "namespace": "kube-node-lease", "creationTimestamp": "2024-05-01T04:00:00Z"},
            "spec": {"holderIdentity": "edge-node-1", "leaseDurationSeconds": 40}
        });
        assert_eq!(
            row("leases", &lease),
            vec![json!("edge-node-1"), json!("edge-node-1"), json!("8h")]
        );
        assert_eq!(row("leases", &json!({"metadata": {"name": "l"}}))[1], "");
        let namespace = json!({"metadata": {"name": "kubeedge", "creationTimestamp": "2024-05-01T08:30:00Z"}, "status": {"phase": "Active"}});
        assert_eq!(
            row("namespaces", &namespace),
            vec![json!("kubeedge"), json!("Active"), json!("3h30m")]
        );

        assert_eq!(
            column_names("events")
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        let event = json!({
            "metadata": {"name": "mqtt-0.17c8", "namespace": "iot"},
            "involvedObject": {"kind": "Pod", "name": "mqtt-0", "fieldPath": "spec.containers{mqtt}"},
            "reason": "BackOff", "type": "Warning", "message": "Back-off restarting failed container\n",
            "source": {"component": "kubelet", "host": "edge-node-1"},
            "firstTimestamp": "2024-05-01T11:00:00Z", "lastTimestamp": "2024-05-01T11:58:00Z", "count": 12
        });
        assert_eq!(
            row("events", &event),
            vec![
                json!("2m"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/mqtt-0"),
                json!("spec.containers{mqtt}"),
                json!("kubelet, edge-node-1"),
                json!("Back-off restarting failed container"),
                json!("60m"),
                json!(12),
                json!("mqtt-0.17c8")
            ]
        );
        let new_style = json!({
            "metadata": {"name": "n"},
            "involvedObject": {"kind": "Node"},
            "eventTime": "2024-05-01T11:59:30.123456Z",
            "reportingComponent": "edgecore", "reportingInstance": "edge-node-1",
            "series": {"count": 4, "lastObservedTime": "2024-05-01T11:59:50.000000Z"}
        });
        let cells = row("events", &new_style);
        assert_eq!(cells[0], "10s");
        assert_eq!(cells[3], "node");
        assert_eq!(cells[5], "edgecore, edge-node-1");
        assert_eq!(cells[7], "29s");
        assert_eq!(cells[8], 4);
        let singleton =
            json!({"metadata": {"name": "s"}, "involvedObject": {}, "source": {"component": "c"}});
        let cells = row("events", &singleton);
        assert_eq!(cells[0], "<unknown>");
        assert_eq!(cells[5], "c");
        assert_eq!(cells[8], 1);
    }

    #[test]
    fn default_columns() {
        let table = table(
            "devices",
            &[],
            "1",
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        let columns = table["columnDefinitions"].as_array().expect("columns");
        assert_eq!(columns.len(), 2);
        assert_eq!(columns[1]["name"], "Created At");
        assert_eq!(columns[1]["type"], "date");
        let device = json!({"metadata": {"name": "thermometer", "creationTimestamp": "2024-02-29T23:59:59+01:00"}});
        assert_eq!(
            row("devices", &device),
            vec![json!("thermometer"), json!("2024-02-29T22:59:59Z")]
        );
        assert_eq!(
            row("devices", &json!({"metadata": {"name": "x"}})),
            vec![json!("x"), json!("0001-01-01T00:00:00Z")]
        );
    }

    #[test]
    fn human_durations() {
        let s = |seconds: i128| human_duration(seconds * NANOS_PER_SECOND);
        assert_eq!(s(-5), "<invalid>");
        assert_eq!(human_duration(-NANOS_PER_SECOND / 2), "0s");
        assert_eq!(s(-1), "0s");
        assert_eq!(s(0), "0s");
        assert_eq!(s(45), "45s");
        assert_eq!(s(119), "119s");
        assert_eq!(s(120), "2m");
        assert_eq!(s(200), "3m20s");
        assert_eq!(s(600), "10m");
        assert_eq!(s(179 * 60), "179m");
        assert_eq!(s(3 * 3600), "3h");
        assert_eq!(s(5 * 3600 + 12 * 60), "5h12m");
        assert_eq!(s(9 * 3600), "9h");
        assert_eq!(s(47 * 3600), "47h");
        assert_eq!(s(51 * 3600), "2d3h");
        assert_eq!(s(72 * 3600), "3d");
        assert_eq!(s(30 * 86_400), "30d");
        assert_eq!(s(729 * 86_400), "729d");
        assert_eq!(s(740 * 86_400), "2y10d");
        assert_eq!(s(730 * 86_400), "2y");
        assert_eq!(s(9 * 365 * 86_400), "9y");
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00Z"),
            Some(1_714_564_800 * NANOS_PER_SECOND)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800 * NANOS_PER_SECOND)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.5Z"),
            Some(1_714_564_800 * NANOS_PER_SECOND + 500_000_000)
        );
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(GO_ZERO_TIME));
        for bad in [
            "",
            "2024",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00+0200",
            "2024-05-01T12:00:00Zjunk",
            "２０２４-05-01T12:00:00Z",
            "2024-05-01T12:00:60Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(GO_ZERO_TIME), "0001-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(parse_rfc3339("2000-02-29T23:59:59.999Z").expect("parses")),
            "2000-02-29T23:59:59Z"
        );
        let before_epoch = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(nanos_since_epoch(before_epoch), -10 * NANOS_PER_SECOND);
    }

    #[test]
    fn printers_never_panic() {
        let odd = [
            json!(null),
            json!(5),
            json!("pod"),
            json!([]),
            json!({}),
            json!({"metadata": []}),
            json!({"metadata": {"name": 5, "creationTimestamp": "garbage", "deletionTimestamp": 1}}),
            json!({"spec": {"containers": 3, "initContainers": [null, 5]},
                   "status": {"initContainerStatuses": [null, {"state": 7}, {"restartCount": "x"}],
                              "containerStatuses": [{"restartCount": i64::MAX, "lastState": {"terminated": {"finishedAt": "9999-12-31T23:59:59Z"}}},
                                                    {"restartCount": i64::MAX}],
                              "podIPs": [5], "conditions": "no"}}),
            json!({"subsets": [{"addresses": [1, {"ip": 2}], "ports": [{"port": "x"}]}], "ports": [null], "endpoints": [{"addresses": [null]}]}),
            json!({"spec": {"type": "LoadBalancer", "ports": [{}], "selector": {"a": 1}},
                   "status": {"loadBalancer": {"ingress": [{}]}, "conditions": [5]}}),
            json!({"metadata": {"creationTimestamp": "0001-01-01T00:00:00Z", "labels": {"node-role.kubernetes.io/": 1}}}),
            json!({"series": {}, "count": -3, "involvedObject": 4, "metadata": {"creationTimestamp": "1969-12-31T23:59:59Z"}}),
        ];
        let resources = [
            "pods",
            "configmaps",
            "secrets",
            "services",
            "endpoints",
            "endpointslices",
            "nodes",
            "leases",
            "namespaces",
            "events",
            "widgets",
        ];
        for resource in resources {
            let items: Vec<&Value> = odd.iter().collect();
            for include in [
                IncludeObject::None,
                IncludeObject::Metadata,
                IncludeObject::Object,
            ] {
                for clock in [UNIX_EPOCH, now(), UNIX_EPOCH - Duration::from_secs(1 << 40)] {
                    let table = table(resource, &items, "7", include, TableVersion::V1, clock);
                    let rows = table["rows"].as_array().expect("rows");
                    assert_eq!(rows.len(), odd.len());
                    let width = table["columnDefinitions"]
                        .as_array()
                        .expect("columns")
                        .len();
                    for row in rows {
                        assert_eq!(
                            row["cells"].as_array().expect("cells").len(),
                            width,
                            "{resource}"
                        );
                    }
                }
            }
        }
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let alphabet = b"0123456789-:.TZz+ ;=,aAs/*\"qjvgt";
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let length = (state % 40) as usize;
            let mut s = state;
            let text: String = (0..length)
                .map(|_| {
                    let c = alphabet[(s % alphabet.len() as u64) as usize] as char;
                    s = s.rotate_left(5).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    c
                })
                .collect();
            let _ = parse_rfc3339(&text);
            let _ = wants_table(&text);
            let _ = IncludeObject::parse(Some(&text));
        }
        assert_eq!(
            human_duration(i128::MAX),
            format!("{}y", i128::MAX / (3600 * NANOS_PER_SECOND) / 24 / 365)
        );
        assert_eq!(human_duration(i128::MIN), "<invalid>");
    }
}
