//! KubeEdge's module, group and operation names, so no module spells them by hand.

/// Module names as registered on the bus.
pub mod module {
    /// EdgeHub, the cloud link (KubeEdge registers it as `websocket`).
    pub const EDGEHUB: &str = "websocket";
    /// The metadata store.
    pub const METAMANAGER: &str = "metamanager";
    /// Devices and twins.
    pub const TWIN: &str = "twin";
    /// MQTT bridge.
    pub const EVENTBUS: &str = "eventbus";
    /// HTTP bridge.
    pub const SERVICEBUS: &str = "servicebus";
    /// Pods.
    pub const EDGED: &str = "edged";
    /// Streaming (logs/exec) tunnel.
    pub const EDGESTREAM: &str = "edgestream";
    /// Node tasks (upgrade, image pre-pull).
    pub const TASKMANAGER: &str = "taskmanager";
    /// DMI, KubeEdge's gRPC device API for mappers (edgecore serves it from its devicetwin;
    /// Wedge runs it as a module of its own and hands reports to devicetwin on the bus).
    pub const DMI: &str = "dmi";
    /// MetaServer, the node's local Kubernetes API (fed by metamanager's changes).
    pub const METASERVER: &str = "metaserver";
    /// Source name EdgeHub uses for the connection broadcast.
    pub const EDGEHUB_SOURCE: &str = "edgehub";
    /// Cloud-side sources, seen in route.source of inbound messages.
    pub const EDGECONTROLLER: &str = "edgecontroller";
    /// Cloud-side device controller.
    pub const DEVICECONTROLLER: &str = "devicecontroller";
    /// Cloud-side dynamic controller (list/watch for edge clients).
    pub const DYNAMICCONTROLLER: &str = "dynamiccontroller";
    /// Cloud-side policy controller.
    pub const POLICYCONTROLLER: &str = "policycontroller";
}

/// Group names: modules are reachable by group as well as by name.
pub mod group {
    /// EdgeHub's group.
    pub const HUB: &str = "hub";
    /// MetaManager's group.
    pub const META: &str = "meta";
    /// DeviceTwin's group.
    pub const TWIN: &str = "twin";
    /// EventBus and ServiceBus.
    pub const BUS: &str = "bus";
    /// EdgeD's group.
    pub const EDGED: &str = "edged";
    /// Cloud group of resource traffic.
    pub const RESOURCE: &str = "resource";
    /// Cloud group of function traffic.
    pub const FUNC: &str = "func";
    /// Cloud group of user (MQTT upload) traffic.
    pub const USER: &str = "user";
    /// Task manager group.
    pub const TASKMANAGER: &str = "taskmanager";
    /// MetaServer's group: it takes the connection broadcast and metamanager's change feed.
    pub const METASERVER: &str = "metaserver";
}

/// Operation names.
pub mod operation {
    /// Store a resource.
    pub const INSERT: &str = "insert";
    /// Replace a resource.
    pub const UPDATE: &str = "update";
    /// Merge-patch a resource through the cloud.
    pub const PATCH: &str = "patch";
    /// Remove a resource.
    pub const DELETE: &str = "delete";
    /// Read a resource or a list.
    pub const QUERY: &str = "query";
    /// A reply, or a pushed resource without a request.
    pub const RESPONSE: &str = "response";
    /// An error reply.
    pub const ERROR: &str = "error";
    /// Cloud connection state broadcast.
    pub const CONNECT: &str = "connect";
    /// Link keepalive.
    pub const KEEPALIVE: &str = "keepalive";
    /// Cloud link control messages, answered with `"ack"`.
    pub const PING: &str = "ping";
    /// Cloud link control message.
    pub const PONG: &str = "pong";
    /// Cloud link control message.
    pub const CONFIG: &str = "config";
    /// MQTT upload.
    pub const UPLOAD: &str = "upload";
    /// Publish to MQTT.
    pub const PUBLISH: &str = "publish";
    /// Release a pod held by its hold-upgrade annotation (MetaServer → edged).
    pub const UNHOLD_UPGRADE: &str = "unhold-upgrade";
    /// Stop a pod's app containers so its restart policy starts them again (`keadm ctl
    /// restart pod`, MetaServer → edged, synchronous).
    pub const RESTART_POD: &str = "restart";
    /// Run a command in a pod's container to its end (`keadm ctl exec`, MetaServer → edged,
    /// synchronous).
    pub const EXEC_SYNC: &str = "exec-sync";
}
