//! Serde helpers shared by the model structs.

use serde::{Deserialize, Deserializer};

/// Deserializes a section so that an explicit null (`edgeHub: ~`,
/// `featureGates: null`) means "all defaults", like an absent section.
///
/// Why: KubeEdge (Go, sigs.k8s.io/yaml) treats null as "keep the default",
/// and people comment out every child of a section leaving `key: ~` behind.
/// Only used on struct/map sections, where `T::default()` *is* the section
/// default; a scalar's `Default` (0, false) would not match our defaults.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
