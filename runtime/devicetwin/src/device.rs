//! A device as devicetwin keeps it: the `device` row plus its `device_attr` and `device_twin`
//! rows, held in memory (the cache) and mirrored in SQLite.

use std::collections::{BTreeMap, HashMap};

use crate::mapper_update::DeviceTwins;

/// One attribute as stored (`device_attr` row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredAttr {
    /// Free text.
    pub description: String,
    /// The value, always a string.
    pub value: String,
    /// Whether it may be removed.
    pub optional: bool,
    /// Its type (`string`, `int`...).
    pub attr_type: String,
}

/// One device with everything stored about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceRecord {
    /// `<namespace>/<name>` or a legacy single segment.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Last state a mapper reported (`online`, `offline`, `ok`, `unknown`, `unhealthy`), as sent.
    pub state: String,
    /// RFC 3339 UTC time of the last `online`/`ok` state, or `""`.
    pub last_online: String,
    /// Attributes by name.
    pub attributes: BTreeMap<String, StoredAttr>,
    /// Twins by key.
    pub twins: DeviceTwins,
}

/// Every device of the node, by id.
pub type Devices = HashMap<String, DeviceRecord>;
