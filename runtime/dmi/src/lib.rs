//! DMI for Wedge.

#![warn(missing_docs)]

pub mod convert;

/// The generated DMI v1beta1 messages and services.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("v1beta1");
}
