//! Caps on what requests may add to the node: twins per device and devices per node.
//!
//! Any client of the broker can send twin updates, `twin/cloud_updated` syncs and membership
//! updates, and each new twin key or device id costs a row, cache memory and a longer
//! `twin/get` or membership answer. Without a cap one client grows them without end (150,000
//! twins on one device made its `twin/get` answer too big to deliver). A request that would
//! pass a cap is refused whole, before it changes anything; what already exists keeps working,
//! and updates of existing twins and devices are never refused by a cap.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::device::Devices;

/// KubeEdge has no cap; a real device model has tens to hundreds of properties.
pub const DEFAULT_MAX_TWINS_PER_DEVICE: usize = 1_000;

/// KubeEdge has no cap; an edge node serves tens to thousands of devices.
pub const DEFAULT_MAX_DEVICES: usize = 10_000;

/// The caps devicetwin enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Twins (properties) one device may have.
    pub max_twins_per_device: usize,
    /// Devices the node may have.
    pub max_devices: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_twins_per_device: DEFAULT_MAX_TWINS_PER_DEVICE,
            max_devices: DEFAULT_MAX_DEVICES,
        }
    }
}

/// What passing a cap would have meant, said so that an operator knows which key to raise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// A device would get too many twins.
    #[error(
        "device {device} would have {would_have} twins; the limit is {limit} (wedge.devices.maxTwinsPerDevice)"
    )]
    Twins {
        /// The device.
        device: String,
        /// Its twin count after the request.
        would_have: usize,
        /// The cap.
        limit: usize,
    },
    /// The node would get too many devices.
    #[error(
        "the node would have {would_have} devices; the limit is {limit} (wedge.devices.maxDevices)"
    )]
    Devices {
        /// The device count after the request.
        would_have: usize,
        /// The cap.
        limit: usize,
    },
}

impl Limits {
    /// Checks that giving `device` the twins `keys` keeps it within the cap (keys it already
    /// has cost nothing). An unknown device is the handler's to report.
    pub fn check_twins<'k>(
        &self,
        devices: &Devices,
        device: &str,
        keys: impl IntoIterator<Item = &'k String>,
    ) -> Result<(), OverLimit> {
        let Some(record) = devices.get(device) else {
            return Ok(());
        };
        let new = keys
            .into_iter()
            .filter(|k| !record.twins.contains_key(*k))
            .count();
        self.twins_fit(device, record.twins.len(), new)
    }

    fn twins_fit(&self, device: &str, have: usize, new: usize) -> Result<(), OverLimit> {
        let would_have = have.saturating_add(new);
        if new > 0 && would_have > self.max_twins_per_device {
            return Err(OverLimit::Twins {
                device: device.to_owned(),
                would_have,
                limit: self.max_twins_per_device,
            });
        }
        Ok(())
    }

    /// Checks a `twin/cloud_updated` sync body (`{"twin": {...}}`) for `device`. A body that
    /// does not parse passes: the handler reports it.
    pub fn check_sync(
        &self,
        devices: &Devices,
        device: &str,
        payload: &[u8],
    ) -> Result<(), OverLimit> {
        #[derive(Deserialize)]
        struct Sync {
            #[serde(default)]
            twin: Option<BTreeMap<String, IgnoredAny>>,
        }
        match serde_json::from_slice::<Sync>(payload) {
            Ok(Sync { twin: Some(twin) }) => self.check_twins(devices, device, twin.keys()),
            _ => Ok(()),
        }
    }

    /// Checks a membership update (`added_devices`) or detail (`devices`, which replaces the
    /// node's devices): the node's device count, and each listed device's twins. A body that
    /// does not parse passes: the handler reports it.
    pub fn check_membership(&self, devices: &Devices, payload: &[u8]) -> Result<(), OverLimit> {
        #[derive(Deserialize)]
        struct Listed {
            #[serde(default)]
            id: String,
            #[serde(default)]
            twin: Option<BTreeMap<String, IgnoredAny>>,
        }
        #[derive(Deserialize)]
        struct Membership {
            #[serde(default)]
            added_devices: Option<Vec<Listed>>,
            #[serde(default)]
            devices: Option<Vec<Listed>>,
        }
        let Ok(membership) = serde_json::from_slice::<Membership>(payload) else {
            return Ok(());
        };
        let (listed, replaces) = match (membership.added_devices, membership.devices) {
            (Some(added), _) => (added, false),
            (None, Some(all)) => (all, true),
            (None, None) => return Ok(()),
        };
        let new = listed
            .iter()
            .filter(|d| !devices.contains_key(&d.id))
            .count();
        let would_have = if replaces {
            listed.len()
        } else {
            devices.len().saturating_add(new)
        };
        if new > 0 && would_have > self.max_devices {
            return Err(OverLimit::Devices {
                would_have,
                limit: self.max_devices,
            });
        }
        for device in &listed {
            let Some(twin) = &device.twin else { continue };
            match devices.get(&device.id) {
                Some(_) => self.check_twins(devices, &device.id, twin.keys())?,
                None => self.twins_fit(&device.id, 0, twin.len())?,
            }
        }
        Ok(())
    }

    /// Checks a Device definition (from the cloud or the devices dir) whose properties are
    /// `names`: a known device may gain twins up to the cap, a new one may have at most the cap.
    pub fn check_definition<'k>(
        &self,
        devices: &Devices,
        device: &str,
        names: impl IntoIterator<Item = &'k String>,
    ) -> Result<(), OverLimit> {
        match devices.get(device) {
            Some(_) => self.check_twins(devices, device, names),
            None => {
                let mut names: Vec<&String> = names.into_iter().collect();
                names.sort();
                names.dedup();
                self.twins_fit(device, 0, names.len())
            }
        }
    }

    /// Checks that one more device fits (a definition from the cloud or the devices dir).
    pub fn check_new_device(&self, devices: &Devices) -> Result<(), OverLimit> {
        let would_have = devices.len().saturating_add(1);
        if would_have > self.max_devices {
            return Err(OverLimit::Devices {
                would_have,
                limit: self.max_devices,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceRecord;
    use crate::mapper_update::StoredTwin;

    fn devices(twins: usize) -> Devices {
        let mut record = DeviceRecord::default();
        for i in 0..twins {
            record.twins.insert(format!("t{i}"), StoredTwin::default());
        }
        Devices::from([("d1".to_owned(), record)])
    }

    #[test]
    fn new_twins_count_against_the_cap_and_known_ones_do_not() {
        let limits = Limits {
            max_twins_per_device: 3,
            max_devices: 2,
        };
        let cache = devices(2);
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        limits
            .check_twins(&cache, "d1", &keys(&["t0", "t1", "t2"]))
            .unwrap();
        let err = limits
            .check_twins(&cache, "d1", &keys(&["t2", "t3"]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "device d1 would have 4 twins; the limit is 3 (wedge.devices.maxTwinsPerDevice)"
        );
        // Over the cap already (a lowered limit): updates of known twins still pass.
        let full = devices(5);
        limits
            .check_twins(&full, "d1", &keys(&["t0", "t4"]))
            .unwrap();
        limits
            .check_sync(&cache, "d1", br#"{"twin":{"a":{},"b":{}}}"#)
            .unwrap_err();
        limits.check_sync(&cache, "d1", b"not json").unwrap();
    }

    #[test]
    fn membership_counts_new_devices_and_their_twins() {
        let limits = Limits {
            max_twins_per_device: 2,
            max_devices: 2,
        };
        let cache = devices(0);
        limits
            .check_membership(&cache, br#"{"added_devices":[{"id":"d1"},{"id":"d2"}]}"#)
            .unwrap();
        let err = limits
            .check_membership(&cache, br#"{"added_devices":[{"id":"d2"},{"id":"d3"}]}"#)
            .unwrap_err();
        assert!(
            matches!(
                err,
                OverLimit::Devices {
                    would_have: 3,
                    limit: 2
                }
            ),
            "{err}"
        );
        // A detail replaces the node's devices: only its own length counts.
        limits
            .check_membership(&cache, br#"{"devices":[{"id":"d2"},{"id":"d3"}]}"#)
            .unwrap();
        let err = limits
            .check_membership(
                &cache,
                br#"{"added_devices":[{"id":"d2","twin":{"a":{},"b":{},"c":{}}}]}"#,
            )
            .unwrap_err();
        assert!(
            matches!(err, OverLimit::Twins { would_have: 3, .. }),
            "{err}"
        );
        let two = Devices::from([
            ("d1".to_owned(), DeviceRecord::default()),
            ("d2".to_owned(), DeviceRecord::default()),
        ]);
        assert!(limits.check_new_device(&two).is_err());
        // A definition: a new device gets at most the twin cap (here 2).
        let names: Vec<String> = (0..3).map(|i| format!("p{i}")).collect();
        assert!(limits.check_definition(&cache, "new", &names[..2]).is_ok());
        assert!(
            limits.check_definition(&cache, "new", &names).is_err(),
            "a new device past the twin cap"
        );
        assert!(limits.check_new_device(&cache).is_ok());
    }
}
