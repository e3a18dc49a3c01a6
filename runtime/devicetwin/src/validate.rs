//! KubeEdge's checks of twin keys, values and types, with its exact error strings.

/// Error code of every validation failure.
pub const BAD_REQUEST: i32 = 400;

/// Reason for a body that is not a twin update (mapper path).
pub const UNMARSHAL_MAPPER: &str = "Unmarshal update request body failed, please check the request";
/// Reason for a body that is not a twin update (cloud sync path).
pub const UNMARSHAL_CLOUD: &str = "unmarshal update request body failed, Please check the request";
/// Reason for an update without `twin`.
pub const TWIN_MISSING: &str = "Update twin error, key:twin does not exist";
pub use wedge_device::value::{BAD_KEY, BAD_VALUE, check_type, valid_key, valid_value};
